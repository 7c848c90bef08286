//! Messages and content blocks as the JSON a test compares with: the
//! typed builders of `dsh_sdk::vocab` (`Message::user_text`, ...) written
//! out, so a test's expected shapes are exactly what a plugin logs.

use dsh_sdk::vocab::{ContentBlock, Message};
use serde_json::Value;

/// What serde_json writes (serde itself is not a dependency here).
trait SerializeJson {
    fn to_json(&self) -> serde_json::Result<Value>;
}

impl SerializeJson for Message {
    fn to_json(&self) -> serde_json::Result<Value> {
        serde_json::to_value(self)
    }
}

impl SerializeJson for ContentBlock {
    fn to_json(&self) -> serde_json::Result<Value> {
        serde_json::to_value(self)
    }
}

fn json<T: ?Sized + SerializeJson>(message: &T) -> Value {
    message
        .to_json()
        .unwrap_or_else(|e| panic!("a typed message serializes: {e}"))
}

fn blocks(content: Vec<Value>) -> Vec<ContentBlock> {
    content
        .into_iter()
        .map(|b| serde_json::from_value(b).unwrap_or_else(|e| panic!("not a content block: {e}")))
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

/// An assistant message from `provider`'s `model`.
pub fn assistant(id: &str, content: Vec<Value>, provider: &str, model: &str) -> Value {
    json(&Message::assistant(id, blocks(content), provider, model))
}

/// A tool-result message answering `call_id`.
pub fn tool_result(id: &str, call_id: &str, content: Vec<Value>, is_error: bool) -> Value {
    json(&Message::tool_result(
        id,
        call_id,
        blocks(content),
        is_error,
    ))
}
