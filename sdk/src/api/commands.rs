//! The `commands` service (plugin `commands`; the original's
//! `packages/interaction/commands`): human slash commands that plugins
//! register and front ends list and execute. This module holds the params
//! and reply of each method of [`crate::names::commands`], the call a
//! command's own service receives ([`RunParams`], method
//! [`crate::names::command_service::RUN`]) and answers ([`CommandResult`]),
//! the data of the `command/run` and `command/done` log events, the
//! `commands/change` payload, the line parser ([`parse`]), [`Commands`] (a
//! client with one method per service method) and [`serve`] (how a plugin
//! serves its commands).
//!
//! A registration names the service that handles the command, as a tool
//! registration does: `commands` calls that service's `run` for each
//! execution. Registrations are owned by the registering fiber and are
//! removed when it goes away.

use std::future::Future;
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use crate::names::{command_service, commands as method, service};
use crate::{Context, Reply, Request, Result, Service};

// ---- names and lines ---------------------------------------------------------

/// True when `name` can name a command: a lowercase ASCII letter, then
/// lowercase letters, digits, `_` or `-` (the original's
/// `/^[a-z][a-z0-9_-]*$/`).
pub fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// A line that is syntactically a command, before the registry looks the
/// name up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed<'a> {
    /// The command's name, without the slash.
    pub name: &'a str,
    /// Every byte after the name, the separating whitespace included
    /// (`""` when the line ends after the name).
    pub args: &'a str,
}

/// Parses a command line as the original's `parseCommand` does: a `/` at
/// byte 0, a [`valid_name`], then the end of the line or whitespace (space,
/// tab, `\n`, `\r`). Anything else is not a command (`None`).
pub fn parse(line: &str) -> Option<Parsed<'_>> {
    let rest = line.strip_prefix('/')?;
    let end = rest
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'))
        .unwrap_or(rest.len());
    let (name, args) = rest.split_at(end);
    let separated = args.is_empty() || args.starts_with([' ', '\t', '\n', '\r']);
    (valid_name(name) && separated).then_some(Parsed { name, args })
}

// ---- registration and discovery ---------------------------------------------

/// What a command takes after its name, for a front end's composer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputDescriptor {
    /// A placeholder for the free-form input (`<name>`, `[message]`); not
    /// empty.
    pub hint: String,
}

/// A command as [`list`](Commands::list) shows it (no handler).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Descriptor {
    /// The name, without the slash.
    pub name: String,
    /// What it does, for `/help` and menus; not empty.
    pub description: String,
    /// Its input, when it takes any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<InputDescriptor>,
}

/// Params of `register`: one command, handled by `service`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegisterParams {
    /// The name ([`valid_name`]).
    pub name: String,
    /// What it does; not empty.
    pub description: String,
    /// Its input, when it takes any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<InputDescriptor>,
    /// Whether `command/run` records the arguments (default true); false
    /// when another logged event owns them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_input: Option<bool>,
    /// The service whose `run` handles each execution
    /// ([`crate::names::command_service::RUN`]). [`serve`] fills it in.
    #[serde(default)]
    pub service: String,
    /// An agent id: the command is that agent's alone and shadows a global
    /// command of the same name for it. Absent: global.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

impl RegisterParams {
    /// A global command `name` with `description`, no input, service to be
    /// filled in by [`serve`].
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> RegisterParams {
        RegisterParams {
            name: name.into(),
            description: description.into(),
            input: None,
            record_input: None,
            service: String::new(),
            scope: None,
        }
    }

    /// The same command, taking input described by `hint`.
    pub fn with_hint(mut self, hint: impl Into<String>) -> RegisterParams {
        self.input = Some(InputDescriptor { hint: hint.into() });
        self
    }

    /// The same command, for agent `scope` only.
    pub fn scoped(mut self, scope: impl Into<String>) -> RegisterParams {
        self.scope = Some(scope.into());
        self
    }

    /// What `list` shows of it.
    pub fn descriptor(&self) -> Descriptor {
        Descriptor {
            name: self.name.clone(),
            description: self.description.clone(),
            input: self.input.clone(),
        }
    }
}

/// Params of `list`: the commands agent `agent` sees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListParams {
    /// The agent (its session id).
    pub agent: String,
}

/// Params of `execute`: one line typed to agent `agent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecuteParams {
    /// The receiving agent; the lifecycle events go to its session.
    pub agent: String,
    /// The whole line, slash included.
    pub line: String,
}

// ---- execution ----------------------------------------------------------------

/// How a command settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResultKind {
    /// It did what was asked.
    Success,
    /// It refused or failed; `text` says why.
    Error,
}

/// What a command's handler answers, and the `result` of an execution:
/// shown to the person, never to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandResult {
    /// Success or error.
    pub kind: ResultKind,
    /// Text for the person (required, and not blank, for an error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A success only: an earlier event of the session that owns a richer
    /// presentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_event_seq: Option<u64>,
}

impl CommandResult {
    /// A success showing `text`.
    pub fn success(text: impl Into<String>) -> CommandResult {
        CommandResult {
            kind: ResultKind::Success,
            text: Some(text.into()),
            source_event_seq: None,
        }
    }

    /// An error saying `text`.
    pub fn error(text: impl Into<String>) -> CommandResult {
        CommandResult {
            kind: ResultKind::Error,
            text: Some(text.into()),
            source_event_seq: None,
        }
    }

    /// The result as the registry keeps it: an error needs a text that is
    /// not blank, and only a success may name a source event. `Err` says
    /// what is wrong with it (for command `name`).
    pub fn checked(self, name: &str) -> std::result::Result<CommandResult, String> {
        match self.kind {
            ResultKind::Error if self.text.as_deref().is_none_or(|t| t.trim().is_empty()) => Err(
                format!("command \"{name}\" error text must be a non-empty string"),
            ),
            ResultKind::Error => Ok(CommandResult {
                source_event_seq: None,
                ..self
            }),
            ResultKind::Success => Ok(self),
        }
    }
}

/// The reply of `execute` for a line that ran a command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Execution {
    /// The id that pairs its `command/run` and `command/done`.
    pub command_id: String,
    /// How it settled.
    pub result: CommandResult,
}

/// The reply of `execute`: `None` (`null`) when the line is not a command
/// (bad syntax) or names no command the agent sees; nothing was logged.
pub type ExecuteReply = Option<Execution>;

/// Params of a command service's `run`: one execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunParams {
    /// The id already logged in `command/run`.
    pub command_id: String,
    /// The receiving agent.
    pub agent: String,
    /// The command's name.
    pub name: String,
    /// Every byte after the name, separating whitespace included; the
    /// command owns its grammar.
    pub args: String,
}

// ---- log events and bus payloads ------------------------------------------------

/// The session log types of a command's lifecycle (both among the
/// original's known types, [`crate::vocab::event::KNOWN`]; log-only, never
/// model-visible).
pub mod event {
    /// Appended before the handler runs ([`super::CommandRun`]).
    pub const COMMAND_RUN: &str = "command/run";
    /// Appended when the command settled ([`super::CommandDone`]).
    pub const COMMAND_DONE: &str = "command/done";
}

/// Who issued a command line (`source` of `command/run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum CommandSource {
    /// A person typed it.
    User,
}

/// Data of the `command/run` session event, appended before the handler
/// runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandRun {
    /// Pairs it with its `command/done`.
    pub command_id: String,
    /// The command's name.
    pub name: String,
    /// The arguments as typed, unless the command does not record them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<String>,
    /// Who issued it.
    pub source: CommandSource,
}

/// Data of the `command/done` session event, appended when the command
/// settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandDone {
    /// Pairs it with its `command/run`.
    pub command_id: String,
    /// How it settled.
    pub kind: ResultKind,
    /// The handler's text, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A success's source event, if it named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_event_seq: Option<u64>,
}

impl CommandDone {
    /// The `command/done` of execution `command_id` settled as `result`.
    pub fn of(command_id: &str, result: &CommandResult) -> CommandDone {
        CommandDone {
            command_id: command_id.to_owned(),
            kind: result.kind,
            text: result.text.clone(),
            source_event_seq: result.source_event_seq,
        }
    }
}

/// Payload of [`crate::names::bus::COMMANDS_CHANGE`] (emitted when a
/// command is registered or removed): empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandsChanged {}

// ---- client ---------------------------------------------------------------------

/// A typed client of the `commands` service: one method per service
/// method, each sending the params type above and parsing the reply type.
#[derive(Clone)]
pub struct Commands(Service);

impl Commands {
    /// The `commands` service of `ctx`.
    pub fn new(ctx: &Context) -> Commands {
        Commands(ctx.service(service::COMMANDS))
    }

    /// The untyped client underneath.
    pub fn service(&self) -> &Service {
        &self.0
    }

    /// `register`: adds a command owned by this fiber (`DUPLICATE_COMMAND`
    /// when its scope has one of that name, `INVALID_COMMAND` when it is
    /// malformed); emits `commands/change`.
    pub async fn register(&self, params: &RegisterParams) -> Result<()> {
        self.0.call_as(method::REGISTER, params).await
    }

    /// `list`: the commands `agent` sees, sorted by name.
    pub async fn list(&self, agent: &str) -> Result<Vec<Descriptor>> {
        let params = ListParams {
            agent: agent.to_owned(),
        };
        self.0.call_as(method::LIST, &params).await
    }

    /// `execute`: runs `line` for `agent`; `None` when it is not a known
    /// command (nothing logged).
    pub async fn execute(&self, agent: &str, line: &str) -> Result<ExecuteReply> {
        let params = ExecuteParams {
            agent: agent.to_owned(),
            line: line.to_owned(),
        };
        self.0.call_as(method::EXECUTE, &params).await
    }
}

// ---- serving commands ------------------------------------------------------------

/// Serves `commands` (their `service` is filled in) with `handler`, which
/// receives each execution's [`RunParams`] (`name` says which command) and
/// answers its result. An `Err` (or a panic) settles the execution as an
/// error with its message. The service is `command:<plugin>:<fiber>`; the
/// registrations go away with this fiber.
pub async fn serve<F, Fut>(ctx: &Context, commands: Vec<RegisterParams>, handler: F) -> Result<()>
where
    F: Fn(RunParams) -> Fut + 'static,
    Fut: Future<Output = Result<CommandResult>> + 'static,
{
    let name = format!("command:{}:{}", ctx.plugin_name(), ctx.fiber());
    let handler = Rc::new(handler);
    ctx.provide(name.clone(), move |req: Request| {
        let handler = handler.clone();
        async move {
            if req.method != command_service::RUN {
                return Err(req.unknown_method());
            }
            Reply::json(handler(req.params_as()?).await?)
        }
    });
    let client = Commands::new(ctx);
    for mut params in commands {
        params.service = name.clone();
        client.register(&params).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
