//! A tool's registration `timeoutMs` (reference dsh-core §5.1, §10.4
//! "bad `timeoutMs` rejected"; dsh-product `guard/timeout-policy`): a
//! finite number above zero bounds the tool body, which then ends as a
//! `TOOL_TIMEOUT` result; anything else refuses the registration; the
//! model never sees it. Real host, the loop-kit fixture's tools.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_testkit::agent::{core_host, core_host_applied};
use dsh_testkit::fixtures::kit_row;
use dsh_testkit::tools::{run, text_of};
use dsh_testkit::TempDir;
use serde_json::json;

#[tokio::test]
async fn a_tool_body_that_outruns_its_timeout_ends_as_tool_timeout() {
    let (t, _fake) = core_host(|rows| {
        rows + &kit_row(
            "slow",
            "",
            "{ name = 'slow', timeoutMs = 50 }, { name = 'unbounded' }",
        )
    })
    .await;
    let ws = TempDir::new("w4-tools");
    let result = run(&t, ws.path(), "slow", json!({"sleepMs": 600_000})).await;
    assert_eq!(result["isError"], json!(true), "{result}");
    assert_eq!(
        result["error"]["info"]["code"],
        json!("TOOL_TIMEOUT"),
        "{result}"
    );
    assert!(
        text_of(&result).contains("tool call timed out after 50ms"),
        "{result}"
    );
    // A body inside its bound, and a tool without one, answer normally.
    let quick = run(&t, ws.path(), "slow", json!({})).await;
    assert_ne!(quick["isError"], json!(true), "{quick}");
    let unbounded = run(&t, ws.path(), "unbounded", json!({"sleepMs": 100})).await;
    assert_ne!(unbounded["isError"], json!(true), "{unbounded}");
    // Never part of what the model is offered.
    let schemas = t.call("tools", "schemas", json!({})).await;
    let slow = schemas
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "slow")
        .unwrap();
    assert_eq!(slow.get("timeoutMs"), None, "{slow}");
    t.shutdown().await;
}

#[tokio::test]
async fn a_timeout_that_is_not_a_positive_number_refuses_the_registration() {
    for bad in ["0", "-5", "'soon'"] {
        let (t, _fake) = core_host_applied(&[], |rows| {
            rows + &kit_row("bad", "", &format!("{{ name = 'bad', timeoutMs = {bad} }}"))
        })
        .await;
        let status = t.status("kit-bad").await;
        let error = status.error.unwrap_or_default();
        assert!(
            error.contains("timeoutMs must be a finite number greater than 0"),
            "{bad}: {error}"
        );
        t.shutdown().await;
    }
}
