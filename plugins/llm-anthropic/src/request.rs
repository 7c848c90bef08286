//! The request body of one generate call (`POST /v1/messages`), built from
//! the harness request without re-encoding the history: each harness
//! message is converted once ([`crate::convert::part_of`]), and later
//! requests of the same session reuse the conversion of every message they
//! share with the previous one.
//!
//! The parts are then joined into the alternating messages the API takes:
//! empty parts are left out, consecutive parts of one role become one
//! message (a tool's results, each logged as a message of its own, join
//! the user message that answers the calls), and a user message lists its
//! tool results before its text, as the API requires.
//!
//! Thinking (`thinking: {type: "enabled", budget_tokens}`) follows the
//! request's `reasoningEffort`, else the config's: `off` sends none, and
//! `low`, `medium`, `high`, `max` a budget of 2,048, 8,192, 16,384 or
//! 32,000 tokens, at most half of `max_tokens` (the API wants the budget
//! below `max_tokens`, and the answer needs room too); a budget under
//! 1,024 tokens (the API's least) sends none. With thinking on, the
//! answers' signed thinking is sent back (to the model that wrote it);
//! with it off, none is (the API refuses thinking then). A request that
//! continues a tool loop whose first answer has no signed thinking (it was
//! another provider's or model's, or thinking was off) goes without
//! thinking, which the API would refuse. `temperature` is sent only
//! without thinking (the API takes none with it).
//!
//! Prompt caching (config `promptCaching`, on by default) marks two cache
//! breakpoints: the system prompt (which caches the tools before it too)
//! and the last block of the last message, so each request reads the
//! prefix the previous one wrote.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;

use dsh_sdk::vocab::Message;
use serde::{Deserialize, Serialize};
use serde_json::value::{to_raw_value, RawValue};
use serde_json::Number;

use crate::convert::{part_of, CacheControl, Part, ToolIn, WireBlock, WireRole, WireTool};
use crate::models::{self, Model};
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
    /// The session, whose conversions are kept for its next request.
    #[serde(default)]
    pub session_id: Option<String>,
}

/// The sequences that stop the model: one, or several.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    fn sequences(&self) -> Vec<&str> {
        match self {
            Stop::One(s) => vec![s.as_str()],
            Stop::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// The reasoning efforts this adapter maps to a thinking budget.
pub(crate) mod effort {
    /// No thinking.
    pub const OFF: &str = "off";
    /// 2,048 tokens.
    pub const LOW: &str = "low";
    /// 8,192 tokens.
    pub const MEDIUM: &str = "medium";
    /// 16,384 tokens.
    pub const HIGH: &str = "high";
    /// 32,000 tokens.
    pub const MAX: &str = "max";
    /// Every effort, in order (for the message that refuses another).
    pub const ALL: [&str; 5] = [OFF, LOW, MEDIUM, HIGH, MAX];
}

/// The least thinking budget the API takes.
const MIN_THINKING_BUDGET: u64 = 1024;

/// The thinking budget of `effort` (`None` for `off`), or why the effort
/// is not one this adapter knows.
fn budget_of(effort: &str) -> Result<Option<u64>, String> {
    Ok(Some(match effort {
        effort::OFF => return Ok(None),
        effort::LOW => 2048,
        effort::MEDIUM => 8192,
        effort::HIGH => 16_384,
        effort::MAX => 32_000,
        other => {
            return Err(format!(
                "reasoningEffort {other:?} is not one of {}",
                effort::ALL.join(", ")
            ))
        }
    }))
}

/// The thinking of a request with `effort` and `max_tokens`: the effort's
/// budget, at most half of `max_tokens`; none when that is under the
/// API's least.
fn thinking_for(effort: &str, max_tokens: u64) -> Result<Option<Thinking>, String> {
    Ok(budget_of(effort)?
        .map(|b| b.min(max_tokens / 2))
        .filter(|b| *b >= MIN_THINKING_BUDGET)
        .map(|budget_tokens| Thinking::Enabled { budget_tokens }))
}

/// The `thinking` switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Thinking {
    /// Thinking with a budget.
    Enabled {
        /// The most tokens the model may think.
        budget_tokens: u64,
    },
}

/// A block of the system prompt.
#[derive(Serialize)]
struct SystemBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

/// The system prompt: its text, or one text block with a cache
/// breakpoint.
#[derive(Serialize)]
#[serde(untagged)]
enum System<'a> {
    Text(&'a str),
    Blocks([SystemBlock<'a>; 1]),
}

/// One message of the body: a role and its blocks (borrowed from the
/// kept conversions; the one with a cache breakpoint is a copy).
#[derive(Serialize)]
struct WireMessage<'a> {
    role: WireRole,
    content: Vec<Cow<'a, WireBlock>>,
}

/// The Messages request body, keys in the wire's order.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    max_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<System<'a>>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<&'a Number>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stop_sequences: Vec<&'a str>,
}

/// Why a request could not become a body: which part, and why.
#[derive(Debug)]
pub(crate) struct ConvertError {
    part: String,
    error: String,
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.part, self.error)
    }
}

impl ConvertError {
    fn at<E: fmt::Display>(part: impl Into<String>) -> impl FnOnce(E) -> ConvertError {
        let part = part.into();
        move |error| ConvertError {
            part,
            error: error.to_string(),
        }
    }
}

/// One harness message and the part it became.
struct Converted {
    source: Box<RawValue>,
    part: Part,
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
    let part = part_of(&message);
    Ok(Converted { source, part })
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

/// The parts joined into alternating messages: empty ones left out,
/// consecutive ones of a role joined, a user message's tool results
/// first. Thinking is kept when `thinking` is on and the answer is
/// `model`'s.
fn join<'a>(parts: &'a [Converted], model: &str, thinking: bool) -> Vec<WireMessage<'a>> {
    let mut out: Vec<WireMessage<'a>> = Vec::with_capacity(parts.len());
    for Converted { part, .. } in parts {
        let keep_thinking = thinking && part.model.as_deref() == Some(model);
        let blocks = part
            .blocks
            .iter()
            .filter(|b| keep_thinking || !b.is_thinking())
            .map(Cow::Borrowed);
        match out.last_mut() {
            Some(last) if last.role == part.role => last.content.extend(blocks),
            _ => {
                let content: Vec<Cow<'a, WireBlock>> = blocks.collect();
                if !content.is_empty() {
                    out.push(WireMessage {
                        role: part.role,
                        content,
                    });
                }
            }
        }
    }
    for m in out.iter_mut().filter(|m| m.role == WireRole::User) {
        // Stable: results keep their order, and so does the rest.
        m.content.sort_by_key(|b| !b.is_tool_result());
    }
    out
}

/// Whether `messages` continue a tool loop (they end with tool results)
/// whose first answer does not start with thinking: with thinking on, the
/// API refuses that.
fn unsigned_tool_loop(messages: &[WireMessage<'_>]) -> bool {
    let has_results = |m: &WireMessage<'_>| m.content.iter().any(|b| b.is_tool_result());
    match messages.last() {
        Some(last) if last.role == WireRole::User && has_results(last) => {}
        _ => return false,
    }
    // The turn starts after the last user message that is no tool result.
    let start = messages
        .iter()
        .rposition(|m| m.role == WireRole::User && !has_results(m))
        .map_or(0, |at| at + 1);
    messages[start..]
        .iter()
        .find(|m| m.role == WireRole::Assistant)
        .is_some_and(|first| {
            first.content.iter().any(|b| b.is_tool_use())
                && !first.content.first().is_some_and(|b| b.is_thinking())
        })
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

    /// The Messages request body for `req`, as JSON bytes; `catalog` gives
    /// the output cap of a request that sets none. A request without a
    /// session id keeps no conversions.
    pub(crate) fn body(
        &self,
        config: &Config,
        catalog: &[Model],
        req: Request,
    ) -> Result<Vec<u8>, ConvertError> {
        let session = req.session_id.clone().filter(|s| !s.is_empty());
        let converted = self.messages(session.as_deref(), req.messages)?;
        let tools = req
            .tools
            .as_deref()
            .map(|t| self.tools(t))
            .transpose()
            .map_err(ConvertError::at("the tools"))?
            .flatten();
        let model = req
            .model
            .as_deref()
            .filter(|m| !m.is_empty())
            .unwrap_or(&config.model);
        let max_tokens = req
            .max_tokens
            .unwrap_or_else(|| models::default_max_tokens(catalog, config.max_tokens, model));
        let effort = req
            .reasoning_effort
            .as_deref()
            .unwrap_or(&config.reasoning_effort);
        let mut thinking =
            thinking_for(effort, max_tokens).map_err(ConvertError::at("the reasoning effort"))?;
        let mut messages = join(&converted, model, thinking.is_some());
        if thinking.is_some() && unsigned_tool_loop(&messages) {
            dsh_sdk::tracing::debug!(
                "{}: the tool loop this request continues began without signed thinking; \
                 this request goes without thinking",
                crate::PLUGIN
            );
            thinking = None;
            messages = join(&converted, model, false);
        }
        if config.prompt_caching {
            if let Some(last) = messages.last_mut().and_then(|m| m.content.last_mut()) {
                if let Some(cached) = last.cached() {
                    *last = Cow::Owned(cached);
                }
            }
        }
        let system = req.system.as_deref().filter(|s| !s.is_empty()).map(|text| {
            if config.prompt_caching {
                System::Blocks([SystemBlock {
                    kind: "text",
                    text,
                    cache_control: Some(CacheControl::Ephemeral),
                }])
            } else {
                System::Text(text)
            }
        });
        let body = Body {
            model,
            max_tokens,
            system,
            messages,
            tools: tools.as_deref(),
            stream: true,
            thinking,
            temperature: req.temperature.as_ref().filter(|_| thinking.is_none()),
            stop_sequences: req.stop.as_ref().map_or_else(Vec::new, Stop::sequences),
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

    fn config(extra: Value) -> Config {
        let mut c = json!({"baseUrl": "http://x", "model": "dflt"});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(c).unwrap()
    }

    fn body_with(c: &Converter, config: &Config, req: Value) -> Value {
        let req: Request = serde_json::from_value(req).unwrap();
        serde_json::from_slice(&c.body(config, &models::claude(), req).unwrap()).unwrap()
    }

    fn body(c: &Converter, req: Value) -> Value {
        body_with(c, &config(json!({})), req)
    }

    fn user(id: &str, text: &str) -> Value {
        json!({"id": id, "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}})
    }

    fn answer(id: &str, content: Value, replay: Option<Value>) -> Value {
        let mut source = json!({"kind": "model", "provider": "anthropic", "model": "m"});
        if let Some(r) = replay {
            source["replayState"] = r;
        }
        json!({"id": id, "role": "assistant", "content": content, "source": source})
    }

    fn result(call: &str, text: &str) -> Value {
        json!({"id": format!("r-{call}"), "role": "user", "source": {"kind": "tool", "callId": call},
               "content": [{"type": "tool-result", "toolCallId": call, "isError": false,
                            "content": [{"type": "text", "text": text}]}]})
    }

    /// A tool loop: the ask, an answer with signed thinking calling two
    /// tools, their two results (each a message).
    fn tool_loop() -> Vec<Value> {
        vec![
            user("u", "look"),
            answer(
                "a",
                json!([{"type": "reasoning", "text": "plan"},
                       {"type": "tool-call", "id": "t1", "name": "read", "arguments": "{\"file_path\":\"a\"}"},
                       {"type": "tool-call", "id": "t2", "name": "read", "arguments": "{\"file_path\":\"b\"}"}]),
                Some(json!({"blocks": [{"type": "thinking", "signature": "sig"}, null, null]})),
            ),
            result("t1", "A"),
            result("t2", "B"),
        ]
    }

    fn roles(b: &Value) -> Vec<&str> {
        b["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn the_body_has_the_messages_shape_in_order() {
        let c = Converter::default();
        let b = body(
            &c,
            json!({"model": "m", "system": "sys", "maxTokens": 5000, "reasoningEffort": "high",
                   "messages": tool_loop(), "sessionId": "s",
                   "tools": [{"name": "read", "description": "d", "parameters": {"type": "object"}}]}),
        );
        let keys: Vec<&str> = b.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "model",
                "max_tokens",
                "system",
                "messages",
                "tools",
                "stream",
                "thinking"
            ]
        );
        assert_eq!(b["max_tokens"], 5000);
        assert_eq!(b["stream"], true);
        // Half of max_tokens: the answer keeps room.
        assert_eq!(
            b["thinking"],
            json!({"type": "enabled", "budget_tokens": 2500})
        );
        assert_eq!(
            b["system"],
            json!([{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}])
        );
        assert_eq!(
            b["tools"],
            json!([{"name": "read", "description": "d", "input_schema": {"type": "object"}}])
        );
        assert_eq!(
            b["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "look"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "plan", "signature": "sig"},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {"file_path": "a"}},
                    {"type": "tool_use", "id": "t2", "name": "read", "input": {"file_path": "b"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "A", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "t2", "content": "B", "is_error": false,
                     "cache_control": {"type": "ephemeral"}}]}
            ])
        );
    }

    #[test]
    fn user_text_after_results_joins_them_after_the_results() {
        let c = Converter::default();
        let mut messages = tool_loop();
        // A steer typed while the tools ran, logged between the results.
        messages.insert(3, user("steer", "also this"));
        let b = body(&c, json!({"model": "m", "messages": messages}));
        assert_eq!(roles(&b), ["user", "assistant", "user"]);
        let types: Vec<&str> = b["messages"][2]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["tool_result", "tool_result", "text"]);
        assert_eq!(b["messages"][2]["content"][1]["tool_use_id"], "t2");
    }

    #[test]
    fn empty_parts_are_left_out_and_roles_alternate() {
        let c = Converter::default();
        let b = body(
            &c,
            json!({"model": "m", "messages": [
                user("1", "a"),
                answer("2", json!([{"type": "reasoning", "text": "unsigned"}]), None),
                user("3", "b"),
                user("4", ""),
                answer("5", json!([{"type": "text", "text": "ok"}]), None),
                answer("6", json!([{"type": "text", "text": "more"}]), None),
                user("7", "c")]}),
        );
        assert_eq!(roles(&b), ["user", "assistant", "user"]);
        assert_eq!(
            b["messages"][0]["content"],
            json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
        );
        assert_eq!(b["messages"][1]["content"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn thinking_off_sends_no_thinking_and_keeps_the_temperature() {
        let c = Converter::default();
        let b = body(
            &c,
            json!({"model": "m", "reasoningEffort": "off", "temperature": 0.5, "stop": "END",
                   "messages": tool_loop()}),
        );
        assert!(b.get("thinking").is_none(), "{b}");
        assert_eq!(b["temperature"], 0.5);
        assert_eq!(b["stop_sequences"], json!(["END"]));
        assert_eq!(b["messages"][1]["content"][0]["type"], "tool_use");
        // With thinking on, the temperature is not sent.
        let b = body(
            &c,
            json!({"model": "m", "reasoningEffort": "low", "temperature": 0.5, "messages": tool_loop()}),
        );
        assert_eq!(
            b["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        assert!(b.get("temperature").is_none(), "{b}");
    }

    #[test]
    fn a_tool_loop_begun_without_signed_thinking_goes_without_thinking() {
        let c = Converter::default();
        // Another model's answer: its signature is not this model's.
        let b = body(
            &c,
            json!({"model": "other", "reasoningEffort": "high", "messages": tool_loop()}),
        );
        assert!(b.get("thinking").is_none(), "{b}");
        assert_eq!(b["messages"][1]["content"][0]["type"], "tool_use");
        // A new turn after the loop may think again.
        let mut messages = tool_loop();
        messages.push(answer("z", json!([{"type": "text", "text": "done"}]), None));
        messages.push(user("next", "go on"));
        let b = body(
            &c,
            json!({"model": "other", "reasoningEffort": "high", "messages": messages}),
        );
        assert_eq!(b["thinking"]["type"], "enabled");
    }

    #[test]
    fn the_output_cap_comes_from_the_request_the_catalog_or_the_config() {
        let c = Converter::default();
        let cap = |config: &Config, model: &str| {
            body_with(
                &c,
                config,
                json!({"model": model, "messages": [user("u", "x")]}),
            )["max_tokens"]
                .clone()
        };
        assert_eq!(cap(&config(json!({})), "claude-opus-4-1"), 32_000);
        assert_eq!(
            cap(&config(json!({})), "unlisted"),
            models::DEFAULT_MAX_TOKENS
        );
        assert_eq!(cap(&config(json!({"maxTokens": 1000})), "unlisted"), 1000);
        // Too small a cap for the least budget: no thinking.
        let b = body(
            &c,
            json!({"model": "m", "maxTokens": 2000, "reasoningEffort": "max", "messages": [user("u", "x")]}),
        );
        assert!(b.get("thinking").is_none(), "{b}");
    }

    #[test]
    fn an_unknown_effort_is_refused_naming_the_known_ones() {
        let c = Converter::default();
        let req: Request =
            serde_json::from_value(json!({"reasoningEffort": "extreme", "messages": []})).unwrap();
        let e = c
            .body(&config(json!({})), &models::claude(), req)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "the reasoning effort: reasoningEffort \"extreme\" is not one of off, low, medium, high, max"
        );
    }

    #[test]
    fn without_prompt_caching_no_breakpoint_is_sent() {
        let c = Converter::default();
        let b = body_with(
            &c,
            &config(json!({"promptCaching": false})),
            json!({"system": "sys", "messages": [user("u", "x")]}),
        );
        assert_eq!(b["system"], "sys");
        assert!(!b.to_string().contains("cache_control"), "{b}");
    }

    #[test]
    fn a_later_request_reuses_the_shared_prefix_and_converts_what_changed() {
        let c = Converter::default();
        body(
            &c,
            json!({"messages": [user("1", "a"), user("2", "b")], "sessionId": "s"}),
        );
        let b = body(
            &c,
            json!({"messages": [user("1", "a"), user("2", "B"), answer("3", json!([{"type": "text", "text": "c"}]), None)],
                   "sessionId": "s"}),
        );
        assert_eq!(b["messages"][0]["content"][1]["text"], "B");
        assert_eq!(b["model"], "dflt");
        let kept = c.sessions.borrow();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].1.len(), 3);
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

    #[test]
    fn a_message_that_is_not_a_message_is_refused_naming_it() {
        let c = Converter::default();
        let req: Request = serde_json::from_str(
            r#"{"messages":[{"id":"u","role":"user","content":[],"source":{"kind":"user"}},
                            {"id":"v","role":"user","content":[{"type":"text"}],"source":{"kind":"user"}}]}"#,
        )
        .unwrap();
        let e = c
            .body(&config(json!({})), &models::claude(), req)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("message 1: ") && e.contains("text"), "{e}");
    }
}
