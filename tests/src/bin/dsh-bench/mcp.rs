//! The MCP client's targets: what ten stdio servers add before the first
//! request, what a tool call through the host adds to the server's own
//! time, and how long an edit of `.mcp.json` under `--watch` takes to
//! reach the offered tools, beyond the server's own start.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use dsh_sdk::names::{service, tools};
use dsh_sdk::process::{spawn_piped, Launch};
use dsh_testkit::fake_llm::{gated_text, text, FakeLlm, Gate};
use rmcp::model::CallToolRequestParams;
use rmcp::ServiceExt;
use serde_json::json;

use crate::{ensure, headless, headless_patch, host, libs, median, tree, Scratch};

/// The fixture server (release build).
fn fixture() -> String {
    let path = libs().join("dsh-fixture-mcp-server");
    std::path::absolute(&path)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A `.mcp.json` of the fixture as each of `names`, written whole.
fn write_mcp_json(dir: &Path, names: &[String]) -> Result<()> {
    let servers: serde_json::Map<String, serde_json::Value> = names
        .iter()
        .map(|n| (n.clone(), json!({"command": fixture()})))
        .collect();
    let tmp = dir.join(".mcp.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(&json!({"mcpServers": servers}))?)?;
    std::fs::rename(&tmp, dir.join(".mcp.json"))?;
    Ok(())
}

/// codex's `config.toml` in `dir` with the fixture as server `name`,
/// written whole (the user's own file: no approval needed).
fn write_codex_config(dir: &Path, name: &str) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join("config.toml.tmp");
    std::fs::write(
        &tmp,
        format!("[mcp_servers.{name}]\ncommand = {:?}\n", fixture()),
    )?;
    std::fs::rename(&tmp, dir.join("config.toml"))?;
    Ok(())
}

/// `dsh-host trust` of `dir` with `$DSH_HOME` = `home`.
fn trust(stage: &Path, home: &Path, dir: &Path) -> Result<()> {
    let status = Command::new(stage.join("bin/dsh-host"))
        .env("DSH_HOME", home)
        .args(["trust", "--yes"])
        .arg(dir)
        .stdout(Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "dsh-host trust failed");
    Ok(())
}

/// Process start to the first model request of a one-shot run, with
/// `servers` stdio servers in the project's `.mcp.json` (trusted): median
/// of 10, in ms.
async fn first_request_ms(stage: &Path, servers: usize) -> Result<f64> {
    let fake = FakeLlm::start().await;
    fake.set_fallback(text("Hi."));
    let home = Scratch::new(&format!("mcp-start-{servers}"))?;
    std::fs::create_dir_all(home.0.join(".git"))?;
    let names: Vec<String> = (0..servers).map(|i| format!("s{i}")).collect();
    if servers > 0 {
        write_mcp_json(&home.0, &names)?;
        trust(stage, &home.0, &home.0)?;
    }
    let patch = headless_patch(&home.0, &fake.base_url)?;
    let mut firsts = Vec::new();
    for _ in 0..10 {
        let mut c = headless(stage, &home.0, &patch, "hi");
        c.env("CODEX_HOME", home.0.join("no-codex"));
        let t = Instant::now();
        let status = tokio::task::spawn_blocking(move || c.status()).await??;
        anyhow::ensure!(status.success(), "the one-shot run failed");
        let first = fake
            .request_times()
            .into_iter()
            .find(|at| *at >= t)
            .context("no request")?;
        firsts.push(first.duration_since(t).as_secs_f64() * 1e3);
    }
    Ok(median(firsts))
}

/// `tools.execute` of the fixture's `echo` through an in-process host,
/// and the same call from rmcp's client straight to a fixture of its own:
/// medians of 300, in ms.
async fn call_ms() -> Result<(f64, f64)> {
    let home = Scratch::new("mcp-call")?;
    let h = host(&home.0, vec![libs()])?;
    h.apply(tree(&format!(
        "[[row]]\nid='tools'\nplugin='tools'\n[[row]]\nid='mcp:fx'\nplugin='mcp-client'\n\
         config = {{ transport = 'stdio', serverName = 'fx', command = {:?}, failOnStartupError = true }}\n",
        fixture()
    ))?)
    .await;
    let exec =
        json!({"callId": "b", "name": "mcp__fx__echo", "arguments": {"text": "ping"}, "cwd": "/"});
    let mut through = Vec::new();
    for _ in 0..300 {
        let t = Instant::now();
        let r = ensure(h.call(service::TOOLS, tools::EXECUTE, exec.clone()).await)?;
        through.push(t.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(r["isError"] == false, "the call failed: {r}");
    }
    h.shutdown().await;
    let mut server = spawn_piped(Launch::new(fixture()))?;
    let pipes = (
        server.stdout.take().context("stdout")?,
        server.stdin.take().context("stdin")?,
    );
    let client = ().serve(pipes).await?;
    let args = json!({"text": "ping"})
        .as_object()
        .cloned()
        .context("arguments")?;
    let mut direct = Vec::new();
    for _ in 0..300 {
        let t = Instant::now();
        client
            .call_tool(CallToolRequestParams::new("echo").with_arguments(args.clone()))
            .await?;
        direct.push(t.elapsed().as_secs_f64() * 1e3);
    }
    drop(client);
    Ok((median(through), median(direct)))
}

/// The fixture's own start: spawn, handshake, tool list (median of 10,
/// in ms).
async fn server_start_ms() -> Result<f64> {
    let mut starts = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let mut server = spawn_piped(Launch::new(fixture()))?;
        let pipes = (
            server.stdout.take().context("stdout")?,
            server.stdin.take().context("stdin")?,
        );
        let client = ().serve(pipes).await?;
        client.list_all_tools().await?;
        starts.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(starts))
}

/// A `--watch` run held open by a gated answer; each of 5 edits of
/// codex's `config.toml` swaps its one server for a new one, timed from
/// the rename to the new server's `connected` line (its tools
/// registered): median, in ms. (A `.mcp.json` edit takes the same path,
/// after the user approved the changed server.)
async fn watch_edit_ms(stage: &Path) -> Result<f64> {
    let fake = FakeLlm::start().await;
    let gate = Gate::new();
    fake.push([gated_text("done", &gate)]);
    let home = Scratch::new("mcp-watch")?;
    std::fs::create_dir_all(home.0.join(".git"))?;
    let codex = home.0.join("codex");
    write_codex_config(&codex, "w0")?;
    let patch = headless_patch(&home.0, &fake.base_url)?;
    let mut child = Command::new(stage.join("bin/dsh-host"))
        .current_dir(&home.0)
        .env("DSH_HOME", &home.0)
        .env("DSH_LOG", "info")
        .env("CODEX_HOME", &codex)
        .args(["--profile", "headless", "--watch", "--patch"])
        .arg(&patch)
        .arg("hold")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().context("stderr")?;
    let (tx, rx) = mpsc::channel::<(Instant, String)>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            if tx.send((Instant::now(), line)).is_err() {
                return;
            }
        }
    });
    let connected = |name: &str, rx: &mpsc::Receiver<(Instant, String)>| -> Result<Instant> {
        let want = format!("mcp-client({name}): connected");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (at, line) = rx.recv_timeout(left).context("no connected line")?;
            if line.contains(&want) {
                return Ok(at);
            }
        }
    };
    connected("w0", &rx)?;
    let mut edits = Vec::new();
    for i in 1..=5 {
        let name = format!("w{i}");
        // Past the watcher's debounce of the last edit.
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        write_codex_config(&codex, &name)?;
        let at = connected(&name, &rx)?;
        edits.push(at.duration_since(t).as_secs_f64() * 1e3);
    }
    gate.open();
    let _ = tokio::task::spawn_blocking(move || child.wait()).await?;
    Ok(median(edits))
}

/// Prints the MCP section.
pub async fn print(stage: &Path) -> Result<()> {
    let bare = first_request_ms(stage, 0)
        .await
        .context("start, no servers")?;
    let one = first_request_ms(stage, 1)
        .await
        .context("start, 1 server")?;
    let ten = first_request_ms(stage, 10)
        .await
        .context("start, 10 servers")?;
    println!(
        "  start to first request, 10 stdio servers configured ... {ten:8.1} ms   (none: {bare:.1} ms, one: {one:.1} ms; added {:.1} ms, target <= 10 ms)",
        ten - bare
    );
    let (through, direct) = call_ms().await.context("call")?;
    println!(
        "  tool call round trip through the host ................. {through:8.3} ms   (rmcp straight to the server {direct:.3} ms; added {:.3} ms, target <= 1 ms)",
        through - direct
    );
    let start = server_start_ms().await.context("server start")?;
    let edit = watch_edit_ms(stage).await.context("watch edit")?;
    println!(
        "  server edit under --watch to tools offered ............ {edit:8.1} ms   (the server's own start {start:.1} ms; added {:.1} ms, target <= 500 ms)",
        edit - start
    );
    Ok(())
}
