//! `llm-retry`: retries retryable failures at the step boundary through the
//! `agent/request-error` waterfall (reference dsh-core §3.10, dsh-product
//! §3.1): exponential backoff with jitter, honoring the provider's
//! `Retry-After`. Each retry is logged as the original logs it: an
//! `llm/retry` record before the wait, an `llm/retry-started` record when
//! the wait is over and the request runs again. The retries of one
//! request (one agent, turn, step and provider route) form a chain that
//! shares one `retryId`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use dsh_sdk::api::agent_loop::{RequestError, RequestErrorDecision};
use dsh_sdk::api::sessions::{NewEvent, Sessions};
use dsh_sdk::names::{bus, service};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::event;
use dsh_sdk::vocab::records::{LlmRetry, LlmRetryStarted};
use dsh_sdk::vocab::{Extra, LlmFailure, RETRYABLE_CODES};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// The original's retry modes (`retryPolicy.mode`): `normal` retries the
/// retryable codes up to `maxRetries`; `always` retries every model-request
/// failure, without a limit, until success, a cancel or disposal.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Default)]
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

/// The retry policy ([`Config::policy_key`] names it in the records it
/// writes).
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

/// The request a chain of retries is about.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ChainKey {
    agent: String,
    turn: u64,
    step: u64,
    provider: String,
}

/// One retry: which request, its number in the chain, its chain's id.
struct Retry<'a> {
    key: &'a ChainKey,
    retry_id: String,
    retry: u32,
}

impl Config {
    /// The policy's `policyKey`, as the original writes it
    /// (`retryPolicyKey`): a JSON array as text. `normal`:
    /// `["normal",maxRetries,[retryable codes, sorted],initialDelayMs,maxDelayMs,jitterRatio]`;
    /// `always`: `["always",initialDelayMs,maxDelayMs,jitterRatio]`.
    /// Numbers are written as JavaScript's `JSON.stringify` writes them
    /// (`0`, not `0.0`), so a key matches the original's byte for byte.
    fn policy_key(&self) -> serde_json::Result<String> {
        let jitter = JsNumber(self.jitter_ratio);
        match self.mode {
            Mode::Always => serde_json::to_string(&(
                self.mode,
                self.initial_delay_ms,
                self.max_delay_ms,
                jitter,
            )),
            Mode::Normal => {
                let mut codes = RETRYABLE_CODES.to_vec();
                codes.sort_unstable();
                serde_json::to_string(&(
                    self.mode,
                    self.max_retries,
                    codes,
                    self.initial_delay_ms,
                    self.max_delay_ms,
                    jitter,
                ))
            }
        }
    }

    /// Whether a failure with `code` earns retry number `retry`.
    fn retries(&self, code: &str, retry: u32) -> bool {
        match self.mode {
            Mode::Always => true,
            Mode::Normal => RETRYABLE_CODES.contains(&code) && retry <= self.max_retries,
        }
    }

    /// The `llm/retry` record of `r`: the policy's mode and key, and its
    /// limit only in `normal` mode (`always` has none).
    fn retry_record(
        &self,
        policy_key: &str,
        r: &Retry<'_>,
        delay_ms: u64,
        failure: LlmFailure,
    ) -> LlmRetry {
        LlmRetry {
            retry_id: r.retry_id.clone(),
            turn: r.key.turn,
            step: r.key.step,
            provider: r.key.provider.clone(),
            mode: self.mode.name().to_owned(),
            policy_key: Some(policy_key.to_owned()),
            retry: r.retry,
            max_retries: (self.mode == Mode::Normal).then_some(self.max_retries),
            delay_ms,
            failure,
            extra: Extra::new(),
        }
    }
}

/// The `llm/retry-started` record of `r`.
fn started_record(r: &Retry<'_>) -> LlmRetryStarted {
    LlmRetryStarted {
        retry_id: r.retry_id.clone(),
        turn: r.key.turn,
        step: r.key.step,
        retry: r.retry,
        extra: Extra::new(),
    }
}

/// A number written as JavaScript writes it (`Number.prototype.toString`,
/// which `JSON.stringify` uses): integers without a fraction (`0`, `1`),
/// the shortest digits that read back, an exponent (`1e-7`, `1e+21`) only
/// outside 1e-6 ≤ |x| < 1e21; `null` for what is not finite.
struct JsNumber(f64);

impl JsNumber {
    /// The number's text.
    fn text(&self) -> Option<String> {
        let x = self.0;
        if !x.is_finite() {
            return None;
        }
        if x == 0.0 {
            return Some("0".to_owned());
        }
        let sign = if x < 0.0 { "-" } else { "" };
        // Rust's `{:e}` gives the shortest digits that read back, as
        // JavaScript picks them: `d[.ddd]e<exp>`.
        let sci = format!("{:e}", x.abs());
        let (mantissa, exp) = sci.split_once('e')?;
        let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
        let k = i64::try_from(digits.len()).ok()?;
        // The value is 0.d1d2… × 10^n.
        let n = exp.parse::<i64>().ok()? + 1;
        let body = if k <= n && n <= 21 {
            format!("{digits}{}", "0".repeat(usize::try_from(n - k).ok()?))
        } else if 0 < n && n <= 21 {
            let (int, frac) = digits.split_at(usize::try_from(n).ok()?);
            format!("{int}.{frac}")
        } else if -6 < n && n <= 0 {
            format!("0.{}{digits}", "0".repeat(usize::try_from(-n).ok()?))
        } else {
            let e = n - 1;
            let exp_sign = if e < 0 { '-' } else { '+' };
            let (first, rest) = digits.split_at(1);
            let dot = if rest.is_empty() { "" } else { "." };
            format!("{first}{dot}{rest}e{exp_sign}{}", e.unsigned_abs())
        };
        Some(format!("{sign}{body}"))
    }
}

impl Serialize for JsNumber {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self.text() {
            // The text is a JSON number: written as it is.
            Some(text) => RawValue::from_string(text)
                .map_err(serde::ser::Error::custom)?
                .serialize(s),
            None => s.serialize_unit(),
        }
    }
}

/// Backoff for retry `retry` (1-based), jittered, at least `retry_after`.
fn delay_ms(c: &Config, retry: u32, retry_after: Option<u64>) -> u64 {
    let base = c
        .initial_delay_ms
        .saturating_mul(1u64 << (retry - 1).min(20))
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

/// Whether a waterfall answer is the decision to retry (an answer that
/// is no decision is not). Listeners answer JSON (`Value` is the SDK's
/// listener type), read here as a [`RequestErrorDecision`].
fn is_retry(answer: &Value) -> bool {
    Option::<RequestErrorDecision>::deserialize(answer)
        .ok()
        .flatten()
        .is_some_and(|d| d.is_retry())
}

/// One chain of retries: its id and how many retries it had.
struct Chain {
    id: String,
    retries: u32,
}

/// The chains in progress (at most the current step's, per agent).
type Chains = Rc<RefCell<HashMap<ChainKey, Chain>>>;

/// What the listener keeps.
struct Policy {
    config: Config,
    /// The policy's key, as the records carry it ([`Config::policy_key`]).
    key: String,
    chains: Chains,
}

impl Policy {
    /// Answers one `agent/request-error`.
    async fn on_request_error(&self, ctx: &Context, ev: Event) -> Result<Value> {
        let p: RequestError<Option<LlmFailure>> = ev.payload_as()?;
        // A failed request without a failure has nothing to retry or log.
        let Some(failure) = p.failure else {
            return ev.forward().await;
        };
        let key = ChainKey {
            agent: p.agent,
            turn: p.turn,
            step: p.step,
            provider: p.provider,
        };
        let retry = self.chains.borrow().get(&key).map_or(0, |c| c.retries) + 1;
        if self.config.mode == Mode::Always {
            // Specialized recovery downstream decides first; a retry it
            // chose stands, anything else falls back here.
            match ev.forward().await {
                Ok(d) if is_retry(&d) => return Ok(d),
                Ok(_) => {}
                Err(e) => dsh_sdk::tracing::warn!(
                    "llm-retry: the always policy ignored a downstream recovery failure: {e}"
                ),
            }
        }
        if !self.config.retries(&failure.code, retry) {
            self.chains.borrow_mut().remove(&key);
            return ev.forward().await;
        }
        let retry_id = {
            let mut chains = self.chains.borrow_mut();
            // The agent's earlier steps are over: their chains are done.
            chains.retain(|k, _| k.agent != key.agent || (k.turn, k.step) == (key.turn, key.step));
            let chain = chains.entry(key.clone()).or_insert_with(|| Chain {
                id: dsh_sdk::new_id(),
                retries: 0,
            });
            chain.retries = retry;
            chain.id.clone()
        };
        let r = Retry {
            key: &key,
            retry_id,
            retry,
        };
        let wait = delay_ms(&self.config, retry, failure.provider_retry_after_ms);
        let record = self.config.retry_record(&self.key, &r, wait, failure);
        let sessions = Sessions::new(ctx);
        sessions
            .append(&key.agent, NewEvent::typed(event::LLM_RETRY, &record)?)
            .await?;
        // A cancel drops this future here: no `llm/retry-started` then.
        tokio::time::sleep(Duration::from_millis(wait)).await;
        sessions
            .append(
                &key.agent,
                NewEvent::typed(event::LLM_RETRY_STARTED, &started_record(&r))?,
            )
            .await?;
        Ok(serde_json::to_value(RequestErrorDecision::retry())?)
    }
}

struct LlmRetryPlugin;

impl Plugin for LlmRetryPlugin {
    const NAME: &'static str = "llm-retry";
    const DESCRIPTION: &'static str = "retries retryable model failures";
    const INJECT: &'static [&'static str] = &[service::SESSIONS];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let policy = Rc::new(Policy {
            key: config.policy_key()?,
            config,
            chains: Rc::default(),
        });
        let c = ctx.clone();
        ctx.on(bus::AGENT_REQUEST_ERROR, move |ev| {
            let (c, policy) = (c.clone(), policy.clone());
            async move { policy.on_request_error(&c, ev).await }
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(LlmRetryPlugin);

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::names::{code, llm_failure};
    use serde_json::json;

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

    fn key() -> ChainKey {
        ChainKey {
            agent: "a".into(),
            turn: 1,
            step: 2,
            provider: "p".into(),
        }
    }

    #[test]
    fn always_mode_keeps_the_backoff_and_logs_no_limit() {
        let always = config(json!({"mode": "always", "jitterRatio": 0.0}));
        assert_eq!(delay_ms(&always, 1, None), 500);
        assert_eq!(delay_ms(&always, 30, None), 10_000);
        let key = key();
        let r = Retry {
            key: &key,
            retry_id: "r".into(),
            retry: 7,
        };
        let record = always.retry_record("k", &r, 500, LlmFailure::new(llm_failure::AUTH, "no"));
        assert_eq!((record.mode.as_str(), record.max_retries), ("always", None));
        let normal = config(json!({}));
        let record = normal.retry_record("k", &r, 500, LlmFailure::new(llm_failure::SERVER, "x"));
        assert_eq!(
            (record.mode.as_str(), record.max_retries),
            ("normal", Some(5))
        );
    }

    #[test]
    fn the_policy_key_is_the_originals_array() {
        // The original's own log (sdk/tests/fixtures/original/
        // empty-response-retry.jsonl, line 13) under this policy.
        let c = config(
            json!({"maxRetries": 2, "initialDelayMs": 1, "maxDelayMs": 1, "jitterRatio": 0}),
        );
        assert_eq!(
            c.policy_key().unwrap(),
            r#"["normal",2,["EMPTY_RESPONSE","RATE_LIMIT","SERVER","TIMEOUT","TRANSPORT"],1,1,0]"#
        );
        assert_eq!(
            Config::default().policy_key().unwrap(),
            r#"["normal",5,["EMPTY_RESPONSE","RATE_LIMIT","SERVER","TIMEOUT","TRANSPORT"],500,10000,0.1]"#
        );
        // `always` has no limit and no codes: the original's four fields
        // (its tests: '["always",500,10000,0.1]').
        let always = config(json!({"mode": "always", "maxRetries": 2}));
        assert_eq!(always.policy_key().unwrap(), r#"["always",500,10000,0.1]"#);
        let line = include_str!("../../../sdk/tests/fixtures/original/empty-response-retry.jsonl")
            .lines()
            .nth(12)
            .unwrap();
        let logged: LlmRetry =
            serde_json::from_value(serde_json::from_str::<Value>(line).unwrap()["data"].clone())
                .unwrap();
        assert_eq!(logged.policy_key, Some(c.policy_key().unwrap()));
    }

    #[test]
    fn numbers_are_written_as_javascript_writes_them() {
        for (x, js) in [
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (0.1, "0.1"),
            (0.25, "0.25"),
            (1.5, "1.5"),
            (123_456.0, "123456"),
            (0.000_001, "0.000001"),
            (0.000_001_5, "0.0000015"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (1e21, "1e+21"),
            (1.25e21, "1.25e+21"),
            (1e20, "100000000000000000000"),
            (-2.5, "-2.5"),
            (1.0 / 3.0, "0.3333333333333333"),
        ] {
            assert_eq!(JsNumber(x).text().as_deref(), Some(js), "{x}");
        }
        assert_eq!(JsNumber(f64::NAN).text(), None);
        assert_eq!(
            serde_json::to_string(&JsNumber(f64::INFINITY)).unwrap(),
            "null"
        );
        assert_eq!(serde_json::to_string(&JsNumber(0.0)).unwrap(), "0");
    }

    #[test]
    fn the_records_are_the_originals_field_for_field() {
        let c = Config::default();
        let policy_key = c.policy_key().unwrap();
        let key = key();
        let r = Retry {
            key: &key,
            retry_id: "chain".into(),
            retry: 2,
        };
        let mut failure = LlmFailure::new(llm_failure::RATE_LIMIT, "slow down");
        failure.provider_retry_after_ms = Some(1000);
        let record = c.retry_record(&policy_key, &r, 1000, failure);
        assert_eq!(
            serde_json::to_value(&record).unwrap(),
            json!({"retryId": "chain", "turn": 1, "step": 2, "provider": "p", "mode": "normal",
                   "policyKey": policy_key, "retry": 2, "maxRetries": 5, "delayMs": 1000,
                   "failure": {"message": "slow down", "code": "RATE_LIMIT", "providerRetryAfterMs": 1000}})
        );
        assert_eq!(
            serde_json::to_string(&started_record(&r)).unwrap(),
            r#"{"retryId":"chain","turn":1,"step":2,"retry":2}"#
        );
    }

    #[test]
    fn only_a_retry_decision_is_a_retry() {
        assert!(is_retry(&json!({"kind": "retry"})));
        for other in [
            json!(null),
            json!({}),
            json!({"kind": "fail"}),
            json!("retry"),
            json!(3),
        ] {
            assert!(!is_retry(&other), "{other}");
        }
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
