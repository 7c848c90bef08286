//! The Anthropic Messages adapter (`llm-anthropic`) through the real host
//! and the real agent loop, against the kit's fake of its wire
//! (`dsh_testkit::fake_anthropic`): the coding tools end to end (read →
//! edit → bash, then an answer) with thinking signatures sent back and the
//! cache usage logged, a cancel mid-stream and one before the answer's
//! head (each closing the connection at once), a stream of pings alone,
//! the overload and overflow errors, a local server's window learned
//! (llama.cpp serves this API), and the route as the README configures
//! it, under headless. Every request the fake receives is checked as the
//! API would check it (`fake_anthropic::validate`).
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::time::Duration;

use dsh_sdk::vocab::event;
use dsh_testkit::agent::{
    cancel, cancel_mid_stream, core_host, events, model_info, new_agent, of_type, send, turn,
};
use dsh_testkit::fake_anthropic::{
    self, blocks, error_mid_stream, overflow, overloaded, roles, tool_results, Reply, Usage,
};
use dsh_testkit::fake_llm::{recorded_window, Answer, FakeLlm, Gate};
use dsh_testkit::headless::{lines, Headless, KEY};
use dsh_testkit::{out, TempDir, TestHost};
use serde_json::{json, Value};

/// The variable the adapter reads its key from.
const KEY_ENV: &str = "DSH_TEST_ANTHROPIC_KEY";

/// The key the tests set.
const TEST_KEY: &str = "sk-ant-test-not-a-real-key";

/// A bound on a wait that must end (a hang guard, not a timing): far
/// under the adapter's idle timeout here (60 s), so a connection only that
/// timeout would close fails the wait.
const BOUND: Duration = Duration::from_secs(20);

/// The kit's core rows with this adapter in place of the chat-completions
/// one (route `fake`, its key in `KEY_ENV`, thinking `high`, a stream
/// idle timeout no held stream trips), and `tool-fs` (`edit`) beside the
/// other tools.
fn anthropic_rows(rows: String) -> String {
    let adapter =
        "id = \"llm-deepseek\"\nplugin = \"llm-deepseek\"\nconfig = { provider = \"fake\", ";
    let idle = "apiKeyEnv = \"\", streamIdleTimeoutMs = 1500 }";
    let bash = "plugin = \"tool-bash\"\n";
    for part in [adapter, idle, bash] {
        assert!(rows.contains(part), "the kit's core rows changed: {rows}");
    }
    rows.replace(
        adapter,
        "id = \"llm-anthropic\"\nplugin = \"llm-anthropic\"\nconfig = { provider = \"fake\", reasoningEffort = \"high\", ",
    )
    .replace(
        idle,
        &format!("apiKeyEnv = \"{KEY_ENV}\", streamIdleTimeoutMs = 60000 }}"),
    )
    .replace(
        bash,
        "plugin = \"tool-bash\"\n[[row]]\nid = \"tool-fs\"\nplugin = \"tool-fs\"\n",
    )
}

/// A host running the agent core on this adapter, against a fresh fake.
async fn setup() -> (TestHost, FakeLlm) {
    std::env::set_var(KEY_ENV, TEST_KEY);
    core_host(anthropic_rows).await
}

/// The first block of the assistant message at `at` of request `request`.
fn first_block(request: &Value, at: usize) -> Value {
    request["messages"][at]["content"][0].clone()
}

/// Panics unless the request's messages alternate, from the user to the
/// user (the API refuses anything else).
fn assert_alternating(request: &Value) {
    let roles = roles(request);
    for (at, role) in roles.iter().enumerate() {
        let want = if at % 2 == 0 { "user" } else { "assistant" };
        assert_eq!(role, want, "message {at} of {roles:?}");
    }
    assert_eq!(roles.last().map(String::as_str), Some("user"), "{roles:?}");
}

/// `(tool_use_id, is_error)` of each tool result of a request, and
/// whether its content holds `needle`, in order.
fn results(request: &Value) -> Vec<(String, bool, String)> {
    tool_results(request)
        .iter()
        .map(|r| {
            (
                r["tool_use_id"].as_str().unwrap().to_owned(),
                r["is_error"].as_bool().unwrap(),
                r["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_coding_tools_run_end_to_end_with_signatures_and_cache_usage() {
    let (t, fake) = setup().await;
    let ws = TempDir::new("anthropic-ws");
    std::fs::write(ws.path().join("notes.txt"), "alpha\nbeta\n").unwrap();
    fake.push([
        Reply::new()
            .thinking("Read the file first.", "sig-read")
            .text("Reading it.")
            .tool_use("toolu_read", "read", json!({"file_path": "notes.txt"}))
            .tool_use("toolu_missing", "read", json!({"file_path": "missing.txt"}))
            .usage(Usage {
                input: 900,
                output: 40,
                cache_read: 0,
                cache_write: 1200,
            })
            .answer(),
        Reply::new()
            .tool_use(
                "toolu_edit",
                "edit",
                json!({"file_path": "notes.txt", "old_string": "beta", "new_string": "gamma"}),
            )
            .usage(Usage {
                input: 30,
                output: 20,
                cache_read: 2100,
                cache_write: 60,
            })
            .answer(),
        Reply::new()
            .tool_use(
                "toolu_bash",
                "bash",
                json!({"command": "cat notes.txt", "description": "show the file"}),
            )
            .answer(),
        fake_anthropic::text("The file now says gamma."),
    ]);
    let agent = new_agent(&t, &ws.path().display().to_string()).await;
    let reason = turn(&t, &agent, "replace beta with gamma in notes.txt").await;
    assert_eq!(reason, json!({"kind": "completed"}));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("notes.txt")).unwrap(),
        "alpha\ngamma\n"
    );

    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    for (n, r) in requests.iter().enumerate() {
        assert_alternating(r);
        assert_eq!(r["model"], "m1", "request {n}");
        assert_eq!(r["stream"], true, "request {n}");
        // The window of an unlisted model, its default cap; thinking at
        // most half of it. The tool loop began with signed thinking, so
        // every request of it may think.
        assert_eq!(r["max_tokens"], 8192, "request {n}");
        assert_eq!(
            r["thinking"],
            json!({"type": "enabled", "budget_tokens": 4096}),
            "request {n}"
        );
        let system = &r["system"][0];
        assert!(
            system["text"].as_str().unwrap().ends_with("with m1.")
                && system["cache_control"] == json!({"type": "ephemeral"}),
            "request {n}: {system}"
        );
        let tools: Vec<&str> = r["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        for name in ["read", "edit", "bash"] {
            assert!(tools.contains(&name), "request {n}: {tools:?}");
        }
        assert!(r["tools"][0]["input_schema"].is_object(), "request {n}");
        // The conversation's last block is the cache breakpoint.
        let last = r["messages"].as_array().unwrap().last().unwrap()["content"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(
            last["cache_control"],
            json!({"type": "ephemeral"}),
            "request {n}"
        );
    }
    let headers = fake.headers()[0].to_ascii_lowercase();
    assert!(
        headers.contains(&format!("x-api-key: {TEST_KEY}"))
            && headers.contains("anthropic-version: 2023-06-01")
            && headers.starts_with("post /v1/messages "),
        "{headers}"
    );

    // The first answer returns whole in every later request: its thinking
    // with the signature first, its text, its calls.
    for r in &requests[1..] {
        assert_eq!(
            first_block(r, 1),
            json!({"type": "thinking", "thinking": "Read the file first.", "signature": "sig-read"})
        );
        let answer = &r["messages"][1]["content"];
        assert_eq!(answer[1], json!({"type": "text", "text": "Reading it."}));
        assert_eq!(
            answer[2],
            json!({"type": "tool_use", "id": "toolu_read", "name": "read", "input": {"file_path": "notes.txt"}})
        );
        assert_eq!(answer[3]["id"], "toolu_missing");
    }
    // Each request carries every result so far, paired with its call; the
    // two results of the first step (each logged as a message) are one
    // user message.
    let ids =
        |n: usize| -> Vec<String> { results(&requests[n]).into_iter().map(|r| r.0).collect() };
    assert_eq!(ids(1), ["toolu_read", "toolu_missing"]);
    assert_eq!(ids(2), ["toolu_read", "toolu_missing", "toolu_edit"]);
    assert_eq!(
        ids(3),
        ["toolu_read", "toolu_missing", "toolu_edit", "toolu_bash"]
    );
    assert_eq!(roles(&requests[1]), ["user", "assistant", "user"]);
    let last = results(&requests[3]);
    let errors: Vec<bool> = last.iter().map(|r| r.1).collect();
    assert_eq!(errors, [false, true, false, false], "{last:?}");
    assert!(
        last[0].2.contains("alpha") && last[0].2.contains("beta"),
        "{}",
        last[0].2
    );
    assert!(last[1].2.contains("missing.txt"), "{}", last[1].2);
    assert!(
        last[3].2.contains("alpha\ngamma"),
        "the bash output: {}",
        last[3].2
    );
    assert_eq!(blocks(&requests[3], "tool_use").len(), 4);

    // The log: the usage with cache reads and writes, the signature in the
    // first answer's replay state, every call answered.
    let ev = events(&t, &agent).await;
    let answers = of_type(&ev, event::ASSISTANT_MESSAGE);
    assert_eq!(answers.len(), 4);
    assert_eq!(
        answers[0]["data"]["usage"],
        json!({"inputTokens": 900, "outputTokens": 40, "cacheReadTokens": 0, "cacheWriteTokens": 1200})
    );
    assert_eq!(
        answers[1]["data"]["usage"],
        json!({"inputTokens": 30, "outputTokens": 20, "cacheReadTokens": 2100, "cacheWriteTokens": 60})
    );
    assert_eq!(
        answers[0]["data"]["message"]["source"]["replayState"],
        json!({"blocks": [{"type": "thinking", "signature": "sig-read"}, null, null, null]})
    );
    assert_eq!(
        answers[3]["data"]["message"]["content"],
        json!([{"type": "text", "text": "The file now says gamma."}])
    );
    let failed: Vec<bool> = of_type(&ev, event::TOOL_RESULT)
        .iter()
        .map(|r| !r["data"]["error"].is_null())
        .collect();
    assert_eq!(failed, [false, true, false, false]);
    fake_anthropic::assert_valid(&fake);
    t.shutdown().await;
}

#[tokio::test]
async fn another_providers_tool_ids_go_out_as_the_api_takes_them() {
    // A chat-completions server's ids: `call_0` in every answer, and one
    // with a dot. The API takes `^[a-zA-Z0-9_-]{1,64}$`, unique per request.
    let (t, fake) = setup().await;
    let ws = TempDir::new("anthropic-ids");
    std::fs::write(ws.path().join("a.txt"), "alpha\n").unwrap();
    let read = json!({"file_path": "a.txt"});
    fake.push([
        Reply::new()
            .tool_use("call_0", "read", read.clone())
            .answer(),
        Reply::new()
            .tool_use("call_0", "read", read.clone())
            .answer(),
        Reply::new().tool_use("fc.item:7", "read", read).answer(),
        fake_anthropic::text("Read it thrice."),
    ]);
    let agent = new_agent(&t, &ws.path().display().to_string()).await;
    assert_eq!(
        turn(&t, &agent, "read a.txt three times").await,
        json!({"kind": "completed"})
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    let last = &requests[3];
    let ids: Vec<String> = blocks(last, "tool_use")
        .iter()
        .map(|b| b["id"].as_str().unwrap().to_owned())
        .collect();
    let answered: Vec<String> = results(last).into_iter().map(|r| r.0).collect();
    assert_eq!(ids, answered, "each result names its call's id as sent");
    assert_eq!(ids[0], "call_0");
    assert!(
        ids[1..].iter().all(|id| id.starts_with("toolu_")),
        "{ids:?}"
    );
    // The log keeps the ids the model gave.
    let ev = events(&t, &agent).await;
    let logged: Vec<&str> = of_type(&ev, event::TOOL_RESULT)
        .iter()
        .map(|r| {
            r["data"]["message"]["source"]["callId"]
                .as_str()
                .unwrap_or_default()
        })
        .collect();
    assert!(logged.contains(&"fc.item:7"), "{logged:?}");
    fake_anthropic::assert_valid(&fake);
    t.shutdown().await;
}

#[tokio::test]
async fn a_cancel_mid_stream_ends_the_turn_aborted_with_a_balanced_log() {
    let (t, fake) = setup().await;
    // Held open after the first text delta until the test is done.
    let gate = Gate::new();
    let mut payloads = Reply::new()
        .thinking("Thinking it over.", "sig-cut")
        .text("Half an answer that goes on")
        .payloads();
    let first_text = payloads
        .iter()
        .position(|p| p.contains("text_delta"))
        .unwrap();
    let rest = payloads.split_off(first_text + 1);
    fake.push([Answer::Gated(payloads, gate.clone(), rest)]);
    let agent = new_agent(&t, "/tmp").await;
    let reason = cancel_mid_stream(&t, &agent, "go").await;
    assert_eq!(
        reason,
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );

    let ev = events(&t, &agent).await;
    let answers = of_type(&ev, event::ASSISTANT_MESSAGE);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0]["data"]["interrupted"], true);
    assert_eq!(
        answers[0]["data"]["message"]["content"],
        json!([{"type": "reasoning", "text": "Thinking it over."}, {"type": "text", "text": "Half "}])
    );
    // Balanced: the step and the turn closed, nothing left open.
    let count = |kind: &str| of_type(&ev, kind).len();
    assert_eq!((count(event::STEP_START), count(event::STEP_END)), (1, 1));
    assert_eq!((count(event::TURN_START), count(event::TURN_END)), (1, 1));
    assert_eq!(ev.last().unwrap()["type"], event::TURN_END);

    // The next turn runs; the cut answer returns as text only (its
    // thinking was never signed), the roles still alternating.
    fake.push([fake_anthropic::text("ok")]);
    assert_eq!(
        turn(&t, &agent, "again").await,
        json!({"kind": "completed"})
    );
    let requests = fake.requests();
    let next = requests.last().unwrap();
    assert_alternating(next);
    assert_eq!(
        next["messages"][1]["content"],
        json!([{"type": "text", "text": "Half "}])
    );
    // The cancel closed the connection at once (the gate is still shut:
    // only the client's going ends it, short of the 60 s idle timeout).
    let gone = tokio::time::timeout(BOUND, fake.disconnects(1))
        .await
        .expect("the cancel closes the connection");
    assert_eq!(gone, [0]);
    fake_anthropic::assert_valid(&fake);
    gate.open();
    t.shutdown().await;
}

/// Waits until the fake received `n` requests (bounded by [`BOUND`]).
async fn requests_came(fake: &FakeLlm, n: usize) {
    let came = async {
        while fake.requests().len() < n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(BOUND, came)
        .await
        .expect("the request reaches the fake");
}

#[tokio::test]
async fn a_cancel_before_the_answers_head_closes_the_connection() {
    // A server busy over its prompt: no status line yet.
    let (t, fake) = setup().await;
    fake.push([Answer::Hold]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, dsh_sdk::names::agents::FOLLOWUP, &agent, "go").await;
    requests_came(&fake, 1).await;
    assert_eq!(
        cancel(&t, &agent).await,
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    let gone = tokio::time::timeout(BOUND, fake.disconnects(1))
        .await
        .expect("the cancel closes the connection while the head is awaited");
    assert_eq!(gone, [0]);
    assert_eq!(fake.requests().len(), 1, "no retry after the cancel");
    t.shutdown().await;
}

#[tokio::test]
async fn a_stream_of_pings_alone_ends_in_timeout_at_the_progress_deadline() {
    // The server opens the answer and then only pings, every 20 ms: the
    // idle timeout (60 s) never trips; the progress deadline does.
    std::env::set_var(KEY_ENV, TEST_KEY);
    let (t, fake) = core_host(|rows| {
        anthropic_rows(rows).replace(
            "streamIdleTimeoutMs = 60000",
            "streamIdleTimeoutMs = 60000, streamProgressTimeoutMs = 300",
        )
    })
    .await;
    let start = Reply::new().events().into_iter().take(2).collect();
    let ping = ("ping".to_owned(), json!({"type": "ping"}).to_string());
    fake.set_fallback(Answer::Pings(start, Some(ping), 20));
    let agent = new_agent(&t, "/tmp").await;
    let reason = tokio::time::timeout(BOUND, turn(&t, &agent, "go"))
        .await
        .expect("a stream of pings alone ends");
    assert_eq!(reason["error"]["code"], "TIMEOUT", "{reason}");
    let message = reason["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("no content for 300 ms") && message.contains("streamProgressTimeoutMs"),
        "{message}"
    );
    // TIMEOUT is retried; every try's connection was closed.
    let tries = fake.requests().len();
    assert!(tries > 1, "{tries}");
    let gone = tokio::time::timeout(BOUND, fake.disconnects(tries))
        .await
        .expect("each try's connection closes");
    assert_eq!(gone.len(), tries);
    t.shutdown().await;
}

#[tokio::test]
async fn an_overload_is_retried_and_an_overflow_is_context_window_exceeded() {
    let (t, fake) = setup().await;
    fake.push([
        overloaded(),
        error_mid_stream(
            &Reply::new().text("partial answer"),
            "overloaded_error",
            "Overloaded",
        ),
        fake_anthropic::text("Recovered."),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    assert_eq!(fake.requests().len(), 3);
    let ev = events(&t, &agent).await;
    let failures: Vec<Value> = of_type(&ev, event::LLM_RETRY)
        .iter()
        .map(|r| r["data"]["failure"].clone())
        .collect();
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert_eq!(failures[0]["code"], "SERVER");
    assert_eq!(failures[0]["status"], 529);
    assert_eq!(failures[0]["message"], "HTTP 529: Overloaded");
    assert_eq!(failures[1]["code"], "SERVER");
    assert_eq!(
        failures[1]["message"],
        "the provider reported an error mid-stream: Overloaded (type: overloaded_error)"
    );

    // The overflow is not retried: it is the overflow recovery's to handle.
    fake.push([overflow(208_310, 200_000)]);
    let reason = turn(&t, &agent, "again").await;
    assert_eq!(reason["kind"], "error", "{reason}");
    assert_eq!(
        reason["error"]["code"], "CONTEXT_WINDOW_EXCEEDED",
        "{reason}"
    );
    assert_eq!(
        reason["error"]["message"],
        "HTTP 400: prompt is too long: 208310 tokens > 200000 maximum"
    );
    assert_eq!(fake.requests().len(), 4);
    fake_anthropic::assert_valid(&fake);
    t.shutdown().await;
}

#[tokio::test]
async fn a_local_servers_window_is_learned_and_says_where_it_came_from() {
    // llama.cpp serves the Messages API at its root, and states its window
    // at `/props`: a model the config gives no window for learns it there.
    let (t, fake) = setup().await;
    fake.set_get("/props", 200, &recorded_window("llama-cpp-props"));
    let info = model_info(&t, "fake", "smollm2").await;
    assert_eq!(info["context"]["contextWindow"], 4096, "{info}");
    assert_eq!(
        info["contextSource"],
        json!({"kind": "server", "endpoint": "/props"})
    );
    // A learned window keeps a share of itself for the answer.
    assert_eq!(info["defaultMaxTokens"], 1024, "{info}");
    assert_eq!(fake.asked(), ["GET /props"]);
    // Asked once: the second resolve is from memory; a model the catalog
    // lists keeps the catalog's window, and asks nothing.
    model_info(&t, "fake", "smollm2").await;
    let claude = model_info(&t, "fake", "claude-sonnet-4-5").await;
    assert_eq!(
        (
            &claude["context"]["contextWindow"],
            &claude["contextSource"]
        ),
        (&json!(200_000), &json!({"kind": "catalog"}))
    );
    assert_eq!(fake.asked(), ["GET /props"]);
    assert!(fake.requests().is_empty());
    t.shutdown().await;
}

#[tokio::test]
async fn headless_runs_the_route_the_readme_configures() {
    let fake = FakeLlm::start().await;
    fake.push([Reply::new()
        .text("Hello from Claude.")
        .usage(Usage {
            input: 12,
            output: 5,
            cache_read: 40,
            cache_write: 8,
        })
        .answer()]);
    // The README's route row, pointed at the fake.
    let h = Headless::new(
        &fake,
        &format!(
            "[[row]]\nid = \"llm-anthropic\"\nplugin = \"llm-anthropic\"\n\
             config = {{ baseUrl = \"{}\", apiKeyEnv = \"{KEY}\" }}\n\
             [[patch]]\nid = \"agent-default-model\"\n\
             config = {{ provider = \"anthropic\", model = \"claude-sonnet-4-5\" }}\n",
            fake.base_url
        ),
    );
    let (code, stdout, stderr) = out(&h.run(&["--output", "jsonl", "say", "hello"]).await);
    assert_eq!(code, 0, "{stderr}");
    let result: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(result["type"], "result");
    assert_eq!(result["output"], "Hello from Claude.");
    assert_eq!(result["usage"]["inputTokens"], 12);
    assert_eq!(result["usage"]["cacheReadTokens"], 40);
    let request = &fake.requests()[0];
    assert_eq!(request["model"], "claude-sonnet-4-5");
    // The catalog's cap for the model; thinking off by default.
    assert_eq!(request["max_tokens"], 64_000);
    assert!(request.get("thinking").is_none(), "{request}");
    let log = lines(&h.log_file());
    assert_eq!(log.last().unwrap()["type"], event::TURN_END);
    fake_anthropic::assert_valid(&fake);
}
