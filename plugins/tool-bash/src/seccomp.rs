//! The seccomp filter of a command without network: no unix sockets of its
//! own (so no connecting to the host's, `docker.sock` and the like, which a
//! read-only mount does not stop), socket pairs of the stream and seqpacket
//! types only (a datagram socket can be re-pointed at a host socket, and the
//! kernel turns a `SOCK_RAW` pair into a datagram one), no VM sockets, no
//! `io_uring` (it makes and connects sockets without the syscalls filtered
//! here), and, where the command shares the host's network namespace, no IP
//! socket either.
//!
//! The program is built in the parent with `dsh_confine::seccomp` (which
//! also puts the architecture check first); the child only installs it (one
//! syscall), and bubblewrap reads it from a memfd (`--seccomp FD`).

use dsh_confine::seccomp::{Action, Arg, Builder, Filter};

/// The socket type bits of `socketpair`'s type (the rest are flags).
const SOCK_TYPE_MASK: u32 = 0xf;

/// Which sockets a command without network may still make.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Sockets {
    /// It has a network namespace of its own: IP sockets reach only its own
    /// loopback; unix and VM sockets are refused.
    OwnNetwork,
    /// It shares the host's network namespace: only netlink sockets (which
    /// change nothing without capabilities).
    NetlinkOnly,
}

/// The filter of a command without network, or `None` on an architecture
/// without seccomp numbers.
pub fn network_off(sockets: Sockets) -> std::io::Result<Option<Filter>> {
    let Some(builder) = Builder::new() else {
        return Ok(None);
    };
    let deny = Action::Errno(libc::EPERM);
    let builder = builder
        .calls(&[libc::SYS_io_uring_setup], deny)
        // socketpair: stream and seqpacket pairs only, by allow-list (the
        // kernel makes a datagram pair of `SOCK_RAW`, and of any type it
        // may map onto one later).
        .argument(
            libc::SYS_socketpair,
            Arg::low(1).masked(SOCK_TYPE_MASK),
            &[
                (libc::SOCK_STREAM as u32, Action::Allow),
                (libc::SOCK_SEQPACKET as u32, Action::Allow),
            ],
            deny,
        );
    let builder = match sockets {
        Sockets::OwnNetwork => builder.argument(
            libc::SYS_socket,
            Arg::low(0),
            &[(libc::AF_UNIX as u32, deny), (libc::AF_VSOCK as u32, deny)],
            Action::Allow,
        ),
        Sockets::NetlinkOnly => builder.argument(
            libc::SYS_socket,
            Arg::low(0),
            &[(libc::AF_NETLINK as u32, Action::Allow)],
            deny,
        ),
    };
    builder.build(Action::Allow).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_confine::seccomp::Threads;

    #[test]
    fn both_programs_build() {
        for s in [Sockets::OwnNetwork, Sockets::NetlinkOnly] {
            assert!(network_off(s).is_ok());
        }
    }

    #[test]
    fn a_child_with_the_filter_cannot_make_a_unix_socket_but_can_make_a_pipe_pair() {
        let Some(f) = network_off(Sockets::OwnNetwork).unwrap() else {
            return;
        };
        // SAFETY: fork in a test; the child only makes raw syscalls and
        // leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: raw syscalls in the child.
            unsafe {
                if dsh_confine::no_new_privs().is_err() || f.install(Threads::Calling).is_err() {
                    libc::_exit(10);
                }
                if libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) >= 0 {
                    libc::_exit(11);
                }
                if libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) < 0 {
                    libc::_exit(12);
                }
                let mut pair = [0i32; 2];
                if libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, pair.as_mut_ptr()) != 0 {
                    libc::_exit(13);
                }
                if libc::socketpair(libc::AF_UNIX, libc::SOCK_DGRAM, 0, pair.as_mut_ptr()) == 0 {
                    libc::_exit(14);
                }
                // SOCK_RAW is a datagram pair to the kernel.
                if libc::socketpair(libc::AF_UNIX, libc::SOCK_RAW, 0, pair.as_mut_ptr()) == 0 {
                    libc::_exit(15);
                }
                let seq = libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC;
                if libc::socketpair(libc::AF_UNIX, seq, 0, pair.as_mut_ptr()) != 0 {
                    libc::_exit(16);
                }
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "status {status}");
        assert_eq!(libc::WEXITSTATUS(status), 0);
    }
}
