//! Turn/step framing of a session log (reference dsh-core §2.10).

use std::collections::HashSet;

use dsh_sdk::names::code;
use dsh_sdk::vocab::{event, SessionEvent};
use serde_json::Value;

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

/// A `tool/result` that answers a call (a replacement rewrites one instead).
fn appends_result(e: &SessionEvent) -> bool {
    e.surface_op.as_ref().is_some_and(|op| op == "append")
}

/// The call a `tool/result` answers.
fn result_call_id(e: &SessionEvent) -> &str {
    e.data["message"]["source"]["callId"]
        .as_str()
        .unwrap_or_default()
}

impl Framing {
    /// Why `e` may not be appended now, if it may not.
    pub fn check(&self, e: &SessionEvent) -> Result<(), String> {
        let turn = e.data["turn"].as_u64();
        let step = e.data["step"].as_u64();
        let kind = e.kind.as_str();
        match kind {
            event::TURN_START => self.check_turn_start(turn),
            event::TURN_END => self.check_turn_end(turn),
            event::STEP_START => self.check_step_start(turn, step),
            event::STEP_END
            | event::ASSISTANT_CHUNK
            | event::ASSISTANT_MESSAGE
            | event::TOOL_CALL => self.check_in_step(kind, turn, step),
            event::TOOL_RESULT if appends_result(e) => {
                self.check_in_step(kind, turn, step)?;
                self.check_answers_a_call(e)
            }
            event::TOOL_RESULT
            | event::TODO_WRITE
            | event::REQUEST_HEADER
            | event::REQUEST_CONTEXT => self.check_in_turn(kind),
            _ => Ok(()),
        }
    }

    /// A turn opens only when none is open, with the next number.
    fn check_turn_start(&self, turn: Option<u64>) -> Result<(), String> {
        if let Some(t) = self.open_turn {
            return Err(format!("turn/start while turn {t} is open"));
        }
        if turn != Some(self.last_turn + 1) {
            return Err(format!(
                "turn/start must open turn {}, got {turn:?}",
                self.last_turn + 1
            ));
        }
        Ok(())
    }

    /// A turn closes by its number, after its last step closed.
    fn check_turn_end(&self, turn: Option<u64>) -> Result<(), String> {
        if self.open_turn.is_none() || turn != self.open_turn {
            return Err(format!(
                "turn/end for {turn:?} but the open turn is {:?}",
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
    fn check_step_start(&self, turn: Option<u64>, step: Option<u64>) -> Result<(), String> {
        if self.open_turn.is_none() || turn != self.open_turn {
            return Err("step/start outside its turn".into());
        }
        if let Some(s) = self.open_step {
            return Err(format!("step/start while step {s} is open"));
        }
        if step != Some(self.last_step + 1) {
            return Err(format!(
                "step/start must open step {}, got {step:?}",
                self.last_step + 1
            ));
        }
        Ok(())
    }

    /// A step-scoped event names the open turn and step.
    fn check_in_step(
        &self,
        kind: &str,
        turn: Option<u64>,
        step: Option<u64>,
    ) -> Result<(), String> {
        if self.open_turn.is_none()
            || turn != self.open_turn
            || step != self.open_step
            || step.is_none()
        {
            return Err(format!(
                "`{kind}` must name the open turn/step ({:?}/{:?}), got {turn:?}/{step:?}",
                self.open_turn, self.open_step
            ));
        }
        Ok(())
    }

    /// An appended `tool/result` answers a `tool/call` of the open step,
    /// unless it is a `TOOL_NOT_STARTED` repair result.
    fn check_answers_a_call(&self, e: &SessionEvent) -> Result<(), String> {
        let call_id = result_call_id(e);
        let not_started = e.data["message"]["content"][0]["isError"] == Value::Bool(true)
            && e.data["error"]["code"] == code::TOOL_NOT_STARTED;
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

    /// Advances the framing past `e` (also used to replay seeds).
    pub fn apply(&mut self, e: &SessionEvent) {
        match e.kind.as_str() {
            event::TURN_START => {
                self.open_turn = e.data["turn"].as_u64();
                self.last_turn = self.open_turn.unwrap_or(self.last_turn);
                self.open_step = None;
                self.last_step = 0;
            }
            event::TURN_END => {
                self.open_turn = None;
                self.open_step = None;
            }
            event::STEP_START => {
                self.open_step = e.data["step"].as_u64();
                self.last_step = self.open_step.unwrap_or(self.last_step);
            }
            event::STEP_END => {
                self.open_step = None;
                self.pending_calls.clear();
            }
            event::TOOL_CALL => {
                if let Some(id) = e.data["callId"].as_str() {
                    self.pending_calls.insert(id.to_owned());
                }
            }
            event::TOOL_RESULT if appends_result(e) => {
                self.pending_calls.remove(result_call_id(e));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn ev(kind: &str, data: Value) -> SessionEvent {
        SessionEvent::new(kind, 0, data)
    }

    /// Feeds `events` through check+apply; the index of the first refusal.
    fn run(f: &mut Framing, events: &[SessionEvent]) -> Result<(), (usize, String)> {
        for (i, e) in events.iter().enumerate() {
            f.check(e).map_err(|why| (i, why))?;
            f.apply(e);
        }
        Ok(())
    }

    fn ts(turn: u64, step: u64) -> Value {
        json!({"turn": turn, "step": step})
    }

    fn call(turn: u64, step: u64, id: &str) -> Value {
        json!({"turn": turn, "step": step, "callId": id, "name": "read", "arguments": "{}"})
    }

    /// An appended `tool/result` answering `id`; `code` makes it an error
    /// result with that code.
    fn result(turn: u64, step: u64, id: &str, code: Option<&str>) -> SessionEvent {
        let mut data = json!({"turn": turn, "step": step,
            "message": dsh_sdk::vocab::msg::tool_result("r", id, vec![], code.is_some())});
        if let Some(code) = code {
            data["error"] = json!({"name": "ToolNotStartedError", "code": code});
        }
        SessionEvent {
            surface_op: Some(json!("append")),
            ..ev(event::TOOL_RESULT, data)
        }
    }

    #[test]
    fn a_result_pairs_with_a_call_of_its_own_step() {
        let head = || {
            vec![
                ev(event::TURN_START, json!({"turn": 1})),
                ev(event::STEP_START, ts(1, 1)),
            ]
        };
        let refused = |log: &[SessionEvent]| {
            let mut f = Framing::default();
            run(&mut f, log).map_err(|e| e.1)
        };
        let mut unknown = head();
        unknown.push(ev(event::TOOL_CALL, call(1, 1, "c1")));
        unknown.push(result(1, 1, "c2", None));
        assert_eq!(
            refused(&unknown),
            Err("tool/result for c2 with no prior tool/call in this step".into())
        );
        let mut twice = head();
        twice.push(ev(event::TOOL_CALL, call(1, 1, "c1")));
        twice.push(result(1, 1, "c1", None));
        twice.push(result(1, 1, "c1", None));
        assert_eq!(
            refused(&twice),
            Err("tool/result for c1 with no prior tool/call in this step".into())
        );
        let mut earlier_step = head();
        earlier_step.extend([
            ev(event::TOOL_CALL, call(1, 1, "c1")),
            ev(event::STEP_END, ts(1, 1)),
            ev(event::STEP_START, ts(1, 2)),
            result(1, 2, "c1", None),
        ]);
        assert_eq!(
            refused(&earlier_step),
            Err("tool/result for c1 with no prior tool/call in this step".into())
        );
        let mut other_step = head();
        other_step.extend([
            ev(event::TOOL_CALL, call(1, 1, "c1")),
            result(1, 2, "c1", None),
        ]);
        assert!(refused(&other_step).is_err());
    }

    #[test]
    fn not_started_repair_results_and_unresolved_calls_at_step_end_are_allowed() {
        let log = [
            ev(event::TURN_START, json!({"turn": 1})),
            ev(event::STEP_START, ts(1, 1)),
            result(1, 1, "never-recorded", Some(code::TOOL_NOT_STARTED)),
            ev(event::TOOL_CALL, call(1, 1, "c1")),
            ev(event::STEP_END, ts(1, 1)),
            ev(event::TURN_END, json!({"turn": 1})),
        ];
        assert_eq!(run(&mut Framing::default(), &log), Ok(()));
        let other_code = [
            ev(event::TURN_START, json!({"turn": 1})),
            ev(event::STEP_START, ts(1, 1)),
            result(1, 1, "never-recorded", Some(code::TOOL_OUTCOME_UNKNOWN)),
        ];
        assert_eq!(
            run(&mut Framing::default(), &other_code).map_err(|e| e.0),
            Err(2)
        );
    }

    fn well_formed(turn: u64) -> Vec<SessionEvent> {
        vec![
            ev(event::TURN_START, json!({"turn": turn})),
            ev(event::REQUEST_HEADER, json!({"turn": turn})),
            ev(event::STEP_START, ts(turn, 1)),
            ev(event::ASSISTANT_CHUNK, ts(turn, 1)),
            ev(event::ASSISTANT_MESSAGE, ts(turn, 1)),
            ev(event::TOOL_CALL, call(turn, 1, "c1")),
            result(turn, 1, "c1", None),
            ev(event::STEP_END, ts(turn, 1)),
            ev(event::STEP_START, ts(turn, 2)),
            ev(event::STEP_END, ts(turn, 2)),
            ev(event::TURN_END, json!({"turn": turn})),
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
        assert!(run(&mut f, &[ev(event::TURN_START, json!({"turn": 2}))]).is_err());
        let mut f = Framing::default();
        let twice = [
            ev(event::TURN_START, json!({"turn": 1})),
            ev(event::TURN_START, json!({"turn": 2})),
        ];
        assert_eq!(run(&mut f, &twice).map_err(|e| e.0), Err(1));
        let mut f = Framing::default();
        assert!(run(&mut f, &[ev(event::TURN_END, json!({"turn": 1}))]).is_err());
        let mut f = Framing::default();
        let step_open = [
            ev(event::TURN_START, json!({"turn": 1})),
            ev(event::STEP_START, ts(1, 1)),
            ev(event::TURN_END, json!({"turn": 1})),
        ];
        assert_eq!(run(&mut f, &step_open).map_err(|e| e.0), Err(2));
        for kind in [
            event::TODO_WRITE,
            event::REQUEST_HEADER,
            event::REQUEST_CONTEXT,
            event::TOOL_RESULT,
        ] {
            let mut f = Framing::default();
            assert!(run(&mut f, &[ev(kind, json!({}))]).is_err(), "{kind}");
        }
    }

    #[test]
    fn step_identity_and_numbering_are_enforced() {
        let open = ev(event::TURN_START, json!({"turn": 1}));
        for bad in [
            vec![ev(event::STEP_START, ts(1, 2))],
            vec![ev(event::STEP_START, ts(2, 1))],
            vec![
                ev(event::STEP_START, ts(1, 1)),
                ev(event::STEP_START, ts(1, 2)),
            ],
            vec![
                ev(event::STEP_START, ts(1, 1)),
                ev(event::STEP_END, ts(1, 2)),
            ],
        ] {
            let mut f = Framing::default();
            let mut log = vec![open.clone()];
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
            let log = [
                ev(event::TURN_START, json!({"turn": 1})),
                ev(event::STEP_START, ts(1, 1)),
                ev(kind, ts(1, 2)),
            ];
            assert_eq!(run(&mut f, &log).map_err(|e| e.0), Err(2), "{kind}");
            let mut f = Framing::default();
            let outside = [
                ev(event::TURN_START, json!({"turn": 1})),
                ev(kind, ts(1, 1)),
            ];
            assert_eq!(run(&mut f, &outside).map_err(|e| e.0), Err(1), "{kind}");
        }
    }

    #[test]
    fn a_refused_event_does_not_advance_the_state() {
        let f = Framing::default();
        let bad = ev(event::TURN_START, json!({"turn": 5}));
        assert!(f.check(&bad).is_err());
        assert!(f.check(&ev(event::TURN_START, json!({"turn": 1}))).is_ok());
    }

    #[test]
    fn seeded_framing_continues_numbering_and_end_seed_is_allowed_anywhere() {
        let mut f = Framing::default();
        for e in well_formed(1) {
            f.apply(&e);
        }
        assert!(f.check(&ev(event::SESSION_END_SEED, json!({}))).is_ok());
        assert!(f.check(&ev(event::TURN_START, json!({"turn": 1}))).is_err());
        let next = [
            ev(event::TURN_START, json!({"turn": 2})),
            ev(event::SESSION_END_SEED, json!({})),
            ev(event::STEP_START, ts(2, 1)),
            ev(event::SESSION_END_SEED, json!({})),
        ];
        assert_eq!(run(&mut f, &next), Ok(()));
    }
}
