//! Disposal, in the original's order: the agent drains (its running turn
//! ends `aborted{disposed}`, pending work parked for a resume, no wake
//! latched), then its scope closes (`agent/scope-closed`, awaited: what was
//! registered in it goes), then the agent detaches (`agent/disposed`), then
//! its session (`session/disposed`, the final write durable and the log's
//! lock released).
//!
//! One disposal per agent: whoever asks while one runs (its owner's unload
//! and an explicit `dispose` at once) waits for that one, so every caller
//! returns only once the agent and its session are gone.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use dsh_sdk::api::agent_loop::AgentRef;
use dsh_sdk::api::sessions::Sessions;
use dsh_sdk::names::bus;
use dsh_sdk::vocab::records::CancelCause;
use tokio::sync::oneshot;

use crate::Loop;

/// The disposals running, each with the callers waiting for it.
pub(crate) type Disposing = Rc<RefCell<HashMap<String, Vec<oneshot::Sender<()>>>>>;

/// Ends the disposal of `agent` when dropped (done, or the plugin going):
/// its waiters are let go.
struct Running {
    disposing: Disposing,
    agent: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let waiters = self.disposing.borrow_mut().remove(&self.agent);
        for w in waiters.into_iter().flatten() {
            let _ = w.send(());
        }
    }
}

impl Loop {
    /// Disposes `agent` (nothing when it is not live), or waits for the
    /// disposal already running. The disposal runs on a task of its own,
    /// so a caller that gives up waiting (its call cancelled, its plugin
    /// gone) never leaves it half done. An agent being published is
    /// disposed as soon as its publication is done.
    pub(crate) async fn dispose(&self, agent: &str) {
        if !self.agents.borrow().contains_key(agent) {
            if let Some(requested) = self.publishing.borrow_mut().get_mut(agent) {
                *requested = true;
            }
            return;
        }
        let (tx, done) = oneshot::channel();
        let first = {
            let mut disposing = self.disposing.borrow_mut();
            match disposing.get_mut(agent) {
                Some(waiters) => {
                    waiters.push(tx);
                    false
                }
                None => {
                    disposing.insert(agent.to_owned(), vec![tx]);
                    true
                }
            }
        };
        if first {
            let (l, id) = (self.clone(), agent.to_owned());
            self.ctx.spawn(async move {
                let _running = Running {
                    disposing: l.disposing.clone(),
                    agent: id.clone(),
                };
                l.tear_down(&id).await;
            });
        }
        let _ = done.await;
    }

    /// Whether `agent`'s disposal has begun.
    pub(crate) fn is_disposing(&self, agent: &str) -> bool {
        self.disposing.borrow().contains_key(agent)
    }

    async fn tear_down(&self, agent: &str) {
        // From here on, a message is parked and never wakes it.
        if let Some(a) = self.agents.borrow_mut().get_mut(agent) {
            a.disposing = true;
        }
        if self
            .cancel(agent, CancelCause::Disposed, true)
            .await
            .is_err()
        {
            return;
        }
        let _ = self.when_idle(agent).await;
        let about = AgentRef {
            agent: agent.to_owned(),
        };
        if let Err(e) = self.ctx.parallel(bus::AGENT_SCOPE_CLOSED, &about).await {
            dsh_sdk::tracing::warn!("closing the scope of disposed agent {agent}: {e}");
        }
        let Some(mut gone) = self.agents.borrow_mut().remove(agent) else {
            return;
        };
        if let Some(cleanup) = gone.owner_cleanup.take() {
            cleanup.cancel();
        }
        self.notify(bus::AGENT_DISPOSED, &about);
        if let Err(e) = Sessions::new(&self.ctx).close(agent).await {
            dsh_sdk::tracing::warn!("closing the session of disposed agent {agent}: {e}");
        }
    }
}
