//! The surface transition (reference dsh-core §2.5, `SurfaceManager`): the
//! ordered surface nodes of a log, or of a loaded window of it, and the
//! check of the next event's surface metadata before it enters the log. A
//! plan is computed without changing anything, so a refused event leaves
//! the surface as it was. Folded event by event, the surface equals the
//! whole-log fold [`super::surface_nodes`].

use std::collections::HashSet;

use serde_json::Value;

use super::{event, SessionEvent};

/// The current surface: event seqs in model-visible order, and how many
/// replaces folded into it. `Surface::default()` folds a whole log;
/// [`Surface::window`] a log loaded from a later seq on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Surface {
    nodes: Vec<u64>,
    replace_generation: u64,
    /// The seq of the first loaded event (0: the whole log).
    base_seq: u64,
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
    /// An empty surface over a window of a log whose first loaded event has
    /// seq `base_seq`. The events before it are not known, so a replace
    /// whose range starts or ends before the window is refused.
    pub fn window(base_seq: u64) -> Surface {
        Surface {
            base_seq,
            ..Surface::default()
        }
    }

    /// The surface of `events`, a window of a log starting at `base_seq`
    /// (0 for a whole log), each event checked as [`Surface::plan`] checks
    /// it. Refused with the first event's reason, naming its seq, or when
    /// the seqs are not `base_seq, base_seq + 1, ...`.
    pub fn fold(base_seq: u64, events: &[SessionEvent]) -> Result<Surface, String> {
        let mut surface = Surface::window(base_seq);
        for (i, e) in events.iter().enumerate() {
            let expected = base_seq.saturating_add(i as u64);
            if e.seq != expected {
                return Err(format!(
                    "surface window: event at index {i} has seq {}, expected {expected}",
                    e.seq
                ));
            }
            let plan = surface
                .plan(e, &events[..i])
                .map_err(|why| format!("surface window: event at seq {}: {why}", e.seq))?;
            surface.apply(plan);
        }
        Ok(surface)
    }

    /// The seq of the first event of the window (0 for a whole log).
    pub fn base_seq(&self) -> u64 {
        self.base_seq
    }

    /// The surface nodes, in order.
    pub fn nodes(&self) -> &[u64] {
        &self.nodes
    }

    /// The number of replaces folded so far.
    pub fn replace_generation(&self) -> u64 {
        self.replace_generation
    }

    /// Checks `e`, the event about to take seq `base_seq + log.len()`,
    /// against the surface of `log` (the loaded events, from
    /// [`Surface::base_seq`] on): its `surfaceOp` value, its
    /// `sourceEventSeqs` (unique, earlier, empty only on
    /// `assistant/message`, covering every shadowed node of a replace), the
    /// replace range (current nodes, inside the window), and a
    /// `tool/result` replacement (exactly one `tool/result` node, only its
    /// content changed). Messages follow the original's wording.
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
            if seq < self.base_seq {
                return Err(format!(
                    "surface replace: {which} seq {seq} is before the loaded window, which begins at seq {}",
                    self.base_seq
                ));
            }
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
            tool_result_rewrite(e, shadowed, log, self.base_seq)?;
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

/// Checks a `tool/result` replacement of `shadowed` against the node it
/// rewrites, found in `log` (the events from `base_seq` on).
fn tool_result_rewrite(
    e: &SessionEvent,
    shadowed: &[u64],
    log: &[SessionEvent],
    base_seq: u64,
) -> Result<(), String> {
    let [original] = shadowed else {
        return Err("tool/result surface replacement must rewrite exactly one current node".into());
    };
    let original = original
        .checked_sub(base_seq)
        .and_then(|i| usize::try_from(i).ok())
        .and_then(|i| log.get(i))
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

    /// A non-surface event (turn, step or chunk boundaries look the same to
    /// the surface).
    fn boundary(seq: u64) -> SessionEvent {
        SessionEvent::new(event::STEP_START, seq, json!({"turn": 1, "step": 1}))
    }

    fn tool_result_at(
        seq: u64,
        id: &str,
        text: &str,
        op: Value,
        src: Option<Vec<u64>>,
    ) -> SessionEvent {
        ev(seq, event::TOOL_RESULT, result(id, text), op, src)
    }

    fn replace(seq: u64, start: u64, end: u64, src: Vec<u64>) -> SessionEvent {
        ev(
            seq,
            event::USER_MESSAGE,
            msg::user_text(&format!("s{seq}"), "summary"),
            json!({"op": "replace", "start": start, "end": end}),
            Some(src),
        )
    }

    /// The seqs of the whole-log fold (`foldSurface`).
    fn whole_log_fold(log: &[SessionEvent]) -> Vec<u64> {
        crate::vocab::surface_nodes(log)
            .iter()
            .map(|e| e.seq)
            .collect()
    }

    /// `0 user, 1 user, 2 boundary, 3 user, 4 tool/result`.
    fn five() -> Vec<SessionEvent> {
        vec![
            user(0, "a"),
            user(1, "b"),
            boundary(2),
            user(3, "c"),
            tool_result_at(4, "r1", "long output", json!("append"), None),
        ]
    }

    #[test]
    fn a_window_folds_from_its_base_seq_and_continues_incrementally() {
        let log = five();
        let whole = Surface::fold(0, &log).unwrap();
        assert_eq!(whole.nodes(), &[0, 1, 3, 4]);
        let mut window: Vec<SessionEvent> = log[3..].to_vec();
        let mut s = Surface::fold(3, &window).unwrap();
        assert_eq!((s.nodes(), s.base_seq()), (&[3, 4][..], 3));
        // The whole log's surface is the prefix's followed by the window's.
        let prefix = Surface::fold(0, &log[..3]).unwrap();
        assert_eq!(whole.nodes(), [prefix.nodes(), s.nodes()].concat());
        // A tool/result replacement finds the node it rewrites by seq in
        // the window (index 1 of the loaded events, not 4).
        let rewrite = tool_result_at(
            5,
            "r1",
            "[spilled]",
            json!({"op": "replace", "start": 4, "end": 4}),
            Some(vec![4]),
        );
        let plan = s.plan(&rewrite, &window).unwrap();
        assert_eq!(
            plan,
            Plan::Replace {
                seq: 5,
                start: 1,
                end: 1
            }
        );
        s.apply(plan);
        window.push(rewrite);
        assert_eq!((s.nodes(), s.replace_generation()), (&[3, 5][..], 1));
        // A replace over the whole window.
        let all = replace(6, 3, 5, vec![3, 5]);
        let plan = s.plan(&all, &window).unwrap();
        s.apply(plan);
        window.push(all);
        assert_eq!((s.nodes(), s.replace_generation()), (&[6][..], 2));
        // Folding the grown window at once gives the same surface.
        assert_eq!(Surface::fold(3, &window).unwrap(), s);
    }

    #[test]
    fn a_replace_crossing_the_window_head_fails() {
        let log = five();
        let window = &log[3..];
        let s = Surface::fold(3, window).unwrap();
        let crossing = replace(5, 1, 3, vec![1, 3]);
        assert_eq!(
            s.plan(&crossing, window),
            Err(
                "surface replace: start seq 1 is before the loaded window, which begins at seq 3"
                    .into()
            )
        );
        // The same replace over the whole log is valid: the window refuses it.
        let whole = Surface::fold(0, &log).unwrap();
        assert!(whole.plan(&crossing, &log).is_ok());
        // Folding a window that holds such a replace names the event.
        let mut grown = window.to_vec();
        grown.push(crossing);
        assert_eq!(
            Surface::fold(3, &grown),
            Err("surface window: event at seq 5: surface replace: start seq 1 is before the loaded window, which begins at seq 3".into())
        );
        // A window is contiguous from its base.
        assert_eq!(
            Surface::fold(3, &log[2..]),
            Err("surface window: event at index 0 has seq 2, expected 3".into())
        );
    }

    /// A deterministic generator of valid logs: appends of every surface
    /// kind, boundaries, and replaces of a random run of current nodes at
    /// or after a floor seq, each citing exactly the nodes it shadows.
    struct Gen {
        state: u64,
        log: Vec<SessionEvent>,
        nodes: Vec<u64>,
        replaces: u64,
    }

    impl Gen {
        fn new(seed: u64) -> Gen {
            Gen {
                state: seed.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1),
                log: Vec::new(),
                nodes: Vec::new(),
                replaces: 0,
            }
        }

        fn below(&mut self, n: usize) -> usize {
            self.state = self
                .state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((self.state >> 33) % n as u64) as usize
        }

        /// Adds one event; replaces shadow only nodes with seq >= `floor`.
        fn push(&mut self, floor: u64) {
            let seq = self.log.len() as u64;
            let first = self.nodes.iter().position(|n| *n >= floor);
            let e = match (self.below(6), first) {
                (0, Some(first)) => {
                    let start = first + self.below(self.nodes.len() - first);
                    let end = start + self.below(self.nodes.len() - start);
                    let shadowed: Vec<u64> = self.nodes[start..=end].to_vec();
                    let e = replace(seq, shadowed[0], shadowed[shadowed.len() - 1], shadowed);
                    self.nodes.splice(start..=end, [seq]);
                    self.replaces += 1;
                    e
                }
                (1, _) => boundary(seq),
                (2, _) => {
                    self.nodes.push(seq);
                    let content = if self.below(2) == 0 {
                        vec![]
                    } else {
                        vec![msg::text("x")]
                    };
                    ev(
                        seq,
                        event::ASSISTANT_MESSAGE,
                        json!({"turn": 1, "step": 1, "message": msg::assistant(&format!("a{seq}"), content, "p", "m")}),
                        json!("append"),
                        Some(vec![]),
                    )
                }
                (3, _) => {
                    self.nodes.push(seq);
                    tool_result_at(seq, &format!("r{seq}"), "out", json!("append"), None)
                }
                _ => {
                    self.nodes.push(seq);
                    user(seq, "u")
                }
            };
            self.log.push(e);
        }
    }

    #[test]
    fn incremental_folding_matches_the_whole_log_fold() {
        let mut replaces = 0;
        for seed in 0..200 {
            let mut g = Gen::new(seed);
            let mut s = Surface::default();
            for i in 0..40 {
                g.push(0);
                let e = &g.log[i];
                let plan = s.plan(e, &g.log[..i]).unwrap();
                s.apply(plan);
                assert_eq!(s.nodes(), whole_log_fold(&g.log), "seed {seed}, seq {i}");
            }
            assert_eq!(s.replace_generation(), g.replaces, "seed {seed}");
            assert_eq!(Surface::fold(0, &g.log).unwrap(), s);
            replaces += g.replaces;
        }
        assert!(replaces > 500, "the logs fold many replaces: {replaces}");
    }

    #[test]
    fn a_window_folds_to_the_tail_of_the_whole_log_fold() {
        for seed in 0..200 {
            let mut g = Gen::new(seed);
            for _ in 0..15 {
                g.push(0);
            }
            let base = g.log.len() as u64;
            let before = g.replaces;
            for _ in 0..25 {
                g.push(base);
            }
            let window = Surface::fold(base, &g.log[base as usize..]).unwrap();
            let prefix = Surface::fold(0, &g.log[..base as usize]).unwrap();
            assert_eq!(
                [prefix.nodes(), window.nodes()].concat(),
                whole_log_fold(&g.log),
                "seed {seed}"
            );
            assert_eq!(
                window.replace_generation(),
                g.replaces - before,
                "seed {seed}"
            );
        }
    }

    #[test]
    fn a_refused_event_leaves_the_surface_unchanged() {
        let log = five();
        for (base, s) in [
            (0, Surface::fold(0, &log).unwrap()),
            (3, Surface::fold(3, &log[3..]).unwrap()),
        ] {
            let loaded = &log[base..];
            let before = s.clone();
            let refused = [
                ev(5, event::STEP_START, json!({}), json!("append"), None),
                ev(
                    5,
                    event::USER_MESSAGE,
                    msg::user_text("u", "a"),
                    Value::Null,
                    None,
                ),
                replace(5, 9, 9, vec![9]),
                replace(5, 4, 3, vec![3, 4]),
                replace(5, 3, 4, vec![3]),
                replace(5, 1, 3, vec![1, 3]),
                ev(
                    5,
                    event::USER_MESSAGE,
                    msg::user_text("u", "a"),
                    json!("append"),
                    Some(vec![3, 3]),
                ),
                tool_result_at(
                    5,
                    "r2",
                    "x",
                    json!({"op": "replace", "start": 4, "end": 4}),
                    Some(vec![4]),
                ),
            ];
            for (i, e) in refused.iter().enumerate() {
                if base == 0 && i == 5 {
                    continue; // seq 1 is a node of the whole log
                }
                assert!(s.plan(e, loaded).is_err(), "base {base}, refused[{i}]");
                assert_eq!(s, before, "base {base}, refused[{i}]");
            }
            // The next valid event folds as if nothing had been offered.
            let mut s = s;
            let summary = replace(5, 3, 4, vec![3, 4]);
            let plan = s.plan(&summary, loaded).unwrap();
            s.apply(plan);
            let mut grown = loaded.to_vec();
            grown.push(summary);
            assert_eq!(s, Surface::fold(base as u64, &grown).unwrap());
            assert_eq!(s.replace_generation(), 1);
        }
    }

    #[test]
    fn replace_generation_counts_every_replace_and_nothing_else() {
        let mut log = five();
        let mut s = Surface::fold(0, &log).unwrap();
        assert_eq!(
            s.replace_generation(),
            0,
            "appends and boundaries do not count"
        );
        /// Folds `e` when the surface accepts it; answers whether it did.
        fn offer(s: &mut Surface, log: &mut Vec<SessionEvent>, e: SessionEvent) -> bool {
            match s.plan(&e, log) {
                Ok(plan) => {
                    s.apply(plan);
                    log.push(e);
                    true
                }
                Err(_) => false,
            }
        }
        // A single-node tool/result rewrite counts.
        let rewrite = tool_result_at(
            5,
            "r1",
            "[spilled]",
            json!({"op": "replace", "start": 4, "end": 4}),
            Some(vec![4]),
        );
        assert!(offer(&mut s, &mut log, rewrite));
        assert_eq!(s.replace_generation(), 1);
        // A refused replace does not.
        assert!(!offer(&mut s, &mut log, replace(6, 0, 5, vec![0])));
        assert_eq!(s.replace_generation(), 1);
        // An append does not; a multi-node replace does.
        assert!(offer(&mut s, &mut log, user(6, "d")));
        assert!(offer(&mut s, &mut log, replace(7, 0, 3, vec![0, 1, 3])));
        assert_eq!((s.nodes(), s.replace_generation()), (&[7, 5, 6][..], 2));
        // A replace of the replacing node counts again.
        assert!(offer(&mut s, &mut log, replace(8, 7, 7, vec![7])));
        assert_eq!((s.nodes(), s.replace_generation()), (&[8, 5, 6][..], 3));
    }
}
