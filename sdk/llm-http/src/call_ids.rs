//! Tool-call ids the session log can store and load back.
//!
//! The log pairs each `tool/result` with the `tool/call` of its step by id:
//! an empty id fails the load (`must have tool source`), and two calls of
//! one step with the same id fail the second result's append (`no prior
//! tool/call in this step`). Ids are checked per step only (a step's pending
//! calls are forgotten at `step/end`), so a server that repeats `call_0` in
//! every answer is fine; within one answer, which is one step, every call
//! needs its own non-empty id. Servers do not all give one: some omit `id`,
//! send `""`, or number the calls of each answer from 0 and repeat. This
//! module gives such a call a fresh id, says so in the log, and lets the run
//! go on.

use std::collections::HashSet;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// A tool call's `id` as a server sent it (`null` reads as absent).
/// Servers do not all send a string; what they sent is kept, as JSON text,
/// for the warning that renames the call ([`CallIds`]).
#[derive(Debug, Clone, PartialEq)]
pub enum SentId {
    /// A string (maybe empty).
    Text(String),
    /// Anything else, as its JSON text.
    Other(String),
}

impl<'de> Deserialize<'de> for SentId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&RawValue>::deserialize(d)?;
        Ok(match serde_json::from_str::<String>(raw.get()) {
            Ok(text) => SentId::Text(text),
            Err(_) => SentId::Other(raw.get().to_owned()),
        })
    }
}

/// The prefix of an id this adapter makes up (as OpenAI's own ids start).
const FRESH_PREFIX: &str = "call_";

/// The ids given to the tool calls of one answer so far.
pub struct CallIds {
    plugin: &'static str,
    given: HashSet<String>,
}

impl CallIds {
    /// No ids given yet, for the adapter `plugin` (named in its warnings).
    pub fn new(plugin: &'static str) -> CallIds {
        CallIds {
            plugin,
            given: HashSet::new(),
        }
    }

    /// The id of the call at provider index `index` that starts with the
    /// delta's `sent` id: `sent` when it is a non-empty string no earlier
    /// call of this answer has, else a fresh `call_<uuid>`, with a warning
    /// naming what was sent and what the call is stored as.
    pub fn assign(&mut self, index: u64, sent: Option<&SentId>) -> String {
        if let Some(SentId::Text(id)) = sent {
            if !id.is_empty() && self.given.insert(id.clone()) {
                return id.clone();
            }
        }
        let fresh = self.fresh();
        dsh_sdk::tracing::warn!(
            "{}: tool call {index} of the model's answer came {}; it is stored as \
             `{fresh}` (the session log needs a unique, non-empty id for each call of an answer)",
            self.plugin,
            why(sent)
        );
        fresh
    }

    /// A `call_<uuid>` no call of this answer has.
    fn fresh(&mut self) -> String {
        loop {
            let id = format!("{FRESH_PREFIX}{}", dsh_sdk::new_id());
            if self.given.insert(id.clone()) {
                return id;
            }
        }
    }
}

/// The most characters of a sent id the warning quotes.
const QUOTED_CHARS: usize = 64;

/// What was wrong with the `id` a call came with, for the warning. The id
/// is quoted escaped and cut short: it is the model's text, and the log
/// may go to a terminal.
fn why(sent: Option<&SentId>) -> String {
    match sent {
        None => "without an id".to_owned(),
        Some(SentId::Text(s)) if s.is_empty() => "with an empty id".to_owned(),
        Some(SentId::Text(s)) => format!(
            "with the id {} of an earlier call of the same answer",
            quoted(s)
        ),
        Some(SentId::Other(json)) => {
            format!("with an id that is not a string ({})", quoted(json))
        }
    }
}

/// `text` in quotes, control characters escaped, at most
/// [`QUOTED_CHARS`] characters of it.
fn quoted(text: &str) -> String {
    match crate::failure::cut_chars(text, QUOTED_CHARS) {
        None => format!("{text:?}"),
        Some(cut) => format!("{cut:?}…"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(id: &str) -> SentId {
        SentId::Text(id.to_owned())
    }

    #[test]
    fn a_unique_id_is_kept() {
        let mut ids = CallIds::new("llm-deepseek");
        assert_eq!(ids.assign(0, Some(&text("c1"))), "c1");
        assert_eq!(ids.assign(1, Some(&text("c2"))), "c2");
    }

    #[test]
    fn a_missing_empty_or_odd_id_gets_a_fresh_one() {
        let mut ids = CallIds::new("llm-deepseek");
        let given: Vec<String> = [None, Some(text("")), Some(SentId::Other("7".into()))]
            .iter()
            .enumerate()
            .map(|(i, sent)| ids.assign(i as u64, sent.as_ref()))
            .collect();
        for id in &given {
            assert!(
                id.starts_with(FRESH_PREFIX) && id.len() > FRESH_PREFIX.len(),
                "{id}"
            );
        }
        let unique: HashSet<&String> = given.iter().collect();
        assert_eq!(unique.len(), given.len(), "{given:?}");
    }

    #[test]
    fn a_repeated_id_is_kept_by_the_first_call_only() {
        let mut ids = CallIds::new("llm-deepseek");
        assert_eq!(ids.assign(0, Some(&text("call_0"))), "call_0");
        let second = ids.assign(1, Some(&text("call_0")));
        assert!(
            second.starts_with(FRESH_PREFIX) && second != "call_0",
            "{second}"
        );
        // A provider id equal to one made up earlier is renamed too.
        let third = ids.assign(2, Some(&text(&second)));
        assert!(third != second && third != "call_0", "{third}");
    }

    #[test]
    fn the_warning_says_what_was_sent() {
        assert_eq!(why(None), "without an id");
        assert_eq!(why(Some(&text(""))), "with an empty id");
        assert_eq!(
            why(Some(&text("call_0"))),
            "with the id \"call_0\" of an earlier call of the same answer"
        );
        assert_eq!(
            why(Some(&SentId::Other("7".into()))),
            "with an id that is not a string (\"7\")"
        );
    }

    #[test]
    fn a_quoted_id_is_escaped_and_cut_short() {
        assert_eq!(quoted("a\u{1b}]52;c\u{7}"), "\"a\\u{1b}]52;c\\u{7}\"");
        let long = "x".repeat(1000);
        assert_eq!(quoted(&long), format!("{:?}…", "x".repeat(QUOTED_CHARS)));
    }
}
