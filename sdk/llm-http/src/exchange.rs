//! One streamed HTTP exchange with a model server: the credential, the
//! request sent under the idle timeout, an error status turned into a
//! failure (its body read with bounds), and the body read as SSE events,
//! each read under the idle timeout too.

use std::time::Duration;

use dsh_sdk::vocab::LlmFailure;

use crate::error_body;
use crate::failure::{code, http_failure};
use crate::sse;

/// The `User-Agent` every adapter sends.
pub const USER_AGENT: &str = concat!("dsh/", env!("CARGO_PKG_VERSION"));

/// The config field that raises the SSE line cap, as users write it.
pub const MAX_SSE_LINE_FIELD: &str = "maxSseLineBytes";

/// The API key in the environment variable `env`: `None` when `env` is ""
/// (a server without keys), the failure naming the variable when it is
/// unset or blank.
pub fn api_key(env: &str) -> Result<Option<String>, LlmFailure> {
    if env.is_empty() {
        return Ok(None);
    }
    match std::env::var(env) {
        Ok(k) if !k.trim().is_empty() => Ok(Some(k)),
        _ => Err(LlmFailure::new(
            code::MISSING_CREDENTIAL,
            format!("no API key: set the environment variable {env}"),
        )),
    }
}

/// Sends `http` (to `url`, for the messages) and waits at most `idle` for
/// the response's head. A success is the response; an error status is the
/// failure its status and body give (with the server's `Retry-After` and
/// request id), the body read with bounds.
pub async fn send(
    http: reqwest::RequestBuilder,
    url: &str,
    idle: Duration,
) -> Result<reqwest::Response, LlmFailure> {
    let response = match tokio::time::timeout(idle, http.send()).await {
        Err(_) => {
            return Err(LlmFailure::new(
                code::TIMEOUT,
                format!("no response within {} ms", idle.as_millis()),
            ))
        }
        Ok(Err(e)) => {
            return Err(LlmFailure::new(
                code::TRANSPORT,
                format!("request to {url} failed: {}", error_chain(&e)),
            ))
        }
        Ok(Ok(r)) => r,
    };
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let request_id = header("x-request-id").or_else(|| header("request-id"));
    let retry_after = header("retry-after")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|s| (s * 1000.0) as u64)
        .filter(|ms| *ms > 0);
    let body = error_body::read(response, idle, error_body::MAX_ERROR_BODY_BYTES).await;
    let mut f = http_failure(status.as_u16(), &body.text, body.cut.as_deref());
    f.provider_retry_after_ms = retry_after;
    f.request_id = request_id;
    Err(f)
}

/// A response body read as SSE events, one network read at a time, each
/// within the idle timeout.
pub struct Events {
    response: reqwest::Response,
    parser: sse::Parser,
    idle: Duration,
    plugin: &'static str,
}

impl Events {
    /// Reads `response`'s body with events of at most `line_cap` bytes; the
    /// failures name `plugin`'s config.
    pub fn new(
        response: reqwest::Response,
        line_cap: usize,
        idle: Duration,
        plugin: &'static str,
    ) -> Events {
        Events {
            response,
            parser: sse::Parser::new(line_cap),
            idle,
            plugin,
        }
    }

    /// The events of the next read (maybe none), `None` when the body
    /// ended; the failure when the body stalled, broke or sent an event
    /// over the cap.
    pub async fn next(&mut self) -> Result<Option<Vec<String>>, LlmFailure> {
        let chunk = match tokio::time::timeout(self.idle, self.response.chunk()).await {
            Err(_) => {
                return Err(LlmFailure::new(
                    code::TIMEOUT,
                    format!("the stream was idle for {} ms", self.idle.as_millis()),
                ))
            }
            Ok(Err(e)) => {
                return Err(LlmFailure::new(
                    code::TRANSPORT,
                    format!("the stream broke: {}", error_chain(&e)),
                ))
            }
            Ok(Ok(None)) => return Ok(None),
            Ok(Ok(Some(bytes))) => bytes,
        };
        self.parser.feed(&chunk).map(Some).map_err(|overflow| {
            LlmFailure::new(
                code::MALFORMED_RESPONSE,
                format!(
                    "the stream was cut off: {overflow}; if the provider's events are really \
                     that large, raise `{MAX_SSE_LINE_FIELD}` in the {} config",
                    self.plugin
                ),
            )
        })
    }
}

/// `e` and each of its causes not already said, joined by `: `.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cause = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Chain(&'static str, Option<Box<Chain>>);
    impl std::fmt::Display for Chain {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Chain {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|c| c as _)
        }
    }

    #[test]
    fn an_error_chain_appends_each_cause_unless_already_said() {
        let e = Chain(
            "request failed",
            Some(Box::new(Chain(
                "connection reset",
                Some(Box::new(Chain("reset", None))),
            ))),
        );
        assert_eq!(error_chain(&e), "request failed: connection reset");
        assert_eq!(error_chain(&Chain("alone", None)), "alone");
    }

    #[test]
    fn a_key_is_read_from_the_named_variable_or_its_absence_named() {
        assert_eq!(api_key("").unwrap(), None);
        let f = api_key("DSH_LLM_HTTP_TEST_SURELY_UNSET").unwrap_err();
        assert_eq!(f.code, code::MISSING_CREDENTIAL);
        assert!(
            f.message.contains("DSH_LLM_HTTP_TEST_SURELY_UNSET"),
            "{}",
            f.message
        );
    }
}
