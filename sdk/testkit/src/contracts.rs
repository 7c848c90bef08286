//! Contract suites: behavior every implementation of a seam must show.
//!
//! [`persistence`] is the original's `runPersistenceContract` (reference
//! dsh-core §10.8, checks 1–12, numbered as there), and [`coordinator`] the
//! parts of its `runCoordinatorContract` that a backend fed by the session
//! service's events can show. Both drive the `sessions` service and the
//! `sessionPersistence` provider of a real host.

use serde_json::{json, Value};

use crate::TestHost;
use dsh_sdk::names::{bus, code, service, session_persistence, sessions};
use dsh_sdk::vocab::event;

/// What a contract needs from the backend under test.
pub struct Backend<'a> {
    /// Rows of a host holding the `session` plugin and the backend (the
    /// suite applies them again after unloading the backend).
    pub rows: &'a str,
    /// `write_log(id, cwd, text)` places a raw log, header line included,
    /// where the backend reads session `id` of project `cwd`.
    pub write_log: &'a dyn Fn(&str, &str, &str),
}

const CWD: &str = "/contract/work";

/// The text of the crash-repair result for a call recorded as started.
pub const OUTCOME_UNKNOWN_TEXT: &str = "The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly.";
/// The text of the crash-repair result for a call never recorded.
pub const NOT_STARTED_TEXT: &str =
    "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed.";

fn ev(kind: &str, seq: u64, data: Value) -> Value {
    let mut e = json!({"type": kind, "seq": seq, "time": 1_700_000_000_000u64 + seq, "data": data});
    if [
        event::USER_MESSAGE,
        event::ASSISTANT_MESSAGE,
        event::TOOL_RESULT,
    ]
    .contains(&kind)
    {
        e["surfaceOp"] = json!("append");
    }
    e
}

fn header_line(id: &str, version: i64) -> String {
    format!(
        "{}\n",
        json!({"type": "session", "version": version, "id": id, "createdAt": 1, "cwd": CWD, "delegationDepth": 0})
    )
}

/// A raw log: the header, then one line per event.
fn log_text(id: &str, events: &[Value]) -> String {
    let mut text = header_line(id, 0);
    for e in events {
        text.push_str(&format!("{e}\n"));
    }
    text
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}})
}

fn assistant_calls(ids: &[&str]) -> Value {
    let calls: Vec<Value> = ids
        .iter()
        .map(|k| json!({"type": "tool-call", "id": k, "name": "read", "arguments": "{}"}))
        .collect();
    json!({"id": "a1", "role": "assistant", "content": calls,
           "source": {"kind": "model", "provider": "p", "model": "m"}})
}

/// A balanced first turn (seqs 0..=4).
fn turn_one() -> Vec<Value> {
    vec![
        ev(event::TURN_START, 0, json!({"turn": 1})),
        ev(event::STEP_START, 1, json!({"turn": 1, "step": 1})),
        ev(event::USER_MESSAGE, 2, user("u1", "first")),
        ev(event::STEP_END, 3, json!({"turn": 1, "step": 1})),
        ev(
            event::TURN_END,
            4,
            json!({"turn": 1, "reason": {"kind": "completed"}}),
        ),
    ]
}

fn types(events: &Value) -> Vec<String> {
    events
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| e["type"].as_str().unwrap_or("?").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn seqs(events: &Value) -> Vec<u64> {
    events
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["seq"].as_u64()).collect())
        .unwrap_or_default()
}

struct Suite<'a> {
    t: &'a TestHost,
}

impl Suite<'_> {
    async fn p(&self, method: &str, params: Value) -> Result<Value, dsh_sdk::Error> {
        self.t
            .host
            .call(service::SESSION_PERSISTENCE, method, params)
            .await
    }

    async fn ok(&self, method: &str, params: Value) -> Value {
        self.p(method, params)
            .await
            .unwrap_or_else(|e| panic!("sessionPersistence.{method}: {e}"))
    }

    async fn fails(&self, method: &str, params: Value) -> dsh_sdk::Error {
        match self.p(method, params.clone()).await {
            Ok(v) => panic!("sessionPersistence.{method}({params}) succeeded: {v}"),
            Err(e) => e,
        }
    }

    async fn create(&self, id: &str) {
        self.t
            .call(
                service::SESSIONS,
                sessions::CREATE,
                json!({"id": id, "meta": {"cwd": CWD}}),
            )
            .await;
    }

    async fn append(&self, id: &str, kind: &str, data: Value) -> Value {
        let mut a = json!({"id": id, "type": kind, "data": data});
        if [
            event::USER_MESSAGE,
            event::ASSISTANT_MESSAGE,
            event::TOOL_RESULT,
        ]
        .contains(&kind)
        {
            a["surfaceOp"] = json!("append");
        }
        self.t.call(service::SESSIONS, sessions::APPEND, a).await
    }

    async fn balanced_turn(&self, id: &str, turn: u64) {
        self.append(id, event::TURN_START, json!({"turn": turn}))
            .await;
        self.append(id, event::USER_MESSAGE, user(&format!("u{turn}"), "hi"))
            .await;
        self.append(
            id,
            event::TURN_END,
            json!({"turn": turn, "reason": {"kind": "completed"}}),
        )
        .await;
    }

    async fn flush(&self, id: &str) {
        self.t
            .call(service::SESSIONS, sessions::FLUSH, json!({"id": id}))
            .await;
    }

    async fn live_events(&self, id: &str) -> Value {
        self.t
            .call(service::SESSIONS, sessions::EVENTS, json!({"id": id}))
            .await
    }

    async fn revision(&self, id: &str) -> Value {
        let snaps = self
            .ok(session_persistence::LIST_SNAPSHOTS, json!({"cwd": CWD}))
            .await;
        snaps
            .as_array()
            .and_then(|a| a.iter().find(|s| s["header"]["id"] == id))
            .map(|s| s["revision"].clone())
            .unwrap_or_else(|| panic!("{id} is not in listSnapshots: {snaps}"))
    }

    /// Offers `event` to the backend as the session service publishes it,
    /// and returns how the backend answered.
    async fn offer(&self, id: &str, event: Value) -> Result<(), dsh_sdk::Error> {
        self.t
            .host
            .parallel(
                bus::SESSION_EVENT,
                "",
                json!({"sessionId": id, "event": event}),
            )
            .await
    }

    async fn stored_len(&self, id: &str) -> usize {
        let v = self
            .ok(
                session_persistence::READ_FROM,
                json!({"id": id, "fromSeq": 0}),
            )
            .await;
        v["events"].as_array().map_or(0, Vec::len)
    }
}

/// The persistence contract (`runPersistenceContract`, checks 1–12).
pub async fn persistence(t: &TestHost, backend: &Backend<'_>) {
    let s = Suite { t };

    // 1. create + append → load returns identical meta and byte-identical
    // events.
    s.create("c-1").await;
    s.balanced_turn("c-1", 1).await;
    s.flush("c-1").await;
    let live = s.live_events("c-1").await;
    let stored = s.ok(session_persistence::LOAD, json!({"id": "c-1"})).await;
    assert_eq!(stored["header"]["id"], "c-1");
    assert_eq!(stored["header"]["version"], 0);
    assert_eq!(stored["header"]["cwd"], CWD);
    assert_eq!(stored["events"], live, "the round trip is lossless");
    let path = s
        .ok(session_persistence::LOCATE, json!({"id": "c-1"}))
        .await["path"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_default();
    let text = crate::headless::log_text(std::path::Path::new(&path));
    let lines: Vec<&str> = text.lines().skip(1).collect();
    let want: Vec<String> = live
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| serde_json::to_string(e).unwrap_or_default())
        .collect();
    assert_eq!(
        lines, want,
        "byte-identical lines, in the original's key order"
    );

    // 2. A fractional createdAt is refused without reserving the id.
    let refused = t
        .host
        .parallel(
            bus::SESSION_CREATED,
            "",
            json!({"header": {"version": 0, "id": "c-frac", "createdAt": 1.5, "cwd": CWD}, "stored": 0, "events": []}),
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("a fractional createdAt was accepted"));
    assert_eq!(refused.code, code::INVALID_META, "{refused}");
    assert!(
        refused
            .message
            .contains("session metadata createdAt must be a non-negative safe integer"),
        "{refused}"
    );
    s.create("c-frac").await;
    s.balanced_turn("c-frac", 1).await;
    s.flush("c-frac").await;
    assert_eq!(s.stored_len("c-frac").await, 3, "the id was not reserved");

    // 3. Crash with turn 2 open: inspect closes it in memory only; load
    // commits step/end + turn/end{interrupted} (seqs 8, 9); appending
    // continues at 10.
    let mut open = turn_one();
    open.extend([
        ev(event::TURN_START, 5, json!({"turn": 2})),
        ev(event::STEP_START, 6, json!({"turn": 2, "step": 1})),
        ev(event::USER_MESSAGE, 7, user("u2", "second")),
    ]);
    (backend.write_log)("c-crash", CWD, &log_text("c-crash", &open));
    let before = s.revision("c-crash").await;
    let inspected = s
        .ok(session_persistence::INSPECT, json!({"id": "c-crash"}))
        .await;
    assert_eq!(seqs(&inspected["events"]), (0..10).collect::<Vec<_>>());
    assert_eq!(
        inspected["events"][8],
        json!({"type": event::STEP_END, "seq": 8, "time": 1_700_000_000_007u64, "data": {"turn": 2, "step": 1}})
    );
    assert_eq!(
        inspected["events"][9]["data"],
        json!({"turn": 2, "reason": {"kind": "interrupted"}})
    );
    assert_eq!(
        s.revision("c-crash").await,
        before,
        "inspect changes nothing"
    );
    assert_eq!(s.stored_len("c-crash").await, 8);
    let loaded = s
        .ok(session_persistence::LOAD, json!({"id": "c-crash"}))
        .await;
    assert_eq!(loaded["events"], inspected["events"]);
    assert_ne!(s.revision("c-crash").await, before, "load committed");
    assert_eq!(s.stored_len("c-crash").await, 10);
    t.call(
        service::SESSIONS,
        sessions::RESUME,
        json!({"id": "c-crash"}),
    )
    .await;
    s.append("c-crash", event::TURN_START, json!({"turn": 3}))
        .await;
    s.flush("c-crash").await;
    let tail = s
        .ok(
            session_persistence::READ_FROM,
            json!({"id": "c-crash", "fromSeq": 10}),
        )
        .await;
    assert_eq!(
        types(&tail["events"]),
        [event::SESSION_END_SEED, event::TURN_START]
    );
    assert_eq!(seqs(&tail["events"]), [10, 11]);

    // 4. An assistant tool call never recorded as started: a synthetic
    // TOOL_NOT_STARTED result comes before step/end and turn/end.
    let lines = [
        ev(event::TURN_START, 0, json!({"turn": 1})),
        ev(event::STEP_START, 1, json!({"turn": 1, "step": 1})),
        ev(
            event::ASSISTANT_MESSAGE,
            2,
            json!({"turn": 1, "step": 1, "message": assistant_calls(&["k1"])}),
        ),
    ];
    (backend.write_log)("c-unstarted", CWD, &log_text("c-unstarted", &lines));
    let v = s
        .ok(session_persistence::INSPECT, json!({"id": "c-unstarted"}))
        .await;
    assert_eq!(
        types(&v["events"])[3..],
        [event::TOOL_RESULT, event::STEP_END, event::TURN_END]
    );
    let result = &v["events"][3];
    assert_eq!(
        result["data"],
        json!({"turn": 1, "step": 1, "message": {
            "id": "interrupted-tool-result-k1-3", "role": "user",
            "content": [{"type": "tool-result", "toolCallId": "k1", "content": [{"type": "text", "text": NOT_STARTED_TEXT}], "isError": true}],
            "source": {"kind": "tool", "callId": "k1"}},
            "error": {"name": "ToolNotStartedError", "code": code::TOOL_NOT_STARTED}})
    );
    assert_eq!(result["surfaceOp"], "append");
    assert!(result.get("sourceEventSeqs").is_none(), "{result}");

    // 5. A recorded tool/call without a result: TOOL_OUTCOME_UNKNOWN with
    // the risk assessment; the resumed derivation pairs it with its call.
    let lines = [
        ev(event::TURN_START, 0, json!({"turn": 1})),
        ev(event::STEP_START, 1, json!({"turn": 1, "step": 1})),
        ev(event::USER_MESSAGE, 2, user("u1", "read it")),
        ev(
            event::ASSISTANT_MESSAGE,
            3,
            json!({"turn": 1, "step": 1, "message": assistant_calls(&["k1"])}),
        ),
        ev(
            event::TOOL_CALL,
            4,
            json!({"turn": 1, "step": 1, "callId": "k1", "name": "read", "arguments": "{}"}),
        ),
    ];
    (backend.write_log)("c-unknown", CWD, &log_text("c-unknown", &lines));
    let v = s
        .ok(session_persistence::LOAD, json!({"id": "c-unknown"}))
        .await;
    let result = &v["events"][5];
    assert_eq!(
        result["data"]["error"],
        json!({"name": "ToolOutcomeUnknownError", "code": code::TOOL_OUTCOME_UNKNOWN})
    );
    assert_eq!(
        result["data"]["message"]["content"][0]["content"],
        json!([{"type": "text", "text": OUTCOME_UNKNOWN_TEXT}])
    );
    assert_eq!(result["sourceEventSeqs"], json!([4]));
    assert_eq!(types(&v["events"])[6..], [event::STEP_END, event::TURN_END]);
    t.call(
        service::SESSIONS,
        sessions::RESUME,
        json!({"id": "c-unknown"}),
    )
    .await;
    let derived = t
        .call(
            service::SESSIONS,
            sessions::DERIVE,
            json!({"id": "c-unknown"}),
        )
        .await;
    let roles: Vec<&str> = derived
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"], "{derived}");
    assert_eq!(derived[1]["content"][0]["id"], "k1");
    assert_eq!(derived[2]["content"][0]["toolCallId"], "k1");

    // 6. A created but never appended session is in neither listing.
    s.create("c-empty").await;
    s.flush("c-empty").await;
    let listed: Vec<Value> = s
        .ok(session_persistence::LIST, json!({"cwd": CWD}))
        .await
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(listed.iter().any(|h| h["id"] == "c-1"), "{listed:?}");
    assert!(!listed.iter().any(|h| h["id"] == "c-empty"), "{listed:?}");
    let snaps: Vec<Value> = s
        .ok(session_persistence::LIST_SNAPSHOTS, json!({"cwd": CWD}))
        .await
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        snaps.iter().any(|h| h["header"]["id"] == "c-1"),
        "{snaps:?}"
    );
    assert!(
        !snaps.iter().any(|h| h["header"]["id"] == "c-empty"),
        "{snaps:?}"
    );

    // 7. (abort signals) does not apply: a call carries no AbortSignal.

    // 8. readFrom: a physical suffix, never repaired.
    let whole = s
        .ok(
            session_persistence::READ_FROM,
            json!({"id": "c-1", "fromSeq": 0}),
        )
        .await;
    assert_eq!(whole["events"], live);
    assert_eq!(whole["header"]["id"], "c-1");
    let suffix = s
        .ok(
            session_persistence::READ_FROM,
            json!({"id": "c-1", "fromSeq": 1}),
        )
        .await;
    assert_eq!(seqs(&suffix["events"]), [1, 2]);
    for at in [3, 99] {
        let v = s
            .ok(
                session_persistence::READ_FROM,
                json!({"id": "c-1", "fromSeq": at}),
            )
            .await;
        assert_eq!(v["events"], json!([]), "fromSeq {at}");
    }
    (backend.write_log)("c-raw", CWD, &log_text("c-raw", &open));
    let raw = s
        .ok(
            session_persistence::READ_FROM,
            json!({"id": "c-raw", "fromSeq": 5}),
        )
        .await;
    assert_eq!(
        seqs(&raw["events"]),
        [5, 6, 7],
        "no closers on an open turn"
    );
    let absent = s
        .fails(
            session_persistence::READ_FROM,
            json!({"id": "c-absent", "fromSeq": 0}),
        )
        .await;
    assert_eq!(absent.code, code::SESSION_NOT_FOUND, "{absent}");
    assert_eq!(absent.message, "stored session \"c-absent\" not found");
    for bad in [json!(-1), json!(1.5)] {
        let e = s
            .fails(
                session_persistence::READ_FROM,
                json!({"id": "c-1", "fromSeq": bad}),
            )
            .await;
        assert_eq!(e.code, "INVALID_PAYLOAD", "{e}");
        assert_eq!(e.message, "fromSeq must be a non-negative safe integer");
    }

    // 9. The revision is stable while the log is unchanged and changes
    // after an append.
    let r1 = s.revision("c-1").await;
    s.ok(session_persistence::INSPECT, json!({"id": "c-1"}))
        .await;
    s.ok(
        session_persistence::READ_FROM,
        json!({"id": "c-1", "fromSeq": 0}),
    )
    .await;
    assert_eq!(s.revision("c-1").await, r1);
    s.balanced_turn("c-1", 2).await;
    s.flush("c-1").await;
    assert_ne!(s.revision("c-1").await, r1);

    // 10. An event restating a stored seq is refused, nothing written.
    let n = s.stored_len("c-1").await as u64;
    let e = s
        .offer("c-1", ev(event::TURN_START, n - 1, json!({"turn": 9})))
        .await
        .err()
        .unwrap_or_else(|| panic!("a restated seq was accepted"));
    assert_eq!(e.code, code::SEQ_RESTATED, "{e}");
    s.flush("c-1").await;
    assert_eq!(s.stored_len("c-1").await as u64, n);

    // 11. A gap in the middle of a batch is refused; the batch's events
    // before it are kept.
    let pending = s.append("c-1", event::TURN_START, json!({"turn": 3})).await;
    assert_eq!(pending["seq"], n);
    let e = s
        .offer(
            "c-1",
            ev(event::STEP_START, n + 2, json!({"turn": 3, "step": 1})),
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("a seq gap was accepted"));
    assert_eq!(e.code, code::SEQ_GAP, "{e}");
    s.flush("c-1").await;
    let stored = s
        .ok(
            session_persistence::READ_FROM,
            json!({"id": "c-1", "fromSeq": 0}),
        )
        .await;
    assert_eq!(seqs(&stored["events"]), (0..=n).collect::<Vec<_>>());

    // 12. Data that is not lossless JSON is refused (of the original's
    // cases only -0 can cross a JSON boundary; BigInt, undefined,
    // functions, symbols, Maps, cycles and non-finite numbers have no JSON
    // text at all).
    let e = s
        .offer(
            "c-1",
            ev(
                event::STEP_START,
                n + 1,
                json!({"turn": 3, "step": 1, "x": -0.0}),
            ),
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("-0 was accepted"));
    assert_eq!(e.code, code::NOT_LOSSLESS, "{e}");
    assert!(
        e.message.contains("must be losslessly JSON-serializable"),
        "{e}"
    );
    s.flush("c-1").await;
    assert_eq!(s.stored_len("c-1").await as u64, n + 1);
    // The live session goes on where it was.
    let next = s
        .append(
            "c-1",
            event::TURN_END,
            json!({"turn": 3, "reason": {"kind": "completed"}}),
        )
        .await;
    assert_eq!(next["seq"], n + 1);
    s.flush("c-1").await;
    assert_eq!(s.stored_len("c-1").await as u64, n + 2);
}

/// The coordinator contract (`runCoordinatorContract`), the parts that
/// apply to a backend fed by `session/created`, `session/event`,
/// `session/flush` and `session/disposed`.
pub async fn coordinator(t: &TestHost, backend: &Backend<'_>) {
    let s = Suite { t };

    // A live session's load waits for durability, and refuses while its
    // turn is open (never repairing it under its writer).
    s.create("k-live").await;
    s.append("k-live", event::TURN_START, json!({"turn": 1}))
        .await;
    let e = s
        .fails(session_persistence::LOAD, json!({"id": "k-live"}))
        .await;
    assert_eq!(e.code, code::OPEN_TURN, "{e}");
    assert_eq!(
        e.message,
        "cannot load session \"k-live\" while its live turn is open; use the live Session or wait for the turn to close"
    );
    assert_eq!(s.stored_len("k-live").await, 1, "no closers were written");
    s.append(
        "k-live",
        event::TURN_END,
        json!({"turn": 1, "reason": {"kind": "completed"}}),
    )
    .await;
    let v = s
        .ok(session_persistence::LOAD, json!({"id": "k-live"}))
        .await;
    assert_eq!(types(&v["events"]), [event::TURN_START, event::TURN_END]);

    // An unmaterialized live session is not found; so is a missing one.
    s.create("k-lazy").await;
    for method in [session_persistence::LOAD, session_persistence::INSPECT] {
        for id in ["k-lazy", "k-missing"] {
            let e = s.fails(method, json!({"id": id})).await;
            assert_eq!(e.code, code::SESSION_NOT_FOUND, "{method} {id}: {e}");
        }
    }
    // An abandoned lazy id can be used again.
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": "k-lazy"}))
        .await;
    s.create("k-lazy").await;
    s.balanced_turn("k-lazy", 1).await;
    s.flush("k-lazy").await;
    assert_eq!(s.stored_len("k-lazy").await, 3);

    // Header fields round-trip: delegationDepth, origin, preset; a fork's
    // parentSession and seedLength, with its seed persisted once and the
    // end-seed marker at seq = seed length.
    t.call(
        service::SESSIONS,
        sessions::CREATE,
        json!({"id": "k-sub", "meta": {"cwd": CWD},
               "header": {"version": 0, "id": "k-sub", "createdAt": 0, "delegationDepth": 2, "origin": "subagent", "agentPreset": "explore"}}),
    )
    .await;
    s.balanced_turn("k-sub", 1).await;
    s.flush("k-sub").await;
    let h = &s
        .ok(session_persistence::LOAD, json!({"id": "k-sub"}))
        .await["header"];
    assert_eq!(
        (&h["delegationDepth"], &h["origin"], &h["agentPreset"]),
        (&json!(2), &json!("subagent"), &json!("explore"))
    );
    t.call(
        service::SESSIONS,
        sessions::FORK,
        json!({"id": "k-sub", "childId": "k-fork"}),
    )
    .await;
    s.flush("k-fork").await;
    let fork = s
        .ok(session_persistence::LOAD, json!({"id": "k-fork"}))
        .await;
    assert_eq!(fork["header"]["parentSession"], "k-sub");
    assert_eq!(fork["header"]["seedLength"], 3);
    // The original's fork carries cwd, parentSession and seedLength only;
    // the JSONL header line stores the depth it leaves unset as 0.
    assert_eq!(fork["header"]["delegationDepth"], 0, "{}", fork["header"]);
    assert_eq!(
        types(&fork["events"]),
        [
            event::TURN_START,
            event::USER_MESSAGE,
            event::TURN_END,
            event::SESSION_END_SEED
        ]
    );
    assert_eq!(fork["events"][3]["seq"], 3);

    // Resume does not append the seed again: end-seed at 6, the new turn
    // at 7–8.
    let mut six = vec![ev(
        event::INBOX_SPLICED,
        0,
        json!({"target": "next-turn", "start": 0, "inserted": []}),
    )];
    six.extend(
        turn_one()
            .into_iter()
            .take(5)
            .enumerate()
            .map(|(i, mut e)| {
                e["seq"] = json!(i + 1);
                e
            }),
    );
    (backend.write_log)("k-resume", CWD, &log_text("k-resume", &six));
    t.call(
        service::SESSIONS,
        sessions::RESUME,
        json!({"id": "k-resume"}),
    )
    .await;
    s.append("k-resume", event::TURN_START, json!({"turn": 2}))
        .await;
    s.append(
        "k-resume",
        event::TURN_END,
        json!({"turn": 2, "reason": {"kind": "completed"}}),
    )
    .await;
    s.flush("k-resume").await;
    let v = s
        .ok(
            session_persistence::READ_FROM,
            json!({"id": "k-resume", "fromSeq": 0}),
        )
        .await;
    assert_eq!(seqs(&v["events"]), (0..9).collect::<Vec<_>>());
    assert_eq!(
        types(&v["events"])[5..],
        [
            event::TURN_END,
            event::SESSION_END_SEED,
            event::TURN_START,
            event::TURN_END
        ]
    );

    // Closing a session drains what it buffered before it is retired.
    s.create("k-close").await;
    s.balanced_turn("k-close", 1).await;
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": "k-close"}))
        .await;
    assert_eq!(s.stored_len("k-close").await, 3);

    // Unloading the backend drains every live session.
    s.create("k-drain").await;
    s.balanced_turn("k-drain", 1).await;
    t.apply("[[row]]\nid='session'\nplugin='session'\n").await;
    t.apply(backend.rows).await;
    assert_eq!(s.stored_len("k-drain").await, 3);

    // A new live session whose id already has a log is refused at flush
    // and the log is left alone.
    (backend.write_log)("k-taken", CWD, &log_text("k-taken", &turn_one()));
    let path = s
        .ok(session_persistence::LOCATE, json!({"id": "k-taken"}))
        .await["path"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_default();
    let before = std::fs::read(&path).unwrap_or_default();
    s.create("k-taken").await;
    s.append("k-taken", event::TURN_START, json!({"turn": 1}))
        .await;
    let e = t
        .host
        .call(service::SESSIONS, sessions::FLUSH, json!({"id": "k-taken"}))
        .await
        .err()
        .unwrap_or_else(|| panic!("a colliding session was flushed"));
    assert_eq!(e.code, code::SESSION_ALREADY_EXISTS, "{e}");
    assert!(
        e.message
            .contains("session \"k-taken\" already has a persisted log on disk"),
        "{e}"
    );
    assert_eq!(std::fs::read(&path).unwrap_or_default(), before);
    // A duplicate live id is refused by the store itself.
    let dup = t
        .host
        .call(
            service::SESSIONS,
            sessions::CREATE,
            json!({"id": "k-taken", "meta": {"cwd": CWD}}),
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("a duplicate live id was created"));
    assert_eq!(dup.code, code::SESSION_ALREADY_EXISTS, "{dup}");

    // Format versions other than 0 are refused, each with its reason.
    for (id, version, reason) in [
        ("k-newer", 1, "the log uses format v1, but this harness reads only v0: the log was written by a newer harness — upgrade the harness to open it"),
        ("k-older", -1, "the log uses format v-1, older than the supported v0, and this build ships no upgrade path for it"),
    ] {
        (backend.write_log)(id, CWD, &header_line(id, version));
        let e = s.fails(session_persistence::LOAD, json!({"id": id})).await;
        assert_eq!(e.code, code::SESSION_CORRUPT, "{e}");
        assert!(
            e.message
                .starts_with(&format!("stored session \"{id}\" failed validation: {reason}")),
            "{e}"
        );
    }

    // A torn tail is cut off and the open turn closed durably (seqs 0..9);
    // the resumed session goes on at 10.
    let mut torn = log_text("k-torn", &{
        let mut e = turn_one();
        e.extend([
            ev(event::TURN_START, 5, json!({"turn": 2})),
            ev(event::STEP_START, 6, json!({"turn": 2, "step": 1})),
            ev(event::USER_MESSAGE, 7, user("u2", "second")),
        ]);
        e
    });
    torn.push_str("{\"type\":\"assistant/chunk\",\"seq\":8,\"ti");
    (backend.write_log)("k-torn", CWD, &torn);
    let v = s
        .ok(session_persistence::LOAD, json!({"id": "k-torn"}))
        .await;
    assert_eq!(seqs(&v["events"]), (0..10).collect::<Vec<_>>());
    assert_eq!(types(&v["events"])[8..], [event::STEP_END, event::TURN_END]);
    let path = s
        .ok(session_persistence::LOCATE, json!({"id": "k-torn"}))
        .await["path"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_default();
    let text = crate::headless::log_text(std::path::Path::new(&path));
    assert!(!text.contains("\"ti\n") && text.ends_with('\n'), "{text}");
    assert_eq!(text.lines().count(), 11, "header + 10 events: {text}");
    t.call(service::SESSIONS, sessions::RESUME, json!({"id": "k-torn"}))
        .await;
    s.append("k-torn", event::TURN_START, json!({"turn": 3}))
        .await;
    s.flush("k-torn").await;
    let tail = s
        .ok(
            session_persistence::READ_FROM,
            json!({"id": "k-torn", "fromSeq": 10}),
        )
        .await;
    assert_eq!(seqs(&tail["events"]), [10, 11]);
}
