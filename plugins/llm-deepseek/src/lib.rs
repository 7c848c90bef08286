//! `llm-deepseek`: `POST {baseUrl}/chat/completions` with SSE (reference
//! dsh-product §3.1.1). Serves the DeepSeek route, or — with
//! `reasoning = false` and its own `baseUrl` — any OpenAI-compatible
//! endpoint (Ollama, vLLM, llama.cpp server).

mod convert;
mod models;
mod request;
mod response;
mod stream;

use std::rc::Rc;
use std::time::Duration;

use dsh_sdk::api::llm::purpose;
use dsh_sdk::names::service;
use dsh_sdk::prelude::*;
use dsh_sdk::tool::register_model_adapter;
use dsh_llm_http::exchange::{self, Events};
use dsh_llm_http::{answer_cap, code, sse};
use dsh_sdk::vocab::LlmFailure;
use serde::Deserialize;

/// This plugin's name, as its failures tell the user which config to change.
pub(crate) const PLUGIN: &str = "llm-deepseek";

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
                format!("the request does not fit the chat-completions adapter: {e}"),
            )
        })?;
        let session = request.session_id.clone();
        let compaction = request.purpose.as_deref() == Some(purpose::COMPACTION);
        let body = self.converter.body(&self.config, request).map_err(|e| {
            LlmFailure::new(
                code::INVALID_REQUEST,
                format!("the request cannot be converted to chat completions: {e}"),
            )
        })?;
        let url = format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        );
        let mut http = self
            .client
            .post(&url)
            .header("User-Agent", exchange::USER_AGENT)
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
        let response = exchange::send(http, &url, idle).await?;
        let mut events = Events::new(response, self.config.sse_cap(), idle, PLUGIN);
        let mut state =
            stream::StreamState::new(self.config.answer_cap(), self.config.tool_call_cap());
        while let Some(batch) = events.next().await? {
            for data in batch {
                if data == "[DONE]" {
                    for c in state.finish() {
                        tx.send(c);
                    }
                    return Ok(());
                }
                for c in state.on_data(&data)? {
                    if !tx.send(c) {
                        return Ok(()); // the caller is gone: drop the request
                    }
                }
            }
        }
        Err(LlmFailure::new(
            code::STREAM_CLOSED,
            "the stream ended without [DONE]",
        ))
    }
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

    #[test]
    fn the_sse_cap_defaults_when_absent_or_zero() {
        let config = |v: Value| serde_json::from_value::<Config>(v).unwrap().sse_cap();
        assert_eq!(config(json!({})), sse::MAX_LINE_BYTES);
        assert_eq!(config(json!({exchange::MAX_SSE_LINE_FIELD: 0})), sse::MAX_LINE_BYTES);
        // The field name quoted in the overflow message is the one parsed.
        assert_eq!(config(json!({exchange::MAX_SSE_LINE_FIELD: 1024})), 1024);
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
