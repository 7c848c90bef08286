//! Contract suites: behavior every implementation of a seam must show.

use serde_json::{json, Value};

use crate::TestHost;

fn ev(kind: &str, seq: u64, data: Value) -> Value {
    json!({"type": kind, "seq": seq, "time": 1_700_000_000_000u64 + seq, "data": data})
}

/// The persistence contract (reference dsh-core §10.8), run against the
/// `sessionPersistence` provider of `t`, whose store must live under
/// `store_dir(cwd)` so the suite can write torn logs. `write_log(id, cwd,
/// lines)` must place a raw log where the backend reads it.
pub async fn persistence(t: &TestHost, write_log: impl Fn(&str, &str, &[Value])) {
    let p =
        |m: &'static str, v: Value| async move { t.host.call("sessionPersistence", m, v).await };
    let cwd = "/contract/work";

    // 1. A live session persists at flush and loads back identically.
    let id = t
        .call(
            "sessions",
            "create",
            json!({"id": "c-1", "meta": {"cwd": cwd}}),
        )
        .await["id"]
        .clone();
    for (kind, data, surface) in [
        ("turn/start", json!({"turn": 1}), false),
        ("step/start", json!({"turn": 1, "step": 1}), false),
        (
            "user/message",
            json!({"id": "u1", "role": "user", "content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}}),
            true,
        ),
        ("step/end", json!({"turn": 1, "step": 1}), false),
        (
            "turn/end",
            json!({"turn": 1, "reason": {"kind": "completed"}}),
            false,
        ),
    ] {
        let mut a = json!({"id": id, "type": kind, "data": data});
        if surface {
            a["surfaceOp"] = json!("append");
        }
        t.call("sessions", "append", a).await;
    }
    t.call("sessions", "flush", json!({"id": id})).await;
    let live: Vec<Value> =
        serde_json::from_value(t.call("sessions", "events", json!({"id": id})).await).unwrap();
    let stored = p("load", json!({"id": id})).await.unwrap();
    assert_eq!(stored["header"]["id"], id);
    assert_eq!(stored["header"]["version"], 0);
    assert_eq!(stored["header"]["cwd"], cwd);
    assert_eq!(stored["events"], json!(live), "byte-identical round trip");

    // 2. Listing shows it (with its prompt); a never-appended session is absent.
    t.call(
        "sessions",
        "create",
        json!({"id": "c-empty", "meta": {"cwd": cwd}}),
    )
    .await;
    t.call("sessions", "flush", json!({"id": "c-empty"})).await;
    let listed = p("list", json!({"cwd": cwd})).await.unwrap();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert!(
        ids.contains(&"c-1") && !ids.contains(&"c-empty"),
        "{listed}"
    );

    // 3. An open turn: inspect shows closers in memory only; load commits them.
    let call = json!({"id": "a1", "role": "assistant", "content": [
        {"type": "tool-call", "id": "k1", "name": "read", "arguments": "{}"},
        {"type": "tool-call", "id": "k2", "name": "read", "arguments": "{}"}],
        "source": {"kind": "model", "provider": "p", "model": "m"}});
    let lines = vec![
        ev("turn/start", 0, json!({"turn": 1})),
        ev("step/start", 1, json!({"turn": 1, "step": 1})),
        {
            let mut e = ev(
                "assistant/message",
                2,
                json!({"turn": 1, "step": 1, "message": call}),
            );
            e["surfaceOp"] = json!("append");
            e
        },
        ev(
            "tool/call",
            3,
            json!({"turn": 1, "step": 1, "callId": "k1", "name": "read", "arguments": "{}"}),
        ),
    ];
    write_log("c-open", cwd, &lines);
    let inspected = p("inspect", json!({"id": "c-open"})).await.unwrap();
    let kinds: Vec<&str> = inspected["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "turn/start",
            "step/start",
            "assistant/message",
            "tool/call",
            "tool/result",
            "tool/result",
            "step/end",
            "turn/end"
        ]
    );
    let again = p("readFrom", json!({"id": "c-open", "fromSeq": 0}))
        .await
        .unwrap();
    assert_eq!(
        again["events"].as_array().unwrap().len(),
        4,
        "inspect does not write"
    );
    let loaded = p("load", json!({"id": "c-open"})).await.unwrap();
    let events = loaded["events"].as_array().unwrap();
    assert_eq!(
        events[4]["data"]["error"],
        json!({"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"})
    );
    assert_eq!(events[4]["sourceEventSeqs"], json!([3]));
    assert!(
        events[4]["data"]["message"]["content"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("The tool call was interrupted after it was recorded")
    );
    assert_eq!(events[5]["data"]["error"]["code"], "TOOL_NOT_STARTED");
    assert!(events[5].get("sourceEventSeqs").is_none());
    assert_eq!(
        events[7]["data"],
        json!({"turn": 1, "reason": {"kind": "interrupted"}})
    );
    let durable = p("readFrom", json!({"id": "c-open", "fromSeq": 6}))
        .await
        .unwrap();
    assert_eq!(
        durable["events"].as_array().unwrap().len(),
        2,
        "load committed the repair"
    );

    // 4. readFrom suffix semantics and errors.
    let past = p("readFrom", json!({"id": "c-1", "fromSeq": 99}))
        .await
        .unwrap();
    assert_eq!(past["events"], json!([]));
    let bad = p("readFrom", json!({"id": "c-1", "fromSeq": -1}))
        .await
        .unwrap_err();
    assert!(bad.message.contains("non-negative safe integer"), "{bad}");
    let missing = p("load", json!({"id": "nope"})).await.unwrap_err();
    assert!(missing.message.contains("not found"), "{missing}");
}
