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
            .env("CODEX_HOME", self.home.path().join("codex"))
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

    /// [`Headless::run`], then panics (showing stderr) unless the run
    /// exited 0.
    pub async fn run_ok(&self, args: &[&str]) -> Output {
        let out = self.run(args).await;
        assert_eq!(
            out.status.code(),
            Some(0),
            "dsh-host {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// `dsh-host sessions <args> --patch <patch>` in the workspace, with
    /// this `$DSH_HOME`, `DSH_LOG` unset and stdin closed; no key and none
    /// of [`Headless::env`] (the command asks no model), and unlike
    /// [`crate::dsh_host`] no `NO_COLOR`: it prints what a user gets.
    pub fn sessions(&self, args: &[&str]) -> Command {
        let mut c = Command::new(target_dir().join("dsh-host"));
        c.current_dir(self.work.path())
            .env("DSH_HOME", self.home.path())
            .env_remove("DSH_LOG")
            .arg("sessions")
            .args(args)
            .arg("--patch")
            .arg(&self.patch)
            .stdin(Stdio::null());
        c
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

    /// Every file of every project directory under `$DSH_HOME/sessions`,
    /// a session directory standing for the files in it (its transcript
    /// `session.jsonl[.zstd]`); none while there is no such directory.
    pub fn session_files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        if let Ok(dirs) = std::fs::read_dir(self.home.path().join("sessions")) {
            for d in dirs.flatten() {
                for entry in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
                    let path = entry.path();
                    if path.is_dir() {
                        let inner = std::fs::read_dir(&path).into_iter().flatten().flatten();
                        out.extend(inner.map(|f| f.path()));
                    } else {
                        out.push(path);
                    }
                }
            }
        }
        out
    }

    /// The one session log: panics unless [`Headless::session_files`] is
    /// exactly one log, `session.jsonl.zstd` (the default) or
    /// `session.jsonl` in its session directory.
    pub fn log_file(&self) -> PathBuf {
        let mut files = self.session_files();
        let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
        assert!(
            files.len() == 1
                && matches!(
                    name(&files[0]).as_deref(),
                    Some("session.jsonl.zstd" | "session.jsonl")
                ),
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
        let Some(child) = self.0.take() else {
            panic!("dsh-host was already reaped");
        };
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

/// The JSONL text of a session log: a `.zstd` log decoded frame by frame
/// (a torn final frame left out), a plain one as it is (invalid UTF-8
/// replaced); a missing file is empty.
pub fn log_text(path: &Path) -> String {
    let raw = std::fs::read(path).unwrap_or_default();
    if path.extension().is_none_or(|e| e != "zstd") {
        return String::from_utf8_lossy(&raw).into_owned();
    }
    let mut text = Vec::new();
    for frame in zstd_frames(&raw) {
        match zstd::stream::decode_all(frame) {
            Ok(t) => text.extend(t),
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// The frames of a concatenated zstd stream, split at each frame's
/// compressed size; a final frame the bytes cut off is left out.
pub fn zstd_frames(raw: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < raw.len() {
        match zstd::zstd_safe::find_frame_compressed_size(&raw[at..]) {
            Ok(size) if size > 0 && at + size <= raw.len() => {
                out.push(&raw[at..at + size]);
                at += size;
            }
            _ => break,
        }
    }
    out
}

/// The records of a session log (plain or zstd, see [`log_text`]), one a
/// line; panics when the file cannot be read or a line is not JSON.
pub fn lines(path: &Path) -> Vec<Value> {
    if let Err(e) = std::fs::metadata(path) {
        panic!("cannot read {}: {e}", path.display());
    }
    let text = log_text(path);
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
    log_text(path)
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
