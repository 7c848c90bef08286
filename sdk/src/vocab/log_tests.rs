//! The log's pure cores against the original's repair, session, surface
//! and json specs.

use serde_json::{json, Value};

use super::*;
use crate::names::code;

fn ev(kind: &str, seq: u64, data: Value) -> SessionEvent {
    let surface = event::SURFACE.contains(&kind);
    SessionEvent {
        kind: kind.to_owned(),
        seq,
        time: 100 + seq,
        data: data.into(),
        source_event_seqs: None,
        surface_op: surface.then(|| json!("append")),
        ignorable: None,
    }
}

/// A log from `(type, data)` pairs, seqs from 0.
fn log(items: Vec<(&str, Value)>) -> Vec<SessionEvent> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, (k, d))| ev(k, i as u64, d))
        .collect()
}

fn ts() -> Value {
    json!({"turn": 1, "step": 1})
}

fn calls(ids: &[&str]) -> Value {
    let blocks: Vec<Value> = ids
        .iter()
        .map(|id| json!({"type": "tool-call", "id": id, "name": "read", "arguments": "{}"}))
        .collect();
    json!({"turn": 1, "step": 1, "message": msg::assistant("a", blocks, "p", "m")})
}

fn call_ev(id: &str) -> Value {
    json!({"turn": 1, "step": 1, "callId": id, "name": "read", "arguments": "{}"})
}

fn result_ev(id: &str) -> Value {
    json!({"turn": 1, "step": 1, "message": msg::tool_result(&format!("r-{id}"), id, vec![msg::text("ok")], false)})
}

fn kinds(events: &[SessionEvent]) -> Vec<&str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

// ---- repair.spec.ts ----

#[test]
fn closers_none_for_balanced_or_empty_logs() {
    assert!(interrupted_turn_closers(&[]).is_empty());
    let balanced = log(vec![
        (event::TURN_START, json!({"turn": 1})),
        (event::STEP_START, ts()),
        (event::STEP_END, ts()),
        (
            event::TURN_END,
            json!({"turn": 1, "reason": {"kind": "completed"}}),
        ),
    ]);
    assert!(interrupted_turn_closers(&balanced).is_empty());
}

#[test]
fn closers_turn_only_open_gets_turn_end_interrupted() {
    let l = log(vec![(event::TURN_START, json!({"turn": 1}))]);
    let c = interrupted_turn_closers(&l);
    assert_eq!(kinds(&c), [event::TURN_END]);
    assert_eq!(c[0].seq, 1);
    assert_eq!(c[0].time, l[0].time, "time of the last event");
    assert_eq!(
        c[0].data,
        json!({"turn": 1, "reason": {"kind": "interrupted"}})
    );
}

#[test]
fn closers_open_step_gets_step_end_then_turn_end() {
    let l = log(vec![
        (event::TURN_START, json!({"turn": 1})),
        (event::STEP_START, ts()),
    ]);
    let c = interrupted_turn_closers(&l);
    assert_eq!(kinds(&c), [event::STEP_END, event::TURN_END]);
    assert_eq!(c[0].data, ts());
    assert_eq!((c[0].seq, c[1].seq), (2, 3));
}

#[test]
fn closers_unrecorded_call_gets_tool_not_started() {
    let l = log(vec![
        (event::TURN_START, json!({"turn": 1})),
        (event::STEP_START, ts()),
        (event::ASSISTANT_MESSAGE, calls(&["k1"])),
    ]);
    let c = interrupted_turn_closers(&l);
    assert_eq!(
        kinds(&c),
        [event::TOOL_RESULT, event::STEP_END, event::TURN_END]
    );
    let r = &c[0];
    assert_eq!(
        r.data["error"],
        json!({"name": "ToolNotStartedError", "code": code::TOOL_NOT_STARTED})
    );
    assert_eq!(r.data["message"]["id"], "interrupted-tool-result-k1-3");
    assert_eq!(r.data["message"]["content"][0]["isError"], true);
    assert_eq!(
        r.data["message"]["content"][0]["content"][0]["text"],
        "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed."
    );
    assert_eq!(r.surface_op, Some(json!("append")));
    assert_eq!(r.source_event_seqs, None);
    assert_eq!(
        (r.data["turn"].clone(), r.data["step"].clone()),
        (json!(1), json!(1))
    );
}

#[test]
fn closers_answered_calls_and_calls_of_closed_steps_get_nothing() {
    let answered = log(vec![
        (event::TURN_START, json!({"turn": 1})),
        (event::STEP_START, ts()),
        (event::ASSISTANT_MESSAGE, calls(&["k1"])),
        (event::TOOL_CALL, call_ev("k1")),
        (event::TOOL_RESULT, result_ev("k1")),
    ]);
    assert_eq!(
        kinds(&interrupted_turn_closers(&answered)),
        [event::STEP_END, event::TURN_END]
    );
    let closed_step = log(vec![
        (event::TURN_START, json!({"turn": 1})),
        (event::STEP_START, ts()),
        (event::ASSISTANT_MESSAGE, calls(&["k1"])),
        (event::STEP_END, ts()),
    ]);
    assert_eq!(
        kinds(&interrupted_turn_closers(&closed_step)),
        [event::TURN_END]
    );
    let closed_turn = log(vec![
        (event::TURN_START, json!({"turn": 1})),
        (event::STEP_START, ts()),
        (event::ASSISTANT_MESSAGE, calls(&["k1"])),
        (
            event::TURN_END,
            json!({"turn": 1, "reason": {"kind": "error", "error": {"message": "x", "code": "UNKNOWN"}}}),
        ),
        (event::TURN_START, json!({"turn": 2})),
    ]);
    let c = interrupted_turn_closers(&closed_turn);
    assert_eq!(kinds(&c), [event::TURN_END]);
    assert_eq!(c[0].data["turn"], 2);
}

#[test]
fn closers_multiple_calls_in_log_order_recorded_one_cites_its_call() {
    let l = log(vec![
        (event::TURN_START, json!({"turn": 1})),
        (event::STEP_START, ts()),
        (event::ASSISTANT_MESSAGE, calls(&["k1", "k2"])),
        (event::TOOL_CALL, call_ev("k1")),
    ]);
    let c = interrupted_turn_closers(&l);
    assert_eq!(
        kinds(&c),
        [
            event::TOOL_RESULT,
            event::TOOL_RESULT,
            event::STEP_END,
            event::TURN_END
        ]
    );
    assert_eq!(c[0].data["message"]["source"]["callId"], "k1");
    assert_eq!(c[0].data["error"]["code"], code::TOOL_OUTCOME_UNKNOWN);
    assert_eq!(c[0].data["error"]["name"], "ToolOutcomeUnknownError");
    assert_eq!(c[0].source_event_seqs, Some(vec![3]));
    assert_eq!(c[0].surface_op, Some(json!("append")));
    assert!(c[0].data["message"]["content"][0]["content"][0]["text"]
        .as_str()
        .is_some_and(|t| t.starts_with(
            "The tool call was interrupted after it was recorded, but no result was durably recorded."
        )));
    assert_eq!(c[1].data["message"]["source"]["callId"], "k2");
    assert_eq!(c[1].data["error"]["code"], code::TOOL_NOT_STARTED);
    assert_eq!(c[1].data["message"]["id"], "interrupted-tool-result-k2-5");
}

#[test]
fn closers_tolerate_an_orphan_tool_call() {
    let l = log(vec![
        (event::TURN_START, json!({"turn": 1})),
        (event::STEP_START, ts()),
        (event::TOOL_CALL, call_ev("ghost")),
    ]);
    assert_eq!(
        kinds(&interrupted_turn_closers(&l)),
        [event::STEP_END, event::TURN_END]
    );
}

#[test]
fn closers_answer_the_calls_of_an_answer_whose_usage_does_not_read_once_each() {
    let mut answer = calls(&["k1", "k1"]);
    answer["usage"] = json!({"inputTokens": -3, "outputTokens": 0});
    let l = log(vec![
        (event::TURN_START, json!({"turn": 1})),
        (event::STEP_START, ts()),
        (event::ASSISTANT_MESSAGE, answer),
    ]);
    let c = interrupted_turn_closers(&l);
    assert_eq!(
        kinds(&c),
        [event::TOOL_RESULT, event::STEP_END, event::TURN_END],
        "the call is answered once, though the usage is malformed"
    );
    assert_eq!(c[0].data["message"]["source"]["callId"], "k1");
}

// ---- session.spec / surface.spec / properties.spec: derivation ----

#[test]
fn derivation_respects_replace_and_skips_empty_assistant_messages() {
    let mut l = log(vec![
        (event::USER_MESSAGE, msg::user_text("u1", "one")),
        (
            event::ASSISTANT_MESSAGE,
            json!({"turn": 1, "step": 1, "message": msg::assistant("a0", vec![], "p", "m")}),
        ),
        (event::USER_MESSAGE, msg::user_text("u2", "two")),
        (event::USER_MESSAGE, msg::user_text("u3", "three")),
    ]);
    assert_eq!(
        derive_messages(&l),
        vec![
            msg::user_text("u1", "one"),
            msg::user_text("u2", "two"),
            msg::user_text("u3", "three")
        ]
    );
    let mut summary = ev(event::USER_MESSAGE, 4, msg::user_text("s", "summary"));
    summary.surface_op = Some(json!({"op": "replace", "start": 0, "end": 2}));
    summary.source_event_seqs = Some(vec![0, 1, 2]);
    l.push(summary);
    assert_eq!(
        derive_messages(&l),
        vec![
            msg::user_text("s", "summary"),
            msg::user_text("u3", "three")
        ]
    );
}

#[test]
fn non_message_events_never_affect_derivation_and_it_is_deterministic() {
    let messages = log(vec![
        (event::USER_MESSAGE, msg::user_text("u1", "one")),
        (event::TOOL_RESULT, result_ev("k1")),
    ]);
    let mut noisy = Vec::new();
    for e in &messages {
        for (k, d) in [
            (event::TODO_WRITE, json!({"todos": []})),
            (
                event::ASSISTANT_CHUNK,
                json!({"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "x"}}),
            ),
            (event::SESSION_END_SEED, json!({})),
        ] {
            noisy.push(ev(k, noisy.len() as u64, d));
        }
        let mut e = e.clone();
        e.seq = noisy.len() as u64;
        noisy.push(e);
    }
    let derived = derive_messages(&noisy);
    assert_eq!(derived, derive_messages(&messages));
    assert_eq!(derived, derive_messages(&noisy), "deterministic");
    for m in &derived {
        assert!(matches!(m["role"].as_str(), Some("user" | "assistant")));
    }
}

// ---- json.spec.ts ----

#[test]
fn lossless_rejects_negative_zero_and_accepts_ordinary_json() {
    assert!(!lossless(&json!(-0.0)));
    assert!(!lossless(&json!({"a": [1, {"b": -0.0}]})));
    assert!(lossless(&json!(0.0)));
    assert!(lossless(
        &json!({"__proto__": 1, "a": [null, true, "s", 1.5, -3]})
    ));
}

#[test]
fn unknown_types_need_ignorable() {
    assert_eq!(event::refuse_unknown(event::TURN_START, None), None);
    assert_eq!(event::refuse_unknown("x/y", Some(true)), None);
    assert!(event::refuse_unknown("x/y", None).is_some());
    assert!(event::refuse_unknown("x/y", Some(false)).is_some());
    assert!(event::refuse_unknown("request/header-delta", None).is_some());
}
