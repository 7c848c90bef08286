//! Conformance, the invariant companions of §10.3 (request reconstruction,
//! "model-visible means logged") and §10.7 (stream grammar): the
//! `tests/fixtures/invariants` companion serves the provider route `checked`,
//! checks every request against the session log and every answer's chunk
//! grammar, and forwards to the fake model (`fake`) or an `llm-script` route.
//! A violation ends the stream with `finish{error}` of code `INVARIANT` and
//! is recorded in the companion's `violations`. Nothing here sleeps.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_testkit::agent::{agent_with, core_host_staged, idle, logged, new_agent, send, turn};
use dsh_testkit::fake_llm::{calls, text, text_payloads, tool_calls, Answer, Gate};
use dsh_testkit::fixtures::{hooks_row, kit_row, wait_kit_journal, HOOKS};
use dsh_testkit::TestHost;
use serde_json::{json, Value};

const INVARIANTS: (&str, &str) = ("dsh-fixture-invariants", "invariants.so");

/// The companion row: route `checked` forwards to provider `target`.
fn companion(target: &str) -> String {
    format!(
        "[[row]]\nid = \"invariants\"\nplugin = \"invariants\"\n\
         config = {{ tag = \"c\", route = \"checked\", target = \"{target}\" }}\n"
    )
}

async fn checked_host(more: &str) -> (TestHost, dsh_testkit::fake_llm::FakeLlm) {
    let more = format!("{}{more}", companion("fake"));
    core_host_staged(&[INVARIANTS, HOOKS], |rows| format!("{rows}{more}")).await
}

async fn checked_agent(t: &TestHost, cwd: &str) -> String {
    agent_with(t, json!({"provider": "checked", "model": "m1", "cwd": cwd})).await
}

async fn violations(t: &TestHost) -> Vec<Value> {
    let v = t.call("invariants:c", "violations", json!({})).await;
    serde_json::from_value(v).unwrap()
}

fn code(result: &Value) -> &str {
    result["error"]["code"].as_str().unwrap_or_default()
}

// ------------------------------------------------- request reconstruction

/// §10.3 invariant: every request of a multi-step tool session equals what
/// the log derives, so the companion accepts them all.
#[tokio::test(flavor = "current_thread")]
async fn the_request_reconstruction_invariant_accepts_equal_requests() {
    let (t, fake) = checked_host("").await;
    let dir = dsh_testkit::TempDir::new("inv-ws");
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    fake.push([
        tool_calls(&[("read", json!({"file_path": "a.txt"}))]),
        tool_calls(&[
            ("read", json!({"file_path": "a.txt"})),
            ("read", json!({"file_path": "missing.txt"})),
        ]),
        text("Done."),
    ]);
    let agent = checked_agent(&t, &dir.path().display().to_string()).await;
    assert_eq!(turn(&t, &agent, "read").await, json!({"kind": "completed"}));
    fake.push([text("Again.")]);
    assert_eq!(
        turn(&t, &agent, "once more").await,
        json!({"kind": "completed"})
    );
    assert_eq!(fake.requests().len(), 4);
    assert_eq!(violations(&t).await, Vec::<Value>::new());
}

/// §10.3 invariant: a user message an `agent/request` listener appends in
/// the step, before the model is called, is part of the derived history the
/// request carries, so the companion accepts it.
#[tokio::test(flavor = "current_thread")]
async fn the_invariant_includes_context_appended_in_step_before_dispatch() {
    let note = json!({"id": "note-1", "role": "user", "content": [{"type": "text", "text": "a note"}], "source": {"kind": "user"}});
    let hooks = hooks_row(
        "ctx",
        json!({"listeners": [{"event": "agent/request", "once": true, "calls": [
            {"service": "sessions", "method": "append", "params": {"id": "$agent", "type": "user/message", "data": note, "surfaceOp": "append"}}
        ]}]}),
    );
    let (t, fake) = checked_host(&hooks).await;
    fake.push([text("Seen.")]);
    let agent = checked_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "hi").await, json!({"kind": "completed"}));
    assert_eq!(violations(&t).await, Vec::<Value>::new());
    let sent = fake.requests()[0]["messages"].to_string();
    assert!(sent.contains("a note"), "{sent}");
}

/// §10.3 invariant: an `llm/stream` listener that changes what the model is
/// sent (here the temperature) makes the request diverge from the logged
/// header; the companion rejects it with `INVARIANT` and the model is never
/// called.
#[tokio::test(flavor = "current_thread")]
async fn the_invariant_rejects_divergence() {
    let hooks = hooks_row(
        "drift",
        json!({"listeners": [{"event": "llm/stream", "merge": {"temperature": 0.9}}]}),
    );
    let (t, fake) = checked_host(&hooks).await;
    fake.push([text("never")]);
    let agent = checked_agent(&t, "/tmp").await;
    let r = turn(&t, &agent, "hi").await;
    assert_eq!(code(&r), "INVARIANT", "{r}");
    assert_eq!(fake.requests().len(), 0);
    let v = violations(&t).await;
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0]["check"], "request-reconstruction");
    assert!(
        v[0]["message"]
            .as_str()
            .unwrap()
            .contains("diverges from the folded request header"),
        "{v:?}"
    );
}

/// §10.3 invariant: a request on a session whose log has no `step/start` /
/// `request/header` is not model-visible-means-logged; the companion rejects
/// it with `INVARIANT`.
#[tokio::test(flavor = "current_thread")]
async fn the_invariant_rejects_a_missing_boundary_or_header() {
    let (t, fake) = checked_host("").await;
    t.call("sessions", "create", json!({"id": "bare"})).await;
    let request =
        json!({"provider": "checked", "model": "m1", "messages": [], "sessionId": "bare"});
    let chunks = stream(&t, request.clone()).await;
    assert_eq!(chunks.len(), 1, "{chunks:?}");
    assert_eq!(chunks[0]["reason"]["failure"]["code"], "INVARIANT");
    for (kind, data) in [
        ("turn/start", json!({"turn": 1})),
        ("step/start", json!({"turn": 1, "step": 1})),
    ] {
        t.call(
            "sessions",
            "append",
            json!({"id": "bare", "type": kind, "data": data}),
        )
        .await;
    }
    let chunks = stream(&t, request).await;
    assert_eq!(chunks[0]["reason"]["failure"]["code"], "INVARIANT");
    let v = violations(&t).await;
    let messages: Vec<&str> = v.iter().map(|x| x["message"].as_str().unwrap()).collect();
    assert_eq!(
        messages,
        [
            "a loop-built request with no step/start in its session log",
            "a loop-built request with no request/header event in its session log"
        ]
    );
    assert_eq!(fake.requests().len(), 0);
}

/// §10.3 invariant: an `llm/stream` listener that short-circuits (answers
/// the waterfall without `next`, with a rewritten request) cannot silence
/// the check: the companion sees what reaches the adapter and rejects it.
#[tokio::test(flavor = "current_thread")]
async fn the_invariant_runs_ahead_of_short_circuiting_stream_listeners() {
    let hooks = hooks_row(
        "short",
        json!({"listeners": [{"event": "llm/stream", "result": {"provider": "checked", "model": "other"}}]}),
    );
    let (t, fake) = checked_host(&hooks).await;
    fake.push([text("never")]);
    let agent = checked_agent(&t, "/tmp").await;
    let r = turn(&t, &agent, "hi").await;
    assert_eq!(code(&r), "INVARIANT", "{r}");
    assert_eq!(fake.requests().len(), 0);
    let v = violations(&t).await;
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(
        v[0]["message"],
        "a loop-built request must carry a session id"
    );
}

// ---------------------------------------------------------- stream grammar

/// Every item of one `llm.stream` call, as chunks.
async fn stream(t: &TestHost, req: Value) -> Vec<Value> {
    let mut s = t.host.call_stream("llm", "stream", req);
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while let Some(item) = tokio::time::timeout_at(deadline, s.next())
        .await
        .expect("the stream ended")
    {
        out.push(item.expect("a chunk"));
    }
    out
}

/// §10.7 invariant: a stream that breaks the chunk grammar (a delta outside
/// an open block, usage twice, a finish with an open block) is rejected by
/// the companion with one `INVARIANT` finish in place of the bad chunk; a
/// well-formed one passes intact. A chunk after finish never reaches the
/// companion: `llm` ends every stream at its first finish.
#[tokio::test(flavor = "current_thread")]
async fn the_stream_grammar_companion_rejects_a_bad_stream() {
    let dir = dsh_testkit::TempDir::new("inv-script");
    let finish = json!({"type": "finish", "reason": {"kind": "stop"}});
    let usage = json!({"type": "usage", "usage": {"inputTokens": 1, "outputTokens": 1}});
    let start = json!({"type": "block-start", "index": 0, "blockType": "text"});
    let delta = json!({"type": "text-delta", "index": 0, "text": "x"});
    let end = json!({"type": "block-end", "index": 0, "block": {"type": "text", "text": "x"}});
    let script = json!({"responses": [
        {"chunks": [start, delta, end, usage, finish]},
        {"chunks": [delta, finish]},
        {"chunks": [usage, usage, finish]},
        {"chunks": [start, finish]},
        {"chunks": [finish, usage]},
    ]});
    let path = dir.path().join("script.json");
    std::fs::write(&path, script.to_string()).unwrap();
    let more = format!(
        "[[row]]\nid = \"llm-script\"\nplugin = \"llm-script\"\n\
         config = {{ script = \"{}\", provider = \"scripted\" }}\n{}",
        path.display(),
        companion("scripted")
    );
    let (t, _fake) = core_host_staged(&[INVARIANTS], |rows| format!("{rows}{more}")).await;
    t.call("sessions", "create", json!({"id": "s"})).await;
    let header = json!({"config": {"provider": "checked", "model": "m1"}});
    for (kind, data) in [
        ("turn/start", json!({"turn": 1})),
        ("step/start", json!({"turn": 1, "step": 1})),
        (
            "request/header",
            json!({"header": header, "reason": "initial"}),
        ),
    ] {
        t.call(
            "sessions",
            "append",
            json!({"id": "s", "type": kind, "data": data}),
        )
        .await;
    }
    let request = json!({"provider": "checked", "model": "m1", "messages": [], "sessionId": "s"});
    let good = stream(&t, request.clone()).await;
    assert_eq!(good.len(), 5, "{good:?}");
    assert_eq!(good[4]["reason"]["kind"], "stop");
    let mut rejected = Vec::new();
    for _ in 0..3 {
        let chunks = stream(&t, request.clone()).await;
        let last = chunks.last().unwrap();
        assert_eq!(last["reason"]["failure"]["code"], "INVARIANT", "{chunks:?}");
        rejected.push(chunks.len());
    }
    // The bad chunk itself is never forwarded.
    assert_eq!(rejected, [1, 2, 2]);
    let v = violations(&t).await;
    let messages: Vec<&str> = v.iter().map(|x| x["message"].as_str().unwrap()).collect();
    assert_eq!(
        messages,
        [
            "text delta at index 0 requires an open text block, got undefined",
            "LLM stream emitted usage more than once",
            "LLM stream finished with 1 open block(s)",
        ]
    );
    assert!(v.iter().all(|x| x["check"] == "stream-grammar"));
    let after_finish = stream(&t, request).await;
    assert_eq!(after_finish, [finish]);
    assert_eq!(violations(&t).await.len(), 3);
}

// ------------------------------------- failure seams: the session closed

/// The `agent/error` payloads the loop-kit `errs` journaled.
fn agent_errors(journal: &[Value]) -> Vec<Value> {
    journal
        .iter()
        .filter(|e| e["event"] == "agent/error")
        .map(|e| e["payload"].clone())
        .collect()
}

async fn recording_host() -> (TestHost, dsh_testkit::fake_llm::FakeLlm) {
    let kit = kit_row("errs", "{ event = 'agent/error', action = 'record' }", "");
    core_host_staged(&[], |rows| {
        // The held stream must not trip the adapter's idle timeout.
        let rows = rows.replace("streamIdleTimeoutMs = 1500", "streamIdleTimeoutMs = 600000");
        format!("{rows}{kit}")
    })
    .await
}

/// coverage-edges: the session closed mid-stream makes the step's appends
/// fail and then the `turn/end` append too; both surface as `agent/error`
/// (the step's failure, then the refused `turn/end`), the agent goes idle,
/// and nothing is retried (one model request).
#[tokio::test(flavor = "current_thread")]
async fn a_rejected_turn_end_append_is_contained() {
    let (t, fake) = recording_host().await;
    let gate = Gate::new();
    let mut payloads = text_payloads("a long enough answer to split");
    let rest = payloads.split_off(1);
    fake.push([Answer::Gated(payloads, gate.clone(), rest)]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, "followup", &agent, "start").await;
    logged(&t, &agent, "assistant/chunk").await;
    t.call("sessions", "close", json!({"id": agent})).await;
    gate.open();
    idle(&t, &agent).await;
    let j = wait_kit_journal(&t, "errs", |j| agent_errors(j).len() >= 2).await;
    let errors = agent_errors(&j);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors
            .iter()
            .all(|e| e["error"]["code"] == "SESSION_NOT_FOUND"),
        "{errors:?}"
    );
    assert_eq!(fake.requests().len(), 1);
}

/// tool-calls: the session closed while a parallel group runs (from the
/// second call's `tools/pre-execute`) makes committing the group fail; the
/// scheduler first drains the group (both calls end) and then surfaces the
/// failure as `agent/error`, with no further model request.
#[tokio::test(flavor = "current_thread")]
async fn a_scheduler_failure_drains_then_surfaces() {
    let kit = kit_row(
        "errs",
        "{ event = 'agent/error', action = 'record' }",
        "{ name = 'k', parallel = true }",
    );
    let hooks = hooks_row(
        "close",
        json!({"listeners": [{"event": "tools/pre-execute", "when": {"exec": {"callId": "c2"}}, "once": true,
            "calls": [{"service": "sessions", "method": "close", "params": {"id": "$agent"}}]}]}),
    );
    let (t, fake) = core_host_staged(&[HOOKS], |rows| format!("{rows}{kit}{hooks}")).await;
    fake.push([calls(&[
        ("c1", "k", json!({"awaitStart": "c2"})),
        ("c2", "k", json!({})),
    ])]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, "followup", &agent, "go").await;
    let j = wait_kit_journal(&t, "errs", |j| !agent_errors(j).is_empty()).await;
    idle(&t, &agent).await;
    let events: Vec<String> = j
        .iter()
        .map(|e| {
            format!(
                "{}:{}",
                e["event"].as_str().unwrap(),
                e["callId"].as_str().unwrap_or("")
            )
        })
        .collect();
    let error_at = events.iter().position(|e| e == "agent/error:").unwrap();
    for call in ["tool:end:c1", "tool:end:c2"] {
        let ended = events.iter().position(|e| e == call);
        assert!(
            ended.is_some_and(|p| p < error_at),
            "{call} before the error: {events:?}"
        );
    }
    let errors = agent_errors(&j);
    assert_eq!(
        errors[0]["error"]["code"], "SESSION_NOT_FOUND",
        "{errors:?}"
    );
    assert_eq!(fake.requests().len(), 1);
}

// ------------------------------------------ configured agents' lookups

/// config-session-id: a configured exact id that does not resume makes the
/// loop ask the persistence whether it is stored; when that `list` fails,
/// the failure is contained: `agent-loop/config-start-failed` with the
/// backend's code, the other configured agent starts, the loop stays active.
#[tokio::test(flavor = "current_thread")]
async fn a_failing_persistence_lookup_of_a_configured_agent_is_contained() {
    let fake = dsh_testkit::fake_llm::FakeLlm::start().await;
    let t = TestHost::start().await;
    t.stage(HOOKS.0, HOOKS.1);
    t.stage("dsh-fixture-broken-persistence", "broken-persistence.so");
    let hooks = hooks_row(
        "f",
        json!({"listeners": [{"event": "agent-loop/config-start-failed"}]}),
    );
    let base = dsh_testkit::core_rows(&fake.base_url, &t.home.path().join("sessions")).replace(
        "plugin = \"session-jsonl\"",
        "plugin = \"broken-persistence\"",
    );
    let loop_row = "id = \"agent-loop\"\nplugin = \"agent-loop\"\n";
    assert!(base.ends_with(loop_row), "the kit's agent-loop row changed");
    let rows = |config: &str| format!("{base}config = {config}\n{hooks}");
    // The listener first (an emit reaches only listeners already there),
    // then the loop gets its configured agents.
    t.apply(&rows("{}")).await;
    t.assert_all_active().await;
    let config = r#"{ agents = [
        { id = "main", sessionId = "main-session", provider = "fake", model = "m1" },
        { id = "other", provider = "fake", model = "m1" } ] }"#;
    t.apply(&rows(config)).await;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (failed, agents) = loop {
        let j = dsh_testkit::fixtures::hooks_journal(&t, "f").await;
        let ids: Vec<String> =
            serde_json::from_value(t.call("agentLoop", "list", json!({})).await).unwrap();
        if !j.is_empty() && !ids.is_empty() {
            break (j, ids);
        }
        assert!(std::time::Instant::now() < until, "{j:?} {ids:?}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["payload"]["sessionId"], "main-session");
    assert_eq!(
        failed[0]["payload"]["error"]["code"],
        "PERSISTENCE_LIST_FAILED"
    );
    assert_eq!(agents.len(), 1, "{agents:?}");
    assert!(agents[0].starts_with("other"), "{agents:?}");
    assert_eq!(
        format!("{:?}", t.status("agent-loop").await.state),
        "Active"
    );
}
