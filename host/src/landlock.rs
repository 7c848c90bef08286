//! Landlock for the confined inspector (see [`crate::confine`]): no file may
//! be created, written, truncated, renamed, linked or removed anywhere, no
//! device may be `ioctl`ed (ABI 5: no `TIOCSTI`), no TCP port bound or
//! connected (ABI 4), and no signal sent or abstract socket reached
//! outside the process (ABI 6). Reading stays allowed: `dlopen` needs the
//! library's dependencies. Applies to the calling process and everything
//! it starts; it cannot be undone.
//!
//! The constants are the kernel's (`include/uapi/linux/landlock.h`).

use std::io;
use std::os::fd::AsRawFd;
use std::os::fd::{FromRawFd, OwnedFd};

const CREATE_RULESET_VERSION: u32 = 1 << 0;

// Filesystem rights that change something (reads are not handled).
const FS_WRITE_FILE: u64 = 1 << 1;
const FS_REMOVE_DIR: u64 = 1 << 4;
const FS_REMOVE_FILE: u64 = 1 << 5;
/// MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM.
const FS_MAKE_ALL: u64 = 0b111_1111 << 6;
const FS_REFER: u64 = 1 << 13;
const FS_TRUNCATE: u64 = 1 << 14;
const FS_IOCTL_DEV: u64 = 1 << 15;

const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;

const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

/// `struct landlock_ruleset_attr`; the kernel reads as many fields as the
/// size passed says (by ABI version).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// The kernel's Landlock ABI version, `None` without Landlock.
pub fn abi() -> Option<i64> {
    // SAFETY: the version query takes no pointer (NULL, size 0).
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    (v > 0).then_some(v)
}

/// Restricts this process as the module doc says, with every right the
/// running kernel's ABI knows. Needs `no_new_privs` set first. Returns the
/// ABI version used.
pub fn forbid_changes() -> io::Result<i64> {
    let abi = abi().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            "Landlock is not available (a kernel before 5.13, or Landlock not in the lsm= list)",
        )
    })?;
    let mut fs = FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_ALL;
    if abi >= 2 {
        fs |= FS_REFER;
    }
    if abi >= 3 {
        fs |= FS_TRUNCATE;
    }
    if abi >= 5 {
        fs |= FS_IOCTL_DEV;
    }
    let attr = RulesetAttr {
        handled_access_fs: fs,
        handled_access_net: if abi >= 4 {
            NET_BIND_TCP | NET_CONNECT_TCP
        } else {
            0
        },
        scoped: if abi >= 6 {
            SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        } else {
            0
        },
    };
    // Only the fields this kernel knows: a larger size with unknown
    // fields set would be refused.
    let size = match abi {
        1..=3 => 8usize,
        4 | 5 => 16,
        _ => std::mem::size_of::<RulesetAttr>(),
    };
    // SAFETY: `attr` is a valid ruleset attribute of at least `size` bytes.
    let fd = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, &attr, size, 0u32) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: a fresh descriptor nobody else owns.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd) };
    // No rules: every handled right is refused everywhere.
    // SAFETY: a valid ruleset descriptor, no flags.
    let rc = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(abi)
}
