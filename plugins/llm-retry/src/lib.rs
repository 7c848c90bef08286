//! `llm-retry`: retries retryable failures at the step boundary through the
//! `agent/request-error` waterfall (reference dsh-core §3.10, dsh-product
//! §3.1): exponential backoff with jitter, honoring the provider's
//! `Retry-After`; each retry is logged as an `llm/retry` session event.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use dsh_sdk::api::agent_loop::{RequestError, RequestErrorDecision};
use dsh_sdk::api::sessions::{NewEvent, Sessions};
use dsh_sdk::names::{bus, service};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::event;
use dsh_sdk::vocab::RETRYABLE_CODES;
use serde::Deserialize;

/// The original's retry modes (`retryPolicy.mode`): `normal` retries the
/// retryable codes up to `maxRetries`; `always` retries every model-request
/// failure, without a limit, until success, a cancel or disposal.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Default)]
#[serde(rename_all = "lowercase")]
enum Mode {
    #[default]
    Normal,
    Always,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Normal => "normal",
            Mode::Always => "always",
        }
    }
}

#[derive(Deserialize, Clone)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    mode: Mode,
    /// Ignored in `always` mode (the original keeps it across a mode switch).
    max_retries: u32,
    initial_delay_ms: u64,
    max_delay_ms: u64,
    jitter_ratio: f64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::Normal,
            max_retries: 5,
            initial_delay_ms: 500,
            max_delay_ms: 10_000,
            jitter_ratio: 0.1,
        }
    }
}

impl Config {
    /// Whether a failure with `code` earns retry number `attempt`.
    fn retries(&self, code: &str, attempt: u32) -> bool {
        match self.mode {
            Mode::Always => true,
            Mode::Normal => RETRYABLE_CODES.contains(&code) && attempt <= self.max_retries,
        }
    }

    /// The `llm/retry` event of retry `attempt`: the policy's mode, and its
    /// limit only in `normal` mode (`always` has none).
    fn retry_event(
        &self,
        (turn, step): (u64, u64),
        attempt: u32,
        wait: u64,
        failure: &Value,
    ) -> Value {
        let mut data = json!({"turn": turn, "step": step, "mode": self.mode.name(), "attempt": attempt,
                              "delayMs": wait, "failure": failure});
        if self.mode == Mode::Normal {
            data["maxRetries"] = json!(self.max_retries);
        }
        data
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
    const INJECT: &'static [&'static str] = &[service::SESSIONS];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let attempts: Attempts = Rc::default();
        let c = ctx.clone();
        ctx.on(bus::AGENT_REQUEST_ERROR, move |ev| {
            let (c, config, attempts) = (c.clone(), config.clone(), attempts.clone());
            async move {
                let p: RequestError = ev.payload_as()?;
                let failure = &p.failure;
                let code = failure["code"].as_str().unwrap_or_default();
                let (agent, turn, step) = (p.agent.clone(), p.turn, p.step);
                let key = (agent.clone(), turn, step);
                let attempt = attempts.borrow().get(&key).copied().unwrap_or(0) + 1;
                if config.mode == Mode::Always {
                    // Specialized recovery downstream decides first; a
                    // retry it chose stands, anything else falls back here.
                    match ev.forward().await {
                        Ok(d) if d["kind"] == RequestErrorDecision::RETRY => return Ok(d),
                        Ok(_) => {}
                        Err(e) => dsh_sdk::tracing::warn!(
                            "llm-retry: the always policy ignored a downstream recovery failure: {e}"
                        ),
                    }
                }
                if !config.retries(code, attempt) {
                    attempts.borrow_mut().remove(&key);
                    return ev.forward().await;
                }
                attempts.borrow_mut().insert(key, attempt);
                let wait = delay_ms(&config, attempt, failure["providerRetryAfterMs"].as_u64());
                let data = config.retry_event((turn, step), attempt, wait, failure);
                Sessions::new(&c)
                    .append(&agent, NewEvent::new(event::LLM_RETRY, data))
                    .await?;
                tokio::time::sleep(Duration::from_millis(wait)).await;
                Ok(serde_json::to_value(RequestErrorDecision::retry())?)
            }
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Retry);

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::names::{code, llm_failure};

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
                llm_failure::EMPTY_RESPONSE,
                llm_failure::RATE_LIMIT,
                llm_failure::SERVER,
                llm_failure::TIMEOUT,
                llm_failure::TRANSPORT
            ]
        );
    }

    fn config(v: Value) -> Config {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn always_mode_retries_every_code_without_a_limit() {
        let always = config(json!({"mode": "always", "maxRetries": 1}));
        assert_eq!(always.mode, Mode::Always);
        for code in [
            llm_failure::INVALID_REQUEST,
            llm_failure::AUTH,
            codes::UNKNOWN,
            code::ABORTED,
            llm_failure::SERVER,
        ] {
            assert!(always.retries(code, 1), "{code}");
            assert!(always.retries(code, 1_000_000), "{code}");
        }
        let normal = config(json!({"maxRetries": 1}));
        assert_eq!(normal.mode, Mode::Normal);
        assert!(normal.retries(llm_failure::SERVER, 1));
        assert!(!normal.retries(llm_failure::SERVER, 2));
        assert!(!normal.retries(llm_failure::INVALID_REQUEST, 1));
        assert!(serde_json::from_value::<Config>(json!({"mode": "sometimes"})).is_err());
    }

    #[test]
    fn always_mode_keeps_the_backoff_and_logs_no_limit() {
        let always = config(json!({"mode": "always", "jitterRatio": 0.0}));
        assert_eq!(delay_ms(&always, 1, None), 500);
        assert_eq!(delay_ms(&always, 30, None), 10_000);
        let event = always.retry_event((1, 2), 7, 500, &json!({"code": llm_failure::AUTH}));
        assert_eq!(event["mode"], "always");
        assert!(event.get("maxRetries").is_none());
        let normal = config(json!({}));
        let event = normal.retry_event((1, 2), 1, 500, &json!({"code": llm_failure::SERVER}));
        assert_eq!(
            (event["mode"].clone(), event["maxRetries"].clone()),
            (json!("normal"), json!(5))
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
