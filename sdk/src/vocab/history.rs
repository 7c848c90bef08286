//! The model history as JSON text: what a consumer that derives the history
//! incrementally (the agent loop) keeps, so a request carries every earlier
//! message as it was logged, without parsing or re-encoding it per step.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use super::event;

/// A surface event with its payload left as JSON text.
#[derive(Debug, Deserialize)]
pub struct RawSurfaceEvent {
    /// The event type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Position in the log.
    pub seq: u64,
    /// `"append"` or `{op: "replace", start, end}`.
    #[serde(rename = "surfaceOp", default)]
    pub surface_op: Option<Value>,
    /// The payload, unparsed.
    pub data: Box<RawValue>,
}

/// The `sessions.surface` reply: the surface events from a position on,
/// whether any of them replaces (then the history must be derived afresh),
/// and the log length they cover.
#[derive(Debug, Deserialize)]
pub struct SurfaceTail {
    /// Surface events, in log order.
    pub events: Vec<RawSurfaceEvent>,
    /// True when one of them is a `replace`.
    #[serde(default)]
    pub replaced: bool,
    /// The log length the tail covers.
    pub seq: u64,
    /// The last `request/header` in the tail, if any.
    #[serde(rename = "requestHeader", default)]
    pub request_header: Option<HeaderAt>,
}

/// A `request/header` of the log: its seq and its header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeaderAt {
    /// The event's seq.
    pub seq: u64,
    /// The header (`config`, `system`, `tools`, ...).
    pub header: Value,
}

#[derive(Deserialize)]
struct Wrapped {
    message: Box<RawValue>,
}

#[derive(Deserialize)]
struct Content {
    #[serde(default)]
    content: Option<Value>,
}

impl RawSurfaceEvent {
    /// True for an `append` surface event.
    pub fn is_append(&self) -> bool {
        matches!(&self.surface_op, Some(Value::String(op)) if op == "append")
    }

    /// The message this event adds to the model history, as
    /// [`super::derive_messages`] projects it: the payload of a
    /// `user/message`, the `message` of an `assistant/message` (skipped
    /// when its content is empty) or a `tool/result`; `None` for anything
    /// else.
    pub fn into_message(self) -> serde_json::Result<Option<Box<RawValue>>> {
        match self.kind.as_str() {
            event::USER_MESSAGE => Ok(Some(self.data)),
            event::ASSISTANT_MESSAGE | event::TOOL_RESULT => {
                let Wrapped { message } = serde_json::from_str(self.data.get())?;
                if self.kind == event::ASSISTANT_MESSAGE {
                    let Content { content } = serde_json::from_str(message.get())?;
                    if content
                        .as_ref()
                        .and_then(Value::as_array)
                        .is_none_or(Vec::is_empty)
                    {
                        return Ok(None);
                    }
                }
                Ok(Some(message))
            }
            _ => Ok(None),
        }
    }
}

/// The messages an append-only run of surface events adds to the history,
/// in order; exactly [`super::derive_messages`] over the same events.
pub fn appended_messages(events: Vec<RawSurfaceEvent>) -> serde_json::Result<Vec<Box<RawValue>>> {
    let mut out = Vec::with_capacity(events.len());
    for e in events.into_iter().filter(RawSurfaceEvent::is_append) {
        if let Some(m) = e.into_message()? {
            out.push(m);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::{derive_messages, SessionEvent};
    use serde_json::json;

    #[test]
    fn appended_messages_match_derive_messages_text_for_text() {
        let events = json!([
            {"type": "user/message", "seq": 0, "time": 1, "surfaceOp": "append",
             "data": {"id": "u", "role": "user", "content": [{"type": "text", "text": "hi \u{e9}"}]}},
            {"type": "assistant/message", "seq": 1, "time": 1, "surfaceOp": "append",
             "data": {"turn": 1, "step": 1, "message": {"id": "e", "role": "assistant", "content": []}}},
            {"type": "assistant/message", "seq": 2, "time": 1, "surfaceOp": "append",
             "data": {"turn": 1, "step": 1, "message": {"id": "a", "role": "assistant",
                      "content": [{"type": "tool-call", "id": "c", "name": "read", "arguments": "{}"}]}}},
            {"type": "tool/result", "seq": 3, "time": 1, "surfaceOp": "append",
             "data": {"message": {"id": "r", "role": "user", "content": []}}},
        ]);
        let typed: Vec<SessionEvent> = serde_json::from_value(events.clone()).unwrap();
        let raw: Vec<RawSurfaceEvent> = serde_json::from_value(events).unwrap();
        let got: Vec<Value> = appended_messages(raw)
            .unwrap()
            .iter()
            .map(|m| serde_json::from_str(m.get()).unwrap())
            .collect();
        assert_eq!(got, derive_messages(&typed));
        assert_eq!(got.len(), 3);
    }
}
