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

#[cfg(test)]
mod tests {
    use super::*;

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
