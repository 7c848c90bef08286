//! The `agentDefaultModel` service (plugin `agent-default-model`, the
//! original's `packages/core/agent-default-model`): the one model choice
//! every front end creates its agents with. Headless, the chat and any
//! later front end ask [`AgentDefaultModel::current_selection`] when they
//! create an agent instead of keeping a provider and a model of their own;
//! the chat's `/model` saves the user's pick with
//! [`AgentDefaultModel::save_selection`], so the next session starts on it.
//!
//! What `currentSelection` answers is layered, each layer over the one
//! before, field by field:
//!
//! 1. the plugin's row config `{provider, model}` (the composition entry;
//!    `profiles/bundles/base.toml` ships `deepseek-official` /
//!    `deepseek-v4-flash`, a `[[patch]] id = "agent-default-model"`
//!    changes it);
//! 2. the section `agent-default-model` of `$DSH_HOME/settings.yaml`
//!    (`provider`, `model`, `reasoningEffort`), read again at every call;
//! 3. `dsh-host --model provider/model` (or `--model model`, on the route
//!    of the layers below) for this run only: never saved. A
//!    `saveSelection` during such a run ends the override (the user's newer
//!    choice wins for the rest of the run too).
//!
//! A row config with `ignoreSettings = true` (the demo profile's) skips
//! layer 2. When layer 2 overrides a row config that a patch or profile
//! changed from the shipped default, the answer says so
//! ([`CurrentSelection::overridden`]) and every front end says
//! [`CurrentSelection::override_notice`] once.
//!
//! Also here: the policy every front end follows for a session it resumes
//! ([`keep_logged_route`]: the route its log names stays, unless the run
//! has a `--model`), the check that a route is served (and offers the
//! effort chosen) before a session starts on it ([`ensure_served`]), the
//! two together after a resume ([`resume_route`]), and who chose a route,
//! for the messages that name it ([`Provenance`]).

mod provenance;

use serde::{Deserialize, Serialize};

pub use dsh_wire::ModelChoice;
pub use provenance::{follows_from_route, Place, Provenance};

use crate::api::agent_loop::{AgentOptions, MaxTokens};
use crate::api::agents::{Agents, SelectModelParams};
use crate::api::host::Host;
use crate::api::llm::Llm;
use crate::api::sessions::Sessions;
use crate::names::{agent_default_model as method, code, service};
use crate::vocab::records::{CallConfig, RequestContext};
use crate::vocab::Extra;
use crate::{codes, Context, Error, Result, Service};

/// The settings section (namespace) the selection is stored under.
pub const SETTINGS_SECTION: &str = "agent-default-model";

/// The settings document under `$DSH_HOME`.
pub const SETTINGS_FILE: &str = "settings.yaml";

/// A model selection: a provider route and a model of it (the original's
/// `ModelSelection`). Params of `saveSelection`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelSelection {
    /// The provider route (an adapter's, as `llm.providers` lists it).
    pub provider: String,
    /// The model id on that route.
    pub model: String,
    /// The adapter's reasoning effort (`reasoningEffort` in the settings
    /// section); none: the route's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
}

impl ModelSelection {
    /// `provider` / `model`, no reasoning effort.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> ModelSelection {
        ModelSelection {
            provider: provider.into(),
            model: model.into(),
            reasoning_effort: None,
        }
    }

    /// The options an agent created on this selection gets: its route, its
    /// reasoning effort, and the front end's `max_tokens`.
    pub fn agent_options(&self, max_tokens: Option<u64>) -> AgentOptions {
        AgentOptions {
            provider: Some(self.provider.clone()),
            model: Some(self.model.clone()),
            max_tokens: max_tokens.map(MaxTokens::from),
            reasoning_effort: self.reasoning_effort.clone(),
        }
    }

    /// The same provider and model (the effort aside).
    pub fn same_route(&self, other: &ModelSelection) -> bool {
        self.provider == other.provider && self.model == other.model
    }

    /// `provider/model`, as `--model` takes it and `/model` shows it.
    pub fn route(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }
}

/// Which layer the answer of `currentSelection` (or one of its fields)
/// comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SelectionSource {
    /// The plugin's row config.
    #[default]
    Config,
    /// The `agent-default-model` section of the settings document.
    Settings,
    /// This run's `dsh-host --model`.
    Flag,
}

/// Reply of `currentSelection`: the selection, where it comes from, and
/// the settings document consulted (a dsh extension: the original answers
/// the selection alone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CurrentSelection {
    /// The selection.
    #[serde(flatten)]
    pub selection: ModelSelection,
    /// Its topmost layer.
    pub source: SelectionSource,
    /// The layer that chose `provider` (`--model qwen3` keeps the route of
    /// the layers below).
    #[serde(default)]
    pub provider_source: SelectionSource,
    /// The layer that chose `model`.
    #[serde(default)]
    pub model_source: SelectionSource,
    /// The settings document (`$DSH_HOME/settings.yaml`), whether or not it
    /// exists.
    pub settings_file: String,
    /// The row config's choice that the settings section overrides, when a
    /// patch or a profile changed the row from the shipped default (and no
    /// `--model` route is on top): the user saved a `/model` once, and a
    /// recipe's patch now changes nothing. Said once by every front end
    /// ([`CurrentSelection::override_notice`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overridden: Option<ModelSelection>,
}

/// Params of `saveSelection`: the selection, and whether a saved
/// `reasoningEffort` stays when the route stays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SaveSelectionParams {
    /// The selection; its `reasoningEffort`, when set, is saved.
    #[serde(flatten)]
    pub selection: ModelSelection,
    /// Without an effort in `selection`: keep the effort the section holds
    /// when its provider and model are those of `selection` (a dsh
    /// extension; `/model` sets it, so picking the same route again does
    /// not erase the effort). Otherwise the whole section is replaced.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_reasoning_effort: bool,
}

/// Reply of `saveSelection`: the document written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SavedSelection {
    /// `$DSH_HOME/settings.yaml`.
    pub settings_file: String,
}

/// The params of a method that takes none: `{}`.
#[derive(Serialize)]
struct NoParams {}

/// A typed client of the `agentDefaultModel` service.
#[derive(Clone)]
pub struct AgentDefaultModel(Service);

impl AgentDefaultModel {
    /// The `agentDefaultModel` service of `ctx`.
    pub fn new(ctx: &Context) -> AgentDefaultModel {
        AgentDefaultModel(ctx.service(service::AGENT_DEFAULT_MODEL))
    }

    /// `currentSelection`: the selection a new agent starts on, read now
    /// (the settings document is read at every call). Fails
    /// `INVALID_SETTINGS` when the document cannot be read, naming the file
    /// and the line.
    pub async fn current_selection(&self) -> Result<CurrentSelection> {
        self.0.call_as(method::CURRENT_SELECTION, NoParams {}).await
    }

    /// `saveSelection`: makes `selection` the default of later sessions
    /// (the whole `agent-default-model` section of the settings document is
    /// replaced; every other section and comment is kept byte for byte).
    /// A document that cannot be read is never overwritten: the call fails
    /// `INVALID_SETTINGS` naming the file and the line; one that cannot be
    /// written (a read-only directory, a lock that cannot be made) fails
    /// `SETTINGS_UNWRITABLE` naming the directory.
    pub async fn save_selection(&self, selection: &ModelSelection) -> Result<SavedSelection> {
        self.0.call_as(method::SAVE_SELECTION, selection).await
    }

    /// [`AgentDefaultModel::save_selection`] with the params whole (see
    /// [`SaveSelectionParams::keep_reasoning_effort`]).
    pub async fn save(&self, params: &SaveSelectionParams) -> Result<SavedSelection> {
        self.0.call_as(method::SAVE_SELECTION, params).await
    }
}

/// The message of a front end whose row config still names a route: the
/// model choice moved to the `agent-default-model` row (and `--model`).
pub fn route_moved(app: &str) -> Error {
    Error::new(
        codes::INVALID_CONFIG,
        format!(
            "the `{app}` row no longer takes `provider` or `model`: every app now starts on one \
             model choice. Patch it instead: [[patch]] id = \"{SETTINGS_SECTION}\" \
             config = {{ provider = \"<route>\", model = \"<model>\" }}, or pass \
             --model <route>/<model> for one run (`/model` in the chat saves it)"
        ),
    )
}

/// After `agentLoop.resume` of `agent` on `current` (the selection read for
/// it, or why it could not be read): the route the session goes on with.
/// A session whose log names a route (its latest `request/context`) keeps
/// it, as the original's front ends do, unless this run has a `--model`
/// ([`SelectionSource::Flag`]), which the user asked for explicitly;
/// a session that never reached a model starts on `current`. A settings
/// file that cannot be read does not stop a session whose log names its
/// route (the caller says the error as a warning); without a logged route
/// it is the error. Answers the route in force and whether it is the
/// log's.
pub async fn keep_logged_route(
    ctx: &Context,
    agent: &str,
    current: &Result<CurrentSelection>,
) -> Result<(ModelSelection, bool)> {
    if let Ok(c) = current {
        if c.source == SelectionSource::Flag {
            return Ok((c.selection.clone(), false));
        }
    }
    let logged = match Sessions::new(ctx).request_context(agent).await? {
        Some(context) => {
            let logged = RequestContext::deserialize(&context).map_err(|e| {
                Error::new(
                    code::SESSION_CORRUPT,
                    format!("the latest request/context of session \"{agent}\" is malformed: {e}"),
                )
            })?;
            (!logged.provider.is_empty() && !logged.model.is_empty())
                .then(|| ModelSelection::new(logged.provider, logged.model))
        }
        None => None,
    };
    let Some(mut route) = logged else {
        return current.clone().map(|c| (c.selection, false));
    };
    match current {
        // The agent was made on this route: its effort goes on with it.
        Ok(c) if c.selection.same_route(&route) => {
            route.reasoning_effort = c.selection.reasoning_effort.clone();
        }
        _ => {
            let params = SelectModelParams {
                agent: agent.to_owned(),
                provider: Some(route.provider.clone()),
                model: Some(route.model.clone()),
            };
            Agents::new(ctx).select_model(&params).await?;
        }
    }
    Ok((route, true))
}

/// [`keep_logged_route`], then [`ensure_served`] on the route in force:
/// what a front end does after `agentLoop.resume` of `agent` on `current`.
/// Answers who chose the route in force, for the messages about it.
pub async fn resume_route(
    ctx: &Context,
    agent: &str,
    current: &Result<CurrentSelection>,
    place: Place,
) -> Result<Provenance> {
    let (route, logged) = keep_logged_route(ctx, agent, current).await?;
    let provenance = match current {
        Ok(c) if !logged => c.provenance(place),
        Ok(c) => Provenance {
            // The agent was made on the logged route: its effort came with it.
            effort_chosen: c
                .provenance(place)
                .effort_chosen
                .filter(|_| route.reasoning_effort.is_some()),
            ..Provenance::logged(route, agent)
        },
        Err(_) => Provenance::logged(route, agent),
    };
    ensure_served(ctx, &provenance).await?;
    Ok(provenance)
}

/// The options an agent is resumed with when the selection could not be
/// read: no route (the log's is selected after the resume, see
/// [`keep_logged_route`]), the front end's `max_tokens`.
pub fn resume_options(current: &Result<CurrentSelection>, max_tokens: Option<u64>) -> AgentOptions {
    match current {
        Ok(c) => c.selection.agent_options(max_tokens),
        Err(_) => AgentOptions {
            max_tokens: max_tokens.map(MaxTokens::from),
            ..AgentOptions::default()
        },
    }
}

/// Checks, before a session starts on `chosen.route`, that an adapter
/// serves its provider and, when the route names a reasoning effort, that
/// the model offers it (`llm.resolveCallConfig`). `NO_ADAPTER` lists the
/// routes that are served; both errors say who chose the route and how to
/// change that ([`Provenance`]). Without an `llm` service there is nothing
/// to check against.
///
/// A route row may still be applying when a front end starts (rows of a
/// patch come after the app's row): a route missing at the first look is
/// looked up again once the composition has settled (`host.plugins`
/// answers after the supervisor's current work). So this must not be
/// awaited in a plugin's `apply`, only in work it spawned.
pub async fn ensure_served(ctx: &Context, chosen: &Provenance) -> Result<()> {
    let route = &chosen.route;
    let llm = Llm::new(ctx);
    let providers = match llm.providers().await {
        Ok(p) => p,
        Err(e) if e.code == codes::SERVICE_UNAVAILABLE => return Ok(()),
        Err(e) => return Err(e),
    };
    if !providers.contains(&route.provider) {
        Host::new(ctx).plugins().await?;
        let providers = llm.providers().await?;
        if !providers.contains(&route.provider) {
            let served = if providers.is_empty() {
                "none".to_owned()
            } else {
                providers.join(", ")
            };
            return Err(Error::new(
                code::NO_ADAPTER,
                format!(
                    "no adapter serves the route \"{}\" ({}, {}); the routes served are: \
                     {served}; {}, or add a route row for it (README.md, \"A local \
                     OpenAI-compatible server\")",
                    route.provider,
                    route.route(),
                    chosen.chosen,
                    chosen.advice
                ),
            ));
        }
    }
    let Some(effort) = &route.reasoning_effort else {
        return Ok(());
    };
    let call = CallConfig {
        provider: route.provider.clone(),
        model: route.model.clone(),
        reasoning_effort: Some(effort.clone()),
        temperature: None,
        max_tokens: None,
        stop: None,
        extra: Extra::new(),
    };
    match llm.resolve_call_config(&call).await {
        Err(e) if e.code == code::UNSUPPORTED_REASONING_EFFORT => {
            let origin = chosen
                .effort_chosen
                .as_deref()
                .unwrap_or("the agent's options");
            Err(Error::new(
                e.code,
                format!(
                    "{}. The effort comes from `reasoningEffort` in {origin}: change or remove \
                     it there",
                    e.message
                ),
            ))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_is_the_originals_with_the_source_beside_it() {
        let current = CurrentSelection {
            selection: ModelSelection {
                provider: "local".into(),
                model: "qwen3".into(),
                reasoning_effort: Some("high".into()),
            },
            source: SelectionSource::Settings,
            provider_source: SelectionSource::Settings,
            model_source: SelectionSource::Config,
            settings_file: "/h/settings.yaml".into(),
            overridden: None,
        };
        let text = serde_json::to_string(&current).unwrap();
        assert_eq!(
            text,
            r#"{"provider":"local","model":"qwen3","reasoningEffort":"high","source":"settings","providerSource":"settings","modelSource":"config","settingsFile":"/h/settings.yaml"}"#
        );
        assert_eq!(
            serde_json::from_str::<CurrentSelection>(&text).unwrap(),
            current
        );
        let bare = serde_json::to_string(&ModelSelection::new("p", "m")).unwrap();
        assert_eq!(bare, r#"{"provider":"p","model":"m"}"#);
    }

    #[test]
    fn save_params_keep_the_effort_only_when_asked() {
        let params = SaveSelectionParams {
            selection: ModelSelection::new("p", "m"),
            keep_reasoning_effort: true,
        };
        assert_eq!(
            serde_json::to_string(&params).unwrap(),
            r#"{"provider":"p","model":"m","keepReasoningEffort":true}"#
        );
        let plain: SaveSelectionParams =
            serde_json::from_str(r#"{"provider":"p","model":"m","reasoningEffort":"high"}"#)
                .unwrap();
        assert!(!plain.keep_reasoning_effort);
        assert_eq!(plain.selection.reasoning_effort.as_deref(), Some("high"));
        let mut with = ModelSelection::new("p", "m");
        with.reasoning_effort = Some("max".into());
        assert_eq!(
            with.agent_options(Some(5)).reasoning_effort.as_deref(),
            Some("max")
        );
    }
}
