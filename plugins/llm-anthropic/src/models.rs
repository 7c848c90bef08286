//! The route's model catalog (`resolveModel`): names, context windows and
//! default output caps of Claude models, with the config's overrides for
//! any other Messages-API route (DeepSeek's `/anthropic`, a proxy).
//!
//! The default entries are this adapter's choice, not something a server
//! reports: Claude models this adapter was written against, each with a
//! 200,000-token window and the output cap Anthropic documents for it. A
//! route whose models differ lists them in the config's `models`.

use dsh_sdk::api::llm::{
    ModelContext, ModelInfo, ModelInfoParams, ModelReasoningInfo, ReasoningEffortInfo,
};
use dsh_sdk::Result;
use serde::Deserialize;

/// The context window of a model the catalog does not list, unless the
/// config says otherwise (every current Claude model reads at least this
/// much).
pub const DEFAULT_CONTEXT_WINDOW: u64 = 200_000;

/// The output cap of a model the catalog does not list, unless the config
/// says otherwise: a cap every current Claude model accepts (a larger
/// `max_tokens` than a model allows is refused with HTTP 400).
pub const DEFAULT_MAX_TOKENS: u64 = 8_192;

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
    /// Its context window (the default window when absent).
    pub context_window: Option<u64>,
    /// Its default output cap (`max_tokens` of a request that sets none).
    pub max_tokens: Option<u64>,
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
/// snapshot (`claude-sonnet-4-5-20250929` is `claude-sonnet-4-5`).
fn names(entry: &Model, model: &str) -> bool {
    match model.strip_prefix(entry.id.as_str()) {
        Some("") => true,
        Some(rest) => rest
            .strip_prefix('-')
            .is_some_and(|date| date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit())),
        None => false,
    }
}

/// The catalog's entry for `model`: an exact id first, then a dated
/// snapshot of a listed id.
pub fn entry<'a>(catalog: &'a [Model], model: &str) -> Option<&'a Model> {
    catalog
        .iter()
        .find(|m| m.id == model)
        .or_else(|| catalog.iter().find(|m| names(m, model)))
}

/// The output cap of a request to `model` that sets none: the model's,
/// else the config's `maxTokens`, else [`DEFAULT_MAX_TOKENS`].
pub fn default_max_tokens(catalog: &[Model], max_tokens: Option<u64>, model: &str) -> u64 {
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

/// What the route knows of `params.model`: the catalog's entry, or the
/// defaults for a model it does not list (which still passes through);
/// every model offers the thinking efforts, `effort` by default.
pub fn resolve(
    catalog: &[Model],
    default_window: u64,
    max_tokens: Option<u64>,
    effort: &str,
    params: &ModelInfoParams,
) -> Result<ModelInfo> {
    let entry = entry(catalog, &params.model);
    let window = entry
        .and_then(|m| m.context_window)
        .unwrap_or(default_window);
    Ok(ModelInfo {
        name: entry
            .and_then(|m| m.name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| params.model.clone()),
        description: entry.and_then(|m| m.description.clone()),
        context: Some(ModelContext {
            context_window: window,
        }),
        default_max_tokens: Some(default_max_tokens(catalog, max_tokens, &params.model)),
        reasoning: Some(reasoning(effort)),
        ..ModelInfo::bare(params)
    })
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

    #[test]
    fn claude_models_have_a_200k_window_and_their_output_cap() {
        let info = resolve(
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
        let info = resolve(
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
        let info = resolve(
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
        // Not a date: another model.
        for other in [
            "claude-sonnet-4-5x",
            "claude-sonnet-4-5-latest",
            "claude-sonnet-4",
        ] {
            assert!(entry(&claude(), other).is_none(), "{other}");
        }
    }

    #[test]
    fn an_unlisted_model_gets_the_configured_defaults() {
        let info = resolve(
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
        let info = resolve(&claude(), 64_000, None, "off", &params("other")).unwrap();
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
        let info = resolve(
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
