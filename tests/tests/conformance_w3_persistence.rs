//! Conformance of the JSONL backend's read path (reference dsh-core §8.2,
//! §10.8 coordinator-contract): stored message events are validated before
//! they are returned, and the older v0 records the original still imports
//! (pre-react-loop `turn/start` triggers, `steering/message`, old
//! `turn/end` reasons, pre-identity messages) load, inspect and resume as
//! current events, without the log on disk changing. The `session` and
//! `session-jsonl` plugins in a real host. Rows: `tests/CONFORMANCE.md`.
//!
//! No waits here: every call is answered after its effects.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::path::{Path, PathBuf};

use dsh_sdk::Error;
use dsh_testkit::TestHost;
use serde_json::{json, Value};

const CWD: &str = "/conformance/w3-persistence";

/// A host with the session log persisted by session-jsonl under `root`.
async fn host() -> (TestHost, PathBuf) {
    let t = TestHost::start().await;
    let root = t.home.path().join("sessions");
    t.apply(&format!(
        "[[row]]\nid='session'\nplugin='session'\n[[row]]\nid='jsonl'\nplugin='session-jsonl'\nconfig = {{ root = '{}' }}\n",
        root.display()
    ))
    .await;
    (t, root)
}

/// Places a raw log of session `id` (header line first) where the backend
/// reads it (the original's session directory layout, plain), and returns
/// its path.
fn write_log(root: &Path, id: &str, events: &[Value]) -> PathBuf {
    let dir = root.join("--conformance-w3-persistence--").join(id);
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = format!(
        "{}\n",
        json!({"type": "session", "version": 0, "id": id, "createdAt": 1, "cwd": CWD, "delegationDepth": 0})
    );
    for e in events {
        text.push_str(&format!("{e}\n"));
    }
    let path = dir.join("session.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

fn ev(kind: &str, seq: u64, data: Value) -> Value {
    json!({"type": kind, "seq": seq, "time": seq + 1, "data": data})
}

fn surface(kind: &str, seq: u64, data: Value) -> Value {
    let mut e = ev(kind, seq, data);
    e["surfaceOp"] = json!("append");
    e
}

async fn persistence(t: &TestHost, method: &str, id: &str) -> Result<Value, Error> {
    let mut params = json!({"id": id});
    if method == "readFrom" {
        params["fromSeq"] = json!(0);
    }
    t.host.call("sessionPersistence", method, params).await
}

/// Every read of `id` (`inspect`, `readFrom`, `load`) fails corrupt with
/// `needle` in its message.
async fn every_read_refuses(t: &TestHost, id: &str, needle: &str) {
    for method in ["inspect", "readFrom", "load"] {
        match persistence(t, method, id).await {
            Ok(v) => panic!("{method} of {id} succeeded: {v}"),
            Err(e) => {
                assert_eq!(e.code, "SESSION_CORRUPT", "{method} of {id}: {e}");
                assert!(e.message.contains(needle), "{method} of {id}: {e}");
            }
        }
    }
}

#[tokio::test]
async fn malformed_persisted_messages_are_rejected_and_the_log_is_unchanged() {
    let (t, root) = host().await;
    let wrong_role = surface(
        "user/message",
        0,
        json!({"id": "wrong-role", "role": "assistant", "content": [{"type": "text", "text": "wrong"}], "source": {"kind": "user"}}),
    );
    let path = write_log(&root, "invalid-message-read", &[wrong_role]);
    let before = std::fs::read(&path).unwrap();
    every_read_refuses(
        &t,
        "invalid-message-read",
        "message must have role \"user\"",
    )
    .await;
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "nothing on disk changed"
    );
    let resumed = t
        .host
        .call("sessions", "resume", json!({"id": "invalid-message-read"}))
        .await;
    assert_eq!(
        resumed.map_err(|e| e.code).err().as_deref(),
        Some("SESSION_CORRUPT")
    );

    let malformed_legacy = [
        (
            ev("turn/start", 0, json!({"turn": 1, "trigger": null})),
            "malformed pre-react-loop turn/start",
        ),
        (
            surface(
                "steering/message",
                0,
                json!({"turn": 1, "content": [], "source": {"kind": "user"}, "extra": true}),
            ),
            "malformed pre-react-loop steering/message",
        ),
        (
            surface("steering/message", 0, Value::Null),
            "malformed pre-react-loop steering/message",
        ),
        (
            ev(
                "turn/end",
                0,
                json!({"turn": 1, "reason": {"kind": "completed", "extra": true}}),
            ),
            "malformed pre-react-loop turn/end",
        ),
        (
            ev("turn/end", 0, json!({"turn": 1, "reason": null})),
            "malformed pre-react-loop turn/end",
        ),
        (
            ev(
                "turn/end",
                0,
                json!({"turn": 1, "step": 1, "reason": {"kind": "completed"}}),
            ),
            "malformed pre-react-loop turn/end",
        ),
        (
            ev(
                "turn/end",
                0,
                json!({"turn": 1, "reason": {"kind": "aborted", "extra": true}}),
            ),
            "malformed pre-react-loop turn/end",
        ),
    ];
    for (k, (event, needle)) in malformed_legacy.into_iter().enumerate() {
        let id = format!("invalid-legacy-{k}");
        let path = write_log(&root, &id, &[event]);
        let before = std::fs::read(&path).unwrap();
        every_read_refuses(&t, &id, needle).await;
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "{id}: nothing on disk changed"
        );
    }
    t.shutdown().await;
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}})
}

fn user_trigger(turn: u64) -> Value {
    json!({"turn": turn, "trigger": {"kind": "message", "source": {"kind": "user"}}})
}

fn turn_end(turn: u64, reason: Value) -> Value {
    json!({"turn": turn, "reason": reason})
}

/// The original's `preReactLoopLog()`: seven turns in the durable
/// vocabulary before the react-loop refactor.
fn pre_react_loop_log() -> Vec<Value> {
    let step = |turn| json!({"turn": turn, "step": 1});
    vec![
        ev("turn/start", 0, user_trigger(1)),
        surface("user/message", 1, user("prompt-1", "old prompt")),
        ev("step/start", 2, step(1)),
        surface(
            "steering/message",
            3,
            json!({"turn": 1, "message": user("steering-1", "old steering")}),
        ),
        ev("step/end", 4, step(1)),
        ev("turn/end", 5, turn_end(1, json!({"kind": "completed"}))),
        ev(
            "turn/start",
            6,
            json!({"turn": 2, "trigger": {"kind": "retry"}}),
        ),
        ev("step/start", 7, step(2)),
        ev("step/end", 8, step(2)),
        ev(
            "turn/end",
            9,
            turn_end(
                2,
                json!({"kind": "error", "step": 1, "failure": {"message": "old provider failure", "code": "SERVER"}}),
            ),
        ),
        ev("turn/start", 10, user_trigger(3)),
        ev("turn/end", 11, turn_end(3, json!({"kind": "aborted"}))),
        ev("turn/start", 12, user_trigger(4)),
        ev("turn/end", 13, turn_end(4, json!({"kind": "disposed"}))),
        ev("turn/start", 14, user_trigger(5)),
        ev("step/start", 15, step(5)),
        ev("step/end", 16, step(5)),
        ev(
            "turn/end",
            17,
            turn_end(
                5,
                json!({"kind": "error", "step": 1, "message": "old thrown value"}),
            ),
        ),
        ev("turn/start", 18, user_trigger(6)),
        ev(
            "turn/end",
            19,
            turn_end(
                6,
                json!({"kind": "error", "step": 0, "failure": {"message": "old detailed provider failure", "code": "RATE_LIMIT", "status": 429, "providerRetryAfterMs": 1000, "requestId": "request-1"}}),
            ),
        ),
        ev("turn/start", 20, user_trigger(7)),
        ev(
            "turn/end",
            21,
            turn_end(
                7,
                json!({"kind": "error", "step": 0, "message": "old coded error", "code": "CODED"}),
            ),
        ),
    ]
}

fn of_kind<'a>(events: &'a Value, kind: &str) -> Vec<&'a Value> {
    let all = events.as_array().map(Vec::as_slice).unwrap_or_default();
    all.iter()
        .filter(|e| e["type"] == kind)
        .map(|e| &e["data"])
        .collect()
}

#[tokio::test]
async fn a_pre_react_loop_log_loads_and_resumes_as_current_events() {
    let (t, root) = host().await;
    let id = "pre-react-loop-load";
    let path = write_log(&root, id, &pre_react_loop_log());
    let before = std::fs::read(&path).unwrap();
    let turn_ends = json!([
        turn_end(1, json!({"kind": "completed"})),
        turn_end(
            2,
            json!({"kind": "error", "error": {"message": "old provider failure", "code": "SERVER"}})
        ),
        turn_end(3, json!({"kind": "aborted", "reason": {"kind": "legacy"}})),
        turn_end(
            4,
            json!({"kind": "aborted", "reason": {"kind": "disposed"}})
        ),
        turn_end(
            5,
            json!({"kind": "error", "error": {"message": "old thrown value", "code": "UNKNOWN"}})
        ),
        turn_end(
            6,
            json!({"kind": "error", "error": {"message": "old detailed provider failure", "code": "RATE_LIMIT", "status": 429, "providerRetryAfterMs": 1000, "requestId": "request-1"}})
        ),
        turn_end(
            7,
            json!({"kind": "error", "error": {"message": "old coded error", "code": "CODED"}})
        ),
    ]);
    for method in ["inspect", "readFrom", "load"] {
        let v = persistence(&t, method, id).await.unwrap();
        let events = &v["events"];
        assert!(of_kind(events, "steering/message").is_empty(), "{method}");
        let starts: Vec<Value> = (1..=7).map(|n| json!({"turn": n})).collect();
        assert_eq!(
            of_kind(events, "turn/start"),
            starts.iter().collect::<Vec<_>>(),
            "{method}"
        );
        assert_eq!(json!(of_kind(events, "turn/end")), turn_ends, "{method}");
        assert_eq!(events[3]["type"], "user/message", "{method}");
        assert_eq!(
            events[3]["data"],
            user("steering-1", "old steering"),
            "{method}"
        );
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "reads never rewrite old records"
    );

    let resumed = t.host.call("sessions", "resume", json!({"id": id})).await;
    assert!(resumed.is_ok(), "resume: {resumed:?}");
    let derived = t.call("sessions", "derive", json!({"id": id})).await;
    let contents: Vec<&Value> = derived
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["content"])
        .collect();
    assert_eq!(
        contents,
        [
            &json!([{"type": "text", "text": "old prompt"}]),
            &json!([{"type": "text", "text": "old steering"}])
        ]
    );
    // The resumed session continues after the stored records, in the
    // current format; the old records stay as they were.
    t.call(
        "sessions",
        "append",
        json!({"id": id, "type": "turn/start", "data": {"turn": 8}}),
    )
    .await;
    t.call("sessions", "flush", json!({"id": id})).await;
    let after = std::fs::read(&path).unwrap();
    assert!(
        after.starts_with(&before),
        "the stored records are kept verbatim"
    );
    let appended = String::from_utf8_lossy(&after[before.len()..]).into_owned();
    assert!(
        appended.contains("\"turn/start\""),
        "later appends land after them: {appended}"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn flat_steering_and_pre_identity_messages_get_legacy_ids() {
    let (t, root) = host().await;
    let id = "pre-identity";
    let log = [
        ev("turn/start", 0, json!({"turn": 1})),
        surface(
            "steering/message",
            1,
            json!({"turn": 1, "content": [{"type": "text", "text": "flat steering"}], "source": {"kind": "user"}}),
        ),
        surface(
            "user/message",
            2,
            json!({"content": [{"type": "text", "text": "old prompt"}], "source": {"kind": "user"}}),
        ),
        ev("step/start", 3, json!({"turn": 1, "step": 1})),
        surface(
            "assistant/message",
            4,
            json!({"turn": 1, "step": 1, "content": [{"type": "tool-call", "id": "c1", "name": "read", "arguments": "{}"}], "provenance": {"provider": "p", "model": "m"}}),
        ),
        surface(
            "tool/result",
            5,
            json!({"turn": 1, "step": 1, "callId": "c1", "content": [{"type": "text", "text": "full"}], "isError": false}),
        ),
        {
            let mut e = ev(
                "tool/result",
                6,
                json!({"turn": 1, "step": 1, "callId": "c1", "content": [{"type": "text", "text": "pruned"}], "isError": false}),
            );
            e["sourceEventSeqs"] = json!([5]);
            e["surfaceOp"] = json!({"op": "replace", "start": 5, "end": 5});
            e
        },
        ev("step/end", 7, json!({"turn": 1, "step": 1})),
        ev(
            "turn/end",
            8,
            turn_end(1, json!({"kind": "extension-reason"})),
        ),
    ];
    write_log(&root, id, &log);
    let v = persistence(&t, "inspect", id).await.unwrap();
    let e = &v["events"];
    assert_eq!(e[1]["type"], "user/message");
    assert_eq!(
        e[1]["data"],
        json!({"content": [{"type": "text", "text": "flat steering"}], "source": {"kind": "user"}, "id": format!("legacy-message:{id}:1"), "role": "user"})
    );
    assert_eq!(e[2]["data"]["id"], format!("legacy-message:{id}:2"));
    assert_eq!(
        e[4]["data"]["message"],
        json!({"id": format!("legacy-message:{id}:4"), "role": "assistant", "content": [{"type": "tool-call", "id": "c1", "name": "read", "arguments": "{}"}], "source": {"provider": "p", "model": "m", "kind": "model"}})
    );
    assert_eq!(
        e[5]["data"]["message"],
        json!({"id": format!("legacy-message:{id}:5"), "role": "user", "content": [{"type": "tool-result", "toolCallId": "c1", "content": [{"type": "text", "text": "full"}], "isError": false}], "source": {"kind": "tool", "callId": "c1"}})
    );
    assert_eq!(
        e[6]["data"]["message"]["id"],
        format!("legacy-message:{id}:5"),
        "a content replacement inherits its target's imported id"
    );
    assert_eq!(
        e[8]["data"]["reason"],
        json!({"kind": "extension-reason"}),
        "an unknown reason kind is kept"
    );
    t.shutdown().await;
}

/// A host whose session-jsonl is served from a file of its own, so a test
/// can replace it; returns the host, the sessions root and that file.
async fn reloadable_host() -> (TestHost, PathBuf, PathBuf) {
    let t = TestHost::start().await;
    let root = t.home.path().join("sessions");
    let target = t.plugins.path().join("session-jsonl-copy.so");
    std::fs::copy(dsh_testkit::library("dsh-plugin-session-jsonl"), &target).unwrap();
    t.apply(&format!(
        "[[row]]\nid='session'\nplugin='session'\n[[row]]\nid='jsonl'\nplugin='{}'\nconfig = {{ root = '{}' }}\n",
        target.display(),
        root.display()
    ))
    .await;
    (t, root, target)
}

/// Replaces the backend's file with a fresh copy and reloads it.
async fn reload_backend(t: &TestHost, target: &Path) {
    let before = t.status("jsonl").await.generations;
    dsh_testkit::replace_library("dsh-plugin-session-jsonl", target);
    t.host.reload(target.to_owned()).await;
    assert!(t.status("jsonl").await.generations > before, "not reloaded");
}

async fn append(t: &TestHost, id: &str, kind: &str, data: Value) {
    let mut a = json!({"id": id, "type": kind, "data": data});
    if ["user/message", "assistant/message", "tool/result"].contains(&kind) {
        a["surfaceOp"] = json!("append");
    }
    t.call("sessions", "append", a).await;
}

/// A live session `id` whose turn 1 is open with one user message, flushed
/// to its log.
async fn open_flushed_turn(t: &TestHost, id: &str, text: &str) {
    t.call(
        "sessions",
        "create",
        json!({"id": id, "meta": {"cwd": CWD}}),
    )
    .await;
    append(t, id, "turn/start", json!({"turn": 1})).await;
    append(t, id, "user/message", user("u1", text)).await;
    t.call("sessions", "flush", json!({"id": id})).await;
}

/// The events the backend stores for `id`, as `load` reads them.
async fn stored_events(t: &TestHost, id: &str) -> Value {
    persistence(t, "load", id)
        .await
        .unwrap_or_else(|e| panic!("load {id}: {e}"))["events"]
        .clone()
}

#[tokio::test]
async fn a_reloaded_backend_adopts_live_sessions_and_keeps_persisting_them() {
    let (t, _root, target) = reloadable_host().await;
    let id = "adopted";
    open_flushed_turn(&t, id, "before the reload").await;

    reload_backend(&t, &target).await;

    // The session lives on in `sessions`; its later events reach the log.
    append(&t, id, "user/message", user("u2", "after the reload")).await;
    append(
        &t,
        id,
        "turn/end",
        json!({"turn": 1, "reason": {"kind": "completed"}}),
    )
    .await;
    t.call("sessions", "flush", json!({"id": id})).await;
    let live = t.call("sessions", "events", json!({"id": id})).await;
    let stored = stored_events(&t, id).await;
    assert_eq!(
        stored, live,
        "the log holds every live event, once, in order"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn adoption_never_crash_repairs_an_open_live_turn() {
    let (t, _root, target) = reloadable_host().await;
    let id = "open-turn";
    open_flushed_turn(&t, id, "still running").await;

    reload_backend(&t, &target).await;
    t.call("sessions", "flush", json!({"id": id})).await;

    // The turn is open in the live session: the adopted log is exactly the
    // live log, no closer appended (no turn/end, no TOOL_NOT_STARTED).
    let live = t.call("sessions", "events", json!({"id": id})).await;
    let stored = persistence(&t, "readFrom", id).await.unwrap();
    assert_eq!(stored["events"], live);
    assert!(of_kind(&stored["events"], "turn/end").is_empty());
    // And the live turn goes on to close normally in the same log.
    append(
        &t,
        id,
        "turn/end",
        json!({"turn": 1, "reason": {"kind": "completed"}}),
    )
    .await;
    t.call("sessions", "flush", json!({"id": id})).await;
    let stored = persistence(&t, "readFrom", id).await.unwrap();
    assert_eq!(of_kind(&stored["events"], "turn/end").len(), 1);
    t.shutdown().await;
}

#[tokio::test]
async fn observer_failures_after_commit_are_contained() {
    let t = TestHost::start().await;
    dsh_testkit::fixtures::stage_probe(&t);
    let root = t.home.path().join("sessions");
    // Two observers of `session/event` that fail on every event: one with
    // an error, one with a panic.
    t.apply(&format!(
        "[[row]]\nid='session'\nplugin='session'\n[[row]]\nid='jsonl'\nplugin='session-jsonl'\nconfig = {{ root = '{}' }}\n[[row]]\nid='failing'\nplugin='probe'\nconfig = {{ tag = 'f', listeners = [{{ event = 'session/event', action = 'fail' }}, {{ event = 'session/event', action = 'panic' }}] }}\n",
        root.display()
    ))
    .await;
    let id = "observed";
    t.call(
        "sessions",
        "create",
        json!({"id": id, "meta": {"cwd": CWD}}),
    )
    .await;
    for turn in 1..=2 {
        append(&t, id, "turn/start", json!({"turn": turn})).await;
        append(&t, id, "user/message", user(&format!("u{turn}"), "hi")).await;
        append(
            &t,
            id,
            "turn/end",
            json!({"turn": turn, "reason": {"kind": "completed"}}),
        )
        .await;
    }
    t.call("sessions", "flush", json!({"id": id})).await;
    // The observers heard every event and failed on each…
    let st = t.status("failing").await;
    assert_eq!(st.state, dsh_host::FiberState::Active, "{:?}", st.error);
    let heard: Vec<String> =
        serde_json::from_value(t.call("probe:f", "journal", json!({})).await).unwrap();
    assert_eq!(
        heard
            .iter()
            .filter(|e| e.starts_with("event:session/event:"))
            .count(),
        12,
        "{heard:?}"
    );
    // …and every append committed, in order, and reached the log.
    let live = t.call("sessions", "events", json!({"id": id})).await;
    assert_eq!(live.as_array().map(Vec::len), Some(6));
    assert_eq!(stored_events(&t, id).await, live);
    assert_eq!(
        t.status("failing").await.state,
        dsh_host::FiberState::Active
    );
    t.shutdown().await;
}
