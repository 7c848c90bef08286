//! The OpenAI Responses adapter (`llm-responses`) against the fake of its
//! wire (`dsh_testkit::fake_responses`), through the real loop: the coding
//! tools end to end in `dsh-host --profile headless` (read → edit → bash,
//! then an answer), a cancel mid-stream (closing the connection at once),
//! failures as the turn reports them, a refused reasoning sent again
//! without it, and a local server's window learned (vLLM serves this API).
//! Every request the fake receives is checked as OpenAI and vLLM would
//! read it (`fake_responses::validate`, `validate_replay`). Build the
//! plugin first: `cargo build -p dsh-plugin-llm-responses`.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::time::Duration;

use dsh_sdk::vocab::event;
use dsh_testkit::agent::{
    cancel_mid_stream, core_host, events, kinds, model_info, new_agent, of_type, turn,
};
use dsh_testkit::fake_llm::{recorded_window, Answer, FakeLlm, Gate};
use dsh_testkit::fake_responses::{self, call_outputs, items_of, Stream, Usage};
use dsh_testkit::headless::{lines, Headless, KEY};
use dsh_testkit::{out, TestHost};
use serde_json::{json, Value};

/// The route the headless tests patch in: an `llm-responses` row on the
/// fake, and every app on its route (as the README's recipe writes it).
fn responses_route(fake: &FakeLlm) -> String {
    format!(
        "[[row]]\nid = \"llm-responses\"\nplugin = \"llm-responses\"\n\
         config = {{ baseUrl = \"{}\", apiKeyEnv = \"{KEY}\", streamIdleTimeoutMs = 20000 }}\n\
         [[patch]]\nid = \"agent-default-model\"\nconfig = {{ provider = \"openai\", model = \"gpt-5\" }}\n",
        fake.base_url
    )
}

/// The kit's core rows with the Responses adapter serving route `fake`
/// (idle timeout raised: a test holds a stream open on purpose).
async fn responses_host() -> (TestHost, FakeLlm) {
    core_host(|rows| {
        let deepseek = "id = \"llm-deepseek\"\nplugin = \"llm-deepseek\"";
        assert!(rows.contains(deepseek), "the kit's adapter row changed");
        rows.replace(
            deepseek,
            "id = \"llm-responses\"\nplugin = \"llm-responses\"",
        )
        .replace("streamIdleTimeoutMs = 1500", "streamIdleTimeoutMs = 60000")
    })
    .await
}

/// A bound on a wait that must end (a hang guard, not a timing): far
/// under the adapter's idle timeout here (60 s).
const BOUND: Duration = Duration::from_secs(20);

/// The names of a request's tools, each checked to be a non-strict
/// function.
fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("a request without tools: {request}"))
        .iter()
        .map(|t| {
            assert_eq!(
                (&t["type"], &t["strict"]),
                (&json!("function"), &json!(false)),
                "{t}"
            );
            assert!(t["parameters"].is_object(), "{t}");
            t["name"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// The `encrypted_content` of each reasoning item a request sends back
/// (each checked to go without its id: OpenAI would pair it by id with
/// the item that followed it).
fn reasoning_sent(request: &Value) -> Vec<String> {
    items_of(request, "reasoning")
        .iter()
        .map(|r| {
            assert!(r.get("id").is_none(), "{r}");
            r["encrypted_content"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[tokio::test]
async fn the_coding_tools_run_end_to_end_read_edit_bash_then_an_answer() {
    let fake = FakeLlm::start().await;
    let usage = |input, cached| Usage {
        input,
        cached,
        output: 9,
        reasoning: 4,
    };
    fake.push([
        Stream::new()
            .reasoning("rs_read", "Read the notes first.", "enc-read")
            .call("call_read", "read", &json!({"file_path": "notes.md"}))
            .completed(&usage(120, 0)),
        Stream::new()
            .reasoning("rs_edit", "Fix the typo.", "enc-edit")
            .text("Fixing it.")
            .call(
                "call_edit",
                "edit",
                &json!({"file_path": "notes.md", "old_string": "helo", "new_string": "hello"}),
            )
            .completed(&usage(180, 100)),
        Stream::new()
            .call(
                "call_bash",
                "bash",
                &json!({"command": "cat notes.md", "description": "Show the notes"}),
            )
            .completed(&usage(240, 160)),
        Stream::new()
            .text("The notes now say hello world.")
            .completed(&usage(300, 256)),
    ]);
    let e = Headless::new(&fake, &responses_route(&fake));
    let notes = e.work.path().join("notes.md");
    std::fs::write(&notes, "helo world\n").unwrap();

    let (code, stdout, stderr) = out(&e.run(&["fix", "the", "typo", "in", "notes.md"]).await);
    assert_eq!(
        (code, stdout.as_str()),
        (0, "The notes now say hello world.\n"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "hello world\n");

    // Every request: POST /responses with the key, stateless, the system
    // prompt as instructions, the coding tools as functions.
    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    for (n, (r, head)) in requests.iter().zip(fake.headers()).enumerate() {
        assert!(head.starts_with("POST /responses "), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("authorization: bearer sk-testkit-headless"),
            "{head}"
        );
        assert_eq!(
            (&r["model"], &r["stream"], &r["store"]),
            (&json!("gpt-5"), &json!(true), &json!(false))
        );
        assert!(r.get("previous_response_id").is_none(), "request {n}: {r}");
        let instructions = r["instructions"].as_str().unwrap();
        assert!(instructions.contains("gpt-5"), "{instructions}");
        let tools = tool_names(r);
        for tool in ["read", "edit", "bash"] {
            assert!(tools.iter().any(|t| t == tool), "{tools:?}");
        }
        assert_eq!(r["include"], json!(["reasoning.encrypted_content"]));
        // The model's default effort (the catalog's), and a summary.
        assert_eq!(
            r["reasoning"],
            json!({"effort": "medium", "summary": "auto"}),
            "request {n}"
        );
        // The whole history each time: the task is always there.
        let first_user = items_of(r, "message")
            .into_iter()
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"][0]["text"].as_str().unwrap().to_owned())
            .find(|t| t.contains("fix the typo"));
        assert!(first_user.is_some(), "request {n} lost the task: {r}");
    }

    // Each tool's result answers its call, and the reasoning items come
    // back with their encrypted content, in order.
    let outputs: Vec<Vec<(String, String)>> = requests.iter().map(call_outputs).collect();
    assert!(outputs[0].is_empty());
    assert_eq!(outputs[1].len(), 1);
    assert_eq!(outputs[1][0].0, "call_read");
    assert!(outputs[1][0].1.contains("helo world"), "{:?}", outputs[1]);
    assert_eq!(outputs[2][1].0, "call_edit");
    assert_eq!(outputs[3][2].0, "call_bash");
    assert!(outputs[3][2].1.contains("hello world"), "{:?}", outputs[3]);
    assert!(reasoning_sent(&requests[0]).is_empty());
    assert_eq!(reasoning_sent(&requests[1]), ["enc-read"]);
    assert_eq!(reasoning_sent(&requests[3]), ["enc-read", "enc-edit"]);
    // The second answer goes back item by item: reasoning, text (the
    // message's content is the text itself), call, then the call's output.
    let second: Vec<String> = fake_responses::input(&requests[2])
        .iter()
        .skip_while(|i| i["encrypted_content"] != "enc-edit")
        .map(|i| i["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        second,
        [
            "reasoning",
            "message",
            "function_call",
            "function_call_output"
        ]
    );
    let text = items_of(&requests[2], "message")
        .into_iter()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(text["content"], "Fixing it.");
    let call = &items_of(&requests[2], "function_call")[1];
    assert_eq!(
        (&call["call_id"], &call["name"]),
        (&json!("call_edit"), &json!("edit"))
    );
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args["new_string"], "hello");

    // The session log: the tool results, each answer's usage with its
    // cache reads, the reasoning kept for replay.
    let log = lines(&e.log_file());
    let results: Vec<&Value> = log
        .iter()
        .filter(|r| r["type"] == event::TOOL_RESULT)
        .collect();
    assert_eq!(results.len(), 3);
    let messages: Vec<&Value> = log
        .iter()
        .filter(|r| r["type"] == event::ASSISTANT_MESSAGE)
        .collect();
    assert_eq!(messages.len(), 4);
    assert_eq!(
        messages[3]["data"]["usage"],
        json!({"inputTokens": 44, "outputTokens": 9, "cacheReadTokens": 256, "reasoningTokens": 4})
    );
    assert_eq!(messages[1]["data"]["usage"]["cacheReadTokens"], 100);
    let source = &messages[0]["data"]["message"]["source"];
    assert_eq!(
        (&source["provider"], &source["model"]),
        (&json!("openai"), &json!("gpt-5"))
    );
    assert_eq!(
        source["replayState"]["blocks"][0]["encrypted_content"],
        "enc-read"
    );
    assert_eq!(
        messages[0]["data"]["message"]["content"][0],
        json!({"type": "reasoning", "text": "Read the notes first."})
    );
    fake_responses::assert_valid(&fake);
}

#[tokio::test]
async fn a_cancel_mid_stream_ends_the_turn_aborted_with_a_balanced_log() {
    let (t, fake) = responses_host().await;
    // A reasoning item done, a message half streamed, then the stream is
    // held open until the test lets it go.
    let gate = Gate::new();
    let before = Stream::new()
        .reasoning("rs_1", "Thinking.", "enc-1")
        .event(
            "response.output_item.added",
            json!({"output_index": 1, "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": []}}),
        )
        .event(
            "response.output_text.delta",
            json!({"item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": "Half an ans"}),
        )
        .payloads();
    let after = Stream::new()
        .text("never seen")
        .completed(&Usage::default());
    let Answer::Named(after) = after else {
        unreachable!()
    };
    let after = after.into_iter().map(|(_, data)| data).collect();
    fake.push([Answer::Gated(before, gate.clone(), after)]);
    let agent = new_agent(&t, "/tmp").await;
    let reason = cancel_mid_stream(&t, &agent, "go").await;
    assert_eq!(
        reason,
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    // The cancel closed the connection at once (the gate is still shut:
    // only the client's going ends it, short of the 60 s idle timeout).
    let gone = tokio::time::timeout(BOUND, fake.disconnects(1))
        .await
        .expect("the cancel closes the connection");
    assert_eq!(gone, [0]);
    gate.open();

    // Balanced: the interrupted answer keeps what streamed, every step is
    // closed, and turn/end is last.
    let ev = events(&t, &agent).await;
    let message = of_type(&ev, event::ASSISTANT_MESSAGE);
    assert_eq!(message.len(), 1);
    assert_eq!(message[0]["data"]["interrupted"], true);
    assert_eq!(
        message[0]["data"]["message"]["content"],
        json!([{"type": "reasoning", "text": "Thinking."}, {"type": "text", "text": "Half an ans"}])
    );
    assert_eq!(
        of_type(&ev, event::STEP_START).len(),
        of_type(&ev, event::STEP_END).len()
    );
    assert_eq!(kinds(&ev).last().unwrap(), event::TURN_END);

    // The next turn runs, with nothing retried of the cancelled one.
    fake.push([fake_responses::text("ok")]);
    assert_eq!(
        turn(&t, &agent, "again").await,
        json!({"kind": "completed"})
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert!(items_of(&requests[1], "message")
        .iter()
        .any(|m| m["content"][0]["text"] == "again"));
    fake_responses::assert_valid(&fake);
    t.shutdown().await;
}

#[tokio::test]
async fn reasoning_the_server_cannot_read_is_sent_again_without_it() {
    // The route's model changed between answers (the server cannot read
    // the first answer's encrypted reasoning): `invalid_encrypted_content`
    // is answered by one retry without the reasoning items, and the
    // session goes on.
    let (t, fake) = responses_host().await;
    fake.push([
        fake_responses::reasoning_text("Plan.", "enc-old", "First."),
        fake_responses::error_status(
            400,
            "invalid_request_error",
            "invalid_encrypted_content",
            "The encrypted content for item rs_1 could not be verified.",
        ),
        fake_responses::text("Second."),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "one").await, json!({"kind": "completed"}));
    assert_eq!(turn(&t, &agent, "two").await, json!({"kind": "completed"}));
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(reasoning_sent(&requests[1]), ["enc-old"]);
    assert!(reasoning_sent(&requests[2]).is_empty(), "{}", requests[2]);
    // The retry is the same request less the reasoning items.
    assert_eq!(
        fake_responses::input(&requests[2]).len(),
        fake_responses::input(&requests[1]).len() - 1
    );
    t.shutdown().await;
}

/// The turn `answers` end, on a fresh host.
async fn failing_turn(answers: Vec<Answer>) -> (Value, FakeLlm) {
    let (t, fake) = responses_host().await;
    fake.push(answers);
    let agent = new_agent(&t, "/tmp").await;
    let reason = turn(&t, &agent, "go").await;
    t.shutdown().await;
    (reason, fake)
}

#[tokio::test]
async fn an_overflow_is_context_window_exceeded_over_http_and_mid_stream() {
    let (reason, _) = failing_turn(vec![fake_responses::overflow()]).await;
    assert_eq!(
        reason["error"]["code"], "CONTEXT_WINDOW_EXCEEDED",
        "{reason}"
    );
    assert_eq!(reason["error"]["status"], 400, "{reason}");
    let message = reason["error"]["message"].as_str().unwrap();
    assert!(message.contains("exceeds the context window"), "{message}");

    let failed = Stream::new().text("partial").failed(
        "context_length_exceeded",
        "Your input exceeds the context window of this model.",
    );
    let (reason, fake) = failing_turn(vec![failed]).await;
    assert_eq!(
        reason["error"]["code"], "CONTEXT_WINDOW_EXCEEDED",
        "{reason}"
    );
    assert_eq!(fake.requests().len(), 1, "an overflow is not retried");
}

#[tokio::test]
async fn an_error_event_and_a_cut_stream_are_clear_failures() {
    let error = Stream::new().error("invalid_api_key", "Incorrect API key provided");
    let (reason, _) = failing_turn(vec![error]).await;
    assert_eq!(reason["error"]["code"], "AUTH", "{reason}");
    assert!(
        reason["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Incorrect API key provided"),
        "{reason}"
    );

    // A stream that ends before its terminal event: the turn says so.
    let cut = Stream::new().text("half").answer();
    let (reason, fake) = failing_turn(vec![cut]).await;
    assert_eq!(fake.requests().len(), 1, "a cut stream is not retried");
    assert_eq!(reason["error"]["code"], "STREAM_CLOSED", "{reason}");
    assert!(
        reason["error"]["message"]
            .as_str()
            .unwrap()
            .contains("before response.completed"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_local_servers_window_is_learned_and_says_where_it_came_from() {
    // vLLM serves the Responses API under `/v1`, and states its window in
    // its model list: a model the config gives no window for learns it
    // there (after llama.cpp's `/props`, which vLLM does not have).
    let (t, fake) = core_host(|rows| {
        let adapter = "id = \"llm-deepseek\"\nplugin = \"llm-deepseek\"";
        // Where the row's `baseUrl` ends.
        let base_end = "\", apiKeyEnv = \"\"";
        assert!(
            rows.contains(adapter) && rows.matches(base_end).count() == 1,
            "the kit's adapter row changed: {rows}"
        );
        rows.replace(
            adapter,
            "id = \"llm-responses\"\nplugin = \"llm-responses\"",
        )
        .replace(base_end, "/v1\", apiKeyEnv = \"\"")
    })
    .await;
    fake.set_get("/v1/models", 200, &recorded_window("vllm-models"));
    let info = model_info(&t, "fake", "Qwen/Qwen3-4B").await;
    assert_eq!(info["context"]["contextWindow"], 8192, "{info}");
    assert_eq!(
        info["contextSource"],
        json!({"kind": "server", "endpoint": "/v1/models"})
    );
    // A learned window keeps a share of itself for the answer.
    assert_eq!(info["defaultMaxTokens"], 2048, "{info}");
    assert_eq!(fake.asked(), ["GET /props", "GET /v1/models"]);
    // Asked once; a model the catalog lists keeps the catalog's window.
    model_info(&t, "fake", "Qwen/Qwen3-4B").await;
    let gpt = model_info(&t, "fake", "gpt-5").await;
    assert_eq!(
        (&gpt["context"]["contextWindow"], &gpt["contextSource"]),
        (&json!(272_000), &json!({"kind": "catalog"}))
    );
    assert_eq!(fake.asked(), ["GET /props", "GET /v1/models"]);
    assert!(fake.requests().is_empty());
    t.shutdown().await;
}
