//! `/permission [<preset>]`: with no argument, the preset in force for the
//! agent and the ones there are; with one, switches the agent to it
//! (service `permission`, plugin `permission`). The texts are the
//! original's.

use dsh_sdk::api::commands::{CommandResult, RunParams};
use dsh_sdk::api::permission::{Permission, PresetReply};
use dsh_sdk::prelude::*;

/// Runs `/permission` for `inv`.
pub async fn run(ctx: &Context, inv: &RunParams) -> Result<CommandResult> {
    let permission = Permission::new(ctx);
    let name = inv.args.trim();
    if name.is_empty() {
        let now = permission.preset(&inv.agent).await?;
        return Ok(CommandResult::success(format!(
            "current preset {} (available: {})",
            current(&now),
            now.presets.join(", ")
        )));
    }
    let now = permission.set_preset(&inv.agent, name).await?;
    Ok(CommandResult::success(format!("preset {}", current(&now))))
}

/// The preset's name, or the mode and policy when they match none.
fn current(reply: &PresetReply) -> String {
    reply.preset.clone().unwrap_or_else(|| {
        format!(
            "(none: mode {}, approval {})",
            reply.mode,
            reply.approval.as_str()
        )
    })
}
