//! `execute`: one line typed to an agent. A line that is not a command, or
//! names none the agent sees, logs nothing and answers null. Otherwise a
//! fresh `commandId` is minted, `command/run` is appended to the agent's
//! session (a failure fails the execution: nothing ran), the handler runs,
//! and `command/done` records how it settled. A handler that fails (an
//! error reply, a panic, a plugin gone, a malformed result) settles as an
//! error with its message; the person sees it, the model never does.

use std::cell::Cell;

use dsh_sdk::api::commands::{
    event, parse, CommandDone, CommandResult, CommandRun, CommandSource, ExecuteParams,
    ExecuteReply, Execution, RunParams,
};
use dsh_sdk::api::sessions::{NewEvent, Sessions};
use dsh_sdk::names::command_service;
use dsh_sdk::prelude::*;
use serde::Serialize;

use crate::builtin;
use crate::registry::{Handler, Registry};

/// Mints command ids: `cmd-<token>-<n>`, the token fresh per generation so
/// that a resumed log never sees an id twice (the original's scheme).
pub struct Ids {
    token: String,
    next: Cell<u64>,
}

impl Ids {
    /// A minter with a fresh token.
    pub fn new() -> Ids {
        let token = uuid::Uuid::new_v4().simple().to_string();
        Ids {
            token: token.chars().take(8).collect(),
            next: Cell::new(1),
        }
    }

    /// The next id.
    fn mint(&self) -> String {
        let n = self.next.get();
        self.next.set(n + 1);
        format!("cmd-{}-{n}", self.token)
    }
}

/// Everything `execute` needs.
pub struct Executor {
    /// The plugin's context (sessions, handler services).
    pub ctx: Context,
    /// The registry.
    pub registry: Registry,
    /// The id minter.
    pub ids: Ids,
}

impl Executor {
    /// Runs `params.line` for `params.agent`.
    pub async fn execute(&self, params: ExecuteParams) -> Result<ExecuteReply> {
        let ExecuteParams { agent, line } = params;
        let Some(parsed) = parse(&line) else {
            return Ok(None);
        };
        let Some(command) = self.registry.borrow().visible(&agent, parsed.name).cloned() else {
            return Ok(None);
        };
        let command_id = self.ids.mint();
        let run = CommandRun {
            command_id: command_id.clone(),
            name: parsed.name.to_owned(),
            args: command.record_input.then(|| parsed.args.to_owned()),
            source: CommandSource::User,
        };
        self.append(&agent, event::COMMAND_RUN, &run).await?;
        let invocation = RunParams {
            command_id: command_id.clone(),
            agent: agent.clone(),
            name: parsed.name.to_owned(),
            args: parsed.args.to_owned(),
        };
        let result = self.settle(&command.handler, invocation).await;
        let done = CommandDone::of(&command_id, &result);
        self.append(&agent, event::COMMAND_DONE, &done).await?;
        Ok(Some(Execution { command_id, result }))
    }

    /// The handler's result, every failure turned into an error result.
    async fn settle(&self, handler: &Handler, invocation: RunParams) -> CommandResult {
        let name = invocation.name.clone();
        let answer = match handler {
            Handler::Builtin(b) => builtin::run(&self.ctx, &self.registry, *b, &invocation).await,
            Handler::Service(service) => {
                self.ctx
                    .service(service.as_str())
                    .call_as::<CommandResult>(command_service::RUN, &invocation)
                    .await
            }
        };
        match answer {
            Ok(result) => result.checked(&name).unwrap_or_else(CommandResult::error),
            Err(e) => CommandResult::error(failure_text(&name, &e)),
        }
    }

    /// Appends one lifecycle event to `agent`'s session.
    async fn append(&self, agent: &str, kind: &str, data: &impl Serialize) -> Result<()> {
        Sessions::new(&self.ctx)
            .append(agent, NewEvent::typed(kind, data)?)
            .await?;
        Ok(())
    }
}

/// What the person reads when command `name`'s handler failed with `e`.
fn failure_text(name: &str, e: &Error) -> String {
    if e.message.trim().is_empty() {
        format!("/{name} failed ({})", e.code)
    } else {
        e.message.clone()
    }
}
