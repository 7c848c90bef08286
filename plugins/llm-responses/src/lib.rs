//! `llm-responses`: `POST {baseUrl}/responses` with SSE, the OpenAI
//! Responses API (also served by Ollama, vLLM, LM Studio and others as
//! the open "Open Responses" standard). Stateless: the whole history on
//! every request, `store: false`, reasoning items sent back with their
//! encrypted content. A local server's context windows are learned from
//! it when the config does not state them ([`models`],
//! `dsh_llm_http::window`).

mod convert;
mod models;
mod refusal;
mod replay;
mod request;
mod response;
mod stream;

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

use dsh_llm_http::catalog::Catalog;
use dsh_llm_http::code;
use dsh_llm_http::exchange::{self, Events};
use dsh_llm_http::failure::HttpError;
use dsh_llm_http::limits::Limits;
use dsh_llm_http::window::{self, WindowLookup};
use dsh_sdk::api::llm::{ModelInfo, ModelInfoParams};
use dsh_sdk::names::service;
use dsh_sdk::prelude::*;
use dsh_sdk::tool::register_model_adapter_async;
use dsh_sdk::vocab::LlmFailure;
use serde::Deserialize;

/// This plugin's name, as its failures tell the user which config to change.
pub(crate) const PLUGIN: &str = "llm-responses";

/// The sentinel some compatible servers send after the last event; this
/// wire ends at its terminal event, so it is skipped.
const DONE: &str = "[DONE]";

/// OpenAI's API host.
const OPENAI_HOST: &str = "api.openai.com";

/// The hosts whose routes keep the catalog (no window lookup unless the
/// config asks): OpenAI's API.
const CATALOG_HOSTS: [&str; 1] = [OPENAI_HOST];

#[derive(Deserialize, Clone)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Config {
    /// The provider route this instance serves.
    pub provider: String,
    /// Endpoint root; `/responses` is appended.
    pub base_url: String,
    /// The environment variable holding the API key ("" for none).
    pub api_key_env: String,
    /// The default model.
    pub model: String,
    /// Whether a model the catalog does not describe reasons (is sent
    /// `reasoning` and asked for its encrypted reasoning).
    pub reasoning: bool,
    /// The effort a call that names none gets, when its model takes it.
    pub reasoning_effort: String,
    /// The reasoning summary asked for (`auto`, `concise`, `detailed`; ""
    /// for none: an organization OpenAI has not verified may not ask).
    pub reasoning_summary: String,
    /// Send the session id as `prompt_cache_key` (better cache hits on
    /// OpenAI); off for a server that refuses the field.
    pub prompt_cache_key: bool,
    /// A request with no bytes for this long fails with `TIMEOUT`
    /// ([`Limits`]).
    pub stream_idle_timeout_ms: u64,
    /// An answer with no content for this long fails with `TIMEOUT`, even
    /// while the server sends keep-alives ([`Limits`]; 0: the default).
    pub stream_progress_timeout_ms: u64,
    /// Default `max_output_tokens` when the request sets none.
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
    /// The route's models (default: OpenAI's), for `resolveModel`.
    pub models: Option<Vec<models::Model>>,
    /// The SSE line cap ([`Limits`]; 0: the default).
    pub max_sse_line_bytes: usize,
    /// The cap on one answer's bytes: its text, reasoning, tool calls and
    /// encrypted reasoning ([`Limits`]; 0: the default).
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

    /// The route's catalog: the config's models (else OpenAI's) and the
    /// defaults for the models it does not list.
    fn catalog(&self) -> models::Catalog {
        models::Catalog {
            entries: Catalog::of(self.models.clone(), models::openai),
            default_window: self.default_context_window,
            max_tokens: self.max_tokens,
            reasoning: self.reasoning,
            openai: self.is_openai(),
            default_effort: self.reasoning_effort.clone(),
        }
    }

    /// Whether the route is OpenAI's own API ([`OPENAI_HOST`]).
    fn is_openai(&self) -> bool {
        reqwest::Url::parse(&self.base_url)
            .ok()
            .is_some_and(|u| u.host_str() == Some(OPENAI_HOST))
    }
}

impl Default for Config {
    fn default() -> Self {
        let (limits, windows) = (Limits::default(), window::Settings::default());
        Config {
            provider: "openai".into(),
            base_url: std::env::var("OPENAI_BASE_URL")
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "https://api.openai.com/v1".into()),
            api_key_env: "OPENAI_API_KEY".into(),
            model: "gpt-5".into(),
            reasoning: true,
            reasoning_effort: "medium".into(),
            reasoning_summary: "auto".into(),
            prompt_cache_key: true,
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
    /// The models that refused reasoning ([`refusal`]): their later
    /// requests go without it.
    without_reasoning: RefCell<HashSet<String>>,
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
        let window = window::resolve(
            self.catalog.stated(&params.model),
            self.windows.as_ref(),
            &params.model,
            models::DEFAULT_CONTEXT_WINDOW,
        )
        .await;
        self.catalog.resolve(window, &params)
    }

    /// One request: its chunks sent on `tx` as they stream; the failure
    /// that ends it otherwise. A refusal of what the request sent of its
    /// reasoning is answered once by sending it again without that
    /// ([`refusal`]). An overflow makes the model's learned window due to
    /// be asked again (the server may have restarted with another
    /// context).
    async fn exchange(&self, payload: Payload, tx: &ReplySender) -> Result<(), LlmFailure> {
        let key = exchange::api_key(&self.config.api_key_env)?;
        let mut request = parse(&payload)?;
        let model = request.model_or(&self.config.model).to_owned();
        let mut fallback = if self.without_reasoning.borrow().contains(&model) {
            request::Fallback::WithoutReasoning
        } else {
            request::Fallback::Full
        };
        let result = loop {
            let e = match self.send(key.clone(), request, fallback, tx).await {
                Ok(()) => break Ok(()),
                Err(e) => e,
            };
            let Some(next) = refusal::fallback_for(&e, fallback) else {
                break Err(e.failure);
            };
            dsh_sdk::tracing::warn!(
                "{PLUGIN}: the server refused the request's reasoning ({}); sending it again \
                 {}",
                e.failure.message,
                match next {
                    request::Fallback::WithoutEncrypted => "without the reasoning items",
                    _ => "without reasoning",
                }
            );
            if next == request::Fallback::WithoutReasoning {
                self.without_reasoning.borrow_mut().insert(model.clone());
            }
            fallback = next;
            request = parse(&payload)?;
        };
        if let (Err(f), Some(lookup)) = (&result, &self.windows) {
            lookup.failed(&model, f);
        }
        result
    }

    /// Sends `request` (with `key`, if the route has one, leaving out what
    /// `fallback` says) and streams its answer on `tx`.
    async fn send(
        &self,
        key: Option<String>,
        request: request::Request,
        fallback: request::Fallback,
        tx: &ReplySender,
    ) -> Result<(), HttpError> {
        let body = self
            .converter
            .body(&self.config, &self.catalog, request, fallback)
            .map_err(|e| {
                LlmFailure::new(
                    code::INVALID_REQUEST,
                    format!("the request cannot be converted to a Responses request: {e}"),
                )
            })?;
        let url = format!("{}/responses", self.config.base_url.trim_end_matches('/'));
        let mut http = self
            .client
            .post(&url)
            .header("User-Agent", exchange::USER_AGENT)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(k) = key {
            http = http.bearer_auth(k);
        }
        let limits = self.config.limits();
        let response = exchange::send_labelled(http, &url, limits.idle()).await?;
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
                if data == DONE {
                    continue;
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
                if state.done() {
                    return Ok(());
                }
            }
        }
        Err(HttpError::from(LlmFailure::new(
            code::STREAM_CLOSED,
            "the stream ended before response.completed",
        )))
    }
}

/// The harness request in `payload`.
fn parse(payload: &Payload) -> Result<request::Request, LlmFailure> {
    payload.parse().map_err(|e| {
        LlmFailure::new(
            code::INVALID_REQUEST,
            format!("the request does not fit the Responses adapter: {e}"),
        )
    })
}

struct Responses;

impl Plugin for Responses {
    const NAME: &'static str = PLUGIN;
    const DESCRIPTION: &'static str = "OpenAI Responses API adapter (stateless, SSE)";
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
            catalog: config.catalog(),
            config,
            client,
            converter: request::Converter::default(),
            windows,
            without_reasoning: RefCell::default(),
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

dsh_sdk::export_plugin!(Responses);

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_llm_http::{answer_cap, sse};
    use serde_json::{json, Value};

    fn config(v: Value) -> Config {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_caps_default_when_absent_or_zero() {
        assert_eq!(config(json!({})).limits().sse_cap(), sse::MAX_LINE_BYTES);
        assert_eq!(
            config(json!({exchange::MAX_SSE_LINE_FIELD: 0}))
                .limits()
                .sse_cap(),
            sse::MAX_LINE_BYTES
        );
        assert_eq!(
            config(json!({exchange::MAX_SSE_LINE_FIELD: 1024}))
                .limits()
                .sse_cap(),
            1024
        );
        let default = answer_cap::DEFAULT_MAX_ANSWER_BYTES;
        assert_eq!(
            config(json!({answer_cap::FIELD: 0})).limits().answer_cap(),
            default
        );
        assert_eq!(
            config(json!({answer_cap::FIELD: 4096}))
                .limits()
                .answer_cap(),
            4096
        );
        let calls = answer_cap::DEFAULT_MAX_TOOL_CALLS;
        assert_eq!(
            config(json!({answer_cap::CALLS_FIELD: 0}))
                .limits()
                .tool_call_cap(),
            calls
        );
        assert_eq!(
            config(json!({answer_cap::CALLS_FIELD: 8}))
                .limits()
                .tool_call_cap(),
            8
        );
    }

    #[test]
    fn the_defaults_are_openais_route() {
        let c = config(json!({}));
        assert_eq!(
            (
                c.provider.as_str(),
                c.api_key_env.as_str(),
                c.model.as_str()
            ),
            ("openai", "OPENAI_API_KEY", "gpt-5")
        );
        assert!(c.reasoning && c.prompt_cache_key);
        assert_eq!(c.catalog().entries.models, models::openai());
        // An unknown key is refused, naming it.
        let e = serde_json::from_value::<Config>(json!({"baseURL": "x"}))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("baseURL"), "{e}");
    }

    #[test]
    fn windows_are_asked_of_a_local_server_not_of_openais_api() {
        let asks = |v: Value| {
            let c = config(v);
            c.window_settings().looks_up(&c.base_url, &CATALOG_HOSTS)
        };
        assert!(!asks(json!({"baseUrl": "https://api.openai.com/v1"})));
        assert!(asks(json!({"baseUrl": "http://127.0.0.1:8000/v1"})));
        assert!(!asks(
            json!({"baseUrl": "http://127.0.0.1:8000/v1", "windowLookup": false})
        ));
        assert!(asks(
            json!({"baseUrl": "https://api.openai.com/v1", "windowLookup": true})
        ));
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
