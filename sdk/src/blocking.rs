//! Blocking work that stops with its caller.
//!
//! A plugin's runtime joins its blocking threads when the plugin stops, so a
//! blocking task that keeps going (scanning a huge file, walking a huge tree)
//! holds up the unload until it ends. [`cancellable`] hands the work a flag
//! that turns true as soon as the awaiting future is dropped — the call was
//! cancelled, or the plugin is stopping and its tasks are being dropped — so a
//! loop that checks it between chunks returns early.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};

/// The flag handed to [`cancellable`] work.
#[derive(Debug, Default)]
pub struct Cancel(AtomicBool);

impl Cancel {
    /// Whether the caller has gone away.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Marks the work as no longer wanted (what dropping the call does).
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

struct SetOnDrop(Arc<Cancel>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Runs `work` on the blocking pool; the [`Cancel`] it receives is set when
/// the returned future is dropped before the work finishes.
pub async fn cancellable<T, F>(work: F) -> Result<T>
where
    F: FnOnce(&Cancel) -> T + Send + 'static,
    T: Send + 'static,
{
    let cancel = Arc::new(Cancel::default());
    let _guard = SetOnDrop(cancel.clone());
    tokio::task::spawn_blocking(move || work(&cancel))
        .await
        .map_err(|e| Error::msg(format!("blocking work failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn dropping_the_future_cancels_the_work() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (started, wait_started) = mpsc::channel();
        let (done, wait_done) = mpsc::channel();
        rt.block_on(async {
            let call = cancellable(move |cancel| {
                started.send(()).unwrap();
                while !cancel.is_cancelled() {
                    std::thread::yield_now();
                }
                done.send(()).unwrap();
            });
            // Poll once so the work starts, then drop the call.
            let mut call = Box::pin(call);
            let _ = futures_poll_once(call.as_mut()).await;
            wait_started.recv().unwrap();
            drop(call);
        });
        wait_done.recv_timeout(Duration::from_secs(10)).unwrap();
    }

    #[test]
    fn finished_work_returns_its_value() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let value = rt.block_on(cancellable(|c| !c.is_cancelled())).unwrap();
        assert!(value);
    }

    async fn futures_poll_once<F: std::future::Future + Unpin>(f: F) -> Option<F::Output> {
        let mut f = f;
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
                std::task::Poll::Ready(v) => Some(v),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
