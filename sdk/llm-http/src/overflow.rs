//! What a context overflow looks like on each common server: the codes and
//! types it is labelled with, the wording of its message, and the token
//! counts some servers state beside it. [`crate::failure`] asks
//! [`is_overflow`] of an error whose status (400, 422, or none inside a
//! stream) does not settle it.
//!
//! The bodies these come from are recorded in `testdata/errors/` (one file
//! per server and case, with where it was taken from), beside near misses
//! that must stay `INVALID_REQUEST`.

/// Codes and types (lowercased) that name an overflow whatever the message.
const LABELS: [&str; 5] = [
    // OpenAI (chat completions and Responses), and servers copying it.
    "context_length_exceeded",
    // Any `*context_length*` code (`model_context_length_exceeded`...).
    "context_length",
    // llama.cpp's `exceed_context_size_error`.
    "exceed_context_size",
    // `model_context_window_exceeded` (OpenAI-compatible gateways).
    "context_window_exceeded",
    // Anthropic's 413 `request_too_large`, when it arrives without a
    // status (inside a stream).
    "request_too_large",
];

/// Wording (lowercased) of an overflow in a message, by server. The first
/// five are the recorded servers'; the rest are other providers' wording
/// (as the original's adapter lists it), kept so their routes recover too.
const PHRASES: [&str; 9] = [
    // OpenAI, vLLM and DeepSeek: "This model's maximum context length is
    // N tokens"; Ollama: "input length exceeds maximum context length",
    // "the input length exceeds the context length"; LM Studio: "greater
    // than the context length (n_keep: N >= n_ctx: M)", "the model is
    // loaded with context length of only N tokens".
    "context length",
    // OpenAI Responses: "Your input exceeds the context window of this
    // model."
    "context window",
    // llama.cpp: "request (N tokens) exceeds the available context size
    // (M tokens)", "the request exceeds the available context size",
    // "input (N tokens) is larger than the max context size (M tokens)";
    // LM Studio's MLX engine: "Context size has been exceeded".
    "context size",
    // Anthropic: "input length and `max_tokens` exceed context limit".
    "context limit",
    // Anthropic: "prompt is too long: N tokens > M maximum".
    "prompt is too long",
    // Amazon Bedrock: "Input is too long for requested model".
    "input is too long",
    // xAI: "This model's maximum prompt length is N".
    "maximum prompt length",
    // Moonshot (Kimi): "exceeded model token limit".
    "exceeded model token limit",
    // Google Gemini: "The input token count (N) exceeds the maximum number
    // of tokens allowed (M)".
    "input token count",
];

/// Whether an error with these `labels` (its code and type, lowercased,
/// joined) and this `message` reports a context overflow.
pub fn is_overflow(labels: &str, message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    LABELS.iter().any(|l| labels.contains(l)) || PHRASES.iter().any(|p| message.contains(p))
}

/// The token counts an overflow states in fields of its own (llama.cpp's
/// `n_prompt_tokens` and `n_ctx`): kept in the failure's message, since
/// llama.cpp's older wording does not repeat them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// The prompt's tokens, as the server counted them.
    pub prompt_tokens: Option<u64>,
    /// The server's context window (per slot, for llama.cpp).
    pub window: Option<u64>,
}

impl Counts {
    /// [`Counts::describe`], unless `message` already states every count
    /// known (llama.cpp's newer wording does).
    pub fn describe_beside(&self, message: &str) -> Option<String> {
        let said = |n: Option<u64>| n.is_none_or(|n| message.contains(&n.to_string()));
        if said(self.prompt_tokens) && said(self.window) {
            return None;
        }
        self.describe()
    }

    /// `the server counted 7117 prompt tokens against a window of 4096`,
    /// or what of it is known; `None` when neither is.
    pub fn describe(&self) -> Option<String> {
        match (self.prompt_tokens, self.window) {
            (Some(p), Some(w)) => Some(format!(
                "the server counted {p} prompt tokens against a window of {w}"
            )),
            (Some(p), None) => Some(format!("the server counted {p} prompt tokens")),
            (None, Some(w)) => Some(format!("the server's window is {w} tokens")),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_alone_or_wording_alone_mark_an_overflow() {
        assert!(is_overflow("400 exceed_context_size_error", "whatever"));
        assert!(is_overflow("", "Prompt is too long: 9 tokens > 8 maximum"));
        assert!(is_overflow("", "Context size has been exceeded."));
        // Neither: a maximum that is not the context's.
        assert!(!is_overflow(
            "string_above_max_length invalid_request_error",
            "Invalid 'messages[1].content': string too long. Expected a string with maximum length 10485760"
        ));
        assert!(!is_overflow(
            "invalid_request_error",
            "max_tokens: 300000 > 64000, which is the maximum allowed number of output tokens"
        ));
    }

    #[test]
    fn counts_are_described_as_far_as_known() {
        let both = Counts {
            prompt_tokens: Some(7117),
            window: Some(4096),
        };
        assert_eq!(
            both.describe().as_deref(),
            Some("the server counted 7117 prompt tokens against a window of 4096")
        );
        assert_eq!(Counts::default().describe(), None);
        // Not said twice.
        let newer = "request (7117 tokens) exceeds the available context size (4096 tokens)";
        assert_eq!(both.describe_beside(newer), None);
        assert!(both
            .describe_beside("the request exceeds the available context size")
            .is_some());
    }
}
