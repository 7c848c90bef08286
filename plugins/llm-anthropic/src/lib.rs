//! `llm-anthropic`: `POST {baseUrl}/v1/messages` with SSE, the Anthropic
//! Messages API. Serves Claude models at `api.anthropic.com`, or any
//! server of the same API with its own `baseUrl` (DeepSeek serves it at
//! `https://api.deepseek.com/anthropic`).

mod convert;
mod models;
mod replay;
mod request;
mod response;
mod stream;

use std::rc::Rc;
use std::time::Duration;

use dsh_llm_http::exchange::{self, Events};
use dsh_llm_http::{answer_cap, code, sse};
use dsh_sdk::names::service;
use dsh_sdk::prelude::*;
use dsh_sdk::tool::register_model_adapter;
use dsh_sdk::vocab::LlmFailure;
use serde::Deserialize;

/// This plugin's name, as its failures tell the user which config to change.
pub(crate) const PLUGIN: &str = "llm-anthropic";

/// The Messages API version this adapter speaks (`anthropic-version`).
const API_VERSION: &str = "2023-06-01";

/// The path of the Messages endpoint under `baseUrl`.
const MESSAGES_PATH: &str = "/v1/messages";

/// The row's config (every key optional; see the README's table).
#[derive(Deserialize, Clone)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Config {
    /// The provider route this instance serves.
    pub provider: String,
    /// Endpoint root; `/v1/messages` is appended.
    pub base_url: String,
    /// The environment variable holding the API key, sent as `x-api-key`
    /// ("" for none).
    pub api_key_env: String,
    /// The default model.
    pub model: String,
    /// The thinking of a request that names no `reasoningEffort`: `off`,
    /// `low`, `medium`, `high` or `max` ([`request::effort`]).
    pub reasoning_effort: String,
    /// Mark cache breakpoints (the system prompt, the last message).
    pub prompt_caching: bool,
    /// A request with no bytes for this long fails with `TIMEOUT`.
    pub stream_idle_timeout_ms: u64,
    /// The output cap of a request that sets none, for a model `models`
    /// does not give one.
    pub max_tokens: Option<u64>,
    /// The context window of a model `models` does not list (positive;
    /// default [`models::DEFAULT_CONTEXT_WINDOW`]).
    pub default_context_window: u64,
    /// The route's models (default: Claude's, [`models::claude`]), for
    /// `resolveModel` and the output cap.
    pub models: Option<Vec<models::Model>>,
    /// The most bytes one SSE line (and one event's `data`) may hold; a
    /// longer one fails the stream with `MALFORMED_RESPONSE`. 0: the
    /// default, [`sse::MAX_LINE_BYTES`].
    pub max_sse_line_bytes: usize,
    /// The most bytes one answer may stream: its text, thinking and tool
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
            provider: "anthropic".into(),
            base_url: std::env::var("ANTHROPIC_BASE_URL")
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "https://api.anthropic.com".into()),
            api_key_env: "ANTHROPIC_API_KEY".into(),
            model: "claude-sonnet-4-5".into(),
            reasoning_effort: request::effort::OFF.into(),
            prompt_caching: true,
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
    catalog: Vec<models::Model>,
    client: reqwest::Client,
    converter: request::Converter,
}

impl Adapter {
    async fn stream(self: Rc<Self>, request: Payload, tx: ReplySender) {
        if let Err(f) = self.exchange(request, &tx).await {
            tx.send(f.finish(false));
        }
    }

    /// One request: its chunks sent on `tx` as they stream; the failure
    /// that ends it otherwise.
    async fn exchange(&self, request: Payload, tx: &ReplySender) -> Result<(), LlmFailure> {
        let key = exchange::api_key(&self.config.api_key_env)?;
        let request: request::Request = request.parse().map_err(|e| {
            LlmFailure::new(
                code::INVALID_REQUEST,
                format!("the request does not fit the Anthropic Messages adapter: {e}"),
            )
        })?;
        let body = self
            .converter
            .body(&self.config, &self.catalog, request)
            .map_err(|e| {
                LlmFailure::new(
                    code::INVALID_REQUEST,
                    format!("the request cannot be converted to the Messages API: {e}"),
                )
            })?;
        let url = format!(
            "{}{MESSAGES_PATH}",
            self.config.base_url.trim_end_matches('/')
        );
        let mut http = self
            .client
            .post(&url)
            .header("User-Agent", exchange::USER_AGENT)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("anthropic-version", API_VERSION)
            .body(body);
        if let Some(k) = key {
            http = http.header("x-api-key", k);
        }
        let idle = Duration::from_millis(self.config.stream_idle_timeout_ms);
        let response = exchange::send(http, &url, idle).await?;
        let mut events = Events::new(response, self.config.sse_cap(), idle, PLUGIN);
        let mut state =
            stream::StreamState::new(self.config.answer_cap(), self.config.tool_call_cap());
        while let Some(batch) = events.next().await? {
            for data in batch {
                for c in state.on_data(&data)? {
                    if !tx.send(c) {
                        return Ok(()); // the caller is gone: drop the request
                    }
                }
                if state.stopped() {
                    for c in state.finish() {
                        tx.send(c);
                    }
                    return Ok(());
                }
            }
        }
        Err(LlmFailure::new(
            code::STREAM_CLOSED,
            "the stream ended without message_stop",
        ))
    }
}

struct Anthropic;

impl Plugin for Anthropic {
    const NAME: &'static str = "llm-anthropic";
    const DESCRIPTION: &'static str = "Anthropic Messages API adapter";
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
        if !request::effort::ALL.contains(&config.reasoning_effort.as_str()) {
            return Err(Error::new(
                codes::INVALID_CONFIG,
                format!(
                    "reasoningEffort {:?} is not one of {}",
                    config.reasoning_effort,
                    request::effort::ALL.join(", ")
                ),
            ));
        }
        let provider = config.provider.clone();
        let catalog = config.models.clone().unwrap_or_else(models::claude);
        let (window, max_tokens) = (config.default_context_window, config.max_tokens);
        let effort = config.reasoning_effort.clone();
        let adapter = Rc::new(Adapter {
            config,
            catalog: catalog.clone(),
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
            move |params| models::resolve(&catalog, window, max_tokens, &effort, params),
        )
        .await
    }
}

dsh_sdk::export_plugin!(Anthropic);

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_llm_http::failure::http_failure;
    use serde_json::{json, Value};

    #[test]
    fn the_caps_default_when_absent_or_zero() {
        let config = |v: Value| serde_json::from_value::<Config>(v).unwrap();
        let (c, z) = (
            config(json!({})),
            config(json!({"maxSseLineBytes": 0, "maxAnswerBytes": 0, "maxToolCalls": 0})),
        );
        for c in [&c, &z] {
            assert_eq!(c.sse_cap(), sse::MAX_LINE_BYTES);
            assert_eq!(c.answer_cap(), answer_cap::DEFAULT_MAX_ANSWER_BYTES);
            assert_eq!(c.tool_call_cap(), answer_cap::DEFAULT_MAX_TOOL_CALLS);
        }
        // The field names quoted in the failures are the ones parsed.
        let c = config(
            json!({exchange::MAX_SSE_LINE_FIELD: 1024, answer_cap::FIELD: 4096,
                              answer_cap::CALLS_FIELD: 8}),
        );
        assert_eq!(
            (c.sse_cap(), c.answer_cap(), c.tool_call_cap()),
            (1024, 4096, 8)
        );
    }

    #[test]
    fn the_defaults_are_anthropics() {
        let c: Config = serde_json::from_value(json!({})).unwrap();
        assert_eq!(
            (
                c.provider.as_str(),
                c.api_key_env.as_str(),
                c.reasoning_effort.as_str()
            ),
            ("anthropic", "ANTHROPIC_API_KEY", "off")
        );
        assert!(c.prompt_caching);
        assert!(serde_json::from_value::<Config>(json!({"apiKey": "sk"})).is_err());
    }

    /// An Anthropic error body (`{"type":"error","error":{type,message}}`).
    fn body(kind: &str, message: &str) -> String {
        json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"})
            .to_string()
    }

    #[test]
    fn anthropics_http_errors_map_to_the_harness_codes() {
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
            let f = http_failure(status, &body(kind, "why"), None);
            assert_eq!((f.code.as_str(), f.status), (want, Some(status)), "{kind}");
            assert_eq!(f.message, format!("HTTP {status}: why"));
        }
        // The overload is retried by the default policy.
        assert!(dsh_sdk::vocab::RETRYABLE_CODES.contains(&code::SERVER));
    }

    #[test]
    fn an_overflow_body_is_context_window_exceeded() {
        let f = http_failure(
            400,
            &body(
                "invalid_request_error",
                "prompt is too long: 208310 tokens > 200000 maximum",
            ),
            None,
        );
        assert_eq!(f.code, code::CONTEXT_WINDOW_EXCEEDED, "{f:?}");
    }
}
