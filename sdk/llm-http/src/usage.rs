//! A server's token counts as the harness's usage, for the servers whose
//! input count includes the tokens read from the cache (chat completions
//! and the Responses API; the Messages API counts them apart).

use dsh_sdk::vocab::TokenUsage;

/// The counts one answer reported, each `None` when not reported (see
/// [`crate::lenient::TokenCount`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CachedInput {
    /// The input tokens, cached ones included.
    pub input: Option<u64>,
    /// The output tokens, reasoning included.
    pub output: Option<u64>,
    /// The input tokens read from the cache.
    pub cached: Option<u64>,
    /// The output tokens spent reasoning.
    pub reasoning: Option<u64>,
}

impl CachedInput {
    /// The harness's usage: the uncached input, the output, and the cache
    /// reads and reasoning tokens when reported. An input or output count
    /// not reported counts 0 (the harness's usage always has both).
    pub fn usage(self) -> TokenUsage {
        TokenUsage {
            input_tokens: self
                .input
                .unwrap_or(0)
                .saturating_sub(self.cached.unwrap_or(0)),
            output_tokens: self.output.unwrap_or(0),
            cache_read_tokens: self.cached,
            cache_write_tokens: None,
            reasoning_tokens: self.reasoning,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_input_is_counted_apart_and_what_is_missing_is_zero() {
        let u = CachedInput {
            input: Some(100),
            output: Some(7),
            cached: Some(60),
            reasoning: Some(3),
        }
        .usage();
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
        assert_eq!(CachedInput::default().usage(), TokenUsage::default());
        // More cached than input (a server's odd count) is no input.
        let u = CachedInput {
            input: Some(1),
            cached: Some(5),
            ..CachedInput::default()
        }
        .usage();
        assert_eq!(u.input_tokens, 0);
    }
}
