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

    pub fn clear(&mut self) {
        self.next_step.clear();
        self.next_turn.clear();
    }

    pub fn has_pending(&self) -> bool {
        !self.next_step.is_empty() || !self.next_turn.is_empty()
    }

    /// Applies one logged splice (JS `Array.splice` coordinates).
    pub fn splice(&mut self, data: &Value) {
        let target = data["target"].as_str().unwrap_or("next-turn");
        let list = self.list(target);
        let len = list.len() as i64;
        let start = data["start"].as_i64().unwrap_or(0);
        let start = if start < 0 {
            (len + start).max(0)
        } else {
            start.min(len)
        } as usize;
        let removed = data["removedCount"].as_u64().unwrap_or(0) as usize;
        let end = (start + removed).min(list.len());
        let inserted = data["inserted"].as_array().cloned().unwrap_or_default();
        list.splice(start..end, inserted);
    }
}
