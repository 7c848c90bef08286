//! The creation metadata a subagent's creator passes to `agentLoop.create`
//! (`meta.parentSession`, `meta.origin`, `meta.delegationDepth`): the real
//! `agent-loop` hands it to `sessions.create`, the `session` plugin keeps it
//! in the header, session-jsonl writes it in the log's header line, and a
//! resume reads it back. A value that is not allowed is refused with
//! `INVALID_PAYLOAD` naming the field, and nothing is created.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::path::{Path, PathBuf};

use dsh_sdk::api::agent_loop::{AgentOptions, CreateMeta, CreateParams, SessionOrigin};
use dsh_sdk::codes;
use dsh_sdk::names::{agent_loop, agents, service, sessions};
use dsh_testkit::agent::{core_host, turn};
use dsh_testkit::fake_llm::{text, FakeLlm};
use dsh_testkit::TestHost;
use serde_json::{json, Value};

/// The core rows, with session-jsonl writing plain `session.jsonl` logs so
/// the header line can be read as written.
async fn setup() -> (TestHost, FakeLlm) {
    core_host(|rows| {
        let at = rows
            .find("config = { root = ")
            .expect("the kit's session-jsonl row");
        let end = at + rows[at..].find(" }").expect("the end of its config");
        format!("{}, compression = \"none\"{}", &rows[..end], &rows[end..])
    })
    .await
}

/// The typed params of a subagent's agent on session `id` (when given).
fn subagent(id: Option<&str>) -> CreateParams {
    CreateParams {
        session_id: id.map(str::to_owned),
        agent_options: AgentOptions {
            provider: Some("fake".into()),
            model: Some("m1".into()),
            ..AgentOptions::default()
        },
        meta: Some(CreateMeta {
            cwd: Some("/tmp".into()),
            parent_session: Some("parent-1".into()),
            origin: Some(SessionOrigin::Subagent),
            delegation_depth: Some(2),
        }),
        ..Default::default()
    }
}

async fn create(t: &TestHost, params: Value) -> Result<String, dsh_sdk::Error> {
    let v = t
        .host
        .call(service::AGENT_LOOP, agent_loop::CREATE, params)
        .await?;
    Ok(v["agent"].as_str().expect("an agent id").to_owned())
}

/// The live session's header.
async fn header(t: &TestHost, id: &str) -> Value {
    t.call(service::SESSIONS, sessions::HEADER, json!({"id": id}))
        .await["header"]
        .clone()
}

/// The log of session `id` under `root`, whatever project directory its
/// cwd gave it.
fn log_of(root: &Path, id: &str) -> Option<PathBuf> {
    std::fs::read_dir(root)
        .ok()?
        .flatten()
        .map(|project| project.path().join(id).join("session.jsonl"))
        .find(|log| log.is_file())
}

/// Every path under `dir`, as text.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        out.push(path.display().to_string());
        if path.is_dir() {
            out.extend(tree(&path));
        }
    }
    out.sort();
    out
}

/// A subagent's agent: its lineage is in the live header, in the header
/// line session-jsonl wrote (in the record's field order), and in the
/// header a resume reads back from that log; the agent runs a turn.
#[tokio::test]
async fn a_subagents_lineage_is_stored_in_its_session_header() {
    let (t, fake) = setup().await;
    let params = serde_json::to_value(subagent(Some("kid-1"))).unwrap();
    assert_eq!(
        params["meta"],
        json!({"cwd": "/tmp", "parentSession": "parent-1", "origin": "subagent", "delegationDepth": 2})
    );
    let agent = create(&t, params).await.unwrap();
    assert_eq!(agent, "kid-1");
    let live = header(&t, &agent).await;
    for (field, want) in [
        ("parentSession", json!("parent-1")),
        ("origin", json!("subagent")),
        ("delegationDepth", json!(2)),
        ("cwd", json!("/tmp")),
    ] {
        assert_eq!(live[field], want, "{field} in {live}");
    }
    fake.push([text("hi")]);
    assert_eq!(
        turn(&t, &agent, "hello").await,
        json!({"kind": "completed"})
    );
    t.call(service::SESSIONS, sessions::FLUSH, json!({"id": agent}))
        .await;

    let root = t.home.path().join("sessions");
    let log = log_of(&root, &agent).unwrap_or_else(|| panic!("no log in {:?}", tree(&root)));
    let written = std::fs::read_to_string(&log).unwrap();
    let line = written.lines().next().unwrap();
    let created_at = &live["createdAt"];
    assert_eq!(
        line,
        format!(
            r#"{{"type":"session","version":0,"id":"kid-1","createdAt":{created_at},"cwd":"/tmp","parentSession":"parent-1","origin":"subagent","delegationDepth":2}}"#
        )
    );

    // Read back from the log: dispose, close, resume.
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": agent}))
        .await;
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": agent}))
        .await;
    let resumed = t
        .call(
            service::AGENT_LOOP,
            agent_loop::RESUME,
            json!({"sessionId": "kid-1", "agentOptions": {"provider": "fake", "model": "m1"}}),
        )
        .await;
    assert_eq!(resumed["agent"], "kid-1");
    assert_eq!(header(&t, "kid-1").await, live);
    t.shutdown().await;
}

/// Without a session id, the subagent's session still gets one of the
/// usual form, and its header carries the lineage under that id.
#[tokio::test]
async fn a_subagent_without_a_session_id_gets_one_with_its_lineage() {
    let (t, _fake) = setup().await;
    let agent = create(&t, serde_json::to_value(subagent(None)).unwrap())
        .await
        .unwrap();
    assert!(agent.starts_with("session-"), "{agent}");
    let live = header(&t, &agent).await;
    assert_eq!(live["id"], agent.as_str());
    assert_eq!(live["parentSession"], "parent-1");
    assert_eq!(live["origin"], "subagent");
    assert_eq!(live["delegationDepth"], 2);
    t.shutdown().await;
}

/// An agent created as before (no lineage) has none in its header.
#[tokio::test]
async fn an_agent_without_lineage_has_none_in_its_header() {
    let (t, _fake) = setup().await;
    let agent = create(
        &t,
        json!({"sessionId": "top-1", "agentOptions": {"provider": "fake", "model": "m1"}, "meta": {"cwd": "/tmp"}}),
    )
    .await
    .unwrap();
    let live = header(&t, &agent).await;
    for field in ["parentSession", "origin", "delegationDepth"] {
        assert_eq!(live.get(field), None, "{field} in {live}");
    }
    t.shutdown().await;
}

/// A bad origin, a negative or fractional depth and an empty parent are
/// each refused with `INVALID_PAYLOAD` naming the field and what it must
/// be; no agent, no live session, no log is left, and the same id then
/// creates a valid subagent.
#[tokio::test]
async fn bad_lineage_is_refused_with_a_clear_error_and_creates_nothing() {
    let (t, _fake) = setup().await;
    let root = t.home.path().join("sessions");
    let before = tree(&root);
    for (meta, says) in [
        (
            json!({"cwd": "/tmp", "origin": "worker"}),
            r#"`origin` must be "subagent", got "worker" (leave `origin` out for a session that is not a subagent's)"#,
        ),
        (
            json!({"cwd": "/tmp", "delegationDepth": -1}),
            "`delegationDepth` must be a non-negative integer (0 for a top-level session), got -1",
        ),
        (
            json!({"cwd": "/tmp", "delegationDepth": 1.5}),
            "expected `delegationDepth` as a non-negative integer (0 for a top-level session)",
        ),
        (
            json!({"cwd": "/tmp", "parentSession": ""}),
            "`parentSession` must be the id of the session that delegated this one, got an empty string",
        ),
    ] {
        let params = json!({"sessionId": "bad-1", "agentOptions": {"provider": "fake", "model": "m1"}, "meta": meta});
        let e = create(&t, params).await.unwrap_err();
        assert_eq!(e.code, codes::INVALID_PAYLOAD, "{e}");
        assert!(
            e.message.starts_with("invalid params for `agentLoop.create`: "),
            "{e}"
        );
        assert!(e.message.contains(says), "{meta}: {e}");
        assert_eq!(
            t.call(service::AGENT_LOOP, agent_loop::LIST, json!({}))
                .await,
            json!([])
        );
        let gone = t
            .host
            .call(service::SESSIONS, sessions::HEADER, json!({"id": "bad-1"}))
            .await
            .unwrap_err();
        assert_eq!(gone.code, dsh_sdk::names::code::SESSION_NOT_FOUND, "{gone}");
        assert_eq!(tree(&root), before);
    }
    // Nothing of the refused calls holds the id.
    let agent = create(&t, serde_json::to_value(subagent(Some("bad-1"))).unwrap())
        .await
        .unwrap();
    assert_eq!(header(&t, &agent).await["origin"], "subagent");
    t.shutdown().await;
}
