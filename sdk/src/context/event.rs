//! One listener invocation, and a waterfall listener's way on down the
//! chain (`next`).

use std::cell::Cell;
use std::rc::Weak;

use dsh_wire::{Cow, ToHost};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::runtime::Shared;
use super::text::to_text;
use crate::error::{codes, Error, Result};
use crate::payload::Payload;

/// One listener invocation.
pub struct Event {
    /// The event name.
    pub name: String,
    /// The payload: JSON text, parsed on first read (see [`Payload`]).
    pub payload: Payload,
    /// The scope key of the dispatch (an agent id), if any.
    pub scope: Option<String>,
    invocation: u64,
    waterfall: bool,
    next_used: Cell<bool>,
    shared: Weak<Shared>,
}

impl Event {
    /// The event the runtime hands a listener for invocation `invocation`
    /// (0 for an emit).
    pub(in crate::context) fn new(
        name: String,
        payload: Payload,
        scope: Option<String>,
        invocation: u64,
        waterfall: bool,
        shared: Weak<Shared>,
    ) -> Self {
        Event {
            name,
            payload,
            scope,
            invocation,
            waterfall,
            next_used: Cell::new(false),
            shared,
        }
    }

    /// Deserializes the payload.
    pub fn payload_as<T: DeserializeOwned>(&self) -> Result<T> {
        Ok(self.payload.parse()?)
    }

    /// True when this listener runs inside a waterfall (and may call `next`).
    pub fn is_waterfall(&self) -> bool {
        self.waterfall
    }

    /// Waterfall only: calls the rest of the chain with `payload` and
    /// returns its result. May be called at most once.
    pub async fn next(&self, payload: impl Serialize) -> Result<Value> {
        let payload = Payload::from_text(to_text(payload)?);
        Ok(self.next_payload(payload).await?.into_value())
    }

    /// Waterfall only: calls the rest of the chain with this listener's own
    /// payload, unchanged and unparsed, and returns its result.
    pub async fn forward(&self) -> Result<Value> {
        Ok(self.next_payload(self.payload.clone()).await?.into_value())
    }

    /// Waterfall only: [`Event::next`] with a payload in JSON text already;
    /// neither the payload nor the result is parsed here.
    pub async fn next_payload(&self, payload: Payload) -> Result<Payload> {
        if !self.waterfall {
            return Err(Error::msg(format!(
                "`next` called by a listener of `{}`, which is not a waterfall",
                self.name
            )));
        }
        if self.next_used.replace(true) {
            return Err(Error::new(
                codes::NEXT_CALLED_TWICE,
                format!("a listener of `{}` called next twice", self.name),
            ));
        }
        let shared = self
            .shared
            .upgrade()
            .ok_or_else(|| Error::new(codes::DISPOSED, "the plugin is disposed"))?;
        let invocation = self.invocation;
        shared
            .request(|id| ToHost::Next {
                id,
                invocation,
                payload: Cow::Owned(payload.into_text()),
            })
            .wait()
            .await
    }
}

#[cfg(test)]
mod tests {
    use dsh_wire::{Cow, Mode, ReplyKind, ToHost};
    use serde_json::json;

    use crate::context::test_host::{error_reply, reply, run, settle, Harness};
    use crate::context::EventMsg;
    use crate::error::codes;

    fn event(mode: Mode, name: &str, scope: &str, payload: &str) -> EventMsg {
        EventMsg {
            mode,
            name: name.to_owned(),
            scope: scope.to_owned(),
            payload: payload.to_owned(),
        }
    }

    #[test]
    fn a_listener_answers_its_invocation_with_its_payload_and_scope() {
        run(async {
            let h = Harness::new();
            h.ctx.on("ping", |ev| async move {
                Ok(json!({"n": ev.payload_as::<u32>()?, "scope": ev.scope, "name": ev.name}))
            });
            h.take();
            h.shared
                .on_event(5, 1, event(Mode::Serial, "ping", "agent-1", "3"));
            h.shared
                .on_event(6, 1, event(Mode::Serial, "ping", "", "4"));
            assert_eq!(
                h.take(),
                [
                    reply(
                        5,
                        ReplyKind::Ok,
                        r#"{"n":3,"scope":"agent-1","name":"ping"}"#
                    ),
                    reply(6, ReplyKind::Ok, r#"{"n":4,"scope":null,"name":"ping"}"#),
                ]
            );
        });
    }

    #[test]
    fn an_emitted_event_is_never_answered_even_when_its_listener_fails() {
        run(async {
            let h = Harness::new();
            h.ctx.on("note", |ev| async move {
                let n: u32 = ev.payload_as()?;
                Ok(json!(n))
            });
            h.take();
            h.shared.on_event(0, 1, event(Mode::Emit, "note", "", "1"));
            h.shared
                .on_event(0, 1, event(Mode::Emit, "note", "", r#""not a number""#));
            settle().await;
            assert!(h.take().is_empty());
        });
    }

    #[test]
    fn next_in_a_waterfall_asks_the_host_for_the_rest_of_the_chain() {
        run(async {
            let h = Harness::new();
            h.ctx.on("wrap", |ev| async move {
                let inner = ev.next(json!({"wrapped": ev.payload_as::<u32>()?})).await?;
                Ok(json!({"outer": inner}))
            });
            h.take();
            h.shared
                .on_event(5, 1, event(Mode::Waterfall, "wrap", "", "1"));
            assert_eq!(
                h.take(),
                [ToHost::Next {
                    id: 2,
                    invocation: 5,
                    payload: Cow::Borrowed(r#"{"wrapped":1}"#)
                }]
            );
            h.shared.on_reply(2, ReplyKind::Ok, r#""done""#.to_owned());
            settle().await;
            assert_eq!(h.take(), [reply(5, ReplyKind::Ok, r#"{"outer":"done"}"#)]);
        });
    }

    #[test]
    fn forward_passes_the_payload_text_down_unchanged() {
        run(async {
            let h = Harness::new();
            h.ctx.on("wrap", |ev| async move { ev.forward().await });
            h.take();
            let text = r#"{"b": 1,  "a":2}"#;
            h.shared
                .on_event(5, 1, event(Mode::Waterfall, "wrap", "", text));
            assert!(matches!(
                &h.take()[..],
                [ToHost::Next { id: 2, invocation: 5, payload }] if payload == text
            ));
        });
    }

    #[test]
    fn next_twice_is_next_called_twice_and_sends_nothing_more() {
        run(async {
            let h = Harness::new();
            h.ctx.on("wrap", |ev| async move {
                ev.next(1).await?;
                let again = ev.next(2).await.unwrap_err();
                Ok(json!(again.code))
            });
            h.take();
            h.shared
                .on_event(5, 1, event(Mode::Waterfall, "wrap", "", "0"));
            assert!(matches!(&h.take()[..], [ToHost::Next { id: 2, .. }]));
            h.shared.on_reply(2, ReplyKind::Ok, "null".to_owned());
            settle().await;
            let expected = format!("\"{}\"", codes::NEXT_CALLED_TWICE);
            assert_eq!(h.take(), [reply(5, ReplyKind::Ok, &expected)]);
        });
    }

    #[test]
    fn next_outside_a_waterfall_is_refused_without_a_message() {
        run(async {
            let h = Harness::new();
            h.ctx.on("plain", |ev| async move {
                assert!(!ev.is_waterfall());
                ev.next(1).await
            });
            h.take();
            h.shared
                .on_event(5, 1, event(Mode::Serial, "plain", "", "0"));
            let sent = h.take();
            assert_eq!(sent.len(), 1, "only the reply: {sent:?}");
            let (id, e) = error_reply(&sent[0]).unwrap();
            assert_eq!(id, 5);
            assert!(e.message.contains("not a waterfall"), "{e}");
        });
    }
}
