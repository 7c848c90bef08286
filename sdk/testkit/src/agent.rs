//! The agent core in one [`TestHost`] against a [`FakeLlm`]: start it,
//! create agents, run turns and read their session logs.

use serde_json::{json, Value};

use crate::fake_llm::FakeLlm;
use crate::{core_rows, TestHost};

/// A fake model server and a host running [`core_rows`] against it (as
/// `edit` changes them), sessions under `$DSH_HOME/sessions`; panics unless
/// every row is active.
pub async fn core_host(edit: impl FnOnce(String) -> String) -> (TestHost, FakeLlm) {
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    let rows = core_rows(&fake.base_url, &t.home.path().join("sessions"));
    t.apply(&edit(rows)).await;
    for s in t.host.status().await {
        assert_eq!(format!("{:?}", s.state), "Active", "{s:?}");
    }
    (t, fake)
}

/// A new agent working in `cwd` on model `m1` of provider `fake`; its id
/// (also the id of its session).
pub async fn new_agent(t: &TestHost, cwd: &str) -> String {
    let v = t
        .call(
            "agentLoop",
            "create",
            json!({"agentOptions": {"provider": "fake", "model": "m1"}, "meta": {"cwd": cwd}}),
        )
        .await;
    v["agent"]
        .as_str()
        .unwrap_or_else(|| panic!("agentLoop.create gave no agent: {v}"))
        .to_owned()
}

/// Sends `prompt` to `agent` and waits until it is idle; the turn's end
/// reason.
pub async fn turn(t: &TestHost, agent: &str, prompt: &str) -> Value {
    t.call(
        "agents",
        "followup",
        json!({"agent": agent, "message": {"text": prompt}}),
    )
    .await;
    t.call("agents", "whenIdle", json!({"agent": agent})).await["reason"].clone()
}

/// Every event of session `id` (an agent's id names its session).
pub async fn events(t: &TestHost, id: &str) -> Vec<Value> {
    let v = t.call("sessions", "events", json!({"id": id})).await;
    serde_json::from_value(v).unwrap_or_else(|e| panic!("sessions.events of {id}: {e}"))
}
