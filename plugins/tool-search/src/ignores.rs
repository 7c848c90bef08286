//! The ignore rules `grep` honours, read by this plugin rather than by the
//! walker: the `ignore` crate opens `.ignore`, `.gitignore`, a `.git`
//! file's `gitdir:`, its `commondir` and `info/exclude`, and the global
//! git config with blocking opens, so a FIFO planted in any of them (by a
//! command; a `.git` file is enough) would block the walking thread
//! forever, and checking them before the walker opens them leaves a race.
//! Here every ignore file is opened without blocking and only if it is a
//! regular file ([`Scope::open`]: under the read fence too), so nothing a
//! command plants can block a search; a directory whose ignore file is a
//! FIFO, a device or a kernel file is skipped, unentered (its rules cannot
//! be known), and one of the root or its ancestors fails the search.
//!
//! The rules are ripgrep's defaults, as the walker applied them:
//! `.ignore` everywhere; `.gitignore`, `.git/info/exclude` (of a `.git`
//! directory; a `.git` file, a worktree, is not followed) and the global
//! excludes file (`core.excludesFile`, else `~/.config/git/ignore`) inside a
//! git repository; the nearest rule wins, `.ignore` before `.gitignore`;
//! the root's ancestors' files count; `.gitignore` files above the nearest
//! repository root do not.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use dsh_sdk::fence::{resolve, ReadError, RefusalKind};
use dsh_sdk::file::OpenError;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;

use crate::scope::Scope;

/// The most bytes read of one ignore file (or git config file).
const IGNORE_FILE_MAX: u64 = 4 * 1024 * 1024;

/// An ignore file that cannot be read without blocking (or at all as a
/// regular file): its path and what it is.
#[derive(Debug, Clone)]
pub struct Blocked {
    /// The ignore file.
    pub path: PathBuf,
    /// What it is (`a FIFO (named pipe)`), or why it was not read.
    pub kind: String,
}

/// The rules of one directory.
#[derive(Debug, Default)]
struct DirRules {
    /// `.ignore`.
    ignore: Option<Gitignore>,
    /// `.gitignore`.
    git: Option<Gitignore>,
    /// `.git/info/exclude`.
    exclude: Option<Gitignore>,
    /// Whether the directory holds a `.git` (or `.jj`): a repository root.
    repo: bool,
}

/// The rules read so far, and the last directory's chain.
#[derive(Default)]
struct Seen {
    rules: HashMap<PathBuf, Arc<DirRules>>,
    last: Option<(PathBuf, Arc<Vec<Arc<DirRules>>>)>,
}

/// The rules of one walk: each directory's, read once, as the walk enters
/// it.
pub struct Ignores {
    scope: Scope,
    /// The root's ancestors' rules, nearest first.
    parents: Vec<Arc<DirRules>>,
    /// The rules of each directory the walk entered (by path), and the
    /// last chain built (the entries of one directory come together).
    dirs: Mutex<Seen>,
    /// The global excludes file's rules.
    global: Option<Gitignore>,
    /// The walk's root.
    root: PathBuf,
}

impl Ignores {
    /// The rules of a walk from `root` (a resolved directory): its own
    /// and its ancestors' ignore files are read now; one that cannot be
    /// read without blocking fails.
    pub fn new(root: &Path, scope: &Scope) -> Result<Ignores, Blocked> {
        let mut parents = Vec::new();
        for dir in root.ancestors().skip(1) {
            parents.push(Arc::new(read_dir_rules(dir, scope)?));
        }
        let own = Arc::new(read_dir_rules(root, scope)?);
        let dirs = Mutex::new(Seen {
            rules: HashMap::from([(root.to_owned(), own)]),
            last: None,
        });
        Ok(Ignores {
            scope: scope.clone(),
            parents,
            dirs,
            global: global_excludes(scope),
            root: root.to_owned(),
        })
    }

    /// Whether the walk keeps `path` (below the root): not ignored by the
    /// rules of its directories, and, for a directory, its own ignore files
    /// readable without blocking (else it is left unentered).
    pub fn keeps(&self, path: &Path, is_dir: bool) -> bool {
        if is_dir && self.rules_of(path).is_none() {
            return false;
        }
        !self.matched(path, is_dir)
    }

    /// The rules of `dir`, read when first asked for; `None` when one of
    /// its ignore files cannot be read without blocking.
    fn rules_of(&self, dir: &Path) -> Option<Arc<DirRules>> {
        let mut seen = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(rules) = seen.rules.get(dir) {
            return Some(rules.clone());
        }
        let rules = Arc::new(read_dir_rules(dir, &self.scope).ok()?);
        seen.rules.insert(dir.to_owned(), rules.clone());
        Some(rules)
    }

    /// The rules that apply in `dir` (the walk's root or below), nearest
    /// first, the root's ancestors' last.
    fn chain_of(&self, dir: &Path) -> Arc<Vec<Arc<DirRules>>> {
        {
            let seen = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((last, chain)) = &seen.last {
                if last == dir {
                    return chain.clone();
                }
            }
        }
        let mut chain: Vec<Arc<DirRules>> = Vec::new();
        for dir in dir.ancestors() {
            if !dir.starts_with(&self.root) {
                break;
            }
            if let Some(rules) = self.rules_of(dir) {
                chain.push(rules);
            }
        }
        chain.extend(self.parents.iter().cloned());
        let chain = Arc::new(chain);
        let mut seen = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
        seen.last = Some((dir.to_owned(), chain.clone()));
        chain
    }

    /// Whether the rules ignore `path`: the nearest rule of each kind
    /// wins, `.ignore` before `.gitignore` before `info/exclude` before the
    /// global excludes; the git ones only inside a repository and not past
    /// its root.
    fn matched(&self, path: &Path, is_dir: bool) -> bool {
        let Some(dir) = path.parent() else {
            return false;
        };
        let chain = self.chain_of(dir);
        let in_repo = chain.iter().any(|r| r.repo);
        let (mut ignore, mut git, mut exclude) = (Match::None, Match::None, Match::None);
        let mut past_repo_root = false;
        for rules in chain.iter() {
            if ignore.is_none() {
                ignore = matched(&rules.ignore, path, is_dir);
            }
            if in_repo && !past_repo_root {
                if git.is_none() {
                    git = matched(&rules.git, path, is_dir);
                }
                if exclude.is_none() {
                    exclude = matched(&rules.exclude, path, is_dir);
                }
            }
            past_repo_root |= rules.repo;
        }
        let global = if in_repo {
            matched(&self.global, path, is_dir)
        } else {
            Match::None
        };
        ignore.or(git).or(exclude).or(global).is_ignore()
    }
}

/// What `rules` say of `path`.
fn matched(rules: &Option<Gitignore>, path: &Path, is_dir: bool) -> Match<()> {
    match rules {
        Some(gi) => gi.matched(path, is_dir).map(|_| ()),
        None => Match::None,
    }
}

/// The rules of the directory `dir`.
fn read_dir_rules(dir: &Path, scope: &Scope) -> Result<DirRules, Blocked> {
    let git_dir = dir.join(".git");
    let git = std::fs::metadata(&git_dir).ok();
    let repo = git.is_some() || dir.join(".jj").exists();
    let exclude = match git {
        Some(m) if m.is_dir() => read_rules(dir, &git_dir.join("info/exclude"), scope)?,
        _ => None,
    };
    Ok(DirRules {
        ignore: read_rules(dir, &dir.join(".ignore"), scope)?,
        git: read_rules(dir, &dir.join(".gitignore"), scope)?,
        exclude,
        repo,
    })
}

/// The rules of the ignore file `file`, relative to `dir`: `None` when it
/// does not exist, an error when it exists but cannot be read as a regular
/// file without blocking.
fn read_rules(dir: &Path, file: &Path, scope: &Scope) -> Result<Option<Gitignore>, Blocked> {
    let Some(text) = read_small(file, scope)? else {
        return Ok(None);
    };
    let mut builder = GitignoreBuilder::new(dir);
    for (i, line) in text.split(|b| *b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        // A line that is not UTF-8 is skipped, as the walker skipped it.
        let Ok(mut line) = std::str::from_utf8(line) else {
            continue;
        };
        if i == 0 {
            line = line.trim_start_matches('\u{feff}');
        }
        // A line that is not a valid glob is skipped too.
        let _ = builder.add_line(Some(file.to_owned()), line);
    }
    Ok(builder.build().ok())
}

/// The bytes of `file` (up to [`IGNORE_FILE_MAX`]), opened without
/// blocking, as a regular file, under the read fence; `None` when it does
/// not exist.
fn read_small(file: &Path, scope: &Scope) -> Result<Option<Vec<u8>>, Blocked> {
    let blocked = |kind: String| Blocked {
        path: file.to_owned(),
        kind,
    };
    if file.symlink_metadata().is_err() {
        return Ok(None);
    }
    let real = resolve(Path::new("/"), file);
    let mut opened = match scope.open(&real) {
        Ok(f) => f,
        Err(ReadError::Open(OpenError::Io(e))) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(ReadError::Open(OpenError::NotRegular(kind))) => return Err(blocked(kind.into())),
        // A read outside the workspace under `read = "ask"` has no rules
        // to give; what is never read (a link to a key, to `/proc/kmsg`)
        // leaves its directory unentered.
        Err(ReadError::Refused(r)) if r.kind == RefusalKind::Outside => return Ok(None),
        Err(ReadError::Refused(_)) => return Err(blocked("a file the read fence refuses".into())),
        Err(e) => return Err(blocked(format!("not readable ({e})"))),
    };
    if opened.pseudo().is_some() {
        return Err(blocked("a kernel file (on a pseudo filesystem)".into()));
    }
    let mut bytes = Vec::new();
    (&mut opened)
        .take(IGNORE_FILE_MAX)
        .read_to_end(&mut bytes)
        .map_err(|e| blocked(format!("not readable ({e})")))?;
    Ok(Some(bytes))
}

/// The global excludes file's rules: `core.excludesFile` of git's global
/// (then system) config, else `$XDG_CONFIG_HOME/git/ignore` (or
/// `~/.config/git/ignore`). Read like every ignore file; one that cannot be
/// read is left out.
fn global_excludes(scope: &Scope) -> Option<Gitignore> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|x| !x.as_os_str().is_empty())
        .or_else(|| home.as_ref().map(|h| h.join(".config")));
    let env = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| !p.as_os_str().is_empty())
    };
    let configs = [
        env("GIT_CONFIG_GLOBAL"),
        home.as_ref().map(|h| h.join(".gitconfig")),
        xdg.as_ref().map(|x| x.join("git/config")),
        env("GIT_CONFIG_SYSTEM").or_else(|| Some(PathBuf::from("/etc/gitconfig"))),
    ];
    let configured = configs.iter().flatten().find_map(|config| {
        let text = read_small(config, scope).ok()??;
        excludes_file(&text, home.as_deref())
    });
    let file = configured.or_else(|| xdg.map(|x| x.join("git/ignore")))?;
    let file = resolve(Path::new("/"), &file);
    let dir = file.parent().unwrap_or(Path::new("/")).to_owned();
    read_rules(&dir, &file, scope).ok()?
}

/// The `excludesfile` a git config sets (`~/` expanded to `home`), as the
/// walker read it: the first line `excludesfile = <path>`, whatever its
/// section.
fn excludes_file(config: &[u8], home: Option<&Path>) -> Option<PathBuf> {
    let text = String::from_utf8_lossy(config);
    let value = text.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        key.trim()
            .eq_ignore_ascii_case("excludesfile")
            .then(|| value.trim().trim_matches('"').trim())
    })?;
    if value.is_empty() {
        return None;
    }
    match (value.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => Some(home.join(rest)),
        _ => Some(PathBuf::from(value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_excludes_file_of_a_git_config() {
        let home = Path::new("/home/u");
        let config = b"[user]\n\tname = x\n[core]\n\texcludesFile = ~/.gitignore_global\n";
        assert_eq!(
            excludes_file(config, Some(home)),
            Some(PathBuf::from("/home/u/.gitignore_global"))
        );
        assert_eq!(
            excludes_file(b"[core]\nexcludesfile = \"/etc/ign\"\n", None),
            Some(PathBuf::from("/etc/ign"))
        );
        assert_eq!(excludes_file(b"[core]\n\tautocrlf = true\n", None), None);
    }
}
