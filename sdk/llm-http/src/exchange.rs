//! One streamed HTTP exchange with a model server: the credential, the
//! request sent under the idle timeout, an error status turned into a
//! failure (its body read with bounds), and the body read as SSE events,
//! each read under the idle timeout, the whole answer under the progress
//! deadline (content, not keep-alives, resets it). [`while_listened`]
//! runs an exchange only while its caller listens: a cancel drops the
//! request at once, which closes the connection.

use std::future::Future;
use std::time::Duration;

use dsh_sdk::vocab::LlmFailure;
use dsh_sdk::ReplySender;
use tokio::time::Instant;

use crate::error_body;
use crate::failure::{code, http_error, HttpError};
use crate::limits::PROGRESS_TIMEOUT_FIELD;
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

/// Runs `work` (one exchange, which sends its chunks on `tx`) while the
/// caller listens: when the caller goes (it cancelled), `work` is dropped
/// at once, wherever it waits (for the response's head, for the next
/// bytes, on a keep-alive-only stretch), and with it the request, which
/// closes the connection. `None` then; else what `work` gave.
pub async fn while_listened<T>(tx: &ReplySender, work: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        () = tx.closed() => None,
        out = work => Some(out),
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
    send_labelled(http, url, idle).await.map_err(|e| e.failure)
}

/// [`send`], an error status keeping the server's own code and type
/// beside the failure ([`HttpError`]): for an adapter that answers some
/// refusals by changing its request (a retry without what the server
/// refused).
pub async fn send_labelled(
    http: reqwest::RequestBuilder,
    url: &str,
    idle: Duration,
) -> Result<reqwest::Response, HttpError> {
    let response = match tokio::time::timeout(idle, http.send()).await {
        Err(_) => {
            return Err(HttpError::from(LlmFailure::new(
                code::TIMEOUT,
                format!("no response within {} ms", idle.as_millis()),
            )))
        }
        Ok(Err(e)) => {
            return Err(HttpError::from(LlmFailure::new(
                code::TRANSPORT,
                format!("request to {url} failed: {}", error_chain(&e)),
            )))
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
    let mut e = http_error(status.as_u16(), &body.text, body.cut.as_deref());
    e.failure.provider_retry_after_ms = retry_after;
    e.failure.request_id = request_id;
    Err(e)
}

/// A response body read as SSE events, one network read at a time, each
/// within the idle timeout, and all of them within the progress deadline
/// from the last content ([`Events::progressed`]).
pub struct Events {
    response: reqwest::Response,
    parser: sse::Parser,
    idle: Duration,
    /// The longest the answer may go without content.
    progress: Duration,
    /// When the progress deadline runs out, unless content comes first.
    deadline: Instant,
    plugin: &'static str,
}

impl Events {
    /// Reads `response`'s body with events of at most `line_cap` bytes,
    /// each read within `idle` and the answer making progress within
    /// `progress` (from now, then from each [`Events::progressed`]); the
    /// failures name `plugin`'s config.
    pub fn new(
        response: reqwest::Response,
        line_cap: usize,
        idle: Duration,
        progress: Duration,
        plugin: &'static str,
    ) -> Events {
        Events {
            response,
            parser: sse::Parser::new(line_cap),
            idle,
            progress,
            deadline: Instant::now() + progress,
            plugin,
        }
    }

    /// The answer made progress: the adapter read content (text,
    /// reasoning, a tool call) from the last events. Pings, keep-alive
    /// comments and other events without content do not count, so a
    /// server that only keeps the connection alive still ends in
    /// `TIMEOUT`.
    pub fn progressed(&mut self) {
        self.deadline = Instant::now() + self.progress;
    }

    /// The events of the next read (maybe none), `None` when the body
    /// ended; the failure when the body stalled (no bytes within the idle
    /// timeout, or no content within the progress deadline), broke or sent
    /// an event over the cap.
    pub async fn next(&mut self) -> Result<Option<Vec<String>>, LlmFailure> {
        // Checked first too: a server that always has a ping ready would
        // otherwise never let the deadline's timer be polled.
        if Instant::now() >= self.deadline {
            return Err(self.no_progress());
        }
        let read = tokio::time::timeout(self.idle, self.response.chunk());
        let chunk = match tokio::time::timeout_at(self.deadline, read).await {
            Err(_) => return Err(self.no_progress()),
            Ok(Err(_)) => {
                return Err(LlmFailure::new(
                    code::TIMEOUT,
                    format!("the stream was idle for {} ms", self.idle.as_millis()),
                ))
            }
            Ok(Ok(Err(e))) => {
                return Err(LlmFailure::new(
                    code::TRANSPORT,
                    format!("the stream broke: {}", error_chain(&e)),
                ))
            }
            Ok(Ok(Ok(None))) => return Ok(None),
            Ok(Ok(Ok(Some(bytes)))) => bytes,
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
    /// The failure of an answer past its progress deadline.
    fn no_progress(&self) -> LlmFailure {
        LlmFailure::new(
            code::TIMEOUT,
            format!(
                "the stream sent no content for {} ms (only keep-alives, or nothing); if the \
                 model really thinks that long before it writes, raise \
                 `{PROGRESS_TIMEOUT_FIELD}` in the {} config",
                self.progress.as_millis(),
                self.plugin
            ),
        )
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
    use dsh_sdk::Reply;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// What the test server saw of its one connection.
    #[derive(Default)]
    struct Seen {
        /// The request's head arrived.
        asked: tokio::sync::Notify,
        /// The client closed the connection.
        closed: tokio::sync::Notify,
        was_closed: Mutex<bool>,
    }

    /// A server of one connection on 127.0.0.1 that reads the request's
    /// head, writes `head` (nothing when empty), then `every` item of
    /// `beat` forever, until the client closes the connection (recorded
    /// in the [`Seen`]). Its address.
    async fn server(head: &'static str, beat: &'static str) -> (String, Arc<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/x", listener.local_addr().unwrap());
        let seen = Arc::new(Seen::default());
        let s = seen.clone();
        tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 8192];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match sock.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            s.asked.notify_one();
            let (mut rd, mut wr) = sock.split();
            let beats = async {
                if !head.is_empty() && wr.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                loop {
                    if !beat.is_empty() && wr.write_all(beat.as_bytes()).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            let hangup = async { while matches!(rd.read(&mut buf).await, Ok(n) if n > 0) {} };
            tokio::select! {
                () = beats => {}
                () = hangup => {}
            }
            *s.was_closed.lock().unwrap() = true;
            s.closed.notify_one();
        });
        (url, seen)
    }

    /// A bound on a wait that must end (a hang guard, not a timing).
    const BOUND: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn keep_alives_alone_end_at_the_progress_deadline() {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n";
        let (url, _) = server(head, ": keep-alive\n\n").await;
        let client = reqwest::Client::new();
        let response = send(client.post(&url), &url, Duration::from_secs(20))
            .await
            .unwrap();
        // Bytes come every 10 ms: the idle timeout never trips.
        let mut events = Events::new(
            response,
            1024,
            Duration::from_secs(20),
            Duration::from_millis(300),
            "llm-test",
        );
        let drained = async {
            loop {
                match events.next().await {
                    Ok(Some(batch)) => assert!(batch.is_empty(), "{batch:?}"),
                    Ok(None) => panic!("the test server never ends its body"),
                    Err(f) => return f,
                }
            }
        };
        let f = tokio::time::timeout(BOUND, drained)
            .await
            .expect("a stream of keep-alives alone must end in TIMEOUT");
        assert_eq!(f.code, code::TIMEOUT);
        assert!(
            f.message.contains("no content for 300 ms")
                && f.message
                    .contains("`streamProgressTimeoutMs` in the llm-test config"),
            "{}",
            f.message
        );
    }

    #[tokio::test]
    async fn a_cancel_while_waiting_for_the_head_closes_the_connection() {
        // The server never answers: only the caller's going can end it.
        let (url, seen) = server("", "").await;
        let client = reqwest::Client::new();
        let (tx, reply) = Reply::stream();
        let exchange = while_listened(&tx, send(client.post(&url), &url, Duration::from_secs(600)));
        let cancel = async {
            seen.asked.notified().await;
            drop(reply);
        };
        let (out, ()) = tokio::join!(exchange, cancel);
        assert!(out.is_none(), "the exchange stopped for the cancel");
        let closed = async {
            while !*seen.was_closed.lock().unwrap() {
                seen.closed.notified().await;
            }
        };
        tokio::time::timeout(BOUND, closed)
            .await
            .expect("the connection closes when the caller cancels");
    }

    #[tokio::test]
    async fn work_runs_while_the_caller_listens() {
        let (tx, reply) = Reply::stream();
        assert_eq!(while_listened(&tx, async { 7 }).await, Some(7));
        drop(reply);
        assert_eq!(
            while_listened(&tx, std::future::pending::<()>()).await,
            None
        );
    }

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
