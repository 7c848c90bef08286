//! This plugin's own calls, dispatches and `next` calls: each leaves with a
//! fresh local id and a reply slot; the host's replies fill the slot
//! (items of a stream, then one final reply); a caller that stops waiting
//! cancels the call.

use dsh_wire::{ReplyKind, ToHost};
use tokio::sync::{mpsc, oneshot};

use super::{host_refused, Shared};
use crate::context::CallStream;
use crate::error::{codes, Error, Result};
use crate::link::HostLink;
use crate::payload::Payload;

/// A reply awaited by this plugin.
pub(super) enum Pending {
    /// A plain call; stream items, if the provider streams, are collected.
    Call {
        tx: oneshot::Sender<Result<Payload>>,
        items: Vec<Payload>,
    },
    /// A streaming call.
    Stream(mpsc::UnboundedSender<Result<Payload>>),
}

impl Shared {
    /// Handles a REPLY for one of our outgoing calls.
    pub(crate) fn on_reply(&self, id: u64, kind: ReplyKind, payload: String) {
        let result = match kind {
            ReplyKind::Err => Err(Error::from_payload(&payload)),
            ReplyKind::Ok | ReplyKind::Item => Ok(Payload::from_text(payload)),
        };
        let stream_item = !kind.is_final();
        let mut pending = self.pending.borrow_mut();
        match pending.get_mut(&id) {
            None => {}
            Some(Pending::Call { items, .. }) if stream_item => {
                if let Ok(v) = result {
                    items.push(v);
                }
            }
            Some(Pending::Stream(tx)) if stream_item => {
                let _ = tx.send(result);
            }
            Some(_) => match pending.remove(&id) {
                Some(Pending::Call { tx, items }) => {
                    let result = if items.is_empty() {
                        result
                    } else {
                        result.map(|_| collect_items(items))
                    };
                    let _ = tx.send(result);
                }
                Some(Pending::Stream(tx)) => {
                    if let Err(e) = result {
                        let _ = tx.send(Err(e));
                    }
                }
                None => {}
            },
        }
    }

    /// Fails every outgoing call (the actor is stopping).
    pub(crate) fn shutdown(&self) {
        let pending: Vec<_> = self.pending.borrow_mut().drain().collect();
        for (_, p) in pending {
            let err = Error::new(codes::DISPOSED, "the plugin is stopping");
            match p {
                Pending::Call { tx, .. } => {
                    let _ = tx.send(Err(err));
                }
                Pending::Stream(tx) => {
                    let _ = tx.send(Err(err));
                }
            }
        }
    }

    /// Sends the message `build` makes from a fresh id and registers a
    /// one-shot reply slot for it.
    pub(in crate::context) fn request(
        &self,
        build: impl FnOnce(u64) -> ToHost<'static>,
    ) -> OutgoingCall {
        self.request_with(build, |_| {})
    }

    /// Like `request`, running `prepare(id)` before the message leaves.
    pub(in crate::context) fn request_with(
        &self,
        build: impl FnOnce(u64) -> ToHost<'static>,
        prepare: impl FnOnce(u64),
    ) -> OutgoingCall {
        let id = self.next_id();
        let msg = build(id);
        prepare(id);
        let (tx, rx) = oneshot::channel();
        self.pending.borrow_mut().insert(
            id,
            Pending::Call {
                tx,
                items: Vec::new(),
            },
        );
        if !self.send(msg) {
            self.pending.borrow_mut().remove(&id);
            return OutgoingCall::refused();
        }
        OutgoingCall {
            id,
            rx: Some(rx),
            link: Some(self.link),
            done: false,
        }
    }

    /// Sends the message `build` makes from a fresh id and answers the
    /// stream of its reply items.
    pub(in crate::context) fn request_stream(
        &self,
        build: impl FnOnce(u64) -> ToHost<'static>,
    ) -> CallStream {
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.next_id();
        let msg = build(id);
        self.pending.borrow_mut().insert(id, Pending::Stream(tx));
        if !self.send(msg) {
            self.pending.borrow_mut().remove(&id);
            return CallStream::failed(host_refused());
        }
        CallStream::open(id, rx, self.link)
    }
}

/// The items of a stream answered to a plain call, as one JSON array
/// (their texts joined, not parsed).
fn collect_items(items: Vec<Payload>) -> Payload {
    let mut text =
        String::with_capacity(items.iter().map(|i| i.as_str().len() + 1).sum::<usize>() + 2);
    text.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(item.as_str());
    }
    text.push(']');
    Payload::from_text(text)
}

/// An outgoing call awaiting one reply; cancels the call when dropped early.
pub(in crate::context) struct OutgoingCall {
    id: u64,
    rx: Option<oneshot::Receiver<Result<Payload>>>,
    link: Option<HostLink>,
    done: bool,
}

impl OutgoingCall {
    fn refused() -> Self {
        OutgoingCall {
            id: 0,
            rx: None,
            link: None,
            done: true,
        }
    }

    /// The reply (`HOST_REFUSED` if the call never left).
    pub(in crate::context) async fn wait(mut self) -> Result<Payload> {
        let Some(rx) = self.rx.take() else {
            return Err(host_refused());
        };
        let result = rx
            .await
            .unwrap_or_else(|_| Err(Error::new(codes::DISPOSED, "the call was dropped")));
        self.done = true;
        result
    }
}

impl Drop for OutgoingCall {
    fn drop(&mut self) {
        if !self.done {
            if let Some(link) = self.link {
                link.send(ToHost::Cancel { id: self.id });
            }
        }
    }
}
