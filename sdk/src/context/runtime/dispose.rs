//! Unwinding a fiber: the state for the next generation first, then the
//! effects in reverse, then the tasks and every registration.

use serde_json::Value;

use super::Shared;
use crate::unwind::catch;

impl Shared {
    /// The state for the successor, if this generation offers one: made
    /// before any effect runs, so it sees the state the effects tear down.
    fn take_handoff(&self) -> Option<Value> {
        let make = self.handoff.borrow_mut().take()?;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(make)) {
            Ok(Ok(state)) => Some(state),
            Ok(Err(e)) => {
                tracing::warn!("the state handed to the next generation failed: {e}");
                None
            }
            Err(payload) => {
                let e = crate::unwind::panic_error(payload.as_ref());
                tracing::warn!("the state handed to the next generation panicked: {e}");
                None
            }
        }
    }

    /// Runs every effect in reverse and forgets every registration.
    /// Answers the state handed to the successor (see
    /// [`Context::handoff`](crate::Context::handoff)).
    pub(crate) async fn dispose(&self) -> Option<Value> {
        let handoff = self.take_handoff();
        self.inherited.borrow_mut().take();
        if let Some(apply) = self.lifecycle.borrow_mut().take() {
            apply.abort();
        }
        // Effects first (in reverse): a disposer may still need the fiber's
        // tasks, e.g. to let a running job close cleanly. Then the tasks go.
        loop {
            let effect = self.effects.borrow_mut().pop();
            let Some(effect) = effect else { break };
            if let Err(e) = catch(effect()).await {
                tracing::warn!("an effect of `{}` failed while disposing: {e}", self.name);
            }
        }
        for task in self.tasks.borrow_mut().drain(..) {
            task.abort();
        }
        self.services.borrow_mut().clear();
        self.listeners.borrow_mut().clear();
        self.inners.borrow_mut().clear();
        for (_, (_, task)) in self.running_inners.borrow_mut().drain() {
            task.abort();
        }
        self.caller_cleanups.borrow_mut().clear();
        for (_, task) in self.incoming.borrow_mut().drain() {
            task.abort();
        }
        handoff
    }
}
