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
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::message::{ContentBlock, MessageSource, PluginSource};
use dsh_sdk::vocab::{event, surface_nodes, Extra, Message, SessionEvent, SurfaceOp};

/// The source plugin of snapshot messages: the original's name, so logs stay
/// loadable by (and attributable in) the original.
pub const SOURCE: &str = "@deepseek-ai/dsh-system-prompt";

/// The snapshot that replaces a retained one once no context is active.
pub const CLEARED: &str =
    "Current runtime context: none. Earlier runtime-context snapshots no longer apply.";

/// The `form` of a snapshot message with sections.
const SNAPSHOT_FORM: &str = "snapshot";

/// The source field that carries a snapshot's named sections.
const SECTIONS: &str = "sections";

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

fn is_owned(message: &Message) -> bool {
    matches!(&message.source, MessageSource::Plugin(p) if p.plugin == SOURCE)
}

/// The text of a message that is exactly one text block.
fn text_of(message: &Message) -> Option<String> {
    match message.content.as_slice() {
        [ContentBlock::Text(block)] => Some(block.text.clone()),
        _ => None,
    }
}

/// The snapshot message `e` logs, if it is one (a `user/message` of this
/// plugin's source). A `user/message` that is not a message is the log's
/// corruption, named by its seq.
fn owned_snapshot(e: &SessionEvent) -> Result<Option<Message>> {
    if e.kind != event::USER_MESSAGE {
        return Ok(None);
    }
    let message: Message = e.data_as()?;
    Ok(is_owned(&message).then_some(message))
}

impl Projection {
    /// Restores the state of a log read from its start: the latest owned
    /// snapshot still visible is retained; if every one was replaced away,
    /// none is.
    pub fn restore(&mut self, events: &[SessionEvent]) -> Result<()> {
        let mut owned: Vec<(u64, Message)> = Vec::new();
        for e in events {
            if let Some(m) = owned_snapshot(e)? {
                owned.push((e.seq, m));
            }
        }
        self.seen = events.last().map_or(0, |e| e.seq + 1);
        if owned.is_empty() {
            self.retained = Retained::Never;
            return Ok(());
        }
        // The latest visible node that is an owned snapshot, then the
        // latest owned event of that message's id.
        let visible = surface_nodes(events)
            .into_iter()
            .rev()
            .find_map(|n| owned.iter().find(|(seq, _)| *seq == n.seq));
        self.retained = visible
            .and_then(|(_, m)| owned.iter().rev().find(|(_, e)| e.id == m.id))
            .map_or(Retained::Gone, |(seq, m)| Retained::Snapshot {
                seq: *seq,
                text: text_of(m),
            });
        Ok(())
    }

    /// Folds the log's next events (those from [`Projection::seen`] on). A
    /// malformed snapshot candidate stops the fold before it, so every
    /// later step reports it again.
    pub fn follow(&mut self, events: &[SessionEvent]) -> Result<()> {
        for e in events {
            let snapshot = owned_snapshot(e)?;
            self.seen = self.seen.max(e.seq + 1);
            if let Some(m) = snapshot {
                self.retained = Retained::Snapshot {
                    seq: e.seq,
                    text: text_of(&m),
                };
            } else if let Retained::Snapshot { seq, .. } = self.retained {
                let covers = e
                    .source_event_seqs
                    .as_ref()
                    .is_some_and(|s| s.contains(&seq));
                if SurfaceOp::is_replace(e.surface_op.as_ref()) && covers {
                    self.retained = Retained::Gone;
                }
            }
        }
        Ok(())
    }

    /// The snapshot message to append, when the retained one differs from
    /// `current` (the rendered snapshot, `""` when no context is active);
    /// `sections` are its named parts.
    pub fn project(&self, current: &str, sections: &[NamedText]) -> Result<Option<Message>> {
        if self.retained == Retained::Never && current.is_empty() {
            return Ok(None);
        }
        let snapshot = if current.is_empty() { CLEARED } else { current };
        if let Retained::Snapshot { text: Some(t), .. } = &self.retained {
            if t == snapshot {
                return Ok(None);
            }
        }
        // The cleared marker has no contributions left to attribute.
        let source = if sections.is_empty() {
            MessageSource::plugin(SOURCE)
        } else {
            let mut extra = Extra::new();
            extra.insert(SECTIONS.to_owned(), serde_json::to_value(sections)?);
            MessageSource::Plugin(PluginSource {
                plugin: SOURCE.to_owned(),
                form: Some(SNAPSHOT_FORM.to_owned()),
                extra,
            })
        };
        Ok(Some(Message::user(
            dsh_sdk::new_id(),
            vec![ContentBlock::text(snapshot)],
            source,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// The projected message, as logged.
    fn project(p: &Projection, current: &str, sections: &[NamedText]) -> Option<Value> {
        let m = p.project(current, sections).unwrap()?;
        Some(serde_json::to_value(m).unwrap())
    }

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
        assert_eq!(project(&p, "", &[]), None);
        let m = project(&p, SNAP, &[text("policy", "Mode: a.")]).unwrap();
        assert_eq!(m["content"], json!([{"type": "text", "text": SNAP}]));
        assert_eq!(
            m["source"],
            json!({"kind": "plugin", "plugin": SOURCE, "form": "snapshot",
                   "sections": [{"name": "policy", "text": "Mode: a."}]})
        );
        p.follow(&[ev(4, event::USER_MESSAGE, m, Some(json!("append")), None)])
            .unwrap();
        assert_eq!(p.seen, 5);
        assert_eq!(project(&p, SNAP, &[]), None);
        // Gone: the cleared marker, without sections.
        let c = project(&p, "", &[]).unwrap();
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
        )])
        .unwrap();
        let summary = json!({"id": "s", "role": "user", "content": [], "source": {"kind": "plugin", "plugin": "compaction"}});
        let replace = |at: u64| Some(json!({"op": "replace", "start": at, "end": at}));
        p.follow(&[ev(
            2,
            event::USER_MESSAGE,
            summary.clone(),
            replace(0),
            Some(vec![0]),
        )])
        .unwrap();
        assert_eq!(project(&p, SNAP, &[]), None);
        p.follow(&[ev(
            3,
            event::USER_MESSAGE,
            summary,
            replace(1),
            Some(vec![1]),
        )])
        .unwrap();
        assert!(project(&p, SNAP, &[]).is_some());
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
        ])
        .unwrap();
        assert_eq!(p.seen, 3);
        assert_eq!(project(&p, "retained", &[]), None);
        let m = project(&p, "next", &[text("sandbox:policy", "policy")]).unwrap();
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
        )])
        .unwrap();
        let m = project(&p, SNAP, &[]).unwrap();
        assert_eq!(m["content"][0]["text"], SNAP);
    }

    #[test]
    fn a_user_message_that_is_not_a_message_is_the_logs_corruption_named_by_seq() {
        let mut p = Projection::default();
        let sourceless = json!({"id": "x", "role": "user", "content": []});
        let events = [ev(
            6,
            event::USER_MESSAGE,
            sourceless,
            Some(json!("append")),
            None,
        )];
        for err in [
            p.follow(&events).unwrap_err(),
            p.restore(&events).unwrap_err(),
        ] {
            assert_eq!(err.code, dsh_sdk::names::code::SESSION_CORRUPT);
            assert!(
                err.message
                    .starts_with("session event 6 (user/message) has malformed data"),
                "{}",
                err.message
            );
        }
    }
}
