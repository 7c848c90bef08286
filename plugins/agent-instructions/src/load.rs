//! Reading instruction files without following them out of the project:
//! a project's `AGENTS.md` (or `CLAUDE.md`, ...) is read only when it
//! resolves, and what was opened lies, under the project root, is a regular
//! file and is nothing the read fence refuses (`AGENTS.md ->
//! /proc/self/environ`, `-> ../id_rsa`, `-> ~/.ssh/id_rsa`, `-> /dev/fd/1`
//! are skipped with a warning naming the file, never sent; so is a hard
//! link to a store's file, known by its identity). The user's
//! `$DSH_HOME/AGENTS.md` may lead anywhere but to what the fence refuses.
//! Files are opened without blocking (a FIFO, `/proc/kmsg`) and read up to
//! the budget.

use std::io::Read;
use std::path::{Path, PathBuf};

use dsh_sdk::fence::{resolve, Reads};
use dsh_sdk::file::{open_readable, opened_path, Follow, OpenError};

/// The instruction file names, in the order they are read in each
/// directory.
pub const NAMES: [&str; 4] = [
    "AGENTS.md",
    "CLAUDE.md",
    "AGENTS.local.md",
    "CLAUDE.local.md",
];

/// The project of `cwd`: its root (the nearest directory with a `.git`, or
/// `cwd` itself) and the instruction files present from the root down to
/// `cwd` (present: a directory entry of any kind exists; what it is is
/// judged when it is read).
pub fn chain(cwd: &Path) -> (PathBuf, Vec<PathBuf>) {
    let mut dirs: Vec<PathBuf> = cwd.ancestors().map(Path::to_owned).collect();
    if let Some(root) = dirs.iter().position(|d| d.join(".git").exists()) {
        dirs.truncate(root + 1);
    } else {
        dirs.truncate(1);
    }
    dirs.reverse();
    let root = dirs.first().cloned().unwrap_or_else(|| cwd.to_owned());
    let mut files = Vec::new();
    for d in dirs {
        for n in NAMES {
            let f = d.join(n);
            if f.symlink_metadata().is_ok() {
                files.push(f);
            }
        }
    }
    (root, files)
}

/// Reads the instruction file `file`: its text (up to `max` bytes, cut on a
/// character boundary), `Ok(None)` when it is gone, or a warning naming it
/// and saying why it is not sent. `within` is the project root (canonical)
/// the file must stay under; `reads` what it may never be.
pub fn read(
    file: &Path,
    within: Option<&Path>,
    reads: &Reads,
    max: usize,
) -> Result<Option<String>, String> {
    let shown = file.display();
    let refused = |why: String| format!("{shown} is not sent with the instructions: {why}");
    let real = resolve(Path::new("/"), file);
    if let Some((spelled, why)) = reads.forbidden_read(Path::new("/"), file, &real) {
        return Err(refused(format!(
            "it leads to {} ({why})",
            spelled.display()
        )));
    }
    admit(&real, within, reads).map_err(refused)?;
    let mut opened = match open_readable(&real, Follow::Never) {
        Ok(f) => f,
        Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e @ OpenError::Symlink(_)) => return Err(refused(e.to_string())),
        Err(e) => return Err(refused(format!("it {e}"))),
    };
    let at = opened_path(opened.file())
        .map_err(|e| refused(format!("what was opened cannot be checked ({e})")))?;
    admit(&at, within, reads).map_err(refused)?;
    if let Some(why) = reads.forbidden_file(opened.identity()) {
        return Err(refused(format!("it leads to {} ({why})", at.display())));
    }
    let mut bytes = Vec::new();
    (&mut opened)
        .take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refused(format!("it cannot be read ({e})")))?;
    let cut = bytes.len() > max;
    bytes.truncate(max);
    match String::from_utf8(bytes) {
        Ok(text) => Ok(Some(text)),
        Err(e) if cut && e.utf8_error().error_len().is_none() => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
        }
        Err(_) => Err(refused("it is not UTF-8 text".into())),
    }
}

/// Whether `path` (resolved, or as opened) may be sent: under `within`
/// when given, and nothing `reads` refuses.
fn admit(path: &Path, within: Option<&Path>, reads: &Reads) -> Result<(), String> {
    if let Some(why) = reads.forbidden(path) {
        return Err(format!("it leads to {} ({why})", path.display()));
    }
    match within.filter(|r| !path.starts_with(r)) {
        Some(root) => Err(format!(
            "it leads out of the project {} (to {})",
            root.display(),
            path.display()
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(label: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("dsh-instr-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("proj/.git")).unwrap();
        d.canonicalize().unwrap()
    }

    #[test]
    fn links_out_of_the_project_are_not_followed() {
        let base = scratch("links");
        let proj = base.join("proj");
        std::fs::write(base.join("id_rsa"), "PRIVATE KEY").unwrap();
        std::fs::write(proj.join("real.md"), "be kind").unwrap();
        std::os::unix::fs::symlink("../id_rsa", proj.join("AGENTS.md")).unwrap();
        std::os::unix::fs::symlink("/proc/self/environ", proj.join("CLAUDE.md")).unwrap();
        std::os::unix::fs::symlink("real.md", proj.join("AGENTS.local.md")).unwrap();
        let (root, files) = chain(&proj);
        assert_eq!(root, proj);
        assert_eq!(files.len(), 3);
        let reads = Reads::default();
        let out: Vec<_> = files
            .iter()
            .map(|f| read(f, Some(&root), &reads, 1000))
            .collect();
        let warning = out[0].as_ref().unwrap_err();
        assert!(
            warning.contains("AGENTS.md is not sent") && warning.contains("out of the project"),
            "{warning}"
        );
        assert!(
            out[1]
                .as_ref()
                .unwrap_err()
                .contains("harness's own process"),
            "{:?}",
            out[1]
        );
        assert_eq!(out[2].as_ref().unwrap().as_deref(), Some("be kind"));
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn files_are_read_up_to_the_budget_and_fifos_are_refused() {
        let base = scratch("budget");
        let proj = base.join("proj");
        std::fs::write(proj.join("AGENTS.md"), "é".repeat(100)).unwrap();
        let text = read(&proj.join("AGENTS.md"), Some(&proj), &Reads::default(), 11)
            .unwrap()
            .unwrap();
        assert_eq!(text, "é".repeat(5));
        let fifo =
            std::ffi::CString::new(proj.join("CLAUDE.md").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let warning =
            read(&proj.join("CLAUDE.md"), Some(&proj), &Reads::default(), 11).unwrap_err();
        assert!(warning.contains("FIFO"), "{warning}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
