//! Hardening of the model path, against the real host, real plugin builds
//! and the fake OpenAI-compatible server: an SSE line past the adapter's
//! cap, an `error` object inside a 200 stream, and a model that calls tools
//! forever (the agent loop's step limit, in process and through headless).

use std::time::Duration;

use dsh_sdk::vocab::event;
use dsh_testkit::agent::{core_host, events, new_agent};
use dsh_testkit::fake_llm::{text, tool_calls, Answer, FakeLlm};
use dsh_testkit::headless::{lines, Headless};
use dsh_testkit::{out, TempDir, TestHost};
use serde_json::{json, Value};

/// The adapter's default cap on one SSE line (`sse::MAX_LINE_BYTES`).
const SSE_CAP: usize = 16 * 1024 * 1024;
/// The step limit the step-limit tests configure.
const MAX_STEPS: usize = 3;
/// A generous bound for waits that should end at once.
const DEADLINE: Duration = Duration::from_secs(60);

/// Runs one turn with `prompt`; returns its end reason.
async fn turn(t: &TestHost, agent: &str, prompt: &str) -> Value {
    let turn = dsh_testkit::agent::turn(t, agent, prompt);
    tokio::time::timeout(DEADLINE, turn)
        .await
        .expect("the turn ended")
}

fn count(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

/// One turn against `answers` (and `fallback` once they run out).
async fn one_turn(answers: Vec<Answer>, fallback: Option<Answer>) -> (Value, Vec<Value>, FakeLlm) {
    let (t, fake) = core_host(|rows| rows).await;
    fake.push(answers);
    if let Some(f) = fallback {
        fake.set_fallback(f);
    }
    let agent = new_agent(&t, "/tmp").await;
    let reason = turn(&t, &agent, "go").await;
    let ev = events(&t, &agent).await;
    t.shutdown().await;
    (reason, ev, fake)
}

fn data(v: Value) -> Option<String> {
    Some(v.to_string())
}

// ---------------------------------------------------------------------------
// The SSE line cap.

#[tokio::test]
async fn an_sse_line_past_the_cap_fails_malformed_before_the_line_ends() {
    // 64 MiB: four times the cap, so a client that buffers whole lines
    // would read all of it before failing (or not fail at all).
    let line = 4 * SSE_CAP;
    let (t, fake) = core_host(|rows| rows).await;
    fake.push([Answer::LongLine(line)]);
    let agent = new_agent(&t, "/tmp").await;
    let reason = turn(&t, &agent, "go").await;
    assert_eq!(reason["kind"], "error", "{reason}");
    assert_eq!(reason["error"]["code"], "MALFORMED_RESPONSE", "{reason}");
    let message = reason["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("SSE line") && message.contains("16 MiB (16777216 bytes)"),
        "{message}"
    );
    assert_eq!(
        fake.requests().len(),
        1,
        "MALFORMED_RESPONSE is not retried"
    );
    // The adapter hung up mid-line: the rest of the line was never sent.
    let written = tokio::time::timeout(DEADLINE, fake.long_lines_written(1))
        .await
        .expect("the server finished the long line");
    assert!(
        !written[0].complete && written[0].bytes < line,
        "the client read the whole line: {written:?}"
    );
    // The failure is logged as the step's finish chunk; no assistant text.
    let ev = events(&t, &agent).await;
    let chunks: Vec<&Value> = ev
        .iter()
        .filter(|e| e["type"] == event::ASSISTANT_CHUNK)
        .collect();
    assert_eq!(chunks.len(), 1, "{chunks:?}");
    assert_eq!(chunks[0]["data"]["chunk"]["type"], "finish");
    assert_eq!(count(&ev, event::ASSISTANT_MESSAGE), 0);
    t.shutdown().await;
}

#[tokio::test]
async fn a_line_under_the_cap_still_streams() {
    // A 1 MiB delta (one line) is ordinary and must pass untouched.
    let big = "b".repeat(1024 * 1024);
    let (r, ev, _) = one_turn(
        vec![Answer::Sse(vec![
            data(json!({"choices": [{"delta": {"content": big}}]})),
            data(json!({"choices": [{"delta": {}, "finish_reason": "stop"}]})),
            Some("[DONE]".into()),
        ])],
        None,
    )
    .await;
    assert_eq!(r, json!({"kind": "completed"}));
    let m = ev
        .iter()
        .find(|e| e["type"] == event::ASSISTANT_MESSAGE)
        .unwrap();
    assert_eq!(
        m["data"]["message"]["content"][0]["text"]
            .as_str()
            .map(str::len),
        Some(big.len())
    );
}

// ---------------------------------------------------------------------------
// An `error` object inside the stream.

fn stream_error(message: &str, code: &str, kind: &str) -> Option<String> {
    data(json!({"error": {"message": message, "code": code, "type": kind}}))
}

#[tokio::test]
async fn an_in_stream_context_error_keeps_its_message_and_maps_its_code() {
    let server =
        "This model's maximum context length is 65536 tokens. However, you requested 70000 tokens.";
    // Text before the error, and a [DONE] after it, as some servers send:
    // neither may turn the failure into a completed (or empty) answer.
    let (r, ev, fake) = one_turn(
        vec![Answer::Sse(vec![
            data(json!({"choices": [{"delta": {"content": "partial"}}]})),
            stream_error(server, "context_length_exceeded", "invalid_request_error"),
            Some("[DONE]".into()),
        ])],
        None,
    )
    .await;
    assert_eq!(r["kind"], "error", "{r}");
    assert_eq!(r["error"]["code"], "CONTEXT_WINDOW_EXCEEDED", "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(server) && message.contains("context_length_exceeded"),
        "{message}"
    );
    assert_eq!(
        fake.requests().len(),
        1,
        "a context overflow is not retried"
    );
    assert_eq!(count(&ev, event::ASSISTANT_MESSAGE), 0);
}

#[tokio::test]
async fn an_unknown_in_stream_error_is_a_server_failure_naming_the_servers_code() {
    let answer = Answer::Sse(vec![stream_error(
        "upstream worker crashed",
        "weird_upstream_failure",
        "api_error",
    )]);
    // SERVER is retryable: every attempt gets the same error.
    let (r, _, fake) = one_turn(vec![], Some(answer)).await;
    assert_eq!(r["error"]["code"], "SERVER", "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("upstream worker crashed")
            && message.contains("weird_upstream_failure")
            && message.contains("api_error"),
        "{message}"
    );
    assert_eq!(fake.requests().len(), 6, "retried like any SERVER failure");
}

#[tokio::test]
async fn an_in_stream_rate_limit_is_retried_as_a_rate_limit() {
    let (r, ev, fake) = one_turn(
        vec![
            Answer::Sse(vec![stream_error(
                "Rate limit reached for requests",
                "rate_limit_exceeded",
                "requests",
            )]),
            text("recovered"),
        ],
        None,
    )
    .await;
    assert_eq!(r, json!({"kind": "completed"}));
    assert_eq!(fake.requests().len(), 2);
    let retry = ev
        .iter()
        .find(|e| e["type"] == event::LLM_RETRY)
        .expect("llm/retry logged");
    let failure = &retry["data"]["failure"];
    assert_eq!(failure["code"], "RATE_LIMIT", "{failure}");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("Rate limit reached for requests"),
        "{failure}"
    );
}

// ---------------------------------------------------------------------------
// The step limit.

fn with_max_steps(rows: String, max: usize) -> String {
    let row = "plugin = \"agent-loop\"\n";
    assert!(rows.contains(row), "{rows}");
    rows.replace(
        row,
        &format!("{row}config = {{ maxStepsPerTurn = {max} }}\n"),
    )
}

fn always_reads() -> Answer {
    tool_calls(&[("read", json!({"file_path": "a.txt"}))])
}

#[tokio::test]
async fn a_model_that_always_calls_tools_is_stopped_at_max_steps_per_turn() {
    let (t, fake) = core_host(|rows| with_max_steps(rows, MAX_STEPS)).await;
    let dir = TempDir::new("hardening-steps");
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    fake.set_fallback(always_reads());
    let agent = new_agent(&t, &dir.path().display().to_string()).await;

    let reason = turn(&t, &agent, "loop forever").await;
    assert_eq!(reason["kind"], "error", "{reason}");
    assert_eq!(reason["error"]["code"], "STEP_LIMIT", "{reason}");
    let message = reason["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("limit of {MAX_STEPS} steps"))
            && message.contains("maxStepsPerTurn"),
        "{message}"
    );
    assert_eq!(
        fake.requests().len(),
        MAX_STEPS,
        "one model request per step"
    );

    // A balanced log: every step closed, every call answered, then turn/end
    // with the same reason.
    let ev = events(&t, &agent).await;
    assert_eq!(count(&ev, event::STEP_START), MAX_STEPS);
    assert_eq!(count(&ev, event::STEP_END), MAX_STEPS);
    assert_eq!(count(&ev, event::TOOL_CALL), MAX_STEPS);
    assert_eq!(count(&ev, event::TOOL_RESULT), MAX_STEPS);
    let last: Vec<&Value> = ev.iter().rev().take(2).collect();
    assert_eq!(last[1]["type"], event::STEP_END);
    assert_eq!(last[0]["type"], event::TURN_END);
    assert_eq!(last[0]["data"], json!({"turn": 1, "reason": reason}));

    // The loop keeps serving: the next turn sees the whole history.
    fake.push([text("Stopping now.")]);
    assert_eq!(turn(&t, &agent, "stop").await, json!({"kind": "completed"}));
    let requests = fake.requests();
    assert_eq!(requests.len(), MAX_STEPS + 1);
    let tool_messages = requests[MAX_STEPS]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .count();
    assert_eq!(tool_messages, MAX_STEPS);
    t.shutdown().await;
}

// ---------------------------------------------------------------------------
// Headless reports the step limit.

/// A `$DSH_HOME` whose patch points the adapter at `fake`, turns retries
/// off and limits turns to `max_steps`.
fn headless(fake: &FakeLlm, max_steps: usize) -> Headless {
    Headless::with_stream_idle(
        fake,
        20_000,
        &format!("[[patch]]\nid = \"agent-loop\"\nconfig = {{ maxStepsPerTurn = {max_steps} }}\n"),
    )
}

#[tokio::test]
async fn headless_exits_1_with_the_step_limit_on_stderr_and_the_log_resumes() {
    let max = 2;
    let fake = FakeLlm::start().await;
    fake.set_fallback(always_reads());
    let h = headless(&fake, max);
    std::fs::write(h.work.path().join("a.txt"), "alpha\n").unwrap();

    let (code, stdout, stderr) = out(&h.run(&["loop", "forever"]).await);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.starts_with("dsh: STEP_LIMIT: "), "{stderr}");
    assert!(
        stderr.contains(&format!("limit of {max} steps")) && stderr.contains("maxStepsPerTurn"),
        "{stderr}"
    );
    assert_eq!(fake.requests().len(), max);

    // The stored log is balanced: it resumes without repair and continues.
    fake.push([text("Resumed.")]);
    let file = h.log_file();
    let id = lines(&file)[0]["id"].as_str().unwrap().to_owned();
    let (code, stdout, stderr) = out(&h.run(&["--resume", &id, "stop"]).await);
    assert_eq!((code, stdout.as_str()), (0, "Resumed.\n"), "{stderr}");
    let ends: Vec<Value> = lines(&file)
        .into_iter()
        .filter(|r| r["type"] == event::TURN_END)
        .map(|r| r["data"]["reason"].clone())
        .collect();
    assert_eq!(
        ends.len(),
        2,
        "no repair closed an interrupted turn: {ends:?}"
    );
    assert_eq!(ends[0]["error"]["code"], "STEP_LIMIT");
    assert_eq!(ends[1], json!({"kind": "completed"}));
}
