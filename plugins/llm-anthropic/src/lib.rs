//! `llm-anthropic`: `POST {baseUrl}/v1/messages` with SSE, the Anthropic
//! Messages API. Serves Claude models at `api.anthropic.com`, or any
//! server of the same API with its own `baseUrl` (DeepSeek serves it at
//! `https://api.deepseek.com/anthropic`, llama.cpp's server at its root),
//! whose models' context windows it learns from the server when the
//! config does not state them ([`models`], `dsh_llm_http::window`).

mod convert;
mod models;
mod replay;
mod request;
mod response;
mod stream;
mod tool_ids;

use std::rc::Rc;

use dsh_llm_http::code;
use dsh_llm_http::exchange::{self, Events};
use dsh_llm_http::limits::Limits;
use dsh_llm_http::window::{self, WindowLookup};
use dsh_sdk::api::llm::{ModelInfo, ModelInfoParams};
use dsh_sdk::names::service;
use dsh_sdk::prelude::*;
use dsh_sdk::tool::register_model_adapter_async;
use dsh_sdk::vocab::LlmFailure;
use serde::Deserialize;

/// This plugin's name, as its failures tell the user which config to change.
pub(crate) const PLUGIN: &str = "llm-anthropic";

/// The Messages API version this adapter speaks (`anthropic-version`).
const API_VERSION: &str = "2023-06-01";

/// The path of the Messages endpoint under `baseUrl`.
const MESSAGES_PATH: &str = "/v1/messages";

/// The OpenAI-compatible root under `baseUrl` (where a local server lists
/// its models, `/v1/models`), as the window lookup asks it.
const MODELS_BASE_PATH: &str = "/v1";

/// The hosts whose routes keep the catalog (no window lookup unless the
/// config asks): Anthropic's API, and DeepSeek's, which serves the same
/// API at `/anthropic` and has no window endpoint.
const CATALOG_HOSTS: [&str; 2] = ["api.anthropic.com", "api.deepseek.com"];

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
    /// A request with no bytes for this long fails with `TIMEOUT`
    /// ([`Limits`]).
    pub stream_idle_timeout_ms: u64,
    /// An answer with no content for this long fails with `TIMEOUT`, even
    /// while the server sends keep-alives ([`Limits`]; 0: the default).
    pub stream_progress_timeout_ms: u64,
    /// The output cap of a request that sets none, for a model `models`
    /// does not give one.
    pub max_tokens: Option<u64>,
    /// The context window of a model `models` gives none for (positive).
    /// When unset, the window is asked of the server (`windowLookup`),
    /// else [`models::DEFAULT_CONTEXT_WINDOW`] ([`window::Settings`]).
    pub default_context_window: Option<u64>,
    /// Ask the server for the window of a model the config gives none for
    /// (`dsh_llm_http::window`). Default: on, except at the hosts of
    /// [`CATALOG_HOSTS`].
    pub window_lookup: Option<bool>,
    /// The most one window lookup may take, all endpoints included, in ms
    /// (positive; default [`window::DEFAULT_TIMEOUT_MS`]).
    pub window_lookup_timeout_ms: u64,
    /// The route's models (default: Claude's, [`models::claude`]), for
    /// `resolveModel` and the output cap.
    pub models: Option<Vec<models::Model>>,
    /// The SSE line cap ([`Limits`]; 0: the default).
    pub max_sse_line_bytes: usize,
    /// The cap on one answer's bytes: its text, thinking and tool calls
    /// ([`Limits`]; 0: the default).
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

    /// Where the window lookup asks: `{baseUrl}/v1` (its `/models`, and
    /// the server's own endpoints at `baseUrl`).
    fn models_base(&self) -> String {
        format!("{}{MODELS_BASE_PATH}", self.base_url.trim_end_matches('/'))
    }
}

impl Default for Config {
    fn default() -> Self {
        let (limits, windows) = (Limits::default(), window::Settings::default());
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
    catalog: models::Catalog,
    client: reqwest::Client,
    converter: request::Converter,
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
            &self.config.reasoning_effort,
            &params,
        )
    }

    /// One request: its chunks sent on `tx` as they stream; the failure
    /// that ends it otherwise. An overflow makes the model's learned
    /// window due to be asked again (the server may have restarted with
    /// another context).
    async fn exchange(&self, request: Payload, tx: &ReplySender) -> Result<(), LlmFailure> {
        let key = exchange::api_key(&self.config.api_key_env)?;
        let request: request::Request = request.parse().map_err(|e| {
            LlmFailure::new(
                code::INVALID_REQUEST,
                format!("the request does not fit the Anthropic Messages adapter: {e}"),
            )
        })?;
        let model = request.model_or(&self.config.model).to_owned();
        let result = self.send(key, request, tx).await;
        if let (Err(f), Some(lookup)) = (&result, &self.windows) {
            lookup.failed(&model, f);
        }
        result
    }

    /// Sends `request` (with `key`, if the route has one) and streams its
    /// answer on `tx`.
    async fn send(
        &self,
        key: Option<String>,
        request: request::Request,
        tx: &ReplySender,
    ) -> Result<(), LlmFailure> {
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
                let chunks = state.on_data(&data)?;
                if !chunks.is_empty() {
                    // Content: a `ping` or a `message_start` brings none.
                    events.progressed();
                }
                for c in chunks {
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
        let settings = config.window_settings();
        settings.check()?;
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
        let models_base = config.models_base();
        let route = window::Route {
            plugin: PLUGIN,
            name: &config.provider,
            models_base: &models_base,
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

dsh_sdk::export_plugin!(Anthropic);

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_llm_http::{answer_cap, sse};
    use serde_json::{json, Value};

    #[test]
    fn the_caps_default_when_absent_or_zero() {
        let config = |v: Value| serde_json::from_value::<Config>(v).unwrap().limits();
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

    #[test]
    fn windows_are_asked_of_a_local_server_not_of_anthropics_or_deepseeks_api() {
        let config = |v: Value| serde_json::from_value::<Config>(v).unwrap();
        let asks = |v: Value| {
            let c = config(v);
            c.window_settings()
                .looks_up(&c.models_base(), &CATALOG_HOSTS)
        };
        assert!(!asks(json!({"baseUrl": "https://api.anthropic.com"})));
        assert!(!asks(
            json!({"baseUrl": "https://api.deepseek.com/anthropic"})
        ));
        assert!(asks(json!({"baseUrl": "http://127.0.0.1:8080"})));
        assert!(!asks(
            json!({"baseUrl": "http://127.0.0.1:8080", "windowLookup": false})
        ));
        assert!(asks(
            json!({"baseUrl": "https://api.anthropic.com", "windowLookup": true})
        ));
        // The lookup asks the server's OpenAI-compatible root.
        assert_eq!(
            config(json!({"baseUrl": "http://127.0.0.1:8080/"})).models_base(),
            "http://127.0.0.1:8080/v1"
        );
        // Zero is refused, naming the field.
        for field in ["defaultContextWindow", "windowLookupTimeoutMs"] {
            let e = config(json!({field: 0}))
                .window_settings()
                .check()
                .unwrap_err();
            assert!(e.message.contains(field), "{e}");
        }
    }
}
