//! Which delegation tools are offered: `subagent` while its provider
//! (`spawnProvider`) is registered with `subagents`, `subagent_fork` while
//! `forkProvider` is, as the original registers each only while its
//! provider exists. Checked at load and at every
//! `subagent/providers-changed`; one check at a time, so two never race
//! to register the same tool.

use std::collections::HashSet;
use std::rc::Rc;

use dsh_sdk::api::subagents::Subagents;
use dsh_sdk::api::tools::Tools;
use dsh_sdk::prelude::*;
use dsh_sdk::tool::ToolSpec;
use tokio::sync::Mutex;

use crate::spec::{Fork, Spawn};
use crate::State;

/// The delegation tools registered now.
pub type Offered = Rc<Mutex<HashSet<&'static str>>>;

impl State {
    /// Registers each delegation tool whose provider is there, and takes
    /// back each whose provider went.
    pub async fn sync_offer(&self) -> Result<()> {
        let mut offered = self.offered.lock().await;
        let providers = Subagents::new(&self.ctx).providers().await?;
        let present = |name: &str| providers.iter().any(|p| p.name == name);
        let tools = Tools::new(&self.ctx);
        for (tool, provider) in [
            (Spawn::NAME, &self.config.spawn_provider),
            (Fork::NAME, &self.config.fork_provider),
        ] {
            match (present(provider), offered.contains(tool)) {
                (true, false) => {
                    let d = match tool {
                        Spawn::NAME => self.spawn_declaration(),
                        _ => self.fork_declaration(),
                    };
                    tools.register(&d).await?;
                    offered.insert(tool);
                }
                (false, true) => {
                    tools.unregister(tool).await?;
                    offered.remove(tool);
                }
                (false, false) => dsh_sdk::tracing::debug!(
                    "subagent provider \"{provider}\" not registered yet; the \"{tool}\" tool will register when it appears"
                ),
                (true, true) => {}
            }
        }
        Ok(())
    }

    /// Registers `subagent` again after its definitions changed (while it
    /// is offered).
    pub async fn update_spawn(&self) -> Result<()> {
        let offered = self.offered.lock().await;
        if !offered.contains(Spawn::NAME) {
            return Ok(());
        }
        let mut d = self.spawn_declaration();
        d.replace = true;
        Tools::new(&self.ctx).register(&d).await
    }
}
