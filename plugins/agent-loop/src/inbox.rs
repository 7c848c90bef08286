//! The durable inbox (reference dsh-core §4.2): two ordered lists; every
//! mutation is logged first as `agent/inbox/spliced`, so a resumed agent
//! restores pending work. A message id is pending at most once across both
//! lists, and a logged splice is always normalized (in range), which replay
//! checks.

use dsh_sdk::prelude::*;
use serde_json::Value;

/// The list of prompts awaiting their own turn.
pub const NEXT_TURN: &str = "next-turn";
/// The list of input awaiting the next step boundary.
pub const NEXT_STEP: &str = "next-step";
/// A splice whose coordinates do not fit the lists it applies to.
pub const INVALID_INBOX_SPLICE: &str = "INVALID_INBOX_SPLICE";
/// A message whose id is already pending in either list.
pub const MESSAGE_ALREADY_PENDING: &str = "MESSAGE_ALREADY_PENDING";

#[derive(Debug, Default)]
pub struct Inbox {
    pub next_turn: Vec<Value>,
    pub next_step: Vec<Value>,
}

impl Inbox {
    /// Rebuilds the inbox from the logged splices after the seed, each with
    /// its session seq; the first invalid one fails the whole replay, as the
    /// original's does (`invalid persisted inbox splice at session seq N`).
    pub fn replay<'a>(splices: impl IntoIterator<Item = (u64, &'a Value)>) -> Result<Inbox> {
        let mut inbox = Inbox::default();
        for (seq, splice) in splices {
            inbox.apply(splice).map_err(|e| {
                Error::new(
                    INVALID_INBOX_SPLICE,
                    format!(
                        "invalid persisted inbox splice at session seq {seq}: {}",
                        e.message
                    ),
                )
            })?;
        }
        Ok(inbox)
    }

    fn list(&mut self, target: &str) -> &mut Vec<Value> {
        if target == NEXT_STEP {
            &mut self.next_step
        } else {
            &mut self.next_turn
        }
    }

    pub fn len(&self, target: &str) -> usize {
        if target == NEXT_STEP {
            self.next_step.len()
        } else {
            self.next_turn.len()
        }
    }

    #[cfg(test)]
    pub fn push(&mut self, target: &str, m: Value) {
        self.list(target).push(m);
    }

    /// Empties both lists, returning what each held (next-step first, as
    /// the original clears them), skipping empty ones.
    pub fn clear(&mut self) -> Vec<(&'static str, Vec<Value>)> {
        let step = std::mem::take(&mut self.next_step);
        let turn = std::mem::take(&mut self.next_turn);
        [(NEXT_STEP, step), (NEXT_TURN, turn)]
            .into_iter()
            .filter(|(_, l)| !l.is_empty())
            .collect()
    }

    pub fn has_pending(&self) -> bool {
        !self.next_step.is_empty() || !self.next_turn.is_empty()
    }

    /// Where a pending message is: its list and index (next-turn searched
    /// first, as the original's `locate`).
    pub fn locate(&self, message_id: &str) -> Option<(&'static str, usize)> {
        [(NEXT_TURN, &self.next_turn), (NEXT_STEP, &self.next_step)]
            .into_iter()
            .find_map(|(target, list)| {
                list.iter()
                    .position(|m| m["id"].as_str() == Some(message_id))
                    .map(|i| (target, i))
            })
    }

    /// The normalized splice that `Array.splice(start, deleteCount,
    /// ...inserted)` on `target` would perform: coordinates truncated toward
    /// zero (NaN as 0), a negative start counted from the end, both clamped
    /// to the list. `None` for a no-op (nothing removed, nothing inserted),
    /// which the original does not log.
    pub fn normalize(
        &self,
        target: &str,
        start: f64,
        delete_count: f64,
        inserted: Vec<Value>,
    ) -> Option<Value> {
        let len = self.len(target) as f64;
        let start = if start.is_nan() { 0.0 } else { start.trunc() };
        let start = if start < 0.0 {
            (len + start).max(0.0)
        } else {
            start.min(len)
        };
        let delete = if delete_count.is_nan() {
            0.0
        } else {
            delete_count.trunc()
        };
        let removed = delete.max(0.0).min(len - start) as u64;
        if removed == 0 && inserted.is_empty() {
            return None;
        }
        let mut splice = json!({"target": target, "start": start as u64, "inserted": inserted});
        if removed > 0 {
            splice["removedCount"] = json!(removed);
        }
        Some(splice)
    }

    /// The splice that removes the first `count` messages of `target`
    /// (a claim, or a cancel's clear with `outcome: "canceled"`).
    pub fn removal(target: &str, count: usize, outcome: Option<&str>) -> Value {
        let mut splice =
            json!({"target": target, "start": 0, "removedCount": count, "inserted": []});
        if let Some(outcome) = outcome {
            splice["outcome"] = json!(outcome);
        }
        splice
    }

    /// Checks one normalized splice against the current lists: a known
    /// target, integer coordinates inside the list, and no message id pending
    /// twice across both lists afterwards.
    pub fn validate(&self, splice: &Value) -> Result<()> {
        let invalid = || Error::new(INVALID_INBOX_SPLICE, "invalid inbox splice");
        let target = match splice["target"].as_str() {
            Some(t @ (NEXT_TURN | NEXT_STEP)) => t,
            _ => return Err(invalid()),
        };
        let len = self.len(target) as u64;
        let start = splice["start"].as_u64().ok_or_else(invalid)?;
        let removed = match splice.get("removedCount") {
            None => 0,
            Some(n) => n.as_u64().ok_or_else(invalid)?,
        };
        let inserted = splice["inserted"].as_array().ok_or_else(invalid)?;
        if start > len || removed > len - start {
            return Err(invalid());
        }
        let (start, removed) = (start as usize, removed as usize);
        let (this, other) = if target == NEXT_TURN {
            (&self.next_turn, &self.next_step)
        } else {
            (&self.next_step, &self.next_turn)
        };
        let candidate = this[..start]
            .iter()
            .chain(inserted)
            .chain(&this[start + removed..])
            .chain(other);
        let mut ids = std::collections::HashSet::new();
        for m in candidate {
            let Some(id) = m["id"].as_str() else {
                continue;
            };
            if !ids.insert(id) {
                return Err(Error::new(
                    MESSAGE_ALREADY_PENDING,
                    format!("message \"{id}\" is already pending"),
                ));
            }
        }
        Ok(())
    }

    /// Applies one normalized splice after [`Inbox::validate`]; returns the
    /// removed messages.
    pub fn apply(&mut self, splice: &Value) -> Result<Vec<Value>> {
        self.validate(splice)?;
        let target = splice["target"].as_str().unwrap_or(NEXT_TURN);
        let start = splice["start"].as_u64().unwrap_or(0) as usize;
        let removed = splice["removedCount"].as_u64().unwrap_or(0) as usize;
        let inserted = splice["inserted"].as_array().cloned().unwrap_or_default();
        Ok(self
            .list(target)
            .splice(start..start + removed, inserted)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn texts(list: &[Value]) -> Vec<&str> {
        list.iter()
            .map(|m| m.as_str().or(m["text"].as_str()).unwrap_or_default())
            .collect()
    }

    fn inbox_with(items: &[&str]) -> Inbox {
        let mut inbox = Inbox::default();
        for i in items {
            inbox.push(NEXT_TURN, json!(i));
        }
        inbox
    }

    /// A live `Array.splice` on next-turn: normalize, then apply.
    fn splice(i: &mut Inbox, start: f64, delete: f64, inserted: &[&str]) -> Vec<Value> {
        let inserted = inserted.iter().map(|s| json!(s)).collect();
        match i.normalize(NEXT_TURN, start, delete, inserted) {
            Some(s) => i.apply(&s).unwrap(),
            None => Vec::new(),
        }
    }

    /// A message with an identity, as the loop stores them.
    fn msg(id: &str) -> Value {
        json!({"id": id, "text": id})
    }

    #[test]
    fn splice_coordinates_follow_array_splice() {
        // Negative start counts from the end.
        let mut i = inbox_with(&["a", "b", "c"]);
        splice(&mut i, -1.0, 1.0, &["x"]);
        assert_eq!(texts(&i.next_turn), ["a", "b", "x"]);
        // A start before the head clamps to 0; past the end clamps to len.
        let mut i = inbox_with(&["a", "b"]);
        splice(&mut i, -9.0, 0.0, &["x"]);
        splice(&mut i, 99.0, 0.0, &["y"]);
        assert_eq!(texts(&i.next_turn), ["x", "a", "b", "y"]);
        // Fractional coordinates truncate toward zero; NaN counts as 0.
        let mut i = inbox_with(&["a", "b", "c"]);
        splice(&mut i, 1.7, 1.9, &[]);
        assert_eq!(texts(&i.next_turn), ["a", "c"]);
        splice(&mut i, f64::NAN, f64::NAN, &["n"]);
        assert_eq!(texts(&i.next_turn), ["n", "a", "c"]);
        // A removal past the end removes what is there, and is logged as
        // what it removed.
        let mut i = inbox_with(&["a", "b"]);
        let normalized = i.normalize(NEXT_TURN, 1.0, 5.0, Vec::new());
        assert_eq!(
            normalized,
            Some(json!({"target": "next-turn", "start": 1, "removedCount": 1, "inserted": []}))
        );
        splice(&mut i, 1.0, 5.0, &[]);
        assert_eq!(texts(&i.next_turn), ["a"]);
        // A no-op splice is nothing to log.
        assert_eq!(i.normalize(NEXT_TURN, 0.0, 0.0, Vec::new()), None);
        assert_eq!(i.normalize(NEXT_TURN, 5.0, 3.0, Vec::new()), None);
    }

    #[test]
    fn clear_reports_next_step_first_and_skips_empty_lists() {
        let mut i = inbox_with(&["t1", "t2"]);
        i.push(NEXT_STEP, json!("s1"));
        let removed = i.clear();
        assert_eq!(removed.len(), 2);
        assert_eq!(removed[0].0, NEXT_STEP);
        assert_eq!(texts(&removed[0].1), ["s1"]);
        assert_eq!(removed[1].0, NEXT_TURN);
        assert_eq!(texts(&removed[1].1), ["t1", "t2"]);
        assert!(!i.has_pending());
        assert!(i.clear().is_empty());
    }

    #[test]
    fn replay_rejects_an_out_of_range_splice_naming_its_seq() {
        // The original's case: a start past the end of an empty list.
        let bad = json!({"target": "next-turn", "start": 1, "inserted": []});
        let err = Inbox::replay([(0, &bad)]).unwrap_err();
        assert_eq!(err.code, INVALID_INBOX_SPLICE);
        assert_eq!(
            err.message,
            "invalid persisted inbox splice at session seq 0: invalid inbox splice"
        );
        // Replay never normalizes: a logged negative start, a removal past
        // the end and an unknown target are all invalid, at their own seq.
        let first = json!({"target": "next-turn", "start": 0, "inserted": [msg("a")]});
        for bad in [
            json!({"target": "next-turn", "start": -1, "inserted": []}),
            json!({"target": "next-turn", "start": 0, "removedCount": 2, "inserted": []}),
            json!({"target": "later", "start": 0, "inserted": [msg("b")]}),
        ] {
            let err = Inbox::replay([(3, &first), (7, &bad)]).unwrap_err();
            assert_eq!(
                err.message,
                "invalid persisted inbox splice at session seq 7: invalid inbox splice"
            );
        }
        let ok = json!({"target": "next-turn", "start": 1, "inserted": [msg("b")]});
        let inbox = Inbox::replay([(3, &first), (7, &ok)]).unwrap();
        assert_eq!(texts(&inbox.next_turn), ["a", "b"]);
    }

    #[test]
    fn a_message_id_is_pending_at_most_once_across_both_lists() {
        let mut i = Inbox::default();
        i.push(NEXT_TURN, msg("a"));
        let again = i.normalize(NEXT_STEP, 0.0, 0.0, vec![msg("a")]).unwrap();
        let err = i.validate(&again).unwrap_err();
        assert_eq!(err.code, MESSAGE_ALREADY_PENDING);
        assert_eq!(err.message, "message \"a\" is already pending");
        assert_eq!(i.apply(&again).unwrap_err().code, MESSAGE_ALREADY_PENDING);
        assert!(i.next_step.is_empty(), "a rejected splice changes nothing");
        // Replacing a message by one with its own id is no duplicate.
        let same = i.normalize(NEXT_TURN, 0.0, 1.0, vec![msg("a")]).unwrap();
        assert!(i.validate(&same).is_ok());
        // A replay that would pend an id twice is rejected too.
        let dup = json!({"target": "next-step", "start": 0, "inserted": [msg("x"), msg("x")]});
        let err = Inbox::replay([(4, &dup)]).unwrap_err();
        assert_eq!(
            err.message,
            "invalid persisted inbox splice at session seq 4: message \"x\" is already pending"
        );
    }

    #[test]
    fn locate_finds_an_id_in_either_list() {
        let mut i = Inbox::default();
        i.push(NEXT_TURN, msg("t0"));
        i.push(NEXT_TURN, msg("t1"));
        i.push(NEXT_STEP, msg("s0"));
        assert_eq!(i.locate("t1"), Some((NEXT_TURN, 1)));
        assert_eq!(i.locate("s0"), Some((NEXT_STEP, 0)));
        assert_eq!(i.locate("missing"), None);
    }
}
