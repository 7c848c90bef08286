//! Write confinement for a child process: bubblewrap when installed, else
//! Landlock. This file holds the Landlock policy (which paths a command may
//! change); the mechanism is `dsh_confine::landlock`. Nothing here runs
//! after `fork`: the ruleset is built in the parent; the child only adds
//! the rules of the mounts it made itself and restricts itself
//! (`dsh_confine::landlock::RawRuleset`).

use std::path::{Path, PathBuf};

use dsh_confine::landlock::{fs, Handled, Ruleset};

/// `bwrap` on the PATH.
pub fn bwrap() -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join("bwrap"))
        .find(|p| p.is_file())
}

/// A ruleset refusing every change on disk (reads stay unrestricted)
/// except beneath `dirs` (every right) and to `files` (writing, not
/// creating or removing them). Paths that do not exist are left out.
pub fn write_rules(abi: u32, dirs: &[PathBuf], files: &[PathBuf]) -> std::io::Result<Ruleset> {
    let rules = Ruleset::new(
        abi,
        Handled {
            fs: fs::CHANGES,
            ..Handled::default()
        },
    )?;
    let dir_rights = rules.handled_fs();
    let file_rights = dir_rights & fs::FILE_CHANGES;
    let all = dirs
        .iter()
        .map(|d| (d, dir_rights))
        .chain(files.iter().map(|f| (f, file_rights)))
        // A path with a NUL byte names nothing the kernel could open.
        .filter(|(p, _)| !p.as_os_str().as_encoded_bytes().contains(&0));
    for (path, rights) in all {
        match rules.allow(path, rights) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            other => other?,
        }
    }
    Ok(rules)
}
