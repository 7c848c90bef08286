//! The request body of one generate call, built from the harness request
//! without re-encoding the history: each harness message is converted to
//! chat-completions messages once, and later requests of the same session
//! reuse the conversion of every message they share with the previous one
//! (`dsh_llm_http::conversion`).

use dsh_llm_http::conversion::{self, ConvertError, ToolIn};
use dsh_llm_http::stream_request::Stop;
use dsh_sdk::vocab::Message;

use crate::models::EFFORT_OFF;
use serde::Serialize;
use serde_json::value::{to_raw_value, RawValue};
use serde_json::Number;

use crate::convert::{messages_of, WireMessage, WireTool};
use crate::Config;

/// The harness request, as every adapter reads it
/// (`dsh_llm_http::stream_request`): its `sessionId` is sent as
/// `x-deepseek-harness-session-id`, and a `purpose` of `compaction` adds
/// `x-deepseek-harness-compact: 1`.
pub(crate) use dsh_llm_http::stream_request::StreamRequest as Request;

/// `stream_options`: the usage comes as the stream's last event.
#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// DeepSeek's `thinking` switch.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Thinking {
    Enabled,
    Disabled,
}

/// The chat-completions request body, keys in the wire's order.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    /// Each message converted once (`dsh_llm_http::conversion`).
    messages: Vec<&'a RawValue>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<&'a Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop: Option<&'a Stop>,
}

/// What one harness message becomes: its chat-completions messages.
type Wire = Vec<Box<RawValue>>;

/// The conversions kept per session, and the last tool list's.
#[derive(Default)]
pub(crate) struct Converter {
    cache: conversion::Converter<Wire>,
}

/// One logged message as chat-completions messages.
fn convert(message: &Message) -> serde_json::Result<Wire> {
    messages_of(message).iter().map(to_raw_value).collect()
}

/// The request's tool list on the wire.
fn convert_tools(tools: &[ToolIn<'_>]) -> serde_json::Result<Box<RawValue>> {
    let wire: Vec<WireTool<'_>> = tools.iter().map(WireTool::of).collect();
    to_raw_value(&wire)
}

impl Converter {
    /// The chat-completions request body for `req`, as JSON bytes. A
    /// request without a session id keeps no conversions.
    pub(crate) fn body(&self, config: &Config, mut req: Request) -> Result<Vec<u8>, ConvertError> {
        let stop = req.stop().map_err(ConvertError::at("the stop sequences"))?;
        let history = std::mem::take(&mut req.messages);
        let session = req.session_id.as_deref();
        let converted = self.cache.messages(session, history, convert)?;
        let system = req
            .system
            .take()
            .filter(|s| !s.is_empty())
            .map(|content| to_raw_value(&WireMessage::System { content }))
            .transpose()
            .map_err(ConvertError::at("the system prompt"))?;
        let tools = match req.tools.as_deref() {
            Some(t) => self.cache.tools(t, convert_tools)?,
            None => None,
        };
        let mut messages: Vec<&RawValue> = Vec::with_capacity(converted.len() + 1);
        messages.extend(system.as_deref());
        for c in &converted {
            messages.extend(c.wire.iter().map(|w| &**w));
        }
        let effort = req
            .reasoning_effort
            .as_deref()
            .unwrap_or(&config.reasoning_effort);
        let (thinking, reasoning_effort) = match (config.reasoning, effort) {
            (false, _) => (None, None),
            (true, EFFORT_OFF) => (Some(Thinking::Disabled), None),
            (true, effort) => (Some(Thinking::Enabled), Some(effort)),
        };
        let body = Body {
            model: req.model_or(&config.model),
            messages,
            stream: true,
            stream_options: StreamOptions {
                include_usage: true,
            },
            thinking,
            reasoning_effort,
            tools: tools.as_deref(),
            max_tokens: req.max_tokens.or(config.max_tokens),
            temperature: req.temperature.as_ref(),
            stop: stop.as_ref(),
        };
        let bytes = serde_json::to_vec(&body).map_err(ConvertError::at("the body"))?;
        drop(body);
        self.cache.keep(session, converted);
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn config() -> Config {
        serde_json::from_value(json!({"baseUrl": "http://x", "model": "dflt"})).unwrap()
    }

    fn body(c: &Converter, req: Value) -> Value {
        let req: Request = serde_json::from_value(req).unwrap();
        serde_json::from_slice(&c.body(&config(), req).unwrap()).unwrap()
    }

    fn user(id: &str, text: &str) -> Value {
        json!({"id": id, "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}})
    }

    fn body_text(c: &Converter, req: &str) -> Result<String, ConvertError> {
        let req: Request = serde_json::from_str(req).unwrap();
        c.body(&config(), req)
            .map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn the_body_has_the_chat_completions_shape_in_order() {
        let c = Converter::default();
        let b = body(
            &c,
            json!({"provider": "p", "model": "m", "system": "sys", "maxTokens": 5, "temperature": 0.5,
                   "messages": [user("u", "hi"),
                                {"id": "a", "role": "assistant", "content": [
                                    {"type": "reasoning", "text": "r"}, {"type": "text", "text": "t"},
                                    {"type": "tool-call", "id": "c1", "name": "read", "arguments": "{}"}],
                                 "source": {"kind": "model", "provider": "p", "model": "m"}},
                                {"id": "r", "role": "user", "content": [{"type": "tool-result", "toolCallId": "c1", "content": [], "isError": false}],
                                 "source": {"kind": "tool", "callId": "c1"}}],
                   "tools": [{"name": "read", "description": "d", "parameters": {"type": "object"}}],
                   "sessionId": "s"}),
        );
        let keys: Vec<&str> = b.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "model",
                "messages",
                "stream",
                "stream_options",
                "thinking",
                "reasoning_effort",
                "tools",
                "max_tokens",
                "temperature"
            ]
        );
        assert_eq!(
            b["messages"],
            json!([
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "t", "reasoning_content": "r",
                 "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "(no output)"}
            ])
        );
        assert_eq!(b["tools"][0]["function"]["name"], "read");
        assert_eq!(b["max_tokens"], 5);
        assert_eq!(b["model"], "m");
    }

    #[test]
    fn a_later_request_reuses_the_shared_prefix_and_converts_what_changed() {
        let c = Converter::default();
        let first = json!({"messages": [user("1", "a"), user("2", "b")], "sessionId": "s"});
        assert_eq!(body(&c, first)["messages"].as_array().unwrap().len(), 2);
        // The second message changed (a replace): the conversion follows it.
        let second =
            json!({"messages": [user("1", "a"), user("2", "B"), user("3", "c")], "sessionId": "s"});
        let b = body(&c, second);
        let texts: Vec<&str> = b["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        assert_eq!(texts, ["a", "B", "c"]);
        assert_eq!(b["model"], "dflt");
        assert_eq!(b["thinking"], json!({"type": "enabled"}));
        assert_eq!(b["reasoning_effort"], "high");
    }

    #[test]
    fn the_body_is_byte_for_byte_the_wire() {
        let c = Converter::default();
        let got = body_text(
            &c,
            r#"{"model":"m","temperature":1,"stop":["x","y"],"reasoningEffort":"off",
                "tools":[{"name":"t","parameters":{"type": "object"}},{"name":"u","description":"d"}],
                "messages":[{"id":"u","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}]}"#,
        )
        .unwrap();
        assert_eq!(
            got,
            concat!(
                r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"#,
                r#""stream_options":{"include_usage":true},"thinking":{"type":"disabled"},"#,
                r#""tools":[{"type":"function","function":{"name":"t","description":null,"parameters":{"type": "object"}}},"#,
                r#"{"type":"function","function":{"name":"u","description":"d","parameters":null}}],"#,
                r#""temperature":1,"stop":["x","y"]}"#
            )
        );
        let one = body_text(&c, r#"{"stop":"end","temperature":0.25,"tools":[]}"#).unwrap();
        assert!(
            one.ends_with(r#""temperature":0.25,"stop":"end"}"#),
            "{one}"
        );
        assert!(
            !one.contains("tools"),
            "an empty tool list is not sent: {one}"
        );
    }

    #[test]
    fn a_message_that_is_not_a_message_is_refused_naming_it() {
        let c = Converter::default();
        let e = body_text(
            &c,
            r#"{"messages":[{"id":"u","role":"user","content":[],"source":{"kind":"user"}},
                            {"id":"v","role":"user","content":[{"type":"text"}],"source":{"kind":"user"}}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("message 1: ") && e.contains("text"), "{e}");
        let e = body_text(&c, r#"{"tools":{"name":"t"}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("the tools: "), "{e}");
    }
}
