//! Call-config resolution (the original's `resolveCallWithInfo`): a call
//! config checked against its model's metadata, with the model's defaults
//! materialized where the call set none.
//!
//! - `maxTokens`: a call without one gets the model's `defaultMaxTokens`;
//!   an explicit cap is kept as it is.
//! - `reasoningEffort`: a model without reasoning metadata takes none (an
//!   effort is refused); otherwise the effective effort is the call's, or
//!   the model's `defaultEffort`, and it must be one the model lists. An
//!   effort the model does not offer is refused, never clamped or aliased
//!   to another.
//!
//! Each field filled in is marked in `adapterDefaults`, which the loop logs
//! in `request/header` so a later request can tell a default from a choice.

use dsh_sdk::api::llm::{ModelInfo, ResolvedCall};
use dsh_sdk::names::code;
use dsh_sdk::vocab::records::{AdapterDefaults, CallConfig};
use dsh_sdk::Error;

/// `config` resolved against `info`, the metadata of its model; refused
/// with `UNSUPPORTED_REASONING_EFFORT` when the effort is not the model's.
pub fn resolve(mut config: CallConfig, info: &ModelInfo) -> Result<ResolvedCall, Error> {
    let mut marked = AdapterDefaults::default();
    if config.max_tokens.is_none() {
        if let Some(cap) = info.default_max_tokens {
            config.max_tokens = Some(cap);
            marked.max_tokens = Some(true);
        }
    }
    let requested = config.reasoning_effort.is_some();
    let effective = match &info.reasoning {
        None => {
            if let Some(effort) = &config.reasoning_effort {
                return Err(unsupported(
                    &config,
                    effort,
                    "it takes no reasoning effort; remove `reasoningEffort` from the call",
                ));
            }
            None
        }
        Some(reasoning) => {
            let effective = config
                .reasoning_effort
                .clone()
                .or_else(|| reasoning.default_effort.clone());
            if let Some(effort) = &effective {
                if !reasoning.efforts.iter().any(|e| e.id == *effort) {
                    let offered: Vec<String> = reasoning
                        .efforts
                        .iter()
                        .map(|e| format!("\"{}\"", e.id))
                        .collect();
                    let why = format!("it offers {}", offered.join(", "));
                    return Err(unsupported(&config, effort, &why));
                }
            }
            effective
        }
    };
    if !requested && effective.is_some() {
        config.reasoning_effort = effective;
        marked.reasoning_effort = Some(true);
    }
    Ok(ResolvedCall {
        config,
        adapter_defaults: marked,
        context: info.context,
    })
}

/// The refusal of `effort` for `config`'s model, in the original's words,
/// then `why` (what the model takes instead).
fn unsupported(config: &CallConfig, effort: &str, why: &str) -> Error {
    Error::new(
        code::UNSUPPORTED_REASONING_EFFORT,
        format!(
            "provider \"{}\" model \"{}\" does not support reasoning effort \"{effort}\"; {why}",
            config.provider, config.model
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::api::llm::{
        ModelContext, ModelInfoParams, ModelReasoningInfo, ReasoningEffortInfo,
    };
    use dsh_sdk::vocab::Extra;

    fn config(effort: Option<&str>, max_tokens: Option<u64>) -> CallConfig {
        CallConfig {
            provider: "route".into(),
            model: "model".into(),
            reasoning_effort: effort.map(str::to_owned),
            temperature: None,
            max_tokens,
            stop: None,
            extra: Extra::new(),
        }
    }

    fn model(efforts: &[&str], default: Option<&str>, cap: Option<u64>) -> ModelInfo {
        let reasoning = (!efforts.is_empty()).then(|| ModelReasoningInfo {
            efforts: efforts
                .iter()
                .map(|id| ReasoningEffortInfo {
                    id: (*id).to_owned(),
                    name: id.to_uppercase(),
                    description: None,
                })
                .collect(),
            default_effort: default.map(str::to_owned),
        });
        ModelInfo {
            default_max_tokens: cap,
            reasoning,
            context: Some(ModelContext {
                context_window: 64_000,
            }),
            ..ModelInfo::bare(&ModelInfoParams {
                provider: "route".into(),
                model: "model".into(),
            })
        }
    }

    #[test]
    fn the_default_cap_is_materialized_and_an_explicit_one_kept() {
        let info = model(&[], None, Some(256_000));
        let r = resolve(config(None, None), &info).unwrap();
        assert_eq!(r.config.max_tokens, Some(256_000));
        assert_eq!(r.adapter_defaults.max_tokens, Some(true));
        assert_eq!(r.context.map(|c| c.context_window), Some(64_000));
        let r = resolve(config(None, Some(8_192)), &info).unwrap();
        assert_eq!(r.config, config(None, Some(8_192)));
        assert_eq!(r.adapter_defaults, AdapterDefaults::default());
        // A model without a default leaves the call without a cap.
        let r = resolve(config(None, None), &model(&[], None, None)).unwrap();
        assert_eq!(r.config.max_tokens, None);
        assert_eq!(r.adapter_defaults, AdapterDefaults::default());
    }

    #[test]
    fn the_default_effort_is_materialized_and_an_offered_one_kept() {
        let info = model(&["standard", "ultra"], Some("standard"), None);
        let r = resolve(config(None, None), &info).unwrap();
        assert_eq!(r.config.reasoning_effort.as_deref(), Some("standard"));
        assert_eq!(r.adapter_defaults.reasoning_effort, Some(true));
        let r = resolve(config(Some("ultra"), None), &info).unwrap();
        assert_eq!(r.config, config(Some("ultra"), None));
        assert_eq!(r.adapter_defaults, AdapterDefaults::default());
        // Efforts without a default: a call that names none gets none.
        let r = resolve(config(None, None), &model(&["standard"], None, None)).unwrap();
        assert_eq!(r.config.reasoning_effort, None);
        assert_eq!(r.adapter_defaults, AdapterDefaults::default());
    }

    /// The original's `rejects unsupported reasoning efforts without
    /// clamping`: neither to the model's only effort, nor to nothing.
    #[test]
    fn an_effort_the_model_does_not_offer_is_refused_not_clamped() {
        let e = resolve(
            config(Some("standard"), None),
            &model(&["ultra"], None, None),
        )
        .unwrap_err();
        assert_eq!(e.code, code::UNSUPPORTED_REASONING_EFFORT);
        assert_eq!(
            e.message,
            "provider \"route\" model \"model\" does not support reasoning effort \"standard\"; it offers \"ultra\""
        );
        let e = resolve(config(Some("standard"), None), &model(&[], None, None)).unwrap_err();
        assert_eq!(e.code, code::UNSUPPORTED_REASONING_EFFORT);
        assert!(
            e.message
                .ends_with("it takes no reasoning effort; remove `reasoningEffort` from the call"),
            "{}",
            e.message
        );
    }
}
