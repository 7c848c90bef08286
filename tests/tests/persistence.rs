//! The persistence contract, run against the JSONL backend.

use dsh_testkit::{contracts, TestHost};
use serde_json::{json, Value};

#[tokio::test]
async fn session_jsonl_passes_the_persistence_contract() {
    let t = TestHost::start().await;
    let root = t.home.path().join("sessions");
    t.apply(&format!(
        "[[row]]\nid='session'\nplugin='session'\n[[row]]\nid='jsonl'\nplugin='session-jsonl'\nconfig = {{ root = '{}' }}\n",
        root.display()
    ))
    .await;
    let write = |id: &str, cwd: &str, lines: &[Value]| {
        let key = cwd.replace('/', "-").trim_start_matches('-').to_owned();
        let dir = root.join(format!("--{key}--"));
        std::fs::create_dir_all(&dir).unwrap();
        let header = json!({"type": "session", "version": if id == "c-new" { 1 } else { 0 }, "id": id, "createdAt": 1, "cwd": cwd, "delegationDepth": 0});
        let mut text = format!("{header}\n");
        for l in lines {
            text.push_str(&format!("{l}\n"));
        }
        std::fs::write(dir.join(format!("{id}.jsonl")), text).unwrap();
    };
    contracts::persistence(&t, &write).await;
    write("c-new", "/contract/work", &[]);
    // A log written by a newer harness is refused with the reason.
    let err = t
        .host
        .call("sessionPersistence", "load", json!({"id": "c-new"}))
        .await
        .unwrap_err();
    assert!(err.message.contains("written by a newer harness"), "{err}");
    t.shutdown().await;
}
