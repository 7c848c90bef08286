//! The durable inbox (reference dsh-core §4.2): two ordered lists; every
//! mutation is logged first as `agent/inbox/spliced`, so a resumed agent
//! restores pending work.

use serde_json::Value;

#[derive(Debug, Default)]
pub struct Inbox {
    pub next_turn: Vec<Value>,
    pub next_step: Vec<Value>,
}

impl Inbox {
    fn list(&mut self, target: &str) -> &mut Vec<Value> {
        if target == "next-step" {
            &mut self.next_step
        } else {
            &mut self.next_turn
        }
    }

    pub fn len(&self, target: &str) -> usize {
        if target == "next-step" {
            self.next_step.len()
        } else {
            self.next_turn.len()
        }
    }

    pub fn push(&mut self, target: &str, m: Value) {
        self.list(target).push(m);
    }

    /// Empties both lists, returning what each held (next-step first, as
    /// the original clears them), skipping empty ones.
    pub fn clear(&mut self) -> Vec<(&'static str, Vec<Value>)> {
        let step = std::mem::take(&mut self.next_step);
        let turn = std::mem::take(&mut self.next_turn);
        [("next-step", step), ("next-turn", turn)]
            .into_iter()
            .filter(|(_, l)| !l.is_empty())
            .collect()
    }

    pub fn has_pending(&self) -> bool {
        !self.next_step.is_empty() || !self.next_turn.is_empty()
    }

    /// Applies one logged splice (JS `Array.splice` coordinates).
    pub fn splice(&mut self, data: &Value) {
        let target = data["target"].as_str().unwrap_or("next-turn");
        let list = self.list(target);
        let len = list.len() as f64;
        // `Array.splice` coordinates: truncated toward zero, a negative
        // start counts from the end, both clamped to the list.
        let start = data["start"].as_f64().unwrap_or(0.0).trunc();
        let start = if start < 0.0 {
            (len + start).max(0.0)
        } else {
            start.min(len)
        } as usize;
        let removed = data["removedCount"]
            .as_f64()
            .unwrap_or(0.0)
            .trunc()
            .max(0.0) as usize;
        let end = start.saturating_add(removed).min(list.len());
        let inserted = data["inserted"].as_array().cloned().unwrap_or_default();
        list.splice(start..end, inserted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn texts(list: &[Value]) -> Vec<&str> {
        list.iter().filter_map(Value::as_str).collect()
    }

    fn inbox_with(items: &[&str]) -> Inbox {
        let mut inbox = Inbox::default();
        for i in items {
            inbox.push("next-turn", json!(i));
        }
        inbox
    }

    #[test]
    fn splice_coordinates_follow_array_splice() {
        // Negative start counts from the end.
        let mut i = inbox_with(&["a", "b", "c"]);
        i.splice(
            &json!({"target": "next-turn", "start": -1, "removedCount": 1, "inserted": ["x"]}),
        );
        assert_eq!(texts(&i.next_turn), ["a", "b", "x"]);
        // A start before the head clamps to 0; past the end clamps to len.
        let mut i = inbox_with(&["a", "b"]);
        i.splice(&json!({"target": "next-turn", "start": -9, "inserted": ["x"]}));
        i.splice(&json!({"target": "next-turn", "start": 99, "inserted": ["y"]}));
        assert_eq!(texts(&i.next_turn), ["x", "a", "b", "y"]);
        // Fractional coordinates truncate toward zero.
        let mut i = inbox_with(&["a", "b", "c"]);
        i.splice(
            &json!({"target": "next-turn", "start": 1.7, "removedCount": 1.9, "inserted": []}),
        );
        assert_eq!(texts(&i.next_turn), ["a", "c"]);
        // A removal past the end removes what is there.
        let mut i = inbox_with(&["a", "b"]);
        i.splice(&json!({"target": "next-turn", "start": 1, "removedCount": 5, "inserted": []}));
        assert_eq!(texts(&i.next_turn), ["a"]);
    }

    #[test]
    fn clear_reports_next_step_first_and_skips_empty_lists() {
        let mut i = inbox_with(&["t1", "t2"]);
        i.push("next-step", json!("s1"));
        let removed = i.clear();
        assert_eq!(removed.len(), 2);
        assert_eq!(removed[0].0, "next-step");
        assert_eq!(texts(&removed[0].1), ["s1"]);
        assert_eq!(removed[1].0, "next-turn");
        assert_eq!(texts(&removed[1].1), ["t1", "t2"]);
        assert!(!i.has_pending());
        assert!(i.clear().is_empty());
    }
}
