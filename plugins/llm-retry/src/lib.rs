//! `llm-retry`: retries retryable failures at the step boundary through the
//! `agent/request-error` waterfall (reference dsh-core §3.10, dsh-product
//! §3.1): exponential backoff with jitter, honoring the provider's
//! `Retry-After`; each retry is logged as an `llm/retry` session event.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use dsh_sdk::prelude::*;
use dsh_sdk::vocab::RETRYABLE_CODES;
use serde::Deserialize;

#[derive(Deserialize, Clone)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    max_retries: u32,
    initial_delay_ms: u64,
    max_delay_ms: u64,
    jitter_ratio: f64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_retries: 5,
            initial_delay_ms: 500,
            max_delay_ms: 10_000,
            jitter_ratio: 0.1,
        }
    }
}

/// Backoff for `attempt` (1-based), jittered, at least `retry_after`.
fn delay_ms(c: &Config, attempt: u32, retry_after: Option<u64>) -> u64 {
    let base = c
        .initial_delay_ms
        .saturating_mul(1u64 << (attempt - 1).min(20))
        .min(c.max_delay_ms);
    let noise = f64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
            % 2001,
    ) / 1000.0
        - 1.0; // [-1, 1]
    let jittered = (base as f64 * (1.0 + c.jitter_ratio * noise)).max(0.0) as u64;
    match retry_after {
        Some(ra) if ra <= c.max_delay_ms => jittered.max(ra),
        _ => jittered,
    }
}

/// Retries so far per (agent, turn, step).
type Attempts = Rc<RefCell<HashMap<(String, u64, u64), u32>>>;

struct Retry;

impl Plugin for Retry {
    const NAME: &'static str = "llm-retry";
    const DESCRIPTION: &'static str = "retries retryable model failures";
    const INJECT: &'static [&'static str] = &["sessions"];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let attempts: Attempts = Rc::default();
        let c = ctx.clone();
        ctx.on("agent/request-error", move |ev| {
            let (c, config, attempts) = (c.clone(), config.clone(), attempts.clone());
            async move {
                let p = &ev.payload;
                let code = p["failure"]["code"].as_str().unwrap_or_default();
                let agent = p["agent"].as_str().unwrap_or_default().to_owned();
                let (turn, step) = (p["turn"].as_u64().unwrap_or(0), p["step"].as_u64().unwrap_or(0));
                let key = (agent.clone(), turn, step);
                let attempt = attempts.borrow().get(&key).copied().unwrap_or(0) + 1;
                if !RETRYABLE_CODES.contains(&code) || attempt > config.max_retries {
                    attempts.borrow_mut().remove(&key);
                    return ev.next(p.clone()).await;
                }
                attempts.borrow_mut().insert(key, attempt);
                let wait = delay_ms(&config, attempt, p["failure"]["providerRetryAfterMs"].as_u64());
                c.service("sessions")
                    .call("append", json!({"id": agent, "type": "llm/retry",
                        "data": {"turn": turn, "step": step, "attempt": attempt, "delayMs": wait, "failure": p["failure"]}}))
                    .await?;
                tokio::time::sleep(Duration::from_millis(wait)).await;
                Ok(json!({"kind": "retry"}))
            }
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Retry);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_policy_is_the_originals_normal_mode() {
        let c = Config::default();
        assert_eq!(
            (
                c.max_retries,
                c.initial_delay_ms,
                c.max_delay_ms,
                c.jitter_ratio
            ),
            (5, 500, 10_000, 0.1)
        );
        assert_eq!(
            RETRYABLE_CODES,
            [
                "EMPTY_RESPONSE",
                "RATE_LIMIT",
                "SERVER",
                "TIMEOUT",
                "TRANSPORT"
            ]
        );
    }

    #[test]
    fn backoff_grows_caps_and_honors_retry_after() {
        let c = Config {
            jitter_ratio: 0.0,
            ..Config::default()
        };
        assert_eq!(delay_ms(&c, 1, None), 500);
        assert_eq!(delay_ms(&c, 3, None), 2000);
        assert_eq!(delay_ms(&c, 9, None), 10_000);
        assert_eq!(delay_ms(&c, 1, Some(3000)), 3000);
        assert_eq!(delay_ms(&c, 1, Some(60_000)), 500);
    }
}
