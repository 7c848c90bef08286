//! What DeepSeek's models cost, in US dollars per million tokens: the one
//! place `/status` reads prices from.
//!
//! Source: DeepSeek API documentation, "Models & Pricing"
//! (<https://api-docs.deepseek.com/quick_start/pricing>), the prices of
//! `deepseek-chat` and `deepseek-reasoner` (DeepSeek-V3.2) in force from
//! 2025-09-29. The harness's reference (`shared/reference/*.md`) gives no
//! prices. A model that is not here (the `deepseek-v4-*` routes among them,
//! whose prices were not at hand) costs "unknown" rather than a guess;
//! add a row when its price is published.

/// One model's prices, US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Input tokens served from the provider's prefix cache.
    pub cache_hit: f64,
    /// Input tokens not in the cache.
    pub cache_miss: f64,
    /// Output tokens (reasoning included).
    pub output: f64,
}

/// Same price for both V3.2 routes.
const V3_2: Price = Price {
    cache_hit: 0.028,
    cache_miss: 0.28,
    output: 0.42,
};

/// The table: (model, price).
const TABLE: [(&str, Price); 2] = [("deepseek-chat", V3_2), ("deepseek-reasoner", V3_2)];

/// The price of `model`, if the table has it.
pub fn of(model: &str) -> Option<Price> {
    TABLE.iter().find(|(m, _)| *m == model).map(|(_, p)| *p)
}

impl Price {
    /// What `miss` uncached input, `hit` cached input and `output` output
    /// tokens cost, in US dollars.
    pub fn cost(&self, miss: u64, hit: u64, output: u64) -> f64 {
        let per_token = |n: u64, per_million: f64| n as f64 * per_million / 1_000_000.0;
        per_token(miss, self.cache_miss)
            + per_token(hit, self.cache_hit)
            + per_token(output, self.output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_models_have_prices_and_others_do_not() {
        let p = of("deepseek-chat").unwrap();
        assert!((p.cost(1_000_000, 1_000_000, 1_000_000) - 0.728).abs() < 1e-9);
        assert_eq!(of("deepseek-reasoner"), Some(p));
        assert_eq!(of("m1"), None);
    }
}
