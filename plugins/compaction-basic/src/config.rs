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
    /// The output cap of a summary request, at most: a known window
    /// lowers it to `floor(window × summaryShare)`.
    pub max_tokens: u64,
    /// The share of the window a summary may take (its output cap).
    pub summary_share: f64,
    /// The share of the window one item may take: a tool result (the
    /// `maxResultTokens` the calls of one answer share, and what pruning
    /// keeps of an oversized one), or a message a request that cannot fit
    /// cuts.
    pub result_share: f64,
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
            summary_share: 0.25,
            result_share: 0.25,
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
            ("summaryShare", self.summary_share),
            ("resultShare", self.result_share),
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

    /// The output cap of a summary request on a route of `window` tokens
    /// (`maxTokens` when the window is unknown): at most `maxTokens`, at
    /// most `summaryShare` of the window, at least 1.
    pub fn summary_cap(&self, window: Option<u64>) -> u64 {
        match window {
            Some(w) => self.max_tokens.min(share(w, self.summary_share)).max(1),
            None => self.max_tokens,
        }
    }

    /// The estimated tokens one item may take of a window of `window`
    /// tokens (a tool result's `maxResultTokens`).
    pub fn item_tokens(&self, window: u64) -> u64 {
        share(window, self.result_share).max(1)
    }

    /// The configured summarization route.
    pub fn summarization_route(&self) -> Option<(String, String)> {
        Some((
            self.summarization_provider.clone()?,
            self.summarization_model.clone()?,
        ))
    }
}

/// `floor(window × ratio)`.
fn share(window: u64, ratio: f64) -> u64 {
    (window as f64 * ratio).floor() as u64
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
        assert!(parse(json!({"resultShare": 0}))
            .unwrap_err()
            .contains("resultShare"));
        assert!(parse(json!({"summaryShare": 2}))
            .unwrap_err()
            .contains("summaryShare"));
    }

    #[test]
    fn the_summary_and_an_item_take_a_share_of_a_known_window() {
        let c = Config::default().checked().unwrap();
        // A large window keeps the original's cap; a small one a quarter.
        assert_eq!(c.summary_cap(Some(1_000_000)), 8192);
        assert_eq!(c.summary_cap(Some(4096)), 1024);
        assert_eq!(c.summary_cap(None), 8192);
        assert_eq!(c.summary_cap(Some(2)), 1);
        // An item: a quarter of the window.
        assert_eq!(c.item_tokens(4096), 1024);
        assert_eq!(c.item_tokens(1_000_000), 250_000);
    }
}
