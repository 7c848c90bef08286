//! The server's `notifications/tools/list_changed`, counted: the bridge
//! re-syncs on each and records how many it has covered, so a call whose
//! server changed its list while answering returns only once the new
//! list is registered, and the model's next request offers it.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};

/// Shared with rmcp's handler (which runs on rmcp's tasks).
#[derive(Default)]
pub struct Notices {
    seen: AtomicU64,
    wake: Notify,
}

impl Notices {
    /// The server said its list changed.
    pub fn notice(&self) {
        self.seen.fetch_add(1, Ordering::SeqCst);
        self.wake.notify_one();
    }
}

/// The bridge's side: the notices, and how many its syncs have covered.
pub struct ListChanges {
    notices: Arc<Notices>,
    synced: watch::Sender<u64>,
    /// Covered by the sync under way (set when it starts).
    pending: RefCell<u64>,
}

impl ListChanges {
    /// No notice yet.
    pub fn new() -> ListChanges {
        ListChanges {
            notices: Arc::new(Notices::default()),
            synced: watch::Sender::new(0),
            pending: RefCell::new(0),
        }
    }

    /// What rmcp's handler counts on.
    pub fn notices(&self) -> Arc<Notices> {
        self.notices.clone()
    }

    /// Resolves at the next notice not yet covered.
    pub async fn next(&self) {
        self.notices.wake.notified().await;
    }

    /// A sync starts: it covers every notice seen so far.
    pub fn sync_started(&self) {
        *self.pending.borrow_mut() = self.notices.seen.load(Ordering::SeqCst);
    }

    /// That sync ended (well or not: a waiting call must not hang).
    pub fn sync_ended(&self) {
        let covered = *self.pending.borrow();
        self.synced.send_if_modified(|s| {
            let newer = covered > *s;
            if newer {
                *s = covered;
            }
            newer
        });
    }

    /// Waits, at most `limit`, until every notice seen so far is covered
    /// by a finished sync. A notice rmcp has not handed over yet gets one
    /// turn of the runtime first.
    pub async fn settled(&self, limit: Duration) {
        tokio::task::yield_now().await;
        let seen = self.notices.seen.load(Ordering::SeqCst);
        let mut synced = self.synced.subscribe();
        let _ = tokio::time::timeout(limit, synced.wait_for(|s| *s >= seen)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_waits_for_the_sync_of_a_notice_and_not_longer() {
        let changes = ListChanges::new();
        // Nothing seen: no wait.
        changes.settled(Duration::from_secs(60)).await;
        changes.notices().notice();
        changes.sync_started();
        let waited = tokio::time::timeout(
            Duration::from_millis(50),
            changes.settled(Duration::from_secs(60)),
        )
        .await;
        assert!(waited.is_err(), "settled before the sync ended");
        changes.sync_ended();
        changes.settled(Duration::from_secs(60)).await;
    }
}
