//! Conformance, the creation transaction and the agent scope (§10.3
//! resume.spec and scope-lifecycle.spec): an agent made with `setup` stays
//! unannounced while its creator sets up its scope, is announced in one
//! order on `commit`, and a creation rolled back (asked, its creator or
//! the agent loop gone) announces nothing and frees its id; a disposed
//! agent drains, then its scope closes, then it and its session detach.
//! Real plugins in a real host with the fake model server. Rows:
//! tests/CONFORMANCE.md.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::time::Duration;

use dsh_sdk::names::{
    agent_loop, agents, bus, code, service, session_persistence, sessions, tools,
};
use dsh_testkit::agent::{core_host_staged, create, new_agent, send, with_prompt_config};
use dsh_testkit::fake_llm::{stall_after, text, FakeLlm};
use dsh_testkit::fixtures::{hooks_journal, hooks_row, HOOKS};
use dsh_testkit::{eventually, TestHost};
use serde_json::{json, Value};

/// A persona without `{{cwd}}` (an agent may be created without one).
const NO_CWD_PERSONA: &str = "{ persona = \"You work with {{model}}.\" }";

/// The kit's rows, with the hooks fixture staged: `(host, fake, rows)`,
/// `rows` being the tree applied before `extra` (to re-apply without it).
async fn setup(extra: &str) -> (TestHost, FakeLlm, String) {
    let mut base = String::new();
    let (t, fake) = core_host_staged(&[HOOKS], |rows| {
        base = with_prompt_config(&rows, NO_CWD_PERSONA);
        base.clone() + extra
    })
    .await;
    (t, fake, base)
}

/// A hooks row `tag` journaling `events` (each `[name, when]`).
fn watch(tag: &str, events: &[(&str, Value)]) -> String {
    let listeners: Vec<Value> = events
        .iter()
        .map(|(event, when)| json!({"event": event, "when": when}))
        .collect();
    hooks_row(tag, json!({ "listeners": listeners }))
}

/// A hooks row `tag` that makes `call` (`{service, method, params}`) when
/// agent `agent` is created.
fn on_created(tag: &str, agent: &str, call: Value) -> String {
    hooks_row(
        tag,
        json!({"listeners": [{"event": bus::AGENT_CREATED, "when": {"agent": agent}, "calls": [call]}]}),
    )
}

/// The event names hooks `tag` journaled so far.
async fn heard(t: &TestHost, tag: &str) -> Vec<String> {
    hooks_journal(t, tag)
        .await
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_owned())
        .collect()
}

fn scoped_tool(agent: &str) -> Value {
    json!({"name": "mine", "description": "d", "parameters": {"type": "object"}, "service": "nowhere", "scope": agent})
}

fn pending(id: &str) -> Value {
    json!({"sessionId": id, "agentOptions": {"provider": "fake", "model": "m1"}, "meta": {"cwd": "/tmp"}, "setup": true})
}

async fn ids(t: &TestHost, svc: &str, method: &str) -> Vec<String> {
    serde_json::from_value(t.call(svc, method, json!({})).await).unwrap()
}

/// Neither a live session nor an agent of `id` is listed.
async fn assert_unlisted(t: &TestHost, id: &str) {
    let listed = ids(t, service::SESSIONS, sessions::LIST).await;
    assert!(!listed.contains(&id.to_owned()), "{listed:?}");
    let listed = ids(t, service::AGENT_LOOP, agent_loop::LIST).await;
    assert!(!listed.contains(&id.to_owned()), "{listed:?}");
}

async fn refused(t: &TestHost, svc: &str, method: &str, params: Value) -> String {
    t.host.call(svc, method, params).await.unwrap_err().code
}

/// Lets listeners that would hear something run first.
async fn quiet() {
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// Everything announced about an agent from its creation to its disposal,
/// in order.
const LIFETIME: [&str; 5] = [
    bus::SESSION_CREATED,
    bus::AGENT_CREATED,
    bus::AGENT_SESSION_START,
    bus::AGENT_DISPOSED,
    bus::SESSION_DISPOSED,
];

/// The transaction's announcements about `id`.
fn announcements(id: &str) -> String {
    watch(
        "w",
        &[
            (bus::SESSION_CREATED, json!({"header": {"id": id}})),
            (bus::AGENT_CREATED, json!({"agent": id})),
            (bus::AGENT_SESSION_START, json!({"agent": id})),
            (bus::AGENT_DISPOSED, json!({"agent": id})),
            (bus::SESSION_DISPOSED, json!({"sessionId": id})),
        ],
    )
}

#[tokio::test]
async fn setup_runs_unpublished_then_the_commit_announces_in_order() {
    // At session start the scope the setup made is complete.
    let start = hooks_row(
        "start",
        json!({"listeners": [{"event": bus::AGENT_SESSION_START, "when": {"agent": "atomic"},
            "calls": [{"service": service::TOOLS, "method": tools::SCHEMAS, "params": {"scope": "$agent"}}]}]}),
    );
    let (t, fake, _) = setup(&(announcements("atomic") + &start)).await;
    let made = t
        .call(service::AGENT_LOOP, agent_loop::CREATE, pending("atomic"))
        .await;
    assert_eq!(made["agent"], "atomic");
    // The setup: a tool in the agent's scope.
    t.call(service::TOOLS, tools::REGISTER, scoped_tool("atomic"))
        .await;
    quiet().await;
    assert_unlisted(&t, "atomic").await;
    assert!(heard(&t, "w").await.is_empty(), "nothing announced yet");

    t.call(
        service::AGENT_LOOP,
        agent_loop::COMMIT,
        json!({"agent": "atomic"}),
    )
    .await;
    eventually("the three announcements", || async {
        heard(&t, "w").await.len() == 3
    })
    .await;
    assert_eq!(
        heard(&t, "w").await,
        [
            bus::SESSION_CREATED,
            bus::AGENT_CREATED,
            bus::AGENT_SESSION_START
        ]
    );
    eventually("the session start's look", || async {
        !hooks_journal(&t, "start").await.is_empty()
    })
    .await;
    let at_start = hooks_journal(&t, "start").await;
    let offered = at_start[0]["results"][0]["ok"].to_string();
    assert!(offered.contains("\"mine\""), "{offered}");
    // Committed once: a second commit has nothing to publish.
    let again = json!({"agent": "atomic"});
    assert_eq!(
        refused(&t, service::AGENT_LOOP, agent_loop::COMMIT, again).await,
        code::NOT_PENDING
    );
    // A live agent like any other.
    fake.push([text("hello")]);
    send(&t, agents::FOLLOWUP, "atomic", "hi").await;
    eventually("the reply", || async {
        let log = dsh_testkit::agent::events(&t, "atomic").await;
        log.iter().any(|e| e["type"] == "turn/end")
    })
    .await;
}

#[tokio::test]
async fn an_abandoned_creation_announces_nothing_and_frees_its_id() {
    let (t, _fake, _) = setup(&announcements("gone")).await;
    t.call(service::AGENT_LOOP, agent_loop::CREATE, pending("gone"))
        .await;
    t.call(service::TOOLS, tools::REGISTER, scoped_tool("gone"))
        .await;
    t.call(
        service::AGENT_LOOP,
        agent_loop::ABANDON,
        json!({"agent": "gone"}),
    )
    .await;
    quiet().await;
    assert!(
        heard(&t, "w").await.is_empty(),
        "{:?}",
        heard(&t, "w").await
    );
    assert_unlisted(&t, "gone").await;
    // Nothing was written.
    let stored = json!({"id": "gone"});
    let inspect = session_persistence::INSPECT;
    assert!(t
        .host
        .call(service::SESSION_PERSISTENCE, inspect, stored)
        .await
        .is_err());
    // Its scope closed: what its setup registered went, and nothing more
    // gets in.
    let late = refused(&t, service::TOOLS, tools::REGISTER, scoped_tool("gone")).await;
    assert_eq!(late, code::INACTIVE_EFFECT);
    for method in [agent_loop::COMMIT, agent_loop::ABANDON] {
        let again = refused(&t, service::AGENT_LOOP, method, json!({"agent": "gone"})).await;
        assert_eq!(again, code::NOT_PENDING, "{method}");
    }
    // The id is free: an agent of it is made and announced, its scope open.
    create(&t, json!({"sessionId": "gone", "meta": {"cwd": "/tmp"}})).await;
    t.call(service::TOOLS, tools::REGISTER, scoped_tool("gone"))
        .await;
    eventually("the new agent's announcements", || async {
        heard(&t, "w").await.len() == 3
    })
    .await;
}

#[tokio::test]
async fn the_creators_unload_rolls_back_its_pending_creation() {
    // `maker` starts a creation when `trigger` is created, and is then
    // unloaded before committing it.
    let create_orphan = json!({"service": service::AGENT_LOOP, "method": agent_loop::CREATE, "params": pending("orphan")});
    let maker = on_created("maker", "trigger", create_orphan);
    let (t, _fake, base) = setup(&(announcements("orphan") + &maker)).await;
    create(&t, json!({"sessionId": "trigger", "meta": {"cwd": "/tmp"}})).await;
    eventually("the maker's creation", || async {
        !hooks_journal(&t, "maker").await.is_empty()
    })
    .await;
    let made = hooks_journal(&t, "maker").await;
    assert_eq!(made[0]["results"][0]["ok"]["agent"], "orphan", "{made:?}");
    t.call(service::TOOLS, tools::REGISTER, scoped_tool("orphan"))
        .await;

    t.apply(&(base + &announcements("orphan"))).await;
    eventually("the rollback", || async {
        refused(&t, service::TOOLS, tools::REGISTER, scoped_tool("orphan")).await
            == code::INACTIVE_EFFECT
    })
    .await;
    let commit = json!({"agent": "orphan"});
    assert_eq!(
        refused(&t, service::AGENT_LOOP, agent_loop::COMMIT, commit).await,
        code::NOT_PENDING
    );
    assert_unlisted(&t, "orphan").await;
    // The id is free again.
    create(&t, json!({"sessionId": "orphan", "meta": {"cwd": "/tmp"}})).await;
}

#[tokio::test]
async fn the_agent_loops_unload_rolls_back_every_pending_creation() {
    let (t, _fake, base) = setup(&announcements("inflight")).await;
    t.call(service::AGENT_LOOP, agent_loop::CREATE, pending("inflight"))
        .await;
    t.call(service::TOOLS, tools::REGISTER, scoped_tool("inflight"))
        .await;
    // A new generation of the agent loop (its config changed).
    let loop_row = "id = \"agent-loop\"\nplugin = \"agent-loop\"\n";
    assert!(base.contains(loop_row));
    let reloaded = base.replace(
        loop_row,
        &format!("{loop_row}config = {{ maxParallelToolCalls = 9 }}\n"),
    );
    t.apply(&(reloaded + &announcements("inflight"))).await;
    let late = refused(&t, service::TOOLS, tools::REGISTER, scoped_tool("inflight")).await;
    assert_eq!(late, code::INACTIVE_EFFECT);
    let commit = json!({"agent": "inflight"});
    assert_eq!(
        refused(&t, service::AGENT_LOOP, agent_loop::COMMIT, commit).await,
        code::NOT_PENDING
    );
    assert_unlisted(&t, "inflight").await;
    assert!(heard(&t, "w").await.is_empty());
    // The session it made is gone, its id free.
    t.call(
        service::SESSIONS,
        sessions::CREATE,
        json!({"id": "inflight", "meta": {"cwd": "/tmp"}}),
    )
    .await;
}

#[tokio::test]
async fn a_created_listener_that_disposes_the_agent_is_safe() {
    let dispose = json!({"service": service::AGENTS, "method": agents::DISPOSE, "params": {"agent": "$agent"}});
    let undo = on_created("undo", "brief", dispose);
    let (t, fake, _) = setup(&(announcements("brief") + &undo)).await;
    create(&t, json!({"sessionId": "brief", "meta": {"cwd": "/tmp"}})).await;
    eventually("the disposal", || async { heard(&t, "w").await.len() == 5 }).await;
    assert_eq!(heard(&t, "w").await, LIFETIME);
    let undone = hooks_journal(&t, "undo").await;
    assert!(undone[0]["results"][0].get("ok").is_some(), "{undone:?}");
    assert_unlisted(&t, "brief").await;
    // The loop goes on serving.
    fake.push([text("still here")]);
    let other = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &other, "hi").await;
    eventually("another agent's turn", || async {
        let log = dsh_testkit::agent::events(&t, &other).await;
        log.iter().any(|e| e["type"] == "turn/end")
    })
    .await;
}

#[tokio::test]
async fn disposal_drains_then_closes_the_scope_then_detaches() {
    // At scope-closed the turn has ended (the log snapshot) and the agent
    // is still there (its status answers).
    let order = hooks_row(
        "order",
        json!({"listeners": [
            {"event": bus::AGENT_SCOPE_CLOSED, "snapshot": true,
             "calls": [{"service": service::AGENTS, "method": agents::STATUS, "params": {"agent": "$agent"}}]},
            {"event": bus::AGENT_DISPOSED},
            {"event": bus::SESSION_DISPOSED}
        ]}),
    );
    let (t, fake, _) = setup(&order).await;
    fake.push([stall_after("Half")]);
    let a = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &a, "work").await;
    eventually("the stalled stream", || async {
        fake.requests().len() == 1
    })
    .await;
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": a}))
        .await;
    eventually("the teardown", || async {
        hooks_journal(&t, "order").await.len() == 3
    })
    .await;
    let journal = hooks_journal(&t, "order").await;
    let names: Vec<&str> = journal
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            bus::AGENT_SCOPE_CLOSED,
            bus::AGENT_DISPOSED,
            bus::SESSION_DISPOSED
        ]
    );
    let log = journal[0]["log"].as_array().unwrap();
    assert_eq!(log.last().unwrap(), "turn/end", "drained first: {log:?}");
    assert!(journal[0]["results"][0].get("ok").is_some(), "{journal:?}");
}

#[tokio::test]
async fn a_session_taken_back_after_its_announcement_is_closed_so_the_two_pair() {
    let pair = watch(
        "w",
        &[
            (bus::SESSION_CREATED, json!({})),
            (bus::SESSION_DISPOSED, json!({})),
        ],
    );
    let (t, _fake, _) = setup(&pair).await;
    // Unpublished, then taken back: nothing is heard.
    let quiet_one = json!({"id": "quiet", "meta": {"cwd": "/tmp"}, "unpublished": true});
    t.call(service::SESSIONS, sessions::CREATE, quiet_one).await;
    t.call(service::SESSIONS, sessions::DISCARD, json!({"id": "quiet"}))
        .await;
    // Published, then taken back: its disposal pairs its creation.
    let paired = json!({"id": "paired", "meta": {"cwd": "/tmp"}, "unpublished": true});
    t.call(service::SESSIONS, sessions::CREATE, paired).await;
    let published = t
        .call(
            service::SESSIONS,
            sessions::PUBLISH,
            json!({"id": "paired"}),
        )
        .await;
    assert_eq!(published, json!(true));
    t.call(
        service::SESSIONS,
        sessions::DISCARD,
        json!({"id": "paired"}),
    )
    .await;
    eventually("the pair", || async { heard(&t, "w").await.len() == 2 }).await;
    let journal = hooks_journal(&t, "w").await;
    let about: Vec<String> = journal
        .iter()
        .map(|e| {
            let p = &e["payload"];
            let id = p["header"]["id"].as_str().or(p["sessionId"].as_str());
            format!("{} {}", e["event"].as_str().unwrap(), id.unwrap())
        })
        .collect();
    assert_eq!(about, ["session/created paired", "session/disposed paired"]);
}

/// `maker` creates agent `id` (with a route) when `trigger` is created.
fn maker(id: &str) -> String {
    let params = json!({"sessionId": id, "agentOptions": {"provider": "fake", "model": "m1"}, "meta": {"cwd": "/tmp"}});
    let create =
        json!({"service": service::AGENT_LOOP, "method": agent_loop::CREATE, "params": params});
    on_created("maker", "trigger", create)
}

#[tokio::test]
async fn roots_and_ownership_follow_who_made_an_agent_and_for_whom() {
    let (t, _fake, _) = setup(&maker("theirs")).await;
    create(&t, json!({"sessionId": "trigger", "meta": {"cwd": "/tmp"}})).await;
    let child = json!({"sessionId": "child", "meta": {"cwd": "/tmp", "parentSession": "trigger", "origin": "subagent", "delegationDepth": 1}});
    create(&t, child).await;
    eventually("the maker's agent", || async {
        ids(&t, service::AGENT_LOOP, agent_loop::LIST)
            .await
            .contains(&"theirs".to_owned())
    })
    .await;
    // A delegated agent is no root.
    assert_eq!(
        ids(&t, service::AGENT_LOOP, agent_loop::ROOTS).await,
        ["theirs", "trigger"]
    );
    let owned = |agent: &str| {
        let params = json!({"agent": agent});
        let t = &t;
        async move {
            t.call(service::AGENT_LOOP, agent_loop::IS_OWNED_BY, params)
                .await
        }
    };
    assert_eq!(owned("trigger").await, json!(true));
    assert_eq!(owned("child").await, json!(true));
    assert_eq!(owned("theirs").await, json!(false), "the maker's, not ours");
}

#[tokio::test]
async fn a_dispose_during_the_owners_unload_waits_for_the_one_teardown() {
    let (t, fake, base) = setup(&(announcements("owned") + &maker("owned"))).await;
    fake.push([stall_after("Half")]);
    create(&t, json!({"sessionId": "trigger", "meta": {"cwd": "/tmp"}})).await;
    eventually("the owned agent", || async {
        ids(&t, service::AGENT_LOOP, agent_loop::LIST)
            .await
            .contains(&"owned".to_owned())
    })
    .await;
    send(&t, agents::FOLLOWUP, "owned", "work").await;
    eventually("its stalled turn", || async { fake.requests().len() == 1 }).await;
    // Its owner unloads while a caller disposes it.
    let dispose = t
        .host
        .call(service::AGENTS, agents::DISPOSE, json!({"agent": "owned"}));
    let tree = base + &announcements("owned");
    let unload = t.apply(&tree);
    let (disposed, ()) = tokio::join!(dispose, unload);
    disposed.unwrap();
    // The dispose answered after the whole teardown, which ran once.
    assert_unlisted(&t, "owned").await;
    quiet().await;
    assert_eq!(heard(&t, "w").await, LIFETIME);
    let log = dsh_testkit::agent::events(&t, "owned").await;
    assert_eq!(log.last().unwrap()["type"], "turn/end", "balanced");
}

#[tokio::test]
async fn a_message_sent_while_an_agent_is_disposed_is_parked_and_wakes_nothing() {
    // Sent from inside the disposal (at `agent/scope-closed`): the agent
    // has drained and is not yet gone.
    let late = hooks_row(
        "late",
        json!({"listeners": [{"event": bus::AGENT_SCOPE_CLOSED,
            "calls": [{"service": service::AGENTS, "method": agents::FOLLOWUP,
                "params": {"agent": "$agent", "message": {"text": "LATE"}}}]}]}),
    );
    let (t, fake, _) = setup(&late).await;
    fake.push([text("first")]);
    let a = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &a, "hi").await;
    dsh_testkit::agent::idle(&t, &a).await;
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": a}))
        .await;
    let journal = hooks_journal(&t, "late").await;
    assert!(journal[0]["results"][0].get("ok").is_some(), "{journal:?}");
    quiet().await;
    assert_eq!(fake.requests().len(), 1, "no turn started on it");
    let log = dsh_testkit::agent::events(&t, &a).await;
    let turns = log.iter().filter(|e| e["type"] == "turn/start").count();
    assert_eq!(turns, 1, "{log:?}");
    // Parked: the next resume finds it waiting.
    let resumed = json!({"sessionId": a, "agentOptions": {"provider": "fake", "model": "m1"}});
    t.call(service::AGENT_LOOP, agent_loop::RESUME, resumed)
        .await;
    let pending = t
        .call(service::AGENTS, agents::PENDING, json!({"agent": a}))
        .await;
    assert!(pending.to_string().contains("LATE"), "{pending}");
}

#[tokio::test]
async fn two_resumes_of_one_stored_session_at_once_make_one_agent() {
    let (t, fake, _) = setup(&announcements("twice")).await;
    fake.push([text("stored")]);
    let made = json!({"sessionId": "twice", "agentOptions": {"provider": "fake", "model": "m1"}, "meta": {"cwd": "/tmp"}});
    create(&t, made).await;
    send(&t, agents::FOLLOWUP, "twice", "hi").await;
    dsh_testkit::agent::idle(&t, "twice").await;
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": "twice"}))
        .await;
    let params = json!({"sessionId": "twice"});
    let resume = || {
        t.host
            .call(service::AGENT_LOOP, agent_loop::RESUME, params.clone())
    };
    let (a, b) = tokio::join!(resume(), resume());
    // One made it; the other was answered the same agent or told it was
    // being made, never a second creation.
    let made: Vec<_> = [&a, &b].into_iter().filter(|r| r.is_ok()).collect();
    assert!(!made.is_empty(), "{a:?} {b:?}");
    for r in [&a, &b] {
        if let Err(e) = r {
            assert_eq!(e.code, code::SESSION_ALREADY_EXISTS, "{e}");
        }
    }
    let live = ids(&t, service::AGENT_LOOP, agent_loop::LIST).await;
    assert_eq!(live.iter().filter(|id| *id == "twice").count(), 1);
    quiet().await;
    let created = heard(&t, "w").await;
    let created = created.iter().filter(|e| *e == bus::AGENT_CREATED).count();
    assert_eq!(created, 2, "the first creation and one resume");
}
