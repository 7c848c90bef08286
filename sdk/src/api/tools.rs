//! The `tools` service (plugin `tools`, reference dsh-core §5): the params
//! and reply of each method of [`crate::names::tools`], the `exec` a tool's
//! own service receives ([`Exec`], methods of [`crate::names::tool_service`]),
//! what a tool answers and what the pipeline makes of it ([`ToolReply`],
//! [`ToolResult`]), the payloads of the `tools/*` and `fs/*` bus events, and
//! [`Tools`], a client with one method per service method.
//!
//! Field names are the wire's (camelCase where the original spells them so).
//! Content is typed ([`ContentBlock`]) wherever it travels: replies,
//! results, renders and post-execute decisions. `serde_json::Value` stays
//! only where a payload is open: tool arguments before the tool parses them
//! ([`spec::args`] ends that), parameter and output schemas (JSON Schema), a
//! tool's canonical `value` and presentation `meta` (each tool's own
//! shapes). The contexts a call adds are [`UserInput`]s (a message or the
//! `{text}` shorthand), checked where they are read, so a malformed one
//! fails its call alone. The payloads a waterfall listener
//! hands on carry the fields they do not know in `extra`, so nothing a
//! listener does not understand is dropped.
//!
//! Dependencies run one way: [`crate::tool`] (the helpers that serve tools)
//! builds on this module, which uses nothing of it; a tool's [`ToolSpec`]
//! and the parsing of its arguments ([`args`]) live here, in [`spec`], and
//! `crate::tool` re-exports them.
//!
//! For a plugin author, sdk/README.md ("Writing a plugin: what you receive
//! and return") says with a line of code each what a tool receives
//! ([`Exec`]), how it answers ([`ToolReply`]) or fails, and how a
//! `tools/post-execute` listener forwards ([`on_post_execute`]).

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::fence::Fence;
use crate::names::{bus, service, tools as method};
use crate::vocab::input::UserInput;
use crate::vocab::message::ContentBlock;
use crate::{Context, Event, Listener, Result, Service};

mod result;
pub mod spec;

pub use result::{ErrorInfo, ToolError, ToolReply, ToolResult};
pub use spec::{args, ToolSpec};

/// `T`'s default for an absent or `null` field (a wrong type still fails).
fn nullable<'de, D, T>(d: D) -> std::result::Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A field that is present, even as `null` (`Some(Value::Null)`), is told
/// from one that is absent (`None`, with `#[serde(default)]`).
fn present<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// [`present`] for a typed field: absent is `None` (with
/// `#[serde(default)]`), `null` is `Some(None)`, a value `Some(Some(_))`.
fn given<'de, D, T>(d: D) -> std::result::Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// A flag that is set only by an exact `true`: any other value (`"true"`,
/// `1`, `null`) reads as `false`, as the registry has always read flags.
fn exactly_true<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<bool, D::Error> {
    Ok(Value::deserialize(d)? == Value::Bool(true))
}

fn is_false(b: &bool) -> bool {
    !*b
}

// ---- the execution ---------------------------------------------------------

/// One tool call as it goes through the pipeline (`exec`): what the caller
/// sends to `execute` or `prepare`, what every stage and bus event carries,
/// and what the tool's own service receives with `execute`, `check`,
/// `render` and `finalizeContent`. The pipeline adds `token`, `sandbox` and
/// `approved` on the way; fields it does not know are kept (`extra`).
///
/// A tool's handler reads it with `dsh_sdk::tool::exec(&req)?` (a field of
/// the wrong type is `INVALID_PAYLOAD`), then its arguments with
/// [`Exec::arguments_for`], its directory with [`Exec::cwd_or`] and its
/// agent with [`Exec::agent`]; a file it names is checked against
/// `sandbox` (`dsh_sdk::fence::Guard::of(exec.sandbox.clone(), &own)`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Exec {
    /// The model's id of the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The tool's name (empty when absent: an unknown tool).
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// The model's arguments, as it gave them: the tool parses them
    /// ([`Exec::arguments_as`]); the registry checks them against the
    /// tool's schema first. Open JSON until then: only the tool knows
    /// their type.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub arguments: Value,
    /// The calling agent (its id is also the dispatch scope); absent for a
    /// call made outside an agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The working directory the call's paths are relative to; absent when
    /// the caller gave none (the shipped tools then use `"."`:
    /// [`Exec::cwd_or`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Minted by `prepare`, one per execution, the same in every stage's
    /// `exec` (reference `exec.token`); a caller cannot choose it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The fence a `tools/pre-execute` policy handed the tool (permission:
    /// mode, workspace, writable and protected paths).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Fence>,
    /// The user allowed this call beyond the fence (an `ask` decision that
    /// was approved): the tool must not refuse it again.
    #[serde(
        default,
        deserialize_with = "exactly_true",
        skip_serializing_if = "is_false"
    )]
    pub approved: bool,
    /// The most tokens of result the model should be shown for this call,
    /// by the meter's estimate (`crate::vocab::tokens`), handed over by a
    /// `tools/pre-execute` listener that knows the agent's context window
    /// (`compaction-basic`): a tool cuts its output there as well as at
    /// its own caps; absent, its own caps alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_result_tokens: Option<u64>,
    /// `execute` only: the caller's signal was aborted before the call was
    /// made, so only its `tools/result` is published.
    #[serde(
        default,
        deserialize_with = "exactly_true",
        skip_serializing_if = "is_false"
    )]
    pub cancelled: bool,
    /// Fields of other plugins, passed on as they came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Exec {
    /// A call of tool `name` with `arguments`.
    pub fn new(name: impl Into<String>, arguments: Value) -> Exec {
        Exec {
            name: name.into(),
            arguments,
            ..Exec::default()
        }
    }

    /// The agent, or `""` for a call made outside an agent (the global
    /// scope of the registry).
    pub fn agent(&self) -> &str {
        self.agent.as_deref().unwrap_or_default()
    }

    /// The call id, or `""` when the caller gave none.
    pub fn call_id(&self) -> &str {
        self.call_id.as_deref().unwrap_or_default()
    }

    /// The working directory, or `default` when the caller gave none.
    pub fn cwd_or<'a>(&'a self, default: &'a str) -> &'a str {
        self.cwd.as_deref().unwrap_or(default)
    }

    /// The key of the call among those running now: (agent, callId).
    pub fn key(&self) -> (String, String) {
        (self.agent().to_owned(), self.call_id().to_owned())
    }

    /// The arguments parsed as `T` ([`args`]: a mismatch is
    /// [`crate::names::code::INVALID_ARGS`] naming the field).
    pub fn arguments_as<T: DeserializeOwned>(&self) -> Result<T> {
        args(&self.arguments)
    }

    /// The arguments of a call of tool `T`, parsed into its
    /// [`ToolSpec::Args`].
    pub fn arguments_for<T: ToolSpec>(&self) -> Result<T::Args> {
        self.arguments_as()
    }
}

/// A call's `exec` with its `result` (the pipeline's [`ToolResult`]; `R`
/// is a reference to one for a writer that keeps its own): the params of
/// `finalize` and `finish` and of a tool's `finalizeContent`, and the
/// payload of [`crate::names::bus::TOOLS_POST_EXECUTE`] and
/// [`crate::names::bus::TOOLS_RESULT`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome<R = ToolResult> {
    /// The call.
    pub exec: Exec,
    /// Its result so far.
    pub result: R,
}

/// Params of a tool's `render` (declared with `output.render`): the call's
/// `exec` fields beside the `value` to project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RenderParams {
    /// The call.
    #[serde(flatten)]
    pub exec: Exec,
    /// The canonical value, valid under the tool's output schema (open
    /// JSON: the tool's own shape).
    pub value: Value,
}

/// Reply of a tool's `render`: the content the model sees, and the
/// presentation meta.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Rendered {
    /// Content blocks (a reply without them fails the call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<ContentBlock>>,
    /// Presentation meta (logged as `tool/result.meta`; the tool's own
    /// shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// Params of a guard's `check` (and of the `tools/pre-execute` and
/// `tools/execute` payloads): the call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecParams {
    /// The call.
    pub exec: Exec,
}

// ---- params ----------------------------------------------------------------

/// Params of `register`: one tool, served by `service` (whose `execute`
/// receives each call's [`Exec`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegisterParams {
    /// The name the model calls it by (required: empty is refused).
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// What the model is told it does.
    #[serde(default, deserialize_with = "nullable")]
    pub description: String,
    /// The JSON schema of its arguments (JSON Schema: open by nature).
    #[serde(default)]
    pub parameters: Value,
    /// The service that runs it (required: empty is refused).
    #[serde(default, deserialize_with = "nullable")]
    pub service: String,
    /// Its calls may run alongside other calls of the same step.
    #[serde(
        default,
        deserialize_with = "exactly_true",
        skip_serializing_if = "is_false"
    )]
    pub parallel: bool,
    /// An agent id: the tool is that agent's alone (and shadows a global
    /// tool of the same name for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The output contract `{schema, render?}`, as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputField>,
    /// Its service answers `finalizeContent`.
    #[serde(
        default,
        deserialize_with = "exactly_true",
        skip_serializing_if = "is_false"
    )]
    pub finalize_content: bool,
    /// The longest its body may run, in milliseconds, as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<TimeoutMs>,
    /// Replaces this fiber's own registration of the same name and scope
    /// (to change its description or parameters); without it a second
    /// registration is `DUPLICATE_TOOL`. A dsh extension.
    #[serde(
        default,
        deserialize_with = "exactly_true",
        skip_serializing_if = "is_false"
    )]
    pub replace: bool,
}

/// A tool's output contract: the JSON Schema its `value` must satisfy, and
/// whether its service answers `render`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OutputContract {
    /// The schema of the canonical value (JSON Schema: open by nature).
    #[serde(default)]
    pub schema: Value,
    /// The service projects a value into content and meta (`render`).
    #[serde(
        default,
        deserialize_with = "exactly_true",
        skip_serializing_if = "is_false"
    )]
    pub render: bool,
}

/// The `output` of a registration as sent: any JSON value, so that one
/// which is not `{schema, render?}` is refused naming the tool, rather than
/// as a malformed payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OutputField(Value);

impl OutputField {
    /// The contract, if the field is an object (`render` only when it is
    /// `true`).
    pub fn contract(&self) -> Option<OutputContract> {
        let o = self.0.as_object()?;
        Some(OutputContract {
            schema: o.get("schema").cloned().unwrap_or(Value::Null),
            render: o.get("render") == Some(&Value::Bool(true)),
        })
    }
}

impl From<OutputContract> for OutputField {
    fn from(c: OutputContract) -> OutputField {
        let mut o = Map::new();
        o.insert("schema".into(), c.schema);
        if c.render {
            o.insert("render".into(), Value::Bool(true));
        }
        OutputField(Value::Object(o))
    }
}

/// A registration's `timeoutMs` as sent, so that one which is not a finite
/// number greater than 0 is refused naming it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TimeoutMs(Value);

impl TimeoutMs {
    /// The limit, if the value is a finite number of milliseconds > 0.
    pub fn duration(&self) -> Option<Duration> {
        self.0
            .as_f64()
            .filter(|ms| ms.is_finite() && *ms > 0.0)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0))
    }
}

impl From<Duration> for TimeoutMs {
    fn from(d: Duration) -> TimeoutMs {
        TimeoutMs(Value::from(d.as_millis() as u64))
    }
}

impl std::fmt::Display for TimeoutMs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Params of `schemas`: the agent whose view is wanted (the global tools
/// when absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeParams {
    /// The agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// Params of `mode` (a tool as an agent sees it) and of `unregister` (a
/// tool of that scope).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModeParams {
    /// The tool.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// The agent (the global tools when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// Params of `restrict`: a mask of the global tools one agent sees.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestrictParams {
    /// The agent (required: a global restriction is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Only these global tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// Not these global tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny: Option<Vec<String>>,
}

/// Params of `guard`: a service whose `check` ([`ExecParams`]) answers a
/// denial reason or null.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardParams {
    /// The guard's service (required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The agent it guards (every call when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// Names one running call: the params of `cancel`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRef {
    /// The calling agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

impl CallRef {
    /// The key of the call among those running now: (agent, callId).
    pub fn key(&self) -> (String, String) {
        (
            self.agent.clone().unwrap_or_default(),
            self.call_id.clone().unwrap_or_default(),
        )
    }
}

/// Params of `deferContext`: a user message for the result of a call that
/// is dispatching now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeferContextParams {
    /// The call.
    #[serde(flatten)]
    pub call: CallRef,
    /// The message, in the inbox's input form (as
    /// [`ToolResult::additional_contexts`]); anything else is refused.
    pub context: UserInput,
}

// ---- replies ---------------------------------------------------------------

/// One tool as the model is offered it (the items of the `schemas` reply).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// The tool's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The JSON schema of its arguments.
    pub parameters: Value,
}

/// Reply of `mode`: whether a tool's calls may overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolMode {
    /// Alongside the other parallel calls of the step.
    Parallel,
    /// Alone (also the answer for an unknown tool).
    Exclusive,
}

/// What is left of a call after a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StageKind {
    /// Run the body: call `dispatch` with the stage's `exec`.
    Dispatch,
    /// No (more) body: `finalize` the result (post-execute still sees it).
    PostResult,
    /// Only the `tools/result` emit is left: `finish` the result.
    FinalResult,
}

/// Reply of `prepare`: the next stage, the `exec` every later stage takes
/// (with its token, sandbox and approval), and the result unless it is
/// [`StageKind::Dispatch`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prepared<R = ToolResult> {
    /// What is left.
    pub kind: StageKind,
    /// The call.
    pub exec: Exec,
    /// The result so far (absent for a dispatch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<R>,
}

/// Reply of `dispatch`: [`StageKind::PostResult`], or
/// [`StageKind::FinalResult`] when a wrapper failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dispatched<R = ToolResult> {
    /// What is left.
    pub kind: StageKind,
    /// The result.
    pub result: R,
}

// ---- bus payloads ----------------------------------------------------------

/// A `tools/pre-execute` decision's kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PreExecuteKind {
    /// Run the call.
    Allow,
    /// Ask the approval seam (denied with the reason when no one answers).
    Ask,
    /// Refuse it with the reason.
    Deny,
    /// Another kind: refused like a denial.
    #[serde(untagged)]
    Other(String),
}

/// The answer of a [`crate::names::bus::TOOLS_PRE_EXECUTE`] waterfall
/// (payload [`ExecParams`]); the dispatcher's default is `{kind: allow}`,
/// and so is a listener's `null`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PreExecuteDecision {
    /// The decision (allow when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<PreExecuteKind>,
    /// Why, for a denial or a question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The fence the tool gets (`exec.sandbox`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Fence>,
    /// For a question: whether an approval answers this call only, never
    /// remembered for the session (the workspace's configuration is asked
    /// for every time); passed on as
    /// [`crate::api::approval::ApprovalRequest::always_ask`]. Absent: false.
    #[serde(
        default,
        rename = "alwaysAsk",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub always_ask: bool,
    /// The most tokens of result the model should be shown for this call
    /// (the tool gets it as [`Exec::max_result_tokens`]; the smaller wins
    /// when the call already had one).
    #[serde(
        default,
        rename = "maxResultTokens",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_result_tokens: Option<u64>,
    /// Fields of other listeners, passed on.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl PreExecuteDecision {
    /// A decision of `kind`.
    pub fn new(kind: PreExecuteKind, reason: Option<String>) -> PreExecuteDecision {
        PreExecuteDecision {
            kind: Some(kind),
            reason,
            sandbox: None,
            always_ask: false,
            max_result_tokens: None,
            extra: Map::new(),
        }
    }
}

/// A `tools/post-execute` decision's kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PostExecuteKind {
    /// Keep the result (optionally with new content or value).
    Accept,
    /// Replace the result by a failure made of the feedback.
    Block,
    /// Another kind: taken as an accept.
    #[serde(untagged)]
    Other(String),
}

/// The answer of a [`crate::names::bus::TOOLS_POST_EXECUTE`] waterfall
/// (payload [`Outcome`]); the dispatcher's default is `{kind: accept}`,
/// and so is a listener's `null`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PostExecuteDecision {
    /// The decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<PostExecuteKind>,
    /// An accept's new content: `Some(Some(blocks))` replaces the content;
    /// `Some(None)` (`content: null`) replaces nothing but counts as given
    /// (it cannot go with a new `value`); `None` when absent.
    #[serde(
        default,
        deserialize_with = "given",
        skip_serializing_if = "Option::is_none"
    )]
    pub content: Option<Option<Vec<ContentBlock>>>,
    /// An accept's new value, validated and rendered again (present, even
    /// as `null`, counts as given). Open JSON: the tool's own shape.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub value: Option<Value>,
    /// A block's feedback: a text or content blocks (absent or `null`:
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<Feedback>,
    /// Messages the decision adds (after the result's own on an accept,
    /// alone on a block), as [`ToolResult::additional_contexts`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_contexts: Option<Vec<UserInput>>,
    /// Fields of other listeners, passed on.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl PostExecuteDecision {
    /// A plain decision of `kind`.
    pub fn new(kind: PostExecuteKind) -> PostExecuteDecision {
        PostExecuteDecision {
            kind: Some(kind),
            ..PostExecuteDecision::default()
        }
    }

    /// True for a block (anything else accepts).
    pub fn is_block(&self) -> bool {
        self.kind == Some(PostExecuteKind::Block)
    }
}

/// The feedback of a `tools/post-execute` block: a text, or content
/// blocks; written as it came (a string or a list).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Feedback {
    /// A text (shown as one text block).
    Text(String),
    /// Content blocks.
    Blocks(Vec<ContentBlock>),
}

impl Feedback {
    /// The content blocks it shows (a text is one text block).
    pub fn into_blocks(self) -> Vec<ContentBlock> {
        match self {
            Feedback::Text(text) => vec![ContentBlock::text(text)],
            Feedback::Blocks(blocks) => blocks,
        }
    }
}

impl<'de> Deserialize<'de> for Feedback {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::{Error as _, Unexpected};
        // Read whole first to tell the two forms apart with a clear error
        // (serde's `untagged` would name neither).
        match Value::deserialize(d)? {
            Value::String(text) => Ok(Feedback::Text(text)),
            blocks @ Value::Array(_) => Vec::<ContentBlock>::deserialize(blocks)
                .map(Feedback::Blocks)
                .map_err(D::Error::custom),
            other => {
                let shown = other.to_string();
                Err(D::Error::invalid_type(
                    Unexpected::Other(&shown),
                    &"a text or a list of content blocks",
                ))
            }
        }
    }
}

/// Payload of [`crate::names::bus::TOOLS_CHANGE`] (emitted when the tools
/// or restrictions change): empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolsChanged {}

/// Payload of [`crate::names::bus::FS_OBSERVED`] (emitted by `tool-read`):
/// the version of a file an agent has seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsObserved {
    /// The agent (null outside an agent).
    #[serde(default)]
    pub agent: Option<String>,
    /// The file, resolved as the fence resolves it.
    #[serde(default, deserialize_with = "nullable")]
    pub path: PathBuf,
    /// Its version ([`crate::fence::version`]).
    #[serde(default, deserialize_with = "nullable")]
    pub version: String,
}

/// Payload of [`crate::names::bus::FS_WRITE_INTENT`] (waterfall by
/// `tool-fs` before `write`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsWriteIntent {
    /// The agent (`""` outside an agent).
    pub agent: String,
    /// The file, resolved.
    pub path: PathBuf,
    /// It exists already (an update, not a creation).
    pub exists: bool,
}

/// Payload of [`crate::names::bus::FS_EDIT_INTENT`] (waterfall by `tool-fs`
/// before `edit`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsEditIntent {
    /// The agent (`""` outside an agent).
    pub agent: String,
    /// The file, resolved.
    pub path: PathBuf,
    /// How many matches the edit replaces.
    pub count: usize,
}

/// The answer of an `fs/*-intent` waterfall; the dispatcher's default is
/// `{kind: allow}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsIntentDecision {
    /// `deny` refuses the change; anything else allows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Why, for a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl FsIntentDecision {
    /// The kind that refuses a change.
    pub const DENY: &'static str = "deny";
    /// The kind that allows one (the default).
    pub const ALLOW: &'static str = "allow";

    /// True when the decision refuses the change.
    pub fn is_deny(&self) -> bool {
        self.kind.as_deref() == Some(Self::DENY)
    }
}

// ---- listeners -------------------------------------------------------------

/// Listens to [`crate::names::bus::TOOLS_PRE_EXECUTE`]: `listener` gets the
/// parsed call and the event (to [`Event::forward`] it) and answers a
/// decision.
///
/// A waterfall, as [`on_post_execute`]: forward ([`forward_as`]) unless the
/// decision is final (`permission` denies without forwarding, and forwards
/// before it allows).
pub fn on_pre_execute<F, Fut>(ctx: &Context, listener: F) -> Listener
where
    F: Fn(Exec, Event) -> Fut + 'static,
    Fut: Future<Output = Result<PreExecuteDecision>> + 'static,
{
    let listener = std::rc::Rc::new(listener);
    ctx.on(bus::TOOLS_PRE_EXECUTE, move |ev| {
        let listener = listener.clone();
        async move {
            let ExecParams { exec } = ev.payload_as()?;
            Ok(serde_json::to_value(listener(exec, ev).await?)?)
        }
    })
}

/// Listens to [`crate::names::bus::TOOLS_POST_EXECUTE`]: `listener` gets
/// the parsed outcome and the event and answers a decision.
///
/// The event is a waterfall over the result of every call (every tool,
/// every agent): the [`Outcome`] is the call's [`Exec`] and its
/// [`ToolResult`]. Forward it:
/// `forward_as::<Option<PostExecuteDecision>>(&ev).await?.unwrap_or_default()`
/// runs the listeners registered after this one and the default (`accept`;
/// `None` when a listener answered `null`, which also accepts), and the
/// listener answers that decision, changed or not. A listener that does not forward short-circuits: the
/// listeners after it never see the result and its decision is final. To
/// watch final results without deciding, listen to
/// [`crate::names::bus::TOOLS_RESULT`] (an emit of the same [`Outcome`]).
pub fn on_post_execute<F, Fut>(ctx: &Context, listener: F) -> Listener
where
    F: Fn(Outcome<ToolResult>, Event) -> Fut + 'static,
    Fut: Future<Output = Result<PostExecuteDecision>> + 'static,
{
    let listener = std::rc::Rc::new(listener);
    ctx.on(bus::TOOLS_POST_EXECUTE, move |ev| {
        let listener = listener.clone();
        async move {
            let outcome = ev.payload_as()?;
            Ok(serde_json::to_value(listener(outcome, ev).await?)?)
        }
    })
}

/// The rest of a waterfall, with the listener's own payload unchanged, and
/// its answer parsed as `T` (a decision type; `Option<T>` when a listener
/// after this one may answer `null`).
pub async fn forward_as<T: DeserializeOwned>(ev: &Event) -> Result<T> {
    Ok(serde_json::from_value(ev.forward().await?)?)
}

// ---- client ----------------------------------------------------------------

/// A typed client of the `tools` service: one method per service method,
/// each sending the params type above and parsing the reply type (an
/// unexpected reply is `INVALID_PAYLOAD`).
#[derive(Clone)]
pub struct Tools(Service);

impl Tools {
    /// The `tools` service of `ctx`.
    pub fn new(ctx: &Context) -> Tools {
        Tools(ctx.service(service::TOOLS))
    }

    /// The untyped client underneath.
    pub fn service(&self) -> &Service {
        &self.0
    }

    /// `register`: adds a tool (owned by this fiber); emits `tools/change`.
    pub async fn register(&self, params: &RegisterParams) -> Result<()> {
        self.0.call_as(method::REGISTER, params).await
    }

    /// `unregister`: removes global tool `name` this fiber registered
    /// (true when there was one); emits `tools/change`.
    pub async fn unregister(&self, name: &str) -> Result<bool> {
        let params = ModeParams {
            name: name.to_owned(),
            scope: None,
        };
        self.0.call_as(method::UNREGISTER, &params).await
    }

    /// `schemas`: the tools `scope` is offered (the global ones for
    /// `None`), sorted by name.
    pub async fn schemas(&self, scope: Option<&str>) -> Result<Vec<ToolSchema>> {
        let params = ScopeParams {
            scope: scope.map(str::to_owned),
        };
        self.0.call_as(method::SCHEMAS, &params).await
    }

    /// `mode`: whether tool `name`'s calls may overlap for `scope`.
    pub async fn mode(&self, name: &str, scope: Option<&str>) -> Result<ToolMode> {
        let params = ModeParams {
            name: name.to_owned(),
            scope: scope.map(str::to_owned),
        };
        self.0.call_as(method::MODE, &params).await
    }

    /// `restrict`: masks the global tools one agent sees (owned by this
    /// fiber).
    pub async fn restrict(&self, params: &RestrictParams) -> Result<()> {
        self.0.call_as(method::RESTRICT, params).await
    }

    /// `guard`: installs a check after pre-execute (owned by this fiber).
    pub async fn guard(&self, params: &GuardParams) -> Result<()> {
        self.0.call_as(method::GUARD, params).await
    }

    /// `deferContext`: adds a user message to the result of a call that is
    /// dispatching.
    pub async fn defer_context(&self, params: &DeferContextParams) -> Result<()> {
        self.0.call_as(method::DEFER_CONTEXT, params).await
    }

    /// `execute`: runs one call end to end.
    pub async fn execute(&self, exec: &Exec) -> Result<ToolResult> {
        self.0.call_as(method::EXECUTE, exec).await
    }

    /// `prepare`: pre-execute, approval and guards.
    pub async fn prepare(&self, exec: &Exec) -> Result<Prepared<ToolResult>> {
        self.0.call_as(method::PREPARE, exec).await
    }

    /// `dispatch`: the body inside the `tools/execute` waterfall.
    pub async fn dispatch(&self, exec: &Exec) -> Result<Dispatched<ToolResult>> {
        self.0.call_as(method::DISPATCH, exec).await
    }

    /// `finalize`: post-execute, then the `tools/result` emit.
    pub async fn finalize(&self, outcome: &Outcome<ToolResult>) -> Result<ToolResult> {
        self.0.call_as(method::FINALIZE, outcome).await
    }

    /// `cancel`: aborts a running `execute` call.
    pub async fn cancel(&self, call: &CallRef) -> Result<()> {
        self.0.call_as(method::CANCEL, call).await
    }

    /// `finish`: the `tools/result` emit alone.
    pub async fn finish(&self, outcome: &Outcome<ToolResult>) -> Result<ToolResult> {
        self.0.call_as(method::FINISH, outcome).await
    }
}

#[cfg(test)]
mod tests;
