//! Race-free file changes beneath a root: the parent directory is opened
//! without following symlinks (`openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS` where the kernel has it, else component by component
//! with `O_NOFOLLOW`), and everything after that happens relative to that
//! open directory. A symlink swapped into the path after the fence check is
//! an error, never followed.

use std::ffi::{CString, OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

const SYS_OPENAT2: libc::c_long = 437;
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;
const DIR_FLAGS: libc::c_int = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a path with a NUL byte is not a path",
        )
    })
}

fn fd_or_error(rc: libc::c_long) -> io::Result<OwnedFd> {
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor the kernel just gave us.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as i32) })
}

fn symlink_refused(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} contains a symbolic link (or changed while being written); refusing to follow it",
            path.display()
        ),
    )
}

/// An open directory; every operation is relative to it.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

impl Dir {
    /// Opens `root/rel` without following any symlink below `root`,
    /// creating missing directories when `create` is set. `rel` must be
    /// relative and normalized (no `..`).
    pub fn open_beneath(root: &Path, rel: &Path, create: bool) -> io::Result<Dir> {
        let root_c = cstr(root.as_os_str())?;
        // SAFETY: a valid C string.
        let root_fd = fd_or_error(unsafe { libc::open(root_c.as_ptr(), DIR_FLAGS) } as _)?;
        let dir = Dir { fd: root_fd };
        if rel.as_os_str().is_empty() {
            return Ok(dir);
        }
        let mut parts = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => parts.push(n),
                Component::CurDir => {}
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{} is not a plain relative path", rel.display()),
                    ))
                }
            }
        }
        match dir.openat2(rel) {
            Ok(d) => return Ok(d),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(symlink_refused(&root.join(rel)))
            }
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                return Err(symlink_refused(&root.join(rel)))
            }
            // Missing directories (to create), or no openat2 here: walk.
            Err(_) => {}
        }
        let mut cur = dir;
        let mut at = root.to_owned();
        for part in parts {
            at.push(part);
            cur = match cur.child(part, create) {
                Ok(next) => next,
                Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                    // O_NOFOLLOW|O_DIRECTORY refuses a symlink and a file alike.
                    return Err(match cur.stat(part) {
                        Ok(Some(m)) if !m.file_type().is_symlink() => io::Error::new(
                            io::ErrorKind::NotADirectory,
                            format!("{} is not a directory", at.display()),
                        ),
                        _ => symlink_refused(&root.join(rel)),
                    });
                }
                Err(e) => return Err(e),
            };
        }
        Ok(cur)
    }

    fn openat2(&self, rel: &Path) -> io::Result<Dir> {
        let c = cstr(rel.as_os_str())?;
        let how = OpenHow {
            flags: DIR_FLAGS as u64,
            mode: 0,
            resolve: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        // SAFETY: valid pointers to a C string and an open_how of the size given.
        let rc = unsafe {
            libc::syscall(
                SYS_OPENAT2,
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        fd_or_error(rc).map(|fd| Dir { fd })
    }

    /// The subdirectory `name` (never through a symlink), made if missing
    /// and `create` is set.
    fn child(&self, name: &OsStr, create: bool) -> io::Result<Dir> {
        let c = cstr(name)?;
        let open = || {
            // SAFETY: a valid C string relative to our open directory.
            fd_or_error(unsafe {
                libc::openat(
                    self.fd.as_raw_fd(),
                    c.as_ptr(),
                    DIR_FLAGS | libc::O_NOFOLLOW,
                )
            } as _)
        };
        match open() {
            Err(e) if create && e.raw_os_error() == Some(libc::ENOENT) => {
                // SAFETY: as above.
                let rc = unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o777) };
                if rc < 0 {
                    let e = io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EEXIST) {
                        return Err(e);
                    }
                }
                open().map(|fd| Dir { fd })
            }
            other => other.map(|fd| Dir { fd }),
        }
    }

    /// The metadata of `name` itself (a symlink is not followed), or `None`
    /// when it does not exist.
    pub fn stat(&self, name: &OsStr) -> io::Result<Option<std::fs::Metadata>> {
        match self.open_file(name, libc::O_PATH) {
            Ok(f) => f.metadata().map(Some),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            // O_PATH|O_NOFOLLOW opens a symlink itself: its metadata says so.
            Err(e) => Err(e),
        }
    }

    fn open_file(&self, name: &OsStr, flags: libc::c_int) -> io::Result<std::fs::File> {
        let c = cstr(name)?;
        // SAFETY: a valid C string relative to our open directory.
        let fd = fd_or_error(unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o666 as libc::c_uint,
            )
        } as _)?;
        Ok(std::fs::File::from(fd))
    }

    /// Opens the regular file `name` for reading, with its metadata (from
    /// the descriptor): a symlink, FIFO or device is refused, never
    /// blocked on.
    pub fn open_regular(&self, name: &OsStr) -> io::Result<(std::fs::File, std::fs::Metadata)> {
        let f = self
            .open_file(name, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::ELOOP) {
                    symlink_refused(Path::new(name))
                } else {
                    e
                }
            })?;
        let meta = f.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", Path::new(name).display()),
            ));
        }
        Ok((f, meta))
    }

    /// Reads the regular file `name` whole (a symlink, FIFO or device is
    /// refused).
    pub fn read(&self, name: &OsStr) -> io::Result<Vec<u8>> {
        let (mut f, _) = self.open_regular(name)?;
        let mut out = Vec::new();
        f.read_to_end(&mut out)?;
        Ok(out)
    }

    /// Replaces (or creates) `name` with `bytes` atomically, keeping the
    /// permissions of the file it replaces: the bytes go to a file of this
    /// directory that has no name (`O_TMPFILE`), fsynced, then linked in
    /// under a recognisable name (`.<name>.dsh.tmp`, unlinked first: a
    /// writer killed between the link and the rename left it; a name of
    /// this writer's own when that one is taken by a directory or too
    /// long) and renamed over `name`. A process killed while writing therefore leaves nothing
    /// behind (at most that name, for the microseconds between link and
    /// rename, and the next write of `name` removes it). Where the file
    /// system has no `O_TMPFILE`, a named temp file is written instead and
    /// the leftovers of writers that are gone are swept first.
    pub fn write_atomic(&self, name: &OsStr, bytes: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let old = self.stat(name)?;
        if let Some(m) = &old {
            if m.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    format!("{} is a directory", Path::new(name).display()),
                ));
            }
        }
        let mode = old
            .as_ref()
            .filter(|m| m.is_file())
            .map(|m| std::fs::Permissions::from_mode(m.permissions().mode()));
        match self.write_unnamed(name, bytes, mode.clone())? {
            Written::Done => Ok(()),
            Written::Unsupported => {
                self.sweep_named(name);
                self.write_named(name, bytes, mode)
            }
        }
    }

    /// The `O_TMPFILE` way of [`Dir::write_atomic`].
    fn write_unnamed(
        &self,
        name: &OsStr,
        bytes: &[u8],
        mode: Option<std::fs::Permissions>,
    ) -> io::Result<Written> {
        let mut f = match self.open_file(OsStr::new("."), libc::O_TMPFILE | libc::O_WRONLY) {
            Ok(f) => f,
            // No O_TMPFILE here: EOPNOTSUPP from the file system, EISDIR or
            // EINVAL from a kernel that does not know the flag.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
                ) =>
            {
                return Ok(Written::Unsupported)
            }
            Err(e) => return Err(e),
        };
        f.write_all(bytes)?;
        if let Some(mode) = mode {
            f.set_permissions(mode)?;
        }
        f.sync_all()?;
        let mut link = unnamed_link(name);
        if link.len() > NAME_MAX {
            link = own_temp_name();
        }
        // Another writer of `name` may take the link name between our
        // link and rename (it unlinks ours first): every content is whole,
        // so trying again is safe.
        for _ in 0..16 {
            match self.unlink(&link) {
                Ok(()) => {}
                // Not a file (a directory) holds the name: take one of our
                // own, which nobody else uses.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EISDIR | libc::EPERM)) => {
                    link = own_temp_name();
                    continue;
                }
                Err(e) => return Err(e),
            }
            match self.link_unnamed(&f, &link) {
                Ok(true) => {}
                Ok(false) => return Ok(Written::Unsupported),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                Err(e) => return Err(e),
            }
            match self.rename(&link, name) {
                Ok(()) => return Ok(Written::Done),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                Err(e) => {
                    let _ = self.unlink(&link);
                    return Err(e);
                }
            }
        }
        Err(io::Error::other(format!(
            "{} kept being written by someone else; try again",
            Path::new(name).display()
        )))
    }

    /// Gives the unnamed file `f` the name `link` in this directory: with
    /// `AT_EMPTY_PATH` (which needs `CAP_DAC_READ_SEARCH` on most kernels),
    /// else through `/proc/self/fd`. `false` when neither is possible here.
    fn link_unnamed(&self, f: &std::fs::File, link: &OsStr) -> io::Result<bool> {
        let to = cstr(link)?;
        let dir = self.fd.as_raw_fd();
        // SAFETY: `f` is an open descriptor, the empty path and `to` are
        // valid C strings relative to open descriptors, all alive for the
        // call.
        let rc = unsafe {
            libc::linkat(
                f.as_raw_fd(),
                c"".as_ptr(),
                dir,
                to.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        if !matches!(
            e.raw_os_error(),
            Some(libc::ENOENT | libc::EPERM | libc::EACCES | libc::EINVAL)
        ) {
            return Err(e);
        }
        let through = CString::new(format!("/proc/self/fd/{}", f.as_raw_fd()))
            .map_err(|_| io::Error::other("a descriptor path with a NUL byte"))?;
        // SAFETY: valid C strings; `/proc/self/fd/N` names the open `f`.
        let rc = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                through.as_ptr(),
                dir,
                to.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // No /proc, or a file system that cannot link it.
            Some(libc::ENOENT | libc::EPERM | libc::EACCES | libc::EXDEV) => Ok(false),
            _ => Err(e),
        }
    }

    /// The named way of [`Dir::write_atomic`], for file systems without
    /// `O_TMPFILE`: a temp file named after the writer
    /// (`.<name>.dsh-<pid>-<id>.tmp`), fsynced, renamed over `name`.
    fn write_named(
        &self,
        name: &OsStr,
        bytes: &[u8],
        mode: Option<std::fs::Permissions>,
    ) -> io::Result<()> {
        let mut tmp = named_prefix(name);
        tmp.push(format!("{}-{}.tmp", std::process::id(), crate::new_id()));
        if tmp.len() > NAME_MAX {
            tmp = own_temp_name();
        }
        let mut f = self.open_file(
            &tmp,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC,
        )?;
        let written = (|| {
            f.write_all(bytes)?;
            if let Some(mode) = mode {
                f.set_permissions(mode)?;
            }
            f.sync_all()?;
            self.rename(&tmp, name)
        })();
        if written.is_err() {
            let _ = self.unlink(&tmp);
        }
        written
    }

    /// Removes the named temp files of `name` ([`Dir::write_named`]) whose
    /// writer is gone (killed while writing). Best effort.
    fn sweep_named(&self, name: &OsStr) {
        let prefix = named_prefix(name);
        let listing = format!("/proc/self/fd/{}", self.fd.as_raw_fd());
        let Ok(entries) = std::fs::read_dir(listing) else {
            return;
        };
        for entry in entries.flatten() {
            let file = entry.file_name();
            let Some(rest) = file.as_bytes().strip_prefix(prefix.as_bytes()) else {
                continue;
            };
            let pid = rest
                .split(|b| *b == b'-')
                .next()
                .and_then(|p| std::str::from_utf8(p).ok())
                .and_then(|p| p.parse::<libc::pid_t>().ok());
            if rest.ends_with(b".tmp") && pid.is_some_and(|p| !alive(p)) {
                let _ = self.unlink(&file);
            }
        }
    }

    /// Unlinks `name` (a file); a missing one is fine.
    fn unlink(&self, name: &OsStr) -> io::Result<()> {
        let c = cstr(name)?;
        // SAFETY: a valid C string relative to our open directory.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) } < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOENT) {
                return Err(e);
            }
        }
        Ok(())
    }

    fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        let (a, b) = (cstr(from)?, cstr(to)?);
        let fd = self.fd.as_raw_fd();
        // SAFETY: valid C strings relative to our open directory.
        if unsafe { libc::renameat(fd, a.as_ptr(), fd, b.as_ptr()) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// How [`Dir::write_unnamed`] ended.
enum Written {
    /// The file is in place.
    Done,
    /// No `O_TMPFILE` (or no way to link it) here: nothing was written.
    Unsupported,
}

/// The longest file name (bytes) the kernel takes (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// A temp name of this writer's own, short whatever the file's name:
/// `.dsh-<pid>-<id>.tmp`.
fn own_temp_name() -> OsString {
    OsString::from(format!(
        ".dsh-{}-{}.tmp",
        std::process::id(),
        crate::new_id()
    ))
}

/// The name an unnamed temp file of `name` is linked under just before it
/// is renamed over `name`: `.<name>.dsh.tmp`.
fn unnamed_link(name: &OsStr) -> OsString {
    let mut link = OsString::from(".");
    link.push(name);
    link.push(".dsh.tmp");
    link
}

/// The start of a named temp file of `name`: `.<name>.dsh-`.
fn named_prefix(name: &OsStr) -> OsString {
    let mut prefix = OsString::from(".");
    prefix.push(name);
    prefix.push(".dsh-");
    prefix
}

/// Whether process `pid` exists (in this PID namespace).
fn alive(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that `pid` exists and may be signalled.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The parent directory of `target` (a resolved path under `root`), opened
/// beneath `root`, and the file name to use inside it.
pub fn open_parent(root: &Path, target: &Path, create: bool) -> io::Result<(Dir, OsString)> {
    let rel = target.strip_prefix(root).map_err(|_| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is not under {}", target.display(), root.display()),
        )
    })?;
    let name = rel.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no file", target.display()),
        )
    })?;
    let parent = rel.parent().unwrap_or(Path::new(""));
    Ok((Dir::open_beneath(root, parent, create)?, name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(label: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("dsh-beneath-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d.canonicalize().unwrap()
    }

    #[test]
    fn writes_create_directories_and_keep_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let root = scratch("write");
        let target = root.join("a/b/c.txt");
        let (dir, name) = open_parent(&root, &target, true).unwrap();
        dir.write_atomic(&name, b"one").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
        dir.write_atomic(&name, b"two").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"two");
        let mode = std::fs::metadata(&target).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        assert_eq!(dir.read(&name).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(root.join("a/b")).unwrap().count(), 1);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_write_in_progress_has_no_name_and_leftovers_are_swept() {
        let root = scratch("unnamed");
        let (dir, name) = open_parent(&root, &root.join("big.txt"), false).unwrap();
        let bytes = vec![b'x'; 64 << 20];
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (d, watch) = (done.clone(), root.clone());
        // While the bytes are written and fsynced, nothing but (for the
        // instant between link and rename) the link name is ever visible.
        let watcher = std::thread::spawn(move || {
            let mut seen = std::collections::BTreeSet::new();
            while !d.load(std::sync::atomic::Ordering::Relaxed) {
                for e in std::fs::read_dir(&watch).unwrap().flatten() {
                    seen.insert(e.file_name().to_string_lossy().into_owned());
                }
            }
            seen
        });
        dir.write_atomic(&name, &bytes).unwrap();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let seen = watcher.join().unwrap();
        assert!(
            seen.iter()
                .all(|n| n == "big.txt" || n == ".big.txt.dsh.tmp"),
            "{seen:?}"
        );
        assert_eq!(
            std::fs::metadata(root.join("big.txt")).unwrap().len(),
            64 << 20
        );
        // A writer killed between link and rename left the link name: the
        // next write of the file removes it.
        std::fs::write(root.join(".big.txt.dsh.tmp"), "stale").unwrap();
        dir.write_atomic(&name, b"small").unwrap();
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 1);
        // Named temp files (no O_TMPFILE) of writers that are gone are
        // swept; a living writer's is kept.
        let gone = std::process::Command::new("true").spawn().unwrap();
        let gone_pid = gone.id();
        let mut gone = gone;
        gone.wait().unwrap();
        let stale = format!(".big.txt.dsh-{gone_pid}-x.tmp");
        let live = format!(".big.txt.dsh-{}-y.tmp", std::process::id());
        std::fs::write(root.join(&stale), "").unwrap();
        std::fs::write(root.join(&live), "").unwrap();
        dir.sweep_named(&name);
        assert!(!root.join(&stale).exists());
        assert!(root.join(&live).exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_directory_at_the_link_name_or_a_long_name_does_not_block_a_write() {
        let root = scratch("taken");
        std::fs::create_dir_all(root.join(".a.txt.dsh.tmp/inner")).unwrap();
        let (dir, name) = open_parent(&root, &root.join("a.txt"), false).unwrap();
        dir.write_atomic(&name, b"one").unwrap();
        assert_eq!(std::fs::read(root.join("a.txt")).unwrap(), b"one");
        assert!(root.join(".a.txt.dsh.tmp/inner").is_dir());
        let long = "l".repeat(250);
        let (dir, name) = open_parent(&root, &root.join(&long), false).unwrap();
        dir.write_atomic(&name, b"two").unwrap();
        assert_eq!(std::fs::read(root.join(&long)).unwrap(), b"two");
        let mut left = entries_of(&root);
        left.sort();
        assert_eq!(left, [".a.txt.dsh.tmp".to_owned(), "a.txt".into(), long]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    fn entries_of(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_file_in_the_path_is_not_a_directory() {
        let root = scratch("notdir");
        std::fs::write(root.join("f"), "x").unwrap();
        let err = open_parent(&root, &root.join("f/x.txt"), true).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotADirectory, "{err}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_symlink_in_the_path_is_refused_not_followed() {
        let root = scratch("link");
        let outside = scratch("link-outside");
        std::os::unix::fs::symlink(&outside, root.join("d")).unwrap();
        let err = open_parent(&root, &root.join("d/x.txt"), true).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        // The component walk (no openat2) refuses it too.
        let err = Dir::open_beneath(&root, Path::new(""), false)
            .unwrap()
            .child(OsStr::new("d"), true)
            .unwrap_err();
        assert!(
            matches!(err.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)),
            "{err}"
        );
        // A final symlink is replaced, not written through.
        std::os::unix::fs::symlink(outside.join("t.txt"), root.join("f")).unwrap();
        let (dir, name) = open_parent(&root, &root.join("f"), false).unwrap();
        assert!(dir.read(&name).is_err());
        dir.write_atomic(&name, b"x").unwrap();
        assert!(!outside.join("t.txt").exists());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        std::fs::remove_dir_all(&root).unwrap();
        std::fs::remove_dir_all(&outside).unwrap();
    }
}
