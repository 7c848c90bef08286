//! The message a surface event puts in the model history, read through the
//! typed records: the payload of a `user/message`, the `message` of an
//! `assistant/message` (with the answer's usage) or of a `tool/result`. The
//! meter reads surface events kept as JSON text, the engine events of the
//! log; both go through [`Surfaced::read`].

use dsh_sdk::names::code;
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::history::RawSurfaceEvent;
use dsh_sdk::vocab::records::{AssistantMessage, ToolResult};
use dsh_sdk::vocab::{event, Message, SessionEvent, TokenUsage};
use serde::de::DeserializeOwned;

/// A surface event's message.
pub struct Surfaced {
    /// The message the model sees.
    pub message: Message,
    /// The usage an answer reported (`assistant/message` only).
    pub usage: Option<TokenUsage>,
    /// The event is an answer (`assistant/message`).
    pub answer: bool,
}

/// An event whose data can be read as a record.
pub trait Data {
    /// The event's type.
    fn kind(&self) -> &str;
    /// The event's seq.
    fn seq(&self) -> u64;
    /// The data read as `T`; a mismatch is a clear `SESSION_CORRUPT`.
    fn data<T: DeserializeOwned>(&self) -> Result<T>;
}

impl Data for SessionEvent {
    fn kind(&self) -> &str {
        &self.kind
    }

    fn seq(&self) -> u64 {
        self.seq
    }

    fn data<T: DeserializeOwned>(&self) -> Result<T> {
        self.data_as()
    }
}

impl Data for RawSurfaceEvent {
    fn kind(&self) -> &str {
        &self.kind
    }

    fn seq(&self) -> u64 {
        self.seq
    }

    fn data<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(self.data.get()).map_err(|e| {
            Error::new(
                code::SESSION_CORRUPT,
                format!(
                    "session event {} ({}) has malformed data: {e}",
                    self.seq, self.kind
                ),
            )
        })
    }
}

impl Surfaced {
    /// The message of surface event `e`. Any other type is refused: only
    /// the three message types carry a surface op.
    pub fn read(e: &impl Data) -> Result<Surfaced> {
        let (message, usage) = match e.kind() {
            event::USER_MESSAGE => (e.data::<Message>()?, None),
            event::ASSISTANT_MESSAGE => {
                let answer: AssistantMessage = e.data()?;
                (answer.message, answer.usage)
            }
            event::TOOL_RESULT => (e.data::<ToolResult>()?.message, None),
            other => {
                return Err(Error::new(
                    code::SESSION_CORRUPT,
                    format!(
                        "surface event {} has type {other}, which puts no message in the history",
                        e.seq()
                    ),
                ))
            }
        };
        Ok(Surfaced {
            message,
            usage,
            answer: e.kind() == event::ASSISTANT_MESSAGE,
        })
    }

    /// The message, unless it is an answer without content (the history
    /// skips those, as `deriveMessages` does).
    pub fn into_history(self) -> Option<Message> {
        (!(self.answer && self.message.content.is_empty())).then_some(self.message)
    }
}
