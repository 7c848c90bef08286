//! The refusals a request answers by leaving out what the server refused,
//! and sending again once ([`crate::request::Fallback`]):
//!
//! - HTTP 400 `invalid_encrypted_content` (or wording about encrypted
//!   content it cannot read): the reasoning items it was sent are not its
//!   own (written by another model, another organization, or a server
//!   restarted with other keys). Sent again without them; the session is
//!   not stuck on them.
//! - HTTP 400 "Encrypted content is not supported with this model" (or
//!   "… 'reasoning.effort' is not supported with this model"): the model
//!   does not reason. Sent again without reasoning, and the adapter
//!   remembers it for the model's later requests.

use dsh_llm_http::failure::HttpError;

use crate::request::Fallback;

/// OpenAI's code for reasoning items it cannot decrypt.
const INVALID_ENCRYPTED_CONTENT: &str = "invalid_encrypted_content";

/// What to leave out in the one retry `e` calls for, after a try that
/// left out `tried`; `None` when `e` is not such a refusal (or the retry
/// was made).
pub(crate) fn fallback_for(e: &HttpError, tried: Fallback) -> Option<Fallback> {
    if e.failure.status != Some(400) {
        return None;
    }
    let message = e.failure.message.to_ascii_lowercase();
    let unsupported = message.contains("not supported with this model")
        && (message.contains("encrypted content") || message.contains("reasoning"));
    let unreadable =
        e.is(INVALID_ENCRYPTED_CONTENT) || (message.contains("encrypted content") && !unsupported);
    match tried {
        Fallback::Full | Fallback::WithoutEncrypted if unsupported => {
            Some(Fallback::WithoutReasoning)
        }
        Fallback::Full if unreadable => Some(Fallback::WithoutEncrypted),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_llm_http::failure::http_error;
    use serde_json::json;

    fn error(status: u16, code: &str, message: &str) -> HttpError {
        let body = json!({"error": {"message": message, "type": "invalid_request_error",
                                    "param": null, "code": code}});
        http_error(status, &body.to_string(), None)
    }

    #[test]
    fn unreadable_reasoning_is_left_out_once() {
        let e = error(
            400,
            "invalid_encrypted_content",
            "The encrypted content for item rs_1 could not be verified.",
        );
        assert_eq!(
            fallback_for(&e, Fallback::Full),
            Some(Fallback::WithoutEncrypted)
        );
        assert_eq!(fallback_for(&e, Fallback::WithoutEncrypted), None);
        // vLLM's words for encrypted items it cannot take.
        let e = error(400, "", "Encrypted content is not supported.");
        assert_eq!(
            fallback_for(&e, Fallback::Full),
            Some(Fallback::WithoutEncrypted)
        );
    }

    #[test]
    fn a_model_that_does_not_reason_is_asked_again_without_reasoning() {
        for message in [
            "Encrypted content is not supported with this model.",
            "Unsupported parameter: 'reasoning.effort' is not supported with this model.",
        ] {
            let e = error(400, "unsupported_parameter", message);
            for tried in [Fallback::Full, Fallback::WithoutEncrypted] {
                assert_eq!(
                    fallback_for(&e, tried),
                    Some(Fallback::WithoutReasoning),
                    "{message}"
                );
            }
            assert_eq!(fallback_for(&e, Fallback::WithoutReasoning), None);
        }
    }

    #[test]
    fn other_errors_are_not_retried_here() {
        for e in [
            error(
                400,
                "context_length_exceeded",
                "Your input exceeds the context window.",
            ),
            error(500, "invalid_encrypted_content", "odd"),
            error(400, "invalid_value", "bad tool schema"),
        ] {
            assert_eq!(fallback_for(&e, Fallback::Full), None, "{e:?}");
        }
    }
}
