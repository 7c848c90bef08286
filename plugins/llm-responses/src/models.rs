//! The route's model catalog (`resolveModel`): names, context windows,
//! default output caps and reasoning efforts. OpenAI's current models by
//! default, with the figures OpenAI publishes (defaults: the config's
//! `models` replace the list for another server or a newer model). The
//! entries, the windows and where each came from, and the default output
//! caps are `dsh_llm_http::catalog`'s (shared by every adapter); this
//! adapter adds each entry's reasoning efforts.

use dsh_llm_http::catalog::{self, Defaults, Window};
use dsh_sdk::api::llm::{ModelInfo, ModelInfoParams, ModelReasoningInfo, ReasoningEffortInfo};
use dsh_sdk::Result;
use serde::Deserialize;
use serde_json::{Map, Value};

/// The context window of a model nothing states a window for (not listed,
/// no `defaultContextWindow`, its server silent): the smallest window of
/// OpenAI's current models, so pressure compaction starts early rather
/// than never on a server whose window is unknown.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// The output cap a request without one gets, unless the model or the
/// config says otherwise; at most a share of a window the server or the
/// config stated ([`catalog::LEARNED_OUTPUT_SHARE`]).
pub const DEFAULT_MAX_TOKENS: u64 = 32_768;

/// This adapter's figures for what nothing states.
const DEFAULTS: Defaults = Defaults {
    context_window: DEFAULT_CONTEXT_WINDOW,
    max_tokens: DEFAULT_MAX_TOKENS,
};

/// The efforts of a reasoning model the catalog does not describe (every
/// reasoning model of the Responses API takes these three).
pub const DEFAULT_EFFORTS: [&str; 3] = ["low", "medium", "high"];

/// The efforts GPT-5 takes (it adds `minimal`).
const GPT5_EFFORTS: [&str; 4] = ["minimal", "low", "medium", "high"];

/// The config field of the reasoning efforts of a `models[]` entry.
const EFFORTS_FIELD: &str = "reasoningEfforts";

/// One catalog entry (config `models[]`): the fields every adapter reads
/// (`id`, `name`, `description`, `contextWindow`, `maxTokens`) and this
/// adapter's `reasoningEfforts`. Any other key is refused, naming them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Map<String, Value>")]
pub struct Model {
    /// The fields every adapter reads.
    pub entry: catalog::Model,
    /// The reasoning efforts it takes, in order; `[]` for a model that
    /// does not reason (no `reasoning` is sent to it). Absent: the
    /// config's `reasoning` decides, with [`DEFAULT_EFFORTS`].
    pub reasoning_efforts: Option<Vec<String>>,
}

impl AsRef<catalog::Model> for Model {
    fn as_ref(&self) -> &catalog::Model {
        &self.entry
    }
}

/// An entry as written: `reasoningEfforts` taken out, the rest read as the
/// shared entry (which refuses unknown keys: serde cannot refuse them
/// across a flattened part).
impl TryFrom<Map<String, Value>> for Model {
    type Error = String;

    fn try_from(mut fields: Map<String, Value>) -> std::result::Result<Model, String> {
        let reasoning_efforts = match fields.remove(EFFORTS_FIELD) {
            Some(efforts) => {
                serde_json::from_value(efforts).map_err(|e| format!("{EFFORTS_FIELD}: {e}"))?
            }
            None => None,
        };
        let entry = serde_json::from_value(Value::Object(fields)).map_err(|e| {
            let e = e.to_string();
            if e.starts_with("unknown field") {
                format!("{e} (or `{EFFORTS_FIELD}`)")
            } else {
                e
            }
        })?;
        Ok(Model {
            entry,
            reasoning_efforts,
        })
    }
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
            entry: catalog::Model {
                id: (*id).to_owned(),
                name: Some((*name).to_owned()),
                description: None,
                context_window: Some(*window),
                max_tokens: Some(*max_tokens),
            },
            reasoning_efforts: Some(efforts.iter().map(|e| (*e).to_owned()).collect()),
        })
        .collect()
}

/// Whether OpenAI's id `model` names a reasoning model: the o-series
/// (`o1`, `o3-mini`, `o4-mini`...) and GPT-5 (`gpt-5*`), except its chat
/// models (`gpt-5-chat-latest`), which do not reason.
pub fn named_as_reasoning(model: &str) -> bool {
    let o_series = model
        .strip_prefix('o')
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    let gpt5 = model.starts_with("gpt-5") && !model.contains("-chat");
    o_series || gpt5
}

/// What the catalog says about a route's models, with the config's
/// defaults for the models it does not list.
pub struct Catalog {
    /// The entries: the config's, else OpenAI's.
    pub entries: catalog::Catalog<Model>,
    /// The config's `defaultContextWindow`: the window of a model not
    /// listed (unset: asked of the server, else [`DEFAULT_CONTEXT_WINDOW`]).
    pub default_window: Option<u64>,
    /// The config's output cap (before [`DEFAULT_MAX_TOKENS`]).
    pub max_tokens: Option<u64>,
    /// Whether a model without `reasoningEfforts` reasons.
    pub reasoning: bool,
    /// The route is OpenAI's own API: a model the catalog does not list
    /// reasons only when its id says so ([`named_as_reasoning`]), since
    /// OpenAI refuses `reasoning` and its encrypted content to the others.
    pub openai: bool,
    /// The effort a call that names none gets, when the model takes it.
    pub default_effort: String,
}

impl Catalog {
    fn entry(&self, model: &str) -> Option<&Model> {
        self.entries.entry(model)
    }

    /// The window the config or the catalog states for `model`; `None`
    /// when neither does (the server may be asked).
    pub fn stated(&self, model: &str) -> Option<Window> {
        self.entries.stated(self.entry(model), self.default_window)
    }

    /// The efforts `model` takes; empty when it does not reason.
    pub fn efforts(&self, model: &str) -> Vec<String> {
        match self.entry(model).and_then(|m| m.reasoning_efforts.clone()) {
            Some(efforts) => efforts,
            None if self.reasoning && (!self.openai || named_as_reasoning(model)) => {
                DEFAULT_EFFORTS.iter().map(|e| (*e).to_owned()).collect()
            }
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

    /// What the route knows of `params.model`, with `window` as its
    /// context window: the catalog's entry, or the defaults for a model it
    /// does not list (which still passes through).
    pub fn resolve(&self, window: Window, params: &ModelInfoParams) -> Result<ModelInfo> {
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
        Ok(catalog::model_info(
            self.entry(&params.model).map(|m| &m.entry),
            window,
            self.max_tokens,
            DEFAULTS,
            reasoning,
            params,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(models: Vec<Model>) -> Catalog {
        Catalog {
            entries: catalog::Catalog {
                models,
                configured: false,
            },
            default_window: None,
            max_tokens: None,
            reasoning: true,
            openai: false,
            default_effort: "medium".into(),
        }
    }

    fn params(model: &str) -> ModelInfoParams {
        ModelInfoParams {
            provider: "openai".into(),
            model: model.into(),
        }
    }

    /// What the catalog alone says of `params.model` (no server asked).
    fn resolve(c: &Catalog, params: &ModelInfoParams) -> Result<ModelInfo> {
        let window = c
            .stated(&params.model)
            .unwrap_or_else(|| Window::assumed(DEFAULT_CONTEXT_WINDOW));
        c.resolve(window, params)
    }

    #[test]
    fn openais_models_have_their_windows_caps_and_efforts() {
        let c = catalog(openai());
        let info = resolve(&c, &params("gpt-5")).unwrap();
        assert_eq!(info.name, "GPT-5");
        assert_eq!(info.context.unwrap().context_window, 272_000);
        assert_eq!(info.default_max_tokens, Some(128_000));
        let reasoning = info.reasoning.unwrap();
        let ids: Vec<&str> = reasoning.efforts.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, GPT5_EFFORTS);
        assert_eq!(reasoning.default_effort.as_deref(), Some("medium"));
        // A model that does not reason takes no effort and gets no
        // `reasoning` on the wire.
        let info = resolve(&c, &params("gpt-4.1")).unwrap();
        assert!(info.reasoning.is_none());
        assert!(!c.reasons("gpt-4.1") && c.reasons("o3"));
    }

    #[test]
    fn an_unlisted_model_gets_the_configured_defaults() {
        let mut c = catalog(openai());
        c.default_window = Some(32_768);
        c.max_tokens = Some(4096);
        let info = resolve(&c, &params("qwen3")).unwrap();
        assert_eq!((info.id.as_str(), info.name.as_str()), ("qwen3", "qwen3"));
        assert_eq!(info.context.unwrap().context_window, 32_768);
        assert_eq!(info.default_max_tokens, Some(4096));
        assert_eq!(c.efforts("qwen3"), DEFAULT_EFFORTS);
        c.reasoning = false;
        assert!(resolve(&c, &params("qwen3")).unwrap().reasoning.is_none());
    }

    #[test]
    fn on_openais_api_an_unlisted_model_reasons_only_when_its_id_says_so() {
        let mut c = catalog(openai());
        c.openai = true;
        for reasoning in ["o1", "o3-pro", "o4-mini-2025-04-16", "gpt-5.1", "gpt-5-pro"] {
            assert!(c.reasons(reasoning), "{reasoning}");
        }
        for plain in [
            "gpt-4o-mini",
            "gpt-4.1-nano",
            "gpt-5-chat-latest",
            "omni-moderation",
        ] {
            assert!(!c.reasons(plain), "{plain}");
            assert!(resolve(&c, &params(plain)).unwrap().reasoning.is_none());
        }
        // Elsewhere the config's `reasoning` decides.
        c.openai = false;
        assert!(c.reasons("gpt-4o-mini"));
    }

    #[test]
    fn a_configured_entry_wins_and_a_default_effort_it_lacks_is_none() {
        let mut c = catalog(vec![Model {
            entry: catalog::Model {
                id: "gpt-oss".into(),
                context_window: Some(131_072),
                max_tokens: Some(8192),
                ..catalog::Model::default()
            },
            reasoning_efforts: Some(vec!["low".into(), "high".into()]),
        }]);
        c.max_tokens = Some(4096);
        let info = resolve(&c, &params("gpt-oss")).unwrap();
        assert_eq!(info.context.unwrap().context_window, 131_072);
        assert_eq!(info.default_max_tokens, Some(8192));
        assert_eq!(info.reasoning.unwrap().default_effort, None);
    }

    #[test]
    fn an_entry_reads_its_efforts_beside_the_shared_fields_and_refuses_other_keys() {
        let read = |v: Value| serde_json::from_value::<Model>(v);
        let m = read(serde_json::json!({"id": "gpt-oss", "contextWindow": 131072,
                                        "reasoningEfforts": ["low", "high"]}))
        .unwrap();
        assert_eq!(
            (m.entry.id.as_str(), m.entry.context_window),
            ("gpt-oss", Some(131_072))
        );
        assert_eq!(m.reasoning_efforts, Some(vec!["low".into(), "high".into()]));
        assert_eq!(
            read(serde_json::json!({"id": "m"}))
                .unwrap()
                .reasoning_efforts,
            None
        );
        let e = read(serde_json::json!({"id": "m", "reasoningEffort": ["low"]}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("reasoningEffort`")
                && e.contains("contextWindow")
                && e.contains("`reasoningEfforts`"),
            "{e}"
        );
        let e = read(serde_json::json!({"id": "m", "reasoningEfforts": "low"}))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("reasoningEfforts: "), "{e}");
    }
}
