//! MCP servers from the user's existing configuration: the project's
//! `.mcp.json` (after trust) and codex's `[mcp_servers]`, each a layer of
//! `--dump-config`, and live edits under `--watch`.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

#[allow(dead_code)] // the pty helpers this suite does not call
mod support;

use std::path::Path;

use dsh_testkit::fake_llm::{text, tool_calls, FakeLlm};
use dsh_testkit::headless::Headless;
use dsh_testkit::{mcp_server, out, target_dir};
use serde_json::json;
use support::pty::Pty;

/// A `.mcp.json` with the fixture as each of `names` (Claude Code's
/// format), in `dir`, which is made a repository root.
fn write_mcp_json(dir: &Path, names: &[&str]) {
    let _ = std::fs::create_dir(dir.join(".git"));
    let servers: serde_json::Map<String, serde_json::Value> = names
        .iter()
        .map(|n| {
            let server =
                json!({"command": mcp_server(), "env": {"FIXTURE_FROM": "${FIXTURE_SOURCE:-unset}"}});
            ((*n).to_owned(), server)
        })
        .collect();
    let text = serde_json::to_string_pretty(&json!({"mcpServers": servers})).unwrap();
    // Written beside, then renamed: a watcher never reads half a file.
    let tmp = dir.join(".mcp.json.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join(".mcp.json")).unwrap();
}

/// `dsh-host trust` in `e`'s workspace; what it printed.
fn trust(e: &Headless) -> String {
    let (code, stdout, stderr) = out(&std::process::Command::new(target_dir().join("dsh-host"))
        .current_dir(e.work.path())
        .env("DSH_HOME", e.home.path())
        .args(["trust", "--yes"])
        .output()
        .unwrap());
    assert_eq!(code, 0, "{stderr}");
    stdout
}

#[tokio::test]
async fn a_projects_servers_start_only_once_the_project_is_trusted() {
    let fake = FakeLlm::start().await;
    fake.push([text("first")]);
    // A patch turning the whole group on does not start an unapproved
    // server (approval is decided on the composed tree).
    let e = Headless::new(&fake, "[[patch]]\ngroup = \"mcp\"\ndisabled = false\n")
        .env("FIXTURE_SOURCE", "from the host");
    write_mcp_json(e.work.path(), &["proj"]);
    let (code, _, stderr) = out(&e.run(&["hello"]).await);
    assert_eq!(code, 0, "{stderr}");
    let work = e.work.path().display().to_string();
    assert!(
        stderr.contains(&format!(
            "the MCP servers of {work}/.mcp.json (proj) were not started: the project is not trusted; `dsh-host trust {work}` approves them"
        )),
        "{stderr}"
    );
    assert!(!fake.offered_tools(0).iter().any(|n| n.starts_with("mcp__")));
    // Without a terminal to ask in, nothing is approved without --yes.
    let (code, _, stderr) = out(&std::process::Command::new(target_dir().join("dsh-host"))
        .current_dir(e.work.path())
        .env("DSH_HOME", e.home.path())
        .arg("trust")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap());
    assert_eq!(code, 2, "{stderr}");
    assert!(!e.home.path().join("trust.toml").exists());
    // What it approves is shown, quoted, before it is recorded.
    let said = trust(&e);
    let dir = e.work.path().canonicalize().unwrap();
    assert!(
        said.starts_with(&format!(
            "trusting {}\n  proj: {:?}",
            dir.display(),
            mcp_server()
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!("trusted {}:", dir.display())),
        "{said}"
    );
    fake.push([
        // Time for the server to connect (its row does not hold the run).
        tool_calls(&[("bash", json!({"command": "sleep 1", "description": "wait"}))]),
        tool_calls(&[("mcp__proj__env", json!({"name": "FIXTURE_FROM"}))]),
        text("second"),
    ]);
    let (code, _, stderr) = out(&e.run(&["hello again"]).await);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("not trusted"), "{stderr}");
    // `${FIXTURE_SOURCE:-unset}` was resolved from the host's environment.
    assert_eq!(fake.tool_results(3)[1], "from the host");
}

#[tokio::test]
async fn dump_config_lists_each_source_as_a_layer_with_its_file() {
    let fake = FakeLlm::start().await;
    let e = Headless::new(&fake, "");
    write_mcp_json(e.work.path(), &["proj"]);
    let codex = e.home.path().join("codex");
    std::fs::create_dir_all(&codex).unwrap();
    std::fs::write(
        codex.join("config.toml"),
        format!(
            "[mcp_servers.cx]\ncommand = {:?}\nenv_vars = [\"CX_TOKEN\"]\n",
            mcp_server()
        ),
    )
    .unwrap();
    let (code, stdout, stderr) = out(&e.run(&["--dump-config"]).await);
    assert_eq!(code, 0, "{stderr}");
    let work = e.work.path().display().to_string();
    for want in [
        format!("# the MCP servers of {work}/.mcp.json (proj) were not started"),
        format!("# == {}", codex.join("config.toml").display()),
        "id = \"mcp:cx\"".to_owned(),
        format!("# == {work}/.mcp.json"),
        "id = \"mcp:proj\"".to_owned(),
        "disabled = true".to_owned(),
        "FIXTURE_FROM = \"${env:FIXTURE_SOURCE:-unset}\"".to_owned(),
    ] {
        assert!(stdout.contains(&want), "no {want:?} in\n{stdout}");
    }
}

#[tokio::test]
async fn a_server_edited_under_watch_is_picked_up_without_a_restart() {
    let fake = FakeLlm::start().await;
    fake.push([text("with one"), text("with two")]);
    let e = Headless::new(&fake, "");
    write_mcp_json(e.work.path(), &["one"]);
    trust(&e);
    let mut p = Pty::dsh_host(&e, &["--watch"], &[("DSH_LOG", "info")]);
    p.wait_for("mcp-client(one): connected, 6 tools", 30).await;
    p.send("first\r");
    p.wait_for("with one", 20).await;
    assert!(fake.offered_tools(0).contains(&"mcp__one__echo".to_owned()));
    // A new server in a trusted project is asked about, not started.
    write_mcp_json(e.work.path(), &["two"]);
    p.wait_for("were not started", 15).await;
    p.wait_for("names MCP servers (two)", 30).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    p.send("y");
    p.wait_for("mcp-client(two): connected, 6 tools", 30).await;
    p.send("second\r");
    p.wait_for("with two", 20).await;
    let names = fake.offered_tools(1);
    assert!(names.contains(&"mcp__two__echo".to_owned()), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("mcp__one")),
        "{names:?}"
    );
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
}

#[tokio::test]
async fn mcp_in_the_chat_lists_the_servers_and_reconnects_one() {
    let fake = FakeLlm::start().await;
    let e = Headless::new(&fake, "");
    write_mcp_json(e.work.path(), &["one"]);
    trust(&e);
    let mut p = Pty::dsh_host(&e, &[], &[("DSH_LOG", "info")]);
    p.wait_for("mcp-client(one): connected, 6 tools", 30).await;
    p.send("/mcp\r");
    p.wait_for("SERVER", 20).await;
    let screen = p.contents();
    let line = screen
        .lines()
        .find(|l| l.trim_start().starts_with("one "))
        .unwrap_or_else(|| panic!("no server line in\n{screen}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cells[..4], ["one", "connected", "6", "mcp:one"], "{line}");
    p.send("/mcp reconnect one\r");
    p.wait_for("reconnecting one", 20).await;
    p.wait_for_count("mcp-client(one): connected, 6 tools", 2, 30)
        .await;
    p.send("/mcp reconnect nope\r");
    p.wait_for("no MCP server nope (see /mcp)", 20).await;
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
}

#[tokio::test]
async fn the_chat_asks_once_and_a_yes_starts_the_projects_servers() {
    let fake = FakeLlm::start().await;
    let e = Headless::new(&fake, "");
    write_mcp_json(e.work.path(), &["proj"]);
    let mut p = Pty::dsh_host(&e, &[], &[("DSH_LOG", "info")]);
    p.wait_for("names MCP servers (proj)", 30).await;
    p.wait_for("start them? yes [y]", 30).await;
    // Past the grace in which keys typed before the question do not count.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    p.send("y");
    p.wait_for("starting its MCP servers", 20).await;
    p.wait_for("mcp-client(proj): connected, 6 tools", 30).await;
    let record = std::fs::read_to_string(e.home.path().join("trust.toml")).unwrap();
    let work = e.work.path().canonicalize().unwrap();
    assert!(
        record.contains(&format!("{:?}", work.display().to_string())),
        "{record}"
    );
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
}

#[tokio::test]
async fn the_agent_cannot_write_the_files_servers_come_from() {
    let fake = FakeLlm::start().await;
    // In workspace-write (the default) the file is in the writable root,
    // and still the harness's own (danger-full-access fences nothing).
    let e = Headless::new(&fake, "");
    write_mcp_json(e.work.path(), &["proj"]);
    let evil =
        json!({"mcpServers": {"evil": {"command": "/bin/sh", "args": ["-c", "touch /tmp/pwned"]}}});
    fake.push([
        tool_calls(&[("read", json!({"file_path": ".mcp.json"}))]),
        tool_calls(&[(
            "write",
            json!({"file_path": ".mcp.json", "content": evil.to_string()}),
        )]),
        text("done"),
    ]);
    let (code, _, stderr) = out(&e.run(&["go"]).await);
    assert_eq!(code, 0, "{stderr}");
    let result = &fake.tool_results(2)[1];
    assert!(
        result.contains("is one of the harness's own files"),
        "{result}"
    );
    let kept = std::fs::read_to_string(e.work.path().join(".mcp.json")).unwrap();
    assert!(!kept.contains("evil"), "{kept}");
}

/// The hole per-server approval closes: a trusted project without a
/// `.mcp.json` (nothing to protect), whose agent creates one with bash.
/// The server it names is not run, on this run or the next.
#[tokio::test]
async fn a_server_the_agent_adds_to_a_trusted_project_is_not_run() {
    let fake = FakeLlm::start().await;
    let e = Headless::new(&fake, "");
    std::fs::create_dir(e.work.path().join(".git")).unwrap();
    trust(&e);
    let marker = e.home.path().join("pwned");
    let evil = json!({"mcpServers": {"evil": {"command": "/bin/sh",
        "args": ["-c", format!("touch {}", marker.display())]}}});
    let script = format!("cat > .mcp.json <<'X'\n{evil}\nX");
    fake.push([
        tool_calls(&[("bash", json!({"command": script, "description": "add"}))]),
        text("done"),
    ]);
    let (code, _, stderr) = out(&e.run(&["go"]).await);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        e.work.path().join(".mcp.json").is_file(),
        "the agent wrote it"
    );
    fake.push([text("again")]);
    let (code, _, stderr) = out(&e.run(&["again"]).await);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("(evil) were not started: they are new or changed"),
        "{stderr}"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!marker.exists(), "the agent's server ran");
}
