//! The commands this plugin ships: `/help`, `/model`, `/permission` and
//! `/status` (the front end's own — `/exit`, `/new`, `/sessions`,
//! `/resume`, `/fork` — are registered by the chat plugin through the
//! service, like any other plugin's). They sit in the registry like the
//! others, handled here rather than through a service.

use dsh_sdk::api::commands::Descriptor;
use dsh_sdk::api::commands::{CommandResult, InputDescriptor, RunParams};
use dsh_sdk::prelude::*;

use crate::registry::{Command, Handler, Registry};
use crate::{help, model, permission, status};

/// A shipped command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// `/help`: every command the agent sees.
    Help,
    /// `/model [<provider>] <model>`: shows or switches the agent's model.
    Model,
    /// `/permission [<preset>]`: shows or switches the permission preset.
    Permission,
    /// `/status`: tokens and cost of the session so far.
    Status,
}

impl Builtin {
    /// Every shipped command.
    pub const ALL: [Builtin; 4] = [
        Builtin::Help,
        Builtin::Model,
        Builtin::Permission,
        Builtin::Status,
    ];

    /// Its registry entry (global, owned by this plugin).
    pub fn command(self) -> Command {
        let (name, description, hint) = match self {
            Builtin::Help => ("help", "List the commands you can run here", None),
            Builtin::Model => (
                "model",
                "Show the model, or switch the agent to another one",
                Some("[<provider>] <model>"),
            ),
            Builtin::Permission => (
                "permission",
                "Show the permission preset, or switch to another one (sandbox mode + approval policy)",
                Some("[<preset>]"),
            ),
            Builtin::Status => (
                "status",
                "Tokens in and out, cache hits, cost and context in use of this session",
                None,
            ),
        };
        Command {
            descriptor: Descriptor {
                name: name.to_owned(),
                description: description.to_owned(),
                input: hint.map(|h: &str| InputDescriptor { hint: h.to_owned() }),
            },
            record_input: true,
            handler: Handler::Builtin(self),
            owner: None,
        }
    }
}

/// Runs shipped command `which` for `inv`.
pub async fn run(
    ctx: &Context,
    registry: &Registry,
    which: Builtin,
    inv: &RunParams,
) -> Result<CommandResult> {
    match which {
        Builtin::Help => Ok(help::run(&registry.borrow(), &inv.agent)),
        Builtin::Model => model::run(ctx, registry, inv).await,
        Builtin::Permission => permission::run(ctx, inv).await,
        Builtin::Status => status::run(ctx, inv).await,
    }
}
