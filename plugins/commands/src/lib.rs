//! `commands`: the human-command registry (the original's
//! `packages/interaction/commands`). Plugins register slash commands with
//! `register` ([`RegisterParams`]: a name, a description, an optional input
//! hint, and the service whose `run` handles each execution; a `scope` — an
//! agent id — makes the command that agent's alone, shadowing a global one).
//! A registration belongs to the calling fiber and is removed when that
//! fiber goes away; every change emits `commands/change`. Front ends `list`
//! what an agent sees and `execute` a typed line (module `execute`: the
//! lifecycle logged as `command/run` / `command/done` on the agent's
//! session). The plugin ships `/help`, `/model`, `/permission` and
//! `/status` (module `builtin`).
//!
//! Modules: `registry` (the state), `execute`, `builtin` and one per
//! shipped command (`help`, `model`, `permission`, `status`), `prices`
//! (the price table `/status` uses), `context_source` (where the window
//! `/status` shows came from).

mod builtin;
mod context_source;
mod execute;
mod help;
mod model;
mod permission;
mod prices;
mod registry;
mod status;

use std::rc::Rc;

use dsh_sdk::api::commands::{CommandsChanged, ListParams, RegisterParams};
use dsh_sdk::names::{bus, commands, service};
use dsh_sdk::prelude::*;
use dsh_sdk::Value;

use builtin::Builtin;
use execute::{Executor, Ids};
use registry::{Command, Registry};

/// Tells listeners that the commands some agent sees changed.
fn changed(ctx: &Context) -> Result<()> {
    ctx.emit(bus::COMMANDS_CHANGE, CommandsChanged {})
}

/// `register`: adds a command owned by the calling fiber.
fn register(ctx: &Context, registry: &Registry, req: &Request) -> Result<Reply> {
    let params: RegisterParams = req.params_as()?;
    let scope = params.scope.clone().unwrap_or_default();
    let owner = req.caller;
    let command = Command::from_registration(params, owner)?;
    registry.borrow_mut().insert(scope, command)?;
    let (r2, ctx2) = (registry.clone(), ctx.clone());
    req.on_caller_gone(move || {
        if r2.borrow_mut().remove_owned_by(owner) {
            let _ = changed(&ctx2);
        }
    });
    changed(ctx)?;
    Ok(Value::Null.into())
}

/// `list`: what the agent sees, sorted by name.
fn list(registry: &Registry, req: &Request) -> Result<Reply> {
    let ListParams { agent } = req.params_as()?;
    Reply::json(registry.borrow().list(&agent))
}

async fn handle(executor: Rc<Executor>, req: Request) -> Result<Reply> {
    match req.method.as_str() {
        commands::REGISTER => register(&executor.ctx, &executor.registry, &req),
        commands::LIST => list(&executor.registry, &req),
        commands::EXECUTE => Reply::json(executor.execute(req.params_as()?).await?),
        _ => Err(req.unknown_method()),
    }
}

struct Commands;

impl Plugin for Commands {
    const NAME: &'static str = "commands";
    const DESCRIPTION: &'static str =
        "human-command registry (service `commands`) with /help, /model, /permission, /status";
    const PROVIDES: &'static [&'static str] = &[service::COMMANDS];
    const INJECT: &'static [&'static str] = &[service::SESSIONS];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        let registry: Registry = Rc::default();
        for b in Builtin::ALL {
            registry.borrow_mut().insert(String::new(), b.command())?;
        }
        let executor = Rc::new(Executor {
            ctx: ctx.clone(),
            registry,
            ids: Ids::new(),
        });
        ctx.provide(service::COMMANDS, move |req| handle(executor.clone(), req));
        Ok(())
    }
}

dsh_sdk::export_plugin!(Commands);
