//! The persistence contracts, run against the JSONL backend.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::path::{Path, PathBuf};

use dsh_testkit::contracts::{self, Backend};
use dsh_testkit::TestHost;

/// Rows of a host persisting into `root` with session-jsonl.
fn rows(root: &Path) -> String {
    format!(
        "[[row]]\nid='session'\nplugin='session'\n[[row]]\nid='jsonl'\nplugin='session-jsonl'\nconfig = {{ root = '{}' }}\n",
        root.display()
    )
}

/// Writes a raw log where session-jsonl reads session `id` of `cwd`: the
/// original's session directory layout, plain (`compression: 'none'`).
fn writer(root: PathBuf) -> impl Fn(&str, &str, &str) {
    move |id, cwd, text| {
        let key = cwd.replace('/', "-").trim_start_matches('-').to_owned();
        let dir = root.join(format!("--{key}--")).join(id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("session.jsonl"), text).unwrap();
    }
}

#[tokio::test]
async fn session_jsonl_passes_the_persistence_contract() {
    let t = TestHost::start().await;
    let root = t.home.path().join("sessions");
    let rows = rows(&root);
    t.apply(&rows).await;
    let write = writer(root);
    contracts::persistence(
        &t,
        &Backend {
            rows: &rows,
            write_log: &write,
        },
    )
    .await;
    t.shutdown().await;
}

#[tokio::test]
async fn session_jsonl_passes_the_coordinator_contract() {
    let t = TestHost::start().await;
    let root = t.home.path().join("sessions");
    let rows = rows(&root);
    t.apply(&rows).await;
    let write = writer(root);
    contracts::coordinator(
        &t,
        &Backend {
            rows: &rows,
            write_log: &write,
        },
    )
    .await;
    t.shutdown().await;
}
