//! The `llm` service (plugin `llm`, reference dsh-core §3): the params and
//! reply of each method of [`crate::names::llm`], the payloads of the bus
//! events the provider dispatches, and [`Llm`], a client with one method
//! per service method.
//!
//! A stream request keeps its history raw: [`StreamRequest::messages`] is a
//! slice of the JSON texts the messages were logged as, serialized as they
//! are, and the router hands them to the adapter without parsing them.
//! `serde_json::Value` stays where a payload is open: the call config (an
//! `agent/request` listener may add options the adapter reads), tool
//! schemas, and the chunks an adapter streams.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::names::{llm as method, service};
use crate::vocab::records::{AdapterDefaults, CallConfig};
use crate::{CallStream, Context, Payload, Result, Service};

// ---- params ----------------------------------------------------------------

/// Params of `resolveModelInfo` (and of an adapter's `resolveModel`): one
/// model of one route.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelInfoParams {
    /// The provider route.
    pub provider: String,
    /// The exact model id the adapter is given.
    pub model: String,
}

/// A model's context capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelContext {
    /// Tokens the model reads at most (a positive integer).
    pub context_window: u64,
}

/// One reasoning effort a model offers (the original's
/// `LlmReasoningEffortInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningEffortInfo {
    /// The effort's id, as a call config's `reasoningEffort` names it
    /// (non-empty, unique within the model).
    pub id: String,
    /// A display name (non-empty).
    pub name: String,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// The reasoning efforts a model offers (the original's
/// `LlmModelReasoningInfo`). A model without it takes no
/// `reasoningEffort` at all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelReasoningInfo {
    /// The efforts, in the adapter's order (at least one).
    pub efforts: Vec<ReasoningEffortInfo>,
    /// The effort a call that names none gets (one of `efforts`); none
    /// leaves such a call without an effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_effort: Option<String>,
}

/// Where a model's context window came from (`resolveModelInfo`'s
/// `contextSource`, `{"kind": ...}`), so a user can tell a figure the
/// server stated from one assumed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ContextSource {
    /// The route's config (a model's `contextWindow`, or its
    /// `defaultContextWindow`).
    Config,
    /// The adapter's built-in catalog.
    Catalog,
    /// Asked of the model's server.
    Server {
        /// The endpoint that stated it: its path (`/props`,
        /// `/v1/models`, `/api/show`...).
        endpoint: String,
    },
    /// Nothing stated it: the adapter's default.
    Default,
    /// A kind this SDK does not know (a newer adapter's).
    #[serde(other)]
    Other,
}

/// Reply of `resolveModelInfo`: the model's identity and what is known of
/// its capacity and reasoning (the original's `LlmResolvedModelInfo`;
/// fields of other adapters are kept).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    /// The route, as asked.
    pub provider: String,
    /// The model id, as asked.
    pub id: String,
    /// A display name (non-empty).
    pub name: String,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its context window, when the adapter knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ModelContext>,
    /// The output cap used when a request sets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_max_tokens: Option<u64>,
    /// The reasoning efforts it offers; none when it takes no
    /// `reasoningEffort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ModelReasoningInfo>,
    /// Where `context`'s window came from, when the adapter says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_source: Option<ContextSource>,
    /// Fields of other adapters (modalities...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ModelInfo {
    /// What an adapter that knows nothing of `model` answers: its id as its
    /// name, no capacity.
    pub fn bare(params: &ModelInfoParams) -> ModelInfo {
        ModelInfo {
            provider: params.provider.clone(),
            id: params.model.clone(),
            name: params.model.clone(),
            ..ModelInfo::default()
        }
    }
}

/// Reply of `resolveCallConfig` (its params are the [`CallConfig`]): the
/// call config checked against its model's metadata, with the model's
/// defaults materialized, and the model's capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedCall {
    /// The config as asked, plus `maxTokens` (the model's
    /// `defaultMaxTokens`) and `reasoningEffort` (its `defaultEffort`)
    /// where the call set none and the model has one.
    pub config: CallConfig,
    /// Which of `config`'s fields were filled in from the model's metadata
    /// rather than asked for (the `request/header`'s markers).
    #[serde(default)]
    pub adapter_defaults: AdapterDefaults,
    /// The model's context window, when its adapter knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ModelContext>,
}

/// Params of `registerAdapter`: the provider routes an adapter serves, and
/// its service (which answers [`crate::names::llm_adapter::STREAM`]). The
/// registration lives until the adapter's plugin is disposed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterAdapterParams {
    /// The routes (non-empty, each non-empty and not served already).
    pub providers: Vec<String>,
    /// The adapter's service (non-empty).
    #[serde(default)]
    pub service: String,
}

/// Params of `providers` (none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvidersParams {}

/// Params of `cancel`: aborts the requests under `signal`, streaming now
/// or started later (a name stays aborted, like an `AbortSignal`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelParams {
    /// The name the request was given in its `signal` field.
    #[serde(default)]
    pub signal: String,
}

/// Reply of `cancel`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelReply {
    /// A request was streaming under the signal (else the cancel waits
    /// for the next one under it).
    pub streaming: bool,
}

/// The `purpose` a call config may carry (the original's
/// `GenerateOptions.purpose`): an auxiliary call an adapter may treat
/// apart from conversation requests.
pub mod purpose {
    /// A compaction's summary request (`x-deepseek-harness-compact: 1`
    /// under `llm-deepseek`).
    pub const COMPACTION: &str = "compaction";
    /// A session title request.
    pub const SESSION_TITLE: &str = "session-title";
}

/// Params of `stream` (reference §3.2 `LlmRequest`), as a caller writes
/// them: the call config flattened first, then the history (raw), the
/// system prompt, the tools and the session id, in that key order.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamRequest<'a> {
    /// The call config: `provider`, `model`, `maxTokens` and whatever an
    /// `agent/request` listener added. It must not hold the keys below.
    #[serde(flatten)]
    pub config: &'a Map<String, Value>,
    /// The model history, each message the JSON text it was logged as.
    pub messages: &'a [Box<RawValue>],
    /// The system prompt, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<&'a str>,
    /// The tool schemas, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<&'a [Value]>,
    /// The session the request is for.
    pub session_id: &'a str,
    /// A name for the request, so `cancel` can stop it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<&'a str>,
}

impl StreamRequest<'_> {
    /// The keys the request always sets itself, which a call config must
    /// not hold (a caller removes them from a config it did not build).
    /// `signal` is not among them: a config may name the request, and then
    /// [`StreamRequest::signal`] stays `None`.
    pub const OWN_KEYS: [&'static str; 4] = ["messages", "system", "tools", "sessionId"];
}

// ---- bus payloads ----------------------------------------------------------

/// Payload of [`crate::names::bus::LLM_STREAM`] (waterfall, before the
/// request reaches its adapter): the request without its history and its
/// signal. A listener may re-route (`provider`) or reconfigure it; the
/// innermost answer is the payload itself. Fields other than the route are
/// open (`rest`), kept in their order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamRouting {
    /// The provider route the adapter is chosen by.
    #[serde(default)]
    pub provider: String,
    /// The model.
    #[serde(default)]
    pub model: String,
    /// Every other field (`maxTokens`, `system`, `tools`, `sessionId`,
    /// options).
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Payload of [`crate::names::bus::LLM_ADAPTERS_UPDATED`] (emitted when an
/// adapter registers): nothing, `{}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdaptersUpdated {}

// ---- client ----------------------------------------------------------------

/// A typed client of the `llm` service: one method per service method,
/// each sending the params type above and parsing the reply type (an
/// unexpected reply is `INVALID_PAYLOAD`).
#[derive(Clone)]
pub struct Llm(Service);

impl Llm {
    /// The `llm` service of `ctx`.
    pub fn new(ctx: &Context) -> Llm {
        Llm(ctx.service(service::LLM))
    }

    /// The untyped client underneath.
    pub fn service(&self) -> &Service {
        &self.0
    }

    /// `registerAdapter`: serves `params.providers` with `params.service`.
    pub async fn register_adapter(&self, params: &RegisterAdapterParams) -> Result<()> {
        self.0.call_as(method::REGISTER_ADAPTER, params).await
    }

    /// `resolveModelInfo`: what route `provider` knows of `model`.
    pub async fn resolve_model_info(&self, provider: &str, model: &str) -> Result<ModelInfo> {
        let params = ModelInfoParams {
            provider: provider.to_owned(),
            model: model.to_owned(),
        };
        self.0.call_as(method::RESOLVE_MODEL_INFO, &params).await
    }

    /// `resolveCallConfig`: `config` checked against its model's metadata,
    /// with the model's defaults filled in (`NO_ADAPTER` when no adapter
    /// serves its route, `UNSUPPORTED_REASONING_EFFORT` for an effort the
    /// model does not offer).
    pub async fn resolve_call_config(&self, config: &CallConfig) -> Result<ResolvedCall> {
        self.0.call_as(method::RESOLVE_CALL_CONFIG, config).await
    }

    /// `providers`: the routes served now.
    pub async fn providers(&self) -> Result<Vec<String>> {
        self.0.call_as(method::PROVIDERS, ProvidersParams {}).await
    }

    /// `cancel`: stops the requests named `signal` (they end
    /// `finish{aborted}`), and the ones started under it later.
    pub async fn cancel(&self, signal: &str) -> Result<CancelReply> {
        let params = CancelParams {
            signal: signal.to_owned(),
        };
        self.0.call_as(method::CANCEL, &params).await
    }

    /// `stream`: the request's chunks (text, reasoning, tool calls, one
    /// terminal `finish`); the history is serialized as it is, not
    /// re-encoded. Dropping the stream cancels the request.
    pub fn stream(&self, request: &StreamRequest<'_>) -> Result<CallStream> {
        Ok(self
            .0
            .stream_payload(method::STREAM, Payload::json(request)?))
    }
}

#[cfg(test)]
mod tests;
