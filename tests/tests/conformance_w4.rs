//! Conformance rows of the fourth wave (reference dsh-core §10): the JSONL
//! writer packs streamed delta runs the way the original's `packChunks`
//! does and reads them back losslessly (§10.8); a wake latched behind an
//! aborted driver and removed before it converges does not replay (§10.3
//! cancel). Real host, real cdylib plugins, the fake model server. Rows:
//! `tests/CONFORMANCE.md`.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::vocab::event;
use dsh_testkit::agent::{
    core_host, core_host_staged, events, idle, new_agent, of_type, send, turn, wait_log,
};
use dsh_testkit::fake_llm::{calls, text, FakeLlm};
use dsh_testkit::fixtures::{hooks_journal, hooks_row, kit_journal, kit_row, toml_value, HOOKS};
use dsh_testkit::headless::lines;
use dsh_testkit::msg;
use dsh_testkit::TestHost;
use serde_json::{json, Value};

const CWD: &str = "/conformance/w4";

/// A streamed answer's text deltas land on disk as one `text-chunks` row
/// (no verbatim delta line), and the log reads back exactly the events the
/// live session holds.
#[tokio::test]
async fn a_streamed_answer_is_stored_packed_and_reloads_losslessly() {
    let (t, fake) = core_host(|rows| rows).await;
    fake.push([text("one two three four five")]);
    let agent = new_agent(&t, CWD).await;
    assert_eq!(
        turn(&t, &agent, "count").await,
        json!({"kind": "completed"})
    );
    t.call("sessions", "flush", json!({"id": agent})).await;

    let located = t
        .call("sessionPersistence", "locate", json!({"id": agent}))
        .await;
    let path = located["path"]
        .as_str()
        .unwrap_or_else(|| panic!("locate gave no path: {located}"));
    let stored = lines(std::path::Path::new(path));
    let rows: Vec<&Value> = stored
        .iter()
        .filter(|l| l["type"] == "text-chunks")
        .collect();
    assert_eq!(rows.len(), 1, "one packed row: {stored:?}");
    assert_eq!(
        rows[0]["data"]["texts"],
        json!(["one ", "two ", "three ", "four ", "five"])
    );
    let verbatim_deltas = stored
        .iter()
        .filter(|l| l["type"] == "assistant/chunk" && l["data"]["chunk"]["type"] == "text-delta")
        .count();
    assert_eq!(
        verbatim_deltas, 0,
        "no delta is stored verbatim: {stored:?}"
    );

    let live = events(&t, &agent).await;
    let reloaded = t
        .call("sessionPersistence", "inspect", json!({"id": agent}))
        .await;
    let as_text =
        |events: &[Value]| -> Vec<String> { events.iter().map(Value::to_string).collect() };
    let reloaded: Vec<Value> = serde_json::from_value(reloaded["events"].clone())
        .unwrap_or_else(|e| panic!("inspect gave no events: {e}"));
    assert_eq!(as_text(&reloaded), as_text(&live), "byte for byte");
    t.shutdown().await;
}

/// A host whose `agent/pre-step` listener, on the first step, cancels the
/// agent keeping its inbox, steers `steer me` into it and, when `remove`,
/// removes that steer again: all three land while the driver awaits the
/// listener, that is after the cancel and before the aborted driver
/// converges, whatever the machine's speed.
async fn steer_in_the_abort_window(remove: bool) -> (TestHost, FakeLlm, String) {
    let mut calls = vec![
        json!({"service": "agents", "method": "cancel",
               "params": {"agent": "$agent", "cause": {"kind": "user"}, "keepInbox": true}}),
        json!({"service": "agents", "method": "steer",
               "params": {"agent": "$agent", "message": msg::user_text("latched-steer", "steer me")}}),
    ];
    if remove {
        calls.push(json!({"service": "agents", "method": "remove",
                          "params": {"agent": "$agent", "messageId": "latched-steer"}}));
    }
    let hooks = hooks_row(
        "w",
        json!({"listeners": [{"event": "agent/pre-step", "once": true, "calls": calls}]}),
    );
    let (t, fake) = core_host_staged(&[HOOKS], |rows| format!("{rows}{hooks}")).await;
    fake.push([text("replayed")]);
    let agent = new_agent(&t, CWD).await;
    send(&t, "followup", &agent, "active").await;
    (t, fake, agent)
}

/// The hooks listener's call results, in order (each `{ok}` or `{err}`).
async fn window_results(t: &TestHost) -> Vec<Value> {
    let journal = hooks_journal(t, "w").await;
    assert_eq!(journal.len(), 1, "the listener acted once: {journal:?}");
    journal[0]["results"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn turn_ends(ev: &[Value]) -> Vec<Value> {
    of_type(ev, event::TURN_END)
        .iter()
        .map(|e| e["data"]["reason"].clone())
        .collect()
}

/// cancel.spec "removing the latched wake before convergence suppresses the
/// replay": the steer latched behind the aborted turn is gone by the time
/// the driver converges, so no turn replays and no request is made.
#[tokio::test]
async fn removing_a_wake_latched_behind_an_aborted_driver_suppresses_its_replay() {
    let (t, fake, agent) = steer_in_the_abort_window(true).await;
    let reason = idle(&t, &agent).await;
    assert_eq!(
        reason,
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    let results = window_results(&t).await;
    assert!(
        results[..2].iter().all(|r| r.get("ok").is_some()),
        "the cancel and the steer were accepted: {results:?}"
    );
    assert_eq!(
        results[2],
        json!({"ok": true}),
        "the steer was removed: {results:?}"
    );

    let ev = events(&t, &agent).await;
    assert_eq!(
        of_type(&ev, event::TURN_START).len(),
        1,
        "no replayed turn: {ev:?}"
    );
    assert_eq!(
        turn_ends(&ev),
        [json!({"kind": "aborted", "reason": {"kind": "user"}})]
    );
    assert!(fake.requests().is_empty(), "cancelled before its request");
    let status = t.call("agents", "status", json!({"agent": agent})).await;
    assert_eq!(
        (status["status"].clone(), status["lastTurn"].clone()),
        (json!("idle"), json!(1))
    );
    let pending = t.call("agents", "pending", json!({"agent": agent})).await;
    assert_eq!(pending, json!({"nextTurn": [], "nextStep": []}));
    t.shutdown().await;
}

/// The control of the test above: the same steer, not removed, is latched
/// in that window and replays as a turn of its own once the aborted driver
/// converges (so the removal is what suppressed the replay there).
#[tokio::test]
async fn a_wake_latched_behind_an_aborted_driver_replays_when_it_converges() {
    let (t, fake, agent) = steer_in_the_abort_window(false).await;
    wait_log(&t, &agent, "the replayed turn's end", |ev| {
        of_type(ev, event::TURN_END).len() == 2
    })
    .await;
    let ev = events(&t, &agent).await;
    assert_eq!(
        turn_ends(&ev),
        [
            json!({"kind": "aborted", "reason": {"kind": "user"}}),
            json!({"kind": "completed"})
        ]
    );
    let steered: Vec<&Value> = of_type(&ev, event::USER_MESSAGE)
        .into_iter()
        .filter(|e| e["data"]["id"] == "latched-steer")
        .collect();
    assert_eq!(steered.len(), 1, "the latched steer ran once: {ev:?}");
    let second_start = &of_type(&ev, event::TURN_START)[1];
    assert_eq!(second_start["data"]["turn"], json!(2));
    assert!(
        steered[0]["seq"].as_u64() > second_start["seq"].as_u64(),
        "claimed by the replayed turn: {ev:?}"
    );
    assert_eq!(fake.requests().len(), 1, "only the replayed turn's request");
    t.shutdown().await;
}

/// contract-regressions.spec "limits injection deferral to the current tool
/// batch": turn 1's batch is aborted from inside its first call (the second
/// never starts, leaving an unanswered historical call); turn 2's
/// `agent/pre-step` listener adds a plugin-sourced message to the step's
/// input, and that message is logged as a `user/message` and sent with
/// the turn's request, not held back behind the old batch.
#[tokio::test]
async fn an_injection_after_an_aborted_tool_batch_enters_the_next_turns_request() {
    let injected = json!({"id": "injected-ctx", "role": "user",
                          "content": [{"type": "text", "text": "new turn context"}],
                          "source": {"kind": "plugin", "plugin": "test"}});
    let listeners = format!(
        "{{ event = 'tools/execute', action = 'cancel', once = true, when = {} }}, \
         {{ event = 'agent/pre-step', action = 'append', when = {{ turn = 2 }}, value = {} }}",
        toml_value(&json!({"exec": {"name": "aborter"}})),
        toml_value(&json!({"messages": [injected]}))
    );
    let tools = "{ name = 'aborter' }, { name = 'second' }";
    let (t, fake) = core_host(|rows| rows + &kit_row("k", &listeners, tools)).await;
    fake.push([
        calls(&[("c1", "aborter", json!({})), ("c2", "second", json!({}))]),
        text("later turn"),
    ]);
    let agent = new_agent(&t, CWD).await;
    let first = turn(&t, &agent, "leave an unmatched historical call").await;
    assert_eq!(
        first,
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    let second_started = kit_journal(&t, "k")
        .await
        .iter()
        .any(|e| e["event"] == "tool:start" && e["callId"] == "c2");
    assert!(!second_started, "the second call never ran");

    let calls_logged: Vec<Value> = of_type(&events(&t, &agent).await, event::TOOL_CALL)
        .iter()
        .map(|e| e["data"]["callId"].clone())
        .collect();
    assert_eq!(
        calls_logged,
        [json!("c1"), json!("c2")],
        "the aborted batch"
    );
    let second = turn(&t, &agent, "start a text-only turn").await;
    assert_eq!(second, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    let plugin_messages: Vec<&Value> = of_type(&ev, event::USER_MESSAGE)
        .into_iter()
        .filter(|e| e["data"]["source"]["kind"] == "plugin")
        .collect();
    assert_eq!(plugin_messages.len(), 1, "{ev:?}");
    assert_eq!(
        plugin_messages[0]["data"]["content"],
        json!([{"type": "text", "text": "new turn context"}])
    );
    let turn_two = &of_type(&ev, event::TURN_START)[1];
    assert!(
        plugin_messages[0]["seq"].as_u64() > turn_two["seq"].as_u64(),
        "logged in turn 2: {ev:?}"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1]["messages"]
            .to_string()
            .contains("new turn context"),
        "{}",
        requests[1]["messages"]
    );
    t.shutdown().await;
}
