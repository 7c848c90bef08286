//! Bringing `lo` up in a fresh network namespace, with raw syscalls only
//! (it runs between `fork` and `exec`): a command without network still
//! has a loopback of its own, for its own servers and tests.

use std::io;

/// `struct ifreq` with the flags member of its union (40 bytes).
#[repr(C)]
struct IfReqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Sets `IFF_UP` on `lo` of the calling process's network namespace (it
/// needs `CAP_NET_ADMIN` there). Async-signal-safe.
///
/// # Safety
///
/// Only raw syscalls on stack memory: safe between `fork` and `exec`.
pub unsafe fn up() -> io::Result<()> {
    let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
    if sock < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut req = IfReqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: 0,
        _pad: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    let mut rc = libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req as *mut IfReqFlags);
    if rc == 0 {
        req.flags |= libc::IFF_UP as libc::c_short;
        rc = libc::ioctl(sock, libc::SIOCSIFFLAGS, &mut req as *mut IfReqFlags);
    }
    let err = io::Error::last_os_error();
    libc::close(sock);
    if rc != 0 {
        return Err(err);
    }
    Ok(())
}
