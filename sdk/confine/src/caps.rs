//! Dropping every capability of the calling process, with raw system calls
//! only (safe between `fork` and `exec`).
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

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`; version 3 takes two of them.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const NONE: [CapData; 2] = [CapData {
    effective: 0,
    permitted: 0,
    inheritable: 0,
}; 2];

fn header() -> CapHeader {
    CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    }
}

fn errno() -> Option<i32> {
    io::Error::last_os_error().raw_os_error()
}

/// Empties the capability bounding set. Without `CAP_SETPCAP` (not root in
/// its namespace, or after its capabilities went) there is nothing held to
/// drop and the set stays as it is. Async-signal-safe.
pub fn drop_bounding_set() -> io::Result<()> {
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            match errno() {
                // Past the last capability this kernel knows.
                Some(libc::EINVAL) => break,
                // No CAP_SETPCAP: nothing held to drop from here on.
                Some(libc::EPERM) => break,
                _ => return Err(io::Error::last_os_error()),
            }
        }
    }
    Ok(())
}

/// Clears the ambient set (a kernel before 4.3 has none: `EINVAL` is
/// success). Async-signal-safe.
pub fn clear_ambient() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    if rc != 0 && errno() != Some(libc::EINVAL) {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Empties the effective, permitted and inheritable sets. Async-signal-safe.
pub fn clear() -> io::Result<()> {
    let header = header();
    // SAFETY: a valid header and the two data structs version 3 reads.
    if unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, NONE.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Drops every capability of the calling process: bounding, ambient,
/// effective, permitted and inheritable, in that order. Async-signal-safe.
pub fn drop_all() -> io::Result<()> {
    drop_bounding_set()?;
    clear_ambient()?;
    clear()
}

/// Whether the calling process still holds a capability in its effective,
/// permitted or inheritable set.
pub fn any_held() -> io::Result<bool> {
    let mut header = header();
    let mut data = NONE;
    // SAFETY: a valid header and room for the two data structs version 3
    // writes.
    if unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(data
        .iter()
        .any(|d| d.effective != 0 || d.permitted != 0 || d.inheritable != 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::in_forked_child;

    /// `CAP_SYS_ADMIN` (`include/uapi/linux/capability.h`).
    const CAP_SYS_ADMIN: libc::c_int = 21;

    #[test]
    fn a_child_that_drops_everything_holds_nothing_and_cannot_regain_it() {
        let code = in_forked_child(|| {
            if drop_all().is_err() {
                return 10;
            }
            if any_held().unwrap_or(true) {
                return 11;
            }
            // SAFETY: prctl with integer arguments.
            let in_bounding_set =
                unsafe { libc::prctl(libc::PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) };
            // Nothing is left in the bounding set of a process that held
            // CAP_SETPCAP (root); another keeps its set, having nothing.
            // SAFETY: a plain query.
            if in_bounding_set == 1 && unsafe { libc::geteuid() } == 0 {
                return 12;
            }
            0
        });
        assert_eq!(code, 0);
    }
}
