//! Where logs live and what their files are called: the original's layout
//! (reference dsh-core §8.3),
//! `<root>/--<project-key(cwd)>--/<encoded-id>/session.jsonl[.zstd]`
//! (`<root>/_no-cwd/...` for a session without a working directory), and
//! our old flat `<root>/--<project-key>--/<encoded-id>.jsonl[.zstd]`, which
//! is read but never written. Names only: nothing here reads or writes a
//! log (only [`log_of_entry`] looks at what a directory entry is).

use std::path::{Path, PathBuf};

/// The folder of sessions without a working directory.
const NO_CWD: &str = "_no-cwd";
/// The suffix of a plain log of the old flat layout.
const FLAT_PLAIN: &str = ".jsonl";
/// The suffix of a zstd log of the old flat layout.
const FLAT_ZSTD: &str = ".jsonl.zstd";

/// `encodeSegment`: `[A-Za-z0-9._-]` literal, everything else `~XXXX` per
/// UTF-16 unit; `.` and `..` are encoded whole.
pub fn encode_segment(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("an empty id cannot name a file".into());
    }
    if s == "." || s == ".." {
        return Ok("~002E".repeat(s.len()));
    }
    let mut out = String::new();
    for unit in s.encode_utf16() {
        let c = char::from_u32(u32::from(unit))
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        match c {
            Some(c) => out.push(c),
            None => out.push_str(&format!("~{unit:04X}")),
        }
    }
    Ok(out)
}

/// `projectKey(cwd)`: runs of `/ \ :` become one `-`, a leading `-` is
/// dropped (empty → `root`), unsafe units are `~XXXX`, 251 chars at most.
pub fn project_key(cwd: &str) -> String {
    let mut out = String::new();
    let mut last_sep = false;
    for unit in cwd.encode_utf16() {
        let c = char::from_u32(u32::from(unit));
        if matches!(c, Some('/' | '\\' | ':')) {
            if !last_sep {
                out.push('-');
            }
            last_sep = true;
            continue;
        }
        last_sep = false;
        match c.filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
            Some(c) => out.push(c),
            None => out.push_str(&format!("~{unit:04X}")),
        }
    }
    let out = out.strip_prefix('-').unwrap_or(&out).to_owned();
    let out = if out.is_empty() {
        "root".to_owned()
    } else {
        out
    };
    out.chars().take(251).collect()
}

/// How a new log's bytes are encoded (config `compression`, as the
/// original's: `zstd` by default, `none` for plain JSONL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// `session.jsonl.zstd`: a checksummed frame holding only the header
    /// line, then one frame per durable append batch.
    Zstd,
    /// `session.jsonl`: newline-delimited UTF-8 text.
    None,
}

impl Compression {
    /// The transcript's file name in its session directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Compression::Zstd => "session.jsonl.zstd",
            Compression::None => "session.jsonl",
        }
    }
}

/// True for a zstd-framed log (`*.jsonl.zstd`).
pub fn is_zstd(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "zstd")
}

/// The project folder of `cwd` under `root`: `--<project-key(cwd)>--`, or
/// `_no-cwd` for a session without one.
pub fn project_dir(root: &Path, cwd: Option<&str>) -> PathBuf {
    match cwd {
        Some(c) => root.join(format!("--{}--", project_key(c))),
        None => root.join(NO_CWD),
    }
}

/// Where a new log of session `id` (working directory `cwd`) is written:
/// its session directory in the project folder, and the file name of
/// `compression`. An id that cannot name a file is refused.
pub fn new_log(
    root: &Path,
    id: &str,
    cwd: Option<&str>,
    compression: Compression,
) -> Result<PathBuf, String> {
    Ok(project_dir(root, cwd)
        .join(encode_segment(id)?)
        .join(compression.file_name()))
}

/// The names a stored log of the session whose encoded id is `name` may
/// have in a project folder, in the order a lookup prefers them: the
/// session directory layout (zstd first), then our old flat layout.
pub fn stored_names(name: &str) -> [String; 4] {
    [
        format!("{name}/{}", Compression::Zstd.file_name()),
        format!("{name}/{}", Compression::None.file_name()),
        format!("{name}{FLAT_PLAIN}"),
        format!("{name}{FLAT_ZSTD}"),
    ]
}

/// True for a log of our old flat layout, `<root>/<project>/<id>.jsonl`:
/// read, never written (the original refuses a root holding one).
pub fn is_flat(root: &Path, path: &Path) -> bool {
    path.parent().and_then(Path::parent) == Some(root)
}

/// Whether `path` is where a log of session `id` is stored: in the
/// session directory `<encoded-id>/`, or the old flat
/// `<encoded-id>.jsonl[.zstd]`.
pub fn named_for(root: &Path, path: &Path, id: &str) -> bool {
    let Ok(name) = encode_segment(id) else {
        return false;
    };
    let own = |p: Option<&std::ffi::OsStr>, want: &str| p.is_some_and(|n| n == want);
    if is_flat(root, path) {
        let file = path.file_name();
        own(file, &format!("{name}{FLAT_PLAIN}")) || own(file, &format!("{name}{FLAT_ZSTD}"))
    } else {
        own(path.parent().and_then(Path::file_name), &name)
    }
}

/// The log a project directory entry holds: a session directory's
/// transcript (zstd first), or one of our old flat logs; `None` for
/// anything else (a temp file, say).
pub fn log_of_entry(entry: &Path) -> Option<PathBuf> {
    // Never through a link: a log is read only from a regular file.
    let meta = std::fs::symlink_metadata(entry).ok()?;
    if meta.is_dir() {
        return [Compression::Zstd, Compression::None]
            .iter()
            .map(|c| entry.join(c.file_name()))
            .find(|p| p.is_file());
    }
    let name = entry.file_name()?.to_str()?;
    let named = name.ends_with(FLAT_PLAIN) || name.ends_with(FLAT_ZSTD);
    (named && meta.is_file()).then(|| entry.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_match_the_original() {
        assert_eq!(encode_segment("session-1").unwrap(), "session-1");
        assert_eq!(encode_segment("a/b~c").unwrap(), "a~002Fb~007Ec");
        assert_eq!(encode_segment("..").unwrap(), "~002E~002E");
        assert_eq!(project_key("/home/u/my project"), "home-u-my~0020project");
        assert_eq!(project_key("/"), "root");
    }

    #[test]
    fn a_log_is_named_by_its_session_in_either_layout() {
        let root = Path::new("/r");
        let new = new_log(root, "a/b", Some("/w"), Compression::Zstd).unwrap();
        assert_eq!(new, Path::new("/r/--w--/a~002Fb/session.jsonl.zstd"));
        assert_eq!(
            new_log(root, "s", None, Compression::None).unwrap(),
            Path::new("/r/_no-cwd/s/session.jsonl")
        );
        assert!(new_log(root, "", None, Compression::None).is_err());
        assert!(!is_flat(root, &new));
        assert!(named_for(root, &new, "a/b"));
        assert!(!named_for(root, &new, "a"));
        let flat = Path::new("/r/--w--/s.jsonl.zstd");
        assert!(is_flat(root, flat));
        assert!(named_for(root, flat, "s"));
        assert!(!named_for(root, flat, "t"));
        assert_eq!(
            stored_names("s"),
            [
                "s/session.jsonl.zstd",
                "s/session.jsonl",
                "s.jsonl",
                "s.jsonl.zstd"
            ]
        );
    }
}
