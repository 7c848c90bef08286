//! Host duty: never close a generation while a thread it started still
//! runs. The `dsh-host` executable interposes `pthread_create` (see
//! [`crate::interpose_pthread_keys!`]): each new thread starts in a host
//! trampoline that records the start routine's address and forgets it when
//! the routine returns. Before `dlclose`, a live thread whose start routine
//! lies inside the generation means quarantine: returning into unmapped code
//! would crash the host, and relying on a pending thread-local destructor to
//! pin the library is luck, not design.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

static LIVE: Mutex<Vec<(usize, u64)>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(1);
static ACTIVE: AtomicBool = AtomicBool::new(false);
static REAL: AtomicUsize = AtomicUsize::new(0);

type Routine = extern "C" fn(*mut c_void) -> *mut c_void;
type Create = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    Routine,
    *mut c_void,
) -> libc::c_int;

struct Start {
    routine: Routine,
    arg: *mut c_void,
    id: u64,
}

fn live() -> std::sync::MutexGuard<'static, Vec<(usize, u64)>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

struct Done(u64);

impl Drop for Done {
    fn drop(&mut self) {
        let id = self.0;
        live().retain(|(_, i)| *i != id);
    }
}

extern "C" fn trampoline(p: *mut c_void) -> *mut c_void {
    // SAFETY: `p` is the Box leaked by `create` for this thread.
    let start = unsafe { Box::from_raw(p.cast::<Start>()) };
    let _done = Done(start.id);
    (start.routine)(start.arg)
}

fn real() -> Option<Create> {
    let mut addr = REAL.load(Ordering::Acquire);
    if addr == 0 {
        // SAFETY: dlsym with a valid NUL-terminated name.
        addr = unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_create".as_ptr()) } as usize;
        REAL.store(addr, Ordering::Release);
    }
    // SAFETY: the address is glibc's pthread_create.
    (addr != 0).then(|| unsafe { std::mem::transmute::<usize, Create>(addr) })
}

#[doc(hidden)]
/// Body of the interposed `pthread_create`. Never panics.
pub unsafe fn create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    routine: Routine,
    arg: *mut c_void,
) -> libc::c_int {
    let Some(real) = real() else {
        return libc::EAGAIN;
    };
    ACTIVE.store(true, Ordering::Relaxed);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    live().push((routine as usize, id));
    let boxed = Box::into_raw(Box::new(Start { routine, arg, id }));
    // SAFETY: forwarded to glibc with our trampoline and its argument.
    let rc = unsafe { real(thread, attr, trampoline, boxed.cast()) };
    if rc != 0 {
        live().retain(|(_, i)| *i != id);
        // SAFETY: the thread was not created; the box is still ours.
        drop(unsafe { Box::from_raw(boxed) });
    }
    rc
}

/// Threads still running whose start routine lies in `ranges`, or `None`
/// when this executable does not interpose `pthread_create`.
pub fn live_in(ranges: &[(usize, usize)]) -> Option<usize> {
    if !ACTIVE.load(Ordering::Relaxed) {
        return None;
    }
    Some(
        live()
            .iter()
            .filter(|(r, _)| ranges.iter().any(|(s, e)| (*s..*e).contains(r)))
            .count(),
    )
}
