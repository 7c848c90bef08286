//! `/model [<provider>] <model>`: with no argument, the route the agent
//! uses (the one `/model` selected, else the session's last
//! `request/context`); with a model, switches to it on the current
//! provider (a session that has not reached a model yet: the default
//! selection's); with a provider and a model, to that route. The provider
//! must be registered with `llm`, and the model known to it
//! (`llm.resolveModelInfo`: a model the route's catalog does not list and
//! whose window nothing states, `contextSource` `default`, is refused, so
//! a typo is neither switched to nor saved); the switch is
//! `agents.selectModel`, in force from the agent's next step, and is saved
//! as the default of later sessions (`agentDefaultModel.saveSelection`,
//! `$DSH_HOME/settings.yaml`) as the original's model picker saves it,
//! keeping a saved `reasoningEffort` when the route stays the same.
//! Without an `agent-default-model` row the switch is the live agent's
//! alone.

use dsh_sdk::api::agent_default_model::{AgentDefaultModel, ModelSelection, SaveSelectionParams};
use dsh_sdk::api::agents::{Agents, SelectModelParams};
use dsh_sdk::api::commands::{CommandResult, RunParams};
use dsh_sdk::api::llm::{ContextSource, Llm};
use dsh_sdk::api::sessions::Sessions;
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::records::RequestContext;
use serde::Deserialize;

use crate::registry::Registry;

/// The usage line.
const USAGE: &str = "usage: /model [<provider>] <model>";

/// Runs `/model` for `inv`.
pub async fn run(ctx: &Context, registry: &Registry, inv: &RunParams) -> Result<CommandResult> {
    let words: Vec<&str> = inv.args.split_whitespace().collect();
    let current = current(ctx, registry, &inv.agent).await?;
    let (provider, model) = match (words.as_slice(), &current) {
        ([], Some((p, m))) => return Ok(CommandResult::success(format!("model {p}/{m}"))),
        ([], None) => {
            return Ok(CommandResult::success(
                "no model has answered in this session yet",
            ))
        }
        ([model], Some((p, _))) => (p.clone(), (*model).to_owned()),
        ([model], None) => match default_provider(ctx).await? {
            Some(p) => (p, (*model).to_owned()),
            None => {
                return Ok(CommandResult::error(format!(
                    "no provider is known for this session yet; {USAGE}"
                )))
            }
        },
        ([provider, model], _) => ((*provider).to_owned(), (*model).to_owned()),
        _ => return Ok(CommandResult::error(USAGE)),
    };
    let llm = Llm::new(ctx);
    let providers = llm.providers().await?;
    if !providers.contains(&provider) {
        return Ok(CommandResult::error(format!(
            "unknown provider \"{provider}\" (available: {})",
            providers.join(", ")
        )));
    }
    if let Some(why) = unknown_model(&llm, &provider, &model).await {
        return Ok(CommandResult::error(why));
    }
    Agents::new(ctx)
        .select_model(&SelectModelParams {
            agent: inv.agent.clone(),
            provider: Some(provider.clone()),
            model: Some(model.clone()),
        })
        .await?;
    let switched = format!("model {provider}/{model} from the next step");
    registry
        .borrow_mut()
        .selections
        .insert(inv.agent.clone(), (provider.clone(), model.clone()));
    let params = SaveSelectionParams {
        selection: ModelSelection::new(provider, model),
        keep_reasoning_effort: true,
    };
    Ok(match AgentDefaultModel::new(ctx).save(&params).await {
        Ok(saved) => CommandResult::success(format!(
            "{switched}; saved as the default of new sessions ({})",
            saved.settings_file
        )),
        // No `agent-default-model` row: the live agent's choice alone.
        Err(e) if e.code == codes::SERVICE_UNAVAILABLE => CommandResult::success(switched),
        Err(e) => CommandResult::error(format!(
            "{switched}, but it was not saved as the default: {}: {}",
            e.code, e.message
        )),
    })
}

/// Why `model` is not one route `provider` knows, if it is not: the
/// route's catalog does not list it and nothing states its window (the
/// adapter answers `contextSource` `default`), or the route cannot say
/// (its metadata lookup fails). Nothing is switched or saved then.
async fn unknown_model(llm: &Llm, provider: &str, model: &str) -> Option<String> {
    match llm.resolve_model_info(provider, model).await {
        Ok(info) if info.context_source == Some(ContextSource::Default) => Some(format!(
            "the route \"{provider}\" does not know the model \"{model}\": its catalog does not \
             list it and its server states no window for it. Nothing was switched or saved. \
             Check the id; a model the server does serve goes in the route's `models` (with \
             its contextWindow)"
        )),
        Ok(_) => None,
        Err(e) => Some(format!(
            "the route \"{provider}\" cannot say whether it serves the model \"{model}\" ({}: {}); \
             nothing was switched or saved",
            e.code, e.message
        )),
    }
}

/// The provider of the default selection (what a session that has not
/// reached a model yet was created on), when there is one.
async fn default_provider(ctx: &Context) -> Result<Option<String>> {
    match AgentDefaultModel::new(ctx).current_selection().await {
        Ok(current) => Ok(Some(current.selection.provider)),
        Err(e) if e.code == codes::SERVICE_UNAVAILABLE => Ok(None),
        Err(e) => Err(e),
    }
}

/// The route `agent` uses: the one `/model` selected, else the one of the
/// session's last `request/context`.
async fn current(
    ctx: &Context,
    registry: &Registry,
    agent: &str,
) -> Result<Option<(String, String)>> {
    if let Some(selected) = registry.borrow().selections.get(agent) {
        return Ok(Some(selected.clone()));
    }
    let Some(context) = Sessions::new(ctx).request_context(agent).await? else {
        return Ok(None);
    };
    let route = RequestContext::deserialize(&context).map_err(|e| {
        Error::new(
            dsh_sdk::names::code::SESSION_CORRUPT,
            format!("the session's request/context of {agent} is malformed: {e}"),
        )
    })?;
    Ok(Some((route.provider, route.model)))
}
