//! Conformance, §10.2 Agent and §10.3 Agent loop (`loop.spec.ts`,
//! `cancel.spec.ts`, `interception.spec.ts`): the original's behaviours,
//! checked against the real plugins in a real host with the fake model
//! server. Seams are driven by the `hooks` fixture, whose listeners act while
//! the loop awaits them. Rows: tests/CONFORMANCE.md (§10.2, §10.3 first half).
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::time::{Duration, Instant};

use dsh_sdk::names::{agent_loop, agents, bus, service, sessions};
use dsh_sdk::vocab::event;
use dsh_testkit::agent::{
    agent_with, core_host_staged, events, idle, logged, new_agent, of_type, send, turn, user_texts,
    with_prompt_config,
};
use dsh_testkit::fake_llm::{stall_after, text, tool_calls, Answer, FakeLlm};
use dsh_testkit::fixtures::{hooks_journal, hooks_row, HOOKS};
use dsh_testkit::TestHost;
use serde_json::{json, Value};

const IDENTITY: &str = "You are an AI agent powered by DeepSeek Harness.";
const DEADLINE: Duration = Duration::from_secs(20);

/// `service.method(params)` as the hooks fixture calls it.
fn call(service: &str, method: &str, params: Value) -> Value {
    json!({"service": service, "method": method, "params": params})
}

/// The kit's core rows, with `system-prompt`'s config replaced by `prompt`.
fn rows(fake: &FakeLlm, t: &TestHost, prompt: &str, extra: &str) -> String {
    let base = dsh_testkit::core_rows(&fake.base_url, &t.home.path().join("sessions"));
    with_prompt_config(&base, prompt) + extra
}

const PERSONA: &str = "{ persona = \"You work in {{cwd}} with {{model}}.\" }";

async fn setup(extra: &str) -> (TestHost, FakeLlm) {
    setup_prompt(PERSONA, extra).await
}

async fn setup_prompt(prompt: &str, extra: &str) -> (TestHost, FakeLlm) {
    core_host_staged(&[HOOKS], |rows| with_prompt_config(&rows, prompt) + extra).await
}

/// The turn and step boundaries, in order.
fn frames(ev: &[Value]) -> Vec<String> {
    ev.iter()
        .filter_map(|e| e["type"].as_str())
        .filter(|k| {
            [
                event::TURN_START,
                event::TURN_END,
                event::STEP_START,
                event::STEP_END,
            ]
            .contains(k)
        })
        .map(str::to_owned)
        .collect()
}

/// The text contents of the messages of a DeepSeek request body.
fn request_texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_str())
        .map(str::to_owned)
        .collect()
}

/// Waits until the journal of `tag` has `n` entries.
async fn journal_len(t: &TestHost, tag: &str, n: usize) -> Vec<Value> {
    let until = Instant::now() + DEADLINE;
    loop {
        let j = hooks_journal(t, tag).await;
        if j.len() >= n || Instant::now() >= until {
            assert!(j.len() >= n, "journal {tag}: {j:?}");
            return j;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A finish with `length` after `content` (empty: no content at all).
fn max_tokens(content: &str) -> Answer {
    let mut events = Vec::new();
    if !content.is_empty() {
        events.push(Some(
            json!({"choices": [{"delta": {"content": content}}]}).to_string(),
        ));
    }
    events.push(Some(
        json!({"choices": [{"delta": {}, "finish_reason": "length"}]}).to_string(),
    ));
    events.push(Some(
        json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}).to_string(),
    ));
    events.push(Some("[DONE]".into()));
    Answer::Sse(events)
}

// ---------------------------------------------------------------- loop.spec

#[tokio::test]
async fn invalid_max_tokens_is_rejected_before_publication_and_a_valid_cap_seeds_the_first_request()
{
    let (t, fake) = setup("").await;
    let before = t.call(service::SESSIONS, sessions::LIST, json!({})).await;
    for bad in [
        json!(0),
        json!(-1),
        json!(1.5),
        json!(9_007_199_254_740_992u64),
    ] {
        let err = t
            .host
            .call(
                service::AGENT_LOOP,
                agent_loop::CREATE,
                json!({"agentOptions": {"provider": "fake", "model": "m1", "maxTokens": bad}}),
            )
            .await
            .expect_err("an invalid maxTokens is refused");
        assert_eq!(
            err.message, "agent maxTokens must be a positive safe integer",
            "{bad}"
        );
    }
    assert_eq!(
        t.call(service::SESSIONS, sessions::LIST, json!({})).await,
        before
    );
    assert_eq!(
        t.call(service::AGENT_LOOP, agent_loop::LIST, json!({}))
            .await,
        json!([])
    );

    fake.push([text("ok")]);
    let agent = agent_with(
        &t,
        json!({"provider": "fake", "model": "m1", "maxTokens": 9_007_199_254_740_991u64}),
    )
    .await;
    assert_eq!(turn(&t, &agent, "hi").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    let header = &of_type(&ev, event::REQUEST_HEADER)[0]["data"]["header"];
    assert_eq!(
        header["config"]["maxTokens"],
        json!(9_007_199_254_740_991u64)
    );
    assert_eq!(
        fake.requests()[0]["max_tokens"],
        json!(9_007_199_254_740_991u64)
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_simple_turn_derives_user_then_assistant() {
    let (t, fake) = setup("").await;
    fake.push([text("Hello.")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "hi").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    assert_eq!(ev[0]["type"], event::INBOX_SPLICED);
    assert_eq!(
        frames(&ev),
        [
            event::TURN_START,
            event::STEP_START,
            event::STEP_END,
            event::TURN_END
        ]
    );
    let derived = t
        .call(service::SESSIONS, sessions::DERIVE, json!({"id": agent}))
        .await;
    let derived = derived.as_array().expect("messages");
    assert_eq!(derived.len(), 2);
    assert_eq!(derived[0]["role"], "user");
    assert_eq!(
        derived[0]["content"],
        json!([{"type": "text", "text": "hi"}])
    );
    assert_eq!(derived[1]["role"], "assistant");
    assert_eq!(
        derived[1]["content"],
        json!([{"type": "text", "text": "Hello."}])
    );
    t.shutdown().await;
}

#[tokio::test]
async fn the_system_prompt_is_identity_persona_and_tool_guidance_joined_by_blank_lines() {
    let guidance = hooks_row(
        "g",
        json!({"sections": [{"name": "tools:guidance", "order": 150, "text": "Read before you edit in {{cwd}}."}]}),
    );
    let (t, fake) = setup(&guidance).await;
    fake.push([text("ok")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "hi").await, json!({"kind": "completed"}));
    let expected =
        format!("{IDENTITY}\n\nYou work in /tmp with m1.\n\nRead before you edit in /tmp.");
    let ev = events(&t, &agent).await;
    assert_eq!(
        of_type(&ev, event::REQUEST_HEADER)[0]["data"]["header"]["system"],
        json!(expected)
    );
    assert_eq!(
        fake.requests()[0]["messages"][0],
        json!({"role": "system", "content": expected})
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_strict_variable_render_failure_errors_the_turn_and_the_loop_keeps_serving() {
    let bad = hooks_row(
        "v",
        json!({"sections": [{"name": "typo", "order": 5, "text": "Hi {{modle}}."}]}),
    );
    let (t, fake) = setup(&bad).await;
    let agent = new_agent(&t, "/tmp").await;
    let reason = turn(&t, &agent, "hi").await;
    assert_eq!(reason["kind"], "error");
    assert_eq!(
        reason["error"]["message"],
        "unknown prompt variable \"{{modle}}\" in section \"typo\"; registered variables: cwd, model, provider"
    );
    assert!(fake.requests().is_empty());
    assert!(of_type(&events(&t, &agent).await, event::STEP_START).is_empty());

    t.apply(&rows(&fake, &t, PERSONA, "")).await;
    fake.push([text("fine")]);
    assert_eq!(
        turn(&t, &agent, "again").await,
        json!({"kind": "completed"})
    );
    t.shutdown().await;
}

/// The agent has no model: `agent/request` supplies the route, and an
/// assemble listener the `{{model}}` the prompt renders.
#[tokio::test]
async fn a_model_supplied_via_agent_request_renders_through_the_assemble_waterfall() {
    let hooks = hooks_row(
        "m",
        json!({"listeners": [
            {"event": bus::AGENT_REQUEST, "merge": {"provider": "fake", "model": "m2"}},
            {"event": bus::SYSTEM_PROMPT_ASSEMBLE, "merge": {"variables": {"model": "m2"}}}
        ]}),
    );
    let (t, fake) = setup(&hooks).await;
    fake.push([text("ok")]);
    let agent = agent_with(&t, json!({})).await;
    assert_eq!(turn(&t, &agent, "hi").await, json!({"kind": "completed"}));
    let body = &fake.requests()[0];
    assert_eq!(body["model"], "m2");
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": format!("{IDENTITY}\n\nYou work in /tmp with m2.")})
    );
    t.shutdown().await;
}

#[tokio::test]
async fn an_empty_assembly_omits_system() {
    let (t, fake) = setup_prompt("{ includeHarnessIdentity = false }", "").await;
    fake.push([text("ok")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "hi").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    let header = &of_type(&ev, event::REQUEST_HEADER)[0]["data"]["header"];
    assert!(header.get("system").is_none(), "{header}");
    let body = &fake.requests()[0];
    assert_eq!(body["messages"][0]["role"], "user");
    assert_eq!(body["messages"].as_array().map(Vec::len), Some(1));
    t.shutdown().await;
}

/// Input staged by the failing pre-step stays pending for the next wake
/// (and is claimed before that wake's prompt); the loop keeps serving.
#[tokio::test]
async fn a_throwing_pre_step_fails_the_turn_and_retains_staged_steering_until_a_wakeup() {
    let hooks = hooks_row(
        "p",
        json!({"listeners": [
            {"event": bus::AGENT_PRE_STEP, "once": true,
             "calls": [call(service::AGENTS, agents::STEER, json!({"agent": "$agent", "message": {"text": "staged"}}))],
             "fail": "HOOK_FAILED"},
            {"event": bus::AGENT_ERROR}
        ]}),
    );
    let (t, fake) = setup(&hooks).await;
    let agent = new_agent(&t, "/tmp").await;
    let reason = turn(&t, &agent, "first").await;
    assert_eq!(reason["kind"], "error");
    assert_eq!(reason["error"]["code"], "HOOK_FAILED");
    let ev = events(&t, &agent).await;
    assert_eq!(frames(&ev), [event::TURN_START, event::TURN_END]);
    assert!(fake.requests().is_empty());
    // The driver error is reported.
    let j = journal_len(&t, "p", 2).await;
    assert_eq!(j[1]["event"], bus::AGENT_ERROR);
    assert_eq!(j[1]["payload"]["turn"], 1);
    assert_eq!(j[1]["payload"]["error"]["code"], "HOOK_FAILED");
    // The steer (a waking send while running) did not start a turn of its
    // own: the staged message waited for this wake.
    fake.push([text("ok")]);
    assert_eq!(
        turn(&t, &agent, "second").await,
        json!({"kind": "completed"})
    );
    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, event::TURN_START).len(), 2);
    assert_eq!(user_texts(&ev), ["staged", "second"]);
    t.shutdown().await;
}

#[tokio::test]
async fn idle_inject_stages_durably_without_a_turn_and_enters_the_next_batch_verbatim() {
    let (t, fake) = setup("").await;
    let agent = new_agent(&t, "/tmp").await;
    let injected = json!({"id": "inj-1", "role": "user",
        "content": [{"type": "text", "text": "context"}],
        "source": {"kind": "plugin", "plugin": "conformance"}});
    t.call(
        service::AGENTS,
        agents::INJECT,
        json!({"agent": agent, "message": injected}),
    )
    .await;
    let ev = events(&t, &agent).await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(
        ev[0]["data"],
        json!({"target": "next-step", "start": 0, "inserted": [injected]})
    );
    assert_eq!(
        t.call(service::AGENTS, agents::STATUS, json!({"agent": agent}))
            .await["status"],
        "idle"
    );
    fake.push([text("ok")]);
    assert_eq!(
        turn(&t, &agent, "prompt").await,
        json!({"kind": "completed"})
    );
    let ev = events(&t, &agent).await;
    let users = of_type(&ev, event::USER_MESSAGE);
    assert_eq!(users[0]["data"], injected);
    assert_eq!(user_texts(&ev), ["context", "prompt"]);
    t.shutdown().await;
}

#[tokio::test]
async fn inject_during_a_tool_lands_after_the_tool_result() {
    let hooks = hooks_row(
        "x",
        json!({"listeners": [{"event": bus::TOOLS_EXECUTE,
            "calls": [call(service::AGENTS, agents::INJECT, json!({"agent": "$agent", "message": {"text": "late news"}}))]}]}),
    );
    let (t, fake) = setup(&hooks).await;
    let dir = dsh_testkit::TempDir::new("conf-loop-a");
    let file = dir.path().join("a.txt");
    std::fs::write(&file, "alpha\n").expect("write");
    fake.push([
        tool_calls(&[("read", json!({"file_path": file.display().to_string()}))]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(
        turn(&t, &agent, "read it").await,
        json!({"kind": "completed"})
    );
    let ev = events(&t, &agent).await;
    let result = of_type(&ev, event::TOOL_RESULT)[0]["seq"].as_u64();
    let step2 = ev
        .iter()
        .find(|e| e["type"] == event::STEP_START && e["data"]["step"] == 2)
        .and_then(|e| e["seq"].as_u64());
    let news = ev
        .iter()
        .find(|e| {
            e["type"] == event::USER_MESSAGE && e["data"]["content"][0]["text"] == "late news"
        })
        .and_then(|e| e["seq"].as_u64());
    assert!(
        result < step2 && step2 < news,
        "{result:?} {step2:?} {news:?}"
    );
    assert_eq!(news, step2.map(|s| s + 1));
    // The second request sees it after the tool result.
    let texts = request_texts(&fake.requests()[1]);
    assert_eq!(texts.last().map(String::as_str), Some("late news"));
    t.shutdown().await;
}

#[tokio::test]
async fn a_turn_stopping_listener_can_steer_another_step() {
    let hooks = hooks_row(
        "s",
        json!({"listeners": [{"event": bus::AGENT_TURN_STOPPING, "once": true,
            "calls": [call(service::AGENTS, agents::STEER, json!({"agent": "$agent", "message": {"text": "one more thing"}}))]}]}),
    );
    let (t, fake) = setup(&hooks).await;
    fake.push([text("first"), text("second")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    assert_eq!(
        frames(&ev),
        [
            event::TURN_START,
            event::STEP_START,
            event::STEP_END,
            event::STEP_START,
            event::STEP_END,
            event::TURN_END
        ]
    );
    assert_eq!(user_texts(&ev), ["go", "one more thing"]);
    assert_eq!(fake.requests().len(), 2);
    t.shutdown().await;
}

#[tokio::test]
async fn agent_request_replacement_switches_the_model_and_logs_a_change_header() {
    let hooks = hooks_row(
        "r",
        json!({"listeners": [{"event": bus::AGENT_REQUEST, "when": {"turn": 2}, "merge": {"model": "m2"}}]}),
    );
    let (t, fake) = setup(&hooks).await;
    fake.push([text("one"), text("two")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "a").await, json!({"kind": "completed"}));
    assert_eq!(turn(&t, &agent, "b").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    let headers = of_type(&ev, event::REQUEST_HEADER);
    assert_eq!(headers.len(), 2);
    assert_eq!(headers[0]["data"]["reason"], "initial");
    assert_eq!(headers[0]["data"]["header"]["config"]["model"], "m1");
    assert_eq!(headers[1]["data"]["reason"], "change");
    assert_eq!(headers[1]["data"]["header"]["config"]["model"], "m2");
    let requests = fake.requests();
    assert_eq!(requests[0]["model"], "m1");
    assert_eq!(requests[1]["model"], "m2");
    t.shutdown().await;
}

/// Pre-step runs once per step with the step's coordinates, before its
/// `step/start` and before its request.
#[tokio::test]
async fn pre_step_fires_once_per_step_before_step_start_and_before_the_request() {
    let hooks = hooks_row(
        "o",
        json!({"listeners": [{"event": bus::AGENT_PRE_STEP, "snapshot": true}]}),
    );
    let (t, fake) = setup(&hooks).await;
    let dir = dsh_testkit::TempDir::new("conf-loop-a");
    let file = dir.path().join("a.txt");
    std::fs::write(&file, "alpha\n").expect("write");
    fake.push([
        tool_calls(&[("read", json!({"file_path": file.display().to_string()}))]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    let j = hooks_journal(&t, "o").await;
    assert_eq!(j.len(), 2, "{j:?}");
    let count = |log: &Value, kind: &str| {
        log.as_array()
            .into_iter()
            .flatten()
            .filter(|k| *k == kind)
            .count()
    };
    for (i, entry) in j.iter().enumerate() {
        let step = i as u64 + 1;
        assert_eq!(entry["payload"]["turn"], 1);
        assert_eq!(entry["payload"]["step"], step);
        assert_eq!(count(&entry["log"], event::STEP_START), i);
        assert_eq!(count(&entry["log"], event::ASSISTANT_MESSAGE), i);
    }
    assert_eq!(count(&j[0]["log"], event::REQUEST_HEADER), 0);
    // The initial proposal carries the prompt; the continuation nothing.
    assert_eq!(j[0]["payload"]["messages"][0]["content"][0]["text"], "go");
    assert_eq!(j[1]["payload"]["messages"], json!([]));
    t.shutdown().await;
}

/// A max-tokens step makes the whole turn `max-tokens` even when a later
/// step completes; the next turn starts afresh.
#[tokio::test]
async fn max_tokens_is_sticky_across_later_steps_not_across_turns() {
    let hooks = hooks_row(
        "k",
        json!({"listeners": [{"event": bus::AGENT_PRE_STEP, "once": true,
            "calls": [call(service::AGENTS, agents::INJECT, json!({"agent": "$agent", "message": {"text": "continue"}}))]}]}),
    );
    let (t, fake) = setup(&hooks).await;
    fake.push([max_tokens("cut"), text("rest"), text("next turn")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "max-tokens"}));
    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, event::STEP_START).len(), 2);
    assert_eq!(
        turn(&t, &agent, "again").await,
        json!({"kind": "completed"})
    );
    t.shutdown().await;
}

#[tokio::test]
async fn an_empty_max_tokens_completion_is_an_anchor_that_derivation_skips() {
    let (t, fake) = setup("").await;
    fake.push([max_tokens("")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "max-tokens"}));
    let ev = events(&t, &agent).await;
    let anchors = of_type(&ev, event::ASSISTANT_MESSAGE);
    assert_eq!(anchors.len(), 1);
    assert_eq!(anchors[0]["data"]["message"]["content"], json!([]));
    assert_eq!(
        anchors[0]["data"]["usage"],
        json!({"inputTokens": 3, "outputTokens": 4})
    );
    let derived = t
        .call(service::SESSIONS, sessions::DERIVE, json!({"id": agent}))
        .await;
    assert_eq!(derived.as_array().map(Vec::len), Some(1));
    assert_eq!(derived[0]["role"], "user");
    t.shutdown().await;
}

#[tokio::test]
async fn a_failing_step_end_observer_does_not_change_the_outcome() {
    let hooks = hooks_row(
        "f",
        json!({"listeners": [{"event": bus::SESSION_EVENT, "when": {"event": {"type": event::STEP_END}}, "fail": "OBSERVER_FAILED"}]}),
    );
    let (t, fake) = setup(&hooks).await;
    fake.push([text("ok"), text("ok again")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "one").await, json!({"kind": "completed"}));
    assert_eq!(turn(&t, &agent, "two").await, json!({"kind": "completed"}));
    assert!(!journal_len(&t, "f", 2).await.is_empty());
    t.shutdown().await;
}

#[tokio::test]
async fn adjacent_sends_get_separate_turns_with_increasing_numbers() {
    let (t, fake) = setup("").await;
    fake.push([text("1"), text("2"), text("3")]);
    let agent = new_agent(&t, "/tmp").await;
    for p in ["a", "b", "c"] {
        send(&t, agents::FOLLOWUP, &agent, p).await;
    }
    assert_eq!(idle(&t, &agent).await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    let turns: Vec<&Value> = of_type(&ev, event::TURN_START)
        .iter()
        .map(|e| &e["data"]["turn"])
        .collect();
    assert_eq!(turns, [&json!(1), &json!(2), &json!(3)]);
    // One prompt per turn, in order.
    let mut per_turn = Vec::new();
    let mut current = 0;
    for e in &ev {
        if e["type"] == event::TURN_START {
            current = e["data"]["turn"].as_u64().unwrap_or(0);
        }
        if e["type"] == event::USER_MESSAGE {
            per_turn.push((current, e["data"]["content"][0]["text"].clone()));
        }
    }
    assert_eq!(
        per_turn,
        [(1, json!("a")), (2, json!("b")), (3, json!("c"))]
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_send_from_a_session_listener_lands_in_the_following_turn() {
    let hooks = hooks_row(
        "l",
        json!({"listeners": [{"event": bus::SESSION_EVENT, "once": true,
            "when": {"event": {"type": event::USER_MESSAGE}},
            "calls": [call(service::AGENTS, agents::FOLLOWUP, json!({"agent": "$agent", "message": {"text": "later"}}))]}]}),
    );
    let (t, fake) = setup(&hooks).await;
    fake.push([text("first"), text("second")]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "now").await;
    journal_len(&t, "l", 1).await;
    assert_eq!(idle(&t, &agent).await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, event::TURN_START).len(), 2);
    assert_eq!(user_texts(&ev), ["now", "later"]);
    let second = ev
        .iter()
        .position(|e| e["type"] == event::TURN_START && e["data"]["turn"] == 2);
    let later = ev.iter().position(|e| {
        e["type"] == event::USER_MESSAGE && e["data"]["content"][0]["text"] == "later"
    });
    assert!(second < later);
    t.shutdown().await;
}

#[tokio::test]
async fn agent_status_alternates_running_and_idle_once_per_turn() {
    let hooks = hooks_row("st", json!({"listeners": [{"event": bus::AGENT_STATUS}]}));
    let (t, fake) = setup(&hooks).await;
    fake.push([text("1"), text("2")]);
    let agent = new_agent(&t, "/tmp").await;
    turn(&t, &agent, "a").await;
    turn(&t, &agent, "b").await;
    let j = journal_len(&t, "st", 4).await;
    let statuses: Vec<&Value> = j.iter().map(|e| &e["payload"]["status"]).collect();
    assert_eq!(statuses, ["running", "idle", "running", "idle"]);
    t.shutdown().await;
}

#[tokio::test]
async fn agent_created_and_disposed_are_emitted_and_a_failing_listener_is_contained() {
    let hooks = hooks_row(
        "c",
        json!({"listeners": [
            {"event": bus::AGENT_CREATED, "fail": "LISTENER_FAILED"},
            {"event": bus::AGENT_CREATED},
            {"event": bus::AGENT_DISPOSED},
            {"event": bus::AGENT_SESSION_START, "fail": "LISTENER_FAILED"}
        ]}),
    );
    let (t, fake) = setup(&hooks).await;
    let agent = new_agent(&t, "/tmp").await;
    fake.push([text("ok")]);
    assert_eq!(turn(&t, &agent, "hi").await, json!({"kind": "completed"}));
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": agent}))
        .await;
    let j = journal_len(&t, "c", 4).await;
    let seen: Vec<(String, Value)> = j
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap_or("").to_owned(),
                e["payload"].clone(),
            )
        })
        .collect();
    for name in [bus::AGENT_CREATED, bus::AGENT_DISPOSED] {
        assert!(
            seen.iter()
                .any(|(n, p)| n == name && *p == json!({"agent": agent})),
            "{name}: {seen:?}"
        );
    }
    assert_eq!(
        t.call(service::AGENT_LOOP, agent_loop::LIST, json!({}))
            .await,
        json!([])
    );
    // The disposed agent's session left the live store with it.
    let live = t.call(service::SESSIONS, sessions::LIST, json!({})).await;
    assert!(
        !live.as_array().is_some_and(|l| l.contains(&json!(agent))),
        "{live}"
    );
    t.shutdown().await;
}

// -------------------------------------------------------------- cancel.spec

#[tokio::test]
async fn an_idle_cancel_with_nothing_queued_is_a_no_op() {
    let (t, fake) = setup("").await;
    let agent = new_agent(&t, "/tmp").await;
    t.call(service::AGENTS, agents::CANCEL, json!({"agent": agent}))
        .await;
    assert!(events(&t, &agent).await.is_empty());
    fake.push([text("ok")]);
    // Cancellation never arms future work.
    assert_eq!(turn(&t, &agent, "hi").await, json!({"kind": "completed"}));
    t.shutdown().await;
}

/// `clear = durable cancellations`: what a cancel drops stays dropped when
/// the agent is resumed, while disposal parks pending work.
#[tokio::test]
async fn cancel_clears_the_inbox_durably_so_a_resume_does_not_restore_it() {
    let hooks = hooks_row(
        "d",
        json!({"listeners": [{"event": bus::AGENT_INBOX_DISCARDED}]}),
    );
    let (t, fake) = setup(&hooks).await;
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::INJECT, &agent, "cancelled work").await;
    send(&t, agents::INJECT, &agent, "more cancelled work").await;
    t.call(service::AGENTS, agents::CANCEL, json!({"agent": agent}))
        .await;
    let ev = events(&t, &agent).await;
    assert_eq!(ev.len(), 3);
    assert_eq!(
        ev[2]["data"],
        json!({"target": "next-step", "start": 0, "removedCount": 2, "inserted": [], "outcome": "canceled"})
    );
    let j = journal_len(&t, "d", 2).await;
    assert_eq!(
        j[0]["payload"]["message"]["content"][0]["text"],
        "cancelled work"
    );

    // A second agent whose pending work is only disposed keeps it.
    let parked = new_agent(&t, "/tmp").await;
    send(&t, agents::INJECT, &parked, "parked work").await;

    for id in [&agent, &parked] {
        t.call(service::AGENTS, agents::DISPOSE, json!({"agent": id}))
            .await;
        t.call(
            service::AGENT_LOOP,
            agent_loop::RESUME,
            json!({"sessionId": id, "agentOptions": {"provider": "fake", "model": "m1"}}),
        )
        .await;
    }
    fake.push([text("a"), text("b")]);
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));
    assert_eq!(user_texts(&events(&t, &agent).await), ["go"]);
    assert_eq!(turn(&t, &parked, "go").await, json!({"kind": "completed"}));
    assert_eq!(
        user_texts(&events(&t, &parked).await),
        ["parked work", "go"]
    );
    t.shutdown().await;
}

#[tokio::test]
async fn cancel_right_after_a_waking_send_closes_the_opened_turn_without_a_step() {
    let (t, fake) = setup("").await;
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "never mind").await;
    t.call(service::AGENTS, agents::CANCEL, json!({"agent": agent}))
        .await;
    assert_eq!(
        idle(&t, &agent).await,
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    let ev = events(&t, &agent).await;
    assert_eq!(frames(&ev), [event::TURN_START, event::TURN_END]);
    assert!(user_texts(&ev).is_empty());
    assert!(fake.requests().is_empty());
    t.shutdown().await;
}

/// keepInbox: the claimed prompt is not restored, queued work stays parked
/// (no turn of its own) until the next wake, which then runs it first.
#[tokio::test]
async fn keep_inbox_cancel_parks_queued_work_until_the_next_wake() {
    let (t, fake) = setup("").await;
    fake.push([stall_after("Half")]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "running").await;
    logged(&t, &agent, event::ASSISTANT_CHUNK).await;
    send(&t, agents::FOLLOWUP, &agent, "queued").await;
    t.call(
        service::AGENTS,
        agents::CANCEL,
        json!({"agent": agent, "keepInbox": true}),
    )
    .await;
    assert_eq!(
        idle(&t, &agent).await,
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, event::TURN_START).len(), 1);
    assert!(!ev.iter().any(|e| e["data"]["outcome"] == "canceled"));
    assert_eq!(
        t.call(service::AGENTS, agents::STATUS, json!({"agent": agent}))
            .await["status"],
        "idle"
    );

    fake.push([text("q"), text("w")]);
    send(&t, agents::FOLLOWUP, &agent, "wake").await;
    assert_eq!(idle(&t, &agent).await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, event::TURN_START).len(), 3);
    assert_eq!(user_texts(&ev), ["running", "queued", "wake"]);
    t.shutdown().await;
}

/// Without keepInbox, queued prompts and steering are dropped (durably,
/// next-step first) and never run; the next prompt runs normally.
#[tokio::test]
async fn mid_step_cancel_aborts_and_drops_every_queued_item_and_steering() {
    let (t, fake) = setup("").await;
    fake.push([stall_after("Half")]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "running").await;
    logged(&t, &agent, event::ASSISTANT_CHUNK).await;
    send(&t, agents::FOLLOWUP, &agent, "queued").await;
    send(&t, agents::STEER, &agent, "steering").await;
    t.call(service::AGENTS, agents::CANCEL, json!({"agent": agent}))
        .await;
    assert_eq!(
        idle(&t, &agent).await,
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    let ev = events(&t, &agent).await;
    let canceled: Vec<&Value> = ev
        .iter()
        .filter(|e| e["data"]["outcome"] == "canceled")
        .map(|e| &e["data"])
        .collect();
    assert_eq!(
        canceled,
        [
            &json!({"target": "next-step", "start": 0, "removedCount": 1, "inserted": [], "outcome": "canceled"}),
            &json!({"target": "next-turn", "start": 0, "removedCount": 1, "inserted": [], "outcome": "canceled"}),
        ]
    );
    fake.push([text("fine")]);
    assert_eq!(turn(&t, &agent, "next").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, event::TURN_START).len(), 2);
    assert_eq!(user_texts(&ev), ["running", "next"]);
    t.shutdown().await;
}

#[tokio::test]
async fn when_idle_waiters_registered_before_cancel_resolve_with_the_abort() {
    let (t, fake) = setup("").await;
    fake.push([stall_after("Half")]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "running").await;
    logged(&t, &agent, event::ASSISTANT_CHUNK).await;
    let (waited, _) = tokio::join!(idle(&t, &agent), async {
        t.call(service::AGENTS, agents::CANCEL, json!({"agent": agent}))
            .await
    });
    assert_eq!(
        waited,
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    t.shutdown().await;
}

#[tokio::test]
async fn the_first_typed_cancel_cause_wins() {
    let (t, fake) = setup("").await;
    fake.push([stall_after("Half")]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "running").await;
    logged(&t, &agent, event::ASSISTANT_CHUNK).await;
    t.call(
        service::AGENTS,
        agents::CANCEL,
        json!({"agent": agent, "cause": {"kind": "hook", "reason": "policy"}}),
    )
    .await;
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": agent}))
        .await;
    let ev = events(&t, &agent).await;
    let end = of_type(&ev, event::TURN_END)[0];
    assert_eq!(
        end["data"]["reason"],
        json!({"kind": "aborted", "reason": {"kind": "hook", "reason": "policy"}})
    );
    t.shutdown().await;
}

/// A cancel from a seam the loop awaits (here `agent/request`) stops the
/// step before the model is called.
#[tokio::test]
async fn a_cancel_from_an_awaited_seam_drops_the_step_before_adapter_dispatch() {
    let hooks = hooks_row(
        "q",
        json!({"listeners": [{"event": bus::AGENT_REQUEST,
            "calls": [call(service::AGENTS, agents::CANCEL, json!({"agent": "$agent"}))]}]}),
    );
    let (t, fake) = setup(&hooks).await;
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(
        turn(&t, &agent, "go").await,
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    assert!(fake.requests().is_empty());
    let ev = events(&t, &agent).await;
    assert_eq!(
        frames(&ev),
        [
            event::TURN_START,
            event::STEP_START,
            event::STEP_END,
            event::TURN_END
        ]
    );
    assert!(of_type(&ev, event::ASSISTANT_MESSAGE).is_empty());
    t.shutdown().await;
}

// -------------------------------------------------------- interception.spec

#[tokio::test]
async fn pre_step_enter_may_rewrite_content_and_add_separately_sourced_messages() {
    let rewritten = json!({"id": "rw-1", "role": "user", "content": [{"type": "text", "text": "rewritten"}], "source": {"kind": "user"}});
    let added = json!({"id": "add-1", "role": "user", "content": [{"type": "text", "text": "added"}], "source": {"kind": "plugin", "plugin": "hooks"}});
    let hooks = hooks_row(
        "w",
        json!({"listeners": [{"event": bus::AGENT_PRE_STEP, "once": true,
            "result": {"kind": "enter", "messages": [rewritten, added]}}]}),
    );
    let (t, fake) = setup(&hooks).await;
    fake.push([text("ok")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(
        turn(&t, &agent, "original").await,
        json!({"kind": "completed"})
    );
    let ev = events(&t, &agent).await;
    let users: Vec<&Value> = of_type(&ev, event::USER_MESSAGE)
        .iter()
        .map(|e| &e["data"])
        .collect();
    assert_eq!(users, [&rewritten, &added]);
    assert_eq!(
        request_texts(&fake.requests()[0])[1..],
        ["rewritten", "added"]
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_turn_whose_pending_input_is_rewritten_to_empty_opens_no_step() {
    let hooks = hooks_row(
        "e",
        json!({"listeners": [{"event": bus::AGENT_PRE_STEP, "once": true,
            "result": {"kind": "enter", "messages": []}}]}),
    );
    let (t, fake) = setup(&hooks).await;
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(
        turn(&t, &agent, "dropped").await,
        json!({"kind": "completed"})
    );
    let ev = events(&t, &agent).await;
    assert_eq!(frames(&ev), [event::TURN_START, event::TURN_END]);
    assert!(user_texts(&ev).is_empty());
    assert!(fake.requests().is_empty());
    t.shutdown().await;
}

/// A prompt queued while a blocked turn runs stays parked (no turn of its
/// own) and runs at the next wake, before the waking prompt.
#[tokio::test]
async fn a_blocked_prompt_preserves_adjacent_queued_prompts() {
    let hooks = hooks_row(
        "b",
        json!({"listeners": [{"event": bus::AGENT_PRE_STEP, "once": true,
            "calls": [call(service::AGENTS, agents::FOLLOWUP, json!({"agent": "$agent", "message": {"text": "adjacent"}}))],
            "result": {"kind": "reject"}}]}),
    );
    let (t, fake) = setup(&hooks).await;
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(
        turn(&t, &agent, "blocked").await,
        json!({"kind": "blocked"})
    );
    let ev = events(&t, &agent).await;
    assert_eq!(frames(&ev), [event::TURN_START, event::TURN_END]);
    assert!(user_texts(&ev).is_empty());
    fake.push([text("a"), text("b")]);
    assert_eq!(turn(&t, &agent, "wake").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, event::TURN_START).len(), 3);
    assert_eq!(user_texts(&ev), ["adjacent", "wake"]);
    t.shutdown().await;
}

/// `agent/session-start` fires once with `startup`; what its listener
/// injects is in the first request.
#[tokio::test]
async fn session_start_fires_once_with_startup_and_its_inject_reaches_the_first_request() {
    let hooks = hooks_row(
        "ss",
        json!({"listeners": [{"event": bus::AGENT_SESSION_START,
            "calls": [call(service::AGENTS, agents::INJECT, json!({"agent": "$agent", "message": {"text": "project notes"}}))]}]}),
    );
    let (t, fake) = setup(&hooks).await;
    let agent = new_agent(&t, "/tmp").await;
    let j = journal_len(&t, "ss", 1).await;
    assert_eq!(
        j[0]["payload"],
        json!({"agent": agent, "source": "startup"})
    );
    assert!(j[0]["results"][0].get("ok").is_some(), "{j:?}");
    fake.push([text("ok")]);
    assert_eq!(turn(&t, &agent, "hi").await, json!({"kind": "completed"}));
    assert_eq!(
        request_texts(&fake.requests()[0])[1..],
        ["project notes", "hi"]
    );
    assert_eq!(hooks_journal(&t, "ss").await.len(), 1);
    t.shutdown().await;
}

#[tokio::test]
async fn a_pre_execute_deny_becomes_an_is_error_result_the_model_sees() {
    let hooks = hooks_row(
        "n",
        json!({"listeners": [{"event": bus::TOOLS_PRE_EXECUTE,
            "result": {"kind": "deny", "reason": "not in this test"}}]}),
    );
    let (t, fake) = setup(&hooks).await;
    fake.push([
        tool_calls(&[("read", json!({"file_path": "/etc/hostname"}))]),
        text("understood"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "read").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    let result = &of_type(&ev, event::TOOL_RESULT)[0]["data"];
    assert_eq!(result["message"]["content"][0]["isError"], json!(true));
    assert_eq!(
        result["message"]["content"][0]["content"],
        json!([{"type": "text", "text": "Error: not in this test"}])
    );
    assert!(result.get("error").is_none(), "denials carry no error");
    let tool_msg = fake.requests()[1]["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "tool").cloned())
        .expect("the result is sent");
    assert_eq!(tool_msg["tool_call_id"], "call_0_read");
    assert_eq!(tool_msg["content"], "Error: not in this test");
    t.shutdown().await;
}

/// One plugin on all four seams blocks a prompt in a no-step turn;
/// removing it removes its listeners.
#[tokio::test]
async fn a_hook_plugin_on_all_four_seams_blocks_a_prompt_and_leaves_with_its_listeners() {
    let hooks = hooks_row(
        "all",
        json!({"listeners": [
            {"event": bus::AGENT_SESSION_START},
            {"event": bus::AGENT_PRE_STEP, "result": {"kind": "reject"}},
            {"event": bus::AGENT_REQUEST},
            {"event": bus::TOOLS_PRE_EXECUTE}
        ]}),
    );
    let (t, fake) = setup(&hooks).await;
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(
        turn(&t, &agent, "blocked").await,
        json!({"kind": "blocked"})
    );
    assert_eq!(
        frames(&events(&t, &agent).await),
        [event::TURN_START, event::TURN_END]
    );
    assert!(fake.requests().is_empty());

    t.apply(&rows(&fake, &t, PERSONA, "")).await;
    fake.push([text("ok")]);
    assert_eq!(
        turn(&t, &agent, "allowed").await,
        json!({"kind": "completed"})
    );
    t.shutdown().await;
}
