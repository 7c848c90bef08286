//! The route's model catalog (`resolveModel`): DeepSeek's models, as the
//! original's DeepSeek adapter knows them, with the config's overrides for
//! any OpenAI-compatible route. The entries, the windows and where each
//! came from, and the default output caps are `dsh_llm_http::catalog`'s
//! (shared by every adapter); this adapter gives its catalog, its defaults
//! and its reasoning efforts.
//!
//! A model's window is, in this order: its `models[].contextWindow`, the
//! config's `defaultContextWindow` (both "config"), DeepSeek's catalog
//! ("catalog"), the window its server states ("server", see
//! `dsh_llm_http::window`), else [`DEFAULT_CONTEXT_WINDOW`] ("default").

use dsh_llm_http::catalog::{self, Defaults};
use dsh_sdk::api::llm::{ModelInfo, ModelInfoParams, ModelReasoningInfo, ReasoningEffortInfo};
use dsh_sdk::Result;

pub use dsh_llm_http::catalog::{Model, Window};

/// The context window of a model nothing states a window for (the
/// original's `DEFAULT_CONTEXT_WINDOW`).
pub const DEFAULT_CONTEXT_WINDOW: u64 = 1_000_000;

/// The output cap a request without one gets, unless the model or the
/// config says otherwise (the original's `DEFAULT_MAX_TOKENS`), at most a
/// share of a window the server or the config stated
/// ([`catalog::LEARNED_OUTPUT_SHARE`]).
pub const DEFAULT_MAX_TOKENS: u64 = 256_000;

/// This adapter's figures for what nothing states.
const DEFAULTS: Defaults = Defaults {
    context_window: DEFAULT_CONTEXT_WINDOW,
    max_tokens: DEFAULT_MAX_TOKENS,
};

/// DeepSeek's models, used when the config lists none.
pub fn deepseek() -> Vec<Model> {
    [
        ("deepseek-v4-flash", "DeepSeek-V4-Flash"),
        ("deepseek-v4-pro", "DeepSeek-V4-Pro"),
        (
            "deepseek-v4-flash-vision-exp",
            "DeepSeek-V4-Flash-Vision-Exp",
        ),
    ]
    .into_iter()
    .map(|(id, name)| Model {
        id: id.to_owned(),
        name: Some(name.to_owned()),
        context_window: Some(DEFAULT_CONTEXT_WINDOW),
        ..Model::default()
    })
    .collect()
}

/// The route's models: the config's `models`, else DeepSeek's catalog.
pub type Catalog = catalog::Catalog<Model>;

/// The config's `models` when it lists them, else DeepSeek's.
pub fn catalog_of(configured: Option<Vec<Model>>) -> Catalog {
    Catalog::of(configured, deepseek)
}

/// The window the config or the catalog states for `model`; `None` when
/// neither does (the server may be asked). `default_window` is the config's
/// `defaultContextWindow`, if it sets one.
pub fn stated(catalog: &Catalog, default_window: Option<u64>, model: &str) -> Option<Window> {
    catalog.stated(catalog.entry(model), default_window)
}

/// The effort that turns DeepSeek's thinking off.
pub const EFFORT_OFF: &str = "off";

/// The reasoning efforts of the route's models, as the original's DeepSeek
/// adapter offers them: `off` alone when the route sends no thinking
/// fields (`reasoning = false`), else `off`, `low`, `high` and `max`, the
/// default the config's `reasoningEffort` (`high` for a value not listed).
pub fn reasoning(thinking: bool, configured_effort: &str) -> ModelReasoningInfo {
    const EFFORTS: [(&str, &str); 4] = [
        (EFFORT_OFF, "Off"),
        ("low", "Low"),
        ("high", "High"),
        ("max", "Max"),
    ];
    let offered = if thinking {
        &EFFORTS[..]
    } else {
        &EFFORTS[..1]
    };
    let default = if !thinking {
        EFFORT_OFF
    } else if offered.iter().any(|(id, _)| *id == configured_effort) {
        configured_effort
    } else {
        "high"
    };
    ModelReasoningInfo {
        efforts: offered
            .iter()
            .map(|(id, name)| ReasoningEffortInfo {
                id: (*id).to_owned(),
                name: (*name).to_owned(),
                description: None,
            })
            .collect(),
        default_effort: Some(default.to_owned()),
    }
}

/// What the route knows of `params.model`, with `window` as its context
/// window: the catalog's entry, or the defaults for a model it does not
/// list (which still passes through). The default output cap is the
/// entry's `maxTokens`, else the config's (`max_tokens`), else
/// [`DEFAULT_MAX_TOKENS`], at most a share of a window the server or the
/// config stated (the catalog's own models keep the original's cap; see
/// `dsh_llm_http::catalog`).
pub fn resolve(
    catalog: &Catalog,
    window: Window,
    max_tokens: Option<u64>,
    reasoning: ModelReasoningInfo,
    params: &ModelInfoParams,
) -> Result<ModelInfo> {
    Ok(catalog::model_info(
        catalog.entry(&params.model),
        window,
        max_tokens,
        DEFAULTS,
        Some(reasoning),
        params,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::api::llm::ContextSource;

    /// [`DEFAULT_CONTEXT_WINDOW`]: nothing stated a window.
    fn default_window() -> Window {
        Window::assumed(DEFAULT_CONTEXT_WINDOW)
    }

    fn params(model: &str) -> ModelInfoParams {
        ModelInfoParams {
            provider: "deepseek-official".into(),
            model: model.into(),
        }
    }

    fn server(tokens: u64) -> Window {
        Window {
            tokens,
            source: ContextSource::Server {
                endpoint: "/props".into(),
            },
        }
    }

    #[test]
    fn a_thinking_route_offers_four_efforts_and_a_plain_one_off_only() {
        let ids =
            |r: &ModelReasoningInfo| r.efforts.iter().map(|e| e.id.clone()).collect::<Vec<_>>();
        let r = reasoning(true, "max");
        assert_eq!(ids(&r), ["off", "low", "high", "max"]);
        assert_eq!(r.default_effort.as_deref(), Some("max"));
        assert_eq!(
            reasoning(true, "medium").default_effort.as_deref(),
            Some("high")
        );
        let plain = reasoning(false, "max");
        assert_eq!(ids(&plain), ["off"]);
        assert_eq!(plain.default_effort.as_deref(), Some("off"));
    }

    #[test]
    fn a_configured_window_caps_the_default_output_at_a_quarter() {
        let catalog = catalog_of(None);
        let window = Window {
            tokens: 4096,
            source: ContextSource::Config,
        };
        let info = resolve(
            &catalog,
            window,
            None,
            reasoning(false, "off"),
            &params("m"),
        )
        .unwrap();
        assert_eq!(info.default_max_tokens, Some(1024));
    }

    #[test]
    fn deepseeks_models_have_the_originals_window_and_cap() {
        let catalog = catalog_of(None);
        let window = stated(&catalog, None, "deepseek-v4-pro").unwrap();
        assert_eq!(window.source, ContextSource::Catalog);
        let info = resolve(
            &catalog,
            window,
            None,
            reasoning(true, "high"),
            &params("deepseek-v4-pro"),
        )
        .unwrap();
        assert_eq!(info.name, "DeepSeek-V4-Pro");
        assert_eq!(info.context.unwrap().context_window, 1_000_000);
        assert_eq!(info.default_max_tokens, Some(256_000));
        assert_eq!(info.context_source, Some(ContextSource::Catalog));
    }

    #[test]
    fn an_unlisted_model_gets_the_configured_defaults() {
        let catalog = catalog_of(None);
        let window = stated(&catalog, Some(32_768), "qwen3").unwrap();
        assert_eq!(window.source, ContextSource::Config);
        let info = resolve(
            &catalog,
            window,
            Some(4096),
            reasoning(true, "high"),
            &params("qwen3"),
        )
        .unwrap();
        assert_eq!((info.id.as_str(), info.name.as_str()), ("qwen3", "qwen3"));
        assert_eq!(info.context.unwrap().context_window, 32_768);
        assert_eq!(info.default_max_tokens, Some(4096));
        // Nothing stated: the server may be asked.
        assert_eq!(stated(&catalog, None, "qwen3"), None);
    }

    #[test]
    fn a_configured_entry_wins() {
        let catalog = catalog_of(Some(vec![Model {
            id: "qwen3".into(),
            context_window: Some(131_072),
            max_tokens: Some(8192),
            ..Model::default()
        }]));
        let window = stated(&catalog, Some(4096), "qwen3").unwrap();
        assert_eq!(
            window,
            Window {
                tokens: 131_072,
                source: ContextSource::Config
            }
        );
        let info = resolve(
            &catalog,
            window,
            Some(4096),
            reasoning(true, "high"),
            &params("qwen3"),
        )
        .unwrap();
        assert_eq!(info.context.unwrap().context_window, 131_072);
        assert_eq!(info.default_max_tokens, Some(8192));
        // An entry without a window leaves it to the server.
        let bare = catalog_of(Some(vec![Model {
            id: "qwen3".into(),
            ..Model::default()
        }]));
        assert_eq!(stated(&bare, None, "qwen3"), None);
    }

    #[test]
    fn a_learned_window_caps_the_default_output_to_a_share_of_it() {
        let catalog = catalog_of(None);
        let info = resolve(
            &catalog,
            server(4096),
            None,
            reasoning(true, "high"),
            &params("m"),
        )
        .unwrap();
        assert_eq!(info.default_max_tokens, Some(1024));
        assert_eq!(
            info.context_source,
            Some(ContextSource::Server {
                endpoint: "/props".into()
            })
        );
        // The config's cap still wins; a huge window keeps the default cap.
        let info = resolve(
            &catalog,
            server(4096),
            Some(3000),
            reasoning(true, "high"),
            &params("m"),
        )
        .unwrap();
        assert_eq!(info.default_max_tokens, Some(3000));
        let info = resolve(
            &catalog,
            server(10_000_000),
            None,
            reasoning(true, "high"),
            &params("m"),
        )
        .unwrap();
        assert_eq!(info.default_max_tokens, Some(DEFAULT_MAX_TOKENS));
        let info = resolve(
            &catalog,
            default_window(),
            None,
            reasoning(true, "high"),
            &params("m"),
        )
        .unwrap();
        assert_eq!(
            (info.default_max_tokens, info.context_source),
            (Some(DEFAULT_MAX_TOKENS), Some(ContextSource::Default))
        );
    }
}
