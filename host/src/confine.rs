//! Confining the inspector process before it runs a library's code (see
//! [`crate::isolate`]). Layers, each a few system calls:
//!
//! 1. A session of its own and no controlling terminal (`setsid`, done
//!    between `fork` and `exec` by the parent), killed when the parent
//!    thread that waits for it ends (`PR_SET_PDEATHSIG`, set again here
//!    after the credentials change, which clears it).
//! 2. Resource limits: CPU time, address space, no file growth, no core
//!    file, few descriptors.
//! 3. No privileges: as root, the capability bounding set is dropped and the
//!    process becomes `nobody` (65534); in every case the ambient, permitted,
//!    effective and inheritable sets are emptied, and checked empty.
//! 4. `no_new_privs`, then Landlock ([`crate::landlock`]: nothing on disk
//!    can be changed, no TCP, no signals out) and the seccomp filter
//!    ([`crate::seccomp`]: no sockets, programs, processes, tracing).
//!
//! The mechanisms (capabilities, `no_new_privs`, Landlock rulesets,
//! seccomp programs) are `dsh_confine`'s; this file and the two above hold
//! the inspector's policy.
//!
//! Every layer must succeed: the inspector refuses to load anything in a
//! process it could not confine. The environment is emptied and the working
//! directory is `/` by the parent.

use std::io;
use std::time::Duration;

use dsh_confine::caps;

/// CPU time the inspector may use.
pub const CPU_LIMIT: Duration = Duration::from_secs(10);

/// Address space the inspector may map (the host binary, the library and
/// its dependencies, a thread).
const ADDRESS_SPACE: u64 = 1 << 30;

/// Open descriptors.
const FILES: u64 = 64;

/// The user an inspector started as root runs as.
const NOBODY: libc::uid_t = 65534;

/// What went wrong while confining.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {source}")]
pub struct ConfineError {
    step: &'static str,
    source: io::Error,
}

fn step(step: &'static str) -> impl FnOnce(io::Error) -> ConfineError {
    move |source| ConfineError { step, source }
}

/// Applies every layer to this process, or fails. `parent` is the pid of
/// the process that started it (the parent-death signal is set again and
/// the parent checked alive after it).
pub fn confine_self(parent: u32) -> Result<(), ConfineError> {
    check_own_session().map_err(step("session"))?;
    limit_resources().map_err(step("resource limits"))?;
    drop_privileges().map_err(step("dropping privileges"))?;
    die_with_parent(parent).map_err(step("parent-death signal"))?;
    dsh_confine::no_new_privs().map_err(step("no_new_privs"))?;
    crate::landlock::forbid_changes().map_err(step("Landlock"))?;
    crate::seccomp::install().map_err(step("seccomp"))?;
    Ok(())
}

/// The parent made this process a session leader before `exec`.
fn check_own_session() -> io::Result<()> {
    // SAFETY: plain queries.
    let (sid, pid) = unsafe { (libc::getsid(0), libc::getpid()) };
    if sid != pid {
        return Err(io::Error::other("not the leader of a session of its own"));
    }
    Ok(())
}

fn set_limit(resource: libc::__rlimit_resource_t, value: u64) -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: a valid rlimit for a known resource.
    if unsafe { libc::setrlimit(resource, &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn limit_resources() -> io::Result<()> {
    set_limit(libc::RLIMIT_CPU, CPU_LIMIT.as_secs())?;
    set_limit(libc::RLIMIT_AS, ADDRESS_SPACE)?;
    set_limit(libc::RLIMIT_FSIZE, 0)?;
    set_limit(libc::RLIMIT_CORE, 0)?;
    set_limit(libc::RLIMIT_NOFILE, FILES)?;
    set_limit(libc::RLIMIT_MEMLOCK, 0)?;
    Ok(())
}

fn drop_privileges() -> io::Result<()> {
    // SAFETY: plain queries.
    let root = unsafe { libc::geteuid() == 0 || libc::getuid() == 0 };
    if root {
        // Needs CAP_SETPCAP, so before the capabilities go.
        caps::drop_bounding_set()?;
        // A user namespace without a mapping for `nobody` keeps uid 0: the
        // capabilities still go below, and Landlock and seccomp still hold.
        let _ = become_nobody();
    }
    caps::drop_all()?;
    if caps::any_held()? {
        return Err(io::Error::other("capabilities remain after dropping them"));
    }
    Ok(())
}

/// Switches every uid and gid to 65534, which clears the permitted and
/// effective capability sets.
fn become_nobody() -> io::Result<()> {
    // SAFETY: plain calls with integer arguments (no supplementary groups).
    let rc = unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setresgid(NOBODY, NOBODY, NOBODY) != 0
            || libc::setresuid(NOBODY, NOBODY, NOBODY) != 0
        {
            -1
        } else {
            0
        }
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Changing credentials cleared the parent-death signal: set it again, then
/// make sure the parent did not end in between.
fn die_with_parent(parent: u32) -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a plain query.
    if unsafe { libc::getppid() } as u32 != parent {
        return Err(io::Error::other("the parent process is gone"));
    }
    Ok(())
}
