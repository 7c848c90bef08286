//! The real `dsh-host --profile headless` as a test runs it: a private
//! `$DSH_HOME` and workspace, the fake model server patched in, and what a
//! test reads back (the session logs it wrote).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

use crate::fake_llm::FakeLlm;
use crate::{target_dir, TempDir};

/// The variable the patched adapter reads its key from.
pub const KEY: &str = "DSH_TESTKIT_HEADLESS_KEY";

/// The adapter's `streamIdleTimeoutMs` of [`Headless::new`].
pub const STREAM_IDLE_MS: u64 = 60_000;

/// A `$DSH_HOME`, a workspace and a patch that points the headless profile
/// at the fake model server.
pub struct Headless {
    /// `$DSH_HOME`.
    pub home: TempDir,
    /// The working directory.
    pub work: TempDir,
    /// The test's patch layer (in the home).
    pub patch: PathBuf,
    /// Variables set on every command (after the kit's own).
    env: Vec<(String, String)>,
}

impl Headless {
    /// A fresh home and workspace for the model at `fake`, the stream idle
    /// timeout [`STREAM_IDLE_MS`]; `extra` (TOML rows or patches) is
    /// appended to the patch.
    pub fn new(fake: &FakeLlm, extra: &str) -> Headless {
        Self::with_stream_idle(fake, STREAM_IDLE_MS, extra)
    }

    /// Like [`Headless::new`] with the adapter's `streamIdleTimeoutMs` set
    /// to `idle_ms`. (A second patch of `llm-deepseek` in `extra` would
    /// replace the adapter's whole config, `baseUrl` and key included: a
    /// patch's `config` replaces the row's.)
    pub fn with_stream_idle(fake: &FakeLlm, idle_ms: u64, extra: &str) -> Headless {
        let home = TempDir::new("headless-home");
        let work = TempDir::new("headless-work");
        let patch = home.path().join("test-patch.toml");
        let text = format!(
            "[[patch]]\nid = \"llm-deepseek\"\nconfig = {{ baseUrl = \"{}\", apiKeyEnv = \"{KEY}\", streamIdleTimeoutMs = {idle_ms} }}\n\
             [[patch]]\nid = \"llm-retry\"\nconfig = {{ maxRetries = 0 }}\n{extra}",
            fake.base_url
        );
        std::fs::write(&patch, text)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", patch.display()));
        Headless {
            home,
            work,
            patch,
            env: Vec::new(),
        }
    }

    /// Sets `key=value` on every command (the kit unsets `DSH_LOG` and
    /// `DSH_PERMISSION_MODE`; this may set them again).
    pub fn env(mut self, key: &str, value: &str) -> Headless {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// `dsh-host --profile headless --patch <patch> <args>` in the workspace.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(target_dir().join("dsh-host"));
        c.current_dir(self.work.path())
            .env("DSH_HOME", self.home.path())
            .env(KEY, "sk-testkit-headless")
            .env_remove("DSH_LOG")
            .env_remove("DSH_PERMISSION_MODE")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .arg("--profile")
            .arg("headless")
            .arg("--patch")
            .arg(&self.patch)
            .args(args)
            .stdin(Stdio::null());
        c
    }

    /// Runs `command` to its end on a blocking thread.
    pub async fn run(&self, args: &[&str]) -> Output {
        let mut c = self.command(args);
        tokio::task::spawn_blocking(move || c.output())
            .await
            .unwrap_or_else(|e| panic!("dsh-host runner panicked: {e}"))
            .unwrap_or_else(|e| panic!("cannot run dsh-host: {e}"))
    }

    /// Starts `command` in the background, stdout and stderr piped (killed
    /// when dropped).
    pub fn spawn(&self, args: &[&str]) -> Running {
        let child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start dsh-host: {e}"));
        Running(Some(child))
    }

    /// Every entry of every project directory under `$DSH_HOME/sessions`
    /// (none while there is no such directory), in directory order.
    pub fn session_files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        if let Ok(dirs) = std::fs::read_dir(self.home.path().join("sessions")) {
            for d in dirs.flatten() {
                if let Ok(files) = std::fs::read_dir(d.path()) {
                    out.extend(files.flatten().map(|f| f.path()));
                }
            }
        }
        out
    }

    /// The one session log: panics unless [`Headless::session_files`] is
    /// exactly one plain `.jsonl` log.
    pub fn log_file(&self) -> PathBuf {
        let mut files = self.session_files();
        assert!(
            files.len() == 1 && files[0].extension().is_some_and(|e| e == "jsonl"),
            "not one session log: {files:?}"
        );
        files.remove(0)
    }
}

/// A `dsh-host` running in the background, killed if the test fails first.
pub struct Running(Option<Child>);

impl Running {
    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// SIGKILL, then reap.
    pub fn kill(mut self) {
        if let Some(mut c) = self.0.take() {
            c.kill()
                .unwrap_or_else(|e| panic!("cannot kill dsh-host: {e}"));
            let _ = c.wait();
        }
    }

    /// Waits (on a blocking thread) for its end; its status and what it
    /// wrote to stdout and stderr.
    pub async fn output(mut self) -> Output {
        let child = self.0.take().expect("a running dsh-host");
        tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap_or_else(|e| panic!("dsh-host waiter panicked: {e}"))
            .unwrap_or_else(|e| panic!("cannot wait for dsh-host: {e}"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The records of a plain JSONL file, one a line; panics when the file
/// cannot be read or a line is not JSON.
pub fn lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {l}", path.display()))
        })
        .collect()
}

/// What parses so far of a JSONL file another process may be writing (or
/// was killed writing): a missing file is empty, a line that is not JSON
/// (a torn tail) is skipped.
pub fn lines_so_far(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Panics unless the `seq`s of `records` run 0, 1, 2, … without a gap: a
/// whole log (pass its records, the header left out). A packed chunk row
/// (`seq0` and one member per `texts`/`args` entry) stands for its members.
pub fn assert_seqs_contiguous(records: &[Value]) {
    let seqs: Vec<Option<u64>> = records.iter().flat_map(record_seqs).collect();
    let want: Vec<Option<u64>> = (0..seqs.len() as u64).map(Some).collect();
    assert_eq!(seqs, want, "contiguous seqs");
}

/// The seqs one stored record holds: an event's own, or a packed row's
/// members'.
fn record_seqs(record: &Value) -> Vec<Option<u64>> {
    let Some(seq0) = record["seq0"].as_u64() else {
        return vec![record["seq"].as_u64()];
    };
    let data = &record["data"];
    let members = data["texts"]
        .as_array()
        .or_else(|| data["args"].as_array())
        .map_or(0, Vec::len) as u64;
    (seq0..seq0 + members).map(Some).collect()
}
