//! The Anthropic Messages adapter (`llm-anthropic`) through the real host
//! and the real agent loop, against the kit's fake of its wire
//! (`dsh_testkit::fake_anthropic`): the coding tools end to end (read →
//! edit → bash, then an answer) with thinking signatures sent back and the
//! cache usage logged, a cancel mid-stream, the overload and overflow
//! errors, and the route as the README configures it, under headless.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::names::{agents, service};
use dsh_sdk::vocab::event;
use dsh_testkit::agent::{core_host, events, new_agent, of_type, streamed_text, turn};
use dsh_testkit::fake_anthropic::{
    self, blocks, error_mid_stream, overflow, overloaded, roles, tool_results, Reply, Usage,
};
use dsh_testkit::fake_llm::{Answer, FakeLlm, Gate};
use dsh_testkit::headless::{lines, Headless, KEY};
use dsh_testkit::{out, TempDir, TestHost};
use serde_json::{json, Value};

/// The variable the adapter reads its key from.
const KEY_ENV: &str = "DSH_TEST_ANTHROPIC_KEY";

/// The key the tests set.
const TEST_KEY: &str = "sk-ant-test-not-a-real-key";

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
    t.call(
        service::AGENTS,
        agents::FOLLOWUP,
        json!({"agent": agent, "message": {"text": "go"}}),
    )
    .await;
    streamed_text(&t, &agent).await;
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
    gate.open();
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
}
