//! Dispatching an event in one of the four modes: emit, serial, parallel
//! and waterfall (with the dispatcher's inner default).

use std::future::Future;
use std::rc::Rc;

use dsh_wire::{Cow, Mode, ToHost};
use serde::Serialize;
use serde_json::Value;

use super::runtime::{host_refused, Shared};
use super::text::to_text;
use super::Context;
use crate::error::Result;

/// A dispatch under construction: `ctx.dispatch("event").scope(k).emit(p)`.
pub struct Dispatch {
    ctx: Context,
    event: String,
    scope: Option<String>,
}

/// Runs `drop_waterfall` however a waterfall dispatch ends, including when
/// the dispatching future is dropped (its caller cancelled).
struct ForgetWaterfall(Rc<Shared>, u64);

impl Drop for ForgetWaterfall {
    fn drop(&mut self) {
        self.0.drop_waterfall(self.1);
    }
}

impl Dispatch {
    /// An unscoped dispatch of `event`.
    pub(in crate::context) fn new(ctx: Context, event: String) -> Self {
        Dispatch {
            ctx,
            event,
            scope: None,
        }
    }

    /// Dispatch for scope `key`: unscoped listeners, and listeners scoped to
    /// `key` or one of its ancestors, receive it.
    pub fn scope(mut self, key: impl Into<String>) -> Self {
        self.scope = Some(key.into());
        self
    }

    fn msg(&self, id: u64, mode: Mode, payload: String) -> ToHost<'static> {
        ToHost::Dispatch {
            id,
            event: Cow::Owned(self.event.clone()),
            scope: Cow::Owned(self.scope.clone().unwrap_or_default()),
            mode,
            payload: Cow::Owned(payload),
        }
    }

    /// Fire and forget. Listener failures are contained and logged.
    pub fn emit(self, payload: impl Serialize) -> Result<()> {
        let msg = self.msg(0, Mode::Emit, to_text(payload)?);
        if self.ctx.shared.send(msg) {
            Ok(())
        } else {
            Err(host_refused())
        }
    }

    /// Listeners one by one; returns the first non-null result. The first
    /// failure stops the dispatch and is returned.
    pub async fn serial(self, payload: impl Serialize) -> Result<Value> {
        let payload = to_text(payload)?;
        let call = self
            .ctx
            .shared
            .request(|id| self.msg(id, Mode::Serial, payload));
        Ok(call.wait().await?.into_value())
    }

    /// All listeners concurrently; waits for all; fails if any failed.
    /// Answers whether any listener took part.
    pub async fn parallel(self, payload: impl Serialize) -> Result<bool> {
        let payload = to_text(payload)?;
        let call = self
            .ctx
            .shared
            .request(|id| self.msg(id, Mode::Parallel, payload));
        let reply = call.wait().await?;
        Ok(*reply == Value::Bool(true))
    }

    /// Around-middleware: the first listener is outermost; each may call
    /// `next`; `inner` runs after the last one.
    pub async fn waterfall<F, Fut>(self, payload: impl Serialize, inner: F) -> Result<Value>
    where
        F: FnOnce(Value) -> Fut + 'static,
        Fut: Future<Output = Result<Value>> + 'static,
    {
        let shared = self.ctx.shared.clone();
        let payload = to_text(payload)?;
        let mut waterfall_id = 0;
        let build = |id| self.msg(id, Mode::Waterfall, payload);
        let call = shared.request_with(build, |id| {
            waterfall_id = id;
            shared.add_inner(id, inner);
        });
        let _forget = ForgetWaterfall(shared.clone(), waterfall_id);
        Ok(call.wait().await?.into_value())
    }
}

/// A payload about one subject (an agent). Dispatched with
/// [`Context::dispatch_about`], its scope is the subject it names, so an
/// event about one agent cannot be scoped to another.
pub trait Subject {
    /// The scope key: the subject the payload is about.
    fn subject(&self) -> &str;
}

/// A dispatch of a payload scoped to its own subject
/// ([`Context::dispatch_about`]).
pub struct AboutDispatch<'a, P> {
    dispatch: Dispatch,
    payload: &'a P,
}

impl<'a, P: Serialize + Subject> AboutDispatch<'a, P> {
    pub(in crate::context) fn new(ctx: Context, event: String, payload: &'a P) -> Self {
        AboutDispatch {
            dispatch: Dispatch::new(ctx, event).scope(payload.subject()),
            payload,
        }
    }

    /// [`Dispatch::emit`] of the payload.
    pub fn emit(self) -> Result<()> {
        self.dispatch.emit(self.payload)
    }

    /// [`Dispatch::serial`] of the payload.
    pub async fn serial(self) -> Result<Value> {
        self.dispatch.serial(self.payload).await
    }

    /// [`Dispatch::parallel`] of the payload.
    pub async fn parallel(self) -> Result<bool> {
        self.dispatch.parallel(self.payload).await
    }

    /// [`Dispatch::waterfall`] of the payload.
    pub async fn waterfall<F, Fut>(self, inner: F) -> Result<Value>
    where
        F: FnOnce(Value) -> Fut + 'static,
        Fut: Future<Output = Result<Value>> + 'static,
    {
        self.dispatch.waterfall(self.payload, inner).await
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::pin::pin;
    use std::rc::Rc;

    use dsh_wire::{Cow, Mode, ReplyKind, ToHost};
    use serde_json::{json, Value};

    use crate::context::test_host::{error_reply, poll_once, reply, run, settle, Harness};
    use crate::error::codes;

    fn dispatch(id: u64, event: &str, scope: &str, mode: Mode, payload: &str) -> ToHost<'static> {
        ToHost::Dispatch {
            id,
            event: Cow::Owned(event.to_owned()),
            scope: Cow::Owned(scope.to_owned()),
            mode,
            payload: Cow::Owned(payload.to_owned()),
        }
    }

    #[test]
    fn emit_sends_a_dispatch_nobody_answers() {
        run(async {
            let h = Harness::new();
            h.ctx
                .dispatch("note")
                .scope("agent-1")
                .emit(json!(1))
                .unwrap();
            h.ctx.emit("note", "plain").unwrap();
            assert_eq!(
                h.take(),
                [
                    dispatch(0, "note", "agent-1", Mode::Emit, "1"),
                    dispatch(0, "note", "", Mode::Emit, r#""plain""#),
                ]
            );
        });
    }

    /// An agent event's payload, naming its subject.
    #[derive(serde::Serialize)]
    struct AboutAgent {
        agent: String,
        step: u64,
    }

    impl super::Subject for AboutAgent {
        fn subject(&self) -> &str {
            &self.agent
        }
    }

    #[test]
    fn a_dispatch_about_a_subject_is_scoped_to_the_subject_its_payload_names() {
        run(async {
            let h = Harness::new();
            let about = AboutAgent {
                agent: "agent-7".into(),
                step: 2,
            };
            h.ctx
                .dispatch_about("agent/pre-step", &about)
                .emit()
                .unwrap();
            let mut answer = pin!(h.ctx.dispatch_about("agent/request", &about).serial());
            assert!(poll_once(answer.as_mut()).is_pending());
            assert_eq!(
                h.take(),
                [
                    dispatch(
                        0,
                        "agent/pre-step",
                        "agent-7",
                        Mode::Emit,
                        r#"{"agent":"agent-7","step":2}"#
                    ),
                    dispatch(
                        1,
                        "agent/request",
                        "agent-7",
                        Mode::Serial,
                        r#"{"agent":"agent-7","step":2}"#
                    ),
                ]
            );
        });
    }

    #[test]
    fn an_emit_the_host_refuses_is_host_refused() {
        run(async {
            let h = Harness::new();
            h.answer(-1);
            let e = h.ctx.emit("note", 1).unwrap_err();
            assert_eq!(e.code, codes::HOST_REFUSED);
        });
    }

    #[test]
    fn serial_answers_what_the_host_routes_back() {
        run(async {
            let h = Harness::new();
            let mut answer = pin!(h.ctx.serial("ask", json!({"q": 1})));
            assert!(poll_once(answer.as_mut()).is_pending());
            assert_eq!(
                h.take(),
                [dispatch(1, "ask", "", Mode::Serial, r#"{"q":1}"#)]
            );
            h.shared.on_reply(1, ReplyKind::Ok, r#""first""#.to_owned());
            assert_eq!(answer.await.unwrap(), json!("first"));
        });
    }

    #[test]
    fn parallel_answers_whether_any_listener_took_part() {
        run(async {
            let h = Harness::new();
            for (id, took_part) in [(1, true), (2, false)] {
                let mut answer = pin!(h.ctx.parallel("all", ()));
                assert!(poll_once(answer.as_mut()).is_pending());
                h.shared.on_reply(id, ReplyKind::Ok, took_part.to_string());
                assert_eq!(answer.await.unwrap(), took_part);
            }
        });
    }

    #[test]
    fn a_waterfall_runs_its_inner_default_when_the_chain_reaches_it() {
        run(async {
            let h = Harness::new();
            let mut answer = pin!(h.ctx.waterfall("wrap", 1, |v: Value| async move {
                Ok(json!(v.as_i64().unwrap_or(0) + 1))
            }));
            assert!(poll_once(answer.as_mut()).is_pending());
            assert_eq!(h.take(), [dispatch(1, "wrap", "", Mode::Waterfall, "1")]);
            // The last listener called next with 5: the host asks for the inner default.
            h.shared.on_inner(50, 1, "5");
            settle().await;
            assert_eq!(h.take(), [reply(50, ReplyKind::Ok, "6")]);
            h.shared.on_reply(1, ReplyKind::Ok, "6".to_owned());
            assert_eq!(answer.await.unwrap(), json!(6));
            // The inner default runs once.
            h.shared.on_inner(51, 1, "5");
            assert_eq!(error_reply(&h.take()[0]).unwrap().1.code, codes::DISPOSED);
        });
    }

    #[test]
    fn a_dropped_waterfall_is_cancelled_and_forgets_its_inner_default() {
        run(async {
            let h = Harness::new();
            let ran = Rc::new(RefCell::new(false));
            let flag = ran.clone();
            {
                let mut answer = pin!(h.ctx.waterfall("wrap", 1, move |v: Value| async move {
                    *flag.borrow_mut() = true;
                    Ok(v)
                }));
                assert!(poll_once(answer.as_mut()).is_pending());
            }
            let sent = h.take();
            assert_eq!(sent.last(), Some(&ToHost::Cancel { id: 1 }), "{sent:?}");
            h.shared.on_inner(50, 1, "5");
            settle().await;
            let (id, e) = error_reply(&h.take()[0]).unwrap();
            assert_eq!((id, e.code.as_str()), (50, codes::DISPOSED));
            assert!(
                !*ran.borrow(),
                "the inner default of a dropped waterfall never runs"
            );
        });
    }

    #[test]
    fn a_waterfall_dropped_while_its_inner_default_runs_stops_it_and_answers_disposed() {
        run(async {
            let h = Harness::new();
            {
                let mut answer = pin!(h.ctx.waterfall("wrap", 1, |_v: Value| async {
                    std::future::pending::<()>().await;
                    Ok(Value::Null)
                }));
                assert!(poll_once(answer.as_mut()).is_pending());
                h.shared.on_inner(50, 1, "5");
                settle().await;
                assert_eq!(h.take().len(), 1, "only the dispatch left");
            }
            let sent = h.take();
            assert_eq!(sent.len(), 2, "{sent:?}");
            assert!(sent.contains(&ToHost::Cancel { id: 1 }), "{sent:?}");
            let (id, e) = sent.iter().find_map(error_reply).unwrap();
            assert_eq!((id, e.code.as_str()), (50, codes::DISPOSED));
            assert!(e.message.contains("cancelled"), "{e}");
        });
    }
}
