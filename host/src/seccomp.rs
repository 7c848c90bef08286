//! The seccomp filter of the confined inspector (see [`crate::confine`]):
//! the system calls an inspected library's constructors have no use for and
//! that would reach beyond the process are refused with `EPERM` — sockets
//! (no network, no unix sockets either), running programs, new processes
//! (threads stay allowed), tracing or reading other processes, signals to
//! other processes, `io_uring` (it would bypass this filter), namespaces
//! and mounts, BPF, perf, keyrings, modules. A call made for another
//! architecture's ABI kills the process.
//!
//! A deny list, not an allow list: `dlopen`, std and the plugin's own
//! initialization use a wide set of calls, and the other layers (Landlock,
//! no capabilities, rlimits) bound what the rest can do.

use std::io;

use dsh_confine::seccomp::{Action, Arg, Builder, Filter, Threads};

const CLONE_THREAD: u32 = libc::CLONE_THREAD as u32;

/// Refused with EPERM whatever their arguments.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const DENIED: &[libc::c_long] = &[
    libc::SYS_socket,
    libc::SYS_socketpair,
    libc::SYS_execve,
    libc::SYS_execveat,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_fork,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_vfork,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_send_signal,
    libc::SYS_pidfd_getfd,
    libc::SYS_tkill,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_reboot,
    libc::SYS_acct,
    libc::SYS_swapon,
    libc::SYS_swapoff,
];

/// Signal calls whose first argument is a process (or thread group): only
/// this process itself (or 0, its own process group: a session of one) may
/// be named.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const SIGNALS: &[libc::c_long] = &[
    libc::SYS_kill,
    libc::SYS_tgkill,
    libc::SYS_rt_sigqueueinfo,
    libc::SYS_rt_tgsigqueueinfo,
];

/// The filter program for a process whose pid is `pid`, or `None` on an
/// architecture without one.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn program(pid: u32) -> io::Result<Option<Filter>> {
    let Some(builder) = Builder::new() else {
        return Ok(None);
    };
    let deny = Action::Errno(libc::EPERM);
    let mut builder = builder
        .calls(DENIED, deny)
        // clone3 cannot be inspected (its flags are behind a pointer):
        // ENOSYS makes glibc fall back to clone, whose flags are checked
        // below.
        .calls(&[libc::SYS_clone3], Action::Errno(libc::ENOSYS))
        // clone: threads only.
        .argument(
            libc::SYS_clone,
            Arg::low(0).masked(CLONE_THREAD),
            &[(CLONE_THREAD, Action::Allow)],
            deny,
        );
    for nr in SIGNALS {
        builder = builder.argument(
            *nr,
            Arg::low(0),
            &[(pid, Action::Allow), (0, Action::Allow)],
            deny,
        );
    }
    builder.build(Action::Allow).map(Some)
}

/// No filter for this architecture.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn program(_pid: u32) -> io::Result<Option<Filter>> {
    Ok(None)
}

/// Installs the filter on every thread of this process. Needs
/// `no_new_privs` set first. Refused on an architecture without a filter:
/// the inspector then refuses to run.
pub fn install() -> io::Result<()> {
    match program(std::process::id())? {
        Some(filter) => filter.install(Threads::All),
        None => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "no seccomp filter for this architecture",
        )),
    }
}

#[cfg(test)]
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod tests {
    use super::*;

    fn errno() -> Option<i32> {
        io::Error::last_os_error().raw_os_error()
    }

    /// What the child finds: 0 when every refusal and every allowance is
    /// as the module doc says.
    fn probe(parent: libc::pid_t) -> i32 {
        // SAFETY: raw system calls with integer arguments in the child.
        unsafe {
            if libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) != -1
                || errno() != Some(libc::EPERM)
            {
                return 11;
            }
            if libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) != -1
                || errno() != Some(libc::EPERM)
            {
                return 12;
            }
            if libc::syscall(libc::SYS_clone3, 0, 0) != -1 || errno() != Some(libc::ENOSYS) {
                return 13;
            }
            // The process the filter was made for may be signalled; no
            // other may.
            if libc::kill(parent, 0) != 0 {
                return 14;
            }
            if libc::kill(1, 0) != -1 || errno() != Some(libc::EPERM) {
                return 15;
            }
        }
        0
    }

    #[test]
    fn a_child_under_the_filter_makes_no_socket_process_or_outside_signal() {
        // SAFETY: a plain query.
        let me = unsafe { libc::getpid() };
        let filter = program(me as u32).unwrap().unwrap();
        // SAFETY: the child makes raw system calls on memory prepared
        // before the fork and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = match dsh_confine::no_new_privs().and_then(|()| filter.install(Threads::All))
            {
                Ok(()) => probe(me),
                Err(_) => 10,
            };
            // SAFETY: leaving the forked child.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "status {status}");
        assert_eq!(libc::WEXITSTATUS(status), 0);
    }
}
