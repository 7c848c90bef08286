//! The caps on one request that every adapter's config sets the same way:
//! `maxSseLineBytes` ([`crate::sse`]), `maxAnswerBytes` and `maxToolCalls`
//! ([`crate::answer_cap`]), each 0 for its default,
//! `streamIdleTimeoutMs` and `streamProgressTimeoutMs`
//! ([`crate::exchange`]).
//!
//! Each adapter's config keeps these fields itself, named and
//! defaulted as here: its config refuses keys it does not know
//! (`deny_unknown_fields`), which serde cannot combine with a flattened
//! part. The adapter hands them to [`Limits`] (its `limits()`), which says
//! what is in force.

use std::time::Duration;

use crate::{answer_cap, sse};

/// The config field that sets the idle timeout, as users write it.
pub const IDLE_TIMEOUT_FIELD: &str = "streamIdleTimeoutMs";

/// The default idle timeout: a request with no bytes for five minutes
/// fails with `TIMEOUT` (a model may think for minutes before its first
/// token).
pub const DEFAULT_STREAM_IDLE_TIMEOUT_MS: u64 = 300_000;

/// The config field that sets the progress deadline, as users write it.
pub const PROGRESS_TIMEOUT_FIELD: &str = "streamProgressTimeoutMs";

/// The default progress deadline: an answer that brings no content (text,
/// reasoning, a tool call) for ten minutes fails with `TIMEOUT`, however
/// many keep-alives or pings the server sends meanwhile. Longer than the
/// idle timeout: a model may think for minutes before its first token, and
/// a server that streams its thinking as content resets it.
pub const DEFAULT_STREAM_PROGRESS_TIMEOUT_MS: u64 = 600_000;

/// A route's caps, as its config states them (the config fields of the
/// same names, camelCased).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most bytes one SSE line (and one event's `data`) may hold; a
    /// longer one fails the stream with `MALFORMED_RESPONSE`. 0: the
    /// default, [`sse::MAX_LINE_BYTES`].
    pub max_sse_line_bytes: usize,
    /// The most bytes one answer may stream: its text, reasoning and tool
    /// calls, each delta counting [`answer_cap::DELTA_COST`] more. A longer
    /// answer fails the stream with `MALFORMED_RESPONSE`. 0: the default,
    /// [`answer_cap::DEFAULT_MAX_ANSWER_BYTES`].
    pub max_answer_bytes: usize,
    /// The most tool calls one answer may start; one more fails the stream
    /// with `MALFORMED_RESPONSE`. 0: the default,
    /// [`answer_cap::DEFAULT_MAX_TOOL_CALLS`].
    pub max_tool_calls: usize,
    /// A request with no bytes for this long fails with `TIMEOUT`.
    pub stream_idle_timeout_ms: u64,
    /// An answer with no content for this long fails with `TIMEOUT`, even
    /// while the server sends keep-alives. 0: the default,
    /// [`DEFAULT_STREAM_PROGRESS_TIMEOUT_MS`].
    pub stream_progress_timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_sse_line_bytes: sse::MAX_LINE_BYTES,
            max_answer_bytes: answer_cap::DEFAULT_MAX_ANSWER_BYTES,
            max_tool_calls: answer_cap::DEFAULT_MAX_TOOL_CALLS,
            stream_idle_timeout_ms: DEFAULT_STREAM_IDLE_TIMEOUT_MS,
            stream_progress_timeout_ms: DEFAULT_STREAM_PROGRESS_TIMEOUT_MS,
        }
    }
}

/// `n`, or `default` when it is 0.
fn or_default<T: PartialEq + Default>(n: T, default: T) -> T {
    if n == T::default() {
        default
    } else {
        n
    }
}

impl Limits {
    /// The SSE line cap in force.
    pub fn sse_cap(&self) -> usize {
        or_default(self.max_sse_line_bytes, sse::MAX_LINE_BYTES)
    }

    /// The answer cap in force.
    pub fn answer_cap(&self) -> usize {
        or_default(self.max_answer_bytes, answer_cap::DEFAULT_MAX_ANSWER_BYTES)
    }

    /// The cap on one answer's tool calls in force.
    pub fn tool_call_cap(&self) -> usize {
        or_default(self.max_tool_calls, answer_cap::DEFAULT_MAX_TOOL_CALLS)
    }

    /// The idle timeout.
    pub fn idle(&self) -> Duration {
        Duration::from_millis(self.stream_idle_timeout_ms)
    }

    /// The progress deadline in force.
    pub fn progress(&self) -> Duration {
        Duration::from_millis(or_default(
            self.stream_progress_timeout_ms,
            DEFAULT_STREAM_PROGRESS_TIMEOUT_MS,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_of_zero_is_the_default() {
        let zero = Limits {
            max_sse_line_bytes: 0,
            max_answer_bytes: 0,
            max_tool_calls: 0,
            stream_idle_timeout_ms: 1,
            stream_progress_timeout_ms: 0,
        };
        for l in [zero, Limits::default()] {
            assert_eq!(
                (l.sse_cap(), l.answer_cap(), l.tool_call_cap()),
                (
                    sse::MAX_LINE_BYTES,
                    answer_cap::DEFAULT_MAX_ANSWER_BYTES,
                    answer_cap::DEFAULT_MAX_TOOL_CALLS
                )
            );
            assert_eq!(
                l.progress(),
                Duration::from_millis(DEFAULT_STREAM_PROGRESS_TIMEOUT_MS)
            );
        }
        let set = Limits {
            max_sse_line_bytes: 1024,
            max_answer_bytes: 4096,
            max_tool_calls: 8,
            stream_idle_timeout_ms: 1500,
            stream_progress_timeout_ms: 9000,
        };
        assert_eq!(
            (set.sse_cap(), set.answer_cap(), set.tool_call_cap()),
            (1024, 4096, 8)
        );
        assert_eq!(set.idle(), Duration::from_millis(1500));
        assert_eq!(set.progress(), Duration::from_millis(9000));
    }
}
