//! A client for one service: plain calls (a value, or a stream's items
//! collected) and streaming calls.

use dsh_wire::{Cow, ToHost};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::text::to_text;
use super::{CallStream, Context};
use crate::error::{codes, Error, Result};
use crate::payload::Payload;

/// A client for one service.
#[derive(Clone)]
pub struct Service {
    ctx: Context,
    name: String,
}

impl Service {
    /// A client of service `name` calling from `ctx`'s plugin.
    pub(in crate::context) fn new(ctx: Context, name: String) -> Self {
        Service { ctx, name }
    }

    /// The service name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn call_msg(&self, id: u64, method: &str, params: String) -> ToHost<'static> {
        ToHost::Call {
            id,
            service: Cow::Owned(self.name.clone()),
            method: Cow::Owned(method.to_owned()),
            params: Cow::Owned(params),
        }
    }

    /// Calls `method` and returns its JSON result. If the provider streams,
    /// the items are collected into an array.
    pub async fn call(&self, method: &str, params: impl Serialize) -> Result<Value> {
        let params = Payload::from_text(to_text(params)?);
        Ok(self.call_payload(method, params).await?.into_value())
    }

    /// Calls `method` with parameters in JSON text already and returns the
    /// result as text: neither is parsed here (a hop that only routes).
    pub async fn call_payload(&self, method: &str, params: Payload) -> Result<Payload> {
        self.ctx
            .shared
            .request(|id| self.call_msg(id, method, params.into_text()))
            .wait()
            .await
    }

    /// Calls `method` and deserializes the result.
    pub async fn call_as<R: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<R> {
        let params = Payload::from_text(to_text(params)?);
        let reply = self.call_payload(method, params).await?;
        reply.parse().map_err(|e| {
            Error::new(
                codes::INVALID_PAYLOAD,
                format!("unexpected reply from `{}.{method}`: {e}", self.name),
            )
        })
    }

    /// Calls `method` and returns the stream of items it replies with.
    pub fn stream(&self, method: &str, params: impl Serialize) -> CallStream {
        match to_text(params) {
            Ok(text) => self.stream_payload(method, Payload::from_text(text)),
            Err(e) => CallStream::failed(e),
        }
    }

    /// [`Service::stream`] with parameters in JSON text already (sent as
    /// they are, not parsed or re-encoded).
    pub fn stream_payload(&self, method: &str, params: Payload) -> CallStream {
        self.ctx
            .shared
            .request_stream(|id| self.call_msg(id, method, params.into_text()))
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use dsh_wire::{Cow, ReplyKind, ToHost};
    use serde_json::json;

    use crate::context::test_host::{poll_once, run, Harness};
    use crate::error::codes;

    fn call(id: u64, service: &str, method: &str, params: &str) -> ToHost<'static> {
        ToHost::Call {
            id,
            service: Cow::Owned(service.to_owned()),
            method: Cow::Owned(method.to_owned()),
            params: Cow::Owned(params.to_owned()),
        }
    }

    #[test]
    fn a_call_leaves_once_and_the_routed_reply_is_its_result() {
        run(async {
            let h = Harness::new();
            let counter = h.ctx.service("counter");
            let mut answer = pin!(counter.call("add", json!({"n": 1})));
            assert!(poll_once(answer.as_mut()).is_pending());
            assert_eq!(h.take(), [call(1, "counter", "add", r#"{"n":1}"#)]);
            h.shared.on_reply(1, ReplyKind::Ok, "42".to_owned());
            assert_eq!(answer.await.unwrap(), json!(42));
            assert!(h.take().is_empty(), "an answered call is not cancelled");
        });
    }

    #[test]
    fn an_error_reply_is_the_providers_error() {
        run(async {
            let h = Harness::new();
            let counter = h.ctx.service("counter");
            let mut answer = pin!(counter.call("nope", ()));
            assert!(poll_once(answer.as_mut()).is_pending());
            let error = r#"{"code":"UNKNOWN_METHOD","message":"no nope"}"#;
            h.shared.on_reply(1, ReplyKind::Err, error.to_owned());
            let e = answer.await.unwrap_err();
            assert_eq!(
                (e.code.as_str(), e.message.as_str()),
                (codes::UNKNOWN_METHOD, "no nope")
            );
        });
    }

    #[test]
    fn items_streamed_to_a_plain_call_are_collected_into_an_array() {
        run(async {
            let h = Harness::new();
            let list = h.ctx.service("list");
            let mut answer = pin!(list.call_payload("all", crate::Payload::from_text("{}")));
            assert!(poll_once(answer.as_mut()).is_pending());
            h.shared
                .on_reply(1, ReplyKind::Item, r#"{"a":1}"#.to_owned());
            h.shared.on_reply(1, ReplyKind::Item, "2".to_owned());
            h.shared.on_reply(1, ReplyKind::Ok, "null".to_owned());
            assert_eq!(answer.await.unwrap().as_str(), r#"[{"a":1},2]"#);
        });
    }

    #[test]
    fn a_call_dropped_before_its_reply_is_cancelled_and_a_late_reply_ignored() {
        run(async {
            let h = Harness::new();
            let slow = h.ctx.service("slow");
            {
                let mut answer = pin!(slow.call("wait", ()));
                assert!(poll_once(answer.as_mut()).is_pending());
            }
            assert_eq!(
                h.take(),
                [call(1, "slow", "wait", "null"), ToHost::Cancel { id: 1 }]
            );
            h.shared.on_reply(1, ReplyKind::Ok, "1".to_owned());
            assert!(h.take().is_empty());
        });
    }

    #[test]
    fn a_call_the_host_refuses_is_host_refused_and_not_cancelled() {
        run(async {
            let h = Harness::new();
            h.answer(-1);
            let e = h.ctx.service("any").call("m", ()).await.unwrap_err();
            assert_eq!(e.code, codes::HOST_REFUSED);
            h.answer(0);
            assert!(h.take().is_empty(), "a refused call has nothing to cancel");
        });
    }

    #[test]
    fn a_reply_that_does_not_fit_names_the_service_and_method() {
        run(async {
            let h = Harness::new();
            let counter = h.ctx.service("counter");
            let mut answer = pin!(counter.call_as::<u32>("get", ()));
            assert!(poll_once(answer.as_mut()).is_pending());
            h.shared.on_reply(1, ReplyKind::Ok, r#""many""#.to_owned());
            let e = answer.await.unwrap_err();
            assert_eq!(e.code, codes::INVALID_PAYLOAD);
            assert!(e.message.contains("`counter.get`"), "{e}");
        });
    }

    #[test]
    fn a_stopping_plugin_fails_its_waiting_calls_with_disposed() {
        run(async {
            let h = Harness::new();
            let counter = h.ctx.service("counter");
            let mut answer = pin!(counter.call("get", ()));
            assert!(poll_once(answer.as_mut()).is_pending());
            h.shared.shutdown();
            let e = answer.await.unwrap_err();
            assert_eq!(e.code, codes::DISPOSED);
        });
    }
}
