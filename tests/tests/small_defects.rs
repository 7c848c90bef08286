//! The smaller defects found against a real llama.cpp server (issue 20):
//! what the chat and headless say about retries, the usage of the JSONL
//! result line, a partial answer a retry throws away, and a command's
//! output while an answer streams. The chat is driven through a real
//! pseudo-terminal, headless as the real `dsh-host`, both against the fake
//! model server. (The token estimate's defect is tested where it lives,
//! `sdk/src/vocab/tokens.rs`.)
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

#[allow(dead_code)] // the pty kit; this suite uses part of it
mod support;

use dsh_testkit::fake_llm::{text, Answer, FakeLlm, Gate};
use dsh_testkit::headless::Headless;
use dsh_testkit::out;
use serde_json::{json, Value};
use support::pty::Pty;

/// Two retries, 1 ms apart (the kit's row has none).
const RETRIES: &str = "[[patch]]\nid = \"llm-retry\"\n\
    config = { maxRetries = 2, initialDelayMs = 1, maxDelayMs = 1, jitterRatio = 0.0 }\n";

/// llama.cpp's answer while it loads the model.
fn loading() -> Answer {
    Answer::Status(
        503,
        vec![],
        r#"{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#.into(),
    )
}

/// A 401 (not retried).
fn bad_key() -> Answer {
    Answer::Status(401, vec![], r#"{"error":{"message":"invalid key"}}"#.into())
}

/// A text delta's `data:` payload.
fn delta(text: &str) -> String {
    json!({"choices": [{"delta": {"content": text}}]}).to_string()
}

/// The screen's rows that hold `text`.
fn rows_with<'a>(screen: &'a str, text: &str) -> Vec<&'a str> {
    screen.lines().filter(|l| l.contains(text)).collect()
}

/// The row after the first row that holds `text`.
fn row_after<'a>(screen: &'a str, text: &str) -> &'a str {
    let rows: Vec<&str> = screen.lines().collect();
    let at = rows
        .iter()
        .position(|l| l.contains(text))
        .unwrap_or_else(|| panic!("{text:?} not on the screen:\n{screen}"));
    rows.get(at + 1).copied().unwrap_or_default()
}

// ---------------------------------------------------------------------------
// 1. The chat's retry line names the failure's code (it said `error`).

#[tokio::test]
async fn the_chat_retry_line_names_the_failures_code_and_message() {
    let fake = FakeLlm::start().await;
    fake.push([loading(), text("Ready now.")]);
    let e = Headless::new(&fake, RETRIES);
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send("hi\r");
    p.wait_for("Ready now.", 20).await;
    let screen = p.contents();
    let lines = rows_with(&screen, "retrying the model request");
    assert_eq!(lines.len(), 1, "{screen}");
    assert_eq!(
        lines[0].trim(),
        "retrying the model request (retry 1 of 2) in 1 ms: SERVER: HTTP 503: Loading model",
        "{screen}"
    );
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
}

// ---------------------------------------------------------------------------
// 2. The JSONL result line keeps the cache reads (1 input token was
//    reported for a 57-token prompt of which the server had 56 cached).

#[tokio::test]
async fn the_jsonl_result_line_counts_the_cache_reads_llama_cpp_reports() {
    let fake = FakeLlm::start().await;
    // llama.cpp's last chunk: the finish, the usage with the cached part of
    // the prompt under `prompt_tokens_details`, and its timings.
    fake.push([Answer::Sse(vec![
        Some(delta("Hi.")),
        Some(
            json!({"choices": [{"finish_reason": "stop", "index": 0, "delta": {}}],
                "object": "chat.completion.chunk",
                "usage": {"completion_tokens": 3, "prompt_tokens": 57, "total_tokens": 60,
                    "prompt_tokens_details": {"cached_tokens": 56}},
                "timings": {"cache_n": 56, "prompt_n": 1, "predicted_n": 3}})
            .to_string(),
        ),
        Some("[DONE]".into()),
    ])]);
    let e = Headless::new(&fake, "");
    let (code, stdout, stderr) = out(&e.run(&["--output", "jsonl", "hello"]).await);
    assert_eq!(code, 0, "{stderr}");
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "result", "{last}");
    // The original's result line: `TokenUsage` summed, its optional
    // buckets present when a step reported them.
    assert_eq!(
        last["usage"],
        json!({"inputTokens": 1, "outputTokens": 3, "cacheReadTokens": 56})
    );
}

// ---------------------------------------------------------------------------
// 3. A turn that fails after retries says the first cause too.

#[tokio::test]
async fn headless_failing_after_retries_names_the_first_cause() {
    let fake = FakeLlm::start().await;
    fake.push([loading(), loading(), bad_key()]);
    let e = Headless::new(&fake, RETRIES);
    let (code, stdout, stderr) = out(&e.run(&["hello"]).await);
    assert_eq!((code, stdout.as_str()), (1, ""), "{stderr}");
    assert_eq!(fake.requests().len(), 3);
    assert_eq!(
        stderr.lines().last(),
        Some(
            "dsh: AUTH: HTTP 401: invalid key (after 2 retries; first: SERVER: HTTP 503: Loading model)"
        ),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_chat_failing_after_retries_names_the_first_cause() {
    let fake = FakeLlm::start().await;
    fake.push([loading(), bad_key(), text("Back.")]);
    let e = Headless::new(&fake, RETRIES);
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send("hi\r");
    p.wait_for("✗ AUTH", 20).await;
    let screen = p.contents();
    assert_eq!(
        rows_with(&screen, "✗ AUTH")[0].trim(),
        "✗ AUTH: HTTP 401: invalid key (after 1 retry; first: SERVER: HTTP 503: Loading model)",
        "{screen}"
    );
    // The next turn's failure or answer stands alone.
    p.wait_idle(20).await;
    p.send("again\r");
    p.wait_for("Back.", 20).await;
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
}

// ---------------------------------------------------------------------------
// 4. Headless says each retry on stderr (it was silent for 15 s), never on
//    stdout.

#[tokio::test]
async fn headless_says_each_retry_on_stderr_and_keeps_stdout_for_the_answer() {
    let fake = FakeLlm::start().await;
    fake.push([loading(), loading(), text("Ready now.")]);
    let e = Headless::new(&fake, RETRIES);
    let (code, stdout, stderr) = out(&e.run(&["hello"]).await);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "Ready now.\n");
    assert_eq!(
        stderr,
        "dsh: retrying the model request (retry 1 of 2) in 1 ms: SERVER: HTTP 503: Loading model\n\
         dsh: retrying the model request (retry 2 of 2) in 1 ms: SERVER: HTTP 503: Loading model\n"
    );
    // With --output jsonl stdout stays JSON lines (the retries are in it
    // as the session's `llm/retry` events, as logged).
    fake.push([loading(), text("Ready again.")]);
    let (code, stdout, stderr) = out(&e.run(&["--output", "jsonl", "again"]).await);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("dsh: retrying the model request (retry 1 of 2)"));
    for line in stdout.lines() {
        let row: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            row["type"] == "session_event" || row["type"] == "result",
            "{line}"
        );
    }
}

// ---------------------------------------------------------------------------
// 5. A partial answer a retry throws away is marked on the chat screen.

#[tokio::test]
async fn the_chat_marks_a_partial_answer_a_retry_discards() {
    let fake = FakeLlm::start().await;
    let rate_limited = json!({"error": {"message": "Rate limit reached",
        "code": "rate_limit_exceeded", "type": "requests"}});
    fake.push([
        Answer::Sse(vec![
            Some(delta("The partial answer")),
            Some(rate_limited.to_string()),
        ]),
        text("The full answer."),
    ]);
    let e = Headless::new(&fake, RETRIES);
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send("hi\r");
    p.wait_for("The full answer.", 20).await;
    let screen = p.contents();
    assert_eq!(
        row_after(&screen, "The partial answer").trim(),
        "(discarded: retrying after RATE_LIMIT)",
        "{screen}"
    );
    // The answer kept is not marked.
    assert_eq!(rows_with(&screen, "discarded").len(), 1, "{screen}");
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
}

// ---------------------------------------------------------------------------
// 6. `/status` typed while an answer streams prints above it, not inside.

#[tokio::test]
async fn a_command_typed_during_a_stream_prints_above_the_unfinished_line() {
    let fake = FakeLlm::start().await;
    let gate = Gate::new();
    let finish = json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}).to_string();
    let usage =
        json!({"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 5}}).to_string();
    fake.push([Answer::Gated(
        vec![delta("First half of the line")],
        gate.clone(),
        vec![
            delta(" and its second half."),
            delta("\nNext line."),
            finish,
            usage,
            "[DONE]".into(),
        ],
    )]);
    let e = Headless::new(&fake, "");
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send("go\r");
    p.wait_for("First half of the line", 20).await;
    p.send("/status\r");
    p.wait_for("tokens:", 20).await;
    gate.open();
    p.wait_for("Next line.", 20).await;
    p.wait_idle(20).await;
    let screen = p.contents();
    // The answer's line is whole, once, below the command and its output.
    let halves = rows_with(&screen, "First half of the line");
    assert_eq!(
        halves,
        ["First half of the line and its second half."],
        "{screen}"
    );
    let row = |text: &str| screen.lines().position(|l| l.contains(text)).unwrap();
    assert!(row("↳ /status") < row("tokens:"), "{screen}");
    assert!(row("tokens:") < row("First half"), "{screen}");
    assert_eq!(row_after(&screen, "First half").trim(), "Next line.");
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
}
