//! Descriptors the host inherited: whoever started `dsh-host` may have left
//! descriptors open without close-on-exec (a shell's redirections, a
//! parent's pipes, an `O_RDWR` file outside the workspace). Every command
//! and every confined inspector the host starts would inherit them, and a
//! sandbox does not fence a descriptor that is already open. So the host
//! marks all of them close-on-exec before it does anything else; it may
//! still use them itself.

use std::io;

const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// Marks every descriptor from 3 up close-on-exec.
pub fn close_inherited_on_exec() -> io::Result<()> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on
    // descriptors of this process; it takes no pointers.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    // Kernels before 5.11 do not know the flag: set it one by one.
    let dir = std::fs::read_dir("/proc/self/fd")?;
    let fds: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd >= 3)
        .collect();
    for fd in fds {
        // SAFETY: fcntl on a descriptor number; a closed one fails EBADF.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
    Ok(())
}
