//! Host duty 2: sweep the pthread keys a plugin generation leaves behind.
//!
//! Every copy of Rust's std creates a pthread key (its TLS-destructor guard)
//! and never deletes it; glibc has 1,024 keys, so without a sweep the host
//! aborts after about a thousand reloads. The `dsh-host` executable defines
//! `pthread_key_create`/`pthread_key_delete` (see [`crate::interpose_pthread_keys!`])
//! and exports them, so plugin libraries bind to them. We record each key's
//! destructor address; after a generation is joined and unmapped, keys whose
//! destructor lay inside it are deleted. Safe: every thread that could hold
//! a value for those keys has been joined.
//!
//! Keys of generations that stay loaded cannot be swept: [`headroom`] tells
//! the supervisor how many are left, and `limits.rs` refuses loads
//! (and trees) that would run out.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Keys alive, with their destructor address (0 = none).
static KEYS: Mutex<Vec<(libc::pthread_key_t, usize)>> = Mutex::new(Vec::new());
static ACTIVE: AtomicBool = AtomicBool::new(false);
static REAL_DELETE: AtomicUsize = AtomicUsize::new(0);

type Dtor = Option<unsafe extern "C" fn(*mut c_void)>;

extern "C" {
    fn __pthread_key_create(key: *mut libc::pthread_key_t, dtor: Dtor) -> libc::c_int;
}

/// True when the running executable interposes the key functions.
pub fn sweep_active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// glibc's `PTHREAD_KEYS_MAX`, for a libc that does not say.
const DEFAULT_KEYS_MAX: usize = 1024;

/// How many more pthread keys this process can create, counting the keys
/// created through the interposer and not deleted; `None` when the running
/// executable does not interpose key creation (nothing is counted). Keys
/// glibc makes for itself are not seen: keep a reserve (see
/// `limits.rs`).
pub fn headroom() -> Option<usize> {
    if !sweep_active() {
        return None;
    }
    // SAFETY: sysconf reads a constant.
    let max = unsafe { libc::sysconf(libc::_SC_THREAD_KEYS_MAX) };
    let max = usize::try_from(max)
        .ok()
        .filter(|m| *m > 0)
        .unwrap_or(DEFAULT_KEYS_MAX);
    Some(max.saturating_sub(keys().len()))
}

fn keys() -> std::sync::MutexGuard<'static, Vec<(libc::pthread_key_t, usize)>> {
    KEYS.lock().unwrap_or_else(|e| e.into_inner())
}

#[doc(hidden)]
/// Body of the interposed `pthread_key_create`. Never panics.
pub unsafe fn create(key: *mut libc::pthread_key_t, dtor: Dtor) -> libc::c_int {
    // SAFETY: forwarded verbatim to glibc.
    let rc = unsafe { __pthread_key_create(key, dtor) };
    if rc == 0 && !key.is_null() {
        ACTIVE.store(true, Ordering::Relaxed);
        // SAFETY: glibc wrote the key.
        let k = unsafe { *key };
        keys().push((k, dtor.map_or(0, |f| f as usize)));
    }
    rc
}

fn real_delete() -> Option<unsafe extern "C" fn(libc::pthread_key_t) -> libc::c_int> {
    let mut addr = REAL_DELETE.load(Ordering::Acquire);
    if addr == 0 {
        // SAFETY: dlsym with a valid NUL-terminated name.
        addr = unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_key_delete".as_ptr()) } as usize;
        REAL_DELETE.store(addr, Ordering::Release);
    }
    // SAFETY: the address is glibc's pthread_key_delete.
    (addr != 0).then(|| unsafe { std::mem::transmute::<usize, _>(addr) })
}

#[doc(hidden)]
/// Body of the interposed `pthread_key_delete`. Never panics.
pub unsafe fn delete(key: libc::pthread_key_t) -> libc::c_int {
    keys().retain(|(k, _)| *k != key);
    match real_delete() {
        // SAFETY: forwarded verbatim to glibc.
        Some(f) => unsafe { f(key) },
        None => libc::EINVAL,
    }
}

/// Deletes every recorded key whose destructor lies in one of `ranges`.
/// Returns how many were deleted.
pub fn sweep(ranges: &[(usize, usize)]) -> usize {
    let doomed: Vec<libc::pthread_key_t> = {
        let mut keys = keys();
        let mut doomed = Vec::new();
        keys.retain(|(k, dtor)| {
            let inside = *dtor != 0 && ranges.iter().any(|(s, e)| (*s..*e).contains(dtor));
            if inside {
                doomed.push(*k);
            }
            !inside
        });
        doomed
    };
    if let Some(f) = real_delete() {
        for k in &doomed {
            // SAFETY: every thread that used the key has exited.
            unsafe { f(*k) };
        }
    }
    doomed.len()
}

/// Defines the interposed `pthread_key_create`/`pthread_key_delete` in the
/// calling crate. Invoke it once in an executable that loads plugins (the
/// `dsh-host` binary does); its build script must export both symbols
/// (`-Wl,--export-dynamic-symbol=...`).
#[macro_export]
macro_rules! interpose_pthread_keys {
    () => {
        /// Interposed: records the key and its destructor, then creates it.
        ///
        /// # Safety
        /// Same contract as POSIX `pthread_key_create`.
        #[no_mangle]
        pub unsafe extern "C" fn pthread_key_create(
            key: *mut $crate::__libc::pthread_key_t,
            dtor: Option<unsafe extern "C" fn(*mut ::std::ffi::c_void)>,
        ) -> $crate::__libc::c_int {
            // SAFETY: same contract as the caller's.
            unsafe { $crate::keys::create(key, dtor) }
        }

        /// Interposed: starts the thread through a host trampoline that
        /// tracks which library's code it runs (see `dsh_host::threads`).
        ///
        /// # Safety
        /// Same contract as POSIX `pthread_create`.
        #[no_mangle]
        pub unsafe extern "C" fn pthread_create(
            thread: *mut $crate::__libc::pthread_t,
            attr: *const $crate::__libc::pthread_attr_t,
            routine: extern "C" fn(*mut ::std::ffi::c_void) -> *mut ::std::ffi::c_void,
            arg: *mut ::std::ffi::c_void,
        ) -> $crate::__libc::c_int {
            // SAFETY: same contract as the caller's.
            unsafe { $crate::threads::create(thread, attr, routine, arg) }
        }

        /// Interposed: forgets the key, then deletes it.
        ///
        /// # Safety
        /// Same contract as POSIX `pthread_key_delete`.
        #[no_mangle]
        pub unsafe extern "C" fn pthread_key_delete(
            key: $crate::__libc::pthread_key_t,
        ) -> $crate::__libc::c_int {
            // SAFETY: same contract as the caller's.
            unsafe { $crate::keys::delete(key) }
        }
    };
}
