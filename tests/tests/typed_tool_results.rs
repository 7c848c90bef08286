//! Typed tool results (issue 19, item 2): the `tools` pipeline holds every
//! result as `dsh_sdk::api::tools::ToolResult` with `ContentBlock` content,
//! so what a tool, a listener or a guard answers is read into its type as
//! it arrives. A well-formed answer goes through with its JSON unchanged;
//! a malformed one fails the call with `INVALID_PAYLOAD` naming who
//! answered and the field, where before it went on silently (malformed
//! content reached the model and the log, a malformed feedback read as no
//! feedback, a guard's malformed answer let the call through). Real plugin
//! builds in a real host; nothing here sleeps or asserts a duration.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::codes;
use dsh_sdk::names::{bus, service, tools};
use dsh_testkit::fixtures::{probe_call, register_tool, stage_probe, toml_value};
use dsh_testkit::TestHost;
use serde_json::{json, Value};

/// The registry, and a probe `impl` providing the tool service `impl-svc`
/// (its `execute` answers the call's `arguments.value`/`content`) and the
/// guard service `g1` (its `check` answers the call's `arguments.deny.g1`),
/// with probe `listeners` (TOML, recording or replying).
async fn host(listeners: &str) -> TestHost {
    let t = TestHost::start().await;
    stage_probe(&t);
    t.apply(&format!(
        "[[row]]\nid = \"tools\"\nplugin = \"tools\"\n\
         [[row]]\nid = \"impl\"\nplugin = \"probe\"\n[row.config]\ntag = \"impl\"\n\
         provides = [\"impl-svc\", \"g1\"]\nlisteners = [{listeners}]\n"
    ))
    .await;
    register_tool(&t, "t", json!({})).await.unwrap();
    t
}

async fn exec(t: &TestHost, args: Value) -> Value {
    t.call(
        service::TOOLS,
        tools::EXECUTE,
        json!({"callId": "c1", "name": "t", "arguments": args, "agent": "a1", "cwd": "/"}),
    )
    .await
}

fn record(event: &str) -> String {
    format!("{{ event = \"{event}\", action = \"record\" }}")
}

fn reply(event: &str, reply: &Value) -> String {
    format!(
        "{{ event = \"{event}\", action = \"reply\", reply = {} }}",
        toml_value(reply)
    )
}

/// The payloads of `event` the probe heard, in order.
async fn heard(t: &TestHost, event: &str) -> Vec<Value> {
    let journal: Vec<String> =
        serde_json::from_value(t.call("probe:impl", "journal", json!({})).await).unwrap();
    let prefix = format!("event:{event}:");
    journal
        .iter()
        .filter_map(|e| e.strip_prefix(&prefix))
        .map(|p| serde_json::from_str(p).unwrap())
        .collect()
}

/// Content the pipeline has no type for beyond "a block" (an unknown block
/// type, a text block's extra field) goes through unchanged, and the
/// result's JSON is what it always was (`value: null` when the tool gave
/// none).
#[tokio::test]
async fn content_of_any_block_type_goes_through_with_its_json_unchanged() {
    let t = host(&record(bus::TOOLS_RESULT)).await;
    let content = json!([{"type": "text", "text": "a", "cacheControl": {"ttl": 5}},
                         {"type": "later-block", "payload": [1, 2]}]);
    let r = exec(&t, json!({"content": content})).await;
    let expected = json!({"isError": false, "value": null, "content": content});
    assert_eq!(r, expected);
    assert_eq!(
        serde_json::to_string(&r).unwrap(),
        r#"{"isError":false,"value":null,"content":[{"type":"text","text":"a","cacheControl":{"ttl":5}},{"type":"later-block","payload":[1,2]}]}"#
    );
    assert_eq!(heard(&t, bus::TOOLS_RESULT).await[0]["result"], expected);
    t.shutdown().await;
}

/// A tool whose reply's content is not content blocks (a block without
/// `type`) fails the call, naming the tool and the field; what
/// post-execute and `tools/result` see is that failure, never the
/// malformed block.
#[tokio::test]
async fn a_tool_reply_with_a_malformed_block_is_a_failed_call_naming_the_field() {
    let t = host(&[record(bus::TOOLS_POST_EXECUTE), record(bus::TOOLS_RESULT)].join(", ")).await;
    let r = exec(&t, json!({"value": 1, "content": [{"text": "untyped"}]})).await;
    let message = "the reply of tool \"t\" is malformed: content[0]: missing field `type`";
    assert_eq!(
        r,
        json!({"isError": true,
               "error": {"message": message,
                         "info": {"name": "ToolError", "code": codes::INVALID_PAYLOAD}},
               "content": [{"type": "text", "text": format!("Error: {message}")}]})
    );
    assert_eq!(heard(&t, bus::TOOLS_POST_EXECUTE).await[0]["result"], r);
    assert_eq!(heard(&t, bus::TOOLS_RESULT).await[0]["result"], r);
    assert!(!r.to_string().contains("untyped"), "{r}");
    t.shutdown().await;
}

/// A post-execute block whose feedback is neither a text nor content
/// blocks is a malformed decision (`INVALID_PAYLOAD` naming `feedback`),
/// not a block with the default message.
#[tokio::test]
async fn a_block_with_malformed_feedback_is_an_invalid_decision() {
    let block = json!({"kind": "block", "feedback": 5});
    let t = host(&reply(bus::TOOLS_POST_EXECUTE, &block)).await;
    let r = exec(&t, json!({"value": 1})).await;
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["error"]["info"]["code"], codes::INVALID_PAYLOAD, "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the tools/post-execute decision is malformed: feedback: "),
        "{message}"
    );
    assert!(
        message.contains("a text or a list of content blocks"),
        "{message}"
    );
    assert_eq!(r.get("value"), None, "{r}");
    // A well-formed block still shows its feedback.
    let block = json!({"kind": "block", "feedback": [{"type": "text", "text": "no"}]});
    let t2 = host(&reply(bus::TOOLS_POST_EXECUTE, &block)).await;
    assert_eq!(
        exec(&t2, json!({"value": 1})).await,
        json!({"isError": true, "error": {"message": "no"},
               "content": [{"type": "text", "text": "no"}]})
    );
    t.shutdown().await;
    t2.shutdown().await;
}

/// A guard's `check` answers a denial reason or null; any other answer
/// fails the call before the tool runs, instead of letting it through.
#[tokio::test]
async fn a_guard_answering_neither_a_reason_nor_null_fails_the_call_before_the_tool() {
    let t = host(&record(bus::TOOLS_EXECUTE)).await;
    probe_call(
        &t,
        "impl",
        service::TOOLS,
        tools::GUARD,
        json!({"service": "g1"}),
    )
    .await
    .unwrap();
    let r = exec(&t, json!({"value": "ran", "deny": {"g1": true}})).await;
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["error"]["info"]["code"], codes::INVALID_PAYLOAD, "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message
            .starts_with("the check answer of guard \"g1\" (a denial reason or null) is malformed"),
        "{message}"
    );
    assert_eq!(r.get("value"), None, "the tool did not run: {r}");
    assert!(
        heard(&t, bus::TOOLS_EXECUTE).await.is_empty(),
        "nothing was dispatched"
    );
    // A reason denies and null allows, as always.
    assert_eq!(
        exec(&t, json!({"value": "ran", "deny": {"g1": "not now"}})).await["error"],
        json!({"message": "not now"})
    );
    assert_eq!(exec(&t, json!({"value": "ran"})).await["value"], "ran");
    t.shutdown().await;
}
