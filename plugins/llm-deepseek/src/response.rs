//! The chat-completions stream as a provider sends it: each `data:`
//! payload (but `[DONE]`) is one [`StreamEvent`], read straight from its
//! text. Only the fields this adapter uses are read: other fields, choices
//! after the first and the parts of a loose field that are not used are
//! skipped as they stream past, not kept. A field of the wrong type makes
//! the event unreadable (`MALFORMED_RESPONSE`), except token counts, which
//! servers report loosely ([`TokenCount`]).

use dsh_sdk::vocab::TokenUsage;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::lenient::{First, TokenCount};

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
    /// [`crate::failure::stream_failure`]); absent or `null` otherwise.
    #[serde(default, borrow)]
    pub error: Option<&'a RawValue>,
    /// The call's token usage (with `stream_options.include_usage`, in an
    /// event of its own at the end).
    #[serde(default)]
    pub usage: Option<WireUsage>,
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
    /// Why the answer ended, in the event that ends it.
    #[serde(default)]
    pub finish_reason: Option<String>,
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
    /// More of the tool calls: a list of [`CallDelta`], kept as its text
    /// until its entries are counted against the answer's cap
    /// ([`crate::stream::StreamState`]), so a flood of them is refused
    /// before it is read.
    #[serde(default, borrow)]
    pub tool_calls: Option<&'a RawValue>,
}

/// More of one tool call.
#[derive(Deserialize)]
pub(crate) struct CallDelta {
    /// The call's position in the answer. Servers that send one call may
    /// leave it out: it is then call 0.
    #[serde(default)]
    pub index: u64,
    /// The call's id as sent (the first delta of a call carries it).
    #[serde(default)]
    pub id: Option<SentId>,
    /// The function's name and more of its arguments.
    #[serde(default)]
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

/// A tool call's `id` as a server sent it (`null` reads as absent).
/// Servers do not all send a string; what they sent is kept, as JSON text,
/// for the warning that renames the call ([`crate::call_ids`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SentId {
    /// A string (maybe empty).
    Text(String),
    /// Anything else, as its JSON text.
    Other(String),
}

impl<'de> Deserialize<'de> for SentId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&RawValue>::deserialize(d)?;
        Ok(match serde_json::from_str::<String>(raw.get()) {
            Ok(text) => SentId::Text(text),
            Err(_) => SentId::Other(raw.get().to_owned()),
        })
    }
}

/// A chat-completions `usage` object. DeepSeek reports cache hits as
/// `prompt_cache_hit_tokens`, OpenAI as
/// `prompt_tokens_details.cached_tokens`.
#[derive(Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    prompt_tokens: TokenCount,
    #[serde(default)]
    completion_tokens: TokenCount,
    #[serde(default)]
    prompt_cache_hit_tokens: TokenCount,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
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
                .as_ref()
                .and_then(|d| d.cached_tokens.0)
        });
        let prompt = self.prompt_tokens.0.unwrap_or(0);
        TokenUsage {
            input_tokens: prompt.saturating_sub(hit.unwrap_or(0)),
            output_tokens: self.completion_tokens.0.unwrap_or(0),
            cache_read_tokens: hit,
            cache_write_tokens: None,
            reasoning_tokens: self
                .completion_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens.0),
        }
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
    fn an_id_keeps_what_was_sent() {
        let id = |text: &str| {
            serde_json::from_str::<CallDelta>(&format!(r#"{{"id":{text}}}"#))
                .unwrap()
                .id
        };
        assert_eq!(id(r#""c1""#), Some(SentId::Text("c1".into())));
        assert_eq!(id(r#""""#), Some(SentId::Text(String::new())));
        assert_eq!(id("7"), Some(SentId::Other("7".into())));
        assert_eq!(id("null"), None);
    }

    #[test]
    fn a_field_of_the_wrong_type_makes_the_event_unreadable() {
        for bad in [
            r#"{"choices":[{"delta":{"content":5}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":1}]}"#,
            r#"{"choices":{}}"#,
            r#"{"usage":"lots"}"#,
        ] {
            assert!(
                serde_json::from_str::<StreamEvent<'_>>(bad).is_err(),
                "{bad}"
            );
        }
        assert!(serde_json::from_str::<CallDelta>(r#"{"index":"0"}"#).is_err());
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
