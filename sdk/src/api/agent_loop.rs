//! The `agentLoop` service (plugin `agent-loop`, reference dsh-core §4):
//! the params and reply of each method of [`crate::names::agent_loop`], the
//! payloads of the `agent/*` bus events the loop dispatches
//! ([`crate::names::bus`]), and [`AgentLoop`], a client with one method per
//! service method.
//!
//! `serde_json::Value` stays where a payload is open: user messages, the
//! call config a `agent/request` listener may extend, a model failure as an
//! adapter reported it, turn-end reasons and cancel causes.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::names::{agent_loop as method, service};
use crate::{Context, Error, Result, Service};

// ---- params ----------------------------------------------------------------

/// An agent's options: its model route and output limit. A route left out
/// here must come from an `agent/request` listener.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentOptions {
    /// The provider route (an adapter's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The most tokens a response may have (null is none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<MaxTokens>,
}

/// A `maxTokens` as sent: any JSON value, so that one which is not a
/// positive safe integer is refused by `create` with the original's
/// message rather than as a malformed payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MaxTokens(Value);

impl MaxTokens {
    /// The limit, if it is a non-negative integer.
    pub fn get(&self) -> Option<u64> {
        self.0.as_u64()
    }

    /// True when it was sent as null (no limit).
    pub fn is_null(&self) -> bool {
        self.0.is_null()
    }
}

impl From<u64> for MaxTokens {
    fn from(n: u64) -> MaxTokens {
        MaxTokens(Value::from(n))
    }
}

impl From<Value> for MaxTokens {
    fn from(v: Value) -> MaxTokens {
        MaxTokens(v)
    }
}

impl fmt::Display for MaxTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The `meta` of [`CreateParams`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateMeta {
    /// The session's working directory; without it the session has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// Params of `create`: an agent on a new session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateParams {
    /// The session id; `sessions` makes one up when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The agent's options.
    #[serde(default)]
    pub agent_options: AgentOptions,
    /// Session metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<CreateMeta>,
}

/// Params of `resume`: an agent on a stored (or live) session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeParams {
    /// The session to resume; a live agent of that id is answered as is.
    pub session_id: String,
    /// The agent's options.
    #[serde(default)]
    pub agent_options: AgentOptions,
}

/// Params of `list` (none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListParams {}

// ---- replies ---------------------------------------------------------------

/// Reply of `create` and `resume`, and the payload of
/// [`crate::names::bus::AGENT_CREATED`] and
/// [`crate::names::bus::AGENT_DISPOSED`]: an agent, by its session id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRef {
    /// The agent.
    pub agent: String,
}

// ---- bus payloads ----------------------------------------------------------

/// Payload of [`crate::names::bus::AGENT_PRE_STEP`] (waterfall, scoped to
/// the agent): the messages a step is about to enter. The innermost answer
/// is [`PreStepDecision`] `enter` with these messages plus a changed
/// runtime context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreStep {
    /// The agent.
    pub agent: String,
    /// The claimed inbox messages (user messages).
    pub messages: Vec<Value>,
    /// The turn.
    pub turn: u64,
    /// The step about to start (1 for the first).
    pub step: u64,
    /// The name under which a listener may run model requests
    /// (`StreamRequest::signal`): when the turn is cancelled while the
    /// waterfall runs, the loop calls `llm.cancel` with it, then still
    /// waits for the listeners (the original's `signal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
}

/// What a pre-step listener decides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PreStepKind {
    /// The step runs with [`PreStepDecision::messages`].
    #[default]
    Enter,
    /// The turn ends `blocked`.
    Reject,
}

/// The answer of the [`crate::names::bus::AGENT_PRE_STEP`] waterfall.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PreStepDecision {
    /// Enter (the default) or reject.
    #[serde(default)]
    pub kind: PreStepKind,
    /// The step's input messages, in order.
    #[serde(default)]
    pub messages: Vec<Value>,
}

/// Payload of [`crate::names::bus::AGENT_REQUEST`] (waterfall, scoped):
/// the call config of a model request. The innermost answer is `config`; a
/// listener may return another (re-route, add options), which the request
/// and its logged header carry as returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRequest<C = Map<String, Value>> {
    /// The agent.
    pub agent: String,
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The config: [`RequestConfig`] as the loop seeds it, open for
    /// listeners (the default).
    pub config: C,
}

/// The call config the loop seeds [`AgentRequest`] with: the route of the
/// step's assembly and the agent's `maxTokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestConfig {
    /// The provider route (empty when the agent has none).
    pub provider: String,
    /// The model (empty when the agent has none).
    pub model: String,
    /// The output limit, if the agent has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// Payload of [`crate::names::bus::AGENT_REQUEST_ERROR`] (waterfall,
/// scoped): a model request failed. The innermost answer is null (the turn
/// fails); [`RequestErrorDecision`] `retry` runs the request again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestError {
    /// The agent.
    pub agent: String,
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The provider route of the request.
    pub provider: String,
    /// The failure as the stream's `finish` chunk reported it
    /// ([`crate::vocab::LlmFailure`]'s shape; null when it had none).
    pub failure: Value,
    /// The retry policy in force.
    pub retry_policy: RetryPolicy,
}

/// The retry policy of [`RequestError`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// `"normal"`.
    pub mode: String,
    /// How many retries a failure gets.
    pub max_retries: u32,
    /// The first delay.
    pub initial_delay_ms: u64,
    /// The longest delay.
    pub max_delay_ms: u64,
    /// The random share of a delay.
    pub jitter_ratio: f64,
}

impl Default for RetryPolicy {
    /// The loop's policy: five retries from 500 ms to 10 s, 10% jitter.
    fn default() -> RetryPolicy {
        RetryPolicy {
            mode: "normal".to_owned(),
            max_retries: 5,
            initial_delay_ms: 500,
            max_delay_ms: 10_000,
            jitter_ratio: 0.1,
        }
    }
}

/// The answer of the [`crate::names::bus::AGENT_REQUEST_ERROR`] waterfall:
/// null (the default: the turn fails) or `{kind: "retry"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestErrorDecision {
    /// `"retry"` runs the request again; anything else fails the turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl RequestErrorDecision {
    /// The decision's kind that runs the request again.
    pub const RETRY: &'static str = "retry";

    /// `{kind: "retry"}`.
    pub fn retry() -> RequestErrorDecision {
        RequestErrorDecision {
            kind: Some(Self::RETRY.to_owned()),
        }
    }

    /// True when the request is to run again.
    pub fn is_retry(&self) -> bool {
        self.kind.as_deref() == Some(Self::RETRY)
    }
}

/// Payload of [`crate::names::bus::AGENT_TURN_STOPPING`] (serial, scoped):
/// a turn is about to end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnStopping {
    /// The agent.
    pub agent: String,
    /// The turn.
    pub turn: u64,
}

/// Payload of [`crate::names::bus::AGENT_INBOX_INSERTED`] and
/// [`crate::names::bus::AGENT_INBOX_DISCARDED`] (emitted, scoped): a
/// message entered or left an inbox. Generic over the message, so the loop
/// emits borrowed messages and a listener reads owned ones (the default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboxMessage<M = Value> {
    /// The agent.
    pub agent: String,
    /// The message.
    pub message: M,
}

/// Payload of [`crate::names::bus::AGENT_INBOX_CLAIMED`] (emitted,
/// scoped): a turn claimed a pending message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboxClaimed<M = Value> {
    /// The agent.
    pub agent: String,
    /// The message.
    pub message: M,
    /// The turn that claimed it.
    pub turn: u64,
}

/// Payload of [`crate::names::bus::AGENT_STATUS`] (emitted, scoped).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusChanged {
    /// The agent.
    pub agent: String,
    /// Its new status.
    pub status: super::agents::RunStatus,
}

/// Payload of [`crate::names::bus::AGENT_ERROR`] (emitted, scoped): a turn
/// failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentError {
    /// The agent.
    pub agent: String,
    /// The turn.
    pub turn: u64,
    /// 0 when the turn could not even start; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// What failed.
    pub error: Error,
}

/// Why an agent's session started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionSource {
    /// A new session (`agentLoop.create`).
    Startup,
    /// A stored session (`agentLoop.resume`).
    Resume,
}

/// Payload of [`crate::names::bus::AGENT_SESSION_START`] (emitted,
/// scoped).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStart {
    /// The agent.
    pub agent: String,
    /// Startup or resume.
    pub source: SessionSource,
}

/// Payload of [`crate::names::bus::AGENT_LOOP_CONFIG_START_FAILED`]
/// (emitted): an agent of the plugin's config did not start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigStartFailed {
    /// The session the agent was to run on.
    pub session_id: String,
    /// Why (`{code, message}`).
    pub error: Error,
}

// ---- client ----------------------------------------------------------------

/// A typed client of the `agentLoop` service: one method per service
/// method, each sending the params type above and parsing the reply type
/// (an unexpected reply is `INVALID_PAYLOAD`).
#[derive(Clone)]
pub struct AgentLoop(Service);

impl AgentLoop {
    /// The `agentLoop` service of `ctx`.
    pub fn new(ctx: &Context) -> AgentLoop {
        AgentLoop(ctx.service(service::AGENT_LOOP))
    }

    /// The untyped client underneath.
    pub fn service(&self) -> &Service {
        &self.0
    }

    /// `create`: an agent on a new session, owned by the calling plugin.
    pub async fn create(&self, params: &CreateParams) -> Result<AgentRef> {
        self.0.call_as(method::CREATE, params).await
    }

    /// `resume`: an agent on a stored session (or the live one).
    pub async fn resume(&self, params: &ResumeParams) -> Result<AgentRef> {
        self.0.call_as(method::RESUME, params).await
    }

    /// `list`: the live agents.
    pub async fn list(&self) -> Result<Vec<String>> {
        self.0.call_as(method::LIST, ListParams {}).await
    }

    /// `release`: the agent outlives its owner until the next `resume` of
    /// it (which owns it) or an explicit dispose.
    pub async fn release(&self, agent: &str) -> Result<()> {
        let params = AgentRef {
            agent: agent.to_owned(),
        };
        self.0
            .call_as::<serde_json::Value>(method::RELEASE, &params)
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests;
