//! What a run came to: the last assistant text, the token usage of its
//! steps, why its final turn ended, and how that is printed: the text
//! answer, the `result` line of `--output jsonl`, or the error for stderr
//! (with the first cause when the failing request had been retried).

use dsh_sdk::vocab::records::{AssistantMessage, TurnEndReason};
use dsh_sdk::vocab::retry_trail::RetryTrail;
use dsh_sdk::vocab::{event, SessionEvent, TokenUsage};
use dsh_sdk::{codes, Error, Result};
use serde::Serialize;

/// The outcome of a run.
#[derive(Debug, PartialEq)]
pub struct Outcome {
    /// The last non-blank assistant text (empty when there was none).
    pub output: String,
    /// The usage of every step of the run, summed.
    pub usage: TokenUsage,
    /// Why the final turn ended (`None`: no turn ran).
    pub reason: Option<TurnEndReason>,
    /// The retries of the request running when the run ended.
    pub retries: RetryTrail,
    /// Why the retries cannot be told (a malformed `llm/retry`: said on
    /// stderr as it was logged, and with the failure it would explain).
    pub retries_unreadable: Option<Error>,
}

/// The `result` line of `--output jsonl`, after the session events.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResultLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    session_id: &'a str,
    output: &'a str,
    reason: &'a Option<TurnEndReason>,
    usage: &'a TokenUsage,
}

impl Outcome {
    /// The outcome of the run whose events are `events` and whose final
    /// turn ended for `reason` (as `whenIdle` answers it: null when no
    /// turn ran). A malformed `assistant/message` is `SESSION_CORRUPT`
    /// naming it, a malformed reason `INVALID_PAYLOAD`.
    ///
    /// The `llm/retry` records are followed too, so a failure after
    /// retries can name its first cause. A malformed one does not fail a
    /// run whose answer is whole: a failure says it could not tell its
    /// retries, and why.
    pub fn read(events: &[SessionEvent], reason: &Option<TurnEndReason>) -> Result<Outcome> {
        let mut output = String::new();
        let mut usage = TokenUsage::default();
        let mut retries = RetryTrail::default();
        let mut retries_unreadable = None;
        for e in events {
            if retries_unreadable.is_none() {
                retries_unreadable = retries.follow(e).err();
            }
            if e.kind != event::ASSISTANT_MESSAGE {
                continue;
            }
            let said: AssistantMessage = e.data_as()?;
            let text = said.message.text();
            if !text.trim().is_empty() {
                output = text;
            }
            if let Some(step) = &said.usage {
                usage.add(step);
            }
        }
        let reason = reason.clone();
        Ok(Outcome {
            output,
            usage,
            reason,
            retries,
            retries_unreadable,
        })
    }

    /// The final turn completed (the run exits 0).
    pub fn completed(&self) -> bool {
        self.reason == Some(TurnEndReason::Completed)
    }

    /// The `result` line of `--output jsonl` for session `session_id`
    /// (without its newline).
    pub fn result_line(&self, session_id: &str) -> serde_json::Result<String> {
        serde_json::to_string(&ResultLine {
            kind: "result",
            session_id,
            output: &self.output,
            reason: &self.reason,
            usage: &self.usage,
        })
    }

    /// The code and message for stderr when the final turn did not
    /// complete: a failure's own, else the end's kind. A failure after
    /// retries says how many and, when it differs, the first cause:
    /// `HTTP 400: prompt too long (after 2 retries; first: SERVER: HTTP
    /// 503: Loading model)`.
    pub fn failure(&self) -> (String, String) {
        match &self.reason {
            Some(TurnEndReason::Error { error }) => {
                let message = match (&self.retries_unreadable, self.retries.note(error)) {
                    (Some(e), _) => format!(
                        "{} (its retries cannot be told: {}: {})",
                        error.message, e.code, e.message
                    ),
                    (None, Some(note)) => format!("{} ({note})", error.message),
                    (None, None) => error.message.clone(),
                };
                (error.code.clone(), message)
            }
            Some(reason) => {
                let kind = reason.kind();
                (
                    kind.to_ascii_uppercase().replace('-', "_"),
                    format!("the turn ended {kind}"),
                )
            }
            None => (
                codes::UNKNOWN.to_owned(),
                "the agent did not run".to_owned(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::names::code;
    use serde_json::json;
    use serde_json::Value;

    fn reason(v: Value) -> Option<TurnEndReason> {
        serde_json::from_value(v).unwrap()
    }

    fn said(seq: u64, text: &str, usage: Value) -> SessionEvent {
        let data = json!({"turn": 1, "step": seq, "message": {"id": "a", "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "source": {"kind": "model", "provider": "p", "model": "m"}}, "usage": usage});
        SessionEvent::new(event::ASSISTANT_MESSAGE, seq, data)
    }

    #[test]
    fn the_result_line_sums_every_count_cache_reads_included() {
        let events = [
            said(
                1,
                "Looking.",
                json!({"inputTokens": 10, "outputTokens": 2, "cacheReadTokens": 8}),
            ),
            said(
                2,
                "Done.",
                json!({"inputTokens": 2, "outputTokens": 3, "cacheReadTokens": 16}),
            ),
            said(3, " ", json!({"inputTokens": 1, "outputTokens": 0})),
        ];
        let outcome = Outcome::read(&events, &reason(json!({"kind": "completed"}))).unwrap();
        assert!(outcome.completed());
        assert_eq!(
            outcome.result_line("s").unwrap(),
            r#"{"type":"result","sessionId":"s","output":"Done.","reason":{"kind":"completed"},"usage":{"inputTokens":13,"outputTokens":5,"cacheReadTokens":24}}"#
        );
    }

    #[test]
    fn a_turn_that_did_not_complete_says_why() {
        let failed = json!({"kind": "error", "error": {"message": "bad key", "code": "AUTH"}});
        let outcome = Outcome::read(&[], &reason(failed)).unwrap();
        assert_eq!(outcome.failure(), ("AUTH".into(), "bad key".into()));
        let cut = Outcome::read(&[], &reason(json!({"kind": "max-tokens"}))).unwrap();
        assert!(!cut.completed());
        assert_eq!(
            cut.failure(),
            ("MAX_TOKENS".into(), "the turn ended max-tokens".into())
        );
        let none = Outcome::read(&[], &None).unwrap();
        assert_eq!(none.failure().0, codes::UNKNOWN);
        assert_eq!(
            none.result_line("s").unwrap(),
            r#"{"type":"result","sessionId":"s","output":"","reason":null,"usage":{"inputTokens":0,"outputTokens":0}}"#
        );
    }

    fn retry(seq: u64, n: u32, code: &str, message: &str) -> SessionEvent {
        let data = json!({"retryId": "r", "turn": 1, "step": 1, "provider": "p",
            "mode": "normal", "retry": n, "maxRetries": 2, "delayMs": 1,
            "failure": {"message": message, "code": code}});
        SessionEvent::new(event::LLM_RETRY, seq, data)
    }

    #[test]
    fn a_failure_after_retries_names_the_first_cause() {
        let events = [
            SessionEvent::new(event::STEP_START, 1, json!({"turn": 1, "step": 1})),
            retry(2, 1, "SERVER", "HTTP 503: Loading model"),
            retry(3, 2, "SERVER", "HTTP 503: Loading model"),
        ];
        let failed = json!({"kind": "error", "error": {"message": "HTTP 400: too long",
            "code": "CONTEXT_WINDOW_EXCEEDED"}});
        let outcome = Outcome::read(&events, &reason(failed)).unwrap();
        assert_eq!(
            outcome.failure(),
            (
                "CONTEXT_WINDOW_EXCEEDED".into(),
                "HTTP 400: too long (after 2 retries; first: SERVER: HTTP 503: Loading model)"
                    .into()
            )
        );
        // Retries of an earlier step that then answered say nothing.
        let answered = [
            retry(2, 1, "SERVER", "busy"),
            said(3, "ok", json!({"inputTokens": 1, "outputTokens": 1})),
        ];
        let auth = json!({"kind": "error", "error": {"message": "bad key", "code": "AUTH"}});
        let outcome = Outcome::read(&answered, &reason(auth.clone())).unwrap();
        assert_eq!(outcome.failure(), ("AUTH".into(), "bad key".into()));
        // A malformed retry record: the answer still stands, a failure
        // says why its retries cannot be told.
        let flat = SessionEvent::new(event::LLM_RETRY, 5, json!({"attempt": 1, "code": "SERVER"}));
        let done = [
            flat.clone(),
            said(6, "ok", json!({"inputTokens": 1, "outputTokens": 1})),
        ];
        let outcome = Outcome::read(&done, &reason(json!({"kind": "completed"}))).unwrap();
        assert_eq!(outcome.output, "ok");
        let outcome = Outcome::read(&[flat], &reason(auth)).unwrap();
        let (code, message) = outcome.failure();
        assert_eq!(code, "AUTH");
        assert!(
            message.starts_with(
                "bad key (its retries cannot be told: SESSION_CORRUPT: session event 5 (llm/retry)"
            ),
            "{message}"
        );
    }

    #[test]
    fn malformed_data_is_a_clear_error_not_a_zero() {
        // A usage count that is not a number was read as 0 before.
        let bad = said(4, "x", json!({"inputTokens": "12", "outputTokens": 5}));
        let err = Outcome::read(&[bad], &reason(json!({"kind": "completed"}))).unwrap_err();
        assert_eq!(err.code, code::SESSION_CORRUPT);
        assert!(
            err.message.contains("session event 4 (assistant/message)"),
            "{}",
            err.message
        );
        assert!(err.message.contains("usage.inputTokens"), "{}", err.message);
        // An error end without its error (it was `UNKNOWN` with no
        // message) is not a reason at all: `whenIdle`'s reply is typed.
        assert!(serde_json::from_value::<TurnEndReason>(json!({"kind": "error"})).is_err());
    }
}
