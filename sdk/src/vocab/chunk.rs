//! What a model adapter streams: [`Chunk`]s, closed by a `finish` with its
//! [`FinishReason`]. The set is closed, as in the original (its consumers
//! end in `assertNever`): a chunk of another type is an error, not
//! something to skip.
//!
//! The grammar an adapter keeps: blocks open (`block-start`, or a first
//! delta), grow by deltas of their type and close (`block-end` with the
//! whole block); `usage` at most once, before `finish`; nothing after
//! `finish`. [`super::assembler::BlockAssembler`] folds a stream into
//! content blocks.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::message::ContentBlock;
use super::{LlmFailure, TokenUsage};

/// One stream chunk (`assistant/chunk`'s `chunk`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Chunk {
    /// A block opens at `index`.
    #[serde(rename_all = "camelCase")]
    BlockStart {
        /// The block's position in the message.
        index: u64,
        /// Its type (a [`super::message::block_type`]).
        block_type: String,
    },
    /// Visible text grows.
    TextDelta {
        /// The block's position.
        index: u64,
        /// The new text.
        text: String,
    },
    /// Reasoning grows.
    ReasoningDelta {
        /// The block's position.
        index: u64,
        /// The new text.
        text: String,
    },
    /// A tool call grows.
    #[serde(rename_all = "camelCase")]
    ToolCallDelta {
        /// The block's position.
        index: u64,
        /// The call id (the last non-empty one wins).
        id: String,
        /// The tool's name (the first non-empty one wins).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// More of the raw JSON arguments.
        arguments_delta: String,
    },
    /// A block closes, whole.
    BlockEnd {
        /// The block's position.
        index: u64,
        /// The finished block.
        block: ContentBlock,
    },
    /// The call's token usage.
    Usage {
        /// The counts.
        usage: TokenUsage,
    },
    /// The stream ends.
    #[serde(rename_all = "camelCase")]
    Finish {
        /// Why.
        reason: FinishReason,
        /// What the adapter needs to replay this answer (opaque; `blocks`,
        /// when present, aligned with the assembled blocks).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replay_state: Option<Value>,
    },
}

impl Chunk {
    /// A `text-delta`.
    pub fn text(index: u64, text: impl Into<String>) -> Chunk {
        Chunk::TextDelta {
            index,
            text: text.into(),
        }
    }

    /// A `finish` without replay state.
    pub fn finish(reason: FinishReason) -> Chunk {
        Chunk::Finish {
            reason,
            replay_state: None,
        }
    }

    /// The block index a block chunk is about.
    pub fn index(&self) -> Option<u64> {
        match self {
            Chunk::BlockStart { index, .. }
            | Chunk::TextDelta { index, .. }
            | Chunk::ReasoningDelta { index, .. }
            | Chunk::ToolCallDelta { index, .. }
            | Chunk::BlockEnd { index, .. } => Some(*index),
            Chunk::Usage { .. } | Chunk::Finish { .. } => None,
        }
    }

    /// Whether it carries new tokens (`isTokenDelta`): non-empty text or
    /// reasoning, or a tool-call delta with arguments or a name.
    pub fn is_token_delta(&self) -> bool {
        match self {
            Chunk::TextDelta { text, .. } | Chunk::ReasoningDelta { text, .. } => !text.is_empty(),
            Chunk::ToolCallDelta {
                name,
                arguments_delta,
                ..
            } => !arguments_delta.is_empty() || name.as_deref().is_some_and(|n| !n.is_empty()),
            _ => false,
        }
    }
}

/// Why a model response stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum FinishReason {
    /// The model finished.
    Stop,
    /// The model asked for tools.
    ToolCalls,
    /// The output limit cut it.
    MaxTokens,
    /// The caller cancelled it.
    Aborted {
        /// The cancellation, as a failure.
        failure: LlmFailure,
    },
    /// It failed.
    Error {
        /// What went wrong.
        failure: LlmFailure,
    },
}

impl FinishReason {
    /// The `kind` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::ToolCalls => "tool-calls",
            FinishReason::MaxTokens => "max-tokens",
            FinishReason::Aborted { .. } => "aborted",
            FinishReason::Error { .. } => "error",
        }
    }

    /// The failure of an `aborted` or `error` finish.
    pub fn failure(&self) -> Option<&LlmFailure> {
        match self {
            FinishReason::Aborted { failure } | FinishReason::Error { failure } => Some(failure),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chunk_round_trips_in_the_originals_shape() {
        for text in [
            r#"{"type":"block-start","index":0,"blockType":"text"}"#,
            r#"{"type":"text-delta","index":0,"text":"hi"}"#,
            r#"{"type":"reasoning-delta","index":1,"text":"hm"}"#,
            r#"{"type":"tool-call-delta","index":2,"id":"c","name":"read","argumentsDelta":"{"}"#,
            r#"{"type":"tool-call-delta","index":2,"id":"c","argumentsDelta":"}"}"#,
            r#"{"type":"block-end","index":0,"block":{"type":"text","text":"hi"}}"#,
            r#"{"type":"usage","usage":{"inputTokens":1,"outputTokens":2,"cacheReadTokens":3}}"#,
            r#"{"type":"finish","reason":{"kind":"stop"}}"#,
            r#"{"type":"finish","reason":{"kind":"tool-calls"},"replayState":{"blocks":[]}}"#,
            r#"{"type":"finish","reason":{"kind":"error","failure":{"message":"m","code":"SERVER","status":500}}}"#,
        ] {
            let chunk: Chunk = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_string(&chunk).unwrap(), text);
        }
    }

    #[test]
    fn an_unknown_chunk_type_is_refused() {
        // The original's consumers end in `assertNever`: the set is closed.
        let err = serde_json::from_str::<Chunk>(r#"{"type":"thinking","index":0}"#).unwrap_err();
        assert!(
            err.to_string().contains("unknown variant `thinking`"),
            "{err}"
        );
        let err = serde_json::from_str::<Chunk>(r#"{"type":"finish","reason":{"kind":"later"}}"#)
            .unwrap_err();
        assert!(err.to_string().contains("later"), "{err}");
    }

    #[test]
    fn token_deltas_are_the_originals() {
        assert!(Chunk::text(0, "a").is_token_delta());
        assert!(!Chunk::text(0, "").is_token_delta());
        let call = |name: Option<&str>, args: &str| Chunk::ToolCallDelta {
            index: 0,
            id: "c".into(),
            name: name.map(Into::into),
            arguments_delta: args.into(),
        };
        assert!(call(Some("read"), "").is_token_delta());
        assert!(call(None, "{").is_token_delta());
        assert!(!call(None, "").is_token_delta());
        assert!(!Chunk::finish(FinishReason::Stop).is_token_delta());
    }
}
