//! Runtime-context snapshots (the original's
//! `agent-loop/src/runtime-context.ts`): the system prompt's dynamic
//! contexts reach the model as a durable user message at the history tail —
//! never in the system header — whenever the rendered snapshot differs from
//! the last one still retained in the log.
//!
//! The projection follows the session's events: an owned `user/message`
//! becomes the retained snapshot; a `replace` whose `sourceEventSeqs` covers
//! it (a compaction summarizing it away) leaves none retained, so the next
//! step re-emits the current snapshot, or the cleared marker when no context
//! is active any more. An agent's first fold restores instead: the latest
//! owned snapshot still visible in the model history is the retained one
//! (as the original's projection does when it is built over a loaded log).

use dsh_sdk::api::system_prompt::NamedText;
use dsh_sdk::vocab::{derive_messages, event, SessionEvent};
use serde_json::{json, Value};

/// The source plugin of snapshot messages: the original's name, so logs stay
/// loadable by (and attributable in) the original.
pub const SOURCE: &str = "@deepseek-ai/dsh-system-prompt";

/// The snapshot that replaces a retained one once no context is active.
pub const CLEARED: &str =
    "Current runtime context: none. Earlier runtime-context snapshots no longer apply.";

/// What the log retains.
#[derive(Debug, Default, Clone, PartialEq)]
enum Retained {
    /// No snapshot ever existed.
    #[default]
    Never,
    /// The last snapshot was replaced away.
    Gone,
    /// The last snapshot (its text, `None` when it is not one text block).
    Snapshot { seq: u64, text: Option<String> },
}

/// One agent's projection state: what it retains and how far it has read.
#[derive(Debug, Default)]
pub struct Projection {
    retained: Retained,
    /// The number of log events folded so far (the next `from`).
    pub seen: u64,
}

fn is_owned(message: &Value) -> bool {
    message["source"]["kind"] == "plugin" && message["source"]["plugin"] == SOURCE
}

/// The text of a message that is exactly one text block.
fn text_of(message: &Value) -> Option<String> {
    match message["content"].as_array().map(Vec::as_slice) {
        Some([block]) if block["type"] == "text" => block["text"].as_str().map(str::to_owned),
        _ => None,
    }
}

fn is_replace(e: &SessionEvent) -> bool {
    e.surface_op
        .as_ref()
        .is_some_and(|op| op["op"] == "replace")
}

impl Projection {
    /// Restores the state of a log read from its start: the latest owned
    /// snapshot still visible is retained; if every one was replaced away,
    /// none is.
    pub fn restore(&mut self, events: &[SessionEvent]) {
        let owned = |e: &&SessionEvent| e.kind == event::USER_MESSAGE && is_owned(&e.data);
        self.seen = events.last().map_or(0, |e| e.seq + 1);
        if !events.iter().any(|e| owned(&e)) {
            self.retained = Retained::Never;
            return;
        }
        let visible = derive_messages(events).into_iter().rev().find(is_owned);
        self.retained = visible
            .and_then(|m| {
                let e = events
                    .iter()
                    .rev()
                    .filter(owned)
                    .find(|e| e.data["id"] == m["id"])?;
                Some(Retained::Snapshot {
                    seq: e.seq,
                    text: text_of(&m),
                })
            })
            .unwrap_or(Retained::Gone);
    }

    /// Folds the log's next events (those from [`Projection::seen`] on).
    pub fn follow(&mut self, events: &[SessionEvent]) {
        for e in events {
            self.seen = self.seen.max(e.seq + 1);
            if e.kind == event::USER_MESSAGE && is_owned(&e.data) {
                self.retained = Retained::Snapshot {
                    seq: e.seq,
                    text: text_of(&e.data),
                };
            } else if let Retained::Snapshot { seq, .. } = self.retained {
                let covers = e
                    .source_event_seqs
                    .as_ref()
                    .is_some_and(|s| s.contains(&seq));
                if is_replace(e) && covers {
                    self.retained = Retained::Gone;
                }
            }
        }
    }

    /// The snapshot message to append, when the retained one differs from
    /// `current` (the rendered snapshot, `""` when no context is active);
    /// `sections` are its named parts.
    pub fn project(&self, current: &str, sections: &[NamedText]) -> Option<Value> {
        if self.retained == Retained::Never && current.is_empty() {
            return None;
        }
        let snapshot = if current.is_empty() { CLEARED } else { current };
        if let Retained::Snapshot { text: Some(t), .. } = &self.retained {
            if t == snapshot {
                return None;
            }
        }
        let empty = sections.is_empty();
        // The cleared marker has no contributions left to attribute.
        let source = if empty {
            json!({"kind": "plugin", "plugin": SOURCE})
        } else {
            json!({"kind": "plugin", "plugin": SOURCE, "form": "snapshot", "sections": sections})
        };
        Some(json!({
            "id": dsh_sdk::new_id(),
            "role": "user",
            "content": [{"type": "text", "text": snapshot}],
            "source": source,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(name: &str, text: &str) -> NamedText {
        NamedText {
            name: name.into(),
            text: text.into(),
        }
    }

    fn ev(
        seq: u64,
        kind: &str,
        data: Value,
        op: Option<Value>,
        sources: Option<Vec<u64>>,
    ) -> SessionEvent {
        SessionEvent {
            kind: kind.into(),
            seq,
            time: 0,
            data: data.into(),
            source_event_seqs: sources,
            surface_op: op,
            ignorable: None,
        }
    }

    fn owned(text: &str) -> Value {
        json!({"id": "c", "role": "user", "content": [{"type": "text", "text": text}],
               "source": {"kind": "plugin", "plugin": SOURCE}})
    }

    const SNAP: &str = "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\n\nMode: a.";

    #[test]
    fn nothing_is_emitted_before_any_context_and_an_equal_retained_snapshot_is_kept() {
        let mut p = Projection::default();
        assert_eq!(p.project("", &[]), None);
        let m = p.project(SNAP, &[text("policy", "Mode: a.")]).unwrap();
        assert_eq!(m["content"], json!([{"type": "text", "text": SNAP}]));
        assert_eq!(
            m["source"],
            json!({"kind": "plugin", "plugin": SOURCE, "form": "snapshot",
                   "sections": [{"name": "policy", "text": "Mode: a."}]})
        );
        p.follow(&[ev(4, event::USER_MESSAGE, m, Some(json!("append")), None)]);
        assert_eq!(p.seen, 5);
        assert_eq!(p.project(SNAP, &[]), None);
        // Gone: the cleared marker, without sections.
        let c = p.project("", &[]).unwrap();
        assert_eq!(c["content"][0]["text"], CLEARED);
        assert_eq!(c["source"], json!({"kind": "plugin", "plugin": SOURCE}));
    }

    #[test]
    fn a_replace_covering_the_snapshot_releases_it_an_unrelated_one_does_not() {
        let mut p = Projection::default();
        p.follow(&[ev(
            1,
            event::USER_MESSAGE,
            owned(SNAP),
            Some(json!("append")),
            None,
        )]);
        let summary = json!({"id": "s", "role": "user", "content": [], "source": {"kind": "plugin", "plugin": "compaction"}});
        let replace = |at: u64| Some(json!({"op": "replace", "start": at, "end": at}));
        p.follow(&[ev(
            2,
            event::USER_MESSAGE,
            summary.clone(),
            replace(0),
            Some(vec![0]),
        )]);
        assert_eq!(p.project(SNAP, &[]), None);
        p.follow(&[ev(
            3,
            event::USER_MESSAGE,
            summary,
            replace(1),
            Some(vec![1]),
        )]);
        assert!(p.project(SNAP, &[]).is_some());
    }

    #[test]
    fn a_restore_retains_the_latest_visible_owned_snapshot() {
        let mut p = Projection::default();
        let mut retained = owned("retained");
        retained["id"] = json!("r");
        let mut shadowed = owned("shadowed");
        shadowed["id"] = json!("s");
        let summary = json!({"id": "c", "role": "user", "content": [{"type": "text", "text": "summary"}],
                             "source": {"kind": "plugin", "plugin": "test-compaction"}});
        p.restore(&[
            ev(
                0,
                event::USER_MESSAGE,
                retained,
                Some(json!("append")),
                None,
            ),
            ev(
                1,
                event::USER_MESSAGE,
                shadowed,
                Some(json!("append")),
                None,
            ),
            ev(
                2,
                event::USER_MESSAGE,
                summary,
                Some(json!({"op": "replace", "start": 1, "end": 1})),
                Some(vec![1]),
            ),
        ]);
        assert_eq!(p.seen, 3);
        assert_eq!(p.project("retained", &[]), None);
        let m = p
            .project("next", &[text("sandbox:policy", "policy")])
            .unwrap();
        assert_eq!(
            m["source"],
            json!({"kind": "plugin", "plugin": SOURCE, "form": "snapshot",
                   "sections": [{"name": "sandbox:policy", "text": "policy"}]})
        );
    }

    #[test]
    fn a_malformed_retained_snapshot_is_replaced() {
        let mut p = Projection::default();
        let broken = json!({"id": "b", "role": "user",
            "content": [{"type": "text", "text": "broken"}, {"type": "text", "text": "snapshot"}],
            "source": {"kind": "plugin", "plugin": SOURCE}});
        p.follow(&[ev(
            0,
            event::USER_MESSAGE,
            broken,
            Some(json!("append")),
            None,
        )]);
        let m = p.project(SNAP, &[]).unwrap();
        assert_eq!(m["content"][0]["text"], SNAP);
    }
}
