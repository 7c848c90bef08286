//! Dropping every capability before a command runs, with raw syscalls only
//! (it runs between `fork` and `exec`).
//!
//! The order matters: the bounding set is emptied first, while
//! `CAP_SETPCAP` is still held (`PR_CAPBSET_DROP` needs it); then the
//! ambient set is cleared; then `capset` empties the effective, permitted
//! and inheritable sets. With the bounding and inheritable sets empty, an
//! `exec` gains nothing either, not even as uid 0 or through a setuid or
//! file-capability binary.

use std::io;

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Drops every capability of the calling process: bounding, ambient,
/// effective, permitted and inheritable.
///
/// Emptying the bounding set needs `CAP_SETPCAP`; a process without it
/// (not root in its namespace) has no capability to lose there and keeps
/// that set as it is. Async-signal-safe.
///
/// # Safety
///
/// Only raw syscalls on stack memory: safe to call between `fork` and
/// `exec`; it changes the calling process for good.
pub unsafe fn drop_all() -> io::Result<()> {
    for cap in 0..64 {
        if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
            match *libc::__errno_location() {
                // Past the last capability this kernel knows.
                libc::EINVAL => break,
                // No CAP_SETPCAP: nothing held to drop from here on.
                libc::EPERM => break,
                e => return Err(io::Error::from_raw_os_error(e)),
            }
        }
    }
    // EINVAL: a kernel before ambient capabilities (4.3) has none to clear.
    if libc::prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL,
        0,
        0,
        0,
    ) != 0
        && *libc::__errno_location() != libc::EINVAL
    {
        return Err(io::Error::last_os_error());
    }
    let header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    if libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
