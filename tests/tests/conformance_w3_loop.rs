//! Conformance, third pass: the loop/llm rows of `tests/CONFORMANCE.md`
//! (§10.3 loop, §10.5 invariant.spec, §10.7 service and retry-policy, resume,
//! contract-regressions) that were still `missing`.
//!
//! Real plugin builds in the real host against the fake model server.
//! Nothing sleeps to synchronize: a stream a test holds open is an
//! `Answer::Gated` (with the adapter's idle timeout lifted), and waits poll
//! the log under a generous deadline.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::names::{agent_loop, agents, code, llm, service};
use dsh_sdk::vocab::event;
use dsh_testkit::agent::{core_host, events, idle, logged, new_agent, of_type, send, user_texts};
use dsh_testkit::fake_llm::{held_text, text, Answer, FakeLlm, Gate};
use dsh_testkit::fixtures::{kit_row, toml_value};
use dsh_testkit::TestHost;
use serde_json::{json, Value};

/// Generous: only a failing test waits this long.
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// The adapter's idle timeout in the kit's rows, and the one a test that
/// holds a stream open runs with.
const KIT_IDLE_TIMEOUT: &str = "streamIdleTimeoutMs = 1500";
const HELD_IDLE_TIMEOUT: &str = "streamIdleTimeoutMs = 600000";

/// The core rows plus `extra`, the adapter's idle timeout lifted, every row
/// active.
async fn setup_holding(extra: &str) -> (TestHost, FakeLlm) {
    core_host(|rows| {
        assert!(
            rows.contains(KIT_IDLE_TIMEOUT),
            "the kit's adapter row changed"
        );
        rows.replace(KIT_IDLE_TIMEOUT, HELD_IDLE_TIMEOUT) + extra
    })
    .await
}

/// The `user/message` texts of the DeepSeek request body `body`.
fn request_texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .map(str::to_owned)
        .collect()
}

/// `loop.spec`: "starts idle steering synchronously and enters later
/// steering at the next step". The steer that wakes an idle agent has its
/// turn open and its message claimed when it replies, so a second steer
/// right after it is the next step's input, not this one's.
#[tokio::test]
async fn an_idle_steer_opens_its_turn_before_replying_and_a_second_steer_enters_step_two() {
    let (t, fake) = setup_holding("").await;
    let gate = Gate::new();
    fake.push([held_text("first", &gate), text("second")]);
    let agent = new_agent(&t, "/tmp").await;

    send(&t, agents::STEER, &agent, "first idle steer").await;
    let opened = events(&t, &agent).await;
    assert_eq!(of_type(&opened, event::TURN_START).len(), 1, "{opened:?}");
    let claims: Vec<&Value> = of_type(&opened, event::INBOX_SPLICED)
        .into_iter()
        .filter(|e| e["data"]["removedCount"] == 1 && e["data"].get("outcome").is_none())
        .collect();
    assert_eq!(claims.len(), 1, "the first steer is claimed: {opened:?}");

    send(&t, agents::STEER, &agent, "second idle steer").await;
    gate.open();
    assert_eq!(idle(&t, &agent).await["kind"], "completed");

    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, event::TURN_START).len(), 1);
    assert_eq!(
        user_texts(&ev),
        vec![
            "first idle steer".to_owned(),
            "second idle steer".to_owned()
        ]
    );
    let steps: Vec<&Value> = of_type(&ev, event::STEP_START);
    assert_eq!(steps.len(), 2);
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(request_texts(&requests[0]), vec!["first idle steer"]);
    assert_eq!(
        request_texts(&requests[1]),
        vec!["first idle steer", "second idle steer"]
    );
    t.shutdown().await;
}

/// The `llm` router and the DeepSeek adapter, no agent core.
fn llm_rows(fake: &FakeLlm) -> String {
    format!(
        "[[row]]\nid = 'llm'\nplugin = 'llm'\n\
         [[row]]\nid = 'llm-deepseek'\nplugin = 'llm-deepseek'\n\
         config = {{ provider = 'fake', baseUrl = '{}', apiKeyEnv = '', {HELD_IDLE_TIMEOUT} }}\n",
        fake.base_url
    )
}

/// The next item of `stream`, within the deadline.
async fn next_item(stream: &mut dsh_host::HostStream) -> Option<Result<Value, dsh_sdk::Error>> {
    tokio::time::timeout(DEADLINE, stream.next())
        .await
        .expect("the stream stalled")
}

/// `service.spec`: "maps adapter failure to aborted when the request signal
/// is aborted". A caller that cancels its request (`llm.cancel` of the
/// request's `signal`) gets a terminal `finish{aborted}`, code `ABORTED`,
/// not `finish{error}`. Like an `AbortSignal`, the name stays aborted: a
/// request started under it after the cancel (the cancel raced ahead of it)
/// ends at once, without a model call.
#[tokio::test]
async fn a_cancelled_request_ends_with_an_aborted_finish_not_an_error() {
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    t.apply(&llm_rows(&fake)).await;
    t.assert_all_active().await;
    let gate = Gate::new();
    fake.push([held_text("never finished", &gate)]);
    let request = json!({"provider": "fake", "model": "m1", "signal": "req-1", "messages": [
        {"id": "u1", "role": "user", "content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}}
    ]});
    let mut stream = t
        .host
        .call_stream(service::LLM, llm::STREAM, request.clone());
    let first = next_item(&mut stream).await.expect("a first chunk");
    assert_ne!(first.expect("a chunk")["type"], "finish");

    let live = t
        .call(service::LLM, llm::CANCEL, json!({"signal": "req-1"}))
        .await;
    assert_eq!(live, json!({"streaming": true}));
    let mut last = None;
    while let Some(item) = next_item(&mut stream).await {
        last = Some(item.expect("a chunk"));
    }
    let last = last.expect("a terminal chunk");
    assert_eq!(last["type"], "finish");
    assert_eq!(last["reason"]["kind"], "aborted");
    assert_eq!(last["reason"]["failure"]["code"], code::ABORTED);
    // The adapter never saw the signal.
    assert!(fake.requests()[0].get("signal").is_none());

    let gone = t
        .call(service::LLM, llm::CANCEL, json!({"signal": "req-1"}))
        .await;
    assert_eq!(gone, json!({"streaming": false}));
    let early = t
        .call(service::LLM, llm::CANCEL, json!({"signal": "req-2"}))
        .await;
    assert_eq!(early, json!({"streaming": false}));
    let mut late = request.clone();
    late["signal"] = json!("req-2");
    let mut stream = t.host.call_stream(service::LLM, llm::STREAM, late);
    let only = next_item(&mut stream)
        .await
        .expect("a chunk")
        .expect("a chunk");
    assert_eq!(only["type"], "finish");
    assert_eq!(only["reason"]["failure"]["code"], code::ABORTED);
    assert!(next_item(&mut stream).await.is_none());
    assert_eq!(
        fake.requests().len(),
        1,
        "the late request never reached the model"
    );
    gate.open();
    t.shutdown().await;
}

/// The kit's `llm-retry` row, and the same row in the original's `always`
/// mode with a 1 ms backoff.
const KIT_RETRY: &str = "config = { initialDelayMs = 10, maxDelayMs = 3000 }";
const ALWAYS_RETRY: &str =
    "config = { mode = \"always\", maxRetries = 1, initialDelayMs = 1, maxDelayMs = 1, jitterRatio = 0.0 }";

/// `retry-policy.spec` "always mode": failures the normal policy never
/// retries (an `INVALID_REQUEST`, an `AUTH`) are retried, past the inactive
/// `maxRetries`, each retry logged with the mode and no limit, until the
/// request succeeds.
#[tokio::test]
async fn always_mode_retries_every_failure_past_max_retries_until_success() {
    let (t, fake) = core_host(|rows| {
        assert!(rows.contains(KIT_RETRY), "the kit's retry row changed");
        rows.replace(KIT_RETRY, ALWAYS_RETRY)
    })
    .await;
    let bad = |status: u16, message: &str| {
        Answer::Status(
            status,
            vec![],
            format!("{{\"error\":{{\"message\":\"{message}\"}}}}"),
        )
    };
    fake.push([
        bad(400, "bad field"),
        bad(401, "bad key"),
        bad(400, "bad field again"),
        text("recovered"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "go").await;
    assert_eq!(idle(&t, &agent).await["kind"], "completed");

    let ev = events(&t, &agent).await;
    let retries: Vec<(String, Value, Value)> = of_type(&ev, event::LLM_RETRY)
        .iter()
        .map(|e| {
            let d = &e["data"];
            let code = d["failure"]["code"].as_str().unwrap_or_default().to_owned();
            (code, d["mode"].clone(), d["retry"].clone())
        })
        .collect();
    assert_eq!(
        retries,
        vec![
            ("INVALID_REQUEST".to_owned(), json!("always"), json!(1)),
            ("AUTH".to_owned(), json!("always"), json!(2)),
            ("INVALID_REQUEST".to_owned(), json!("always"), json!(3)),
        ]
    );
    assert!(of_type(&ev, event::LLM_RETRY)
        .iter()
        .all(|e| e["data"].get("maxRetries").is_none()));
    assert_eq!(fake.requests().len(), 4);
    t.shutdown().await;
}

/// `invariant.spec` (system-prompt): the waterfall's result is
/// authoritative, so it is validated like the original's companion does; a
/// listener returning an assembly with a duplicated section name fails the
/// turn with `INVARIANT`, the violated contract attributed to the package,
/// before any model call.
#[tokio::test]
async fn a_listener_returning_a_malformed_assembly_fails_the_turn_with_invariant() {
    let bad = json!({
        "sections": [{"name": "x", "text": "a"}, {"name": "x", "text": "b"}],
        "contexts": [], "tools": [], "variables": {}
    });
    let listener = format!(
        "{{ event = 'system-prompt/assemble', action = 'return', value = {} }}",
        toml_value(&bad)
    );
    let (t, fake) = core_host(|rows| rows + &kit_row("k", &listener, "")).await;
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "go").await;
    let reason = idle(&t, &agent).await;
    assert_eq!(reason["kind"], "error");
    assert_eq!(reason["error"]["code"], "INVARIANT");
    assert_eq!(
        reason["error"]["message"],
        "invariant violated by \"@deepseek-ai/dsh-system-prompt\": assembled section name \"x\" is duplicated"
    );
    assert!(fake.requests().is_empty());
    t.shutdown().await;
}

/// `resume.spec` "resume cannot crash-repair a turn owned by a live agent":
/// resuming the id of an agent that is mid-turn (its stream held open)
/// answers the live agent and leaves its open turn alone — no closing
/// `step/end`/`turn/end{interrupted}` is appended — and the turn then ends
/// once, `completed`, as the live driver closes it.
#[tokio::test]
async fn resuming_a_live_agent_mid_turn_returns_it_and_does_not_repair_its_turn() {
    let (t, fake) = setup_holding("").await;
    let gate = Gate::new();
    fake.push([held_text("still streaming", &gate)]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "go").await;
    logged(&t, &agent, event::ASSISTANT_CHUNK).await;

    let resumed = t
        .call(
            service::AGENT_LOOP,
            agent_loop::RESUME,
            json!({"sessionId": agent}),
        )
        .await;
    assert_eq!(resumed, json!({"agent": agent}));
    let mid = events(&t, &agent).await;
    assert_eq!(of_type(&mid, event::TURN_START).len(), 1);
    assert!(of_type(&mid, event::STEP_END).is_empty(), "{mid:?}");
    assert!(of_type(&mid, event::TURN_END).is_empty(), "{mid:?}");

    gate.open();
    assert_eq!(idle(&t, &agent).await["kind"], "completed");
    let ev = events(&t, &agent).await;
    let ends: Vec<Value> = of_type(&ev, event::TURN_END)
        .iter()
        .map(|e| e["data"]["reason"].clone())
        .collect();
    assert_eq!(ends, vec![json!({"kind": "completed"})]);
    assert_eq!(of_type(&ev, event::STEP_END).len(), 1);
    let list = t
        .call(service::AGENT_LOOP, agent_loop::LIST, json!({}))
        .await;
    assert_eq!(list, json!([agent]));
    t.shutdown().await;
}

/// `contract-regressions.spec` "closes an empty admitted batch as a turn
/// without a step": a pre-step listener admits the claimed prompt as an
/// empty batch; the turn closes `completed` with no step and no model call,
/// and the prompt it claimed is not left pending.
#[tokio::test]
async fn an_empty_admitted_batch_closes_a_stepless_turn() {
    let listener =
        "{ event = 'agent/pre-step', action = 'return', value = { kind = 'enter', messages = [] } }";
    let (t, fake) = core_host(|rows| rows + &kit_row("k", listener, "")).await;
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "go").await;
    assert_eq!(idle(&t, &agent).await, json!({"kind": "completed"}));

    assert!(fake.requests().is_empty());
    let ev = events(&t, &agent).await;
    let frames: Vec<&str> = ev
        .iter()
        .filter_map(|e| e["type"].as_str())
        .filter(|k| [event::TURN_START, event::STEP_START, event::TURN_END].contains(k))
        .collect();
    assert_eq!(frames, vec![event::TURN_START, event::TURN_END]);
    let end = &of_type(&ev, event::TURN_END)[0]["data"];
    assert_eq!(end, &json!({"turn": 1, "reason": {"kind": "completed"}}));
    let pending = t
        .call(service::AGENTS, agents::PENDING, json!({"agent": agent}))
        .await;
    assert_eq!(pending, json!({"nextTurn": [], "nextStep": []}));
    t.shutdown().await;
}

/// `contract-regressions.spec` "parks context finalized after a tool-step
/// abort until another wakeup": a cancel while a tool runs ends the step
/// and the turn `aborted`; the context post-execute accepted for the
/// aborted call is parked in the `next-step` inbox, not logged as a
/// `user/message`, and enters the step a later wakeup opens.
#[tokio::test]
async fn a_tool_step_abort_parks_the_post_execute_context_until_a_wakeup() {
    let context = json!({"role": "user", "id": "ctx-1", "source": {"kind": "plugin", "plugin": "test"},
                         "content": [{"type": "text", "text": "accepted result context after abort"}]});
    let decision = json!({"kind": "accept", "additionalContexts": [context]});
    let listener = format!(
        "{{ event = 'tools/post-execute', action = 'return', value = {} }}",
        toml_value(&decision)
    );
    let (t, fake) = core_host(|rows| rows + &kit_row("k", &listener, "{ name = 'waiter' }")).await;
    fake.push([
        dsh_testkit::fake_llm::calls(&[("c1", "waiter", json!({"awaitEnd": "never"}))]),
        text("after wake"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "go").await;
    dsh_testkit::fixtures::wait_kit_journal(&t, "k", |j| {
        j.iter().any(|e| e["event"] == "tool:start")
    })
    .await;
    t.call(
        service::AGENTS,
        agents::CANCEL,
        json!({"agent": agent, "cause": {"kind": "user"}}),
    )
    .await;
    assert_eq!(idle(&t, &agent).await["kind"], "aborted");

    let ev = events(&t, &agent).await;
    let tail: Vec<&str> = ev
        .iter()
        .filter(|e| {
            [event::TOOL_RESULT, event::STEP_END, event::TURN_END]
                .contains(&e["type"].as_str().unwrap_or(""))
                || (e["type"] == event::USER_MESSAGE && e["data"]["source"]["kind"] == "plugin")
        })
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(
        tail,
        vec![event::TOOL_RESULT, event::STEP_END, event::TURN_END]
    );
    let pending = t
        .call(service::AGENTS, agents::PENDING, json!({"agent": agent}))
        .await;
    let parked: Vec<&str> = pending["nextStep"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"][0]["text"].as_str())
        .collect();
    assert_eq!(parked, vec!["accepted result context after abort"]);

    send(&t, agents::FOLLOWUP, &agent, "wake").await;
    assert_eq!(idle(&t, &agent).await["kind"], "completed");
    let ev = events(&t, &agent).await;
    let plugin_texts: Vec<&str> = of_type(&ev, event::USER_MESSAGE)
        .iter()
        .filter(|e| e["data"]["source"]["kind"] == "plugin")
        .filter_map(|e| e["data"]["content"][0]["text"].as_str())
        .collect();
    assert_eq!(plugin_texts, vec!["accepted result context after abort"]);
    t.shutdown().await;
}

/// `contract-regressions.spec` "parks result context finalized after
/// disposal cancellation without opening another turn": disposing the agent
/// while its tool runs ends the turn `aborted{disposed}`; the context
/// post-execute accepted for the call is parked durably in the `next-step`
/// inbox (a resume restores it) and never logged as a `user/message`, and
/// no other turn starts.
#[tokio::test]
async fn disposal_mid_tool_parks_the_post_execute_context_without_a_new_turn() {
    let context = json!({"role": "user", "id": "ctx-1", "source": {"kind": "plugin", "plugin": "test"},
                         "content": [{"type": "text", "text": "accepted result context during disposal"}]});
    let decision = json!({"kind": "accept", "additionalContexts": [context]});
    let listener = format!(
        "{{ event = 'tools/post-execute', action = 'return', value = {} }}",
        toml_value(&decision)
    );
    let (t, fake) = core_host(|rows| rows + &kit_row("k", &listener, "{ name = 'waiter' }")).await;
    fake.push([dsh_testkit::fake_llm::calls(&[(
        "c1",
        "waiter",
        json!({"awaitEnd": "never"}),
    )])]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "go").await;
    dsh_testkit::fixtures::wait_kit_journal(&t, "k", |j| {
        j.iter().any(|e| e["event"] == "tool:start")
    })
    .await;
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": agent}))
        .await;

    let ev = events(&t, &agent).await;
    assert!(!of_type(&ev, event::USER_MESSAGE)
        .iter()
        .any(|e| e["data"]["source"]["kind"] == "plugin"));
    assert_eq!(of_type(&ev, event::TURN_START).len(), 1);
    let end = &of_type(&ev, event::TURN_END)[0]["data"]["reason"];
    assert_eq!(
        end,
        &json!({"kind": "aborted", "reason": {"kind": "disposed"}})
    );

    t.call(
        service::AGENT_LOOP,
        agent_loop::RESUME,
        json!({"sessionId": agent}),
    )
    .await;
    let pending = t
        .call(service::AGENTS, agents::PENDING, json!({"agent": agent}))
        .await;
    let parked: Vec<&str> = pending["nextStep"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"][0]["text"].as_str())
        .collect();
    assert_eq!(parked, vec!["accepted result context during disposal"]);
    let status = t
        .call(service::AGENTS, agents::STATUS, json!({"agent": agent}))
        .await;
    assert_eq!(status["status"], "idle");
    assert_eq!(
        of_type(&events(&t, &agent).await, event::TURN_START).len(),
        1
    );
    assert_eq!(fake.requests().len(), 1);
    t.shutdown().await;
}
