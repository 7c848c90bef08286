//! The plugin's config, with the original's defaults
//! (`compaction-basic/src/config.ts`).

use dsh_sdk::prelude::*;
use serde::Deserialize;

/// The row's `config`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Compact when the context reaches `floor(window × thresholdRatio)`.
    pub threshold_ratio: f64,
    /// Keep `floor(window × retainRatio)` tokens of recent history verbatim.
    pub retain_ratio: f64,
    /// Keep this many tokens instead (overrides `retainRatio`).
    pub retain_tokens: Option<u64>,
    /// The route that writes summaries (the conversation's when absent).
    pub summarization_provider: Option<String>,
    /// The model that writes summaries (with `summarizationProvider`).
    pub summarization_model: Option<String>,
    /// The output cap of a summary request.
    pub max_tokens: u64,
    /// Further compactions when one leaves the context above threshold.
    pub compaction_retries: u32,
    /// Retries of a step after `CONTEXT_WINDOW_EXCEEDED`.
    pub max_overflow_retries: u32,
    /// Compact automatically (before steps and on overflow); `/compact`
    /// works either way.
    pub auto: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            threshold_ratio: 0.8,
            retain_ratio: 0.16,
            retain_tokens: None,
            summarization_provider: None,
            summarization_model: None,
            max_tokens: 8192,
            compaction_retries: 1,
            max_overflow_retries: 1,
            auto: true,
        }
    }
}

impl Config {
    /// Refuses ratios outside (0, 1], a zero output cap, and half a
    /// summarization route.
    pub fn checked(self) -> Result<Config> {
        let bad = |why: String| Err(Error::new(codes::INVALID_CONFIG, why));
        for (name, v) in [
            ("thresholdRatio", self.threshold_ratio),
            ("retainRatio", self.retain_ratio),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return bad(format!(
                    "compaction-basic: {name} must be in (0, 1], not {v}"
                ));
            }
        }
        if self.max_tokens == 0 {
            return bad("compaction-basic: maxTokens must be at least 1".into());
        }
        if self.summarization_provider.is_some() != self.summarization_model.is_some() {
            return bad(
                "compaction-basic: set both summarizationProvider and summarizationModel, or neither"
                    .into(),
            );
        }
        Ok(self)
    }

    /// The threshold for a window.
    pub fn threshold(&self, window: u64) -> u64 {
        (window as f64 * self.threshold_ratio).floor() as u64
    }

    /// The verbatim tail for a window.
    pub fn retain(&self, window: u64) -> u64 {
        self.retain_tokens
            .unwrap_or_else(|| (window as f64 * self.retain_ratio).floor() as u64)
    }

    /// The configured summarization route.
    pub fn summarization_route(&self) -> Option<(String, String)> {
        Some((
            self.summarization_provider.clone()?,
            self.summarization_model.clone()?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::Value;
    use serde_json::json;

    #[test]
    fn defaults_are_the_originals_and_bad_values_are_refused() {
        let c = Config::default().checked().unwrap();
        assert_eq!(c.threshold(1_000_000), 800_000);
        assert_eq!(c.retain(1_000_000), 160_000);
        assert_eq!(c.threshold(10_001), 8000);
        assert_eq!(
            (c.max_tokens, c.compaction_retries, c.max_overflow_retries),
            (8192, 1, 1)
        );
        let parse = |v: Value| {
            serde_json::from_value::<Config>(v)
                .map_err(|e| e.to_string())
                .and_then(|c| c.checked().map_err(|e| e.message))
        };
        assert!(parse(json!({"thresholdRatio": 0}))
            .unwrap_err()
            .contains("thresholdRatio"));
        assert!(parse(json!({"retainRatio": 1.5}))
            .unwrap_err()
            .contains("retainRatio"));
        assert!(parse(json!({"maxTokens": 0})).is_err());
        assert!(parse(json!({"summarizationProvider": "p"}))
            .unwrap_err()
            .contains("both"));
        assert!(parse(json!({"threshold": 0.5})).is_err());
        assert_eq!(
            parse(json!({"retainTokens": 7})).unwrap().retain(1_000_000),
            7
        );
    }
}
