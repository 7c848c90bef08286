//! The agent core in one [`TestHost`] against a [`FakeLlm`]: start it,
//! create agents, run turns and read their session logs.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::fake_llm::FakeLlm;
use crate::{core_rows, TestHost};
use dsh_sdk::names::{agent_loop, agents, code, llm, service, session_persistence, sessions};
use dsh_sdk::vocab::event;

/// The persona line of [`core_rows`]' `system-prompt` row.
pub const PERSONA_CONFIG: &str = "config = { persona = \"You work in {{cwd}} with {{model}}.\" }";

/// A fake model server and a host running [`core_rows`] against it (as
/// `edit` changes them), sessions under `$DSH_HOME/sessions`; panics unless
/// every row is active.
pub async fn core_host(edit: impl FnOnce(String) -> String) -> (TestHost, FakeLlm) {
    core_host_staged(&[], edit).await
}

/// Like [`core_host`], with the built fixtures `(crate, file)` staged in the
/// host's plugin directory first (see [`TestHost::stage`]).
pub async fn core_host_staged(
    fixtures: &[(&str, &str)],
    edit: impl FnOnce(String) -> String,
) -> (TestHost, FakeLlm) {
    let (t, fake) = core_host_applied(fixtures, edit).await;
    t.assert_all_active().await;
    (t, fake)
}

/// Like [`core_host_staged`], without checking the rows' states (for tests
/// whose rows may fail on purpose).
pub async fn core_host_applied(
    fixtures: &[(&str, &str)],
    edit: impl FnOnce(String) -> String,
) -> (TestHost, FakeLlm) {
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    for (crate_name, file) in fixtures {
        t.stage(crate_name, file);
    }
    let rows = core_rows(&fake.base_url, &t.home.path().join("sessions"));
    t.apply(&edit(rows)).await;
    (t, fake)
}

/// `rows` (the [`core_rows`]) with the `system-prompt` row's config replaced
/// by `config` (an inline TOML table); panics if the kit's persona line
/// ([`PERSONA_CONFIG`]) is not there to replace.
pub fn with_prompt_config(rows: &str, config: &str) -> String {
    assert!(
        rows.contains(PERSONA_CONFIG),
        "the kit's prompt row changed"
    );
    rows.replace(PERSONA_CONFIG, &format!("config = {config}"))
}

/// Creates an agent with `agentLoop.create(params)`; its id.
pub async fn create(t: &TestHost, params: Value) -> String {
    let v = t
        .call(service::AGENT_LOOP, agent_loop::CREATE, params)
        .await;
    v["agent"]
        .as_str()
        .unwrap_or_else(|| panic!("agentLoop.create gave no agent: {v}"))
        .to_owned()
}

/// A new agent with `agentOptions` `options` working in `/tmp`; its id.
pub async fn agent_with(t: &TestHost, options: Value) -> String {
    create(t, json!({"agentOptions": options, "meta": {"cwd": "/tmp"}})).await
}

/// A new agent working in `cwd` on model `m1` of provider `fake`; its id
/// (also the id of its session).
pub async fn new_agent(t: &TestHost, cwd: &str) -> String {
    create(
        t,
        json!({"agentOptions": {"provider": "fake", "model": "m1"}, "meta": {"cwd": cwd}}),
    )
    .await
}

/// Sends `message` to `agent` with `agents.<method>` (`followup`, `steer`,
/// `inject`, ...); the answer.
pub async fn send_message(t: &TestHost, method: &str, agent: &str, message: Value) -> Value {
    t.call(
        service::AGENTS,
        method,
        json!({"agent": agent, "message": message}),
    )
    .await
}

/// Sends the text `prompt` to `agent` with `agents.<method>`; the answer.
pub async fn send(t: &TestHost, method: &str, agent: &str, prompt: &str) -> Value {
    send_message(t, method, agent, json!({"text": prompt})).await
}

/// Waits until `agent` is idle; the end reason of its last turn.
pub async fn idle(t: &TestHost, agent: &str) -> Value {
    t.call(service::AGENTS, agents::WHEN_IDLE, json!({"agent": agent}))
        .await["reason"]
        .clone()
}

/// Sends `prompt` to `agent` and waits until it is idle; the turn's end
/// reason.
pub async fn turn(t: &TestHost, agent: &str, prompt: &str) -> Value {
    send(t, agents::FOLLOWUP, agent, prompt).await;
    idle(t, agent).await
}

/// Cancels `agent`'s turn (`agents.cancel`) and waits until it is idle;
/// the turn's end reason.
pub async fn cancel(t: &TestHost, agent: &str) -> Value {
    t.call(service::AGENTS, agents::CANCEL, json!({"agent": agent}))
        .await;
    idle(t, agent).await
}

/// Sends `prompt` to `agent`, waits until its answer has streamed some text
/// ([`streamed_text`]), then cancels the turn ([`cancel`]); the turn's end
/// reason. The fake should hold the answer open after its first text
/// (`Answer::Stall`, `Answer::Gated`).
pub async fn cancel_mid_stream(t: &TestHost, agent: &str, prompt: &str) -> Value {
    send(t, agents::FOLLOWUP, agent, prompt).await;
    streamed_text(t, agent).await;
    cancel(t, agent).await
}

/// What `llm.resolveModelInfo` says of `model` on route `provider`: its
/// name, `context.contextWindow`, `contextSource`, `defaultMaxTokens`...
pub async fn model_info(t: &TestHost, provider: &str, model: &str) -> Value {
    t.call(
        service::LLM,
        llm::RESOLVE_MODEL_INFO,
        json!({"provider": provider, "model": model}),
    )
    .await
}

/// Every event of session `id` (an agent's id names its session): the
/// live log, or, once the session was closed (its agent disposed), the
/// stored one as the store reads it without taking it.
pub async fn events(t: &TestHost, id: &str) -> Vec<Value> {
    let live = t
        .host
        .call(service::SESSIONS, sessions::EVENTS, json!({"id": id}))
        .await;
    let v = match live {
        Ok(v) => v,
        Err(e) if e.code == code::SESSION_NOT_FOUND => {
            let mut stored = t
                .call(
                    service::SESSION_PERSISTENCE,
                    session_persistence::INSPECT,
                    json!({"id": id}),
                )
                .await;
            stored["events"].take()
        }
        Err(e) => panic!("sessions.events of {id} failed: {e}"),
    };
    serde_json::from_value(v).unwrap_or_else(|e| panic!("sessions.events of {id}: {e}"))
}

/// The events of type `kind`, in order.
pub fn of_type<'a>(ev: &'a [Value], kind: &str) -> Vec<&'a Value> {
    ev.iter().filter(|e| e["type"] == kind).collect()
}

/// The log's event types, each run of `assistant/chunk` folded into one
/// `assistant/chunk*`.
pub fn kinds(events: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in events {
        let Some(k) = e["type"].as_str().map(str::to_owned) else {
            panic!("a logged event without a string `type`: {e}");
        };
        if k == event::ASSISTANT_CHUNK && out.last().is_some_and(|l| l == "assistant/chunk*") {
            continue;
        }
        out.push(if k == event::ASSISTANT_CHUNK {
            "assistant/chunk*".into()
        } else {
            k
        });
    }
    out
}

/// The first text of each `user/message`, in log order (`""` where there
/// is none).
pub fn user_texts(ev: &[Value]) -> Vec<String> {
    of_type(ev, dsh_sdk::vocab::event::USER_MESSAGE)
        .iter()
        .map(|e| {
            e["data"]["content"][0]["text"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

/// Polls the log of `agent` every 5 ms until `cond` holds; panics with
/// `what` after a minute.
pub async fn wait_log(t: &TestHost, agent: &str, what: &str, cond: impl Fn(&[Value]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond(&events(t, agent).await) {
        assert!(Instant::now() < deadline, "never logged: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits (see [`wait_log`]) until the answer streaming for `agent` has
/// logged some text: an interrupted prefix is then sure to hold it (a first
/// chunk may be one without text, the stream's start).
pub async fn streamed_text(t: &TestHost, agent: &str) {
    wait_log(t, agent, "a text chunk", |ev| {
        ev.iter().any(|e| {
            e["type"] == event::ASSISTANT_CHUNK && e["data"]["chunk"]["type"] == "text-delta"
        })
    })
    .await;
}

/// Waits (see [`wait_log`]) until the log of `agent` holds an event of
/// type `kind`.
pub async fn logged(t: &TestHost, agent: &str, kind: &str) {
    wait_log(t, agent, &format!("an event {kind}"), |ev| {
        ev.iter().any(|e| e["type"] == kind)
    })
    .await;
}
