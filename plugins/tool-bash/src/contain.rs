//! Containment of one command, set up between `fork` and `exec`: nothing a
//! command starts outlives it, its timeout, a cancel, or the harness; it
//! has no terminal and no capabilities.
//!
//! The child std forks first starts a session of its own (`setsid`: no
//! controlling terminal, so no `/dev/tty` and no `TIOCSTI` into the user's
//! terminal; its process group is its pid, which `exec::Group` signals),
//! asks for SIGKILL when the harness thread that started it dies, then
//! (where the kernel allows) forks once more into a new user, PID, mount,
//! IPC and (without network) network namespace, writing the new child's id
//! maps from outside. The grandchild is PID 1 of the new PID namespace: when it dies,
//! the kernel kills every process in it, `setsid` and double forks
//! included. The child in between only waits for it and passes its exit
//! status on; it holds no file descriptor, so it keeps no pipe open.
//!
//! In a fenced mode the grandchild also remounts the whole tree read-only
//! except the writable roots (the harness's own files under them read-only
//! again), hides what the read fence refuses ([`crate::hide`]), mounts a
//! fresh `devpts` on `/dev/pts` (the user's terminals are
//! not there), a private `/dev/shm` and a private `/proc` for its PID
//! namespace (the harness's environment and memory are not there to read),
//! bounds its PID namespace's `pid_max`, allows no user namespace inside
//! its own (`user.max_user_namespaces = 0`), covers the kernel's files of
//! the fresh `/proc` and of `/sys` ([`crate::kernel`]), brings its loopback
//! up, drops every capability, then applies Landlock and the seccomp
//! filter (the mechanisms are `dsh_confine`'s). Everything after `fork`
//! is a raw syscall on memory prepared before it.

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};

use dsh_confine::landlock::RawRuleset;
use dsh_confine::seccomp::{Filter, Threads};

use crate::hide::Hidden;
use crate::kernel::KernelFiles;
use crate::loopback;

const SYS_MOUNT_SETATTR: libc::c_long = 442;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const AT_RECURSIVE: libc::c_uint = 0x8000;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// User-namespace maps, written by the child itself.
struct Maps {
    uid: Vec<u8>,
    gid: Vec<u8>,
    deny_setgroups: bool,
}

/// The mount plan of a fenced command.
struct Mounts {
    writable: Vec<CString>,
    protected: Vec<CString>,
    /// Covered by an empty read-only tmpfs of mode 000.
    hidden_dirs: Vec<CString>,
    /// Covered by a read-only bind of `blank`.
    hidden_files: Vec<CString>,
    /// The empty file of mode 000 bound over `hidden_files`.
    blank: CString,
    /// A private tmpfs over the temp directory (read-only mode).
    scratch: Option<CString>,
    /// The workspace, shown again (read-only) when the scratch covers it.
    reveal: Option<Reveal>,
    /// The command's working directory, entered again once the mounts are
    /// made (the one entered before them is on the old tree).
    cwd: CString,
    /// A fresh `devpts` instance on `/dev/pts` (where that directory
    /// exists).
    devpts: bool,
    /// A private tmpfs on `/dev/shm` (where that directory exists).
    shm: bool,
    /// Bound read-only over themselves once the fresh `/proc` is mounted
    /// ([`KernelFiles::read_only`]).
    kernel_read_only: Vec<CString>,
    /// Covered by an empty read-only tmpfs of mode 000 then.
    kernel_masked_dirs: Vec<CString>,
    /// Covered by a read-only bind of `blank` then.
    kernel_masked_files: Vec<CString>,
}

/// A directory bound back on top of the scratch tmpfs.
struct Reveal {
    /// The directory (opened in the child before the tmpfs covers it).
    dir: CString,
    /// The directories to make inside the scratch, outermost first; the
    /// last is the target (the same path as `dir`).
    dirs: Vec<CString>,
}

impl Reveal {
    fn new(dir: &Path, scratch: &Path) -> Option<Reveal> {
        let rel = dir.strip_prefix(scratch).ok()?;
        let mut at = scratch.to_owned();
        let mut dirs = Vec::new();
        for part in rel.components() {
            at.push(part);
            dirs.push(cpath(&at)?);
        }
        Some(Reveal {
            dir: cpath(dir)?,
            dirs,
        })
    }
}

/// Everything the child does before `exec`, prepared in the parent.
pub struct Plan {
    parent: libc::pid_t,
    maps: Option<Maps>,
    pid_ns: bool,
    /// A network namespace of its own (loopback only).
    net_ns: bool,
    mounts: Option<Mounts>,
    landlock: Option<RawRuleset>,
    /// Drop every capability before `exec`.
    drop_caps: bool,
    /// Installed last (after Landlock, which sets `no_new_privs`).
    seccomp: Option<Filter>,
    /// A descriptor the program run inherits (bubblewrap's `--seccomp`).
    inherit: Option<i32>,
    /// Written to the command's PID namespace's `pid_max` (NUL-free
    /// digits).
    pid_max: Option<CString>,
    c: Consts,
}

/// C strings the child uses, made before `fork`.
struct Consts {
    root: CString,
    proc_: CString,
    proc_type: CString,
    tmpfs: CString,
    tmpfs_opts: CString,
    hidden_opts: CString,
    deny: CString,
    dot: CString,
    dev_pts: CString,
    devpts: CString,
    devpts_opts: CString,
    dev_shm: CString,
    pid_max: CString,
    max_user_namespaces: CString,
    no_user_namespaces: CString,
}

impl Consts {
    fn new() -> Consts {
        let c = |s: &str| CString::new(s).unwrap_or_default();
        Consts {
            root: c("/"),
            proc_: c("/proc"),
            proc_type: c("proc"),
            tmpfs: c("tmpfs"),
            tmpfs_opts: c("mode=1777"),
            hidden_opts: c("mode=000"),
            deny: c("deny"),
            dot: c("."),
            dev_pts: c("/dev/pts"),
            devpts: c("devpts"),
            devpts_opts: c("newinstance,ptmxmode=0666,mode=0620"),
            dev_shm: c("/dev/shm"),
            pid_max: c("/proc/sys/kernel/pid_max"),
            max_user_namespaces: c("/proc/sys/user/max_user_namespaces"),
            no_user_namespaces: c("0"),
        }
    }
}

/// Writes `bytes` to `/proc/<pid>/<leaf>` (`leaf` NUL-terminated),
/// formatting the path on the stack: safe between `fork` and `exec`.
unsafe fn write_proc(pid: libc::pid_t, leaf: &[u8], bytes: &[u8]) -> io::Result<()> {
    let mut path = [0u8; 64];
    let mut n = 0;
    for b in b"/proc/" {
        path[n] = *b;
        n += 1;
    }
    let mut digits = [0u8; 12];
    let (mut d, mut v) = (0, pid as u32);
    loop {
        digits[d] = b'0' + (v % 10) as u8;
        d += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    while d > 0 {
        d -= 1;
        path[n] = digits[d];
        n += 1;
    }
    path[n] = b'/';
    n += 1;
    if n + leaf.len() > path.len() {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    path[n..n + leaf.len()].copy_from_slice(leaf);
    write_file(path.as_ptr().cast(), bytes)
}

/// Writes `bytes` to the file at `path` (NUL-terminated). Async-signal-safe.
unsafe fn write_file(path: *const libc::c_char, bytes: &[u8]) -> io::Result<()> {
    let fd = libc::open(path, libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
    libc::close(fd);
    if written != bytes.len() as isize {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `Ok` for a zero return code, the errno otherwise. Async-signal-safe.
fn ok(rc: libc::c_int) -> io::Result<()> {
    if rc != 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `mount_setattr(path, AT_RECURSIVE)`: sets the attributes `set`, clears
/// `clr` on the mount at `path` and every mount below it.
/// Async-signal-safe.
///
/// # Safety
///
/// Raw system calls on memory prepared before `fork`: safe between `fork`
/// and `exec`; it changes the calling process's mounts.
unsafe fn setattr(path: &CString, set: u64, clr: u64) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clr,
        propagation: 0,
        userns_fd: 0,
    };
    let rc = libc::syscall(
        SYS_MOUNT_SETATTR,
        libc::AT_FDCWD,
        path.as_ptr(),
        AT_RECURSIVE,
        &attr as *const MountAttr,
        std::mem::size_of::<MountAttr>(),
    );
    ok(rc as libc::c_int)
}

/// Binds `p` (recursively) onto itself, so it can get attributes of its
/// own. Async-signal-safe.
///
/// # Safety
///
/// Raw system calls on memory prepared before `fork`: safe between `fork`
/// and `exec`; it changes the calling process's mounts.
unsafe fn bind(p: &CString) -> io::Result<()> {
    ok(libc::mount(
        p.as_ptr(),
        p.as_ptr(),
        std::ptr::null(),
        libc::MS_BIND | libc::MS_REC,
        std::ptr::null(),
    ))
}

fn cpath(p: &Path) -> Option<CString> {
    CString::new(p.as_os_str().as_encoded_bytes()).ok()
}

/// What the fence asks of the mount namespace.
pub struct Fenced<'a> {
    /// Writable roots (bound read-write).
    pub writable: &'a [PathBuf],
    /// The harness's own files (read-only even under a writable root).
    pub protected: &'a [PathBuf],
    /// What the command may not read at all.
    pub hidden: &'a Hidden,
    /// The kernel's files to cover on the fresh `/proc` and `/sys`.
    pub kernel: &'a KernelFiles,
    /// A private scratch tmpfs here (read-only mode's temp directory).
    pub scratch: Option<&'a Path>,
    /// The Landlock ruleset to apply last (its handled rights are granted
    /// beneath the child's own `/dev/pts` and `/dev/shm`).
    pub landlock: Option<RawRuleset>,
    /// The command's working directory.
    pub cwd: &'a Path,
    /// The workspace, to show again if the scratch covers it.
    pub workspace: &'a Path,
    /// A network namespace of its own (no network but its own loopback).
    pub own_network: bool,
}

impl Plan {
    /// A session of its own, the parent-death signal and no capabilities:
    /// no namespaces.
    pub fn bare() -> Plan {
        Plan {
            // SAFETY: getpid has no preconditions.
            parent: unsafe { libc::getpid() },
            maps: None,
            pid_ns: false,
            net_ns: false,
            mounts: None,
            landlock: None,
            drop_caps: true,
            seccomp: None,
            inherit: None,
            pid_max: None,
            c: Consts::new(),
        }
    }

    /// What runs bubblewrap: a session of its own and the parent-death
    /// signal; bubblewrap itself drops the capabilities (it needs them to
    /// set up) and reads the seccomp program from `seccomp_fd`.
    pub fn bubblewrap(seccomp_fd: Option<i32>) -> Plan {
        Plan {
            drop_caps: false,
            inherit: seccomp_fd,
            ..Plan::bare()
        }
    }

    /// Runs in a PID namespace of its own, made here (it needs
    /// `CAP_SYS_ADMIN`: as root), so that [`Plan::with_pid_max`] can bound
    /// it: for bubblewrap, whose own PID namespace is nested in this one
    /// (a process counts against the `pid_max` of every namespace it is
    /// in).
    pub fn in_pid_namespace(self) -> Plan {
        Plan {
            pid_ns: true,
            ..self
        }
    }

    /// Keeps the capabilities (`keepCapabilities`, danger-full-access).
    pub fn keeping_capabilities(self) -> Plan {
        Plan {
            drop_caps: false,
            ..self
        }
    }

    /// Installs `filter` last.
    pub fn with_seccomp(self, filter: Option<Filter>) -> Plan {
        Plan {
            seccomp: filter,
            ..self
        }
    }

    /// Bounds the command's PID namespace to `pid_max` (its processes and
    /// threads together stay below it). Only where there is such a
    /// namespace and the kernel keeps `pid_max` per namespace (6.14):
    /// before that the value was global, and is never written.
    pub fn with_pid_max(self, pid_max: Option<u32>) -> Plan {
        let pid_max = pid_max
            .filter(|_| self.pid_ns && pid_max_per_namespace())
            .and_then(|n| CString::new(n.to_string()).ok());
        Plan { pid_max, ..self }
    }

    /// A PID namespace without a user namespace (needs CAP_SYS_ADMIN): for
    /// unfenced commands run by root.
    pub fn pid_only() -> Plan {
        Plan {
            pid_ns: true,
            ..Plan::bare()
        }
    }

    /// Landlock alone (where no namespace can be made).
    pub fn landlock_only(rules: RawRuleset) -> Plan {
        Plan {
            landlock: Some(rules),
            ..Plan::bare()
        }
    }

    /// User, PID, mount, IPC and (without network) network namespaces
    /// with the fence's mounts; then no capabilities and Landlock.
    pub fn fenced(f: Fenced<'_>) -> Plan {
        // SAFETY: plain id queries.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let maps = if uid == 0 {
            // Root keeps every id (its files stay its files); the
            // capabilities it holds in the new namespace serve the setup
            // and are dropped before `exec`.
            Maps {
                uid: b"0 0 4294967295\n".to_vec(),
                gid: b"0 0 4294967295\n".to_vec(),
                deny_setgroups: false,
            }
        } else {
            Maps {
                uid: format!("{uid} {uid} 1\n").into_bytes(),
                gid: format!("{gid} {gid} 1\n").into_bytes(),
                deny_setgroups: true,
            }
        };
        let existing = |ps: &[PathBuf]| -> Vec<CString> {
            ps.iter()
                .filter(|p| p.exists())
                .filter_map(|p| cpath(p))
                .collect()
        };
        // A root inside another root comes with it.
        let outer: Vec<PathBuf> = f
            .writable
            .iter()
            .filter(|w| !f.writable.iter().any(|o| o != *w && w.starts_with(o)))
            .cloned()
            .collect();
        let protected: Vec<PathBuf> = f
            .protected
            .iter()
            .filter(|p| f.writable.iter().any(|w| p.starts_with(w)))
            .cloned()
            .collect();
        Plan {
            maps: Some(maps),
            pid_ns: true,
            net_ns: f.own_network,
            mounts: Some(Mounts {
                writable: existing(&outer),
                protected: existing(&protected),
                hidden_dirs: existing(&f.hidden.dirs),
                hidden_files: existing(&f.hidden.files),
                blank: cpath(&f.hidden.blank).unwrap_or_default(),
                scratch: f.scratch.and_then(cpath),
                reveal: f.scratch.and_then(|s| Reveal::new(f.workspace, s)),
                cwd: cpath(f.cwd).unwrap_or_default(),
                devpts: Path::new("/dev/pts").is_dir(),
                shm: Path::new("/dev/shm").is_dir(),
                kernel_read_only: existing(&f.kernel.read_only),
                kernel_masked_dirs: existing(&f.kernel.masked_dirs),
                kernel_masked_files: existing(&f.kernel.masked_files),
            }),
            landlock: f.landlock,
            ..Plan::bare()
        }
    }

    /// Runs in the child between `fork` and `exec`.
    ///
    /// # Safety
    ///
    /// Call only in a freshly forked child (a `pre_exec` closure): it
    /// forks, and the process in between never returns from here.
    pub unsafe fn in_child(&self) -> io::Result<()> {
        // First: setsid fails in a process-group leader, and nothing here
        // makes this process one before it.
        if libc::setsid() < 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::getppid() != self.parent {
            // The harness died before the signal was armed.
            libc::_exit(137);
        }
        if self.pid_ns {
            self.fork_pid_one()?;
        }
        match &self.mounts {
            // The fence's mounts write the limits themselves, before
            // /proc/sys is read-only.
            Some(m) => self.mount_fence(m)?,
            None => self.write_pid_max(),
        }
        if self.net_ns {
            // Best effort: without it the command has no loopback either.
            let _ = loopback::up();
        }
        if self.drop_caps {
            dsh_confine::caps::drop_all()?;
        }
        if let Some(rules) = self.landlock {
            rules.restrict_self()?;
        }
        if let Some(filter) = &self.seccomp {
            dsh_confine::no_new_privs()?;
            filter.install(Threads::Calling)?;
        }
        if let Some(fd) = self.inherit {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Forks into new namespaces. The parent writes the child's id maps
    /// (it holds the privilege of the namespace it is in, the child does
    /// not), lets it go on, then waits for it and exits as it did. Returns
    /// in the child only: PID 1 of the new PID namespace.
    unsafe fn fork_pid_one(&self) -> io::Result<()> {
        let mut flags = libc::CLONE_NEWPID;
        if self.maps.is_some() {
            flags |= libc::CLONE_NEWUSER;
        }
        if self.mounts.is_some() {
            // Its own SysV IPC and POSIX message queues: the host's shared
            // memory segments (root's included) are not there.
            flags |= libc::CLONE_NEWNS | libc::CLONE_NEWIPC;
        }
        if self.net_ns {
            flags |= libc::CLONE_NEWNET;
        }
        let mut sync = [0i32; 2];
        if libc::pipe2(sync.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(io::Error::last_os_error());
        }
        let pid = libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            0,
            0,
            0,
            0,
        );
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // PID 1 dies with the process in between: armed before anything
            // else, then the pipe tells whether that process was still
            // there to arm it for (it holds its end open until it exits).
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            libc::close(sync[1]);
            let mut go = 0u8;
            let n = libc::read(sync[0], (&mut go as *mut u8).cast(), 1);
            let mut alive = libc::pollfd {
                fd: sync[0],
                events: libc::POLLIN,
                revents: 0,
            };
            libc::poll(&mut alive, 1, 0);
            libc::close(sync[0]);
            if n != 1 || alive.revents & libc::POLLHUP != 0 {
                // The process in between failed or died.
                libc::_exit(126);
            }
            return Ok(());
        }
        let pid = pid as libc::pid_t;
        libc::close(sync[0]);
        if let Some(maps) = &self.maps {
            if self.write_maps(pid, maps).is_err() {
                libc::kill(pid, libc::SIGKILL);
                libc::_exit(126);
            }
        }
        libc::write(sync[1], b"g".as_ptr().cast(), 1);
        // In between: hold nothing open (no pipe, no error channel) but the
        // sync pipe's end, whose closing at exit tells PID 1 this process
        // is gone; wait, and leave the way the command did.
        let keep = sync[1] as u32;
        if keep > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, keep - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32);
        let mut status = 0;
        loop {
            let r = libc::waitpid(pid, &mut status, 0);
            if r == pid {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(126);
            }
        }
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            libc::signal(sig, libc::SIG_DFL);
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(libc::WEXITSTATUS(status));
    }

    /// Writes `/proc/<pid>/{setgroups,uid_map,gid_map}` without allocating.
    unsafe fn write_maps(&self, pid: libc::pid_t, maps: &Maps) -> io::Result<()> {
        if maps.deny_setgroups {
            write_proc(pid, b"setgroups\0", self.c.deny.as_bytes())?;
        }
        write_proc(pid, b"uid_map\0", &maps.uid)?;
        write_proc(pid, b"gid_map\0", &maps.gid)
    }

    /// A fresh tmpfs on `at` (no set-id, no devices) with `flags` and
    /// `opts`: the scratch and `/dev/shm` (mode 1777), the hidden and
    /// masked directories (read-only, mode 000). Async-signal-safe.
    ///
    /// # Safety
    ///
    /// Raw system calls on memory prepared before `fork`: safe between `fork`
    /// and `exec`; it changes the calling process's mounts.
    unsafe fn tmpfs(&self, at: &CString, flags: libc::c_ulong, opts: &CString) -> io::Result<()> {
        ok(libc::mount(
            self.c.tmpfs.as_ptr(),
            at.as_ptr(),
            self.c.tmpfs.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | flags,
            opts.as_ptr().cast(),
        ))
    }

    /// Bounds the PID namespace this process is in to `pid_max` (where
    /// one is planned). Best effort: a bound the kernel refuses leaves the
    /// command unbounded, as before it. Async-signal-safe.
    ///
    /// # Safety
    ///
    /// Raw system calls on memory prepared before `fork`: safe between `fork`
    /// and `exec`; it changes the limits of the calling process's
    /// namespaces.
    unsafe fn write_pid_max(&self) {
        if let Some(n) = &self.pid_max {
            let _ = write_file(self.c.pid_max.as_ptr(), n.as_bytes());
        }
    }

    /// The limits of a fenced command's namespaces, written through its
    /// fresh `/proc` (a sysctl file names the namespace of whoever writes
    /// it): `pid_max` ([`Plan::write_pid_max`]), and no user namespace
    /// inside its own (`user.max_user_namespaces = 0`: in one the command
    /// would hold every capability again, over mounts of its own such as
    /// a fresh `/proc` whose sysctls uid 0 may write). Needs
    /// `CAP_SYS_RESOURCE` in its user namespace, so before the drop.
    /// Async-signal-safe.
    ///
    /// # Safety
    ///
    /// Raw system calls on memory prepared before `fork`: safe between `fork`
    /// and `exec`; it changes the limits of the calling process's
    /// namespaces.
    unsafe fn write_limits(&self) -> io::Result<()> {
        self.write_pid_max();
        write_file(
            self.c.max_user_namespaces.as_ptr(),
            self.c.no_user_namespaces.as_bytes(),
        )
    }

    /// Covers `dirs` with an empty read-only tmpfs of mode 000 and `files`
    /// with a read-only bind of `blank`. Async-signal-safe.
    ///
    /// # Safety
    ///
    /// Raw system calls on memory prepared before `fork`: safe between `fork`
    /// and `exec`; it changes the calling process's mounts.
    unsafe fn cover(&self, dirs: &[CString], files: &[CString], blank: &CString) -> io::Result<()> {
        for d in dirs {
            self.tmpfs(d, libc::MS_RDONLY | libc::MS_NOEXEC, &self.c.hidden_opts)?;
        }
        for f in files {
            ok(libc::mount(
                blank.as_ptr(),
                f.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            ))?;
            setattr(f, MOUNT_ATTR_RDONLY, 0)?;
        }
        Ok(())
    }

    /// The kernel's files of the fresh `/proc` and of `/sys`: read-only
    /// again, or covered ([`crate::kernel`]). Async-signal-safe.
    ///
    /// # Safety
    ///
    /// Raw system calls on memory prepared before `fork`: safe between `fork`
    /// and `exec`; it changes the calling process's mounts.
    unsafe fn cover_kernel_files(&self, m: &Mounts) -> io::Result<()> {
        for p in &m.kernel_read_only {
            bind(p)?;
            setattr(p, MOUNT_ATTR_RDONLY, 0)?;
        }
        self.cover(&m.kernel_masked_dirs, &m.kernel_masked_files, &m.blank)
    }

    /// The fence's mounts (see the module doc), in the new mount
    /// namespace.
    ///
    /// # Safety
    ///
    /// Raw system calls on memory prepared before `fork`: call only in
    /// the forked child, in its own mount namespace.
    unsafe fn mount_fence(&self, m: &Mounts) -> io::Result<()> {
        let null = std::ptr::null::<libc::c_char>();
        ok(libc::mount(
            null,
            self.c.root.as_ptr(),
            null,
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        for w in &m.writable {
            bind(w)?;
        }
        setattr(&self.c.root, MOUNT_ATTR_RDONLY, 0)?;
        for w in &m.writable {
            setattr(w, 0, MOUNT_ATTR_RDONLY)?;
        }
        for p in &m.protected {
            bind(p)?;
            setattr(p, MOUNT_ATTR_RDONLY, 0)?;
        }
        // Over everything above (a store under a writable root too), and
        // before the scratch covers the temp directory `blank` is in (a
        // hidden place in the workspace shown on the scratch comes along
        // with it: that bind is recursive).
        self.cover(&m.hidden_dirs, &m.hidden_files, &m.blank)?;
        // A private /proc for the PID namespace, its limits written while
        // its sysctls are writable (and this process holds the
        // capabilities), then the kernel's files covered; all before the
        // scratch covers the temp directory `blank` is in.
        ok(libc::mount(
            self.c.proc_type.as_ptr(),
            self.c.proc_.as_ptr(),
            self.c.proc_type.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ))?;
        self.write_limits()?;
        self.cover_kernel_files(m)?;
        // Held open across the tmpfs that covers it, then bound back.
        let keep = match &m.reveal {
            Some(r) => libc::open(
                r.dir.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            ),
            None => -1,
        };
        if let Some(s) = &m.scratch {
            self.tmpfs(s, 0, &self.c.tmpfs_opts)?;
        }
        if let (Some(r), true) = (&m.reveal, keep >= 0) {
            for d in &r.dirs {
                libc::mkdir(d.as_ptr(), 0o755);
            }
            if let Some(target) = r.dirs.last() {
                ok(libc::fchdir(keep))?;
                ok(libc::mount(
                    self.c.dot.as_ptr(),
                    target.as_ptr(),
                    null,
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ))?;
                libc::close(keep);
                setattr(target, MOUNT_ATTR_RDONLY, 0)?;
            }
        }
        if m.devpts {
            // A fresh instance: the user's terminals (`/dev/pts/N`) are not
            // in it; `/dev/ptmx` opens ptys in it.
            ok(libc::mount(
                self.c.devpts.as_ptr(),
                self.c.dev_pts.as_ptr(),
                self.c.devpts.as_ptr(),
                libc::MS_NOSUID | libc::MS_NOEXEC,
                self.c.devpts_opts.as_ptr().cast(),
            ))?;
        }
        if m.shm {
            self.tmpfs(&self.c.dev_shm, 0, &self.c.tmpfs_opts)?;
        }
        // A Landlock rule holds an inode: these fresh mounts get theirs
        // here (the parent's would name the host's instances).
        if let Some(rules) = self.landlock {
            if m.devpts {
                rules.allow_beneath(&self.c.dev_pts, rules.handled_fs)?;
            }
            if m.shm {
                rules.allow_beneath(&self.c.dev_shm, rules.handled_fs)?;
            }
        }
        ok(libc::chdir(m.cwd.as_ptr()))
    }
}

/// Whether the namespaces of a fenced command can be made here.
#[derive(Debug)]
pub enum Support {
    /// They can.
    Works,
    /// The kernel or its policy does not allow them: `unshare` failed
    /// with `EPERM`, `EACCES` (a security module's policy), `EINVAL`,
    /// `ENOSPC` or `EUSERS` (a limit of 0 or nesting too deep), or
    /// `ENOSYS`.
    Unsupported(io::Error),
    /// Trying failed for another reason (out of memory or processes, a
    /// child that died): nothing is known.
    Failed(io::Error),
}

/// The namespaces a fenced command on the Landlock path gets (a network
/// namespace too with `own_network`).
fn fenced_namespaces(own_network: bool) -> libc::c_int {
    let flags = libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::CLONE_NEWIPC;
    if own_network {
        flags | libc::CLONE_NEWNET
    } else {
        flags
    }
}

/// Tries to make the namespaces of a fenced command with one `unshare` in
/// a forked child, which reports its errno through its exit code.
pub fn namespace_support(own_network: bool) -> Support {
    let flags = fenced_namespaces(own_network);
    // SAFETY: the child makes one raw system call and leaves with _exit
    // (a single thread may make a user namespace; the harness may not).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Support::Failed(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: raw system calls in the forked child.
        unsafe {
            let code = if libc::unshare(flags) == 0 {
                0
            } else {
                (*libc::__errno_location()).clamp(1, 255)
            };
            libc::_exit(code);
        }
    }
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        let e = io::Error::last_os_error();
        if r < 0 && e.kind() != io::ErrorKind::Interrupted {
            return Support::Failed(e);
        }
    }
    if !libc::WIFEXITED(status) {
        return Support::Failed(io::Error::other(format!(
            "the namespace probe died (wait status {status})"
        )));
    }
    match libc::WEXITSTATUS(status) {
        0 => Support::Works,
        errno => classify(errno),
    }
}

/// What `unshare`'s `errno` says about namespaces here.
fn classify(errno: i32) -> Support {
    let e = io::Error::from_raw_os_error(errno);
    match errno {
        libc::EPERM | libc::EACCES | libc::EINVAL | libc::ENOSPC | libc::EUSERS | libc::ENOSYS => {
            Support::Unsupported(e)
        }
        _ => Support::Failed(e),
    }
}

/// Whether this kernel keeps `pid_max` per PID namespace (Linux 6.14 and
/// later), from `uname`; asked once.
pub fn pid_max_per_namespace() -> bool {
    static KNOWN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *KNOWN.get_or_init(|| {
        // SAFETY: uname fills the zeroed struct it is given.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: a valid utsname.
        if unsafe { libc::uname(&mut u) } != 0 {
            return false;
        }
        // SAFETY: uname NUL-terminates release.
        let release = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) };
        kernel_at_least(&release.to_string_lossy(), (6, 14))
    })
}

/// Whether kernel release `release` (`6.18.4-arch1`) is at least `want`.
fn kernel_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|p| p.parse::<u32>().ok());
    let minor = parts.next().and_then(|p| p.parse::<u32>().ok());
    match (major, minor) {
        (Some(major), Some(minor)) => (major, minor) >= want,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refusal_by_the_kernel_or_its_policy_means_no_namespaces() {
        for errno in [
            libc::EPERM,
            libc::EACCES,
            libc::EINVAL,
            libc::ENOSPC,
            libc::EUSERS,
            libc::ENOSYS,
        ] {
            assert!(
                matches!(classify(errno), Support::Unsupported(_)),
                "{errno}"
            );
        }
        for errno in [libc::ENOMEM, libc::EAGAIN, libc::EFAULT] {
            assert!(matches!(classify(errno), Support::Failed(_)), "{errno}");
        }
    }

    #[test]
    fn the_probe_knows_the_answer_here() {
        // Either answer is a kernel's; a failure would be a bug here.
        let support = namespace_support(true);
        assert!(!matches!(support, Support::Failed(_)), "{support:?}");
    }

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        assert!(kernel_at_least("6.18.44-fc-v1098", (6, 14)));
        assert!(kernel_at_least("6.14.0", (6, 14)));
        assert!(kernel_at_least("7.0.1", (6, 14)));
        assert!(!kernel_at_least("6.13.9-arch1", (6, 14)));
        assert!(!kernel_at_least("5.15.0-91-generic", (6, 14)));
        assert!(!kernel_at_least("garbage", (6, 14)));
    }
}
