//! The agent core as plugins, against a fake OpenAI-compatible server:
//! event order, tool steps, model-visible-means-logged, the DeepSeek wire
//! format and its faults, cancellation, and a hot swap of the agent loop.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::time::Duration;

use dsh_sdk::names::{agent_loop, agents, code, service, sessions};
use dsh_sdk::vocab::event;
use dsh_testkit::agent::{
    cancel_mid_stream, core_host, events, kinds, logged, new_agent, streamed_text, turn, wait_log,
};
use dsh_testkit::fake_llm::{text, text_payloads, tool_calls, Answer, FakeLlm, Gate};
use dsh_testkit::fixtures::stage_probe;
use dsh_testkit::{library, TestHost};
use serde_json::{json, Value};

const KEY_ENV: &str = "DSH_TEST_FAKE_KEY";

/// `rows` with the adapter reading its key from `KEY_ENV`.
fn with_key(rows: String) -> String {
    rows.replace("apiKeyEnv = \"\"", &format!("apiKeyEnv = \"{KEY_ENV}\""))
}

/// The kit's core rows, with the adapter reading its key from `KEY_ENV`.
fn core_rows(fake: &FakeLlm, home: &std::path::Path) -> String {
    with_key(dsh_testkit::core_rows(
        &fake.base_url,
        &home.join("sessions"),
    ))
}

async fn setup() -> (TestHost, FakeLlm) {
    setup_with(|rows| rows).await
}

/// `setup`, with the core rows edited first.
async fn setup_with(edit: impl FnOnce(String) -> String) -> (TestHost, FakeLlm) {
    std::env::set_var(KEY_ENV, "sk-test-not-a-real-key");
    core_host(|rows| edit(with_key(rows))).await
}

#[tokio::test]
async fn a_text_turn_logs_the_canonical_event_order() {
    let (t, fake) = setup().await;
    fake.push([text("Hello there.")]);
    let agent = new_agent(&t, "/tmp").await;
    let reason = turn(&t, &agent, "hi").await;
    assert_eq!(reason, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    assert_eq!(
        kinds(&ev),
        [
            event::INBOX_SPLICED,
            event::TURN_START,
            event::INBOX_SPLICED,
            event::STEP_START,
            event::USER_MESSAGE,
            event::REQUEST_HEADER,
            event::REQUEST_CONTEXT,
            "assistant/chunk*",
            event::ASSISTANT_MESSAGE,
            event::STEP_END,
            event::TURN_END
        ]
    );
    let msg = ev
        .iter()
        .find(|e| e["type"] == event::ASSISTANT_MESSAGE)
        .unwrap();
    assert_eq!(
        msg["data"]["message"]["content"],
        json!([{"type": "text", "text": "Hello there."}])
    );
    assert_eq!(
        msg["data"]["usage"],
        json!({"inputTokens": 12, "outputTokens": 5, "cacheReadTokens": 8})
    );
    assert_eq!(msg["surfaceOp"], "append");
    let chunk_seqs: Vec<u64> = ev
        .iter()
        .filter(|e| e["type"] == event::ASSISTANT_CHUNK)
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(msg["sourceEventSeqs"], json!(chunk_seqs));
    let header = &ev
        .iter()
        .find(|e| e["type"] == event::REQUEST_HEADER)
        .unwrap()["data"];
    assert_eq!(header["reason"], "initial");
    assert!(header["header"]["system"]
        .as_str()
        .unwrap()
        .ends_with("You work in /tmp with m1."));

    // The DeepSeek request body.
    let body = &fake.requests()[0];
    assert_eq!(body["model"], "m1");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(body["thinking"], json!({"type": "enabled"}));
    assert_eq!(body["reasoning_effort"], "high");
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "hi"})
    );
    assert_eq!(body["tools"][0]["type"], "function");
    let names: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"read") && names.contains(&"bash"),
        "{names:?}"
    );
    assert!(
        fake.headers()[0].contains("authorization: Bearer sk-test-not-a-real-key")
            || fake.headers()[0].contains("Authorization: Bearer sk-test-not-a-real-key")
    );
    t.shutdown().await;
}

#[tokio::test]
async fn tool_steps_are_logged_and_every_request_is_what_the_log_derives() {
    let (t, fake) = setup().await;
    let dir = dsh_testkit::TempDir::new("agent-ws");
    std::fs::write(dir.path().join("a.txt"), "alpha\nbeta\n").unwrap();
    std::fs::write(dir.path().join("b.txt"), "gamma\n").unwrap();
    fake.push([
        tool_calls(&[("read", json!({"file_path": "a.txt"}))]),
        tool_calls(&[
            ("read", json!({"file_path": "b.txt"})),
            ("read", json!({"file_path": "missing.txt"})),
        ]),
        text("Done."),
    ]);
    let agent = new_agent(&t, &dir.path().display().to_string()).await;
    assert_eq!(
        turn(&t, &agent, "read both").await,
        json!({"kind": "completed"})
    );
    let ev = events(&t, &agent).await;
    let k = kinds(&ev);
    let step = |n: u64| {
        ev.iter()
            .filter(|e| e["data"]["step"] == n && e["type"] == event::TOOL_RESULT)
            .count()
    };
    assert_eq!((step(1), step(2), step(3)), (1, 2, 0));
    // Parallel-safe calls of one response: both start before results commit,
    // and results are committed in model order.
    let s2: Vec<&String> = k
        .iter()
        .skip_while(|x| *x != event::STEP_START)
        .skip(1)
        .skip_while(|x| *x != event::STEP_START)
        .collect();
    let pos = |name: &str, nth: usize| {
        s2.iter()
            .enumerate()
            .filter(|(_, x)| x.as_str() == name)
            .nth(nth)
            .map(|(i, _)| i)
    };
    assert!(
        pos(event::TOOL_CALL, 1) < pos(event::TOOL_RESULT, 0),
        "{s2:?}"
    );
    let results: Vec<&Value> = ev
        .iter()
        .filter(|e| e["type"] == event::TOOL_RESULT)
        .collect();
    let first = results[0]["data"]["message"]["content"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(first.contains("1: alpha\n2: beta"), "{first}");
    assert!(
        first.ends_with("(End of file - total 2 lines)\n</content>"),
        "{first}"
    );
    let missing = &results[2]["data"]["message"]["content"][0];
    assert_eq!(missing["isError"], true);
    assert_eq!(results[2]["data"]["error"]["code"], code::FS_NOT_FOUND);
    assert_eq!(
        results[2]["sourceEventSeqs"][0],
        ev.iter()
            .filter(|e| e["type"] == event::TOOL_CALL)
            .nth(2)
            .unwrap()["seq"]
    );

    // Model-visible means logged: every request equals the history derived
    // from the log as it stood when that step called the model.
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    let logged: Vec<dsh_sdk::vocab::SessionEvent> = serde_json::from_value(json!(ev)).unwrap();
    for (i, request) in requests.iter().enumerate() {
        let step = i as u64 + 1;
        let called_at = ev
            .iter()
            .position(|e| e["type"] == event::ASSISTANT_CHUNK && e["data"]["step"] == step)
            .unwrap_or_else(|| panic!("step {step} streamed nothing"));
        let history = dsh_sdk::vocab::derive_messages(&logged[..called_at]);
        let want: Vec<Value> = history.iter().flat_map(wire_messages).collect();
        let sent = request["messages"].as_array().unwrap();
        assert_eq!(sent[0]["role"], "system", "request {i}");
        assert_eq!(sent[1..], want[..], "request {i} is the derived history");
    }
    // system + user + (assistant, tool) + (assistant, tool, tool)
    let last = requests[2]["messages"].as_array().unwrap();
    let roles: Vec<&str> = last.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "tool"
        ]
    );
    let derived: Vec<Value> = serde_json::from_value(
        t.call(service::SESSIONS, sessions::DERIVE, json!({"id": agent}))
            .await,
    )
    .unwrap();
    assert_eq!(
        derived.len(),
        7,
        "user, 2 assistant, 3 results, final answer"
    );
    assert_eq!(last[2]["reasoning_content"], "I need a tool.");
    assert_eq!(last[2]["content"], "");
    assert_eq!(last[3]["tool_call_id"], "call_0_read");
    t.shutdown().await;
}

/// A harness message as the chat-completions messages the adapter sends
/// for it (the projection the original's DeepSeek adapter makes).
fn wire_messages(m: &Value) -> Vec<Value> {
    let blocks = m["content"].as_array().cloned().unwrap_or_default();
    let join = |bs: &[Value], kind: &str| -> String {
        bs.iter()
            .filter(|b| b["type"] == kind)
            .filter_map(|b| b["text"].as_str())
            .collect()
    };
    if m["role"] == "assistant" {
        let mut out = json!({"role": "assistant", "content": join(&blocks, "text")});
        let reasoning = join(&blocks, "reasoning");
        if !reasoning.is_empty() {
            out["reasoning_content"] = json!(reasoning);
        }
        let calls: Vec<Value> = blocks
            .iter()
            .filter(|b| b["type"] == "tool-call")
            .map(|b| json!({"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": b["arguments"]}}))
            .collect();
        if !calls.is_empty() {
            out["tool_calls"] = json!(calls);
        }
        return vec![out];
    }
    let results: Vec<Value> = blocks
        .iter()
        .filter(|b| b["type"] == "tool-result")
        .map(|b| {
            let inner = b["content"].as_array().cloned().unwrap_or_default();
            json!({"role": "tool", "tool_call_id": b["toolCallId"], "content": join(&inner, "text")})
        })
        .collect();
    if results.is_empty() {
        vec![json!({"role": "user", "content": join(&blocks, "text")})]
    } else {
        results
    }
}

#[tokio::test]
async fn max_tokens_drops_tool_calls() {
    let (t, fake) = setup().await;
    fake.push([Answer::Sse(vec![
        Some(json!({"choices": [{"delta": {"content": "partial"}}]}).to_string()),
        Some(json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "read", "arguments": "{\"fi"}}]}}]}).to_string()),
        Some(json!({"choices": [{"delta": {}, "finish_reason": "length"}]}).to_string()),
        Some("[DONE]".into()),
    ])]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "max-tokens"}));
    let ev = events(&t, &agent).await;
    assert!(!ev.iter().any(|e| e["type"] == event::TOOL_CALL));
    let m = ev
        .iter()
        .find(|e| e["type"] == event::ASSISTANT_MESSAGE)
        .unwrap();
    assert_eq!(
        m["data"]["message"]["content"],
        json!([{"type": "text", "text": "partial"}])
    );
    t.shutdown().await;
}

async fn failing_turn(answers: Vec<Answer>) -> (Value, Vec<Value>, FakeLlm) {
    let (t, fake) = setup().await;
    fake.push(answers);
    let agent = new_agent(&t, "/tmp").await;
    let reason = turn(&t, &agent, "go").await;
    let ev = events(&t, &agent).await;
    t.shutdown().await;
    (reason, ev, fake)
}

#[tokio::test]
async fn wire_faults_become_clear_turn_errors() {
    let d = |s: &str| Some(s.to_owned());
    let ok_delta = json!({"choices": [{"delta": {"content": "x"}}]}).to_string();
    // Keep-alive comments are harmless.
    let (r, _, _) = failing_turn(vec![Answer::Sse(vec![
        None,
        d(&ok_delta),
        None,
        d(&json!({"choices":[{"delta":{},"finish_reason":"stop"}]}).to_string()),
        d("[DONE]"),
    ])])
    .await;
    assert_eq!(r, json!({"kind": "completed"}));
    let code = |r: &Value| r["error"]["code"].as_str().unwrap_or_default().to_owned();
    // Missing [DONE].
    let (r, ev, _) = failing_turn(vec![Answer::Sse(vec![d(&ok_delta)])]).await;
    assert_eq!(code(&r), "STREAM_CLOSED", "{r}");
    assert!(ev
        .iter()
        .any(|e| e["type"] == event::ASSISTANT_CHUNK && e["data"]["chunk"]["type"] == "finish"));
    // Malformed JSON.
    let (r, _, _) = failing_turn(vec![Answer::Sse(vec![d("{not json")])]).await;
    assert_eq!(code(&r), "MALFORMED_RESPONSE");
    // 401.
    let (r, _, _) = failing_turn(vec![Answer::Status(
        401,
        vec![],
        "{\"error\":{\"message\":\"bad key\"}}".into(),
    )])
    .await;
    assert_eq!(code(&r), "AUTH");
    assert!(
        !r.to_string().contains("sk-test"),
        "the key must never appear: {r}"
    );
    // The turn logs the model's failure whole, status included (the
    // original's `turn/end` carries `e.failure`).
    assert_eq!(r["error"]["status"], 401, "{r}");
    // 400 context overflow.
    let (r, _, _) = failing_turn(vec![Answer::Status(
        400,
        vec![],
        "{\"error\":{\"message\":\"This model's maximum context length is 65536 tokens\"}}".into(),
    )])
    .await;
    assert_eq!(code(&r), "CONTEXT_WINDOW_EXCEEDED");
    // A connection reset mid-stream: a transport failure, retried 5 times
    // (each retry logged), then the error.
    let (r, ev, fake) = failing_turn(vec![Answer::Reset(vec![ok_delta.clone()]); 6]).await;
    assert_eq!(code(&r), "TRANSPORT", "{r}");
    assert_eq!(fake.requests().len(), 6, "the first attempt and 5 retries");
    let retries: Vec<&Value> = ev
        .iter()
        .filter(|e| e["type"] == event::LLM_RETRY)
        .collect();
    let numbers: Vec<u64> = retries
        .iter()
        .map(|e| e["data"]["retry"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [1, 2, 3, 4, 5]);
    for retry in &retries {
        assert_eq!(retry["data"]["failure"]["code"], "TRANSPORT", "{retry}");
        // One chain: every retry of the request shares the first's id.
        assert_eq!(retry["data"]["retryId"], retries[0]["data"]["retryId"]);
        assert_eq!(retry["data"]["provider"], "fake", "{retry}");
    }
    // Each wait that ran out is followed by its `llm/retry-started`.
    let started: Vec<(u64, &Value)> = ev
        .iter()
        .filter(|e| e["type"] == event::LLM_RETRY_STARTED)
        .map(|e| (e["data"]["retry"].as_u64().unwrap(), &e["data"]["retryId"]))
        .collect();
    let chain = &retries[0]["data"]["retryId"];
    assert_eq!(
        started,
        (1..=5).map(|n| (n, chain)).collect::<Vec<_>>(),
        "{ev:?}"
    );
    // A clean close in the middle of an event: the stream ended without
    // [DONE], which is not retryable.
    let (r, ev, fake) = failing_turn(vec![Answer::Disconnect(vec![ok_delta.clone()]); 6]).await;
    assert_eq!(code(&r), "STREAM_CLOSED", "{r}");
    assert_eq!(fake.requests().len(), 1, "STREAM_CLOSED is not retried");
    assert!(!ev.iter().any(|e| e["type"] == event::LLM_RETRY));
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_retried_and_logged() {
    let (r, ev, fake) = failing_turn(vec![
        Answer::Status(
            429,
            vec![("Retry-After".into(), "1".into())],
            "{\"error\":{\"message\":\"slow down\"}}".into(),
        ),
        text("recovered"),
    ])
    .await;
    assert_eq!(r, json!({"kind": "completed"}));
    assert_eq!(fake.requests().len(), 2);
    let retry = ev
        .iter()
        .find(|e| e["type"] == event::LLM_RETRY)
        .expect("llm/retry logged");
    assert_eq!(retry["data"]["failure"]["code"], "RATE_LIMIT");
    assert_eq!(retry["data"]["failure"]["providerRetryAfterMs"], 1000);
    assert!(retry["data"]["delayMs"].as_u64().unwrap() >= 1000);
    // The policy is named as the original names it: its fields as a JSON
    // array, as text (the kit's llm-retry row: initialDelayMs = 10,
    // maxDelayMs = 3000, the rest the defaults).
    assert_eq!(
        retry["data"]["policyKey"],
        r#"["normal",5,["EMPTY_RESPONSE","RATE_LIMIT","SERVER","TIMEOUT","TRANSPORT"],10,3000,0.1]"#
    );
    // Same turn and step for the retry; one step/end.
    assert_eq!(
        ev.iter().filter(|e| e["type"] == event::STEP_START).count(),
        1
    );
    let msg = ev
        .iter()
        .find(|e| e["type"] == event::ASSISTANT_MESSAGE)
        .unwrap();
    assert_eq!(msg["data"]["message"]["content"][0]["text"], "recovered");
}

#[tokio::test]
async fn an_always_policy_names_itself_as_the_original_does() {
    let (t, fake) = setup_with(|rows| {
        let row = "config = { initialDelayMs = 10, maxDelayMs = 3000 }";
        assert!(rows.contains(row), "{rows}");
        rows.replace(
            row,
            "config = { mode = \"always\", maxRetries = 2, initialDelayMs = 10, maxDelayMs = 3000, jitterRatio = 0.0 }",
        )
    })
    .await;
    fake.push([
        Answer::Status(401, vec![], "{\"error\":{\"message\":\"bad key\"}}".into()),
        text("recovered"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    let reason = turn(&t, &agent, "go").await;
    assert_eq!(reason, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    t.shutdown().await;
    let retry = ev
        .iter()
        .find(|e| e["type"] == event::LLM_RETRY)
        .expect("llm/retry logged");
    // `always` has no limit and no codes: the original's four fields, the
    // ratio written as JavaScript writes 0.
    assert_eq!(retry["data"]["mode"], "always");
    assert_eq!(retry["data"]["policyKey"], r#"["always",10,3000,0]"#);
    assert!(retry["data"].get("maxRetries").is_none(), "{retry}");
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test]
async fn cancel_during_a_retry_wait_ends_the_turn_without_waiting_it_out() {
    let (t, fake) = setup_with(|rows| {
        assert!(rows.contains("maxDelayMs = 3000"));
        rows.replace("maxDelayMs = 3000", "maxDelayMs = 60000")
    })
    .await;
    fake.push([Answer::Status(
        429,
        vec![("Retry-After".into(), "30".into())],
        "{\"error\":{\"message\":\"slow down\"}}".into(),
    )]);
    let agent = new_agent(&t, "/tmp").await;
    t.call(
        service::AGENTS,
        agents::FOLLOWUP,
        json!({"agent": agent, "message": {"text": "go"}}),
    )
    .await;
    logged(&t, &agent, event::LLM_RETRY).await;
    t.call(service::AGENTS, agents::CANCEL, json!({"agent": agent}))
        .await;
    // The retry waits 30 s (Retry-After); the cancel must not sit through it.
    let idle = t.call(service::AGENTS, agents::WHEN_IDLE, json!({"agent": agent}));
    let reason = tokio::time::timeout(Duration::from_secs(15), idle)
        .await
        .expect("the cancel ended the turn during the retry wait")["reason"]
        .clone();
    assert_eq!(
        reason,
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    assert_eq!(fake.requests().len(), 1, "no retry after the cancel");
    t.shutdown().await;
}

#[tokio::test]
async fn a_stall_past_the_idle_timeout_is_a_timeout() {
    let (r, _, fake) = failing_turn(vec![Answer::Stall(vec![]); 6]).await;
    assert_eq!(r["error"]["code"], "TIMEOUT", "{r}");
    assert_eq!(fake.requests().len(), 6, "TIMEOUT is retryable");
}

#[tokio::test]
async fn cancel_mid_stream_keeps_the_interrupted_prefix() {
    // An idle timeout far past the bound below: only the cancel can close
    // the stalled connection in time.
    let (t, fake) = setup_with(|rows| {
        rows.replace("streamIdleTimeoutMs = 1500", "streamIdleTimeoutMs = 60000")
    })
    .await;
    fake.push([Answer::Stall(vec![
        json!({"choices": [{"delta": {"content": "Half an ans"}}]}).to_string(),
    ])]);
    let agent = new_agent(&t, "/tmp").await;
    let reason = cancel_mid_stream(&t, &agent, "go").await;
    assert_eq!(
        reason,
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    // The cancel closed the connection at once (a hang guard, not a
    // timing: the idle timeout is 60 s).
    let gone = tokio::time::timeout(Duration::from_secs(20), fake.disconnects(1))
        .await
        .expect("the cancel closes the connection");
    assert_eq!(gone, [0]);
    let ev = events(&t, &agent).await;
    let m = ev
        .iter()
        .find(|e| e["type"] == event::ASSISTANT_MESSAGE)
        .expect("prefix kept");
    assert_eq!(m["data"]["interrupted"], true);
    assert_eq!(
        m["data"]["message"]["content"],
        json!([{"type": "text", "text": "Half an ans"}])
    );
    assert_eq!(kinds(&ev).last().unwrap(), event::TURN_END);
    // The next followup still runs.
    fake.push([text("ok")]);
    assert_eq!(
        turn(&t, &agent, "again").await,
        json!({"kind": "completed"})
    );
    t.shutdown().await;
}

#[tokio::test]
async fn hot_swap_of_the_agent_loop_between_turns_keeps_the_history() {
    let (t, fake) = setup().await;
    // Serve the agent loop from a file of our own so it can be replaced.
    let target = t.plugins.path().join("agent-loop.so");
    std::fs::copy(library("dsh-plugin-agent-loop"), &target).unwrap();
    t.host.reload(target.clone()).await;
    fake.push([text("first answer")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "one").await, json!({"kind": "completed"}));

    let tmp = t.plugins.path().join("agent-loop.so.tmp");
    std::fs::copy(library("dsh-plugin-agent-loop"), &tmp).unwrap();
    std::fs::rename(&tmp, &target).unwrap();
    t.host.reload(target.clone()).await;
    assert!(t.status("agent-loop").await.generations >= 2);

    t.call(
        service::AGENT_LOOP,
        agent_loop::RESUME,
        json!({"sessionId": agent, "agentOptions": {"provider": "fake", "model": "m1"}}),
    )
    .await;
    fake.push([text("second answer")]);
    assert_eq!(turn(&t, &agent, "two").await, json!({"kind": "completed"}));
    let requests = fake.requests();
    let msgs = requests.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .clone();
    let texts: Vec<&str> = msgs.iter().filter_map(|m| m["content"].as_str()).collect();
    assert!(
        texts.contains(&"one") && texts.contains(&"first answer") && texts.contains(&"two"),
        "{texts:?}"
    );
    let ev = events(&t, &agent).await;
    assert_eq!(
        ev.iter().filter(|e| e["type"] == event::TURN_START).count(),
        2
    );
    assert!(ev
        .iter()
        .any(|e| e["type"] == event::TURN_START && e["data"]["turn"] == 2));
    t.shutdown().await;
}

#[tokio::test]
async fn steering_mid_turn_enters_the_next_step_of_the_same_turn() {
    // The held stream must not trip the adapter's idle timeout.
    let (t, fake) = setup_with(|rows| {
        assert!(rows.contains("streamIdleTimeoutMs = 1500"));
        rows.replace("streamIdleTimeoutMs = 1500", "streamIdleTimeoutMs = 600000")
    })
    .await;
    // The first answer's stream is held open after its first delta until
    // the steer is logged, so the steer lands mid-stream on any machine.
    let gate = Gate::new();
    let mut payloads = text_payloads("first part of the answer");
    let rest = payloads.split_off(1);
    fake.push([Answer::Gated(payloads, gate.clone(), rest), text("second")]);
    let agent = new_agent(&t, "/tmp").await;
    t.call(
        service::AGENTS,
        agents::FOLLOWUP,
        json!({"agent": agent, "message": {"text": "start"}}),
    )
    .await;
    logged(&t, &agent, event::ASSISTANT_CHUNK).await;
    t.call(
        service::AGENTS,
        agents::STEER,
        json!({"agent": agent, "message": {"text": "also this"}}),
    )
    .await;
    wait_log(&t, &agent, "the steer in the next-step inbox", |ev| {
        ev.iter().any(|e| {
            e["type"] == event::INBOX_SPLICED
                && e["data"]["target"] == "next-step"
                && e["data"]["inserted"][0]["content"][0]["text"] == "also this"
        })
    })
    .await;
    let before = events(&t, &agent).await;
    assert!(
        !before.iter().any(|e| e["type"] == event::ASSISTANT_MESSAGE),
        "the first step is still streaming when the steer arrives"
    );
    gate.open();
    let reason = t
        .call(service::AGENTS, agents::WHEN_IDLE, json!({"agent": agent}))
        .await["reason"]
        .clone();
    assert_eq!(reason, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    assert_eq!(
        ev.iter().filter(|e| e["type"] == event::TURN_START).count(),
        1
    );
    let steered = ev
        .iter()
        .find(|e| {
            e["type"] == event::USER_MESSAGE && e["data"]["content"][0]["text"] == "also this"
        })
        .expect("steering logged");
    let step2 = ev
        .iter()
        .find(|e| e["type"] == event::STEP_START && e["data"]["step"] == 2)
        .unwrap();
    assert_eq!(
        steered["seq"].as_u64().unwrap(),
        step2["seq"].as_u64().unwrap() + 1
    );
    let first = ev
        .iter()
        .find(|e| e["type"] == event::ASSISTANT_MESSAGE)
        .unwrap();
    assert_eq!(
        first["data"]["message"]["content"],
        json!([{"type": "text", "text": "first part of the answer"}]),
        "the first step's answer was not cut by the steer"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_blocked_pre_step_and_a_throwing_listener_end_the_turn_but_not_the_loop() {
    let (t, fake) = setup().await;
    stage_probe(&t);
    let mut rows = core_rows(&fake, t.home.path());
    rows.push_str("[[row]]\nid = 'gate'\nplugin = 'probe'\nconfig = { tag = 'gate', listeners = [{ event = 'agent/pre-step', action = 'reject' }] }\n");
    t.apply(&rows).await;
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(
        turn(&t, &agent, "blocked?").await,
        json!({"kind": "blocked"})
    );
    let ev = events(&t, &agent).await;
    assert!(
        !ev.iter().any(|e| e["type"] == event::STEP_START),
        "a rejected turn has no step"
    );
    assert!(fake.requests().is_empty());

    let mut rows = core_rows(&fake, t.home.path());
    rows.push_str("[[row]]\nid = 'gate'\nplugin = 'probe'\nconfig = { tag = 'gate', listeners = [{ event = 'agent/request', action = 'fail' }] }\n");
    t.apply(&rows).await;
    let r = turn(&t, &agent, "again").await;
    assert_eq!(r["kind"], "error");
    assert_eq!(r["error"]["code"], "PROBE_FAILED");

    t.apply(&core_rows(&fake, t.home.path())).await;
    fake.push([text("fine")]);
    assert_eq!(
        turn(&t, &agent, "and now").await,
        json!({"kind": "completed"})
    );
    let turns: Vec<Value> = events(&t, &agent)
        .await
        .into_iter()
        .filter(|e| e["type"] == event::TURN_END)
        .collect();
    assert_eq!(turns.len(), 3);
    t.shutdown().await;
}

#[tokio::test]
async fn a_finished_background_job_wakes_its_agent_with_a_notice() {
    let (t, fake) = setup().await;
    // The job ends only once the first turn has: its notice wakes a second.
    let gate = std::env::temp_dir().join(format!("dsh-job-gate-{}", dsh_sdk::new_id()));
    let command = format!(
        "while [ ! -e {g} ]; do sleep 0.01; done; echo built",
        g = gate.display()
    );
    fake.push([
        tool_calls(&[(
            "bash",
            json!({"command": command, "description": "build it", "run_in_background": true}),
        )]),
        text("Started the build."),
        text("The build finished."),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(
        turn(&t, &agent, "build in the background").await,
        json!({"kind": "completed"})
    );
    std::fs::write(&gate, "").unwrap();
    wait_log(&t, &agent, "the second turn's end", |ev| {
        ev.iter().filter(|e| e["type"] == event::TURN_END).count() == 2
    })
    .await;
    let ev = events(&t, &agent).await;
    let notice = ev
        .iter()
        .find(|e| {
            e["type"] == event::USER_MESSAGE
                && e["data"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("background job bash-1")
        })
        .expect("the notice was logged");
    assert_eq!(
        notice["data"]["content"][0]["text"],
        "background job bash-1 (bash: build it) finished [status: exited (code 0)]. Read its output with job_output."
    );
    assert_eq!(
        ev.iter().filter(|e| e["type"] == event::TURN_END).count(),
        2
    );
    let _ = std::fs::remove_file(&gate);
    t.shutdown().await;
}

/// How long a test waits for something the agent will do; generous, as
/// the machine may be loaded. Only a failure waits this long.
const DEADLINE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn cancel_kills_the_running_call_and_answers_the_unstarted_ones() {
    let (t, fake) = setup().await;
    let marker = format!("dsh-cancel-{}", dsh_sdk::new_id());
    let command = format!("exec -a {marker} sleep 30");
    fake.push([tool_calls(&[
        ("bash", json!({"command": command, "description": "wait"})),
        ("read", json!({"file_path": "/etc/hostname"})),
    ])]);
    let agent = new_agent(&t, "/tmp").await;
    t.call(
        service::AGENTS,
        agents::FOLLOWUP,
        json!({"agent": agent, "message": {"text": "go"}}),
    )
    .await;
    logged(&t, &agent, event::TOOL_CALL).await;
    let deadline = std::time::Instant::now() + DEADLINE;
    while dsh_testkit::processes_with(&marker).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never ran"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    t.call(service::AGENTS, agents::CANCEL, json!({"agent": agent}))
        .await;
    let reason = t
        .call(service::AGENTS, agents::WHEN_IDLE, json!({"agent": agent}))
        .await["reason"]
        .clone();
    assert_eq!(
        reason,
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    // The 30 s sleep was killed and reaped, not left to run out.
    let left = dsh_testkit::wait_gone(&marker, Duration::from_secs(10));
    assert!(
        left.is_empty(),
        "the cancelled command {left:?} was not killed"
    );
    let ev = events(&t, &agent).await;
    let results: Vec<&Value> = ev
        .iter()
        .filter(|e| e["type"] == event::TOOL_RESULT)
        .collect();
    assert_eq!(results.len(), 2, "every call is answered");
    assert_eq!(results[0]["data"]["error"]["code"], code::ABORTED);
    assert_eq!(
        results[0]["data"]["message"]["content"][0]["content"][0]["text"],
        "Error: tool call aborted"
    );
    assert_eq!(
        results[1]["data"]["error"]["code"],
        code::ABORTED_BEFORE_DISPATCH
    );
    assert_eq!(
        results[1]["data"]["message"]["content"][0]["content"][0]["text"],
        "Error: tool call aborted before dispatch"
    );
    let k = kinds(&ev);
    assert_eq!(&k[k.len() - 2..], [event::STEP_END, event::TURN_END]);
    t.shutdown().await;
}

#[tokio::test]
async fn replacing_the_agent_loop_mid_turn_ends_the_turn_and_keeps_the_log_consistent() {
    let (t, fake) = setup().await;
    let target = t.plugins.path().join("agent-loop.so");
    std::fs::copy(library("dsh-plugin-agent-loop"), &target).unwrap();
    t.host.reload(target.clone()).await;
    fake.push([Answer::Stall(vec![
        json!({"choices": [{"delta": {"content": "Halfway"}}]}).to_string(),
    ])]);
    let agent = new_agent(&t, "/tmp").await;
    t.call(
        service::AGENTS,
        agents::FOLLOWUP,
        json!({"agent": agent, "message": {"text": "go"}}),
    )
    .await;
    streamed_text(&t, &agent).await;
    let tmp = t.plugins.path().join("agent-loop.so.tmp");
    std::fs::copy(library("dsh-plugin-agent-loop"), &tmp).unwrap();
    std::fs::rename(&tmp, &target).unwrap();
    t.host.reload(target.clone()).await;
    let ev = events(&t, &agent).await;
    let end = ev
        .iter()
        .rev()
        .find(|e| e["type"] == event::TURN_END)
        .expect("the turn was closed");
    assert_eq!(
        end["data"]["reason"],
        json!({"kind": "aborted", "reason": {"kind": "disposed"}})
    );
    let m = ev
        .iter()
        .find(|e| e["type"] == event::ASSISTANT_MESSAGE)
        .unwrap();
    assert_eq!(m["data"]["interrupted"], true);
    // The new generation resumes and serves the next turn with the history.
    t.call(
        service::AGENT_LOOP,
        agent_loop::RESUME,
        json!({"sessionId": agent, "agentOptions": {"provider": "fake", "model": "m1"}}),
    )
    .await;
    fake.push([text("back")]);
    assert_eq!(
        turn(&t, &agent, "again").await,
        json!({"kind": "completed"})
    );
    let requests = fake.requests();
    let sent = requests.last().unwrap()["messages"].as_array().unwrap();
    assert!(
        sent.contains(&json!({"role": "assistant", "content": "Halfway"})),
        "the interrupted prefix is history: {sent:?}"
    );
    t.shutdown().await;
}
