//! The seccomp filter of a command without network: no unix sockets of its
//! own (so no connecting to the host's, `docker.sock` and the like, which a
//! read-only mount does not stop), no
//! datagram socket pairs (a datagram socket can be re-pointed at a host
//! socket), no VM sockets, no `io_uring` (it makes and connects sockets
//! without the syscalls filtered here), and, where the command shares the
//! host's network namespace, no IP socket either.
//!
//! The program is built in the parent; the child only installs it
//! ([`Filter::install`], one syscall), and bubblewrap reads it from a
//! memfd ([`Filter::memfd`], `--seccomp FD`).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
#[cfg(target_arch = "x86_64")]
const JGE_K: u16 = 0x35;
const AND_K: u16 = 0x54;
const RET_K: u16 = 0x06;

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;

// Offsets into `struct seccomp_data` (the low word of an argument on a
// little-endian machine).
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARG0: u32 = 16;
const ARG1: u32 = 24;

/// The socket type bits of `socketpair`'s type (the rest are flags).
const SOCK_TYPE_MASK: u32 = 0xf;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

/// x32 syscalls on x86_64 (the same calls under other numbers).
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// A seccomp-BPF program.
pub struct Filter {
    program: Vec<libc::sock_filter>,
}

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

impl Filter {
    /// The filter of a command without network, or `None` on an
    /// architecture this file has no numbers for.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    pub fn network_off(sockets: Sockets) -> Option<Filter> {
        let mut p = vec![
            stmt(LD_W_ABS, ARCH),
            jump(JEQ_K, AUDIT_ARCH, 1, 0),
            // Another ABI (i386 on x86_64) has other numbers: never allowed.
            stmt(RET_K, libc::SECCOMP_RET_KILL_PROCESS),
            stmt(LD_W_ABS, NR),
        ];
        #[cfg(target_arch = "x86_64")]
        p.extend([jump(JGE_K, X32_SYSCALL_BIT, 0, 1), stmt(RET_K, RET_EPERM)]);
        p.extend([
            jump(JEQ_K, libc::SYS_io_uring_setup as u32, 0, 1),
            stmt(RET_K, RET_EPERM),
            // socketpair: stream and seqpacket pairs only.
            jump(JEQ_K, libc::SYS_socketpair as u32, 0, 5),
            stmt(LD_W_ABS, ARG1),
            stmt(AND_K, SOCK_TYPE_MASK),
            jump(JEQ_K, libc::SOCK_DGRAM as u32, 0, 1),
            stmt(RET_K, RET_EPERM),
            stmt(RET_K, RET_ALLOW),
        ]);
        let socket: Vec<libc::sock_filter> = match sockets {
            Sockets::OwnNetwork => vec![
                stmt(LD_W_ABS, ARG0),
                jump(JEQ_K, libc::AF_UNIX as u32, 0, 1),
                stmt(RET_K, RET_EPERM),
                jump(JEQ_K, libc::AF_VSOCK as u32, 0, 1),
                stmt(RET_K, RET_EPERM),
                stmt(RET_K, RET_ALLOW),
            ],
            Sockets::NetlinkOnly => vec![
                stmt(LD_W_ABS, ARG0),
                jump(JEQ_K, libc::AF_NETLINK as u32, 0, 1),
                stmt(RET_K, RET_ALLOW),
                stmt(RET_K, RET_EPERM),
            ],
        };
        p.push(jump(JEQ_K, libc::SYS_socket as u32, 0, socket.len() as u8));
        p.extend(socket);
        p.push(stmt(RET_K, RET_ALLOW));
        Some(Filter { program: p })
    }

    /// No filter on this architecture.
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    pub fn network_off(_sockets: Sockets) -> Option<Filter> {
        None
    }

    /// Installs the filter on the calling thread. The caller must have set
    /// `PR_SET_NO_NEW_PRIVS` (or hold `CAP_SYS_ADMIN`).
    ///
    /// # Safety
    ///
    /// One syscall on memory prepared before `fork`: safe between `fork`
    /// and `exec`; it restricts the calling process for good.
    pub unsafe fn install(&self) -> io::Result<()> {
        let prog = libc::sock_fprog {
            len: self.program.len() as libc::c_ushort,
            filter: self.program.as_ptr() as *mut libc::sock_filter,
        };
        if libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
            0,
            0,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The program's bytes in a memfd (close-on-exec; the child
    /// clears that for bubblewrap's `--seccomp FD`), read from offset 0.
    pub fn memfd(&self) -> io::Result<OwnedFd> {
        // SAFETY: a static name and flags.
        let fd = unsafe { libc::memfd_create(c"dsh-bash-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let file = std::fs::File::from(fd);
        file.write_all_at(&self.bytes(), 0)?;
        Ok(OwnedFd::from(file))
    }

    /// The program as `struct sock_filter`s in memory.
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.program.len() * 8);
        for i in &self.program {
            out.extend_from_slice(&i.code.to_ne_bytes());
            out.push(i.jt);
            out.push(i.jf);
            out.extend_from_slice(&i.k.to_ne_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every jump lands inside the program and it ends in a return.
    fn well_formed(f: &Filter) {
        let p = &f.program;
        for (i, ins) in p.iter().enumerate() {
            if ins.code & 0x07 == 0x05 {
                assert!(i + 1 + (ins.jt as usize) < p.len(), "jt of {i}");
                assert!(i + 1 + (ins.jf as usize) < p.len(), "jf of {i}");
            }
        }
        assert_eq!(p.last().map(|i| i.code), Some(RET_K));
    }

    #[test]
    fn both_programs_are_well_formed_and_serialize_to_sock_filters() {
        for s in [Sockets::OwnNetwork, Sockets::NetlinkOnly] {
            let Some(f) = Filter::network_off(s) else {
                return;
            };
            well_formed(&f);
            assert_eq!(f.bytes().len(), f.program.len() * 8);
        }
    }

    #[test]
    fn a_child_with_the_filter_cannot_make_a_unix_socket_but_can_make_a_pipe_pair() {
        let Some(f) = Filter::network_off(Sockets::OwnNetwork) else {
            return;
        };
        // SAFETY: fork in a test; the child only makes raw syscalls and
        // leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: raw syscalls in the child.
            unsafe {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                if f.install().is_err() {
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
