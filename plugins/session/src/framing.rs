//! Turn/step framing of a session log (reference dsh-core §2.10).

use dsh_sdk::vocab::{event, SessionEvent};

/// The open turn and step, and the numbers the next ones must carry.
#[derive(Debug, Default)]
pub struct Framing {
    open_turn: Option<u64>,
    open_step: Option<u64>,
    last_turn: u64,
    last_step: u64,
}

impl Framing {
    /// Why `e` may not be appended now, if it may not.
    pub fn check(&self, e: &SessionEvent) -> Result<(), String> {
        let turn = e.data["turn"].as_u64();
        let step = e.data["step"].as_u64();
        let kind = e.kind.as_str();
        match kind {
            event::TURN_START => {
                if let Some(t) = self.open_turn {
                    return Err(format!("turn/start while turn {t} is open"));
                }
                if turn != Some(self.last_turn + 1) {
                    return Err(format!(
                        "turn/start must open turn {}, got {turn:?}",
                        self.last_turn + 1
                    ));
                }
            }
            event::TURN_END => {
                if self.open_turn.is_none() || turn != self.open_turn {
                    return Err(format!(
                        "turn/end for {turn:?} but the open turn is {:?}",
                        self.open_turn
                    ));
                }
                if let Some(s) = self.open_step {
                    return Err(format!("turn/end while step {s} is open"));
                }
            }
            event::STEP_START => {
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
            }
            event::STEP_END
            | event::ASSISTANT_CHUNK
            | event::ASSISTANT_MESSAGE
            | event::TOOL_CALL
                if self.open_turn.is_none()
                    || turn != self.open_turn
                    || step != self.open_step
                    || step.is_none() =>
            {
                return Err(format!(
                    "`{kind}` must name the open turn/step ({:?}/{:?}), got {turn:?}/{step:?}",
                    self.open_turn, self.open_step
                ));
            }
            event::TOOL_RESULT
            | event::TODO_WRITE
            | event::REQUEST_HEADER
            | event::REQUEST_CONTEXT
                if self.open_turn.is_none() =>
            {
                return Err(format!("`{kind}` outside a turn"));
            }
            _ => {}
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
            event::STEP_END => self.open_step = None,
            _ => {}
        }
    }
}
