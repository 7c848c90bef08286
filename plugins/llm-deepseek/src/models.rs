//! The route's model catalog (`resolveModel`): names, context windows and
//! default output caps, as the original's DeepSeek adapter knows them, with
//! the config's overrides for any OpenAI-compatible route.

use dsh_sdk::api::llm::{ModelContext, ModelInfo, ModelInfoParams};
use dsh_sdk::Result;
use serde::Deserialize;

/// The context window of a model the catalog does not list, unless the
/// config says otherwise (the original's `DEFAULT_CONTEXT_WINDOW`).
pub const DEFAULT_CONTEXT_WINDOW: u64 = 1_000_000;

/// The output cap a request without one gets, unless the model or the
/// config says otherwise (the original's `DEFAULT_MAX_TOKENS`).
pub const DEFAULT_MAX_TOKENS: u64 = 256_000;

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
    /// Its default output cap.
    pub max_tokens: Option<u64>,
}

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

/// What the route knows of `params.model`: the catalog's entry, or the
/// defaults for a model it does not list (which still passes through).
pub fn resolve(
    catalog: &[Model],
    default_window: u64,
    max_tokens: Option<u64>,
    params: &ModelInfoParams,
) -> Result<ModelInfo> {
    let entry = catalog.iter().find(|m| m.id == params.model);
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
        default_max_tokens: Some(
            entry
                .and_then(|m| m.max_tokens)
                .or(max_tokens)
                .unwrap_or(DEFAULT_MAX_TOKENS),
        ),
        ..ModelInfo::bare(params)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(model: &str) -> ModelInfoParams {
        ModelInfoParams {
            provider: "deepseek-official".into(),
            model: model.into(),
        }
    }

    #[test]
    fn deepseeks_models_have_the_originals_window_and_cap() {
        let info = resolve(
            &deepseek(),
            DEFAULT_CONTEXT_WINDOW,
            None,
            &params("deepseek-v4-pro"),
        )
        .unwrap();
        assert_eq!(info.name, "DeepSeek-V4-Pro");
        assert_eq!(info.context.unwrap().context_window, 1_000_000);
        assert_eq!(info.default_max_tokens, Some(256_000));
    }

    #[test]
    fn an_unlisted_model_gets_the_configured_defaults() {
        let info = resolve(&deepseek(), 32_768, Some(4096), &params("qwen3")).unwrap();
        assert_eq!((info.id.as_str(), info.name.as_str()), ("qwen3", "qwen3"));
        assert_eq!(info.context.unwrap().context_window, 32_768);
        assert_eq!(info.default_max_tokens, Some(4096));
    }

    #[test]
    fn a_configured_entry_wins() {
        let catalog = vec![Model {
            id: "qwen3".into(),
            context_window: Some(131_072),
            max_tokens: Some(8192),
            ..Model::default()
        }];
        let info = resolve(
            &catalog,
            DEFAULT_CONTEXT_WINDOW,
            Some(4096),
            &params("qwen3"),
        )
        .unwrap();
        assert_eq!(info.context.unwrap().context_window, 131_072);
        assert_eq!(info.default_max_tokens, Some(8192));
    }
}
