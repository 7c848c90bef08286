//! The durable inbox (reference dsh-core §4.2): two ordered lists; every
//! mutation is logged first as `agent/inbox/spliced` ([`InboxSpliced`]), so
//! a resumed agent restores pending work. A message id is pending at most
//! once across both lists, and a logged splice is always normalized (in
//! range), which replay checks.

use dsh_sdk::prelude::*;
use dsh_sdk::vocab::records::{InboxSpliced, SpliceTarget};
use dsh_sdk::vocab::{Extra, Message};
use serde::Deserialize;
use serde_json::Value;

/// The list of prompts awaiting their own turn.
pub const NEXT_TURN: SpliceTarget = SpliceTarget::NextTurn;
/// The list of input awaiting the next step boundary.
pub const NEXT_STEP: SpliceTarget = SpliceTarget::NextStep;
/// A splice whose coordinates do not fit the lists it applies to.
pub const INVALID_INBOX_SPLICE: &str = "INVALID_INBOX_SPLICE";
/// A message whose id is already pending in either list.
pub const MESSAGE_ALREADY_PENDING: &str = "MESSAGE_ALREADY_PENDING";
/// The `outcome` of a splice whose removal cancelled work.
pub const CANCELED: &str = "canceled";

#[derive(Debug, Default)]
pub struct Inbox {
    pub next_turn: Vec<Message>,
    pub next_step: Vec<Message>,
}

/// How many messages `splice` removes: its `removedCount`, which the
/// record leaves out when it removes none.
fn removed_count(splice: &InboxSpliced) -> u64 {
    splice.removed_count.unwrap_or(0)
}

/// The error of a splice that does not fit the lists.
fn invalid() -> Error {
    Error::new(INVALID_INBOX_SPLICE, "invalid inbox splice")
}

impl Inbox {
    /// Rebuilds the inbox from the logged splices after the seed, each with
    /// its session seq, as logged (JSON: a splice that is not one is named
    /// by its seq like one that does not fit); the first invalid one fails
    /// the whole replay, as the original's does (`invalid persisted inbox
    /// splice at session seq N`).
    pub fn replay<'a>(splices: impl IntoIterator<Item = (u64, &'a Value)>) -> Result<Inbox> {
        let mut inbox = Inbox::default();
        for (seq, logged) in splices {
            let at_seq = |why: String| {
                Error::new(
                    INVALID_INBOX_SPLICE,
                    format!("invalid persisted inbox splice at session seq {seq}: {why}"),
                )
            };
            let splice = InboxSpliced::deserialize(logged)
                .map_err(|e| at_seq(format!("{} ({e})", invalid().message)))?;
            inbox.apply(&splice).map_err(|e| at_seq(e.message))?;
        }
        Ok(inbox)
    }

    fn list(&mut self, target: SpliceTarget) -> &mut Vec<Message> {
        match target {
            SpliceTarget::NextStep => &mut self.next_step,
            SpliceTarget::NextTurn => &mut self.next_turn,
        }
    }

    fn get(&self, target: SpliceTarget) -> &[Message] {
        match target {
            SpliceTarget::NextStep => &self.next_step,
            SpliceTarget::NextTurn => &self.next_turn,
        }
    }

    pub fn len(&self, target: SpliceTarget) -> usize {
        self.get(target).len()
    }

    #[cfg(test)]
    pub fn push(&mut self, target: SpliceTarget, m: Message) {
        self.list(target).push(m);
    }

    /// Empties both lists, returning what each held (next-step first, as
    /// the original clears them), skipping empty ones.
    pub fn clear(&mut self) -> Vec<(SpliceTarget, Vec<Message>)> {
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
    pub fn locate(&self, message_id: &str) -> Option<(SpliceTarget, usize)> {
        [NEXT_TURN, NEXT_STEP].into_iter().find_map(|target| {
            self.get(target)
                .iter()
                .position(|m| m.id == message_id)
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
        target: SpliceTarget,
        start: f64,
        delete_count: f64,
        inserted: Vec<Message>,
    ) -> Option<InboxSpliced> {
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
        Some(InboxSpliced {
            target,
            start: start as u64,
            removed_count: (removed > 0).then_some(removed),
            inserted,
            outcome: None,
            extra: Extra::new(),
        })
    }

    /// The splice that removes the first `count` messages of `target`
    /// (a claim, or a cancel's clear with `outcome: "canceled"`).
    pub fn removal(target: SpliceTarget, count: usize, outcome: Option<&str>) -> InboxSpliced {
        InboxSpliced {
            target,
            start: 0,
            removed_count: Some(count as u64),
            inserted: Vec::new(),
            outcome: outcome.map(str::to_owned),
            extra: Extra::new(),
        }
    }

    /// Checks one normalized splice against the current lists: coordinates
    /// inside the list, and no message id pending twice across both lists
    /// afterwards.
    pub fn validate(&self, splice: &InboxSpliced) -> Result<()> {
        let this = self.get(splice.target);
        let len = this.len() as u64;
        let removed = removed_count(splice);
        if splice.start > len || removed > len - splice.start {
            return Err(invalid());
        }
        let (start, removed) = (splice.start as usize, removed as usize);
        let other = match splice.target {
            SpliceTarget::NextTurn => &self.next_step,
            SpliceTarget::NextStep => &self.next_turn,
        };
        let candidate = this[..start]
            .iter()
            .chain(&splice.inserted)
            .chain(&this[start + removed..])
            .chain(other);
        let mut ids = std::collections::HashSet::new();
        for m in candidate {
            if !ids.insert(m.id.as_str()) {
                return Err(Error::new(
                    MESSAGE_ALREADY_PENDING,
                    format!("message \"{}\" is already pending", m.id),
                ));
            }
        }
        Ok(())
    }

    /// Applies one normalized splice after [`Inbox::validate`]; returns the
    /// removed messages.
    pub fn apply(&mut self, splice: &InboxSpliced) -> Result<Vec<Message>> {
        self.validate(splice)?;
        let start = splice.start as usize;
        let removed = removed_count(splice) as usize;
        Ok(self
            .list(splice.target)
            .splice(start..start + removed, splice.inserted.iter().cloned())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn texts(list: &[Message]) -> Vec<String> {
        list.iter().map(Message::text).collect()
    }

    /// A message with an identity, as the loop stores them; its text is its
    /// id.
    fn msg(id: &str) -> Message {
        Message::user_text(id, id)
    }

    fn inbox_with(items: &[&str]) -> Inbox {
        let mut inbox = Inbox::default();
        for i in items {
            inbox.push(NEXT_TURN, msg(i));
        }
        inbox
    }

    /// A live `Array.splice` on next-turn: normalize, then apply.
    fn splice(i: &mut Inbox, start: f64, delete: f64, inserted: &[&str]) -> Vec<Message> {
        let inserted = inserted.iter().map(|s| msg(s)).collect();
        match i.normalize(NEXT_TURN, start, delete, inserted) {
            Some(s) => i.apply(&s).unwrap(),
            None => Vec::new(),
        }
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
        // what it removed, in the original's key order.
        let mut i = inbox_with(&["a", "b"]);
        let normalized = i.normalize(NEXT_TURN, 1.0, 5.0, Vec::new()).unwrap();
        assert_eq!(
            serde_json::to_string(&normalized).unwrap(),
            r#"{"target":"next-turn","start":1,"removedCount":1,"inserted":[]}"#
        );
        splice(&mut i, 1.0, 5.0, &[]);
        assert_eq!(texts(&i.next_turn), ["a"]);
        // A no-op splice is nothing to log.
        assert_eq!(i.normalize(NEXT_TURN, 0.0, 0.0, Vec::new()), None);
        assert_eq!(i.normalize(NEXT_TURN, 5.0, 3.0, Vec::new()), None);
    }

    #[test]
    fn a_cancelling_removal_is_logged_with_its_outcome() {
        let clear = Inbox::removal(NEXT_STEP, 2, Some(CANCELED));
        assert_eq!(
            serde_json::to_string(&clear).unwrap(),
            r#"{"target":"next-step","start":0,"removedCount":2,"inserted":[],"outcome":"canceled"}"#
        );
    }

    #[test]
    fn clear_reports_next_step_first_and_skips_empty_lists() {
        let mut i = inbox_with(&["t1", "t2"]);
        i.push(NEXT_STEP, msg("s1"));
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
        // Replay never normalizes: a removal past the end is invalid at its
        // own seq; a logged negative start, an unknown target and an
        // inserted entry that is not a message are not splices at all, and
        // say why.
        let first = json!({"target": "next-turn", "start": 0, "inserted": [msg("a")]});
        let past_end =
            json!({"target": "next-turn", "start": 0, "removedCount": 2, "inserted": []});
        let err = Inbox::replay([(3, &first), (7, &past_end)]).unwrap_err();
        assert_eq!(
            err.message,
            "invalid persisted inbox splice at session seq 7: invalid inbox splice"
        );
        for (bad, why) in [
            (
                json!({"target": "next-turn", "start": -1, "inserted": []}),
                "invalid value: integer `-1`, expected u64",
            ),
            (
                json!({"target": "later", "start": 0, "inserted": [msg("b")]}),
                "unknown variant `later`, expected `next-turn` or `next-step`",
            ),
            (
                json!({"target": "next-turn", "start": 1, "inserted": [{"id": "c", "text": "c"}]}),
                "missing field `role`",
            ),
        ] {
            let err = Inbox::replay([(3, &first), (7, &bad)]).unwrap_err();
            assert_eq!(err.code, INVALID_INBOX_SPLICE);
            assert_eq!(
                err.message,
                format!(
                    "invalid persisted inbox splice at session seq 7: invalid inbox splice ({why})"
                )
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
