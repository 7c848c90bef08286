//! The model history projected from a log (the original's
//! `deriveMessages`): surface events in order, `replace` ranges spliced
//! out, empty assistant messages skipped.

use serde_json::Value;

use super::{event, SessionEvent, SurfaceOp};

/// `deriveMessages()`: the model history projected from the surface of a
/// log (reference §2.5–2.6): surface events in order, with `replace` ranges
/// spliced out and empty assistant messages skipped.
pub fn derive_messages(events: &[SessionEvent]) -> Vec<Value> {
    surface_nodes(events)
        .into_iter()
        .filter_map(event_message)
        .cloned()
        .collect()
}

/// The message a surface event puts in the model history: a
/// `user/message`'s payload, the `message` of a `tool/result` or of an
/// `assistant/message` with content; `None` for anything else.
pub fn event_message(e: &SessionEvent) -> Option<&Value> {
    match e.kind.as_str() {
        event::USER_MESSAGE => Some(&e.data),
        event::ASSISTANT_MESSAGE | event::TOOL_RESULT => {
            let m = &e.data["message"];
            let empty = m["content"].as_array().is_none_or(Vec::is_empty);
            (!(e.kind == event::ASSISTANT_MESSAGE && empty)).then_some(m)
        }
        _ => None,
    }
}

/// The current surface of a log (or of its surface events): each node's
/// event, in order, `replace` ranges spliced.
pub fn surface_nodes(events: &[SessionEvent]) -> Vec<&SessionEvent> {
    let mut nodes: Vec<&SessionEvent> = Vec::new();
    for e in events {
        match e.surface_op.as_ref().and_then(SurfaceOp::of) {
            Some(SurfaceOp::Append) => nodes.push(e),
            Some(SurfaceOp::Replace { start, end }) => {
                let s = nodes.iter().position(|n| n.seq == start);
                let t = nodes.iter().position(|n| n.seq == end);
                if let (Some(s), Some(t)) = (s, t) {
                    if s <= t {
                        nodes.splice(s..=t, [e]);
                    }
                }
            }
            None => {}
        }
    }
    nodes
}
