//! Loading one plugin generation on a thread of its own, and unloading it.
//!
//! Nothing is dlopened before [`crate::preflight`] read the file (without
//! running it) and found a dsh plugin library for this machine.
//!
//! Everything that runs plugin code — `dlopen` (its initializers), the
//! abi_stable header checks (they call into the library), `manifest()` and
//! `run()` — runs on the generation thread. The host joins that thread (with
//! a timeout) before it audits signal handlers, calls `dlclose`, checks
//! `/proc/self/maps` and sweeps pthread keys. A generation that cannot be
//! closed safely is quarantined: never closed, so nothing can crash.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use abi_stable::abi_stability::abi_checking::{
    check_layout_compatibility_with_globals, CheckingGlobals,
};
use abi_stable::library::{AbiHeaderRef, RootModule, ROOT_MODULE_LOADER_NAME_WITH_NUL};
use abi_stable::std_types::{ROption, RStr};
use abi_stable::StableAbi;
use dsh_abi::{Envelope, HostHandle, PluginModRef, ABI_VERSION};
use dsh_wire::Manifest;
use libloading::os::unix::Library;

use crate::inbox::Inbox;
use crate::procfs::{self, Mapping};

/// Why a library was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    /// The file was looked at and refused before `dlopen`: not an ELF
    /// shared library for this machine, or one without the root module
    /// (see [`crate::preflight`]). None of its code ran.
    #[error("{path}: {reason}")]
    Refused {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: crate::preflight::Refusal,
    },
    /// dlopen failed (missing file, missing dependencies or symbols, ...).
    #[error("cannot load {path}: {reason}")]
    Open {
        /// The file.
        path: PathBuf,
        /// dlerror's text.
        reason: String,
    },
    /// The library has no dsh/abi_stable root module.
    #[error("{path} is not a dsh plugin: {reason}")]
    NotAPlugin {
        /// The file.
        path: PathBuf,
        /// What is missing.
        reason: String,
    },
    /// The library was built against an incompatible interface.
    #[error("{path} was built against an incompatible plugin interface:\n{reason}")]
    Incompatible {
        /// The file.
        path: PathBuf,
        /// abi_stable's readable diff, or the version numbers.
        reason: String,
    },
    /// The manifest is malformed or does not match the row.
    #[error("{path}: bad manifest: {reason}")]
    Manifest {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The generation thread could not start.
    #[error("cannot start a thread for {path}: {reason}")]
    Thread {
        /// The file.
        path: PathBuf,
        /// The OS error.
        reason: String,
    },
    /// Inspected in a confined child process (see [`crate::isolate`]), the
    /// library crashed, hung, answered garbage, or could not be confined.
    /// Nothing of it ran in this process.
    #[error("{path}: {reason}")]
    Inspection {
        /// The file.
        path: PathBuf,
        /// What happened.
        reason: String,
    },
    /// Not loaded: the host is at one of its limits (rows, pthread keys;
    /// see [`crate::limits`]). Nothing of it ran.
    #[error("{path} was not loaded: {reason}")]
    Limit {
        /// The file.
        path: PathBuf,
        /// Which limit, and what to do.
        reason: String,
    },
}

/// Receives what a running generation sends. Implemented by the router.
pub trait Sink: Send + Sync {
    /// A message from the plugin. Returns 0 when accepted.
    fn deliver(&self, generation: &GenCtx, message: &Envelope) -> i32;
    /// A log record from the plugin.
    fn log(&self, generation: &GenCtx, level: u8, target: &str, message: &str);
    /// The actor of `fiber` returned `code` (called on the generation thread).
    fn exited(&self, fiber: u64, code: i32);
}

/// A sink for generations that never run their actor (inspection).
pub struct NullSink;

impl Sink for NullSink {
    fn deliver(&self, _: &GenCtx, _: &Envelope) -> i32 {
        -1
    }
    fn log(&self, _: &GenCtx, _: u8, _: &str, _: &str) {}
    fn exited(&self, _: u64, _: i32) {}
}

/// The host context of one generation; its address is the handle's `ctx`.
pub struct GenCtx {
    /// The fiber this generation serves.
    pub fiber: u64,
    /// The plugin's name (for logs).
    pub plugin: String,
    /// Its inbox.
    pub inbox: Arc<Inbox>,
    /// Where its messages go.
    pub sink: Arc<dyn Sink>,
}

extern "C" fn host_send(ctx: *const c_void, message: &Envelope) -> i32 {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `ctx` is the GenCtx this handle was built with; it outlives
        // the generation thread.
        let gen = unsafe { &*(ctx as *const GenCtx) };
        gen.sink.deliver(gen, message)
    }))
    .unwrap_or(-2)
}

extern "C" fn host_try_recv(ctx: *const c_void) -> ROption<Envelope> {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: as in `host_send`.
        let gen = unsafe { &*(ctx as *const GenCtx) };
        gen.inbox.pop()
    }))
    .ok()
    .flatten()
    .into()
}

extern "C" fn host_log(ctx: *const c_void, level: u8, target: RStr<'_>, message: RStr<'_>) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: as in `host_send`.
        let gen = unsafe { &*(ctx as *const GenCtx) };
        gen.sink.log(gen, level, target.as_str(), message.as_str());
    }));
}

/// Identity of a plugin file on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time (ns since the epoch).
    pub mtime_ns: i128,
}

impl FileId {
    /// Reads the identity of `path`.
    pub fn of(path: &Path) -> std::io::Result<FileId> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path)?;
        Ok(FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        })
    }
}

/// Counters over the life of the process.
#[derive(Debug, Default)]
pub struct UnloadStats {
    /// Generations loaded.
    pub loaded: AtomicU64,
    /// Generations closed and verified unmapped.
    pub unmapped: AtomicU64,
    /// Generations still mapped after dlclose (a thread pins them).
    pub pinned: AtomicU64,
    /// Generations never closed because closing was unsafe.
    pub quarantined: AtomicU64,
    /// pthread keys deleted by the sweep.
    pub keys_swept: AtomicU64,
}

/// Process-wide unload counters.
pub static STATS: UnloadStats = UnloadStats {
    loaded: AtomicU64::new(0),
    unmapped: AtomicU64::new(0),
    pinned: AtomicU64::new(0),
    quarantined: AtomicU64::new(0),
    keys_swept: AtomicU64::new(0),
};

/// What happened when a generation was unloaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unloaded {
    /// Closed; no mapping of the file remains.
    Unmapped {
        /// pthread keys deleted for it.
        keys_swept: usize,
    },
    /// Closed, but the file is still mapped (a thread of the plugin is
    /// still alive); counted as leaked.
    Pinned {
        /// Why.
        reason: String,
    },
    /// Never closed: closing could crash the host.
    Quarantined {
        /// Why.
        reason: String,
    },
}

impl std::fmt::Display for Unloaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unloaded::Unmapped { keys_swept } => {
                write!(f, "unmapped ({keys_swept} pthread keys swept)")
            }
            Unloaded::Pinned { reason } => write!(f, "leaked (still mapped): {reason}"),
            Unloaded::Quarantined { reason } => write!(f, "quarantined: {reason}"),
        }
    }
}

/// A loaded, checked library whose thread waits for `start` or `abort`.
pub struct Generation {
    /// The manifest the library declared.
    pub manifest: Manifest,
    /// The file the library was loaded from (the original or a copy).
    pub load_path: PathBuf,
    /// Identity of `load_path` at load time.
    pub file: FileId,
    /// Identity of the file the private copy was made from, as copied;
    /// `None` when `load_path` is not a copy (it is then never deleted).
    pub source: Option<FileId>,
    /// The inbox of this generation.
    pub inbox: Arc<Inbox>,
    go: Option<mpsc::Sender<bool>>,
    exited: mpsc::Receiver<i32>,
    thread: Option<JoinHandle<Option<Library>>>,
    ctx: *const GenCtx,
}

// SAFETY: `ctx` points to an `Arc<GenCtx>` (Send + Sync) owned by this value.
unsafe impl Send for Generation {}

/// How to load one generation.
pub struct LoadSpec<'a> {
    /// The file to dlopen.
    pub load_path: &'a Path,
    /// Identity of the file the private copy was made from; `None` when
    /// `load_path` is not a copy.
    pub source: Option<FileId>,
    /// Fiber id the generation will serve.
    pub fiber: u64,
    /// Name used for the thread and logs until the manifest is read.
    pub name_hint: &'a str,
    /// The message sink.
    pub sink: Arc<dyn Sink>,
}

/// Looks at the file, then dlopens it: nothing reaches `dlopen` (which runs
/// the library's constructors) without passing [`crate::preflight`].
fn open(path: &Path) -> Result<Library, LoadError> {
    // A name without a slash would send dlopen searching the system's
    // library path: always name the very file that was inspected.
    let file = std::path::absolute(path).map_err(|e| LoadError::Open {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    crate::preflight::inspect(&file).map_err(|reason| LoadError::Refused {
        path: path.to_owned(),
        reason,
    })?;
    // SAFETY: loading a library runs its initializers; that is the point,
    // and the file was checked to be a dsh plugin library just above.
    // RTLD_LOCAL keeps generations from binding to each other.
    unsafe { Library::open(Some(&file), libc::RTLD_NOW | libc::RTLD_LOCAL) }.map_err(|e| {
        LoadError::Open {
            path: path.to_owned(),
            reason: e.to_string(),
        }
    })
}

fn check(lib: &Library, path: &Path) -> Result<PluginModRef, LoadError> {
    let not_a_plugin = |reason: String| LoadError::NotAPlugin {
        path: path.to_owned(),
        reason,
    };
    let incompatible = |reason: String| LoadError::Incompatible {
        path: path.to_owned(),
        reason,
    };
    // SAFETY: the symbol, when present, is abi_stable's header static.
    let header: AbiHeaderRef = unsafe {
        *lib.get::<AbiHeaderRef>(ROOT_MODULE_LOADER_NAME_WITH_NUL.as_bytes())
            .map_err(|_| not_a_plugin("it exports no abi_stable root module".into()))?
    };
    let lib_header = header
        .upgrade()
        .map_err(|e| incompatible(format!("abi_stable header: {e}")))?;
    let layout = lib_header
        .layout()
        .ok_or_else(|| incompatible("the root module carries no layout to check".into()))?;
    // A fresh CheckingGlobals per load: abi_stable's global cache would
    // otherwise remember types from unloaded generations.
    check_layout_compatibility_with_globals(
        <PluginModRef as StableAbi>::LAYOUT,
        layout,
        &CheckingGlobals::new(),
    )
    .map_err(|e| incompatible(e.to_string()))?;
    // SAFETY: the layout was checked just above.
    let module = unsafe { lib_header.init_root_module_with_unchecked_layout::<PluginModRef>() }
        .map_err(|e| incompatible(e.to_string()))?;
    let _ = PluginModRef::NAME;
    let abi = module.abi_version();
    if abi != ABI_VERSION {
        return Err(incompatible(format!(
            "it speaks dsh plugin protocol v{abi}, this host speaks v{ABI_VERSION}; rebuild the plugin against this dsh-sdk"
        )));
    }
    Ok(module)
}

static THREAD_SEQ: AtomicU64 = AtomicU64::new(0);

impl Generation {
    /// Loads and checks the library on a new thread and reads its manifest.
    /// The thread then waits: call [`Generation::start`] to run the plugin.
    pub fn load(spec: LoadSpec<'_>) -> Result<Generation, LoadError> {
        let load_path = spec.load_path.to_owned();
        let file = FileId::of(&load_path).map_err(|e| LoadError::Open {
            path: load_path.clone(),
            reason: e.to_string(),
        })?;
        let thread_err = |e: std::io::Error| LoadError::Thread {
            path: load_path.clone(),
            reason: e.to_string(),
        };
        let inbox = Arc::new(Inbox::new().map_err(thread_err)?);
        let ctx = Arc::into_raw(Arc::new(GenCtx {
            fiber: spec.fiber,
            plugin: spec.name_hint.to_owned(),
            inbox: inbox.clone(),
            sink: spec.sink.clone(),
        }));
        let handle = HostHandle {
            ctx: ctx.cast(),
            wake_fd: inbox.wake_fd(),
            send: host_send,
            try_recv: host_try_recv,
            log: host_log,
        };
        let (loaded_tx, loaded_rx) = mpsc::channel::<Result<String, LoadError>>();
        let (go_tx, go_rx) = mpsc::channel::<bool>();
        let (exit_tx, exited) = mpsc::channel::<i32>();
        let path = load_path.clone();
        let exit_sink = spec.sink.clone();
        let fiber = spec.fiber;
        let seq = THREAD_SEQ.fetch_add(1, Ordering::Relaxed);
        let name: String = spec.name_hint.chars().take(8).collect();
        let thread = std::thread::Builder::new()
            .name(format!("dsh-{name}-{seq}"))
            .spawn(move || {
                let lib = match open(&path) {
                    Ok(lib) => lib,
                    Err(e) => {
                        let _ = loaded_tx.send(Err(e));
                        return None;
                    }
                };
                let module = match check(&lib, &path) {
                    Ok(m) => m,
                    Err(e) => {
                        let _ = loaded_tx.send(Err(e));
                        return Some(lib);
                    }
                };
                let manifest = (module.manifest())().into_string();
                let _ = loaded_tx.send(Ok(manifest));
                if go_rx.recv() != Ok(true) {
                    return Some(lib);
                }
                let code = (module.run())(handle);
                exit_sink.exited(fiber, code);
                let _ = exit_tx.send(code);
                Some(lib)
            })
            .map_err(thread_err)?;
        let mut generation = Generation {
            manifest: Manifest {
                name: spec.name_hint.to_owned(),
                version: String::new(),
                abi_version: 0,
                description: String::new(),
                provides: Vec::new(),
                inject: Vec::new(),
                config_schema: None,
            },
            load_path: load_path.clone(),
            file,
            source: spec.source,
            inbox,
            go: Some(go_tx),
            exited,
            thread: Some(thread),
            ctx,
        };
        let outcome = loaded_rx.recv().unwrap_or_else(|_| {
            Err(LoadError::Open {
                path: load_path.clone(),
                reason: "the loader thread died".into(),
            })
        });
        match outcome.and_then(|json| {
            serde_json::from_str::<Manifest>(&json).map_err(|e| LoadError::Manifest {
                path: load_path.clone(),
                reason: e.to_string(),
            })
        }) {
            Ok(manifest) => {
                STATS.loaded.fetch_add(1, Ordering::Relaxed);
                generation.manifest = manifest;
                Ok(generation)
            }
            Err(e) => {
                // Refused: close what was opened (the thread never ran the
                // plugin's actor) and report.
                generation.abort();
                Err(e)
            }
        }
    }

    /// The host context of this generation.
    pub fn ctx(&self) -> &GenCtx {
        // SAFETY: owned by self until `finish`.
        unsafe { &*self.ctx }
    }

    /// Lets the thread run the plugin's actor.
    pub fn start(&mut self) {
        if let Some(go) = self.go.take() {
            let _ = go.send(true);
        }
    }

    /// Unloads a generation whose actor never ran.
    pub fn abort(mut self) -> Unloaded {
        if let Some(go) = self.go.take() {
            let _ = go.send(false);
        }
        self.finish(Duration::from_secs(5))
    }

    /// Waits up to `timeout` for the thread to end (after STOP was sent),
    /// then unloads the library per ARCHITECTURE.md. Consumes the
    /// generation: its host context may be freed here, so nothing can read
    /// it afterwards.
    pub fn finish(mut self, timeout: Duration) -> Unloaded {
        let Some(thread) = self.thread.take() else {
            return Unloaded::Quarantined {
                reason: "no thread".into(),
            };
        };
        // The actor reports its exit code; a thread that never ran the actor
        // (aborted load) ends on its own.
        let deadline = std::time::Instant::now() + timeout;
        let _ = self.exited.recv_timeout(timeout);
        while !thread.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if !thread.is_finished() {
            // Never close: the thread may still run plugin code.
            std::mem::forget(thread);
            self.inbox.close();
            STATS.quarantined.fetch_add(1, Ordering::Relaxed);
            return Unloaded::Quarantined {
                reason: format!(
                    "its thread did not stop within {} ms (a blocking task or a hung dispose)",
                    timeout.as_millis()
                ),
            };
        }
        let lib = thread.join().unwrap_or_default();
        // Only now: closing earlier could drop a STOP the actor has not read.
        self.inbox.close();
        // The thread is gone: the host context can be reclaimed.
        // SAFETY: created by Arc::into_raw in `load`; no user remains.
        drop(unsafe { Arc::from_raw(self.ctx) });
        let Some(lib) = lib else {
            self.remove_copy();
            return Unloaded::Unmapped { keys_swept: 0 };
        };
        unload_library(lib, &self.load_path, self.file.ino, self.source.is_some())
    }

    fn remove_copy(&self) {
        if self.source.is_some() {
            let _ = std::fs::remove_file(&self.load_path);
        }
    }
}

/// Closes `lib` after the audits; see the module doc.
fn unload_library(lib: Library, path: &Path, ino: u64, is_copy: bool) -> Unloaded {
    let shown = mapped_name(path);
    let mappings = procfs::mappings_of(&shown, ino);
    let ranges: Vec<(usize, usize)> = mappings.iter().map(|m| (m.start, m.end)).collect();
    if let Some(n) = crate::threads::live_in(&ranges).filter(|n| *n > 0) {
        std::mem::forget(lib);
        STATS.quarantined.fetch_add(1, Ordering::Relaxed);
        return Unloaded::Quarantined {
            reason: format!(
                "{n} thread(s) it started are still running; closing it would pull their code out from under them"
            ),
        };
    }
    if let Some(sig) = signal_handler_inside(&ranges) {
        std::mem::forget(lib);
        STATS.quarantined.fetch_add(1, Ordering::Relaxed);
        return Unloaded::Quarantined {
            reason: format!(
                "it installed a handler for signal {sig} ({}); closing it would crash the host at the next such signal",
                signal_name(sig)
            ),
        };
    }
    if let Err(e) = lib.close() {
        STATS.pinned.fetch_add(1, Ordering::Relaxed);
        return Unloaded::Pinned {
            reason: format!("dlclose failed: {e}"),
        };
    }
    if is_copy {
        let _ = std::fs::remove_file(path);
    }
    let left: Vec<Mapping> = procfs::mappings_of(&shown, ino);
    if left.iter().any(Mapping::is_exec) || still_loaded(path, ino) {
        STATS.pinned.fetch_add(1, Ordering::Relaxed);
        return Unloaded::Pinned {
            reason: "a thread it started is still alive (or a thread-local destructor is pending)"
                .into(),
        };
    }
    let swept = crate::keys::sweep(&ranges);
    STATS.unmapped.fetch_add(1, Ordering::Relaxed);
    STATS.keys_swept.fetch_add(swept as u64, Ordering::Relaxed);
    Unloaded::Unmapped { keys_swept: swept }
}

/// The name `/proc/self/maps` shows for the file loaded from `path`: the
/// path itself, or, for a memory file opened as `/proc/self/fd/N` (the
/// sealed copy a confined inspection loads, see [`crate::isolate`]), the
/// name the file was created with.
fn mapped_name(path: &Path) -> PathBuf {
    const MEMFD: &[u8] = b"/memfd:";
    if path.starts_with("/proc/self/fd") {
        if let Ok(target) = std::fs::read_link(path) {
            let bytes = target.as_os_str().as_encoded_bytes();
            if bytes.starts_with(MEMFD) {
                let name = target.to_string_lossy();
                return PathBuf::from(name.strip_suffix(" (deleted)").unwrap_or(&name));
            }
        }
    }
    path.to_owned()
}

fn still_loaded(path: &Path, ino: u64) -> bool {
    // NOLOAD matches by inode too: only ask while `path` is still that file.
    if FileId::of(path).ok().map(|f| f.ino) != Some(ino) {
        return false;
    }
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: RTLD_NOLOAD never loads; a non-null handle is released at once.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if h.is_null() {
        false
    } else {
        // SAFETY: releases the reference NOLOAD took.
        unsafe { libc::dlclose(h) };
        true
    }
}

/// The first signal whose handler lies inside `ranges`.
fn signal_handler_inside(ranges: &[(usize, usize)]) -> Option<i32> {
    for sig in 1..=libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: `sigaction` is plain data; all-zero is a valid value.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: querying only (null new action) into a local we own.
        let rc = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
        if rc != 0 {
            continue;
        }
        let handler = old.sa_sigaction;
        if handler > 1 && ranges.iter().any(|(s, e)| (*s..*e).contains(&handler)) {
            return Some(sig);
        }
    }
    None
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGWINCH => "SIGWINCH",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_memory_file_is_found_in_the_maps_by_the_name_it_was_created_with() {
        let dir = dsh_tempdir::PrivateDir::new("dsh-loader-test-").unwrap();
        let file = dir.path().join("lib.so");
        std::fs::write(&file, b"bytes").unwrap();
        let copy = crate::sealed::copy_of(&file).unwrap();
        let via_fd = PathBuf::from(format!("/proc/self/fd/{}", copy.as_raw_fd()));
        assert_eq!(mapped_name(&via_fd), PathBuf::from("/memfd:dsh-inspect"));
        assert_eq!(mapped_name(&file), file);
    }
}
