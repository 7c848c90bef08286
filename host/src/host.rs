//! `Host`: the handle the CLI and the test kit use to run plugins.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use dsh_wire::host_service::{self as host_methods, Info};
use dsh_wire::{codes, Error, Mode};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::config::Tree;
use crate::host_service::{HostService, Output};
use crate::loader::STATS;
use crate::report::{Report, Reports};
use crate::router::{Builtin, HostInner, HostReply, Router};
use crate::staging::Staging;
use crate::supervisor::{Command, FiberStatus, Supervisor, Timeouts};
use crate::terminal::Terminal;

/// How to start a host.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// `$DSH_HOME`.
    pub home: PathBuf,
    /// Plugin directories, most specific first.
    pub plugin_dirs: Vec<PathBuf>,
    /// Lifecycle timeouts.
    pub timeouts: Timeouts,
    /// Arguments for the app (served by the `host` service).
    pub args: Vec<String>,
    /// The harness's own files besides `$DSH_HOME` (installation plugins
    /// and profiles, layer files): no tool may change them (`host.info`
    /// lists them with the home as `protected`).
    pub protected: Vec<PathBuf>,
    /// `--model` of this run (`host.info`'s `model`): the model every app
    /// starts on, not saved.
    pub model: Option<String>,
    /// A project a front end may trust (`host.trustProject`).
    pub trust: Option<TrustOffer>,
}

/// A project whose servers were not started for want of trust, offered
/// to front ends (`host.info`'s `untrustedProject`).
#[derive(Debug, Clone)]
pub struct TrustOffer {
    /// The project and its servers.
    pub project: dsh_wire::host_service::UntrustedProject,
    /// What trusting it approves (every server as shown).
    pub pins: crate::trust::Pins,
    /// Told the trust record changed once the project is trusted, so the
    /// tree is composed again and the servers start.
    pub recompose: mpsc::UnboundedSender<crate::Change>,
}

/// The project offered for trust, shared by the host (which replaces it
/// at every composition) and its service (which answers it).
pub type Offer = Arc<std::sync::Mutex<Option<TrustOffer>>>;

/// A running host. Cheap to clone.
#[derive(Clone)]
pub struct Host {
    router: Arc<Router>,
    reports: Reports,
    commands: mpsc::UnboundedSender<Command>,
    exit: Arc<tokio::sync::watch::Sender<Option<i32>>>,
    terminal: Terminal,
    trust: Offer,
}

/// Unload counters (see [`crate::loader::UnloadStats`]).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Stats {
    /// Generations loaded.
    pub loaded: u64,
    /// Generations verified unmapped.
    pub unmapped: u64,
    /// Generations still mapped after dlclose.
    pub pinned: u64,
    /// Generations never closed.
    pub quarantined: u64,
    /// pthread keys swept.
    pub keys_swept: u64,
}

/// Counters of the whole process.
pub fn stats() -> Stats {
    use std::sync::atomic::Ordering::Relaxed;
    Stats {
        loaded: STATS.loaded.load(Relaxed),
        unmapped: STATS.unmapped.load(Relaxed),
        pinned: STATS.pinned.load(Relaxed),
        quarantined: STATS.quarantined.load(Relaxed),
        keys_swept: STATS.keys_swept.load(Relaxed),
    }
}

/// The items of a streaming call.
pub struct HostStream(mpsc::UnboundedReceiver<HostReply>);

impl HostStream {
    /// The next item; `None` at the end. An error ends the stream.
    pub async fn next(&mut self) -> Option<Result<Value, Error>> {
        let reply = self.0.recv().await?;
        if reply.is_final() {
            self.0.close();
            return match reply.result() {
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            };
        }
        Some(reply.result())
    }
}

async fn final_reply(mut rx: mpsc::UnboundedReceiver<HostReply>) -> Result<Value, Error> {
    let mut items = Vec::new();
    while let Some(r) = rx.recv().await {
        if r.is_final() {
            let v = r.result()?;
            return Ok(if items.is_empty() {
                v
            } else {
                Value::Array(items)
            });
        }
        if let Ok(v) = r.result() {
            items.push(v);
        }
    }
    Err(Error::new(codes::DISPOSED, "the call was abandoned"))
}

impl Host {
    /// Starts a host with no rows. Must be called inside a tokio runtime.
    pub fn start(mut config: HostConfig) -> anyhow::Result<Host> {
        crate::paths::create_private_dir(&config.home)
            .with_context(|| format!("cannot create {}", config.home.display()))?;
        let reports = Reports::default();
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (exit_tx, _) = tokio::sync::watch::channel(None);
        let exit = Arc::new(exit_tx);
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let terminal = Terminal::process();
        let trust: Offer = Arc::new(std::sync::Mutex::new(config.trust.take()));
        let service = HostService {
            args: config.args.clone(),
            info: Info {
                home: config.home.display().to_string(),
                protected: std::iter::once(&config.home)
                    .chain(&config.protected)
                    .map(|p| p.display().to_string())
                    .collect(),
                cwd: None,
                version: env!("CARGO_PKG_VERSION").to_owned(),
                pid: std::process::id(),
                model: config.model.clone(),
                untrusted_project: None,
            },
            home: config.home.clone(),
            trust: trust.clone(),
            exit: exit.clone(),
            terminal: terminal.clone(),
            commands: commands.clone(),
            runtime: tokio::runtime::Handle::current(),
            output: Output::start().context("cannot start the output thread")?,
        };
        let mut builtins: HashMap<String, Builtin> = HashMap::new();
        builtins.insert(
            host_methods::NAME.into(),
            Arc::new(move |method, params, _caller, responder| {
                service.call(method, params, responder)
            }),
        );
        let builtin_names: Vec<String> = builtins.keys().cloned().collect();
        let router = Arc::new(Router::new(reports.clone(), events_tx, builtins));
        let state = config.home.join("state");
        let staging = Staging::new(&state)
            .with_context(|| format!("cannot prepare {} for private copies", state.display()))?;
        let supervisor = Supervisor::new(
            router.clone(),
            reports.clone(),
            config.plugin_dirs.clone(),
            config.timeouts,
            staging,
            builtin_names,
        );
        tokio::spawn(supervisor.run(commands_rx, events_rx));
        Ok(Host {
            router,
            reports,
            commands,
            exit,
            terminal,
            trust,
        })
    }

    /// Replaces the project offered for trust (after a composition: a
    /// server added to a trusted project's file is offered anew; a
    /// project now trusted is offered no more).
    pub fn offer_trust(&self, offer: Option<TrustOffer>) {
        *self
            .trust
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = offer;
    }

    async fn command<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        self.commands.send(make(tx)).ok()?;
        rx.await.ok()
    }

    /// Reconciles to `tree` and waits until every row settled.
    pub async fn apply(&self, tree: Tree) {
        self.command(|tx| Command::Apply(tree, tx)).await;
    }

    /// Reloads every row that uses the plugin file at `path`.
    pub async fn reload(&self, path: PathBuf) {
        self.command(|tx| Command::Reload(path, tx)).await;
    }

    /// Unloads every row that uses the plugin file at `path`.
    pub async fn remove(&self, path: PathBuf) {
        self.command(|tx| Command::Remove(path, tx)).await;
    }

    /// The state of every row.
    pub async fn status(&self) -> Vec<FiberStatus> {
        self.command(Command::Status).await.unwrap_or_default()
    }

    /// Disposes everything and unloads every library, then puts the
    /// terminal back the way the host found it.
    pub async fn shutdown(&self) {
        self.command(Command::Shutdown).await;
        self.terminal.restore();
    }

    /// Puts the terminal back the way the host found it (raw mode off).
    pub fn restore_terminal(&self) {
        self.terminal.restore();
    }

    /// Everything reported so far.
    pub fn reports(&self) -> Vec<Report> {
        self.reports.all()
    }

    /// Resolves when an app asked the host to exit (through the `host`
    /// service), with the requested code.
    pub async fn exit_requested(&self) -> i32 {
        let mut rx = self.exit.subscribe();
        loop {
            if let Some(code) = *rx.borrow_and_update() {
                return code;
            }
            if rx.changed().await.is_err() {
                return 0;
            }
        }
    }

    /// Calls `service.method(params)`.
    pub async fn call(&self, service: &str, method: &str, params: Value) -> Result<Value, Error> {
        final_reply(self.router.host_call(service, method, &params)).await
    }

    /// Calls a streaming method.
    pub fn call_stream(&self, service: &str, method: &str, params: Value) -> HostStream {
        HostStream(self.router.host_call(service, method, &params))
    }

    /// Fires `event` (scoped to `scope` when not empty).
    pub fn emit(&self, event: &str, scope: &str, payload: Value) {
        drop(
            self.router
                .host_dispatch(Mode::Emit, event, scope, &payload, None),
        );
    }

    /// Serial dispatch: the first non-null listener result.
    pub async fn serial(&self, event: &str, scope: &str, payload: Value) -> Result<Value, Error> {
        final_reply(
            self.router
                .host_dispatch(Mode::Serial, event, scope, &payload, None),
        )
        .await
    }

    /// Parallel dispatch.
    pub async fn parallel(&self, event: &str, scope: &str, payload: Value) -> Result<(), Error> {
        final_reply(
            self.router
                .host_dispatch(Mode::Parallel, event, scope, &payload, None),
        )
        .await
        .map(|_| ())
    }

    /// Waterfall dispatch with `inner` as the default.
    pub async fn waterfall(
        &self,
        event: &str,
        scope: &str,
        payload: Value,
        inner: HostInner,
    ) -> Result<Value, Error> {
        final_reply(
            self.router
                .host_dispatch(Mode::Waterfall, event, scope, &payload, Some(inner)),
        )
        .await
    }
}
