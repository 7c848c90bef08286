//! A sealed in-memory copy of a file (`memfd_create` + seals): nobody, the
//! file's owner included, can change it after it is made, so what the
//! preflight read is exactly what the confined inspector loads. Nothing is
//! left on disk.

use std::fs::File;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

/// The name the copy shows in `/proc/<pid>/maps` (`/memfd:<name>`).
const NAME: &std::ffi::CStr = c"dsh-inspect";

/// Seals that freeze the contents and the size, and the seal set itself.
const SEALS: libc::c_int =
    libc::F_SEAL_WRITE | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// Copies `path` into a new memory file and seals it. The returned file is
/// open for reading and writing (the seals refuse every write).
pub fn copy_of(path: &Path) -> io::Result<File> {
    let mut source = File::open(path)?;
    let mut copy = memfd()?;
    io::copy(&mut source, &mut copy)?;
    // SAFETY: fcntl on a descriptor we own, integer arguments only.
    let rc = unsafe {
        libc::fcntl(
            std::os::fd::AsRawFd::as_raw_fd(&copy),
            libc::F_ADD_SEALS,
            SEALS,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(copy)
}

/// A new close-on-exec, sealable, executable memory file.
fn memfd() -> io::Result<File> {
    let base = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // Kernels since 6.3 may default memory files to non-executable
    // (`vm.memfd_noexec`); ask for an executable one, and fall back for
    // older kernels that do not know the flag.
    for flags in [base | libc::MFD_EXEC, base] {
        // SAFETY: a valid NUL-terminated name and integer flags.
        let fd = unsafe { libc::memfd_create(NAME.as_ptr(), flags) };
        if fd >= 0 {
            // SAFETY: a fresh descriptor nobody else owns.
            return Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EINVAL))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    #[test]
    fn the_copy_has_the_bytes_and_refuses_every_change() {
        let dir = dsh_tempdir::PrivateDir::new("dsh-sealed-test-").unwrap();
        let path = dir.path().join("lib.so");
        std::fs::write(&path, b"library bytes").unwrap();
        let mut copy = copy_of(&path).unwrap();
        // The source changes afterwards; the copy does not.
        std::fs::write(&path, b"rewritten").unwrap();
        copy.rewind().unwrap();
        let mut bytes = Vec::new();
        copy.read_to_end(&mut bytes).unwrap();
        assert_eq!(bytes, b"library bytes");
        assert!(copy.write_all(b"x").is_err());
        assert!(copy.set_len(0).is_err());
    }
}
