//! Fiber lifecycle: one serialized owner of every state transition.
//!
//! A fiber (one row applied with its config) starts when every service it
//! injects is active; its dependents are disposed before it leaves and
//! restart when a provider returns or is replaced; a failing apply rolls back
//! what it registered and leaves the fiber failed with the error visible.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_wire::Manifest;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::config::{inject_cycles, interpolate_env, Row, Tree};
use crate::loader::{FileId, Generation, LoadError, LoadSpec, Unloaded};
use crate::report::{Level, Reports};
use crate::router::{FiberId, HostReply, Lifecycle, Router, RouterEvent};
use crate::staging::Staging;

/// The lifecycle state of a row's fiber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FiberState {
    /// Waiting for injected services (or for its library).
    Pending,
    /// Applying.
    Loading,
    /// Applied and serving.
    Active,
    /// Failed; the error says why.
    Failed,
    /// Being disposed.
    Unloading,
    /// Disabled in the configuration.
    Disabled,
}

/// What `status` reports per row.
#[derive(Debug, Clone, Serialize)]
pub struct FiberStatus {
    /// Row id.
    pub id: String,
    /// Plugin name.
    pub plugin: String,
    /// Current fiber id (changes on reload).
    pub fiber: FiberId,
    /// State.
    pub state: FiberState,
    /// The last error.
    pub error: Option<String>,
    /// Library path in use.
    pub path: Option<PathBuf>,
    /// Plugin version.
    pub version: Option<String>,
    /// Services it provides.
    pub provides: Vec<String>,
    /// Services it waits for that are not active.
    pub waiting_for: Vec<String>,
    /// How many generations of this row were loaded.
    pub generations: u64,
}

/// Timeouts of lifecycle steps.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// Max time for `apply`.
    pub apply: Duration,
    /// Max time for a dispose.
    pub dispose: Duration,
    /// Max time for the actor thread to end after STOP.
    pub stop: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            apply: Duration::from_secs(30),
            dispose: Duration::from_secs(5),
            stop: Duration::from_secs(5),
        }
    }
}

/// Commands accepted by the supervisor task.
pub enum Command {
    /// Reconcile to a new tree.
    Apply(Tree, oneshot::Sender<()>),
    /// A plugin file changed: reload every row using it.
    Reload(PathBuf, oneshot::Sender<()>),
    /// A plugin file disappeared: unload every row using it.
    Remove(PathBuf, oneshot::Sender<()>),
    /// Report the state of every row.
    Status(oneshot::Sender<Vec<FiberStatus>>),
    /// Dispose everything.
    Shutdown(oneshot::Sender<()>),
}

struct Slot {
    row: Row,
    state: FiberState,
    error: Option<String>,
    path: Option<PathBuf>,
    gen: Option<Generation>,
    fiber: FiberId,
    generations: u64,
    /// The state the last disposed generation handed over: (its plugin's
    /// name, the state as JSON text), for the next generation of the row.
    handoff: Option<(String, String)>,
}

impl Slot {
    fn manifest(&self) -> Option<&Manifest> {
        self.gen.as_ref().map(|g| &g.manifest)
    }

    fn injects(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .manifest()
            .map(|m| m.inject.clone())
            .unwrap_or_default();
        for s in &self.row.inject {
            if !v.contains(s) {
                v.push(s.clone());
            }
        }
        v
    }
}

/// A library being loaded on a blocking thread.
struct PendingLoad {
    source: PathBuf,
    staged: crate::staging::Staged,
    task: tokio::task::JoinHandle<Result<Generation, LoadError>>,
}

/// Owns every slot; runs as one task.
pub struct Supervisor {
    router: Arc<Router>,
    reports: Reports,
    plugin_dirs: Vec<PathBuf>,
    timeouts: Timeouts,
    staging: Staging,
    slots: Vec<Slot>,
    next_fiber: FiberId,
    builtins: Vec<String>,
    /// Loads started and not finished (their keys are not created yet).
    loading: usize,
}

/// Why the supervisor could not bring a fiber up or down.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SupervisorError {
    /// A row names a plugin file by path and there is none.
    #[error("plugin file {0} does not exist")]
    NoSuchFile(String),
    /// A row names a plugin that no plugin directory holds.
    #[error("plugin `{name}` not found (looked for {candidates} in: {searched})")]
    NotFound {
        /// The row's plugin.
        name: String,
        /// The file names tried.
        candidates: String,
        /// The directories searched.
        searched: String,
    },
    /// A lifecycle request got no answer in time.
    #[error("no answer within {0} ms")]
    NoAnswer(u128),
    /// The generation went away before answering.
    #[error("the plugin went away")]
    Gone,
    /// The plugin answered with an error (or registered something the
    /// router refused).
    #[error("{0}")]
    Refused(String),
}

/// Resolves a row's plugin to a file in the plugin directories.
pub fn resolve_plugin(name: &str, dirs: &[PathBuf]) -> Result<PathBuf, SupervisorError> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(SupervisorError::NoSuchFile(name.to_owned()))
        };
    }
    let snake = name.replace('-', "_");
    let candidates = [
        format!("lib{snake}.so"),
        format!("libdsh_plugin_{snake}.so"),
        format!("{name}.so"),
    ];
    for dir in dirs {
        for c in &candidates {
            let p = dir.join(c);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    let searched = if dirs.is_empty() {
        "(no plugin directories)".to_owned()
    } else {
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(SupervisorError::NotFound {
        name: name.to_owned(),
        candidates: candidates.join(", "),
        searched,
    })
}

async fn first_reply(
    mut rx: mpsc::UnboundedReceiver<HostReply>,
    timeout: Duration,
) -> Result<Value, SupervisorError> {
    match tokio::time::timeout(timeout, rx.recv()).await {
        Ok(Some(r)) => r
            .result()
            .map_err(|e| SupervisorError::Refused(e.to_string())),
        Ok(None) => Err(SupervisorError::Gone),
        Err(_) => Err(SupervisorError::NoAnswer(timeout.as_millis())),
    }
}

impl Supervisor {
    /// A supervisor with no rows.
    pub fn new(
        router: Arc<Router>,
        reports: Reports,
        plugin_dirs: Vec<PathBuf>,
        timeouts: Timeouts,
        staging: Staging,
        builtins: Vec<String>,
    ) -> Self {
        Supervisor {
            router,
            reports,
            plugin_dirs,
            timeouts,
            staging,
            slots: Vec::new(),
            next_fiber: 1,
            builtins,
            loading: 0,
        }
    }

    /// Runs until `Shutdown`.
    pub async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut events: mpsc::UnboundedReceiver<RouterEvent>,
    ) {
        loop {
            tokio::select! {
                cmd = commands.recv() => match cmd {
                    None => { self.shutdown().await; return; }
                    Some(Command::Apply(tree, done)) => { self.apply(tree).await; let _ = done.send(()); }
                    Some(Command::Reload(path, done)) => { self.reload(&path).await; let _ = done.send(()); }
                    Some(Command::Remove(path, done)) => { self.remove(&path).await; let _ = done.send(()); }
                    Some(Command::Status(tx)) => { let _ = tx.send(self.status()); }
                    Some(Command::Shutdown(done)) => { self.shutdown().await; let _ = done.send(()); return; }
                },
                Some(ev) = events.recv() => match ev {
                    RouterEvent::Crashed { fiber, code } => self.crashed(fiber, code).await,
                },
            }
        }
    }

    fn status(&self) -> Vec<FiberStatus> {
        self.slots
            .iter()
            .map(|s| FiberStatus {
                id: s.row.id.clone(),
                plugin: s.row.plugin.clone(),
                fiber: s.fiber,
                state: s.state,
                error: s.error.clone(),
                path: s.path.clone(),
                version: s.manifest().map(|m| m.version.clone()),
                provides: s.manifest().map(|m| m.provides.clone()).unwrap_or_default(),
                waiting_for: if s.state == FiberState::Pending {
                    s.injects()
                        .into_iter()
                        .filter(|i| !self.service_ready(i))
                        .collect()
                } else {
                    Vec::new()
                },
                generations: s.generations,
            })
            .collect()
    }

    fn service_ready(&self, name: &str) -> bool {
        self.builtins.iter().any(|b| b == name) || self.router.service_active(name)
    }

    fn fail(&mut self, i: usize, error: String) {
        let s = &mut self.slots[i];
        self.reports.push(Level::Error, &s.row.id, error.clone());
        s.state = FiberState::Failed;
        s.error = Some(error);
    }

    /// Reconciles rows by id: only changed rows restart. The tree's
    /// warnings are recorded, not logged: whoever composed the tree said
    /// them (the CLI, once per composition).
    async fn apply(&mut self, tree: Tree) {
        for w in &tree.warnings {
            self.reports.record(Level::Warn, "config", w.clone());
        }
        if let Some(e) = crate::limits::too_many_rows(&tree) {
            self.reports.push(
                Level::Error,
                "config",
                format!("configuration refused, nothing changed: {e}"),
            );
            return;
        }
        let wanted: HashMap<&str, &Row> = tree
            .rows
            .iter()
            .map(|r| (r.row.id.as_str(), &r.row))
            .collect();
        // Remove rows that vanished or changed (dependents go first, inside
        // `unload`).
        let mut i = 0;
        while i < self.slots.len() {
            let keep = wanted
                .get(self.slots[i].row.id.as_str())
                .is_some_and(|r| **r == self.slots[i].row);
            if keep {
                i += 1;
            } else {
                self.unload(i, "was removed from the configuration").await;
                self.slots.remove(i);
            }
        }
        // Add new rows, in tree order.
        let mut ordered = Vec::with_capacity(tree.rows.len());
        for r in &tree.rows {
            match self.slots.iter().position(|s| s.row.id == r.row.id) {
                Some(pos) => ordered.push(pos),
                None => {
                    self.slots.push(Slot {
                        row: r.row.clone(),
                        state: if r.row.disabled {
                            FiberState::Disabled
                        } else {
                            FiberState::Pending
                        },
                        error: None,
                        path: None,
                        gen: None,
                        fiber: 0,
                        generations: 0,
                        handoff: None,
                    });
                    ordered.push(self.slots.len() - 1);
                }
            }
        }
        let mut slots: Vec<Option<Slot>> = std::mem::take(&mut self.slots)
            .into_iter()
            .map(Some)
            .collect();
        self.slots = ordered
            .into_iter()
            .filter_map(|i| slots[i].take())
            .collect();
        // Load every new library concurrently, then install in row order.
        let mut loads = Vec::new();
        for i in 0..self.slots.len() {
            if self.slots[i].state != FiberState::Pending || self.slots[i].gen.is_some() {
                continue;
            }
            match resolve_plugin(&self.slots[i].row.plugin, &self.plugin_dirs) {
                Err(e) => self.fail(i, e.to_string()),
                Ok(path) => match self.start_load(i, &path) {
                    Ok(p) => loads.push((i, p)),
                    Err(e) => self.fail(i, e.to_string()),
                },
            }
        }
        for (i, pending) in loads {
            let path = pending.source.clone();
            match self.finish_load(pending).await {
                Ok(gen) => self.install(i, gen, path),
                Err(e) => self.fail(i, e.to_string()),
            }
        }
        self.check_cycles();
        self.settle().await;
    }

    async fn load_generation(&mut self, i: usize, path: &Path) -> Result<Generation, LoadError> {
        let pending = self.start_load(i, path)?;
        self.finish_load(pending).await
    }

    /// Reserves a private copy and starts loading on a blocking thread.
    fn start_load(&mut self, i: usize, path: &Path) -> Result<PendingLoad, LoadError> {
        if let Some(left) = crate::keys::headroom() {
            if let Some(reason) = crate::limits::too_few_keys(left, self.loading) {
                return Err(LoadError::Limit {
                    path: path.to_owned(),
                    reason,
                });
            }
        }
        self.loading += 1;
        let fiber = self.next_fiber;
        self.next_fiber += 1;
        let staged = self.staging.prepare(path);
        let sink: Arc<dyn crate::loader::Sink> = self.router.clone();
        let name = self.slots[i].row.plugin.clone();
        let plan = staged.clone();
        let task = tokio::task::spawn_blocking(move || {
            // Every generation runs from a copy of its own: `cp` over the
            // source cannot change the code under it.
            let source = plan.materialize().map_err(|e| LoadError::Open {
                path: plan.source.clone(),
                reason: e.to_string(),
            })?;
            Generation::load(LoadSpec {
                load_path: &plan.path,
                source: Some(source),
                fiber,
                name_hint: &name,
                sink,
            })
        });
        Ok(PendingLoad {
            source: path.to_owned(),
            staged,
            task,
        })
    }

    async fn finish_load(&mut self, pending: PendingLoad) -> Result<Generation, LoadError> {
        let PendingLoad {
            source,
            staged,
            task,
        } = pending;
        let result = task.await.unwrap_or_else(|e| {
            Err(LoadError::Thread {
                path: source.clone(),
                reason: e.to_string(),
            })
        });
        self.loading = self.loading.saturating_sub(1);
        if result.is_err() {
            self.staging.release(&staged.path);
        }
        result
    }

    fn install(&mut self, i: usize, mut gen: Generation, path: PathBuf) {
        let fiber = gen.ctx().fiber;
        self.router
            .register_fiber(fiber, &gen.manifest.name, gen.inbox.clone());
        gen.start();
        let s = &mut self.slots[i];
        s.fiber = fiber;
        s.gen = Some(gen);
        s.path = Some(path);
        s.state = FiberState::Pending;
        s.error = None;
        s.generations += 1;
    }

    fn check_cycles(&mut self) {
        let rows: Vec<(String, Vec<String>, Vec<String>)> = self
            .slots
            .iter()
            .filter(|s| s.gen.is_some())
            .map(|s| {
                (
                    s.row.id.clone(),
                    s.manifest().map(|m| m.provides.clone()).unwrap_or_default(),
                    s.injects(),
                )
            })
            .collect();
        let cycles = inject_cycles(&rows);
        for i in 0..self.slots.len() {
            if let Some(msg) = cycles.get(&self.slots[i].row.id) {
                if self.slots[i].state == FiberState::Pending {
                    self.fail(i, msg.clone());
                }
            }
        }
    }

    /// Starts every pending fiber whose injects are active, until no more
    /// can start.
    async fn settle(&mut self) {
        loop {
            let next = (0..self.slots.len()).find(|&i| {
                let s = &self.slots[i];
                s.state == FiberState::Pending
                    && s.gen.is_some()
                    && s.injects().iter().all(|n| self.service_ready(n))
            });
            let Some(i) = next else { return };
            self.activate(i).await;
        }
    }

    async fn activate(&mut self, i: usize) {
        let fiber = self.slots[i].fiber;
        self.slots[i].state = FiberState::Loading;
        let config = interpolate_env(&self.slots[i].row.config);
        let inherited = self.slots[i].handoff.take().and_then(|(plugin, state)| {
            // Only a generation of the same plugin inherits the state.
            (self.slots[i].manifest().map(|m| m.name.as_str()) == Some(plugin.as_str()))
                .then_some(state)
        });
        let rx = self
            .router
            .request(fiber, Lifecycle::Apply(config.to_string(), inherited));
        let mut result = first_reply(rx, self.timeouts.apply).await.map(|_| ());
        let rejected = self.router.take_rejections(fiber);
        if result.is_ok() && !rejected.is_empty() {
            result = Err(SupervisorError::Refused(rejected.join("; ")));
        }
        match result {
            Ok(()) => {
                self.router.set_active(fiber, true);
                let s = &mut self.slots[i];
                s.state = FiberState::Active;
                s.error = None;
                let id = s.row.id.clone();
                self.reports
                    .push(Level::Info, &id, format!("active (generation {fiber})"));
            }
            Err(e) => {
                // Roll back what the apply registered.
                let rx = self.router.request(fiber, Lifecycle::Dispose);
                let _ = first_reply(rx, self.timeouts.dispose).await;
                self.router.forget_fiber(fiber, "failed to apply");
                let plugin = self.slots[i].row.plugin.clone();
                self.fail(i, format!("apply of `{plugin}` failed: {e}"));
            }
        }
    }

    /// Disposes fiber `i` (dependents first); it ends Pending.
    async fn deactivate(&mut self, i: usize, reason: &str) {
        if !matches!(
            self.slots[i].state,
            FiberState::Active | FiberState::Loading
        ) {
            return;
        }
        let fiber = self.slots[i].fiber;
        self.slots[i].state = FiberState::Unloading;
        let provided = self.router.services_of(fiber);
        // Dependents first: they may still call the provider while they
        // dispose (its routes stay until it is disposed itself).
        let dependents: Vec<usize> = (0..self.slots.len())
            .filter(|&j| j != i)
            .filter(|&j| self.slots[j].injects().iter().any(|s| provided.contains(s)))
            .collect();
        for j in dependents {
            let why = format!("its provider `{}` {reason}", self.slots[i].row.id);
            Box::pin(self.deactivate(j, &why)).await;
        }
        self.router.set_active(fiber, false);
        let rx = self.router.request(fiber, Lifecycle::Dispose);
        match first_reply(rx, self.timeouts.dispose).await {
            Ok(Value::Null) => {}
            Ok(state) => {
                let plugin = self.slots[i].manifest().map(|m| m.name.clone());
                self.slots[i].handoff = plugin.map(|p| (p, state.to_string()));
            }
            Err(e) => {
                let id = self.slots[i].row.id.clone();
                self.reports.push(
                    Level::Error,
                    &id,
                    format!("dispose failed ({e}); continuing"),
                );
            }
        }
        self.router.forget_fiber(fiber, reason);
        let s = &mut self.slots[i];
        if s.state == FiberState::Unloading {
            s.state = FiberState::Pending;
        }
    }

    /// Stops slot `i`'s generation and unloads its library.
    async fn unload(&mut self, i: usize, reason: &str) {
        self.deactivate(i, reason).await;
        let Some(gen) = self.slots[i].gen.take() else {
            return;
        };
        self.finish(gen).await;
    }

    async fn finish(&mut self, gen: Generation) {
        let fiber = gen.ctx().fiber;
        let name = gen.manifest.name.clone();
        let load_path = gen.load_path.clone();
        self.router.stop(fiber);
        let timeout = self.timeouts.stop;
        let outcome = tokio::task::spawn_blocking(move || gen.finish(timeout))
            .await
            .unwrap_or_else(|e| Unloaded::Quarantined {
                reason: format!("unload task failed: {e}"),
            });
        self.router.unregister_fiber(fiber);
        match &outcome {
            Unloaded::Unmapped { .. } => {
                self.staging.release(&load_path);
                self.reports
                    .push(Level::Info, &name, format!("generation {fiber} {outcome}"));
            }
            // A copy still mapped stays (its directory goes at exit).
            Unloaded::Pinned { .. } => {
                self.reports
                    .push(Level::Warn, &name, format!("generation {fiber} {outcome}"));
            }
            Unloaded::Quarantined { .. } => {
                self.reports
                    .push(Level::Error, &name, format!("generation {fiber} {outcome}"));
            }
        }
    }

    /// Hot reload: load N+1 completely; keep N when that fails; otherwise
    /// dispose N (dependents first) and activate N+1.
    async fn reload(&mut self, path: &Path) {
        let users: Vec<usize> = (0..self.slots.len())
            .filter(|&i| {
                let s = &self.slots[i];
                // Rows served from this file, and rows that now resolve to
                // it (a file dropped into a more specific plugin directory).
                s.state != FiberState::Disabled
                    && (s.path.as_deref() == Some(path)
                        || resolve_plugin(&s.row.plugin, &self.plugin_dirs)
                            .ok()
                            .as_deref()
                            == Some(path))
            })
            .collect();
        for i in users {
            if let (Some(gen), Ok(id)) = (&self.slots[i].gen, FileId::of(path)) {
                if self.slots[i].path.as_deref() == Some(path) && gen.source == Some(id) {
                    continue; // copied from this very file, unchanged since
                }
            }
            match self.load_generation(i, path).await {
                Err(e) => {
                    let id = self.slots[i].row.id.clone();
                    let keep = if self.slots[i].gen.is_some() {
                        "; the running generation keeps serving"
                    } else {
                        ""
                    };
                    self.reports
                        .push(Level::Error, &id, format!("reload refused: {e}{keep}"));
                    if self.slots[i].gen.is_none() {
                        self.fail(i, e.to_string());
                    }
                }
                Ok(gen) => {
                    if self.slots[i].gen.is_some() {
                        self.unload(i, "is being replaced").await;
                    }
                    self.install(i, gen, path.to_owned());
                    self.reports.push(
                        Level::Info,
                        &self.slots[i].row.id.clone(),
                        format!("reloaded from {}", path.display()),
                    );
                }
            }
        }
        self.check_cycles();
        self.settle().await;
    }

    async fn remove(&mut self, path: &Path) {
        let users: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].path.as_deref() == Some(path) && self.slots[i].gen.is_some())
            .collect();
        for i in users {
            self.unload(i, "lost its library file").await;
            let s = &mut self.slots[i];
            s.state = FiberState::Pending;
            s.error = Some(format!("plugin file {} was removed", path.display()));
            let id = s.row.id.clone();
            self.reports.push(
                Level::Warn,
                &id,
                format!("unloaded: {} was removed", path.display()),
            );
        }
        self.settle().await;
    }

    async fn crashed(&mut self, fiber: FiberId, code: i32) {
        let Some(i) = self
            .slots
            .iter()
            .position(|s| s.fiber == fiber && s.gen.is_some())
        else {
            return;
        };
        let plugin = self.slots[i].row.plugin.clone();
        // Its services are gone: dispose dependents, drop its routes.
        if matches!(
            self.slots[i].state,
            FiberState::Active | FiberState::Loading
        ) {
            self.router.set_active(fiber, false);
            let provided = self.router.services_of(fiber);
            let dependents: Vec<usize> = (0..self.slots.len())
                .filter(|&j| j != i && self.slots[j].injects().iter().any(|s| provided.contains(s)))
                .collect();
            for j in dependents {
                self.deactivate(j, "lost its provider").await;
            }
        }
        self.router.forget_fiber(fiber, "crashed");
        if let Some(gen) = self.slots[i].gen.take() {
            self.finish(gen).await;
        }
        self.fail(
            i,
            format!("plugin `{plugin}` stopped unexpectedly (actor exit code {code})"),
        );
    }

    /// Disposes every fiber (dependents first) and unloads every library.
    async fn shutdown(&mut self) {
        // Reverse order: later rows tend to depend on earlier ones; the
        // dependency walk in `deactivate` covers the rest.
        for i in (0..self.slots.len()).rev() {
            self.unload(i, "is shutting down").await;
        }
        self.slots.clear();
    }
}
