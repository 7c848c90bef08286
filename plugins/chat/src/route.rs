//! The route a chat session runs on: a new session starts on the model
//! choice every app shares (`agentDefaultModel`: the row's config, the
//! user's `settings.yaml`, this run's `--model`); a resumed one keeps the
//! route its log names, unless the run has a `--model`
//! (`dsh_sdk::api::agent_default_model`). Either is checked to be served
//! before the session goes on, and who chose it is kept
//! ([`Provenance`]) for the messages about it.

use dsh_sdk::api::agent_default_model::{
    ensure_served, resume_options, resume_route, AgentDefaultModel, CurrentSelection, Place,
    Provenance,
};
use dsh_sdk::api::agent_loop::AgentOptions;
use dsh_sdk::prelude::*;

use crate::Config;

/// The selection in force now, or why it cannot be read.
pub async fn current(ctx: &Context) -> Result<CurrentSelection> {
    AgentDefaultModel::new(ctx).current_selection().await
}

/// A new session's start: its options, who chose its route, and the line
/// to say when the user's settings override a patched row.
pub struct NewStart {
    /// The agent's options.
    pub options: AgentOptions,
    /// Who chose the route.
    pub chosen: Provenance,
    /// [`CurrentSelection::override_notice`].
    pub notice: Option<String>,
}

/// For a new session: the options, once a route serves the selection (and
/// offers its effort). `place` decides the advice of a refusal.
pub async fn for_new(ctx: &Context, config: &Config, place: Place) -> Result<NewStart> {
    let current = current(ctx).await?;
    let chosen = current.provenance(place);
    ensure_served(ctx, &chosen).await?;
    Ok(NewStart {
        options: current.selection.agent_options(config.max_tokens),
        chosen,
        notice: current.override_notice(),
    })
}

/// The options to resume a session with on `current` (without a route when
/// the settings cannot be read: the log's is selected after).
pub fn for_resume(current: &Result<CurrentSelection>, config: &Config) -> AgentOptions {
    resume_options(current, config.max_tokens)
}

/// After `agentLoop.resume` of `agent` on `current`: the log's route kept
/// (or `--model`'s), checked to be served; who chose it.
pub async fn after_resume(
    ctx: &Context,
    agent: &str,
    current: &Result<CurrentSelection>,
    place: Place,
) -> Result<Provenance> {
    resume_route(ctx, agent, current, place).await
}
