//! The Responses stream as a server sends it: each `data:` payload is one
//! event, named by its `type` (the `event:` line repeats it and is not
//! read). The type is read first, alone; an event of a type this adapter
//! reads is then read straight from its text into its struct, and any
//! other type (`response.created`, `response.in_progress`,
//! `response.content_part.added`, `response.output_text.done`, and types
//! newer than this adapter) is skipped unread.
//!
//! What the answer is made of is read strictly: a delta that is not a
//! string, an `output_index` that is not a whole number, or an item of a
//! known type with a field of the wrong type makes the event unreadable
//! (`MALFORMED_RESPONSE`), since a part of the answer would be lost.
//! Metadata is read leniently: `usage` and its details of another shape,
//! and token counts that are no counts, read as not reported; a `status`
//! or an `incomplete_details.reason` that is not a string reads as not
//! sent.

use std::borrow::Cow;

use dsh_llm_http::call_ids::SentId;
use dsh_llm_http::lenient::{Loose, LooseText, TokenCount};
use dsh_llm_http::usage::CachedInput;
use dsh_sdk::vocab::TokenUsage;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::replay::SummaryPart;

/// The event types this adapter reads; every other type is skipped.
pub(crate) mod event_type {
    /// An output item starts (`{output_index, item}`).
    pub const OUTPUT_ITEM_ADDED: &str = "response.output_item.added";
    /// An output item is complete (`{output_index, item}`): a reasoning
    /// item's encrypted content arrives here.
    pub const OUTPUT_ITEM_DONE: &str = "response.output_item.done";
    /// More of a message's text.
    pub const OUTPUT_TEXT_DELTA: &str = "response.output_text.delta";
    /// More of a message's refusal (shown as its text).
    pub const REFUSAL_DELTA: &str = "response.refusal.delta";
    /// More of a reasoning item's summary.
    pub const REASONING_SUMMARY_TEXT_DELTA: &str = "response.reasoning_summary_text.delta";
    /// More of a reasoning item's own text (open-weight models).
    pub const REASONING_TEXT_DELTA: &str = "response.reasoning_text.delta";
    /// More of a function call's arguments.
    pub const FUNCTION_CALL_ARGUMENTS_DELTA: &str = "response.function_call_arguments.delta";
    /// A function call's arguments, whole.
    pub const FUNCTION_CALL_ARGUMENTS_DONE: &str = "response.function_call_arguments.done";
    /// The answer is complete.
    pub const COMPLETED: &str = "response.completed";
    /// The answer stopped short (`incomplete_details.reason`).
    pub const INCOMPLETE: &str = "response.incomplete";
    /// The answer failed (`response.error`).
    pub const FAILED: &str = "response.failed";
    /// The stream failed (`{code, message}`).
    pub const ERROR: &str = "error";
}

/// The output item types this adapter reads; others are skipped.
pub(crate) mod item_type {
    /// A message of the model (text, or a refusal).
    pub const MESSAGE: &str = "message";
    /// A reasoning item.
    pub const REASONING: &str = "reasoning";
    /// A call of one of the request's tools.
    pub const FUNCTION_CALL: &str = "function_call";
}

/// The `incomplete_details.reason` that is the output cap.
pub(crate) const MAX_OUTPUT_TOKENS: &str = "max_output_tokens";

/// The `incomplete_details.reason` of an answer the server's content
/// filter stopped.
pub(crate) const CONTENT_FILTER: &str = "content_filter";

/// The `status` of a response that stopped short.
pub(crate) const STATUS_INCOMPLETE: &str = "incomplete";

/// An event's type, read alone (everything else skipped unread). An event
/// without one is no event this adapter reads.
#[derive(Deserialize)]
pub(crate) struct Kind<'a> {
    #[serde(default, rename = "type", borrow)]
    pub kind: Option<Cow<'a, str>>,
}

/// `response.output_item.added` and `.done`: the item, kept as its text
/// until its type is known.
#[derive(Deserialize)]
pub(crate) struct ItemEvent<'a> {
    /// The item's position in the answer.
    pub output_index: u64,
    /// The item.
    #[serde(borrow)]
    pub item: &'a RawValue,
}

/// An output item's type, read alone.
#[derive(Deserialize)]
pub(crate) struct ItemKind<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Cow<'a, str>,
}

/// One part of a message item's content (`output_text` or `refusal`) or
/// of a reasoning item's `content` (`reasoning_text`).
#[derive(Deserialize)]
pub(crate) struct ContentPart {
    /// Its text (`output_text`, `reasoning_text`).
    #[serde(default)]
    pub text: Option<String>,
    /// A refusal's text.
    #[serde(default)]
    pub refusal: Option<String>,
}

impl ContentPart {
    /// The part's text, whichever field holds it.
    pub fn text(&self) -> &str {
        self.text
            .as_deref()
            .or(self.refusal.as_deref())
            .unwrap_or("")
    }
}

/// The `type` of a summary part this adapter keeps.
const SUMMARY_TEXT: &str = "summary_text";

/// A summary part as a server sends it: one of another type than
/// `summary_text`, or without text, is skipped.
#[derive(Deserialize)]
pub(crate) struct SentSummary {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

/// A `message`, `reasoning` or `function_call` item (the fields of each;
/// the others are absent).
#[derive(Deserialize)]
pub(crate) struct Item {
    /// The item's id (a reasoning item's is sent back).
    #[serde(default)]
    pub id: Option<String>,
    /// A function call's id, which its output names.
    #[serde(default)]
    pub call_id: Option<SentId>,
    /// A function call's tool.
    #[serde(default)]
    pub name: Option<String>,
    /// A function call's arguments (whole at `.done`).
    #[serde(default)]
    pub arguments: Option<String>,
    /// A message's parts, or a reasoning item's own text.
    #[serde(default)]
    pub content: Option<Vec<ContentPart>>,
    /// A reasoning item's summary.
    #[serde(default)]
    pub summary: Option<Vec<SentSummary>>,
    /// A reasoning item's encrypted reasoning.
    #[serde(default)]
    pub encrypted_content: Option<String>,
}

impl Item {
    /// A reasoning item's summary parts, as they are sent back.
    pub fn summary_parts(&self) -> Vec<SummaryPart> {
        self.summary
            .iter()
            .flatten()
            .filter(|s| s.kind == SUMMARY_TEXT)
            .filter_map(|s| s.text.clone())
            .map(|text| SummaryPart::SummaryText { text })
            .collect()
    }

    /// The text of the item as it arrived whole: a message's parts, or a
    /// reasoning item's summary (else its own text), parts apart by a
    /// blank line.
    pub fn whole_text(&self) -> String {
        let summary: Vec<String> = self
            .summary_parts()
            .into_iter()
            .map(|SummaryPart::SummaryText { text }| text)
            .filter(|t| !t.is_empty())
            .collect();
        if !summary.is_empty() {
            return summary.join(PART_BREAK);
        }
        self.content
            .iter()
            .flatten()
            .map(ContentPart::text)
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join(PART_BREAK)
    }
}

/// What separates two summary (or reasoning) parts in a reasoning block.
pub(crate) const PART_BREAK: &str = "\n\n";

/// More text of an item: a text, refusal or reasoning delta.
#[derive(Deserialize)]
pub(crate) struct TextDelta {
    /// The item's position in the answer.
    pub output_index: u64,
    /// The part of a reasoning item's summary it belongs to.
    #[serde(default)]
    pub summary_index: Option<u64>,
    /// The part of the item's content it belongs to.
    #[serde(default)]
    pub content_index: Option<u64>,
    /// The text.
    pub delta: String,
}

/// `response.function_call_arguments.done`.
#[derive(Deserialize)]
pub(crate) struct ArgumentsDone {
    /// The call's position in the answer.
    pub output_index: u64,
    /// The arguments, whole.
    pub arguments: String,
}

/// `response.completed`, `.incomplete` and `.failed`: the response.
#[derive(Deserialize)]
pub(crate) struct TerminalEvent<'a> {
    /// The response as it ended (absent: nothing more is known).
    #[serde(default, borrow)]
    pub response: Option<Terminal<'a>>,
}

/// A response as it ended: what the terminal events carry that this
/// adapter reads.
#[derive(Deserialize)]
pub(crate) struct Terminal<'a> {
    /// `completed`, `incomplete`, `failed`.
    #[serde(default)]
    pub status: LooseText,
    /// Why an incomplete response stopped.
    #[serde(default)]
    pub incomplete_details: Loose<IncompleteDetails>,
    /// A failed response's error (its shape varies: read by
    /// [`dsh_llm_http::failure::stream_failure`]).
    #[serde(default, borrow)]
    pub error: Option<&'a RawValue>,
    /// The call's token usage.
    #[serde(default)]
    pub usage: Loose<WireUsage>,
    /// The answer's items, as their text: read only when the stream sent
    /// no item events ([`crate::stream`]).
    #[serde(default, borrow)]
    pub output: Option<&'a RawValue>,
}

/// `incomplete_details`.
#[derive(Deserialize)]
pub(crate) struct IncompleteDetails {
    /// `max_output_tokens`, `content_filter`.
    #[serde(default)]
    pub reason: LooseText,
}

/// The `error` event: `{code, message, param}` at its top level, or (as
/// some servers send it) an `error` object.
#[derive(Deserialize)]
pub(crate) struct ErrorEvent<'a> {
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
    #[serde(default, borrow)]
    code: Option<&'a RawValue>,
    #[serde(default, borrow)]
    message: Option<&'a RawValue>,
}

/// The error of an `error` event, without the event's own `type`.
#[derive(Serialize)]
struct FlatError<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<&'a RawValue>,
}

impl ErrorEvent<'_> {
    /// The error, as the text [`dsh_llm_http::failure::stream_failure`]
    /// reads (`{}` when the event says nothing: it is quoted whole).
    pub fn error(&self) -> serde_json::Result<Cow<'_, RawValue>> {
        if let Some(error) = self.error {
            return Ok(Cow::Borrowed(error));
        }
        let flat = FlatError {
            message: self.message,
            code: self.code,
        };
        serde_json::value::to_raw_value(&flat).map(Cow::Owned)
    }
}

/// A Responses `usage` object: input (cached included), output (reasoning
/// included). Every part is loose: a count that is no count, or details
/// that are no object, read as not reported.
#[derive(Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    input_tokens: TokenCount,
    #[serde(default)]
    output_tokens: TokenCount,
    #[serde(default)]
    input_tokens_details: Loose<InputDetails>,
    #[serde(default)]
    output_tokens_details: Loose<OutputDetails>,
}

/// `usage.input_tokens_details`.
#[derive(Deserialize)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: TokenCount,
}

/// `usage.output_tokens_details`.
#[derive(Deserialize)]
struct OutputDetails {
    #[serde(default)]
    reasoning_tokens: TokenCount,
}

impl WireUsage {
    /// The harness's usage: uncached input, output, and the cache reads
    /// and reasoning tokens when reported. An input or output count not
    /// reported counts 0 (the harness's usage always has both).
    pub fn usage(&self) -> TokenUsage {
        CachedInput {
            input: self.input_tokens.0,
            output: self.output_tokens.0,
            cached: self
                .input_tokens_details
                .0
                .as_ref()
                .and_then(|d| d.cached_tokens.0),
            reasoning: self
                .output_tokens_details
                .0
                .as_ref()
                .and_then(|d| d.reasoning_tokens.0),
        }
        .usage()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(text: &str) -> TokenUsage {
        serde_json::from_str::<WireUsage>(text).unwrap().usage()
    }

    #[test]
    fn usage_counts_cached_input_apart_and_drops_odd_counts() {
        let u = usage(
            r#"{"input_tokens":100,"input_tokens_details":{"cached_tokens":60},"output_tokens":7,
                "output_tokens_details":{"reasoning_tokens":3},"total_tokens":107}"#,
        );
        assert_eq!(
            u,
            TokenUsage {
                input_tokens: 40,
                output_tokens: 7,
                cache_read_tokens: Some(60),
                cache_write_tokens: None,
                reasoning_tokens: Some(3),
            }
        );
        let u = usage(r#"{"input_tokens":-1,"output_tokens":"5","input_tokens_details":[1]}"#);
        assert_eq!(u, TokenUsage::default());
    }

    #[test]
    fn an_error_event_is_read_flat_or_nested() {
        let flat: ErrorEvent<'_> = serde_json::from_str(
            r#"{"type":"error","code":"rate_limit_exceeded","message":"slow","param":null}"#,
        )
        .unwrap();
        assert_eq!(
            flat.error().unwrap().get(),
            r#"{"message":"slow","code":"rate_limit_exceeded"}"#
        );
        let nested: ErrorEvent<'_> =
            serde_json::from_str(r#"{"type":"error","error":{"message":"m","type":"t"}}"#).unwrap();
        assert_eq!(
            nested.error().unwrap().get(),
            r#"{"message":"m","type":"t"}"#
        );
        let bare: ErrorEvent<'_> = serde_json::from_str(r#"{"type":"error"}"#).unwrap();
        assert_eq!(bare.error().unwrap().get(), "{}");
    }

    #[test]
    fn a_whole_item_gives_its_text() {
        let item: Item = serde_json::from_str(
            r#"{"type":"reasoning","id":"rs","summary":[{"type":"summary_text","text":"a"},
                {"type":"other","text":"x"},{"type":"summary_text","text":"b"}],"encrypted_content":"e"}"#,
        )
        .unwrap();
        assert_eq!(item.whole_text(), "a\n\nb");
        let item: Item = serde_json::from_str(
            r#"{"type":"message","content":[{"type":"output_text","text":"hi","annotations":[]},
                {"type":"refusal","refusal":"no"}]}"#,
        )
        .unwrap();
        assert_eq!(item.whole_text(), "hi\n\nno");
        // A field of the wrong type is refused: a part of the answer.
        for bad in [
            r#"{"type":"function_call","name":5}"#,
            r#"{"type":"function_call","arguments":{}}"#,
            r#"{"type":"reasoning","encrypted_content":1}"#,
            r#"{"type":"message","content":"hi"}"#,
        ] {
            assert!(serde_json::from_str::<Item>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn odd_terminal_metadata_reads_as_not_sent() {
        let t: TerminalEvent<'_> = serde_json::from_str(
            r#"{"response":{"status":5,"incomplete_details":"x","usage":[1],"output":[{"a":1}]}}"#,
        )
        .unwrap();
        let r = t.response.unwrap();
        assert_eq!(r.status, LooseText(None));
        assert!(r.incomplete_details.0.is_none() && r.usage.0.is_none() && r.error.is_none());
    }
}
