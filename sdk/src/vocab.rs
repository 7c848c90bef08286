//! The shared vocabulary of the agent core, as serde types whose JSON
//! matches the original dsh exactly (field names, key order, tags): session
//! events, messages and content blocks, stream chunks, usage, failures, turn
//! end reasons, tool schemas. See reference/dsh-core.md §2–§5.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Session event types of the core log (§2.2).
pub mod event {
    /// A turn opens.
    pub const TURN_START: &str = "turn/start";
    /// A turn closes.
    pub const TURN_END: &str = "turn/end";
    /// A step (one model call and its tools) opens.
    pub const STEP_START: &str = "step/start";
    /// A step closes.
    pub const STEP_END: &str = "step/end";
    /// A user (or plugin-sourced) message enters the history.
    pub const USER_MESSAGE: &str = "user/message";
    /// One raw stream chunk from the model.
    pub const ASSISTANT_CHUNK: &str = "assistant/chunk";
    /// The assembled assistant message.
    pub const ASSISTANT_MESSAGE: &str = "assistant/message";
    /// A tool call starts.
    pub const TOOL_CALL: &str = "tool/call";
    /// A tool result enters the history.
    pub const TOOL_RESULT: &str = "tool/result";
    /// The todo list was replaced.
    pub const TODO_WRITE: &str = "todo/write";
    /// The request header (config, system, tools) in force.
    pub const REQUEST_HEADER: &str = "request/header";
    /// The route's capacity metadata.
    pub const REQUEST_CONTEXT: &str = "request/context";
    /// End of a seed (fork/resume).
    pub const SESSION_END_SEED: &str = "session/end-seed";
    /// A durable inbox mutation.
    pub const INBOX_SPLICED: &str = "agent/inbox/spliced";
    /// A retry of a failed model request.
    pub const LLM_RETRY: &str = "llm/retry";

    /// Types that carry a `surfaceOp`.
    pub const SURFACE: [&str; 3] = [USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT];

    /// Every type this harness knows (others load only when `ignorable`).
    pub const KNOWN: [&str; 16] = [
        TURN_START,
        TURN_END,
        STEP_START,
        STEP_END,
        USER_MESSAGE,
        ASSISTANT_CHUNK,
        ASSISTANT_MESSAGE,
        TOOL_CALL,
        TOOL_RESULT,
        TODO_WRITE,
        REQUEST_HEADER,
        REQUEST_CONTEXT,
        SESSION_END_SEED,
        INBOX_SPLICED,
        LLM_RETRY,
        "llm/retry-started",
    ];
}

/// One durable session event: `{type, seq, time, data}` plus, for surface
/// types, `sourceEventSeqs` and `surfaceOp`. Field order is the serialized
/// key order of the original.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionEvent {
    /// The event type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Position in the log (0-based, contiguous).
    pub seq: u64,
    /// Epoch milliseconds.
    pub time: u64,
    /// The payload.
    pub data: Value,
    /// Events this one was derived from.
    #[serde(
        rename = "sourceEventSeqs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub source_event_seqs: Option<Vec<u64>>,
    /// `"append"` or `{op: "replace", start, end}`.
    #[serde(rename = "surfaceOp", default, skip_serializing_if = "Option::is_none")]
    pub surface_op: Option<Value>,
    /// Unknown types with this flag load as-is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignorable: Option<bool>,
}

/// The header of a stored session (kept out of the event log).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionHeader {
    /// Log format version (0).
    pub version: u32,
    /// Session id.
    pub id: String,
    /// Epoch milliseconds.
    pub created_at: u64,
    /// Absolute working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The session this one was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<String>,
    /// Number of seed events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_length: Option<u64>,
    /// `"subagent"` for delegated sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Delegation depth (0 for top level).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation_depth: Option<u64>,
    /// Agent preset id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_preset: Option<String>,
}

/// Token usage; counts are disjoint (input excludes cache reads).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens (reasoning included).
    pub output_tokens: u64,
    /// Input tokens served from the provider's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Input tokens written to the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    /// Reasoning tokens (a subset of output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

/// A normalized model failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmFailure {
    /// What went wrong.
    pub message: String,
    /// A stable code (`RATE_LIMIT`, `SERVER`, `TIMEOUT`, ...).
    pub code: String,
    /// HTTP status, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The provider's `Retry-After`, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_retry_after_ms: Option<u64>,
    /// The provider's request id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl LlmFailure {
    /// A failure with a code and a message.
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        LlmFailure {
            message: message.into(),
            code: code.to_owned(),
            status: None,
            provider_retry_after_ms: None,
            request_id: None,
        }
    }

    /// The `finish` chunk that reports this failure.
    pub fn finish_chunk(&self, aborted: bool) -> Value {
        let kind = if aborted { "aborted" } else { "error" };
        json!({"type": "finish", "reason": {"kind": kind, "failure": self}})
    }
}

/// Codes that the default retry policy retries.
pub const RETRYABLE_CODES: [&str; 5] = [
    "EMPTY_RESPONSE",
    "RATE_LIMIT",
    "SERVER",
    "TIMEOUT",
    "TRANSPORT",
];

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// Tool name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments.
    pub parameters: Value,
}

/// Builders for content blocks and messages (JSON values, as logged).
pub mod msg {
    use super::*;

    /// A text block.
    pub fn text(text: &str) -> Value {
        json!({"type": "text", "text": text})
    }

    /// A user message with one text block.
    pub fn user_text(id: &str, text: &str) -> Value {
        json!({"id": id, "role": "user", "content": [text_block(text)], "source": {"kind": "user"}})
    }

    fn text_block(t: &str) -> Value {
        text(t)
    }

    /// An assistant message.
    pub fn assistant(id: &str, content: Vec<Value>, provider: &str, model: &str) -> Value {
        json!({"id": id, "role": "assistant", "content": content,
               "source": {"kind": "model", "provider": provider, "model": model}})
    }

    /// A tool-result message (`isError` is always written).
    pub fn tool_result(id: &str, call_id: &str, content: Vec<Value>, is_error: bool) -> Value {
        json!({"id": id, "role": "user",
               "content": [{"type": "tool-result", "toolCallId": call_id, "content": content, "isError": is_error}],
               "source": {"kind": "tool", "callId": call_id}})
    }

    /// The joined text of a message's text blocks.
    pub fn joined_text(message: &Value) -> String {
        message["content"]
            .as_array()
            .map(|blocks| {
                blocks
                    .iter()
                    .filter(|b| b["type"] == "text")
                    .filter_map(|b| b["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("")
            })
            .unwrap_or_default()
    }
}

/// Assembles stream chunks into content blocks (reference §3.8).
#[derive(Debug, Default, Clone)]
pub struct BlockAssembler {
    partials: Vec<Partial>,
    /// The finish reason (`{kind: "stop"}` until a finish chunk arrives).
    pub finish: Option<Value>,
    /// The last usage chunk's usage.
    pub usage: Option<Value>,
}

#[derive(Debug, Clone)]
struct Partial {
    index: u64,
    block_type: String,
    text: String,
    id: String,
    name: String,
    args: String,
    closed: Option<Value>,
}

impl BlockAssembler {
    fn partial(&mut self, index: u64, block_type: &str) -> &mut Partial {
        let pos = match self.partials.iter().position(|p| p.index == index) {
            Some(p) => p,
            None => {
                self.partials.push(Partial {
                    index,
                    block_type: block_type.to_owned(),
                    text: String::new(),
                    id: String::new(),
                    name: String::new(),
                    args: String::new(),
                    closed: None,
                });
                self.partials.len() - 1
            }
        };
        &mut self.partials[pos]
    }

    /// Feeds one chunk.
    pub fn push(&mut self, chunk: &Value) {
        let index = chunk["index"].as_u64().unwrap_or(0);
        match chunk["type"].as_str().unwrap_or_default() {
            "block-start" => {
                let bt = chunk["blockType"].as_str().unwrap_or("text").to_owned();
                self.partial(index, &bt);
            }
            "text-delta" | "reasoning-delta" => {
                let bt = if chunk["type"] == "text-delta" {
                    "text"
                } else {
                    "reasoning"
                };
                let p = self.partial(index, bt);
                if p.closed.is_none() {
                    p.text.push_str(chunk["text"].as_str().unwrap_or_default());
                }
            }
            "tool-call-delta" => {
                let p = self.partial(index, "tool-call");
                if p.closed.is_none() {
                    if let Some(id) = chunk["id"].as_str().filter(|s| !s.is_empty()) {
                        p.id = id.to_owned();
                    }
                    if p.name.is_empty() {
                        if let Some(n) = chunk["name"].as_str() {
                            p.name = n.to_owned();
                        }
                    }
                    p.args
                        .push_str(chunk["argumentsDelta"].as_str().unwrap_or_default());
                }
            }
            "block-end" => {
                let bt = chunk["block"]["type"].as_str().unwrap_or("text").to_owned();
                let p = self.partial(index, &bt);
                if p.closed.is_none() {
                    p.closed = Some(chunk["block"].clone());
                }
            }
            "usage" => self.usage = Some(chunk["usage"].clone()),
            "finish" => self.finish = Some(chunk["reason"].clone()),
            _ => {}
        }
    }

    fn block_of(p: &Partial) -> Value {
        if let Some(b) = &p.closed {
            return b.clone();
        }
        match p.block_type.as_str() {
            "tool-call" => {
                let id = if p.id.is_empty() {
                    format!("call-{}", p.index)
                } else {
                    p.id.clone()
                };
                json!({"type": "tool-call", "id": id, "name": p.name, "arguments": p.args})
            }
            "reasoning" => json!({"type": "reasoning", "text": p.text}),
            _ => json!({"type": "text", "text": p.text}),
        }
    }

    /// The finish reason's kind.
    pub fn finish_kind(&self) -> String {
        self.finish
            .as_ref()
            .and_then(|f| f["kind"].as_str())
            .unwrap_or("stop")
            .to_owned()
    }

    /// The assembled blocks; on `max-tokens` every tool call is dropped.
    pub fn blocks(&self) -> Vec<Value> {
        let max_tokens = self.finish_kind() == "max-tokens";
        self.partials
            .iter()
            .map(Self::block_of)
            .filter(|b| !(max_tokens && b["type"] == "tool-call"))
            .collect()
    }

    /// Text and reasoning with visible content, for an interrupted stream.
    pub fn interrupted_blocks(&self) -> Vec<Value> {
        self.partials
            .iter()
            .map(Self::block_of)
            .filter(|b| {
                (b["type"] == "text" || b["type"] == "reasoning")
                    && b["text"].as_str().is_some_and(|t| !t.trim().is_empty())
            })
            .collect()
    }
}

/// `deriveMessages()`: the model history projected from the surface of a
/// log (reference §2.5–2.6): surface events in order, with `replace` ranges
/// spliced out and empty assistant messages skipped.
pub fn derive_messages(events: &[SessionEvent]) -> Vec<Value> {
    let mut nodes: Vec<&SessionEvent> = Vec::new();
    for e in events {
        match &e.surface_op {
            Some(Value::String(op)) if op == "append" => nodes.push(e),
            Some(Value::Object(o)) if o.get("op") == Some(&json!("replace")) => {
                let start = o.get("start").and_then(Value::as_u64);
                let end = o.get("end").and_then(Value::as_u64);
                let s = nodes.iter().position(|n| Some(n.seq) == start);
                let t = nodes.iter().position(|n| Some(n.seq) == end);
                if let (Some(s), Some(t)) = (s, t) {
                    if s <= t {
                        nodes.splice(s..=t, [e]);
                    }
                }
            }
            _ => {}
        }
    }
    nodes
        .into_iter()
        .filter_map(|e| match e.kind.as_str() {
            event::USER_MESSAGE => Some(e.data.clone()),
            event::ASSISTANT_MESSAGE | event::TOOL_RESULT => {
                let m = &e.data["message"];
                let empty = m["content"].as_array().is_none_or(Vec::is_empty);
                (!(e.kind == event::ASSISTANT_MESSAGE && empty)).then(|| m.clone())
            }
            _ => None,
        })
        .collect()
}

/// The closers that make a torn log balanced again (reference §2.11):
/// synthetic results for unanswered calls, `step/end`, then
/// `turn/end{interrupted}`. Empty when the log is balanced.
pub fn interrupted_turn_closers(events: &[SessionEvent]) -> Vec<SessionEvent> {
    let mut open_turn: Option<u64> = None;
    let mut open_step: Option<u64> = None;
    // call id -> (step, recorded tool/call seq)
    let mut pending: Vec<(String, u64, Option<u64>)> = Vec::new();
    for e in events {
        match e.kind.as_str() {
            event::TURN_START => {
                open_turn = e.data["turn"].as_u64();
                open_step = None;
                pending.clear();
            }
            event::TURN_END => {
                open_turn = None;
                open_step = None;
                pending.clear();
            }
            event::STEP_START => open_step = e.data["step"].as_u64(),
            event::STEP_END => {
                open_step = None;
                pending.clear();
            }
            event::ASSISTANT_MESSAGE => {
                let step = e.data["step"].as_u64().unwrap_or(0);
                for b in e.data["message"]["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    if b["type"] == "tool-call" {
                        if let Some(id) = b["id"].as_str() {
                            pending.push((id.to_owned(), step, None));
                        }
                    }
                }
            }
            event::TOOL_CALL => {
                if let Some(id) = e.data["callId"].as_str() {
                    if let Some(p) = pending.iter_mut().find(|p| p.0 == id) {
                        p.2 = Some(e.seq);
                    }
                }
            }
            event::TOOL_RESULT => {
                let id = e.data["message"]["source"]["callId"]
                    .as_str()
                    .unwrap_or_default();
                pending.retain(|p| p.0 != id);
            }
            _ => {}
        }
    }
    let Some(turn) = open_turn else {
        return Vec::new();
    };
    let base = events.last().map_or(0, |e| e.seq + 1);
    let time = events.last().map_or(0, |e| e.time);
    let mut out: Vec<SessionEvent> = Vec::new();
    let push = |out: &mut Vec<SessionEvent>, kind: &str, data: Value, sources: Option<Vec<u64>>| {
        let surface = kind == event::TOOL_RESULT;
        out.push(SessionEvent {
            kind: kind.to_owned(),
            seq: base + out.len() as u64,
            time,
            data,
            source_event_seqs: sources,
            surface_op: surface.then(|| json!("append")),
            ignorable: None,
        });
    };
    for (call_id, step, recorded) in pending {
        let seq = base + out.len() as u64;
        let id = format!("interrupted-tool-result-{call_id}-{seq}");
        let (text, name, code) = match recorded {
            Some(_) => (
                "The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly.",
                "ToolOutcomeUnknownError",
                "TOOL_OUTCOME_UNKNOWN",
            ),
            None => (
                "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed.",
                "ToolNotStartedError",
                "TOOL_NOT_STARTED",
            ),
        };
        let message = msg::tool_result(&id, &call_id, vec![msg::text(text)], true);
        push(
            &mut out,
            event::TOOL_RESULT,
            json!({"turn": turn, "step": step, "message": message, "error": {"name": name, "code": code}}),
            recorded.map(|s| vec![s]),
        );
    }
    if let Some(step) = open_step {
        push(
            &mut out,
            event::STEP_END,
            json!({"turn": turn, "step": step}),
            None,
        );
    }
    push(
        &mut out,
        event::TURN_END,
        json!({"turn": turn, "reason": {"kind": "interrupted"}}),
        None,
    );
    out
}

/// Checks that `value` is lossless JSON for a session event (no `-0`, no
/// non-finite numbers; serde_json already rejects the rest).
pub fn lossless(value: &Value) -> bool {
    match value {
        Value::Number(n) => n
            .as_f64()
            .is_none_or(|f| f.is_finite() && !(f == 0.0 && f.is_sign_negative())),
        Value::Array(a) => a.iter().all(lossless),
        Value::Object(o) => o.values().all(lossless),
        _ => true,
    }
}

/// Builds an object from pairs, skipping nulls (for optional fields).
pub fn object(pairs: Vec<(&str, Value)>) -> Value {
    let mut m = Map::new();
    for (k, v) in pairs {
        if !v.is_null() {
            m.insert(k.to_owned(), v);
        }
    }
    Value::Object(m)
}

#[cfg(test)]
#[path = "vocab/assembler_tests.rs"]
mod assembler_tests;
