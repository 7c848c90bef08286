//! Opening a file to read under the read fence: the resolved path is
//! checked, opened without following a symbolic link (one swapped in since
//! the check is refused), and a file of a pseudo filesystem is checked
//! again by the path the kernel gives the descriptor (`/proc/self/fd/N`:
//! a procfs mounted elsewhere), so no spelling, link or race reads a file
//! the fence refuses; the opened file's identity
//! (device, inode) is checked against the files found in the secret stores,
//! so a hard link to a key is refused too. Only regular files are opened,
//! never blocking ([`crate::file::open_readable`]).

use std::path::Path;

use super::guard::Checker;
use super::{Fence, Mode, Refusal, RefusalKind};
use crate::file::{open_readable, opened_path, Follow, OpenError, Pseudo, Readable};

/// Why [`open_read`] did not open a file.
#[derive(Debug)]
pub enum ReadError {
    /// The fence refuses it.
    Refused(Refusal),
    /// It is not a regular file, or could not be opened.
    Open(OpenError),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Refused(r) => f.write_str(&r.message),
            ReadError::Open(e) => e.fmt(f),
        }
    }
}

/// Opens `target` (from [`super::resolve`] or [`Fence::resolve_read`]) for
/// `tool` to read. Without a fence, or in `danger-full-access`, the path is
/// opened as it is (symlinks followed), regular files only; otherwise it is
/// checked ([`Fence::check_read`], `approved` as there), opened without
/// following symlinks, and the opened file checked again, by its path and
/// its identity. A tool opens with [`super::Guard::open_read`], which
/// checks what is never read even without a fence.
pub fn open_read(
    fence: Option<&Fence>,
    tool: &str,
    target: &Path,
    approved: bool,
) -> Result<Readable, ReadError> {
    let checker = fence
        .filter(|f| f.mode != Mode::DangerFullAccess)
        .map(Checker::Fence);
    open_checked(checker, tool, target, approved)
}

/// [`open_read`] against `checker` (`None`: unchecked).
pub(super) fn open_checked(
    checker: Option<Checker<'_>>,
    tool: &str,
    target: &Path,
    approved: bool,
) -> Result<Readable, ReadError> {
    let Some(checker) = checker else {
        return open_readable(target, Follow::Always).map_err(ReadError::Open);
    };
    checker
        .check_read(tool, target, approved)
        .map_err(ReadError::Refused)?;
    let file = open_readable(target, Follow::Never).map_err(ReadError::Open)?;
    // Opened without following a link, an ordinary file is the one the
    // path names (a bind mount shows its mount point's path too, so the
    // identity check below is what catches one); only a pseudo filesystem's
    // file needs the kernel's word on where it lives (a procfs mounted
    // elsewhere, magic links).
    if file.pseudo().is_some() {
        let opened = opened_path(file.file()).map_err(|e| {
            ReadError::Refused(Refusal {
                kind: RefusalKind::Secret,
                message: format!(
                    "reading {} is refused: what was opened cannot be checked ({e}: /proc/self/fd is not available)",
                    target.display()
                ),
            })
        })?;
        if file.pseudo() == Some(Pseudo::Proc) && !opened.starts_with("/proc") {
            let why = format!(
                "it is a file of procfs mounted at another place than /proc (process files the fence cannot tell apart there: {})",
                opened.display()
            );
            return Err(ReadError::Refused(checker.refusal(tool, target, &why)));
        }
        if opened != target {
            checker
                .check_read(tool, &opened, approved)
                .map_err(ReadError::Refused)?;
        }
    }
    checker
        .check_opened(tool, target, file.identity())
        .map_err(ReadError::Refused)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fence::{ReadPolicy, Reads};
    use std::io::Read;
    use std::path::PathBuf;

    fn fence(ws: &Path, home: &Path) -> Fence {
        let mut f = Fence::new(Mode::WorkspaceWrite, ws, Path::new("/nonexistent-tmp"), &[]);
        f.reads = Reads {
            policy: ReadPolicy::Allow,
            homes: vec![home.to_owned()],
            ..Reads::default()
        };
        f
    }

    #[test]
    fn what_was_opened_is_checked_not_only_what_was_asked() {
        let base = std::env::temp_dir().join(format!("dsh-fence-open-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (ws, home) = (base.join("ws"), base.join("home"));
        std::fs::create_dir_all(ws.join("d")).unwrap();
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        let (ws, home) = (ws.canonicalize().unwrap(), home.canonicalize().unwrap());
        std::fs::write(home.join(".ssh/id_rsa"), "PRIVATE KEY").unwrap();
        std::fs::write(ws.join("d/a.txt"), "fine").unwrap();
        let f = fence(&ws, &home);
        let mut text = String::new();
        open_read(Some(&f), "read", &ws.join("d/a.txt"), false)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "fine");
        // Checked as `ws/d/a.txt`, then `d` became a link to the store: the
        // open refuses to follow it.
        std::fs::rename(ws.join("d"), ws.join("d-old")).unwrap();
        std::os::unix::fs::symlink(home.join(".ssh"), ws.join("d")).unwrap();
        std::fs::rename(home.join(".ssh/id_rsa"), home.join(".ssh/a.txt")).unwrap();
        match open_read(Some(&f), "read", &ws.join("d/a.txt"), false) {
            Err(ReadError::Open(OpenError::Symlink(_))) => {}
            other => panic!("{other:?}"),
        }
        // The resolved path is refused before anything is opened.
        match open_read(Some(&f), "read", &home.join(".ssh/a.txt"), false) {
            Err(ReadError::Refused(r)) => assert!(r.message.contains("SSH keys"), "{}", r.message),
            other => panic!("{other:?}"),
        }
        // Without a fence (or in danger-full-access) it is read.
        assert!(open_read(None, "read", &ws.join("d/a.txt"), false).is_ok());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn process_files_are_refused_and_procfs_is_bounded() {
        let f = fence(Path::new("/"), Path::new("/nonexistent-home"));
        let own = PathBuf::from(format!("/proc/{}/environ", std::process::id()));
        match open_read(Some(&f), "read", &own, false) {
            Err(ReadError::Refused(r)) => {
                assert!(r.message.contains("harness's own process"), "{}", r.message)
            }
            other => panic!("{other:?}"),
        }
        let cpu = open_read(Some(&f), "read", Path::new("/proc/cpuinfo"), false).unwrap();
        assert_eq!(cpu.pseudo(), Some(Pseudo::Proc));
    }
}
