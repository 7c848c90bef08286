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
    /// The provider's `Retry-After`, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments.
    pub parameters: Value,
}
