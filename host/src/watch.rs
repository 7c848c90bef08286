//! `--watch`: directory watches with debounce. A plugin file replaced means
//! reload, removed means unload; a config file edited means recompose.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{new_debouncer, DebounceEventResult, Debouncer, RecommendedCache};
use tokio::sync::mpsc;

/// What changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A plugin library appeared or was replaced.
    Plugin(PathBuf),
    /// A plugin library disappeared.
    PluginRemoved(PathBuf),
    /// A config layer changed.
    Config(PathBuf),
}

/// Keeps the watches alive.
pub struct Watcher {
    _debouncer: Debouncer<notify::RecommendedWatcher, RecommendedCache>,
}

fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// Watches `plugin_dirs` (non-recursively) and the directories of
/// `config_files`, sending changes to `tx`.
pub fn watch(
    plugin_dirs: &[PathBuf],
    config_files: &[PathBuf],
    debounce: Duration,
    tx: mpsc::UnboundedSender<Change>,
) -> notify::Result<Watcher> {
    let plugin_dirs: Vec<PathBuf> = plugin_dirs
        .iter()
        .filter(|d| d.is_dir())
        .map(|d| d.canonicalize().unwrap_or_else(|_| d.clone()))
        .collect();
    let configs: HashSet<PathBuf> = config_files
        .iter()
        .map(|f| std::path::absolute(f).unwrap_or_else(|_| f.clone()))
        .collect();
    let dirs2 = plugin_dirs.clone();
    let configs2 = configs.clone();
    let mut debouncer = new_debouncer(debounce, None, move |result: DebounceEventResult| {
        let Ok(events) = result else { return };
        let mut paths: Vec<PathBuf> = Vec::new();
        for ev in events {
            if matches!(ev.kind, notify::EventKind::Access(_)) {
                continue;
            }
            for p in &ev.paths {
                if !paths.contains(p) {
                    paths.push(p.clone());
                }
            }
        }
        for p in paths {
            if configs2.contains(&p) {
                let _ = tx.send(Change::Config(p));
                continue;
            }
            let in_plugin_dir = p.parent().is_some_and(|d| dirs2.iter().any(|x| x == d));
            if !in_plugin_dir || p.extension().is_none_or(|e| e != "so") {
                continue;
            }
            if p.exists() {
                if is_elf(&p) {
                    let _ = tx.send(Change::Plugin(p));
                } else {
                    // Not (yet) a library: let the loader report it.
                    let _ = tx.send(Change::Plugin(p));
                }
            } else {
                let _ = tx.send(Change::PluginRemoved(p));
            }
        }
    })?;
    let mut watched = HashSet::new();
    for d in &plugin_dirs {
        if watched.insert(d.clone()) {
            debouncer.watch(d, RecursiveMode::NonRecursive)?;
        }
    }
    for f in &configs {
        if let Some(d) = f.parent() {
            if d.is_dir() && watched.insert(d.to_owned()) {
                debouncer.watch(d, RecursiveMode::NonRecursive)?;
            }
        }
    }
    Ok(Watcher {
        _debouncer: debouncer,
    })
}
