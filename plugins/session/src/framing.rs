//! Turn/step framing of a session log (reference dsh-core §2.10).
//!
//! A framed event's data is read once, into its record of
//! `dsh_sdk::vocab::records` (`TurnStart`, `TurnEnd`, `StepBoundary`,
//! `ToolCall`, `ToolResult`; of an `assistant/chunk` or
//! `assistant/message`, only its turn and step). A record that does not
//! read is refused, naming the field. [`Framing::check`] judges a live
//! append and returns the [`Advance`] it makes; a seed is replayed as
//! stored, not judged ([`Advance::of`] reads only what it changes); either
//! way [`Framing::apply`] takes the advance.

use std::collections::HashSet;

use dsh_sdk::names::code;
use dsh_sdk::vocab::message::{ContentBlock, ToolSource};
use dsh_sdk::vocab::records::{StepBoundary, ToolCall, ToolResult, TurnEnd, TurnStart};
use dsh_sdk::vocab::{event, SessionEvent, SurfaceOp, MAX_SAFE_INTEGER};
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// The open turn and step, the numbers the next ones must carry, and the
/// calls of the open step still owed a result.
#[derive(Debug, Default)]
pub struct Framing {
    open_turn: Option<u64>,
    open_step: Option<u64>,
    last_turn: u64,
    last_step: u64,
    pending_calls: HashSet<String>,
}

/// What an event changes in the framing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Advance {
    /// Nothing (an event the framing only judges, or does not look at).
    Nothing,
    /// `turn/start`: this turn opens.
    OpenTurn(u64),
    /// `turn/end`: the open turn closes.
    CloseTurn,
    /// `step/start`: this step opens.
    OpenStep(u64),
    /// `step/end`: the open step closes (calls it left unanswered are
    /// owed nothing after it).
    CloseStep,
    /// `tool/call`: this call is owed a result.
    Call(String),
    /// An appended `tool/result`: this call is answered.
    Answer(String),
}

/// The turn and step of an `assistant/chunk` or `assistant/message`: all
/// the framing reads of them (the chunk and the message are the agent
/// loop's to judge, not the log's).
#[derive(Deserialize)]
struct Position {
    turn: u64,
    step: u64,
}

/// The call a stored `tool/result` answers, as a seed is replayed: only
/// `message.source` is read (the seed's message shape was checked already,
/// and the rest of a long tool output is skipped, not built).
#[derive(Deserialize)]
struct Answering {
    message: AnsweringMessage,
}

/// The `message` of [`Answering`].
#[derive(Deserialize)]
struct AnsweringMessage {
    source: ToolSource,
}

/// `e`'s data read as `T`; a record that does not read is refused, naming
/// the event, its type and the field at fault.
fn read<T: DeserializeOwned>(e: &SessionEvent) -> Result<T, String> {
    e.data_as::<T>().map_err(|err| err.message)
}

/// A `tool/result` that answers a call (a replacement rewrites one instead).
fn appends_result(e: &SessionEvent) -> bool {
    SurfaceOp::is_append(e.surface_op.as_ref())
}

/// The call an appended `tool/result` answers (its source's `callId`).
fn answered_call(r: &ToolResult) -> Result<&str, String> {
    r.message.call_id().ok_or_else(|| {
        format!(
            "a `{}` message must have a tool source (`message.source` = {{kind: \"tool\", callId}}) naming the call it answers",
            event::TOOL_RESULT
        )
    })
}

/// Whether `r` is a `TOOL_NOT_STARTED` repair result (an error result for
/// a call the log never recorded as started).
fn is_not_started_repair(r: &ToolResult) -> bool {
    let is_error = matches!(
        r.message.content.first(),
        Some(ContentBlock::ToolResult(b)) if b.is_error == Some(true)
    );
    is_error
        && r.error
            .as_ref()
            .is_some_and(|e| e.code.as_deref() == Some(code::TOOL_NOT_STARTED))
}

impl Advance {
    /// What stored event `e` changes, as a seed is replayed: the turn of a
    /// `turn/start`, the step of a `step/start`, the call of a `tool/call`
    /// or of an appended `tool/result`. Only those fields are read (a
    /// stored record is the log's, not judged again; the reason of a
    /// `turn/end` is read by whoever reports it). A turn or step beyond
    /// JavaScript's safe integers is refused: the original cannot hold it
    /// and the next number would not exist.
    pub fn of(e: &SessionEvent) -> Result<Advance, String> {
        let safe = |n: u64, what: &str| {
            if n > MAX_SAFE_INTEGER {
                Err(format!("{} {what} {n} is beyond the safe integers", e.kind))
            } else {
                Ok(n)
            }
        };
        Ok(match e.kind.as_str() {
            event::TURN_START => Advance::OpenTurn(safe(read::<TurnStart>(e)?.turn, "turn")?),
            event::TURN_END => Advance::CloseTurn,
            event::STEP_START => Advance::OpenStep(safe(read::<StepBoundary>(e)?.step, "step")?),
            event::STEP_END => Advance::CloseStep,
            event::TOOL_CALL => Advance::Call(read::<ToolCall>(e)?.call_id),
            event::TOOL_RESULT if appends_result(e) => {
                Advance::Answer(read::<Answering>(e)?.message.source.call_id)
            }
            _ => Advance::Nothing,
        })
    }
}

// The refusals below keep their wording from before the records were
// typed, numbers included as `Some(n)`.
impl Framing {
    /// Why `e` may not be appended now, if it may not; otherwise what it
    /// changes.
    pub fn check(&self, e: &SessionEvent) -> Result<Advance, String> {
        let kind = e.kind.as_str();
        match kind {
            event::TURN_START => {
                let start: TurnStart = read(e)?;
                self.check_turn_start(start.turn)?;
                Ok(Advance::OpenTurn(start.turn))
            }
            event::TURN_END => {
                let end: TurnEnd = read(e)?;
                self.check_turn_end(end.turn)?;
                Ok(Advance::CloseTurn)
            }
            event::STEP_START => {
                let start: StepBoundary = read(e)?;
                self.check_step_start(start.turn, start.step)?;
                Ok(Advance::OpenStep(start.step))
            }
            event::STEP_END => {
                let end: StepBoundary = read(e)?;
                self.check_in_step(kind, end.turn, end.step)?;
                Ok(Advance::CloseStep)
            }
            event::ASSISTANT_CHUNK | event::ASSISTANT_MESSAGE => {
                let at: Position = read(e)?;
                self.check_in_step(kind, at.turn, at.step)?;
                Ok(Advance::Nothing)
            }
            event::TOOL_CALL => {
                let call: ToolCall = read(e)?;
                self.check_in_step(kind, call.turn, call.step)?;
                Ok(Advance::Call(call.call_id))
            }
            event::TOOL_RESULT if appends_result(e) => {
                let result: ToolResult = read(e)?;
                self.check_in_step(kind, result.turn, result.step)?;
                let call_id = answered_call(&result)?;
                self.check_answers_a_call(call_id, is_not_started_repair(&result))?;
                Ok(Advance::Answer(call_id.to_owned()))
            }
            event::TOOL_RESULT
            | event::TODO_WRITE
            | event::REQUEST_HEADER
            | event::REQUEST_CONTEXT => {
                self.check_in_turn(kind)?;
                Ok(Advance::Nothing)
            }
            _ => Ok(Advance::Nothing),
        }
    }

    /// A turn opens only when none is open, with the next number.
    fn check_turn_start(&self, turn: u64) -> Result<(), String> {
        if let Some(t) = self.open_turn {
            return Err(format!("turn/start while turn {t} is open"));
        }
        if Some(turn) != self.last_turn.checked_add(1) {
            return Err(format!(
                "turn/start must open turn {}, got {:?}",
                self.last_turn.saturating_add(1),
                Some(turn)
            ));
        }
        Ok(())
    }

    /// A turn closes by its number, after its last step closed.
    fn check_turn_end(&self, turn: u64) -> Result<(), String> {
        if self.open_turn != Some(turn) {
            return Err(format!(
                "turn/end for {:?} but the open turn is {:?}",
                Some(turn),
                self.open_turn
            ));
        }
        if let Some(s) = self.open_step {
            return Err(format!("turn/end while step {s} is open"));
        }
        Ok(())
    }

    /// A step opens inside its turn, when none is open, with the next
    /// number.
    fn check_step_start(&self, turn: u64, step: u64) -> Result<(), String> {
        if self.open_turn != Some(turn) {
            return Err("step/start outside its turn".into());
        }
        if let Some(s) = self.open_step {
            return Err(format!("step/start while step {s} is open"));
        }
        if Some(step) != self.last_step.checked_add(1) {
            return Err(format!(
                "step/start must open step {}, got {:?}",
                self.last_step.saturating_add(1),
                Some(step)
            ));
        }
        Ok(())
    }

    /// A step-scoped event names the open turn and step.
    fn check_in_step(&self, kind: &str, turn: u64, step: u64) -> Result<(), String> {
        if self.open_turn != Some(turn) || self.open_step != Some(step) {
            return Err(format!(
                "`{kind}` must name the open turn/step ({:?}/{:?}), got {:?}/{:?}",
                self.open_turn,
                self.open_step,
                Some(turn),
                Some(step)
            ));
        }
        Ok(())
    }

    /// An appended `tool/result` answers a `tool/call` of the open step,
    /// unless it is a `TOOL_NOT_STARTED` repair result.
    fn check_answers_a_call(&self, call_id: &str, not_started: bool) -> Result<(), String> {
        if !self.pending_calls.contains(call_id) && !not_started {
            return Err(format!(
                "tool/result for {call_id} with no prior tool/call in this step"
            ));
        }
        Ok(())
    }

    /// A turn-scoped event comes inside a turn.
    fn check_in_turn(&self, kind: &str) -> Result<(), String> {
        if self.open_turn.is_none() {
            return Err(format!("`{kind}` outside a turn"));
        }
        Ok(())
    }

    /// Takes `advance` (of a checked append, or of a replayed seed).
    pub fn apply(&mut self, advance: Advance) {
        match advance {
            Advance::Nothing => {}
            Advance::OpenTurn(turn) => {
                self.open_turn = Some(turn);
                self.last_turn = turn;
                self.open_step = None;
                self.last_step = 0;
            }
            Advance::CloseTurn => {
                self.open_turn = None;
                self.open_step = None;
            }
            Advance::OpenStep(step) => {
                self.open_step = Some(step);
                self.last_step = step;
            }
            Advance::CloseStep => {
                self.open_step = None;
                self.pending_calls.clear();
            }
            Advance::Call(call_id) => {
                self.pending_calls.insert(call_id);
            }
            Advance::Answer(call_id) => {
                self.pending_calls.remove(&call_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::vocab::records::{ToolErrorRef, TurnEndReason};
    use dsh_sdk::vocab::{Extra, Message};
    use serde::Serialize;
    use serde_json::{json, Value};

    fn ev(kind: &str, data: &impl Serialize) -> SessionEvent {
        SessionEvent::new(kind, 0, serde_json::to_value(data).unwrap())
    }

    /// Feeds `events` through check+apply; the index of the first refusal.
    fn run(f: &mut Framing, events: &[SessionEvent]) -> Result<(), (usize, String)> {
        for (i, e) in events.iter().enumerate() {
            let advance = f.check(e).map_err(|why| (i, why))?;
            f.apply(advance);
        }
        Ok(())
    }

    fn start(turn: u64) -> SessionEvent {
        ev(event::TURN_START, &TurnStart::new(turn))
    }

    fn end(turn: u64) -> SessionEvent {
        ev(
            event::TURN_END,
            &TurnEnd::new(turn, TurnEndReason::Completed),
        )
    }

    /// An event of `kind` (a step boundary, a chunk, a message) naming
    /// `turn`/`step`.
    fn at(kind: &str, turn: u64, step: u64) -> SessionEvent {
        ev(kind, &StepBoundary::new(turn, step))
    }

    fn call(turn: u64, step: u64, id: &str) -> SessionEvent {
        let call = ToolCall {
            turn,
            step,
            call_id: id.into(),
            name: "read".into(),
            arguments: "{}".into(),
            extra: Extra::new(),
        };
        ev(event::TOOL_CALL, &call)
    }

    /// An appended `tool/result` answering `id`; `code` makes it an error
    /// result with that code.
    fn result(turn: u64, step: u64, id: &str, code: Option<&str>) -> SessionEvent {
        let result = ToolResult {
            turn,
            step,
            message: Message::tool_result("r", id, vec![], code.is_some()),
            error: code.map(|code| ToolErrorRef::new("ToolNotStartedError", code)),
            meta: None,
            extra: Extra::new(),
        };
        SessionEvent {
            surface_op: Some(SurfaceOp::Append.to_value()),
            ..ev(event::TOOL_RESULT, &result)
        }
    }

    #[test]
    fn a_result_pairs_with_a_call_of_its_own_step() {
        let head = || vec![start(1), at(event::STEP_START, 1, 1)];
        let refused = |log: &[SessionEvent]| {
            let mut f = Framing::default();
            run(&mut f, log).map_err(|e| e.1)
        };
        let mut unknown = head();
        unknown.push(call(1, 1, "c1"));
        unknown.push(result(1, 1, "c2", None));
        assert_eq!(
            refused(&unknown),
            Err("tool/result for c2 with no prior tool/call in this step".into())
        );
        let mut twice = head();
        twice.push(call(1, 1, "c1"));
        twice.push(result(1, 1, "c1", None));
        twice.push(result(1, 1, "c1", None));
        assert_eq!(
            refused(&twice),
            Err("tool/result for c1 with no prior tool/call in this step".into())
        );
        let mut earlier_step = head();
        earlier_step.extend([
            call(1, 1, "c1"),
            at(event::STEP_END, 1, 1),
            at(event::STEP_START, 1, 2),
            result(1, 2, "c1", None),
        ]);
        assert_eq!(
            refused(&earlier_step),
            Err("tool/result for c1 with no prior tool/call in this step".into())
        );
        let mut other_step = head();
        other_step.extend([call(1, 1, "c1"), result(1, 2, "c1", None)]);
        assert!(refused(&other_step).is_err());
    }

    #[test]
    fn not_started_repair_results_and_unresolved_calls_at_step_end_are_allowed() {
        let log = [
            start(1),
            at(event::STEP_START, 1, 1),
            result(1, 1, "never-recorded", Some(code::TOOL_NOT_STARTED)),
            call(1, 1, "c1"),
            at(event::STEP_END, 1, 1),
            end(1),
        ];
        assert_eq!(run(&mut Framing::default(), &log), Ok(()));
        let other_code = [
            start(1),
            at(event::STEP_START, 1, 1),
            result(1, 1, "never-recorded", Some(code::TOOL_OUTCOME_UNKNOWN)),
        ];
        assert_eq!(
            run(&mut Framing::default(), &other_code).map_err(|e| e.0),
            Err(2)
        );
    }

    fn well_formed(turn: u64) -> Vec<SessionEvent> {
        vec![
            start(turn),
            ev(event::REQUEST_HEADER, &json!({"turn": turn})),
            at(event::STEP_START, turn, 1),
            at(event::ASSISTANT_CHUNK, turn, 1),
            at(event::ASSISTANT_MESSAGE, turn, 1),
            call(turn, 1, "c1"),
            result(turn, 1, "c1", None),
            at(event::STEP_END, turn, 1),
            at(event::STEP_START, turn, 2),
            at(event::STEP_END, turn, 2),
            end(turn),
        ]
    }

    #[test]
    fn well_formed_turn_step_tool_sequences_pass() {
        let mut f = Framing::default();
        let mut log = well_formed(1);
        log.extend(well_formed(2));
        assert_eq!(run(&mut f, &log), Ok(()));
    }

    #[test]
    fn turn_numbering_and_enclosure_are_enforced() {
        let mut f = Framing::default();
        assert!(run(&mut f, &[start(2)]).is_err());
        let mut f = Framing::default();
        assert_eq!(run(&mut f, &[start(1), start(2)]).map_err(|e| e.0), Err(1));
        let mut f = Framing::default();
        assert!(run(&mut f, &[end(1)]).is_err());
        let mut f = Framing::default();
        let step_open = [start(1), at(event::STEP_START, 1, 1), end(1)];
        assert_eq!(run(&mut f, &step_open).map_err(|e| e.0), Err(2));
        for kind in [
            event::TODO_WRITE,
            event::REQUEST_HEADER,
            event::REQUEST_CONTEXT,
            event::TOOL_RESULT,
        ] {
            let mut f = Framing::default();
            assert!(run(&mut f, &[ev(kind, &json!({}))]).is_err(), "{kind}");
        }
    }

    #[test]
    fn step_identity_and_numbering_are_enforced() {
        for bad in [
            vec![at(event::STEP_START, 1, 2)],
            vec![at(event::STEP_START, 2, 1)],
            vec![at(event::STEP_START, 1, 1), at(event::STEP_START, 1, 2)],
            vec![at(event::STEP_START, 1, 1), at(event::STEP_END, 1, 2)],
        ] {
            let mut f = Framing::default();
            let mut log = vec![start(1)];
            log.extend(bad);
            assert!(run(&mut f, &log).is_err(), "{log:?}");
        }
    }

    #[test]
    fn step_scoped_events_must_name_the_open_step() {
        for kind in [
            event::ASSISTANT_CHUNK,
            event::ASSISTANT_MESSAGE,
            event::TOOL_CALL,
        ] {
            let mut f = Framing::default();
            let log = [start(1), at(event::STEP_START, 1, 1), at(kind, 1, 2)];
            assert_eq!(run(&mut f, &log).map_err(|e| e.0), Err(2), "{kind}");
            let mut f = Framing::default();
            let outside = [start(1), at(kind, 1, 1)];
            assert_eq!(run(&mut f, &outside).map_err(|e| e.0), Err(1), "{kind}");
        }
    }

    #[test]
    fn framing_messages_keep_their_wording() {
        let refused = |log: &[SessionEvent]| run(&mut Framing::default(), log).map_err(|e| e.1);
        assert_eq!(
            refused(&[start(2)]),
            Err("turn/start must open turn 1, got Some(2)".into())
        );
        assert_eq!(
            refused(&[start(1), start(2)]),
            Err("turn/start while turn 1 is open".into())
        );
        assert_eq!(
            refused(&[end(1)]),
            Err("turn/end for Some(1) but the open turn is None".into())
        );
        assert_eq!(
            refused(&[start(1), at(event::STEP_START, 1, 2)]),
            Err("step/start must open step 1, got Some(2)".into())
        );
        assert_eq!(
            refused(&[start(1), at(event::STEP_START, 1, 1), at(event::ASSISTANT_CHUNK, 1, 2)]),
            Err("`assistant/chunk` must name the open turn/step (Some(1)/Some(1)), got Some(1)/Some(2)".into())
        );
    }

    /// Issue 19, item 2: a framed event whose data does not read as its
    /// record is refused, naming the field, and the framing is unchanged.
    #[test]
    fn a_malformed_framing_record_is_refused_naming_the_field() {
        let open = || {
            let mut f = Framing::default();
            run(
                &mut f,
                &[start(1), at(event::STEP_START, 1, 1), call(1, 1, "c1")],
            )
            .unwrap();
            f
        };
        let raw = |kind: &str, data: Value| SessionEvent::new(kind, 7, data);
        let answer = |message: Value| SessionEvent {
            surface_op: Some(SurfaceOp::Append.to_value()),
            ..raw(
                event::TOOL_RESULT,
                json!({"turn": 1, "step": 1, "message": message}),
            )
        };
        let cases = [
            (
                Framing::default(),
                raw(event::TURN_START, json!({"turn": "1"})),
                "session event 7 (turn/start) has malformed data at `turn`: invalid type: string \"1\", expected u64",
            ),
            (
                Framing::default(),
                raw(event::TURN_START, json!({})),
                "session event 7 (turn/start) has malformed data at `.`: missing field `turn`",
            ),
            (
                {
                    let mut f = Framing::default();
                    run(&mut f, &[start(1)]).unwrap();
                    f
                },
                raw(event::TURN_END, json!({"turn": 1})),
                "session event 7 (turn/end) has malformed data at `.`: missing field `reason`",
            ),
            (
                open(),
                raw(event::STEP_END, json!({"turn": 1})),
                "session event 7 (step/end) has malformed data at `.`: missing field `step`",
            ),
            (
                open(),
                raw(event::ASSISTANT_CHUNK, json!({"turn": 1, "step": -1})),
                "session event 7 (assistant/chunk) has malformed data at `step`: invalid value: integer `-1`, expected u64",
            ),
            (
                open(),
                raw(event::TOOL_CALL, json!({"turn": 1, "step": 1, "name": "read", "arguments": "{}"})),
                "session event 7 (tool/call) has malformed data at `.`: missing field `callId`",
            ),
            (
                open(),
                answer(json!({"role": "user", "content": [], "source": {"kind": "tool", "callId": "c1"}})),
                "session event 7 (tool/result) has malformed data at `message`: missing field `id`",
            ),
            (
                open(),
                answer(json!({"id": "r", "role": "user", "content": [], "source": {"kind": "user"}})),
                "a `tool/result` message must have a tool source (`message.source` = {kind: \"tool\", callId}) naming the call it answers",
            ),
        ];
        for (f, bad, why) in cases {
            let before = format!("{f:?}");
            assert_eq!(f.check(&bad), Err(why.to_owned()), "{bad:?}");
            assert_eq!(format!("{f:?}"), before, "the framing is unchanged");
        }
        // The framing still takes what it took before the refusal.
        let f = open();
        let ok = f.check(&result(1, 1, "c1", None));
        assert_eq!(ok, Ok(Advance::Answer("c1".into())));
    }

    #[test]
    fn a_refused_event_does_not_advance_the_state() {
        let f = Framing::default();
        assert!(f.check(&start(5)).is_err());
        assert!(f.check(&start(1)).is_ok());
    }

    /// Seeds are replayed, not judged: only what changes the framing is
    /// read, and a seed record that does not read is refused.
    #[test]
    fn seeded_framing_continues_numbering_and_end_seed_is_allowed_anywhere() {
        let mut f = Framing::default();
        for e in well_formed(1) {
            f.apply(Advance::of(&e).unwrap());
        }
        let end_seed = || ev(event::SESSION_END_SEED, &json!({}));
        assert!(f.check(&end_seed()).is_ok());
        assert!(f.check(&start(1)).is_err());
        let next = [
            start(2),
            end_seed(),
            at(event::STEP_START, 2, 1),
            end_seed(),
        ];
        assert_eq!(run(&mut f, &next), Ok(()));
        let stored_call = SessionEvent::new(event::TOOL_CALL, 3, json!({"turn": 1, "step": 1}));
        assert_eq!(
            Advance::of(&stored_call),
            Err(
                "session event 3 (tool/call) has malformed data at `.`: missing field `callId`"
                    .into()
            )
        );
    }

    #[test]
    fn a_seed_result_is_read_for_its_call_only() {
        let stored = SessionEvent {
            surface_op: Some(SurfaceOp::Append.to_value()),
            data: dsh_sdk::LazyJson::from_text(
                r#"{"turn":1,"step":1,"message":{"id":"r","role":"user","content":[{"type":"tool-result","toolCallId":"c9","content":[],"isError":false}],"source":{"kind":"tool","callId":"c9"}}}"#,
            )
            .unwrap(),
            ..SessionEvent::new(event::TOOL_RESULT, 4, Value::Null)
        };
        assert_eq!(Advance::of(&stored), Ok(Advance::Answer("c9".into())));
        assert!(
            stored.data.unread_text().is_some(),
            "the data is not parsed"
        );
    }
}
