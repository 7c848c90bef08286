//! The cap on one answer's size (config `maxAnswerBytes`).
//!
//! Everything a model streams is kept: by this adapter until the answer
//! ends, and downstream as one logged chunk per delta and the assembled
//! message. Without a cap, a server that streams reasoning forever fills
//! memory. The cap counts each delta as it arrives, before it is kept: the
//! bytes of its text, reasoning and tool calls (arguments, names and ids),
//! plus [`DELTA_COST`] for the chunk that carries it, so a flood of tiny
//! deltas is bounded too. Past the cap the stream fails with
//! `MALFORMED_RESPONSE`; the caller stops reading the body.

use dsh_sdk::vocab::LlmFailure;

use crate::failure::code;
use crate::sse::human_bytes;

/// The config field that sets the cap, as users write it.
pub const FIELD: &str = "maxAnswerBytes";

/// The default cap: 16 MiB, well above the longest answer an output limit
/// of 256,000 tokens allows (about 1 MiB of text; about 9 MiB counted with
/// [`DELTA_COST`], when each token comes in a delta of its own).
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// What each text, reasoning or tool-call delta counts on top of its
/// bytes. Every delta becomes a logged chunk, which costs the host far more
/// than its text, so a flood of one-byte deltas must not pass as "1 byte"
/// each: with this cost, the most deltas the default cap admits (about
/// 500,000) are about twice those of the longest legitimate answer.
pub const DELTA_COST: usize = 32;

/// The config field that caps the tool calls of one answer.
pub const CALLS_FIELD: &str = "maxToolCalls";

/// The default cap on the tool calls of one answer. Each call costs the
/// host far more than its bytes (a logged chunk per delta, a block of the
/// message, a `tool/call` and a `tool/result` record, a task that runs
/// it: tens of KiB in all), so the byte cap alone lets a flood of empty
/// calls take gigabytes (100,000 of them took 2.7 GB). Models call a few
/// tools per answer, rarely dozens; 1,024 leaves room for any real batch
/// and bounds the rest to tens of MiB.
pub const DEFAULT_MAX_TOOL_CALLS: usize = 1024;

/// How much of the cap one answer has used.
pub struct AnswerBudget {
    plugin: &'static str,
    cap: usize,
    used: usize,
    max_calls: usize,
    calls: usize,
}

impl AnswerBudget {
    /// A budget of `cap` bytes and `max_calls` tool calls, for the adapter
    /// `plugin` (the config its failures tell the user to change).
    pub fn new(plugin: &'static str, cap: usize, max_calls: usize) -> Self {
        AnswerBudget {
            plugin,
            cap,
            used: 0,
            max_calls,
            calls: 0,
        }
    }

    /// Counts `n` tool calls starting; the failure that ends the stream
    /// when the answer goes past its call cap. Nothing is counted then.
    pub fn start_calls(&mut self, n: usize) -> Result<(), LlmFailure> {
        let total = self.calls.saturating_add(n);
        if total > self.max_calls {
            return Err(LlmFailure::new(
                code::MALFORMED_RESPONSE,
                format!(
                    "the model's answer exceeded {CALLS_FIELD}: more than {} tool calls in \
                     one answer; the stream was stopped there. If the model really calls \
                     that many tools at once, raise `{CALLS_FIELD}` in the {} config",
                    self.max_calls, self.plugin
                ),
            ));
        }
        self.calls = total;
        Ok(())
    }

    /// Counts a delta of `bytes` in `parts` pieces (each charged
    /// [`DELTA_COST`] more); the failure that ends the stream when the
    /// answer goes past the cap. Nothing is counted then.
    pub fn charge(&mut self, bytes: usize, parts: usize) -> Result<(), LlmFailure> {
        self.used = self.after(bytes, parts)?;
        Ok(())
    }

    /// Whether `parts` pieces (and nothing else) would still fit, counting
    /// nothing: checked before a delta's pieces are read, so a flood of
    /// them is refused before it is kept.
    pub fn check_parts(&self, parts: usize) -> Result<(), LlmFailure> {
        self.after(0, parts).map(drop)
    }

    /// What the answer would have used with a delta of `bytes` in `parts`
    /// pieces; the failure when that is past the cap.
    fn after(&self, bytes: usize, parts: usize) -> Result<usize, LlmFailure> {
        let total = parts
            .saturating_mul(DELTA_COST)
            .saturating_add(bytes)
            .saturating_add(self.used);
        if total > self.cap {
            return Err(self.exceeded());
        }
        Ok(total)
    }

    fn exceeded(&self) -> LlmFailure {
        LlmFailure::new(
            code::MALFORMED_RESPONSE,
            format!(
                "the model's answer exceeded {FIELD}: more than {} of text, reasoning and \
                 tool calls as they streamed (each delta counting {DELTA_COST} bytes more); \
                 the stream was stopped there. If the model's answers are really that long, \
                 raise `{FIELD}` in the {} config",
                human_bytes(self.cap),
                self.plugin
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_up_to_the_cap_passes_and_one_byte_more_fails() {
        let mut b = AnswerBudget::new("llm-deepseek", 100, 1);
        b.charge(60 - DELTA_COST, 1).unwrap();
        b.charge(40 - DELTA_COST, 1).unwrap();
        let f = b.charge(0, 1).unwrap_err();
        assert_eq!(f.code, code::MALFORMED_RESPONSE);
        // The refused delta was not counted: nothing more fits anyway.
        assert_eq!(b.used, 100);
        assert!(b.charge(1, 0).is_err());
    }

    #[test]
    fn checking_parts_counts_nothing() {
        let mut b = AnswerBudget::new("llm-deepseek", 2 * DELTA_COST, 1);
        b.check_parts(2).unwrap();
        assert!(b.check_parts(3).is_err());
        assert_eq!(b.used, 0);
        b.charge(0, 2).unwrap();
        assert!(b.check_parts(1).is_err());
    }

    #[test]
    fn tiny_deltas_count_their_cost() {
        let mut b = AnswerBudget::new("llm-deepseek", 10 * (DELTA_COST + 1), 1);
        for _ in 0..10 {
            b.charge(1, 1).unwrap();
        }
        assert!(b.charge(1, 1).is_err());
    }

    #[test]
    fn a_huge_count_does_not_wrap() {
        let mut b = AnswerBudget::new("llm-deepseek", DEFAULT_MAX_ANSWER_BYTES, 1);
        assert!(b.charge(usize::MAX, usize::MAX).is_err());
    }

    #[test]
    fn calls_up_to_their_cap_pass_and_one_more_fails() {
        let mut b = AnswerBudget::new("llm-deepseek", DEFAULT_MAX_ANSWER_BYTES, 3);
        b.start_calls(2).unwrap();
        b.start_calls(1).unwrap();
        let f = b.start_calls(1).unwrap_err();
        assert_eq!(f.code, code::MALFORMED_RESPONSE);
        assert_eq!(
            f.message,
            "the model's answer exceeded maxToolCalls: more than 3 tool calls in one answer; \
             the stream was stopped there. If the model really calls that many tools at once, \
             raise `maxToolCalls` in the llm-deepseek config"
        );
        assert!(b.start_calls(usize::MAX).is_err(), "no wrap");
        assert_eq!(b.calls, 3);
    }

    #[test]
    fn the_failure_names_the_field_the_cap_and_the_fix() {
        let f = AnswerBudget::new("llm-deepseek", 1024 * 1024, 1).exceeded();
        assert_eq!(
            f.message,
            format!(
                "the model's answer exceeded maxAnswerBytes: more than 1 MiB (1048576 bytes) \
                 of text, reasoning and tool calls as they streamed (each delta counting \
                 {DELTA_COST} bytes more); the stream was stopped there. If the model's \
                 answers are really that long, raise `maxAnswerBytes` in the llm-deepseek config"
            )
        );
    }
}
