//! The model vocabulary the log and the adapters share: token usage,
//! normalized failures, the retryable codes, a tool as the model sees it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::names::llm_failure;

/// Token usage; counts are disjoint (input excludes cache reads).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens (reasoning included).
    pub output_tokens: u64,
    /// Input tokens served from the provider's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Input tokens written to the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    /// Reasoning tokens (a subset of output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

impl TokenUsage {
    /// Adds `other`'s counts, saturating (the counts are a server's and
    /// need not be sane); an optional bucket stays absent only when absent
    /// on both sides.
    pub fn add(&mut self, other: &TokenUsage) {
        fn sum(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.saturating_add(b)),
                (one, None) | (None, one) => one,
            }
        }
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = sum(self.cache_read_tokens, other.cache_read_tokens);
        self.cache_write_tokens = sum(self.cache_write_tokens, other.cache_write_tokens);
        self.reasoning_tokens = sum(self.reasoning_tokens, other.reasoning_tokens);
    }
}

/// A normalized model failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmFailure {
    /// What went wrong.
    pub message: String,
    /// A stable code (`RATE_LIMIT`, `SERVER`, `TIMEOUT`, ...).
    pub code: String,
    /// HTTP status, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The provider's `Retry-After`, in ms (the original allows any
    /// positive number; a fraction reads rounded up).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole_ms"
    )]
    pub provider_retry_after_ms: Option<u64>,
    /// The provider's request id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl LlmFailure {
    /// A failure with a code and a message.
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        LlmFailure {
            message: message.into(),
            code: code.to_owned(),
            status: None,
            provider_retry_after_ms: None,
            request_id: None,
        }
    }

    /// The `finish` chunk that reports this failure (`aborted` when the
    /// caller cancelled).
    pub fn finish(self, aborted: bool) -> super::Chunk {
        let reason = if aborted {
            super::FinishReason::Aborted { failure: self }
        } else {
            super::FinishReason::Error { failure: self }
        };
        super::Chunk::finish(reason)
    }
}

/// An optional duration in ms written as any non-negative number (the
/// original computes some without rounding), rounded up.
fn whole_ms<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    super::json::whole_number(
        d,
        super::json::Fraction::RoundedUp,
        "number of milliseconds",
    )
}

/// Codes that the default retry policy retries.
pub const RETRYABLE_CODES: [&str; 5] = [
    llm_failure::EMPTY_RESPONSE,
    llm_failure::RATE_LIMIT,
    llm_failure::SERVER,
    llm_failure::TIMEOUT,
    llm_failure::TRANSPORT,
];

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// Tool name.
    pub name: String,
    /// What it does (absent reads as empty: a tool from another source,
    /// an MCP server's, may have none).
    #[serde(default)]
    pub description: String,
    /// JSON Schema of its arguments.
    pub parameters: Value,
}
