//! `llm-deepseek`: `POST {baseUrl}/chat/completions` with SSE (reference
//! dsh-product §3.1.1). Serves the DeepSeek route, or — with
//! `reasoning = false` and its own `baseUrl` — any OpenAI-compatible
//! endpoint (Ollama, vLLM, llama.cpp server, LM Studio), whose models'
//! context windows it learns from the server when the config does not
//! state them ([`models`], `dsh_llm_http::window`).

mod convert;
mod models;
mod request;
mod response;
mod stream;

use std::rc::Rc;
use std::time::Duration;

use dsh_llm_http::exchange::{self, Events};
use dsh_llm_http::window::{self, WindowLookup};
use dsh_llm_http::{answer_cap, code, sse};
use dsh_sdk::api::llm::{purpose, ContextSource, ModelInfo, ModelInfoParams};
use dsh_sdk::names::service;
use dsh_sdk::prelude::*;
use dsh_sdk::tool::register_model_adapter_async;
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
    /// The context window of a model `models` gives none for (positive).
    /// When unset, the window is asked of the server (`windowLookup`),
    /// else [`models::DEFAULT_CONTEXT_WINDOW`].
    pub default_context_window: Option<u64>,
    /// Ask the server for the window of a model the config gives none for
    /// (`dsh_llm_http::window`). Default: on, except on DeepSeek's own API
    /// (its catalog states its models' windows, and it has no such
    /// endpoint).
    pub window_lookup: Option<bool>,
    /// The most one window lookup may take, all endpoints included, in ms
    /// (positive; default [`window::DEFAULT_TIMEOUT_MS`]).
    pub window_lookup_timeout_ms: u64,
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

    /// Whether windows the config does not state are asked of the server:
    /// `windowLookup`, by default on except on DeepSeek's own API.
    fn looks_up_windows(&self) -> bool {
        self.window_lookup.unwrap_or_else(|| {
            reqwest::Url::parse(&self.base_url)
                .ok()
                .and_then(|u| u.host_str().map(|h| h != DEEPSEEK_API_HOST))
                .unwrap_or(true)
        })
    }

    /// The refusal of a config whose numbers cannot work.
    fn check(&self) -> Result<()> {
        if self.default_context_window == Some(0) {
            return Err(Error::new(
                codes::INVALID_CONFIG,
                "defaultContextWindow must be a positive integer (or left out: the server is asked)",
            ));
        }
        if self.window_lookup_timeout_ms == 0 {
            return Err(Error::new(
                codes::INVALID_CONFIG,
                "windowLookupTimeoutMs must be a positive integer",
            ));
        }
        Ok(())
    }
}

/// The host of DeepSeek's own API, whose route keeps its catalog.
const DEEPSEEK_API_HOST: &str = "api.deepseek.com";

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
            default_context_window: None,
            window_lookup: None,
            window_lookup_timeout_ms: window::DEFAULT_TIMEOUT_MS,
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
    catalog: models::Catalog,
    /// The windows learned from the server; `None` when not asked
    /// (`windowLookup`).
    windows: Option<WindowLookup>,
}

impl Adapter {
    async fn stream(self: Rc<Self>, request: Payload, tx: ReplySender) {
        if let Err(f) = self.exchange(request, &tx).await {
            tx.send(f.finish(false));
        }
    }

    /// `resolveModel`: the config's or the catalog's window, else the one
    /// the server states (asked once per model, see
    /// `dsh_llm_http::window`), else the default.
    async fn model_info(&self, params: ModelInfoParams) -> Result<ModelInfo> {
        let stated = models::stated(
            &self.catalog,
            self.config.default_context_window,
            &params.model,
        );
        let window = match (stated, &self.windows) {
            (Some(w), _) => w,
            (None, Some(lookup)) => match lookup.window(&params.model).await {
                Some(learned) => models::Window {
                    tokens: learned.tokens,
                    source: ContextSource::Server {
                        endpoint: learned.endpoint,
                    },
                },
                None => models::Window::default_window(),
            },
            (None, None) => models::Window::default_window(),
        };
        models::resolve(
            &self.catalog,
            window,
            self.config.max_tokens,
            models::reasoning(self.config.reasoning, &self.config.reasoning_effort),
            &params,
        )
    }

    /// One request: its chunks sent on `tx` as they stream; the failure
    /// that ends it otherwise. An overflow makes the model's learned
    /// window due to be asked again (the server may have restarted with
    /// another context).
    async fn exchange(&self, request: Payload, tx: &ReplySender) -> Result<(), LlmFailure> {
        let request: request::Request = request.parse().map_err(|e| {
            LlmFailure::new(
                code::INVALID_REQUEST,
                format!("the request does not fit the chat-completions adapter: {e}"),
            )
        })?;
        let model = request.model_or(&self.config.model).to_owned();
        let result = self.send(request, tx).await;
        if let (Err(f), Some(lookup)) = (&result, &self.windows) {
            if f.code == code::CONTEXT_WINDOW_EXCEEDED {
                lookup.overflowed(&model);
            }
        }
        result
    }

    /// Sends `request` and streams its answer on `tx`.
    async fn send(&self, request: request::Request, tx: &ReplySender) -> Result<(), LlmFailure> {
        let key = exchange::api_key(&self.config.api_key_env)?;
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
        config.check()?;
        let provider = config.provider.clone();
        let windows = config.looks_up_windows().then(|| {
            WindowLookup::new(
                &ctx,
                client.clone(),
                PLUGIN,
                &config.provider,
                &config.base_url,
                &config.api_key_env,
                Duration::from_millis(config.window_lookup_timeout_ms),
            )
        });
        let adapter = Rc::new(Adapter {
            catalog: models::Catalog::of(config.models.clone()),
            config,
            client,
            converter: request::Converter::default(),
            windows,
        });
        let (c, resolver) = (ctx.clone(), adapter.clone());
        register_model_adapter_async(
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
            move |params| {
                let adapter = resolver.clone();
                async move { adapter.model_info(params).await }
            },
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
        assert_eq!(
            config(json!({exchange::MAX_SSE_LINE_FIELD: 0})),
            sse::MAX_LINE_BYTES
        );
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
    fn windows_are_asked_except_of_deepseeks_own_api_unless_the_config_says() {
        let config = |v: Value| serde_json::from_value::<Config>(v).unwrap();
        let asks = |v: Value| config(v).looks_up_windows();
        assert!(!asks(json!({"baseUrl": "https://api.deepseek.com"})));
        assert!(!asks(json!({"baseUrl": "https://api.deepseek.com/beta"})));
        assert!(asks(json!({"baseUrl": "http://127.0.0.1:8080/v1"})));
        assert!(!asks(
            json!({"baseUrl": "http://127.0.0.1:8080/v1", "windowLookup": false})
        ));
        assert!(asks(
            json!({"baseUrl": "https://api.deepseek.com", "windowLookup": true})
        ));
        // Zero is refused, naming the field.
        let e = config(json!({"defaultContextWindow": 0}))
            .check()
            .unwrap_err();
        assert!(e.message.contains("defaultContextWindow"), "{e}");
        let e = config(json!({"windowLookupTimeoutMs": 0}))
            .check()
            .unwrap_err();
        assert!(e.message.contains("windowLookupTimeoutMs"), "{e}");
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
