//! What a service handler answers: one value, or a stream fed through a
//! [`ReplySender`].

use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;

use super::text::to_text;
use crate::error::{Error, Result};
use crate::payload::Payload;

/// What a service handler returns: one value, or a stream of values.
pub enum Reply {
    /// A single value.
    Value(Value),
    /// A single value already in JSON text: forwarded as it is.
    Payload(Payload),
    /// Items arrive through the paired [`ReplySender`].
    Stream(mpsc::UnboundedReceiver<Result<String>>),
}

impl From<Value> for Reply {
    fn from(v: Value) -> Self {
        Reply::Value(v)
    }
}

impl Reply {
    /// Serializes `v` into a single-value reply.
    pub fn json(v: impl Serialize) -> Result<Reply> {
        Ok(Reply::Payload(Payload::from_text(to_text(v)?)))
    }

    /// A streaming reply and the sender that feeds it. The stream ends when
    /// the sender is dropped.
    pub fn stream() -> (ReplySender, Reply) {
        let (tx, rx) = mpsc::unbounded_channel();
        (ReplySender(tx), Reply::Stream(rx))
    }
}

/// Feeds a streaming [`Reply`].
#[derive(Clone)]
pub struct ReplySender(mpsc::UnboundedSender<Result<String>>);

impl ReplySender {
    /// Sends one item; false when the caller is gone.
    pub fn send(&self, item: impl Serialize) -> bool {
        self.0.send(to_text(item)).is_ok()
    }

    /// Sends one item that is JSON text already (forwarded as it is);
    /// false when the caller is gone.
    pub fn send_payload(&self, item: Payload) -> bool {
        self.0.send(Ok(item.into_text())).is_ok()
    }

    /// Ends the stream with an error.
    pub fn fail(self, error: Error) {
        let _ = self.0.send(Err(error));
    }

    /// True when the caller stopped listening.
    pub fn is_closed(&self) -> bool {
        self.0.is_closed()
    }

    /// Completes when the caller stops listening (it cancelled, or went
    /// away): a provider that waits on something else (a server's answer,
    /// a timer) selects on this to stop at once rather than at its next
    /// [`ReplySender::send`].
    pub async fn closed(&self) {
        self.0.closed().await
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use dsh_wire::ReplyKind;
    use serde::Serialize;
    use serde_json::json;

    use super::{Reply, ReplySender};
    use crate::context::test_host::{error_reply, reply, run, settle, Harness};
    use crate::error::{codes, Error};

    /// A harness whose plugin provides `feed`, answering every call with a
    /// stream whose sender the test holds.
    fn feed() -> (Harness, Rc<RefCell<Option<ReplySender>>>) {
        let h = Harness::new();
        let slot = Rc::new(RefCell::new(None));
        let keep = slot.clone();
        h.ctx.provide("feed", move |_req| {
            let (tx, reply) = Reply::stream();
            *keep.borrow_mut() = Some(tx);
            async move { Ok(reply) }
        });
        h.take();
        (h, slot)
    }

    fn sender(slot: &Rc<RefCell<Option<ReplySender>>>) -> ReplySender {
        slot.borrow().clone().unwrap()
    }

    #[test]
    fn a_streaming_reply_sends_its_items_then_a_final_null() {
        run(async {
            let (h, slot) = feed();
            h.shared
                .on_call(9, 3, "feed".into(), "tail".into(), "null".into());
            let tx = sender(&slot);
            assert!(tx.send(1) && tx.send_payload(crate::Payload::from_text(r#"{"raw":true}"#)));
            settle().await;
            assert_eq!(
                h.take(),
                [
                    reply(9, ReplyKind::Item, "1"),
                    reply(9, ReplyKind::Item, r#"{"raw":true}"#)
                ]
            );
            drop(tx);
            slot.borrow_mut().take();
            settle().await;
            assert_eq!(h.take(), [reply(9, ReplyKind::Ok, "null")]);
        });
    }

    #[test]
    fn a_failed_stream_ends_with_the_error_and_no_final_null() {
        run(async {
            let (h, slot) = feed();
            h.shared
                .on_call(9, 3, "feed".into(), "tail".into(), "null".into());
            let tx = slot.borrow_mut().take().unwrap();
            tx.send("first");
            tx.fail(Error::new(codes::TIMEOUT, "the source went quiet"));
            settle().await;
            let sent = h.take();
            assert_eq!(sent.len(), 2, "{sent:?}");
            assert_eq!(sent[0], reply(9, ReplyKind::Item, r#""first""#));
            let (id, e) = error_reply(&sent[1]).unwrap();
            assert_eq!((id, e.code.as_str()), (9, codes::TIMEOUT));
        });
    }

    #[test]
    fn a_cancelled_streaming_call_closes_its_sender() {
        run(async {
            let (h, slot) = feed();
            h.shared
                .on_call(9, 3, "feed".into(), "tail".into(), "null".into());
            let tx = slot.borrow_mut().take().unwrap();
            assert!(!tx.is_closed());
            h.shared.on_cancel(9);
            settle().await;
            assert!(tx.is_closed(), "the provider learns the caller is gone");
            assert!(!tx.send(1));
            assert!(h.take().is_empty());
        });
    }

    #[test]
    fn a_provider_waiting_on_closed_wakes_when_the_call_is_cancelled() {
        run(async {
            let (h, slot) = feed();
            h.shared
                .on_call(9, 3, "feed".into(), "tail".into(), "null".into());
            let tx = slot.borrow_mut().take().unwrap();
            let woke = Rc::new(std::cell::Cell::new(false));
            let (w, waiter) = (woke.clone(), tx.clone());
            tokio::task::spawn_local(async move {
                waiter.closed().await;
                w.set(true);
            });
            settle().await;
            assert!(!woke.get(), "the caller still listens");
            h.shared.on_cancel(9);
            settle().await;
            assert!(
                woke.get(),
                "the provider waiting on closed() learns at once"
            );
        });
    }

    #[test]
    fn a_json_reply_is_forwarded_as_its_text() {
        #[derive(Serialize)]
        struct Answer {
            n: u32,
        }
        run(async {
            let h = Harness::new();
            h.ctx
                .provide("n", |_req| async { Reply::json(Answer { n: 3 }) });
            h.take();
            h.shared
                .on_call(9, 3, "n".into(), "get".into(), "null".into());
            assert_eq!(h.take(), [reply(9, ReplyKind::Ok, r#"{"n":3}"#)]);
        });
        assert!(matches!(Reply::from(json!(1)), Reply::Value(v) if v == json!(1)));
    }
}
