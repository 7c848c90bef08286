//! The route a chat session runs on: a new session starts on the model
//! choice every app shares (`agentDefaultModel`: the row's config, the
//! user's `settings.yaml`, this run's `--model`); a resumed one keeps the
//! route its log names, unless the run has a `--model`
//! (`dsh_sdk::api::agent_default_model`). Either is checked to be served
//! before the session goes on.

use dsh_sdk::api::agent_default_model::{
    ensure_served, resume_route, AgentDefaultModel, CurrentSelection, ModelSelection,
};
use dsh_sdk::api::agent_loop::AgentOptions;
use dsh_sdk::prelude::*;

use crate::Config;

/// The selection in force now and the options an agent gets from it.
pub async fn current(ctx: &Context, config: &Config) -> Result<(CurrentSelection, AgentOptions)> {
    let current = AgentDefaultModel::new(ctx).current_selection().await?;
    let options = current.selection.agent_options(config.max_tokens);
    Ok((current, options))
}

/// For a new session: the options, once a route serves the selection; and
/// the selection (for the banner).
pub async fn for_new(ctx: &Context, config: &Config) -> Result<(AgentOptions, ModelSelection)> {
    let (current, options) = current(ctx, config).await?;
    ensure_served(ctx, &current.selection, &current.origin()).await?;
    Ok((options, current.selection))
}

/// After `agentLoop.resume` of `agent` on `current`: the log's route kept
/// (or `--model`'s), checked to be served.
pub async fn after_resume(ctx: &Context, agent: &str, current: &CurrentSelection) -> Result<()> {
    resume_route(ctx, agent, current).await.map(drop)
}
