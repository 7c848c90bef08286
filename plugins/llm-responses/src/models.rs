//! The route's model catalog (`resolveModel`): names, context windows,
//! default output caps and reasoning efforts. OpenAI's current models by
//! default, with the figures OpenAI publishes (defaults: the config's
//! `models` replace the list for another server or a newer model).

use dsh_sdk::api::llm::{
    ModelContext, ModelInfo, ModelInfoParams, ModelReasoningInfo, ReasoningEffortInfo,
};
use dsh_sdk::Result;
use serde::Deserialize;

/// The context window of a model the catalog does not list, unless the
/// config says otherwise: the smallest window of OpenAI's current models,
/// so pressure compaction starts early rather than never on a server whose
/// window is unknown.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// The output cap a request without one gets, unless the model or the
/// config says otherwise.
pub const DEFAULT_MAX_TOKENS: u64 = 32_768;

/// The efforts of a reasoning model the catalog does not describe (every
/// reasoning model of the Responses API takes these three).
pub const DEFAULT_EFFORTS: [&str; 3] = ["low", "medium", "high"];

/// The efforts GPT-5 takes (it adds `minimal`).
const GPT5_EFFORTS: [&str; 4] = ["minimal", "low", "medium", "high"];

/// One catalog entry (config `models[]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Model {
    /// The exact id sent to the endpoint.
    pub id: String,
    /// A display name (the id when absent).
    pub name: Option<String>,
    /// What it is.
    pub description: Option<String>,
    /// The most tokens it reads (the default window when absent).
    pub context_window: Option<u64>,
    /// Its default output cap.
    pub max_tokens: Option<u64>,
    /// The reasoning efforts it takes, in order; `[]` for a model that
    /// does not reason (no `reasoning` is sent to it). Absent: the
    /// config's `reasoning` decides, with [`DEFAULT_EFFORTS`].
    pub reasoning_efforts: Option<Vec<String>>,
}

/// One built-in entry: id, name, window, output cap, efforts.
type Builtin = (
    &'static str,
    &'static str,
    u64,
    u64,
    &'static [&'static str],
);

/// OpenAI's models, used when the config lists none. The windows are the
/// input OpenAI admits: GPT-5's 400,000-token context holds at most
/// 128,000 tokens of output, so 272,000 of input.
const OPENAI: [Builtin; 9] = [
    ("gpt-5", "GPT-5", 272_000, 128_000, &GPT5_EFFORTS),
    ("gpt-5-mini", "GPT-5 mini", 272_000, 128_000, &GPT5_EFFORTS),
    ("gpt-5-nano", "GPT-5 nano", 272_000, 128_000, &GPT5_EFFORTS),
    (
        "gpt-5-codex",
        "GPT-5-Codex",
        272_000,
        128_000,
        &DEFAULT_EFFORTS,
    ),
    ("o3", "o3", 200_000, 100_000, &DEFAULT_EFFORTS),
    ("o4-mini", "o4-mini", 200_000, 100_000, &DEFAULT_EFFORTS),
    ("gpt-4.1", "GPT-4.1", 1_047_576, 32_768, &[]),
    ("gpt-4.1-mini", "GPT-4.1 mini", 1_047_576, 32_768, &[]),
    ("gpt-4o", "GPT-4o", 128_000, 16_384, &[]),
];

/// OpenAI's models ([`OPENAI`]) as catalog entries.
pub fn openai() -> Vec<Model> {
    OPENAI
        .iter()
        .map(|(id, name, window, max_tokens, efforts)| Model {
            id: (*id).to_owned(),
            name: Some((*name).to_owned()),
            description: None,
            context_window: Some(*window),
            max_tokens: Some(*max_tokens),
            reasoning_efforts: Some(efforts.iter().map(|e| (*e).to_owned()).collect()),
        })
        .collect()
}

/// What the catalog says about a route's models, with the config's
/// defaults for the models it does not list.
pub struct Catalog {
    /// The entries.
    pub models: Vec<Model>,
    /// The window of a model not listed.
    pub default_window: u64,
    /// The config's output cap (before [`DEFAULT_MAX_TOKENS`]).
    pub max_tokens: Option<u64>,
    /// Whether a model without `reasoningEfforts` reasons.
    pub reasoning: bool,
    /// The effort a call that names none gets, when the model takes it.
    pub default_effort: String,
}

impl Catalog {
    fn entry(&self, model: &str) -> Option<&Model> {
        self.models.iter().find(|m| m.id == model)
    }

    /// The efforts `model` takes; empty when it does not reason.
    pub fn efforts(&self, model: &str) -> Vec<String> {
        match self.entry(model).and_then(|m| m.reasoning_efforts.clone()) {
            Some(efforts) => efforts,
            None if self.reasoning => DEFAULT_EFFORTS.iter().map(|e| (*e).to_owned()).collect(),
            None => Vec::new(),
        }
    }

    /// Whether `model` reasons (a request to it carries `reasoning` and
    /// asks for the encrypted reasoning back).
    pub fn reasons(&self, model: &str) -> bool {
        !self.efforts(model).is_empty()
    }

    /// The effort a call to `model` that names none gets: the config's
    /// `reasoningEffort` when the model takes it.
    pub fn default_effort(&self, model: &str) -> Option<String> {
        self.efforts(model)
            .into_iter()
            .find(|e| *e == self.default_effort)
    }

    /// What the route knows of `params.model`: the catalog's entry, or the
    /// defaults for a model it does not list (which still passes through).
    pub fn resolve(&self, params: &ModelInfoParams) -> Result<ModelInfo> {
        let entry = self.entry(&params.model);
        let efforts = self.efforts(&params.model);
        let reasoning = (!efforts.is_empty()).then(|| ModelReasoningInfo {
            default_effort: self.default_effort(&params.model),
            efforts: efforts
                .iter()
                .map(|id| ReasoningEffortInfo {
                    id: id.clone(),
                    name: id.clone(),
                    description: None,
                })
                .collect(),
        });
        Ok(ModelInfo {
            name: entry
                .and_then(|m| m.name.clone())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| params.model.clone()),
            description: entry.and_then(|m| m.description.clone()),
            context: Some(ModelContext {
                context_window: entry
                    .and_then(|m| m.context_window)
                    .unwrap_or(self.default_window),
            }),
            default_max_tokens: Some(
                entry
                    .and_then(|m| m.max_tokens)
                    .or(self.max_tokens)
                    .unwrap_or(DEFAULT_MAX_TOKENS),
            ),
            reasoning,
            ..ModelInfo::bare(params)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(models: Vec<Model>) -> Catalog {
        Catalog {
            models,
            default_window: DEFAULT_CONTEXT_WINDOW,
            max_tokens: None,
            reasoning: true,
            default_effort: "medium".into(),
        }
    }

    fn params(model: &str) -> ModelInfoParams {
        ModelInfoParams {
            provider: "openai".into(),
            model: model.into(),
        }
    }

    #[test]
    fn openais_models_have_their_windows_caps_and_efforts() {
        let c = catalog(openai());
        let info = c.resolve(&params("gpt-5")).unwrap();
        assert_eq!(info.name, "GPT-5");
        assert_eq!(info.context.unwrap().context_window, 272_000);
        assert_eq!(info.default_max_tokens, Some(128_000));
        let reasoning = info.reasoning.unwrap();
        let ids: Vec<&str> = reasoning.efforts.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, GPT5_EFFORTS);
        assert_eq!(reasoning.default_effort.as_deref(), Some("medium"));
        // A model that does not reason takes no effort and gets no
        // `reasoning` on the wire.
        let info = c.resolve(&params("gpt-4.1")).unwrap();
        assert!(info.reasoning.is_none());
        assert!(!c.reasons("gpt-4.1") && c.reasons("o3"));
    }

    #[test]
    fn an_unlisted_model_gets_the_configured_defaults() {
        let mut c = catalog(openai());
        c.default_window = 32_768;
        c.max_tokens = Some(4096);
        let info = c.resolve(&params("qwen3")).unwrap();
        assert_eq!((info.id.as_str(), info.name.as_str()), ("qwen3", "qwen3"));
        assert_eq!(info.context.unwrap().context_window, 32_768);
        assert_eq!(info.default_max_tokens, Some(4096));
        assert_eq!(c.efforts("qwen3"), DEFAULT_EFFORTS);
        c.reasoning = false;
        assert!(c.resolve(&params("qwen3")).unwrap().reasoning.is_none());
    }

    #[test]
    fn a_configured_entry_wins_and_a_default_effort_it_lacks_is_none() {
        let mut c = catalog(vec![Model {
            id: "gpt-oss".into(),
            context_window: Some(131_072),
            max_tokens: Some(8192),
            reasoning_efforts: Some(vec!["low".into(), "high".into()]),
            ..Model::default()
        }]);
        c.max_tokens = Some(4096);
        let info = c.resolve(&params("gpt-oss")).unwrap();
        assert_eq!(info.context.unwrap().context_window, 131_072);
        assert_eq!(info.default_max_tokens, Some(8192));
        assert_eq!(info.reasoning.unwrap().default_effort, None);
    }
}
