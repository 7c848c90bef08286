#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)
//! Small windows survive (issue 20, item 3), through the real plugins
//! against a fake model that enforces a 4,096-token window the way a
//! server does: a request whose prompt (its body at 3 bytes a token) is
//! over the window is answered HTTP 400 with OpenAI's
//! `context_length_exceeded` body, and recorded. The route learns its
//! window from the llm-deepseek row's `models = [{ id, contextWindow }]`.
//!
//! - a `read` of a 108 KB file comes back within its share of the window,
//!   and the next turn works;
//! - the summary request fits: its output cap is a quarter of the window,
//!   its input the rest; the tools go with it only when they fit;
//! - a tool result the model has not read yet, over its share, is pruned
//!   before a summary is asked for;
//! - a user message larger than the window ends its turn with an error
//!   naming the window and the message, and the next turn works.

use dsh_sdk::names::tool;
use dsh_sdk::vocab::compaction as records;
use dsh_sdk::vocab::{event, tokens};
use dsh_testkit::agent::{events, kinds, new_agent, of_type, turn};
use dsh_testkit::fake_llm::{self, calls, text, Answer, FakeLlm};
use dsh_testkit::{core_rows, TempDir, TestHost};
use serde_json::{json, Value};

/// The window of the test's route, in tokens.
const WINDOW: usize = 4096;
/// The body the fake answers a request over the window with: OpenAI's
/// `context_length_exceeded` (`fake_llm::LLAMA_CPP_OVERFLOW_BODY` is
/// llama.cpp's `exceed_context_size_error`, recognized once the adapters
/// read it).
const OVERFLOW_BODY: &str = fake_llm::OPENAI_OVERFLOW_BODY;

/// compaction-basic's output cap of a summary: a quarter of the window.
const SUMMARY_CAP: u64 = 1024;
/// What one tool result may take: a quarter of the window, by the meter's
/// estimate (`dsh_sdk::vocab::tokens`).
const ITEM_TOKENS: u64 = 1024;

const SUMMARY: &str = "## Primary Request and Intent\n- the summary";

/// The kit's rows on a route of a 4,096-token window, with compaction and
/// `extra` rows; `bash = false` leaves the bash tool out (a smaller tool
/// list).
fn rows(fake: &FakeLlm, root: &std::path::Path, extra: &[&str], bash: bool) -> String {
    let mut rows = core_rows(&fake.base_url, root).replace(
        "streamIdleTimeoutMs = 1500 }",
        &format!(
            "streamIdleTimeoutMs = 1500, models = [{{ id = \"m1\", contextWindow = {WINDOW} }}] }}"
        ),
    );
    if !bash {
        rows = rows.replace("[[row]]\nid = \"tool-bash\"\nplugin = \"tool-bash\"\n", "");
    }
    for plugin in ["compaction-basic"].iter().chain(extra) {
        rows.push_str(&format!(
            "[[row]]\nid = \"{plugin}\"\nplugin = \"{plugin}\"\n"
        ));
    }
    rows
}

/// A fake model with a 4,096-token window, a host of `rows`, an agent
/// working in `cwd`.
async fn setup(extra: &[&str], bash: bool, cwd: &str) -> (FakeLlm, TempDir, TestHost, String) {
    let fake = FakeLlm::start().await;
    fake.set_context_window_with(WINDOW, OVERFLOW_BODY);
    let root = TempDir::new("sessions");
    let t = TestHost::start().await;
    t.apply(&rows(&fake, root.path(), extra, bash)).await;
    t.assert_all_active().await;
    let agent = new_agent(&t, cwd).await;
    (fake, root, t, agent)
}

/// The prompt tokens the fake's window reckons a request body of `bytes`
/// at.
fn reckoned(bytes: usize) -> usize {
    bytes.div_ceil(fake_llm::WINDOW_BYTES_PER_TOKEN)
}

/// The bytes of every request body, in order (as re-serialized).
fn body_sizes(fake: &FakeLlm) -> Vec<usize> {
    fake.requests()
        .iter()
        .map(|r| r.to_string().len())
        .collect()
}

/// The indexes of the summary requests (marked as compaction requests).
fn summary_requests(fake: &FakeLlm) -> Vec<usize> {
    let headers = fake.headers();
    (0..headers.len())
        .filter(|i| {
            headers[*i]
                .to_lowercase()
                .contains("x-deepseek-harness-compact: 1")
        })
        .collect()
}

/// `answer` with its usage line reporting `prompt` input tokens.
fn with_usage(answer: Answer, prompt: u64) -> Answer {
    let Answer::Sse(events) = answer else {
        panic!("not an SSE answer")
    };
    let usage = json!({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": 10}})
        .to_string();
    let mut events: Vec<Option<String>> = events
        .into_iter()
        .filter(|e| !e.as_deref().is_some_and(|l| l.contains("\"usage\"")))
        .collect();
    let done = events.len() - 1;
    events.insert(done, Some(usage));
    Answer::Sse(events)
}

/// Numbered lines of numbers, `bytes` long: text that tokenizes densely.
fn numbers(bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 32);
    let mut i: u64 = 0;
    while out.len() < bytes {
        i += 1;
        out.push_str(&format!("{i:06} {}\n", i * 7919 % 1_000_003));
    }
    out.truncate(bytes);
    out
}

#[tokio::test]
async fn a_108_kb_read_comes_back_within_its_share_of_the_window_and_the_next_turn_works() {
    let work = TempDir::new("small-window-read");
    let file = work.path().join("big.txt");
    std::fs::write(&file, numbers(108 * 1024)).unwrap();
    let (fake, _root, t, agent) = setup(
        &["tool-result-pruner", "spill"],
        true,
        &work.path().display().to_string(),
    )
    .await;
    fake.push([
        calls(&[("c1", tool::READ, json!({"file_path": file}))]),
        text("it holds numbers"),
        text("second answer"),
    ]);
    assert_eq!(turn(&t, &agent, "read big.txt").await["kind"], "completed");
    assert_eq!(turn(&t, &agent, "and now?").await["kind"], "completed");

    // No request went over the window: the read came back within its
    // share, with the usual footer saying how to read on.
    assert_eq!(fake.overflowed(), Vec::<usize>::new());
    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "{:?}", kinds(&events(&t, &agent).await));
    let result = &fake.tool_results(1)[0];
    assert!(
        tokens::of_text(result) <= ITEM_TOKENS,
        "{}",
        tokens::of_text(result)
    );
    assert!(result.starts_with("<path>"), "{result}");
    assert!(
        result.contains("(Output capped. Showing lines 1-") && result.contains("Use offset="),
        "{result}"
    );
    for size in body_sizes(&fake) {
        assert!(reckoned(size) <= WINDOW, "{size}");
    }
    // The follow-up turn saw the same result and its own prompt.
    let last = requests[2]["messages"].to_string();
    assert!(last.contains("and now?"));
    assert_eq!(fake.tool_results(2), fake.tool_results(1));
    // The file is untouched: the rest is there to read with an offset.
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 108 * 1024);
}

/// Two turns whose history the next turn's pre-step compacts: the first
/// user message (`first`), a short answer, then a turn whose answer
/// reports `usage` input tokens, over the 3,276-token threshold.
async fn history_over_the_threshold(
    fake: &FakeLlm,
    t: &TestHost,
    agent: &str,
    first: &str,
    usage: u64,
) {
    fake.push([
        text("noted"),
        with_usage(text(&"omega ".repeat(500)), usage),
    ]);
    assert_eq!(turn(t, agent, first).await["kind"], "completed");
    assert_eq!(turn(t, agent, "go on").await["kind"], "completed");
    assert_eq!(
        fake.requests().len(),
        2,
        "no compaction below the threshold"
    );
}

#[tokio::test]
async fn the_summary_request_fits_the_window_and_keeps_the_tools_only_when_they_fit() {
    // A short history: everything fits, the conversation's tools included
    // (the provider's prefix cache is reused).
    let (fake, _root, t, agent) = setup(&[], false, "/tmp").await;
    history_over_the_threshold(&fake, &t, &agent, &"alpha ".repeat(300), 3400).await;
    fake.push([text(SUMMARY), text("third")]);
    assert_eq!(turn(&t, &agent, "third").await["kind"], "completed");
    let requests = fake.requests();
    assert_eq!(summary_requests(&fake), [2]);
    let summary = &requests[2];
    assert_eq!(summary["max_tokens"], SUMMARY_CAP);
    assert_eq!(summary["tools"], requests[1]["tools"]);
    assert!(summary["tools"].is_array());
    let size = summary.to_string().len();
    assert!(
        reckoned(size) + SUMMARY_CAP as usize <= WINDOW,
        "{size} bytes"
    );
    assert!(summary["messages"].to_string().contains("alpha"));
    assert_eq!(fake.overflowed(), Vec::<usize>::new());
    let ev = events(&t, &agent).await;
    assert_eq!(
        of_type(&ev, records::SUMMARY)[0]["data"]["maxTokens"],
        SUMMARY_CAP
    );

    // A history whose first message is 1,950 bytes of numbers (a token a
    // byte by the estimate): with the tools (read, bash and the job tools,
    // about 650 tokens) the request would not fit the 2,764 tokens its
    // input may use (the 3,072 left by the output cap, less a tenth), so
    // they are left out; the messages are kept whole.
    let (fake, _root, t, agent) = setup(&[], true, "/tmp").await;
    let first = numbers(1950);
    history_over_the_threshold(&fake, &t, &agent, &first, 3600).await;
    fake.push([text(SUMMARY), text("third")]);
    assert_eq!(turn(&t, &agent, "third").await["kind"], "completed");
    let requests = fake.requests();
    assert_eq!(summary_requests(&fake), [2]);
    let summary = &requests[2];
    assert_eq!(summary["max_tokens"], SUMMARY_CAP);
    assert!(summary.get("tools").is_none(), "{}", summary["tools"]);
    assert!(requests[1]["tools"].as_array().unwrap().len() >= 2);
    let size = summary.to_string().len();
    assert!(
        reckoned(size) + SUMMARY_CAP as usize <= WINDOW,
        "{size} bytes"
    );
    assert!(summary["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["content"].as_str() == Some(first.as_str())));
    assert_eq!(fake.overflowed(), Vec::<usize>::new());
    // The conversation goes on from the checkpoint.
    assert!(requests[3]["messages"]
        .to_string()
        .contains("<compacted-summary>"));
}

#[tokio::test]
async fn an_oversized_result_the_model_has_not_read_is_pruned_before_the_summary() {
    // No spill row: nothing caps bash's output when it runs, so its result
    // enters the log whole, over its share of the window.
    let (fake, _root, t, agent) = setup(&["tool-result-pruner"], true, "/tmp").await;
    // Usage of 2,600 tokens at each answer: under the 3,276-token
    // threshold until the result comes, over it with the result pruned,
    // under it once the first turn is summarized.
    fake.push([with_usage(text("noted"), 2600)]);
    assert_eq!(
        turn(&t, &agent, &"alpha ".repeat(500)).await["kind"],
        "completed"
    );
    fake.push([
        with_usage(
            calls(&[(
                "c1",
                tool::BASH,
                json!({"command": "seq 100000 104000", "description": "count"}),
            )]),
            2600,
        ),
        text(SUMMARY),
        text("done"),
    ]);
    let end = turn(&t, &agent, "count").await;
    assert_eq!(end["kind"], "completed", "{end}");
    assert_eq!(fake.overflowed(), Vec::<usize>::new());
    assert_eq!(summary_requests(&fake), [2], "one summary request");
    // The newest result was pruned before the summary was asked for; the
    // log keeps it whole, the next request carries its head and tail.
    let ev = events(&t, &agent).await;
    let prunes = of_type(&ev, records::PRUNE);
    assert_eq!(prunes.len(), 1, "{:?}", kinds(&ev));
    let original = of_type(&ev, event::TOOL_RESULT)[0];
    assert_eq!(prunes[0]["data"]["shadowedSeqs"], json!([original["seq"]]));
    let start = of_type(&ev, records::START)[0]["seq"].as_u64().unwrap();
    assert!(prunes[0]["seq"].as_u64().unwrap() < start);
    let head = "100000\n100001\n";
    assert!(original["data"].to_string().contains("103000"));
    let requests = fake.requests();
    assert!(!requests[2].to_string().contains("103000"));
    let results = fake.tool_results(3);
    assert_eq!(results.len(), 1);
    assert!(
        tokens::of_text(&results[0]) <= ITEM_TOKENS,
        "{}",
        results[0]
    );
    assert!(results[0].starts_with(head), "{}", &results[0][..40]);
    assert!(results[0].contains("[... tool result middle pruned ...]"));
    assert!(results[0].ends_with("104000"), "{}", results[0]);
    assert!(requests[3]["messages"]
        .to_string()
        .contains("<compacted-summary>"));
}

#[tokio::test]
async fn a_message_larger_than_the_window_ends_its_turn_with_a_clear_error_and_the_next_turn_works()
{
    let (fake, _root, t, agent) = setup(&["tool-result-pruner", "spill"], true, "/tmp").await;
    fake.push([text("hello")]);
    assert_eq!(turn(&t, &agent, "hi").await["kind"], "completed");
    let pasted = numbers(30_000);
    let end = turn(&t, &agent, &pasted).await;
    assert_eq!(end["kind"], "error", "{end}");
    assert_eq!(end["error"]["code"], "CONTEXT_WINDOW_EXCEEDED", "{end}");
    let message = end["error"]["message"].as_str().unwrap();
    let ev = events(&t, &agent).await;
    let seq = of_type(&ev, event::USER_MESSAGE)[1]["seq"]
        .as_u64()
        .unwrap();
    for part in [
        "fake/m1 (4096 tokens)".to_owned(),
        format!("the user message at seq {seq} is about"),
        "30000 bytes".to_owned(),
        format!("about {ITEM_TOKENS} tokens, for the requests after this one"),
        "the next prompt works".to_owned(),
    ] {
        assert!(message.contains(&part), "{part}: {message}");
    }
    // The server turned the request away (once, the retry after a
    // compaction that could not shrink anything was not sent).
    assert_eq!(fake.overflowed(), [1]);
    // The log keeps the message whole; what the model sees is cut.
    assert!(ev.iter().any(|e| e["data"]["content"][0]["text"] == pasted));
    let prunes = of_type(&ev, records::PRUNE);
    assert_eq!(prunes.len(), 1);
    assert_eq!(prunes[0]["data"]["shadowedSeqs"], json!([seq]));

    // A plain follow-up works, the cut message in its history.
    fake.push([text("ok")]);
    assert_eq!(turn(&t, &agent, "thanks").await["kind"], "completed");
    let requests = fake.requests();
    let last: &Value = requests.last().unwrap();
    let sent = last["messages"].to_string();
    assert!(sent.contains("thanks"));
    assert!(sent.contains("does not fit the model's context window"));
    assert!(!sent.contains(&pasted[10_000..10_100]));
    assert_eq!(fake.overflowed(), [1]);
}
