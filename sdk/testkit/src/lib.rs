//! `dsh-testkit`: run plugins in a real `dsh-host` inside a test.
//!
//! ```ignore
//! #[tokio::test]
//! async fn answers() {
//!     let t = dsh_testkit::TestHost::start().await;
//!     t.apply(r#"
//!         [[row]]
//!         id = "counter"
//!         plugin = "counter"
//!     "#).await;
//!     assert_eq!(t.host.call("counter", "get", json!({})).await.unwrap(), json!(1));
//! }
//! ```
//!
//! Plugins are found in the cargo target directory of the test binary
//! (`target/debug`), so `cargo build` the plugin crates before `cargo test`,
//! then in the plugins of a staged tree ([`stage`]): a plugin crate outside
//! this repository tests its own fresh build against the host's real
//! plugins as `cargo xtask build` staged them.
#![deny(missing_docs)]

pub mod agent;
pub mod contracts;
pub mod fake_anthropic;
pub mod fake_llm;
pub mod fake_responses;
pub mod fixtures;
pub mod headless;
pub mod measure;
pub mod msg;
pub mod session;
pub mod tools;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dsh_host::{compose, parse_layer, FiberStatus, Report, Timeouts, Tree};
pub use dsh_host::{Host, HostConfig};

/// A temporary directory removed on drop.
pub struct TempDir(PathBuf);

static SEQ: AtomicU64 = AtomicU64::new(0);

impl TempDir {
    /// Creates a fresh directory under the system temp dir.
    pub fn new(label: &str) -> TempDir {
        TempDir::new_in(&std::env::temp_dir(), label)
    }

    /// Creates a fresh directory under `base` (for a path outside the
    /// temp dir, which the workspace fence leaves writable).
    pub fn new_in(base: &Path, label: &str) -> TempDir {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("dsh-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        TempDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The MCP test server (`tests/fixtures/mcp-server`, rmcp's server side)
/// of this build, as a string for rows and `.mcp.json` files.
pub fn mcp_server() -> String {
    target_dir()
        .join("dsh-fixture-mcp-server")
        .display()
        .to_string()
}

/// The cargo target directory holding the running binary (`target/debug`
/// for tests, whose binaries live in `target/debug/deps`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(Path::to_owned).unwrap_or_default();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().map(Path::to_owned).unwrap_or(dir)
    } else {
        dir
    }
}

/// The environment variable naming a staged tree for [`stage`].
pub const STAGE_ENV: &str = "DSH_STAGE";

/// The staged tree (`bin/dsh-host`, `plugins/`, `profiles/`, as `cargo
/// xtask build` makes it) whose plugins a [`TestHost`] searches after the
/// test's own target directory: `$DSH_STAGE` when set (it must be a staged
/// tree), else `dsh/` beside the test's build directory, else `target/dsh`
/// of the checkout this test kit was built from, when it has been staged.
pub fn stage() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(STAGE_ENV).filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        assert!(
            dir.join("plugins").is_dir(),
            "${STAGE_ENV}={} is not a staged tree (no plugins/ in it); `cargo xtask build` makes one at target/dsh",
            dir.display()
        );
        return Some(dir);
    }
    // The staged tree beside the running test's build (`<target>/dsh`,
    // wherever `CARGO_TARGET_DIR` put it), else the checkout's.
    let beside = target_dir().parent().map(|t| t.join("dsh"));
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let checkout = checkout
        .canonicalize()
        .unwrap_or(checkout)
        .join("target/dsh");
    beside
        .into_iter()
        .chain([checkout])
        .find(|dir| dir.join("plugins").is_dir())
}

/// Where a [`TestHost`] looks for plugins after its own directory: the
/// test's target directory, then the [`stage`]'s plugins.
pub fn plugin_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![target_dir()];
    dirs.extend(stage().map(|s| s.join("plugins")));
    dirs
}

/// The built library of crate `crate_name` (`lib<crate_name>.so`).
pub fn library(crate_name: &str) -> PathBuf {
    target_dir().join(format!("lib{}.so", crate_name.replace('-', "_")))
}

/// Puts the built library of `crate_name` at `target` the way a rebuild
/// lands: copied beside it, then renamed over it in one step, so a watcher
/// never sees a half-written file.
pub fn replace_library(crate_name: &str, target: &Path) {
    let tmp = target.with_extension("so.tmp");
    std::fs::copy(library(crate_name), &tmp)
        .unwrap_or_else(|e| panic!("cannot copy {crate_name} (is it built?): {e}"));
    std::fs::rename(&tmp, target)
        .unwrap_or_else(|e| panic!("cannot rename over {}: {e}", target.display()));
}

/// The built `dsh-host` binary as a command (the test's target directory's,
/// else the [`stage`]'s), with `DSH_LOG` unset and `NO_COLOR=1` (plain,
/// quiet stderr unless the test asks for a log).
pub fn dsh_host() -> Command {
    let built = target_dir().join("dsh-host");
    let binary = match stage() {
        Some(stage) if !built.is_file() => stage.join("bin").join("dsh-host"),
        _ => built,
    };
    let mut c = Command::new(binary);
    c.env_remove("DSH_LOG").env("NO_COLOR", "1");
    c
}

/// A finished process as `(exit code or -1, stdout, stderr)`, the streams
/// decoded lossily.
pub fn out(o: &Output) -> (i32, String, String) {
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Runs `c` to its end: [`out`] of its output.
pub fn output(c: &mut Command) -> (i32, String, String) {
    out(&c
        .output()
        .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}")))
}

/// `dsh-host plugins list --plugins-dir <plugins>` with `$DSH_HOME` at
/// `home` and `$DSH_INSTALL_DIR` at `install` (the installation whose
/// `profiles/` and `plugins/` the host takes instead of the build's), run
/// to its end: [`output`] of it.
pub fn plugins_list(home: &Path, install: &Path, plugins: &Path) -> (i32, String, String) {
    output(
        dsh_host()
            .env("DSH_HOME", home)
            .env("DSH_INSTALL_DIR", install)
            .args(["plugins", "list", "--plugins-dir"])
            .arg(plugins),
    )
}

/// A fresh `$DSH_HOME` (labelled `label`) whose profile `name` is
/// `profile` (TOML), for `dsh-host --profile <name>`.
pub fn home_with_profile(label: &str, name: &str, profile: &str) -> TempDir {
    let home = TempDir::new(label);
    let dir = home.path().join("profiles").join(name);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let file = dir.join("profile.toml");
    std::fs::write(&file, profile)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", file.display()));
    home
}

/// Copies the built library of `crate_name` into `$DSH_HOME/plugins` (made
/// if missing) as `file`: a drop-in the host loads from `home`.
pub fn drop_in(home: &Path, crate_name: &str, file: &str) {
    let dir = home.join("plugins");
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let from = library(crate_name);
    std::fs::copy(&from, dir.join(file))
        .unwrap_or_else(|e| panic!("cannot copy {} into {}: {e}", from.display(), dir.display()));
}

/// Rows of the agent core against a model at `base_url` (route `fake`, no
/// key), storing sessions under `sessions`: session, JSONL persistence,
/// checkpoints, prompt, tools (`read`, `bash` in danger-full-access),
/// routing, the DeepSeek adapter, fast retries, and the agent loop.
pub fn core_rows(base_url: &str, sessions: &Path) -> String {
    format!(
        r#"
[[row]]
id = "session"
plugin = "session"
[[row]]
id = "session-jsonl"
plugin = "session-jsonl"
config = {{ root = "{root}" }}
[[row]]
id = "checkpoint-policy"
plugin = "checkpoint-policy"
[[row]]
id = "system-prompt"
plugin = "system-prompt"
config = {{ persona = "You work in {{{{cwd}}}} with {{{{model}}}}." }}
[[row]]
id = "tools"
plugin = "tools"
[[row]]
id = "tool-read"
plugin = "tool-read"
[[row]]
id = "permission"
plugin = "permission"
config = {{ mode = "danger-full-access" }}
[[row]]
id = "tool-bash"
plugin = "tool-bash"
[[row]]
id = "llm"
plugin = "llm"
[[row]]
id = "llm-deepseek"
plugin = "llm-deepseek"
config = {{ provider = "fake", baseUrl = "{base_url}", apiKeyEnv = "", streamIdleTimeoutMs = 1500 }}
[[row]]
id = "llm-retry"
plugin = "llm-retry"
config = {{ initialDelayMs = 10, maxDelayMs = 3000 }}
[[row]]
id = "agent-loop"
plugin = "agent-loop"
"#,
        root = sessions.display(),
    )
}

/// A host with its own `$DSH_HOME`, for one test.
pub struct TestHost {
    /// The host.
    pub host: Host,
    /// Its `$DSH_HOME`.
    pub home: TempDir,
    /// A plugin directory of its own (searched first).
    pub plugins: TempDir,
}

impl TestHost {
    /// A host whose plugin directories are its own dir, then
    /// [`plugin_dirs`] (`target/debug`, then the staged tree's plugins).
    pub async fn start() -> TestHost {
        Self::with_timeouts(Timeouts {
            apply: Duration::from_secs(10),
            dispose: Duration::from_millis(1500),
            stop: Duration::from_millis(1500),
        })
        .await
    }

    /// Like [`TestHost::start`] with explicit lifecycle timeouts.
    pub async fn with_timeouts(timeouts: Timeouts) -> TestHost {
        let home = TempDir::new("home");
        let plugins = TempDir::new("plugins");
        let host = Host::start(HostConfig {
            home: home.path().to_owned(),
            plugin_dirs: std::iter::once(plugins.path().to_owned())
                .chain(plugin_dirs())
                .collect(),
            timeouts,
            args: Vec::new(),
            protected: Vec::new(),
            model: None,
            trust: None,
        })
        .unwrap_or_else(|e| panic!("host failed to start: {e:#}"));
        TestHost {
            host,
            home,
            plugins,
        }
    }

    /// Parses a TOML layer (`[[row]]`/`[[patch]]`).
    pub fn tree(toml: &str) -> Tree {
        let (layer, _) = parse_layer(toml, Path::new("test.toml"))
            .unwrap_or_else(|e| panic!("bad test layer: {e}"));
        compose(&[layer]).unwrap_or_else(|e| panic!("bad test tree: {e}"))
    }

    /// Reconciles the host to the rows in `toml` and waits until settled.
    pub async fn apply(&self, toml: &str) {
        self.host.apply(Self::tree(toml)).await;
    }

    /// Copies the built library of `crate_name` into this host's own plugin
    /// directory as `file` (a fixture the rows name by `file`'s stem).
    pub fn stage(&self, crate_name: &str, file: &str) {
        let from = library(crate_name);
        std::fs::copy(&from, self.plugins.path().join(file))
            .unwrap_or_else(|e| panic!("cannot stage {} (is it built?): {e}", from.display()));
    }

    /// Panics unless every row is active.
    pub async fn assert_all_active(&self) {
        for s in self.host.status().await {
            assert_eq!(format!("{:?}", s.state), "Active", "{s:?}");
        }
    }

    /// The status of row `id`.
    pub async fn status(&self, id: &str) -> FiberStatus {
        self.host
            .status()
            .await
            .into_iter()
            .find(|s| s.id == id)
            .unwrap_or_else(|| panic!("no row `{id}`"))
    }

    /// Reports whose message contains `needle`.
    pub fn reports_with(&self, needle: &str) -> Vec<Report> {
        self.host
            .reports()
            .into_iter()
            .filter(|r| r.message.contains(needle))
            .collect()
    }

    /// Panics unless plugin `plugin` (a report's source) has exactly one
    /// generation report and it is not a quarantine: after rows without
    /// the plugin are applied, its one generation was unloaded and
    /// unmapped. A thread of it still running (stuck in a FIFO, converting
    /// a page) keeps its runtime from stopping, and the generation is
    /// quarantined instead.
    pub fn assert_unloaded_cleanly(&self, plugin: &str) {
        let unloads: Vec<String> = self
            .host
            .reports()
            .into_iter()
            .filter(|r| r.source == plugin && r.message.starts_with("generation"))
            .map(|r| r.message)
            .collect();
        assert!(
            unloads.len() == 1 && !unloads[0].contains("quarantined"),
            "{plugin}: {unloads:?}"
        );
    }

    /// Calls `service.method(params)`, panicking with context on error.
    pub async fn call(
        &self,
        service: &str,
        method: &str,
        params: serde_json::Value,
    ) -> serde_json::Value {
        self.host
            .call(service, method, params)
            .await
            .unwrap_or_else(|e| panic!("{service}.{method} failed: {e}"))
    }

    /// Disposes everything.
    pub async fn shutdown(self) {
        self.host.shutdown().await;
    }
}

/// Live (not zombie) processes whose command line contains `marker`, as
/// the host's `/proc` sees them: how tests find what a command left behind
/// (a PID namespace hides its own numbering from the command).
pub fn processes_with(marker: &str) -> Vec<i32> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(pid) = name.parse::<i32>() else {
            continue;
        };
        if name == me {
            continue;
        }
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains(marker) {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let state = stat.rsplit(')').next().unwrap_or_default().trim_start();
        if !state.starts_with('Z') && !state.is_empty() {
            out.push(pid);
        }
    }
    out
}

/// Waits (at most a minute) until `ready()` holds, checking every 20 ms;
/// panics with `what` when it never does (the bound only turns a hang into
/// a failure).
pub async fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls the future `check()` every 10 ms until it answers `true`; panics
/// with `what` after a minute (the bound only turns a hang into a failure).
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Live processes whose `argv[0]` is exactly `name` (as `exec -a NAME`
/// sets it): the command itself, not a shell or sandbox whose arguments
/// merely mention it.
pub fn processes_named(name: &str) -> Vec<i32> {
    processes_with(name)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .ok()
                .is_some_and(|c| c.split(|b| *b == 0).next() == Some(name.as_bytes()))
        })
        .collect()
}

/// Waits (up to `deadline`) until no process has `marker` in its command
/// line; returns those still there.
pub fn wait_gone(marker: &str, deadline: Duration) -> Vec<i32> {
    let until = Instant::now() + deadline;
    loop {
        let left = processes_with(marker);
        if left.is_empty() || Instant::now() >= until {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
