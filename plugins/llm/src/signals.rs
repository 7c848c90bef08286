//! Cancellation signals by name (the original's `AbortSignal`).
//!
//! A caller names its requests with a `signal` and cancels them with
//! `llm.cancel {signal}`. Like an `AbortSignal`, a name is one signal for
//! every request made under it, and it stays aborted: a request that starts
//! under a name already cancelled (its cancel raced ahead of the request,
//! say a cancel during a pre-step whose compaction had not opened its stream
//! yet) ends at once with `finish{aborted}` instead of running a model call
//! nobody waits for.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use tokio::sync::Notify;

/// Names cancelled and kept aborted at most (the oldest is forgotten
/// beyond it; a name is normally used by one pre-step only).
const ABORTED_KEPT: usize = 256;

/// One signal: aborted once, for good.
#[derive(Default)]
pub struct Signal {
    aborted: Cell<bool>,
    notify: Notify,
}

impl Signal {
    fn abort(&self) {
        self.aborted.set(true);
        self.notify.notify_waiters();
    }

    /// Whether the signal was aborted.
    pub fn is_aborted(&self) -> bool {
        self.aborted.get()
    }

    /// Resolves once the signal is aborted (at once if it already is).
    pub async fn aborted(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if !self.aborted.get() {
            notified.await;
        }
    }
}

/// The signals of the requests streaming now, and the names cancelled.
#[derive(Default)]
pub struct Signals {
    by_name: HashMap<String, Rc<Signal>>,
    /// Aborted names, oldest first.
    aborted: VecDeque<String>,
}

impl Signals {
    /// The signal of `name` for a request starting under it (shared with
    /// the other requests under it; aborted already when it was cancelled).
    pub fn join(&mut self, name: &str) -> Rc<Signal> {
        self.by_name.entry(name.to_owned()).or_default().clone()
    }

    /// A request under `name` ended: a signal nobody else holds is
    /// forgotten, unless it is one of the aborted names kept.
    pub fn leave(&mut self, name: &str, signal: Rc<Signal>) {
        drop(signal);
        let idle = self.by_name.get(name).is_some_and(|s| {
            Rc::strong_count(s) == 1 && !(s.is_aborted() && self.aborted.iter().any(|n| n == name))
        });
        if idle {
            self.by_name.remove(name);
        }
    }

    /// Aborts `name`: its requests now, and the ones that start under it
    /// later. Whether a request was streaming under it.
    pub fn cancel(&mut self, name: &str) -> bool {
        let signal = self.join(name);
        let streaming = Rc::strong_count(&signal) > 2;
        if !signal.is_aborted() {
            signal.abort();
            self.aborted.push_back(name.to_owned());
        }
        drop(signal);
        while self.aborted.len() > ABORTED_KEPT {
            let Some(old) = self.aborted.pop_front() else {
                break;
            };
            if self
                .by_name
                .get(&old)
                .is_some_and(|s| Rc::strong_count(s) == 1)
            {
                self.by_name.remove(&old);
            }
        }
        streaming
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_name.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{Signals, ABORTED_KEPT};

    #[test]
    fn one_cancel_aborts_every_request_under_the_name() {
        let mut s = Signals::default();
        let (a, b) = (s.join("x"), s.join("x"));
        assert!(s.cancel("x"), "requests were streaming");
        assert!(a.is_aborted() && b.is_aborted());
        s.leave("x", a);
        s.leave("x", b);
        // Still aborted: a request that starts under it now ends at once.
        assert!(s.join("x").is_aborted());
    }

    #[test]
    fn a_cancel_before_the_request_aborts_it_when_it_starts() {
        let mut s = Signals::default();
        assert!(!s.cancel("pre-step:a:1:1"), "nothing was streaming");
        assert!(s.join("pre-step:a:1:1").is_aborted());
        assert!(!s.join("other").is_aborted());
    }

    #[test]
    fn an_aborted_name_evicted_while_it_streams_goes_when_its_request_ends() {
        let mut s = Signals::default();
        let held = s.join("old");
        s.cancel("old");
        for i in 0..ABORTED_KEPT {
            s.cancel(&format!("n{i}"));
        }
        s.leave("old", held);
        assert_eq!(s.len(), ABORTED_KEPT, "nothing outlives the bound");
    }

    #[test]
    fn signals_nobody_holds_are_forgotten_and_cancelled_ones_are_bounded() {
        let mut s = Signals::default();
        let a = s.join("a");
        s.leave("a", a);
        assert_eq!(s.len(), 0, "an ended request leaves nothing behind");
        for i in 0..ABORTED_KEPT + 10 {
            s.cancel(&format!("n{i}"));
        }
        assert_eq!(s.len(), ABORTED_KEPT);
        assert!(!s.join("n0").is_aborted(), "the oldest was forgotten");
    }
}
