//! The mechanisms that confine a process, written once for the host's
//! confined inspector and the `bash` tool's sandbox: seccomp-BPF programs
//! ([`seccomp`]), Landlock rulesets ([`landlock`]) and dropping every
//! capability ([`caps`]). Which calls are refused and which paths are
//! allowed is the caller's policy, never this crate's.
//!
//! What runs after `fork` — [`seccomp::Filter::install`] on the calling
//! thread, [`landlock::RawRuleset`]'s methods, the functions of [`caps`],
//! [`no_new_privs`] — makes raw system calls on memory prepared before and
//! never allocates, so it is safe between `fork` and `exec`. Building a
//! program or a ruleset allocates and belongs in the parent.

use std::io;

pub mod caps;
pub mod landlock;
pub mod seccomp;

/// Sets `no_new_privs` on the calling process: nothing it runs gains
/// privileges at `exec` (setuid bits and file capabilities are ignored),
/// and it may install a seccomp filter or restrict itself with Landlock
/// without `CAP_SYS_ADMIN`. Cannot be undone; setting it again is harmless.
/// Async-signal-safe.
pub fn no_new_privs() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Forks, runs `child` in the child (which leaves with `_exit` of what it
/// returns) and returns the child's exit code. For tests whose child makes
/// raw system calls only.
#[cfg(test)]
pub(crate) fn in_forked_child(child: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the test's child only makes raw system calls on memory
    // prepared before the fork, then leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
    if pid == 0 {
        let code = child();
        // SAFETY: leaving the forked child without running anything else.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "the child died: status {status}");
    libc::WEXITSTATUS(status)
}
