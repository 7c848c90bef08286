//! The route's model catalog (`resolveModel`): names, context windows and
//! default output caps of Claude models, with the config's overrides for
//! any other Messages-API route (DeepSeek's `/anthropic`, a proxy, a local
//! server). The entries, the windows and where each came from, and the
//! default output caps are `dsh_llm_http::catalog`'s (shared by every
//! adapter); this adapter gives its catalog, its defaults, its thinking
//! efforts, and finds a dated snapshot's entry.
//!
//! The default entries are this adapter's choice, not something a server
//! reports: Claude models this adapter was written against, each with a
//! 200,000-token window and the output cap Anthropic documents for it. A
//! route whose models differ lists them in the config's `models`; a local
//! server states its window (see `dsh_llm_http::window`).

use dsh_llm_http::catalog::{self, Defaults};
use dsh_sdk::api::llm::{ModelInfo, ModelInfoParams, ModelReasoningInfo, ReasoningEffortInfo};
use dsh_sdk::Result;

pub use dsh_llm_http::catalog::{Model, Window};

/// The context window of a model nothing states a window for (every
/// current Claude model reads at least this much).
pub const DEFAULT_CONTEXT_WINDOW: u64 = 200_000;

/// The output cap of a model the catalog does not list, unless the config
/// says otherwise: a cap every current Claude model accepts (a larger
/// `max_tokens` than a model allows is refused with HTTP 400); at most a
/// share of a window the server or the config stated
/// ([`catalog::LEARNED_OUTPUT_SHARE`]).
pub const DEFAULT_MAX_TOKENS: u64 = 8_192;

/// This adapter's figures for what nothing states.
const DEFAULTS: Defaults = Defaults {
    context_window: DEFAULT_CONTEXT_WINDOW,
    max_tokens: DEFAULT_MAX_TOKENS,
};

/// The route's models: the config's `models`, else Claude's.
pub type Catalog = catalog::Catalog<Model>;

/// The config's `models` when it lists them, else Claude's.
pub fn catalog_of(configured: Option<Vec<Model>>) -> Catalog {
    Catalog::of(configured, claude)
}

/// The Claude models listed when the config lists none (defaults chosen
/// by this adapter: 200,000-token windows, each model's documented output
/// cap).
pub fn claude() -> Vec<Model> {
    [
        ("claude-sonnet-4-5", "Claude Sonnet 4.5", 64_000),
        ("claude-haiku-4-5", "Claude Haiku 4.5", 64_000),
        ("claude-opus-4-1", "Claude Opus 4.1", 32_000),
        ("claude-sonnet-4-0", "Claude Sonnet 4", 64_000),
        ("claude-opus-4-0", "Claude Opus 4", 32_000),
    ]
    .into_iter()
    .map(|(id, name, cap)| Model {
        id: id.to_owned(),
        name: Some(name.to_owned()),
        context_window: Some(DEFAULT_CONTEXT_WINDOW),
        max_tokens: Some(cap),
        ..Model::default()
    })
    .collect()
}

/// Whether `model` names `entry`: its id, or its id followed by a dated
/// snapshot (`claude-sonnet-4-5-20250929` is `claude-sonnet-4-5`). An
/// alias ending in `-0` names the snapshots dated without it, as Anthropic
/// names them (`claude-sonnet-4-20250514` is `claude-sonnet-4-0`).
fn names(entry: &Model, model: &str) -> bool {
    let dated = |base: &str| {
        model
            .strip_prefix(base)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|date| date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit()))
    };
    model == entry.id || dated(&entry.id) || entry.id.strip_suffix("-0").is_some_and(dated)
}

/// The catalog's entry for `model`: an exact id first, then a dated
/// snapshot of a listed id.
pub fn entry<'a>(catalog: &'a Catalog, model: &str) -> Option<&'a Model> {
    catalog
        .entry(model)
        .or_else(|| catalog.models.iter().find(|m| names(m, model)))
}

/// The window the config or the catalog states for `model`; `None` when
/// neither does (the server may be asked). `default_window` is the config's
/// `defaultContextWindow`, if it sets one.
pub fn stated(catalog: &Catalog, default_window: Option<u64>, model: &str) -> Option<Window> {
    catalog.stated(entry(catalog, model), default_window)
}

/// The output cap of a request to `model` that sets none, when the
/// request did not come through `resolveModel`'s default: the model's,
/// else the config's `maxTokens`, else [`DEFAULT_MAX_TOKENS`].
pub fn default_max_tokens(catalog: &Catalog, max_tokens: Option<u64>, model: &str) -> u64 {
    entry(catalog, model)
        .and_then(|m| m.max_tokens)
        .or(max_tokens)
        .unwrap_or(DEFAULT_MAX_TOKENS)
}

/// The reasoning efforts every model of the route offers (the thinking
/// budgets of [`crate::request::effort`]), `default` (the config's
/// `reasoningEffort`) the one a call that names none gets.
pub fn reasoning(default: &str) -> ModelReasoningInfo {
    use crate::request::effort;
    let efforts = [
        (effort::OFF, "Off", "No thinking."),
        (effort::LOW, "Low", "Thinks up to 2,048 tokens."),
        (effort::MEDIUM, "Medium", "Thinks up to 8,192 tokens."),
        (effort::HIGH, "High", "Thinks up to 16,384 tokens."),
        (effort::MAX, "Max", "Thinks up to 32,000 tokens."),
    ];
    ModelReasoningInfo {
        efforts: efforts
            .into_iter()
            .map(|(id, name, description)| ReasoningEffortInfo {
                id: id.to_owned(),
                name: name.to_owned(),
                description: Some(format!(
                    "{description} The budget is at most half of the output cap."
                )),
            })
            .collect(),
        default_effort: Some(default.to_owned()),
    }
}

/// What the route knows of `params.model`, with `window` as its context
/// window: the catalog's entry, or the defaults for a model it does not
/// list (which still passes through); every model offers the thinking
/// efforts, `effort` by default.
pub fn resolve(
    catalog: &Catalog,
    window: Window,
    max_tokens: Option<u64>,
    effort: &str,
    params: &ModelInfoParams,
) -> Result<ModelInfo> {
    Ok(catalog::model_info(
        entry(catalog, &params.model),
        window,
        max_tokens,
        DEFAULTS,
        Some(reasoning(effort)),
        params,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(model: &str) -> ModelInfoParams {
        ModelInfoParams {
            provider: "anthropic".into(),
            model: model.into(),
        }
    }

    /// What the route whose catalog is `models` knows of `params.model`,
    /// the window of a model it does not list being `default_window`.
    fn resolve_in(
        models: &[Model],
        default_window: u64,
        max_tokens: Option<u64>,
        effort: &str,
        params: &ModelInfoParams,
    ) -> Result<ModelInfo> {
        let catalog = catalog_of(Some(models.to_vec()));
        let window = stated(&catalog, Some(default_window), &params.model).unwrap();
        resolve(&catalog, window, max_tokens, effort, params)
    }

    #[test]
    fn claude_models_have_a_200k_window_and_their_output_cap() {
        let info = resolve_in(
            &claude(),
            DEFAULT_CONTEXT_WINDOW,
            None,
            "off",
            &params("claude-opus-4-1"),
        )
        .unwrap();
        assert_eq!(info.name, "Claude Opus 4.1");
        assert_eq!(info.context.unwrap().context_window, 200_000);
        assert_eq!(info.default_max_tokens, Some(32_000));
    }

    #[test]
    fn every_model_offers_the_thinking_efforts_with_the_configs_default() {
        let info = resolve_in(
            &claude(),
            DEFAULT_CONTEXT_WINDOW,
            None,
            "high",
            &params("unlisted"),
        )
        .unwrap();
        let reasoning = info.reasoning.unwrap();
        let ids: Vec<&str> = reasoning.efforts.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, crate::request::effort::ALL);
        assert_eq!(reasoning.default_effort.as_deref(), Some("high"));
    }

    #[test]
    fn a_dated_snapshot_is_its_models_entry() {
        let info = resolve_in(
            &claude(),
            DEFAULT_CONTEXT_WINDOW,
            None,
            "off",
            &params("claude-sonnet-4-5-20250929"),
        )
        .unwrap();
        assert_eq!(info.id, "claude-sonnet-4-5-20250929");
        assert_eq!(info.name, "Claude Sonnet 4.5");
        assert_eq!(info.default_max_tokens, Some(64_000));
        // The snapshots of a `-0` alias are dated without the `-0`.
        for (dated, name) in [
            ("claude-sonnet-4-20250514", "Claude Sonnet 4"),
            ("claude-opus-4-20250514", "Claude Opus 4"),
        ] {
            let info = resolve_in(
                &claude(),
                DEFAULT_CONTEXT_WINDOW,
                None,
                "off",
                &params(dated),
            )
            .unwrap();
            assert_eq!((info.id.as_str(), info.name.as_str()), (dated, name));
        }
        // Not a date: another model.
        for other in [
            "claude-sonnet-4-5-2025092",
            "claude-sonnet-4-0-x",
            "claude-sonnet-4-5x",
            "claude-sonnet-4-5-latest",
            "claude-sonnet-4",
        ] {
            assert!(entry(&catalog_of(None), other).is_none(), "{other}");
        }
    }

    #[test]
    fn an_unlisted_model_gets_the_configured_defaults() {
        let info = resolve_in(
            &claude(),
            64_000,
            Some(4096),
            "off",
            &params("deepseek-v4-flash"),
        )
        .unwrap();
        assert_eq!(info.name, "deepseek-v4-flash");
        assert_eq!(info.context.unwrap().context_window, 64_000);
        assert_eq!(info.default_max_tokens, Some(4096));
        let info = resolve_in(&claude(), 64_000, None, "off", &params("other")).unwrap();
        assert_eq!(info.default_max_tokens, Some(DEFAULT_MAX_TOKENS));
    }

    #[test]
    fn a_configured_entry_wins() {
        let catalog = vec![Model {
            id: "deepseek-v4-pro".into(),
            context_window: Some(1_000_000),
            max_tokens: Some(256_000),
            ..Model::default()
        }];
        let info = resolve_in(
            &catalog,
            DEFAULT_CONTEXT_WINDOW,
            None,
            "off",
            &params("deepseek-v4-pro"),
        )
        .unwrap();
        assert_eq!(info.context.unwrap().context_window, 1_000_000);
        assert_eq!(info.default_max_tokens, Some(256_000));
    }
}
