//! The Anthropic Messages wire for [`FakeLlm`]: answers as the API streams
//! them (`event:` + `data:` pairs, see [`Answer::Named`]), its error
//! bodies, and readers of the requests the fake received.
//!
//! ```ignore
//! fake.push([
//!     Reply::new()
//!         .thinking("I should read it.", "sig-1")
//!         .tool_use("toolu_1", "read", json!({"file_path": "a.txt"}))
//!         .answer(),
//!     fake_anthropic::text("Done."),
//! ]);
//! ```
//!
//! [`FakeLlm`]: crate::fake_llm::FakeLlm

use serde_json::{json, Value};

use crate::fake_llm::Answer;

/// The token counts an answer reports: `message_start` carries the input
/// counts, `message_delta` the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// `input_tokens` (neither read from nor written to the cache).
    pub input: u64,
    /// `output_tokens`.
    pub output: u64,
    /// `cache_read_input_tokens`.
    pub cache_read: u64,
    /// `cache_creation_input_tokens`.
    pub cache_write: u64,
}

impl Default for Usage {
    /// 20 input tokens, 5 output, no cache.
    fn default() -> Self {
        Usage {
            input: 20,
            output: 5,
            cache_read: 0,
            cache_write: 0,
        }
    }
}

/// One content block of a [`Reply`].
#[derive(Debug, Clone)]
enum Block {
    Text(String),
    Thinking {
        text: String,
        signature: String,
    },
    Redacted(String),
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

/// One scripted answer, block by block; [`Reply::answer`] streams it as
/// the API does: `message_start`, a `ping`, each block's
/// `content_block_start`, deltas (text word by word, thinking in two
/// pieces and then its `signature_delta`, a tool call's input as
/// `input_json_delta` pieces after an empty one) and `content_block_stop`,
/// then `message_delta` (the stop reason and the output count) and
/// `message_stop`.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    blocks: Vec<Block>,
    usage: Usage,
    stop: Option<String>,
}

impl Reply {
    /// An answer without blocks yet.
    pub fn new() -> Reply {
        Reply::default()
    }

    /// Adds a text block.
    pub fn text(mut self, text: &str) -> Reply {
        self.blocks.push(Block::Text(text.to_owned()));
        self
    }

    /// Adds a thinking block with its signature.
    pub fn thinking(mut self, text: &str, signature: &str) -> Reply {
        self.blocks.push(Block::Thinking {
            text: text.to_owned(),
            signature: signature.to_owned(),
        });
        self
    }

    /// Adds a `redacted_thinking` block with its data.
    pub fn redacted(mut self, data: &str) -> Reply {
        self.blocks.push(Block::Redacted(data.to_owned()));
        self
    }

    /// Adds a tool call.
    pub fn tool_use(mut self, id: &str, name: &str, input: Value) -> Reply {
        self.blocks.push(Block::ToolUse {
            id: id.to_owned(),
            name: name.to_owned(),
            input,
        });
        self
    }

    /// Sets the reported usage (default [`Usage::default`]).
    pub fn usage(mut self, usage: Usage) -> Reply {
        self.usage = usage;
        self
    }

    /// Sets the stop reason (default: `tool_use` when the answer calls a
    /// tool, else `end_turn`).
    pub fn stop(mut self, reason: &str) -> Reply {
        self.stop = Some(reason.to_owned());
        self
    }

    /// The stop reason sent.
    fn stop_reason(&self) -> String {
        self.stop.clone().unwrap_or_else(|| {
            let calls = self
                .blocks
                .iter()
                .any(|b| matches!(b, Block::ToolUse { .. }));
            if calls { "tool_use" } else { "end_turn" }.to_owned()
        })
    }

    /// The events of one block at `index`.
    fn block_events(index: usize, block: &Block) -> Vec<Value> {
        let start = |content: Value| json!({"type": "content_block_start", "index": index, "content_block": content});
        let delta = |d: Value| json!({"type": "content_block_delta", "index": index, "delta": d});
        let mut out = Vec::new();
        match block {
            Block::Text(text) => {
                out.push(start(json!({"type": "text", "text": ""})));
                for word in text.split_inclusive(' ') {
                    out.push(delta(json!({"type": "text_delta", "text": word})));
                }
            }
            Block::Thinking { text, signature } => {
                out.push(start(
                    json!({"type": "thinking", "thinking": "", "signature": ""}),
                ));
                let (head, tail) = halves(text);
                for piece in [head, tail] {
                    out.push(delta(json!({"type": "thinking_delta", "thinking": piece})));
                }
                out.push(delta(
                    json!({"type": "signature_delta", "signature": signature}),
                ));
            }
            Block::Redacted(data) => {
                out.push(start(json!({"type": "redacted_thinking", "data": data})));
            }
            Block::ToolUse { id, name, input } => {
                out.push(start(
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                ));
                let text = input.to_string();
                let (head, tail) = halves(&text);
                for piece in ["", head, tail] {
                    out.push(delta(
                        json!({"type": "input_json_delta", "partial_json": piece}),
                    ));
                }
            }
        }
        out.push(json!({"type": "content_block_stop", "index": index}));
        out
    }

    /// The events' `data` payloads, in order (each has its `type`).
    pub fn payloads(&self) -> Vec<String> {
        let u = self.usage;
        let mut events = vec![
            json!({"type": "message_start", "message": {
                "id": "msg_fake", "type": "message", "role": "assistant", "content": [],
                "model": "claude-fake", "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": u.input, "cache_creation_input_tokens": u.cache_write,
                          "cache_read_input_tokens": u.cache_read, "output_tokens": 1}}}),
            json!({"type": "ping"}),
        ];
        for (index, block) in self.blocks.iter().enumerate() {
            events.extend(Reply::block_events(index, block));
        }
        events.push(json!({"type": "message_delta",
            "delta": {"stop_reason": self.stop_reason(), "stop_sequence": null},
            "usage": {"output_tokens": u.output}}));
        events.push(json!({"type": "message_stop"}));
        events.iter().map(Value::to_string).collect()
    }

    /// The events as `(event, data)` pairs, the event named by its type.
    pub fn events(&self) -> Vec<(String, String)> {
        self.payloads().into_iter().map(named).collect()
    }

    /// The answer, streamed with named events.
    pub fn answer(&self) -> Answer {
        Answer::Named(self.events())
    }
}

/// `text` cut in two at its middle character.
fn halves(text: &str) -> (&str, &str) {
    let cut = text
        .char_indices()
        .map(|(i, _)| i)
        .nth(text.chars().count() / 2)
        .unwrap_or(text.len());
    text.split_at(cut)
}

/// `data` as a named event: its `type` is the event's name.
fn named(data: String) -> (String, String) {
    let kind = serde_json::from_str::<Value>(&data)
        .ok()
        .and_then(|v| v["type"].as_str().map(str::to_owned))
        .unwrap_or_default();
    (kind, data)
}

/// A streamed text answer.
pub fn text(answer: &str) -> Answer {
    Reply::new().text(answer).answer()
}

/// An answer that calls the tools `(id, name, input)`, after a signed
/// thinking block.
pub fn tool_calls(calls: &[(&str, &str, Value)]) -> Answer {
    let mut reply = Reply::new().thinking("I need a tool.", "sig-tools");
    for (id, name, input) in calls {
        reply = reply.tool_use(id, name, input.clone());
    }
    reply.answer()
}

/// An error as the API writes it, in an HTTP body or an `error` event:
/// `{"type":"error","error":{"type":kind,"message":message}}`.
pub fn error_payload(kind: &str, message: &str) -> String {
    json!({"type": "error", "error": {"type": kind, "message": message}}).to_string()
}

/// An HTTP error of `status` with the API's body.
pub fn status(status: u16, kind: &str, message: &str) -> Answer {
    Answer::Status(status, vec![], error_payload(kind, message))
}

/// The API's context overflow: `400 invalid_request_error`, "prompt is
/// too long: `tokens` tokens > `maximum` maximum".
pub fn overflow(tokens: u64, maximum: u64) -> Answer {
    status(
        400,
        "invalid_request_error",
        &format!("prompt is too long: {tokens} tokens > {maximum} maximum"),
    )
}

/// The API overloaded: `529 overloaded_error`.
pub fn overloaded() -> Answer {
    status(529, "overloaded_error", "Overloaded")
}

/// A stream that starts `reply` and fails mid-answer with an `error` event
/// of `kind` (`overloaded_error`, say) after its first block's first
/// delta.
pub fn error_mid_stream(reply: &Reply, kind: &str, message: &str) -> Answer {
    let mut payloads = reply.payloads();
    // message_start, ping, the first block's start and first delta.
    payloads.truncate(4);
    payloads.push(error_payload(kind, message));
    Answer::Named(payloads.into_iter().map(named).collect())
}

/// The `messages` of a request body (an empty list when it has none).
pub fn messages(request: &Value) -> Vec<Value> {
    request["messages"].as_array().cloned().unwrap_or_default()
}

/// The role of each message of a request, in order.
pub fn roles(request: &Value) -> Vec<String> {
    messages(request)
        .iter()
        .map(|m| m["role"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The content blocks of type `kind` of every message of a request, in
/// order.
pub fn blocks(request: &Value, kind: &str) -> Vec<Value> {
    messages(request)
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == kind)
        .collect()
}

/// The `tool_result` blocks of a request, in order.
pub fn tool_results(request: &Value) -> Vec<Value> {
    blocks(request, "tool_result")
}

/// The most cache breakpoints (`cache_control`) the API takes in one
/// request.
const MAX_CACHE_BREAKPOINTS: usize = 4;

/// Whether the API takes `id` as a `tool_use` id:
/// `^[a-zA-Z0-9_-]{1,64}$`.
pub fn valid_tool_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The content blocks of `message` (a string content is one text block).
fn content_of(message: &Value) -> Result<Vec<Value>, String> {
    match &message["content"] {
        Value::String(text) => Ok(vec![json!({"type": "text", "text": text})]),
        Value::Array(blocks) => Ok(blocks.clone()),
        other => Err(format!("a message whose content is {other}")),
    }
}

/// Checks a Messages request body as the API does, where an adapter can
/// get it wrong: the roles alternate from the user; no block is empty;
/// each `tool_use` id has the API's shape (`^[a-zA-Z0-9_-]{1,64}$`) and is
/// unique in the request; each `tool_result` answers a call of the answer
/// before it, every call is answered, and a user message with results
/// holds nothing else (Anthropic: text after tool results teaches the
/// model to end its turn with an empty answer); thinking blocks are
/// signed, come first in their answer, are sent only with thinking on, and
/// a tool loop that thinks sends its first answer's thinking back; a thinking
/// budget within the API's bounds and no `temperature` with it; at most
/// four cache breakpoints. The first thing wrong, said.
pub fn validate(request: &Value) -> Result<(), String> {
    let messages = request["messages"]
        .as_array()
        .ok_or("a request without a messages list")?;
    if messages.is_empty() {
        return Err("a request without messages".into());
    }
    let thinking = request["thinking"]["type"] == "enabled";
    if thinking {
        let budget = request["thinking"]["budget_tokens"].as_u64().unwrap_or(0);
        let max = request["max_tokens"].as_u64().unwrap_or(0);
        if budget < 1024 || budget >= max {
            return Err(format!(
                "a thinking budget of {budget} with max_tokens {max} (the API wants 1024 <= budget < max_tokens)"
            ));
        }
        if request.get("temperature").is_some() {
            return Err("a temperature with thinking on".into());
        }
    }
    let mut ids = std::collections::HashSet::new();
    let mut breakpoints = usize::from(request["system"][0].get("cache_control").is_some());
    let mut calls: Vec<String> = Vec::new();
    for (at, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or_default();
        let want = if at % 2 == 0 { "user" } else { "assistant" };
        if role != want {
            return Err(format!(
                "message {at} is {role:?}, not {want:?}: the roles must alternate from the user"
            ));
        }
        let blocks = content_of(message).map_err(|e| format!("message {at}: {e}"))?;
        if blocks.is_empty() {
            return Err(format!("message {at} has no content"));
        }
        breakpoints += blocks
            .iter()
            .filter(|b| b.get("cache_control").is_some())
            .count();
        let mut results = Vec::new();
        let mut seen_other = false;
        for (n, b) in blocks.iter().enumerate() {
            let kind = b["type"].as_str().unwrap_or_default();
            let here = format!("message {at} block {n} ({kind})");
            match (role, kind) {
                (_, "text") => {
                    if b["text"].as_str().is_none_or(str::is_empty) {
                        return Err(format!("{here}: an empty text block"));
                    }
                    if !results.is_empty() {
                        return Err(format!("{here}: text after tool results"));
                    }
                    seen_other = true;
                }
                ("assistant", "thinking" | "redacted_thinking") => {
                    if !thinking {
                        return Err(format!("{here}: thinking sent with thinking off"));
                    }
                    if seen_other {
                        return Err(format!("{here}: thinking after the answer's text or calls"));
                    }
                    let sealed = if kind == "thinking" {
                        "signature"
                    } else {
                        "data"
                    };
                    if b[sealed].as_str().is_none_or(str::is_empty) {
                        return Err(format!("{here}: without its {sealed}"));
                    }
                }
                ("assistant", "tool_use") => {
                    let id = b["id"].as_str().unwrap_or_default();
                    if !valid_tool_id(id) {
                        return Err(format!(
                            "{here}: the id {id:?} is not ^[a-zA-Z0-9_-]{{1,64}}$"
                        ));
                    }
                    if !ids.insert(id.to_owned()) {
                        return Err(format!(
                            "{here}: the id {id:?} is used twice in the request"
                        ));
                    }
                    if !b["input"].is_object() || b["name"].as_str().is_none_or(str::is_empty) {
                        return Err(format!("{here}: a call without a name or an object input"));
                    }
                    seen_other = true;
                }
                ("user", "tool_result") => {
                    if seen_other {
                        return Err(format!("{here}: a tool result after other content"));
                    }
                    let id = b["tool_use_id"].as_str().unwrap_or_default();
                    if !calls.iter().any(|c| c == id) {
                        return Err(format!(
                            "{here}: answers {id:?}, which the answer before it did not call"
                        ));
                    }
                    let content_ok = match &b["content"] {
                        Value::String(t) => !t.is_empty(),
                        Value::Array(parts) => {
                            !parts.is_empty()
                                && parts.iter().all(|p| {
                                    p["type"] == "text"
                                        && p["text"].as_str().is_some_and(|t| !t.is_empty())
                                })
                        }
                        _ => false,
                    };
                    if !content_ok {
                        return Err(format!("{here}: an empty or odd content"));
                    }
                    results.push(id.to_owned());
                }
                _ => {
                    return Err(format!(
                        "{here}: a block the API does not take in a {role} message"
                    ))
                }
            }
        }
        if role == "user" {
            if let Some(missed) = calls.iter().find(|c| !results.contains(c)) {
                return Err(format!(
                    "message {at}: the call {missed:?} of the answer before is not answered"
                ));
            }
            calls.clear();
        } else {
            calls = blocks
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .filter_map(|b| b["id"].as_str().map(str::to_owned))
                .collect();
        }
    }
    if thinking {
        // A tool loop that thinks (the last message holds tool results):
        // the turn's first answer (after the user's last prompt) starts
        // with its thinking.
        let results = |m: &Value| {
            content_of(m)
                .unwrap_or_default()
                .iter()
                .any(|b| b["type"] == "tool_result")
        };
        if results(&messages[messages.len() - 1]) {
            let start = messages
                .iter()
                .rposition(|m| m["role"] == "user" && !results(m))
                .map_or(0, |at| at + 1);
            let answer = messages[start..]
                .iter()
                .find(|m| m["role"] == "assistant")
                .map(|m| content_of(m).unwrap_or_default())
                .unwrap_or_default();
            let first = answer
                .first()
                .map(|b| b["type"].clone())
                .unwrap_or_default();
            if first != "thinking" && first != "redacted_thinking" {
                return Err(
                    "thinking on in a tool loop whose first answer does not start with its thinking"
                        .into(),
                );
            }
        }
    }
    if breakpoints > MAX_CACHE_BREAKPOINTS {
        return Err(format!(
            "{breakpoints} cache breakpoints (the API takes {MAX_CACHE_BREAKPOINTS})"
        ));
    }
    Ok(())
}

/// Panics, naming the request and the fault, unless every request the
/// fake received is one the API takes ([`validate`]).
pub fn assert_valid(fake: &crate::fake_llm::FakeLlm) {
    for (n, request) in fake.requests().iter().enumerate() {
        if let Err(e) = validate(request) {
            panic!("request {n} is not one the Messages API takes: {e}\n{request}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(content: impl Into<Value>) -> Value {
        json!({"role": "user", "content": content.into()})
    }

    fn assistant(content: impl Into<Value>) -> Value {
        json!({"role": "assistant", "content": content.into()})
    }

    fn request(messages: Value) -> Value {
        json!({"model": "m", "max_tokens": 8192, "messages": messages, "stream": true})
    }

    fn result(id: &str) -> Value {
        json!({"type": "tool_result", "tool_use_id": id, "content": "ok", "is_error": false})
    }

    fn call(id: &str) -> Value {
        json!({"type": "tool_use", "id": id, "name": "read", "input": {}})
    }

    #[test]
    fn validate_takes_a_well_formed_tool_loop_and_names_each_fault() {
        let good = request(json!([
            user("go"),
            assistant(json!([call("toolu_1")])),
            user(json!([result("toolu_1")]))
        ]));
        assert_eq!(validate(&good), Ok(()));
        for (bad, says) in [
            (request(json!([assistant("hi")])), "roles must alternate"),
            (
                request(json!([user("a"), user("b")])),
                "roles must alternate",
            ),
            (request(json!([user(""),])), "empty text"),
            (
                request(json!([
                    user("go"),
                    assistant(json!([call("call.0")])),
                    user(json!([result("call.0")]))
                ])),
                "is not ^[a-zA-Z0-9_-]",
            ),
            (
                request(json!([
                    user("go"),
                    assistant(json!([call("c")])),
                    user(json!([result("c")])),
                    assistant(json!([call("c")])),
                    user(json!([result("c")]))
                ])),
                "used twice",
            ),
            (
                request(json!([
                    user("go"),
                    assistant(json!([call("c")])),
                    user(json!([result("c"), {"type": "text", "text": "also"}]))
                ])),
                "text after tool results",
            ),
            (
                request(json!([
                    user("go"),
                    assistant(json!([call("c"), call("d")])),
                    user(json!([result("c")]))
                ])),
                "is not answered",
            ),
            (
                request(json!([
                    user("go"),
                    assistant("hi"),
                    user(json!([result("x")]))
                ])),
                "did not call",
            ),
            (
                request(json!([
                    user("go"),
                    assistant(
                        json!([{"type": "thinking", "thinking": "t", "signature": "s"}, call("c")])
                    ),
                    user(json!([result("c")]))
                ])),
                "thinking sent with thinking off",
            ),
        ] {
            let e = validate(&bad).unwrap_err();
            assert!(e.contains(says), "{e} (wanted {says:?}) for {bad}");
        }
        // Thinking on: signed, first, and sent back in a tool loop.
        let mut thinking = request(json!([
            user("go"),
            assistant(json!([{"type": "thinking", "thinking": "t", "signature": "s"}, call("c")])),
            user(json!([result("c")]))
        ]));
        thinking["thinking"] = json!({"type": "enabled", "budget_tokens": 4096});
        assert_eq!(validate(&thinking), Ok(()));
        let mut unsigned = thinking.clone();
        unsigned["messages"][1]["content"][0]["signature"] = json!("");
        assert!(validate(&unsigned)
            .unwrap_err()
            .contains("without its signature"));
        let mut dropped = thinking.clone();
        dropped["messages"][1]["content"] = json!([call("c")]);
        assert!(validate(&dropped)
            .unwrap_err()
            .contains("does not start with its thinking"));
        // Later answers of the loop may go without (the model thinks at
        // the turn's start).
        let mut later = dropped.clone();
        later["messages"][1]["content"] =
            json!([{"type": "thinking", "thinking": "t", "signature": "s"}, call("c")]);
        let more = later["messages"].as_array_mut().unwrap();
        more.push(assistant(json!([call("d")])));
        more.push(user(json!([result("d")])));
        assert_eq!(validate(&later), Ok(()));
        let mut warm = thinking;
        warm["temperature"] = json!(0.5);
        assert!(validate(&warm).unwrap_err().contains("temperature"));
    }

    #[test]
    fn a_reply_streams_the_apis_event_sequence() {
        let events = Reply::new()
            .thinking("hmm", "sig")
            .tool_use("toolu_1", "read", json!({"file_path": "a"}))
            .usage(Usage {
                cache_read: 7,
                ..Usage::default()
            })
            .events();
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let data: Vec<Value> = events
            .iter()
            .map(|(_, d)| serde_json::from_str(d).unwrap())
            .collect();
        assert_eq!(data[0]["message"]["usage"]["cache_read_input_tokens"], 7);
        assert_eq!(data[5]["delta"]["signature"], "sig");
        let input: String = data[8..11]
            .iter()
            .map(|d| d["delta"]["partial_json"].as_str().unwrap())
            .collect();
        assert_eq!(input, r#"{"file_path":"a"}"#);
        assert_eq!(data[12]["delta"]["stop_reason"], "tool_use");
    }
}
