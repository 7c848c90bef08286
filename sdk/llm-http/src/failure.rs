//! A provider's error, as a failure with the harness's code: one mapping
//! for an HTTP error body (by status) and for an `error` payload inside a
//! 200 stream (by the server's code and type).
//!
//! A context overflow is recognized by the codes, types and wording of
//! every common server ([`overflow`]): llama.cpp, vLLM, Ollama, LM Studio,
//! OpenAI (chat completions and Responses), DeepSeek and Anthropic. The
//! recorded bodies are in `testdata/errors/` and `tests/recorded_errors.rs`
//! checks each.

use std::fmt;

use dsh_sdk::vocab::LlmFailure;
use serde::de::{Error, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::lenient::{Label, TokenCount};
use crate::overflow;

/// Failure codes this adapter reports (reference dsh-product §3.1.1).
pub use dsh_sdk::names::llm_failure as code;

/// The most characters of a server's error message a failure keeps.
/// Messages go to the log, the terminal and the model: a server's error is
/// a sentence or two, and a longer one is cut, saying so.
pub const MAX_MESSAGE_CHARS: usize = 2000;

/// The most characters of an error a server sent in a shape this adapter
/// does not read (no message) that the failure quotes.
const UNREAD_ERROR_CHARS: usize = 500;

/// The first `n` characters of `text` when it has more than `n`; `None`
/// when it has no more (it is then whole).
pub fn cut_chars(text: &str, n: usize) -> Option<&str> {
    text.char_indices().nth(n).map(|(end, _)| &text[..end])
}

/// The first [`UNREAD_ERROR_CHARS`] characters of `text`.
fn head(text: &str) -> String {
    cut_chars(text, UNREAD_ERROR_CHARS)
        .unwrap_or(text)
        .to_owned()
}

/// `message`, cut to [`MAX_MESSAGE_CHARS`] characters with a note of its
/// whole length when longer.
fn cut_message(message: &str) -> String {
    match cut_chars(message, MAX_MESSAGE_CHARS) {
        None => message.to_owned(),
        Some(cut) => format!("{cut}… (cut: the message was {} bytes)", message.len()),
    }
}

/// A body that may carry `{"error": ...}`. The error's shape varies by
/// server, so it is kept as its JSON text and read by
/// [`ProviderError::of`].
#[derive(Deserialize)]
struct ErrorEnvelope<'a> {
    /// The error, absent or `null` when there is none.
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
    /// `"error"` when the body itself is the error (vLLM before 0.10:
    /// `{"object": "error", "message", "type", "code"}`).
    #[serde(default)]
    object: Label,
}

/// The shapes an `error` comes in: a bare string is its message; an
/// object `{message, code?, type?}` (llama.cpp's overflow adds
/// `n_prompt_tokens` and `n_ctx`; other keys skipped); anything else has
/// no message.
enum SentError {
    Text(String),
    Object {
        message: Label,
        code: Label,
        kind: Label,
        counts: overflow::Counts,
    },
    Other,
}

impl<'de> Deserialize<'de> for SentError {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Read;
        impl<'de> Visitor<'de> for Read {
            type Value = SentError;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a provider error")
            }
            fn visit_str<E: Error>(self, v: &str) -> Result<SentError, E> {
                Ok(SentError::Text(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SentError, A::Error> {
                let (mut message, mut code, mut kind) = Default::default();
                let mut counts = overflow::Counts::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "message" => message = map.next_value()?,
                        "code" => code = map.next_value()?,
                        "type" => kind = map.next_value()?,
                        "n_prompt_tokens" => {
                            counts.prompt_tokens = map.next_value::<TokenCount>()?.0
                        }
                        "n_ctx" => counts.window = map.next_value::<TokenCount>()?.0,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(SentError::Object {
                    message,
                    code,
                    kind,
                    counts,
                })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SentError, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(SentError::Other)
            }
            fn visit_u64<E: Error>(self, _: u64) -> Result<SentError, E> {
                Ok(SentError::Other)
            }
            fn visit_i64<E: Error>(self, _: i64) -> Result<SentError, E> {
                Ok(SentError::Other)
            }
            fn visit_f64<E: Error>(self, _: f64) -> Result<SentError, E> {
                Ok(SentError::Other)
            }
            fn visit_bool<E: Error>(self, _: bool) -> Result<SentError, E> {
                Ok(SentError::Other)
            }
            fn visit_unit<E: Error>(self) -> Result<SentError, E> {
                Ok(SentError::Other)
            }
        }
        d.deserialize_any(Read)
    }
}

/// A server's error, as the failure reports it.
pub struct ProviderError {
    message: String,
    code: Option<String>,
    kind: Option<String>,
    /// The token counts an overflow states in fields of its own.
    counts: overflow::Counts,
}

impl ProviderError {
    /// Reads the `error` a server sent (its JSON text). One without a
    /// message (or of another shape) is quoted whole, cut short.
    pub fn of(error: &RawValue) -> ProviderError {
        let unread = || ProviderError::text(head(error.get()));
        match serde_json::from_str::<SentError>(error.get()) {
            Ok(SentError::Text(message)) => ProviderError::text(message),
            Ok(SentError::Object {
                message: Label(Some(message)),
                code,
                kind,
                counts,
            }) => ProviderError {
                message,
                code: code.0,
                kind: kind.0,
                counts,
            },
            Ok(SentError::Object {
                code, kind, counts, ..
            }) => ProviderError {
                code: code.0,
                kind: kind.0,
                counts,
                ..unread()
            },
            Ok(SentError::Other) | Err(_) => unread(),
        }
    }

    /// An error that is only its message.
    fn text(message: String) -> ProviderError {
        ProviderError {
            message,
            code: None,
            kind: None,
            counts: overflow::Counts::default(),
        }
    }

    /// The message the failure keeps: the server's, cut to
    /// [`MAX_MESSAGE_CHARS`], with the token counts an overflow stated in
    /// fields of their own (llama.cpp's `n_prompt_tokens` and `n_ctx`,
    /// which its older wording does not repeat).
    fn said(&self) -> String {
        let mut said = cut_message(&self.message);
        if let Some(counts) = self.counts.describe_beside(&self.message) {
            said.push_str(&format!(" ({counts})"));
        }
        said
    }

    /// `(code: x, type: y)`, or "" when the server sent neither.
    fn tags(&self) -> String {
        let tags: Vec<String> = [("code", &self.code), ("type", &self.kind)]
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}: {v}")))
            .collect();
        if tags.is_empty() {
            String::new()
        } else {
            format!(" ({})", tags.join(", "))
        }
    }

    /// The server's code and type, lowercased, for matching.
    fn labels(&self) -> String {
        [&self.code, &self.kind]
            .into_iter()
            .flatten()
            .map(|s| s.to_ascii_lowercase())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// A context overflow, by its code or type or by the wording servers
    /// use ([`overflow`]).
    fn is_context_overflow(&self) -> bool {
        overflow::is_overflow(&self.labels(), &self.message)
    }

    /// A numeric `code` that is an HTTP error status (vLLM sends those).
    fn status_code(&self) -> Option<u16> {
        self.code
            .as_deref()
            .and_then(|c| c.parse::<u16>().ok())
            .filter(|s| (400..=599).contains(s))
    }
}

/// The harness code for a provider error: by HTTP status when the server
/// sent one (an error body, or a numeric `code` mid-stream), else by the
/// server's code and type. The one mapping for both routes.
fn classify(status: Option<u16>, error: &ProviderError) -> String {
    match status.or_else(|| error.status_code()) {
        Some(401 | 403) => code::AUTH.to_owned(),
        Some(402) => code::QUOTA.to_owned(),
        Some(429) => code::RATE_LIMIT.to_owned(),
        // A request too large for the server (Anthropic's
        // `request_too_large`, a proxy's body limit) is a history too large:
        // compacting it is the remedy, as for any overflow.
        Some(413) => code::CONTEXT_WINDOW_EXCEEDED.to_owned(),
        Some(400 | 422) if error.is_context_overflow() => code::CONTEXT_WINDOW_EXCEEDED.to_owned(),
        Some(400 | 422) => code::INVALID_REQUEST.to_owned(),
        Some(500..=599) => code::SERVER.to_owned(),
        Some(s) => format!("HTTP_{s}"),
        None => classify_labels(error).to_owned(),
    }
}

/// The code for an error without a status, from what the server called it
/// (its code and type, not its prose, except for the overflow wording).
fn classify_labels(error: &ProviderError) -> &'static str {
    let labels = error.labels();
    let has = |needles: &[&str]| needles.iter().any(|n| labels.contains(n));
    if error.is_context_overflow() {
        code::CONTEXT_WINDOW_EXCEEDED
    } else if has(&["rate_limit", "too_many_requests"]) {
        code::RATE_LIMIT
    } else if has(&["quota", "insufficient_balance"]) {
        code::QUOTA
    } else if has(&["invalid_api_key", "authentication", "permission"]) {
        code::AUTH
    } else {
        // Overloaded, internal and unknown errors alike: the server failed.
        code::SERVER
    }
}

/// Maps an HTTP error response to a failure: `body` is what was read of
/// its body, `cut` why the reading stopped early (see
/// [`crate::error_body`]), said at the end of the message. A body that is
/// not a JSON `{"error": ...}` (nor an error itself, `"object": "error"`)
/// is the message itself, cut short.
pub fn http_failure(status: u16, body: &str, cut: Option<&str>) -> LlmFailure {
    let error = match serde_json::from_str::<ErrorEnvelope<'_>>(body) {
        Ok(ErrorEnvelope { error: Some(e), .. }) => ProviderError::of(e),
        Ok(ErrorEnvelope {
            error: None,
            object: Label(Some(object)),
        }) if object == "error" => match serde_json::from_str::<&RawValue>(body) {
            Ok(whole) => ProviderError::of(whole),
            Err(_) => ProviderError::text(head(body)),
        },
        _ => ProviderError::text(head(body)),
    };
    let mut message = format!("HTTP {status}: {}", error.said());
    if let Some(cut) = cut {
        message.push_str(&format!(" ({cut})"));
    }
    let mut f = LlmFailure::new(&classify(Some(status), &error), message);
    f.status = Some(status);
    f
}

/// Maps an `error` payload sent inside a 200 stream to a failure that keeps
/// the server's message, code and type.
pub fn stream_failure(error: &RawValue) -> LlmFailure {
    let error = ProviderError::of(error);
    LlmFailure::new(
        &classify(None, &error),
        format!(
            "the provider reported an error mid-stream: {}{}",
            error.said(),
            error.tags()
        ),
    )
}

/// The `error` of a stream event's text, read alone (every other field
/// skipped unread): the error of an event whose other fields this adapter
/// cannot read still keeps its code (a rate limit stays retryable).
/// `None` when the event has no error, or is not JSON.
pub fn event_error(data: &str) -> Option<&RawValue> {
    serde_json::from_str::<ErrorEnvelope<'_>>(data)
        .ok()
        .and_then(|envelope| envelope.error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn http_errors_keep_their_status_mapping() {
        let body = |m: &str| json!({"error": {"message": m}}).to_string();
        for (status, message, want) in [
            (401, "bad key", code::AUTH),
            (402, "pay", code::QUOTA),
            (429, "slow down", code::RATE_LIMIT),
            (
                400,
                "maximum context length is 65536",
                code::CONTEXT_WINDOW_EXCEEDED,
            ),
            (400, "bad field", code::INVALID_REQUEST),
            (503, "busy", code::SERVER),
            (418, "teapot", "HTTP_418"),
        ] {
            let f = http_failure(status, &body(message), None);
            assert_eq!((f.code.as_str(), f.status), (want, Some(status)));
            assert_eq!(f.message, format!("HTTP {status}: {message}"));
        }
        // The code alone marks an overflow too; a non-JSON body is the detail.
        let f = http_failure(
            400,
            &json!({"error": {"message": "too long", "code": "context_length_exceeded"}})
                .to_string(),
            None,
        );
        assert_eq!(f.code, code::CONTEXT_WINDOW_EXCEEDED);
        assert_eq!(
            http_failure(502, "<html>bad gateway</html>", None).message,
            "HTTP 502: <html>bad gateway</html>"
        );
    }

    #[test]
    fn an_error_of_another_shape_is_quoted_cut_short() {
        // No message: the error itself is the message.
        assert_eq!(
            http_failure(500, r#"{"error":{"code":7}}"#, None).message,
            r#"HTTP 500: {"code":7}"#
        );
        assert_eq!(
            http_failure(500, r#"{"error":[1,2]}"#, None).message,
            "HTTP 500: [1,2]"
        );
        // A JSON body without `error`, or not an object, is the message.
        assert_eq!(
            http_failure(500, r#"{"detail":"x"}"#, None).message,
            r#"HTTP 500: {"detail":"x"}"#
        );
        let long = format!("[{}]", "0,".repeat(1000));
        let f = http_failure(500, &format!(r#"{{"error":{long}}}"#), None);
        assert_eq!(
            f.message.chars().count(),
            "HTTP 500: ".len() + UNREAD_ERROR_CHARS
        );
    }

    #[test]
    fn a_long_error_message_is_cut_saying_so() {
        let long = "M".repeat(50_000);
        let body = json!({"error": {"message": long, "code": "x"}}).to_string();
        let f = http_failure(400, &body, None);
        assert_eq!(
            f.message,
            format!(
                "HTTP 400: {}… (cut: the message was 50000 bytes)",
                "M".repeat(MAX_MESSAGE_CHARS)
            )
        );
        // A short one is whole; a body read only in part says why.
        assert_eq!(
            http_failure(500, "{\"err", Some("the body broke after 5 bytes: reset")).message,
            "HTTP 500: {\"err (the body broke after 5 bytes: reset)"
        );
    }
}
