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

use dsh_llm_http::code;
use dsh_llm_http::exchange::{self, Events};
use dsh_llm_http::limits::Limits;
use dsh_llm_http::window::{self, WindowLookup};
use dsh_sdk::api::llm::{purpose, ModelInfo, ModelInfoParams};
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
    /// A request with no bytes for this long fails with `TIMEOUT`
    /// ([`Limits`]).
    pub stream_idle_timeout_ms: u64,
    /// An answer with no content for this long fails with `TIMEOUT`, even
    /// while the server sends keep-alives ([`Limits`]; 0: the default).
    pub stream_progress_timeout_ms: u64,
    /// Default `max_tokens` when the request sets none.
    pub max_tokens: Option<u64>,
    /// The context window of a model `models` gives none for (positive).
    /// When unset, the window is asked of the server (`windowLookup`),
    /// else [`models::DEFAULT_CONTEXT_WINDOW`] ([`window::Settings`]).
    pub default_context_window: Option<u64>,
    /// Ask the server for the window of a model the config gives none for
    /// (`dsh_llm_http::window`). Default: on, except on DeepSeek's own API
    /// ([`CATALOG_HOSTS`]: its catalog states its models' windows, and it
    /// has no such endpoint).
    pub window_lookup: Option<bool>,
    /// The most one window lookup may take, all endpoints included, in ms
    /// (positive; default [`window::DEFAULT_TIMEOUT_MS`]).
    pub window_lookup_timeout_ms: u64,
    /// The route's models (default: DeepSeek's), for `resolveModel`.
    pub models: Option<Vec<models::Model>>,
    /// The SSE line cap ([`Limits`]; 0: the default).
    pub max_sse_line_bytes: usize,
    /// The cap on one answer's bytes ([`Limits`]; 0: the default).
    pub max_answer_bytes: usize,
    /// The cap on one answer's tool calls ([`Limits`]; 0: the default).
    pub max_tool_calls: usize,
}

impl Config {
    /// The caps in force.
    fn limits(&self) -> Limits {
        Limits {
            max_sse_line_bytes: self.max_sse_line_bytes,
            max_answer_bytes: self.max_answer_bytes,
            max_tool_calls: self.max_tool_calls,
            stream_idle_timeout_ms: self.stream_idle_timeout_ms,
            stream_progress_timeout_ms: self.stream_progress_timeout_ms,
        }
    }

    /// How the route's windows are known.
    fn window_settings(&self) -> window::Settings {
        window::Settings {
            default_context_window: self.default_context_window,
            window_lookup: self.window_lookup,
            window_lookup_timeout_ms: self.window_lookup_timeout_ms,
        }
    }
}

/// The hosts whose routes keep the catalog (no window lookup unless the
/// config asks): DeepSeek's own API.
const CATALOG_HOSTS: [&str; 1] = ["api.deepseek.com"];

impl Default for Config {
    fn default() -> Self {
        let (limits, windows) = (Limits::default(), window::Settings::default());
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
            stream_idle_timeout_ms: limits.stream_idle_timeout_ms,
            stream_progress_timeout_ms: limits.stream_progress_timeout_ms,
            max_tokens: None,
            default_context_window: windows.default_context_window,
            window_lookup: windows.window_lookup,
            window_lookup_timeout_ms: windows.window_lookup_timeout_ms,
            models: None,
            max_sse_line_bytes: limits.max_sse_line_bytes,
            max_answer_bytes: limits.max_answer_bytes,
            max_tool_calls: limits.max_tool_calls,
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
    /// Streams the answer to `request` on `tx` while the caller listens: a
    /// cancel drops the exchange wherever it waits (for the response's
    /// head, the next bytes, a keep-alive-only stretch), which closes the
    /// connection ([`exchange::while_listened`]).
    async fn stream(self: Rc<Self>, request: Payload, tx: ReplySender) {
        if let Some(Err(f)) = exchange::while_listened(&tx, self.exchange(request, &tx)).await {
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
        let window = window::resolve(
            stated,
            self.windows.as_ref(),
            &params.model,
            models::DEFAULT_CONTEXT_WINDOW,
        )
        .await;
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
            lookup.failed(&model, f);
        }
        result
    }

    /// Sends `request` and streams its answer on `tx`.
    async fn send(&self, request: request::Request, tx: &ReplySender) -> Result<(), LlmFailure> {
        let key = exchange::api_key(&self.config.api_key_env)?;
        let session = request.session_id.clone();
        let compaction = request.purpose().map_err(|e| {
            LlmFailure::new(
                code::INVALID_REQUEST,
                format!("the request does not fit the chat-completions adapter: purpose: {e}"),
            )
        })?;
        let compaction = compaction.as_deref() == Some(purpose::COMPACTION);
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
        let limits = self.config.limits();
        let response = exchange::send(http, &url, limits.idle()).await?;
        let mut events = Events::new(
            response,
            limits.sse_cap(),
            limits.idle(),
            limits.progress(),
            PLUGIN,
        );
        let mut state = stream::StreamState::new(limits.answer_cap(), limits.tool_call_cap());
        while let Some(batch) = events.next().await? {
            for data in batch {
                if data == "[DONE]" {
                    for c in state.finish() {
                        tx.send(c);
                    }
                    return Ok(());
                }
                let chunks = state.on_data(&data)?;
                if !chunks.is_empty() {
                    events.progressed();
                }
                for c in chunks {
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
        let settings = config.window_settings();
        settings.check()?;
        let provider = config.provider.clone();
        let route = window::Route {
            plugin: PLUGIN,
            name: &config.provider,
            models_base: &config.base_url,
            api_key_env: &config.api_key_env,
        };
        let windows = settings.lookup(&ctx, &client, route, &CATALOG_HOSTS);
        let adapter = Rc::new(Adapter {
            catalog: models::catalog_of(config.models.clone()),
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
    use dsh_llm_http::{answer_cap, sse};
    use serde_json::{json, Value};

    #[test]
    fn the_sse_cap_defaults_when_absent_or_zero() {
        let config = |v: Value| {
            serde_json::from_value::<Config>(v)
                .unwrap()
                .limits()
                .sse_cap()
        };
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
        let config = |v: Value| {
            serde_json::from_value::<Config>(v)
                .unwrap()
                .limits()
                .answer_cap()
        };
        let default = answer_cap::DEFAULT_MAX_ANSWER_BYTES;
        assert_eq!(config(json!({})), default);
        assert_eq!(config(json!({answer_cap::FIELD: 0})), default);
        // The field name quoted in the failure is the one parsed.
        assert_eq!(config(json!({answer_cap::FIELD: 4096})), 4096);
    }

    #[test]
    fn windows_are_asked_except_of_deepseeks_own_api_unless_the_config_says() {
        let config = |v: Value| serde_json::from_value::<Config>(v).unwrap();
        let asks = |v: Value| {
            let c = config(v);
            c.window_settings().looks_up(&c.base_url, &CATALOG_HOSTS)
        };
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
            .window_settings()
            .check()
            .unwrap_err();
        assert!(e.message.contains("defaultContextWindow"), "{e}");
        let e = config(json!({"windowLookupTimeoutMs": 0}))
            .window_settings()
            .check()
            .unwrap_err();
        assert!(e.message.contains("windowLookupTimeoutMs"), "{e}");
    }

    #[test]
    fn the_tool_call_cap_defaults_when_absent_or_zero() {
        let config = |v: Value| {
            serde_json::from_value::<Config>(v)
                .unwrap()
                .limits()
                .tool_call_cap()
        };
        let default = answer_cap::DEFAULT_MAX_TOOL_CALLS;
        assert_eq!(config(json!({})), default);
        assert_eq!(config(json!({answer_cap::CALLS_FIELD: 0})), default);
        // The field name quoted in the failure is the one parsed.
        assert_eq!(config(json!({answer_cap::CALLS_FIELD: 8})), 8);
    }
}
