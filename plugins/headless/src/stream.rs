//! What a run prints while it runs: with `--output jsonl`, every session
//! event as one JSON line, as it was logged; with `stream = true`, the
//! answer's text as it streams and one line per tool call and tool result;
//! in every mode, one line on stderr per retry of a model request.

use dsh_sdk::api::host::Host;
use dsh_sdk::api::sessions::SessionAppended;
use dsh_sdk::names::bus;
use dsh_sdk::terminal_text::sanitize;
use dsh_sdk::vocab::records::{AssistantChunk, LlmRetry, ToolCall, ToolResult};
use dsh_sdk::vocab::{event, retry_trail, Chunk, ContentBlock, Message, SessionEvent};
use dsh_sdk::{Context, Payload, Result};
use serde::Serialize;
use serde_json::Value;

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

/// The stderr line for `e` when it is an `llm/retry`: `dsh: retrying the
/// model request (retry 1 of 3) in 500 ms: SERVER: HTTP 503: Loading
/// model` (sanitized: stderr is read by a person); `None` for other
/// events. A malformed record is `SESSION_CORRUPT` naming it.
pub fn retry_line(e: &SessionEvent) -> Result<Option<String>> {
    if e.kind != event::LLM_RETRY {
        return Ok(None);
    }
    let retry: LlmRetry = e.data_as()?;
    let notice = retry_trail::notice(&retry);
    Ok(Some(format!("dsh: {}\n", sanitize(&notice))))
}

/// Says each retry of `agent`'s model requests on stderr as it is logged,
/// so a run that waits out a backoff (15 s for a model server still
/// loading) is not silent. Never on stdout: that is the answer, or the
/// JSONL a script reads.
pub fn say_retries(ctx: &Context, agent: &str) {
    let (c, id) = (ctx.clone(), agent.to_owned());
    ctx.on(bus::SESSION_EVENT, move |ev| {
        let (c, id) = (c.clone(), id.clone());
        async move {
            let appended: SessionAppended = ev.payload_as()?;
            if appended.session_id != id {
                return Ok(Value::Null);
            }
            let line = match retry_line(&appended.event) {
                Ok(Some(line)) => line,
                Ok(None) => return Ok(Value::Null),
                // Said, and the run goes on: the log is the record.
                Err(e) => format!("dsh: {}: {}\n", sanitize(&e.code), sanitize(&e.message)),
            };
            let _ = Host::new(&c).eprint(&line).await;
            Ok(Value::Null)
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_retry_is_one_sanitized_stderr_line_and_other_events_none() {
        let data = json!({"retryId": "r", "turn": 1, "step": 1, "provider": "p",
            "mode": "normal", "retry": 2, "maxRetries": 3, "delayMs": 15000,
            "failure": {"message": "HTTP 503: Loading model\u{1b}]0;x\u{7}", "code": "SERVER",
                "status": 503}});
        let e = SessionEvent::new(event::LLM_RETRY, 4, data);
        assert_eq!(
            retry_line(&e).unwrap().as_deref(),
            Some("dsh: retrying the model request (retry 2 of 3) in 15 s: SERVER: HTTP 503: Loading model\n")
        );
        let other = SessionEvent::new(event::STEP_START, 5, json!({"turn": 1, "step": 1}));
        assert_eq!(retry_line(&other).unwrap(), None);
        let flat = SessionEvent::new(event::LLM_RETRY, 6, json!({"code": "SERVER"}));
        assert!(retry_line(&flat)
            .unwrap_err()
            .message
            .contains("session event 6 (llm/retry)"));
    }
}
