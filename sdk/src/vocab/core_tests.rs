//! The pure cores of the vocabulary beyond the original's specs ported in
//! `vocab.rs` and `assembler_tests.rs`: `derive_messages` splicing,
//! `BlockAssembler` edge cases, and `interrupted_turn_closers` on logs
//! that do not start at seq 0 or span several steps and turns.

use serde_json::{json, Value};

use super::*;
use crate::names::code;

/// A log event at `seq`; surface types get `surfaceOp: "append"`.
fn ev(kind: &str, seq: u64, data: Value) -> SessionEvent {
    SessionEvent {
        kind: kind.to_owned(),
        seq,
        time: 1000 + seq,
        data: data.into(),
        source_event_seqs: None,
        surface_op: event::SURFACE.contains(&kind).then(|| json!("append")),
        ignorable: None,
    }
}

fn user(seq: u64, id: &str) -> SessionEvent {
    ev(event::USER_MESSAGE, seq, msg::user_text(id, id))
}

fn assistant(seq: u64, id: &str, content: Vec<Value>) -> SessionEvent {
    ev(
        event::ASSISTANT_MESSAGE,
        seq,
        json!({"turn": 1, "step": 1, "message": msg::assistant(id, content, "p", "m")}),
    )
}

fn result(seq: u64, call: &str) -> SessionEvent {
    let m = msg::tool_result(&format!("r-{call}"), call, vec![msg::text("ok")], false);
    ev(
        event::TOOL_RESULT,
        seq,
        json!({"turn": 1, "step": 1, "message": m}),
    )
}

/// A replacement of the surface nodes `start..=end` (by seq).
fn replacing(mut e: SessionEvent, start: Value, end: Value) -> SessionEvent {
    e.surface_op = Some(json!({"op": "replace", "start": start, "end": end}));
    e
}

/// The ids of derived messages.
fn ids(events: &[SessionEvent]) -> Vec<String> {
    derive_messages(events)
        .iter()
        .map(|m| m["id"].as_str().unwrap_or("?").to_owned())
        .collect()
}

// ---- derive_messages ---------------------------------------------------------

#[test]
fn derivation_projects_each_surface_kind_in_log_order() {
    let log = vec![
        user(0, "u1"),
        assistant(1, "a1", vec![msg::text("hi")]),
        result(2, "k1"),
        user(3, "u2"),
    ];
    let derived = derive_messages(&log);
    assert_eq!(derived[0], log[0].data, "a user message is its data");
    assert_eq!(derived[1], log[1].data["message"]);
    assert_eq!(derived[2], log[2].data["message"]);
    assert_eq!(ids(&log), ["u1", "a1", "r-k1", "u2"]);
}

#[test]
fn a_replace_splices_its_range_out_and_stands_in_its_place() {
    let mut log = vec![user(0, "u0"), user(1, "u1"), user(2, "u2"), user(3, "u3")];
    log.push(replacing(user(4, "s"), json!(1), json!(2)));
    assert_eq!(ids(&log), ["u0", "s", "u3"]);
    // A single node, and a replacement replaced in turn.
    log.push(replacing(user(5, "t"), json!(4), json!(4)));
    assert_eq!(ids(&log), ["u0", "t", "u3"]);
    log.push(replacing(user(6, "all"), json!(0), json!(3)));
    assert_eq!(ids(&log), ["all"]);
}

#[test]
fn a_replace_with_unknown_or_reversed_bounds_is_ignored() {
    let base = vec![user(0, "u0"), user(1, "u1"), user(2, "u2")];
    for (start, end) in [
        (json!(0), json!(9)),
        (json!(9), json!(1)),
        (json!(2), json!(0)),
        (json!("0"), json!(1)),
        (Value::Null, json!(1)),
    ] {
        let mut log = base.clone();
        log.push(replacing(user(3, "s"), start.clone(), end.clone()));
        assert_eq!(ids(&log), ["u0", "u1", "u2"], "{start}..{end}");
    }
    // Bounds that name a node already spliced out no longer match.
    let mut log = base.clone();
    log.push(replacing(user(3, "s"), json!(0), json!(1)));
    log.push(replacing(user(4, "t"), json!(1), json!(2)));
    assert_eq!(ids(&log), ["s", "u2"]);
}

#[test]
fn only_append_and_replace_ops_shape_the_surface() {
    let mut odd = user(1, "odd");
    odd.surface_op = Some(json!("prepend"));
    let mut other = user(2, "other");
    other.surface_op = Some(json!({"op": "insert", "start": 0, "end": 0}));
    let mut bare = user(3, "bare");
    bare.surface_op = None;
    let log = vec![user(0, "u0"), odd, other, bare];
    assert_eq!(ids(&log), ["u0"]);
}

#[test]
fn empty_assistant_messages_are_skipped_but_empty_results_are_kept() {
    let mut no_content = assistant(1, "a-none", vec![]);
    no_content.data["message"]
        .as_object_mut()
        .unwrap()
        .remove("content");
    let mut empty_result = result(2, "k");
    empty_result.data["message"]["content"] = json!([]);
    let log = vec![
        assistant(0, "a-empty", vec![]),
        no_content,
        empty_result,
        assistant(3, "a-full", vec![msg::text("x")]),
    ];
    assert_eq!(ids(&log), ["r-k", "a-full"]);
    // An empty assistant message as a replacement removes the range.
    let mut log = vec![user(0, "u0"), user(1, "u1")];
    log.push(replacing(assistant(2, "gone", vec![]), json!(0), json!(0)));
    assert_eq!(ids(&log), ["u1"]);
}

#[test]
fn a_non_message_type_on_the_surface_derives_nothing() {
    let mut todo = ev(event::TODO_WRITE, 1, json!({"todos": []}));
    todo.surface_op = Some(json!("append"));
    let log = vec![user(0, "u0"), todo, user(2, "u2")];
    assert_eq!(ids(&log), ["u0", "u2"]);
    // ... but it is still a node a replace can span.
    let mut log = log;
    log.push(replacing(user(3, "s"), json!(1), json!(2)));
    assert_eq!(ids(&log), ["u0", "s"]);
}

// ---- BlockAssembler -------------------------------------------------------------

fn assemble(chunks: &[Value]) -> Assembled {
    let mut a = assembler::BlockAssembler::default();
    for c in chunks {
        a.push(&serde_json::from_value(c.clone()).unwrap());
    }
    Assembled(a)
}

/// The typed assembler, its blocks compared as the JSON they log as.
struct Assembled(assembler::BlockAssembler);

impl Assembled {
    fn blocks(&self) -> Vec<Value> {
        let blocks = self.0.blocks().unwrap();
        blocks
            .iter()
            .map(|b| serde_json::to_value(b).unwrap())
            .collect()
    }
    fn interrupted_blocks(&self) -> Vec<Value> {
        let blocks = self.0.interrupted_blocks();
        blocks
            .iter()
            .map(|b| serde_json::to_value(b).unwrap())
            .collect()
    }
    fn push(&mut self, chunk: &Value) {
        self.0.push(&serde_json::from_value(chunk.clone()).unwrap());
    }
}

fn call(index: u64, id: &str, name: &str, args: &str) -> Value {
    json!({"type": "tool-call-delta", "index": index, "id": id, "name": name, "argumentsDelta": args})
}

#[test]
fn interleaved_tool_call_deltas_assemble_per_index() {
    let a = assemble(&[
        call(1, "k1", "read", "{\"pa"),
        call(2, "k2", "grep", "{\"q\""),
        call(1, "", "", "th\":1}"),
        call(2, "", "", ":\"x\"}"),
        json!({"type": "text-delta", "index": 0, "text": "late text"}),
    ]);
    assert_eq!(
        a.blocks(),
        [
            json!({"type": "tool-call", "id": "k1", "name": "read", "arguments": "{\"path\":1}"}),
            json!({"type": "tool-call", "id": "k2", "name": "grep", "arguments": "{\"q\":\"x\"}"}),
            json!({"type": "text", "text": "late text"}),
        ],
        "blocks keep the order their index was first seen"
    );
}

#[test]
fn a_block_end_alone_opens_and_closes_its_block_and_its_block_wins() {
    let closed =
        json!({"type": "tool-call", "id": "k", "name": "read", "arguments": "{}", "extra": 1});
    let a = assemble(&[
        json!({"type": "block-start", "index": 0, "blockType": "text"}),
        json!({"type": "text-delta", "index": 0, "text": "t"}),
        json!({"type": "block-end", "index": 1, "block": closed}),
    ]);
    assert_eq!(
        a.blocks(),
        [json!({"type": "text", "text": "t"}), closed.clone()],
        "a closed block is kept as sent, its unknown fields included"
    );
    // Under max-tokens a closed tool call is dropped like an open one.
    let mut a = a;
    a.push(&json!({"type": "finish", "reason": {"kind": "max-tokens"}}));
    assert_eq!(a.blocks(), [json!({"type": "text", "text": "t"})]);
}

#[test]
fn a_delta_of_another_kind_does_not_change_a_blocks_type() {
    let a = assemble(&[
        json!({"type": "block-start", "index": 0, "blockType": "reasoning"}),
        json!({"type": "text-delta", "index": 0, "text": "a"}),
        json!({"type": "reasoning-delta", "index": 0, "text": "b"}),
    ]);
    assert_eq!(a.blocks(), [json!({"type": "reasoning", "text": "ab"})]);
}

#[test]
fn usage_and_finish_open_no_block_and_malformed_chunks_are_refused() {
    let a = assemble(&[
        json!({"type": "usage", "index": 3, "usage": {"inputTokens": 1, "outputTokens": 1}}),
        json!({"type": "finish", "index": 5, "reason": {"kind": "stop"}}),
    ]);
    assert!(a.blocks().is_empty());
    assert_eq!(a.0.finish(), FinishReason::Stop);
    // The set is closed: an unknown chunk, a start without its block type
    // and a finish without a kind are not chunks at all.
    for bad in [
        json!({"type": "ping", "index": 4}),
        json!({"type": "block-start", "index": 0}),
        json!({"type": "finish", "reason": {}}),
    ] {
        assert!(
            serde_json::from_value::<Chunk>(bad.clone()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn interrupted_blocks_drop_every_tool_call_and_blank_block() {
    let a = assemble(&[
        json!({"type": "reasoning-delta", "index": 0, "text": " \t"}),
        call(1, "k", "read", "{}"),
        json!({"type": "block-end", "index": 2,
               "block": {"type": "tool-call", "id": "k2", "name": "x", "arguments": "{}"}}),
        json!({"type": "block-end", "index": 3, "block": {"type": "text", "text": ""}}),
        json!({"type": "text-delta", "index": 4, "text": " kept "}),
    ]);
    assert_eq!(
        a.interrupted_blocks(),
        [json!({"type": "text", "text": " kept "})],
        "visible text is kept as streamed, untrimmed"
    );
}

// ---- interrupted_turn_closers ---------------------------------------------------

fn kinds(events: &[SessionEvent]) -> Vec<&str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

fn calls(seq: u64, turn: u64, step: u64, ids: &[&str]) -> SessionEvent {
    let blocks: Vec<Value> = ids
        .iter()
        .map(|id| json!({"type": "tool-call", "id": id, "name": "read", "arguments": "{}"}))
        .collect();
    ev(
        event::ASSISTANT_MESSAGE,
        seq,
        json!({"turn": turn, "step": step, "message": msg::assistant("a", blocks, "p", "m")}),
    )
}

#[test]
fn closers_continue_a_log_that_does_not_start_at_zero() {
    let log = vec![
        ev(event::TURN_START, 40, json!({"turn": 3})),
        ev(event::STEP_START, 41, json!({"turn": 3, "step": 2})),
    ];
    let c = interrupted_turn_closers(&log);
    assert_eq!(kinds(&c), [event::STEP_END, event::TURN_END]);
    assert_eq!((c[0].seq, c[1].seq), (42, 43));
    assert!(c.iter().all(|e| e.time == 1041), "the last event's time");
    assert_eq!(c[0].data, json!({"turn": 3, "step": 2}));
    assert_eq!(
        c[1].data,
        json!({"turn": 3, "reason": {"kind": "interrupted"}})
    );
    assert!(c.iter().all(|e| e.surface_op.is_none()));
}

#[test]
fn only_the_open_steps_calls_are_owed_results_and_they_name_its_step() {
    let log = vec![
        ev(event::TURN_START, 0, json!({"turn": 1})),
        ev(event::STEP_START, 1, json!({"turn": 1, "step": 1})),
        calls(2, 1, 1, &["old"]),
        ev(event::STEP_END, 3, json!({"turn": 1, "step": 1})),
        ev(event::STEP_START, 4, json!({"turn": 1, "step": 2})),
        calls(5, 1, 2, &["new"]),
    ];
    let c = interrupted_turn_closers(&log);
    assert_eq!(
        kinds(&c),
        [event::TOOL_RESULT, event::STEP_END, event::TURN_END]
    );
    assert_eq!(c[0].data["message"]["source"]["callId"], "new");
    assert_eq!(
        (&c[0].data["turn"], &c[0].data["step"]),
        (&json!(1), &json!(2))
    );
    assert_eq!(c[0].data["message"]["id"], "interrupted-tool-result-new-6");
    assert_eq!(c[1].data, json!({"turn": 1, "step": 2}));
}

#[test]
fn a_new_turn_start_forgets_what_the_torn_turn_owed() {
    let log = vec![
        ev(event::TURN_START, 0, json!({"turn": 1})),
        ev(event::STEP_START, 1, json!({"turn": 1, "step": 1})),
        calls(2, 1, 1, &["k"]),
        ev(event::TURN_START, 3, json!({"turn": 2})),
    ];
    let c = interrupted_turn_closers(&log);
    assert_eq!(kinds(&c), [event::TURN_END]);
    assert_eq!(c[0].data["turn"], 2);
}

#[test]
fn blocks_that_are_not_identified_tool_calls_are_owed_nothing() {
    let mut message = calls(2, 1, 1, &[]);
    message.data["message"]["content"] = json!([
        {"type": "text", "text": "t"},
        {"type": "tool-call", "name": "read", "arguments": "{}"},
    ]);
    let log = vec![
        ev(event::TURN_START, 0, json!({"turn": 1})),
        ev(event::STEP_START, 1, json!({"turn": 1, "step": 1})),
        message,
    ];
    assert_eq!(
        kinds(&interrupted_turn_closers(&log)),
        [event::STEP_END, event::TURN_END]
    );
}

#[test]
fn a_log_with_its_closers_appended_needs_no_more() {
    let log = vec![
        ev(event::TURN_START, 0, json!({"turn": 1})),
        ev(event::STEP_START, 1, json!({"turn": 1, "step": 1})),
        calls(2, 1, 1, &["a", "b", "c"]),
        ev(
            event::TOOL_CALL,
            3,
            json!({"turn": 1, "step": 1, "callId": "b", "name": "read", "arguments": "{}"}),
        ),
        result(4, "a"),
    ];
    let closers = interrupted_turn_closers(&log);
    assert_eq!(
        kinds(&closers),
        [
            event::TOOL_RESULT,
            event::TOOL_RESULT,
            event::STEP_END,
            event::TURN_END
        ]
    );
    assert_eq!(closers[0].data["error"]["code"], code::TOOL_OUTCOME_UNKNOWN);
    assert_eq!(closers[0].source_event_seqs, Some(vec![3]));
    assert_eq!(closers[1].data["error"]["code"], code::TOOL_NOT_STARTED);
    let seqs: Vec<u64> = closers.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [5, 6, 7, 8], "contiguous after the log");
    let mut healed = log;
    healed.extend(closers);
    assert!(interrupted_turn_closers(&healed).is_empty());
}
