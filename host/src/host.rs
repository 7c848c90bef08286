//! `Host`: the handle the CLI and the test kit use to run plugins.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use dsh_wire::host_service as host_methods;
use dsh_wire::{codes, Error, Mode};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use crate::config::Tree;
use crate::loader::STATS;
use crate::report::{Report, Reports};
use crate::router::{Builtin, HostInner, HostReply, Router};
use crate::staging::Staging;
use crate::supervisor::{Command, FiberStatus, Supervisor, Timeouts};

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
}

/// A running host. Cheap to clone.
#[derive(Clone)]
pub struct Host {
    router: Arc<Router>,
    reports: Reports,
    commands: mpsc::UnboundedSender<Command>,
    exit: Arc<tokio::sync::watch::Sender<Option<i32>>>,
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
    pub fn start(config: HostConfig) -> anyhow::Result<Host> {
        crate::paths::create_private_dir(&config.home)
            .with_context(|| format!("cannot create {}", config.home.display()))?;
        let reports = Reports::default();
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (exit_tx, _) = tokio::sync::watch::channel(None);
        let exit = Arc::new(exit_tx);
        let mut builtins: HashMap<String, Builtin> = HashMap::new();
        let args = config.args.clone();
        let home = config.home.clone();
        let mut protected = vec![home.clone()];
        protected.extend(config.protected.iter().cloned());
        let exit2 = exit.clone();
        builtins.insert(
            host_methods::NAME.into(),
            Arc::new(move |method, params, _caller| match method {
                host_methods::ARGS => Ok(json!(args)),
                host_methods::EXIT => {
                    let code = params.get("code").and_then(Value::as_i64).unwrap_or(0);
                    exit2.send_replace(Some(code as i32));
                    Ok(Value::Null)
                }
                host_methods::INFO => Ok(json!({
                    "home": home,
                    "protected": protected,
                    "cwd": std::env::current_dir().ok(),
                    "version": env!("CARGO_PKG_VERSION"),
                    "pid": std::process::id(),
                })),
                host_methods::STATS => Ok(json!(stats())),
                host_methods::PRINT | host_methods::EPRINT => {
                    use std::io::Write;
                    let text = params
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let result = if method == host_methods::PRINT {
                        let mut out = std::io::stdout().lock();
                        out.write_all(text.as_bytes()).and_then(|_| out.flush())
                    } else {
                        std::io::stderr().lock().write_all(text.as_bytes())
                    };
                    result
                        .map(|_| Value::Null)
                        .map_err(|e| Error::msg(e.to_string()))
                }
                other => Err(Error::new(
                    codes::UNKNOWN_METHOD,
                    format!("service `{}` has no method `{other}`", host_methods::NAME),
                )),
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
        let (commands, commands_rx) = mpsc::unbounded_channel();
        tokio::spawn(supervisor.run(commands_rx, events_rx));
        Ok(Host {
            router,
            reports,
            commands,
            exit,
        })
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

    /// Disposes everything and unloads every library.
    pub async fn shutdown(&self) {
        self.command(Command::Shutdown).await;
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
