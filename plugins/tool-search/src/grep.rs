//! `grep`: ripgrep's searcher over the walked files, streaming each file
//! through a fixed-size buffer (no memory maps, no whole-file reads), with the
//! collected matches capped as the original caps `rg`'s raw output.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_sdk::blocking::Cancel;
use dsh_sdk::fence::ReadError;
use dsh_sdk::file::{irregular_kind, OpenError, Readable};
use dsh_sdk::prelude::*;
use globset::GlobMatcher;
use grep_regex::RegexMatcher;
use grep_searcher::{BinaryDetection, MmapChoice, Searcher, SearcherBuilder, Sink, SinkMatch};
use ignore::{DirEntry, WalkBuilder};

use crate::ignores::Ignores;
use crate::scope::{refuse_pseudo_root, Scope, FS_DENIED};
use crate::{enters, glob_matcher, relative, spill, GrepArgs, GrepTool, ToolSpec};

/// Matches shown inline; the rest go to the stored full result.
const GREP_CAP: usize = 250;
/// Bytes shown of one matched line.
const LINE_BYTES: usize = 2000;
/// The most the complete result may hold: the original's `rawOutputMaxBytes`
/// (the `rg` output it will parse). Past it the search stops and fails with
/// `SEARCH_RAW_OUTPUT_OVERFLOW`, so a match-everything pattern over a huge
/// tree cannot fill memory.
pub const OUTPUT_MAX_BYTES: usize = 20_000_000;
/// The most the searcher's line buffer may grow to hold one line; a file with
/// a longer line (and no NUL byte before it) is abandoned there. Above
/// `OUTPUT_MAX_BYTES`, so nothing the original could show is lost.
const HEAP_LIMIT: usize = 32 * 1024 * 1024;

/// Runs one `grep` call.
pub fn grep(cwd: &str, args: &GrepArgs, scope: &Scope, cancel: &Cancel) -> Result<String> {
    let query = Query::parse(cwd, args, scope)?;
    let matches = query.run(cancel)?;
    Ok(present(&matches))
}

/// One call's arguments, checked.
struct Query {
    matcher: RegexMatcher,
    include: Option<GlobMatcher>,
    root: PathBuf,
    /// What result paths are relative to: the root, or for one file the
    /// working directory.
    display_root: PathBuf,
    /// Whether `root` names one file rather than a directory.
    explicit: bool,
    /// What the call may read.
    scope: Scope,
    /// The ignore rules of a directory's walk (none for one file).
    ignores: Option<Arc<Ignores>>,
}

impl Query {
    fn parse(cwd: &str, args: &GrepArgs, scope: &Scope) -> Result<Query> {
        let pattern = args.pattern.as_str();
        let matcher = RegexMatcher::new(pattern).map_err(|e| {
            Error::new(
                "SEARCH_INVALID_PATTERN",
                format!("invalid pattern `{pattern}`: {e}"),
            )
        })?;
        let include = include_matcher(args.include.as_deref())?;
        let root = scope.root(cwd, args.path.as_deref())?;
        let explicit = explicit_file(&root)?;
        let ignores = if explicit {
            None
        } else {
            refuse_pseudo_root(GrepTool::NAME, &root)?;
            let ignores = Ignores::new(&root, scope).map_err(|b| {
                Error::new(
                    "SEARCH_FAILED",
                    format!(
                        "{} is {}; grep cannot read the ignore rules it holds",
                        b.path.display(),
                        b.kind
                    ),
                )
            })?;
            Some(Arc::new(ignores))
        };
        let display_root = if explicit {
            PathBuf::from(cwd)
        } else {
            root.clone()
        };
        Ok(Query {
            matcher,
            include,
            root,
            display_root,
            explicit,
            scope: scope.clone(),
            ignores,
        })
    }

    /// Walks and searches, stopping at the output cap or a cancel.
    fn run(&self, cancel: &Cancel) -> Result<Matches> {
        let mut matches = Matches::default();
        let mut searcher = searcher();
        let walk_scope = self.scope.clone();
        let ignores = self.ignores.clone();
        // The walker reads no ignore file itself (they could block it):
        // the rules are this plugin's ([`Ignores`]); hidden files are left
        // out by name, as ripgrep does.
        let walk = WalkBuilder::new(&self.root)
            .standard_filters(false)
            .hidden(true)
            .filter_entry(move |e| enters(&walk_scope, e) && kept(ignores.as_deref(), e))
            .build();
        for entry in walk.flatten() {
            if cancel.is_cancelled() {
                return Err(aborted());
            }
            let Some(rel) = self.wanted(&entry) else {
                continue;
            };
            let file = SearchedFile {
                path: entry.path(),
                rel: &rel,
            };
            let searched = file.search(
                &self.scope,
                &mut searcher,
                &self.matcher,
                &mut matches,
                cancel,
            );
            if matches.overflow {
                return Err(overflow());
            }
            if cancel.is_cancelled() {
                return Err(aborted());
            }
            // A file of the walk that cannot be searched is skipped, as `rg`
            // skips it with a warning; the one file asked for says why.
            match (searched, self.explicit) {
                (Err(Unsearched::Refused(message)), true) => {
                    return Err(Error::new(FS_DENIED, message))
                }
                (Err(e), true) => {
                    return Err(Error::new(
                        "SEARCH_FAILED",
                        format!("cannot search {}: {e}", self.root.display()),
                    ))
                }
                _ => {}
            }
        }
        Ok(matches)
    }

    /// The result path of `entry` if it is to be searched: a regular file
    /// (a FIFO, a device, a socket or a symlink is never opened, so never
    /// blocked on) that `include` admits.
    fn wanted(&self, entry: &DirEntry) -> Option<String> {
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            return None;
        }
        let rel = relative(&self.display_root, entry.path());
        match &self.include {
            Some(m) if !included(m, &rel, entry.path()) => None,
            _ => Some(rel),
        }
    }
}

fn include_matcher(include: Option<&str>) -> Result<Option<GlobMatcher>> {
    match include {
        Some(i) if i.contains(',') || i.starts_with('!') => Err(Error::new(
            "SEARCH_INVALID_PATTERN",
            "include takes one positive glob",
        )),
        Some(i) => glob_matcher(i).map(Some),
        None => Ok(None),
    }
}

fn included(m: &GlobMatcher, rel: &str, path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    m.is_match(rel) || m.is_match(&name)
}

/// Whether `root` is one file rather than a directory; an error if it does
/// not exist or is neither (a FIFO would block, a device never ends).
fn explicit_file(root: &Path) -> Result<bool> {
    let meta = std::fs::metadata(root).map_err(|_| {
        Error::new(
            "SEARCH_FAILED",
            format!("{} does not exist", root.display()),
        )
    })?;
    if meta.is_dir() {
        return Ok(false);
    }
    match irregular_kind(&meta.file_type()) {
        None => Ok(true),
        Some(kind) => Err(Error::new(
            "SEARCH_FAILED",
            format!(
                "{} is {kind}; grep only searches regular files",
                root.display()
            ),
        )),
    }
}

/// Whether the walk keeps `entry`: the root always; below it, what the
/// ignore rules do not ignore (a directory whose ignore files cannot be
/// read without blocking is left unentered, [`Ignores::keeps`]).
fn kept(ignores: Option<&Ignores>, entry: &DirEntry) -> bool {
    if entry.depth() == 0 {
        return true;
    }
    let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
    ignores.is_none_or(|i| i.keeps(entry.path(), is_dir))
}

/// The searcher: read in fixed-size chunks (memory maps off, so a file
/// truncated under it cannot crash the process), a line may not grow the
/// buffer past `HEAP_LIMIT`, and a file is searched only up to its first NUL
/// byte — ripgrep's own rule for the files it walks, and what keeps a huge
/// binary or sparse file from being read whole.
fn searcher() -> Searcher {
    SearcherBuilder::new()
        .line_number(true)
        .memory_map(MmapChoice::never())
        .heap_limit(Some(HEAP_LIMIT))
        .binary_detection(BinaryDetection::quit(b'\0'))
        .build()
}

/// One walked file and its result path.
struct SearchedFile<'a> {
    path: &'a Path,
    rel: &'a str,
}

/// Why a file was not searched.
enum Unsearched {
    /// The fence refuses it (its message).
    Refused(String),
    /// It could not be opened or read.
    Failed(io::Error),
}

impl std::fmt::Display for Unsearched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unsearched::Refused(message) => f.write_str(message),
            Unsearched::Failed(e) => e.fmt(f),
        }
    }
}

impl SearchedFile<'_> {
    /// Searches the file, opened under the fence only if it is (still) a
    /// regular file.
    fn search(
        &self,
        scope: &Scope,
        searcher: &mut Searcher,
        matcher: &RegexMatcher,
        matches: &mut Matches,
        cancel: &Cancel,
    ) -> std::result::Result<(), Unsearched> {
        let file = match scope.open(self.path) {
            Ok(file) => file,
            Err(ReadError::Refused(r)) => return Err(Unsearched::Refused(r.message)),
            Err(ReadError::Open(OpenError::Io(e))) => return Err(Unsearched::Failed(e)),
            Err(ReadError::Open(e @ OpenError::Symlink(_))) => {
                return Err(Unsearched::Failed(io::Error::other(e.to_string())))
            }
            Err(ReadError::Open(e)) => {
                return Err(Unsearched::Failed(io::Error::other(format!("it {e}"))))
            }
        };
        let reader = Cancellable { file, cancel };
        let sink = Collect {
            rel: self.rel,
            matches,
        };
        searcher
            .search_reader(matcher, reader, sink)
            .map_err(Unsearched::Failed)
    }
}

/// A file whose reads fail once the call is cancelled.
struct Cancellable<'c> {
    file: Readable,
    cancel: &'c Cancel,
}

impl Read for Cancellable<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.cancel.is_cancelled() {
            return Err(io::Error::other("cancelled"));
        }
        self.file.read(buf)
    }
}

/// The sink: each match into `matches`, stopping at the output cap.
struct Collect<'a> {
    rel: &'a str,
    matches: &'a mut Matches,
}

impl Sink for Collect<'_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> Result<bool, io::Error> {
        let line = String::from_utf8_lossy(m.bytes());
        Ok(self
            .matches
            .push(self.rel, m.line_number().unwrap_or(0), &line))
    }
}

/// Every match so far, already in the complete result's format: per file
/// its path, then `Line N: text` lines; files separated by a blank line.
#[derive(Debug, Default)]
pub struct Matches {
    groups: Vec<Group>,
    total: usize,
    bytes: usize,
    overflow: bool,
}

#[derive(Debug)]
struct Group {
    path: String,
    lines: String,
    count: usize,
}

impl Matches {
    /// Adds a match of `path`; false (stop searching) once the complete
    /// result would pass `OUTPUT_MAX_BYTES`.
    pub fn push(&mut self, path: &str, number: u64, line: &str) -> bool {
        let entry = format!("Line {number}: {}", shown_line(line));
        let new_group = self.groups.last().is_none_or(|g| g.path != path);
        let cost = entry.len()
            + if new_group {
                path.len() + 1 + if self.groups.is_empty() { 0 } else { 2 }
            } else {
                1
            };
        if self.bytes + cost > OUTPUT_MAX_BYTES {
            self.overflow = true;
            return false;
        }
        self.bytes += cost;
        self.total += 1;
        if new_group {
            self.groups.push(Group {
                path: path.to_owned(),
                lines: entry,
                count: 1,
            });
        } else if let Some(g) = self.groups.last_mut() {
            g.lines.push('\n');
            g.lines.push_str(&entry);
            g.count += 1;
        }
        true
    }

    /// The first `cap` matches (all of them without a cap), in the format.
    fn render(&self, cap: Option<usize>) -> String {
        let mut left = cap.unwrap_or(usize::MAX);
        let mut parts = Vec::new();
        for g in &self.groups {
            if left == 0 {
                break;
            }
            let take = g.count.min(left);
            left -= take;
            parts.push(format!("{}\n{}", g.path, first_lines(&g.lines, take)));
        }
        parts.join("\n\n")
    }
}

/// The first `n` of `\n`-separated lines.
fn first_lines(lines: &str, n: usize) -> &str {
    match lines.match_indices('\n').nth(n.saturating_sub(1)) {
        Some((i, _)) if n > 0 => &lines[..i],
        _ if n == 0 => "",
        _ => lines,
    }
}

/// A matched line without its line break, cut at `LINE_BYTES` bytes.
fn shown_line(line: &str) -> String {
    let line = line.trim_end_matches(['\n', '\r']);
    if line.len() <= LINE_BYTES {
        return line.to_owned();
    }
    let mut cut = LINE_BYTES;
    while !line.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… (line truncated to {LINE_BYTES} bytes)", &line[..cut])
}

/// The original's result text for `matches`.
fn present(matches: &Matches) -> String {
    let total = matches.total;
    if total == 0 {
        return "No matches found".into();
    }
    if total <= GREP_CAP {
        return format!("Found {total} matches\n\n{}", matches.render(None));
    }
    let stored = spill("grep.txt", &matches.render(None));
    format!(
        "Found {GREP_CAP} of {total} matches\n\n{}\n\n(Full grep result stored at: {}. Use read with offset/limit, or grep this path to search within it.)",
        matches.render(Some(GREP_CAP)),
        stored.map_or_else(|| "(could not be stored)".into(), |p| p.display().to_string())
    )
}

fn aborted() -> Error {
    Error::new("SEARCH_ABORTED", "grep was cancelled")
}

fn overflow() -> Error {
    Error::new(
        "SEARCH_RAW_OUTPUT_OVERFLOW",
        format!(
            "grep found more than {OUTPUT_MAX_BYTES} bytes of matches; narrow the pattern, the path or include"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_render_grouped_and_capped() {
        let mut m = Matches::default();
        assert!(m.push("a.rs", 2, "// needle one\n"));
        assert!(m.push("b.rs", 1, "needle two\r\n"));
        assert!(m.push("b.rs", 2, "needle three"));
        assert_eq!(
            present(&m),
            "Found 3 matches\n\na.rs\nLine 2: // needle one\n\nb.rs\nLine 1: needle two\nLine 2: needle three"
        );
        assert_eq!(
            m.render(Some(2)),
            "a.rs\nLine 2: // needle one\n\nb.rs\nLine 1: needle two"
        );
        assert_eq!(m.render(Some(1)), "a.rs\nLine 2: // needle one");
        assert_eq!(m.bytes, m.render(None).len());
    }

    #[test]
    fn the_output_cap_stops_collecting() {
        let mut m = Matches::default();
        let line = "x".repeat(1900);
        let mut pushed = 0;
        while m.push("big.txt", pushed + 1, &line) {
            pushed += 1;
        }
        assert!(m.overflow);
        assert!(m.bytes <= OUTPUT_MAX_BYTES);
        assert_eq!(m.total as u64, pushed);
        assert_eq!(m.bytes, m.render(None).len());
    }

    #[test]
    fn long_lines_are_cut_on_a_character_boundary() {
        let line = "é".repeat(1500);
        let shown = shown_line(&line);
        assert!(shown.ends_with("… (line truncated to 2000 bytes)"));
        assert_eq!(shown.len(), 2000 + "… (line truncated to 2000 bytes)".len());
        assert_eq!(shown_line("short\r\n"), "short");
    }

    #[test]
    fn first_lines_takes_a_prefix() {
        assert_eq!(first_lines("a\nb\nc", 0), "");
        assert_eq!(first_lines("a\nb\nc", 1), "a");
        assert_eq!(first_lines("a\nb\nc", 2), "a\nb");
        assert_eq!(first_lines("a\nb\nc", 3), "a\nb\nc");
        assert_eq!(first_lines("a\nb\nc", 9), "a\nb\nc");
    }
}
