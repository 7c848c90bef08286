//! The open descriptor a [`PrivateDir`](crate::PrivateDir) holds on its
//! directory, and everything done inside the directory through it.
//!
//! A private directory lives in a shared place (the temp dir) that a
//! sandboxed command of the same user may be allowed to write: it can rename
//! the directory and plant a symlink (or a directory of its own) under its
//! name. Nothing here resolves the directory's path again once it is open:
//! files are created with `openat` on the held descriptor (`O_EXCL |
//! O_NOFOLLOW`, a plain name), and removal unlinks through descriptors too,
//! so a swap can never redirect a write or a removal. The path is used only
//! to say where the files are, to check that it still leads to this very
//! directory ([`Held::in_place`]), and for the final `rmdir` (which removes
//! an empty directory only, and only when the path still leads here).

use std::ffi::{CStr, CString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode of a private directory: its user only.
pub(crate) const PRIVATE_MODE: u32 = 0o700;

/// How deep removal descends into directories someone else made inside a
/// private directory (the owner makes files only); deeper ones are left.
const MAX_DEPTH: usize = 32;

/// A directory opened without following a symlink, owned by this user.
#[derive(Debug)]
pub(crate) struct Held {
    /// Where the directory was when it was opened.
    path: PathBuf,
    /// The directory itself (`O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC`).
    dir: File,
    /// Its identity, to tell whether `path` still leads to it.
    dev: u64,
    ino: u64,
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Opens the directory `path` itself: a symlink in its place fails
/// (`ELOOP`), as does anything but a directory.
fn open_dir(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            // O_DIRECTORY on a symlink fails ENOTDIR (O_NOFOLLOW alone: ELOOP).
            Some(libc::ELOOP | libc::ENOTDIR) => {
                let what = if path.is_symlink() {
                    "a symbolic link"
                } else {
                    "not a directory"
                };
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "refusing {}: it is {what}, not a private directory",
                        path.display()
                    ),
                )
            }
            _ => io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display())),
        })
}

/// `name` as a single path component: no `/`, no NUL, not `.` or `..`.
fn component(name: &str) -> io::Result<CString> {
    let plain = !name.is_empty() && name != "." && name != ".." && !name.contains('/');
    match CString::new(name) {
        Ok(c) if plain => Ok(c),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a plain file name (no `/`, not `.` or `..`)"),
        )),
    }
}

impl Held {
    /// Opens the directory `path` (never through a symlink) and checks that
    /// this user owns it.
    pub(crate) fn open(path: &Path) -> io::Result<Held> {
        let dir = open_dir(path)?;
        let meta = dir.metadata()?;
        if meta.uid() != euid() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "refusing {}: it belongs to uid {}, not to this user (uid {})",
                    path.display(),
                    meta.uid(),
                    euid()
                ),
            ));
        }
        Ok(Held {
            path: path.to_owned(),
            dev: meta.dev(),
            ino: meta.ino(),
            dir,
        })
    }

    /// Opens the directory just made at `path` (mode 0700 requested), sets
    /// its mode to exactly 0700 through the descriptor (a umask may have
    /// taken bits away), and checks it.
    pub(crate) fn made(path: &Path) -> io::Result<Held> {
        let held = Held::open(path)?;
        held.dir
            .set_permissions(std::fs::Permissions::from_mode(PRIVATE_MODE))?;
        held.check_private()?;
        Ok(held)
    }

    /// Whether the directory's mode is exactly 0700.
    pub(crate) fn check_private(&self) -> io::Result<()> {
        let mode = self.dir.metadata()?.mode() & 0o7777;
        if mode != PRIVATE_MODE {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "refusing {}: its mode is {mode:o}, not {PRIVATE_MODE:o}",
                    self.path.display()
                ),
            ));
        }
        Ok(())
    }

    /// Where the directory was made.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the directory's path still leads to this very directory
    /// (not moved away, not replaced by a symlink or another directory,
    /// not removed).
    pub(crate) fn in_place(&self) -> bool {
        std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.is_dir() && m.dev() == self.dev && m.ino() == self.ino)
    }

    /// Creates the new file `name` (a plain name) with `mode` in the
    /// directory, through its descriptor: `O_CREAT | O_EXCL | O_NOFOLLOW`,
    /// so nothing already there (a symlink included) is ever opened.
    /// Refused when the directory is no longer at its path: a file the
    /// path does not lead to is of no use to whoever is told the path.
    pub(crate) fn create(&self, name: &str, mode: u32) -> io::Result<File> {
        let c_name = component(name)?;
        if !self.in_place() {
            return Err(io::Error::other(format!(
                "cannot create {name} in {}: the directory was moved or replaced since it was made (a command may have renamed it); nothing is written where its path no longer leads",
                self.path.display()
            )));
        }
        let flags =
            libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_WRONLY;
        // SAFETY: the descriptor is open for the life of `self`, `c_name`
        // is a NUL-terminated string that outlives the call, and the mode
        // is passed as the variadic argument O_CREAT requires.
        let fd = unsafe {
            libc::openat(
                self.dir.as_raw_fd(),
                c_name.as_ptr(),
                flags,
                mode as libc::c_uint,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("cannot create {name} in {}: {e}", self.path.display()),
            ));
        }
        // SAFETY: `fd` was just opened by openat and is owned by no one else.
        Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Removes everything in the directory (through descriptors), then the
    /// directory itself by its path when that still leads here. A
    /// directory moved away is emptied and left where it was moved, and
    /// that is reported.
    pub(crate) fn remove(&self) -> io::Result<()> {
        let cleared = clear(&self.dir, 0);
        if !self.in_place() {
            cleared?;
            return Err(io::Error::other(format!(
                "{} was moved or replaced since it was made: its files were removed, the emptied directory is left wherever it was moved",
                self.path.display()
            )));
        }
        cleared?;
        match std::fs::remove_dir(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io::Error::new(
                e.kind(),
                format!("cannot remove {}: {e}", self.path.display()),
            )),
            _ => Ok(()),
        }
    }
}

/// An open directory stream, closed on drop.
struct Stream(*mut libc::DIR);

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: the stream came from fdopendir and is closed only here.
        unsafe { libc::closedir(self.0) };
    }
}

/// Opens `name` in `dir` with `flags` (`O_CLOEXEC | O_NOFOLLOW` added).
fn open_at(dir: &impl AsRawFd, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: `dir` is an open descriptor and `name` a NUL-terminated
    // string, both alive for the call; no O_CREAT, so no mode is needed.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `unlinkat(dir, name, flags)`.
fn unlink_at(dir: &impl AsRawFd, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: `dir` is an open descriptor and `name` a NUL-terminated
    // string, both alive for the call.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The names in `dir` (without `.` and `..`), read through a descriptor of
/// its own so the listing starts at the beginning.
fn names(dir: &impl AsRawFd) -> io::Result<Vec<CString>> {
    let listing = open_at(dir, c".", libc::O_RDONLY | libc::O_DIRECTORY)?;
    // SAFETY: `listing` is an open directory descriptor; on success the
    // stream owns it (closedir closes it), so it is released from the
    // OwnedFd first; on failure it is still ours and closed here.
    let stream = unsafe {
        let raw = std::os::fd::IntoRawFd::into_raw_fd(listing);
        let stream = libc::fdopendir(raw);
        if stream.is_null() {
            let e = io::Error::last_os_error();
            drop(OwnedFd::from_raw_fd(raw));
            return Err(e);
        }
        Stream(stream)
    };
    let mut out = Vec::new();
    loop {
        // SAFETY: the stream is open; the entry it returns stays valid
        // until the next readdir on it, and its name is copied before that.
        let name = unsafe {
            let entry = libc::readdir(stream.0);
            if entry.is_null() {
                break;
            }
            CStr::from_ptr((*entry).d_name.as_ptr()).to_owned()
        };
        if name.as_bytes() != b"." && name.as_bytes() != b".." {
            out.push(name);
        }
    }
    Ok(out)
}

/// Removes everything in `dir`: files and symlinks are unlinked (never
/// followed), directories emptied the same way (down to [`MAX_DEPTH`])
/// and removed. Best effort: the first failure is returned after the rest
/// was tried.
fn clear(dir: &impl AsRawFd, depth: usize) -> io::Result<()> {
    let mut first_error = None;
    for name in names(dir)? {
        let removed = match unlink_at(dir, &name, 0) {
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) && depth < MAX_DEPTH => {
                open_at(dir, &name, libc::O_RDONLY | libc::O_DIRECTORY)
                    .and_then(|sub| clear(&sub, depth + 1))
                    .and_then(|()| unlink_at(dir, &name, libc::AT_REMOVEDIR))
            }
            other => other,
        };
        match removed {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                first_error.get_or_insert(e);
            }
            _ => {}
        }
    }
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn fresh(label: &str) -> (PathBuf, Held) {
        let base =
            std::env::temp_dir().join(format!("dsh-tempdir-held-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        let dir = base.join("d");
        std::fs::create_dir(&dir).unwrap();
        let held = Held::made(&dir).unwrap();
        (base, held)
    }

    #[test]
    fn files_are_created_through_the_descriptor_new_and_private() {
        let (base, held) = fresh("create");
        let mut f = held.create("a.txt", 0o600).unwrap();
        f.write_all(b"hello").unwrap();
        let path = held.path().join("a.txt");
        assert_eq!(std::fs::read(&path).unwrap(), b"hello");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        // Never an existing name, and never through a symlink there.
        let e = held.create("a.txt", 0o600).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        let outside = base.join("outside");
        std::os::unix::fs::symlink(&outside, held.path().join("link")).unwrap();
        assert!(held.create("link", 0o600).is_err());
        assert!(!outside.exists());
        // A name is one component.
        for bad in ["", ".", "..", "../x", "a/b", "nul\0"] {
            let e = held.create(bad, 0o600).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}: {e}");
        }
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// The attack: rename the directory and plant a symlink to another
    /// directory under its name. Nothing is created in that directory, and
    /// removal empties the renamed one through the descriptor, leaving the
    /// link and its target alone.
    #[test]
    fn a_renamed_directory_and_a_planted_symlink_redirect_nothing() {
        let (base, held) = fresh("swap");
        held.create("before", 0o600).unwrap();
        let moved = base.join("moved");
        let target = base.join("target");
        std::fs::create_dir(&target).unwrap();
        std::fs::rename(held.path(), &moved).unwrap();
        std::os::unix::fs::symlink(&target, held.path()).unwrap();
        assert!(!held.in_place());
        let e = held.create("after", 0o600).unwrap_err();
        assert!(e.to_string().contains("moved or replaced"), "{e}");
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
        let e = held.remove().unwrap_err();
        assert!(e.to_string().contains("moved or replaced"), "{e}");
        assert_eq!(std::fs::read_dir(&moved).unwrap().count(), 0);
        assert!(target.is_dir() && held.path().is_symlink());
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// A directory of the attacker's under the name (same user, mode
    /// 0700) is not the one held either.
    #[test]
    fn a_directory_put_in_its_place_is_not_written_or_removed() {
        let (base, held) = fresh("replace");
        std::fs::rename(held.path(), base.join("moved")).unwrap();
        std::fs::create_dir(held.path()).unwrap();
        std::fs::write(held.path().join("theirs"), "x").unwrap();
        assert!(!held.in_place());
        assert!(held.create("mine", 0o600).is_err());
        assert!(held.remove().is_err());
        assert!(held.path().join("theirs").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn removal_goes_through_descriptors_and_never_follows_links() {
        let (base, held) = fresh("remove");
        let outside = base.join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        std::fs::create_dir_all(held.path().join("a/b/c")).unwrap();
        std::fs::write(held.path().join("a/b/c/f"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, held.path().join("a/link")).unwrap();
        held.create("f", 0o000).unwrap();
        held.remove().unwrap();
        assert!(!held.path().exists());
        assert!(outside.join("keep").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_symlink_or_another_users_directory_is_refused() {
        let (base, held) = fresh("refuse");
        let link = base.join("link");
        std::os::unix::fs::symlink(held.path(), &link).unwrap();
        let e = Held::open(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        std::fs::set_permissions(held.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = Held::open(held.path())
            .unwrap()
            .check_private()
            .unwrap_err();
        assert!(e.to_string().contains("755"), "{e}");
        let file = base.join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(Held::open(&file).is_err());
        if euid() == 0 {
            let theirs = base.join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            let e = Held::open(&theirs).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        }
        std::fs::remove_dir_all(&base).unwrap();
    }
}
