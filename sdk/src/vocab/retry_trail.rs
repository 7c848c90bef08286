//! The retries of the model request a turn is on, as its `llm/retry`
//! records tell them, and how a front end says them to a person.
//!
//! A request that fails after retries ends its turn with the last failure
//! (`turn/end {kind: "error"}`), which may hide the cause: a model server
//! answers 503 while it loads, then the retried request overflows the
//! window. The first failure is in the chain's first `llm/retry` record (the
//! original logs it there, and its web front end reads the chain from
//! those records too), so front ends fold the log through [`RetryTrail`]
//! and add [`RetryTrail::note`] to the final error:
//! `SERVER: HTTP 503: busy (after 2 retries; first: RATE_LIMIT: slow down)`.
//! [`notice`] is the one wording of a retry while it waits.

use serde::{Deserialize, Serialize};

use super::records::LlmRetry;
use super::{event, LlmFailure, SessionEvent};

/// The longest failure message a note or a notice quotes, in characters
/// (an error body can be long; the log keeps it whole).
const QUOTED_CHARS: usize = 200;

/// The retry chain of the request running now (none when the request was
/// not retried). Serializable: the chat hands it over on a reload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryTrail {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    chain: Option<Chain>,
}

/// One request's retries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chain {
    /// The chain's `retryId` (one per request: agent, turn, step, route).
    retry_id: String,
    /// The highest retry number seen.
    retries: u32,
    /// The failure the chain's first retry answered.
    first: LlmFailure,
}

impl RetryTrail {
    /// Follows one logged event: an `llm/retry` extends the chain (a new
    /// `retryId` starts another); a turn or step starting, or an answer
    /// logged, ends it (the request it retried succeeded, or is no longer
    /// the one running). A malformed `llm/retry` is `SESSION_CORRUPT`
    /// naming the event and the field; every other event is judged by its
    /// type alone (its data is not read).
    pub fn follow(&mut self, e: &SessionEvent) -> crate::Result<()> {
        if e.kind == event::LLM_RETRY {
            self.retried(&e.data_as::<LlmRetry>()?);
        } else {
            self.saw(&e.kind);
        }
        Ok(())
    }

    /// An `llm/retry` record, already read.
    pub fn retried(&mut self, retry: &LlmRetry) {
        match &mut self.chain {
            Some(chain) if chain.retry_id == retry.retry_id => {
                chain.retries = chain.retries.max(retry.retry);
            }
            _ => {
                self.chain = Some(Chain {
                    retry_id: retry.retry_id.clone(),
                    retries: retry.retry,
                    first: retry.failure.clone(),
                })
            }
        }
    }

    /// An event of type `kind` other than `llm/retry` was logged.
    pub fn saw(&mut self, kind: &str) {
        if matches!(
            kind,
            event::TURN_START | event::STEP_START | event::ASSISTANT_MESSAGE
        ) {
            self.chain = None;
        }
    }

    /// Forgets the chain (a turn ended).
    pub fn clear(&mut self) {
        self.chain = None;
    }

    /// What to say next to `last`, the failure the turn ended with, when
    /// its request had been retried: `after 2 retries; first: RATE_LIMIT:
    /// slow down`, or `after 2 retries` when the first failure was the
    /// same as the last. `None` when the request was not retried.
    pub fn note(&self, last: &LlmFailure) -> Option<String> {
        let chain = self.chain.as_ref()?;
        let plural = if chain.retries == 1 {
            "retry"
        } else {
            "retries"
        };
        let mut note = format!("after {} {plural}", chain.retries);
        let first = &chain.first;
        if first.code != last.code || first.message != last.message {
            note.push_str(&format!(
                "; first: {}: {}",
                first.code,
                quoted(&first.message)
            ));
        }
        Some(note)
    }

    /// `last` as a person reads it, `CODE: message`, with the [`note`]
    /// in parentheses when the request had been retried.
    ///
    /// [`note`]: RetryTrail::note
    pub fn describe(&self, last: &LlmFailure) -> String {
        match self.note(last) {
            Some(note) => format!("{}: {} ({note})", last.code, last.message),
            None => format!("{}: {}", last.code, last.message),
        }
    }
}

/// A retry while it waits, as a person reads it: `retrying the model
/// request (retry 1 of 3) in 500 ms: SERVER: HTTP 503: Loading model`
/// (`of 3` only when the policy has a limit; a wait of a second or more in
/// seconds). Not sanitized: the caller prints it through its terminal's
/// sanitizer.
pub fn notice(retry: &LlmRetry) -> String {
    let of = match retry.max_retries {
        Some(max) => format!(" of {max}"),
        None => String::new(),
    };
    format!(
        "retrying the model request (retry {}{of}) in {}: {}: {}",
        retry.retry,
        wait(retry.delay_ms),
        retry.failure.code,
        quoted(&retry.failure.message)
    )
}

/// A wait: `500 ms` under a second, else seconds (`2.5 s`, `10 s`).
fn wait(ms: u64) -> String {
    if ms < 1000 {
        return format!("{ms} ms");
    }
    let tenths = ms.div_ceil(100);
    if tenths.is_multiple_of(10) {
        format!("{} s", tenths / 10)
    } else {
        format!("{}.{} s", tenths / 10, tenths % 10)
    }
}

/// A failure message on one line, cut to [`QUOTED_CHARS`] with an
/// ellipsis.
fn quoted(message: &str) -> String {
    let one_line = message.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= QUOTED_CHARS {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(QUOTED_CHARS - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn retry(id: &str, n: u32, code: &str, message: &str) -> SessionEvent {
        let data = json!({"retryId": id, "turn": 1, "step": 1, "provider": "p",
            "mode": "normal", "retry": n, "maxRetries": 3, "delayMs": 500,
            "failure": {"message": message, "code": code}});
        SessionEvent::new(event::LLM_RETRY, u64::from(n), data)
    }

    fn kind(kind: &str) -> SessionEvent {
        SessionEvent::new(kind, 0, json!({"turn": 1, "step": 1}))
    }

    #[test]
    fn the_first_cause_is_kept_and_said_when_it_differs_from_the_last() {
        let mut trail = RetryTrail::default();
        let last = LlmFailure::new("CONTEXT_WINDOW_EXCEEDED", "prompt too long");
        assert_eq!(trail.note(&last), None);
        trail.follow(&kind(event::STEP_START)).unwrap();
        trail
            .follow(&retry("r", 1, "SERVER", "HTTP 503: Loading model"))
            .unwrap();
        trail
            .follow(&retry("r", 2, "SERVER", "HTTP 503: still loading"))
            .unwrap();
        assert_eq!(
            trail.describe(&last),
            "CONTEXT_WINDOW_EXCEEDED: prompt too long (after 2 retries; first: SERVER: HTTP 503: Loading model)"
        );
        // The same failure every time: the count alone.
        let same = LlmFailure::new("SERVER", "HTTP 503: Loading model");
        assert_eq!(trail.note(&same).as_deref(), Some("after 2 retries"));
    }

    #[test]
    fn an_answer_a_new_step_or_another_chain_ends_the_trail() {
        let mut trail = RetryTrail::default();
        let last = LlmFailure::new("AUTH", "bad key");
        trail.follow(&retry("r1", 1, "SERVER", "busy")).unwrap();
        trail.follow(&kind(event::ASSISTANT_MESSAGE)).unwrap();
        assert_eq!(trail.note(&last), None);
        trail.follow(&retry("r2", 1, "SERVER", "busy")).unwrap();
        trail.follow(&kind(event::STEP_START)).unwrap();
        assert_eq!(trail.note(&last), None);
        trail.follow(&retry("r3", 1, "SERVER", "busy")).unwrap();
        trail.follow(&retry("r4", 1, "TIMEOUT", "slow")).unwrap();
        assert_eq!(
            trail.note(&last).as_deref(),
            Some("after 1 retry; first: TIMEOUT: slow")
        );
        // Other events (chunks, retry-started) leave it alone.
        trail.follow(&kind(event::ASSISTANT_CHUNK)).unwrap();
        trail.follow(&kind(event::LLM_RETRY_STARTED)).unwrap();
        assert!(trail.note(&last).is_some());
        trail.clear();
        assert_eq!(trail.note(&last), None);
    }

    #[test]
    fn a_malformed_retry_record_is_an_error_naming_it() {
        let mut trail = RetryTrail::default();
        let flat = SessionEvent::new(event::LLM_RETRY, 7, json!({"attempt": 1, "code": "SERVER"}));
        let err = trail.follow(&flat).unwrap_err();
        assert!(
            err.message.contains("session event 7 (llm/retry)"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_notice_names_the_retry_the_wait_and_the_failure_on_one_line() {
        let e = retry("r", 1, "SERVER", "HTTP 503:\n  Loading model");
        let r: LlmRetry = e.data_as().unwrap();
        assert_eq!(
            notice(&r),
            "retrying the model request (retry 1 of 3) in 500 ms: SERVER: HTTP 503: Loading model"
        );
        let mut always = r.clone();
        always.max_retries = None;
        always.delay_ms = 2_450;
        always.failure.message = "x".repeat(500);
        let said = notice(&always);
        assert!(
            said.starts_with("retrying the model request (retry 1) in 2.5 s: SERVER: xxx"),
            "{said}"
        );
        assert!(said.ends_with("x…"), "{said}");
        assert_eq!(wait(10_000), "10 s");
    }
}
