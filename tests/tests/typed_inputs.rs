//! Typed inputs of the agent loop (issue 19, review of the typed
//! vocabulary): what a tool adds for the next step is read as a
//! `UserInput` where the registry reads the tool's reply, so a malformed
//! context fails that call alone and the step goes on; `agents.cancel`
//! takes any cause that is an object with a string `kind` (a kind of
//! another plugin's is logged whole and the log resumes); a `tool/result`
//! records its result's error info whole. Real plugin builds in a real
//! host, against the fake model server; nothing here sleeps to synchronize
//! or asserts a duration.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::codes;
use dsh_sdk::names::{agent_loop, agents, service, sessions};
use dsh_sdk::vocab::event;
use dsh_testkit::agent::{
    core_host, events, idle, logged, new_agent, of_type, send, turn, wait_log,
};
use dsh_testkit::fake_llm::{calls, stall_after, text};
use dsh_testkit::fixtures::{kit_journal, kit_row, toml_value};
use serde_json::{json, Value};

/// The texts of the `user/message`s logged from step 2 of turn 1 on.
fn texts_from_step_two(ev: &[Value]) -> Vec<&str> {
    let start = ev
        .iter()
        .position(|e| e["type"] == event::STEP_START && e["data"]["step"] == 2)
        .expect("a second step");
    of_type(&ev[start..], event::USER_MESSAGE)
        .iter()
        .map(|e| e["data"]["content"][0]["text"].as_str().unwrap_or(""))
        .collect()
}

/// The tool-result block of a `tool/result` event.
fn result_block(e: &Value) -> &Value {
    &e["data"]["message"]["content"][0]
}

/// A tool whose reply carries a context that is not a message (a `role`
/// but no `source`): that call is an error result naming the field, the
/// next call of the step still runs and its context enters the next step,
/// and the turn completes. Before, the reply went through and the agent
/// loop refused the context when it committed the call: the step failed
/// with `INVALID_PAYLOAD`, the turn ended `error`, and the second call was
/// never answered.
#[tokio::test]
async fn a_malformed_context_fails_its_call_alone_and_the_step_goes_on() {
    let (t, fake) = core_host(|rows| rows + &kit_row("k", "", "{ name = 'x' }")).await;
    let malformed = json!({"id": "m", "role": "user", "content": []});
    fake.push([
        calls(&[
            ("c0", "x", json!({"contexts": ["from c0", malformed]})),
            ("c1", "x", json!({"contexts": ["from c1"]})),
        ]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));

    let ev = events(&t, &agent).await;
    let results = of_type(&ev, event::TOOL_RESULT);
    assert_eq!(results.len(), 2, "both calls are answered");
    let message = "the reply of tool \"x\" is malformed: additionalContexts[1]: \
                   the message is not a well-formed message: missing field `source`";
    assert_eq!(
        result_block(results[0]),
        &json!({"type": "tool-result", "toolCallId": "c0",
                "content": [{"type": "text", "text": format!("Error: {message}")}],
                "isError": true})
    );
    assert_eq!(
        results[0]["data"]["error"],
        json!({"name": "ToolError", "code": codes::INVALID_PAYLOAD})
    );
    assert_eq!(result_block(results[1])["toolCallId"], "c1");
    assert_eq!(result_block(results[1])["isError"], false);
    assert_eq!(
        result_block(results[1])["content"],
        json!([{"type": "text", "text": "ok c1"}])
    );
    let ended: Vec<Value> = kit_journal(&t, "k")
        .await
        .into_iter()
        .filter(|e| e["event"] == "tool:end")
        .map(|e| e["callId"].clone())
        .collect();
    assert_eq!(ended, [json!("c0"), json!("c1")], "both calls ran");
    // The refused reply is refused whole: only c1's context goes on.
    assert_eq!(texts_from_step_two(&ev), ["from c1"]);
    assert_eq!(fake.requests().len(), 2, "the model saw both results");
    t.shutdown().await;
}

/// `agents.cancel` with a cause that is not an object with a string `kind`
/// is refused and the turn runs on; a kind of another plugin's
/// (`{kind: "timeout"}`) and a hook that gave no reason (`{kind: "hook"}`)
/// each cancel the running turn, logged as given, and the log with both
/// resumes. Before, both were refused and nothing was cancelled.
#[tokio::test]
async fn a_cancel_with_another_plugins_cause_cancels_and_the_log_resumes() {
    let (t, fake) = core_host(|rows| rows).await;
    fake.push([stall_after("Half"), stall_after("Half"), text("resumed")]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "first").await;
    logged(&t, &agent, event::ASSISTANT_CHUNK).await;

    let cancel = |cause: Value| {
        t.host.call(
            service::AGENTS,
            agents::CANCEL,
            json!({"agent": agent, "cause": cause}),
        )
    };
    let e = cancel(json!("soon")).await.unwrap_err();
    assert_eq!(e.code, codes::INVALID_PAYLOAD);
    assert!(
        e.message.starts_with(
            "the cancel's `cause` \"soon\" is refused (invalid type: string \"soon\", \
             expected a map), and nothing was cancelled: a cause is an object with a string `kind`"
        ),
        "{e}"
    );
    let status = t
        .call(service::AGENTS, agents::STATUS, json!({"agent": agent}))
        .await;
    assert_eq!(
        status["status"], "running",
        "the refused cancel changed nothing"
    );

    let timeout = json!({"kind": "timeout", "afterMs": 500});
    let (ended, cancelled) = tokio::join!(idle(&t, &agent), cancel(timeout.clone()));
    assert_eq!(cancelled.unwrap(), Value::Null);
    assert_eq!(ended, json!({"kind": "aborted", "reason": timeout}));

    send(&t, agents::FOLLOWUP, &agent, "second").await;
    wait_log(&t, &agent, "a chunk of turn 2", |ev| {
        of_type(ev, event::ASSISTANT_CHUNK)
            .iter()
            .any(|e| e["data"]["turn"] == 2)
    })
    .await;
    let (ended, cancelled) = tokio::join!(idle(&t, &agent), cancel(json!({"kind": "hook"})));
    assert_eq!(cancelled.unwrap(), Value::Null);
    assert_eq!(
        ended,
        json!({"kind": "aborted", "reason": {"kind": "hook"}})
    );

    // The log holds both causes as given, and reads back for a resume.
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
    assert_eq!(
        turn(&t, &agent, "third").await,
        json!({"kind": "completed"})
    );
    let ev = events(&t, &agent).await;
    let reasons: Vec<&Value> = of_type(&ev, event::TURN_END)
        .iter()
        .map(|e| &e["data"]["reason"])
        .collect();
    assert_eq!(
        reasons,
        [
            &json!({"kind": "aborted", "reason": {"kind": "timeout", "afterMs": 500}}),
            &json!({"kind": "aborted", "reason": {"kind": "hook"}}),
            &json!({"kind": "completed"}),
        ]
    );
    t.shutdown().await;
}

/// A `tool/result` records its result's error info whole, as the original
/// writes `result.error.info`: a `tools/execute` wrapper's info without a
/// code, and one with fields of its own. Before, the first was dropped
/// (no `error` at all) and the second lost its extra field.
#[tokio::test]
async fn a_tool_result_records_the_error_info_whole() {
    let failure = |call: &str, info: Value| {
        let value = json!({"isError": true, "error": {"message": "held", "info": info},
                           "content": [{"type": "text", "text": "Error: held"}]});
        format!(
            "{{ event = 'tools/execute', action = 'return', when = {{ exec = {{ callId = '{call}' }} }}, \
             value = {} }}",
            toml_value(&value)
        )
    };
    let uncoded = json!({"name": "HookError", "rule": "r7"});
    let coded = json!({"name": "PolicyError", "code": "DENIED", "rule": "r7"});
    let listeners = format!(
        "{}, {}",
        failure("c0", uncoded.clone()),
        failure("c1", coded.clone())
    );
    let (t, fake) = core_host(|rows| rows + &kit_row("k", &listeners, "{ name = 'x' }")).await;
    fake.push([
        calls(&[("c0", "x", json!({})), ("c1", "x", json!({}))]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    let errors: Vec<&Value> = of_type(&ev, event::TOOL_RESULT)
        .iter()
        .map(|e| &e["data"]["error"])
        .collect();
    assert_eq!(errors, [&uncoded, &coded]);
    t.shutdown().await;
}
