//! What a run prints while it runs: with `--output jsonl`, every session
//! event as one JSON line, as it was logged; with `stream = true`, the
//! answer's text as it streams and one line per tool call and tool result.

use dsh_sdk::vocab::records::{AssistantChunk, ToolCall, ToolResult};
use dsh_sdk::vocab::{event, Chunk, ContentBlock, Message, SessionEvent};
use dsh_sdk::{Payload, Result};
use serde::Serialize;

use crate::stdout::Stdout;

/// One `session_event` line of `--output jsonl`.
#[derive(Serialize)]
pub struct EventLine<'a> {
    /// Always [`EventLine::KIND`].
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The session.
    #[serde(rename = "sessionId")]
    pub session_id: &'a str,
    /// The event, as it was emitted (never re-encoded).
    pub event: &'a Payload,
}

impl EventLine<'_> {
    /// The `type` of a session event line.
    pub const KIND: &'static str = "session_event";
}

/// What `stream = true` prints for `e`: a text delta of the answer, a
/// line break when the answer is complete, one line per tool call and per
/// tool result; `None` for the other events. A known event whose data
/// does not have its record's shape is a `SESSION_CORRUPT` error naming
/// the event and the field.
pub fn stream_text(e: &SessionEvent, out: &Stdout) -> Result<Option<String>> {
    let text = match e.kind.as_str() {
        event::ASSISTANT_CHUNK => match e.data_as::<AssistantChunk>()?.chunk {
            Chunk::TextDelta { text, .. } => out.delta(&text).into_owned(),
            _ => return Ok(None),
        },
        event::ASSISTANT_MESSAGE => {
            out.end_stream();
            "\n".to_owned()
        }
        event::TOOL_RESULT => {
            let result: ToolResult = e.data_as()?;
            // The last line that is not markup (read ends with `</content>`).
            let last = result_text(&result.message)
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty() && !l.starts_with('<'))
                .unwrap_or_default();
            let line = format!("  -> {}\n", last.chars().take(100).collect::<String>());
            out.text(&line).into_owned()
        }
        event::TOOL_CALL => {
            let call: ToolCall = e.data_as()?;
            let line = format!("  [{} {}]\n", call.name, call.arguments);
            out.text(&line).into_owned()
        }
        _ => return Ok(None),
    };
    Ok(Some(text))
}

/// The text a tool-result message shows: its `tool-result` block's first
/// content block's text (empty when that is not text: an image, say).
pub fn result_text(message: &Message) -> &str {
    let first = match message.content.first() {
        Some(ContentBlock::ToolResult(block)) => block.content.first(),
        _ => None,
    };
    first.and_then(ContentBlock::as_text).unwrap_or_default()
}
