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
//! Also here: the policy every front end follows for a session it resumes
//! ([`keep_logged_route`]: the route its log names stays, unless the run
//! has a `--model`), the check that a route is served before a session
//! starts on it ([`ensure_served`]), and the two together after a resume
//! ([`resume_route`]).

use serde::{Deserialize, Serialize};

use crate::api::agent_loop::{AgentOptions, MaxTokens};
use crate::api::agents::{Agents, SelectModelParams};
use crate::api::host::Host;
use crate::api::llm::Llm;
use crate::api::sessions::Sessions;
use crate::names::{agent_default_model as method, code, service};
use crate::vocab::records::RequestContext;
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

    /// The options an agent created on this selection gets (the agent loop
    /// takes no reasoning effort of an agent yet).
    pub fn agent_options(&self, max_tokens: Option<u64>) -> AgentOptions {
        AgentOptions {
            provider: Some(self.provider.clone()),
            model: Some(self.model.clone()),
            max_tokens: max_tokens.map(MaxTokens::from),
        }
    }

    /// `provider/model`, as `--model` takes it and `/model` shows it.
    pub fn route(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }
}

/// Which layer the answer of `currentSelection` comes from (its topmost
/// layer that set a field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SelectionSource {
    /// The plugin's row config alone.
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
    /// The settings document (`$DSH_HOME/settings.yaml`), whether or not it
    /// exists.
    pub settings_file: String,
}

impl CurrentSelection {
    /// Where the selection was made, in words, for a message that tells the
    /// user what to change.
    pub fn origin(&self) -> String {
        match self.source {
            SelectionSource::Flag => "--model".to_owned(),
            SelectionSource::Settings => {
                format!("the `{SETTINGS_SECTION}` section of {}", self.settings_file)
            }
            SelectionSource::Config => format!("the `{SETTINGS_SECTION}` row's config"),
        }
    }
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
    /// `INVALID_SETTINGS` naming the file and the line.
    pub async fn save_selection(&self, selection: &ModelSelection) -> Result<SavedSelection> {
        self.0.call_as(method::SAVE_SELECTION, selection).await
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

/// After `agentLoop.resume` of `agent` on `current`: the route the session
/// goes on with. A session whose log names a route (its latest
/// `request/context`) keeps it, as the original's front ends do, unless this
/// run has a `--model` ([`SelectionSource::Flag`]), which the user asked
/// for explicitly; a session that never reached a model starts on
/// `current`. Answers the route in force and whether it is the log's.
pub async fn keep_logged_route(
    ctx: &Context,
    agent: &str,
    current: &CurrentSelection,
) -> Result<(ModelSelection, bool)> {
    if current.source == SelectionSource::Flag {
        return Ok((current.selection.clone(), false));
    }
    let Some(context) = Sessions::new(ctx).request_context(agent).await? else {
        return Ok((current.selection.clone(), false));
    };
    let logged = RequestContext::deserialize(&context).map_err(|e| {
        Error::new(
            code::SESSION_CORRUPT,
            format!("the latest request/context of session \"{agent}\" is malformed: {e}"),
        )
    })?;
    if logged.provider.is_empty() || logged.model.is_empty() {
        return Ok((current.selection.clone(), false));
    }
    let route = ModelSelection::new(logged.provider, logged.model);
    if route.provider != current.selection.provider || route.model != current.selection.model {
        let params = SelectModelParams {
            agent: agent.to_owned(),
            provider: Some(route.provider.clone()),
            model: Some(route.model.clone()),
        };
        Agents::new(ctx).select_model(&params).await?;
    }
    Ok((route, true))
}

/// [`keep_logged_route`], then [`ensure_served`] on the route in force:
/// what a front end does after `agentLoop.resume` of `agent` on `current`.
pub async fn resume_route(
    ctx: &Context,
    agent: &str,
    current: &CurrentSelection,
) -> Result<ModelSelection> {
    let (route, logged) = keep_logged_route(ctx, agent, current).await?;
    let origin = if logged {
        format!("the log of session \"{agent}\"")
    } else {
        current.origin()
    };
    ensure_served(ctx, &route, &origin).await?;
    Ok(route)
}

/// Checks that an adapter serves `route.provider` before a session starts
/// on it; `origin` says where the route was chosen (for the message). The
/// error (`NO_ADAPTER`) lists the routes that are served and says what to
/// change. Without an `llm` service there is nothing to check against.
///
/// A route row may still be applying when a front end starts (rows of a
/// patch come after the app's row): a route missing at the first look is
/// looked up again once the composition has settled (`host.plugins`
/// answers after the supervisor's current work). So this must not be
/// awaited in a plugin's `apply`, only in work it spawned.
pub async fn ensure_served(ctx: &Context, route: &ModelSelection, origin: &str) -> Result<()> {
    let llm = Llm::new(ctx);
    let providers = match llm.providers().await {
        Ok(p) => p,
        Err(e) if e.code == codes::SERVICE_UNAVAILABLE => return Ok(()),
        Err(e) => return Err(e),
    };
    if providers.contains(&route.provider) {
        return Ok(());
    }
    Host::new(ctx).plugins().await?;
    let providers = llm.providers().await?;
    if providers.contains(&route.provider) {
        return Ok(());
    }
    let served = if providers.is_empty() {
        "none".to_owned()
    } else {
        providers.join(", ")
    };
    Err(Error::new(
        code::NO_ADAPTER,
        format!(
            "no adapter serves the route \"{}\" that {origin} chose ({}); the routes served \
             are: {served}. Pick one (--model <route>/<model>) or add a route row for it \
             (README.md, \"A local OpenAI-compatible server\")",
            route.provider,
            route.route()
        ),
    ))
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
            settings_file: "/h/settings.yaml".into(),
        };
        let text = serde_json::to_string(&current).unwrap();
        assert_eq!(
            text,
            r#"{"provider":"local","model":"qwen3","reasoningEffort":"high","source":"settings","settingsFile":"/h/settings.yaml"}"#
        );
        assert_eq!(
            serde_json::from_str::<CurrentSelection>(&text).unwrap(),
            current
        );
        let bare = serde_json::to_string(&ModelSelection::new("p", "m")).unwrap();
        assert_eq!(bare, r#"{"provider":"p","model":"m"}"#);
    }

    #[test]
    fn the_origin_names_what_to_change() {
        let mut current = CurrentSelection {
            selection: ModelSelection::new("local", "qwen3"),
            source: SelectionSource::Flag,
            settings_file: "/h/settings.yaml".into(),
        };
        assert_eq!(current.origin(), "--model");
        current.source = SelectionSource::Settings;
        assert!(current.origin().contains("/h/settings.yaml"));
        current.source = SelectionSource::Config;
        assert!(current.origin().contains("row's config"));
    }
}
