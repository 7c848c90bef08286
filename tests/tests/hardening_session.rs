//! Hardening of session logs: logs private to their owner.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use dsh_testkit::fake_llm::{text, FakeLlm};
use dsh_testkit::{target_dir, TempDir};

const KEY: &str = "DSH_HARDENING_TEST_KEY";

struct Env {
    home: TempDir,
    work: TempDir,
    patch: PathBuf,
}

/// A `$DSH_HOME` and a workspace. The model stream never idles out and
/// batched writes wait for a flush (a checkpoint), so a host paused inside a
/// tool call writes nothing until the tool returns.
fn env(fake: &FakeLlm) -> Env {
    let home = TempDir::new("hardening-home");
    let work = TempDir::new("hardening-work");
    let patch = home.path().join("test-patch.toml");
    std::fs::write(
        &patch,
        format!(
            "[[patch]]\nid = \"llm-deepseek\"\nconfig = {{ baseUrl = \"{}\", apiKeyEnv = \"{KEY}\", streamIdleTimeoutMs = 600000 }}\n\
             [[patch]]\nid = \"llm-retry\"\nconfig = {{ maxRetries = 0 }}\n\
             [[patch]]\nid = \"session-jsonl\"\nconfig = {{ writeBatchMaxDelayMs = 3600000 }}\n",
            fake.base_url
        ),
    )
    .unwrap();
    Env { home, work, patch }
}

impl Env {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(target_dir().join("dsh-host"));
        c.current_dir(self.work.path())
            .env("DSH_HOME", self.home.path())
            .env(KEY, "sk-hardening-test")
            .env("DSH_PERMISSION_MODE", "danger-full-access")
            .env_remove("DSH_LOG")
            .arg("--profile")
            .arg("headless")
            .arg("--patch")
            .arg(&self.patch)
            .args(args)
            .stdin(Stdio::null());
        c
    }

    /// The one session log (`.jsonl`) under `sessions/`.
    fn log_file(&self) -> PathBuf {
        let mut logs = Vec::new();
        for d in std::fs::read_dir(self.home.path().join("sessions"))
            .unwrap()
            .flatten()
        {
            for f in std::fs::read_dir(d.path()).unwrap().flatten() {
                if f.path().extension().is_some_and(|e| e == "jsonl") {
                    logs.push(f.path());
                }
            }
        }
        assert_eq!(logs.len(), 1, "{logs:?}");
        logs.remove(0)
    }
}

fn out(o: &Output) -> (i32, String, String) {
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_new_log_is_0600_in_a_0700_directory_whatever_the_umask() {
    let fake = FakeLlm::start().await;
    fake.push([text("Private.")]);
    let e = env(&fake);
    let mut c = e.command(&["secret", "task"]);
    // SAFETY: the closure runs in the forked child before exec and only
    // calls umask(2), which is async-signal-safe and cannot fail.
    unsafe {
        c.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let o = tokio::task::spawn_blocking(move || c.output().unwrap())
        .await
        .unwrap();
    let (code, stdout, stderr) = out(&o);
    assert_eq!((code, stdout.as_str()), (0, "Private.\n"), "{stderr}");
    let file = e.log_file();
    let mode = |p: &Path| {
        format!(
            "{:o}",
            std::fs::metadata(p).unwrap().permissions().mode() & 0o777
        )
    };
    assert_eq!(mode(&file), "600", "{}", file.display());
    let dir = file.parent().unwrap();
    assert_eq!(mode(dir), "700", "{}", dir.display());
}
