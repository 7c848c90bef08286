//! The coding tools behind the real pipeline (`tools.execute`), for tests
//! that call tools directly rather than through a model.

use std::path::Path;

use serde_json::{json, Value};

use crate::TestHost;
use dsh_sdk::names::{service, tools};

/// Rows of the tool pipeline under permission `mode`: session, tools,
/// permission, read, write/edit, bash, todo, glob/grep and spilling, plus
/// `extra` rows or patches (TOML).
pub fn rows(mode: &str, extra: &str) -> String {
    format!(
        "[[row]]\nid='session'\nplugin='session'\n[[row]]\nid='tools'\nplugin='tools'\n\
         [[row]]\nid='permission'\nplugin='permission'\nconfig = {{ mode = '{mode}' }}\n\
         [[row]]\nid='read'\nplugin='tool-read'\n[[row]]\nid='fs'\nplugin='tool-fs'\n\
         [[row]]\nid='bash'\nplugin='tool-bash'\n[[row]]\nid='todo'\nplugin='tool-todo'\n\
         [[row]]\nid='search'\nplugin='tool-search'\n[[row]]\nid='spill'\nplugin='spill'\n{extra}"
    )
}

/// A host running [`rows`], every row active.
pub async fn host(mode: &str, extra: &str) -> TestHost {
    let t = TestHost::start().await;
    t.apply(&rows(mode, extra)).await;
    for s in t.host.status().await {
        assert_eq!(format!("{:?}", s.state), "Active", "{s:?}");
    }
    t
}

/// Executes tool `name` for agent `agent-1` working in `ws`.
pub async fn run(t: &TestHost, ws: &Path, name: &str, args: Value) -> Value {
    t.call(
        service::TOOLS,
        tools::EXECUTE,
        json!({"callId": "c", "name": name, "arguments": args, "agent": "agent-1", "cwd": ws}),
    )
    .await
}

/// The text of a tool result's first block.
pub fn text_of(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The sandboxes `bash` is attacked under: bubblewrap, and the Landlock
/// fallback with its own namespaces.
pub const SANDBOXES: [&str; 2] = ["bubblewrap", "landlock"];

/// A [`host`] under permission `mode` whose bash row runs in `sandbox` with
/// the `extra` config keys (`, key = value` TOML, or empty).
///
/// Fails the test at once when `sandbox` is bubblewrap and it is not
/// installed.
pub async fn bash_host(mode: &str, sandbox: &str, extra: &str) -> TestHost {
    assert!(
        sandbox != "bubblewrap" || Path::new("/usr/bin/bwrap").exists(),
        "these tests need bubblewrap (`cargo xtask test` installs the Debian package `bubblewrap`)"
    );
    host(
        mode,
        &format!("[[patch]]\nid='bash'\nconfig = {{ sandbox = '{sandbox}'{extra} }}\n"),
    )
    .await
}

/// Runs `command` through the `bash` tool in `ws` (described as an attack).
pub async fn sh(t: &TestHost, ws: &Path, command: &str) -> Value {
    run(
        t,
        ws,
        "bash",
        json!({"command": command, "description": "attack"}),
    )
    .await
}
