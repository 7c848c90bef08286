//! The checks of an adapter's model metadata (`resolveModel`), as the
//! original's `normalizeModelInfo` makes them: the model asked about, a
//! display name, a positive window and output cap, and reasoning efforts
//! that are well formed, unique, and include the default.

use std::collections::HashSet;

use dsh_sdk::api::llm::{ModelInfo, ModelInfoParams, ModelReasoningInfo};
use dsh_sdk::Error;

/// The codes of the refusals.
pub mod error_code {
    /// An adapter's model metadata is not the model asked about.
    pub const INVALID_MODEL_INFO: &str = "INVALID_MODEL_INFO";
    /// An adapter's context window is not positive.
    pub const INVALID_MODEL_CONTEXT: &str = "INVALID_MODEL_CONTEXT";
    /// An adapter's default output cap is not a positive safe integer.
    pub const INVALID_MODEL_MAX_TOKENS: &str = "INVALID_MODEL_MAX_TOKENS";
    /// An adapter's reasoning efforts are empty, malformed, duplicated, or
    /// do not include the default.
    pub const INVALID_MODEL_REASONING: &str = "INVALID_MODEL_REASONING";
}

/// JavaScript's `Number.MAX_SAFE_INTEGER`: the largest output cap the
/// original accepts.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// `info` when it is metadata of the model `asked` names, else the
/// refusal naming the route, the model and the fault.
pub fn check(info: &ModelInfo, asked: &ModelInfoParams) -> Result<(), Error> {
    let (provider, model) = (&asked.provider, &asked.model);
    let refused = |code: &str, what: &str| {
        Error::new(
            code,
            format!("adapter returned {what} for provider \"{provider}\" model \"{model}\""),
        )
    };
    if info.provider != *provider || info.id != *model || info.name.is_empty() {
        return Err(refused(
            error_code::INVALID_MODEL_INFO,
            "invalid exact model metadata",
        ));
    }
    if info.context.is_some_and(|c| c.context_window == 0) {
        return Err(refused(
            error_code::INVALID_MODEL_CONTEXT,
            "invalid context metadata",
        ));
    }
    if info
        .default_max_tokens
        .is_some_and(|n| n == 0 || n > MAX_SAFE_INTEGER)
    {
        return Err(refused(
            error_code::INVALID_MODEL_MAX_TOKENS,
            "invalid default maxTokens",
        ));
    }
    match info.reasoning.as_ref().map(reasoning_fault) {
        Some(Some(what)) => Err(refused(error_code::INVALID_MODEL_REASONING, what)),
        _ => Ok(()),
    }
}

/// What is wrong with `reasoning`, in the original's words, if anything.
fn reasoning_fault(reasoning: &ModelReasoningInfo) -> Option<&'static str> {
    if reasoning.efforts.is_empty() {
        return Some("invalid reasoning metadata");
    }
    let mut seen = HashSet::new();
    for effort in &reasoning.efforts {
        if effort.id.is_empty() || effort.name.is_empty() || !seen.insert(effort.id.as_str()) {
            return Some("invalid or duplicate reasoning effort metadata");
        }
    }
    match &reasoning.default_effort {
        Some(d) if !seen.contains(d.as_str()) => Some("an unknown default reasoning effort"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::api::llm::{ModelContext, ReasoningEffortInfo};

    fn asked() -> ModelInfoParams {
        ModelInfoParams {
            provider: "route".into(),
            model: "model".into(),
        }
    }

    fn effort(id: &str, name: &str) -> ReasoningEffortInfo {
        ReasoningEffortInfo {
            id: id.into(),
            name: name.into(),
            description: None,
        }
    }

    fn with_reasoning(efforts: Vec<ReasoningEffortInfo>, default: Option<&str>) -> ModelInfo {
        ModelInfo {
            reasoning: Some(ModelReasoningInfo {
                efforts,
                default_effort: default.map(str::to_owned),
            }),
            ..ModelInfo::bare(&asked())
        }
    }

    fn code(info: &ModelInfo) -> Option<String> {
        check(info, &asked()).err().map(|e| e.code)
    }

    #[test]
    fn well_formed_metadata_passes() {
        let mut info = with_reasoning(
            vec![effort("high", "High"), effort("max", "Max")],
            Some("max"),
        );
        info.context = Some(ModelContext {
            context_window: 4096,
        });
        info.default_max_tokens = Some(MAX_SAFE_INTEGER);
        assert_eq!(code(&info), None);
        assert_eq!(code(&ModelInfo::bare(&asked())), None);
    }

    #[test]
    fn identity_window_and_cap_are_checked() {
        let mut other = ModelInfo::bare(&asked());
        other.id = "other".into();
        assert_eq!(
            code(&other).as_deref(),
            Some(error_code::INVALID_MODEL_INFO)
        );
        let mut unnamed = ModelInfo::bare(&asked());
        unnamed.name.clear();
        assert_eq!(
            code(&unnamed).as_deref(),
            Some(error_code::INVALID_MODEL_INFO)
        );
        let mut no_window = ModelInfo::bare(&asked());
        no_window.context = Some(ModelContext { context_window: 0 });
        assert_eq!(
            code(&no_window).as_deref(),
            Some(error_code::INVALID_MODEL_CONTEXT)
        );
        for cap in [0, MAX_SAFE_INTEGER + 1] {
            let mut info = ModelInfo::bare(&asked());
            info.default_max_tokens = Some(cap);
            assert_eq!(
                code(&info).as_deref(),
                Some(error_code::INVALID_MODEL_MAX_TOKENS),
                "{cap}"
            );
        }
    }

    /// The original's `rejects invalid model reasoning metadata` cases.
    #[test]
    fn malformed_reasoning_metadata_is_refused() {
        for (info, what) in [
            (with_reasoning(vec![], None), "invalid reasoning metadata"),
            (
                with_reasoning(vec![effort("", "Empty")], None),
                "invalid or duplicate reasoning effort metadata",
            ),
            (
                with_reasoning(vec![effort("valid", "")], None),
                "invalid or duplicate reasoning effort metadata",
            ),
            (
                with_reasoning(vec![effort("same", "One"), effort("same", "Two")], None),
                "invalid or duplicate reasoning effort metadata",
            ),
            (
                with_reasoning(vec![effort("valid", "Valid")], Some("other")),
                "an unknown default reasoning effort",
            ),
        ] {
            let e = check(&info, &asked()).unwrap_err();
            assert_eq!(e.code, error_code::INVALID_MODEL_REASONING);
            assert_eq!(
                e.message,
                format!("adapter returned {what} for provider \"route\" model \"model\"")
            );
        }
    }
}
