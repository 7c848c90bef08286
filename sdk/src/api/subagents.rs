//! The `subagents` service (plugin `subagent`, the original's
//! `packages/subagent/subagent`): the registry of subagent providers and
//! the children started through them, and the `create` method every
//! provider's service answers.
//!
//! A *provider* (`spawn`, `fork`; plugin `subagent-in-process`) only makes
//! the child agent: a fresh session, or one seeded with the parent's
//! completed turns. Everything else is the registry's: the depth cap, the
//! child's delegation record (`subagent/descriptor`), its persona, tool
//! filter and delegation notice, running its prompt, and telling the
//! parent how it went.
//!
//! Two kinds of child:
//! - **one-shot** ([`Subagents::start`]): the call runs the prompt to the
//!   end and answers the [`RunOutcome`]; the child is disposed after.
//!   Dropping the call cancels the child.
//! - **continuable** ([`Subagents::start_continuable`]): the call answers
//!   once the child accepted its prompt; each time the child goes quiet
//!   (idle, and none of its own children running) its parent gets a
//!   settlement notice as its next step, woken if idle. The parent may send
//!   it more ([`Subagents::followup`]), stop its turn
//!   ([`Subagents::interrupt`]); the child may report to its parent
//!   ([`Subagents::report_from`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api::agent_loop::AgentOptions;
use crate::names::{service, subagent_provider, subagents as method};
use crate::vocab::records::{SubagentMode, ToolFilter};
use crate::{Context, Result, Service};

/// The error codes of the `subagents` service (the original's
/// `SubagentError` codes, plus `DEPTH_EXCEEDED` for its depth error).
pub mod error_code {
    /// No provider has that name.
    pub const NO_PROVIDER: &str = "NO_PROVIDER";
    /// A provider of that name is registered already.
    pub const DUPLICATE_PROVIDER: &str = "DUPLICATE_PROVIDER";
    /// A child of that id exists already.
    pub const DUPLICATE_CHILD: &str = "DUPLICATE_CHILD";
    /// The child would be deeper than the cap allows.
    pub const DEPTH_EXCEEDED: &str = "DEPTH_EXCEEDED";
    /// The caller may not do this to that agent.
    pub const UNAUTHORIZED: &str = "UNAUTHORIZED";
    /// The child cannot take more work (not continuable, or gone).
    pub const NOT_RESUMABLE: &str = "NOT_RESUMABLE";
    /// A report's parent is not live.
    pub const PARENT_UNAVAILABLE: &str = "PARENT_UNAVAILABLE";
    /// The registry is going away: nothing new is started.
    pub const DRAINING: &str = "DRAINING";
}

/// The deepest a child may be when a start names no `maxDepth`: children,
/// grandchildren and great-grandchildren of a top-level agent.
pub const DEFAULT_MAX_DEPTH: u64 = 3;

// ---- params ----------------------------------------------------------------

/// Params of `registerProvider`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegisterProviderParams {
    /// The name tools start children by (`spawn`, `fork`).
    pub name: String,
    /// The service that answers [`subagent_provider::CREATE`].
    pub service: String,
    /// Its children begin with the parent's completed turns (a fork).
    #[serde(default)]
    pub inherits_parent_context: bool,
}

/// One registered provider (reply of `providers`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderInfo {
    /// Its name.
    pub name: String,
    /// Its children begin with the parent's completed turns.
    pub inherits_parent_context: bool,
}

/// Params of `start` and `startContinuable`: a child of `parent`, made by
/// `provider`, given `prompt`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartParams {
    /// The provider's name.
    pub provider: String,
    /// The delegating agent.
    pub parent: String,
    /// What the child is asked, for display (the tool's `description`).
    pub label: String,
    /// The child's first message.
    pub prompt: String,
    /// The child's model route and limits; the parent's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_options: Option<AgentOptions>,
    /// Replaces the deployment's persona in the child's system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persona: Option<String>,
    /// The tools the child may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_filter: Option<ToolFilter>,
    /// The deepest a child may be (the top-level agent is 0); none:
    /// [`DEFAULT_MAX_DEPTH`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<u64>,
}

/// Params of `followup`: more work for a continuable child from its direct
/// parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FollowupParams {
    /// The calling agent (the child's direct parent).
    pub parent: String,
    /// The child.
    pub child: String,
    /// The message.
    pub message: String,
}

/// Params of `interrupt`: stop `target`'s current turn, asked by `caller`
/// (an ancestor of it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterruptParams {
    /// The calling agent.
    pub caller: String,
    /// The descendant to interrupt.
    pub target: String,
}

/// Params of `reportFrom`: `child`'s message to its direct parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportParams {
    /// The reporting child.
    pub child: String,
    /// What it reports.
    pub output: String,
}

/// Params of `listChildren`, `listDescendants` and `whenSettled`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentParams {
    /// The agent whose children are meant.
    pub agent: String,
}

/// Params of a provider's `create`: make the child agent `child_id` of
/// `parent`, at `depth`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateChildParams {
    /// The delegating agent.
    pub parent: String,
    /// The child's session (and agent) id.
    pub child_id: String,
    /// The child's delegation depth (its parent's + 1).
    pub depth: u64,
    /// The child's model route and limits.
    pub agent_options: AgentOptions,
}

// ---- bus payloads ----------------------------------------------------------

/// The payload of [`crate::names::bus::SUBAGENT_CHILD_READY`]: a child was
/// made (or resumed) and is about to get its prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildReady {
    /// The child agent.
    pub child: String,
    /// Its direct parent.
    pub parent: String,
    /// Whether it stays for more work.
    pub mode: SubagentMode,
    /// What it was asked, for display.
    #[serde(default)]
    pub label: String,
}

// ---- replies ---------------------------------------------------------------

/// Reply of a provider's `create`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreatedChild {
    /// The child agent (its session id).
    pub agent: String,
    /// How many events of the parent's the child's session begins with.
    pub seed_length: u64,
}

/// How a child's run ended (the original's stop reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// It answered.
    Completed,
    /// It was cancelled.
    Aborted,
    /// Its model failed for good.
    Error,
    /// Its output limit cut the answer.
    MaxTokens,
    /// It declined (a hook stopped its turn).
    Refusal,
    /// Its turn ended for a reason of another plugin's (named by the
    /// outcome's `diagnostic`).
    Abnormal,
}

/// Reply of `start`: how the one-shot child's run went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunOutcome {
    /// The child (disposed by now; its session is stored).
    pub child_id: String,
    /// How its run ended.
    pub stop_reason: StopReason,
    /// Its final answer's text ("" when it gave none).
    pub output: String,
    /// What went wrong, when its run failed (the model's error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostic: Option<String>,
}

/// Reply of `startContinuable`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Started {
    /// The child's durable id.
    pub child_id: String,
    /// The id of its first message.
    pub message_id: Value,
}

/// Reply of `followup` and `reportFrom`: the delivered message's id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delivered {
    /// The message's id (as the receiving inbox took it).
    pub message_id: Value,
}

/// What a listed child is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChildStatus {
    /// Working right now.
    Running,
    /// Live, between turns (maybe waiting on children of its own).
    Idle,
    /// Only stored: a `followup` resumes it.
    Ready,
}

/// One continuable child (reply of `listChildren`, `listDescendants`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildEntry {
    /// The child's id.
    pub id: String,
    /// What it was asked, for display.
    pub label: String,
    /// What it is doing.
    pub status: ChildStatus,
    /// Its direct parent (`listDescendants` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Its depth below the listed agent, 1 for a direct child
    /// (`listDescendants` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u64>,
    /// Why a stored child could not be read (then `label` is empty and
    /// `status` is `ready`): listed, never silently left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostic: Option<Diagnostic>,
}

/// Why a stored child is listed as a diagnostic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Diagnostic {
    /// Its log holds no readable delegation record.
    Corrupt,
    /// Its delegation record is of another version.
    Unsupported,
    /// Its log could not be read.
    Unavailable,
}

impl Diagnostic {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Diagnostic::Corrupt => "corrupt",
            Diagnostic::Unsupported => "unsupported",
            Diagnostic::Unavailable => "unavailable",
        }
    }
}

impl ChildStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ChildStatus::Running => "running",
            ChildStatus::Idle => "idle",
            ChildStatus::Ready => "ready",
        }
    }
}

/// Reply of `runningBelow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Running {
    /// How many descendants run (or are settling) now.
    pub running: u64,
}

/// Reply of `whenSettled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settled {
    /// How many running descendants were waited for.
    pub waited: u64,
}

// ---- client ----------------------------------------------------------------

/// A typed client of the `subagents` service.
#[derive(Clone)]
pub struct Subagents(Service);

impl Subagents {
    /// The `subagents` service of `ctx`.
    pub fn new(ctx: &Context) -> Subagents {
        Subagents(ctx.service(service::SUBAGENTS))
    }

    /// `registerProvider`: serves `name` with `service` until the calling
    /// fiber goes.
    pub async fn register_provider(&self, params: &RegisterProviderParams) -> Result<()> {
        self.0.call_as(method::REGISTER_PROVIDER, params).await
    }

    /// `providers`: the registered providers.
    pub async fn providers(&self) -> Result<Vec<ProviderInfo>> {
        self.0.call_as(method::PROVIDERS, Value::Null).await
    }

    /// `start`: a one-shot child, run to its end.
    pub async fn start(&self, params: &StartParams) -> Result<RunOutcome> {
        self.0.call_as(method::START, params).await
    }

    /// `startContinuable`: a background child; answers once it took its
    /// prompt.
    pub async fn start_continuable(&self, params: &StartParams) -> Result<Started> {
        self.0.call_as(method::START_CONTINUABLE, params).await
    }

    /// `followup`: another turn for a continuable child.
    pub async fn followup(&self, params: &FollowupParams) -> Result<Delivered> {
        self.0.call_as(method::FOLLOWUP, params).await
    }

    /// `interrupt`: stops a descendant's current turn.
    pub async fn interrupt(&self, params: &InterruptParams) -> Result<()> {
        self.0.call_as(method::INTERRUPT, params).await
    }

    /// `reportFrom`: a child's message to its direct parent.
    pub async fn report_from(&self, params: &ReportParams) -> Result<Delivered> {
        self.0.call_as(method::REPORT_FROM, params).await
    }

    /// `listChildren`: an agent's continuable children.
    pub async fn list_children(&self, agent: &str) -> Result<Vec<ChildEntry>> {
        let params = AgentParams {
            agent: agent.to_owned(),
        };
        self.0.call_as(method::LIST_CHILDREN, &params).await
    }

    /// `listDescendants`: an agent's continuable descendants, pre-order.
    pub async fn list_descendants(&self, agent: &str) -> Result<Vec<ChildEntry>> {
        let params = AgentParams {
            agent: agent.to_owned(),
        };
        self.0.call_as(method::LIST_DESCENDANTS, &params).await
    }

    /// `runningBelow`: how many descendants of `agent` run now.
    pub async fn running_below(&self, agent: &str) -> Result<Running> {
        let params = AgentParams {
            agent: agent.to_owned(),
        };
        self.0.call_as(method::RUNNING_BELOW, &params).await
    }

    /// `whenSettled`: answers once no continuable descendant of `agent`
    /// runs.
    pub async fn when_settled(&self, agent: &str) -> Result<Settled> {
        let params = AgentParams {
            agent: agent.to_owned(),
        };
        self.0.call_as(method::WHEN_SETTLED, &params).await
    }
}

/// A typed client of one provider's service.
pub struct Provider(Service);

impl Provider {
    /// The provider served by `service`.
    pub fn new(ctx: &Context, service: &str) -> Provider {
        Provider(ctx.service(service))
    }

    /// `create`: makes the child agent.
    pub async fn create(&self, params: &CreateChildParams) -> Result<CreatedChild> {
        self.0.call_as(subagent_provider::CREATE, params).await
    }
}
