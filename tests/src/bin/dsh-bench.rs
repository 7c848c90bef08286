//! `cargo xtask bench`: performance figures of the host, printed as
//! medians (and ratios where a target is relative). Nothing is asserted.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use dsh_host::config::{compose, parse_layer, Tree};
use dsh_host::supervisor::Timeouts;
use dsh_host::{inspect, procfs, Host, HostConfig};
use serde_json::{json, Value};

dsh_host::interpose_pthread_keys!();

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
    let _watcher = dsh_host::watch::watch(
        std::slice::from_ref(&plugins.0),
        &[],
        Duration::from_millis(50),
        tx,
    )?;
    let h2 = h.clone();
    tokio::spawn(async move {
        while let Some(change) = rx.recv().await {
            match change {
                dsh_host::watch::Change::Plugin(p) => h2.reload(p).await,
                dsh_host::watch::Change::PluginRemoved(p) => h2.remove(p).await,
                dsh_host::watch::Change::Config(_) => {}
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

fn main() -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
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
        let home = Scratch::new("soak")?;
        let soak = inspect::soak(&lib("dsh-fixture-counter-v1"), 200, Some("counter.get"), &home.0).await?;
        let growth = (soak.rss_after as f64 - soak.rss_before as f64) / 1048576.0;
        println!(
            "  RSS growth over 200 reloads ............................ {growth:8.2} MiB  (target <= 5 MiB; fds {} -> {}, unmapped {}, pinned {}, keys swept {})",
            soak.fds_before, soak.fds_after, soak.stats.unmapped, soak.stats.pinned, soak.stats.keys_swept
        );
        Ok(())
    })
}
