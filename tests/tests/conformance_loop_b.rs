//! Conformance, §10.3 (second half): the agent loop's contract regressions,
//! edges, request recovery and reconstruction, resume, tool-call scheduling,
//! tool order, the agent handle and its properties — real plugin builds in
//! the real host, against the fake model server. The rows of
//! `tests/CONFORMANCE.md` (§10.3, second half) name these tests.
//!
//! Orders and overlaps are read from the session log and from the loop-kit
//! fixture's journal (every listener invocation, every tool start and end, in
//! order); nothing here sleeps to synchronize or asserts a duration.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::names::{agent_loop, agents, bus, code, llm, service, sessions};
use dsh_sdk::vocab::event;
use dsh_testkit::agent::{
    core_host, create, events, idle, kinds, new_agent, of_type, send, turn, wait_log,
};
use dsh_testkit::fake_llm::{calls, raw_calls, text, Answer, FakeLlm};
use dsh_testkit::fixtures::{kit_journal, kit_row, wait_kit_journal};
use dsh_testkit::TestHost;
use serde_json::{json, Value};

/// The core rows plus `extra` rows, every row active.
async fn setup(extra: &str) -> (TestHost, FakeLlm) {
    core_host(|rows| rows + extra).await
}

/// The core rows' persona names `{{model}}`, which has no value for an agent
/// created without one (a strict render error, as in the original): the
/// model-less tests use a persona without it, as the original's do.
const PERSONA_WITHOUT_MODEL: &str =
    "[[patch]]\nid = 'system-prompt'\nconfig = { persona = 'You work in {{cwd}}.' }\n";

/// The agent-loop row with `config` (replaces the kit's default row).
fn with_loop_config(rows_extra: &str, config: &str) -> String {
    format!("{rows_extra}[[patch]]\nid = 'agent-loop'\nconfig = {{ {config} }}\n")
}

/// The journal's entries for `event`, as `(event, callId)` strings.
fn tool_trace(j: &[Value]) -> Vec<String> {
    j.iter()
        .filter(|e| e["event"].as_str().is_some_and(|x| x.starts_with("tool:")))
        .map(|e| {
            format!(
                "{} {}",
                e["event"].as_str().unwrap(),
                e["callId"].as_str().unwrap()
            )
        })
        .collect()
}

/// The position of the first journal entry `entry` (`"tool:start c1"`).
fn at(trace: &[String], entry: &str) -> usize {
    trace
        .iter()
        .position(|e| e == entry)
        .unwrap_or_else(|| panic!("{entry} missing from {trace:?}"))
}

const KIT_TOOLS: &str = "{ name = 'p', parallel = true }, { name = 'x' }";

// ---- tool-calls.spec.ts -------------------------------------------------

/// Parallel-safe siblings overlap (c0 waits for c1 to start); an exclusive
/// call is a barrier; the call after it is classified afresh: three groups.
#[tokio::test]
async fn parallel_siblings_start_together_and_an_exclusive_call_is_a_barrier() {
    let (t, fake) = setup(&kit_row("k", "", KIT_TOOLS)).await;
    fake.push([
        calls(&[
            ("c0", "p", json!({"awaitStart": "c1"})),
            ("c1", "p", json!({})),
            ("c2", "x", json!({})),
            ("c3", "p", json!({})),
        ]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    let tr = tool_trace(&kit_journal(&t, "k").await);
    // c0 met c1: both in flight together.
    assert!(at(&tr, "tool:start c1") < at(&tr, "tool:end c0"), "{tr:?}");
    // The exclusive c2 starts only after the whole first group ended, and c3
    // only after c2 ended.
    assert!(at(&tr, "tool:end c0") < at(&tr, "tool:start c2"), "{tr:?}");
    assert!(at(&tr, "tool:end c1") < at(&tr, "tool:start c2"), "{tr:?}");
    assert!(at(&tr, "tool:end c2") < at(&tr, "tool:start c3"), "{tr:?}");
    // In the log: the group's calls, then its results, per group.
    let ev = events(&t, &agent).await;
    let seq: Vec<String> = ev
        .iter()
        .filter(|e| e["type"] == event::TOOL_CALL || e["type"] == event::TOOL_RESULT)
        .map(|e| {
            let id = e["data"]["callId"]
                .as_str()
                .or(e["data"]["message"]["source"]["callId"].as_str())
                .unwrap();
            format!("{} {id}", e["type"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        seq,
        [
            "tool/call c0",
            "tool/call c1",
            "tool/result c0",
            "tool/result c1",
            "tool/call c2",
            "tool/result c2",
            "tool/call c3",
            "tool/result c3"
        ]
    );
    t.shutdown().await;
}

/// c0 finishes after c1 (it waits for c1's end), yet results are committed
/// in model order, cite their own tool/call, and the derived history pairs
/// them in model order.
#[tokio::test]
async fn results_are_committed_and_derived_in_model_order() {
    let (t, fake) = setup(&kit_row("k", "", KIT_TOOLS)).await;
    fake.push([
        calls(&[
            ("c0", "p", json!({"awaitEnd": "c1", "text": "zero"})),
            ("c1", "p", json!({"text": "one"})),
        ]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    let tr = tool_trace(&kit_journal(&t, "k").await);
    assert!(at(&tr, "tool:end c1") < at(&tr, "tool:end c0"), "{tr:?}");
    let ev = events(&t, &agent).await;
    let results = of_type(&ev, event::TOOL_RESULT);
    let ids: Vec<&str> = results
        .iter()
        .map(|e| e["data"]["message"]["source"]["callId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["c0", "c1"]);
    for r in &results {
        let call = ev
            .iter()
            .find(|e| {
                e["type"] == event::TOOL_CALL
                    && e["data"]["callId"] == r["data"]["message"]["source"]["callId"]
            })
            .unwrap();
        assert_eq!(r["sourceEventSeqs"], json!([call["seq"]]));
        assert_eq!(r["surfaceOp"], "append");
    }
    // The second request carries the results in model order.
    let body = &fake.requests()[1];
    let tool_msgs: Vec<(&str, &str)> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap(),
                m["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(tool_msgs, [("c0", "zero"), ("c1", "one")]);
    t.shutdown().await;
}

/// `tools/pre-execute` runs for each call in model order, and
/// `tools/post-execute` too, even when a later sibling finishes first.
#[tokio::test]
async fn pre_and_post_execute_observe_model_order() {
    let listeners = "{ event = 'tools/pre-execute', action = 'record' }, \
                     { event = 'tools/post-execute', action = 'record' }";
    let (t, fake) = setup(&kit_row("k", listeners, KIT_TOOLS)).await;
    fake.push([
        calls(&[
            ("c0", "p", json!({"awaitEnd": "c1"})),
            ("c1", "p", json!({})),
        ]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    let j = kit_journal(&t, "k").await;
    let order = |event: &str| -> Vec<String> {
        j.iter()
            .filter(|e| e["event"] == event)
            .map(|e| e["payload"]["exec"]["callId"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(order(bus::TOOLS_PRE_EXECUTE), ["c0", "c1"]);
    assert_eq!(order(bus::TOOLS_POST_EXECUTE), ["c0", "c1"]);
    t.shutdown().await;
}

/// With `maxParallelToolCalls = 2`, never more than two calls in flight.
#[tokio::test]
async fn at_most_cap_calls_are_in_flight() {
    let extra = with_loop_config(&kit_row("k", "", KIT_TOOLS), "maxParallelToolCalls = 2");
    let (t, fake) = setup(&extra).await;
    fake.push([
        calls(&[
            // Each of the first two waits for the other's start, so both
            // are in flight at once however the threads are scheduled.
            ("c0", "p", json!({"awaitStart": "c1"})),
            ("c1", "p", json!({"awaitStart": "c0"})),
            ("c2", "p", json!({})),
            ("c3", "p", json!({})),
        ]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    let tr = tool_trace(&kit_journal(&t, "k").await);
    let (mut now, mut most) = (0i32, 0i32);
    for e in &tr {
        now += if e.starts_with("tool:start") { 1 } else { -1 };
        most = most.max(now);
    }
    assert_eq!(most, 2, "{tr:?}");
    assert_eq!(tr.len(), 8);
    t.shutdown().await;
}

/// `maxParallelToolCalls = 1` runs parallel-safe calls strictly one by one.
#[tokio::test]
async fn a_cap_of_one_is_serial() {
    let extra = with_loop_config(&kit_row("k", "", KIT_TOOLS), "maxParallelToolCalls = 1");
    let (t, fake) = setup(&extra).await;
    fake.push([
        calls(&[
            ("c0", "p", json!({})),
            ("c1", "p", json!({})),
            ("c2", "p", json!({})),
        ]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    assert_eq!(
        tool_trace(&kit_journal(&t, "k").await),
        [
            "tool:start c0",
            "tool:end c0",
            "tool:start c1",
            "tool:end c1",
            "tool:start c2",
            "tool:end c2"
        ]
    );
    t.shutdown().await;
}

/// The default cap is 10: ten parallel calls overlap (c0..c8 wait for c9), the
/// eleventh waits for a free slot.
#[tokio::test]
async fn the_default_cap_is_ten() {
    let (t, fake) = setup(&kit_row("k", "", KIT_TOOLS)).await;
    let ids: Vec<String> = (0..11).map(|i| format!("c{i}")).collect();
    let list: Vec<(&str, &str, Value)> = ids
        .iter()
        .map(|id| {
            // c0..c9 each wait until ten calls have started: all ten are in
            // flight at once, and none ends before the tenth starts.
            let n: usize = id[1..].parse().unwrap();
            let args = if n < 10 {
                json!({"awaitStarted": 10})
            } else {
                json!({})
            };
            (id.as_str(), "p", args)
        })
        .collect();
    fake.push([calls(&list), text("done")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    let tr = tool_trace(&kit_journal(&t, "k").await);
    let (mut now, mut most) = (0i32, 0i32);
    for e in &tr {
        now += if e.starts_with("tool:start") { 1 } else { -1 };
        most = most.max(now);
    }
    assert_eq!(most, 10, "{tr:?}");
    t.shutdown().await;
}

/// `maxParallelToolCalls` must be an integer ≥ 1: 0 is refused when the
/// row is applied, not silently turned into 1.
#[tokio::test]
async fn a_zero_cap_is_rejected() {
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    let mut rows = dsh_testkit::core_rows(&fake.base_url, &t.home.path().join("sessions"));
    rows.push_str("[[patch]]\nid = 'agent-loop'\nconfig = { maxParallelToolCalls = 0 }\n");
    t.apply(&rows).await;
    assert_eq!(
        format!("{:?}", t.status("agent-loop").await.state),
        "Failed"
    );
    assert_eq!(
        t.reports_with("maxParallelToolCalls must be an integer >= 1")
            .len(),
        1,
        "{:?}",
        t.host.reports()
    );
    t.shutdown().await;
}

/// Denied calls become error results in model order, and no tool runs.
#[tokio::test]
async fn denials_are_ordered_results_without_dispatch() {
    let listeners = "{ event = 'tools/pre-execute', action = 'return', value = { kind = 'deny', reason = 'not now' } }";
    let (t, fake) = setup(&kit_row("k", listeners, KIT_TOOLS)).await;
    fake.push([
        calls(&[
            ("c0", "p", json!({})),
            ("c1", "x", json!({})),
            ("c2", "p", json!({})),
        ]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    assert!(tool_trace(&kit_journal(&t, "k").await).is_empty());
    let ev = events(&t, &agent).await;
    let results: Vec<(&str, &Value)> = of_type(&ev, event::TOOL_RESULT)
        .into_iter()
        .map(|e| {
            let block = &e["data"]["message"]["content"][0];
            (block["toolCallId"].as_str().unwrap(), block)
        })
        .collect();
    assert_eq!(results.len(), 3);
    for ((id, block), want) in results.iter().zip(["c0", "c1", "c2"]) {
        assert_eq!(*id, want);
        assert_eq!(block["isError"], true);
        assert_eq!(
            block["content"],
            json!([{"type": "text", "text": "Error: not now"}])
        );
    }
    // A denial carries no `error` on the event.
    assert!(of_type(&ev, event::TOOL_RESULT)
        .iter()
        .all(|e| e["data"].get("error").is_none()));
    t.shutdown().await;
}

/// A cancel while the first (exclusive) call runs: the next group never
/// starts; it is still answered with tool/call + ABORTED_BEFORE_DISPATCH.
#[tokio::test]
async fn abort_before_a_group_starts_none_of_it() {
    let listeners = "{ event = 'tools/pre-execute', action = 'cancel', once = true }";
    let (t, fake) = setup(&kit_row("k", listeners, KIT_TOOLS)).await;
    fake.push([calls(&[
        ("c0", "x", json!({})),
        ("c1", "p", json!({})),
        ("c2", "p", json!({})),
    ])]);
    let agent = new_agent(&t, "/tmp").await;
    let reason = turn(&t, &agent, "go").await;
    assert_eq!(
        reason,
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    let tr = tool_trace(&kit_journal(&t, "k").await);
    assert!(
        !tr.iter().any(|e| e.ends_with("c1") || e.ends_with("c2")),
        "{tr:?}"
    );
    let ev = events(&t, &agent).await;
    for id in ["c1", "c2"] {
        assert!(ev
            .iter()
            .any(|e| e["type"] == event::TOOL_CALL && e["data"]["callId"] == id));
        let r = ev
            .iter()
            .find(|e| {
                e["type"] == event::TOOL_RESULT && e["data"]["message"]["source"]["callId"] == id
            })
            .unwrap();
        assert_eq!(
            r["data"]["error"],
            json!({"name": "AbortError", "code": code::ABORTED_BEFORE_DISPATCH})
        );
        assert_eq!(
            r["data"]["message"]["content"][0]["content"],
            json!([{"type": "text", "text": "Error: tool call aborted before dispatch"}])
        );
    }
    assert_eq!(fake.requests().len(), 1);
    t.shutdown().await;
}

/// Additional contexts of a step's results enter the next step, after all
/// of its tool/results, in model order.
#[tokio::test]
async fn additional_contexts_follow_all_results_in_model_order() {
    let (t, fake) = setup(&kit_row("k", "", KIT_TOOLS)).await;
    fake.push([
        calls(&[
            (
                "c0",
                "p",
                json!({"awaitEnd": "c1", "contexts": ["from c0"]}),
            ),
            ("c1", "p", json!({"contexts": ["from c1 a", "from c1 b"]})),
        ]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    let k = kinds(&ev);
    let step2 = ev
        .iter()
        .position(|e| e["type"] == event::STEP_START && e["data"]["step"] == 2)
        .unwrap();
    let last_result = ev
        .iter()
        .rposition(|e| e["type"] == event::TOOL_RESULT)
        .unwrap();
    assert!(last_result < step2, "{k:?}");
    let texts: Vec<&str> = ev[step2..]
        .iter()
        .filter(|e| e["type"] == event::USER_MESSAGE)
        .map(|e| e["data"]["content"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["from c0", "from c1 a", "from c1 b"]);
    // And the model saw them after the results.
    let body = &fake.requests()[1];
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        &roles[roles.len() - 5..],
        ["tool", "tool", "user", "user", "user"]
    );
    t.shutdown().await;
}

// ---- coverage-edges.spec.ts ---------------------------------------------

/// Arguments that are not JSON reach the pipeline as the raw string; empty
/// arguments become `{}`; tool/call logs the raw text either way.
#[tokio::test]
async fn tool_arguments_non_json_pass_through_and_empty_become_an_object() {
    let listeners = "{ event = 'tools/pre-execute', action = 'record' }";
    let (t, fake) = setup(&kit_row("k", listeners, KIT_TOOLS)).await;
    fake.push([
        raw_calls(&[("c0", "x", "not json {"), ("c1", "x", "")]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    let j = kit_journal(&t, "k").await;
    let args: Vec<&Value> = j
        .iter()
        .filter(|e| e["event"] == bus::TOOLS_PRE_EXECUTE)
        .map(|e| &e["payload"]["exec"]["arguments"])
        .collect();
    assert_eq!(args, [&json!("not json {"), &json!({})]);
    let ev = events(&t, &agent).await;
    let logged: Vec<&Value> = of_type(&ev, event::TOOL_CALL)
        .iter()
        .map(|e| &e["data"]["arguments"])
        .collect();
    assert_eq!(logged, [&json!("not json {"), &json!("")]);
    t.shutdown().await;
}

/// A tool's coded failure is forwarded to tool/result.error `{name, code}`
/// and the model sees `Error: <message>`; the turn goes on.
#[tokio::test]
async fn a_coded_tool_failure_is_forwarded_to_the_result_error() {
    let (t, fake) = setup(&kit_row("k", "", KIT_TOOLS)).await;
    fake.push([
        calls(&[("c0", "x", json!({"fail": "DISK_FULL"}))]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    let r = of_type(&ev, event::TOOL_RESULT)[0];
    assert_eq!(r["data"]["error"]["code"], "DISK_FULL");
    assert!(r["data"]["error"]["name"]
        .as_str()
        .is_some_and(|n| !n.is_empty()));
    assert_eq!(
        r["data"]["error"].as_object().unwrap().len(),
        2,
        "only name and code"
    );
    let block = &r["data"]["message"]["content"][0];
    assert_eq!(block["isError"], true);
    assert_eq!(
        block["content"],
        json!([{"type": "text", "text": "Error: tool failed with DISK_FULL"}])
    );
    t.shutdown().await;
}

/// A tool's presentation meta is recorded as tool/result.meta.
#[tokio::test]
async fn presentation_meta_is_recorded_on_the_result() {
    let (t, fake) = setup(&kit_row("k", "", KIT_TOOLS)).await;
    fake.push([
        calls(&[("c0", "x", json!({"meta": {"lines": 3, "path": "a.txt"}}))]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    assert_eq!(
        of_type(&ev, event::TOOL_RESULT)[0]["data"]["meta"],
        json!({"lines": 3, "path": "a.txt"})
    );
    t.shutdown().await;
}

/// A plugin error with a code, thrown where the turn runs (agent/pre-step),
/// is rendered on turn/end as `{message, code}`.
#[tokio::test]
async fn a_coded_plugin_error_is_rendered_on_turn_end() {
    let listeners = "{ event = 'agent/pre-step', action = 'fail' }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    let agent = new_agent(&t, "/tmp").await;
    let reason = turn(&t, &agent, "go").await;
    assert_eq!(
        reason,
        json!({"kind": "error", "error": {"message": "agent/pre-step listener failed on purpose", "code": "LOOPKIT_FAILED"}})
    );
    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, event::TURN_END)[0]["data"]["reason"], reason);
    assert!(fake.requests().is_empty());
    t.shutdown().await;
}

/// Disposing the agent while its model streams ends the turn
/// `aborted{disposed}`.
#[tokio::test]
async fn dispose_during_streaming_ends_the_turn_disposed() {
    let (t, fake) = setup("").await;
    fake.push([Answer::Stall(vec![
        json!({"choices": [{"delta": {"content": "partial "}}]}).to_string(),
    ])]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "go").await;
    wait_log(&t, &agent, "a chunk", |ev| {
        ev.iter().any(|e| e["type"] == event::ASSISTANT_CHUNK)
    })
    .await;
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": agent}))
        .await;
    let ev = events(&t, &agent).await;
    let end = of_type(&ev, event::TURN_END);
    assert_eq!(end.len(), 1);
    assert_eq!(
        end[0]["data"]["reason"],
        json!({"kind": "aborted", "reason": {"kind": "disposed"}})
    );
    t.shutdown().await;
}

/// A `retry` answer from agent/request-error after the turn was cancelled
/// is ignored: no second request.
#[tokio::test]
async fn a_retry_action_after_abort_is_ignored() {
    // The kit cancels (prepended, so before llm-retry answers `retry`).
    let listeners = "{ event = 'agent/request-error', action = 'cancel', prepend = true }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([
        Answer::Status(500, vec![], "{\"error\":{\"message\":\"boom\"}}".into()),
        text("never"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(
        turn(&t, &agent, "go").await,
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    assert_eq!(fake.requests().len(), 1);
    t.shutdown().await;
}

/// No agent/request-error listener acting: the failure stays terminal and
/// the step closes exactly once.
#[tokio::test]
async fn recovery_with_no_action_stays_terminal_with_one_step_end() {
    let (t, fake) = setup("").await;
    // 400 is not retryable: llm-retry passes it on.
    fake.push([Answer::Status(
        400,
        vec![],
        "{\"error\":{\"message\":\"bad request\"}}".into(),
    )]);
    let agent = new_agent(&t, "/tmp").await;
    let reason = turn(&t, &agent, "go").await;
    assert_eq!(reason["kind"], "error");
    let ev = events(&t, &agent).await;
    assert_eq!(fake.requests().len(), 1);
    assert_eq!(of_type(&ev, event::STEP_START).len(), 1);
    assert_eq!(of_type(&ev, event::STEP_END).len(), 1);
    assert!(of_type(&ev, event::ASSISTANT_MESSAGE).is_empty());
    assert_eq!(of_type(&ev, event::TURN_END)[0]["data"]["reason"], reason);
    t.shutdown().await;
}

/// After an entered step, a pre-step that rejects the continuation ends
/// the turn `blocked`.
#[tokio::test]
async fn a_rejected_continuation_ends_the_turn_blocked() {
    let listeners = "{ event = 'agent/pre-step', action = 'return', value = { kind = 'reject' }, when = { step = 2 } }";
    let (t, fake) = setup(&kit_row("k", listeners, KIT_TOOLS)).await;
    fake.push([calls(&[("c0", "x", json!({}))]), text("never")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "blocked"}));
    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, event::STEP_START).len(), 1);
    assert_eq!(fake.requests().len(), 1);
    t.shutdown().await;
}

// ---- contract-regressions.spec.ts ---------------------------------------

/// A second adapter for a route already served is refused.
#[tokio::test]
async fn a_duplicate_adapter_is_rejected() {
    let (t, _fake) = setup("[[row]]\nid = 'probe'\nplugin = 'dsh-fixture-probe'\nconfig = { tag = 'p', provides = ['other-adapter'] }\n").await;
    let err = t
        .host
        .call(
            "probe:p",
            "call",
            json!({"service": service::LLM, "method": llm::REGISTER_ADAPTER, "params": {"providers": ["fake"], "service": "other-adapter"}}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, "DUPLICATE_ADAPTER", "{err}");
    t.shutdown().await;
}

/// An agent with no model fails its turn with the original's message (not
/// NO_ADAPTER) and never reaches the model.
#[tokio::test]
async fn a_model_less_agent_fails_with_the_clear_message() {
    let (t, fake) = setup(PERSONA_WITHOUT_MODEL).await;
    let agent = create(&t, json!({"meta": {"cwd": "/tmp"}})).await;
    let reason = turn(&t, &agent, "go").await;
    assert_eq!(reason["kind"], "error");
    assert_eq!(reason["error"]["code"], "UNKNOWN");
    assert_eq!(
        reason["error"]["message"],
        format!("agent \"{agent}\" has no provider/model: set AgentOptions.provider and AgentOptions.model or supply both via the agent/request waterfall")
    );
    assert!(fake.requests().is_empty());
    t.shutdown().await;
}

/// The agent/request waterfall can supply the route for a model-less agent.
#[tokio::test]
async fn agent_request_can_supply_the_model() {
    let listeners = "{ event = 'agent/request', action = 'merge', value = { config = { provider = 'fake', model = 'm-from-hook' } } }";
    let (t, fake) = setup(&format!(
        "{}{PERSONA_WITHOUT_MODEL}",
        kit_row("k", listeners, "")
    ))
    .await;
    fake.push([text("hi")]);
    let agent = create(&t, json!({"meta": {"cwd": "/tmp"}})).await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    assert_eq!(fake.requests()[0]["model"], "m-from-hook");
    let ev = events(&t, &agent).await;
    // The route's default effort and output cap are filled in (the
    // DeepSeek adapter's).
    assert_eq!(
        of_type(&ev, event::REQUEST_HEADER)[0]["data"]["header"]["config"],
        json!({"provider": "fake", "model": "m-from-hook", "reasoningEffort": "high", "maxTokens": 256_000})
    );
    t.shutdown().await;
}

/// Inbox splices carry the exact messages `{content, id, role, source}`,
/// with targets next-turn (followup) and next-step (steer/inject).
#[tokio::test]
async fn inbox_splices_carry_exact_messages_and_targets() {
    let (t, _fake) = setup("").await;
    let agent = new_agent(&t, "/tmp").await;
    let m = json!({"id": "m-inject", "role": "user", "content": [{"type": "text", "text": "ctx"}], "source": {"kind": "plugin", "plugin": ""}});
    t.call(
        service::AGENTS,
        agents::INJECT,
        json!({"agent": agent, "message": m}),
    )
    .await;
    let ev = events(&t, &agent).await;
    let s = of_type(&ev, event::INBOX_SPLICED);
    assert_eq!(s.len(), 1);
    assert_eq!(
        s[0]["data"],
        json!({"target": "next-step", "start": 0, "inserted": [m]})
    );
    let keys: Vec<&String> = s[0]["data"]["inserted"][0]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(sorted, ["content", "id", "role", "source"]);
    t.shutdown().await;
}

/// A fork continues the parent's turn numbers.
#[tokio::test]
async fn a_forked_agent_continues_turn_numbers() {
    let (t, fake) = setup("").await;
    fake.push([text("one"), text("two"), text("three")]);
    let agent = new_agent(&t, "/tmp").await;
    turn(&t, &agent, "a").await;
    turn(&t, &agent, "b").await;
    let child = t
        .call(service::SESSIONS, sessions::FORK, json!({"id": agent}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let resumed = t
        .call(
            service::AGENT_LOOP,
            agent_loop::RESUME,
            json!({"sessionId": child, "agentOptions": {"provider": "fake", "model": "m1"}}),
        )
        .await;
    assert_eq!(resumed["agent"], json!(child));
    assert_eq!(turn(&t, &child, "c").await, json!({"kind": "completed"}));
    let ev = events(&t, &child).await;
    let turns: Vec<&Value> = of_type(&ev, event::TURN_START)
        .iter()
        .map(|e| &e["data"]["turn"])
        .collect();
    assert_eq!(turns, [&json!(1), &json!(2), &json!(3)]);
    t.shutdown().await;
}

/// An in-band `finish{error}` ends the turn `error` with the failure's code.
#[tokio::test]
async fn an_in_band_finish_error_is_a_turn_error() {
    let (t, fake) = setup("").await;
    // A 400 becomes one terminal finish{error} chunk (not retryable).
    fake.push([Answer::Status(
        400,
        vec![],
        "{\"error\":{\"message\":\"bad\"}}".into(),
    )]);
    let agent = new_agent(&t, "/tmp").await;
    let reason = turn(&t, &agent, "go").await;
    assert_eq!(reason["kind"], "error");
    let ev = events(&t, &agent).await;
    let chunks = of_type(&ev, event::ASSISTANT_CHUNK);
    let last = &chunks.last().unwrap()["data"]["chunk"];
    assert_eq!(last["type"], "finish");
    assert_eq!(last["reason"]["kind"], "error");
    assert_eq!(reason["error"]["code"], last["reason"]["failure"]["code"]);
    assert_eq!(
        reason["error"]["message"],
        last["reason"]["failure"]["message"]
    );
    t.shutdown().await;
}

/// `step/start` is in the log when its session/event listener fires; a
/// listener that throws on every boundary changes nothing.
#[tokio::test]
async fn boundary_observers_see_the_log_and_their_throws_change_nothing() {
    let listeners = "{ event = 'session/event', action = 'fail' }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([text("fine")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    let j = wait_kit_journal(&t, "k", |j| j.len() >= ev.len()).await;
    let step_start = j
        .iter()
        .find(|e| e["payload"]["event"]["type"] == event::STEP_START)
        .expect("the observer heard step/start");
    // What it heard is the logged event.
    let logged = of_type(&ev, event::STEP_START)[0];
    assert_eq!(&step_start["payload"]["event"], logged);
    assert_eq!(j.len(), ev.len(), "every event reached the observer");
    t.shutdown().await;
}

/// tool/result is keyed by the model's callId even when post-execute
/// replaces the content.
#[tokio::test]
async fn tool_result_keeps_the_model_call_id_through_post_execute_replacement() {
    let listeners = "{ event = 'tools/post-execute', action = 'return', value = { kind = 'accept', content = [{ type = 'text', text = 'replaced' }] } }";
    let (t, fake) = setup(&kit_row("k", listeners, KIT_TOOLS)).await;
    fake.push([calls(&[("call-model-7", "x", json!({}))]), text("done")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    let r = of_type(&ev, event::TOOL_RESULT)[0];
    assert_eq!(
        r["data"]["message"]["source"],
        json!({"kind": "tool", "callId": "call-model-7"})
    );
    assert_eq!(
        r["data"]["message"]["content"],
        json!([{"type": "tool-result", "toolCallId": "call-model-7", "content": [{"type": "text", "text": "replaced"}], "isError": false}])
    );
    t.shutdown().await;
}

/// A cancel during pre-step closes the turn without a step and never calls
/// the model.
#[tokio::test]
async fn cancel_during_pre_step_closes_a_no_step_turn() {
    let listeners = "{ event = 'agent/pre-step', action = 'cancel' }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(
        turn(&t, &agent, "go").await,
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    let ev = events(&t, &agent).await;
    assert!(of_type(&ev, event::STEP_START).is_empty());
    assert!(fake.requests().is_empty());
    t.shutdown().await;
}

/// A throwing turn-stopping listener ends the turn `error`; the loop serves
/// the next prompt.
#[tokio::test]
async fn a_throwing_turn_stopping_listener_errors_the_turn_not_the_loop() {
    let listeners = "{ event = 'agent/turn-stopping', action = 'fail', once = true }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([text("one"), text("two")]);
    let agent = new_agent(&t, "/tmp").await;
    let r = turn(&t, &agent, "a").await;
    assert_eq!(r["error"]["code"], "LOOPKIT_FAILED");
    assert_eq!(turn(&t, &agent, "b").await, json!({"kind": "completed"}));
    t.shutdown().await;
}

/// A turn-stopping listener that steers continues the same turn.
#[tokio::test]
async fn a_turn_stopping_steer_continues_the_same_turn() {
    let listeners = "{ event = 'agent/turn-stopping', action = 'steer', value = 'one more thing', once = true }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([text("one"), text("two")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "a").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, event::TURN_START).len(), 1);
    let steps: Vec<&Value> = of_type(&ev, event::STEP_START)
        .iter()
        .map(|e| &e["data"]["step"])
        .collect();
    assert_eq!(steps, [&json!(1), &json!(2)]);
    assert_eq!(fake.requests().len(), 2);
    t.shutdown().await;
}

// ---- request-error.spec.ts ------------------------------------------------

/// Each failed attempt is offered to recovery inside the same turn and step
/// (with the prepared retry policy); statuses go running → idle once.
#[tokio::test]
async fn each_failed_attempt_retries_in_the_same_turn_and_step() {
    let listeners = "{ event = 'agent/request-error', action = 'record', prepend = true }, { event = 'agent/status', action = 'record' }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    let boom = || Answer::Status(500, vec![], "{\"error\":{\"message\":\"boom\"}}".into());
    fake.push([boom(), boom(), text("ok")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    let j = kit_journal(&t, "k").await;
    let offers: Vec<&Value> = j
        .iter()
        .filter(|e| e["event"] == bus::AGENT_REQUEST_ERROR)
        .map(|e| &e["payload"])
        .collect();
    assert_eq!(offers.len(), 2);
    for o in &offers {
        assert_eq!((o["turn"].as_u64(), o["step"].as_u64()), (Some(1), Some(1)));
        assert_eq!(o["provider"], "fake");
        assert_eq!(o["failure"]["code"], "SERVER");
        assert_eq!(o["retryPolicy"]["mode"], "normal");
    }
    let statuses: Vec<&Value> = j
        .iter()
        .filter(|e| e["event"] == bus::AGENT_STATUS)
        .map(|e| &e["payload"]["status"])
        .collect();
    assert_eq!(statuses, [&json!("running"), &json!("idle")]);
    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, event::TURN_START).len(), 1);
    assert_eq!(of_type(&ev, event::STEP_START).len(), 1);
    // The final message cites only the successful attempt's chunks.
    let msg = of_type(&ev, event::ASSISTANT_MESSAGE)[0];
    let cited: Vec<u64> = serde_json::from_value(msg["sourceEventSeqs"].clone()).unwrap();
    let first_retry = of_type(&ev, event::LLM_RETRY).last().unwrap()["seq"]
        .as_u64()
        .unwrap();
    assert!(cited.iter().all(|s| *s > first_retry), "{cited:?}");
    t.shutdown().await;
}

/// A failing llm/stream middleware is not offered to recovery: the turn
/// errors with its code, no assistant/message.
#[tokio::test]
async fn middleware_failures_are_not_offered_to_recovery() {
    let listeners = "{ event = 'llm/stream', action = 'fail' }, { event = 'agent/request-error', action = 'record', prepend = true }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    let agent = new_agent(&t, "/tmp").await;
    let reason = turn(&t, &agent, "go").await;
    assert_eq!(reason["error"]["code"], "LOOPKIT_FAILED");
    let j = kit_journal(&t, "k").await;
    assert!(!j.iter().any(|e| e["event"] == bus::AGENT_REQUEST_ERROR));
    assert!(fake.requests().is_empty());
    assert!(of_type(&events(&t, &agent).await, event::ASSISTANT_MESSAGE).is_empty());
    t.shutdown().await;
}

/// A throwing recovery listener: no retry, the turn errors with its code.
#[tokio::test]
async fn a_throwing_recovery_listener_means_no_retry() {
    let listeners = "{ event = 'agent/request-error', action = 'fail', prepend = true }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([Answer::Status(500, vec![], "{}".into()), text("never")]);
    let agent = new_agent(&t, "/tmp").await;
    let reason = turn(&t, &agent, "go").await;
    assert_eq!(reason["error"]["code"], "LOOPKIT_FAILED");
    assert_eq!(fake.requests().len(), 1);
    t.shutdown().await;
}

// ---- agent.spec.ts / properties.spec.ts -----------------------------------

/// An idle inject stages durably (one splice, no turn); the next wake claims
/// it before the prompt, with exact inserted/claimed emits.
#[tokio::test]
async fn an_idle_inject_stages_durably_and_rides_the_next_claim() {
    let listeners = "{ event = 'agent/inbox/inserted', action = 'record' }, { event = 'agent/inbox/claimed', action = 'record' }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([text("ok")]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::INJECT, &agent, "context first").await;
    assert_eq!(kinds(&events(&t, &agent).await), [event::INBOX_SPLICED]);
    assert_eq!(
        t.call(service::AGENTS, agents::STATUS, json!({"agent": agent}))
            .await["status"],
        "idle"
    );
    assert_eq!(
        turn(&t, &agent, "the prompt").await,
        json!({"kind": "completed"})
    );
    let ev = events(&t, &agent).await;
    let users: Vec<&str> = of_type(&ev, event::USER_MESSAGE)
        .iter()
        .map(|e| e["data"]["content"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["context first", "the prompt"]);
    let j = wait_kit_journal(&t, "k", |j| j.len() >= 4).await;
    let trace: Vec<(String, String)> = j
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap().to_owned(),
                e["payload"]["message"]["content"][0]["text"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect();
    let pairs: Vec<(&str, &str)> = trace
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    assert_eq!(
        pairs,
        [
            (bus::AGENT_INBOX_INSERTED, "context first"),
            (bus::AGENT_INBOX_INSERTED, "the prompt"),
            (bus::AGENT_INBOX_CLAIMED, "context first"),
            (bus::AGENT_INBOX_CLAIMED, "the prompt"),
        ]
    );
    assert!(j[2..].iter().all(|e| e["payload"]["turn"] == 1));
    t.shutdown().await;
}

/// A message that is not a message is refused and nothing is logged.
#[tokio::test]
async fn an_invalid_inject_throws_and_logs_nothing() {
    let (t, _fake) = setup("").await;
    let agent = new_agent(&t, "/tmp").await;
    let err = t
        .host
        .call(
            service::AGENTS,
            agents::INJECT,
            json!({"agent": agent, "message": {"content": 5}}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, "INVALID_PAYLOAD", "{err}");
    assert!(events(&t, &agent).await.is_empty());
    t.shutdown().await;
}

/// An idle steer wakes a turn of its own.
#[tokio::test]
async fn an_idle_steer_is_a_woken_turn() {
    let (t, fake) = setup("").await;
    fake.push([text("ok")]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::STEER, &agent, "steered").await;
    assert_eq!(idle(&t, &agent).await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, event::TURN_START).len(), 1);
    assert_eq!(
        of_type(&ev, event::USER_MESSAGE)[0]["data"]["content"][0]["text"],
        "steered"
    );
    t.shutdown().await;
}

/// One running and one idle transition per turn; a throwing status listener
/// changes nothing.
#[tokio::test]
async fn one_running_and_one_idle_transition_per_turn_and_status_throws_are_contained() {
    let listeners = "{ event = 'agent/status', action = 'fail' }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([text("one"), text("two")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "a").await, json!({"kind": "completed"}));
    assert_eq!(turn(&t, &agent, "b").await, json!({"kind": "completed"}));
    let j = wait_kit_journal(&t, "k", |j| j.len() >= 4).await;
    let statuses: Vec<&Value> = j.iter().map(|e| &e["payload"]["status"]).collect();
    assert_eq!(
        statuses,
        [
            &json!("running"),
            &json!("idle"),
            &json!("running"),
            &json!("idle")
        ]
    );
    t.shutdown().await;
}

/// whenIdle on an idle agent answers at once with the last end; during a
/// turn it answers when the turn closed.
#[tokio::test]
async fn when_idle_answers_idle_at_once_and_running_at_the_end() {
    let (t, fake) = setup("").await;
    fake.push([text("one")]);
    let agent = new_agent(&t, "/tmp").await;
    let first = t
        .call(service::AGENTS, agents::WHEN_IDLE, json!({"agent": agent}))
        .await;
    assert_eq!(first, json!({"reason": null, "lastTurn": 0}));
    send(&t, agents::FOLLOWUP, &agent, "a").await;
    let done = t
        .call(service::AGENTS, agents::WHEN_IDLE, json!({"agent": agent}))
        .await;
    assert_eq!(
        done,
        json!({"reason": {"kind": "completed"}, "lastTurn": 1})
    );
    let ev = events(&t, &agent).await;
    assert_eq!(ev.last().unwrap()["type"], event::TURN_END);
    t.shutdown().await;
}

/// A burst of followups sent at once: one turn per message, numbered 1..N
/// in order, each turn holding exactly its own prompt.
#[tokio::test]
async fn a_burst_of_followups_gets_one_turn_per_message() {
    let (t, fake) = setup("").await;
    let n = 6;
    fake.push((0..n).map(|i| text(&format!("answer {i}"))));
    let agent = new_agent(&t, "/tmp").await;
    let sends = (0..n).map(|i| {
        t.host.call(
            service::AGENTS,
            agents::FOLLOWUP,
            json!({"agent": agent, "message": {"text": format!("p{i}")}}),
        )
    });
    for r in futures_join(sends).await {
        r.unwrap();
    }
    wait_log(&t, &agent, "six turns", |ev| {
        of_type(ev, event::TURN_END).len() == n
    })
    .await;
    idle(&t, &agent).await;
    let ev = events(&t, &agent).await;
    let turns: Vec<u64> = of_type(&ev, event::TURN_START)
        .iter()
        .map(|e| e["data"]["turn"].as_u64().unwrap())
        .collect();
    assert_eq!(turns, (1..=n as u64).collect::<Vec<_>>());
    let prompts: Vec<&str> = of_type(&ev, event::USER_MESSAGE)
        .iter()
        .map(|e| e["data"]["content"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(prompts, (0..n).map(|i| format!("p{i}")).collect::<Vec<_>>());
    // Each user/message sits inside its own turn.
    let mut open = 0;
    let mut per_turn = vec![0; n];
    for e in &ev {
        match e["type"].as_str().unwrap() {
            event::TURN_START => open = e["data"]["turn"].as_u64().unwrap() as usize,
            event::USER_MESSAGE => per_turn[open - 1] += 1,
            _ => {}
        }
    }
    assert_eq!(per_turn, vec![1; n]);
    t.shutdown().await;
}

/// Awaits every future, polling them together on this task.
async fn futures_join<F: std::future::Future>(futs: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futs {
        set.push(Box::pin(f));
    }
    let mut out: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.unwrap()).collect()
}

// ---- tool-order.spec.ts / request-reconstruction.spec.ts ------------------

/// The header's tools are in canonical (lexicographic) order whatever the
/// order of registration.
#[tokio::test]
async fn request_header_tools_are_in_canonical_order() {
    // `zeta` registers before `alpha`, both after the core's tools.
    let tools = "{ name = 'zeta' }, { name = 'alpha' }";
    let (t, fake) = setup(&kit_row("k", "", tools)).await;
    fake.push([text("ok")]);
    let agent = new_agent(&t, "/tmp").await;
    turn(&t, &agent, "go").await;
    let ev = events(&t, &agent).await;
    let names: Vec<&str> = of_type(&ev, event::REQUEST_HEADER)[0]["data"]["header"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert!(names.contains(&"alpha") && names.contains(&"zeta"));
    let reqs = fake.requests();
    let sent: Vec<&str> = reqs[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(sent, names);
    t.shutdown().await;
}

/// Requests within and across turns extend the previous one (append-only
/// history), the header is logged once while stable, and a model switch
/// logs a full `change` header.
#[tokio::test]
async fn requests_append_extend_and_a_switch_logs_a_change_header() {
    let listeners = "{ event = 'agent/request', action = 'merge', value = { config = { model = 'm2' } }, when = { turn = 3 } }";
    let (t, fake) = setup(&kit_row("k", listeners, KIT_TOOLS)).await;
    fake.push([
        calls(&[("c0", "x", json!({}))]),
        text("one"),
        text("two"),
        text("three"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    turn(&t, &agent, "a").await;
    turn(&t, &agent, "b").await;
    turn(&t, &agent, "c").await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 4);
    for w in reqs.windows(2) {
        let (a, b) = (
            w[0]["messages"].as_array().unwrap(),
            w[1]["messages"].as_array().unwrap(),
        );
        assert!(b.len() > a.len());
        assert_eq!(&b[..a.len()], &a[..], "a request extends the one before");
    }
    let ev = events(&t, &agent).await;
    let headers = of_type(&ev, event::REQUEST_HEADER);
    let reasons: Vec<&Value> = headers.iter().map(|h| &h["data"]["reason"]).collect();
    assert_eq!(reasons, [&json!("initial"), &json!("change")]);
    assert_eq!(
        headers[1]["data"]["header"]["config"],
        json!({"provider": "fake", "model": "m2", "reasoningEffort": "high", "maxTokens": 256_000})
    );
    assert!(
        headers[1]["data"]["header"]["system"].is_string(),
        "a change header is a full snapshot"
    );
    assert_eq!(reqs[3]["model"], "m2");
    // request/context follows the route: once for m1, once for m2.
    let ctxs: Vec<&Value> = of_type(&ev, event::REQUEST_CONTEXT)
        .iter()
        .map(|e| &e["data"]["model"])
        .collect();
    assert_eq!(ctxs, [&json!("m1"), &json!("m2")]);
    t.shutdown().await;
}

/// A fresh loop over a stored log anchors with a `resume` header, and the
/// resumed request is the old history plus the new prompt.
#[tokio::test]
async fn a_resumed_session_anchors_with_a_resume_header() {
    let (t, fake) = setup("").await;
    fake.push([text("one"), text("two")]);
    let agent = new_agent(&t, "/tmp").await;
    turn(&t, &agent, "a").await;
    t.call(service::SESSIONS, sessions::FLUSH, json!({"id": agent}))
        .await;
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": agent}))
        .await;
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": agent}))
        .await;
    t.call(
        service::AGENT_LOOP,
        agent_loop::RESUME,
        json!({"sessionId": agent, "agentOptions": {"provider": "fake", "model": "m1"}}),
    )
    .await;
    assert_eq!(turn(&t, &agent, "b").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    let reasons: Vec<&Value> = of_type(&ev, event::REQUEST_HEADER)
        .iter()
        .map(|h| &h["data"]["reason"])
        .collect();
    assert_eq!(reasons, [&json!("initial"), &json!("resume")]);
    let turns: Vec<&Value> = of_type(&ev, event::TURN_START)
        .iter()
        .map(|e| &e["data"]["turn"])
        .collect();
    assert_eq!(turns, [&json!(1), &json!(2)]);
    let seqs: Vec<u64> = ev.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (0..ev.len() as u64).collect::<Vec<_>>(),
        "no duplicate seqs"
    );
    let reqs = fake.requests();
    let (a, b) = (
        reqs[0]["messages"].as_array().unwrap(),
        reqs[1]["messages"].as_array().unwrap(),
    );
    assert_eq!(&b[..a.len()], &a[..]);
    t.shutdown().await;
}

/// An inject staged while idle survives persist + resume without a
/// synthetic turn, and rides the first turn after the resume.
#[tokio::test]
async fn a_pending_idle_inject_survives_persist_and_resume() {
    let (t, fake) = setup("").await;
    fake.push([text("ok")]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::INJECT, &agent, "remember this").await;
    t.call(service::SESSIONS, sessions::FLUSH, json!({"id": agent}))
        .await;
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": agent}))
        .await;
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": agent}))
        .await;
    t.call(
        service::AGENT_LOOP,
        agent_loop::RESUME,
        json!({"sessionId": agent, "agentOptions": {"provider": "fake", "model": "m1"}}),
    )
    .await;
    assert!(
        of_type(&events(&t, &agent).await, event::TURN_START).is_empty(),
        "no synthetic turn"
    );
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    let users: Vec<&str> = of_type(&ev, event::USER_MESSAGE)
        .iter()
        .map(|e| e["data"]["content"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["remember this", "go"]);
    t.shutdown().await;
}

/// session-start fires with `startup` on create and `resume` on resume.
#[tokio::test]
async fn session_start_says_startup_or_resume() {
    let listeners = "{ event = 'agent/session-start', action = 'record' }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([text("ok")]);
    let agent = new_agent(&t, "/tmp").await;
    turn(&t, &agent, "a").await;
    t.call(service::SESSIONS, sessions::FLUSH, json!({"id": agent}))
        .await;
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": agent}))
        .await;
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": agent}))
        .await;
    t.call(
        service::AGENT_LOOP,
        agent_loop::RESUME,
        json!({"sessionId": agent, "agentOptions": {"provider": "fake", "model": "m1"}}),
    )
    .await;
    let j = wait_kit_journal(&t, "k", |j| j.len() >= 2).await;
    let sources: Vec<&Value> = j.iter().map(|e| &e["payload"]["source"]).collect();
    assert_eq!(sources, [&json!("startup"), &json!("resume")]);
    t.shutdown().await;
}

/// createAgent with a caller-chosen sessionId uses it; a second create with
/// the same id is refused and leaves no orphan agent.
#[tokio::test]
async fn create_uses_the_caller_session_id_and_rejects_a_duplicate() {
    let (t, _fake) = setup("").await;
    let params = json!({"sessionId": "mine-1", "agentOptions": {"provider": "fake", "model": "m1"}, "meta": {"cwd": "/tmp"}});
    assert_eq!(create(&t, params.clone()).await, "mine-1");
    let err = t
        .host
        .call(service::AGENT_LOOP, agent_loop::CREATE, params)
        .await
        .unwrap_err();
    assert_eq!(err.code, code::SESSION_ALREADY_EXISTS, "{err}");
    let list = t
        .call(service::AGENT_LOOP, agent_loop::LIST, json!({}))
        .await;
    assert_eq!(list, json!(["mine-1"]));
    t.shutdown().await;
}

/// Resume without persistence is refused with the original's message.
#[tokio::test]
async fn resume_without_persistence_is_rejected() {
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    let rows = dsh_testkit::core_rows(&fake.base_url, &t.home.path().join("sessions"));
    // Drop the persistence rows.
    let rows = rows
        .replace(
            "[[row]]\nid = \"session-jsonl\"\nplugin = \"session-jsonl\"",
            "[[row]]\nid = \"session-jsonl\"\nplugin = \"session-jsonl\"\ndisabled = true",
        )
        .replace(
            "[[row]]\nid = \"checkpoint-policy\"\nplugin = \"checkpoint-policy\"",
            "[[row]]\nid = \"checkpoint-policy\"\nplugin = \"checkpoint-policy\"\ndisabled = true",
        );
    t.apply(&rows).await;
    let err = t
        .host
        .call(
            service::AGENT_LOOP,
            agent_loop::RESUME,
            json!({"sessionId": "nope"}),
        )
        .await
        .unwrap_err();
    assert!(
        err.message
            .starts_with("cannot resume: session persistence is not configured"),
        "{err}"
    );
    t.shutdown().await;
}

/// A tool that concludes the turn ends it after its results are committed:
/// one model call. With contexts pending, another step runs first.
#[tokio::test]
async fn a_concluding_tool_ends_the_turn_unless_next_step_input_is_pending() {
    let (t, fake) = setup(&kit_row("k", "", KIT_TOOLS)).await;
    fake.push([
        calls(&[("c0", "x", json!({"conclude": true}))]),
        calls(&[(
            "c1",
            "x",
            json!({"conclude": true, "contexts": ["one more"]}),
        )]),
        text("after the context"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "a").await, json!({"kind": "completed"}));
    assert_eq!(
        fake.requests().len(),
        1,
        "no model call after the concluding tool"
    );
    let ev = events(&t, &agent).await;
    assert_eq!(kinds(&ev).last().unwrap(), event::TURN_END);
    assert_eq!(of_type(&ev, event::STEP_START).len(), 1);

    assert_eq!(turn(&t, &agent, "b").await, json!({"kind": "completed"}));
    assert_eq!(
        fake.requests().len(),
        3,
        "the pending context ran one more step"
    );
    let ev = events(&t, &agent).await;
    let turn2: Vec<&Value> = ev
        .iter()
        .filter(|e| e["type"] == event::STEP_START && e["data"]["turn"] == 2)
        .collect();
    assert_eq!(turn2.len(), 2);
    t.shutdown().await;
}

// ---- agent-initiator.spec.ts --------------------------------------------

/// The initiator is bound per driver and turn: two agents' turns running
/// at once each call the same tool, and each call runs for the agent whose
/// turn made it (its `exec.agent`).
#[tokio::test]
async fn each_call_runs_for_the_agent_whose_turn_made_it() {
    let (t, fake) = setup(&kit_row("k", "", KIT_TOOLS)).await;
    for tag in ["A", "B"] {
        fake.push_for(
            &format!("FROM-{tag}"),
            [
                calls(&[("c", "p", json!({"tag": tag, "awaitStarted": 2}))]),
                text("done"),
            ],
        );
    }
    let a = new_agent(&t, "/tmp").await;
    let b = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &a, "FROM-A go").await;
    send(&t, agents::FOLLOWUP, &b, "FROM-B go").await;
    idle(&t, &a).await;
    idle(&t, &b).await;
    let starts: Vec<(String, String)> = kit_journal(&t, "k")
        .await
        .iter()
        .filter(|e| e["event"] == "tool:start")
        .map(|e| {
            let tag = e["arguments"]["tag"].as_str().unwrap().to_owned();
            (tag, e["agent"].as_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(starts.len(), 2, "{starts:?}");
    for (tag, agent) in starts {
        assert_eq!(&agent, if tag == "A" { &a } else { &b }, "call of {tag}");
    }
}
