//! `llm-deepseek`: `POST {baseUrl}/chat/completions` with SSE (reference
//! dsh-product §3.1.1). Serves the DeepSeek route, or — with
//! `reasoning = false` and its own `baseUrl` — any OpenAI-compatible
//! endpoint (Ollama, vLLM, llama.cpp server).

mod answer_cap;
mod call_ids;
mod convert;
mod error_body;
mod failure;
mod lenient;
mod models;
mod request;
mod response;
mod sse;
mod stream;

use std::rc::Rc;
use std::time::Duration;

use dsh_sdk::api::llm::purpose;
use dsh_sdk::names::service;
use dsh_sdk::prelude::*;
use dsh_sdk::tool::register_model_adapter;
use dsh_sdk::vocab::LlmFailure;
use failure::code;
use serde::Deserialize;

/// The config field that raises the SSE line cap, as users write it.
const MAX_SSE_LINE_FIELD: &str = "maxSseLineBytes";

#[derive(Deserialize, Clone)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Config {
    /// The provider route this instance serves.
    pub provider: String,
    /// Endpoint root; `/chat/completions` is appended.
    pub base_url: String,
    /// The environment variable holding the API key ("" for none).
    pub api_key_env: String,
    /// The default model.
    pub model: String,
    /// `off`, `low`, `high` or `max` (DeepSeek thinking modes).
    pub reasoning_effort: String,
    /// Send DeepSeek's thinking fields (false for other endpoints).
    pub reasoning: bool,
    /// A request with no bytes for this long fails with `TIMEOUT`.
    pub stream_idle_timeout_ms: u64,
    /// Default `max_tokens` when the request sets none.
    pub max_tokens: Option<u64>,
    /// The context window of a model `models` does not list (positive;
    /// default [`models::DEFAULT_CONTEXT_WINDOW`]).
    pub default_context_window: u64,
    /// The route's models (default: DeepSeek's), for `resolveModel`.
    pub models: Option<Vec<models::Model>>,
    /// The most bytes one SSE line (and one event's `data`) may hold; a
    /// longer one fails the stream with `MALFORMED_RESPONSE`. 0: the default,
    /// [`sse::MAX_LINE_BYTES`].
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
}

impl Config {
    /// The SSE line cap in force.
    fn sse_cap(&self) -> usize {
        match self.max_sse_line_bytes {
            0 => sse::MAX_LINE_BYTES,
            n => n,
        }
    }

    /// The answer cap in force.
    fn answer_cap(&self) -> usize {
        match self.max_answer_bytes {
            0 => answer_cap::DEFAULT_MAX_ANSWER_BYTES,
            n => n,
        }
    }

    /// The cap on one answer's tool calls in force.
    fn tool_call_cap(&self) -> usize {
        match self.max_tool_calls {
            0 => answer_cap::DEFAULT_MAX_TOOL_CALLS,
            n => n,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            provider: "deepseek-official".into(),
            base_url: std::env::var("DEEPSEEK_BASE_URL")
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "https://api.deepseek.com".into()),
            api_key_env: "DEEPSEEK_API_KEY".into(),
            model: "deepseek-v4-flash".into(),
            reasoning_effort: "high".into(),
            reasoning: true,
            stream_idle_timeout_ms: 300_000,
            max_tokens: None,
            default_context_window: models::DEFAULT_CONTEXT_WINDOW,
            models: None,
            max_sse_line_bytes: sse::MAX_LINE_BYTES,
            max_answer_bytes: answer_cap::DEFAULT_MAX_ANSWER_BYTES,
            max_tool_calls: answer_cap::DEFAULT_MAX_TOOL_CALLS,
        }
    }
}

struct Adapter {
    config: Config,
    client: reqwest::Client,
    converter: request::Converter,
}

impl Adapter {
    async fn stream(self: Rc<Self>, request: Payload, tx: ReplySender) {
        let fail = |f: LlmFailure| {
            tx.send(f.finish(false));
        };
        let key = if self.config.api_key_env.is_empty() {
            None
        } else {
            match std::env::var(&self.config.api_key_env) {
                Ok(k) if !k.trim().is_empty() => Some(k),
                _ => {
                    return fail(LlmFailure::new(
                        code::MISSING_CREDENTIAL,
                        format!(
                            "no API key: set the environment variable {}",
                            self.config.api_key_env
                        ),
                    ))
                }
            }
        };
        let request: request::Request = match request.parse() {
            Ok(r) => r,
            Err(e) => {
                return fail(LlmFailure::new(
                    code::INVALID_REQUEST,
                    format!("the request does not fit the chat-completions adapter: {e}"),
                ))
            }
        };
        let session = request.session_id.clone();
        let compaction = request.purpose.as_deref() == Some(purpose::COMPACTION);
        let body = match self.converter.body(&self.config, request) {
            Ok(b) => b,
            Err(e) => {
                return fail(LlmFailure::new(
                    code::INVALID_REQUEST,
                    format!("the request cannot be converted to chat completions: {e}"),
                ))
            }
        };
        let url = format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        );
        let mut http = self
            .client
            .post(&url)
            .header("User-Agent", concat!("dsh/", env!("CARGO_PKG_VERSION")))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(k) = key {
            http = http.bearer_auth(k);
        }
        if let Some(s) = session.as_deref() {
            http = http.header("x-deepseek-harness-session-id", s);
        }
        if compaction {
            http = http.header("x-deepseek-harness-compact", "1");
        }
        let idle = Duration::from_millis(self.config.stream_idle_timeout_ms);
        let response = match tokio::time::timeout(idle, http.send()).await {
            Err(_) => {
                return fail(LlmFailure::new(
                    code::TIMEOUT,
                    format!("no response within {} ms", idle.as_millis()),
                ))
            }
            Ok(Err(e)) => {
                return fail(LlmFailure::new(
                    code::TRANSPORT,
                    format!("request to {url} failed: {}", error_chain(&e)),
                ))
            }
            Ok(Ok(r)) => r,
        };
        let status = response.status();
        let request_id = response
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .map(|s| (s * 1000.0) as u64)
                .filter(|ms| *ms > 0);
            let body = error_body::read(response, idle, error_body::MAX_ERROR_BODY_BYTES).await;
            let mut f = failure::http_failure(status.as_u16(), &body.text, body.cut.as_deref());
            f.provider_retry_after_ms = retry_after;
            f.request_id = request_id;
            return fail(f);
        }
        let mut parser = sse::Parser::new(self.config.sse_cap());
        let mut state =
            stream::StreamState::new(self.config.answer_cap(), self.config.tool_call_cap());
        let mut response = response;
        loop {
            let chunk = match tokio::time::timeout(idle, response.chunk()).await {
                Err(_) => {
                    return fail(LlmFailure::new(
                        code::TIMEOUT,
                        format!("the stream was idle for {} ms", idle.as_millis()),
                    ))
                }
                Ok(Err(e)) => {
                    return fail(LlmFailure::new(
                        code::TRANSPORT,
                        format!("the stream broke: {}", error_chain(&e)),
                    ))
                }
                Ok(Ok(None)) => {
                    return fail(LlmFailure::new(
                        code::STREAM_CLOSED,
                        "the stream ended without [DONE]",
                    ));
                }
                Ok(Ok(Some(bytes))) => bytes,
            };
            let events = match parser.feed(&chunk) {
                Ok(events) => events,
                Err(overflow) => {
                    return fail(LlmFailure::new(
                        code::MALFORMED_RESPONSE,
                        format!(
                            "the stream was cut off: {overflow}; if the provider's events \
                             are really that large, raise `{MAX_SSE_LINE_FIELD}` in the \
                             llm-deepseek config"
                        ),
                    ))
                }
            };
            for data in events {
                if data == "[DONE]" {
                    for c in state.finish() {
                        tx.send(c);
                    }
                    return;
                }
                match state.on_data(&data) {
                    Ok(chunks) => {
                        for c in chunks {
                            if !tx.send(c) {
                                return; // the caller is gone: drop the request
                            }
                        }
                    }
                    Err(f) => return fail(f),
                }
            }
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
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

struct DeepSeek;

impl Plugin for DeepSeek {
    const NAME: &'static str = "llm-deepseek";
    const DESCRIPTION: &'static str = "DeepSeek / OpenAI-compatible chat completions adapter";
    const INJECT: &'static [&'static str] = &[service::LLM];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let client = reqwest::Client::builder()
            .build()
            .map_err(|e| Error::msg(format!("cannot build the HTTP client: {e}")))?;
        if config.default_context_window == 0 {
            return Err(Error::new(
                codes::INVALID_CONFIG,
                "defaultContextWindow must be a positive integer",
            ));
        }
        let provider = config.provider.clone();
        let catalog = config.models.clone().unwrap_or_else(models::deepseek);
        let (window, max_tokens) = (config.default_context_window, config.max_tokens);
        let adapter = Rc::new(Adapter {
            config,
            client,
            converter: request::Converter::default(),
        });
        let c = ctx.clone();
        register_model_adapter(
            &ctx,
            vec![provider],
            move |req| {
                let (adapter, c) = (adapter.clone(), c.clone());
                async move {
                    let (tx, reply) = Reply::stream();
                    c.spawn(adapter.stream(req.params, tx));
                    Ok(reply)
                }
            },
            move |params| models::resolve(&catalog, window, max_tokens, params),
        )
        .await
    }
}

dsh_sdk::export_plugin!(DeepSeek);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

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
    fn the_sse_cap_defaults_when_absent_or_zero() {
        let config = |v: Value| serde_json::from_value::<Config>(v).unwrap().sse_cap();
        assert_eq!(config(json!({})), sse::MAX_LINE_BYTES);
        assert_eq!(config(json!({MAX_SSE_LINE_FIELD: 0})), sse::MAX_LINE_BYTES);
        // The field name quoted in the overflow message is the one parsed.
        assert_eq!(config(json!({MAX_SSE_LINE_FIELD: 1024})), 1024);
    }

    #[test]
    fn the_answer_cap_defaults_when_absent_or_zero() {
        let config = |v: Value| serde_json::from_value::<Config>(v).unwrap().answer_cap();
        let default = answer_cap::DEFAULT_MAX_ANSWER_BYTES;
        assert_eq!(config(json!({})), default);
        assert_eq!(config(json!({answer_cap::FIELD: 0})), default);
        // The field name quoted in the failure is the one parsed.
        assert_eq!(config(json!({answer_cap::FIELD: 4096})), 4096);
    }

    #[test]
    fn the_tool_call_cap_defaults_when_absent_or_zero() {
        let config = |v: Value| serde_json::from_value::<Config>(v).unwrap().tool_call_cap();
        let default = answer_cap::DEFAULT_MAX_TOOL_CALLS;
        assert_eq!(config(json!({})), default);
        assert_eq!(config(json!({answer_cap::CALLS_FIELD: 0})), default);
        // The field name quoted in the failure is the one parsed.
        assert_eq!(config(json!({answer_cap::CALLS_FIELD: 8})), 8);
    }
}
