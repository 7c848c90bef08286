//! Seccomp-BPF programs, built from rules in the parent and installed with
//! one system call (safe between `fork` and `exec`), or handed to
//! bubblewrap in a memory file (`--seccomp FD`).
//!
//! Every program starts with the architecture check: a call made for
//! another ABI (i386 on x86_64: the same calls under other numbers) kills
//! the process, and x32 calls on x86_64 are refused with `EPERM`. Then come
//! the rules in the order they were added, each either a list of calls
//! with one action or one call whose argument is compared with values; the
//! first rule that matches a call decides. A call no rule matches gets the
//! default action given to [`Builder::build`].
//!
//! Arguments are compared on their low 32 bits (the targets here are
//! little-endian), which covers flags, families and process ids.

use std::ffi::CStr;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

// Classic BPF (`include/uapi/linux/filter.h`, `bpf_common.h`).
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
#[cfg(target_arch = "x86_64")]
const JGE_K: u16 = 0x35;
const AND_K: u16 = 0x54;
const RET_K: u16 = 0x06;
#[cfg(test)]
const CLASS_MASK: u16 = 0x07;
#[cfg(test)]
const CLASS_JMP: u16 = 0x05;

/// `BPF_MAXINSNS`: the longest program the kernel takes.
const MAX_INSTRUCTIONS: usize = 4096;

// Return values (`include/uapi/linux/seccomp.h`).
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_ALLOW: u32 = 0x7fff_0000;
/// The errno carried by `RET_ERRNO` (`SECCOMP_RET_DATA`).
const RET_DATA: u32 = 0xffff;

// Offsets in `struct seccomp_data`: nr, arch, instruction pointer, args.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARGS: u32 = 16;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// x32 system calls carry this bit on x86_64.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// What a program does with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The call runs.
    Allow,
    /// The call fails with this errno without running.
    Errno(i32),
    /// The whole process is killed.
    KillProcess,
}

impl Action {
    fn ret(self) -> u32 {
        match self {
            Action::Allow => RET_ALLOW,
            Action::Errno(errno) => RET_ERRNO | (errno as u32 & RET_DATA),
            Action::KillProcess => RET_KILL_PROCESS,
        }
    }
}

/// The part of a call's argument a rule compares: the low 32 bits of
/// argument `index` (0 to 5), ANDed with a mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arg {
    index: u32,
    mask: u32,
}

impl Arg {
    /// The low 32 bits of argument `index` (0 to 5), whole.
    pub const fn low(index: u32) -> Arg {
        Arg {
            index,
            mask: u32::MAX,
        }
    }

    /// Only the bits of `mask` (a socket type without its flags, one
    /// flag of a set).
    pub const fn masked(self, mask: u32) -> Arg {
        Arg { mask, ..self }
    }

    /// The offset of the argument's low word in `struct seccomp_data` on a
    /// little-endian machine.
    fn offset(self) -> u32 {
        OFF_ARGS + 8 * self.index
    }
}

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

/// A program being built (see the module doc).
pub struct Builder {
    program: Vec<libc::sock_filter>,
    /// A rule too long for a BPF jump, reported by [`Builder::build`].
    too_long: Option<libc::c_long>,
}

impl Builder {
    /// A program for this architecture, starting with the architecture
    /// check; `None` on an architecture this crate has no numbers for.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    pub fn new() -> Option<Builder> {
        let mut program = vec![
            stmt(LD_W_ABS, OFF_ARCH),
            jump(JEQ_K, AUDIT_ARCH, 1, 0),
            stmt(RET_K, RET_KILL_PROCESS),
            stmt(LD_W_ABS, OFF_NR),
        ];
        #[cfg(target_arch = "x86_64")]
        program.extend([
            jump(JGE_K, X32_SYSCALL_BIT, 0, 1),
            stmt(RET_K, Action::Errno(libc::EPERM).ret()),
        ]);
        Some(Builder {
            program,
            too_long: None,
        })
    }

    /// No program on this architecture.
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    pub fn new() -> Option<Builder> {
        None
    }

    /// `action` for each call of `calls` (`libc::SYS_*`), whatever its
    /// arguments.
    pub fn calls(mut self, calls: &[libc::c_long], action: Action) -> Builder {
        for nr in calls {
            self.program
                .extend([jump(JEQ_K, *nr as u32, 0, 1), stmt(RET_K, action.ret())]);
        }
        self
    }

    /// For call `nr`: `arg` compared with each case's value in turn, the
    /// action of the first that is equal, `otherwise` when none is.
    pub fn argument(
        mut self,
        nr: libc::c_long,
        arg: Arg,
        cases: &[(u32, Action)],
        otherwise: Action,
    ) -> Builder {
        let mut body = vec![stmt(LD_W_ABS, arg.offset())];
        if arg.mask != u32::MAX {
            body.push(stmt(AND_K, arg.mask));
        }
        for (value, action) in cases {
            body.extend([jump(JEQ_K, *value, 0, 1), stmt(RET_K, action.ret())]);
        }
        // Every path of the body returns, so the call number the next rule
        // compares is never needed again after this load.
        body.push(stmt(RET_K, otherwise.ret()));
        let Ok(skip) = u8::try_from(body.len()) else {
            self.too_long = Some(nr);
            return self;
        };
        self.program.push(jump(JEQ_K, nr as u32, 0, skip));
        self.program.extend(body);
        self
    }

    /// The program, ending in `default` for every call no rule matched.
    /// Fails when a rule or the program is longer than BPF allows.
    pub fn build(mut self, default: Action) -> io::Result<Filter> {
        if let Some(nr) = self.too_long {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the seccomp rule of call {nr} has too many cases for a BPF jump"),
            ));
        }
        self.program.push(stmt(RET_K, default.ret()));
        if self.program.len() > MAX_INSTRUCTIONS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the seccomp program has {} instructions; the kernel takes at most {MAX_INSTRUCTIONS}",
                    self.program.len()
                ),
            ));
        }
        Ok(Filter {
            program: self.program,
        })
    }
}

/// Which threads a filter is installed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// The calling thread (and what it starts): a forked child, which has
    /// one.
    Calling,
    /// Every thread of the process (`SECCOMP_FILTER_FLAG_TSYNC`).
    All,
}

/// A built seccomp-BPF program.
pub struct Filter {
    program: Vec<libc::sock_filter>,
}

impl Filter {
    /// Installs the filter for good. The process must have set
    /// [`crate::no_new_privs`] first (or hold `CAP_SYS_ADMIN`).
    ///
    /// With [`Threads::Calling`] it is one system call on memory prepared
    /// before, and never allocates: safe between `fork` and `exec`. With
    /// [`Threads::All`], a thread that cannot be synchronized (it has a
    /// filter of its own) is an error whose message names it.
    pub fn install(&self, threads: Threads) -> io::Result<()> {
        let prog = libc::sock_fprog {
            // At most MAX_INSTRUCTIONS (checked by `Builder::build`).
            len: self.program.len() as libc::c_ushort,
            filter: self.program.as_ptr().cast_mut(),
        };
        let flags = match threads {
            Threads::Calling => 0,
            Threads::All => libc::SECCOMP_FILTER_FLAG_TSYNC,
        };
        // SAFETY: `prog` points to the program, alive for the call; the
        // kernel copies it.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                flags,
                &prog as *const libc::sock_fprog,
            )
        };
        match rc {
            0 => Ok(()),
            tid if tid > 0 => Err(io::Error::other(format!(
                "thread {tid} has a seccomp filter of its own and cannot take this one"
            ))),
            _ => Err(io::Error::last_os_error()),
        }
    }

    /// The program's bytes (`struct sock_filter`s) in a memory file named
    /// `name`, read from offset 0, close-on-exec: for bubblewrap's
    /// `--seccomp FD` (clear close-on-exec in the child that runs it).
    pub fn memfd(&self, name: &CStr) -> io::Result<OwnedFd> {
        // SAFETY: a NUL-terminated name and flags.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
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
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod tests {
    use super::*;
    use crate::in_forked_child;
    use std::io::Read;

    /// Refuses `getppid` (EPERM), and `socket` of `AF_UNIX` (EACCES) and of
    /// `AF_PACKET` (ENOSYS, under a mask) while other families work.
    fn sample() -> Filter {
        Builder::new()
            .unwrap()
            .calls(&[libc::SYS_getppid], Action::Errno(libc::EPERM))
            .argument(
                libc::SYS_socket,
                Arg::low(0).masked(0xff),
                &[
                    (libc::AF_UNIX as u32, Action::Errno(libc::EACCES)),
                    (libc::AF_PACKET as u32, Action::Errno(libc::ENOSYS)),
                ],
                Action::Allow,
            )
            .build(Action::Allow)
            .unwrap()
    }

    fn errno() -> i32 {
        io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    #[test]
    fn every_jump_lands_inside_the_program_and_it_ends_by_returning() {
        let p = sample().program;
        for (i, ins) in p.iter().enumerate() {
            if ins.code & CLASS_MASK == CLASS_JMP {
                let far = i + 1 + usize::from(ins.jt.max(ins.jf));
                assert!(far < p.len(), "jump at {i} leaves the program");
            }
        }
        assert_eq!(p.last().map(|i| (i.code, i.k)), Some((RET_K, RET_ALLOW)));
    }

    #[test]
    fn a_rule_too_long_for_a_jump_is_an_error_not_a_wrong_program() {
        let cases: Vec<(u32, Action)> = (0..200).map(|v| (v, Action::Allow)).collect();
        let built = Builder::new()
            .unwrap()
            .argument(libc::SYS_socket, Arg::low(0), &cases, Action::Allow)
            .build(Action::Allow);
        assert!(built.is_err());
    }

    #[test]
    fn a_child_with_the_filter_is_refused_what_it_denies_and_nothing_else() {
        let filter = sample();
        let code = in_forked_child(|| {
            if crate::no_new_privs().is_err() || filter.install(Threads::Calling).is_err() {
                return 10;
            }
            // SAFETY: raw system calls in the child.
            unsafe {
                if libc::syscall(libc::SYS_getppid) != -1 || errno() != libc::EPERM {
                    return 11;
                }
                if libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) != -1
                    || errno() != libc::EACCES
                {
                    return 12;
                }
                if libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) != -1 || errno() != libc::ENOSYS
                {
                    return 13;
                }
                if libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) < 0 {
                    return 14;
                }
                if libc::syscall(libc::SYS_getpid) <= 0 {
                    return 15;
                }
            }
            0
        });
        assert_eq!(code, 0);
        // The parent is not filtered.
        // SAFETY: a plain query.
        assert!(unsafe { libc::getppid() } > 0);
    }

    #[test]
    fn the_memory_file_holds_the_program_bytes() {
        let filter = sample();
        let fd = filter.memfd(c"dsh-confine-test").unwrap();
        let mut bytes = Vec::new();
        std::fs::File::from(fd).read_to_end(&mut bytes).unwrap();
        assert_eq!(bytes.len(), filter.program.len() * 8);
        assert_eq!(bytes, filter.bytes());
    }
}
