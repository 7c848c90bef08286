//! The rolling pool of parallel tool calls (agent-loop's `schedule.rs`),
//! in the real host: a call that ends frees its slot for the next call at
//! once, while an earlier call of the pool still runs; results are still
//! committed in model order. (The pure rules are unit-tested in
//! `plugins/agent-loop/src/schedule/tests.rs`.)
//!
//! Overlaps are read from the loop-kit fixture's journal; nothing sleeps to
//! synchronize or asserts a duration.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::vocab::event;
use dsh_testkit::agent::{core_host, events, new_agent, turn};
use dsh_testkit::fake_llm::{calls, text};
use dsh_testkit::fixtures::{kit_journal, kit_row};
use serde_json::{json, Value};

/// `{callId: start/end entries}` of the kit's journal, in order.
fn tool_trace(journal: &[Value]) -> Vec<String> {
    journal
        .iter()
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

fn at(trace: &[String], entry: &str) -> usize {
    trace
        .iter()
        .position(|e| e == entry)
        .unwrap_or_else(|| panic!("{entry} missing from {trace:?}"))
}

/// With two slots, c0 waits for c2 to start. c1 ends first and frees its
/// slot, so c2 starts while c0 still runs (a pool that waited for the
/// whole batch would leave c0 waiting for c2 forever, and c0 would fail).
#[tokio::test]
async fn a_call_that_ends_frees_its_slot_while_an_earlier_one_runs() {
    let rows = kit_row("k", "", "{ name = 'p', parallel = true }")
        + "[[patch]]\nid = 'agent-loop'\nconfig = { maxParallelToolCalls = 2 }\n";
    let (t, fake) = core_host(|core| core + &rows).await;
    fake.push([
        calls(&[
            ("c0", "p", json!({"awaitStart": "c2"})),
            ("c1", "p", json!({})),
            ("c2", "p", json!({})),
        ]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));

    let trace = tool_trace(&kit_journal(&t, "k").await);
    assert!(
        at(&trace, "tool:end c1") < at(&trace, "tool:start c2"),
        "{trace:?}"
    );
    assert!(
        at(&trace, "tool:start c2") < at(&trace, "tool:end c0"),
        "{trace:?}"
    );
    let (mut now, mut most) = (0i32, 0i32);
    for e in &trace {
        now += if e.starts_with("tool:start") { 1 } else { -1 };
        most = most.max(now);
    }
    assert_eq!(most, 2, "never more than the cap in flight: {trace:?}");

    // Every call succeeded, and the log has the calls as they started,
    // then the results in model order.
    let ev = events(&t, &agent).await;
    let log: Vec<String> = ev
        .iter()
        .filter(|e| e["type"] == event::TOOL_CALL || e["type"] == event::TOOL_RESULT)
        .map(|e| {
            let block = &e["data"]["message"]["content"][0];
            let id = e["data"]["callId"]
                .as_str()
                .or(block["toolCallId"].as_str())
                .unwrap();
            let failed = if block["isError"] == true {
                " (error)"
            } else {
                ""
            };
            format!("{} {id}{failed}", e["type"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        log,
        [
            "tool/call c0",
            "tool/call c1",
            "tool/call c2",
            "tool/result c0",
            "tool/result c1",
            "tool/result c2"
        ]
    );
    t.shutdown().await;
}
