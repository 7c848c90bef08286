//! A generation's inbox: a queue of envelopes plus the eventfd that wakes the
//! plugin's runtime. Host code only; pushes come from any thread.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use dsh_abi::Envelope;

/// Messages waiting for one plugin generation.
pub struct Inbox {
    queue: Mutex<Queue>,
    fd: OwnedFd,
    open: AtomicBool,
}

/// The queue, and whether the plugin is parked: it found the queue empty
/// and waits on the eventfd. Only a push to a parked plugin writes the
/// eventfd; a plugin that is still draining finds the message on its own
/// (it drains until the queue is empty, which parks it again). Under one
/// lock, so no push can slip between "empty" and "parked".
struct Queue {
    items: VecDeque<Envelope>,
    parked: bool,
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
            queue: Mutex::new(Queue {
                items: VecDeque::new(),
                parked: true,
            }),
            // SAFETY: `fd` is a fresh descriptor we own.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            open: AtomicBool::new(true),
        })
    }

    /// The eventfd handed to the plugin.
    pub fn wake_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Queues a message and wakes the plugin if it is parked. Returns false
    /// once closed.
    pub fn push(&self, env: Envelope) -> bool {
        if !self.open.load(Ordering::Acquire) {
            return false;
        }
        let wake = {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.items.push_back(env);
            std::mem::replace(&mut q.parked, false)
        };
        if wake {
            let one: u64 = 1;
            // SAFETY: writing 8 bytes from a valid u64 to our eventfd.
            unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
        true
    }

    /// Takes the next message; finding none parks the plugin (the next push
    /// writes the eventfd).
    pub fn pop(&self) -> Option<Envelope> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let next = q.items.pop_front();
        if next.is_none() {
            q.parked = true;
        }
        next
    }

    /// Refuses further messages (the generation is gone).
    pub fn close(&self) {
        self.open.store(false, Ordering::Release);
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .items
            .clear();
    }

    /// True until closed.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }
}
