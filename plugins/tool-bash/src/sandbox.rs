//! Write confinement for a child process: bubblewrap when installed, else
//! Landlock. Nothing here allocates after `fork`: the Landlock ruleset is
//! built in the parent; the child only adds the rules of the mounts it made
//! itself ([`allow_beneath`]) and calls `prctl` and
//! `landlock_restrict_self`.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

const SYS_CREATE_RULESET: libc::c_long = 444;
const SYS_ADD_RULE: libc::c_long = 445;
const SYS_RESTRICT_SELF: libc::c_long = 446;
const RULE_PATH_BENEATH: libc::c_int = 1;

// Filesystem rights that mutate (reads stay unrestricted).
const WRITE_FILE: u64 = 1 << 1;
const REMOVE_DIR: u64 = 1 << 4;
const REMOVE_FILE: u64 = 1 << 5;
const MAKE_ALL: u64 = 0b111_1111 << 6; // char, dir, reg, sock, fifo, block, sym
const REFER: u64 = 1 << 13;
const TRUNCATE: u64 = 1 << 14;

/// The Landlock ABI version, if the kernel has Landlock.
pub fn landlock_abi() -> Option<i64> {
    // SAFETY: the version query takes no pointers.
    let v = unsafe { libc::syscall(SYS_CREATE_RULESET, std::ptr::null::<u8>(), 0usize, 1u32) };
    (v > 0).then_some(v)
}

/// `bwrap` on the PATH.
pub fn bwrap() -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join("bwrap"))
        .find(|p| p.is_file())
}

fn handled(abi: i64) -> u64 {
    let mut h = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_ALL;
    if abi >= 2 {
        h |= REFER;
    }
    if abi >= 3 {
        h |= TRUNCATE;
    }
    h
}

#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// A Landlock ruleset allowing writes only beneath some directories and to
/// some single files.
pub struct Landlock {
    ruleset: OwnedFd,
    /// The rights a rule on a directory grants (every handled right).
    dir_rights: u64,
}

impl Landlock {
    /// Builds the ruleset (in the parent): every write right beneath
    /// `dirs`, writing (not creating or removing) `files`. Paths that do
    /// not exist are left out.
    pub fn new(abi: i64, dirs: &[PathBuf], files: &[PathBuf]) -> std::io::Result<Landlock> {
        let attr: u64 = handled(abi);
        // SAFETY: a valid attr of 8 bytes (handled_access_fs only).
        let fd = unsafe { libc::syscall(SYS_CREATE_RULESET, &attr as *const u64, 8usize, 0u32) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh fd we own.
        let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let rules = Landlock {
            ruleset,
            dir_rights: attr,
        };
        let file_rights = attr & (WRITE_FILE | TRUNCATE);
        let all = dirs
            .iter()
            .map(|d| (d, attr))
            .chain(files.iter().map(|f| (f, file_rights)));
        for (path, rights) in all {
            let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
                continue;
            };
            // SAFETY: a valid C string and our own ruleset.
            match unsafe { allow_beneath(rules.fd(), &c, rights) } {
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                other => other?,
            }
        }
        Ok(rules)
    }

    /// The raw fd, for the child.
    pub fn fd(&self) -> i32 {
        self.ruleset.as_raw_fd()
    }

    /// The rights a rule on a directory grants (for [`allow_beneath`]).
    pub fn dir_rights(&self) -> u64 {
        self.dir_rights
    }
}

/// Adds a rule granting `rights` beneath `path` (a directory, or a single
/// file for file rights) to `ruleset`. Async-signal-safe: the child uses it
/// for the mounts it made itself (a rule holds an inode, and a fresh mount's
/// root is a new one).
///
/// # Safety
///
/// `ruleset` must be a Landlock ruleset descriptor.
pub unsafe fn allow_beneath(ruleset: i32, path: &CStr, rights: u64) -> std::io::Result<()> {
    let pfd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
    if pfd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let rule = PathBeneath {
        allowed_access: rights,
        parent_fd: pfd,
    };
    let rc = libc::syscall(
        SYS_ADD_RULE,
        ruleset,
        RULE_PATH_BENEATH,
        &rule as *const PathBeneath,
        0u32,
    );
    let err = std::io::Error::last_os_error();
    libc::close(pfd);
    if rc < 0 {
        return Err(err);
    }
    Ok(())
}

/// In the child, after fork: applies the ruleset. Async-signal-safe.
pub fn restrict_self(fd: i32) -> std::io::Result<()> {
    // SAFETY: plain syscalls with integer arguments.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::syscall(SYS_RESTRICT_SELF, fd, 0u32) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
