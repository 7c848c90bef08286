//! The request body of one generate call, built from the harness request
//! without re-encoding the history: each harness message is converted to
//! chat-completions messages once, and later requests of the same session
//! reuse the conversion of every message they share with the previous one.

use std::cell::RefCell;

use serde::{Deserialize, Serialize};
use serde_json::value::{to_raw_value, RawValue};
use serde_json::{json, Value};

use crate::wire::messages_of;
use crate::Config;

/// The harness request (`llm-adapter.stream` params) as this adapter reads
/// it; other fields pass by.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Request {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    messages: Option<Vec<Box<RawValue>>>,
    #[serde(default)]
    system: Option<String>,
    #[serde(default)]
    tools: Option<Box<RawValue>>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    reasoning_effort: Option<String>,
    #[serde(default)]
    temperature: Option<Value>,
    #[serde(default)]
    stop: Option<Value>,
    /// Sent as `x-deepseek-harness-session-id`.
    #[serde(default)]
    pub session_id: Option<String>,
    /// An auxiliary call's purpose (`compaction` adds
    /// `x-deepseek-harness-compact: 1`).
    #[serde(default)]
    pub purpose: Option<String>,
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Vec<&'a RawValue>,
    stream: bool,
    stream_options: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop: Option<&'a Value>,
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

fn convert(source: Box<RawValue>) -> serde_json::Result<Converted> {
    let message: Value = serde_json::from_str(source.get())?;
    let wire = messages_of(&message)
        .iter()
        .map(to_raw_value)
        .collect::<serde_json::Result<_>>()?;
    Ok(Converted { source, wire })
}

fn convert_tools(tools: &RawValue) -> serde_json::Result<Option<Box<RawValue>>> {
    let tools: Value = serde_json::from_str(tools.get())?;
    let Some(tools) = tools.as_array().filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let wire: Vec<Value> = tools
        .iter()
        .map(|t| json!({"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]}}))
        .collect();
    Ok(Some(to_raw_value(&wire)?))
}

impl Converter {
    /// The conversions of `messages` for `session`: reused for the prefix
    /// the session's previous request shares, made for the rest.
    fn messages(
        &self,
        session: &str,
        messages: Vec<Box<RawValue>>,
    ) -> serde_json::Result<Vec<Converted>> {
        let mut sessions = self.sessions.borrow_mut();
        let previous = match sessions.iter().position(|(s, _)| s == session) {
            Some(at) => sessions.remove(at).1,
            None => Vec::new(),
        };
        let mut previous = previous.into_iter();
        let mut out = Vec::with_capacity(messages.len());
        let mut reusing = true;
        for m in messages {
            if reusing {
                match previous.next() {
                    Some(c) if c.source.get() == m.get() => {
                        out.push(c);
                        continue;
                    }
                    _ => reusing = false,
                }
            }
            out.push(convert(m)?);
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

    /// The chat-completions request body for `req`, as JSON bytes.
    pub(crate) fn body(&self, config: &Config, req: Request) -> serde_json::Result<Vec<u8>> {
        let session = req.session_id.clone().unwrap_or_default();
        let converted = self.messages(&session, req.messages.unwrap_or_default())?;
        let system = req
            .system
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(|s| to_raw_value(&json!({"role": "system", "content": s})))
            .transpose()?;
        let tools = req
            .tools
            .as_deref()
            .map(|t| self.tools(t))
            .transpose()?
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
            (true, "off") => (Some(json!({"type": "disabled"})), None),
            (true, effort) => (Some(json!({"type": "enabled"})), Some(effort)),
        };
        let body = Body {
            model: req
                .model
                .as_deref()
                .filter(|m| !m.is_empty())
                .unwrap_or(&config.model),
            messages,
            stream: true,
            stream_options: json!({"include_usage": true}),
            thinking,
            reasoning_effort,
            tools: tools.as_deref(),
            max_tokens: req.max_tokens.or(config.max_tokens),
            temperature: req.temperature.as_ref().filter(|v| !v.is_null()),
            stop: req.stop.as_ref().filter(|v| !v.is_null()),
        };
        let bytes = serde_json::to_vec(&body)?;
        drop(body);
        if !session.is_empty() {
            self.keep(session, converted);
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        serde_json::from_value(json!({"baseUrl": "http://x", "model": "dflt"})).unwrap()
    }

    fn body(c: &Converter, req: Value) -> Value {
        let req: Request = serde_json::from_value(req).unwrap();
        serde_json::from_slice(&c.body(&config(), req).unwrap()).unwrap()
    }

    fn user(id: &str, text: &str) -> Value {
        json!({"id": id, "role": "user", "content": [{"type": "text", "text": text}]})
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
                                    {"type": "tool-call", "id": "c1", "name": "read", "arguments": "{}"}]},
                                {"id": "r", "role": "user", "content": [{"type": "tool-result", "toolCallId": "c1", "content": [], "isError": false}]}],
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
}
