//! Tool-call ids as the Messages API takes them: `^[a-zA-Z0-9_-]{1,64}$`,
//! and unique among the `tool_use` blocks of one request.
//!
//! The history may hold ids this API refuses: another provider's (a
//! chat-completions server's `call_0`, repeated in every answer; an id
//! with a dot or a colon; a very long one). Such an id is sent as
//! `toolu_` and 16 hex digits of a hash of the id and how many times it
//! came before in the request, in its `tool_use` and in the `tool_result`
//! that answers it. The mapping depends only on the history up to the
//! call, so a session's requests send the same ids for the same calls (its
//! cached prefix stays the same), and the log keeps the ids as they were.

use std::collections::{HashMap, HashSet};

/// The most bytes of an id the API takes.
const MAX_ID_BYTES: usize = 64;

/// The prefix of an id made here (Anthropic's own ids start so).
const PREFIX: &str = "toolu_";

/// Whether the API takes `id` as a tool-use id.
pub(crate) fn is_valid(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// FNV-1a, 64 bits: a hash that is the same in every build and process
/// (the ids of a session's requests must not change between runs).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The ids of one request's tool calls, as they go on the wire.
#[derive(Default)]
pub(crate) struct ToolIds {
    /// The ids sent so far in `tool_use` blocks.
    sent: HashSet<String>,
    /// How many calls with each id came so far.
    seen: HashMap<String, u64>,
    /// The ids of the last answer's calls that were changed: what the
    /// results that follow it name them.
    renamed: HashMap<String, String>,
}

impl ToolIds {
    /// An answer starts: its calls are the ones the next results answer.
    pub(crate) fn answer(&mut self) {
        self.renamed.clear();
    }

    /// The wire id of a `tool_use` with `id`: `id` when the API takes it
    /// and no earlier call of the request has it, else one made from it;
    /// `None` when it stays as it is.
    pub(crate) fn call(&mut self, id: &str) -> Option<String> {
        let n = self.seen.entry(id.to_owned()).or_insert(0);
        let occurrence = *n;
        *n += 1;
        if is_valid(id) && self.sent.insert(id.to_owned()) {
            self.renamed.remove(id);
            return None;
        }
        let mut salt = occurrence;
        let made = loop {
            let made = format!(
                "{PREFIX}{:016x}",
                fnv1a(&[id.as_bytes(), &salt.to_le_bytes()])
            );
            if self.sent.insert(made.clone()) {
                break made;
            }
            // Taken already (by a call that had it): the next one.
            salt = salt.wrapping_add(1 << 32);
        };
        self.renamed.insert(id.to_owned(), made.clone());
        Some(made)
    }

    /// The wire id of a `tool_result` answering `id`: the id its call was
    /// sent with when that was changed; one made from it when the API
    /// would refuse it (a result without its call: the API refuses that
    /// too, but names the real fault then); `None` when it stays.
    pub(crate) fn result(&self, id: &str) -> Option<String> {
        match self.renamed.get(id) {
            Some(made) => Some(made.clone()),
            None if !is_valid(id) => Some(format!(
                "{PREFIX}{:016x}",
                fnv1a(&[id.as_bytes(), &0u64.to_le_bytes()])
            )),
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_apis_id_shape_is_checked() {
        for good in ["toolu_01A", "call_0", "a-b_C9", &"x".repeat(64)] {
            assert!(is_valid(good), "{good}");
        }
        for bad in ["", "call.0", "fc:1", "a b", &"x".repeat(65), "é"] {
            assert!(!is_valid(bad), "{bad}");
        }
    }

    #[test]
    fn a_refused_or_repeated_id_is_renamed_the_same_way_each_time() {
        let run = || {
            let mut ids = ToolIds::default();
            let mut out = Vec::new();
            for answer in [["call_0", "fc.1"], ["call_0", "toolu_ok"]] {
                ids.answer();
                let calls: Vec<Option<String>> = answer.iter().map(|id| ids.call(id)).collect();
                let results: Vec<Option<String>> = answer.iter().map(|id| ids.result(id)).collect();
                out.push((calls, results));
            }
            out
        };
        let first = run();
        assert_eq!(first, run(), "the same history, the same ids");
        let (calls, results) = &first[0];
        // The first `call_0` stays; the dotted id is made over, and its
        // result names the new id.
        assert_eq!(calls[0], None);
        let made = calls[1].clone().unwrap();
        assert!(made.starts_with("toolu_") && is_valid(&made), "{made}");
        assert_eq!(results, &vec![None, Some(made.clone())]);
        // The second answer's `call_0` is made over, and so is its result;
        // a new valid id stays.
        let (calls, results) = &first[1];
        let again = calls[0].clone().unwrap();
        assert!(is_valid(&again) && again != made);
        assert_eq!(calls[1], None);
        assert_eq!(results, &vec![Some(again), None]);
    }

    #[test]
    fn a_result_without_its_call_gets_a_valid_id() {
        let ids = ToolIds::default();
        let made = ids.result("orphan:1").unwrap();
        assert!(is_valid(&made), "{made}");
        assert_eq!(ids.result("orphan_1"), None);
    }
}
