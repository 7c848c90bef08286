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

/// The failure code of an answer the provider declined to give: the
/// model refused (Anthropic's `stop_reason: refusal`), or the server
/// turned the prompt away by its policy (`invalid_prompt`, a
/// `*_policy_*` code, `content_filter`). Not retried: asking again gets
/// the same refusal; the user rephrases or starts over.
pub const REFUSAL: &str = "REFUSAL";

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

/// The most characters of a server's reason (an unknown `finish_reason`,
/// `stop_reason` or `incomplete_details.reason`) a failure quotes.
pub const REASON_CHARS: usize = 100;

/// A server's reason as a failure quotes it: control characters escaped,
/// cut to [`REASON_CHARS`] characters (it is the server's text, and the
/// failure goes to the log and the terminal).
pub fn quoted_reason(reason: &str) -> String {
    match cut_chars(reason, REASON_CHARS) {
        None => format!("{reason:?}"),
        Some(cut) => format!("{cut:?}… (cut: {} bytes in all)", reason.len()),
    }
}

/// What the provider sent that is not an event the adapter reads: bad
/// JSON, or a field of the wrong type (`MALFORMED_RESPONSE`, saying which).
pub fn unreadable(e: &serde_json::Error) -> LlmFailure {
    let message = if e.is_data() {
        format!("the provider sent a stream event this adapter cannot read: {e}")
    } else {
        format!("the provider sent malformed JSON: {e}")
    };
    LlmFailure::new(code::MALFORMED_RESPONSE, message)
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

    /// An account out of quota or credit, by its code or type
    /// ([`QUOTA`]).
    fn is_quota(&self) -> bool {
        let labels = self.labels();
        QUOTA.iter().any(|n| labels.contains(n))
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
        // A 429 is a rate limit, unless the server says the account is
        // out of quota or credit (OpenAI's `insufficient_quota`): waiting
        // does not help then, and retrying only spends the retries.
        Some(429) if error.is_quota() => code::QUOTA.to_owned(),
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
    } else if error.is_quota() {
        code::QUOTA
    } else if has(&["rate_limit", "too_many_requests"]) {
        code::RATE_LIMIT
    } else if has(&["invalid_api_key", "authentication", "permission"]) {
        code::AUTH
    } else if has(&REFUSED) {
        // The same prompt is refused again: not retried.
        REFUSAL
    } else if has(&INVALID) {
        // The same request fails again: not retried.
        code::INVALID_REQUEST
    } else {
        // Overloaded, internal and unknown errors alike: the server failed.
        code::SERVER
    }
}

/// The labels (code or type) of an account out of quota or credit:
/// OpenAI's `insufficient_quota`, DeepSeek's `insufficient_balance`,
/// billing and spend limits, Anthropic's credit balance.
const QUOTA: [&str; 5] = [
    "quota",
    "insufficient_balance",
    "billing",
    "spend_limit",
    "credit_balance",
];

/// The labels of a prompt the server refuses by its policy: OpenAI's
/// `invalid_prompt` and `*_policy_*` codes, a `content_filter`.
const REFUSED: [&str; 3] = ["invalid_prompt", "policy", "content_filter"];

/// The labels of a request the server cannot serve as it is: an image it
/// cannot read (`image_*`), Anthropic's `invalid_request_error` and
/// `not_found_error` sent mid-stream.
const INVALID: [&str; 3] = ["image_", "invalid_request", "not_found"];

/// An HTTP error as a failure, with the server's own code and type (for
/// an adapter that answers some refusals by changing its request).
#[derive(Debug)]
pub struct HttpError {
    /// The failure.
    pub failure: LlmFailure,
    /// The server's `code`, as sent.
    pub code: Option<String>,
    /// The server's `type`, as sent.
    pub kind: Option<String>,
}

impl From<LlmFailure> for HttpError {
    /// A failure without a server's error (a timeout, a broken
    /// connection).
    fn from(failure: LlmFailure) -> HttpError {
        HttpError {
            failure,
            code: None,
            kind: None,
        }
    }
}

impl HttpError {
    /// Whether the server's code or type is `label` (case ignored).
    pub fn is(&self, label: &str) -> bool {
        [&self.code, &self.kind]
            .into_iter()
            .flatten()
            .any(|l| l.eq_ignore_ascii_case(label))
    }
}

/// Maps an HTTP error response to a failure: `body` is what was read of
/// its body, `cut` why the reading stopped early (see
/// [`crate::error_body`]), said at the end of the message. A body that is
/// not a JSON `{"error": ...}` (nor an error itself, `"object": "error"`)
/// is the message itself, cut short.
pub fn http_failure(status: u16, body: &str, cut: Option<&str>) -> LlmFailure {
    http_error(status, body, cut).failure
}

/// [`http_failure`], keeping the server's code and type beside it.
pub fn http_error(status: u16, body: &str, cut: Option<&str>) -> HttpError {
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
    let mut failure = LlmFailure::new(&classify(Some(status), &error), message);
    failure.status = Some(status);
    HttpError {
        failure,
        code: error.code,
        kind: error.kind,
    }
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
    fn a_reason_is_quoted_escaped_and_cut() {
        assert_eq!(quoted_reason("odd\n"), r#""odd\n""#);
        let long = "x".repeat(REASON_CHARS + 5);
        let q = quoted_reason(&long);
        assert!(
            q.starts_with(&format!("{:?}", "x".repeat(REASON_CHARS)))
                && q.ends_with(&format!("… (cut: {} bytes in all)", long.len())),
            "{q}"
        );
    }

    #[test]
    fn an_unreadable_event_says_whether_it_was_json() {
        let bad_json = serde_json::from_str::<serde_json::Value>("{\"a\":").unwrap_err();
        let f = unreadable(&bad_json);
        assert_eq!(f.code, code::MALFORMED_RESPONSE);
        assert!(
            f.message.starts_with("the provider sent malformed JSON: "),
            "{f:?}"
        );
        let mistyped = serde_json::from_str::<u64>("\"5\"").unwrap_err();
        assert!(unreadable(&mistyped)
            .message
            .starts_with("the provider sent a stream event this adapter cannot read: "));
    }

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

    /// An Anthropic error body (`{"type":"error","error":{type,message}}`).
    fn anthropic(kind: &str, message: &str) -> String {
        json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"})
            .to_string()
    }

    #[test]
    fn anthropics_http_errors_map_by_status_and_its_overflow_is_recognized() {
        for (status, kind, want) in [
            (401, "authentication_error", code::AUTH),
            (403, "permission_error", code::AUTH),
            (429, "rate_limit_error", code::RATE_LIMIT),
            (500, "api_error", code::SERVER),
            (529, "overloaded_error", code::SERVER),
            // A body over the API's size limit is a history too large:
            // compacting it is the remedy, as for an overflow.
            (413, "request_too_large", code::CONTEXT_WINDOW_EXCEEDED),
            (400, "invalid_request_error", code::INVALID_REQUEST),
        ] {
            let f = http_failure(status, &anthropic(kind, "why"), None);
            assert_eq!((f.code.as_str(), f.status), (want, Some(status)), "{kind}");
            assert_eq!(f.message, format!("HTTP {status}: why"));
        }
        let f = http_failure(
            400,
            &anthropic(
                "invalid_request_error",
                "prompt is too long: 208310 tokens > 200000 maximum",
            ),
            None,
        );
        assert_eq!(f.code, code::CONTEXT_WINDOW_EXCEEDED, "{f:?}");
        // OpenAI's Responses overflow, by its code alone.
        let body = json!({"error": {"message": "Your input exceeds the context window of this model.",
                                    "type": "invalid_request_error", "param": "input",
                                    "code": "context_length_exceeded"}});
        let f = http_failure(400, &body.to_string(), None);
        assert_eq!(f.code, code::CONTEXT_WINDOW_EXCEEDED, "{f:?}");
    }

    #[test]
    fn a_429_out_of_quota_is_quota_not_a_rate_limit() {
        // OpenAI answers a spent account with 429 `insufficient_quota`:
        // retrying it only spends the retries.
        let body = |code: &str, kind: &str| {
            json!({"error": {"message": "You exceeded your current quota.", "type": kind, "code": code}})
                .to_string()
        };
        for (code_, kind) in [
            ("insufficient_quota", "insufficient_quota"),
            ("billing_hard_limit_reached", "invalid_request_error"),
            ("spend_limit_reached", "requests"),
            ("x", "credit_balance_too_low"),
        ] {
            let f = http_failure(429, &body(code_, kind), None);
            assert_eq!(f.code, code::QUOTA, "{code_} {kind}");
        }
        let f = http_failure(429, &body("rate_limit_exceeded", "requests"), None);
        assert_eq!(f.code, code::RATE_LIMIT);
        assert!(!dsh_sdk::vocab::RETRYABLE_CODES.contains(&code::QUOTA));
    }

    #[test]
    fn errors_that_fail_again_mid_stream_are_not_server_errors() {
        let stream = |error: serde_json::Value| {
            let raw = serde_json::value::to_raw_value(&error).unwrap();
            stream_failure(&raw).code
        };
        // Refused by the server's policy: the same prompt is refused again.
        for c in [
            "invalid_prompt",
            "cyber_policy_violation",
            "content_policy_violation",
            "content_filter",
        ] {
            assert_eq!(stream(json!({"code": c, "message": "no"})), REFUSAL, "{c}");
        }
        // A request the server cannot serve as it is.
        for (c, kind) in [
            ("image_parse_error", "x"),
            ("x", "invalid_request_error"),
            ("x", "not_found_error"),
        ] {
            assert_eq!(
                stream(json!({"code": c, "type": kind, "message": "bad"})),
                code::INVALID_REQUEST,
                "{c} {kind}"
            );
        }
        // An overflow stays an overflow, a quota a quota, an overload a
        // server error (retried).
        assert_eq!(
            stream(json!({"code": "context_length_exceeded", "type": "invalid_request_error"})),
            code::CONTEXT_WINDOW_EXCEEDED
        );
        assert_eq!(stream(json!({"code": "insufficient_quota"})), code::QUOTA);
        assert_eq!(
            stream(json!({"type": "overloaded_error", "message": "Overloaded"})),
            code::SERVER
        );
        for c in [REFUSAL, code::INVALID_REQUEST] {
            assert!(!dsh_sdk::vocab::RETRYABLE_CODES.contains(&c), "{c}");
        }
    }

    #[test]
    fn an_http_error_keeps_the_servers_code_and_type() {
        let body = json!({"error": {"message": "The encrypted content could not be verified.",
                                    "type": "invalid_request_error", "code": "invalid_encrypted_content"}});
        let e = http_error(400, &body.to_string(), None);
        assert!(e.is("invalid_encrypted_content") && e.is("INVALID_REQUEST_ERROR"));
        assert!(!e.is("invalid_encrypted"));
        assert_eq!(e.failure.code, code::INVALID_REQUEST);
        assert!(!HttpError::from(LlmFailure::new(code::TIMEOUT, "t")).is("t"));
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
