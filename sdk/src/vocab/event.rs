//! Session event types of the core log: the names, and which of them a log
//! may hold.

/// A turn opens.
pub const TURN_START: &str = "turn/start";
/// A turn closes.
pub const TURN_END: &str = "turn/end";
/// A step (one model call and its tools) opens.
pub const STEP_START: &str = "step/start";
/// A step closes.
pub const STEP_END: &str = "step/end";
/// A user (or plugin-sourced) message enters the history.
pub const USER_MESSAGE: &str = "user/message";
/// One raw stream chunk from the model.
pub const ASSISTANT_CHUNK: &str = "assistant/chunk";
/// The assembled assistant message.
pub const ASSISTANT_MESSAGE: &str = "assistant/message";
/// A tool call starts.
pub const TOOL_CALL: &str = "tool/call";
/// A tool result enters the history.
pub const TOOL_RESULT: &str = "tool/result";
/// The todo list was replaced.
pub const TODO_WRITE: &str = "todo/write";
/// The request header (config, system, tools) in force.
pub const REQUEST_HEADER: &str = "request/header";
/// The route's capacity metadata.
pub const REQUEST_CONTEXT: &str = "request/context";
/// End of a seed (fork/resume).
pub const SESSION_END_SEED: &str = "session/end-seed";
/// A durable inbox mutation.
pub const INBOX_SPLICED: &str = "agent/inbox/spliced";
/// A retry of a failed model request.
pub const LLM_RETRY: &str = "llm/retry";
/// The wait of an `llm/retry` is over: the request runs again.
pub const LLM_RETRY_STARTED: &str = "llm/retry-started";
/// A child session's delegation record (`subagent`): how it was started,
/// log-only (never in the model history).
pub const SUBAGENT_DESCRIPTOR: &str = "subagent/descriptor";

/// Types that carry a `surfaceOp`.
pub const SURFACE: [&str; 3] = [USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT];

/// Every type this harness knows: exactly the original's
/// `KNOWN_SESSION_EVENT_TYPES` (packages/core/session/src/
/// known-event-types.ts), so each side loads the other's logs. Any
/// other type is refused at append, seed and load unless it is marked
/// `ignorable` (a plugin's own type that may be dropped by a reader).
pub const KNOWN: [&str; 48] = [
    "agent-preset/selected",
    INBOX_SPLICED,
    "approval/asked",
    "approval/decided",
    "approval/policy",
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    "command/done",
    "command/run",
    "compaction/end",
    "compaction/prune",
    "compaction/start",
    "compaction/summary",
    "feedback/record",
    "goal/change",
    "hook/invoked",
    "hook/result",
    LLM_RETRY,
    LLM_RETRY_STARTED,
    "permission/preset",
    "plan/mode",
    REQUEST_CONTEXT,
    REQUEST_HEADER,
    "sandbox/mode",
    "schedule/change",
    SESSION_END_SEED,
    "session/title",
    "session/title-llm-request",
    STEP_END,
    STEP_START,
    SUBAGENT_DESCRIPTOR,
    "team/member",
    "team/message/delivered",
    "team/message/queued",
    "team/task",
    TODO_WRITE,
    "tool-workflow/agent-end",
    "tool-workflow/agent-start",
    "tool-workflow/run-end",
    "tool-workflow/run-start",
    TOOL_CALL,
    "tool/code-dispatch",
    "tool/code-dispatch-start",
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    "web/deepseek-search-llm-request",
];

/// True for a type of [`KNOWN`].
pub fn is_known(kind: &str) -> bool {
    KNOWN.contains(&kind)
}

/// Why an event of type `kind` may not enter a log, if it may not: an
/// unknown type must be marked `ignorable`.
pub fn refuse_unknown(kind: &str, ignorable: Option<bool>) -> Option<String> {
    (!is_known(kind) && ignorable != Some(true)).then(|| {
        format!("event type \"{kind}\" is not known to this harness and is not marked ignorable")
    })
}
