//! What the host asks of this plugin: service calls, listener invocations
//! and the inner defaults of its waterfalls, each run as a handler future
//! whose result goes back as a reply; and the notices that stop such work
//! (a cancelled call, a departed fiber, a dropped waterfall).

use std::rc::Rc;

use dsh_wire::{Cow, Mode, ReplyKind, ToHost};
use serde_json::Value;

use super::{LocalBoxFuture, Shared};
use crate::context::{Event, FiberId, Reply, Request};
use crate::error::{codes, Error, Result};
use crate::payload::Payload;
use crate::unwind::catch;

/// The final reply of a stream that ended without an error.
const NULL: &str = "null";

/// A listener invocation's event, as the host sent it.
pub(crate) struct EventMsg {
    pub mode: Mode,
    pub name: String,
    pub scope: String,
    pub payload: String,
}

/// The value an INNER request carries (empty text: `null`).
fn parse_payload(text: &str) -> Result<Value> {
    if text.is_empty() {
        return Ok(Value::Null);
    }
    Ok(serde_json::from_str(text)?)
}

impl Shared {
    /// Answers host request `id` with a final result or error.
    fn reply(&self, id: u64, result: Result<String>) {
        let (kind, payload) = match result {
            Ok(text) => (ReplyKind::Ok, text),
            Err(e) => (ReplyKind::Err, e.to_payload()),
        };
        self.send(ToHost::Reply {
            id,
            kind,
            payload: Cow::Owned(payload),
        });
    }

    /// Sends one stream item of host request `id`.
    fn reply_item(&self, id: u64, item: String) {
        self.send(ToHost::Reply {
            id,
            kind: ReplyKind::Item,
            payload: Cow::Owned(item),
        });
    }

    /// Handles an incoming service CALL.
    pub(crate) fn on_call(
        self: &Rc<Self>,
        id: u64,
        caller: FiberId,
        service: String,
        method: String,
        params: String,
    ) {
        let handler = self.services.borrow().get(&service).cloned();
        let Some(handler) = handler else {
            self.reply(
                id,
                Err(Error::new(
                    codes::SERVICE_UNAVAILABLE,
                    format!("plugin `{}` does not provide `{service}`", self.name),
                )),
            );
            return;
        };
        let request = Request::new(
            service,
            method,
            Payload::from_text(params),
            caller,
            Rc::downgrade(self),
        );
        let fut = handler(request);
        let shared = self.clone();
        self.run_or_spawn(
            Some(id),
            Box::pin(async move {
                match catch(fut).await {
                    Ok(Ok(Reply::Value(v))) => shared.reply(id, Ok(v.to_string())),
                    Ok(Ok(Reply::Payload(p))) => shared.reply(id, Ok(p.into_text())),
                    Ok(Ok(Reply::Stream(mut rx))) => {
                        let mut failed = false;
                        while let Some(item) = rx.recv().await {
                            match item {
                                Ok(text) => shared.reply_item(id, text),
                                Err(e) => {
                                    shared.reply(id, Err(e));
                                    failed = true;
                                    break;
                                }
                            }
                        }
                        if !failed {
                            shared.reply(id, Ok(NULL.to_owned()));
                        }
                    }
                    Ok(Err(e)) | Err(e) => shared.reply(id, Err(e)),
                }
                shared.incoming.borrow_mut().remove(&id);
            }),
        );
    }

    /// Polls `fut` once right here; only a future that has to wait becomes a
    /// task. Most handlers answer at once, and this saves a task spawn and a
    /// scheduler turn per call. The first poll uses a no-op waker: a pending
    /// future is spawned at once, and a spawned task is polled (and
    /// re-registers its interests) immediately.
    fn run_or_spawn(&self, id: Option<u64>, mut fut: LocalBoxFuture<()>) {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if fut.as_mut().poll(&mut cx).is_ready() {
            return;
        }
        let task = tokio::task::spawn_local(fut);
        if let Some(id) = id {
            self.incoming.borrow_mut().insert(id, task.abort_handle());
        }
    }

    /// The caller of an incoming call went away.
    pub(crate) fn on_cancel(&self, id: u64) {
        if let Some(task) = self.incoming.borrow_mut().remove(&id) {
            task.abort();
        }
    }

    /// Handles an EVENT: one listener invocation.
    pub(crate) fn on_event(self: &Rc<Self>, invocation: u64, listener: u64, event: EventMsg) {
        let EventMsg {
            mode,
            name,
            scope,
            payload,
        } = event;
        let listener = self.listeners.borrow().get(&listener).cloned();
        let Some(listener) = listener else {
            if invocation != 0 {
                self.reply(
                    invocation,
                    Err(Error::new(codes::DISPOSED, "the listener was removed")),
                );
            }
            return;
        };
        let event = Event::new(
            name.clone(),
            Payload::from_text(payload),
            (!scope.is_empty()).then_some(scope),
            invocation,
            mode == Mode::Waterfall,
            Rc::downgrade(self),
        );
        let fut = listener(event);
        let shared = self.clone();
        self.run_or_spawn(
            (invocation != 0).then_some(invocation),
            Box::pin(async move {
                let result = catch(fut).await.and_then(|r| r);
                if invocation == 0 {
                    if let Err(e) = result {
                        tracing::warn!("listener for `{name}` failed (contained): {e}");
                    }
                } else {
                    shared.reply(invocation, result.map(|v| v.to_string()));
                    shared.incoming.borrow_mut().remove(&invocation);
                }
            }),
        );
    }

    /// Runs the innermost default of one of our waterfalls.
    pub(crate) fn on_inner(self: &Rc<Self>, id: u64, waterfall: u64, payload: &str) {
        let inner = self.inners.borrow_mut().remove(&waterfall);
        let Some(inner) = inner else {
            return self.reply(
                id,
                Err(Error::new(codes::DISPOSED, "the waterfall is gone")),
            );
        };
        let payload = match parse_payload(payload) {
            Ok(v) => v,
            Err(e) => return self.reply(id, Err(e)),
        };
        let shared = self.clone();
        let task = tokio::task::spawn_local(async move {
            let result = catch(inner(payload)).await.and_then(|r| r);
            shared.running_inners.borrow_mut().remove(&waterfall);
            shared.reply(id, result.map(|v| v.to_string()));
        });
        if !task.is_finished() {
            self.running_inners
                .borrow_mut()
                .insert(waterfall, (id, task.abort_handle()));
        }
    }

    /// The dispatcher of waterfall `id` stopped waiting: forget its inner
    /// default and stop it if it runs, answering the listener that called
    /// `next` so the chain unwinds.
    pub(in crate::context) fn drop_waterfall(&self, id: u64) {
        self.inners.borrow_mut().remove(&id);
        let running = self.running_inners.borrow_mut().remove(&id);
        if let Some((request, task)) = running {
            task.abort();
            self.reply(
                request,
                Err(Error::new(codes::DISPOSED, "the waterfall was cancelled")),
            );
        }
    }

    /// Another fiber was disposed: drop what it registered with us.
    pub(crate) fn on_fiber_gone(&self, fiber: FiberId) {
        let cleanups = self.caller_cleanups.borrow_mut().remove(&fiber);
        for (_, cleanup) in cleanups.into_iter().flatten().rev() {
            if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(cleanup)) {
                let e = crate::unwind::panic_error(payload.as_ref());
                tracing::warn!("cleanup for disposed fiber {fiber} failed: {e}");
            }
        }
    }
}
