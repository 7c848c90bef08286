//! The items of a streaming call, read one by one; dropping the stream
//! before its end cancels the call.

use dsh_wire::ToHost;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::link::HostLink;
use crate::payload::Payload;

/// The items of a streaming call. Dropping it cancels the call.
pub struct CallStream {
    id: u64,
    rx: mpsc::UnboundedReceiver<Result<Payload>>,
    /// Where to send the cancel if dropped early; `None` once the stream
    /// ended (or when the call never left).
    link: Option<HostLink>,
}

impl CallStream {
    /// The stream of outgoing call `id`, whose items the runtime sends
    /// into `rx`.
    pub(in crate::context) fn open(
        id: u64,
        rx: mpsc::UnboundedReceiver<Result<Payload>>,
        link: HostLink,
    ) -> Self {
        CallStream {
            id,
            rx,
            link: Some(link),
        }
    }

    /// A stream of a call that never left: `error`, then the end.
    pub(in crate::context) fn failed(error: Error) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(Err(error));
        CallStream {
            id: 0,
            rx,
            link: None,
        }
    }

    /// The next item; `None` at the end. An error ends the stream.
    pub async fn next(&mut self) -> Option<Result<Value>> {
        Some(self.next_payload().await?.map(Payload::into_value))
    }

    /// The next item as JSON text (not parsed); `None` at the end.
    pub async fn next_payload(&mut self) -> Option<Result<Payload>> {
        let item = self.rx.recv().await;
        if item.is_none() {
            self.link = None;
        }
        item
    }

    /// The next item if one is already waiting (no waiting).
    pub fn try_next(&mut self) -> Option<Result<Value>> {
        self.rx.try_recv().ok().map(|r| r.map(Payload::into_value))
    }

    /// The next item as JSON text (not parsed) if one is already waiting
    /// (no waiting): a reader that parses items into its own type.
    pub fn try_next_payload(&mut self) -> Option<Result<Payload>> {
        self.rx.try_recv().ok()
    }
}

impl Drop for CallStream {
    fn drop(&mut self) {
        if let Some(link) = self.link.take() {
            link.send(ToHost::Cancel { id: self.id });
        }
    }
}

#[cfg(test)]
mod tests {
    use dsh_wire::{ReplyKind, ToHost};
    use serde_json::json;

    use crate::context::test_host::{run, Harness};
    use crate::error::codes;

    #[test]
    fn items_arrive_in_order_and_a_stream_read_to_its_end_is_not_cancelled() {
        run(async {
            let h = Harness::new();
            let mut items = h.ctx.service("feed").stream("tail", json!({"from": 0}));
            assert!(matches!(&h.take()[..], [ToHost::Call { id: 1, .. }]));
            h.shared.on_reply(1, ReplyKind::Item, "1".to_owned());
            h.shared
                .on_reply(1, ReplyKind::Item, r#"{"b":2}"#.to_owned());
            h.shared.on_reply(1, ReplyKind::Ok, "null".to_owned());
            assert_eq!(items.next().await.unwrap().unwrap(), json!(1));
            assert_eq!(
                items.next_payload().await.unwrap().unwrap().as_str(),
                r#"{"b":2}"#
            );
            assert!(items.next().await.is_none());
            drop(items);
            assert!(h.take().is_empty(), "an ended stream is not cancelled");
        });
    }

    #[test]
    fn a_stream_dropped_before_its_end_cancels_the_call() {
        run(async {
            let h = Harness::new();
            let mut items = h.ctx.service("feed").stream("tail", ());
            h.shared.on_reply(1, ReplyKind::Item, "1".to_owned());
            assert_eq!(items.try_next().unwrap().unwrap(), json!(1));
            assert!(items.try_next().is_none(), "nothing else is waiting");
            drop(items);
            let sent = h.take();
            assert_eq!(sent.last(), Some(&ToHost::Cancel { id: 1 }));
            // The host's late items go nowhere.
            h.shared.on_reply(1, ReplyKind::Item, "2".to_owned());
            assert!(h.take().is_empty());
        });
    }

    #[test]
    fn an_error_reply_ends_the_stream_after_the_items_before_it() {
        run(async {
            let h = Harness::new();
            let mut items = h.ctx.service("feed").stream("tail", ());
            h.shared.on_reply(1, ReplyKind::Item, "1".to_owned());
            let error = r#"{"code":"PANIC","message":"the provider panicked"}"#;
            h.shared.on_reply(1, ReplyKind::Err, error.to_owned());
            assert_eq!(items.next().await.unwrap().unwrap(), json!(1));
            assert_eq!(items.next().await.unwrap().unwrap_err().code, codes::PANIC);
            assert!(items.next().await.is_none());
        });
    }

    #[test]
    fn a_stream_the_host_refuses_yields_host_refused_then_ends() {
        run(async {
            let h = Harness::new();
            h.answer(-1);
            let mut items = h.ctx.service("feed").stream("tail", ());
            let e = items.next().await.unwrap().unwrap_err();
            assert_eq!(e.code, codes::HOST_REFUSED);
            assert!(items.next().await.is_none());
            h.answer(0);
            drop(items);
            assert!(
                h.take().is_empty(),
                "a call that never left is not cancelled"
            );
        });
    }
}
