//! Conformance, §10.2 Agent and §10.3 Agent loop, second wave (the inbox
//! and the agents' creation rows): the original's behaviours checked against
//! the real plugins in a real host with the fake model server. Rows:
//! tests/CONFORMANCE.md (§10.2, §10.3).

use std::time::{Duration, Instant};

use dsh_sdk::vocab::{event, msg};
use dsh_testkit::fake_llm::{text, Answer, FakeLlm};
use dsh_testkit::{library, TestHost};
use serde_json::{json, Value};

const DEADLINE: Duration = Duration::from_secs(20);
/// The kit's persona, and one without `{{cwd}}` (which has no value for an
/// agent created without a cwd: a strict render error).
const KIT_PERSONA: &str = "config = { persona = \"You work in {{cwd}} with {{model}}.\" }";
const NO_CWD_PERSONA: &str = "config = { persona = \"You work with {{model}}.\" }";

/// A JSON value as one line of TOML (inline tables and arrays).
fn toml_value(v: &Value) -> String {
    match v {
        Value::Object(o) => {
            let pairs: Vec<String> = o
                .iter()
                .map(|(k, x)| format!("{} = {}", json!(k), toml_value(x)))
                .collect();
            format!("{{ {} }}", pairs.join(", "))
        }
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(toml_value).collect();
            format!("[{}]", items.join(", "))
        }
        other => other.to_string(),
    }
}

/// A row of the hooks fixture with service `hooks:<tag>`.
fn hooks_row(tag: &str, mut config: Value) -> String {
    config["tag"] = json!(tag);
    format!(
        "[[row]]\nid = \"hooks-{tag}\"\nplugin = \"hooks\"\nconfig = {}\n",
        toml_value(&config)
    )
}

/// A host with the kit's core rows (persona without `{{cwd}}`) and `extra`.
async fn setup(extra: &str) -> (TestHost, FakeLlm) {
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    std::fs::copy(
        library("dsh-fixture-hooks"),
        t.plugins.path().join("hooks.so"),
    )
    .expect("the hooks fixture is built");
    let base = dsh_testkit::core_rows(&fake.base_url, &t.home.path().join("sessions"));
    assert!(base.contains(KIT_PERSONA), "the kit's prompt row changed");
    t.apply(&format!(
        "{}{extra}",
        base.replace(KIT_PERSONA, NO_CWD_PERSONA)
    ))
    .await;
    for s in t.host.status().await {
        assert_eq!(format!("{:?}", s.state), "Active", "{s:?}");
    }
    (t, fake)
}

async fn create(t: &TestHost, params: Value) -> String {
    let v = t.call("agentLoop", "create", params).await;
    v["agent"].as_str().expect("an agent id").to_owned()
}

async fn new_agent(t: &TestHost) -> String {
    create(
        t,
        json!({"agentOptions": {"provider": "fake", "model": "m1"}, "meta": {"cwd": "/tmp"}}),
    )
    .await
}

async fn send(t: &TestHost, method: &str, agent: &str, message: Value) -> Value {
    t.call(
        "agents",
        method,
        json!({"agent": agent, "message": message}),
    )
    .await
}

async fn events(t: &TestHost, agent: &str) -> Vec<Value> {
    serde_json::from_value(t.call("sessions", "events", json!({"id": agent})).await)
        .expect("events")
}

fn splices(ev: &[Value]) -> Vec<Value> {
    ev.iter()
        .filter(|e| e["type"] == event::INBOX_SPLICED)
        .map(|e| e["data"].clone())
        .collect()
}

/// Waits until the log of `agent` holds an event of `kind`.
async fn logged(t: &TestHost, agent: &str, kind: &str) {
    let until = Instant::now() + DEADLINE;
    while !events(t, agent).await.iter().any(|e| e["type"] == kind) {
        assert!(Instant::now() < until, "no {kind} logged");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The messages the hooks fixture `tag` heard on `name`, once it heard
/// `n` events in all.
async fn heard(t: &TestHost, tag: &str, n: usize, name: &str) -> Vec<Value> {
    let until = Instant::now() + DEADLINE;
    loop {
        let j: Vec<Value> =
            serde_json::from_value(t.call(&format!("hooks:{tag}"), "journal", json!({})).await)
                .expect("journal");
        if j.len() >= n {
            assert_eq!(j.len(), n, "journal {tag}: {j:?}");
            return j
                .iter()
                .filter(|e| e["event"] == name)
                .map(|e| e["payload"]["message"].clone())
                .collect();
        }
        assert!(Instant::now() < until, "journal {tag}: {j:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An answer that streams a little text and then never finishes.
fn stall() -> Answer {
    Answer::Stall(vec![
        json!({"choices": [{"delta": {"content": "Half"}}]}).to_string()
    ])
}

/// An agent whose first turn is stuck in the model stream, so what is sent
/// now stays pending: `original` queued for the next turn, `step` for the
/// next step.
async fn agent_with_pending(t: &TestHost, fake: &FakeLlm) -> (String, Value, Value) {
    fake.push([stall()]);
    let agent = new_agent(t).await;
    send(t, "followup", &agent, msg::user_text("running", "running")).await;
    logged(t, &agent, event::ASSISTANT_CHUNK).await;
    let original = msg::user_text("original", "original");
    let step = msg::user_text("step", "step");
    send(t, "followup", &agent, original.clone()).await;
    send(t, "inject", &agent, step.clone()).await;
    (agent, original, step)
}

async fn pending(t: &TestHost, agent: &str) -> Value {
    t.call("agents", "pending", json!({"agent": agent})).await
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
        json!({"listeners": [{"event": "agent/inbox/inserted"}, {"event": "agent/inbox/discarded"}]}),
    );
    let (t, fake) = setup(&hooks).await;
    let (agent, original, step) = agent_with_pending(&t, &fake).await;
    let before = splices(&events(&t, &agent).await).len();

    let replacement = msg::user_text("replacement", "replacement");
    let replace =
        |id: &str, message: &Value| json!({"agent": agent, "messageId": id, "message": message});
    let missed = t
        .call("agents", "replace", replace("missing", &replacement))
        .await;
    assert_eq!(missed, json!(false));
    assert_eq!(splices(&events(&t, &agent).await).len(), before);

    let hit = t
        .call("agents", "replace", replace("original", &replacement))
        .await;
    assert_eq!(hit, json!(true));
    // The same identity with other content: an edit in the next-step list.
    let edited = msg::user_text("step", "edited step");
    let hit = t.call("agents", "replace", replace("step", &edited)).await;
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
        .call("agents", "replace", replace("step", &replacement))
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
        heard(&t, "i", 7, "agent/inbox/inserted").await,
        [running, original.clone(), step.clone(), replacement, edited]
    );
    assert_eq!(
        heard(&t, "i", 7, "agent/inbox/discarded").await,
        [original, step]
    );
    t.call("agents", "cancel", json!({"agent": agent})).await;
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
        t.call("agents", "remove", remove("step")).await,
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
        t.call("agents", "remove", remove("step")).await,
        json!(false)
    );
    // The claimed prompt is no longer pending either.
    assert_eq!(
        t.call("agents", "remove", remove("running")).await,
        json!(false)
    );
    assert_eq!(events(&t, &agent).await.len(), before);
    t.call("agents", "cancel", json!({"agent": agent})).await;
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
                "agents",
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
    t.call("agents", "cancel", json!({"agent": agent})).await;
    t.shutdown().await;
}

/// agent.spec "rejects an invalid durable splice during reconstruction":
/// a logged splice that does not fit the replayed lists fails the resume
/// with the original's message (naming the seq), and leaves no agent.
#[tokio::test]
async fn a_resume_rejects_an_invalid_logged_splice_naming_its_seq() {
    let (t, _fake) = setup("").await;
    t.call(
        "sessions",
        "create",
        json!({"id": "invalid-inbox-replay", "meta": {"cwd": "/tmp"}}),
    )
    .await;
    t.call(
        "sessions",
        "append",
        json!({"id": "invalid-inbox-replay", "type": event::INBOX_SPLICED,
               "data": {"target": "next-turn", "start": 1, "inserted": []}}),
    )
    .await;
    let err = t
        .host
        .call(
            "agentLoop",
            "resume",
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
    assert_eq!(t.call("agentLoop", "list", json!({})).await, json!([]));
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
    let header = t.call("sessions", "header", json!({"id": agent})).await["header"].clone();
    assert_eq!(header["id"], "nocwd-sess");
    assert_eq!(header.get("cwd"), None, "{header}");
    fake.push([text("hi")]);
    send(&t, "followup", &agent, json!({"text": "hello"})).await;
    let end = t.call("agents", "whenIdle", json!({"agent": agent})).await;
    assert_eq!(end["reason"], json!({"kind": "completed"}));
    let system = &fake.requests()[0]["messages"][0]["content"];
    assert!(
        system
            .as_str()
            .is_some_and(|s| s.ends_with("You work with m1.")),
        "{system}"
    );

    t.call("agents", "dispose", json!({"agent": agent})).await;
    t.call("sessions", "close", json!({"id": agent})).await;
    t.call(
        "agentLoop",
        "resume",
        json!({"sessionId": "nocwd-sess", "agentOptions": {"provider": "fake", "model": "m1"}}),
    )
    .await;
    let header = t
        .call("sessions", "header", json!({"id": "nocwd-sess"}))
        .await["header"]
        .clone();
    assert_eq!(header.get("cwd"), None, "{header}");
    t.shutdown().await;
}
