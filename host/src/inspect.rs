//! `plugins check`, `plugins list` and `plugins soak`: looking at libraries
//! without running a profile.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_abi::Envelope;
use dsh_wire::Manifest;
use serde_json::{json, Value};

use crate::config::{ComposedRow, Row, Tree};
use crate::host::{stats, Host, HostConfig};
use crate::loader::{GenCtx, Generation, LoadError, LoadSpec, Sink, Unloaded};
use crate::procfs;
use crate::supervisor::Timeouts;

/// A sink for generations that never run their actor.
struct NullSink;

impl Sink for NullSink {
    fn deliver(&self, _: &GenCtx, _: &Envelope) -> i32 {
        -1
    }
    fn log(&self, _: &GenCtx, _: u8, _: &str, _: &str) {}
    fn exited(&self, _: u64, _: i32) {}
}

/// Loads one library alone, reads its manifest and unloads it.
pub fn check(path: &Path) -> Result<(Manifest, Unloaded), LoadError> {
    let gen = Generation::load(LoadSpec {
        load_path: path,
        is_copy: false,
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
