//! `agent-default-model`: the model choice every app creates its agents
//! with (service `agentDefaultModel`, the original's
//! `packages/core/agent-default-model`). `currentSelection` layers the
//! row's config (the composition entry), the `agent-default-model` section
//! of `$DSH_HOME/settings.yaml` (read again at each call) and this run's
//! `dsh-host --model` (from `host.info`); `saveSelection` rewrites that
//! section alone. A row with `ignoreSettings = true` pins its choice (the
//! section is not read). Types and client:
//! `dsh_sdk::api::agent_default_model`.
//!
//! Modules: `choice` (the layers and `--model`), `document` (the YAML
//! document and its section), `section` (the section's text in the file),
//! `store` (reading, the writer lock, the atomic write).

mod choice;
mod document;
mod section;
mod store;

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

use dsh_sdk::api::agent_default_model::{
    CurrentSelection, ModelChoice, SaveSelectionParams, SavedSelection, SETTINGS_FILE,
    SETTINGS_SECTION,
};
use dsh_sdk::api::host::Host;
use dsh_sdk::names::{agent_default_model as method, service};
use dsh_sdk::prelude::*;

use choice::Entry;

/// What the service answers from.
struct State {
    /// The row's config.
    entry: Entry,
    /// `$DSH_HOME/settings.yaml`.
    path: PathBuf,
    /// This run's `--model`, until a `saveSelection` supersedes it.
    flag: RefCell<Option<ModelChoice>>,
    /// The unknown section keys last warned about (each set is said once).
    warned: RefCell<Vec<String>>,
}

impl State {
    /// `currentSelection`: the layers stacked, the document read now. The
    /// document is not read at all when nothing of it could count: a
    /// `--model` naming the route and the model, or a row pinned with
    /// `ignoreSettings` (so a broken file does not stop such a run).
    async fn current(&self) -> Result<CurrentSelection> {
        let flag = self.flag.borrow().clone();
        let unread = self.entry.ignore_settings || matches!(flag, Some(ModelChoice::Route { .. }));
        let section = if unread {
            None
        } else {
            let path = self.path.clone();
            let document = dsh_sdk::blocking::cancellable(move |_| store::load(&path)).await??;
            self.warn_unknown(&document.unknown_keys);
            document.section
        };
        let l = choice::layer(&self.entry, section.as_ref(), flag.as_ref());
        Ok(CurrentSelection {
            selection: l.selection,
            source: l.source,
            provider_source: l.provider_source,
            model_source: l.model_source,
            settings_file: self.path.display().to_string(),
            overridden: l.overridden,
        })
    }

    /// Says once which keys of the section this version ignores.
    fn warn_unknown(&self, keys: &[String]) {
        if keys.is_empty() || *self.warned.borrow() == keys {
            return;
        }
        *self.warned.borrow_mut() = keys.to_vec();
        dsh_sdk::tracing::warn!(
            "the `{SETTINGS_SECTION}` section of {} has keys this version does not know, \
             ignored: {}",
            self.path.display(),
            keys.join(", ")
        );
    }

    /// `saveSelection`: the section replaced on disk; this run's `--model`
    /// no longer overrides it.
    async fn save(&self, params: SaveSelectionParams) -> Result<SavedSelection> {
        let selection = &params.selection;
        let empty = |s: &str| s.trim().is_empty();
        if empty(&selection.provider)
            || empty(&selection.model)
            || selection.reasoning_effort.as_deref().is_some_and(empty)
        {
            return Err(Error::new(
                codes::INVALID_PAYLOAD,
                "saveSelection needs a non-empty `provider` and `model` (and `reasoningEffort`, when given)",
            ));
        }
        let (path, entry) = (self.path.clone(), self.entry.clone());
        dsh_sdk::blocking::cancellable(move |_| {
            store::save(&path, |document| {
                let mut chosen = params.selection;
                if params.keep_reasoning_effort && chosen.reasoning_effort.is_none() {
                    chosen.reasoning_effort =
                        choice::kept_effort(&entry, document.section.as_ref(), &chosen);
                }
                chosen
            })
        })
        .await??;
        self.flag.borrow_mut().take();
        Ok(SavedSelection {
            settings_file: self.path.display().to_string(),
        })
    }
}

async fn handle(state: Rc<State>, req: Request) -> Result<Reply> {
    match req.method.as_str() {
        method::CURRENT_SELECTION => Reply::json(state.current().await?),
        method::SAVE_SELECTION => Reply::json(state.save(req.params_as()?).await?),
        _ => Err(req.unknown_method()),
    }
}

struct AgentDefaultModel;

impl Plugin for AgentDefaultModel {
    const NAME: &'static str = "agent-default-model";
    const DESCRIPTION: &'static str =
        "the model choice every app starts on: row config, settings.yaml, --model";
    const PROVIDES: &'static [&'static str] = &[service::AGENT_DEFAULT_MODEL];
    type Config = Entry;

    async fn apply(ctx: Context, entry: Entry) -> Result<()> {
        if let Some(problem) = entry.problem() {
            return Err(Error::new(codes::INVALID_CONFIG, problem));
        }
        let info = Host::new(&ctx).info().await?;
        let flag = info
            .model
            .as_deref()
            .map(ModelChoice::parse)
            .transpose()
            .map_err(|e| Error::new(codes::INVALID_CONFIG, e))?;
        let state = Rc::new(State {
            entry,
            path: PathBuf::from(&info.home).join(SETTINGS_FILE),
            flag: RefCell::new(flag),
            warned: RefCell::new(Vec::new()),
        });
        ctx.provide(service::AGENT_DEFAULT_MODEL, move |req| {
            handle(state.clone(), req)
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(AgentDefaultModel);
