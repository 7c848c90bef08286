//! `plugins check`, `plugins list` and `plugins soak`: looking at libraries
//! without running a profile.
//!
//! Looking is [`examine`]: the library's code runs only in a confined child
//! process, never in this one. [`check`] loads a library here, for what
//! runs it anyway (`plugins soak`, the bench's load figure).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_wire::Manifest;
use serde_json::{json, Value};

use crate::config::{ComposedRow, Row, Tree};
use crate::host::{stats, Host, HostConfig};
pub use crate::isolate::Inspected;
use crate::loader::{Generation, LoadError, LoadSpec, NullSink, Unloaded};
use crate::procfs;
use crate::supervisor::Timeouts;

/// Reads one library's manifest without running any of its code in this
/// process: a confined child process loads a sealed copy of it (see
/// [`crate::isolate`]). For `plugins check`, `plugins list` and drop-ins.
pub fn examine(path: &Path) -> Result<Inspected, LoadError> {
    crate::isolate::inspect(path)
}

/// [`examine`] for each of `paths`, a few child processes at a time;
/// results in the order of `paths`.
pub fn examine_all(paths: &[PathBuf]) -> Vec<Result<Inspected, LoadError>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4)
        .min(paths.len());
    if workers <= 1 {
        return paths.iter().map(|p| examine(p)).collect();
    }
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Inspected, LoadError>>>> =
        Mutex::new((0..paths.len()).map(|_| None).collect());
    // Each child is waited for by the thread that started it (its
    // parent-death signal follows that thread).
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(path) = paths.get(i) else { break };
                let result = examine(path);
                let mut all = results.lock().unwrap_or_else(|e| e.into_inner());
                all[i] = Some(result);
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .zip(paths)
        .map(|(r, p)| {
            r.unwrap_or_else(|| {
                Err(LoadError::Inspection {
                    path: p.clone(),
                    reason: "its inspection did not run".into(),
                })
            })
        })
        .collect()
}

/// Loads one library alone in this process, reads its manifest and unloads
/// it. Its constructors run here: only for a library that is about to run
/// anyway (`plugins soak`); use [`examine`] to look at one.
pub fn check(path: &Path) -> Result<(Manifest, Unloaded), LoadError> {
    let gen = Generation::load(LoadSpec {
        load_path: path,
        source: None,
        fiber: 0,
        name_hint: "check",
        sink: Arc::new(NullSink),
    })?;
    let manifest = gen.manifest.clone();
    let unloaded = gen.abort();
    Ok((manifest, unloaded))
}

/// Every `*.so` in `dirs` (first directory wins for equal file names).
pub fn libraries(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for d in dirs {
        let Ok(entries) = std::fs::read_dir(d) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "so") && p.is_file())
            .collect();
        files.sort();
        for f in files {
            if let Some(name) = f.file_name().map(|n| n.to_owned()) {
                if seen.insert(name) {
                    out.push(f);
                }
            }
        }
    }
    out
}

/// Figures from a soak run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SoakReport {
    /// Reload cycles run.
    pub cycles: usize,
    /// RSS before the first reload (bytes).
    pub rss_before: u64,
    /// RSS after the last reload (bytes).
    pub rss_after: u64,
    /// Open fds before.
    pub fds_before: usize,
    /// Open fds after.
    pub fds_after: usize,
    /// Threads before.
    pub threads_before: usize,
    /// Threads after.
    pub threads_after: usize,
    /// Unload counters at the end.
    pub stats: crate::host::Stats,
    /// Whether the pthread-key sweep is active in this executable.
    pub key_sweep: bool,
    /// Calls that did not answer as expected.
    pub failed_calls: usize,
    /// Last answer of the probe call.
    pub last_answer: Value,
}

/// Loads `plugin` as one row and reloads it `cycles` times (a fresh file each
/// time, as a rebuild would), calling `probe` (`service.method`) after each.
pub async fn soak(
    plugin: &Path,
    cycles: usize,
    probe: Option<&str>,
    home: &Path,
) -> anyhow::Result<SoakReport> {
    let work = home.join("soak").join(std::process::id().to_string());
    std::fs::create_dir_all(&work)?;
    let (_, name) = {
        let (m, _) = check(plugin)?;
        (m.clone(), m.name)
    };
    let target = work.join(format!("{name}.so"));
    std::fs::copy(plugin, &target)?;
    let host = Host::start(HostConfig {
        home: home.to_owned(),
        plugin_dirs: vec![work.clone()],
        timeouts: Timeouts::default(),
        args: Vec::new(),
        protected: Vec::new(),
        model: None,
        trust: None,
    })?;
    host.apply(Tree {
        rows: vec![ComposedRow {
            row: Row {
                id: name.clone(),
                plugin: name.clone(),
                config: Value::Null,
                disabled: false,
                inject: Vec::new(),
                group: None,
            },
            origin: "soak".into(),
            patched_by: Vec::new(),
        }],
        warnings: Vec::new(),
        skipped: Vec::new(),
        notices: Vec::new(),
    })
    .await;
    let probe = probe.and_then(|p| p.split_once('.'));
    let mut failed_calls = 0;
    let mut last_answer = Value::Null;
    let mut call = async |host: &Host| {
        if let Some((svc, method)) = probe {
            match host.call(svc, method, json!({})).await {
                Ok(v) => last_answer = v,
                Err(_) => failed_calls += 1,
            }
        }
    };
    call(&host).await;
    let rss_before = procfs::rss_bytes();
    let fds_before = procfs::open_fds();
    let threads_before = procfs::threads();
    for _ in 0..cycles {
        let tmp = work.join(format!("{name}.so.tmp"));
        std::fs::copy(plugin, &tmp)?;
        std::fs::rename(&tmp, &target)?;
        host.reload(target.clone()).await;
        call(&host).await;
    }
    let report = SoakReport {
        cycles,
        rss_before,
        rss_after: procfs::rss_bytes(),
        fds_before,
        fds_after: procfs::open_fds(),
        threads_before,
        threads_after: procfs::threads(),
        stats: stats(),
        key_sweep: crate::keys::sweep_active(),
        failed_calls,
        last_answer,
    };
    host.shutdown().await;
    let _ = std::fs::remove_dir_all(&work);
    Ok(report)
}
