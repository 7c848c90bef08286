//! Messages and blocks as JSON values, for the unit tests of the log's
//! pure cores: the typed builders written out.

use serde_json::Value;

use super::{ContentBlock, Message};

fn json(v: &impl serde::Serialize) -> Value {
    serde_json::to_value(v).unwrap()
}

fn blocks(content: Vec<Value>) -> Vec<ContentBlock> {
    content
        .into_iter()
        .map(|b| serde_json::from_value(b).unwrap())
        .collect()
}

/// A text block.
pub fn text(text: &str) -> Value {
    json(&ContentBlock::text(text))
}

/// A user message with one text block.
pub fn user_text(id: &str, text: &str) -> Value {
    json(&Message::user_text(id, text))
}

/// An assistant message.
pub fn assistant(id: &str, content: Vec<Value>, provider: &str, model: &str) -> Value {
    json(&Message::assistant(id, blocks(content), provider, model))
}

/// A tool-result message.
pub fn tool_result(id: &str, call_id: &str, content: Vec<Value>, is_error: bool) -> Value {
    json(&Message::tool_result(
        id,
        call_id,
        blocks(content),
        is_error,
    ))
}
