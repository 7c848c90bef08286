//! Starting a child without copying the parent: `clone(CLONE_VM |
//! CLONE_VFORK)`, as glibc's `posix_spawn` does, with the one step
//! `posix_spawn` cannot take (`PR_SET_PDEATHSIG`). A `fork` copies the
//! page tables of the whole host and makes every page it writes after
//! that fault (copy on write): about 600 faults and a millisecond or more
//! per child in a host of 40 MiB, paid by every thread of the host while
//! an agent starts (ten MCP servers took 25 ms that way). Here the child
//! borrows the parent's memory until it calls `execve`; the calling
//! thread waits meanwhile, the others run on.
//!
//! The child may only make system calls on data prepared before the
//! clone (no allocation, no lock, no panic): [`Prepared`] holds it all.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, Ordering};

use super::launch::Launch;

/// The child's stack (it runs a few system calls on it).
const STACK: usize = 128 * 1024;
/// The highest signal number on Linux.
const SIG_MAX: libc::c_int = 64;
/// The exit status of a child whose `execve` (or a step before) failed.
const FAILED: libc::c_int = 127;

/// The child's ends of its three pipes (each 3 or above, close-on-exec:
/// `dup2` onto 0, 1 and 2 clears that on the copies).
pub struct ChildFds {
    /// Read end of stdin.
    pub stdin: OwnedFd,
    /// Write end of stdout.
    pub stdout: OwnedFd,
    /// Write end of stderr.
    pub stderr: OwnedFd,
}

/// Everything the child reads, made before the clone.
struct Prepared {
    path: CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: Option<CString>,
    fds: [RawFd; 3],
    parent: libc::pid_t,
    mask: libc::sigset_t,
    /// The `errno` of the step that failed (0: `execve` succeeded).
    error: AtomicI32,
}

fn c_string(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{s:?} contains a NUL byte"),
        )
    })
}

/// The program's path: as given when it names a directory, else the
/// first executable file of that name in the child's `PATH` (as `execvp`
/// would find it, but here, so a missing program is an error of the
/// spawn, not an exit status).
fn resolve(launch: &Launch) -> io::Result<CString> {
    let program = launch.program.as_os_str();
    if program.as_bytes().contains(&b'/') {
        return c_string(program);
    }
    if program.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "an empty program name",
        ));
    }
    let path = launch
        .env
        .get(OsStr::new("PATH"))
        .map(|p| p.as_bytes().to_vec())
        .unwrap_or_else(|| b"/usr/local/bin:/usr/bin:/bin".to_vec());
    // Only absolute entries: a relative one (or an empty one, ".") would
    // be checked here and run from the child's directory, which may be a
    // project the agent writes.
    for dir in path
        .split(|b| *b == b':')
        .filter(|d| d.first() == Some(&b'/'))
    {
        let candidate = std::path::Path::new(OsStr::from_bytes(dir)).join(program);
        let candidate = c_string(candidate.as_os_str())?;
        // SAFETY: a NUL-terminated path and a mode.
        let executable = unsafe { libc::access(candidate.as_ptr(), libc::X_OK) } == 0
            && std::fs::metadata(OsStr::from_bytes(candidate.as_bytes()))
                .is_ok_and(|m| m.is_file());
        if executable {
            return Ok(candidate);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("{program:?} is not an executable in PATH"),
    ))
}

/// A pipe, both ends close-on-exec, the ends above 2 (so no `dup2` onto
/// the standard streams can overwrite another end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: two fresh descriptors this call owns.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_two(read)?, above_two(write)?))
}

fn above_two(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: fcntl duplicates an open descriptor.
    let dup = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor this call owns.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

/// The child: signals to their defaults (the parent's handlers must never
/// run in it; Rust's runtime ignores SIGPIPE, which a program expects at
/// its default), its own process group, the pipes as 0, 1 and 2, killed
/// when the parent thread ends, its directory, the parent's signal mask
/// back, then the program.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Prepared` of `spawn`, alive until the parent
    // resumes (CLONE_VFORK: after execve or exit); every call below is
    // a system call on prepared memory.
    unsafe {
        let p = &*(arg as *const Prepared);
        let fail = |p: &Prepared| -> libc::c_int {
            p.error
                .store((*libc::__errno_location()).max(1), Ordering::SeqCst);
            libc::_exit(FAILED)
        };
        for sig in 1..=SIG_MAX {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            let caught = old.sa_sigaction != libc::SIG_IGN && old.sa_sigaction != libc::SIG_DFL;
            if caught || (sig == libc::SIGPIPE && old.sa_sigaction != libc::SIG_DFL) {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &default, std::ptr::null_mut());
            }
        }
        // A session of its own (so a process group too, its id the
        // child's): no controlling terminal to write to or inject into.
        if libc::setsid() < 0 {
            return fail(p);
        }
        for (fd, target) in p.fds.iter().zip(0..) {
            if libc::dup2(*fd, target) < 0 {
                return fail(p);
            }
        }
        // Nothing else of the host's: a descriptor some library opened
        // without close-on-exec stays behind (no close_range on an old
        // kernel: close-on-exec as before).
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return fail(p);
        }
        if libc::getppid() != p.parent {
            // The parent died before the signal was armed.
            libc::_exit(137);
        }
        if let Some(cwd) = &p.cwd {
            if libc::chdir(cwd.as_ptr()) != 0 {
                return fail(p);
            }
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &p.mask, std::ptr::null_mut());
        libc::execve(p.path.as_ptr(), p.argv.as_ptr(), p.envp.as_ptr());
        fail(p)
    }
}

/// Starts `launch` with `fds` as its standard streams, in a session (and
/// process group) of its own, killed when the calling thread ends; answers its
/// pid. A program that cannot be run is an error here (never a child that
/// exits 127).
pub fn spawn(launch: &Launch, fds: &ChildFds) -> io::Result<libc::pid_t> {
    let path = resolve(launch)?;
    let args: Vec<CString> = std::iter::once(launch.program.as_os_str())
        .chain(launch.args.iter().map(|a| a.as_os_str()))
        .map(c_string)
        .collect::<io::Result<_>>()?;
    let env: Vec<CString> = launch
        .env
        .iter()
        .map(|(k, v)| {
            let mut pair = k.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(v.as_bytes());
            c_string(OsStr::from_bytes(&pair))
        })
        .collect::<io::Result<_>>()?;
    let cwd = launch
        .cwd
        .as_deref()
        .map(|d| c_string(d.as_os_str()))
        .transpose()?;
    let pointers = |strings: &[CString]| -> Vec<*const libc::c_char> {
        strings
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let mut prepared = Prepared {
        argv: pointers(&args),
        envp: pointers(&env),
        path,
        cwd,
        fds: [
            fds.stdin.as_raw_fd(),
            fds.stdout.as_raw_fd(),
            fds.stderr.as_raw_fd(),
        ],
        // SAFETY: getpid cannot fail.
        parent: unsafe { libc::getpid() },
        // SAFETY: an all-zero sigset_t is a valid (empty) set.
        mask: unsafe { std::mem::zeroed() },
        error: AtomicI32::new(0),
    };
    let mut stack = vec![0u8; STACK];
    // SAFETY: the stack grows down from its 16-byte-aligned top; every
    // signal is blocked on this thread across the clone (a handler must
    // not run on the child's borrowed memory before it reset them) and
    // unblocked after; CLONE_VFORK keeps `prepared` and `stack` alive
    // until the child has called execve or exited.
    let (pid, clone_error) = unsafe {
        let top = stack.as_mut_ptr().add(STACK) as usize & !15;
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut prepared.mask);
        let pid = libc::clone(
            child,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &prepared as *const Prepared as *mut libc::c_void,
        );
        let clone_error = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &prepared.mask, std::ptr::null_mut());
        (pid, clone_error)
    };
    drop(stack);
    if pid < 0 {
        return Err(clone_error);
    }
    let error = prepared.error.load(Ordering::SeqCst);
    if error != 0 {
        let mut status = 0;
        // SAFETY: reaps the child that just failed (it has exited).
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(io::Error::from_raw_os_error(error));
    }
    Ok(pid)
}
