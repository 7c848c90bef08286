//! The names plugins use to reach each other, spelled once: services
//! ([`service`]), the methods of each core service (one module per
//! service: [`sessions`], [`tools`], ...), events dispatched on the bus
//! between plugins ([`bus`]), error codes that more than one crate
//! produces or checks ([`code`]) and the failure codes of a model request
//! ([`llm_failure`]).
//!
//! Types of *session log* events (`turn/start`, `todo/write`, ...) are not
//! here: they are [`crate::vocab::event`]. Codes the host and the SDK
//! produce are [`crate::codes`].
//!
//! Every module has an `ALL` list; a unit test checks that the names of a
//! module are unique and that no bus event reuses a log event type.

/// Declares documented `&str` constants and an `ALL` list of them.
macro_rules! names {
    ($( $(#[$doc:meta])* $name:ident = $value:expr; )*) => {
        $( $(#[$doc])* pub const $name: &str = $value; )*
        /// Every name of this module, in declaration order.
        pub const ALL: &[&str] = &[$($name),*];
    };
}

/// Service names, as given to [`crate::Context::provide`] and
/// [`crate::Context::service`].
pub mod service {
    names! {
        /// The session store (plugin `session`): create, append, derive,
        /// resume, fork, close.
        SESSIONS = "sessions";
        /// The tool registry and executor (plugin `tools`); tool plugins
        /// register with it, the agent loop executes through it.
        TOOLS = "tools";
        /// The model router (plugin `llm`); adapters register with it, the
        /// agent loop streams through it.
        LLM = "llm";
        /// The system prompt assembler (plugin `system-prompt`).
        SYSTEM_PROMPT = "systemPrompt";
        /// The per-agent inbox and turn control (plugin `agent-loop`).
        AGENTS = "agents";
        /// Agent lifecycle: create, resume, list (plugin `agent-loop`).
        AGENT_LOOP = "agentLoop";
        /// Durable session storage (plugin `session-jsonl`), called by
        /// `session` to load and by front ends to list.
        SESSION_PERSISTENCE = "sessionPersistence";
        /// Asked by `tools` when a policy says `ask`; provided by a front end
        /// (none in-tree; the test probe provides one).
        APPROVAL = "approval";
        /// The human-command registry (plugin `commands`): plugins register
        /// slash commands, front ends list and execute them.
        COMMANDS = "commands";
        /// The permission presets of each agent (plugin `permission`).
        PERMISSION = "permission";
        /// Context compaction (plugin `compaction-basic`, or any engine
        /// that provides it): measures each session's context and replaces
        /// old spans with a summary.
        COMPACTION = "compaction";
        /// Model-free pruning of oversized tool results (plugin
        /// `tool-result-pruner`), used by compaction engines.
        TOOL_RESULT_PRUNER = "toolResultPruner";
        /// The model choice new agents start on (plugin
        /// `agent-default-model`): the row's config, the user's
        /// `settings.yaml` and this run's `--model`, layered.
        AGENT_DEFAULT_MODEL = "agentDefaultModel";
        /// Delegation (plugin `subagent`): the registry of subagent
        /// providers and the children agents started through them.
        SUBAGENTS = "subagents";
        /// Provided by the host itself (see [`super::host`]).
        HOST = dsh_wire::host_service::NAME;
    }
}

/// Methods of [`service::SESSIONS`] (plugin `session`).
pub mod sessions {
    names! {
        /// Opens a new session `{id?, header?, meta?, seed?}`; emits
        /// [`super::bus::SESSION_CREATED`].
        CREATE = "create";
        /// Appends one event `{id, type, data, ...}`; emits
        /// [`super::bus::SESSION_EVENT`].
        APPEND = "append";
        /// Appends `{id, events}` atomically.
        APPEND_MANY = "appendMany";
        /// The events of `{id}` from seq `from`.
        EVENTS = "events";
        /// The model-facing messages derived from the log.
        DERIVE = "derive";
        /// Surface ops since `from`, for incremental derivation.
        SURFACE = "surface";
        /// The latest `request/context` data.
        REQUEST_CONTEXT = "requestContext";
        /// The session header and its next seq.
        HEADER = "header";
        /// Open sessions.
        LIST = "list";
        /// Makes everything appended so far durable (dispatches
        /// [`super::bus::SESSION_FLUSH`]).
        FLUSH = "flush";
        /// Loads a stored session through [`super::service::SESSION_PERSISTENCE`].
        RESUME = "resume";
        /// A new session seeded from another one.
        FORK = "fork";
        /// Closes `{id}`; answers once every [`super::bus::SESSION_DISPOSED`]
        /// listener has (the store's final write done, its lock released).
        CLOSE = "close";
        /// Announces an unpublished session `{id}`: emits
        /// [`super::bus::SESSION_CREATED`] with what it holds; false when it
        /// was published already.
        PUBLISH = "publish";
        /// Takes back a session `{id}` whose creation failed: unpublished,
        /// it goes without a trace; published, it is closed.
        DISCARD = "discard";
    }
}

/// Methods of [`service::SESSION_PERSISTENCE`] (plugin `session-jsonl`).
pub mod session_persistence {
    names! {
        /// Reads a stored session (header and events).
        LOAD = "load";
        /// Reads a stored session's header and tail without loading it.
        INSPECT = "inspect";
        /// Stored events from `fromSeq`.
        READ_FROM = "readFrom";
        /// The file of a session id.
        LOCATE = "locate";
        /// Stored sessions, oldest first; with `cwd`, only those whose
        /// header's `cwd` is that directory.
        LIST = "list";
        /// A stored session's header alone (the first zstd frame or line),
        /// read without a lock or a repair.
        HEADER = "header";
        /// Stored snapshots of a session.
        LIST_SNAPSHOTS = "listSnapshots";
        /// Deletes a stored session that no host is writing (a dsh
        /// extension: the original has no delete; `dsh-host sessions rm`).
        REMOVE = "remove";
    }
}

/// Methods of [`service::TOOLS`] (plugin `tools`).
pub mod tools {
    names! {
        /// A tool plugin registers `{name, description, parameters, service}`;
        /// emits [`super::bus::TOOLS_CHANGE`].
        REGISTER = "register";
        /// Removes a tool `{name, scope?}` the calling plugin registered;
        /// emits [`super::bus::TOOLS_CHANGE`] (nothing when there is none).
        UNREGISTER = "unregister";
        /// The schemas visible in `{scope}`, for the model request.
        SCHEMAS = "schemas";
        /// A tool's execution mode (`parallel`/`serial`) for `{name, scope}`.
        MODE = "mode";
        /// Restricts the tools of a scope.
        RESTRICT = "restrict";
        /// Installs a guard over the tools of a scope.
        GUARD = "guard";
        /// Defers a context to the next tool result.
        DEFER_CONTEXT = "deferContext";
        /// Runs one call end to end.
        EXECUTE = "execute";
        /// Opens an execution (approval, `tools/pre-execute`).
        PREPARE = "prepare";
        /// Runs a prepared execution's body (`tools/execute`).
        DISPATCH = "dispatch";
        /// Applies `tools/post-execute` to a dispatched result.
        FINALIZE = "finalize";
        /// Cancels an execution.
        CANCEL = "cancel";
        /// Closes an execution (emits `tools/result`).
        FINISH = "finish";
    }
}

/// Methods a tool's own service answers (called by plugin `tools`; the SDK's
/// `tool::register` provides `execute`).
pub mod tool_service {
    names! {
        /// Runs the tool with `{exec}` (arguments in `exec.args`).
        EXECUTE = "execute";
        /// Validates a call before it is approved.
        CHECK = "check";
        /// Renders a call for an approval prompt.
        RENDER = "render";
        /// Rewrites the result content before it enters the history.
        FINALIZE_CONTENT = "finalizeContent";
    }
}

/// The names of the shipped tools, as the model calls them (policies and
/// front ends that treat a tool specially name it through these).
pub mod tool {
    names! {
        /// Reads a file (plugin `tool-read`).
        READ = "read";
        /// Creates or replaces a file (plugin `tool-fs`).
        WRITE = "write";
        /// Replaces text in a file (plugin `tool-fs`).
        EDIT = "edit";
        /// Finds files by pattern (plugin `tool-search`).
        GLOB = "glob";
        /// Searches file contents (plugin `tool-search`).
        GREP = "grep";
        /// Runs a command (plugin `tool-bash`).
        BASH = "bash";
        /// Output of a background job (plugin `tool-bash`).
        JOB_OUTPUT = "job_output";
        /// The background jobs (plugin `tool-bash`).
        JOB_LIST = "job_list";
        /// Stops a background job (plugin `tool-bash`).
        JOB_KILL = "job_kill";
        /// Replaces the todo list (plugin `tool-todo`).
        TODO_WRITE = "todo_write";
        /// Fetches a web page (plugin `tool-web`).
        WEB_FETCH = "web_fetch";
        /// Delegates a task to a fresh child agent (plugin `tool-subagent`).
        SUBAGENT = "subagent";
        /// Delegates a task to a child that inherits the conversation
        /// (plugin `tool-subagent`).
        SUBAGENT_FORK = "subagent_fork";
        /// Continues a background child (plugin `tool-subagent`).
        SEND_MESSAGE = "send_message";
        /// Stops a descendant's current turn (plugin `tool-subagent`).
        INTERRUPT_AGENT = "interrupt_agent";
        /// Lists the caller's background children (plugin `tool-subagent`).
        LIST_AGENTS = "list_agents";
        /// A child's message to its parent (plugin `tool-subagent`; children
        /// only).
        REPORT = "report";
    }
}

/// Methods of [`service::LLM`] (plugin `llm`).
pub mod llm {
    names! {
        /// An adapter registers `{providers, service}`; emits
        /// [`super::bus::LLM_ADAPTERS_UPDATED`].
        REGISTER_ADAPTER = "registerAdapter";
        /// The registered providers.
        PROVIDERS = "providers";
        /// Cancels a running stream.
        CANCEL = "cancel";
        /// Streams a model request as chunks (dispatches
        /// [`super::bus::LLM_STREAM`] first).
        STREAM = "stream";
        /// What a route knows of a model `{provider, model}`: its name, its
        /// context window and default output cap (the original's
        /// `resolveModelInfo`).
        RESOLVE_MODEL_INFO = "resolveModelInfo";
        /// A call config checked against its model's metadata, with the
        /// model's defaults (`maxTokens`, `reasoningEffort`) filled in,
        /// which fields were filled, and the model's context window (the
        /// original's `resolveCallConfig` and the metadata half of its
        /// `prepareCall`).
        RESOLVE_CALL_CONFIG = "resolveCallConfig";
    }
}

/// Methods an LLM adapter's own service answers (called by plugin `llm`).
pub mod llm_adapter {
    names! {
        /// Streams one request to the provider as chunks.
        STREAM = "stream";
        /// The adapter's metadata of one model (`{provider, model}`).
        RESOLVE_MODEL = "resolveModel";
    }
}

/// Methods of [`service::SYSTEM_PROMPT`] (plugin `system-prompt`).
pub mod system_prompt {
    names! {
        /// Adds a section; emits [`super::bus::SYSTEM_PROMPT_CHANGE`].
        SECTION = "section";
        /// Adds a context block.
        CONTEXT = "context";
        /// Adds a prompt variable.
        VARIABLE = "variable";
        /// Suppresses the runtime context in a scope.
        SUPPRESS_RUNTIME_CONTEXT = "suppressRuntimeContext";
        /// Assembles the prompt for `{scope, tools, variables}` (dispatches
        /// [`super::bus::SYSTEM_PROMPT_ASSEMBLE`]).
        ASSEMBLE = "assemble";
    }
}

/// Methods of [`service::AGENTS`] (plugin `agent-loop`).
pub mod agents {
    names! {
        /// Queues a message for the next turn (starts one when idle).
        FOLLOWUP = "followup";
        /// Queues a message for the next step.
        STEER = "steer";
        /// Queues a message for the next step without starting a turn.
        INJECT = "inject";
        /// Replaces a pending message.
        REPLACE = "replace";
        /// Removes a pending message.
        REMOVE = "remove";
        /// The pending messages.
        PENDING = "pending";
        /// Cancels the running turn.
        CANCEL = "cancel";
        /// Resolves when the agent is idle, with its last turn's end.
        WHEN_IDLE = "whenIdle";
        /// Switches the agent's model.
        SELECT_MODEL = "selectModel";
        /// Runs a maintenance task between turns.
        RUN_MAINTENANCE = "runMaintenance";
        /// `{status}` of the agent.
        STATUS = "status";
        /// Disposes the agent; emits [`super::bus::AGENT_DISPOSED`].
        DISPOSE = "dispose";
    }
}

/// Methods of [`service::AGENT_LOOP`] (plugin `agent-loop`).
pub mod agent_loop {
    names! {
        /// Creates an agent on a new session `{agentOptions, meta}`.
        CREATE = "create";
        /// Creates an agent on a stored session `{sessionId, agentOptions}`.
        RESUME = "resume";
        /// The live agents.
        LIST = "list";
        /// Lets go of an agent `{agent}` the caller owns: its owner going
        /// away no longer disposes it, and the next `resume` of it owns it
        /// (a front end handing its agent to its next generation; a dsh
        /// extension).
        RELEASE = "release";
        /// Publishes an agent `{agent}` made with `setup: true`: its session
        /// is announced, then the agent (`session/created`, `agent/created`,
        /// `agent/session-start`); the caller owns it from then on.
        COMMIT = "commit";
        /// Rolls back an agent `{agent}` made with `setup: true`: its scope
        /// closes and its session goes, nothing of it having been announced.
        ABANDON = "abandon";
        /// The live agents no other agent delegated to (no `parentSession`),
        /// sorted.
        ROOTS = "roots";
        /// Whether the calling plugin owns the live agent `{agent}` (it is
        /// disposed when that plugin goes).
        IS_OWNED_BY = "isOwnedBy";
    }
}

/// Methods of [`service::SUBAGENTS`] (plugin `subagent`).
pub mod subagents {
    names! {
        /// A provider registers `{name, service, inheritsParentContext}`;
        /// removed when its fiber goes; emits
        /// [`super::bus::SUBAGENT_PROVIDERS_CHANGED`].
        REGISTER_PROVIDER = "registerProvider";
        /// The registered providers, in registration order.
        PROVIDERS = "providers";
        /// A one-shot child: runs the prompt to its end, answers the
        /// outcome and disposes the child.
        START = "start";
        /// A continuable child: answers once the prompt is accepted; the
        /// parent hears of each settlement.
        START_CONTINUABLE = "startContinuable";
        /// Another turn for a continuable child (its direct parent only).
        FOLLOWUP = "followup";
        /// Stops a descendant's current turn (an ancestor only).
        INTERRUPT = "interrupt";
        /// A continuable child's message to its direct parent.
        REPORT_FROM = "reportFrom";
        /// The continuable children of an agent.
        LIST_CHILDREN = "listChildren";
        /// The continuable descendants of an agent, in pre-order.
        LIST_DESCENDANTS = "listDescendants";
        /// Answers once no continuable descendant of an agent is running.
        WHEN_SETTLED = "whenSettled";
        /// How many descendants of an agent run now (a dsh extension).
        RUNNING_BELOW = "runningBelow";
    }
}

/// Methods of a subagent provider's service (registered with
/// [`service::SUBAGENTS`]).
pub mod subagent_provider {
    names! {
        /// Creates the child agent `{parent, childId, depth, ...}`.
        CREATE = "create";
    }
}

/// Methods of [`service::COMMANDS`] (plugin `commands`).
pub mod commands {
    names! {
        /// A plugin registers `{name, description, input?, recordInput?,
        /// service, scope?}`, owned by its fiber; emits
        /// [`super::bus::COMMANDS_CHANGE`].
        REGISTER = "register";
        /// The commands `{agent}` sees, sorted by name.
        LIST = "list";
        /// Runs the command line `{agent, line}`: logs `command/run`, calls
        /// the handler, logs `command/done`; null when the line is not a
        /// known command.
        EXECUTE = "execute";
    }
}

/// Methods a command's own service answers (called by plugin `commands`;
/// `dsh_sdk::api::commands::serve` provides it).
pub mod command_service {
    names! {
        /// Runs the command `{commandId, agent, name, args}`; answers
        /// `{kind, text?}`.
        RUN = "run";
    }
}

/// Methods of [`service::PERMISSION`] (plugin `permission`).
pub mod permission {
    names! {
        /// The preset in force for `{agent}` and the presets there are.
        PRESET = "preset";
        /// Switches `{agent}` to `{preset}` for the rest of its life.
        SET_PRESET = "setPreset";
    }
}

/// Methods of [`service::COMPACTION`] (see [`crate::api::compaction`]).
pub mod compaction {
    names! {
        /// The context in use of `{agent}`: `{totalTokens, surfaceTokens,
        /// contextWindow?, thresholdTokens?}`.
        MEASURE = "measure";
        /// Compacts `{agent}` now, below the pressure threshold too
        /// (`/compact`); the agent must be idle. Answers the result, or
        /// null when nothing can be compacted.
        COMPACT_NOW = "compactNow";
        /// The idle part of [`COMPACT_NOW`], run by it through
        /// `agents.runMaintenance` (not for other callers).
        COMPACT_IDLE = "compactIdle";
    }
}

/// Methods of [`service::AGENT_DEFAULT_MODEL`] (see
/// [`crate::api::agent_default_model`]).
pub mod agent_default_model {
    names! {
        /// The selection a new agent starts on: `{provider, model,
        /// reasoningEffort?, source, providerSource, modelSource,
        /// settingsFile, overridden?}`.
        CURRENT_SELECTION = "currentSelection";
        /// Saves `{provider, model, reasoningEffort?, keepReasoningEffort?}`
        /// as the default of later sessions (`$DSH_HOME/settings.yaml`);
        /// answers `{settingsFile}`.
        SAVE_SELECTION = "saveSelection";
    }
}

/// Methods of [`service::TOOL_RESULT_PRUNER`].
pub mod tool_result_pruner {
    names! {
        /// Prunes the oversized tool results of `{agent}` on its surface
        /// before `{keepFrom}`; answers `{pruned, charsRemoved}`.
        PRUNE_SESSION = "pruneSession";
    }
}

/// Methods of [`service::APPROVAL`] (provided by a front end).
pub mod approval {
    names! {
        /// Asks `{agent, toolName, callId, reason}`; answers `{outcome}`.
        REQUEST = "request";
    }
}

/// Methods of an MCP server's service `mcp:<serverName>` (one per
/// `mcp-client` row; see [`crate::api::mcp`]).
pub mod mcp {
    names! {
        /// Answers the server's [`crate::api::mcp::ServerStatus`].
        STATUS = "status";
        /// Drops the connection and connects again with a fresh attempt
        /// budget; answers the status.
        RECONNECT = "reconnect";
        /// Starts an OAuth login of a Streamable HTTP server; answers a
        /// [`crate::api::mcp::LoginStarted`] with the URL to open.
        LOGIN = "login";
    }
}

/// Methods of [`service::HOST`] (the host itself).
pub mod host {
    pub use dsh_wire::host_service::{
        ARGS, EPRINT, EXIT, INFO, PLUGINS, PRINT, READ_INPUT, SET_RAW_MODE, STATS, TERMINAL,
        TRUST_PROJECT,
    };

    /// Every method of the host service.
    pub const ALL: &[&str] = &dsh_wire::host_service::METHODS;
}

/// Events dispatched on the bus between plugins (not session log types).
pub mod bus {
    names! {
        /// Waterfall by `agent-loop` before each step; listeners may add
        /// messages (agent-instructions) or checkpoint (checkpoint-policy).
        AGENT_PRE_STEP = "agent/pre-step";
        /// Waterfall by `agent-loop` over each model request.
        AGENT_REQUEST = "agent/request";
        /// Waterfall by `agent-loop` when a model request fails; `llm-retry`
        /// answers with a retry decision.
        AGENT_REQUEST_ERROR = "agent/request-error";
        /// Serial by `agent-loop` when a turn is about to end.
        AGENT_TURN_STOPPING = "agent/turn-stopping";
        /// Emitted by `agent-loop` when a message enters an inbox.
        AGENT_INBOX_INSERTED = "agent/inbox/inserted";
        /// Emitted by `agent-loop` when a pending message is dropped.
        AGENT_INBOX_DISCARDED = "agent/inbox/discarded";
        /// Emitted by `agent-loop` when a turn claims a pending message.
        AGENT_INBOX_CLAIMED = "agent/inbox/claimed";
        /// Emitted by `agent-loop` when an agent turns `running` or `idle`.
        AGENT_STATUS = "agent/status";
        /// Emitted by `agent-loop` when a turn fails.
        AGENT_ERROR = "agent/error";
        /// Emitted by `agent-loop` when an agent is created.
        AGENT_CREATED = "agent/created";
        /// Emitted by `agent-loop` when an agent is disposed.
        AGENT_DISPOSED = "agent/disposed";
        /// Emitted by `sessions` when an unpublished session is dropped (its
        /// creation rolled back, `{sessionId}`): nothing was announced, but a
        /// store that loaded it for a resume lets go of its log.
        SESSION_DISCARDED = "session/discarded";
        /// Dispatched (awaited) by `agent-loop` when an agent's scope opens,
        /// before its creator's setup: registrations scoped to its id are
        /// accepted again if an earlier agent of that id closed its scope.
        AGENT_SCOPE_OPENED = "agent/scope-opened";
        /// Dispatched (awaited) by `agent-loop` when an agent's scope
        /// closes: after a disposed agent drained and before
        /// `agent/disposed`, or when its creation is rolled back. Every
        /// registration scoped to it goes, and later ones are refused with
        /// `INACTIVE_EFFECT`.
        AGENT_SCOPE_CLOSED = "agent/scope-closed";
        /// Emitted by `agent-loop` when an agent's session starts
        /// (`source`: `startup` or `resume`).
        AGENT_SESSION_START = "agent/session-start";
        /// Emitted by `agent-loop` when an agent listed in its config could
        /// not be started (the failure is contained: a warning, this event,
        /// no agent).
        AGENT_LOOP_CONFIG_START_FAILED = "agent-loop/config-start-failed";
        /// Waterfall by `tools` before a call runs; a listener may deny it
        /// (permission).
        TOOLS_PRE_EXECUTE = "tools/pre-execute";
        /// Waterfall by `tools` around a call's body.
        TOOLS_EXECUTE = "tools/execute";
        /// Waterfall by `tools` over a call's result (spill).
        TOOLS_POST_EXECUTE = "tools/post-execute";
        /// Emitted by `tools` with a call's final result.
        TOOLS_RESULT = "tools/result";
        /// Emitted by `tools` when the set of tools changes.
        TOOLS_CHANGE = "tools/change";
        /// Emitted by `tool-read`/`tool-fs` when a file's content was seen.
        FS_OBSERVED = "fs/observed";
        /// Waterfall by `tool-fs` before it writes a file; a listener may deny it.
        FS_WRITE_INTENT = "fs/write-intent";
        /// Waterfall by `tool-fs` before it edits a file; a listener may deny it.
        FS_EDIT_INTENT = "fs/edit-intent";
        /// Waterfall by `llm` over each request before it reaches the adapter.
        LLM_STREAM = "llm/stream";
        /// Emitted by `llm` when an adapter registers.
        LLM_ADAPTERS_UPDATED = "llm/adapters-updated";
        /// Emitted by `subagent` when a provider is registered or removed.
        SUBAGENT_PROVIDERS_CHANGED = "subagent/providers-changed";
        /// Dispatched (in parallel, awaited) by `subagent` once a child
        /// agent is made or resumed, before its prompt: `{child, parent,
        /// mode}` (`tool-subagent` adds the child's `report` here).
        SUBAGENT_CHILD_READY = "subagent/child-ready";
        /// Emitted by `session` for each appended event `{sessionId, event}`.
        SESSION_EVENT = "session/event";
        /// Emitted by `session` when a session opens (created, resumed, forked).
        SESSION_CREATED = "session/created";
        /// Emitted by `session` when a session closes.
        SESSION_DISPOSED = "session/disposed";
        /// Parallel by `session` on `flush`; persistence makes the log durable.
        SESSION_FLUSH = "session/flush";
        /// Waterfall by `system-prompt` over each assembly.
        SYSTEM_PROMPT_ASSEMBLE = "system-prompt/assemble";
        /// Emitted by `system-prompt` when a section, context or variable
        /// changes.
        SYSTEM_PROMPT_CHANGE = "system-prompt/change";
        /// Emitted by `commands` when a command is registered or removed.
        COMMANDS_CHANGE = "commands/change";
    }
}

/// Error codes of the domain that more than one crate produces or checks
/// (the host's and the SDK's own are [`crate::codes`]).
pub mod code {
    names! {
        /// The work was cancelled.
        ABORTED = "ABORTED";
        /// No model adapter serves the request's provider route (from
        /// `llm`; the loop then lets an `llm/stream` listener serve it).
        NO_ADAPTER = "NO_ADAPTER";
        /// A call asks for a reasoning effort its model does not offer
        /// (from `llm`; never clamped to another).
        UNSUPPORTED_REASONING_EFFORT = "UNSUPPORTED_REASONING_EFFORT";
        /// A tool call was cancelled before its body ran.
        ABORTED_BEFORE_DISPATCH = "ABORTED_BEFORE_DISPATCH";
        /// A tool's arguments do not match its parameters.
        INVALID_ARGS = "INVALID_ARGS";
        /// No session (open or stored) has this id.
        SESSION_NOT_FOUND = "SESSION_NOT_FOUND";
        /// No live agent has this id.
        AGENT_NOT_FOUND = "AGENT_NOT_FOUND";
        /// `agentLoop.commit`/`abandon` of an agent with no creation under
        /// way (never prepared, committed already, or rolled back because
        /// its creator or the agent loop went).
        NOT_PENDING = "NOT_PENDING";
        /// A registration scoped to an agent whose scope has closed (the
        /// agent was disposed or its creation rolled back).
        INACTIVE_EFFECT = "INACTIVE_EFFECT";
        /// A session with this id exists already.
        SESSION_ALREADY_EXISTS = "SESSION_ALREADY_EXISTS";
        /// A stored session cannot be read back.
        SESSION_CORRUPT = "SESSION_CORRUPT";
        /// A stored session belongs to another directory than the one it
        /// was to be resumed from.
        SESSION_OTHER_DIRECTORY = "SESSION_OTHER_DIRECTORY";
        /// A fork or seed ends inside an open turn.
        OPEN_TURN = "OPEN_TURN";
        /// A crash-repair result for a call that never started (reference
        /// §2.11); such a result needs no `tool/call`.
        TOOL_NOT_STARTED = "TOOL_NOT_STARTED";
        /// A crash-repair result for a call that was recorded as started but
        /// whose outcome was never recorded.
        TOOL_OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN";
        /// Persistence: an event restates a seq already stored or pending
        /// (checked by the test kit's persistence contract).
        SEQ_RESTATED = "SEQ_RESTATED";
        /// Persistence: an event's seq skips past the next one.
        SEQ_GAP = "SEQ_GAP";
        /// Persistence: an event's data is not lossless JSON (`-0`, a
        /// non-finite number).
        NOT_LOSSLESS = "NOT_LOSSLESS";
        /// Persistence: a session's header (metadata) is invalid.
        INVALID_META = "INVALID_META";
        /// A file tool met an I/O error.
        FS_ERROR = "FS_ERROR";
        /// A file tool's path does not exist.
        FS_NOT_FOUND = "FS_NOT_FOUND";
        /// A file tool's file is not text.
        FS_NOT_TEXT = "FS_NOT_TEXT";
        /// A command of this name is already registered in that scope.
        DUPLICATE_COMMAND = "DUPLICATE_COMMAND";
        /// A command registration is malformed (name, description, hint,
        /// service).
        INVALID_COMMAND = "INVALID_COMMAND";
        /// A permission preset that does not exist.
        UNKNOWN_PRESET = "UNKNOWN_PRESET";
        /// A compaction of this session is under way, or the agent is not
        /// idle for a manual one.
        COMPACTION_BUSY = "COMPACTION_BUSY";
        /// A model answer hit its output cap where a whole answer was
        /// needed (a compaction summary).
        MAX_TOKENS = "MAX_TOKENS";
        /// An agent already has active work (a turn or maintenance).
        AGENT_BUSY = "AGENT_BUSY";
        /// `appendMany` with an `expectSeq` the log's length has passed.
        APPEND_CONFLICT = "APPEND_CONFLICT";
        /// A compaction failed (the summary request, a summary that is not
        /// smaller, a span that changed meanwhile); the surface is as it
        /// was and the log holds a `compaction/end` with the error.
        COMPACTION_FAILED = "COMPACTION_FAILED";
        /// The settings document (`$DSH_HOME/settings.yaml`) cannot be
        /// read or is not what its section needs; it is left as it is.
        INVALID_SETTINGS = "INVALID_SETTINGS";
        /// Another writer holds the settings document's lock
        /// (`settings.yaml.lock`) longer than a writer waits.
        SETTINGS_LOCKED = "SETTINGS_LOCKED";
        /// The settings document cannot be written: its writer lock or the
        /// new file cannot be made, or the rename over it fails (a
        /// read-only or foreign directory, another filesystem); the message
        /// names the directory. The document is left as it is.
        SETTINGS_UNWRITABLE = "SETTINGS_UNWRITABLE";
        /// An MCP server answered a tool call with `isError: true` (the
        /// message is the tool's own text).
        MCP_TOOL_ERROR = "MCP_TOOL_ERROR";
        /// An MCP server is not connected (starting, reconnecting, or given
        /// up on) or the connection closed during the call.
        MCP_UNAVAILABLE = "MCP_UNAVAILABLE";
        /// An MCP server answered a request with a JSON-RPC error or a
        /// result of the wrong shape.
        MCP_PROTOCOL = "MCP_PROTOCOL";
        /// An MCP tool call got no answer within the row's
        /// `toolCallTimeoutMs` (the server was sent a cancellation).
        MCP_TIMEOUT = "MCP_TIMEOUT";
    }
}

/// Failure codes of a model request (`LlmFailure::code`), reported by the
/// adapters (`llm-deepseek`, `llm-script`) and the `llm` router, and read by
/// `llm-retry` to decide a retry (reference dsh-product §3.1.1).
pub mod llm_failure {
    names! {
        /// The provider refused the credential.
        AUTH = "AUTH";
        /// The account's quota is spent.
        QUOTA = "QUOTA";
        /// The provider throttled the request.
        RATE_LIMIT = "RATE_LIMIT";
        /// The request does not fit the model's context window.
        CONTEXT_WINDOW_EXCEEDED = "CONTEXT_WINDOW_EXCEEDED";
        /// The provider rejected the request as malformed.
        INVALID_REQUEST = "INVALID_REQUEST";
        /// The provider failed (5xx, or an error it reported mid-stream).
        SERVER = "SERVER";
        /// The provider's answer could not be parsed.
        MALFORMED_RESPONSE = "MALFORMED_RESPONSE";
        /// The stream ended without content.
        EMPTY_RESPONSE = "EMPTY_RESPONSE";
        /// The stream closed before it finished.
        STREAM_CLOSED = "STREAM_CLOSED";
        /// The request timed out.
        TIMEOUT = "TIMEOUT";
        /// The connection failed.
        TRANSPORT = "TRANSPORT";
        /// No credential is configured for the provider.
        MISSING_CREDENTIAL = "MISSING_CREDENTIAL";
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn assert_unique(module: &str, names: &[&str]) {
        let mut seen = HashSet::new();
        for name in names {
            assert!(seen.insert(*name), "{module}: `{name}` declared twice");
        }
    }

    #[test]
    fn names_are_unique_within_each_module() {
        for (module, names) in [
            ("service", service::ALL),
            ("sessions", sessions::ALL),
            ("session_persistence", session_persistence::ALL),
            ("tools", tools::ALL),
            ("tool_service", tool_service::ALL),
            ("tool", tool::ALL),
            ("llm", llm::ALL),
            ("llm_adapter", llm_adapter::ALL),
            ("system_prompt", system_prompt::ALL),
            ("agents", agents::ALL),
            ("agent_loop", agent_loop::ALL),
            ("approval", approval::ALL),
            ("mcp", mcp::ALL),
            ("compaction", compaction::ALL),
            ("tool_result_pruner", tool_result_pruner::ALL),
            ("commands", commands::ALL),
            ("command_service", command_service::ALL),
            ("permission", permission::ALL),
            ("agent_default_model", agent_default_model::ALL),
            ("subagents", subagents::ALL),
            ("subagent_provider", subagent_provider::ALL),
            ("host", host::ALL),
            ("bus", bus::ALL),
            ("code", code::ALL),
            ("llm_failure", llm_failure::ALL),
        ] {
            assert_unique(module, names);
        }
    }

    #[test]
    fn bus_events_are_not_session_log_types() {
        for name in bus::ALL {
            assert!(
                !crate::vocab::event::is_known(name),
                "bus event `{name}` is also a session log type"
            );
        }
    }

    #[test]
    fn domain_codes_do_not_shadow_host_codes() {
        let host = [
            crate::codes::SERVICE_UNAVAILABLE,
            crate::codes::UNKNOWN_METHOD,
            crate::codes::PANIC,
            crate::codes::DISPOSED,
            crate::codes::INVALID_PAYLOAD,
            crate::codes::INVALID_CONFIG,
            crate::codes::NEXT_CALLED_TWICE,
            crate::codes::HOST_REFUSED,
            crate::codes::TIMEOUT,
            crate::codes::SCOPE_ALREADY_BOUND,
            crate::codes::SCOPE_CYCLE,
            crate::codes::UNKNOWN,
        ];
        assert_unique("code + codes", &[code::ALL, &host].concat());
    }
}
