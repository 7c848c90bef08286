//! The surface transition (reference dsh-core §2.5, `SurfaceManager`): the
//! ordered surface nodes of a log and the check of the next event's
//! surface metadata before it enters the log. A plan is computed without
//! changing anything, so a refused event leaves the surface as it was.

use std::collections::HashSet;

use serde_json::Value;

use super::{event, SessionEvent};

/// The current surface: event seqs in model-visible order, and how many
/// replaces folded into it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Surface {
    nodes: Vec<u64>,
    replace_generation: u64,
}

/// A checked transition, not applied yet.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// A log-only event: the surface does not change.
    Unchanged,
    /// The event joins the tail.
    Append(u64),
    /// The event takes the place of nodes `start..=end` (indexes).
    Replace {
        /// The replacing event's seq.
        seq: u64,
        /// Index of the first shadowed node.
        start: usize,
        /// Index of the last shadowed node.
        end: usize,
    },
}

/// A `{op:"replace", start, end}` object with exactly these keys and
/// non-negative integer seqs: its `(start, end)`.
pub fn replace_range(op: &Value) -> Option<(u64, u64)> {
    let o = op.as_object()?;
    if o.len() != 3 || o.get("op")? != "replace" {
        return None;
    }
    Some((o.get("start")?.as_u64()?, o.get("end")?.as_u64()?))
}

impl Surface {
    /// The surface nodes, in order.
    pub fn nodes(&self) -> &[u64] {
        &self.nodes
    }

    /// The number of replaces folded so far.
    pub fn replace_generation(&self) -> u64 {
        self.replace_generation
    }

    /// Checks `e`, the event about to take seq `log.len()`, against the
    /// surface of `log`: its `surfaceOp` value, its `sourceEventSeqs`
    /// (unique, earlier, empty only on `assistant/message`, covering every
    /// shadowed node of a replace), the replace range, and a `tool/result`
    /// replacement (exactly one `tool/result` node, only its content
    /// changed). Messages follow the original's wording.
    pub fn plan(&self, e: &SessionEvent, log: &[SessionEvent]) -> Result<Plan, String> {
        let kind = &e.kind;
        if !event::SURFACE.contains(&kind.as_str()) {
            if e.surface_op.is_some() {
                return Err(format!(
                    "session event \"{kind}\" is not surface-eligible and cannot carry surfaceOp"
                ));
            }
            if e.source_event_seqs.is_some() {
                return Err(format!("session event \"{kind}\" is not surface-eligible and cannot carry sourceEventSeqs"));
            }
            return Ok(Plan::Unchanged);
        }
        let Some(op) = &e.surface_op else {
            return Err(format!(
                "session event \"{kind}\" is surface-eligible and requires a surfaceOp marker"
            ));
        };
        if op == "append" {
            provenance(e, &[])?;
            return Ok(Plan::Append(e.seq));
        }
        if !op.is_object() {
            return Err(format!(
                "session event \"{kind}\" carries an invalid surfaceOp"
            ));
        }
        let Some((start_seq, end_seq)) = replace_range(op) else {
            return Err(format!(
                "session event \"{kind}\" carries an invalid replace surfaceOp"
            ));
        };
        let index = |seq: u64, which: &str| {
            self.nodes
                .iter()
                .position(|n| *n == seq)
                .ok_or_else(|| format!("surface replace: {which} seq {seq} not found in surface"))
        };
        let start = index(start_seq, "start")?;
        let end = index(end_seq, "end")?;
        if start > end {
            return Err(format!("surface replace: start seq {start_seq} (index {start}) is after end seq {end_seq} (index {end})"));
        }
        let shadowed = &self.nodes[start..=end];
        provenance(e, shadowed)?;
        if *kind == event::TOOL_RESULT {
            tool_result_rewrite(e, shadowed, log)?;
        }
        Ok(Plan::Replace {
            seq: e.seq,
            start,
            end,
        })
    }

    /// Commits a plan made against the current state.
    pub fn apply(&mut self, plan: Plan) {
        match plan {
            Plan::Unchanged => {}
            Plan::Append(seq) => self.nodes.push(seq),
            Plan::Replace { seq, start, end } => {
                self.nodes.splice(start..=end, [seq]);
                self.replace_generation += 1;
            }
        }
    }
}

fn provenance(e: &SessionEvent, shadowed: &[u64]) -> Result<(), String> {
    let sources: HashSet<u64> = match &e.source_event_seqs {
        None => HashSet::new(),
        Some(seqs) => {
            if seqs.is_empty() && e.kind != event::ASSISTANT_MESSAGE {
                return Err("sourceEventSeqs must not be empty except on assistant/message".into());
            }
            let set: HashSet<u64> = seqs.iter().copied().collect();
            if set.len() != seqs.len() {
                return Err("sourceEventSeqs must not contain duplicates".into());
            }
            if let Some(late) = seqs.iter().find(|s| **s >= e.seq) {
                return Err(format!(
                    "sourceEventSeqs must reference earlier events: {late} >= current seq {}",
                    e.seq
                ));
            }
            set
        }
    };
    let missing: Vec<String> = shadowed
        .iter()
        .filter(|s| !sources.contains(s))
        .map(u64::to_string)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "surface replace: sourceEventSeqs must include every shadowed surface node; missing {}",
            missing.join(", ")
        ))
    }
}

/// The tool-result data with the result block's `content` blanked, the
/// part a replacement must leave unchanged.
fn without_content(data: &Value) -> Value {
    let mut rest = data.clone();
    if let Some(block) = rest
        .pointer_mut("/message/content/0")
        .and_then(Value::as_object_mut)
    {
        block.insert("content".into(), Value::Null);
    }
    rest
}

fn tool_result_rewrite(
    e: &SessionEvent,
    shadowed: &[u64],
    log: &[SessionEvent],
) -> Result<(), String> {
    let [original] = shadowed else {
        return Err("tool/result surface replacement must rewrite exactly one current node".into());
    };
    let original = log
        .get(*original as usize)
        .filter(|o| o.kind == event::TOOL_RESULT)
        .ok_or("tool/result surface replacement must target a current tool/result")?;
    if without_content(&original.data) != without_content(&e.data) {
        return Err("tool/result surface replacement may change only content".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::msg;
    use serde_json::json;

    fn ev(seq: u64, kind: &str, data: Value, op: Value, src: Option<Vec<u64>>) -> SessionEvent {
        SessionEvent {
            kind: kind.into(),
            seq,
            time: 0,
            data: data.into(),
            source_event_seqs: src,
            surface_op: (!op.is_null()).then_some(op),
            ignorable: None,
        }
    }

    fn result(id: &str, text: &str) -> Value {
        json!({"turn": 1, "step": 1, "message": msg::tool_result(id, "c1", vec![msg::text(text)], false)})
    }

    /// Folds `log` through the transition, every event checked.
    fn fold(log: &[SessionEvent]) -> Result<Surface, String> {
        let mut s = Surface::default();
        for (i, e) in log.iter().enumerate() {
            let plan = s.plan(e, &log[..i])?;
            s.apply(plan);
        }
        Ok(s)
    }

    fn user(seq: u64, text: &str) -> SessionEvent {
        ev(
            seq,
            event::USER_MESSAGE,
            msg::user_text(&format!("u{seq}"), text),
            json!("append"),
            None,
        )
    }

    #[test]
    fn replace_splices_and_counts_generations() {
        let mut log = vec![user(0, "a"), user(1, "b"), user(2, "c")];
        log.push(ev(
            3,
            event::USER_MESSAGE,
            msg::user_text("s", "sum"),
            json!({"op": "replace", "start": 0, "end": 1}),
            Some(vec![0, 1]),
        ));
        let s = fold(&log).unwrap();
        assert_eq!(s.nodes(), &[3, 2]);
        assert_eq!(s.replace_generation(), 1);
    }

    #[test]
    fn invalid_replace_ranges_and_shapes_are_refused() {
        let log = vec![user(0, "a"), user(1, "b")];
        let s = fold(&log).unwrap();
        let replace = |op: Value, src: Option<Vec<u64>>| {
            s.plan(
                &ev(2, event::USER_MESSAGE, msg::user_text("r", "r"), op, src),
                &log,
            )
        };
        assert_eq!(
            replace(
                json!({"op": "replace", "start": 5, "end": 1}),
                Some(vec![0, 1])
            ),
            Err("surface replace: start seq 5 not found in surface".into())
        );
        assert_eq!(
            replace(
                json!({"op": "replace", "start": 0, "end": 7}),
                Some(vec![0, 1])
            ),
            Err("surface replace: end seq 7 not found in surface".into())
        );
        assert_eq!(
            replace(
                json!({"op": "replace", "start": 1, "end": 0}),
                Some(vec![0, 1])
            ),
            Err("surface replace: start seq 1 (index 1) is after end seq 0 (index 0)".into())
        );
        let bad_shape =
            Err("session event \"user/message\" carries an invalid replace surfaceOp".to_owned());
        for op in [
            json!({"op": "replace", "start": 0}),
            json!({"op": "replace", "start": 0, "end": 1, "x": 1}),
            json!({"op": "swap", "start": 0, "end": 1}),
            json!({"op": "replace", "start": -1, "end": 1}),
            json!({"op": "replace", "start": 0.5, "end": 1}),
        ] {
            assert_eq!(replace(op, Some(vec![0, 1])), bad_shape);
        }
        for op in [json!("prepend"), json!(3), json!([])] {
            assert_eq!(
                replace(op, None),
                Err("session event \"user/message\" carries an invalid surfaceOp".into())
            );
        }
    }

    #[test]
    fn a_replace_must_cite_every_shadowed_node() {
        let log = vec![user(0, "a"), user(1, "b"), user(2, "c")];
        let s = fold(&log).unwrap();
        let e = ev(
            3,
            event::USER_MESSAGE,
            msg::user_text("r", "r"),
            json!({"op": "replace", "start": 0, "end": 2}),
            Some(vec![1]),
        );
        assert_eq!(
            s.plan(&e, &log),
            Err("surface replace: sourceEventSeqs must include every shadowed surface node; missing 0, 2".into())
        );
    }

    #[test]
    fn empty_source_event_seqs_only_on_assistant_messages_and_no_duplicates() {
        let s = Surface::default();
        let e = ev(
            0,
            event::USER_MESSAGE,
            msg::user_text("u", "a"),
            json!("append"),
            Some(vec![]),
        );
        assert_eq!(
            s.plan(&e, &[]),
            Err("sourceEventSeqs must not be empty except on assistant/message".into())
        );
        let a = ev(
            0,
            event::ASSISTANT_MESSAGE,
            json!({"message": msg::assistant("a", vec![], "p", "m")}),
            json!("append"),
            Some(vec![]),
        );
        assert_eq!(s.plan(&a, &[]), Ok(Plan::Append(0)));
        let log = vec![user(0, "a")];
        let dup = ev(
            1,
            event::USER_MESSAGE,
            msg::user_text("u", "a"),
            json!("append"),
            Some(vec![0, 0]),
        );
        assert_eq!(
            fold(&log).unwrap().plan(&dup, &log),
            Err("sourceEventSeqs must not contain duplicates".into())
        );
    }

    #[test]
    fn a_tool_result_replacement_rewrites_one_result_and_only_its_content() {
        let r = |seq: u64, data: Value, op: Value, src: Option<Vec<u64>>| {
            ev(seq, event::TOOL_RESULT, data, op, src)
        };
        let log = vec![
            user(0, "a"),
            r(1, result("r1", "long output"), json!("append"), None),
        ];
        let s = fold(&log).unwrap();
        let one = json!({"op": "replace", "start": 1, "end": 1});
        assert!(matches!(
            s.plan(
                &r(2, result("r1", "[spilled]"), one.clone(), Some(vec![1])),
                &log
            ),
            Ok(Plan::Replace {
                seq: 2,
                start: 1,
                end: 1
            })
        ));
        assert_eq!(
            s.plan(&r(2, result("r2", "[spilled]"), one, Some(vec![1])), &log),
            Err("tool/result surface replacement may change only content".into())
        );
        assert_eq!(
            s.plan(
                &r(
                    2,
                    result("r1", "x"),
                    json!({"op": "replace", "start": 0, "end": 1}),
                    Some(vec![0, 1])
                ),
                &log
            ),
            Err("tool/result surface replacement must rewrite exactly one current node".into())
        );
        assert_eq!(
            s.plan(
                &r(
                    2,
                    result("r1", "x"),
                    json!({"op": "replace", "start": 0, "end": 0}),
                    Some(vec![0])
                ),
                &log
            ),
            Err("tool/result surface replacement must target a current tool/result".into())
        );
    }
}
