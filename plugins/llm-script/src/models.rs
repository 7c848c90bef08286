//! The adapter's model catalog (config `models`), answering `resolveModel`:
//! a listed model's name, context window, default output cap and reasoning
//! efforts, passed on as configured (the `llm` router checks them, so a
//! script can also play an adapter that gets them wrong). A model the
//! catalog does not list gets its id as its name and nothing more.
//!
//! A listed model may take time to describe (`lookupDelayMs`), as a local
//! server's first metadata request does. Such a lookup is announced on the
//! bus as [`LOOKUP_EVENT`] when it starts, and again if its caller drops it
//! before it answers, so a test can see a slow lookup begin and be
//! abandoned.

use std::time::Duration;

use dsh_sdk::api::llm::{ModelContext, ModelInfo, ModelInfoParams, ModelReasoningInfo};
use dsh_sdk::Context;
use serde::{Deserialize, Serialize};

/// The bus event announcing a slow lookup's start and its abandonment
/// (payload [`Lookup`]).
pub const LOOKUP_EVENT: &str = "llm-script/lookup";

/// One entry of config `models`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct ScriptedModel {
    /// The model id a request names.
    pub id: String,
    /// A display name (the id when absent).
    pub name: Option<String>,
    /// Its context window in tokens.
    pub context_window: Option<u64>,
    /// The output cap a request without one gets.
    pub default_max_tokens: Option<u64>,
    /// The reasoning efforts it offers (`{efforts: [{id, name,
    /// description?}], defaultEffort?}`); none means it takes no effort.
    pub reasoning: Option<ModelReasoningInfo>,
    /// How long describing it takes, in milliseconds.
    pub lookup_delay_ms: u64,
}

/// Payload of [`LOOKUP_EVENT`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lookup<'a> {
    /// The route asked about.
    pub provider: &'a str,
    /// The model asked about.
    pub model: &'a str,
    /// `started`, or `dropped` when the caller went away first.
    pub state: &'static str,
}

/// What the catalog says of `params.model`.
pub fn describe(models: &[ScriptedModel], params: &ModelInfoParams) -> ModelInfo {
    let Some(entry) = models.iter().find(|m| m.id == params.model) else {
        return ModelInfo::bare(params);
    };
    ModelInfo {
        name: entry.name.clone().unwrap_or_else(|| params.model.clone()),
        context: entry
            .context_window
            .map(|context_window| ModelContext { context_window }),
        default_max_tokens: entry.default_max_tokens,
        reasoning: entry.reasoning.clone(),
        ..ModelInfo::bare(params)
    }
}

/// The `resolveModel` answer: [`describe`], after the entry's
/// `lookupDelayMs`, announced on the bus while it waits.
pub async fn resolve(
    ctx: &Context,
    models: &[ScriptedModel],
    params: &ModelInfoParams,
) -> ModelInfo {
    let delay = models
        .iter()
        .find(|m| m.id == params.model)
        .map_or(0, |m| m.lookup_delay_ms);
    if delay > 0 {
        let announce = |state| {
            let lookup = Lookup {
                provider: &params.provider,
                model: &params.model,
                state,
            };
            // A bus without listeners is no failure of the lookup.
            let _ = ctx.emit(LOOKUP_EVENT, &lookup);
        };
        announce("started");
        /// Announces `dropped` unless disarmed: the caller went away while
        /// the lookup waited.
        struct Abandoned<F: Fn(&'static str)>(Option<F>);
        impl<F: Fn(&'static str)> Drop for Abandoned<F> {
            fn drop(&mut self) {
                if let Some(announce) = self.0.take() {
                    announce("dropped");
                }
            }
        }
        let mut guard = Abandoned(Some(announce));
        tokio::time::sleep(Duration::from_millis(delay)).await;
        guard.0 = None;
    }
    describe(models, params)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(model: &str) -> ModelInfoParams {
        ModelInfoParams {
            provider: "script".into(),
            model: model.into(),
        }
    }

    #[test]
    fn a_listed_model_is_described_as_configured_and_another_bare() {
        let models: Vec<ScriptedModel> = serde_json::from_str(
            r#"[{"id": "small", "name": "Small", "contextWindow": 4096, "defaultMaxTokens": 512,
                 "reasoning": {"efforts": [{"id": "high", "name": "High"}], "defaultEffort": "high"}},
                {"id": "plain"}]"#,
        )
        .unwrap();
        let small = describe(&models, &params("small"));
        assert_eq!(small.name, "Small");
        assert_eq!(small.context.map(|c| c.context_window), Some(4096));
        assert_eq!(small.default_max_tokens, Some(512));
        assert_eq!(
            small.reasoning.unwrap().default_effort.as_deref(),
            Some("high")
        );
        assert_eq!(
            describe(&models, &params("plain")),
            ModelInfo::bare(&params("plain"))
        );
        assert_eq!(
            describe(&models, &params("other")),
            ModelInfo::bare(&params("other"))
        );
    }

    #[test]
    fn an_entry_with_an_unknown_key_is_refused() {
        let e = serde_json::from_str::<Vec<ScriptedModel>>(r#"[{"id": "m", "window": 1}]"#)
            .unwrap_err();
        assert!(e.to_string().contains("unknown field `window`"), "{e}");
    }
}
