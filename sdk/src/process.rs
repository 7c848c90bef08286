//! Child processes for plugins, within the plugin rules: `std::process`,
//! always waited (on a blocking thread, or through a pidfd), so no signal
//! handler is ever installed (tokio's `process` feature would register
//! SIGCHLD handling).

mod launch;
mod piped;
mod spawn;

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Output};

pub use launch::Launch;
pub use piped::{spawn_piped, Piped};

/// A pidfd of process `pid` (readable once it exits), or none where the
/// kernel has no `pidfd_open` or the process is gone.
pub fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: pidfd_open takes a pid and flags.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: a fresh descriptor this call owns.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Runs `command` to completion on the blocking pool and returns its output.
pub async fn output(mut command: Command) -> std::io::Result<Output> {
    tokio::task::spawn_blocking(move || command.output())
        .await
        .map_err(std::io::Error::other)?
}
