//! The data of each core event of the session log, one struct per type,
//! with the original's field names and the order this harness writes them
//! in. Each keeps the fields it does not know in `extra`, so a record of
//! the original or of a newer plugin survives a read and a write. Read one
//! with [`super::SessionEvent::data_as`]; append one with
//! [`crate::api::sessions::NewEvent::typed`].
//!
//! Which type carries which struct:
//!
//! | type | data |
//! |---|---|
//! | `turn/start` | [`TurnStart`] |
//! | `turn/end` | [`TurnEnd`] |
//! | `step/start`, `step/end` | [`StepBoundary`] |
//! | `user/message` | [`super::Message`] itself |
//! | `assistant/chunk` | [`AssistantChunk`] |
//! | `assistant/message` | [`AssistantMessage`] |
//! | `tool/call` | [`ToolCall`] |
//! | `tool/result` | [`ToolResult`] |
//! | `todo/write` | [`TodoWrite`] |
//! | `request/header` | [`RequestHeaderRecord`] |
//! | `request/context` | [`RequestContext`] |
//! | `session/end-seed` | [`EndSeed`] |
//! | `agent/inbox/spliced` | [`InboxSpliced`] |
//! | `llm/retry`, `llm/retry-started` | [`LlmRetry`], [`LlmRetryStarted`] |
//! | `command/run`, `command/done` | [`crate::api::commands::CommandRun`], [`crate::api::commands::CommandDone`] |
//! | `compaction/*` | [`super::compaction`] |
//! | `permission/preset`, `sandbox/mode`, `plan/mode` | [`PermissionPreset`], [`SandboxMode`], [`PlanMode`] |
//! | `approval/policy`, `approval/asked`, `approval/decided` | [`ApprovalPolicy`], [`ApprovalAsked`], [`ApprovalDecided`] |
//! | `session/title` | [`SessionTitle`] |
//! | `hook/invoked`, `hook/result` | [`HookInvoked`], [`HookResult`] |
//! | `subagent/descriptor` | [`SubagentDescriptor`] |

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::chunk::Chunk;
use super::message::{Extra, Message};
use super::{open, LlmFailure, TokenUsage};

/// `turn/start`: a turn opens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnStart {
    /// The turn number (from 1, contiguous over the session's life).
    pub turn: u64,
    /// Fields this harness does not know (an older log's `trigger`).
    #[serde(flatten)]
    pub extra: Extra,
}

impl TurnStart {
    /// Turn `turn` opens.
    pub fn new(turn: u64) -> TurnStart {
        TurnStart {
            turn,
            extra: Extra::new(),
        }
    }
}

/// `turn/end`: a turn closes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnEnd {
    /// The turn.
    pub turn: u64,
    /// Why it ended.
    pub reason: TurnEndReason,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

impl TurnEnd {
    /// Turn `turn` ends for `reason`.
    pub fn new(turn: u64, reason: TurnEndReason) -> TurnEnd {
        TurnEnd {
            turn,
            reason,
            extra: Extra::new(),
        }
    }
}

/// Why a turn ended (`reason`, tagged by `kind`; open: plugins may add
/// kinds, kept whole in [`TurnEndReason::Other`]).
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEndReason {
    /// The model answered without asking for more tools.
    Completed,
    /// It was cancelled.
    Aborted {
        /// By whom.
        reason: CancelCause,
    },
    /// A listener of `agent/turn-stopping` stopped it.
    Blocked,
    /// The model request failed for good.
    Error {
        /// The failure.
        error: LlmFailure,
    },
    /// The output limit cut the answer.
    MaxTokens,
    /// The process died mid-turn (written by crash repair only).
    Interrupted,
    /// A kind this harness does not know, kept whole.
    Other(Extra),
}

/// The `kind` tags of [`TurnEndReason`].
pub mod turn_end_kind {
    /// [`super::TurnEndReason::Completed`].
    pub const COMPLETED: &str = "completed";
    /// [`super::TurnEndReason::Aborted`].
    pub const ABORTED: &str = "aborted";
    /// [`super::TurnEndReason::Blocked`].
    pub const BLOCKED: &str = "blocked";
    /// [`super::TurnEndReason::Error`].
    pub const ERROR: &str = "error";
    /// [`super::TurnEndReason::MaxTokens`].
    pub const MAX_TOKENS: &str = "max-tokens";
    /// [`super::TurnEndReason::Interrupted`].
    pub const INTERRUPTED: &str = "interrupted";
}

impl TurnEndReason {
    /// The `kind` tag.
    pub fn kind(&self) -> &str {
        match self {
            TurnEndReason::Completed => turn_end_kind::COMPLETED,
            TurnEndReason::Aborted { .. } => turn_end_kind::ABORTED,
            TurnEndReason::Blocked => turn_end_kind::BLOCKED,
            TurnEndReason::Error { .. } => turn_end_kind::ERROR,
            TurnEndReason::MaxTokens => turn_end_kind::MAX_TOKENS,
            TurnEndReason::Interrupted => turn_end_kind::INTERRUPTED,
            TurnEndReason::Other(o) => o.get("kind").and_then(Value::as_str).unwrap_or(""),
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
enum KnownTurnEnd<C, F> {
    Completed,
    Aborted { reason: C },
    Blocked,
    Error { error: F },
    MaxTokens,
    Interrupted,
}

impl Serialize for TurnEndReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        type Ref<'a> = KnownTurnEnd<&'a CancelCause, &'a LlmFailure>;
        match self {
            TurnEndReason::Completed => Ref::Completed.serialize(s),
            TurnEndReason::Aborted { reason } => Ref::Aborted { reason }.serialize(s),
            TurnEndReason::Blocked => Ref::Blocked.serialize(s),
            TurnEndReason::Error { error } => Ref::Error { error }.serialize(s),
            TurnEndReason::MaxTokens => Ref::MaxTokens.serialize(s),
            TurnEndReason::Interrupted => Ref::Interrupted.serialize(s),
            TurnEndReason::Other(o) => o.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for TurnEndReason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        open::deserialize(d)
    }
}

impl open::FromMap for TurnEndReason {
    fn from_map(map: Extra) -> Result<Self, String> {
        use turn_end_kind::*;
        let known = [COMPLETED, ABORTED, BLOCKED, ERROR, MAX_TOKENS, INTERRUPTED];
        let value = match open::split(map, "kind", &known)? {
            Ok(value) => value,
            Err(other) => return Ok(TurnEndReason::Other(other)),
        };
        let known: KnownTurnEnd<CancelCause, LlmFailure> = open::known(value)?;
        Ok(match known {
            KnownTurnEnd::Completed => TurnEndReason::Completed,
            KnownTurnEnd::Aborted { reason } => TurnEndReason::Aborted { reason },
            KnownTurnEnd::Blocked => TurnEndReason::Blocked,
            KnownTurnEnd::Error { error } => TurnEndReason::Error { error },
            KnownTurnEnd::MaxTokens => TurnEndReason::MaxTokens,
            KnownTurnEnd::Interrupted => TurnEndReason::Interrupted,
        })
    }
}

/// Who cancelled a turn (`reason` of an `aborted` [`TurnEndReason`],
/// tagged by `kind`): the original's `AgentCancelCause`, `legacy` for
/// imported logs, and, as in the original, whatever other cause a plugin
/// passes to `agents.cancel`, kept whole in [`CancelCause::Other`]. A
/// known kind that is malformed (`{kind: "hook", reason: 3}`) is an error.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelCause {
    /// `{kind: "user"}`: the user.
    User,
    /// `{kind: "parent"}`: the parent agent.
    Parent,
    /// `{kind: "hook", reason?}`: a hook. The original types the reason as
    /// required, but a hook that passes none writes `{kind: "hook"}` (its
    /// JSON drops an undefined field), so a log may hold one.
    Hook {
        /// What the hook said, if it said anything.
        reason: Option<String>,
    },
    /// `{kind: "disposed"}`: the agent was disposed.
    Disposed,
    /// `{kind: "legacy"}`: an imported log's cancellation.
    Legacy,
    /// A kind this harness does not know (`{kind: "timeout", ...}`), kept
    /// whole (`kind` included).
    Other(Extra),
}

/// The `kind` tags of [`CancelCause`].
pub mod cancel_kind {
    /// [`super::CancelCause::User`].
    pub const USER: &str = "user";
    /// [`super::CancelCause::Parent`].
    pub const PARENT: &str = "parent";
    /// [`super::CancelCause::Hook`].
    pub const HOOK: &str = "hook";
    /// [`super::CancelCause::Disposed`].
    pub const DISPOSED: &str = "disposed";
    /// [`super::CancelCause::Legacy`].
    pub const LEGACY: &str = "legacy";
}

impl CancelCause {
    /// The `kind` tag.
    pub fn kind(&self) -> &str {
        match self {
            CancelCause::User => cancel_kind::USER,
            CancelCause::Parent => cancel_kind::PARENT,
            CancelCause::Hook { .. } => cancel_kind::HOOK,
            CancelCause::Disposed => cancel_kind::DISPOSED,
            CancelCause::Legacy => cancel_kind::LEGACY,
            CancelCause::Other(o) => o.get("kind").and_then(Value::as_str).unwrap_or(""),
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
enum KnownCause<R> {
    User,
    Parent,
    Hook {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<R>,
    },
    Disposed,
    Legacy,
}

impl Serialize for CancelCause {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            CancelCause::User => KnownCause::<&str>::User.serialize(s),
            CancelCause::Parent => KnownCause::<&str>::Parent.serialize(s),
            CancelCause::Hook { reason } => KnownCause::Hook {
                reason: reason.as_deref(),
            }
            .serialize(s),
            CancelCause::Disposed => KnownCause::<&str>::Disposed.serialize(s),
            CancelCause::Legacy => KnownCause::<&str>::Legacy.serialize(s),
            CancelCause::Other(o) => o.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for CancelCause {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        open::deserialize(d)
    }
}

impl open::FromMap for CancelCause {
    fn from_map(map: Extra) -> Result<Self, String> {
        use cancel_kind::*;
        let known = [USER, PARENT, HOOK, DISPOSED, LEGACY];
        let value = match open::split(map, "kind", &known)? {
            Ok(value) => value,
            Err(other) => return Ok(CancelCause::Other(other)),
        };
        let known: KnownCause<String> = open::known(value)?;
        Ok(match known {
            KnownCause::User => CancelCause::User,
            KnownCause::Parent => CancelCause::Parent,
            KnownCause::Hook { reason } => CancelCause::Hook { reason },
            KnownCause::Disposed => CancelCause::Disposed,
            KnownCause::Legacy => CancelCause::Legacy,
        })
    }
}

/// `step/start` and `step/end`: one model call and its tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepBoundary {
    /// The turn.
    pub turn: u64,
    /// The step (from 1 in each turn).
    pub step: u64,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

impl StepBoundary {
    /// Step `step` of turn `turn`.
    pub fn new(turn: u64, step: u64) -> StepBoundary {
        StepBoundary {
            turn,
            step,
            extra: Extra::new(),
        }
    }
}

/// `assistant/chunk`: one raw stream chunk, logged as it came.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantChunk {
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The chunk.
    pub chunk: Chunk,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `assistant/message`: the assembled answer of a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The message (role `assistant`, source `model`).
    pub message: Message,
    /// The step's usage, when the adapter reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
    /// `true` when the stream was cut (the message keeps what was seen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<bool>,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `tool/call`: a tool call starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The call id.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// The arguments, raw JSON text as the model wrote them.
    pub arguments: String,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `tool/result`: a tool's result enters the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The message (role `user`, one `tool-result` block, source `tool`).
    pub message: Message,
    /// The error's name and code when the call failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolErrorRef>,
    /// The tool's presentation metadata (its own shape, for front-ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A failed call's error info, as its result carried it (the original
/// writes `result.error.info` whole): the error's class and code, and the
/// fields of whoever made it (a `tools/post-execute` hook may give an info
/// of its own, without a code or with more).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolErrorRef {
    /// The error's class (`ToolNotStartedError`, ...).
    pub name: String,
    /// Its code (`TOOL_NOT_STARTED`, ...), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

impl ToolErrorRef {
    /// The info of class `name` with `code`.
    pub fn new(name: impl Into<String>, code: impl Into<String>) -> ToolErrorRef {
        ToolErrorRef {
            name: name.into(),
            code: Some(code.into()),
            extra: Extra::new(),
        }
    }
}

/// `todo/write`: the todo list, replaced whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TodoWrite {
    /// The items, in order.
    pub todos: Vec<Todo>,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// One todo item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Todo {
    /// What to do.
    pub content: String,
    /// How far it is.
    pub status: TodoStatus,
    /// Fields this harness does not know (the model may send keys the
    /// tool's schema does not name; they are logged as they came).
    #[serde(flatten)]
    pub extra: Extra,
}

/// A todo item's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on.
    InProgress,
    /// Done.
    Completed,
}

/// `request/header`: the request header in force from here on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestHeaderRecord {
    /// The header, whole.
    pub header: RequestHeader,
    /// Why it was written.
    pub reason: HeaderReason,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Why a `request/header` was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HeaderReason {
    /// The first request of the session.
    Initial,
    /// The first request after a resume.
    Resume,
    /// The header changed.
    Change,
}

/// The header of a model request (`EpochHeader`): call config, system
/// prompt and tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestHeader {
    /// The call config.
    pub config: CallConfig,
    /// Which config fields are the adapter's defaults rather than asked
    /// for (`reasoningEffort`, `maxTokens`: each `true` when so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_defaults: Option<AdapterDefaults>,
    /// The system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The tools offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<super::ToolSchema>>,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The markers of [`RequestHeader::adapter_defaults`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdapterDefaults {
    /// `reasoningEffort` is the adapter's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<bool>,
    /// `maxTokens` is the adapter's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<bool>,
}

/// One model call's config (`LlmCallConfig`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallConfig {
    /// The provider route.
    pub provider: String,
    /// The model.
    pub model: String,
    /// The reasoning effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// The sampling temperature (an integral one is written `1`, as
    /// JavaScript writes it, not `1.0`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "js_number"
    )]
    pub temperature: Option<f64>,
    /// The output limit (`10.0` reads as `10`: the original compares
    /// numbers by value).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "integral"
    )]
    pub max_tokens: Option<u64>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A number as JavaScript writes it: an integral value without `.0`.
fn js_number<S: Serializer>(n: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match n {
        Some(f) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
            s.serialize_i64(*f as i64)
        }
        Some(f) => s.serialize_f64(*f),
        None => s.serialize_none(),
    }
}

/// `maxTokens`: an integral float (`10.0`) reads as its integer.
fn integral<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    super::json::whole_number(d, super::json::Fraction::Refused, "integer")
}

/// `request/context`: the route's capacity, on a change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestContext {
    /// The provider route.
    pub provider: String,
    /// The model.
    pub model: String,
    /// Its context window in tokens, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `session/end-seed`: `{}`, the end of a fork's or resume's seed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EndSeed {
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `agent/inbox/spliced`: a durable change of an agent's inbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InboxSpliced {
    /// Which queue.
    pub target: SpliceTarget,
    /// Where in it.
    pub start: u64,
    /// How many entries it removed (absent when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_count: Option<u64>,
    /// What it inserted.
    pub inserted: Vec<Message>,
    /// `canceled` when the removal cancelled work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The queue of an [`InboxSpliced`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpliceTarget {
    /// Runs at the next turn.
    NextTurn,
    /// Joins the running turn at its next step (steering).
    NextStep,
}

/// `llm/retry`: a failed model request will be retried (the original's
/// record, field for field).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmRetry {
    /// Pairs this record with its [`LlmRetryStarted`].
    pub retry_id: String,
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The provider route of the request.
    pub provider: String,
    /// The policy mode (`normal`, `always`).
    pub mode: String,
    /// The policy's identity (the original writes its parameters as JSON
    /// text); absent when the policy has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_key: Option<String>,
    /// The retry's number (from 1).
    pub retry: u32,
    /// The retries the policy allows (absent in `always` mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// How long it waits first.
    pub delay_ms: u64,
    /// The failure it answers.
    pub failure: LlmFailure,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `llm/retry-started`: the wait is over, the request runs again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmRetryStarted {
    /// As in [`LlmRetry`].
    pub retry_id: String,
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The retry's number.
    pub retry: u32,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `permission/preset`: the permission preset in force.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionPreset {
    /// The preset's name.
    pub preset: String,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `sandbox/mode`: the sandbox mode in force.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxMode {
    /// The mode (`read-only`, `workspace-write`, `danger-full-access`).
    pub mode: String,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `plan/mode`: plan mode switched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanMode {
    /// Whether it is on.
    pub active: bool,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `approval/policy`: the approval policy in force.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalPolicy {
    /// The policy (`ask`, ...).
    pub policy: String,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `approval/asked`: a call waits for the user's approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalAsked {
    /// The request's id.
    pub id: String,
    /// The tool.
    pub tool_name: String,
    /// The call.
    pub call_id: String,
    /// Why it asks.
    pub reason: String,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `approval/decided`: the user answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalDecided {
    /// The request's id.
    pub id: String,
    /// `allowed-once`, `allowed-session`, `rejected`.
    pub outcome: String,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `session/title`: the session's title.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionTitle {
    /// The title.
    pub title: String,
    /// The messages it was made from.
    pub message_seqs: Vec<u64>,
    /// How it was made (`{kind: "fallback"}`, ...; the titler's own shape).
    pub source: Value,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `hook/invoked`: a hook handler runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookInvoked {
    /// The turn, when inside one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
    /// The hook point (`PreToolUse`, ...).
    pub point: String,
    /// The configuration dialect (`claude-code`, `codex`).
    pub dialect: String,
    /// The handler.
    pub handler_id: String,
    /// The matcher that selected it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<String>,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `hook/result`: a hook handler answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookResult {
    /// The turn, when inside one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
    /// The hook point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point: Option<String>,
    /// The handler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler_id: Option<String>,
    /// Its decision (`allow`, `deny`, `ask`, `none`, ...).
    pub decision: String,
    /// The handler's exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The start of its stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_summary: Option<String>,
    /// How long it ran.
    pub duration_ms: u64,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `subagent/descriptor`: how a child session was started, the first
/// event after its seed (log-only: never in the model history). A cold
/// resume of a continuable child reads its persona and tool filter back
/// from here. The original refuses keys it does not know here, so this
/// harness writes none of its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentDescriptor {
    /// The descriptor format: [`SubagentDescriptor::VERSION`].
    pub version: u32,
    /// `one-shot` or `continuable`.
    pub mode: SubagentMode,
    /// The provider that created the child (`spawn`, `fork`).
    pub provider: String,
    /// What the child was asked to do, for display.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The child's model route, when it differs from its parent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_provider: Option<String>,
    /// The child's model, when it differs from its parent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_model: Option<String>,
    /// The persona that replaces the deployment's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persona: Option<String>,
    /// The tools the child may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_filter: Option<ToolFilter>,
}

impl SubagentDescriptor {
    /// The descriptor format this harness writes and reads (the
    /// original's 2).
    pub const VERSION: u32 = 2;
}

/// Whether a child runs one prompt (`one-shot`) or stays for more
/// (`continuable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SubagentMode {
    /// One prompt, then disposed; its caller waits for the outcome.
    OneShot,
    /// Runs in the background and takes later messages.
    Continuable,
}

/// A mask over the global tools one agent sees: only `allow` (when set),
/// never `deny`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolFilter {
    /// Only these tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// Not these tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Serialize + for<'de> Deserialize<'de>>(text: &str) {
        let typed: T = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(serde_json::to_string(&typed).unwrap(), text);
    }

    #[test]
    fn core_records_round_trip_with_unknown_fields() {
        round_trip::<TurnStart>(r#"{"turn":1}"#);
        round_trip::<TurnStart>(
            r#"{"turn":1,"trigger":{"kind":"message","source":{"kind":"user"}}}"#,
        );
        for reason in [
            r#"{"kind":"completed"}"#,
            r#"{"kind":"aborted","reason":{"kind":"user"}}"#,
            r#"{"kind":"aborted","reason":{"kind":"hook","reason":"no"}}"#,
            r#"{"kind":"blocked"}"#,
            r#"{"kind":"error","error":{"message":"m","code":"UNKNOWN"}}"#,
            r#"{"kind":"max-tokens"}"#,
            r#"{"kind":"interrupted"}"#,
            r#"{"kind":"handed-off","to":"x"}"#,
            // Causes of other plugins, and a hook that gave no reason.
            r#"{"kind":"aborted","reason":{"kind":"timeout","afterMs":500}}"#,
            r#"{"kind":"aborted","reason":{"kind":"hook"}}"#,
            r#"{"kind":"aborted","reason":{"kind":"legacy"}}"#,
        ] {
            round_trip::<TurnEnd>(&format!(r#"{{"turn":2,"reason":{reason}}}"#));
        }
        round_trip::<StepBoundary>(r#"{"turn":1,"step":2}"#);
        round_trip::<AssistantChunk>(
            r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x"}}"#,
        );
        round_trip::<AssistantMessage>(
            r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}},"usage":{"inputTokens":1,"outputTokens":2},"interrupted":true}"#,
        );
        round_trip::<ToolCall>(
            r#"{"turn":1,"step":1,"callId":"c","name":"read","arguments":"{\"path\":\"x\"}"}"#,
        );
        round_trip::<ToolResult>(
            r#"{"turn":1,"step":1,"message":{"id":"r","role":"user","content":[{"type":"tool-result","toolCallId":"c","content":[],"isError":true}],"source":{"kind":"tool","callId":"c"}},"error":{"name":"ToolNotStartedError","code":"TOOL_NOT_STARTED"},"meta":{"lines":3}}"#,
        );
        // The info as the result carried it: without a code, or with
        // fields of whoever made it.
        round_trip::<ToolResult>(
            r#"{"turn":1,"step":1,"message":{"id":"r","role":"user","content":[{"type":"tool-result","toolCallId":"c","content":[],"isError":true}],"source":{"kind":"tool","callId":"c"}},"error":{"name":"HookError"}}"#,
        );
        round_trip::<ToolResult>(
            r#"{"turn":1,"step":1,"message":{"id":"r","role":"user","content":[{"type":"tool-result","toolCallId":"c","content":[],"isError":true}],"source":{"kind":"tool","callId":"c"}},"error":{"name":"PolicyError","code":"DENIED","rule":"r7","retryable":false}}"#,
        );
        round_trip::<TodoWrite>(
            r#"{"todos":[{"content":"a","status":"in_progress"},{"content":"b","status":"pending","priority":"high"}]}"#,
        );
        round_trip::<RequestHeaderRecord>(
            r#"{"header":{"config":{"provider":"p","model":"m","reasoningEffort":"high","maxTokens":10},"adapterDefaults":{"maxTokens":true},"system":"s","tools":[{"name":"t","description":"d","parameters":{"type":"object"}}]},"reason":"initial"}"#,
        );
        round_trip::<RequestContext>(r#"{"provider":"p","model":"m","contextWindow":4096}"#);
        round_trip::<CallConfig>(r#"{"provider":"p","model":"m","temperature":1}"#);
        round_trip::<CallConfig>(r#"{"provider":"p","model":"m","temperature":0.7}"#);
        round_trip::<EndSeed>(r#"{}"#);
        round_trip::<InboxSpliced>(
            r#"{"target":"next-step","start":0,"removedCount":1,"inserted":[],"outcome":"canceled"}"#,
        );
        round_trip::<LlmRetry>(
            r#"{"retryId":"r","turn":1,"step":1,"provider":"deepseek","mode":"normal","policyKey":"[\"normal\",2]","retry":1,"maxRetries":2,"delayMs":1,"failure":{"message":"m","code":"EMPTY_RESPONSE"}}"#,
        );
        round_trip::<LlmRetryStarted>(r#"{"retryId":"r","turn":1,"step":1,"retry":1}"#);
        round_trip::<ApprovalAsked>(
            r#"{"id":"i","toolName":"bash","callId":"c","reason":"escalate"}"#,
        );
        round_trip::<SessionTitle>(
            r#"{"title":"t","messageSeqs":[6],"source":{"kind":"fallback"}}"#,
        );
        round_trip::<HookResult>(
            r#"{"turn":1,"point":"Stop","handlerId":"h","decision":"allow","exitCode":0,"durationMs":3}"#,
        );
    }

    #[test]
    fn a_malformed_known_reason_is_an_error_and_an_unknown_one_is_kept() {
        assert!(serde_json::from_str::<TurnEndReason>(r#"{"kind":"error"}"#).is_err());
        assert!(serde_json::from_str::<TurnEndReason>(r#"{"kind":3}"#).is_err());
        // The original computes some delays without rounding.
        let end: TurnEndReason = serde_json::from_str(
            r#"{"kind":"error","error":{"message":"m","code":"RATE_LIMIT","providerRetryAfterMs":1500.5}}"#,
        )
        .unwrap();
        match end {
            TurnEndReason::Error { error } => assert_eq!(error.provider_retry_after_ms, Some(1501)),
            other => panic!("{other:?}"),
        }
        let other: TurnEndReason = serde_json::from_str(r#"{"kind":"later","x":1}"#).unwrap();
        assert_eq!(other.kind(), "later");
    }

    #[test]
    fn a_cancel_cause_of_another_plugin_is_kept_and_a_malformed_known_one_is_an_error() {
        let end: TurnEnd = serde_json::from_str(
            r#"{"turn":3,"reason":{"kind":"aborted","reason":{"kind":"timeout","afterMs":500}}}"#,
        )
        .unwrap();
        let TurnEndReason::Aborted { reason } = &end.reason else {
            panic!("{end:?}");
        };
        assert_eq!(reason.kind(), "timeout");
        assert!(matches!(reason, CancelCause::Other(o) if o["afterMs"] == 500));
        let hook: CancelCause =
            serde_json::from_str(r#"{"kind":"hook","reason":"policy"}"#).unwrap();
        assert_eq!(
            hook,
            CancelCause::Hook {
                reason: Some("policy".into())
            }
        );
        let silent: CancelCause = serde_json::from_str(r#"{"kind":"hook"}"#).unwrap();
        assert_eq!(silent, CancelCause::Hook { reason: None });
        for (text, why) in [
            (r#"{"kind":"hook","reason":3}"#, "invalid type: integer `3`"),
            (r#"{"kind":3}"#, "`kind` must be a string"),
            (r#"{"reason":"x"}"#, "missing field `kind`"),
            (r#""user""#, "invalid type: string"),
        ] {
            let e = serde_json::from_str::<CancelCause>(text).unwrap_err();
            assert!(e.to_string().contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn a_tool_error_ref_is_the_info_whole() {
        let bare: ToolErrorRef = serde_json::from_str(r#"{"name":"HookError"}"#).unwrap();
        assert_eq!((bare.code, bare.extra.len()), (None, 0));
        assert_eq!(
            serde_json::to_string(&ToolErrorRef::new("AbortError", "ABORTED")).unwrap(),
            r#"{"name":"AbortError","code":"ABORTED"}"#
        );
    }
}
