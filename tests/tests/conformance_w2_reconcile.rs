//! Conformance, second pass ("reconcile"): rows of `tests/CONFORMANCE.md`
//! that the first pass left `missing` for want of a test, or whose reason
//! went stale when another part fixed the behaviour — concluding steps and
//! steering; cancels in the stopping window, during assembly, during error
//! recovery and mid-stream; the abort-to-idle latch; disposal; the explicit
//! `maxTokens` cap; an inject from `agent/request`; tool, wrapper and
//! post-execute contexts; the exact inbox notifications; agent-scoped
//! listeners; `session/created`; a failed durable append; reopened ids.
//!
//! Real plugin builds in the real host against the fake model server; the
//! `loop-kit` fixture supplies listeners (record, return, append, steer,
//! inject, followup, cancel, fail) and tools, all journaled in order.
//! Nothing sleeps to synchronize: waits poll the log or the journal under a
//! generous deadline, and a stream a test holds open has the adapter's idle
//! timeout lifted.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::names::{agent_loop, agents, bus, code, service, sessions};
use dsh_sdk::vocab::event;
use dsh_testkit::agent::{
    agent_with, core_host, events, idle, new_agent, of_type, send, turn, wait_log,
};
use dsh_testkit::fake_llm::{calls, text, Answer, FakeLlm};
use dsh_testkit::fixtures::{kit_journal, kit_row, wait_kit_journal};
use dsh_testkit::TestHost;
use serde_json::{json, Value};

/// The core rows plus `extra` rows, every row active.
async fn setup(extra: &str) -> (TestHost, FakeLlm) {
    core_host(|rows| rows + extra).await
}

/// Like [`setup`], for tests that hold a model stream open until they act:
/// the adapter's idle timeout is lifted so that it never ends the stream
/// first, however slow the machine.
async fn setup_held(extra: &str) -> (TestHost, FakeLlm) {
    core_host(|rows| {
        assert!(
            rows.contains("streamIdleTimeoutMs = 1500"),
            "the kit's adapter row changed"
        );
        rows.replace("streamIdleTimeoutMs = 1500", "streamIdleTimeoutMs = 600000") + extra
    })
    .await
}

/// A turn whose model stream stalls after `stall`'s chunks, cancelled once
/// the log holds an `assistant/chunk` of type `chunk`: the host (held
/// stream) and the log, after checking the turn ended aborted by the user.
async fn cancelled_mid_stream(stall: Answer, chunk: &str) -> (TestHost, Vec<Value>) {
    let (t, fake) = setup_held("").await;
    fake.push([stall]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "go").await;
    wait_log(&t, &agent, &format!("the {chunk} chunk"), |ev| {
        ev.iter()
            .any(|e| e["type"] == event::ASSISTANT_CHUNK && e["data"]["chunk"]["type"] == chunk)
    })
    .await;
    t.call(service::AGENTS, agents::CANCEL, json!({"agent": agent}))
        .await;
    assert_eq!(idle(&t, &agent).await, aborted_by_user());
    let ev = events(&t, &agent).await;
    (t, ev)
}

/// The journal's payloads of `event`, in order.
fn heard(j: &[Value], event: &str) -> Vec<Value> {
    j.iter()
        .filter(|e| e["event"] == event)
        .map(|e| e["payload"].clone())
        .collect()
}

/// The texts of a request body's user messages (string or block content).
fn user_texts_of(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| match &m["content"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b["text"].as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        })
        .collect()
}

/// The texts of the log's `user/message` events, in order.
fn logged_user_texts(ev: &[Value]) -> Vec<String> {
    of_type(ev, event::USER_MESSAGE)
        .iter()
        .map(|e| e["data"]["content"][0]["text"].as_str().unwrap().to_owned())
        .collect()
}

fn aborted_by_user() -> Value {
    json!({"kind": "aborted", "reason": {"kind": "user"}})
}

// ---- loop.spec.ts ---------------------------------------------------------

/// Steering that lands while a concluding tool runs still gets its step:
/// the turn continues (one turn, two model calls) and the second request
/// carries the steering (loop.spec "continues for steering that arrived
/// during a concluding tool step").
#[tokio::test]
async fn steering_during_a_concluding_step_still_runs() {
    let listeners =
        "{ event = 'tools/pre-execute', action = 'steer', value = 'late steering', once = true }";
    let (t, fake) = setup(&kit_row("k", listeners, "{ name = 'finalize' }")).await;
    fake.push([
        calls(&[("c1", "finalize", json!({"conclude": true}))]),
        text("next turn reply"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));

    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "the steering ran one more step");
    assert_eq!(user_texts_of(&requests[1]), ["go", "late steering"]);
    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, event::TURN_END).len(), 1);
    assert_eq!(of_type(&ev, event::STEP_START).len(), 2);
    assert_eq!(of_type(&ev, event::TOOL_RESULT).len(), 1);
    t.shutdown().await;
}

// ---- cancel.spec.ts -------------------------------------------------------

/// A cancel from an `agent/turn-stopping` listener ends the turn aborted
/// (the user's cause) and runs no further step, although the listener's
/// window would have allowed one.
#[tokio::test]
async fn cancel_during_the_stopping_window_ends_aborted_with_no_further_step() {
    let listeners = "{ event = 'agent/turn-stopping', action = 'cancel', once = true }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([text("one"), text("two")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, aborted_by_user());

    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, event::STEP_START).len(), 1);
    let ends: Vec<Value> = of_type(&ev, event::TURN_END)
        .iter()
        .map(|e| e["data"]["reason"].clone())
        .collect();
    assert_eq!(ends, [aborted_by_user()]);
    assert_eq!(fake.requests().len(), 1);
    t.shutdown().await;
}

/// A half-streamed tool call is dropped whole by a mid-stream cancel; the
/// completed text before it is finalized (`interrupted`), and no
/// `tool/call` is logged (cancel.spec "cancel drops a half-streamed tool
/// call and keeps the completed text before it").
#[tokio::test]
async fn a_mid_stream_cancel_drops_a_half_streamed_tool_call_and_keeps_the_text() {
    let stall = Answer::Stall(vec![
        json!({"choices": [{"delta": {"content": "reading the file"}}]}).to_string(),
        json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"pa"}}]}}]}).to_string(),
    ]);
    let (t, ev) = cancelled_mid_stream(stall, "tool-call-delta").await;
    let messages = of_type(&ev, event::ASSISTANT_MESSAGE);
    assert_eq!(messages.len(), 1);
    assert_eq!(
        messages[0]["data"]["message"]["content"],
        json!([{"type": "text", "text": "reading the file"}])
    );
    assert_eq!(messages[0]["data"]["interrupted"], json!(true));
    assert!(of_type(&ev, event::TOOL_CALL).is_empty());
    t.shutdown().await;
}

/// A cancel before any visible content (only a half-streamed tool call)
/// finalizes nothing: no `assistant/message` (cancel.spec "cancel before
/// any visible content finalizes nothing").
#[tokio::test]
async fn a_mid_stream_cancel_before_visible_content_finalizes_nothing() {
    let stall = Answer::Stall(vec![
        json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"pa"}}]}}]}).to_string(),
    ]);
    let (t, ev) = cancelled_mid_stream(stall, "tool-call-delta").await;
    assert!(of_type(&ev, event::ASSISTANT_MESSAGE).is_empty());
    assert!(of_type(&ev, event::TOOL_CALL).is_empty());
    t.shutdown().await;
}

// ---- contract-regressions.spec.ts ------------------------------------------

/// A cancel while the system prompt is assembled (from a
/// `system-prompt/assemble` listener) closes the claimed turn without a
/// step and never calls the model.
#[tokio::test]
async fn cancel_during_assembly_closes_a_no_step_turn_and_never_calls_the_model() {
    let listeners = "{ event = 'system-prompt/assemble', action = 'cancel', once = true }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([text("must not run")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, aborted_by_user());

    let ev = events(&t, &agent).await;
    let frame: Vec<&str> = ev
        .iter()
        .filter_map(|e| e["type"].as_str())
        .filter(|k| [event::TURN_START, event::STEP_START, event::TURN_END].contains(k))
        .collect();
    assert_eq!(frame, [event::TURN_START, event::TURN_END]);
    assert!(of_type(&ev, event::ASSISTANT_CHUNK).is_empty());
    assert!(fake.requests().is_empty(), "the model was called");
    // The loop keeps serving.
    fake.clear_requests();
    assert_eq!(
        turn(&t, &agent, "again").await,
        json!({"kind": "completed"})
    );
    assert_eq!(fake.requests().len(), 1);
    t.shutdown().await;
}

// ---- request-reconstruction.spec.ts ----------------------------------------

/// An explicit agent `maxTokens` cap is preserved: every request of the
/// session sends it, and every logged header's config carries it.
#[tokio::test]
async fn an_explicit_max_tokens_cap_is_preserved_in_every_request_and_header() {
    let listeners = "{ event = 'agent/request', action = 'merge', value = { config = { model = 'm2' } }, when = { turn = 2 } }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([text("first"), text("second")]);
    let agent = agent_with(
        &t,
        json!({"provider": "fake", "model": "m1", "maxTokens": 4096}),
    )
    .await;
    assert_eq!(
        turn(&t, &agent, "first").await,
        json!({"kind": "completed"})
    );
    assert_eq!(
        turn(&t, &agent, "second").await,
        json!({"kind": "completed"})
    );

    let requests = fake.requests();
    let caps: Vec<&Value> = requests.iter().map(|r| &r["max_tokens"]).collect();
    assert_eq!(caps, [&json!(4096), &json!(4096)]);
    let models: Vec<&Value> = requests.iter().map(|r| &r["model"]).collect();
    assert_eq!(models, [&json!("m1"), &json!("m2")]);
    let ev = events(&t, &agent).await;
    let headers: Vec<&Value> = of_type(&ev, event::REQUEST_HEADER)
        .iter()
        .map(|e| &e["data"]["header"]["config"]["maxTokens"])
        .collect();
    assert_eq!(headers, [&json!(4096), &json!(4096)]);
    t.shutdown().await;
}

/// An inject during the `agent/request` waterfall is not in the request
/// being built (the step/start boundary has passed) but joins the next one,
/// at its logged position after the step's assistant message.
#[tokio::test]
async fn an_inject_during_agent_request_joins_the_next_request() {
    let listeners =
        "{ event = 'agent/request', action = 'inject', value = '[late context]', once = true }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([text("one"), text("two"), text("three")]);
    let agent = new_agent(&t, "/tmp").await;
    turn(&t, &agent, "first").await;
    turn(&t, &agent, "second").await;

    let requests = fake.requests();
    assert!(requests.len() >= 2, "{requests:?}");
    assert_eq!(user_texts_of(&requests[0]), ["first"]);
    assert_eq!(
        user_texts_of(&requests[1])[..2],
        ["first", "[late context]"]
    );
    let ev = events(&t, &agent).await;
    let first_answer = ev
        .iter()
        .position(|e| e["type"] == event::ASSISTANT_MESSAGE)
        .unwrap();
    let late = ev
        .iter()
        .position(|e| {
            e["type"] == event::USER_MESSAGE && e["data"]["content"][0]["text"] == "[late context]"
        })
        .unwrap();
    assert!(first_answer < late, "logged after the step it missed");
    assert_eq!(logged_user_texts(&ev)[..2], ["first", "[late context]"]);
    t.shutdown().await;
}

// ---- agent.spec.ts ----------------------------------------------------------

/// `agent/inbox/inserted`, `agent/inbox/claimed` and `agent/inbox/discarded`
/// carry the exact messages: an injected context dropped by a cancel is
/// discarded (and never claimed), the prompt after it is inserted and
/// claimed for turn 1, after `turn/start`.
#[tokio::test]
async fn inbox_notifications_carry_the_exact_inserted_claimed_and_discarded_messages() {
    let listeners = "{ event = 'agent/inbox/inserted', action = 'record' }, \
                     { event = 'agent/inbox/claimed', action = 'record' }, \
                     { event = 'agent/inbox/discarded', action = 'record' }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([text("ok")]);
    let agent = new_agent(&t, "/tmp").await;
    let context = json!({"id": "ctx-1", "role": "user",
                         "content": [{"type": "text", "text": "discard me"}],
                         "source": {"kind": "plugin", "plugin": "test"}});
    t.call(
        service::AGENTS,
        agents::INJECT,
        json!({"agent": agent, "message": context}),
    )
    .await;
    t.call(service::AGENTS, agents::CANCEL, json!({"agent": agent}))
        .await;
    let prompt = json!({"id": "prompt-1", "role": "user",
                        "content": [{"type": "text", "text": "run"}],
                        "source": {"kind": "user"}});
    t.call(
        service::AGENTS,
        agents::FOLLOWUP,
        json!({"agent": agent, "message": prompt}),
    )
    .await;
    assert_eq!(idle(&t, &agent).await, json!({"kind": "completed"}));

    let j = wait_kit_journal(&t, "k", |j| {
        j.iter().any(|e| e["event"] == bus::AGENT_INBOX_CLAIMED)
            && j.iter().any(|e| e["event"] == bus::AGENT_INBOX_DISCARDED)
    })
    .await;
    assert_eq!(
        heard(&j, bus::AGENT_INBOX_INSERTED),
        [
            json!({"agent": agent, "message": context}),
            json!({"agent": agent, "message": prompt})
        ]
    );
    assert_eq!(
        heard(&j, bus::AGENT_INBOX_DISCARDED),
        [json!({"agent": agent, "message": context})]
    );
    assert_eq!(
        heard(&j, bus::AGENT_INBOX_CLAIMED),
        [json!({"agent": agent, "message": prompt, "turn": 1})]
    );
    // The claim follows the turn's start in the log.
    let ev = events(&t, &agent).await;
    let start = ev
        .iter()
        .position(|e| e["type"] == event::TURN_START)
        .unwrap();
    let claim = ev
        .iter()
        .position(|e| {
            e["type"] == event::INBOX_SPLICED
                && e["data"]["target"] == "next-turn"
                && e["data"]["removedCount"] == 1
                && e["data"].get("outcome").is_none()
        })
        .unwrap();
    assert!(start < claim);
    t.shutdown().await;
}

// ---- session.spec.ts ----------------------------------------------------------

/// Creating a session emits `session/created` with its header; each append
/// emits one `session/event` naming the session (session.spec "creates
/// sessions, emits session/created and session/event").
#[tokio::test]
async fn create_emits_session_created_and_each_append_a_session_event() {
    let listeners = "{ event = 'session/created', action = 'record' }, \
                     { event = 'session/event', action = 'record' }";
    let (t, _fake) = setup(&kit_row("k", listeners, "")).await;
    let created = t
        .call(
            service::SESSIONS,
            sessions::CREATE,
            json!({"meta": {"cwd": "/tmp"}}),
        )
        .await;
    let id = created["id"].as_str().unwrap().to_owned();
    t.call(
        service::SESSIONS,
        sessions::APPEND,
        json!({"id": id, "type": event::TURN_START, "data": {"turn": 1}}),
    )
    .await;
    let message = json!({"id": "m1", "role": "user",
                         "content": [{"type": "text", "text": "x"}], "source": {"kind": "user"}});
    t.call(
        service::SESSIONS,
        sessions::APPEND,
        json!({"id": id, "type": event::USER_MESSAGE, "data": message, "surfaceOp": "append"}),
    )
    .await;

    let j = wait_kit_journal(&t, "k", |j| {
        j.iter()
            .filter(|e| e["event"] == bus::SESSION_EVENT)
            .count()
            >= 2
    })
    .await;
    let created_heard = heard(&j, bus::SESSION_CREATED);
    assert_eq!(created_heard.len(), 1);
    assert_eq!(created_heard[0]["header"]["id"], json!(id));
    assert_eq!(created_heard[0]["header"]["cwd"], json!("/tmp"));
    assert_eq!(created_heard[0]["resumed"], json!(false));
    let appended = heard(&j, bus::SESSION_EVENT);
    assert_eq!(appended.len(), 2);
    let seen: Vec<(&Value, &Value)> = appended
        .iter()
        .map(|p| (&p["sessionId"], &p["event"]["type"]))
        .collect();
    assert_eq!(
        seen,
        [
            (&json!(id), &json!(event::TURN_START)),
            (&json!(id), &json!(event::USER_MESSAGE))
        ]
    );
    assert_eq!(appended[1]["event"]["data"], message);
    t.shutdown().await;
}

// ---- scope-lifecycle.spec.ts ----------------------------------------------------

/// An agent id reopens once its prior agent is disposed and its session
/// closed: a fresh agent with the same id starts a new log and runs.
#[tokio::test]
async fn an_agent_id_reopens_after_the_prior_agent_quiesces() {
    let (t, fake) = setup("").await;
    fake.push([text("one"), text("two")]);
    let params = json!({"sessionId": "reused-id", "agentOptions": {"provider": "fake", "model": "m1"},
                        "meta": {"cwd": "/tmp"}});
    let first = t
        .call(service::AGENT_LOOP, agent_loop::CREATE, params.clone())
        .await;
    assert_eq!(first["agent"], "reused-id");
    assert_eq!(
        turn(&t, "reused-id", "before").await,
        json!({"kind": "completed"})
    );
    t.call(
        service::AGENTS,
        agents::DISPOSE,
        json!({"agent": "reused-id"}),
    )
    .await;
    t.call(
        service::SESSIONS,
        sessions::CLOSE,
        json!({"id": "reused-id"}),
    )
    .await;
    let listed = t
        .call(service::AGENT_LOOP, agent_loop::LIST, json!({}))
        .await;
    assert_eq!(listed, json!([]));

    let again = t
        .call(service::AGENT_LOOP, agent_loop::CREATE, params)
        .await;
    assert_eq!(again["agent"], "reused-id");
    assert_eq!(
        turn(&t, "reused-id", "after").await,
        json!({"kind": "completed"})
    );
    let ev = events(&t, "reused-id").await;
    assert_eq!(logged_user_texts(&ev), ["after"]);
    assert_eq!(of_type(&ev, event::TURN_START)[0]["data"]["turn"], 1);
    t.shutdown().await;
}

// ---- tools.spec.ts ----------------------------------------------------------

/// A context message as a TOML inline table, from plugin `plugin`.
fn context_toml(plugin: &str) -> String {
    format!(
        "{{ id = 'ctx-{plugin}', role = 'user', content = [{{ type = 'text', text = '{plugin}' }}], \
         source = {{ kind = 'plugin', plugin = '{plugin}' }} }}"
    )
}

/// The texts of the `user/message`s logged in step 2 of turn 1.
fn step_two_user_texts(ev: &[Value]) -> Vec<String> {
    let start = ev
        .iter()
        .position(|e| e["type"] == event::STEP_START && e["data"]["step"] == 2)
        .expect("a second step");
    logged_user_texts(&ev[start..])
}

/// The tool's own contexts, then an execute wrapper's, then a post-execute
/// decision's, in that order, all enter the next step (tools.spec
/// "preserves tool-deferred, execute-wrapper, and post-execute contexts in
/// order", "post-execute additionalContexts ride on the result").
#[tokio::test]
async fn tool_wrapper_and_post_execute_contexts_enter_the_next_step_in_order() {
    let listeners = format!(
        "{{ event = 'tools/execute', action = 'append', value = {{ additionalContexts = [{}] }} }}, \
         {{ event = 'tools/post-execute', action = 'return', value = {{ kind = 'accept', additionalContexts = [{}] }} }}",
        context_toml("wrapper"),
        context_toml("post")
    );
    let (t, fake) = setup(&kit_row("k", &listeners, "{ name = 'x' }")).await;
    fake.push([
        calls(&[("c1", "x", json!({"contexts": ["tool"]}))]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));

    let ev = events(&t, &agent).await;
    assert_eq!(step_two_user_texts(&ev), ["tool", "wrapper", "post"]);
    let sources: Vec<&Value> = of_type(&ev, event::USER_MESSAGE)
        .iter()
        .skip(2)
        .map(|e| &e["data"]["source"])
        .collect();
    assert_eq!(
        sources,
        [
            &json!({"kind": "plugin", "plugin": "wrapper"}),
            &json!({"kind": "plugin", "plugin": "post"})
        ]
    );
    assert_eq!(
        &user_texts_of(&fake.requests()[1])[1..],
        ["tool", "wrapper", "post"]
    );
    t.shutdown().await;
}

/// A post-execute block may attach contexts too: only its own enter the
/// next step; those of the blocked result are dropped with it.
#[tokio::test]
async fn a_blocking_post_execute_decision_keeps_only_its_own_contexts() {
    let listeners = format!(
        "{{ event = 'tools/post-execute', action = 'return', value = {{ kind = 'block', \
         feedback = [{{ type = 'text', text = 'rejected' }}], additionalContexts = [{}] }} }}",
        context_toml("blocker")
    );
    let (t, fake) = setup(&kit_row("k", &listeners, "{ name = 'x' }")).await;
    fake.push([
        calls(&[("c1", "x", json!({"contexts": ["tool"]}))]),
        text("done"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));

    let ev = events(&t, &agent).await;
    let results = of_type(&ev, event::TOOL_RESULT);
    let block = &results[0]["data"]["message"]["content"][0];
    assert_eq!(block["isError"], json!(true));
    assert_eq!(
        block["content"],
        json!([{"type": "text", "text": "rejected"}])
    );
    assert_eq!(step_two_user_texts(&ev), ["blocker"]);
    t.shutdown().await;
}

/// A later call's cancel ends the batch: the first call's result and the
/// aborted one are both recorded, the step and turn close, and the first
/// call's accepted context never becomes a `user/message` (contract
/// regression "records post-tool context when a later call aborts the
/// batch").
#[tokio::test]
async fn a_later_call_aborting_the_batch_keeps_both_results_and_logs_no_context_message() {
    let listeners =
        "{ event = 'tools/pre-execute', action = 'cancel', when = { exec = { callId = 'c2' } } }";
    let (t, fake) = setup(&kit_row("k", listeners, "{ name = 'x' }")).await;
    fake.push([calls(&[
        (
            "c1",
            "x",
            json!({"contexts": ["accepted after first result"]}),
        ),
        ("c2", "x", json!({})),
    ])]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, aborted_by_user());

    let ev = events(&t, &agent).await;
    let tail: Vec<&str> = ev
        .iter()
        .filter_map(|e| e["type"].as_str())
        .filter(|k| {
            [
                event::TOOL_RESULT,
                event::USER_MESSAGE,
                event::STEP_END,
                event::TURN_END,
            ]
            .contains(k)
        })
        .collect();
    assert_eq!(
        tail,
        [
            event::USER_MESSAGE,
            event::TOOL_RESULT,
            event::TOOL_RESULT,
            event::STEP_END,
            event::TURN_END
        ]
    );
    let results = of_type(&ev, event::TOOL_RESULT);
    assert_eq!(
        results[0]["data"]["message"]["content"][0]["content"],
        json!([{"type": "text", "text": "ok c1"}])
    );
    // Cancelled in its pre-execute, the later call never dispatched.
    assert_eq!(
        results[1]["data"]["error"]["code"],
        json!(code::ABORTED_BEFORE_DISPATCH)
    );
    assert_eq!(logged_user_texts(&ev), ["go"]);
    assert_eq!(fake.requests().len(), 1);
    t.shutdown().await;
}

// ---- cancel.spec.ts: the abort-to-idle window ---------------------------------

/// Polls until the log holds `n` `turn/end` events.
async fn wait_turn_ends(t: &TestHost, agent: &str, n: usize) {
    wait_log(t, agent, "the turn ends", |ev| {
        of_type(ev, event::TURN_END).len() >= n
    })
    .await;
}

/// A waking send deep in a slow abort convergence is latched and replays
/// once the aborted turn is idle: here a `agent/turn-stopping` listener
/// cancels with `keepInbox` and then, still holding the driver in the
/// abort-to-idle window, sends a followup (cancel.spec "latches a wake
/// arriving deep into a slow abort convergence").
#[tokio::test]
async fn a_wake_deep_in_the_abort_to_idle_window_is_latched_and_replayed() {
    let listeners = "{ event = 'agent/turn-stopping', action = 'cancel', value = { keepInbox = true }, once = true }, \
                     { event = 'agent/turn-stopping', action = 'followup', value = 'B', once = true }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([text("A reply"), text("B reply")]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "A").await;
    wait_turn_ends(&t, &agent, 2).await;
    assert_eq!(idle(&t, &agent).await, json!({"kind": "completed"}));

    let ev = events(&t, &agent).await;
    let ends: Vec<&Value> = of_type(&ev, event::TURN_END)
        .iter()
        .map(|e| &e["data"]["reason"])
        .collect();
    assert_eq!(ends, [&aborted_by_user(), &json!({"kind": "completed"})]);
    assert_eq!(logged_user_texts(&ev), ["A", "B"]);
    assert_eq!(fake.requests().len(), 2);
    t.shutdown().await;
}

/// A waking send that lands after disposal's cancel began (cause
/// `disposed`, as `agents.dispose` issues it) is not latched: no turn runs
/// it, and it stays parked (cancel.spec "does not latch a wake landing
/// after disposal begins").
#[tokio::test]
async fn a_wake_after_the_disposal_cancel_began_is_not_latched() {
    let listeners = "{ event = 'agent/turn-stopping', action = 'cancel', value = { cause = { kind = 'disposed' }, keepInbox = true }, once = true }, \
                     { event = 'agent/turn-stopping', action = 'followup', value = 'late wake', once = true }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([text("active reply"), text("late reply")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(
        turn(&t, &agent, "active").await,
        json!({"kind": "aborted", "reason": {"kind": "disposed"}})
    );
    let status = t
        .call(service::AGENTS, agents::STATUS, json!({"agent": agent}))
        .await;
    assert_eq!(status["status"], "idle");

    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, event::TURN_START).len(), 1);
    assert_eq!(logged_user_texts(&ev), ["active"]);
    assert_eq!(fake.requests().len(), 1);
    // Parked, not dropped: the late wake's message is the inbox's only item.
    let parked = of_type(&ev, event::INBOX_SPLICED)
        .into_iter()
        .rfind(|e| e["data"]["target"] == "next-turn")
        .expect("a next-turn splice");
    assert_eq!(
        parked["data"]["inserted"][0]["content"][0]["text"],
        "late wake"
    );
    t.shutdown().await;
}

// ---- contract-regressions.spec.ts: in-band finishes ----------------------------

/// An in-band `finish{aborted}` (here from the scripted adapter, route
/// `script`) is a turn error coded ABORTED with the failure's message, and no
/// `assistant/message` is synthesized (contract regression "translates
/// finish {kind:aborted} into a turn error coded ABORTED").
#[tokio::test]
async fn an_in_band_aborted_finish_is_a_turn_error_coded_aborted() {
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    let script = t.home.path().join("script.json");
    let finish = json!({"type": "finish", "reason": {"kind": "aborted",
                        "failure": {"message": "model stream aborted", "code": code::ABORTED}}});
    std::fs::write(
        &script,
        json!({"responses": [{"chunks": [finish]}]}).to_string(),
    )
    .unwrap();
    let mut rows = dsh_testkit::core_rows(&fake.base_url, &t.home.path().join("sessions"));
    rows.push_str(&format!(
        "[[row]]\nid = 'llm-script'\nplugin = 'llm-script'\nconfig = {{ script = {}, provider = 'script' }}\n",
        json!(script.to_str().unwrap())
    ));
    t.apply(&rows).await;
    for s in t.host.status().await {
        assert_eq!(format!("{:?}", s.state), "Active", "{s:?}");
    }
    let agent = agent_with(&t, json!({"provider": "script", "model": "s1"})).await;
    assert_eq!(
        turn(&t, &agent, "go").await,
        json!({"kind": "error", "error": {"message": "model stream aborted", "code": code::ABORTED}})
    );
    let ev = events(&t, &agent).await;
    assert!(of_type(&ev, event::ASSISTANT_MESSAGE).is_empty());
    let ends: Vec<&Value> = of_type(&ev, event::TURN_END)
        .iter()
        .map(|e| &e["data"]["reason"]["kind"])
        .collect();
    assert_eq!(ends, [&json!("error")]);
    t.shutdown().await;
}

/// Contract regression "stores replay state with the assembled assistant
/// content": the `replayState` of the adapter's `finish` (here the scripted
/// adapter's, route `script`) is kept in the assistant message's source, in
/// the original's key order; a `max-tokens` cut prunes its `blocks` with the
/// tool call it drops; a replay state whose `blocks` do not line up with
/// the blocks seen is dropped.
#[tokio::test]
async fn the_replay_state_is_stored_with_the_assembled_assistant_content() {
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    let text = |index: u64, text: &str| {
        [
            json!({"type": "block-start", "index": index, "blockType": "text"}),
            json!({"type": "text-delta", "index": index, "text": text}),
            json!({"type": "block-end", "index": index, "block": {"type": "text", "text": text}}),
        ]
    };
    let call = [
        json!({"type": "block-start", "index": 1, "blockType": "tool-call"}),
        json!({"type": "tool-call-delta", "index": 1, "id": "c1", "name": "read", "argumentsDelta": "{"}),
        json!({"type": "block-end", "index": 1,
               "block": {"type": "tool-call", "id": "c1", "name": "read", "arguments": "{"}}),
    ];
    let finish = |kind: &str, replay: Value| json!({"type": "finish", "reason": {"kind": kind}, "replayState": replay});
    let aligned = json!({"response": {"id": "r1"}, "blocks": [{"signature": "s0"}]});
    let cut = json!({"response": {"id": "r2"}, "blocks": [{"signature": "t"}, {"signature": "c"}]});
    let misaligned = json!({"response": {"id": "r3"}, "blocks": []});
    let responses = [
        text(0, "one")
            .into_iter()
            .chain([finish("stop", aligned.clone())])
            .collect::<Vec<_>>(),
        text(0, "two")
            .into_iter()
            .chain(call)
            .chain([finish("max-tokens", cut)])
            .collect(),
        text(0, "three")
            .into_iter()
            .chain([finish("stop", misaligned)])
            .collect(),
    ];
    let script = t.home.path().join("script.json");
    let responses: Vec<Value> = responses
        .into_iter()
        .map(|c| json!({"chunks": c}))
        .collect();
    std::fs::write(&script, json!({"responses": responses}).to_string()).unwrap();
    let mut rows = dsh_testkit::core_rows(&fake.base_url, &t.home.path().join("sessions"));
    rows.push_str(&format!(
        "[[row]]\nid = 'llm-script'\nplugin = 'llm-script'\nconfig = {{ script = {}, provider = 'script' }}\n",
        json!(script.to_str().unwrap())
    ));
    t.apply(&rows).await;
    let agent = agent_with(&t, json!({"provider": "script", "model": "s1"})).await;
    assert_eq!(turn(&t, &agent, "one").await, json!({"kind": "completed"}));
    assert_eq!(turn(&t, &agent, "two").await, json!({"kind": "max-tokens"}));
    assert_eq!(
        turn(&t, &agent, "three").await,
        json!({"kind": "completed"})
    );
    let ev = events(&t, &agent).await;
    let messages: Vec<&Value> = of_type(&ev, event::ASSISTANT_MESSAGE)
        .iter()
        .map(|e| &e["data"]["message"])
        .collect();
    assert_eq!(messages.len(), 3, "{ev:?}");
    // Kept whole, after the route, as the original writes the source.
    assert_eq!(
        serde_json::to_string(&messages[0]["source"]).unwrap(),
        format!(r#"{{"kind":"model","provider":"script","model":"s1","replayState":{aligned}}}"#)
    );
    // Pruned in step with the content: the cut tool call is gone from both.
    assert_eq!(
        messages[1]["content"],
        json!([{"type": "text", "text": "two"}])
    );
    assert_eq!(
        messages[1]["source"]["replayState"],
        json!({"response": {"id": "r2"}, "blocks": [{"signature": "t"}]})
    );
    // Misaligned: dropped, the message is stored without one.
    assert_eq!(
        messages[2]["source"],
        json!({"kind": "model", "provider": "script", "model": "s1"})
    );
    t.shutdown().await;
}

// ---- scope-lifecycle.spec.ts / system-prompt scoped.spec.ts ---------------------

async fn agent_named(t: &TestHost, id: &str) -> String {
    let v = t
        .call(
            service::AGENT_LOOP,
            agent_loop::CREATE,
            json!({"sessionId": id, "agentOptions": {"provider": "fake", "model": "m1"},
                   "meta": {"cwd": "/tmp"}}),
        )
        .await;
    v["agent"].as_str().unwrap().to_owned()
}

/// A listener scoped to agent `a` (the port's `agent.ctx` listener) hears
/// nothing of agent `b`'s turn, and hears `a`'s.
#[tokio::test]
async fn listeners_scoped_to_an_agent_hear_only_that_agent() {
    let listeners = "{ event = 'agent/status', action = 'record', scope = 'a' }, \
                     { event = 'agent/inbox/inserted', action = 'record', scope = 'a' }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([text("one"), text("two")]);
    let a = agent_named(&t, "a").await;
    let b = agent_named(&t, "b").await;
    assert_eq!(turn(&t, &b, "for b").await, json!({"kind": "completed"}));
    assert_eq!(
        kit_journal(&t, "k").await,
        Vec::<Value>::new(),
        "b leaked into a's scope"
    );

    assert_eq!(turn(&t, &a, "for a").await, json!({"kind": "completed"}));
    let j = wait_kit_journal(&t, "k", |j| {
        heard(j, bus::AGENT_STATUS).len() >= 2 && !heard(j, bus::AGENT_INBOX_INSERTED).is_empty()
    })
    .await;
    assert_eq!(
        heard(&j, bus::AGENT_STATUS),
        [
            json!({"agent": "a", "status": "running"}),
            json!({"agent": "a", "status": "idle"})
        ]
    );
    let inserted = heard(&j, bus::AGENT_INBOX_INSERTED);
    assert_eq!(inserted.len(), 1);
    assert_eq!(inserted[0]["message"]["content"][0]["text"], "for a");
    t.shutdown().await;
}

/// A `system-prompt/assemble` listener scoped to agent `a` shapes only
/// `a`'s prompt: its added section is rendered into `a`'s system prompt
/// and absent from `b`'s, which is otherwise identical.
#[tokio::test]
async fn a_scoped_assemble_listener_shapes_only_its_agents_prompt() {
    let listeners = "{ event = 'system-prompt/assemble', action = 'append', scope = 'a', \
                     value = { sections = [{ name = 'scoped', text = 'Only for a.' }] } }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([text("one"), text("two")]);
    let a = agent_named(&t, "a").await;
    let b = agent_named(&t, "b").await;
    assert_eq!(turn(&t, &a, "x").await, json!({"kind": "completed"}));
    assert_eq!(turn(&t, &b, "x").await, json!({"kind": "completed"}));

    let requests = fake.requests();
    let system = |r: &Value| -> String {
        let m = &r["messages"][0];
        assert_eq!(m["role"], "system");
        m["content"].as_str().unwrap().to_owned()
    };
    let (sa, sb) = (system(&requests[0]), system(&requests[1]));
    assert!(!sb.contains("Only for a."), "{sb}");
    assert_eq!(sa, format!("{sb}\n\nOnly for a."));
    t.shutdown().await;
}

// ---- interception.spec.ts ---------------------------------------------------------

/// A send whose durable append fails throws that failure and leaves the
/// inbox as it was: nothing logged, no turn, the agent idle, and nothing of
/// it claimed later. The append is made to fail by closing the agent's
/// session under it; a session re-created with the same id then runs only
/// the next prompt.
#[tokio::test]
async fn a_send_whose_durable_append_fails_leaves_the_inbox_unchanged() {
    let (t, fake) = setup("").await;
    fake.push([text("reply")]);
    let agent = agent_named(&t, "append-fails").await;
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": agent}))
        .await;
    let failed = t
        .host
        .call(
            service::AGENTS,
            agents::FOLLOWUP,
            json!({"agent": agent, "message": {"text": "blocked prompt"}}),
        )
        .await;
    let e = failed.expect_err("the append failed, so the send fails");
    assert_eq!(e.code, code::SESSION_NOT_FOUND, "{e:?}");
    let status = t
        .call(service::AGENTS, agents::STATUS, json!({"agent": agent}))
        .await;
    assert_eq!(status["status"], "idle");
    assert_eq!(status["lastTurn"], 0);

    t.call(
        service::SESSIONS,
        sessions::CREATE,
        json!({"id": agent, "meta": {"cwd": "/tmp"}}),
    )
    .await;
    assert_eq!(turn(&t, &agent, "next").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    assert_eq!(logged_user_texts(&ev), ["next"]);
    assert_eq!(user_texts_of(&fake.requests()[0]), ["next"]);
    t.shutdown().await;
}

// ---- properties.spec.ts ------------------------------------------------------------

/// The turn number of each `user/message` of the log.
fn turns_of_user_messages(ev: &[Value]) -> Vec<u64> {
    let mut turn = 0;
    let mut out = Vec::new();
    for e in ev {
        if e["type"] == event::TURN_START {
            turn = e["data"]["turn"].as_u64().unwrap();
        }
        if e["type"] == event::USER_MESSAGE {
            out.push(turn);
        }
    }
    out
}

/// Mixed settled and same-tick sends keep one turn per message: over
/// schedules drawn from a fixed-seed generator (each send optionally waits
/// for idle before the next), no message is lost or reordered, turns are
/// numbered 1..n with one `turn/end` each, and each turn holds exactly its
/// message (properties.spec "mixed settled and same-tick sends preserve one
/// turn per message").
#[tokio::test]
async fn mixed_settled_and_same_tick_sends_keep_one_turn_per_message() {
    let (t, fake) = setup("").await;
    fake.set_fallback(text("ok"));
    // A small linear congruential generator: the same schedules every run.
    let mut seed: u64 = 0x5eed;
    let mut draw = move |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    for run in 0..12 {
        let len = 1 + draw(6) as usize;
        let schedule: Vec<(String, bool)> = (0..len)
            .map(|i| (format!("m{run}-{i}"), draw(2) == 1))
            .collect();
        let agent = new_agent(&t, "/tmp").await;
        for (text, settle) in &schedule {
            send(&t, agents::FOLLOWUP, &agent, text).await;
            if *settle {
                idle(&t, &agent).await;
            }
        }
        wait_turn_ends(&t, &agent, len).await;
        idle(&t, &agent).await;

        let ev = events(&t, &agent).await;
        let texts: Vec<&str> = schedule.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(logged_user_texts(&ev), texts, "{schedule:?}");
        let numbers: Vec<u64> = (1..=len as u64).collect();
        let starts: Vec<u64> = of_type(&ev, event::TURN_START)
            .iter()
            .map(|e| e["data"]["turn"].as_u64().unwrap())
            .collect();
        let ends: Vec<u64> = of_type(&ev, event::TURN_END)
            .iter()
            .map(|e| e["data"]["turn"].as_u64().unwrap())
            .collect();
        assert_eq!(starts, numbers, "{schedule:?}");
        assert_eq!(ends, numbers, "{schedule:?}");
        assert_eq!(turns_of_user_messages(&ev), numbers, "{schedule:?}");
    }
    t.shutdown().await;
}

/// A `tools/execute` wrapper that answers without the tool keeps the
/// contexts of its answer: they enter the next step (tools.spec "preserves
/// additionalContexts supplied by an around-dispatch result").
#[tokio::test]
async fn a_short_circuiting_execute_wrapper_keeps_its_contexts() {
    let listeners = format!(
        "{{ event = 'tools/execute', action = 'return', value = {{ isError = false, \
         content = [{{ type = 'text', text = 'short-circuited with context' }}], \
         additionalContexts = [{}] }} }}",
        context_toml("around")
    );
    let (t, fake) = setup(&kit_row("k", &listeners, "{ name = 'x' }")).await;
    fake.push([calls(&[("c1", "x", json!({}))]), text("done")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, json!({"kind": "completed"}));

    let j = kit_journal(&t, "k").await;
    assert!(
        !j.iter().any(|e| e["event"] == "tool:start"),
        "the tool ran: {j:?}"
    );
    let ev = events(&t, &agent).await;
    let result = &of_type(&ev, event::TOOL_RESULT)[0]["data"]["message"]["content"][0];
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": "short-circuited with context"}])
    );
    assert_eq!(step_two_user_texts(&ev), ["around"]);
    let around = of_type(&ev, event::USER_MESSAGE)
        .into_iter()
        .rfind(|e| e["data"]["id"] == "ctx-around")
        .expect("the context is logged");
    assert_eq!(
        around["data"]["source"],
        json!({"kind": "plugin", "plugin": "around"})
    );
    t.shutdown().await;
}

/// Disposing an agent mid-turn ends the active turn `aborted{disposed}`
/// and never starts the followup queued behind it: one turn, one request,
/// one running and one idle transition (contract regression "disposing the
/// fiber ends the active turn and never starts its queued tail").
#[tokio::test]
async fn disposal_ends_the_active_turn_and_never_starts_its_queued_tail() {
    let listeners = "{ event = 'agent/status', action = 'record' }";
    let (t, fake) = setup_held(&kit_row("k", listeners, "")).await;
    fake.push([
        Answer::Stall(vec![
            json!({"choices": [{"delta": {"content": "partial"}}]}).to_string(),
        ]),
        text("must not run"),
    ]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "go").await;
    wait_log(&t, &agent, "a chunk", |ev| {
        !of_type(ev, event::ASSISTANT_CHUNK).is_empty()
    })
    .await;
    send(&t, agents::FOLLOWUP, &agent, "queued tail").await;
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": agent}))
        .await;

    let ev = events(&t, &agent).await;
    let ends: Vec<&Value> = of_type(&ev, event::TURN_END)
        .iter()
        .map(|e| &e["data"]["reason"])
        .collect();
    assert_eq!(
        ends,
        [&json!({"kind": "aborted", "reason": {"kind": "disposed"}})]
    );
    assert_eq!(of_type(&ev, event::TURN_START).len(), 1);
    assert_eq!(logged_user_texts(&ev), ["go"]);
    assert_eq!(fake.requests().len(), 1);
    let j = wait_kit_journal(&t, "k", |j| heard(j, bus::AGENT_STATUS).len() >= 2).await;
    let statuses: Vec<&Value> = j.iter().map(|e| &e["payload"]["status"]).collect();
    assert_eq!(statuses, [&json!("running"), &json!("idle")]);
    t.shutdown().await;
}

/// A cancel during reasoning-only streaming finalizes the reasoning prefix
/// (cancel.spec "cancel during reasoning-only streaming finalizes the
/// reasoning prefix"; the DeepSeek adapter reports usage only at `[DONE]`,
/// so no usage can precede the cancel here).
#[tokio::test]
async fn a_mid_stream_cancel_finalizes_a_reasoning_prefix() {
    let stall = Answer::Stall(vec![json!(
        {"choices": [{"delta": {"reasoning_content": "thinking about it"}}]}
    )
    .to_string()]);
    let (t, ev) = cancelled_mid_stream(stall, "reasoning-delta").await;
    let messages = of_type(&ev, event::ASSISTANT_MESSAGE);
    assert_eq!(messages.len(), 1);
    assert_eq!(
        messages[0]["data"]["message"]["content"],
        json!([{"type": "reasoning", "text": "thinking about it"}])
    );
    assert_eq!(messages[0]["data"]["interrupted"], json!(true));
    t.shutdown().await;
}

/// A cancel while a failed attempt is offered to recovery
/// (`agent/request-error`) ends the turn aborted and never finalizes the
/// failed stream's prefix: no `assistant/message` (cancel.spec "cancel
/// during error recovery does not finalize the failed stream").
#[tokio::test]
async fn a_cancel_during_error_recovery_does_not_finalize_the_failed_stream() {
    let listeners =
        "{ event = 'agent/request-error', action = 'cancel', prepend = true, once = true }";
    let (t, fake) = setup(&kit_row("k", listeners, "")).await;
    fake.push([Answer::Disconnect(vec![json!(
        {"choices": [{"delta": {"content": "doomed partial"}}]}
    )
    .to_string()])]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "go").await, aborted_by_user());

    let ev = events(&t, &agent).await;
    assert!(
        ev.iter()
            .any(|e| e["type"] == event::ASSISTANT_CHUNK
                && e["data"]["chunk"]["type"] == "text-delta"),
        "the failed attempt streamed its prefix"
    );
    assert!(of_type(&ev, event::ASSISTANT_MESSAGE).is_empty());
    assert_eq!(fake.requests().len(), 1, "no retry after the cancel");
    t.shutdown().await;
}

/// A throwing `agent/status` listener cannot break disposal or leak the
/// agent: a mid-turn dispose still balances the turn `aborted{disposed}`
/// and removes the agent (contract regression "a throwing agent/status
/// listener cannot break disposal or leak the registry entry").
#[tokio::test]
async fn a_throwing_status_listener_cannot_break_disposal_or_leak_the_agent() {
    let listeners = "{ event = 'agent/status', action = 'fail' }";
    let (t, fake) = setup_held(&kit_row("k", listeners, "")).await;
    fake.push([Answer::Stall(vec![json!(
        {"choices": [{"delta": {"content": "partial"}}]}
    )
    .to_string()])]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "go").await;
    wait_log(&t, &agent, "a chunk", |ev| {
        !of_type(ev, event::ASSISTANT_CHUNK).is_empty()
    })
    .await;
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": agent}))
        .await;

    assert_eq!(
        t.call(service::AGENT_LOOP, agent_loop::LIST, json!({}))
            .await,
        json!([])
    );
    let ev = events(&t, &agent).await;
    let ends: Vec<&Value> = of_type(&ev, event::TURN_END)
        .iter()
        .map(|e| &e["data"]["reason"])
        .collect();
    assert_eq!(
        ends,
        [&json!({"kind": "aborted", "reason": {"kind": "disposed"}})]
    );
    let j = wait_kit_journal(&t, "k", |j| heard(j, bus::AGENT_STATUS).len() >= 2).await;
    let statuses: Vec<&Value> = j.iter().map(|e| &e["payload"]["status"]).collect();
    assert_eq!(
        statuses,
        [&json!("running"), &json!("idle")],
        "both transitions reached the listener"
    );
    let status = t
        .host
        .call(service::AGENTS, agents::STATUS, json!({"agent": agent}))
        .await
        .expect_err("the agent is gone");
    assert_eq!(status.code, "AGENT_NOT_FOUND");
    t.shutdown().await;
}
