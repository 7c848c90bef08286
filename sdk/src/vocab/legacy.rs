//! The JSON-value builders and assembler that came before the typed
//! vocabulary ([`super::message`], [`super::assembler`]). Kept only while
//! the last plugins move to the typed forms; nothing new may use them.

use serde_json::{json, Map, Value};

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
