//! The Messages stream as a server sends it: each SSE event's `data` is a
//! JSON object whose `type` names the event (the `event:` line says the
//! same and is not read). Events are read straight from their text, in
//! two steps: the `type` alone ([`Typed`], every other field skipped
//! unread), then, for a type this adapter reads, the event's own struct.
//! An event of another type (`ping`, or one added later) is skipped
//! whatever its fields hold, as the API asks of clients; so are content
//! blocks and deltas of types this adapter does not read.
//!
//! What the answer is made of is read strictly: a block `index`, a text,
//! thinking, signature, tool name or input delta of the wrong type (or
//! missing) makes the event unreadable (`MALFORMED_RESPONSE`), since a
//! part of the answer would be lost. Metadata is read leniently: a
//! `usage` or a count of another shape reads as not reported
//! ([`Loose`], [`TokenCount`]), a `stop_reason` that is not a string as
//! not sent ([`LooseText`]).

use std::borrow::Cow;

use dsh_llm_http::call_ids::SentId;
use dsh_llm_http::lenient::{Loose, LooseText, TokenCount};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The event types this adapter reads.
pub(crate) mod event {
    /// The message opens; its `usage` holds the input counts.
    pub const MESSAGE_START: &str = "message_start";
    /// A content block opens.
    pub const CONTENT_BLOCK_START: &str = "content_block_start";
    /// A content block grows.
    pub const CONTENT_BLOCK_DELTA: &str = "content_block_delta";
    /// A content block closes.
    pub const CONTENT_BLOCK_STOP: &str = "content_block_stop";
    /// The stop reason and the cumulative usage.
    pub const MESSAGE_DELTA: &str = "message_delta";
    /// The message is complete.
    pub const MESSAGE_STOP: &str = "message_stop";
    /// The server failed mid-stream (`overloaded_error`, ...).
    pub const ERROR: &str = "error";
}

/// The content block types this adapter reads.
pub(crate) mod block {
    /// Visible text.
    pub const TEXT: &str = "text";
    /// The model's thinking, signed.
    pub const THINKING: &str = "thinking";
    /// Thinking the server encrypted.
    pub const REDACTED_THINKING: &str = "redacted_thinking";
    /// A tool call.
    pub const TOOL_USE: &str = "tool_use";
}

/// The content block delta types this adapter reads.
pub(crate) mod delta {
    /// More text.
    pub const TEXT: &str = "text_delta";
    /// More thinking.
    pub const THINKING: &str = "thinking_delta";
    /// The thinking block's signature.
    pub const SIGNATURE: &str = "signature_delta";
    /// More of a tool call's input, as JSON text.
    pub const INPUT_JSON: &str = "input_json_delta";
}

/// The `stop_reason`s this adapter maps; any other ends the answer with a
/// `SERVER` failure quoting it.
pub(crate) mod stop_reason {
    /// The model finished.
    pub const END_TURN: &str = "end_turn";
    /// The model asked for tools.
    pub const TOOL_USE: &str = "tool_use";
    /// The output limit cut the answer.
    pub const MAX_TOKENS: &str = "max_tokens";
    /// A stop sequence ended the answer.
    pub const STOP_SEQUENCE: &str = "stop_sequence";
    /// The server paused a long turn (server tools); the answer so far
    /// stands.
    pub const PAUSE_TURN: &str = "pause_turn";
    /// The model declined to answer.
    pub const REFUSAL: &str = "refusal";
    /// The context window filled up while the model wrote.
    pub const CONTEXT_WINDOW_EXCEEDED: &str = "model_context_window_exceeded";
}

/// Anything with a `type`: an event, a content block or a delta, read for
/// its type alone (the other fields skipped unread).
#[derive(Deserialize)]
pub(crate) struct Typed<'a> {
    /// The type.
    #[serde(rename = "type", borrow)]
    pub kind: Cow<'a, str>,
}

/// `message_start`.
#[derive(Deserialize)]
pub(crate) struct MessageStart {
    /// The message so far (its usage).
    #[serde(default)]
    pub message: Loose<MessageHead>,
}

/// The message of `message_start`: only its usage is read.
#[derive(Deserialize)]
pub(crate) struct MessageHead {
    /// The input counts (and the first output count).
    #[serde(default)]
    pub usage: Loose<WireUsage>,
}

/// `content_block_start`: the block's index and the block, kept as its
/// text until its type is known.
#[derive(Deserialize)]
pub(crate) struct BlockStart<'a> {
    /// The block's position in the message.
    pub index: u64,
    /// The block as it starts.
    #[serde(borrow)]
    pub content_block: &'a RawValue,
}

/// `content_block_delta`: the index and the delta, kept as its text until
/// its type is known.
#[derive(Deserialize)]
pub(crate) struct BlockDelta<'a> {
    /// The block's position.
    pub index: u64,
    /// The delta.
    #[serde(borrow)]
    pub delta: &'a RawValue,
}

/// `content_block_stop`.
#[derive(Deserialize)]
pub(crate) struct BlockStop {
    /// The block's position.
    pub index: u64,
}

/// `message_delta`: the stop reason and the usage so far.
#[derive(Deserialize)]
pub(crate) struct MessageDelta {
    /// The change to the message (its stop reason).
    #[serde(default)]
    pub delta: Loose<StopDelta>,
    /// The cumulative usage.
    #[serde(default)]
    pub usage: Loose<WireUsage>,
}

/// The `delta` of `message_delta`.
#[derive(Deserialize)]
pub(crate) struct StopDelta {
    /// Why the answer ended (not sent when it is not a string).
    #[serde(default)]
    pub stop_reason: LooseText,
}

/// A `text` block as it starts (its text is usually empty).
#[derive(Deserialize)]
pub(crate) struct TextStart {
    /// The text so far.
    #[serde(default)]
    pub text: String,
}

/// A `thinking` block as it starts.
#[derive(Deserialize)]
pub(crate) struct ThinkingStart {
    /// The thinking so far.
    #[serde(default)]
    pub thinking: String,
    /// A signature sent with the start (usually empty; it comes as a
    /// delta).
    #[serde(default)]
    pub signature: Option<String>,
}

/// A `redacted_thinking` block, whole.
#[derive(Deserialize)]
pub(crate) struct RedactedStart {
    /// The encrypted thinking.
    pub data: String,
}

/// A `tool_use` block as it starts.
#[derive(Deserialize)]
pub(crate) struct ToolUseStart<'a> {
    /// The call id, as sent (see [`dsh_llm_http::call_ids::CallIds`]).
    #[serde(default)]
    pub id: Option<SentId>,
    /// The tool.
    pub name: String,
    /// The input so far: `{}` when it streams as deltas; a server may
    /// send it whole here instead.
    #[serde(default, borrow)]
    pub input: Option<&'a RawValue>,
}

/// A `text_delta`.
#[derive(Deserialize)]
pub(crate) struct TextDelta {
    /// More text.
    pub text: String,
}

/// A `thinking_delta`.
#[derive(Deserialize)]
pub(crate) struct ThinkingDelta {
    /// More thinking.
    pub thinking: String,
}

/// A `signature_delta`.
#[derive(Deserialize)]
pub(crate) struct SignatureDelta {
    /// The thinking block's signature (it replaces one sent before, as
    /// Anthropic's SDKs read it).
    pub signature: String,
}

/// An `input_json_delta`.
#[derive(Deserialize)]
pub(crate) struct InputJsonDelta {
    /// More of the input's JSON text.
    pub partial_json: String,
}

/// A Messages `usage` object. Every count is loose: one that is no count
/// reads as not reported.
#[derive(Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    input_tokens: TokenCount,
    #[serde(default)]
    output_tokens: TokenCount,
    #[serde(default)]
    cache_creation_input_tokens: TokenCount,
    #[serde(default)]
    cache_read_input_tokens: TokenCount,
}

/// The usage of one answer as its events report it: `message_start` gives
/// the input counts, each `message_delta` the cumulative counts, so a
/// count reported later replaces the earlier one.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Input tokens neither read from nor written to the cache.
    pub input: Option<u64>,
    /// Output tokens (thinking included).
    pub output: Option<u64>,
    /// Input tokens read from the cache.
    pub cache_read: Option<u64>,
    /// Input tokens written to the cache.
    pub cache_write: Option<u64>,
}

impl Usage {
    /// Takes the counts `sent` reports.
    pub fn update(&mut self, sent: &WireUsage) {
        let take = |to: &mut Option<u64>, from: TokenCount| {
            if from.0.is_some() {
                *to = from.0;
            }
        };
        take(&mut self.input, sent.input_tokens);
        take(&mut self.output, sent.output_tokens);
        take(&mut self.cache_read, sent.cache_read_input_tokens);
        take(&mut self.cache_write, sent.cache_creation_input_tokens);
    }

    /// Whether any count was reported.
    pub fn reported(&self) -> bool {
        *self != Usage::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(texts: &[&str]) -> Usage {
        let mut u = Usage::default();
        for t in texts {
            u.update(&serde_json::from_str::<WireUsage>(t).unwrap());
        }
        u
    }

    #[test]
    fn usage_takes_the_start_then_the_cumulative_counts() {
        let u = usage(&[
            r#"{"input_tokens":10,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":1}"#,
            r#"{"output_tokens":57}"#,
        ]);
        assert_eq!(
            u,
            Usage {
                input: Some(10),
                output: Some(57),
                cache_read: Some(2000),
                cache_write: Some(100)
            }
        );
        // Odd counts are not reported; what was reported stands.
        let u = usage(&[
            r#"{"input_tokens":10,"output_tokens":1}"#,
            r#"{"output_tokens":"57","input_tokens":-1,"cache_read_input_tokens":null,"server_tool_use":{"x":[1]}}"#,
        ]);
        assert_eq!((u.input, u.output, u.cache_read), (Some(10), Some(1), None));
        assert!(!Usage::default().reported());
    }

    #[test]
    fn the_answers_parts_are_strict_and_metadata_loose() {
        assert!(serde_json::from_str::<TextDelta>(r#"{"type":"text_delta","text":5}"#).is_err());
        assert!(serde_json::from_str::<InputJsonDelta>(r#"{"partial_json":{}}"#).is_err());
        assert!(serde_json::from_str::<ToolUseStart<'_>>(r#"{"id":"t","input":{}}"#).is_err());
        assert!(serde_json::from_str::<BlockStop>(r#"{"index":"0"}"#).is_err());
        assert!(serde_json::from_str::<BlockStop>(r#"{"index":-1}"#).is_err());
        let d: MessageDelta =
            serde_json::from_str(r#"{"delta":{"stop_reason":7},"usage":"lots"}"#).unwrap();
        assert_eq!(d.delta.0.unwrap().stop_reason, LooseText(None));
        assert!(d.usage.0.is_none());
        let s: MessageStart = serde_json::from_str(r#"{"message":[1,2]}"#).unwrap();
        assert!(s.message.0.is_none());
    }

    #[test]
    fn the_type_is_read_alone() {
        let t: Typed<'_> =
            serde_json::from_str(r#"{"index":{"odd":[1]},"type":"future_event","delta":5}"#)
                .unwrap();
        assert_eq!(t.kind, "future_event");
        assert!(serde_json::from_str::<Typed<'_>>(r#"{"index":0}"#).is_err());
    }
}
