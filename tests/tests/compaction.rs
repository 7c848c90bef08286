//! Context management through the real plugins against the fake model:
//! automatic compaction at 80% of the window (one marked summary request,
//! then a request holding the checkpoint, the recent turns verbatim and
//! only whole tool-call/result pairs), recovery from
//! `CONTEXT_WINDOW_EXCEEDED`, a failed summary that changes nothing, and a
//! resume after a compaction that derives the same history.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::names::{service, sessions, tool};
use dsh_sdk::vocab::compaction::{self as records, PREAMBLE};
use dsh_sdk::vocab::{event, ContentBlock};
use dsh_testkit::agent::{events, kinds, new_agent, of_type, turn};
use dsh_testkit::fake_llm::{text, tool_calls, Answer, FakeLlm};
use dsh_testkit::{core_rows, TempDir, TestHost};
use serde_json::{json, Value};

/// A window of 10,000 tokens for the kit's `fake` route: compaction at
/// 8,000, 1,600 kept verbatim.
fn rows(fake: &FakeLlm, root: &std::path::Path, compaction: &str) -> String {
    core_rows(&fake.base_url, root).replace(
        "streamIdleTimeoutMs = 1500 }",
        "streamIdleTimeoutMs = 1500, defaultContextWindow = 10000 }",
    ) + &format!(
        "[[row]]\nid = \"compaction-basic\"\nplugin = \"compaction-basic\"\n{compaction}\n"
    )
}

async fn host(fake: &FakeLlm, root: &std::path::Path, compaction: &str) -> TestHost {
    let t = TestHost::start().await;
    t.apply(&rows(fake, root, compaction)).await;
    t.assert_all_active().await;
    t
}

/// A fake model, a sessions root, a host with compaction on, and an agent.
async fn agent_host() -> (FakeLlm, TempDir, TestHost, String) {
    let fake = FakeLlm::start().await;
    let root = TempDir::new("sessions");
    let t = host(&fake, root.path(), "").await;
    let agent = new_agent(&t, "/tmp").await;
    (fake, root, t, agent)
}

/// A text answer whose usage reports `prompt` input tokens.
fn answer_using(answer: &str, prompt: u64) -> Answer {
    Answer::Sse(vec![
        Some(json!({"choices": [{"delta": {"content": answer}}]}).to_string()),
        Some(json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}).to_string()),
        Some(
            json!({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": 10}})
                .to_string(),
        ),
        Some("[DONE]".into()),
    ])
}

const SUMMARY: &str = "## Primary Request and Intent\n- the summary";

/// The output cap of a summary request on the 10,000-token window: a
/// quarter of it (`summaryShare`), under the configured 8,192.
const SUMMARY_CAP: u64 = 2500;

fn derive(v: Value) -> Vec<Value> {
    serde_json::from_value(v).unwrap()
}

async fn derived(t: &TestHost, agent: &str) -> Vec<Value> {
    derive(
        t.call(service::SESSIONS, sessions::DERIVE, json!({"id": agent}))
            .await,
    )
}

/// The compaction records and the checkpoint, adjacent and in order.
fn assert_compaction_records(ev: &[Value], turn: u64) -> Value {
    let start = ev
        .iter()
        .position(|e| e["type"] == records::START)
        .expect("a compaction/start");
    let k: Vec<&str> = ev[start..start + 4]
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        k,
        [
            records::START,
            records::SUMMARY,
            event::USER_MESSAGE,
            records::END
        ]
    );
    let (s, summary, checkpoint, end) =
        (&ev[start], &ev[start + 1], &ev[start + 2], &ev[start + 3]);
    assert_eq!(s["data"]["turn"], turn);
    assert_eq!(end["data"]["turn"], turn);
    assert!(end["data"].get("error").is_none(), "{end}");
    let id = &s["data"]["compactionId"];
    assert_eq!(&summary["data"]["compactionId"], id);
    assert_eq!(summary["data"]["llmStreamCall"], true);
    assert_eq!(summary["data"]["maxTokens"], SUMMARY_CAP);
    assert_eq!(checkpoint["surfaceOp"]["op"], "replace");
    assert_eq!(checkpoint["data"]["source"]["plugin"], "compact");
    assert_eq!(&checkpoint["data"]["source"]["compactionId"], id);
    let sources = checkpoint["sourceEventSeqs"].as_array().unwrap();
    assert_eq!(sources[0], s["seq"]);
    assert_eq!(sources[1], summary["seq"]);
    assert_eq!(
        &sources[2..],
        summary["data"]["shadowedSeqs"]
            .as_array()
            .unwrap()
            .as_slice()
    );
    checkpoint.clone()
}

#[tokio::test]
async fn crossing_the_threshold_compacts_once_and_keeps_the_recent_turns() {
    let (fake, _root, t, agent) = agent_host().await;
    let first = "alpha ".repeat(1400);
    let big = "x".repeat(6400);
    let answer = "omega ".repeat(1000);
    fake.push([
        tool_calls(&[(
            tool::BASH,
            json!({"command": "echo small", "description": "echo"}),
        )]),
        text("done"),
        tool_calls(&[(
            tool::BASH,
            json!({"command": format!("printf '{big}'"), "description": "print"}),
        )]),
        answer_using(&answer, 8500),
        text(SUMMARY),
        text("third answer"),
    ]);
    assert_eq!(turn(&t, &agent, &first).await["kind"], "completed");
    assert_eq!(turn(&t, &agent, "second").await["kind"], "completed");
    assert_eq!(
        fake.requests().len(),
        4,
        "no compaction below the threshold"
    );
    assert_eq!(turn(&t, &agent, "third").await["kind"], "completed");

    let requests = fake.requests();
    assert_eq!(requests.len(), 6, "one summary request, then the step's");
    let headers = fake.headers();
    let marked: Vec<usize> = (0..headers.len())
        .filter(|i| {
            headers[*i]
                .to_lowercase()
                .contains("x-deepseek-harness-compact: 1")
        })
        .collect();
    assert_eq!(marked, [4], "only the summary request is marked");
    let summary_request = &requests[4];
    assert_eq!(summary_request["max_tokens"], SUMMARY_CAP);
    let asked = summary_request["messages"].as_array().unwrap();
    let last = asked.last().unwrap()["content"].as_str().unwrap();
    assert!(
        last.starts_with("You are now acting as a compaction engine"),
        "{last}"
    );
    // The same system prompt and tools as the conversation's requests.
    assert_eq!(asked[0], requests[3]["messages"][0]);
    assert_eq!(summary_request["tools"], requests[3]["tools"]);
    assert!(asked
        .iter()
        .any(|m| m["content"].as_str().is_some_and(|c| c.contains("alpha"))));

    // The next request: the checkpoint first, then the kept turn verbatim
    // with its whole tool pair, then the new prompt.
    let sent = requests[5]["messages"].as_array().unwrap();
    let texts: Vec<String> = sent.iter().map(|m| m["content"].to_string()).collect();
    assert!(
        texts[1].contains("<compacted-summary>") && texts[1].contains("the summary"),
        "{}",
        texts[1]
    );
    assert!(texts[1].contains(&PREAMBLE[..40]));
    assert!(
        !texts.iter().any(|t| t.contains("alpha")),
        "the first turn is summarized"
    );
    assert!(
        texts.iter().any(|t| t.contains(&big[..100])),
        "the kept tool result: {}",
        texts
            .iter()
            .map(|t| &t[..t.len().min(200)])
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(texts.iter().any(|t| t.contains("omega")));
    assert!(texts.last().unwrap().contains("third"));
    let mut calls = std::collections::HashSet::new();
    for m in sent {
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            calls.insert(c["id"].as_str().unwrap().to_owned());
        }
        if m["role"] == "tool" {
            assert!(
                calls.contains(m["tool_call_id"].as_str().unwrap()),
                "a result without its call: {m}"
            );
        }
    }
    assert_eq!(calls.len(), 1, "the kept call only");

    // The log keeps every original event; the history has the checkpoint.
    let ev = events(&t, &agent).await;
    let checkpoint = assert_compaction_records(&ev, 3);
    assert!(ev
        .iter()
        .any(|e| e["data"]["content"][0]["text"].as_str() == Some(first.as_str())));
    let history = derived(&t, &agent).await;
    assert_eq!(history[0]["content"], checkpoint["data"]["content"]);
    assert_eq!(of_type(&ev, records::START).len(), 1);
}

#[tokio::test]
async fn context_window_exceeded_compacts_and_retries_the_step() {
    let (fake, _root, t, agent) = agent_host().await;
    fake.push([
        text("ok"),
        Answer::Status(
            400,
            vec![],
            "{\"error\":{\"message\":\"This model's maximum context length is 10000 tokens\"}}"
                .into(),
        ),
        text(SUMMARY),
        text("recovered"),
    ]);
    assert_eq!(
        turn(&t, &agent, &"alpha ".repeat(1400)).await["kind"],
        "completed"
    );
    assert_eq!(turn(&t, &agent, "next").await["kind"], "completed");
    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    let sent = requests[3]["messages"].as_array().unwrap();
    assert!(sent[1]["content"]
        .as_str()
        .unwrap()
        .contains("<compacted-summary>"));
    assert!(sent.last().unwrap()["content"]
        .as_str()
        .unwrap()
        .contains("next"));
    let ev = events(&t, &agent).await;
    assert_compaction_records(&ev, 2);
    // One step: the failed request and its retry.
    assert_eq!(of_type(&ev, event::STEP_START).len(), 2);
    assert_eq!(
        of_type(&ev, event::ASSISTANT_MESSAGE).last().unwrap()["data"]["message"]["content"][0]
            ["text"],
        "recovered"
    );
}

#[tokio::test]
async fn a_failed_summary_changes_no_history_and_the_turn_goes_on() {
    let (fake, _root, t, agent) = agent_host().await;
    fake.push([
        answer_using(&"omega ".repeat(1100), 8500),
        Answer::Status(
            400,
            vec![],
            "{\"error\":{\"message\":\"bad summary request\"}}".into(),
        ),
        // Still over the threshold at the next step.
        with_usage(
            tool_calls(&[(
                tool::BASH,
                json!({"command": "true", "description": "noop"}),
            )]),
            8500,
        ),
        text("still here"),
    ]);
    assert_eq!(
        turn(&t, &agent, &"alpha ".repeat(1400)).await["kind"],
        "completed"
    );
    let before = derived(&t, &agent).await;
    assert_eq!(turn(&t, &agent, "next").await["kind"], "completed");
    // One summary attempt: the turn's second step does not try again.
    assert_eq!(fake.requests().len(), 4);
    let ev = events(&t, &agent).await;
    let k = kinds(&ev);
    assert!(
        !ev.iter().any(|e| e["surfaceOp"]["op"] == "replace"),
        "{k:?}"
    );
    let end = of_type(&ev, records::END);
    assert_eq!(end.len(), 1);
    let error = end[0]["data"]["error"].as_str().unwrap();
    assert!(error.contains("bad summary request"), "{error}");
    assert_eq!(of_type(&ev, records::START).len(), 1);
    assert!(of_type(&ev, records::SUMMARY).is_empty());
    // The history is what it was, plus the new turn's two steps.
    let after = derived(&t, &agent).await;
    assert_eq!(after[..before.len()], before[..]);
    assert_eq!(after.len(), before.len() + 4);
    // The request after the failed summary still carried everything.
    let sent = fake.requests()[2]["messages"].to_string();
    assert!(sent.contains("alpha"));
}

#[tokio::test]
async fn resume_after_a_compaction_derives_the_same_history_and_a_session_over_the_threshold_compacts_first(
) {
    let fake = FakeLlm::start().await;
    let root = TempDir::new("sessions");
    // A session over the threshold, written with automatic compaction off.
    let t = host(&fake, root.path(), "config = { auto = false }").await;
    let agent = new_agent(&t, "/tmp").await;
    fake.push([answer_using(&"omega ".repeat(1100), 8500)]);
    assert_eq!(
        turn(&t, &agent, &"alpha ".repeat(1400)).await["kind"],
        "completed"
    );
    t.call(service::SESSIONS, sessions::FLUSH, json!({"id": agent}))
        .await;
    t.shutdown().await;

    // Resumed with compaction on: the first request comes after a summary.
    let t = host(&fake, root.path(), "").await;
    let resume = json!({"sessionId": agent, "agentOptions": {"provider": "fake", "model": "m1"}});
    t.call(
        service::AGENT_LOOP,
        dsh_sdk::names::agent_loop::RESUME,
        resume.clone(),
    )
    .await;
    fake.push([text(SUMMARY), text("after resume")]);
    assert_eq!(turn(&t, &agent, "next").await["kind"], "completed");
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert!(fake.headers()[1]
        .to_lowercase()
        .contains("x-deepseek-harness-compact: 1"));
    assert!(!requests[2]["messages"].to_string().contains("alpha"));
    let history = derived(&t, &agent).await;
    t.call(service::SESSIONS, sessions::FLUSH, json!({"id": agent}))
        .await;
    t.shutdown().await;

    // Resumed again: the same history, checkpoint included.
    let t = host(&fake, root.path(), "").await;
    t.call(
        service::AGENT_LOOP,
        dsh_sdk::names::agent_loop::RESUME,
        resume,
    )
    .await;
    assert_eq!(derived(&t, &agent).await, history);
    assert!(history[0]["content"]
        .to_string()
        .contains("<compacted-summary>"));
}

/// The file of session `id` under `root` (the original's layout).
fn log_file(root: &std::path::Path, id: &str) -> std::path::PathBuf {
    for dir in std::fs::read_dir(root).unwrap().flatten() {
        let f = dir.path().join(id).join("session.jsonl");
        if f.exists() {
            return f;
        }
    }
    panic!("no session.jsonl of {id} under {}", root.display());
}

#[tokio::test]
async fn an_original_log_with_a_prune_and_a_compaction_derives_what_the_original_derives() {
    let fake = FakeLlm::start().await;
    let root = TempDir::new("sessions");
    let plain = |rows: String| {
        rows.replace(
            "plugin = \"session-jsonl\"\nconfig = {",
            "plugin = \"session-jsonl\"\nconfig = { compression = \"none\",",
        )
    };
    let t = TestHost::start().await;
    t.apply(&plain(rows(
        &fake,
        root.path(),
        "config = { auto = false }",
    )))
    .await;
    t.assert_all_active().await;
    let agent = new_agent(&t, "/tmp").await;
    fake.push([
        tool_calls(&[(
            tool::BASH,
            json!({"command": "seq 1 3000", "description": "count"}),
        )]),
        text("counted"),
        text("second answer"),
    ]);
    assert_eq!(turn(&t, &agent, "count to 3000").await["kind"], "completed");
    assert_eq!(turn(&t, &agent, "and now?").await["kind"], "completed");
    t.call(service::SESSIONS, sessions::FLUSH, json!({"id": agent}))
        .await;
    let ev = events(&t, &agent).await;
    t.shutdown().await;

    // What the original appends between turns: a prune of the tool result,
    // then a compaction of the first turn, in its records' shapes.
    let seq_of = |kind: &str, nth: usize| of_type(&ev, kind)[nth]["seq"].as_u64().unwrap();
    let (u1, a1, r1, a2) = (
        seq_of(event::USER_MESSAGE, 0),
        seq_of(event::ASSISTANT_MESSAGE, 0),
        seq_of(event::TOOL_RESULT, 0),
        seq_of(event::ASSISTANT_MESSAGE, 1),
    );
    let mut next = ev.len() as u64;
    let mut row = |kind: &str, data: Value, extra: Value| {
        let mut e =
            json!({"type": kind, "seq": next, "time": 1_800_000_000_000u64 + next, "data": data});
        for (k, v) in extra.as_object().unwrap() {
            e[k] = v.clone();
        }
        next += 1;
        e
    };
    let mut pruned = ev[r1 as usize]["data"].clone();
    pruned["message"]["content"][0]["content"] = json!([{"type": "text", "text": "1\n2\n\n\n[... tool result middle pruned ...]\n\n2999\n3000\n"}]);
    let prune = row(
        records::PRUNE,
        json!({"shadowedRange": {"start": r1, "end": r1}, "shadowedSeqs": [r1], "shadowedTokenCount": 3500}),
        json!({}),
    );
    let r1b = prune["seq"].as_u64().unwrap() + 1;
    let replacement = row(
        event::TOOL_RESULT,
        pruned.clone(),
        json!({"sourceEventSeqs": [r1], "surfaceOp": {"op": "replace", "start": r1, "end": r1}}),
    );
    let start = row(
        records::START,
        json!({"compactionId": "c-orig", "sourceCommandId": "cmd-1", "turn": null}),
        json!({}),
    );
    let summary_blocks =
        json!([{"type": "text", "text": "## Primary Request and Intent\n- count"}]);
    let summary = row(
        records::SUMMARY,
        json!({"compactionId": "c-orig", "sourceCommandId": "cmd-1", "summary": summary_blocks,
        "rawOutput": summary_blocks, "llmStreamCall": true, "shadowedRange": {"start": u1, "end": a2},
        "shadowedSeqs": [u1, a1, r1b, a2], "shadowedTokenCount": 120, "provider": "fake", "model": "m1", "maxTokens": 8192}),
        json!({}),
    );
    let typed_summary: Vec<ContentBlock> = serde_json::from_value(summary_blocks.clone()).unwrap();
    let checkpoint_message = json!({"id": "ckpt-1", "role": "user",
        "content": records::checkpoint_content(&typed_summary),
        "source": {"kind": "plugin", "plugin": "compact", "compactionId": "c-orig", "sourceCommandId": "cmd-1"}});
    let checkpoint = row(
        event::USER_MESSAGE,
        checkpoint_message.clone(),
        json!({
        "sourceEventSeqs": [start["seq"], summary["seq"], u1, a1, r1b, a2],
        "surfaceOp": {"op": "replace", "start": u1, "end": a2}}),
    );
    let end = row(
        records::END,
        json!({"compactionId": "c-orig", "sourceCommandId": "cmd-1", "turn": null}),
        json!({}),
    );
    let file = log_file(root.path(), &agent);
    let mut text = std::fs::read_to_string(&file).unwrap();
    for e in [prune, replacement, start, summary, checkpoint, end] {
        text.push_str(&format!("{e}\n"));
    }
    std::fs::write(&file, &text).unwrap();

    // The original's derivation: the checkpoint in place of the first
    // turn, then the second turn as logged.
    let u2 = &ev[seq_of(event::USER_MESSAGE, 1) as usize]["data"];
    let a3 = &ev[seq_of(event::ASSISTANT_MESSAGE, 2) as usize]["data"]["message"];
    let expected = vec![checkpoint_message, u2.clone(), a3.clone()];

    let t = TestHost::start().await;
    t.apply(&plain(rows(&fake, root.path(), ""))).await;
    t.assert_all_active().await;
    t.call(service::SESSIONS, sessions::RESUME, json!({"id": agent}))
        .await;
    assert_eq!(derived(&t, &agent).await, expected);
    // The meter folds the same surface.
    let m = t
        .call(
            service::COMPACTION,
            dsh_sdk::names::compaction::MEASURE,
            json!({"agent": agent}),
        )
        .await;
    assert_eq!(m["nodes"], 3, "{m}");
    assert_eq!(m["contextWindow"], 10000, "{m}");
    // The file on disk is as written.
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
}

#[tokio::test]
async fn a_cancel_during_a_summary_stops_it_and_the_turn_ends_with_the_failure_logged() {
    let (fake, _root, t, agent) = agent_host().await;
    fake.push([
        answer_using(&"omega ".repeat(1100), 8500),
        dsh_testkit::fake_llm::stall_after("## Primary"),
    ]);
    assert_eq!(
        turn(&t, &agent, &"alpha ".repeat(1400)).await["kind"],
        "completed"
    );
    dsh_testkit::agent::send(&t, dsh_sdk::names::agents::FOLLOWUP, &agent, "next").await;
    // The summary request is under way.
    dsh_testkit::wait_for("the summary request", || fake.requests().len() == 2).await;
    let asked = std::time::Instant::now();
    t.call(
        service::AGENTS,
        dsh_sdk::names::agents::CANCEL,
        json!({"agent": agent}),
    )
    .await;
    assert_eq!(
        dsh_testkit::agent::idle(&t, &agent).await["kind"],
        "aborted"
    );
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(1),
        "the cancel waited for the summary (its stream idles 1.5 s)"
    );
    // Its failure is logged inside the turn, before the turn's end.
    let ev = events(&t, &agent).await;
    let end = of_type(&ev, records::END);
    assert_eq!(end.len(), 1, "{:?}", kinds(&ev));
    assert_eq!(end[0]["data"]["turn"], 2);
    let error = end[0]["data"]["error"].as_str().unwrap();
    assert!(error.contains("ABORTED"), "{error}");
    let turn_end = of_type(&ev, event::TURN_END)[1]["seq"].as_u64().unwrap();
    assert!(end[0]["seq"].as_u64().unwrap() < turn_end);
    // The lock is free: the next turn compacts.
    fake.push([text(SUMMARY), text("after")]);
    assert_eq!(turn(&t, &agent, "again").await["kind"], "completed");
    assert_eq!(
        of_type(&events(&t, &agent).await, records::SUMMARY).len(),
        1
    );
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

#[tokio::test]
async fn pressure_prunes_old_results_first_and_leaves_the_unanswered_ones() {
    let fake = FakeLlm::start().await;
    let root = TempDir::new("sessions");
    let pruner = "[[row]]\nid = \"tool-result-pruner\"\nplugin = \"tool-result-pruner\"\n";
    let t = TestHost::start().await;
    t.apply(&(rows(&fake, root.path(), "") + pruner)).await;
    t.assert_all_active().await;
    let agent = new_agent(&t, "/tmp").await;
    let bash = |c: char, n: usize| {
        let command = format!("yes {c} | tr -d '\\n' | head -c {n}");
        let id = format!("call-{c}");
        dsh_testkit::fake_llm::calls(&[(
            id.as_str(),
            tool::BASH,
            json!({"command": command, "description": "print"}),
        )])
    };
    fake.push([
        bash('y', 20_000),
        with_usage(bash('z', 9_000), 8500),
        text("done"),
    ]);
    assert_eq!(turn(&t, &agent, "print").await["kind"], "completed");
    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "pruning was enough: no summary request");
    let results = fake.tool_results(2);
    let shape: Vec<String> = requests[2]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| format!("{}:{}", m["role"], m.to_string().len()))
        .collect();
    assert_eq!(
        results.len(),
        2,
        "{shape:?} of {} requests: {:?}",
        requests.len(),
        kinds(&events(&t, &agent).await)
    );
    let marker = "\n\n[... tool result middle pruned ...]\n\n";
    assert!(results[0].contains(marker), "{}", &results[0][..200]);
    assert!(results[0].starts_with(&"y".repeat(100)));
    assert_eq!(results[0].matches('y').count(), 4096 + 1024);
    assert_eq!(
        results[1].matches('z').count(),
        9_000,
        "the unanswered result is whole"
    );

    let ev = events(&t, &agent).await;
    let prunes = of_type(&ev, records::PRUNE);
    assert_eq!(prunes.len(), 1);
    let original = of_type(&ev, event::TOOL_RESULT)[0]["seq"].clone();
    assert_eq!(prunes[0]["data"]["shadowedSeqs"], json!([original]));
    let replacement = &ev[prunes[0]["seq"].as_u64().unwrap() as usize + 1];
    assert_eq!(replacement["type"], event::TOOL_RESULT);
    assert_eq!(
        replacement["surfaceOp"],
        json!({"op": "replace", "start": original, "end": original})
    );
    assert!(of_type(&ev, records::START).is_empty());
    // The log keeps the whole original.
    assert!(
        ev[original.as_u64().unwrap() as usize]["data"]
            .to_string()
            .matches('y')
            .count()
            >= 20_000
    );

    // Nothing is left to prune before the last result; a keepFrom off the
    // surface is refused.
    let last = of_type(&ev, event::TOOL_RESULT)[1]["seq"].clone();
    let again = t
        .call(
            service::TOOL_RESULT_PRUNER,
            dsh_sdk::names::tool_result_pruner::PRUNE_SESSION,
            json!({"agent": agent, "keepFrom": last}),
        )
        .await;
    assert_eq!(again, json!({"pruned": [], "charsRemoved": 0}));
    let bad = t
        .host
        .call(
            service::TOOL_RESULT_PRUNER,
            dsh_sdk::names::tool_result_pruner::PRUNE_SESSION,
            json!({"agent": agent, "keepFrom": 99_999}),
        )
        .await
        .unwrap_err();
    assert!(bad.message.contains("keepFrom 99999"), "{bad}");
}
