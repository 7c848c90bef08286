//! Conformance of the session log (reference dsh-core §10.1, with the
//! persistence rules of §8.2 the log depends on): the `session` and
//! `session-jsonl` plugins in a real host, driven through their services.
//! Rows: `tests/CONFORMANCE.md` (§10.1).
//!
//! No waits here: every call is answered after its effects (a flush is
//! durable when it returns).
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::names::{code, service, session_persistence, sessions};
use dsh_sdk::vocab::event;
use dsh_sdk::Error;
use dsh_testkit::agent::events;
use dsh_testkit::session::store;
use dsh_testkit::TestHost;
use serde_json::{json, Value};

const CWD: &str = "/conformance/session";

async fn try_call(
    t: &TestHost,
    service: &str,
    method: &str,
    params: Value,
) -> Result<Value, Error> {
    t.host.call(service, method, params).await
}

async fn create(t: &TestHost, id: &str) -> Value {
    t.call(
        service::SESSIONS,
        sessions::CREATE,
        json!({"id": id, "meta": {"cwd": CWD}}),
    )
    .await
}

async fn try_append(t: &TestHost, id: &str, kind: &str, data: Value) -> Result<Value, Error> {
    let mut a = json!({"id": id, "type": kind, "data": data});
    if event::SURFACE.contains(&kind) {
        a["surfaceOp"] = json!("append");
    }
    try_call(t, service::SESSIONS, sessions::APPEND, a).await
}

async fn append(t: &TestHost, id: &str, kind: &str, data: Value) -> Value {
    try_append(t, id, kind, data)
        .await
        .unwrap_or_else(|e| panic!("append {kind}: {e}"))
}

async fn derive(t: &TestHost, id: &str) -> Vec<Value> {
    serde_json::from_value(
        t.call(service::SESSIONS, sessions::DERIVE, json!({"id": id}))
            .await,
    )
    .unwrap()
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

fn code(r: Result<Value, Error>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(e) => e.code,
    }
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}})
}

fn assistant(id: &str, content: Value) -> Value {
    json!({"id": id, "role": "assistant", "content": content,
           "source": {"kind": "model", "provider": "p", "model": "m"}})
}

fn tool_result(id: &str, call: &str, text: &str) -> Value {
    json!({"id": id, "role": "user",
           "content": [{"type": "tool-result", "toolCallId": call, "content": [{"type": "text", "text": text}], "isError": false}],
           "source": {"kind": "tool", "callId": call}})
}

/// One complete turn `turn` with a prompt, a tool call and its result.
async fn full_turn(t: &TestHost, id: &str, turn: u64) {
    let ts = json!({"turn": turn, "step": 1});
    append(t, id, event::TURN_START, json!({"turn": turn})).await;
    append(t, id, event::STEP_START, ts.clone()).await;
    append(t, id, event::USER_MESSAGE, user(&format!("u{turn}"), "hi")).await;
    let call =
        json!([{"type": "tool-call", "id": format!("k{turn}"), "name": "read", "arguments": "{}"}]);
    append(
        t,
        id,
        event::ASSISTANT_MESSAGE,
        json!({"turn": turn, "step": 1, "message": assistant(&format!("a{turn}"), call)}),
    )
    .await;
    append(
        t,
        id,
        event::TOOL_CALL,
        json!({"turn": turn, "step": 1, "callId": format!("k{turn}"), "name": "read", "arguments": "{}"}),
    )
    .await;
    append(
        t,
        id,
        event::TOOL_RESULT,
        json!({"turn": turn, "step": 1, "message": tool_result(&format!("r{turn}"), &format!("k{turn}"), "ok")}),
    )
    .await;
    append(t, id, event::STEP_END, ts).await;
    append(
        t,
        id,
        event::TURN_END,
        json!({"turn": turn, "reason": {"kind": "completed"}}),
    )
    .await;
}

async fn flush(t: &TestHost, id: &str) {
    t.call(service::SESSIONS, sessions::FLUSH, json!({"id": id}))
        .await;
}

async fn load(t: &TestHost, id: &str) -> Result<Value, Error> {
    try_call(
        t,
        service::SESSION_PERSISTENCE,
        session_persistence::LOAD,
        json!({"id": id}),
    )
    .await
}

// ---- session.spec.ts ----------------------------------------------------

#[tokio::test]
async fn derive_messages_projects_user_assistant_and_tool_messages_from_the_log() {
    let (t, _) = store().await;
    create(&t, "d").await;
    full_turn(&t, "d", 1).await;
    let call = json!([{"type": "tool-call", "id": "k1", "name": "read", "arguments": "{}"}]);
    assert_eq!(
        derive(&t, "d").await,
        vec![
            user("u1", "hi"),
            assistant("a1", call),
            tool_result("r1", "k1", "ok")
        ]
    );
    t.shutdown().await;
}

#[tokio::test]
async fn turn_end_round_trips_max_tokens_and_aborted_reasons() {
    let (t, _) = store().await;
    create(&t, "r").await;
    let reasons = [
        json!({"kind": "max-tokens"}),
        json!({"kind": "aborted", "reason": {"kind": "user"}}),
    ];
    for (i, reason) in reasons.iter().enumerate() {
        let turn = i as u64 + 1;
        append(&t, "r", event::TURN_START, json!({"turn": turn})).await;
        append(
            &t,
            "r",
            event::TURN_END,
            json!({"turn": turn, "reason": reason}),
        )
        .await;
    }
    flush(&t, "r").await;
    let live = events(&t, "r").await;
    let stored = load(&t, "r").await.unwrap();
    assert_eq!(stored["events"], json!(live));
    assert_eq!(stored["events"][1]["data"]["reason"], reasons[0]);
    assert_eq!(stored["events"][3]["data"]["reason"], reasons[1]);
    t.shutdown().await;
}

#[tokio::test]
async fn injected_context_and_user_messages_both_derive_as_plain_user_content() {
    let (t, _) = store().await;
    create(&t, "c").await;
    let context = json!({"id": "ctx-1", "role": "user", "content": [{"type": "text", "text": "<context>"}],
                         "source": {"kind": "plugin", "plugin": "agent-instructions", "form": {"kind": "instructions"}}});
    append(&t, "c", event::USER_MESSAGE, context.clone()).await;
    append(&t, "c", event::USER_MESSAGE, user("u1", "prompt")).await;
    // Exactly the identified messages, no framing added.
    assert_eq!(derive(&t, "c").await, vec![context, user("u1", "prompt")]);
    t.shutdown().await;
}

#[tokio::test]
async fn seeded_replay_is_identical() {
    let (t, _) = store().await;
    create(&t, "src").await;
    full_turn(&t, "src", 1).await;
    let src = events(&t, "src").await;
    t.call(
        service::SESSIONS,
        sessions::CREATE,
        json!({"id": "replay", "meta": {"cwd": CWD}, "seed": src}),
    )
    .await;
    let replay = events(&t, "replay").await;
    assert_eq!(replay[..src.len()], src[..], "the seed, verbatim");
    assert_eq!(kinds(&replay[src.len()..]), [event::SESSION_END_SEED]);
    assert_eq!(replay[src.len()]["seq"], src.len());
    assert_eq!(derive(&t, "replay").await, derive(&t, "src").await);
    t.shutdown().await;
}

#[tokio::test]
async fn an_explicitly_empty_seed_gets_end_seed_at_seq_0_and_a_fresh_session_none() {
    let (t, _) = store().await;
    t.call(
        service::SESSIONS,
        sessions::CREATE,
        json!({"id": "empty-seed", "meta": {"cwd": CWD}, "seed": []}),
    )
    .await;
    let seeded = events(&t, "empty-seed").await;
    assert_eq!(kinds(&seeded), [event::SESSION_END_SEED]);
    assert_eq!(seeded[0]["seq"], 0);
    assert_eq!(seeded[0]["data"], json!({}));
    create(&t, "fresh").await;
    assert_eq!(events(&t, "fresh").await, Vec::<Value>::new());
    t.shutdown().await;
}

#[tokio::test]
async fn a_seed_that_ends_in_end_seed_gets_no_second_one() {
    let (t, _) = store().await;
    t.call(
        service::SESSIONS,
        sessions::CREATE,
        json!({"id": "s1", "meta": {"cwd": CWD}, "seed": []}),
    )
    .await;
    let seed = events(&t, "s1").await;
    t.call(
        service::SESSIONS,
        sessions::CREATE,
        json!({"id": "s2", "meta": {"cwd": CWD}, "seed": seed}),
    )
    .await;
    assert_eq!(events(&t, "s2").await, seed);
    t.shutdown().await;
}

#[tokio::test]
async fn append_rejects_non_json_numbers_and_misplaced_surface_metadata() {
    let (t, _) = store().await;
    create(&t, "a").await;
    // -0 is not lossless JSON.
    let minus_zero = try_append(&t, "a", event::USER_MESSAGE, json!({"x": -0.0})).await;
    let e = minus_zero.unwrap_err();
    assert_eq!(e.code, "INVALID_APPEND");
    assert_eq!(
        e.message,
        "session event \"user/message\" carries non-JSON-serializable data"
    );
    // A surface event needs a surfaceOp.
    let bare = json!({"id": "a", "type": event::USER_MESSAGE, "data": user("u1", "x")});
    assert_eq!(
        code(try_call(&t, service::SESSIONS, sessions::APPEND, bare).await),
        "INVALID_APPEND"
    );
    // Non-surface events carry neither surfaceOp nor sourceEventSeqs.
    for extra in [
        json!({"surfaceOp": "append"}),
        json!({"sourceEventSeqs": []}),
    ] {
        let mut a = json!({"id": "a", "type": event::TODO_WRITE, "data": {"todos": []}});
        a.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        assert_eq!(
            code(try_call(&t, service::SESSIONS, sessions::APPEND, a).await),
            "INVALID_APPEND",
            "{extra}"
        );
    }
    // sourceEventSeqs must precede the event.
    let ahead = json!({"id": "a", "type": event::USER_MESSAGE, "data": user("u1", "x"),
                       "surfaceOp": "append", "sourceEventSeqs": [0]});
    assert_eq!(
        code(try_call(&t, service::SESSIONS, sessions::APPEND, ahead).await),
        "INVALID_APPEND"
    );
    // Nothing rejected entered the log.
    assert_eq!(events(&t, "a").await, Vec::<Value>::new());
    t.shutdown().await;
}

#[tokio::test]
async fn seed_validation_rejects_gaps_missing_surface_op_and_non_json() {
    let (t, _) = store().await;
    let ev = |kind: &str, seq: u64, data: Value| json!({"type": kind, "seq": seq, "time": 1, "data": data});
    let user_ev = |seq| {
        let mut e = ev(event::USER_MESSAGE, seq, user("u", "x"));
        e["surfaceOp"] = json!("append");
        e
    };
    let cases = [
        ("gap", vec![user_ev(0), ev(event::TODO_WRITE, 2, json!({}))]),
        (
            "no-surface-op",
            vec![ev(event::USER_MESSAGE, 0, user("u", "x"))],
        ),
        (
            "surface-on-log-only",
            vec![{
                let mut e = ev(event::TODO_WRITE, 0, json!({}));
                e["surfaceOp"] = json!("append");
                e
            }],
        ),
        (
            "minus-zero",
            vec![ev(event::TODO_WRITE, 0, json!({"n": -0.0}))],
        ),
    ];
    for (name, seed) in cases {
        let r = try_call(
            &t,
            service::SESSIONS,
            sessions::CREATE,
            json!({"id": name, "meta": {"cwd": CWD}, "seed": seed}),
        )
        .await;
        assert_eq!(code(r), "INVALID_APPEND", "{name}");
        assert_eq!(
            code(try_call(&t, service::SESSIONS, sessions::EVENTS, json!({"id": name})).await),
            code::SESSION_NOT_FOUND,
            "{name} was not created"
        );
    }
    t.shutdown().await;
}

#[tokio::test]
async fn a_bare_session_has_a_v0_header_and_meta_attaches() {
    let (t, _) = store().await;
    let bare = t.call(service::SESSIONS, sessions::CREATE, json!({})).await;
    assert_eq!(bare["header"]["version"], 0);
    assert!(bare["id"].as_str().unwrap().starts_with("session-"));
    let h = t
        .call(
            service::SESSIONS,
            sessions::CREATE,
            json!({"id": "meta", "meta": {"cwd": CWD},
                   "header": {"version": 0, "id": "meta", "createdAt": 5, "parentSession": "p",
                              "origin": "subagent", "delegationDepth": 2}}),
        )
        .await;
    assert_eq!(
        h["header"],
        json!({"version": 0, "id": "meta", "createdAt": 5, "cwd": CWD, "parentSession": "p",
               "origin": "subagent", "delegationDepth": 2})
    );
    let relative = try_call(
        &t,
        service::SESSIONS,
        sessions::CREATE,
        json!({"id": "rel", "meta": {"cwd": "relative/dir"}}),
    )
    .await;
    assert_eq!(code(relative), "INVALID_PAYLOAD");
    t.shutdown().await;
}

#[tokio::test]
async fn duplicate_live_ids_are_rejected() {
    let (t, _) = store().await;
    create(&t, "dup").await;
    let again = try_call(
        &t,
        service::SESSIONS,
        sessions::CREATE,
        json!({"id": "dup"}),
    )
    .await;
    assert_eq!(code(again), code::SESSION_ALREADY_EXISTS);
    t.shutdown().await;
}

#[tokio::test]
async fn a_closed_session_is_detached() {
    let (t, _) = store().await;
    create(&t, "gone").await;
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": "gone"}))
        .await;
    let r = try_append(&t, "gone", event::TURN_START, json!({"turn": 1})).await;
    assert_eq!(code(r), code::SESSION_NOT_FOUND);
    t.shutdown().await;
}

#[tokio::test]
async fn a_rejected_append_changes_nothing_and_is_not_persisted() {
    let (t, _) = store().await;
    create(&t, "v").await;
    append(&t, "v", event::TURN_START, json!({"turn": 1})).await;
    // turn/start while turn 1 is open: refused before the log changes.
    let r = try_append(&t, "v", event::TURN_START, json!({"turn": 2})).await;
    assert_eq!(code(r), "INVALID_APPEND");
    let ok = append(
        &t,
        "v",
        event::TURN_END,
        json!({"turn": 1, "reason": {"kind": "completed"}}),
    )
    .await;
    assert_eq!(ok["seq"], 1, "the rejected event took no seq");
    flush(&t, "v").await;
    assert_eq!(
        kinds(load(&t, "v").await.unwrap()["events"].as_array().unwrap()),
        [event::TURN_START, event::TURN_END]
    );
    t.shutdown().await;
}

#[tokio::test]
async fn todo_write_is_not_surface_and_replays_durably() {
    let (t, _) = store().await;
    create(&t, "todo").await;
    append(&t, "todo", event::TURN_START, json!({"turn": 1})).await;
    let first = json!({"todos": [{"content": "a", "status": "pending"}]});
    let last = json!({"todos": [{"content": "a", "status": "completed"}]});
    append(&t, "todo", event::TODO_WRITE, first).await;
    let ev = append(&t, "todo", event::TODO_WRITE, last.clone()).await;
    assert!(ev.get("surfaceOp").is_none());
    append(
        &t,
        "todo",
        event::TURN_END,
        json!({"turn": 1, "reason": {"kind": "completed"}}),
    )
    .await;
    assert_eq!(derive(&t, "todo").await, Vec::<Value>::new());
    flush(&t, "todo").await;
    let stored = load(&t, "todo").await.unwrap();
    let todos: Vec<&Value> = stored["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == event::TODO_WRITE)
        .collect();
    assert_eq!(todos.last().unwrap()["data"], last, "the last write wins");
    t.shutdown().await;
}

#[tokio::test]
async fn request_header_with_reasoning_effort_and_adapter_defaults_round_trips() {
    let (t, _) = store().await;
    create(&t, "h").await;
    append(&t, "h", event::TURN_START, json!({"turn": 1})).await;
    let header = json!({"config": {"provider": "p", "model": "m", "reasoningEffort": "high", "maxTokens": 100},
                        "adapterDefaults": {"maxTokens": true}, "system": "s"});
    append(
        &t,
        "h",
        event::REQUEST_HEADER,
        json!({"header": header, "reason": "initial"}),
    )
    .await;
    flush(&t, "h").await;
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": "h"}))
        .await;
    let summary = t
        .call(service::SESSIONS, sessions::RESUME, json!({"id": "h"}))
        .await;
    assert_eq!(summary["requestHeader"], header);
    t.shutdown().await;
}

// ---- unknown event types (reference §2.1, §10.8) -------------------------

#[tokio::test]
async fn an_unknown_event_type_is_refused_unless_ignorable() {
    let (t, root) = store().await;
    create(&t, "u").await;
    let r = try_append(&t, "u", "my-plugin/thing", json!({"x": 1})).await;
    let e = r.unwrap_err();
    assert_eq!(e.code, "INVALID_APPEND");
    assert_eq!(
        e.message,
        "event type \"my-plugin/thing\" is not known to this harness and is not marked ignorable"
    );
    let kept = try_call(
        &t,
        service::SESSIONS,
        sessions::APPEND,
        json!({"id": "u", "type": "my-plugin/thing", "data": {"x": 1}, "ignorable": true}),
    )
    .await
    .unwrap();
    assert_eq!(kept["ignorable"], true);
    assert_eq!(kept["seq"], 0);
    flush(&t, "u").await;
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": "u"}))
        .await;
    // An ignorable unknown event loads as-is.
    assert_eq!(load(&t, "u").await.unwrap()["events"], json!([kept]));

    // A stored log with an unknown, non-ignorable type is refused at load.
    let dir = root.join("--conformance-session--");
    std::fs::create_dir_all(&dir).unwrap();
    let header = json!({"type": "session", "version": 0, "id": "foreign", "createdAt": 1, "cwd": CWD, "delegationDepth": 0});
    let line = json!({"type": "mode/set", "seq": 0, "time": 1, "data": {}});
    std::fs::write(dir.join("foreign.jsonl"), format!("{header}\n{line}\n")).unwrap();
    let e = load(&t, "foreign").await.unwrap_err();
    assert_eq!(e.code, "SESSION_FORMAT_UNSUPPORTED");
    assert!(
        e.message.starts_with(
            "stored session \"foreign\" cannot be read: event type \"mode/set\" is not known to this harness and is not marked ignorable"
        ),
        "{e}"
    );
    let inspect = try_call(
        &t,
        service::SESSION_PERSISTENCE,
        session_persistence::INSPECT,
        json!({"id": "foreign"}),
    )
    .await;
    assert_eq!(code(inspect), "SESSION_FORMAT_UNSUPPORTED");
    // And a seed carrying one is refused too.
    let seed = json!([{"type": "mode/set", "seq": 0, "time": 1, "data": {}}]);
    let r = try_call(
        &t,
        service::SESSIONS,
        sessions::CREATE,
        json!({"id": "seeded-unknown", "seed": seed}),
    )
    .await;
    assert_eq!(code(r), "INVALID_APPEND");
    t.shutdown().await;
}

// ---- collisions and live loads (reference §8.2, §10.8) -------------------

#[tokio::test]
async fn a_new_session_colliding_with_a_stored_id_is_rejected_and_the_log_left_alone() {
    let (t, _) = store().await;
    create(&t, "taken").await;
    full_turn(&t, "taken", 1).await;
    flush(&t, "taken").await;
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": "taken"}))
        .await;
    let path = t
        .call(
            service::SESSION_PERSISTENCE,
            session_persistence::LOCATE,
            json!({"id": "taken"}),
        )
        .await["path"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = std::fs::read(&path).unwrap();

    create(&t, "taken").await;
    append(&t, "taken", event::TURN_START, json!({"turn": 1})).await;
    let e = try_call(
        &t,
        service::SESSIONS,
        sessions::FLUSH,
        json!({"id": "taken"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, code::SESSION_ALREADY_EXISTS);
    // (The flush dispatch prefixes the listener's message with its event.)
    assert!(
        e.message
            .contains("session \"taken\" already has a persisted log on disk (id collision)"),
        "{e}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "nothing reached the log"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn an_abandoned_lazy_id_is_reusable() {
    let (t, _) = store().await;
    create(&t, "lazy").await;
    flush(&t, "lazy").await;
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": "lazy"}))
        .await;
    create(&t, "lazy").await;
    append(&t, "lazy", event::TURN_START, json!({"turn": 1})).await;
    flush(&t, "lazy").await;
    assert_eq!(
        kinds(
            try_call(
                &t,
                service::SESSION_PERSISTENCE,
                session_persistence::READ_FROM,
                json!({"id": "lazy", "fromSeq": 0})
            )
            .await
            .unwrap()["events"]
                .as_array()
                .unwrap()
        ),
        [event::TURN_START]
    );
    t.shutdown().await;
}

#[tokio::test]
async fn load_rejects_while_the_live_turn_is_open_and_succeeds_after_it_closes() {
    let (t, _) = store().await;
    create(&t, "live").await;
    // Unmaterialized: nothing written yet.
    assert_eq!(code(load(&t, "live").await), code::SESSION_NOT_FOUND);
    append(&t, "live", event::TURN_START, json!({"turn": 1})).await;
    append(&t, "live", event::STEP_START, json!({"turn": 1, "step": 1})).await;
    let e = load(&t, "live").await.unwrap_err();
    assert_eq!(e.code, code::OPEN_TURN);
    assert_eq!(
        e.message,
        "cannot load session \"live\" while its live turn is open; use the live Session or wait for the turn to close"
    );
    // The live writer's log was not crash-repaired under it.
    let raw = try_call(
        &t,
        service::SESSION_PERSISTENCE,
        session_persistence::READ_FROM,
        json!({"id": "live", "fromSeq": 0}),
    )
    .await
    .unwrap();
    assert_eq!(
        kinds(raw["events"].as_array().unwrap()),
        [event::TURN_START, event::STEP_START]
    );
    // The turn goes on where it was, then closes; load now answers it.
    append(&t, "live", event::STEP_END, json!({"turn": 1, "step": 1})).await;
    append(
        &t,
        "live",
        event::TURN_END,
        json!({"turn": 1, "reason": {"kind": "completed"}}),
    )
    .await;
    let loaded = load(&t, "live").await.unwrap();
    assert_eq!(loaded["events"], json!(events(&t, "live").await));
    t.shutdown().await;
}

// ---- fork.spec.ts ---------------------------------------------------------

async fn fork(t: &TestHost, params: Value) -> Result<Value, Error> {
    try_call(t, service::SESSIONS, sessions::FORK, params).await
}

#[tokio::test]
async fn an_empty_source_forks_to_an_empty_child_with_lineage() {
    let (t, _) = store().await;
    // The source's own lineage and delegation are not the child's.
    t.call(
        service::SESSIONS,
        sessions::CREATE,
        json!({"id": "empty", "meta": {"cwd": CWD},
               "header": {"version": 0, "id": "empty", "createdAt": 5, "parentSession": "grandparent",
                          "seedLength": 3, "origin": "subagent", "delegationDepth": 2}}),
    )
    .await;
    let child = fork(&t, json!({"id": "empty", "childId": "kid"}))
        .await
        .unwrap();
    let mut h = child["header"].clone();
    assert!(h["createdAt"].as_u64().unwrap() > 5);
    h.as_object_mut().unwrap().remove("createdAt");
    assert_eq!(
        h,
        json!({"version": 0, "id": "kid", "cwd": CWD, "parentSession": "empty", "seedLength": 0})
    );
    // An empty seed is still a seed: the child holds only its end-seed.
    assert_eq!(kinds(&events(&t, "kid").await), [event::SESSION_END_SEED]);
    t.shutdown().await;
}

#[tokio::test]
async fn the_default_boundary_is_the_last_event_and_the_seed_is_a_copy() {
    let (t, _) = store().await;
    create(&t, "src").await;
    full_turn(&t, "src", 1).await;
    // Stable log-only events after turn/end are part of the default seed.
    append(
        &t,
        "src",
        event::INBOX_SPLICED,
        json!({"target": "next-turn", "start": 0, "inserted": []}),
    )
    .await;
    let src = events(&t, "src").await;
    let child = fork(&t, json!({"id": "src", "childId": "kid"}))
        .await
        .unwrap();
    assert_eq!(child["header"]["seedLength"], src.len());
    let kid = events(&t, "kid").await;
    assert_eq!(kid[..src.len()], src[..]);
    assert_eq!(kid.len(), src.len() + 1);
    assert_eq!(kid[src.len()]["type"], event::SESSION_END_SEED);
    assert_eq!(kid[src.len()]["seq"], src.len());
    // The child's log is its own: appending to it leaves the source alone.
    append(&t, "kid", event::TURN_START, json!({"turn": 2})).await;
    assert_eq!(events(&t, "src").await, src);
    t.shutdown().await;
}

#[tokio::test]
async fn an_earlier_boundary_is_allowed_while_the_source_has_an_open_tail() {
    let (t, _) = store().await;
    create(&t, "src").await;
    full_turn(&t, "src", 1).await;
    append(&t, "src", event::TURN_START, json!({"turn": 2})).await;
    let whole = fork(&t, json!({"id": "src", "childId": "k0"})).await;
    assert_eq!(code(whole), code::OPEN_TURN);
    let child = fork(&t, json!({"id": "src", "childId": "k1", "boundary": 7}))
        .await
        .unwrap();
    assert_eq!(child["header"]["seedLength"], 8);
    let kid = events(&t, "k1").await;
    assert_eq!(kid[7]["type"], event::TURN_END);
    assert_eq!(kid[8]["type"], event::SESSION_END_SEED);
    t.shutdown().await;
}

#[tokio::test]
async fn any_turn_end_reason_is_a_valid_boundary() {
    let (t, _) = store().await;
    create(&t, "src").await;
    let reasons = [
        json!({"kind": "completed"}),
        json!({"kind": "aborted", "reason": {"kind": "user"}}),
        json!({"kind": "blocked"}),
        json!({"kind": "error", "error": {"message": "x", "code": "SERVER"}}),
        json!({"kind": "max-tokens"}),
        json!({"kind": "interrupted"}),
    ];
    for (i, reason) in reasons.iter().enumerate() {
        let turn = i as u64 + 1;
        append(&t, "src", event::TURN_START, json!({"turn": turn})).await;
        append(
            &t,
            "src",
            event::TURN_END,
            json!({"turn": turn, "reason": reason}),
        )
        .await;
        let b = 2 * i as u64 + 1;
        let child = format!("kid-{i}");
        let f = fork(&t, json!({"id": "src", "childId": child, "boundary": b})).await;
        assert_eq!(f.unwrap()["header"]["seedLength"], b + 1, "{reason}");
    }
    t.shutdown().await;
}

#[tokio::test]
async fn the_child_ends_in_end_seed_after_an_inherited_open_bracket() {
    let (t, _) = store().await;
    create(&t, "src").await;
    full_turn(&t, "src", 1).await;
    // A boundary on a log-only event between turns.
    append(
        &t,
        "src",
        event::INBOX_SPLICED,
        json!({"target": "next-turn", "start": 0, "inserted": [user("q", "later")]}),
    )
    .await;
    fork(&t, json!({"id": "src", "childId": "kid", "boundary": 8}))
        .await
        .unwrap();
    let kid = events(&t, "kid").await;
    assert_eq!(
        kinds(&kid[7..]),
        [
            event::TURN_END,
            event::INBOX_SPLICED,
            event::SESSION_END_SEED
        ]
    );
    t.shutdown().await;
}

#[tokio::test]
async fn fork_errors_carry_their_codes_and_the_child_id_is_checked_first() {
    let (t, _) = store().await;
    create(&t, "src").await;
    full_turn(&t, "src", 1).await;
    for bad in [json!(8), json!(99), json!(-1), json!(1.5), json!("3")] {
        let r = fork(&t, json!({"id": "src", "childId": "kid", "boundary": bad})).await;
        assert_eq!(code(r), "INVALID_BOUNDARY", "{bad}");
    }
    let r = fork(&t, json!({"id": "nobody", "childId": "kid"})).await;
    assert_eq!(code(r), code::SESSION_NOT_FOUND);
    let r = fork(&t, json!({"id": "src", "childId": "kid", "boundary": 3})).await;
    assert_eq!(code(r), code::OPEN_TURN);
    create(&t, "kid").await;
    // An existing child id wins over a bad boundary and a missing source.
    let r = fork(&t, json!({"id": "src", "childId": "kid", "boundary": 99})).await;
    assert_eq!(code(r), code::SESSION_ALREADY_EXISTS);
    let r = fork(&t, json!({"id": "nobody", "childId": "kid"})).await;
    assert_eq!(code(r), code::SESSION_ALREADY_EXISTS);
    t.shutdown().await;
}

#[tokio::test]
async fn a_fork_seed_is_persisted_once_with_end_seed_at_the_seed_length() {
    let (t, _) = store().await;
    create(&t, "src").await;
    full_turn(&t, "src", 1).await;
    fork(&t, json!({"id": "src", "childId": "kid"}))
        .await
        .unwrap();
    append(&t, "kid", event::TURN_START, json!({"turn": 2})).await;
    flush(&t, "kid").await;
    let raw = try_call(
        &t,
        service::SESSION_PERSISTENCE,
        session_persistence::READ_FROM,
        json!({"id": "kid", "fromSeq": 0}),
    )
    .await
    .unwrap();
    let stored = raw["events"].as_array().unwrap();
    let seqs: Vec<u64> = stored.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..10).collect::<Vec<u64>>());
    assert_eq!(stored[8]["type"], event::SESSION_END_SEED);
    assert_eq!(raw["header"]["parentSession"], "src");
    assert_eq!(raw["header"]["seedLength"], 8);
    t.shutdown().await;
}

// ---- scoped.spec.ts --------------------------------------------------------

#[tokio::test]
async fn flush_rejects_a_session_that_is_not_live() {
    let (t, _) = store().await;
    let r = try_call(
        &t,
        service::SESSIONS,
        sessions::FLUSH,
        json!({"id": "never"}),
    )
    .await;
    assert_eq!(code(r), code::SESSION_NOT_FOUND);
    create(&t, "closed").await;
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": "closed"}))
        .await;
    let r = try_call(
        &t,
        service::SESSIONS,
        sessions::FLUSH,
        json!({"id": "closed"}),
    )
    .await;
    assert_eq!(code(r), code::SESSION_NOT_FOUND);
    t.shutdown().await;
}
