//! `cargo xtask bench`: performance figures of the host, printed as
//! medians (and ratios where a target is relative). Nothing is asserted.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use dsh_host::{compose, inspect, parse_layer, procfs, Host, HostConfig, Timeouts, Tree};
use dsh_sdk::names::{agent_loop, agents, service, subagents, tools};
use dsh_sdk::vocab::{event, SessionEvent};
use serde_json::{json, Value};

dsh_host::interpose_pthread_keys!();

mod mcp;

fn libs() -> PathBuf {
    std::env::var_os("DSH_BENCH_LIBS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/release"))
}

fn lib(name: &str) -> PathBuf {
    libs().join(format!("lib{}.so", name.replace('-', "_")))
}

fn tree(toml: &str) -> Result<Tree> {
    let (layer, _) = parse_layer(toml, Path::new("bench.toml"))?;
    Ok(compose(&[layer])?)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(label: &str) -> Result<Scratch> {
        let p = std::env::temp_dir().join(format!("dsh-bench-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p)?;
        Ok(Scratch(p))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn host(home: &Path, dirs: Vec<PathBuf>) -> Result<Host> {
    Host::start(HostConfig {
        home: home.to_owned(),
        plugin_dirs: dirs,
        timeouts: Timeouts::default(),
        args: Vec::new(),
        protected: Vec::new(),
        model: None,
        trust: None,
    })
}

fn probe_rows(n: usize, extra: &str) -> String {
    (0..n)
        .map(|i| format!("[[row]]\nid = 'p{i}'\nplugin = 'dsh-fixture-probe'\n[row.config]\ntag = 'p{i}'\n{extra}\n"))
        .collect()
}

/// Bare two-thread ping-pong over blocking eventfds: the floor for any
/// round trip between two threads.
fn bare_ping_pong(n: usize) -> f64 {
    fn efd() -> i32 {
        // SAFETY: plain syscall.
        unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) }
    }
    fn wait(fd: i32) {
        let mut b = [0u8; 8];
        // SAFETY: valid 8-byte buffer.
        unsafe { libc::read(fd, b.as_mut_ptr().cast(), 8) };
    }
    fn kick(fd: i32) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: valid 8-byte buffer.
        unsafe { libc::write(fd, one.as_ptr().cast(), 8) };
    }
    let (a, b) = (efd(), efd());
    let echo = std::thread::spawn(move || {
        for _ in 0..n {
            wait(b);
            kick(a);
        }
    });
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        kick(b);
        wait(a);
        times.push(t.elapsed().as_nanos() as f64);
    }
    let _ = echo.join();
    // SAFETY: closing our own fds.
    unsafe {
        libc::close(a);
        libc::close(b);
    }
    median(times)
}

async fn bench_load() -> Result<f64> {
    let path = lib("dsh-fixture-probe");
    let mut times = Vec::new();
    for _ in 0..30 {
        let t = Instant::now();
        let p = path.clone();
        tokio::task::spawn_blocking(move || inspect::check(&p)).await??;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(times))
}

async fn bench_start(n: usize) -> Result<(f64, f64)> {
    let mut times = Vec::new();
    let mut rss_per = Vec::new();
    for _ in 0..5 {
        let home = Scratch::new("start")?;
        let rss0 = procfs::rss_bytes();
        let t = Instant::now();
        let h = host(&home.0, vec![libs()])?;
        h.apply(tree(&probe_rows(n, ""))?).await;
        let elapsed = t.elapsed().as_secs_f64() * 1e3;
        let active = h
            .status()
            .await
            .iter()
            .filter(|s| format!("{:?}", s.state) == "Active")
            .count();
        anyhow::ensure!(active == n, "only {active} of {n} rows became active");
        times.push(elapsed);
        rss_per.push((procfs::rss_bytes().saturating_sub(rss0)) as f64 / n as f64 / 1024.0);
        h.shutdown().await;
    }
    Ok((median(times), median(rss_per)))
}

async fn bench_call_and_waterfall() -> Result<(f64, f64)> {
    let home = Scratch::new("call")?;
    let h = host(&home.0, vec![libs()])?;
    h.apply(tree(&probe_rows(
        10,
        "listeners = [{ event = 'wf', action = 'append' }]",
    ))?)
    .await;
    let calls = h
        .call(
            "probe:p0",
            "bench_calls",
            json!({"service": "probe:p1", "method": "ping", "n": 20000}),
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let wf = h
        .call(
            "probe:p0",
            "bench_waterfall",
            json!({"event": "wf", "n": 2000}),
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    h.shutdown().await;
    let ns = |v: &Value| v["median_ns"].as_f64().unwrap_or(f64::NAN);
    Ok((ns(&calls), ns(&wf)))
}

async fn bench_reload() -> Result<f64> {
    let home = Scratch::new("reload")?;
    let plugins = Scratch::new("reload-plugins")?;
    let target = plugins.0.join("counter.so");
    std::fs::copy(lib("dsh-fixture-counter-v1"), &target)?;
    let h = host(&home.0, vec![plugins.0.clone()])?;
    h.apply(tree("[[row]]\nid = 'counter'\nplugin = 'counter'\n")?)
        .await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let _watcher = dsh_host::watch(
        std::slice::from_ref(&plugins.0),
        &[],
        Duration::from_millis(50),
        tx,
    )?;
    let h2 = h.clone();
    tokio::spawn(async move {
        while let Some(change) = rx.recv().await {
            match change {
                dsh_host::Change::Plugin(p) => h2.reload(p).await,
                dsh_host::Change::PluginRemoved(p) => h2.remove(p).await,
                dsh_host::Change::Config(_) => {}
            }
        }
    });
    let mut times = Vec::new();
    for i in 0..8 {
        let (from, want) = if i % 2 == 0 {
            ("dsh-fixture-counter-v2", 2)
        } else {
            ("dsh-fixture-counter-v1", 1)
        };
        let tmp = plugins.0.join("counter.so.tmp");
        std::fs::copy(lib(from), &tmp)?;
        let t = Instant::now();
        std::fs::rename(&tmp, &target)?;
        loop {
            if h.call("counter", "get", json!({})).await.ok() == Some(json!(want)) {
                break;
            }
            anyhow::ensure!(t.elapsed() < Duration::from_secs(10), "reload never served");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    h.shutdown().await;
    Ok(median(times))
}

/// Rows of the agent core against `url`, with release libraries.
fn core_rows(url: &str, sessions: &Path) -> String {
    dsh_testkit::core_rows(url, sessions)
}

fn ensure(v: Result<Value, dsh_sdk::Error>) -> Result<Value> {
    v.map_err(|e| anyhow::anyhow!("{e}"))
}

/// A new agent on the fake route `fake/m`, working in `cwd`: its id.
async fn new_agent(h: &Host, cwd: &Path) -> Result<String> {
    let created = ensure(
        h.call(
            service::AGENT_LOOP,
            agent_loop::CREATE,
            json!({"agentOptions": {"provider": "fake", "model": "m"}, "meta": {"cwd": cwd}}),
        )
        .await,
    )?;
    created["agent"]
        .as_str()
        .map(str::to_owned)
        .context("agentLoop.create answered no agent")
}

/// Sends `text` to `agent` and waits until it is idle: the `whenIdle`
/// reply.
async fn run_turn(h: &Host, agent: &str, text: &str) -> Result<Value> {
    ensure(
        h.call(
            service::AGENTS,
            agents::FOLLOWUP,
            json!({"agent": agent, "message": {"text": text}}),
        )
        .await,
    )?;
    ensure(
        h.call(service::AGENTS, agents::WHEN_IDLE, json!({"agent": agent}))
            .await,
    )
}

/// Writes `home/p.toml`, a patch pointing the headless profile's adapter
/// at the fake server at `url` (no key); its path.
fn headless_patch(home: &Path, url: &str) -> Result<PathBuf> {
    let patch = home.join("p.toml");
    std::fs::write(
        &patch,
        format!("[[patch]]\nid = \"llm-deepseek\"\nconfig = {{ baseUrl = \"{url}\", apiKeyEnv = \"\" }}\n"),
    )?;
    Ok(patch)
}

/// `dsh-host --profile headless --patch <patch> <task>` of the staged
/// release tree, in and with `$DSH_HOME` = `home`, stdout discarded.
fn headless(stage: &Path, home: &Path, patch: &Path, task: &str) -> std::process::Command {
    let mut c = std::process::Command::new(stage.join("bin/dsh-host"));
    c.current_dir(home)
        .env("DSH_HOME", home)
        .args(["--profile", "headless", "--patch"])
        .arg(patch)
        .arg(task)
        .stdout(std::process::Stdio::null());
    c
}

/// Process start to exit of `dsh-host --profile headless "hi"` (staged
/// release tree), answered at once by the fake server: (wall ms, peak KiB).
async fn bench_one_shot(stage: &Path) -> Result<(f64, f64)> {
    let fake = dsh_testkit::fake_llm::FakeLlm::start().await;
    fake.set_fallback(dsh_testkit::fake_llm::text("Hi."));
    let home = Scratch::new("oneshot")?;
    let patch = headless_patch(&home.0, &fake.base_url)?;
    let mut walls = Vec::new();
    let mut peaks = Vec::new();
    for _ in 0..10 {
        let c = headless(stage, &home.0, &patch, "hi");
        let t = Instant::now();
        let peak = peak_rss_kib(c).await?;
        walls.push(t.elapsed().as_secs_f64() * 1e3);
        peaks.push(peak);
    }
    Ok((median(walls), median(peaks)))
}

/// Runs `c` to its end; its peak RSS in KiB (wait4's rusage of exactly
/// this child). A non-zero exit is an error.
async fn peak_rss_kib(mut c: std::process::Command) -> Result<f64> {
    tokio::task::spawn_blocking(move || -> Result<f64> {
        let mut child = c.spawn()?;
        let pid = child.id() as i32;
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid out-parameter.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: plain wait4 on our own child.
        unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        let _ = child.try_wait();
        anyhow::ensure!(status == 0, "dsh-host exited with status {status}");
        Ok(usage.ru_maxrss as f64)
    })
    .await?
}

/// The hardening targets: what the fence check and the race-free open add
/// to a `write`, and the harness's peak RSS while bash prints 1 GB.
async fn bench_hardening(stage: &Path) -> Result<()> {
    use dsh_sdk::beneath::open_parent;
    use dsh_sdk::fence::{resolve, Fence, Mode};
    let ws = Scratch::new("fence")?;
    std::fs::create_dir_all(ws.0.join("src/deep/er"))?;
    let (root, temp) = (ws.0.canonicalize()?, std::env::temp_dir());
    let protected = [ws.0.join(".dsh-home")];
    let mut fence_us = Vec::new();
    let mut write_us = Vec::new();
    for n in 0..2000 {
        let t = Instant::now();
        let fence = Fence::new(Mode::WorkspaceWrite, &root, &temp, &protected);
        let target = resolve(&root, Path::new("./src/x/../deep/er/file.rs"));
        fence
            .check_write("write", &target)
            .map_err(|r| anyhow::anyhow!(r.message))?;
        let (dir, name) = open_parent(&root, &target, true)?;
        fence_us.push(t.elapsed().as_secs_f64() * 1e6);
        if n % 20 == 0 {
            let t = Instant::now();
            dir.write_atomic(&name, b"fn main() {}\n")?;
            write_us.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    println!(
        "  fence check + race-free open added to a write .......... {:8.1} us   (target <= 50 us; the atomic write itself, fsync included: {:.0} us)",
        median(fence_us),
        median(write_us)
    );
    let (added, plain) = bench_read_fence()?;
    println!(
        "  read fence (policy + tool checks, checked open) added to a read {added:5.1} us   (target <= 20 us; the unfenced work: {plain:.1} us)"
    );
    let fake = dsh_testkit::fake_llm::FakeLlm::start().await;
    let home = Scratch::new("bash-rss")?;
    let patch = headless_patch(&home.0, &fake.base_url)?;
    let mut peaks = Vec::new();
    for command in ["true", "head -c 1000000000 /dev/zero"] {
        let mut runs = Vec::new();
        for _ in 0..3 {
            fake.push([
                dsh_testkit::fake_llm::tool_calls(&[(
                    "bash",
                    json!({"command": command, "description": "b"}),
                )]),
                dsh_testkit::fake_llm::text("done"),
            ]);
            runs.push(peak_rss_kib(headless(stage, &home.0, &patch, "go")).await?);
        }
        peaks.push(median(runs) / 1024.0);
    }
    println!(
        "  harness peak RSS, bash printing 1 GB ................... {:8.1} MiB  ({:.1} MiB above a run of `true`; target <= 64 MiB above idle)",
        peaks[1],
        peaks[1] - peaks[0]
    );
    Ok(())
}

/// What the read fence adds to a `read`, in microseconds (medians), and
/// what the unfenced work costs (the policy building its fence, as it did
/// for every call before, and the tool's resolve and open): with the read
/// fence, the policy checks the spelled and resolved path, the tool checks
/// them again, opens without following links and checks what it opened.
fn bench_read_fence() -> Result<(f64, f64)> {
    use dsh_sdk::fence::{open_read, resolve, Fence, Mode, ReadPolicy, Reads};
    use dsh_sdk::file::open_regular;
    let ws = Scratch::new("read-fence")?;
    std::fs::create_dir_all(ws.0.join("src/deep/er"))?;
    std::fs::write(ws.0.join("src/deep/er/file.rs"), "fn main() {}\n")?;
    std::fs::create_dir_all(ws.0.join(".git"))?;
    let (root, temp) = (ws.0.canonicalize()?, std::env::temp_dir());
    let home = ws.0.join(".dsh-home");
    let protected = [home.clone()];
    let reads = Reads::discover(ReadPolicy::Allow, &home, &temp);
    let file = Path::new("./src/x/../deep/er/file.rs");
    let (mut plain, mut fenced) = (Vec::new(), Vec::new());
    for _ in 0..5000 {
        let t = Instant::now();
        drop(Fence::new(Mode::WorkspaceWrite, &root, &temp, &protected));
        let path = resolve(&root, file);
        drop(open_regular(&path).map_err(|e| anyhow::anyhow!("{e}"))?);
        plain.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        let fence =
            Fence::new(Mode::WorkspaceWrite, &root, &temp, &protected).with_reads(reads.clone());
        fence
            .resolve_read("read", &root, file, false)
            .map_err(|r| anyhow::anyhow!(r.message))?;
        let fence = fence.with_own_reads(&reads);
        let path = fence
            .resolve_read("read", &root, file, false)
            .map_err(|r| anyhow::anyhow!(r.message))?;
        drop(open_read(Some(&fence), "read", &path, false).map_err(|e| anyhow::anyhow!("{e}"))?);
        fenced.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (plain, fenced) = (median(plain), median(fenced));
    Ok((fenced - plain, plain))
}

/// An agent session driven through `steps` read steps; returns the time
/// between consecutive model requests.
async fn bench_steps(steps: usize, compaction: bool) -> Result<Vec<f64>> {
    let fake = dsh_testkit::fake_llm::FakeLlm::start().await;
    let home = Scratch::new("steps")?;
    std::fs::write(home.0.join("f.txt"), "one line\n")?;
    let h = host(&home.0, vec![libs()])?;
    // One turn of `steps` steps: past the loop's default step limit.
    // With compaction-basic, the pressure check runs before every step
    // (the kit's window is DeepSeek's default, never reached here).
    let compaction = if compaction {
        "[[row]]\nid = 'compaction-basic'\nplugin = 'compaction-basic'\n"
    } else {
        ""
    };
    let rows = format!(
        "{}{compaction}[[patch]]\nid = 'agent-loop'\nconfig = {{ maxStepsPerTurn = {} }}\n",
        core_rows(&fake.base_url, &home.0.join("sessions")),
        steps + 1
    );
    h.apply(tree(&rows)?).await;
    let call = dsh_testkit::fake_llm::tool_calls(&[("read", json!({"file_path": "f.txt"}))]);
    fake.push(std::iter::repeat_n(call, steps));
    fake.push([dsh_testkit::fake_llm::text("done")]);
    let agent = new_agent(&h, &home.0).await?;
    let r = run_turn(&h, &agent, "go").await?;
    anyhow::ensure!(
        r["reason"]["kind"] == "completed",
        "turn ended {}",
        r["reason"]
    );
    let times = fake.request_times();
    h.shutdown().await;
    Ok(times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64() * 1e3)
        .collect())
}

/// Load and prepare-to-resume of a stored session of `n` events.
/// `text` as one zstd frame with its content checksum.
fn zstd_frame(text: &[u8]) -> Result<Vec<u8>> {
    let mut c = zstd::bulk::Compressor::new(zstd::DEFAULT_COMPRESSION_LEVEL)?;
    c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))?;
    Ok(c.compress(text)?)
}

/// With `compacted`, the log ends with a compaction whose checkpoint
/// replaces all its messages but the last 20.
async fn bench_resume(n: usize, compacted: bool) -> Result<f64> {
    let fake = dsh_testkit::fake_llm::FakeLlm::start().await;
    let home = Scratch::new("resume")?;
    let root = home.0.join("sessions");
    let cwd = "/bench/work";
    let dir = root.join("--bench-work--");
    std::fs::create_dir_all(&dir)?;
    let mut body = String::new();
    let mut seq = 0u64;
    let mut turn = 0u64;
    let mut messages = Vec::new();
    while (seq as usize) < n {
        turn += 1;
        let mut push = |kind: &str, data: Value, surface: bool, body: &mut String| {
            let mut e =
                json!({"type": kind, "seq": seq, "time": 1_700_000_000_000u64 + seq, "data": data});
            if surface {
                e["surfaceOp"] = json!("append");
                messages.push(seq);
            }
            body.push_str(&e.to_string());
            body.push('\n');
            seq += 1;
        };
        push(event::TURN_START, json!({"turn": turn}), false, &mut body);
        push(
            event::STEP_START,
            json!({"turn": turn, "step": 1}),
            false,
            &mut body,
        );
        push(
            event::USER_MESSAGE,
            json!({"id": format!("u{turn}"), "role": "user", "content": [{"type": "text", "text": "question"}], "source": {"kind": "user"}}),
            true,
            &mut body,
        );
        for i in 0..8 {
            push(
                event::ASSISTANT_CHUNK,
                json!({"turn": turn, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": format!("word{i} ")}}),
                false,
                &mut body,
            );
        }
        push(
            event::ASSISTANT_MESSAGE,
            json!({"turn": turn, "step": 1, "message": {"id": format!("a{turn}"), "role": "assistant", "content": [{"type": "text", "text": "an answer of eight words"}], "source": {"kind": "model", "provider": "fake", "model": "m"}}}),
            true,
            &mut body,
        );
        push(
            event::STEP_END,
            json!({"turn": turn, "step": 1}),
            false,
            &mut body,
        );
        push(
            event::TURN_END,
            json!({"turn": turn, "reason": {"kind": "completed"}}),
            false,
            &mut body,
        );
    }
    if compacted {
        append_compaction(
            &mut body,
            seq,
            &messages[..messages.len().saturating_sub(20)],
        )?;
    }
    let h = host(&home.0, vec![libs()])?;
    h.apply(tree(&core_rows(&fake.base_url, &root))?).await;
    let mut times = Vec::new();
    for i in 0..5 {
        let id = format!("big-{i}");
        let header = json!({"type": "session", "version": 0, "id": id, "createdAt": 1, "cwd": cwd, "delegationDepth": 0});
        // As the store writes it: the header frame alone, then the body
        // (one frame: one flush), each with its checksum.
        let session = dir.join(&id);
        std::fs::create_dir_all(&session)?;
        let mut log = zstd_frame(format!("{header}\n").as_bytes())?;
        log.extend(zstd_frame(body.as_bytes())?);
        std::fs::write(session.join("session.jsonl.zstd"), log)?;
        let t = Instant::now();
        ensure(
            h.call(
                service::AGENT_LOOP,
                agent_loop::RESUME,
                json!({"sessionId": id, "agentOptions": {"provider": "fake", "model": "m"}}),
            )
            .await,
        )?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    h.shutdown().await;
    Ok(median(times))
}

/// Appends, from `seq` on, a compaction replacing the messages `shadowed`
/// (the records as compaction-basic writes them).
fn append_compaction(body: &mut String, seq: u64, shadowed: &[u64]) -> Result<()> {
    use dsh_sdk::vocab::compaction as records;
    let (Some(first), Some(last)) = (shadowed.first(), shadowed.last()) else {
        return Ok(());
    };
    let summary = vec![dsh_sdk::vocab::ContentBlock::text(
        "## Primary Request and Intent\n- the bench",
    )];
    let mut sources = vec![seq, seq + 1];
    sources.extend_from_slice(shadowed);
    let start = records::CompactionStart {
        compaction_id: "c".into(),
        source_command_id: None,
        turn: None,
    };
    let record = records::CompactionSummary {
        compaction_id: "c".into(),
        source_command_id: None,
        summary: summary.clone(),
        raw_output: Some(summary.clone()),
        llm_stream_call: Some(true),
        shadowed_range: records::ShadowedRange {
            start: *first,
            end: *last,
        },
        shadowed_seqs: shadowed.to_vec(),
        shadowed_token_count: 40 * shadowed.len() as u64,
        provider: "fake".into(),
        model: "m".into(),
        max_tokens: Some(8192),
        usage: None,
    };
    let checkpoint = json!({"id": "ckpt", "role": "user",
        "content": records::checkpoint_content(&summary), "source": records::CheckpointSource::new("c", None)});
    let end = records::CompactionEnd {
        compaction_id: "c".into(),
        source_command_id: None,
        turn: None,
        error: None,
    };
    let row = |kind: &str, at: u64, data: Value| SessionEvent {
        time: 1_800_000_000_000 + at - seq,
        ..SessionEvent::new(kind, at, data)
    };
    let rows = [
        row(records::START, seq, json!(start)),
        row(records::SUMMARY, seq + 1, json!(record)),
        SessionEvent {
            source_event_seqs: Some(sources),
            surface_op: Some(json!({"op": "replace", "start": first, "end": last})),
            ..row(event::USER_MESSAGE, seq + 2, checkpoint)
        },
        row(records::END, seq + 3, json!(end)),
    ];
    for r in rows {
        body.push_str(&serde_json::to_string(&r)?);
        body.push('\n');
    }
    Ok(())
}

/// Coding tools: grep over the repository against `rg`, `read` of a
/// 10 MiB file, and `bash true` against spawning bash directly.
async fn bench_tools() -> Result<()> {
    let home = Scratch::new("tools")?;
    let h = host(&home.0, vec![libs()])?;
    h.apply(tree(
        "[[row]]\nid='tools'\nplugin='tools'\n[[row]]\nid='read'\nplugin='tool-read'\n\
         [[row]]\nid='bash'\nplugin='tool-bash'\n[[row]]\nid='search'\nplugin='tool-search'\n",
    )?)
    .await;
    let repo = std::env::var("DSH_BENCH_REPO").unwrap_or_else(|_| ".".into());
    let exec = |name: &str, args: Value, cwd: &str| json!({"callId": "b", "name": name, "arguments": args, "cwd": cwd});
    let mut grep_ms = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let r = ensure(
            h.call(
                service::TOOLS,
                tools::EXECUTE,
                exec(
                    "grep",
                    json!({"pattern": "fn [a-z_]+\\(", "path": "."}),
                    &repo,
                ),
            )
            .await,
        )?;
        anyhow::ensure!(r["isError"] == false, "grep failed: {r}");
        grep_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let grep_ms = median(grep_ms);
    match std::env::var("DSH_BENCH_RG").ok().filter(|p| Path::new(p).is_file()) {
        Some(rg) => {
            let mut rg_ms = Vec::new();
            for _ in 0..5 {
                let t = Instant::now();
                std::process::Command::new(&rg)
                    .args(["-n", "fn [a-z_]+\\(", "."])
                    .current_dir(&repo)
                    .stdout(std::process::Stdio::null())
                    .status()?;
                rg_ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let rg_ms = median(rg_ms);
            println!("  grep tool over the repository ......................... {grep_ms:8.1} ms   rg {rg_ms:.1} ms, ratio {:.2} (target <= 2)", grep_ms / rg_ms);
        }
        None => println!("  grep tool over the repository ......................... {grep_ms:8.1} ms   (rg unavailable: no ratio)"),
    }
    let big = home.0.join("big.txt");
    let line = "x".repeat(99) + "\n";
    std::fs::write(&big, line.repeat(10 * 1024 * 1024 / 100))?;
    let mut read_ms = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        ensure(
            h.call(
                service::TOOLS,
                tools::EXECUTE,
                exec("read", json!({"file_path": big}), "/"),
            )
            .await,
        )?;
        read_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "  read of a 10 MiB file ................................... {:8.2} ms   (target <= 20 ms)",
        median(read_ms)
    );
    let mut tool_ms = Vec::new();
    let mut raw_ms = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        ensure(
            h.call(
                service::TOOLS,
                tools::EXECUTE,
                exec("bash", json!({"command": "true", "description": "b"}), "/"),
            )
            .await,
        )?;
        tool_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        std::process::Command::new("bash")
            .args(["-c", "true"])
            .status()?;
        raw_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (tool, raw) = (median(tool_ms), median(raw_ms));
    println!("  bash `true` through the tool ............................ {tool:8.2} ms   (bash alone {raw:.2} ms; overhead {:.2} ms, target <= 5 ms)", tool - raw);
    h.shutdown().await;
    Ok(())
}

/// The chat, staged release tree, in a real pseudo-terminal: process start
/// to the input prompt and the RSS then (medians of 10), and the render
/// work per streamed chunk.
async fn bench_chat(stage: &Path) -> Result<(f64, f64, f64)> {
    use portable_pty::{native_pty_system, CommandBuilder, PtySize};
    use std::io::{Read, Write};
    let home = Scratch::new("chat")?;
    let patch = headless_patch(&home.0, "http://127.0.0.1:9")?;
    let (mut starts, mut rss) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        let pair = native_pty_system().openpty(PtySize {
            rows: 40,
            cols: 100,
            pixel_width: 0,
            pixel_height: 0,
        })?;
        let mut cmd = CommandBuilder::new(stage.join("bin/dsh-host"));
        cmd.cwd(&home.0);
        cmd.env("DSH_HOME", &home.0);
        cmd.env_remove("DSH_LOG");
        cmd.args(["--patch", &patch.display().to_string()]);
        let t = Instant::now();
        let mut child = pair.slave.spawn_command(cmd)?;
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader()?;
        let mut writer = pair.master.take_writer()?;
        let seen = tokio::task::spawn_blocking(move || -> Result<(f64, Box<dyn Read + Send>)> {
            let mut all = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = reader.read(&mut buf)?;
                anyhow::ensure!(n > 0, "the chat ended before its prompt");
                all.extend_from_slice(&buf[..n]);
                if String::from_utf8_lossy(&all).contains('›') {
                    return Ok((t.elapsed().as_secs_f64() * 1e3, reader));
                }
            }
        });
        let (ms, mut reader) = seen.await??;
        starts.push(ms);
        let pid = child.process_id().context("the chat's pid")?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        rss.push(kib / 1024.0);
        writer.write_all(b"\x04")?;
        tokio::task::spawn_blocking(move || {
            let mut sink = Vec::new();
            let _ = reader.read_to_end(&mut sink);
            let _ = child.wait();
        })
        .await?;
    }
    let n = 20_000;
    let render = dsh_plugin_chat::bench::render_chunks(n)?.as_secs_f64() * 1e6 / n as f64;
    Ok((median(starts), median(rss), render))
}

/// One route's window as a fresh host meets it: (ms from host start to
/// all rows active, ms of the first `resolveModelInfo`).
async fn window_start(home: &Path, url: &str, extra: &str) -> Result<(f64, f64)> {
    use dsh_sdk::names::llm;
    let rows = format!(
        "[[row]]\nid = 'llm'\nplugin = 'llm'\n[[row]]\nid = 'llm-deepseek'\nplugin = 'llm-deepseek'\n\
         config = {{ provider = 'local', baseUrl = '{url}/v1', apiKeyEnv = '', reasoning = false{extra} }}\n"
    );
    let t = Instant::now();
    let h = host(home, vec![libs()])?;
    h.apply(tree(&rows)?).await;
    let started = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let info = ensure(
        h.call(
            service::LLM,
            llm::RESOLVE_MODEL_INFO,
            json!({"provider": "local", "model": "m"}),
        )
        .await,
    )?;
    let resolved = t.elapsed().as_secs_f64() * 1e3;
    anyhow::ensure!(
        info["context"]["contextWindow"].is_u64(),
        "no window resolved: {info}"
    );
    h.shutdown().await;
    Ok((started, resolved))
}

/// The window lookup's cost (issue 20): a start whose route's config
/// states the window, one whose first `resolveModelInfo` asks a llama.cpp
/// `/props` (its window cache removed before each start), and one that
/// finds it in the `$DSH_HOME` cache of an earlier start; each (start ms,
/// first resolve ms), medians of `n`. Each case keeps its `$DSH_HOME`
/// across its starts, so none pays the copying of the plugin libraries a
/// fresh home does.
async fn bench_window_lookup(n: usize) -> Result<[(f64, f64); 3]> {
    let fake = dsh_testkit::fake_llm::FakeLlm::start().await;
    fake.set_get(
        "/props",
        200,
        r#"{"default_generation_settings": {"n_ctx": 4096, "params": {}}, "total_slots": 1}"#,
    );
    let homes = [
        Scratch::new("window-config")?,
        Scratch::new("window-first")?,
        Scratch::new("window-cached")?,
    ];
    let extra = |case: usize| {
        if case == 0 {
            ", defaultContextWindow = 4096"
        } else {
            ""
        }
    };
    for (case, home) in homes.iter().enumerate() {
        window_start(&home.0, &fake.base_url, extra(case)).await?;
    }
    let mut runs: [(Vec<f64>, Vec<f64>); 3] = Default::default();
    for _ in 0..n {
        let _ = std::fs::remove_dir_all(homes[1].0.join("cache/models"));
        for (case, home) in homes.iter().enumerate() {
            let (start, resolve) = window_start(&home.0, &fake.base_url, extra(case)).await?;
            runs[case].0.push(start);
            runs[case].1.push(resolve);
        }
    }
    anyhow::ensure!(
        fake.asked().len() == n + 2,
        "the lookups asked {} times, not once per start without a cache ({})",
        fake.asked().len(),
        n + 2
    );
    Ok(runs.map(|(start, resolve)| (median(start), median(resolve))))
}

/// Prints [`bench_window_lookup`]'s figures.
async fn print_window_lookup() -> Result<()> {
    let [(s0, r0), (s1, r1), (s2, r2)] = bench_window_lookup(10).await?;
    println!("  start to all-active / first resolveModelInfo, window in the config {s0:6.1} ms / {r0:6.2} ms");
    println!(
        "  ... window asked of llama.cpp's /props ................. {s1:6.1} ms / {r1:6.2} ms   (the lookup adds {:.2} ms once per route; target <= 5 ms; the start {:+.1} ms)",
        r1 - r0,
        s1 - s0
    );
    println!(
        "  ... window cached by an earlier start .................. {s2:6.1} ms / {r2:6.2} ms   (adds {:.2} ms; the start {:+.1} ms)",
        r2 - r0,
        s2 - s0
    );
    Ok(())
}

/// The delegation rows (the registry, its providers, the tools).
const DELEGATION_ROWS: &str = "[[row]]\nid = 'subagent'\nplugin = 'subagent'\n[[row]]\nid = 'subagent-in-process'\nplugin = 'subagent-in-process'\n[[row]]\nid = 'tool-subagent'\nplugin = 'tool-subagent'\n";

/// A host of the core and delegation rows against `fake`, and a parent
/// agent that has made one request (so its route is logged).
async fn delegation_host(
    fake: &dsh_testkit::fake_llm::FakeLlm,
    home: &Path,
) -> Result<(Host, String)> {
    let h = host(home, vec![libs()])?;
    let rows = format!(
        "{}{DELEGATION_ROWS}[[patch]]\nid = 'agent-loop'\nconfig = {{ maxStepsPerTurn = 1000 }}\n",
        core_rows(&fake.base_url, &home.join("sessions"))
    );
    h.apply(tree(&rows)?).await;
    let agent = new_agent(&h, home).await?;
    fake.push_for("BENCH-PARENT", [dsh_testkit::fake_llm::text("ready")]);
    // The children's answers, and the parent's to their notices.
    fake.set_fallback(dsh_testkit::fake_llm::text("done"));
    run_turn(&h, &agent, "BENCH-PARENT hello").await?;
    Ok((h, agent))
}

/// `subagents.startContinuable` to the child's first model request, ms
/// (median of `n`).
async fn bench_spawn(n: usize) -> Result<f64> {
    let fake = dsh_testkit::fake_llm::FakeLlm::start().await;
    let home = Scratch::new("spawn")?;
    let (h, parent) = delegation_host(&fake, &home.0).await?;
    let mut times = Vec::new();
    for i in 0..n {
        let before = fake.requests().len();
        let t = Instant::now();
        ensure(
            h.call(
                service::SUBAGENTS,
                subagents::START_CONTINUABLE,
                json!({"provider": "spawn", "parent": parent, "label": "bench", "prompt": format!("BENCH-KID-{i}")}),
            )
            .await,
        )?;
        while fake.request_times().len() <= before {
            tokio::time::sleep(Duration::from_micros(100)).await;
        }
        let asked = fake.request_times()[before];
        times.push((asked - t).as_secs_f64() * 1e3);
        ensure(
            h.call(
                service::SUBAGENTS,
                subagents::WHEN_SETTLED,
                json!({"agent": parent}),
            )
            .await,
        )?;
    }
    h.shutdown().await;
    Ok(median(times))
}

/// The parent's per-step cost over `steps` read steps with `children`
/// live children (each holding its model request open), ms (median), and
/// the host's RSS growth per live child, MiB.
async fn bench_parent_with_children(steps: usize, children: usize) -> Result<(f64, f64)> {
    let fake = dsh_testkit::fake_llm::FakeLlm::start().await;
    let home = Scratch::new("children")?;
    std::fs::write(home.0.join("f.txt"), "one line\n")?;
    let (h, parent) = delegation_host(&fake, &home.0).await?;
    let gate = dsh_testkit::fake_llm::Gate::new();
    let rss0 = procfs::rss_bytes();
    for i in 0..children {
        let marker = format!("BENCH-KID-{i}");
        fake.push_for(&marker, [dsh_testkit::fake_llm::gated_text("done", &gate)]);
        ensure(
            h.call(
                service::SUBAGENTS,
                subagents::START_CONTINUABLE,
                json!({"provider": "spawn", "parent": parent, "label": "bench", "prompt": marker}),
            )
            .await,
        )?;
    }
    while fake.requests().len() < 1 + children {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let per_child = if children == 0 {
        0.0
    } else {
        procfs::rss_bytes().saturating_sub(rss0) as f64 / children as f64 / 1048576.0
    };
    let call = dsh_testkit::fake_llm::tool_calls(&[("read", json!({"file_path": "f.txt"}))]);
    fake.push_for("BENCH-PARENT", std::iter::repeat_n(call, steps));
    fake.push_for("BENCH-PARENT", [dsh_testkit::fake_llm::text("done")]);
    let first = fake.requests().len();
    run_turn(&h, &parent, "go").await?;
    let times = fake.request_times()[first..].to_vec();
    gate.open();
    ensure(
        h.call(
            service::SUBAGENTS,
            subagents::WHEN_SETTLED,
            json!({"agent": parent}),
        )
        .await,
    )?;
    h.shutdown().await;
    let steps: Vec<f64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64() * 1e3)
        .collect();
    Ok((median(steps), per_child))
}

async fn print_delegation() -> Result<()> {
    let spawn = bench_spawn(20).await.context("spawn")?;
    println!("  child started to its first model request ............. {spawn:8.2} ms   (target <= 5 ms)");
    let (alone, _) = bench_parent_with_children(100, 0)
        .await
        .context("no children")?;
    let (busy, per_child) = bench_parent_with_children(100, 10)
        .await
        .context("ten children")?;
    println!(
        "  parent's read step, alone / beside 10 live children ... {alone:8.3} ms / {busy:.3} ms, ratio {:.2} (target <= 1.1)",
        busy / alone
    );
    println!("  host RSS per live child ................................ {per_child:8.2} MiB  (target <= 2 MiB)");
    Ok(())
}

fn main() -> Result<()> {
    if std::env::var_os("DSH_BENCH_ONLY_MCP").is_some() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        return rt.block_on(async {
            let stage = std::env::var_os("DSH_BENCH_STAGE")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("target/dsh"));
            mcp::print(&stage.canonicalize().context("the staged tree")?).await
        });
    }
    if std::env::var_os("DSH_BENCH_ONLY_DELEGATION").is_some() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        return rt.block_on(print_delegation());
    }
    if std::env::var_os("DSH_BENCH_ONLY_WINDOWS").is_some() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        return rt.block_on(print_window_lookup());
    }
    if std::env::var_os("DSH_BENCH_ONLY_READ_FENCE").is_some() {
        let (added, plain) = bench_read_fence()?;
        println!("read fence added to a read: {added:.1} us (the unfenced work: {plain:.1} us)");
        return Ok(());
    }
    if std::env::var_os("DSH_BENCH_ONLY_TOOLS").is_some() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        return rt.block_on(bench_tools());
    }
    if std::env::var_os("DSH_BENCH_ONLY_RESUME").is_some() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        println!(
            "resume: {:.1} ms",
            rt.block_on(bench_resume(15_000, false))?
        );
        println!(
            "compacted resume: {:.1} ms",
            rt.block_on(bench_resume(14_000, true))?
        );
        return Ok(());
    }
    if let Ok(n) = std::env::var("DSH_BENCH_ONLY_STEPS") {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let compaction = std::env::var_os("DSH_BENCH_COMPACTION").is_some();
        let times = rt.block_on(bench_steps(n.parse()?, compaction))?;
        let k = (times.len() / 10).max(1);
        println!(
            "per step, medians of the first and last {k}: {:.3} ms, {:.3} ms",
            median(times[..k].to_vec()),
            median(times[times.len() - k..].to_vec())
        );
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let stage = std::env::var_os("DSH_BENCH_STAGE").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("target/dsh"));
        let stage = stage.canonicalize().context("the staged tree (run `cargo xtask build --release`)")?;
        // First, while this process is small: a child's peak RSS (wait4)
        // starts from the hiwater mark of the process it was forked from.
        println!("hardening (release)");
        bench_hardening(&stage).await.context("hardening")?;
        println!("dsh-host benchmarks (release; medians)");
        let load = bench_load().await.context("load")?;
        println!("  plugin load (dlopen + checks + manifest + unload) ...... {load:8.3} ms");
        let (start, rss_per) = bench_start(20).await.context("start")?;
        println!("  host start, 20 plugins to all-active .................. {start:8.3} ms   (target <= 20 ms)");
        println!("  RSS per loaded plugin .................................. {rss_per:8.0} KiB");
        let bare = bare_ping_pong(20000) / 1e3;
        let (call, wf) = bench_call_and_waterfall().await.context("call")?;
        let call = call / 1e3;
        println!("  bare two-thread ping-pong .............................. {bare:8.1} us");
        println!(
            "  cross-plugin call round trip ........................... {call:8.1} us   ratio {:.2} (target <= 1.2)",
            call / bare
        );
        println!("  waterfall through 10 listeners in 10 plugins .......... {:8.1} us", wf / 1e3);
        let reload = bench_reload().await.context("reload")?;
        println!("  reload latency, file settled -> new generation serving  {reload:8.1} ms   (target <= 100 ms; includes 50 ms debounce)");
        println!("agent core (release; fake model answering at once)");
        let (wall, peak) = bench_one_shot(&stage).await.context("one-shot")?;
        println!("  one-shot text answer, process start to exit ........... {wall:8.1} ms   (target <= 30 ms)");
        println!("  peak RSS of that process ............................... {:8.1} MiB  (target <= 20 MiB)", peak / 1024.0);
        let twenty = bench_steps(20, false).await.context("20 steps")?;
        println!("  20 sequential read steps, per step ..................... {:8.3} ms   (target <= 1 ms)", median(twenty));
        let thousand = bench_steps(1000, false).await.context("1000 steps")?;
        let total: f64 = thousand.iter().sum();
        let first = median(thousand[..100].to_vec());
        let last = median(thousand[thousand.len() - 100..].to_vec());
        println!("  1000-step session: total {:8.0} ms (target <= 2000 ms); per step first 100 {first:.3} ms, last 100 {last:.3} ms", total);
        let checked = bench_steps(1000, true).await.context("1000 steps, compaction")?;
        let (c_first, c_last) = (median(checked[..100].to_vec()), median(checked[checked.len() - 100..].to_vec()));
        println!(
            "  the same with compaction-basic: per step first 100 {c_first:.3} ms, last 100 {c_last:.3} ms; growth {:.2}x against {:.2}x without (target: no more growth)",
            c_last / c_first,
            last / first
        );
        let resume = bench_resume(15_000, false).await.context("resume")?;
        println!("  load + prepare-to-resume of a 15,000-event session .... {resume:8.1} ms   (target <= 15 ms)");
        let compacted = bench_resume(14_000, true).await.context("compacted resume")?;
        println!("  resume of a compacted 2,000-message session ........... {compacted:8.1} ms   (target <= 15 ms)");
        println!("model windows (release; medians of 10)");
        print_window_lookup().await.context("window lookup")?;
        println!("delegation (release; medians)");
        print_delegation().await.context("delegation")?;
        println!("MCP (release; medians)");
        mcp::print(&stage).await.context("mcp")?;
        println!("chat (release)");
        let (start, rss, render) = bench_chat(&stage).await.context("chat")?;
        println!("  dsh-host start to the input prompt ..................... {start:8.1} ms   (target <= 50 ms)");
        println!("  idle chat RSS .......................................... {rss:8.1} MiB  (target <= 25 MiB)");
        println!("  render work per streamed chunk ......................... {render:8.2} us   (target <= 50 us)");
        println!("coding tools (release)");
        bench_tools().await.context("tools")?;
        println!("host soak");
        // In a fresh process (the staged binary), so earlier benches do not
        // blur the RSS figures.
        let home = Scratch::new("soak")?;
        let out = std::process::Command::new(stage.join("bin/dsh-host"))
            .env("DSH_HOME", &home.0)
            .args(["plugins", "soak", "--cycles", "200", "--call", "counter.get"])
            .arg(lib("dsh-fixture-counter-v1"))
            .output()?;
        let soak: Value = serde_json::from_slice(&out.stdout).context("soak output")?;
        let growth = (soak["rss_after"].as_f64().unwrap_or(0.0) - soak["rss_before"].as_f64().unwrap_or(0.0)) / 1048576.0;
        println!(
            "  RSS growth over 200 reloads ............................ {growth:8.2} MiB  (target <= 5 MiB; fds {} -> {}, unmapped {}, pinned {}, keys swept {})",
            soak["fds_before"], soak["fds_after"], soak["stats"]["unmapped"], soak["stats"]["pinned"], soak["stats"]["keys_swept"]
        );
        Ok(())
    })
}
