//! `llm-responses`: `POST {baseUrl}/responses` with SSE, the OpenAI
//! Responses API (also served by Ollama, vLLM, LM Studio and others as
//! the open "Open Responses" standard). Stateless: the whole history on
//! every request, `store: false`, reasoning items sent back with their
//! encrypted content.

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
pub(crate) const PLUGIN: &str = "llm-responses";

/// The sentinel some compatible servers send after the last event; this
/// wire ends at its terminal event, so it is skipped.
const DONE: &str = "[DONE]";

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
    /// A request with no bytes for this long fails with `TIMEOUT`.
    pub stream_idle_timeout_ms: u64,
    /// Default `max_output_tokens` when the request sets none.
    pub max_tokens: Option<u64>,
    /// The context window of a model `models` does not list (positive;
    /// default [`models::DEFAULT_CONTEXT_WINDOW`]).
    pub default_context_window: u64,
    /// The route's models (default: OpenAI's), for `resolveModel`.
    pub models: Option<Vec<models::Model>>,
    /// The most bytes one SSE line (and one event's `data`) may hold; a
    /// longer one fails the stream with `MALFORMED_RESPONSE`. 0: the default,
    /// [`sse::MAX_LINE_BYTES`].
    pub max_sse_line_bytes: usize,
    /// The most bytes one answer may stream: its text, reasoning, tool
    /// calls and encrypted reasoning, each delta counting
    /// [`answer_cap::DELTA_COST`] more. 0: the default,
    /// [`answer_cap::DEFAULT_MAX_ANSWER_BYTES`].
    pub max_answer_bytes: usize,
    /// The most tool calls one answer may start. 0: the default,
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

    /// The route's catalog: the config's models (else OpenAI's) and the
    /// defaults for the models it does not list.
    fn catalog(&self) -> models::Catalog {
        models::Catalog {
            models: self.models.clone().unwrap_or_else(models::openai),
            default_window: self.default_context_window,
            max_tokens: self.max_tokens,
            reasoning: self.reasoning,
            default_effort: self.reasoning_effort.clone(),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
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
    catalog: Rc<models::Catalog>,
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
    /// that ends it otherwise. Dropping it (the caller cancelled) drops
    /// the response, which closes the connection.
    async fn exchange(&self, request: Payload, tx: &ReplySender) -> Result<(), LlmFailure> {
        let key = exchange::api_key(&self.config.api_key_env)?;
        let request: request::Request = request.parse().map_err(|e| {
            LlmFailure::new(
                code::INVALID_REQUEST,
                format!("the request does not fit the Responses adapter: {e}"),
            )
        })?;
        let body = self
            .converter
            .body(&self.config, &self.catalog, request)
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
        let idle = Duration::from_millis(self.config.stream_idle_timeout_ms);
        let response = exchange::send(http, &url, idle).await?;
        let mut events = Events::new(response, self.config.sse_cap(), idle, PLUGIN);
        let mut state =
            stream::StreamState::new(self.config.answer_cap(), self.config.tool_call_cap());
        while let Some(batch) = events.next().await? {
            for data in batch {
                if data == DONE {
                    continue;
                }
                for c in state.on_data(&data)? {
                    if !tx.send(c) {
                        return Ok(()); // the caller is gone: drop the request
                    }
                }
                if state.done() {
                    return Ok(());
                }
            }
        }
        Err(LlmFailure::new(
            code::STREAM_CLOSED,
            "the stream ended before response.completed",
        ))
    }
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
        if config.default_context_window == 0 {
            return Err(Error::new(
                codes::INVALID_CONFIG,
                "defaultContextWindow must be a positive integer",
            ));
        }
        let provider = config.provider.clone();
        let catalog = Rc::new(config.catalog());
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
            move |params| catalog.resolve(params),
        )
        .await
    }
}

dsh_sdk::export_plugin!(Responses);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn config(v: Value) -> Config {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_caps_default_when_absent_or_zero() {
        assert_eq!(config(json!({})).sse_cap(), sse::MAX_LINE_BYTES);
        assert_eq!(
            config(json!({exchange::MAX_SSE_LINE_FIELD: 0})).sse_cap(),
            sse::MAX_LINE_BYTES
        );
        assert_eq!(
            config(json!({exchange::MAX_SSE_LINE_FIELD: 1024})).sse_cap(),
            1024
        );
        let default = answer_cap::DEFAULT_MAX_ANSWER_BYTES;
        assert_eq!(config(json!({answer_cap::FIELD: 0})).answer_cap(), default);
        assert_eq!(config(json!({answer_cap::FIELD: 4096})).answer_cap(), 4096);
        let calls = answer_cap::DEFAULT_MAX_TOOL_CALLS;
        assert_eq!(
            config(json!({answer_cap::CALLS_FIELD: 0})).tool_call_cap(),
            calls
        );
        assert_eq!(
            config(json!({answer_cap::CALLS_FIELD: 8})).tool_call_cap(),
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
        assert_eq!(c.catalog().models, models::openai());
        // An unknown key is refused, naming it.
        let e = serde_json::from_value::<Config>(json!({"baseURL": "x"}))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("baseURL"), "{e}");
    }
}
