//! The request body of one generate call, built from the harness request
//! without re-encoding the history: each harness message is converted to
//! chat-completions messages once, and later requests of the same session
//! reuse the conversion of every message they share with the previous one.

use std::cell::RefCell;
use std::fmt;

use dsh_sdk::vocab::Message;

use crate::models::EFFORT_OFF;
use serde::{Deserialize, Serialize};
use serde_json::value::{to_raw_value, RawValue};
use serde_json::Number;

use crate::convert::{messages_of, ToolIn, WireMessage, WireTool};
use crate::Config;

/// The harness request (`llm-adapter.stream` params) as this adapter reads
/// it; other fields pass by. The history stays as the JSON texts the
/// messages were logged as: each is read as a [`Message`] only when the
/// session's previous request did not carry the same text.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Request {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    messages: Vec<Box<RawValue>>,
    #[serde(default)]
    system: Option<String>,
    /// The tool schemas, converted once per distinct list ([`Converter`]).
    #[serde(default)]
    tools: Option<Box<RawValue>>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    reasoning_effort: Option<String>,
    /// Passed on as written (a `Number` keeps `1` and `1.0` apart).
    #[serde(default)]
    temperature: Option<Number>,
    #[serde(default)]
    stop: Option<Stop>,
    /// Sent as `x-deepseek-harness-session-id`.
    #[serde(default)]
    pub session_id: Option<String>,
    /// An auxiliary call's purpose (`compaction` adds
    /// `x-deepseek-harness-compact: 1`).
    #[serde(default)]
    pub purpose: Option<String>,
}

impl Request {
    /// The model asked for, or `default` (the route's) when none is.
    pub fn model_or<'a>(&'a self, default: &'a str) -> &'a str {
        model_or(&self.model, default)
    }
}

/// `model` when it names one, else `default`.
fn model_or<'a>(model: &'a Option<String>, default: &'a str) -> &'a str {
    model
        .as_deref()
        .filter(|m| !m.is_empty())
        .unwrap_or(default)
}

/// The sequences that stop the model: one, or several.
#[derive(Debug, Deserialize, Serialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

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
    /// Each message converted once ([`Converted::wire`]).
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

/// Why a request could not become a body: which part, and the reading
/// error.
#[derive(Debug)]
pub(crate) struct ConvertError {
    part: String,
    error: serde_json::Error,
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.part, self.error)
    }
}

impl ConvertError {
    fn at(part: impl Into<String>) -> impl FnOnce(serde_json::Error) -> ConvertError {
        let part = part.into();
        move |error| ConvertError { part, error }
    }
}

/// One harness message and the chat-completions messages it became.
struct Converted {
    source: Box<RawValue>,
    wire: Vec<Box<RawValue>>,
}

/// How many sessions keep their conversions (the least recently used goes).
const SESSIONS_KEPT: usize = 16;

/// Conversions kept per session, and the last tool list's.
#[derive(Default)]
pub(crate) struct Converter {
    sessions: RefCell<Vec<(String, Vec<Converted>)>>,
    tools: RefCell<Option<(Box<RawValue>, Box<RawValue>)>>,
}

/// Reads one logged message and converts it.
fn convert(source: Box<RawValue>) -> serde_json::Result<Converted> {
    let message: Message = serde_json::from_str(source.get())?;
    let wire = messages_of(&message)
        .iter()
        .map(to_raw_value)
        .collect::<serde_json::Result<_>>()?;
    Ok(Converted { source, wire })
}

/// The request's tool list on the wire; `None` when it is empty.
fn convert_tools(tools: &RawValue) -> serde_json::Result<Option<Box<RawValue>>> {
    let tools: Vec<ToolIn<'_>> = serde_json::from_str(tools.get())?;
    if tools.is_empty() {
        return Ok(None);
    }
    let wire: Vec<WireTool<'_>> = tools.iter().map(WireTool::of).collect();
    Ok(Some(to_raw_value(&wire)?))
}

impl Converter {
    /// The conversions of `messages` for `session`: reused for the prefix
    /// the session's previous request shares, made for the rest.
    fn messages(
        &self,
        session: Option<&str>,
        messages: Vec<Box<RawValue>>,
    ) -> Result<Vec<Converted>, ConvertError> {
        let previous = match session {
            Some(session) => {
                let mut sessions = self.sessions.borrow_mut();
                match sessions.iter().position(|(s, _)| s == session) {
                    Some(at) => sessions.remove(at).1,
                    None => Vec::new(),
                }
            }
            None => Vec::new(),
        };
        let mut previous = previous.into_iter();
        let mut out = Vec::with_capacity(messages.len());
        let mut reusing = true;
        for (at, m) in messages.into_iter().enumerate() {
            if reusing {
                match previous.next() {
                    Some(c) if c.source.get() == m.get() => {
                        out.push(c);
                        continue;
                    }
                    _ => reusing = false,
                }
            }
            out.push(convert(m).map_err(ConvertError::at(format!("message {at}")))?);
        }
        Ok(out)
    }

    fn keep(&self, session: String, converted: Vec<Converted>) {
        let mut sessions = self.sessions.borrow_mut();
        if sessions.len() >= SESSIONS_KEPT {
            sessions.remove(0);
        }
        sessions.push((session, converted));
    }

    fn tools(&self, tools: &RawValue) -> serde_json::Result<Option<Box<RawValue>>> {
        if let Some((source, wire)) = &*self.tools.borrow() {
            if source.get() == tools.get() {
                return Ok(Some(wire.clone()));
            }
        }
        let wire = convert_tools(tools)?;
        if let Some(w) = &wire {
            *self.tools.borrow_mut() = Some((tools.to_owned(), w.clone()));
        }
        Ok(wire)
    }

    /// The chat-completions request body for `req`, as JSON bytes. A
    /// request without a session id keeps no conversions.
    pub(crate) fn body(&self, config: &Config, req: Request) -> Result<Vec<u8>, ConvertError> {
        let session = req.session_id.clone().filter(|s| !s.is_empty());
        let converted = self.messages(session.as_deref(), req.messages)?;
        let system = req
            .system
            .filter(|s| !s.is_empty())
            .map(|content| to_raw_value(&WireMessage::System { content }))
            .transpose()
            .map_err(ConvertError::at("the system prompt"))?;
        let tools = req
            .tools
            .as_deref()
            .map(|t| self.tools(t))
            .transpose()
            .map_err(ConvertError::at("the tools"))?
            .flatten();
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
            model: model_or(&req.model, &config.model),
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
            stop: req.stop.as_ref(),
        };
        let bytes = serde_json::to_vec(&body).map_err(ConvertError::at("the body"))?;
        drop(body);
        if let Some(session) = session {
            self.keep(session, converted);
        }
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
    fn sessions_kept_are_bounded() {
        let c = Converter::default();
        for i in 0..(SESSIONS_KEPT + 5) {
            body(
                &c,
                json!({"messages": [user("1", "a")], "sessionId": format!("s{i}")}),
            );
        }
        assert_eq!(c.sessions.borrow().len(), SESSIONS_KEPT);
    }

    fn body_text(c: &Converter, req: &str) -> Result<String, ConvertError> {
        let req: Request = serde_json::from_str(req).unwrap();
        c.body(&config(), req)
            .map(|b| String::from_utf8(b).unwrap())
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
