//! Opening a file for reading without ever blocking on something that is not
//! a regular file: opening a FIFO for reading blocks until a writer appears
//! (forever, on a blocking thread that then never returns), reading a
//! character device such as `/dev/zero` never ends, and the files of the
//! kernel's pseudo filesystems (procfs, sysfs, ...) are regular files of size
//! 0 that are made as they are read: some never end, some (`/proc/kmsg`,
//! `trace_pipe`) wait for data.
//!
//! [`open_regular`] checks the path's metadata first (a clear error without
//! opening anything), opens with `O_NONBLOCK` (so a FIFO swapped in after the
//! check cannot block the open) and `O_NOCTTY`, then checks the opened
//! descriptor itself, which is the check that counts. [`open_readable`] does
//! the same and also looks at the filesystem the descriptor lives on: a file
//! of a pseudo filesystem stays non-blocking (a read that would wait fails
//! instead) and is read up to [`PSEUDO_READ_LIMIT`] bytes; the kernel's
//! debugging filesystems (debugfs, tracefs), whose reads may wait however
//! they are opened, are refused.

use std::ffi::CString;
use std::fs::{File, FileType, OpenOptions};
use std::io::{self, Read};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// The most bytes read from one file of a pseudo filesystem: such a file
/// reports size 0 and is made as it is read, so its end is not known in
/// advance (`/proc/kallsyms` is about 10 MB; some files never end).
pub const PSEUDO_READ_LIMIT: u64 = 4 * 1024 * 1024;

/// Why [`open_regular`] or [`open_readable`] refused or failed.
#[derive(Debug)]
pub enum OpenError {
    /// The path names something other than a regular file; the text says
    /// what, e.g. `"a FIFO (named pipe)"`.
    NotRegular(&'static str),
    /// A file of a kernel filesystem whose reads may wait forever (debugfs,
    /// tracefs); the text says which.
    Kernel(&'static str),
    /// A symbolic link appeared in a path that was resolved without one
    /// ([`Follow::Never`]): the path changed after it was checked, or the
    /// link leads nowhere.
    Symlink(PathBuf),
    /// Metadata, open or `fcntl` failed.
    Io(io::Error),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::NotRegular(kind) => write!(f, "is {kind}"),
            OpenError::Kernel(kind) => write!(f, "is {kind}"),
            OpenError::Symlink(path) => write!(
                f,
                "{} holds a symbolic link that was not there when it was checked (or that leads nowhere); refusing to follow it",
                path.display()
            ),
            OpenError::Io(e) => e.fmt(f),
        }
    }
}

/// What a file type is, in words, when it is not a regular file.
pub fn irregular_kind(file_type: &FileType) -> Option<&'static str> {
    if file_type.is_file() {
        None
    } else if file_type.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else if file_type.is_socket() {
        Some("a socket")
    } else if file_type.is_dir() {
        Some("a directory")
    } else if file_type.is_symlink() {
        Some("a symbolic link")
    } else {
        Some("not a regular file")
    }
}

/// Opens `path` (following symlinks) for reading if it is a regular file.
pub fn open_regular(path: &Path) -> Result<File, OpenError> {
    let (file, _) = open_nonblocking(path, Follow::Always)?;
    clear_nonblocking(&file).map_err(OpenError::Io)?;
    Ok(file)
}

/// Whether opening a path follows symbolic links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// As `open(2)` does.
    Always,
    /// Not at all (`openat2` with `RESOLVE_NO_SYMLINKS`): for a path that
    /// was resolved and checked already, so that a link swapped into it
    /// since is refused ([`OpenError::Symlink`]) instead of followed. Where
    /// the kernel has no `openat2` (before 5.6) the path is opened as
    /// [`Follow::Always`] does, and the caller's check of what was opened
    /// ([`opened_path`]) is what holds.
    Never,
}

/// A pseudo filesystem: the kernel makes its files as they are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pseudo {
    /// procfs (`/proc`): processes and kernel state.
    Proc,
    /// sysfs (`/sys`): devices and kernel objects.
    Sys,
    /// Another kernel filesystem (securityfs, configfs, cgroup, efivarfs,
    /// bpf, pstore); the text names it.
    Other(&'static str),
}

impl Pseudo {
    /// The filesystem's name (`procfs`).
    pub fn name(self) -> &'static str {
        match self {
            Pseudo::Proc => "procfs",
            Pseudo::Sys => "sysfs",
            Pseudo::Other(name) => name,
        }
    }
}

/// What kind of filesystem a file lies on, as far as reading it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileSystem {
    /// One that stores files: read as they are.
    Ordinary,
    /// A pseudo filesystem: read without blocking, and bounded.
    Pseudo(Pseudo),
    /// A kernel filesystem whose reads may wait however they are opened
    /// (debugfs, tracefs): never opened; the text says which.
    Refused(&'static str),
}

/// What the filesystem of magic number `magic` (`statfs`'s `f_type`) is.
fn classify(magic: i64) -> FileSystem {
    FileSystem::Pseudo(match magic {
        0x9fa0 => Pseudo::Proc,
        0x6265_6572 => Pseudo::Sys,
        0x6462_6720 => {
            return FileSystem::Refused("a file of debugfs, the kernel's debugging filesystem (its reads may wait forever); it is never opened")
        }
        0x7472_6163 => {
            return FileSystem::Refused("a file of tracefs, the kernel's tracing filesystem (its reads may wait for events forever); it is never opened")
        }
        0x7363_6673 => Pseudo::Other("securityfs"),
        0x6265_6570 => Pseudo::Other("configfs"),
        0x0027_e0eb => Pseudo::Other("cgroupfs"),
        0x6367_7270 => Pseudo::Other("cgroup2fs"),
        0xde5e_81e4 => Pseudo::Other("efivarfs"),
        0xcafe_4a11 => Pseudo::Other("bpffs"),
        0x6165_676c => Pseudo::Other("pstorefs"),
        _ => return FileSystem::Ordinary,
    })
}

/// The filesystem `path` (followed) lies on; for walkers that must not
/// enter a pseudo filesystem.
pub fn file_system_at(path: &Path) -> io::Result<FileSystem> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: an all-zero `statfs` is a valid value of the plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a writable statfs, both
    // alive for the call.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(classify(st.f_type as i64))
}

fn file_system_of(file: &File) -> io::Result<FileSystem> {
    // SAFETY: an all-zero `statfs` is a valid value of the plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor is open (owned by `file`) and `st` writable.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(classify(st.f_type as i64))
}

/// A file open for reading that is regular: a file of a pseudo filesystem
/// ([`Readable::pseudo`]) stays non-blocking and ends after
/// [`PSEUDO_READ_LIMIT`] bytes.
#[derive(Debug)]
pub struct Readable {
    file: File,
    pseudo: Option<Pseudo>,
    /// Bytes left before the bound (pseudo files only).
    left: Option<u64>,
    /// The opened file's identity, from its descriptor.
    identity: Identity,
}

/// A file's identity: (device, inode) of what a descriptor or path leads
/// to, the same under every name of the file (links, hard links, bind
/// mounts).
pub type Identity = (u64, u64);

/// The identity of the file `meta` describes.
pub fn identity_of(meta: &std::fs::Metadata) -> Identity {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

impl Readable {
    /// The pseudo filesystem the file lies on, if any.
    pub fn pseudo(&self) -> Option<Pseudo> {
        self.pseudo
    }

    /// The opened file's identity (from the descriptor, not a path).
    pub fn identity(&self) -> Identity {
        self.identity
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl Read for Readable {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = match self.left {
            Some(0) => return Ok(0),
            Some(left) => buf.len().min(usize::try_from(left).unwrap_or(usize::MAX)),
            None => buf.len(),
        };
        let n =
            match self.file.read(&mut buf[..want]) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "it is a kernel file that would wait for data; only what is there can be read",
                )),
                other => other?,
            };
        if let Some(left) = &mut self.left {
            *left -= n as u64;
        }
        Ok(n)
    }
}

/// Opens `path` for reading if it is a regular file, never blocking: see
/// the module's documentation.
pub fn open_readable(path: &Path, follow: Follow) -> Result<Readable, OpenError> {
    let (file, identity) = open_nonblocking(path, follow)?;
    match file_system_of(&file).map_err(OpenError::Io)? {
        FileSystem::Refused(kernel) => Err(OpenError::Kernel(kernel)),
        FileSystem::Ordinary => {
            clear_nonblocking(&file).map_err(OpenError::Io)?;
            Ok(Readable {
                file,
                pseudo: None,
                left: None,
                identity,
            })
        }
        FileSystem::Pseudo(pseudo) => Ok(Readable {
            file,
            pseudo: Some(pseudo),
            left: Some(PSEUDO_READ_LIMIT),
            identity,
        }),
    }
}

/// The path the kernel gives the open `file` (`/proc/self/fd/N`): where
/// what was opened actually is, whatever the path that led to it.
pub fn opened_path(file: &File) -> io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// Opens `path` with `O_NONBLOCK | O_NOCTTY` and checks that it is (and
/// was, before opening) a regular file; with the opened file's identity.
fn open_nonblocking(path: &Path, follow: Follow) -> Result<(File, Identity), OpenError> {
    let before = match follow {
        Follow::Always => std::fs::metadata(path),
        Follow::Never => std::fs::symlink_metadata(path),
    };
    match before {
        Ok(m) if follow == Follow::Never && m.file_type().is_symlink() => {
            return Err(OpenError::Symlink(path.to_owned()))
        }
        Ok(m) => refuse_irregular(&m.file_type())?,
        Err(e) => return Err(OpenError::Io(e)),
    }
    let file = match follow {
        Follow::Always => OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(OpenError::Io)?,
        Follow::Never => open_no_symlinks(path)?,
    };
    let opened = file.metadata().map_err(OpenError::Io)?;
    refuse_irregular(&opened.file_type())?;
    Ok((file, identity_of(&opened)))
}

const SYS_OPENAT2: libc::c_long = 437;
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2(AT_FDCWD, path, flags | O_CLOEXEC, resolve)`: the new
/// descriptor, or the error.
fn openat2(path: &Path, flags: libc::c_int, resolve: u64) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a path with a NUL byte is not a path",
        )
    })?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve,
    };
    // SAFETY: valid pointers to a NUL-terminated path and to an open_how of
    // the size given, both alive for the call.
    let rc = unsafe {
        libc::syscall(
            SYS_OPENAT2,
            libc::AT_FDCWD,
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor the kernel just gave us, owned by no one
    // else.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as i32) })
}

/// Whether resolving `path` passes through a magic link of procfs
/// (`/proc/<pid>/fd/N`, `cwd`, `root`, `exe`, `map_files`, `ns`; and so
/// `/dev/fd/N`, `/dev/stdin`, ...): such a link leads to a process's open
/// file or directory whatever the path it shows, so the path it resolves
/// to says nothing about what is read. Looked at without opening anything
/// (`O_PATH`); `false` where the kernel has no `openat2`, and when the path
/// cannot be resolved at all.
pub fn crosses_magic_link(path: &Path) -> bool {
    match openat2(path, libc::O_PATH, RESOLVE_NO_MAGICLINKS) {
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            // ELOOP is also a loop of ordinary links: then the plain
            // resolution fails the same way.
            openat2(path, libc::O_PATH, 0)
                .map_or_else(|e| e.raw_os_error() != Some(libc::ELOOP), |_| true)
        }
        _ => false,
    }
}

/// `openat2(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
/// RESOLVE_NO_SYMLINKS)`; a plain open where the kernel has no `openat2`.
fn open_no_symlinks(path: &Path) -> Result<File, OpenError> {
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY;
    let e = match openat2(path, flags, RESOLVE_NO_SYMLINKS) {
        Ok(fd) => return Ok(File::from(fd)),
        Err(e) => e,
    };
    match e.raw_os_error() {
        Some(libc::ELOOP) => Err(OpenError::Symlink(path.to_owned())),
        // No openat2 here (or a seccomp filter that hides it).
        Some(libc::ENOSYS | libc::EPERM) => OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(OpenError::Io),
        _ => Err(OpenError::Io(e)),
    }
}

fn refuse_irregular(file_type: &FileType) -> Result<(), OpenError> {
    match irregular_kind(file_type) {
        Some(kind) => Err(OpenError::NotRegular(kind)),
        None => Ok(()),
    }
}

/// Linux ignores `O_NONBLOCK` on regular files, but a file system may not:
/// clear it so reads behave exactly as with a plain open.
fn clear_nonblocking(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is an open descriptor owned by `file` for this whole call;
    // F_GETFL only reads its status flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above; F_SETFL only changes the status flags of `fd`.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(path: &str) -> Option<&'static str> {
        match open_regular(Path::new(path)) {
            Err(OpenError::NotRegular(kind)) => Some(kind),
            Err(e) => panic!("{path}: {e}"),
            Ok(_) => None,
        }
    }

    #[test]
    fn devices_and_directories_are_refused_by_name() {
        assert_eq!(kind("/dev/null"), Some("a character device"));
        assert_eq!(kind("/"), Some("a directory"));
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let path = std::env::temp_dir().join(format!("dsh-sdk-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let c = std::ffi::CString::new(path.to_string_lossy().as_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let refused = kind(&path.to_string_lossy());
        let _ = std::fs::remove_file(&path);
        assert_eq!(refused, Some("a FIFO (named pipe)"));
    }

    #[test]
    fn a_regular_file_opens_blocking() {
        let file = open_regular(Path::new("Cargo.toml")).unwrap();
        // SAFETY: the descriptor is open for the duration of the call.
        let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_NONBLOCK, 0);
        let readable = open_readable(Path::new("Cargo.toml"), Follow::Never).unwrap();
        assert_eq!(readable.pseudo(), None);
        let path = opened_path(readable.file()).unwrap();
        assert_eq!(path, Path::new("Cargo.toml").canonicalize().unwrap());
    }

    #[test]
    fn a_missing_file_is_an_io_not_found() {
        match open_regular(Path::new("/nonexistent/dsh")) {
            Err(OpenError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::NotFound),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_procfs_file_stays_nonblocking_and_is_bounded() {
        let mut f = open_readable(Path::new("/proc/self/status"), Follow::Always).unwrap();
        assert_eq!(f.pseudo(), Some(Pseudo::Proc));
        // SAFETY: the descriptor is open for the duration of the call.
        let flags = unsafe { libc::fcntl(f.file().as_raw_fd(), libc::F_GETFL) };
        assert_ne!(flags & libc::O_NONBLOCK, 0);
        let mut text = String::new();
        f.read_to_string(&mut text).unwrap();
        assert!(text.contains("Pid:"), "{text}");
        let mut rest = Vec::new();
        let mut g = open_readable(Path::new("/proc/self/status"), Follow::Always).unwrap();
        g.left = Some(3);
        g.read_to_end(&mut rest).unwrap();
        assert_eq!(rest.len(), 3);
    }

    #[test]
    fn pseudo_filesystems_are_told_apart() {
        let at = |p: &str| file_system_at(Path::new(p)).unwrap();
        assert_eq!(at("/proc"), FileSystem::Pseudo(Pseudo::Proc));
        assert_eq!(at("/sys"), FileSystem::Pseudo(Pseudo::Sys));
        assert_eq!(at("Cargo.toml"), FileSystem::Ordinary);
    }

    #[test]
    fn a_symlink_is_refused_when_links_are_not_followed() {
        let dir = std::env::temp_dir().join(format!("dsh-sdk-nofollow-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("real"), "x").unwrap();
        std::os::unix::fs::symlink("real", dir.join("link")).unwrap();
        let err = open_readable(&dir.join("link"), Follow::Never).unwrap_err();
        assert!(matches!(err, OpenError::Symlink(_)), "{err}");
        assert!(open_readable(&dir.join("link"), Follow::Always).is_ok());
        let err = open_no_symlinks(&dir.join("link")).unwrap_err();
        assert!(matches!(err, OpenError::Symlink(_)), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
