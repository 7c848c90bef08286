//! The model-facing side of the delegation tools: names, descriptions,
//! parameters and result texts, worded as the original's `tool-subagent`,
//! `tool-subagent-control` and `tool-subagent-report` word them (the
//! model of a session moved between the two reads the same tools).

use dsh_sdk::names::tool;
use dsh_sdk::tool::ToolSpec;
use schemars::JsonSchema;
use serde::Deserialize;

/// The description of `subagent` (a fresh child).
pub const SPAWN_DESCRIPTION: &str = "Delegate a self-contained task to a subagent (a separate agent that works in its own context) to offload focused, independent work — research, a scoped implementation, an analysis — so it does not consume this conversation's context. The subagent returns its result, not its intermediate steps. Give it a complete, standalone prompt: it does not see this conversation.";

/// The description of `subagent_fork` (a child that inherits the
/// conversation).
pub const FORK_DESCRIPTION: &str = "Delegate a task to a subagent that inherits this conversation: a child agent seeded with all completed turns so far (it does not see the current in-flight turn). Use this when the subtask builds on this conversation's context — a follow-up analysis, a review, a continuation — without consuming this conversation's context for the work itself. You receive its result, not its intermediate steps.";

/// What both delegation tools add: they run in the background by default.
pub const BACKGROUND_SUFFIX: &str = " This tool runs in the background by default, immediately returns a durable subagent id, and keeps the child conversation available for later turns. When that run settles, the runtime sends the parent a notice containing its outcome and any final assistant message; `send_message` starts a later turn in the same child conversation. Set `run_in_background: false` only when your next action depends on receiving the result.";

/// The system prompt section of a delegation tool named `name`.
pub fn section(name: &str) -> String {
    format!("Use {name} in the background by default. Start independent delegations together in one assistant message and continue useful work while they run. Set `run_in_background: false` only when your next action depends on that subagent's result. When a background run settles, the runtime sends you a notice containing its outcome and any final assistant message.")
}

/// The order of a delegation tool's section.
pub const SECTION_ORDER: f64 = 116.5;

/// The child-only section that asks for a report.
pub const REPORT_SECTION: &str = "Deliver your result with the report tool before you finish: call it once with a self-contained answer. The agent that started you shares your workspace but does not automatically receive your transcript, tool output, or reasoning, so a closing remark such as \"done\" leaves it nothing it can use. Report earlier as well whenever a partial finding changes what that agent should do next; reporting never ends your turn.";

/// The order of the report section.
pub const REPORT_SECTION_ORDER: i64 = 117;

/// `subagent`'s arguments.
#[derive(Deserialize, JsonSchema)]
pub struct SpawnArgs {
    /// A short (3-5 word) description of the delegated task, for display.
    pub description: String,
    /// The complete, self-contained task for the subagent. It does not share this conversation's context, so include everything it needs.
    pub prompt: String,
    /// Whether to run in the background and return a durable subagent id immediately. Defaults to true. Set false to wait for the result when your next action depends on it.
    pub run_in_background: Option<bool>,
    /// The kind of subagent to start, by name (one of those listed in this tool's description); without it, a general-purpose subagent.
    pub subagent_type: Option<String>,
}

/// `subagent_fork`'s arguments.
#[derive(Deserialize, JsonSchema)]
pub struct ForkArgs {
    /// A short (3-5 word) description of the delegated task, for display.
    pub description: String,
    /// The task for the subagent. It already sees this conversation's completed turns, so build on them freely and state only what is new.
    pub prompt: String,
    /// Whether to run in the background and return a durable subagent id immediately. Defaults to true. Set false to wait for the result when your next action depends on it.
    pub run_in_background: Option<bool>,
}

/// `subagent` (the name of its [`SpawnArgs`] property `subagent_type`,
/// left out of the schema while no definition exists).
pub struct Spawn;

impl Spawn {
    /// The optional property naming a definition.
    pub const TYPE_PROPERTY: &'static str = "subagent_type";
}

impl ToolSpec for Spawn {
    const NAME: &'static str = tool::SUBAGENT;
    const DESCRIPTION: &'static str = SPAWN_DESCRIPTION;
    const PARALLEL: bool = true;
    type Args = SpawnArgs;
}

/// `subagent_fork`.
pub struct Fork;

impl ToolSpec for Fork {
    const NAME: &'static str = tool::SUBAGENT_FORK;
    const DESCRIPTION: &'static str = FORK_DESCRIPTION;
    const PARALLEL: bool = true;
    type Args = ForkArgs;
}

/// `send_message`.
pub struct SendMessage;

/// `send_message`'s arguments.
#[derive(Deserialize, JsonSchema)]
pub struct SendMessageArgs {
    /// The subagent id returned when the background subagent was started.
    pub subagent_id: String,
    /// The message to deliver to the subagent.
    pub message: String,
}

impl ToolSpec for SendMessage {
    const NAME: &'static str = tool::SEND_MESSAGE;
    const DESCRIPTION: &'static str = "Send a message to a background subagent by its subagent id, continuing the same conversation. It becomes the subagent's next turn: if it is still working, the message waits until its current turn finishes, so it cannot redirect work already underway. This call returns no answer from the subagent — only confirmation that the message was delivered — so use it to give it more work. A failure means the message was NOT delivered.";
    const PARALLEL: bool = true;
    type Args = SendMessageArgs;
}

/// `interrupt_agent`.
pub struct InterruptAgent;

/// `interrupt_agent`'s arguments.
#[derive(Deserialize, JsonSchema)]
pub struct InterruptArgs {
    /// The agent id of the running agent to interrupt.
    pub agent_id: String,
}

impl ToolSpec for InterruptAgent {
    const NAME: &'static str = tool::INTERRUPT_AGENT;
    const DESCRIPTION: &'static str = "Request cancellation of a background agent's current turn by its agent id. The target may be your direct child or a deeper agent created under you. Only the current turn stops: messages already queued for the agent stay parked until a later send_message, agents it started keep running, and the agent itself stays available for follow-ups. This call returns as soon as the stop request is accepted, so the target may keep running briefly; interrupting an agent that already finished is an accepted no-op.";
    const PARALLEL: bool = true;
    type Args = InterruptArgs;
}

/// `list_agents`.
pub struct ListAgents;

/// Which agents `list_agents` lists.
#[derive(Deserialize, JsonSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    // (no doc comments: they would become model-visible descriptions)
    #[allow(missing_docs)]
    Children,
    #[allow(missing_docs)]
    Descendants,
}

/// `list_agents`'s arguments.
#[derive(Deserialize, JsonSchema)]
pub struct ListArgs {
    /// children (default) lists direct children only; descendants walks the complete tree below you.
    pub scope: Option<Scope>,
}

impl ToolSpec for ListAgents {
    const NAME: &'static str = tool::LIST_AGENTS;
    const DESCRIPTION: &'static str = "List your continuable background subagents by durable id and label. Use it to recall which ones you started, not to poll for completion — you are told when one finishes. Status comes from the live registry: running means the agent is working right now, idle means it is loaded but between turns (it may be waiting on agents it started), and ready means it exists only in storage — resumable, not terminal, and not a result waiting to be collected; a `send_message` starts a new turn on the same conversation, and a direct child remains a `send_message` candidate in every status. The snapshot is not a delivery promise — `send_message` performs the authoritative check and may still fail. Children that could not be read are reported as diagnostics instead of being silently dropped. Scope `descendants` walks the whole tree below you in stable pre-order, annotating each entry with its durable direct-parent session id and depth. You may use `send_message` only for depth-1 entries; deeper entries are candidates for `interrupt_agent` only.";
    const PARALLEL: bool = true;
    type Args = ListArgs;
}

/// `report` (a continuable child's alone).
pub struct Report;

/// `report`'s arguments.
#[derive(Deserialize, JsonSchema)]
pub struct ReportArgs {
    /// Actionable content for your parent; summarize conclusions and reference relevant shared paths.
    pub output: String,
}

impl ToolSpec for Report {
    const NAME: &'static str = tool::REPORT;
    const DESCRIPTION: &'static str = "Report selected content to the agent that started you. Call this once before you finish, with a self-contained final result, and earlier for progress or findings that change what that agent does next. That agent shares your workspace but does not automatically receive your transcript, tool output, or reasoning, so finishing your work is not itself a result. Reporting does not end your turn or finish your work, and only your direct parent receives it. A failed call may still have arrived, so do not blindly repeat it.";
    const PARALLEL: bool = true;
    type Args = ReportArgs;
}
