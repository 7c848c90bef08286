//! `/status`: the tokens of the session so far — the `usage` of every
//! `assistant/message` summed (the adapter's `inputTokens` are the uncached
//! input, `cacheReadTokens` the cached input, `cacheWriteTokens` the input
//! written to the cache (Anthropic's, a bucket of its own), `outputTokens`
//! the output) — and their cost from [`crate::prices`], per model; "cost
//! unknown" when a model that answered has no price. The table has no
//! price for cache writes: they are priced as cache misses (input not read
//! from the cache), which is what DeepSeek, the table's one provider,
//! charges for them. When a `compaction` service answers
//! `measure` for the agent, a third line gives the context the next request
//! would use, against the model's window and the compaction threshold, and
//! where the window came from (the config, the adapter's catalog, the
//! server's endpoint, or the adapter's default).

use std::collections::BTreeMap;

use dsh_sdk::api::commands::{CommandResult, RunParams};
use dsh_sdk::api::compaction::{Compaction, Measurement};
use dsh_sdk::api::sessions::Sessions;
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::records::AssistantMessage;
use dsh_sdk::vocab::{event, MessageSource, SessionEvent, TokenUsage};

use crate::prices;

/// The token counts `/status` sums.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cached input tokens.
    pub cache_read_tokens: u64,
    /// Input tokens written to the cache (not counted in the others).
    pub cache_write_tokens: u64,
}

impl From<&TokenUsage> for Usage {
    fn from(u: &TokenUsage) -> Usage {
        Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens.unwrap_or(0),
            cache_write_tokens: u.cache_write_tokens.unwrap_or(0),
        }
    }
}

impl Usage {
    /// Adds `other`, saturating: the counts are the server's, and need
    /// not be sane.
    fn add(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
    }
}

/// The usage of the session, per model, and how many answers it sums.
#[derive(Debug, Default)]
pub struct Totals {
    /// Per model.
    pub by_model: BTreeMap<String, Usage>,
    /// Answers counted.
    pub answers: usize,
}

/// Sums the usage of `events`' assistant messages (one without usage adds
/// nothing); a malformed one is `SESSION_CORRUPT`, naming its seq.
pub fn totals(events: &[SessionEvent]) -> Result<Totals> {
    let mut t = Totals::default();
    for e in events.iter().filter(|e| e.kind == event::ASSISTANT_MESSAGE) {
        let answer: AssistantMessage = e.data_as()?;
        let usage = answer.usage.as_ref().map(Usage::from).unwrap_or_default();
        t.by_model
            .entry(model_of(&answer.message.source))
            .or_default()
            .add(usage);
        t.answers += 1;
    }
    Ok(t)
}

/// The model an answer came from (`""` for a source that names none: the
/// store refuses those, an imported log may still hold one).
fn model_of(source: &MessageSource) -> String {
    match source {
        MessageSource::Model(m) => m.model.clone(),
        _ => String::new(),
    }
}

/// The text for `totals`.
pub fn render(t: &Totals) -> String {
    let mut all = Usage::default();
    for u in t.by_model.values() {
        all.add(*u);
    }
    let input = all
        .input_tokens
        .saturating_add(all.cache_read_tokens)
        .saturating_add(all.cache_write_tokens);
    // Said only when a route reported any (only Anthropic's does).
    let writes = match all.cache_write_tokens {
        0 => String::new(),
        n => format!(", {n} cache write"),
    };
    let tokens = format!(
        "tokens: {input} in ({} cache hit{writes}, {} cache miss), {} out, over {} model answer{}",
        all.cache_read_tokens,
        all.input_tokens,
        all.output_tokens,
        t.answers,
        if t.answers == 1 { "" } else { "s" }
    );
    format!("{tokens}\n{}", cost(t))
}

/// The cost line.
fn cost(t: &Totals) -> String {
    let unpriced: Vec<&str> = t
        .by_model
        .keys()
        .filter(|m| prices::of(m).is_none())
        .map(String::as_str)
        .collect();
    if !unpriced.is_empty() {
        let names: Vec<String> = unpriced.iter().map(|m| format!("\"{m}\"")).collect();
        return format!("cost unknown (no price for model {})", names.join(", "));
    }
    let dollars: f64 = t
        .by_model
        .iter()
        .filter_map(|(m, u)| {
            // A cache write is input not read from the cache: a miss.
            let miss = u.input_tokens.saturating_add(u.cache_write_tokens);
            prices::of(m).map(|p| p.cost(miss, u.cache_read_tokens, u.output_tokens))
        })
        .fold(0.0, |a, b| a + b);
    format!("cost: ${dollars:.6}")
}

/// The context line for `m`: `context: ~T tokens of W (P%), compaction at
/// H`, or `context: ~T tokens` when the window is unknown.
pub fn context_line(m: &Measurement) -> String {
    let mut line = format!("context: ~{} tokens", m.total_tokens);
    if let Some(window) = m.context_window.filter(|w| *w > 0) {
        let percent = (m.total_tokens as f64 * 100.0 / window as f64).round();
        line.push_str(&format!(" of {window} ({percent}%)"));
        if let Some(at) = m.threshold_tokens {
            line.push_str(&format!(", compaction at {at}"));
        }
    }
    line
}

/// The context line of `agent`, when a compaction service measures it: none
/// when no service is loaded, and none (with a warning) when it fails. A
/// known window says where it came from ([`crate::context_source`]).
async fn context(ctx: &Context, agent: &str, events: &[SessionEvent]) -> Option<String> {
    match Compaction::new(ctx).measure(agent).await {
        Ok(m) => {
            let mut line = context_line(&m);
            if m.context_window.is_some() {
                if let Some(source) = crate::context_source::of_session(ctx, events).await {
                    line.push_str(&format!(" ({source})"));
                }
            }
            Some(line)
        }
        Err(e) if e.code == codes::SERVICE_UNAVAILABLE => None,
        Err(e) => {
            dsh_sdk::tracing::warn!("/status: measuring the context of {agent} failed: {e}");
            None
        }
    }
}

/// Runs `/status` for `inv`.
pub async fn run(ctx: &Context, inv: &RunParams) -> Result<CommandResult> {
    let events = Sessions::new(ctx).events(&inv.agent, 0).await?;
    let mut text = render(&totals(&events)?);
    if let Some(line) = context(ctx, &inv.agent, &events).await {
        text.push('\n');
        text.push_str(&line);
    }
    Ok(CommandResult::success(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn answer(model: &str, usage: Value) -> SessionEvent {
        serde_json::from_value(json!({"type": "assistant/message", "seq": 0, "time": 0,
            "data": {"turn": 1, "step": 1, "message": {"id": "a", "role": "assistant", "content": [],
                "source": {"kind": "model", "provider": "p", "model": model}}, "usage": usage}}))
        .unwrap()
    }

    #[test]
    fn usage_is_summed_and_priced_per_model() {
        let events = [
            answer(
                "deepseek-chat",
                json!({"inputTokens": 12, "outputTokens": 5, "cacheReadTokens": 8}),
            ),
            answer(
                "deepseek-chat",
                json!({"inputTokens": 1000000, "outputTokens": 0}),
            ),
        ];
        let text = render(&totals(&events).unwrap());
        assert_eq!(
            text,
            "tokens: 1000020 in (8 cache hit, 1000012 cache miss), 5 out, over 2 model answers\ncost: $0.280006"
        );
    }

    #[test]
    fn cache_writes_are_shown_counted_in_the_input_and_priced() {
        let events = [
            answer(
                "deepseek-chat",
                json!({"inputTokens": 12, "outputTokens": 5, "cacheReadTokens": 8,
                       "cacheWriteTokens": 1000000}),
            ),
            answer(
                "claude-sonnet-4-5",
                json!({"inputTokens": 3, "outputTokens": 1, "cacheWriteTokens": 7}),
            ),
        ];
        let t = totals(&events).unwrap();
        assert_eq!(t.by_model["claude-sonnet-4-5"].cache_write_tokens, 7);
        assert_eq!(
            render(&t).lines().next().unwrap(),
            "tokens: 1000030 in (8 cache hit, 1000007 cache write, 15 cache miss), 6 out, over 2 model answers"
        );
        // Priced as misses: a million written tokens cost what a million
        // uncached ones do.
        let deepseek = Totals {
            by_model: t
                .by_model
                .into_iter()
                .filter(|(m, _)| m == "deepseek-chat")
                .collect(),
            answers: 1,
        };
        assert_eq!(render(&deepseek).lines().last().unwrap(), "cost: $0.280006");
    }

    #[test]
    fn the_context_line_shows_the_window_when_known() {
        let mut m = Measurement {
            total_tokens: 1234,
            surface_tokens: 1000,
            baseline: dsh_sdk::api::compaction::Baseline::Usage,
            nodes: 4,
            context_window: Some(10000),
            threshold_tokens: Some(8000),
        };
        assert_eq!(
            context_line(&m),
            "context: ~1234 tokens of 10000 (12%), compaction at 8000"
        );
        m.context_window = None;
        m.threshold_tokens = None;
        assert_eq!(context_line(&m), "context: ~1234 tokens");
    }

    #[test]
    fn an_unpriced_model_makes_the_cost_unknown() {
        let events = [answer("m1", json!({"inputTokens": 2, "outputTokens": 1}))];
        assert_eq!(
            render(&totals(&events).unwrap()),
            "tokens: 2 in (0 cache hit, 2 cache miss), 1 out, over 1 model answer\ncost unknown (no price for model \"m1\")"
        );
        assert_eq!(
            render(&totals(&[]).unwrap()).lines().last().unwrap(),
            "cost: $0.000000"
        );
    }

    #[test]
    fn an_answer_without_usage_adds_nothing_and_a_malformed_one_is_named() {
        let t = totals(&[answer("m1", Value::Null)]).unwrap();
        assert_eq!((t.answers, t.by_model["m1"]), (1, Usage::default()));
        let mut bad = answer("m1", json!({"inputTokens": "many", "outputTokens": 1}));
        bad.seq = 7;
        let e = totals(&[bad]).unwrap_err();
        assert_eq!(e.code, dsh_sdk::names::code::SESSION_CORRUPT);
        assert!(
            e.message.contains("session event 7 (assistant/message)"),
            "{e}"
        );
    }

    #[test]
    fn sums_of_absurd_usage_saturate() {
        let max =
            json!({"inputTokens": u64::MAX, "outputTokens": u64::MAX, "cacheReadTokens": u64::MAX});
        let events = [answer("m1", max.clone()), answer("m1", max)];
        let text = render(&totals(&events).unwrap());
        assert!(
            text.starts_with(&format!("tokens: {} in", u64::MAX)),
            "{text}"
        );
    }
}
