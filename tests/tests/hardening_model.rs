//! Hardening of the model path, against the real host, real plugin builds
//! and the fake OpenAI-compatible server: an SSE line past the adapter's
//! cap, an `error` object inside a 200 stream, a model that calls tools
//! forever (the agent loop's step limit, in process and through headless),
//! tool calls streamed without an id, with an empty one or with the id of
//! another call of the same answer (issue 18, "Why" 5: the session must
//! still load), and an answer flooding reasoning past the adapter's
//! `maxAnswerBytes` (issue 18, "Why" 9: memory stays bounded). Then the
//! review of that cap: error bodies of gigabytes, error bodies that stall,
//! error messages of megabytes, answers of a thousand tool calls
//! (`maxToolCalls`), usage counts of `u64::MAX`, and a finish reason of
//! megabytes.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::path::Path;
use std::time::Duration;

use dsh_sdk::vocab::event;
use dsh_testkit::agent::{core_host, events, new_agent};
use dsh_testkit::fake_llm::{calls, text, tool_calls, Answer, FakeLlm};
use dsh_testkit::headless::{lines, Headless, KEY};
use dsh_testkit::measure::run_measured;
use dsh_testkit::{out, output, TempDir, TestHost};
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

/// The message of a turn that ended in error `code` (panics otherwise).
fn error_message<'a>(reason: &'a Value, code: &str) -> &'a str {
    assert_eq!(reason["kind"], "error", "{reason}");
    assert_eq!(reason["error"]["code"], code, "{reason}");
    reason["error"]["message"].as_str().unwrap()
}

/// [`core_host`] whose model adapter row also has `config` (`key = value`).
async fn core_host_with(config: &str) -> (TestHost, FakeLlm) {
    core_host(|rows| {
        let row = "streamIdleTimeoutMs = 1500 }";
        assert!(rows.contains(row), "{rows}");
        rows.replace(row, &format!("streamIdleTimeoutMs = 1500, {config} }}"))
    })
    .await
}

/// One turn of a new agent (in `/tmp`) with `prompt`, which must end in
/// MALFORMED_RESPONSE after a single request (that code is not retried);
/// the agent and the error's message.
async fn malformed_turn(t: &TestHost, fake: &FakeLlm, prompt: &str) -> (String, String) {
    let agent = new_agent(t, "/tmp").await;
    let reason = turn(t, &agent, prompt).await;
    let message = error_message(&reason, "MALFORMED_RESPONSE").to_owned();
    assert_eq!(
        fake.requests().len(),
        1,
        "MALFORMED_RESPONSE is not retried"
    );
    (agent, message)
}

/// Waits for the server to finish writing its first flood (the `what`),
/// and checks that the client hung up before all `payloads` went out.
async fn flood_cut_short(fake: &FakeLlm, payloads: usize, what: &str) {
    let written = tokio::time::timeout(DEADLINE, fake.floods_written(1))
        .await
        .unwrap_or_else(|_| panic!("the server finished the {what}"));
    assert!(
        !written[0].complete && written[0].payloads < payloads,
        "the client read the whole {what}: {written:?}"
    );
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
    let (agent, message) = malformed_turn(&t, &fake, "go").await;
    assert!(
        message.contains("SSE line") && message.contains("16 MiB (16777216 bytes)"),
        "{message}"
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
    let message = error_message(&r, "CONTEXT_WINDOW_EXCEEDED");
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

#[tokio::test]
async fn an_in_stream_rate_limit_beside_an_unreadable_field_is_still_retried() {
    // The error is read first: a field this adapter cannot read next to it
    // must not turn a retryable RATE_LIMIT into MALFORMED_RESPONSE.
    let (r, ev, fake) = one_turn(
        vec![
            Answer::Sse(vec![data(
                json!({"error": {"message": "Rate limit reached for requests",
                                 "code": "rate_limit_exceeded"},
                       "choices": [{"delta": {"content": 5}}]}),
            )]),
            text("recovered"),
        ],
        None,
    )
    .await;
    assert_eq!(r, json!({"kind": "completed"}), "{r}");
    assert_eq!(fake.requests().len(), 2, "retried once");
    let retry = ev
        .iter()
        .find(|e| e["type"] == event::LLM_RETRY)
        .expect("llm/retry logged");
    assert_eq!(retry["data"]["failure"]["code"], "RATE_LIMIT", "{retry}");
}

// ---------------------------------------------------------------------------
// Metadata of an odd shape after a complete answer.

#[tokio::test]
async fn odd_usage_after_a_complete_answer_keeps_the_answer_and_its_usage() {
    let (r, ev, fake) = one_turn(
        vec![Answer::Sse(vec![
            data(json!({"choices": [{"delta": {"content": "hi"}}]})),
            data(json!({"choices": [{"delta": {}, "finish_reason": "stop"}]})),
            data(
                json!({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                                 "completion_tokens_details": 5}}),
            ),
            Some("[DONE]".into()),
        ])],
        None,
    )
    .await;
    assert_eq!(r, json!({"kind": "completed"}), "{r}");
    assert_eq!(fake.requests().len(), 1, "nothing failed, nothing retried");
    let messages: Vec<&Value> = ev
        .iter()
        .filter(|e| e["type"] == event::ASSISTANT_MESSAGE)
        .collect();
    assert_eq!(messages.len(), 1, "{ev:?}");
    let data = &messages[0]["data"];
    assert_eq!(
        data["message"]["content"],
        json!([{"type": "text", "text": "hi"}])
    );
    assert_eq!(data["usage"], json!({"inputTokens": 1, "outputTokens": 1}));
}

#[tokio::test]
async fn odd_metadata_in_a_tool_call_answer_leaves_the_call_to_run() {
    // `index: null`, `choices: {}`, a finish reason of another type and a
    // usage with unknown nested fields: the call still runs, once.
    let read = json!({"index": null, "id": "c1", "function": {"name": "read",
                      "arguments": "{\"file_path\":\"a.txt\"}"}});
    let (r, ev, fake) = one_turn(
        vec![
            Answer::Sse(vec![
                data(json!({"choices": [{"delta": {"tool_calls": [read]}}]})),
                data(json!({"choices": {}})),
                data(json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]})),
                data(json!({"choices": [{"delta": {}, "finish_reason": 1}]})),
                data(
                    json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                    "prompt_tokens_details": {"cached_tokens": 1, "audio_tokens": {"in": [0]}},
                    "cost": {"usd": 0.1}}}),
                ),
                Some("[DONE]".into()),
            ]),
            text("done"),
        ],
        None,
    )
    .await;
    assert_eq!(r, json!({"kind": "completed"}), "{r}");
    assert_eq!(fake.requests().len(), 2, "the call's result went back once");
    assert_eq!(count(&ev, event::TOOL_CALL), 1);
    assert_eq!(count(&ev, event::TOOL_RESULT), 1);
    let first = ev
        .iter()
        .find(|e| e["type"] == event::ASSISTANT_MESSAGE)
        .unwrap();
    assert_eq!(
        first["data"]["usage"],
        json!({"inputTokens": 2, "outputTokens": 2, "cacheReadTokens": 1})
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
    let message = error_message(&reason, "STEP_LIMIT");
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
    assert_eq!(fake.requests().len(), MAX_STEPS + 1);
    assert_eq!(fake.tool_messages(MAX_STEPS).len(), MAX_STEPS);
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

// ---------------------------------------------------------------------------
// Tool-call ids the session log can load back.

/// `dsh-host sessions <args>` against the home and patch of `h`.
fn sessions_cmd(h: &Headless, args: &[&str]) -> (i32, String, String) {
    output(&mut h.sessions(args))
}

/// The records of type `kind` in the log at `file`.
fn records(file: &Path, kind: &str) -> Vec<Value> {
    lines(file)
        .into_iter()
        .filter(|r| r["type"] == kind)
        .collect()
}

/// The ids of the tool-call blocks of every stored assistant message.
fn stored_call_ids(file: &Path) -> Vec<String> {
    records(file, event::ASSISTANT_MESSAGE)
        .iter()
        .flat_map(|r| {
            r["data"]["message"]["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|b| b["type"] == "tool-call")
        .map(|b| b["id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// One answer calling `read` on `a.txt` whose first delta carries `id`
/// (`None`: no `id` field at all) and whose second delta (the rest of the
/// arguments, by index) carries none, as OpenAI-compatible servers stream.
fn read_call_with_id(id: Option<&str>) -> Answer {
    let mut first = json!({"index": 0, "type": "function",
                           "function": {"name": "read", "arguments": "{\"file_path\":"}});
    if let Some(id) = id {
        first["id"] = json!(id);
    }
    let rest = json!({"index": 0, "function": {"arguments": "\"a.txt\"}"}});
    Answer::Sse(vec![
        data(json!({"choices": [{"delta": {"tool_calls": [first]}}]})),
        data(json!({"choices": [{"delta": {"tool_calls": [rest]}}]})),
        data(json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]})),
        Some("[DONE]".into()),
    ])
}

/// The whole life of a session whose first answer calls `read` with the
/// first delta's `id` as given: the call runs, its result answers the id
/// the adapter gave it (said on stderr), and the stored session then
/// continues, resumes and shows. Returns the id the call was given.
async fn a_call_with_a_bad_id_runs_and_its_session_loads(id: Option<&str>) -> String {
    let fake = FakeLlm::start().await;
    let h = Headless::new(&fake, "");
    std::fs::write(h.work.path().join("a.txt"), "alpha\n").unwrap();
    fake.push([read_call_with_id(id), text("Read it.")]);
    let (code, stdout, stderr) = out(&h.run(&["read", "a.txt"]).await);
    assert_eq!((code, stdout.as_str()), (0, "Read it.\n"), "{stderr}");

    // One call, given a fresh non-empty id, used by the call, its result
    // and the history sent back to the model.
    let file = h.log_file();
    let ids = stored_call_ids(&file);
    assert_eq!(ids.len(), 1, "{ids:?}");
    let given = ids[0].clone();
    assert!(given.starts_with("call_") && given.len() > 5, "{given}");
    assert!(
        stderr.contains("tool call 0") && stderr.contains(&given),
        "the renaming is said in the log: {stderr}"
    );
    let calls = records(&file, event::TOOL_CALL);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["data"]["callId"], given.as_str());
    let results = records(&file, event::TOOL_RESULT);
    assert_eq!(results.len(), 1);
    let result = &results[0]["data"]["message"];
    assert_eq!(result["source"]["callId"], given.as_str());
    assert_eq!(result["content"][0]["toolCallId"], given.as_str());
    assert_eq!(result["content"][0]["isError"], false, "{result}");
    let requests = fake.requests();
    let sent: Vec<&Value> = requests[1]["messages"].as_array().unwrap().iter().collect();
    let assistant = sent.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(assistant["tool_calls"][0]["id"], given.as_str());
    assert_eq!(
        assistant["tool_calls"][0]["function"]["arguments"], "{\"file_path\":\"a.txt\"}",
        "the second delta joined the call by its index"
    );
    let tool = sent.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool["tool_call_id"], given.as_str());
    assert!(
        tool["content"].as_str().unwrap().contains("alpha"),
        "{tool}"
    );

    // The stored session loads: continue, resume and show.
    let session = lines(&file)[0]["id"].as_str().unwrap().to_owned();
    fake.push([text("Continued.")]);
    let (code, stdout, stderr) = out(&h.run(&["--continue", "next"]).await);
    assert_eq!((code, stdout.as_str()), (0, "Continued.\n"), "{stderr}");
    fake.push([text("Resumed.")]);
    let (code, stdout, stderr) = out(&h.run(&["--resume", &session, "again"]).await);
    assert_eq!((code, stdout.as_str()), (0, "Resumed.\n"), "{stderr}");
    let (code, shown, stderr) = sessions_cmd(&h, &["show", &session]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        shown.contains("tool call: read") && shown.contains("tool result:"),
        "{shown}"
    );
    assert!(shown.contains("assistant: Resumed."), "{shown}");
    // The resumed requests still pair the call with its result.
    let last = fake.tool_messages(fake.requests().len() - 1);
    let tool_ids: Vec<&Value> = last.iter().map(|m| &m["tool_call_id"]).collect();
    assert_eq!(tool_ids, [&json!(given)]);
    assert_eq!(h.session_files().len(), 1, "no other session was written");
    given
}

#[tokio::test]
async fn a_streamed_tool_call_without_an_id_runs_and_the_session_resumes() {
    a_call_with_a_bad_id_runs_and_its_session_loads(None).await;
}

#[tokio::test]
async fn a_streamed_tool_call_with_an_empty_id_runs_and_the_session_resumes() {
    a_call_with_a_bad_id_runs_and_its_session_loads(Some("")).await;
}

#[tokio::test]
async fn two_calls_with_one_id_in_an_answer_both_run_and_the_run_ends_normally() {
    let fake = FakeLlm::start().await;
    let h = Headless::new(&fake, "");
    std::fs::write(h.work.path().join("a.txt"), "alpha\n").unwrap();
    std::fs::write(h.work.path().join("b.txt"), "beta\n").unwrap();
    fake.push([
        calls(&[
            ("call_0", "read", json!({"file_path": "a.txt"})),
            ("call_0", "read", json!({"file_path": "b.txt"})),
        ]),
        text("Read both."),
    ]);
    let (code, stdout, stderr) = out(&h.run(&["read", "both"]).await);
    assert_eq!((code, stdout.as_str()), (0, "Read both.\n"), "{stderr}");

    // The first keeps its id, the second gets its own; each result answers
    // its call, in the log and in what the model was sent.
    let file = h.log_file();
    let ids = stored_call_ids(&file);
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_eq!(ids[0], "call_0");
    assert!(ids[1].starts_with("call_") && ids[1] != "call_0", "{ids:?}");
    assert!(
        stderr.contains("call_0") && stderr.contains(&ids[1]),
        "the renaming is said in the log: {stderr}"
    );
    let results: Vec<(String, String)> = records(&file, event::TOOL_RESULT)
        .iter()
        .map(|r| {
            let m = &r["data"]["message"];
            let text = m["content"][0]["content"][0]["text"]
                .as_str()
                .unwrap_or_default();
            (
                m["source"]["callId"].as_str().unwrap().to_owned(),
                text.to_owned(),
            )
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0].0, ids[0]);
    assert!(results[0].1.contains("alpha"), "{results:?}");
    assert_eq!(results[1].0, ids[1]);
    assert!(results[1].1.contains("beta"), "{results:?}");
    let tool_ids: Vec<String> = fake
        .tool_messages(1)
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(tool_ids, ids);
    let ends = records(&file, event::TURN_END);
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["data"]["reason"], json!({"kind": "completed"}));

    // And the session loads.
    fake.push([text("Continued.")]);
    let (code, stdout, stderr) = out(&h.run(&["--continue", "next"]).await);
    assert_eq!((code, stdout.as_str()), (0, "Continued.\n"), "{stderr}");
}

// ---------------------------------------------------------------------------
// The cap on one answer's size.

/// The `maxAnswerBytes` the flood test configures.
const ANSWER_CAP: usize = 1024 * 1024;
/// The reasoning each flood delta carries.
const FLOOD_DELTA: usize = 256 * 1024;
/// How many deltas the flood sends: 64 MiB, far past the cap.
const FLOOD_DELTAS: usize = 256;

#[tokio::test]
async fn a_flood_of_one_byte_deltas_is_capped_by_its_count_too() {
    // Each delta counts 32 bytes more than its text: 65,536 deltas of one
    // byte (exactly the cap in text alone) must fail long before the end.
    let cap = 64 * 1024;
    let deltas = cap;
    let (t, fake) = core_host_with(&format!("maxAnswerBytes = {cap}")).await;
    let delta = json!({"choices": [{"delta": {"reasoning_content": "r"}}]});
    fake.push([Answer::Flood(delta.to_string(), deltas)]);
    let (agent, message) = malformed_turn(&t, &fake, "think").await;
    assert!(
        message.contains("maxAnswerBytes") && message.contains("65536 bytes"),
        "{message}"
    );
    let ev = events(&t, &agent).await;
    let logged = ev
        .iter()
        .filter(|e| e["data"]["chunk"]["type"] == "reasoning-delta")
        .count();
    assert!(
        logged > 0 && logged <= cap / 33,
        "{logged} one-byte deltas were logged under a cap of {cap} bytes"
    );
    assert_eq!(count(&ev, event::ASSISTANT_MESSAGE), 0);
    t.shutdown().await;
}

/// Runs `args` through `h`, measured: exit code, peak RSS (KiB), stderr.
async fn measured(h: &Headless, args: &[&str]) -> (Option<i32>, i64, String) {
    let run = run_measured(h.command(args)).await;
    (run.code, i64::try_from(run.peak_kib).unwrap(), run.stderr)
}

#[tokio::test]
async fn a_reasoning_flood_past_max_answer_bytes_fails_malformed_with_bounded_memory() {
    let fake = FakeLlm::start().await;
    // A later patch of the adapter replaces its whole config: restate the
    // route to the fake server with the small cap.
    let h = Headless::new(
        &fake,
        &format!(
            "[[patch]]\nid = \"llm-deepseek\"\nconfig = {{ baseUrl = \"{}\", apiKeyEnv = \"{KEY}\", maxAnswerBytes = {ANSWER_CAP} }}\n",
            fake.base_url
        ),
    );
    // The same host on an ordinary answer: the baseline of its peak memory.
    fake.push([text("Fine.")]);
    let (code, baseline_kib, stderr) = measured(&h, &["warm", "up"]).await;
    assert_eq!(code, Some(0), "{stderr}");

    let delta = json!({"choices": [{"delta": {"reasoning_content": "r".repeat(FLOOD_DELTA)}}]});
    fake.push([Answer::Flood(delta.to_string(), FLOOD_DELTAS)]);
    let (code, flood_kib, stderr) = measured(&h, &["think", "hard"]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.starts_with("dsh: MALFORMED_RESPONSE: "), "{stderr}");
    assert!(
        stderr.contains("maxAnswerBytes")
            && stderr.contains("1 MiB (1048576 bytes)")
            && stderr.contains("llm-deepseek config"),
        "{stderr}"
    );
    // The adapter stopped reading: the server could not write the flood.
    flood_cut_short(&fake, FLOOD_DELTAS, "flood").await;
    // Memory grew by a few times the cap at most, nowhere near the flood
    // (64 MiB; read whole, the host holds several copies of it).
    let flood_kib_total = (FLOOD_DELTA * FLOOD_DELTAS / 1024) as i64;
    let grown = flood_kib - baseline_kib;
    assert!(
        grown < flood_kib_total / 4,
        "peak RSS grew by {grown} KiB (baseline {baseline_kib} KiB) for a {flood_kib_total} KiB flood"
    );
    eprintln!("peak RSS: baseline {baseline_kib} KiB, flood {flood_kib} KiB (+{grown} KiB)");

    // The log holds the failure as the step's end and the session loads.
    let file = h
        .session_files()
        .into_iter()
        .find(|f| {
            lines(f)
                .iter()
                .any(|r| r["type"] == event::TURN_END && r["data"]["reason"]["kind"] == "error")
        })
        .expect("the flood's session");
    let ends = records(&file, event::TURN_END);
    assert_eq!(ends.len(), 1);
    assert_eq!(
        ends[0]["data"]["reason"]["error"]["code"],
        "MALFORMED_RESPONSE"
    );
    assert_eq!(records(&file, event::ASSISTANT_MESSAGE).len(), 0);
    let session = lines(&file)[0]["id"].as_str().unwrap().to_owned();
    let (code, _, stderr) = sessions_cmd(&h, &["show", &session]);
    assert_eq!(code, 0, "{stderr}");
}

// ---------------------------------------------------------------------------
// Error bodies and messages: read with bounds, cut when long.

/// Runs `args` through `h` in the background, bounded by [`DEADLINE`]:
/// a run that does not end by then is killed and the test fails.
async fn run_bounded(h: &Headless, args: &[&str]) -> (i32, String, String) {
    let running = h.spawn(args);
    let pid = running.pid();
    match tokio::time::timeout(DEADLINE, running.output()).await {
        Ok(o) => out(&o),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
            panic!("dsh-host {args:?} did not end within {DEADLINE:?}");
        }
    }
}

/// The most stderr a failed run may print: the error line, a few log
/// lines, never the server's megabytes.
const STDERR_BOUND: usize = 8 * 1024;

/// Runs `go`, which must fail (exit 1) with less than [`STDERR_BOUND`]
/// bytes of stderr; returns that stderr.
async fn fails_with_short_stderr(h: &Headless) -> String {
    let (code, _, stderr) = run_bounded(h, &["go"]).await;
    assert_eq!(code, 1);
    assert!(
        stderr.len() < STDERR_BOUND,
        "{} bytes of stderr",
        stderr.len()
    );
    stderr
}

#[tokio::test]
async fn an_error_body_of_hundreds_of_mib_is_read_only_to_64_kib() {
    // The review sent 1,500 MiB (3.15 GB RSS); 256 MiB tells as well.
    let mib = 256;
    let fake = FakeLlm::start().await;
    let h = Headless::new(&fake, "");
    fake.push([Answer::StatusFlood(500, mib)]);
    let (code, stdout, stderr) = run_bounded(&h, &["go"]).await;
    assert_eq!(
        (code, stdout.as_str()),
        (1, ""),
        "{}",
        &stderr[..stderr.len().min(2000)]
    );
    assert!(
        stderr.len() < STDERR_BOUND,
        "{} bytes of stderr",
        stderr.len()
    );
    assert!(stderr.starts_with("dsh: SERVER: HTTP 500: "), "{stderr}");
    assert!(
        stderr.contains("the body was longer than 65536 bytes; the rest was not read"),
        "{stderr}"
    );
    // The adapter hung up: the server could not write the body.
    flood_cut_short(&fake, mib, "error body").await;
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn an_error_body_that_stalls_fails_within_the_idle_timeout() {
    // `content-length: 100`, one byte, then nothing for an hour.
    let idle_ms = 1000;
    let fake = FakeLlm::start().await;
    let h = Headless::with_stream_idle(&fake, idle_ms, "");
    fake.push([Answer::StatusStall(500, "{".into(), 100)]);
    let (code, stdout, stderr) = run_bounded(&h, &["go"]).await;
    assert_eq!((code, stdout.as_str()), (1, ""), "{stderr}");
    assert!(stderr.starts_with("dsh: SERVER: HTTP 500: {"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the body was not complete after {idle_ms} ms (1 bytes read)"
        )),
        "{stderr}"
    );
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn an_error_message_of_megabytes_is_cut() {
    let fake = FakeLlm::start().await;
    let h = Headless::new(&fake, "");
    // An HTTP error whose JSON message is 5 MB: read to 64 KiB only.
    let body = json!({"error": {"message": "M".repeat(5_000_000), "code": "x"}}).to_string();
    fake.push([Answer::Status(400, vec![], body)]);
    let stderr = fails_with_short_stderr(&h).await;
    assert!(
        stderr.starts_with("dsh: INVALID_REQUEST: HTTP 400: "),
        "{stderr}"
    );
    assert!(stderr.contains("the rest was not read"), "{stderr}");

    // A message that fits the body read but not a failure: cut to 2,000
    // characters, saying so; in an HTTP error and inside a 200 stream.
    let long = "M".repeat(50_000);
    let body = json!({"error": {"message": long, "code": "x"}}).to_string();
    fake.push([
        Answer::Status(400, vec![], body),
        Answer::Sse(vec![data(
            json!({"error": {"message": long, "code": "context_length_exceeded"}}),
        )]),
    ]);
    for want in [
        "dsh: INVALID_REQUEST: HTTP 400: ",
        "dsh: CONTEXT_WINDOW_EXCEEDED: ",
    ] {
        let stderr = fails_with_short_stderr(&h).await;
        assert!(stderr.starts_with(want), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "{}… (cut: the message was 50000 bytes)",
                "M".repeat(100)
            )),
            "{stderr}"
        );
    }
}

// ---------------------------------------------------------------------------
// The cap on one answer's tool calls.

#[tokio::test]
async fn an_answer_with_more_tool_calls_than_max_tool_calls_fails_malformed() {
    // The review sent 100,000 empty calls (2.7 GB); 1,000 against a cap of
    // 8 tell the same.
    let cap = 8;
    let total = 1000;
    let (t, fake) = core_host_with(&format!("maxToolCalls = {cap}")).await;
    let calls: Vec<Value> = (0..total)
        .map(|i| json!({"index": i, "id": format!("c{i}"), "function": {"name": "x", "arguments": ""}}))
        .collect();
    let mut stream: Vec<Option<String>> = calls
        .chunks(100)
        .map(|c| data(json!({"choices": [{"delta": {"tool_calls": c}}]})))
        .collect();
    stream.push(data(
        json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
    ));
    stream.push(Some("[DONE]".into()));
    fake.push([Answer::Sse(stream)]);
    let (agent, message) = malformed_turn(&t, &fake, "call everything").await;
    assert!(
        message.contains(&format!("more than {cap} tool calls in one answer"))
            && message.contains("raise `maxToolCalls`"),
        "{message}"
    );
    // Nothing of the answer ran or was kept: no call, no message.
    let ev = events(&t, &agent).await;
    assert_eq!(count(&ev, event::TOOL_CALL), 0);
    assert_eq!(count(&ev, event::ASSISTANT_MESSAGE), 0);
    t.shutdown().await;
}

// ---------------------------------------------------------------------------
// Usage counts a server made up.

/// `prompt_tokens` and `completion_tokens` of `u64::MAX`.
fn absurd_usage() -> Option<String> {
    data(
        json!({"choices": [], "usage": {"prompt_tokens": u64::MAX, "completion_tokens": u64::MAX}}),
    )
}

#[tokio::test]
async fn usage_of_u64_max_on_two_answers_ends_the_run_normally() {
    let fake = FakeLlm::start().await;
    let h = Headless::new(&fake, "");
    let glob = json!({"index": 0, "id": "c1", "function": {"name": "glob", "arguments": "{\"pattern\":\"*.nothing\"}"}});
    fake.push([
        Answer::Sse(vec![
            data(json!({"choices": [{"delta": {"tool_calls": [glob]}}]})),
            data(json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]})),
            absurd_usage(),
            Some("[DONE]".into()),
        ]),
        Answer::Sse(vec![
            data(json!({"choices": [{"delta": {"content": "hi"}}]})),
            data(json!({"choices": [{"delta": {}, "finish_reason": "stop"}]})),
            absurd_usage(),
            Some("[DONE]".into()),
        ]),
    ]);
    fake.set_fallback(text("more"));
    let (code, stdout, stderr) = run_bounded(&h, &["--output", "jsonl", "go"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("PANIC"), "{stderr}");
    // The counts were clamped to 2^53 - 1 where the adapter read them, and
    // the run's totals add them without overflow.
    let max = (1u64 << 53) - 1;
    let result = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["type"] == "result")
        .unwrap_or_else(|| panic!("no result line: {stdout}"));
    assert_eq!(result["reason"], json!({"kind": "completed"}), "{result}");
    assert_eq!(result["output"], "hi", "{result}");
    assert_eq!(
        result["usage"],
        json!({"inputTokens": 2 * max, "outputTokens": 2 * max}),
        "{result}"
    );
    let stored: Vec<Value> = records(&h.log_file(), event::ASSISTANT_MESSAGE)
        .iter()
        .map(|r| r["data"]["usage"].clone())
        .collect();
    assert_eq!(
        stored,
        vec![json!({"inputTokens": max, "outputTokens": max}); 2]
    );
}

// ---------------------------------------------------------------------------
// A finish reason of megabytes.

#[tokio::test]
async fn a_finish_reason_of_megabytes_is_cut_and_escaped() {
    let fake = FakeLlm::start().await;
    let h = Headless::new(&fake, "");
    let reason = format!("\u{1b}]52;c;aGVsbG8=\u{7}{}", "F".repeat(5_000_000));
    fake.push([Answer::Sse(vec![
        data(json!({"choices": [{"delta": {"content": "hi"}}]})),
        data(json!({"choices": [{"delta": {}, "finish_reason": reason}]})),
        Some("[DONE]".into()),
    ])]);
    let (code, _, stderr) = run_bounded(&h, &["go"]).await;
    assert_eq!(code, 1, "{}", &stderr[..stderr.len().min(2000)]);
    assert!(
        stderr.len() < STDERR_BOUND,
        "{} bytes of stderr",
        stderr.len()
    );
    assert!(
        stderr.contains("the model stopped: \"\\u{1b}]52;c;aGVsbG8=\\u{7}FFF")
            && stderr.contains("… (cut: 5000016 bytes in all)"),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "no raw escape: {stderr}");
}
