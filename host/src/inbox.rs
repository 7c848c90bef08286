//! A generation's inbox: a queue of envelopes plus the eventfd that wakes the
//! plugin's runtime. Host code only; pushes come from any thread.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use dsh_abi::Envelope;

/// Messages waiting for one plugin generation.
pub struct Inbox {
    queue: Mutex<VecDeque<Envelope>>,
    fd: OwnedFd,
    open: AtomicBool,
}

impl Inbox {
    /// Creates an inbox with a fresh eventfd.
    pub fn new() -> std::io::Result<Inbox> {
        // SAFETY: plain syscall; the fd is owned below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Inbox {
            queue: Mutex::new(VecDeque::new()),
            // SAFETY: `fd` is a fresh descriptor we own.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            open: AtomicBool::new(true),
        })
    }

    /// The eventfd handed to the plugin.
    pub fn wake_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Queues a message and wakes the plugin. Returns false once closed.
    pub fn push(&self, env: Envelope) -> bool {
        if !self.open.load(Ordering::Acquire) {
            return false;
        }
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(env);
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a valid u64 to our eventfd.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        true
    }

    /// Takes the next message.
    pub fn pop(&self) -> Option<Envelope> {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }

    /// Refuses further messages (the generation is gone).
    pub fn close(&self) {
        self.open.store(false, Ordering::Release);
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// True until closed.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }
}
