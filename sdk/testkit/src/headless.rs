//! The real `dsh-host --profile headless` as a test runs it: a private
//! `$DSH_HOME` and workspace, the fake model server patched in.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use crate::fake_llm::FakeLlm;
use crate::{target_dir, TempDir};

/// The variable the patched adapter reads its key from.
pub const KEY: &str = "DSH_TESTKIT_HEADLESS_KEY";

/// A `$DSH_HOME`, a workspace and a patch that points the headless profile
/// at the fake model server.
pub struct Headless {
    /// `$DSH_HOME`.
    pub home: TempDir,
    /// The working directory.
    pub work: TempDir,
    /// The test's patch layer (in the home).
    pub patch: PathBuf,
}

impl Headless {
    /// A fresh home and workspace for the model at `fake`; `extra` (TOML
    /// rows or patches) is appended to the patch.
    pub fn new(fake: &FakeLlm, extra: &str) -> Headless {
        let home = TempDir::new("headless-home");
        let work = TempDir::new("headless-work");
        let patch = home.path().join("test-patch.toml");
        let text = format!(
            "[[patch]]\nid = \"llm-deepseek\"\nconfig = {{ baseUrl = \"{}\", apiKeyEnv = \"{KEY}\", streamIdleTimeoutMs = 60000 }}\n\
             [[patch]]\nid = \"llm-retry\"\nconfig = {{ maxRetries = 0 }}\n{extra}",
            fake.base_url
        );
        std::fs::write(&patch, text)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", patch.display()));
        Headless { home, work, patch }
    }

    /// `dsh-host --profile headless --patch <patch> <args>` in the workspace.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(target_dir().join("dsh-host"));
        c.current_dir(self.work.path())
            .env("DSH_HOME", self.home.path())
            .env(KEY, "sk-testkit-headless")
            .env_remove("DSH_LOG")
            .env_remove("DSH_PERMISSION_MODE")
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

    /// Starts `command` in the background (killed when dropped).
    pub fn spawn(&self, args: &[&str]) -> Running {
        let child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start dsh-host: {e}"));
        Running(Some(child))
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
            let _ = c.kill();
            let _ = c.wait();
        }
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
