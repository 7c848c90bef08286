//! A route's model catalog, as every adapter answers `resolveModel` from
//! it: the entries (the config's `models`, else the adapter's built-in
//! list), a model's context window and where it came from, and its default
//! output cap.
//!
//! A model's window is, in this order: its entry's `contextWindow` (from
//! the config: "config"; from the built-in list: "catalog"), the config's
//! `defaultContextWindow` ("config"), the window its server states
//! ("server", asked by [`crate::window::WindowLookup`] when the route
//! looks windows up), else the adapter's default ("default").
//!
//! A model's default output cap is its entry's `maxTokens`, else the
//! config's `maxTokens`, else the adapter's default, at most
//! [`LEARNED_OUTPUT_SHARE`] of a window the server or the config stated (a
//! small local window keeps most of its room for the prompt, and a server
//! that refuses an output cap over its room, as vLLM does, is not sent one).

use dsh_sdk::api::llm::{
    ContextSource, ModelContext, ModelInfo, ModelInfoParams, ModelReasoningInfo,
};
use serde::Deserialize;

/// The share of a window the server or the config stated that a request
/// without an output cap may ask for (a quarter).
pub const LEARNED_OUTPUT_SHARE: u64 = 4;

/// One catalog entry (config `models[]`), as every adapter reads it. An
/// adapter whose entries say more (the Responses adapter's
/// `reasoningEfforts`) holds one of these beside its own fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Model {
    /// The exact id sent to the endpoint.
    pub id: String,
    /// A display name (the id when absent).
    pub name: Option<String>,
    /// What it is.
    pub description: Option<String>,
    /// Its context window (when absent: the config's
    /// `defaultContextWindow`, else what the server states, else the
    /// adapter's default).
    pub context_window: Option<u64>,
    /// Its default output cap (`maxTokens` of a request that sets none).
    pub max_tokens: Option<u64>,
}

impl AsRef<Model> for Model {
    fn as_ref(&self) -> &Model {
        self
    }
}

/// A route's entries: the config's `models`, else the adapter's built-in
/// list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog<M = Model> {
    /// The entries.
    pub models: Vec<M>,
    /// They are the config's (their windows are "config"), not the
    /// built-in list's ("catalog").
    pub configured: bool,
}

impl<M> Catalog<M> {
    /// The config's `models` when it lists them, else `builtin`'s.
    pub fn of(configured: Option<Vec<M>>, builtin: impl FnOnce() -> Vec<M>) -> Catalog<M> {
        match configured {
            Some(models) => Catalog {
                models,
                configured: true,
            },
            None => Catalog {
                models: builtin(),
                configured: false,
            },
        }
    }
}

impl<M: AsRef<Model>> Catalog<M> {
    /// The entry whose id is `model`.
    pub fn entry(&self, model: &str) -> Option<&M> {
        self.models.iter().find(|m| m.as_ref().id == model)
    }

    /// The window `entry` (this catalog's entry of the model, if any)
    /// states, else `default_window` (the config's
    /// `defaultContextWindow`); `None` when neither does (the server may
    /// be asked).
    pub fn stated(&self, entry: Option<&M>, default_window: Option<u64>) -> Option<Window> {
        match (
            entry.and_then(|m| m.as_ref().context_window),
            default_window,
        ) {
            (Some(tokens), _) => Some(Window {
                tokens,
                source: if self.configured {
                    ContextSource::Config
                } else {
                    ContextSource::Catalog
                },
            }),
            (None, Some(tokens)) => Some(Window {
                tokens,
                source: ContextSource::Config,
            }),
            (None, None) => None,
        }
    }
}

/// A model's context window and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// Its tokens.
    pub tokens: u64,
    /// Where they came from.
    pub source: ContextSource,
}

impl Window {
    /// The adapter's default window of `tokens`: nothing stated one.
    pub fn assumed(tokens: u64) -> Window {
        Window {
            tokens,
            source: ContextSource::Default,
        }
    }
}

/// The adapter's figures for what nothing states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defaults {
    /// The window of a model nothing states one for.
    pub context_window: u64,
    /// The output cap of a model neither its entry nor the config gives
    /// one for.
    pub max_tokens: u64,
}

/// The default output cap of a model whose entry is `entry`, with
/// `window`: see the module's doc. `max_tokens` is the config's.
pub fn default_max_tokens(
    entry: Option<&Model>,
    window: &Window,
    max_tokens: Option<u64>,
    defaults: Defaults,
) -> u64 {
    let default = match window.source {
        ContextSource::Server { .. } | ContextSource::Config => defaults
            .max_tokens
            .min((window.tokens / LEARNED_OUTPUT_SHARE).max(1)),
        _ => defaults.max_tokens,
    };
    entry
        .and_then(|m| m.max_tokens)
        .or(max_tokens)
        .unwrap_or(default)
}

/// What the route knows of `params.model`, with `window` as its context
/// window: `entry`'s name and description (the id when it has no name),
/// the window and its source, the default output cap
/// ([`default_max_tokens`]) and `reasoning`. A model the catalog does not
/// list (`entry` is `None`) still passes through, with the defaults.
pub fn model_info(
    entry: Option<&Model>,
    window: Window,
    max_tokens: Option<u64>,
    defaults: Defaults,
    reasoning: Option<ModelReasoningInfo>,
    params: &ModelInfoParams,
) -> ModelInfo {
    let default_max_tokens = default_max_tokens(entry, &window, max_tokens, defaults);
    ModelInfo {
        name: entry
            .and_then(|m| m.name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| params.model.clone()),
        description: entry.and_then(|m| m.description.clone()),
        context: Some(ModelContext {
            context_window: window.tokens,
        }),
        context_source: Some(window.source),
        default_max_tokens: Some(default_max_tokens),
        reasoning,
        ..ModelInfo::bare(params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: Defaults = Defaults {
        context_window: 100_000,
        max_tokens: 8192,
    };

    fn params(model: &str) -> ModelInfoParams {
        ModelInfoParams {
            provider: "p".into(),
            model: model.into(),
        }
    }

    fn entry(id: &str, window: Option<u64>, max_tokens: Option<u64>) -> Model {
        Model {
            id: id.into(),
            context_window: window,
            max_tokens,
            ..Model::default()
        }
    }

    #[test]
    fn a_window_comes_from_the_entry_then_the_config_and_says_which() {
        let builtin = Catalog::of(None, || vec![entry("a", Some(1000), None)]);
        let a = builtin.entry("a");
        let w = |c: &Catalog, e, d| c.stated(e, d).map(|w| (w.tokens, w.source));
        assert_eq!(
            w(&builtin, a, Some(5)),
            Some((1000, ContextSource::Catalog))
        );
        assert_eq!(
            w(&builtin, builtin.entry("b"), Some(5)),
            Some((5, ContextSource::Config))
        );
        assert_eq!(w(&builtin, None, None), None);
        let configured = Catalog::of(Some(vec![entry("a", Some(1000), None)]), Vec::new);
        assert_eq!(
            w(&configured, configured.entry("a"), None),
            Some((1000, ContextSource::Config))
        );
        // An entry without a window leaves it to the server.
        let bare = Catalog::of(Some(vec![entry("a", None, None)]), Vec::new);
        assert_eq!(w(&bare, bare.entry("a"), None), None);
    }

    #[test]
    fn the_default_cap_is_a_share_of_a_stated_window_only() {
        let cap = |source: ContextSource, tokens| {
            default_max_tokens(None, &Window { tokens, source }, None, DEFAULTS)
        };
        let server = || ContextSource::Server {
            endpoint: "/props".into(),
        };
        assert_eq!(cap(server(), 4096), 1024);
        assert_eq!(cap(ContextSource::Config, 4096), 1024);
        assert_eq!(cap(server(), 10_000_000), 8192);
        assert_eq!(cap(ContextSource::Catalog, 4096), 8192);
        assert_eq!(cap(ContextSource::Default, 4096), 8192);
        assert_eq!(cap(server(), 1), 1);
        // The entry's cap, then the config's, win.
        let window = Window {
            tokens: 4096,
            source: server(),
        };
        let e = entry("a", None, Some(3000));
        assert_eq!(
            default_max_tokens(Some(&e), &window, Some(5), DEFAULTS),
            3000
        );
        assert_eq!(default_max_tokens(None, &window, Some(5), DEFAULTS), 5);
    }

    #[test]
    fn an_unlisted_model_passes_through_with_the_defaults() {
        let info = model_info(
            None,
            Window::assumed(DEFAULTS.context_window),
            None,
            DEFAULTS,
            None,
            &params("qwen3"),
        );
        assert_eq!((info.id.as_str(), info.name.as_str()), ("qwen3", "qwen3"));
        assert_eq!(info.context.unwrap().context_window, 100_000);
        assert_eq!(info.context_source, Some(ContextSource::Default));
        assert_eq!(info.default_max_tokens, Some(8192));
        let named = Model {
            name: Some("Qwen 3".into()),
            description: Some("d".into()),
            ..entry("qwen3", None, None)
        };
        let info = model_info(
            Some(&named),
            Window::assumed(1),
            None,
            DEFAULTS,
            None,
            &params("qwen3"),
        );
        assert_eq!(
            (info.name.as_str(), info.description.as_deref()),
            ("Qwen 3", Some("d"))
        );
    }
}
