//! Opening a file for reading without ever blocking on something that is not
//! a regular file: opening a FIFO for reading blocks until a writer appears
//! (forever, on a blocking thread that then never returns), and reading a
//! character device such as `/dev/zero` never ends.
//!
//! [`open_regular`] checks the path's metadata first (a clear error without
//! opening anything), opens with `O_NONBLOCK` (so a FIFO swapped in after the
//! check cannot block the open) and `O_NOCTTY`, then checks the opened
//! descriptor itself, which is the check that counts.

use std::fs::{File, FileType, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Why [`open_regular`] refused or failed.
#[derive(Debug)]
pub enum OpenError {
    /// The path names something other than a regular file; the text says
    /// what, e.g. `"a FIFO (named pipe)"`.
    NotRegular(&'static str),
    /// Metadata, open or `fcntl` failed.
    Io(io::Error),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::NotRegular(kind) => write!(f, "is {kind}"),
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
    let before = std::fs::metadata(path).map_err(OpenError::Io)?;
    refuse_irregular(&before.file_type())?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(OpenError::Io)?;
    let opened = file.metadata().map_err(OpenError::Io)?;
    refuse_irregular(&opened.file_type())?;
    clear_nonblocking(&file).map_err(OpenError::Io)?;
    Ok(file)
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
            Err(OpenError::Io(e)) => panic!("{path}: {e}"),
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
    }

    #[test]
    fn a_missing_file_is_an_io_not_found() {
        match open_regular(Path::new("/nonexistent/dsh")) {
            Err(OpenError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::NotFound),
            other => panic!("{other:?}"),
        }
    }
}
