//! Conformance, §10.2 Agent and §10.3 Agent loop, second wave (the inbox
//! and the agents' creation rows): the original's behaviours checked against
//! the real plugins in a real host with the fake model server. Rows:
//! tests/CONFORMANCE.md (§10.2, §10.3).
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::time::{Duration, Instant};

use dsh_sdk::names::{agent_loop, agents, bus, code, service, sessions};
use dsh_sdk::vocab::event;
use dsh_testkit::agent::{
    core_host_staged, create, events, logged, new_agent, send_message, user_texts,
    with_prompt_config,
};
use dsh_testkit::fake_llm::{stall_after, text, Answer, FakeLlm};
use dsh_testkit::fixtures::{hooks_journal, hooks_row, HOOKS, PROBE};
use dsh_testkit::msg;
use dsh_testkit::TestHost;
use serde_json::{json, Value};

const DEADLINE: Duration = Duration::from_secs(20);
/// A persona without `{{cwd}}` (which has no value for an agent created
/// without a cwd: a strict render error).
const NO_CWD_PERSONA: &str = "{ persona = \"You work with {{model}}.\" }";

/// A host with the kit's core rows (persona without `{{cwd}}`) and `extra`.
async fn setup(extra: &str) -> (TestHost, FakeLlm) {
    core_host_staged(&[HOOKS], |rows| {
        with_prompt_config(&rows, NO_CWD_PERSONA) + extra
    })
    .await
}

fn splices(ev: &[Value]) -> Vec<Value> {
    ev.iter()
        .filter(|e| e["type"] == event::INBOX_SPLICED)
        .map(|e| e["data"].clone())
        .collect()
}

/// The messages the hooks fixture `tag` heard on `name`, once it heard
/// `n` events in all.
async fn heard(t: &TestHost, tag: &str, n: usize, name: &str) -> Vec<Value> {
    heard_all(t, tag, n)
        .await
        .iter()
        .filter(|e| e["event"] == name)
        .map(|e| e["payload"]["message"].clone())
        .collect()
}

/// An agent whose first turn is stuck in the model stream, so what is sent
/// now stays pending: `original` queued for the next turn, `step` for the
/// next step.
async fn agent_with_pending(t: &TestHost, fake: &FakeLlm) -> (String, Value, Value) {
    fake.push([stall_after("Half")]);
    let agent = new_agent(t, "/tmp").await;
    send_message(
        t,
        agents::FOLLOWUP,
        &agent,
        msg::user_text("running", "running"),
    )
    .await;
    logged(t, &agent, event::ASSISTANT_CHUNK).await;
    let original = msg::user_text("original", "original");
    let step = msg::user_text("step", "step");
    send_message(t, agents::FOLLOWUP, &agent, original.clone()).await;
    send_message(t, agents::INJECT, &agent, step.clone()).await;
    (agent, original, step)
}

async fn pending(t: &TestHost, agent: &str) -> Value {
    t.call(service::AGENTS, agents::PENDING, json!({"agent": agent}))
        .await
}

/// agent.spec "replaces a pending message by identity across both lists":
/// a missing id is false and logs nothing; a hit replaces in place in
/// whichever list holds it (a canceled splice: the old one discarded, the
/// new one inserted); a replacement whose id is pending elsewhere is
/// refused.
#[tokio::test]
async fn replace_finds_a_pending_message_by_identity_in_either_list() {
    let hooks = hooks_row(
        "i",
        json!({"listeners": [{"event": bus::AGENT_INBOX_INSERTED}, {"event": bus::AGENT_INBOX_DISCARDED}]}),
    );
    let (t, fake) = setup(&hooks).await;
    let (agent, original, step) = agent_with_pending(&t, &fake).await;
    let before = splices(&events(&t, &agent).await).len();

    let replacement = msg::user_text("replacement", "replacement");
    let replace =
        |id: &str, message: &Value| json!({"agent": agent, "messageId": id, "message": message});
    let missed = t
        .call(
            service::AGENTS,
            agents::REPLACE,
            replace("missing", &replacement),
        )
        .await;
    assert_eq!(missed, json!(false));
    assert_eq!(splices(&events(&t, &agent).await).len(), before);

    let hit = t
        .call(
            service::AGENTS,
            agents::REPLACE,
            replace("original", &replacement),
        )
        .await;
    assert_eq!(hit, json!(true));
    // The same identity with other content: an edit in the next-step list.
    let edited = msg::user_text("step", "edited step");
    let hit = t
        .call(service::AGENTS, agents::REPLACE, replace("step", &edited))
        .await;
    assert_eq!(hit, json!(true));
    assert_eq!(
        pending(&t, &agent).await,
        json!({"nextTurn": [replacement], "nextStep": [edited]})
    );
    let logged = splices(&events(&t, &agent).await);
    assert_eq!(
        logged[before..],
        [
            json!({"target": "next-turn", "start": 0, "removedCount": 1,
                   "inserted": [replacement], "outcome": "canceled"}),
            json!({"target": "next-step", "start": 0, "removedCount": 1,
                   "inserted": [edited], "outcome": "canceled"}),
        ]
    );

    // `edited` → a message with `replacement`'s id, pending in next-turn.
    let err = t
        .host
        .call(
            service::AGENTS,
            agents::REPLACE,
            replace("step", &replacement),
        )
        .await
        .expect_err("a duplicate identity is refused");
    assert_eq!(err.code, "MESSAGE_ALREADY_PENDING");
    assert_eq!(err.message, "message \"replacement\" is already pending");
    assert_eq!(
        pending(&t, &agent).await,
        json!({"nextTurn": [replacement], "nextStep": [edited]})
    );

    // Inserted: the three sends, then the two replacements; discarded: the
    // two replaced messages, in order.
    let running = msg::user_text("running", "running");
    assert_eq!(
        heard(&t, "i", 7, bus::AGENT_INBOX_INSERTED).await,
        [running, original.clone(), step.clone(), replacement, edited]
    );
    assert_eq!(
        heard(&t, "i", 7, bus::AGENT_INBOX_DISCARDED).await,
        [original, step]
    );
    t.call(service::AGENTS, agents::CANCEL, json!({"agent": agent}))
        .await;
    t.shutdown().await;
}

/// agent.spec "… reports missing removals": `remove` cancels one pending
/// message durably and is false for an id that is not (or no longer)
/// pending.
#[tokio::test]
async fn remove_cancels_one_pending_message_and_a_missing_id_is_false() {
    let (t, fake) = setup("").await;
    let (agent, original, _step) = agent_with_pending(&t, &fake).await;
    let remove = |id: &str| json!({"agent": agent, "messageId": id});
    assert_eq!(
        t.call(service::AGENTS, agents::REMOVE, remove("step"))
            .await,
        json!(true)
    );
    assert_eq!(
        pending(&t, &agent).await,
        json!({"nextTurn": [original], "nextStep": []})
    );
    assert_eq!(
        splices(&events(&t, &agent).await).last(),
        Some(
            &json!({"target": "next-step", "start": 0, "removedCount": 1,
                     "inserted": [], "outcome": "canceled"})
        )
    );
    let before = events(&t, &agent).await.len();
    assert_eq!(
        t.call(service::AGENTS, agents::REMOVE, remove("step"))
            .await,
        json!(false)
    );
    // The claimed prompt is no longer pending either.
    assert_eq!(
        t.call(service::AGENTS, agents::REMOVE, remove("running"))
            .await,
        json!(false)
    );
    assert_eq!(events(&t, &agent).await.len(), before);
    t.call(service::AGENTS, agents::CANCEL, json!({"agent": agent}))
        .await;
    t.shutdown().await;
}

/// agent.spec "… rejects duplicate identities": a message whose id is
/// pending in either list is refused, whichever list it is sent to, and
/// nothing is logged for it.
#[tokio::test]
async fn a_send_whose_message_id_is_already_pending_is_refused() {
    let (t, fake) = setup("").await;
    let (agent, original, step) = agent_with_pending(&t, &fake).await;
    let before = events(&t, &agent).await.len();
    for (method, message) in [
        ("inject", &original),
        ("followup", &step),
        ("followup", &original),
    ] {
        let err = t
            .host
            .call(
                service::AGENTS,
                method,
                json!({"agent": agent, "message": message}),
            )
            .await
            .expect_err("a duplicate identity is refused");
        assert_eq!(err.code, "MESSAGE_ALREADY_PENDING");
        let id = message["id"].as_str().unwrap_or_default();
        assert_eq!(err.message, format!("message \"{id}\" is already pending"));
    }
    assert_eq!(events(&t, &agent).await.len(), before);
    assert_eq!(
        pending(&t, &agent).await,
        json!({"nextTurn": [original], "nextStep": [step]})
    );
    t.call(service::AGENTS, agents::CANCEL, json!({"agent": agent}))
        .await;
    t.shutdown().await;
}

/// agent.spec "rejects an invalid durable splice during reconstruction":
/// a logged splice that does not fit the replayed lists fails the resume
/// with the original's message (naming the seq), and leaves no agent.
#[tokio::test]
async fn a_resume_rejects_an_invalid_logged_splice_naming_its_seq() {
    let (t, _fake) = setup("").await;
    t.call(
        service::SESSIONS,
        sessions::CREATE,
        json!({"id": "invalid-inbox-replay", "meta": {"cwd": "/tmp"}}),
    )
    .await;
    t.call(
        service::SESSIONS,
        sessions::APPEND,
        json!({"id": "invalid-inbox-replay", "type": event::INBOX_SPLICED,
               "data": {"target": "next-turn", "start": 1, "inserted": []}}),
    )
    .await;
    let err = t
        .host
        .call(
            service::AGENT_LOOP,
            agent_loop::RESUME,
            json!({"sessionId": "invalid-inbox-replay",
                   "agentOptions": {"provider": "fake", "model": "m1"}}),
        )
        .await
        .expect_err("the replay fails");
    assert_eq!(err.code, "INVALID_INBOX_SPLICE");
    assert_eq!(
        err.message,
        "invalid persisted inbox splice at session seq 0: invalid inbox splice"
    );
    assert_eq!(
        t.call(service::AGENT_LOOP, agent_loop::LIST, json!({}))
            .await,
        json!([])
    );
    t.shutdown().await;
}

/// resume.spec "createAgent works without meta (no cwd)" and "resume of a
/// session with no cwd carries an undefined cwd header": no `/` default,
/// neither when created nor when resumed from the stored log.
#[tokio::test]
async fn an_agent_created_without_a_cwd_has_none_and_resumes_without_one() {
    let (t, fake) = setup("").await;
    let agent = create(
        &t,
        json!({"sessionId": "nocwd-sess", "agentOptions": {"provider": "fake", "model": "m1"}}),
    )
    .await;
    let header = t
        .call(service::SESSIONS, sessions::HEADER, json!({"id": agent}))
        .await["header"]
        .clone();
    assert_eq!(header["id"], "nocwd-sess");
    assert_eq!(header.get("cwd"), None, "{header}");
    fake.push([text("hi")]);
    send_message(&t, agents::FOLLOWUP, &agent, json!({"text": "hello"})).await;
    let end = t
        .call(service::AGENTS, agents::WHEN_IDLE, json!({"agent": agent}))
        .await;
    assert_eq!(end["reason"], json!({"kind": "completed"}));
    let system = &fake.requests()[0]["messages"][0]["content"];
    assert!(
        system
            .as_str()
            .is_some_and(|s| s.ends_with("You work with m1.")),
        "{system}"
    );

    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": agent}))
        .await;
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": agent}))
        .await;
    t.call(
        service::AGENT_LOOP,
        agent_loop::RESUME,
        json!({"sessionId": "nocwd-sess", "agentOptions": {"provider": "fake", "model": "m1"}}),
    )
    .await;
    let header = t
        .call(
            service::SESSIONS,
            sessions::HEADER,
            json!({"id": "nocwd-sess"}),
        )
        .await["header"]
        .clone();
    assert_eq!(header.get("cwd"), None, "{header}");
    t.shutdown().await;
}

/// The kit's rows with `agent-loop` configured by `config` (a TOML inline
/// table), the persona without `{{cwd}}`, and `extra`.
fn rows_with_loop(fake: &FakeLlm, t: &TestHost, config: &str, extra: &str) -> String {
    let base = dsh_testkit::core_rows(&fake.base_url, &t.home.path().join("sessions"));
    let loop_row = "id = \"agent-loop\"\nplugin = \"agent-loop\"\n";
    assert!(base.ends_with(loop_row), "the kit's agent-loop row changed");
    format!(
        "{}config = {config}\n{extra}",
        with_prompt_config(&base, NO_CWD_PERSONA)
    )
}

/// Starts a host whose `agent-loop` row has `config`.
async fn setup_loop(config: &str, extra: &str) -> (TestHost, FakeLlm) {
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    t.stage(HOOKS.0, HOOKS.1);
    if !extra.is_empty() {
        // Listeners first: the loop emits as it starts its configured
        // agents, and an emit reaches only the listeners already there. The
        // extra rows may wait for services of the core rows (the hooks
        // fixture injects `systemPrompt`), so the whole tree comes up first
        // with a loop that starts no agent, then the loop gets its config.
        t.apply(&rows_with_loop(&fake, &t, "{}", extra)).await;
        t.assert_all_active().await;
    }
    t.apply(&rows_with_loop(&fake, &t, config, extra)).await;
    (t, fake)
}

/// The live agents, once there are `n` (sorted).
async fn agents_when(t: &TestHost, n: usize) -> Vec<String> {
    let until = Instant::now() + DEADLINE;
    loop {
        let mut ids: Vec<String> = serde_json::from_value(
            t.call(service::AGENT_LOOP, agent_loop::LIST, json!({}))
                .await,
        )
        .expect("ids");
        if ids.len() >= n {
            assert_eq!(ids.len(), n, "{ids:?}");
            ids.sort();
            return ids;
        }
        assert!(Instant::now() < until, "agents: {ids:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn header(t: &TestHost, id: &str) -> Value {
    t.call(service::SESSIONS, sessions::HEADER, json!({"id": id}))
        .await["header"]
        .clone()
}

/// `<prefix>-session-<uuid>`, the uuid in its 36-character hex form.
fn is_fresh_id(id: &str, prefix: &str) -> bool {
    id.strip_prefix(&format!("{prefix}-session-"))
        .is_some_and(|u| {
            u.len() == 36
                && u.chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase() || c == '-')
        })
}

/// loop.spec "config agents are created at startup" and "attaches config
/// agent cwd to the fresh session header"; config-session-id.spec "config
/// create uses a fresh `${id}-session-<uuid>` per run": every entry without
/// an exact id gets a fresh session, with the entry's options and cwd, and
/// runs turns.
#[tokio::test]
async fn configured_agents_start_in_fresh_sessions_with_their_cwd() {
    let config = r#"{ agents = [
        { id = "cfg", provider = "fake", model = "m1", cwd = "/tmp" },
        { id = "plain", provider = "fake", model = "m1" } ] }"#;
    let (t, fake) = setup_loop(config, "").await;
    let ids = agents_when(&t, 2).await;
    assert!(is_fresh_id(&ids[0], "cfg"), "{ids:?}");
    assert!(is_fresh_id(&ids[1], "plain"), "{ids:?}");
    assert_eq!(header(&t, &ids[0]).await["cwd"], "/tmp");
    assert_eq!(header(&t, &ids[1]).await.get("cwd"), None);

    fake.push([text("hi")]);
    send_message(&t, agents::FOLLOWUP, &ids[0], json!({"text": "hello"})).await;
    let end = t
        .call(service::AGENTS, agents::WHEN_IDLE, json!({"agent": ids[0]}))
        .await;
    assert_eq!(end["reason"], json!({"kind": "completed"}));
    assert_eq!(fake.requests()[0]["model"], "m1");
    t.shutdown().await;

    // Another run of the same config: other sessions.
    let (t, _fake) = setup_loop(config, "").await;
    let again = agents_when(&t, 2).await;
    assert!(is_fresh_id(&again[0], "cfg"), "{again:?}");
    assert_ne!(again[0], ids[0]);
    assert_ne!(again[1], ids[1]);
    t.shutdown().await;
}

/// config-session-id.spec "accepts one exact fresh id" and "restores a
/// materialized exact id across an AgentLoop-only reload": a `sessionId`
/// not yet stored is created under that id; once it exists a reload of the
/// agent loop resumes it (its history and turn numbers continue).
#[tokio::test]
async fn an_exact_configured_id_is_created_once_then_restored_across_a_reload() {
    let config = r#"{ agents = [{ id = "main", sessionId = "config-exact", provider = "fake", model = "m1" }] }"#;
    let (t, fake) = setup_loop(config, "").await;
    assert_eq!(agents_when(&t, 1).await, ["config-exact"]);
    fake.push([text("one"), text("two")]);
    send_message(
        &t,
        agents::FOLLOWUP,
        "config-exact",
        json!({"text": "remember me"}),
    )
    .await;
    t.call(
        service::AGENTS,
        agents::WHEN_IDLE,
        json!({"agent": "config-exact"}),
    )
    .await;

    // Only the agent loop's config changes: it alone reloads.
    let reloaded = r#"{ maxStepsPerTurn = 50, agents = [{ id = "main", sessionId = "config-exact", provider = "fake", model = "m1" }] }"#;
    let before = t.status("agent-loop").await;
    t.apply(&rows_with_loop(&fake, &t, reloaded, "")).await;
    assert_ne!(
        format!("{:?}", t.status("agent-loop").await.fiber),
        format!("{:?}", before.fiber),
        "the agent loop reloaded"
    );
    assert_eq!(agents_when(&t, 1).await, ["config-exact"]);
    send_message(
        &t,
        agents::FOLLOWUP,
        "config-exact",
        json!({"text": "and now?"}),
    )
    .await;
    let end = t
        .call(
            service::AGENTS,
            agents::WHEN_IDLE,
            json!({"agent": "config-exact"}),
        )
        .await;
    assert_eq!(end["lastTurn"], 2);
    let texts: Vec<String> = events(&t, "config-exact")
        .await
        .iter()
        .filter(|e| e["type"] == event::USER_MESSAGE)
        .map(|e| {
            e["data"]["content"][0]["text"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    assert_eq!(texts, ["remember me", "and now?"]);
    t.shutdown().await;
}

/// config-session-id.spec "config-driven resumeSessionId continues a
/// persisted session": the live agent is the stored session itself (not a
/// fresh id), with its history.
#[tokio::test]
async fn a_configured_resume_session_id_continues_the_stored_session() {
    let (t, fake) = setup_loop("{}", "").await;
    let agent = create(
        &t,
        json!({"sessionId": "sticky-1", "agentOptions": {"provider": "fake", "model": "m1"}}),
    )
    .await;
    fake.push([text("first"), text("second")]);
    send_message(&t, agents::FOLLOWUP, &agent, json!({"text": "remember me"})).await;
    t.call(service::AGENTS, agents::WHEN_IDLE, json!({"agent": agent}))
        .await;
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": agent}))
        .await;
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": agent}))
        .await;
    assert_eq!(agents_when(&t, 0).await, Vec::<String>::new());

    let config = r#"{ agents = [{ id = "main", provider = "fake", model = "m1", resumeSessionId = "sticky-1" }] }"#;
    t.apply(&rows_with_loop(&fake, &t, config, "")).await;
    assert_eq!(agents_when(&t, 1).await, ["sticky-1"]);
    send_message(&t, agents::FOLLOWUP, "sticky-1", json!({"text": "again"})).await;
    t.call(
        service::AGENTS,
        agents::WHEN_IDLE,
        json!({"agent": "sticky-1"}),
    )
    .await;
    let last = fake.requests().pop().expect("a request");
    let said: Vec<&str> = last["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(said, ["remember me", "again"]);
    t.shutdown().await;
}

/// config-session-id.spec "config-driven resume of a missing session is
/// contained": no agent for it, `agent-loop/config-start-failed` names the
/// session, the plugin stays up and the other entries still start.
#[tokio::test]
async fn a_configured_resume_of_a_missing_session_is_contained() {
    let hooks = hooks_row(
        "f",
        json!({"listeners": [{"event": bus::AGENT_LOOP_CONFIG_START_FAILED}]}),
    );
    let config = r#"{ agents = [
        { id = "main", provider = "fake", model = "m1", resumeSessionId = "does-not-exist" },
        { id = "other", provider = "fake", model = "m1" } ] }"#;
    let (t, _fake) = setup_loop(config, &hooks).await;
    let j = heard_all(&t, "f", 1).await;
    assert_eq!(j[0]["payload"]["sessionId"], "does-not-exist");
    assert_eq!(j[0]["payload"]["error"]["code"], code::SESSION_NOT_FOUND);
    let ids = agents_when(&t, 1).await;
    assert!(is_fresh_id(&ids[0], "other"), "{ids:?}");
    assert_eq!(
        format!("{:?}", t.status("agent-loop").await.state),
        "Active"
    );
    t.shutdown().await;
}

/// The whole journal of `tag`, once it holds `n` entries.
async fn heard_all(t: &TestHost, tag: &str, n: usize) -> Vec<Value> {
    let until = Instant::now() + DEADLINE;
    loop {
        let j = hooks_journal(t, tag).await;
        if j.len() >= n {
            assert_eq!(j.len(), n, "journal {tag}: {j:?}");
            return j;
        }
        assert!(Instant::now() < until, "journal {tag}: {j:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// config-session-id.spec "rejects an empty exact id", "… rejects it
/// alongside a resume id" and "rejects duplicate exact ids before
/// asynchronous configured startup": the row fails with the original's
/// message and no agent starts.
#[tokio::test]
async fn configured_identities_that_conflict_are_refused_before_any_agent_starts() {
    for (config, message) in [
        (
            r#"{ agents = [{ id = "main", sessionId = "" }] }"#,
            "agent \"main\": sessionId: expected string length >= 1",
        ),
        (
            r#"{ agents = [{ id = "main", sessionId = "fresh", resumeSessionId = "persisted" }] }"#,
            "agent \"main\": sessionId and resumeSessionId are mutually exclusive",
        ),
        (
            r#"{ agents = [{ id = "first", sessionId = "shared" }, { id = "second", resumeSessionId = "shared" }] }"#,
            "agents \"first\" and \"second\" use duplicate exact session identity \"shared\"",
        ),
    ] {
        let (t, _fake) = setup_loop(config, "").await;
        assert_eq!(
            format!("{:?}", t.status("agent-loop").await.state),
            "Failed"
        );
        assert_eq!(
            t.reports_with(&format!("INVALID_CONFIG: {message}")).len(),
            1,
            "{:?}",
            t.host.reports()
        );
        let live = t.call(service::SESSIONS, sessions::LIST, json!({})).await;
        assert_eq!(live, json!([]), "no session was created");
        t.shutdown().await;
    }
}

/// A log built the way the loop and the inbox write one (consumed-work.spec).
#[derive(Default)]
struct Log(Vec<dsh_sdk::vocab::SessionEvent>);

impl Log {
    fn push(&mut self, kind: &str, data: Value) -> &mut Self {
        let seq = self.0.len() as u64;
        self.0.push(
            serde_json::from_value(json!({"type": kind, "seq": seq, "time": 0, "data": data}))
                .expect("an event"),
        );
        self
    }
    /// An accepted message, as `send` logs it.
    fn accept(&mut self, text: &str) -> &mut Self {
        self.push(
            event::INBOX_SPLICED,
            json!({"target": "next-turn", "start": 0, "inserted": [msg::user_text(text, text)]}),
        )
    }
    /// The step-boundary read of one pending message.
    fn claim(&mut self) -> &mut Self {
        self.push(
            event::INBOX_SPLICED,
            json!({"target": "next-turn", "start": 0, "removedCount": 1, "inserted": []}),
        )
    }
    /// A cancellation of one pending message.
    fn cancel_pending(&mut self) -> &mut Self {
        self.push(
            event::INBOX_SPLICED,
            json!({"target": "next-turn", "start": 0, "removedCount": 1, "inserted": [], "outcome": "canceled"}),
        )
    }
    fn start(&mut self, turn: u64) -> &mut Self {
        self.push(event::TURN_START, json!({"turn": turn}))
    }
    fn end(&mut self, turn: u64, reason: Value) -> &mut Self {
        self.push(event::TURN_END, json!({"turn": turn, "reason": reason}))
    }
    /// One whole turn that reached a model step.
    fn stepped(&mut self, turn: u64, reason: Value) -> &mut Self {
        self.start(turn)
            .claim()
            .push(event::STEP_START, json!({"turn": turn, "step": 1}))
            .push(event::STEP_END, json!({"turn": turn, "step": 1}))
            .end(turn, reason)
    }
    fn fold(&self) -> dsh_sdk::vocab::ConsumedWork {
        dsh_sdk::vocab::fold_consumed_work(&self.0)
    }
    /// The turn of the accounting `turn/end`, if any.
    fn accounted_turn(&self) -> Option<u64> {
        self.fold().end.and_then(|e| e.data["turn"].as_u64())
    }
}

fn completed() -> Value {
    json!({"kind": "completed"})
}

/// consumed-work.spec "reports nothing for a log that consumed no work" and
/// "reports the latest turn that entered a model step".
#[test]
fn fold_consumed_work_reports_the_latest_stepped_turn_or_nothing() {
    let mut log = Log::default();
    log.accept("queued");
    assert_eq!(log.fold(), dsh_sdk::vocab::ConsumedWork::default());
    let mut log = Log::default();
    log.stepped(1, completed())
        .stepped(2, json!({"kind": "max-tokens"}));
    let end = log.fold().end.expect("an accounting turn");
    assert_eq!(
        end.data,
        json!({"turn": 2, "reason": {"kind": "max-tokens"}})
    );
}

/// consumed-work.spec: a turn that claimed its input counts when it then
/// failed, was stopped or was rejected before any step; not when its own
/// claim was emptied (`completed`), nor when it took no input at all.
#[test]
fn fold_consumed_work_counts_claimed_turns_that_failed_stopped_or_were_rejected() {
    for reason in [
        json!({"kind": "error", "error": {"message": "ENOSPC", "code": "UNKNOWN"}}),
        json!({"kind": "aborted", "reason": {"kind": "user"}}),
        json!({"kind": "blocked"}),
    ] {
        let mut log = Log::default();
        log.stepped(1, completed())
            .start(2)
            .claim()
            .end(2, reason.clone());
        assert_eq!(log.accounted_turn(), Some(2), "{reason}");
    }
    // An emptied claim ran nothing and dropped nothing.
    let mut log = Log::default();
    log.stepped(1, completed())
        .start(2)
        .claim()
        .end(2, completed());
    assert_eq!(log.accounted_turn(), Some(1));
    // Turns that took no input describe no work.
    let mut log = Log::default();
    log.stepped(1, completed())
        .start(2)
        .end(2, json!({"kind": "aborted", "reason": {"kind": "parent"}}))
        .start(3)
        .end(
            3,
            json!({"kind": "error", "error": {"message": "x", "code": "UNKNOWN"}}),
        )
        .start(4)
        .end(4, json!({"kind": "blocked"}));
    assert_eq!(log.accounted_turn(), Some(1));
    // A suffix can begin inside a turn: a claim with no open turn counts
    // for none.
    let mut log = Log::default();
    log.stepped(1, completed())
        .claim()
        .end(2, json!({"kind": "aborted", "reason": {"kind": "user"}}));
    assert_eq!(log.accounted_turn(), Some(1));
}

/// consumed-work.spec "reports work cancelled out of the inbox after the
/// last accounting turn", "keeps a replacement pending" and "lets a later
/// accounting turn absorb an earlier drop".
#[test]
fn fold_consumed_work_reports_unrun_drops_but_not_replacements_or_absorbed_ones() {
    let mut log = Log::default();
    log.stepped(1, completed())
        .accept("never runs")
        .cancel_pending();
    let folded = log.fold();
    assert!(folded.dropped_unrun);
    assert_eq!(
        folded.end.as_ref(),
        log.0.iter().find(|e| e.kind == event::TURN_END)
    );

    let mut log = Log::default();
    log.stepped(1, completed()).push(
        event::INBOX_SPLICED,
        json!({"target": "next-turn", "start": 0, "removedCount": 1,
               "inserted": [msg::user_text("rewritten", "rewritten")], "outcome": "canceled"}),
    );
    assert!(!log.fold().dropped_unrun);

    let mut log = Log::default();
    log.stepped(1, completed())
        .cancel_pending()
        .stepped(2, completed());
    let folded = log.fold();
    assert!(!folded.dropped_unrun);
    assert_eq!(folded.end.as_ref(), log.0.last());
}

/// agent.spec "… unregisters on owner disposal" and "stale/idempotent
/// detach cannot remove a replacement": an agent belongs to the plugin that
/// created (or resumed) it and is disposed when that plugin goes; an agent
/// that later reopened the same id under another owner stays, and so does
/// one the host created.
#[tokio::test]
async fn an_agent_is_disposed_with_the_plugin_that_created_it() {
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    for (lib, file) in [HOOKS, PROBE] {
        t.stage(lib, file);
    }
    let hooks = hooks_row("d", json!({"listeners": [{"event": bus::AGENT_DISPOSED}]}));
    let owner = "[[row]]\nid = \"owner\"\nplugin = \"probe\"\nconfig = { tag = \"o\" }\n";
    let without = rows_with_loop(&fake, &t, "{}", &hooks);
    t.apply(&format!("{without}{owner}")).await;
    let by_owner = |params: Value| json!({"service": service::AGENT_LOOP, "method": agent_loop::CREATE, "params": params});
    let options = json!({"provider": "fake", "model": "m1"});
    let owned = t
        .call(
            "probe:o",
            "call",
            by_owner(json!({"sessionId": "owned", "agentOptions": options})),
        )
        .await;
    assert_eq!(owned["agent"], "owned");
    // The owner's first `reopened` is disposed; the host reopens the id.
    t.call(
        "probe:o",
        "call",
        by_owner(json!({"sessionId": "reopened", "agentOptions": options})),
    )
    .await;
    t.call(
        service::AGENTS,
        agents::DISPOSE,
        json!({"agent": "reopened"}),
    )
    .await;
    t.call(
        service::SESSIONS,
        sessions::CLOSE,
        json!({"id": "reopened"}),
    )
    .await;
    create(
        &t,
        json!({"sessionId": "reopened", "agentOptions": options}),
    )
    .await;
    create(&t, json!({"sessionId": "hosts", "agentOptions": options})).await;
    assert_eq!(agents_when(&t, 3).await, ["hosts", "owned", "reopened"]);

    // The owner goes: its live agent goes with it, and only that one.
    t.apply(&without).await;
    let disposed = heard_all(&t, "d", 2).await;
    assert_eq!(disposed[0]["payload"]["agent"], "reopened");
    assert_eq!(disposed[1]["payload"]["agent"], "owned");
    assert_eq!(agents_when(&t, 2).await, ["hosts", "reopened"]);
    t.shutdown().await;
}

/// Two agents: `held`, whose turn is stuck in the model stream until it is
/// cancelled, and `a`, idle. `a`'s maintenance task is `agents.whenIdle
/// {held}`: it runs until `held` is cancelled, or until the task is aborted.
async fn maintenance_setup(t: &TestHost, fake: &FakeLlm, answers: Vec<Answer>) -> (String, String) {
    let mut queue = vec![stall_after("Half")];
    queue.extend(answers);
    fake.push(queue);
    let held = new_agent(t, "/tmp").await;
    send_message(t, agents::FOLLOWUP, &held, json!({"text": "hold"})).await;
    logged(t, &held, event::ASSISTANT_CHUNK).await;
    (held, new_agent(t, "/tmp").await)
}

fn maintenance_task(agent: &str, held: &str) -> Value {
    json!({"agent": agent, "task": {"service": service::AGENTS, "method": agents::WHEN_IDLE, "params": {"agent": held}}})
}

/// Waits until `agent` reports a maintenance task running.
async fn in_maintenance(t: &TestHost, agent: &str) {
    let until = Instant::now() + DEADLINE;
    loop {
        let status = t
            .call(service::AGENTS, agents::STATUS, json!({"agent": agent}))
            .await;
        if status["maintenance"] == json!(true) {
            // Maintenance keeps the agent's status idle.
            assert_eq!(status["status"], "idle");
            return;
        }
        assert!(Instant::now() < until, "no maintenance: {status}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// loop.spec "cancels queued wakeup work together with an active
/// maintenance task": the cancel drops the queued wake and its latch and
/// aborts the task; a wake sent after it is latched again and replays when
/// the task has ended. Maintenance runs from idle only.
#[tokio::test]
async fn a_cancel_drops_the_queued_wake_and_aborts_the_maintenance_task() {
    let (t, fake) = setup("").await;
    let (held, a) = maintenance_setup(&t, &fake, vec![text("park reply")]).await;
    let busy = t
        .host
        .call(
            service::AGENTS,
            agents::RUN_MAINTENANCE,
            maintenance_task(&held, &a),
        )
        .await
        .expect_err("a running agent has active work");
    assert_eq!(busy.code, "AGENT_BUSY");
    assert_eq!(
        busy.message,
        format!("agent \"{held}\" already has active work")
    );

    let maintenance = t.host.call(
        service::AGENTS,
        agents::RUN_MAINTENANCE,
        maintenance_task(&a, &held),
    );
    let steps = async {
        in_maintenance(&t, &a).await;
        send_message(
            &t,
            agents::FOLLOWUP,
            &a,
            json!({"text": "discard this wakeup"}),
        )
        .await;
        t.call(service::AGENTS, agents::CANCEL, json!({"agent": a}))
            .await;
        send_message(
            &t,
            agents::FOLLOWUP,
            &a,
            json!({"text": "park after cancellation"}),
        )
        .await;
    };
    let (outcome, ()) = tokio::join!(maintenance, steps);
    let err = outcome.expect_err("the task was aborted");
    assert_eq!(
        (err.code.as_str(), err.message.as_str()),
        (code::ABORTED, "maintenance aborted")
    );
    let end = t
        .call(service::AGENTS, agents::WHEN_IDLE, json!({"agent": a}))
        .await;
    assert_eq!(end["reason"], json!({"kind": "completed"}));
    assert_eq!(
        user_texts(&events(&t, &a).await),
        ["park after cancellation"]
    );
    assert_eq!(
        pending(&t, &a).await,
        json!({"nextTurn": [], "nextStep": []})
    );
    // The aborted task did not touch `held`: its turn still runs.
    let status = t
        .call(service::AGENTS, agents::STATUS, json!({"agent": held}))
        .await;
    assert_eq!(status["status"], "running");
    t.call(service::AGENTS, agents::CANCEL, json!({"agent": held}))
        .await;
    t.shutdown().await;
}

/// loop.spec "replays a wake latched behind maintenance at convergence":
/// no turn opens while the task runs; when it ends, the wake runs.
#[tokio::test]
async fn a_wake_latched_behind_maintenance_replays_when_it_ends() {
    let (t, fake) = setup("").await;
    let (held, a) = maintenance_setup(&t, &fake, vec![text("wake reply")]).await;
    let maintenance = t.host.call(
        service::AGENTS,
        agents::RUN_MAINTENANCE,
        maintenance_task(&a, &held),
    );
    let steps = async {
        in_maintenance(&t, &a).await;
        send_message(
            &t,
            agents::FOLLOWUP,
            &a,
            json!({"text": "wake behind maintenance"}),
        )
        .await;
        let ev = events(&t, &a).await;
        assert!(!ev.iter().any(|e| e["type"] == event::TURN_START), "{ev:?}");
        // The task ends: `held` goes idle.
        t.call(service::AGENTS, agents::CANCEL, json!({"agent": held}))
            .await;
    };
    let (outcome, ()) = tokio::join!(maintenance, steps);
    let reply = outcome.expect("the task's own reply");
    assert_eq!(
        reply["reason"],
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    let end = t
        .call(service::AGENTS, agents::WHEN_IDLE, json!({"agent": a}))
        .await;
    assert_eq!(end["reason"], json!({"kind": "completed"}));
    assert_eq!(
        user_texts(&events(&t, &a).await),
        ["wake behind maintenance"]
    );
    assert_eq!(fake.requests().len(), 2, "held's request and a's");
    t.shutdown().await;
}

/// loop.spec "suppresses the replay when a latched maintenance wake is
/// removed": the latch replays only work still pending.
#[tokio::test]
async fn removing_a_wake_latched_behind_maintenance_suppresses_its_replay() {
    let (t, fake) = setup("").await;
    let (held, a) = maintenance_setup(&t, &fake, Vec::new()).await;
    let maintenance = t.host.call(
        service::AGENTS,
        agents::RUN_MAINTENANCE,
        maintenance_task(&a, &held),
    );
    let steps = async {
        in_maintenance(&t, &a).await;
        let wake = msg::user_text("removed-wake", "removed wake");
        send_message(&t, agents::FOLLOWUP, &a, wake).await;
        let removed = t
            .call(
                service::AGENTS,
                agents::REMOVE,
                json!({"agent": a, "messageId": "removed-wake"}),
            )
            .await;
        assert_eq!(removed, json!(true));
        t.call(service::AGENTS, agents::CANCEL, json!({"agent": held}))
            .await;
    };
    let (outcome, ()) = tokio::join!(maintenance, steps);
    outcome.expect("the task's own reply");
    let status = t
        .call(service::AGENTS, agents::STATUS, json!({"agent": a}))
        .await;
    assert_eq!(
        (status["status"].clone(), status["lastTurn"].clone()),
        (json!("idle"), json!(0))
    );
    let ev = events(&t, &a).await;
    assert!(!ev.iter().any(|e| e["type"] == event::TURN_START), "{ev:?}");
    assert_eq!(fake.requests().len(), 1, "only held's request");
    t.shutdown().await;
}

/// agent.spec "registers exact entries …": the registry lists exactly the
/// live agents by id (their session ids), and a second agent under a live
/// id is refused, leaving the first in place.
#[tokio::test]
async fn the_registry_lists_each_live_agent_once_and_refuses_a_live_id() {
    let (t, _fake) = setup("").await;
    assert_eq!(
        t.call(service::AGENT_LOOP, agent_loop::LIST, json!({}))
            .await,
        json!([])
    );
    let options = json!({"provider": "fake", "model": "m1"});
    create(&t, json!({"sessionId": "a1", "agentOptions": options})).await;
    let err = t
        .host
        .call(
            service::AGENT_LOOP,
            agent_loop::CREATE,
            json!({"sessionId": "a1", "agentOptions": options}),
        )
        .await
        .expect_err("a live id is refused");
    assert_eq!(err.code, code::SESSION_ALREADY_EXISTS);
    assert_eq!(err.message, "session `a1` is already live");
    assert_eq!(
        t.call(service::AGENT_LOOP, agent_loop::LIST, json!({}))
            .await,
        json!(["a1"])
    );
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": "a1"}))
        .await;
    assert_eq!(
        t.call(service::AGENT_LOOP, agent_loop::LIST, json!({}))
            .await,
        json!([])
    );
    t.shutdown().await;
}

/// model-selection.spec "snapshots prompt variables and request routing
/// together, then disposes both": a model selected while a step's prompt is
/// being assembled takes the next step, for the prompt and the request
/// together; clearing the selection restores the agent's own model in both.
#[tokio::test]
async fn a_model_selection_switches_the_prompt_and_the_request_together() {
    let select = json!({"service": service::AGENTS, "method": agents::SELECT_MODEL,
                        "params": {"agent": "$agent", "provider": "fake", "model": "m2"}});
    let hooks = hooks_row(
        "s",
        json!({"listeners": [{"event": bus::SYSTEM_PROMPT_ASSEMBLE, "once": true, "calls": [select]}]}),
    );
    let (t, fake) = setup(&hooks).await;
    let agent = new_agent(&t, "/tmp").await;
    fake.push([text("one"), text("two"), text("three")]);
    let run = |prompt: &'static str| {
        let t = &t;
        let agent = agent.clone();
        async move {
            send_message(t, agents::FOLLOWUP, &agent, json!({"text": prompt})).await;
            let end = t
                .call(service::AGENTS, agents::WHEN_IDLE, json!({"agent": agent}))
                .await;
            assert_eq!(end["reason"], json!({"kind": "completed"}));
        }
    };
    run("first").await;
    run("second").await;
    t.call(
        service::AGENTS,
        agents::SELECT_MODEL,
        json!({"agent": agent}),
    )
    .await;
    run("third").await;
    let routes: Vec<(String, String)> = fake
        .requests()
        .iter()
        .map(|r| {
            let system = r["messages"][0]["content"].as_str().unwrap_or_default();
            let said = system.rsplit("You work with ").next().unwrap_or_default();
            (
                said.to_owned(),
                r["model"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let route = |m: &str| (format!("{m}."), m.to_owned());
    assert_eq!(routes, [route("m1"), route("m2"), route("m1")]);
    let err = t
        .host
        .call(
            service::AGENTS,
            agents::SELECT_MODEL,
            json!({"agent": agent, "model": "m3"}),
        )
        .await
        .expect_err("half a route is refused");
    assert_eq!(err.code, "INVALID_PAYLOAD");
    t.shutdown().await;
}
