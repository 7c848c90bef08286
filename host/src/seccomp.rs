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

// Classic BPF (`include/uapi/linux/filter.h`, `bpf_common.h`).
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

// `include/uapi/linux/seccomp.h`.
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_ALLOW: u32 = 0x7fff_0000;

// Offsets in `struct seccomp_data`: nr, arch, instruction pointer, args.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
/// The low 32 bits of argument 0 (little-endian targets only).
const OFF_ARG0_LOW: u32 = 16;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// x32 system calls carry this bit on x86_64.
#[cfg(target_arch = "x86_64")]
const X32_BIT: u32 = 0x4000_0000;

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

/// The filter program for a process whose pid is `pid`.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn program(pid: u32) -> Vec<libc::sock_filter> {
    let deny = RET_ERRNO | libc::EPERM as u32;
    let mut p = vec![
        stmt(LD_W_ABS, OFF_ARCH),
        jump(JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(RET_K, RET_KILL_PROCESS),
        stmt(LD_W_ABS, OFF_NR),
    ];
    #[cfg(target_arch = "x86_64")]
    p.extend([jump(JGE_K, X32_BIT, 0, 1), stmt(RET_K, deny)]);
    for nr in DENIED {
        p.extend([jump(JEQ_K, *nr as u32, 0, 1), stmt(RET_K, deny)]);
    }
    // clone3 cannot be inspected (its flags are behind a pointer): ENOSYS
    // makes glibc fall back to clone, whose flags are checked below.
    p.extend([
        jump(JEQ_K, libc::SYS_clone3 as u32, 0, 1),
        stmt(RET_K, RET_ERRNO | libc::ENOSYS as u32),
    ]);
    // clone: threads only.
    p.extend([
        jump(JEQ_K, libc::SYS_clone as u32, 0, 4),
        stmt(LD_W_ABS, OFF_ARG0_LOW),
        jump(JSET_K, CLONE_THREAD, 0, 1),
        stmt(RET_K, RET_ALLOW),
        stmt(RET_K, deny),
    ]);
    for nr in SIGNALS {
        p.extend([
            jump(JEQ_K, *nr as u32, 0, 5),
            stmt(LD_W_ABS, OFF_ARG0_LOW),
            jump(JEQ_K, pid, 2, 0),
            jump(JEQ_K, 0, 1, 0),
            stmt(RET_K, deny),
            stmt(RET_K, RET_ALLOW),
        ]);
    }
    p.push(stmt(RET_K, RET_ALLOW));
    p
}

/// Installs the filter on every thread of this process. Needs
/// `no_new_privs` set first.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn install() -> io::Result<()> {
    let filter = program(std::process::id());
    let prog = libc::sock_fprog {
        len: u16::try_from(filter.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` points to `filter`, alive for the call; the kernel
    // copies the program.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_TSYNC,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// No filter for this architecture: the inspector refuses to run.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn install() -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no seccomp filter for this architecture",
    ))
}

#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_inside_the_program_and_it_ends_by_returning() {
        let p = program(1234);
        for (i, ins) in p.iter().enumerate() {
            if ins.code & 0x07 == 0x05 {
                let far = i + 1 + usize::from(ins.jt.max(ins.jf));
                assert!(far < p.len(), "jump at {i} leaves the program");
            }
        }
        assert_eq!(p.last().map(|i| (i.code, i.k)), Some((RET_K, RET_ALLOW)));
    }
}
