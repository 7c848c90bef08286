//! The shared vocabulary of the agent core, as serde types whose JSON
//! matches the original dsh exactly (field names, key order, tags): session
//! events, messages and content blocks, stream chunks, usage, failures, turn
//! end reasons, tool schemas. See reference/dsh-core.md §2–§5.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::names::{code, llm_failure};

pub mod assembler;
pub mod chunk;
pub mod compaction;
pub mod history;
pub mod message;
mod open;
pub mod records;
pub mod request_header;
pub mod shape;
pub mod surface;
pub mod surface_op;
pub mod tokens;

pub use chunk::{Chunk, FinishReason};
pub use message::{ContentBlock, Extra, Message, MessageSource, Role};
pub use request_header::{canonical_header, header_equals};
pub use surface_op::SurfaceOp;

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

    /// Every type this harness knows: exactly the original's
    /// `KNOWN_SESSION_EVENT_TYPES` (packages/core/session/src/
    /// known-event-types.ts), so each side loads the other's logs. Any
    /// other type is refused at append, seed and load unless it is marked
    /// `ignorable` (a plugin's own type that may be dropped by a reader).
    pub const KNOWN: [&str; 48] = [
        "agent-preset/selected",
        INBOX_SPLICED,
        "approval/asked",
        "approval/decided",
        "approval/policy",
        ASSISTANT_CHUNK,
        ASSISTANT_MESSAGE,
        "command/done",
        "command/run",
        "compaction/end",
        "compaction/prune",
        "compaction/start",
        "compaction/summary",
        "feedback/record",
        "goal/change",
        "hook/invoked",
        "hook/result",
        LLM_RETRY,
        "llm/retry-started",
        "permission/preset",
        "plan/mode",
        REQUEST_CONTEXT,
        REQUEST_HEADER,
        "sandbox/mode",
        "schedule/change",
        SESSION_END_SEED,
        "session/title",
        "session/title-llm-request",
        STEP_END,
        STEP_START,
        "subagent/descriptor",
        "team/member",
        "team/message/delivered",
        "team/message/queued",
        "team/task",
        TODO_WRITE,
        "tool-workflow/agent-end",
        "tool-workflow/agent-start",
        "tool-workflow/run-end",
        "tool-workflow/run-start",
        TOOL_CALL,
        "tool/code-dispatch",
        "tool/code-dispatch-start",
        TOOL_RESULT,
        TURN_END,
        TURN_START,
        USER_MESSAGE,
        "web/deepseek-search-llm-request",
    ];

    /// True for a type of [`KNOWN`].
    pub fn is_known(kind: &str) -> bool {
        KNOWN.contains(&kind)
    }

    /// Why an event of type `kind` may not enter a log, if it may not: an
    /// unknown type must be marked `ignorable`.
    pub fn refuse_unknown(kind: &str, ignorable: Option<bool>) -> Option<String> {
        (!is_known(kind) && ignorable != Some(true)).then(|| {
            format!(
                "event type \"{kind}\" is not known to this harness and is not marked ignorable"
            )
        })
    }
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
    /// The payload, kept as text until it is read (most events of a long
    /// session never are).
    pub data: crate::LazyJson,
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

impl SessionEvent {
    /// A non-surface event of `kind` at `seq` with `data` (time 0, no
    /// sources): what a test or a renderer builds by hand.
    pub fn new(kind: impl Into<String>, seq: u64, data: Value) -> SessionEvent {
        SessionEvent {
            kind: kind.into(),
            seq,
            time: 0,
            data: data.into(),
            source_event_seqs: None,
            surface_op: None,
            ignorable: None,
        }
    }

    /// The data read as `T` (straight from the kept text when it was not
    /// read yet). A mismatch is `SESSION_CORRUPT`, naming the event's seq,
    /// its type and the field at fault.
    pub fn data_as<T: serde::de::DeserializeOwned>(&self) -> crate::Result<T> {
        self.data.parse_at().map_err(|(path, e)| {
            crate::Error::new(
                crate::names::code::SESSION_CORRUPT,
                format!(
                    "session event {} ({}) has malformed data at `{path}`: {e}",
                    self.seq, self.kind
                ),
            )
        })
    }
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
    llm_failure::EMPTY_RESPONSE,
    llm_failure::RATE_LIMIT,
    llm_failure::SERVER,
    llm_failure::TIMEOUT,
    llm_failure::TRANSPORT,
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

    /// The texts of a list of content blocks (a tool result's), one per
    /// line.
    pub fn joined_lines(content: &Value) -> String {
        content
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
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

    /// The failure the finish chunk reported (null when it had none).
    pub fn failure(&self) -> Value {
        self.finish
            .as_ref()
            .map(|f| f["failure"].clone())
            .unwrap_or(Value::Null)
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
    surface_nodes(events)
        .into_iter()
        .filter_map(event_message)
        .cloned()
        .collect()
}

/// The message a surface event puts in the model history: a
/// `user/message`'s payload, the `message` of a `tool/result` or of an
/// `assistant/message` with content; `None` for anything else.
pub fn event_message(e: &SessionEvent) -> Option<&Value> {
    match e.kind.as_str() {
        event::USER_MESSAGE => Some(&e.data),
        event::ASSISTANT_MESSAGE | event::TOOL_RESULT => {
            let m = &e.data["message"];
            let empty = m["content"].as_array().is_none_or(Vec::is_empty);
            (!(e.kind == event::ASSISTANT_MESSAGE && empty)).then_some(m)
        }
        _ => None,
    }
}

/// The current surface of a log (or of its surface events): each node's
/// event, in order, `replace` ranges spliced.
pub fn surface_nodes(events: &[SessionEvent]) -> Vec<&SessionEvent> {
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
}

/// The closers that make a torn log balanced again (reference §2.11):
/// synthetic results for unanswered calls, `step/end`, then
/// `turn/end{interrupted}`. Empty when the log is balanced.
pub fn interrupted_turn_closers(events: &[SessionEvent]) -> Vec<SessionEvent> {
    let mut open_turn: Option<u64> = None;
    let mut open_step: Option<u64> = None;
    // call id -> (step, recorded tool/call seq)
    let mut pending: Vec<(String, u64, Option<u64>)> = Vec::new();
    // A turn/start resets everything: the last one is where to begin (the
    // data of earlier events is not read).
    let from = events
        .iter()
        .rposition(|e| e.kind == event::TURN_START)
        .unwrap_or(0);
    for e in &events[from..] {
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
            data: data.into(),
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
                code::TOOL_OUTCOME_UNKNOWN,
            ),
            None => (
                "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed.",
                "ToolNotStartedError",
                code::TOOL_NOT_STARTED,
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
mod tests {
    use super::*;

    fn ev(kind: &str, seq: u64, data: Value) -> SessionEvent {
        let surface = event::SURFACE.contains(&kind);
        SessionEvent {
            kind: kind.to_owned(),
            seq,
            time: 100 + seq,
            data: data.into(),
            source_event_seqs: None,
            surface_op: surface.then(|| json!("append")),
            ignorable: None,
        }
    }

    /// A log from `(type, data)` pairs, seqs from 0.
    fn log(items: Vec<(&str, Value)>) -> Vec<SessionEvent> {
        items
            .into_iter()
            .enumerate()
            .map(|(i, (k, d))| ev(k, i as u64, d))
            .collect()
    }

    fn ts() -> Value {
        json!({"turn": 1, "step": 1})
    }

    fn calls(ids: &[&str]) -> Value {
        let blocks: Vec<Value> = ids
            .iter()
            .map(|id| json!({"type": "tool-call", "id": id, "name": "read", "arguments": "{}"}))
            .collect();
        json!({"turn": 1, "step": 1, "message": msg::assistant("a", blocks, "p", "m")})
    }

    fn call_ev(id: &str) -> Value {
        json!({"turn": 1, "step": 1, "callId": id, "name": "read", "arguments": "{}"})
    }

    fn result_ev(id: &str) -> Value {
        json!({"turn": 1, "step": 1, "message": msg::tool_result(&format!("r-{id}"), id, vec![msg::text("ok")], false)})
    }

    fn kinds(events: &[SessionEvent]) -> Vec<&str> {
        events.iter().map(|e| e.kind.as_str()).collect()
    }

    // ---- repair.spec.ts ----

    #[test]
    fn closers_none_for_balanced_or_empty_logs() {
        assert!(interrupted_turn_closers(&[]).is_empty());
        let balanced = log(vec![
            (event::TURN_START, json!({"turn": 1})),
            (event::STEP_START, ts()),
            (event::STEP_END, ts()),
            (
                event::TURN_END,
                json!({"turn": 1, "reason": {"kind": "completed"}}),
            ),
        ]);
        assert!(interrupted_turn_closers(&balanced).is_empty());
    }

    #[test]
    fn closers_turn_only_open_gets_turn_end_interrupted() {
        let l = log(vec![(event::TURN_START, json!({"turn": 1}))]);
        let c = interrupted_turn_closers(&l);
        assert_eq!(kinds(&c), [event::TURN_END]);
        assert_eq!(c[0].seq, 1);
        assert_eq!(c[0].time, l[0].time, "time of the last event");
        assert_eq!(
            c[0].data,
            json!({"turn": 1, "reason": {"kind": "interrupted"}})
        );
    }

    #[test]
    fn closers_open_step_gets_step_end_then_turn_end() {
        let l = log(vec![
            (event::TURN_START, json!({"turn": 1})),
            (event::STEP_START, ts()),
        ]);
        let c = interrupted_turn_closers(&l);
        assert_eq!(kinds(&c), [event::STEP_END, event::TURN_END]);
        assert_eq!(c[0].data, ts());
        assert_eq!((c[0].seq, c[1].seq), (2, 3));
    }

    #[test]
    fn closers_unrecorded_call_gets_tool_not_started() {
        let l = log(vec![
            (event::TURN_START, json!({"turn": 1})),
            (event::STEP_START, ts()),
            (event::ASSISTANT_MESSAGE, calls(&["k1"])),
        ]);
        let c = interrupted_turn_closers(&l);
        assert_eq!(
            kinds(&c),
            [event::TOOL_RESULT, event::STEP_END, event::TURN_END]
        );
        let r = &c[0];
        assert_eq!(
            r.data["error"],
            json!({"name": "ToolNotStartedError", "code": code::TOOL_NOT_STARTED})
        );
        assert_eq!(r.data["message"]["id"], "interrupted-tool-result-k1-3");
        assert_eq!(r.data["message"]["content"][0]["isError"], true);
        assert_eq!(
            r.data["message"]["content"][0]["content"][0]["text"],
            "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed."
        );
        assert_eq!(r.surface_op, Some(json!("append")));
        assert_eq!(r.source_event_seqs, None);
        assert_eq!(
            (r.data["turn"].clone(), r.data["step"].clone()),
            (json!(1), json!(1))
        );
    }

    #[test]
    fn closers_answered_calls_and_calls_of_closed_steps_get_nothing() {
        let answered = log(vec![
            (event::TURN_START, json!({"turn": 1})),
            (event::STEP_START, ts()),
            (event::ASSISTANT_MESSAGE, calls(&["k1"])),
            (event::TOOL_CALL, call_ev("k1")),
            (event::TOOL_RESULT, result_ev("k1")),
        ]);
        assert_eq!(
            kinds(&interrupted_turn_closers(&answered)),
            [event::STEP_END, event::TURN_END]
        );
        let closed_step = log(vec![
            (event::TURN_START, json!({"turn": 1})),
            (event::STEP_START, ts()),
            (event::ASSISTANT_MESSAGE, calls(&["k1"])),
            (event::STEP_END, ts()),
        ]);
        assert_eq!(
            kinds(&interrupted_turn_closers(&closed_step)),
            [event::TURN_END]
        );
        let closed_turn = log(vec![
            (event::TURN_START, json!({"turn": 1})),
            (event::STEP_START, ts()),
            (event::ASSISTANT_MESSAGE, calls(&["k1"])),
            (
                event::TURN_END,
                json!({"turn": 1, "reason": {"kind": "error", "error": {"message": "x", "code": "UNKNOWN"}}}),
            ),
            (event::TURN_START, json!({"turn": 2})),
        ]);
        let c = interrupted_turn_closers(&closed_turn);
        assert_eq!(kinds(&c), [event::TURN_END]);
        assert_eq!(c[0].data["turn"], 2);
    }

    #[test]
    fn closers_multiple_calls_in_log_order_recorded_one_cites_its_call() {
        let l = log(vec![
            (event::TURN_START, json!({"turn": 1})),
            (event::STEP_START, ts()),
            (event::ASSISTANT_MESSAGE, calls(&["k1", "k2"])),
            (event::TOOL_CALL, call_ev("k1")),
        ]);
        let c = interrupted_turn_closers(&l);
        assert_eq!(
            kinds(&c),
            [
                event::TOOL_RESULT,
                event::TOOL_RESULT,
                event::STEP_END,
                event::TURN_END
            ]
        );
        assert_eq!(c[0].data["message"]["source"]["callId"], "k1");
        assert_eq!(c[0].data["error"]["code"], code::TOOL_OUTCOME_UNKNOWN);
        assert_eq!(c[0].data["error"]["name"], "ToolOutcomeUnknownError");
        assert_eq!(c[0].source_event_seqs, Some(vec![3]));
        assert_eq!(c[0].surface_op, Some(json!("append")));
        assert!(c[0].data["message"]["content"][0]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with(
                "The tool call was interrupted after it was recorded, but no result was durably recorded."
            )));
        assert_eq!(c[1].data["message"]["source"]["callId"], "k2");
        assert_eq!(c[1].data["error"]["code"], code::TOOL_NOT_STARTED);
        assert_eq!(c[1].data["message"]["id"], "interrupted-tool-result-k2-5");
    }

    #[test]
    fn closers_tolerate_an_orphan_tool_call() {
        let l = log(vec![
            (event::TURN_START, json!({"turn": 1})),
            (event::STEP_START, ts()),
            (event::TOOL_CALL, call_ev("ghost")),
        ]);
        assert_eq!(
            kinds(&interrupted_turn_closers(&l)),
            [event::STEP_END, event::TURN_END]
        );
    }

    // ---- session.spec / surface.spec / properties.spec: derivation ----

    #[test]
    fn derivation_respects_replace_and_skips_empty_assistant_messages() {
        let mut l = log(vec![
            (event::USER_MESSAGE, msg::user_text("u1", "one")),
            (
                event::ASSISTANT_MESSAGE,
                json!({"turn": 1, "step": 1, "message": msg::assistant("a0", vec![], "p", "m")}),
            ),
            (event::USER_MESSAGE, msg::user_text("u2", "two")),
            (event::USER_MESSAGE, msg::user_text("u3", "three")),
        ]);
        assert_eq!(
            derive_messages(&l),
            vec![
                msg::user_text("u1", "one"),
                msg::user_text("u2", "two"),
                msg::user_text("u3", "three")
            ]
        );
        let mut summary = ev(event::USER_MESSAGE, 4, msg::user_text("s", "summary"));
        summary.surface_op = Some(json!({"op": "replace", "start": 0, "end": 2}));
        summary.source_event_seqs = Some(vec![0, 1, 2]);
        l.push(summary);
        assert_eq!(
            derive_messages(&l),
            vec![
                msg::user_text("s", "summary"),
                msg::user_text("u3", "three")
            ]
        );
    }

    #[test]
    fn non_message_events_never_affect_derivation_and_it_is_deterministic() {
        let messages = log(vec![
            (event::USER_MESSAGE, msg::user_text("u1", "one")),
            (event::TOOL_RESULT, result_ev("k1")),
        ]);
        let mut noisy = Vec::new();
        for e in &messages {
            for (k, d) in [
                (event::TODO_WRITE, json!({"todos": []})),
                (
                    event::ASSISTANT_CHUNK,
                    json!({"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "x"}}),
                ),
                (event::SESSION_END_SEED, json!({})),
            ] {
                noisy.push(ev(k, noisy.len() as u64, d));
            }
            let mut e = e.clone();
            e.seq = noisy.len() as u64;
            noisy.push(e);
        }
        let derived = derive_messages(&noisy);
        assert_eq!(derived, derive_messages(&messages));
        assert_eq!(derived, derive_messages(&noisy), "deterministic");
        for m in &derived {
            assert!(matches!(m["role"].as_str(), Some("user" | "assistant")));
        }
    }

    // ---- json.spec.ts ----

    #[test]
    fn lossless_rejects_negative_zero_and_accepts_ordinary_json() {
        assert!(!lossless(&json!(-0.0)));
        assert!(!lossless(&json!({"a": [1, {"b": -0.0}]})));
        assert!(lossless(&json!(0.0)));
        assert!(lossless(
            &json!({"__proto__": 1, "a": [null, true, "s", 1.5, -3]})
        ));
    }

    #[test]
    fn unknown_types_need_ignorable() {
        assert_eq!(event::refuse_unknown(event::TURN_START, None), None);
        assert_eq!(event::refuse_unknown("x/y", Some(true)), None);
        assert!(event::refuse_unknown("x/y", None).is_some());
        assert!(event::refuse_unknown("x/y", Some(false)).is_some());
        assert!(event::refuse_unknown("request/header-delta", None).is_some());
    }
}

#[path = "vocab/consumed_work.rs"]
mod consumed_work;
pub use consumed_work::{fold_consumed_work, ConsumedWork};

#[cfg(test)]
#[path = "vocab/core_tests.rs"]
mod core_tests;
