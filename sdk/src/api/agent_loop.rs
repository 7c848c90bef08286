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

/// An agent's options: its model route, output limit and reasoning
/// effort. A route left out here must come from an `agent/request`
/// listener.
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
    /// The reasoning effort of requests on this route (`provider` and
    /// `model`), as the agent's user chose it (the `reasoningEffort` of the
    /// `agent-default-model` selection): the seed of a request on that
    /// route, checked by `llm.resolveCallConfig` (an effort the model does
    /// not offer fails the turn `UNSUPPORTED_REASONING_EFFORT`). A request
    /// on another route (`agents.selectModel`) does not get it. A dsh
    /// extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
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

/// The `meta` of [`CreateParams`]: what the new session's header records.
/// A subagent's creator sets the lineage fields; each is checked as the
/// params are read, so `create` refuses a bad one with `INVALID_PAYLOAD`
/// naming the field, and nothing is created.
///
/// ```
/// use dsh_sdk::api::agent_loop::{CreateMeta, SessionOrigin};
/// let meta = CreateMeta {
///     cwd: Some("/work".into()),
///     parent_session: Some("session-parent".into()),
///     origin: Some(SessionOrigin::Subagent),
///     delegation_depth: Some(1),
/// };
/// assert_eq!(
///     serde_json::to_string(&meta).unwrap(),
///     r#"{"cwd":"/work","parentSession":"session-parent","origin":"subagent","delegationDepth":1}"#
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateMeta {
    /// The session's working directory; without it the session has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The session that delegated this one (a subagent's parent): a
    /// non-empty session id.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lineage::parent_session"
    )]
    pub parent_session: Option<String>,
    /// Why the session exists, when it is not a person's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<SessionOrigin>,
    /// How many delegations deep the session is: a non-negative integer, 0
    /// for a top-level session, its parent's depth + 1 for a subagent's.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lineage::delegation_depth"
    )]
    pub delegation_depth: Option<u64>,
}

/// The `origin` of a session header (`CreateMeta::origin`): `"subagent"`
/// is the only one. Any other value is refused with a message that says
/// so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionOrigin {
    /// A session an agent delegated work to.
    Subagent,
}

impl SessionOrigin {
    /// The wire name of [`SessionOrigin::Subagent`].
    pub const SUBAGENT: &'static str = "subagent";

    /// The wire name (as the session header stores it).
    pub fn as_str(self) -> &'static str {
        match self {
            SessionOrigin::Subagent => Self::SUBAGENT,
        }
    }
}

impl fmt::Display for SessionOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SessionOrigin {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_str(lineage::OriginVisitor)
    }
}

/// The checks of [`CreateMeta`]'s lineage fields, as serde visitors, so a
/// bad value is refused while the params are read, with a message that
/// names the field and what it must be.
mod lineage {
    use std::fmt;

    use serde::de::{self, Deserializer, Visitor};

    use super::SessionOrigin;

    /// Reads [`SessionOrigin`].
    pub(super) struct OriginVisitor;

    impl Visitor<'_> for OriginVisitor {
        type Value = SessionOrigin;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(
                "`origin` \"subagent\" (leave `origin` out for a session that is not a subagent's)",
            )
        }

        fn visit_str<E: de::Error>(self, s: &str) -> Result<SessionOrigin, E> {
            match s {
                SessionOrigin::SUBAGENT => Ok(SessionOrigin::Subagent),
                other => Err(E::custom(format!(
                    "`origin` must be \"subagent\", got \"{other}\" (leave `origin` out for a session that is not a subagent's)"
                ))),
            }
        }
    }

    /// A session id that is not empty.
    struct ParentSession;

    impl Visitor<'_> for ParentSession {
        type Value = String;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("`parentSession` as the id of the session that delegated this one")
        }

        fn visit_str<E: de::Error>(self, s: &str) -> Result<String, E> {
            if s.is_empty() {
                return Err(E::custom(
                    "`parentSession` must be the id of the session that delegated this one, got an empty string (leave it out for a top-level session)",
                ));
            }
            Ok(s.to_owned())
        }
    }

    /// A delegation depth: a non-negative integer.
    struct Depth;

    impl Visitor<'_> for Depth {
        type Value = u64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("`delegationDepth` as a non-negative integer (0 for a top-level session)")
        }

        fn visit_u64<E: de::Error>(self, n: u64) -> Result<u64, E> {
            Ok(n)
        }

        fn visit_i64<E: de::Error>(self, n: i64) -> Result<u64, E> {
            u64::try_from(n).map_err(|_| {
                E::custom(format!(
                    "`delegationDepth` must be a non-negative integer (0 for a top-level session), got {n}"
                ))
            })
        }
    }

    /// Reads an optional field with `visitor` (null is absent).
    struct Optional<V>(V);

    impl<'de, V: Visitor<'de>> Visitor<'de> for Optional<V> {
        type Value = Option<V::Value>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            self.0.expecting(f)
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self.0).map(Some)
        }
    }

    /// `CreateMeta::parent_session`.
    pub(super) fn parent_session<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<String>, D::Error> {
        d.deserialize_option(Optional(ParentSession))
    }

    /// `CreateMeta::delegation_depth`.
    pub(super) fn delegation_depth<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<u64>, D::Error> {
        d.deserialize_option(Optional(Depth))
    }
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
    /// The session is a fork of a live one, seeded with its events up to a
    /// boundary (its header: the source's cwd, the source as
    /// `parentSession`, `seedLength`, and `meta`'s `origin` and
    /// `delegationDepth`); a new empty session when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<ForkFrom>,
    /// The creation transaction: the agent and its session are made but
    /// not announced, so the caller can set up the agent's scope (its tools,
    /// prompt sections, restrictions, all scoped to the id the reply names)
    /// before anyone sees it. `commit` then publishes it, `abandon` rolls it
    /// back, and so does the caller going away (or cancelling this call)
    /// before the commit. Use [`AgentLoop::prepare`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub setup: bool,
}

/// Where a forked session comes from (see [`CreateParams::fork`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkFrom {
    /// The live source session.
    pub session: String,
    /// The last seq of the seed; the source's last event when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boundary: Option<crate::api::sessions::Boundary>,
}

/// Params of `resume`: an agent on a stored (or live) session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeParams {
    /// The session to resume; a live agent of that id is answered as is.
    pub session_id: String,
    /// The agent's options.
    #[serde(default)]
    pub agent_options: AgentOptions,
    /// The creation transaction, as [`CreateParams::setup`] (a live agent
    /// of that id is refused: it has been announced already).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub setup: bool,
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
///
/// Generic over the message, so the loop sends typed messages
/// (`PreStep<crate::vocab::Message>`) and a listener may read them typed
/// too; the default keeps them JSON for listeners that only pass them on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreStep<M = Value> {
    /// The agent.
    pub agent: String,
    /// The claimed inbox messages (user messages).
    pub messages: Vec<M>,
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

/// The answer of the [`crate::names::bus::AGENT_PRE_STEP`] waterfall
/// (generic over the message as [`PreStep`]; the loop reads
/// `PreStepDecision<crate::vocab::Message>`, so a listener that answers
/// something that is not a message is refused with `INVALID_PAYLOAD`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PreStepDecision<M = Value> {
    /// Enter (the default) or reject.
    #[serde(default)]
    pub kind: PreStepKind,
    /// The step's input messages, in order.
    #[serde(default = "Vec::new")]
    pub messages: Vec<M>,
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
///
/// Generic over the failure so a listener can read it typed,
/// `RequestError<Option<LlmFailure>>` (as `llm-retry` does); the default
/// keeps it a `Value` for the writers not moved to the typed failure yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestError<F = Value> {
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
    pub failure: F,
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
        self.about(method::RELEASE, agent).await
    }

    /// `create` or `resume` with `setup`: the agent, made and not yet
    /// announced, as a [`Prepared`] to set up and then commit. `ctx` is
    /// the caller's own context (where an uncommitted [`Prepared`] that is
    /// dropped sends its `abandon`).
    pub async fn prepare(&self, ctx: &Context, params: Preparation) -> Result<Prepared> {
        let created: AgentRef = match params {
            Preparation::Create(mut p) => {
                p.setup = true;
                self.0.call_as(method::CREATE, &p).await?
            }
            Preparation::Resume(mut p) => {
                p.setup = true;
                self.0.call_as(method::RESUME, &p).await?
            }
        };
        Ok(Prepared::adopt(ctx, created.agent))
    }

    /// `roots`: the live agents no other agent delegated to, sorted.
    pub async fn roots(&self) -> Result<Vec<String>> {
        self.0.call_as(method::ROOTS, ListParams {}).await
    }

    /// `isOwnedBy`: whether the calling plugin owns live agent `agent`.
    pub async fn is_owned_by_me(&self, agent: &str) -> Result<bool> {
        let params = AgentRef {
            agent: agent.to_owned(),
        };
        self.0.call_as(method::IS_OWNED_BY, &params).await
    }

    /// `commit`: publishes an agent made with `setup`.
    pub async fn commit(&self, agent: &str) -> Result<AgentRef> {
        let params = AgentRef {
            agent: agent.to_owned(),
        };
        self.0.call_as(method::COMMIT, &params).await
    }

    /// `abandon`: rolls back an agent made with `setup`.
    pub async fn abandon(&self, agent: &str) -> Result<()> {
        self.about(method::ABANDON, agent).await
    }

    async fn about(&self, name: &str, agent: &str) -> Result<()> {
        let params = AgentRef {
            agent: agent.to_owned(),
        };
        self.0
            .call_as::<serde_json::Value>(name, &params)
            .await
            .map(drop)
    }
}

/// What [`AgentLoop::prepare`] makes.
#[derive(Debug, Clone)]
pub enum Preparation {
    /// A new agent (`create`).
    Create(CreateParams),
    /// An agent on a stored session (`resume`).
    Resume(ResumeParams),
}

/// An agent made with `setup` and not yet announced: set up its scope
/// through [`Prepared::agent`], then [`Prepared::commit`]. Dropped
/// uncommitted (an error, a cancelled task), it is abandoned, so nothing
/// of it is ever announced and its id is free again.
pub struct Prepared {
    ctx: Context,
    agent: String,
    settled: bool,
}

impl Prepared {
    /// Takes charge of pending agent `agent` (one another plugin prepared
    /// and handed over with [`Prepared::hand_over`]).
    pub fn adopt(ctx: &Context, agent: String) -> Prepared {
        Prepared {
            ctx: ctx.clone(),
            agent,
            settled: false,
        }
    }

    /// The agent's id: the scope its setup registers into.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// Gives the pending agent to another plugin (which adopts it): this
    /// handle no longer abandons it. It stays the preparing plugin's until
    /// committed: rolled back if that plugin goes first.
    pub fn hand_over(mut self) -> String {
        self.settled = true;
        std::mem::take(&mut self.agent)
    }

    /// Publishes the agent; the calling plugin owns it from then on.
    pub async fn commit(mut self) -> Result<AgentRef> {
        self.settled = true;
        AgentLoop::new(&self.ctx).commit(&self.agent).await
    }

    /// Rolls the agent back now (rather than when dropped).
    pub async fn abandon(mut self) -> Result<()> {
        self.settled = true;
        AgentLoop::new(&self.ctx).abandon(&self.agent).await
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let (ctx, agent) = (self.ctx.clone(), std::mem::take(&mut self.agent));
        self.ctx.spawn(async move {
            // Nothing to do when the creation was rolled back already.
            let _ = AgentLoop::new(&ctx).abandon(&agent).await;
        });
    }
}

/// The agent events' payloads name the agent they are about: dispatched
/// with [`crate::Context::dispatch_about`], they are scoped to it.
macro_rules! about_the_agent {
    ($($ty:ident $(<$g:ident>)?),* $(,)?) => {
        $(impl$(<$g>)? crate::Subject for $ty$(<$g>)? {
            fn subject(&self) -> &str {
                &self.agent
            }
        })*
    };
}

about_the_agent!(
    AgentRef,
    PreStep<M>,
    AgentRequest<C>,
    RequestError<F>,
    TurnStopping,
    InboxMessage<M>,
    InboxClaimed<M>,
    StatusChanged,
    AgentError,
    SessionStart,
);

#[cfg(test)]
mod tests;
