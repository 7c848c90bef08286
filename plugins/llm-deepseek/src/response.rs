//! The chat-completions stream as a provider sends it: each `data:`
//! payload (but `[DONE]`) is one [`StreamEvent`], read straight from its
//! text. Only the fields this adapter uses are read: other fields, choices
//! after the first and the parts of a loose field that are not used are
//! skipped as they stream past, not kept.
//!
//! What the answer is made of is read strictly: a text, reasoning, tool
//! call name or arguments of the wrong type (or a tool call `index` that
//! is not a number) makes the event unreadable (`MALFORMED_RESPONSE`),
//! since a part of the answer would be lost. Metadata servers send
//! loosely is read leniently, as the original and the adapter before it
//! did: `usage` and its details of another shape, and token counts that
//! are no counts, read as not reported ([`Loose`], [`TokenCount`]); a
//! `finish_reason` that is not a string reads as not sent ([`LooseText`]);
//! a tool call `index` of `null` is the call's position in its delta;
//! `choices` that hold nothing (`{}`, `null`) are no choices ([`First`]).

use dsh_llm_http::call_ids::SentId;
use dsh_llm_http::usage::CachedInput;
use dsh_sdk::vocab::TokenUsage;
use serde::Deserialize;
use serde_json::value::RawValue;

use dsh_llm_http::lenient::{First, Loose, LooseText, TokenCount};

/// The `finish_reason`s this adapter maps; any other ends the answer with
/// a `SERVER` failure quoting it.
pub(crate) mod finish_reason {
    /// The model finished.
    pub const STOP: &str = "stop";
    /// The model asked for tools.
    pub const TOOL_CALLS: &str = "tool_calls";
    /// The output limit cut the answer.
    pub const LENGTH: &str = "length";
}

/// One `data:` payload, borrowing from its text.
#[derive(Deserialize)]
pub(crate) struct StreamEvent<'a> {
    /// An error reported inside a 200 stream, as OpenAI-compatible servers
    /// and DeepSeek send it (its shape varies: read by
    /// [`dsh_llm_http::failure::stream_failure`]); absent or `null` otherwise.
    #[serde(default, borrow)]
    pub error: Option<&'a RawValue>,
    /// The call's token usage (with `stream_options.include_usage`, in an
    /// event of its own at the end); not reported when it is not an
    /// object.
    #[serde(default)]
    pub usage: Loose<WireUsage>,
    /// The first choice (the request asks for one; others are skipped).
    #[serde(default, borrow)]
    pub choices: First<Choice<'a>>,
}

/// One choice of a stream event.
#[derive(Deserialize)]
pub(crate) struct Choice<'a> {
    /// What the answer grows by.
    #[serde(default, borrow)]
    pub delta: Option<Delta<'a>>,
    /// Why the answer ended, in the event that ends it (not sent when it
    /// is not a string, as the original reads it).
    #[serde(default)]
    pub finish_reason: LooseText,
}

/// What one event adds to the answer.
#[derive(Deserialize)]
pub(crate) struct Delta<'a> {
    /// More thinking (DeepSeek's field).
    #[serde(default)]
    pub reasoning_content: Option<String>,
    /// More visible text.
    #[serde(default)]
    pub content: Option<String>,
    /// More of the tool calls: a list of [`SentCall`], kept as its text
    /// until its entries are counted against the answer's cap
    /// ([`crate::stream::StreamState`]), so a flood of them is refused
    /// before it is read.
    #[serde(default, borrow)]
    pub tool_calls: Option<&'a RawValue>,
}

/// More of one tool call, as sent.
#[derive(Deserialize)]
pub(crate) struct SentCall {
    /// The call's position in the answer. Servers that send one call at a
    /// time may leave it out or send `null` (see [`SentCall::at`]); a
    /// string or a negative number is refused (the arguments could join
    /// the wrong call).
    #[serde(default)]
    index: Option<u64>,
    /// The call's id as sent (the first delta of a call carries it).
    #[serde(default)]
    id: Option<SentId>,
    /// The function's name and more of its arguments.
    #[serde(default)]
    function: Option<FunctionDelta>,
}

impl SentCall {
    /// The delta, at `position` in its event's `tool_calls`: a call sent
    /// without an `index` (or with `null`) is the call at that position,
    /// so one call per delta is call 0, as before, and several calls in
    /// one delta stay apart.
    pub fn at(self, position: usize) -> CallDelta {
        CallDelta {
            index: self
                .index
                .unwrap_or_else(|| u64::try_from(position).unwrap_or(u64::MAX)),
            id: self.id,
            function: self.function,
        }
    }
}

/// More of one tool call, with its index settled ([`SentCall::at`]).
pub(crate) struct CallDelta {
    /// The call's position in the answer.
    pub index: u64,
    /// The call's id as sent (the first delta of a call carries it).
    pub id: Option<SentId>,
    /// The function's name and more of its arguments.
    pub function: Option<FunctionDelta>,
}

impl CallDelta {
    /// The function's name, when this delta carries a non-empty one.
    pub fn name(&self) -> Option<&str> {
        self.function
            .as_ref()
            .and_then(|f| f.name.as_deref())
            .filter(|n| !n.is_empty())
    }

    /// The arguments this delta adds ("" when it adds none).
    pub fn arguments(&self) -> &str {
        self.function
            .as_ref()
            .and_then(|f| f.arguments.as_deref())
            .unwrap_or("")
    }

    /// The bytes the delta adds to the answer: its id, name and arguments.
    pub fn size(&self) -> usize {
        let id = match &self.id {
            Some(SentId::Text(id)) => id.len(),
            Some(SentId::Other(_)) | None => 0,
        };
        id + self.name().map_or(0, str::len) + self.arguments().len()
    }
}

/// A function call's name and arguments, as they arrive.
#[derive(Deserialize)]
pub(crate) struct FunctionDelta {
    /// The function's name.
    #[serde(default)]
    pub name: Option<String>,
    /// More of the raw JSON arguments.
    #[serde(default)]
    pub arguments: Option<String>,
}

/// A chat-completions `usage` object. DeepSeek reports cache hits as
/// `prompt_cache_hit_tokens`, OpenAI as
/// `prompt_tokens_details.cached_tokens`. Every part is loose: a count
/// that is no count, or details that are no object, read as not reported.
#[derive(Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    prompt_tokens: TokenCount,
    #[serde(default)]
    completion_tokens: TokenCount,
    #[serde(default)]
    prompt_cache_hit_tokens: TokenCount,
    #[serde(default)]
    prompt_tokens_details: Loose<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Loose<CompletionDetails>,
}

/// `usage.prompt_tokens_details`.
#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: TokenCount,
}

/// `usage.completion_tokens_details`.
#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: TokenCount,
}

impl WireUsage {
    /// The harness's usage: uncached input, output, and the cache hits and
    /// reasoning tokens when reported. An input or output count not
    /// reported counts 0 (the harness's usage always has both).
    pub fn usage(&self) -> TokenUsage {
        let hit = self.prompt_cache_hit_tokens.0.or_else(|| {
            self.prompt_tokens_details
                .0
                .as_ref()
                .and_then(|d| d.cached_tokens.0)
        });
        CachedInput {
            input: self.prompt_tokens.0,
            output: self.completion_tokens.0,
            cached: hit,
            reasoning: self
                .completion_tokens_details
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
    fn usage_reads_both_cache_fields_and_drops_odd_counts() {
        let u = usage(r#"{"prompt_tokens":10,"completion_tokens":5,"prompt_cache_hit_tokens":4}"#);
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.cache_read_tokens),
            (6, 5, Some(4))
        );
        let u = usage(
            r#"{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":3},
                "completion_tokens_details":{"reasoning_tokens":2}}"#,
        );
        assert_eq!(
            (u.input_tokens, u.cache_read_tokens, u.reasoning_tokens),
            (7, Some(3), Some(2))
        );
        let u =
            usage(r#"{"prompt_tokens":-1,"completion_tokens":"5","prompt_cache_hit_tokens":null}"#);
        assert_eq!(u, TokenUsage::default());
    }

    #[test]
    fn odd_usage_shapes_read_as_not_reported() {
        let u = usage(
            r#"{"prompt_tokens":3,"completion_tokens":2,"completion_tokens_details":5,
                "prompt_tokens_details":[1,{"cached_tokens":1}],"server_extra":{"a":[{"b":null}]}}"#,
        );
        assert_eq!(
            u,
            TokenUsage {
                input_tokens: 3,
                output_tokens: 2,
                ..TokenUsage::default()
            }
        );
        let u = usage(
            r#"{"prompt_tokens":3,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1,
                "audio_tokens":{"x":[1]}},"completion_tokens_details":{"reasoning_tokens":"2","y":{}}}"#,
        );
        assert_eq!(
            (u.input_tokens, u.cache_read_tokens, u.reasoning_tokens),
            (2, Some(1), None)
        );
        for odd in [r#""lots""#, "5", "[1,2]", "true"] {
            let text = format!(r#"{{"choices":[],"usage":{odd}}}"#);
            let event: StreamEvent<'_> = serde_json::from_str(&text).unwrap();
            assert!(event.usage.0.is_none(), "{odd}");
        }
    }

    fn sent_call(text: &str) -> SentCall {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn an_index_left_out_or_null_is_the_calls_position() {
        assert_eq!(sent_call(r#"{"index":4}"#).at(1).index, 4);
        assert_eq!(sent_call(r#"{"index":null}"#).at(1).index, 1);
        assert_eq!(sent_call("{}").at(0).index, 0);
    }

    #[test]
    fn an_id_keeps_what_was_sent() {
        let id = |text: &str| sent_call(&format!(r#"{{"id":{text}}}"#)).at(0).id;
        assert_eq!(id(r#""c1""#), Some(SentId::Text("c1".into())));
        assert_eq!(id(r#""""#), Some(SentId::Text(String::new())));
        assert_eq!(id("7"), Some(SentId::Other("7".into())));
        assert_eq!(id("null"), None);
    }

    #[test]
    fn a_field_of_the_wrong_type_makes_the_event_unreadable() {
        // The parts of the answer are strict: one of the wrong type would
        // be lost.
        for bad in [
            r#"{"choices":[{"delta":{"content":5}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":["x"]}}]}"#,
            r#"{"choices":{"0":{"delta":{"content":"hi"}}}}"#,
            r#"{"choices":"hi"}"#,
        ] {
            assert!(
                serde_json::from_str::<StreamEvent<'_>>(bad).is_err(),
                "{bad}"
            );
        }
        for bad in [
            r#"{"index":"0"}"#,
            r#"{"index":-1}"#,
            r#"{"function":{"arguments":5}}"#,
            r#"{"function":{"name":{}}}"#,
        ] {
            assert!(serde_json::from_str::<SentCall>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn odd_metadata_leaves_the_event_readable() {
        let event: StreamEvent<'_> =
            serde_json::from_str(r#"{"choices":[{"delta":{"content":"a"},"finish_reason":1}]}"#)
                .unwrap();
        let choice = event.choices.0.unwrap();
        assert_eq!(choice.finish_reason, LooseText(None));
        assert_eq!(choice.delta.unwrap().content.as_deref(), Some("a"));
        for odd in [
            r#"{"choices":{}}"#,
            r#"{"choices":null}"#,
            r#"{"choices":0}"#,
        ] {
            let event: StreamEvent<'_> = serde_json::from_str(odd).unwrap();
            assert!(event.choices.0.is_none(), "{odd}");
        }
    }

    #[test]
    fn only_the_first_choice_is_read() {
        let event: StreamEvent<'_> = serde_json::from_str(
            r#"{"choices":[{"delta":{"content":"a"}},{"delta":{"content":7}},"x"]}"#,
        )
        .unwrap();
        let first = event.choices.0.unwrap().delta.unwrap();
        assert_eq!(first.content.as_deref(), Some("a"));
    }
}
