//! Crash-tail repair (the original's `interruptedTurnClosers`): the events
//! that make a torn log balanced again. For an open turn, in order: one
//! synthetic error `tool/result` per call of the open step that has none
//! (`TOOL_OUTCOME_UNKNOWN` when its `tool/call` was recorded, citing it;
//! `TOOL_NOT_STARTED` when not), `step/end` if a step is open, then
//! `turn/end {kind: "interrupted"}`. Seqs continue the log; `time` is the
//! last event's.

use serde::{Deserialize, Serialize};

use super::message::{ContentBlock, Message};
use super::records::{StepBoundary, ToolErrorRef, ToolResult, TurnEnd, TurnEndReason};
use super::{event, records, SessionEvent, SurfaceOp};
use crate::names::code;

/// The text of a result for a call that was recorded but never answered.
const OUTCOME_UNKNOWN: &str = "The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly.";

/// The text of a result for a call that never started.
const NOT_STARTED: &str = "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed.";

/// The calls of an `assistant/message`, as repair reads them.
#[derive(Deserialize)]
struct CallsOf {
    step: u64,
    message: CallsMessage,
}

#[derive(Deserialize)]
struct CallsMessage {
    content: Vec<CallProbe>,
}

/// A content block, as far as repair looks at it.
#[derive(Deserialize)]
struct CallProbe {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    id: Option<String>,
}

impl CallProbe {
    /// The call id of a `tool-call` block.
    fn id(self) -> Option<String> {
        (self.kind == super::message::block_type::TOOL_CALL)
            .then_some(self.id)
            .flatten()
    }
}

/// A call of the open step still waiting for its result.
struct Pending {
    call_id: String,
    step: u64,
    /// The seq of its `tool/call`, once recorded.
    recorded: Option<u64>,
}

/// The closers of `events` (empty when the log is balanced). Data that
/// cannot be read as its type is skipped, as the original's scan does with
/// fields it does not find.
pub fn interrupted_turn_closers(events: &[SessionEvent]) -> Vec<SessionEvent> {
    let mut open_turn: Option<u64> = None;
    let mut open_step: Option<u64> = None;
    let mut pending: Vec<Pending> = Vec::new();
    // A turn/start resets everything: the last one is where to begin (the
    // data of earlier events is not read).
    let from = events
        .iter()
        .rposition(|e| e.kind == event::TURN_START)
        .unwrap_or(0);
    for e in &events[from..] {
        match e.kind.as_str() {
            event::TURN_START => {
                open_turn = e.data_as::<records::TurnStart>().ok().map(|t| t.turn);
                open_step = None;
                pending.clear();
            }
            event::TURN_END => {
                open_turn = None;
                open_step = None;
                pending.clear();
            }
            event::STEP_START => {
                open_step = e.data_as::<StepBoundary>().ok().map(|s| s.step);
            }
            event::STEP_END => {
                open_step = None;
                pending.clear();
            }
            event::ASSISTANT_MESSAGE => {
                // Only the calls are read: an answer whose other fields do
                // not read (a bad usage from an adapter) still had its
                // calls made, and each must be answered.
                if let Ok(m) = e.data_as::<CallsOf>() {
                    for call in m.message.content.into_iter().filter_map(CallProbe::id) {
                        if !pending.iter().any(|p| p.call_id == call) {
                            pending.push(Pending {
                                call_id: call,
                                step: m.step,
                                recorded: None,
                            });
                        }
                    }
                }
            }
            event::TOOL_CALL => {
                if let Ok(call) = e.data_as::<records::ToolCall>() {
                    if let Some(p) = pending.iter_mut().find(|p| p.call_id == call.call_id) {
                        p.recorded = Some(e.seq);
                    }
                }
            }
            event::TOOL_RESULT => {
                if let Ok(r) = e.data_as::<ToolResult>() {
                    pending.retain(|p| Some(p.call_id.as_str()) != r.message.call_id());
                }
            }
            _ => {}
        }
    }
    let Some(turn) = open_turn else {
        return Vec::new();
    };
    let mut out = Closers {
        base: events.last().map_or(0, |e| e.seq + 1),
        time: events.last().map_or(0, |e| e.time),
        events: Vec::new(),
    };
    for p in pending {
        let seq = out.next_seq();
        let (text, name, code) = match p.recorded {
            Some(_) => (
                OUTCOME_UNKNOWN,
                "ToolOutcomeUnknownError",
                code::TOOL_OUTCOME_UNKNOWN,
            ),
            None => (NOT_STARTED, "ToolNotStartedError", code::TOOL_NOT_STARTED),
        };
        let id = format!("interrupted-tool-result-{}-{seq}", p.call_id);
        let result = ToolResult {
            turn,
            step: p.step,
            message: Message::tool_result(id, p.call_id, vec![ContentBlock::text(text)], true),
            error: Some(ToolErrorRef::new(name, code)),
            meta: None,
            extra: Default::default(),
        };
        out.push(event::TOOL_RESULT, &result, p.recorded.map(|s| vec![s]));
    }
    if let Some(step) = open_step {
        out.push(event::STEP_END, &StepBoundary::new(turn, step), None);
    }
    out.push(
        event::TURN_END,
        &TurnEnd::new(turn, TurnEndReason::Interrupted),
        None,
    );
    out.events
}

/// The closers being built.
struct Closers {
    base: u64,
    time: u64,
    events: Vec<SessionEvent>,
}

impl Closers {
    fn next_seq(&self) -> u64 {
        self.base + self.events.len() as u64
    }

    fn push(&mut self, kind: &str, data: &impl Serialize, sources: Option<Vec<u64>>) {
        // Serializing these records cannot fail: strings, integers and
        // maps with string keys only.
        let data = serde_json::to_value(data).unwrap_or_default();
        let surface = kind == event::TOOL_RESULT;
        self.events.push(SessionEvent {
            kind: kind.to_owned(),
            seq: self.next_seq(),
            time: self.time,
            data: data.into(),
            source_event_seqs: sources,
            surface_op: surface.then(|| SurfaceOp::Append.to_value()),
            ignorable: None,
        });
    }
}
