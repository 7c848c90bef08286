//! A process in a real pseudo-terminal, its screen read back through a
//! terminal emulator: what a user of the chat would see.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_testkit::headless::{Headless, KEY};
use dsh_testkit::target_dir;
use portable_pty::{native_pty_system, Child, CommandBuilder, PtySize};

/// Rows and columns of the test terminal.
pub const ROWS: u16 = 40;
pub const COLS: u16 = 100;

/// The model key a pty run of a [`Headless`] gets (the fake model server
/// takes any).
const MODEL_KEY: &str = "sk-testkit-pty";

/// A running process on a pty.
pub struct Pty {
    child: Box<dyn Child + Send + Sync>,
    writer: Box<dyn Write + Send>,
    screen: Arc<Mutex<vt100::Parser>>,
    raw: Arc<Mutex<Vec<u8>>>,
}

impl Pty {
    /// Runs `program args` in `cwd` with `env` (and nothing of the test's
    /// own `DSH_*` environment) on a fresh pty.
    pub fn spawn(program: &Path, args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Pty {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: ROWS,
                cols: COLS,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("openpty");
        let mut cmd = CommandBuilder::new(program);
        cmd.args(args);
        cmd.cwd(cwd);
        for (k, _) in std::env::vars() {
            if k.starts_with("DSH_") || k == "NO_COLOR" {
                cmd.env_remove(k);
            }
        }
        cmd.env("TERM", "xterm-256color");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = pair.slave.spawn_command(cmd).expect("spawn on the pty");
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().expect("pty reader");
        let writer = pair.master.take_writer().expect("pty writer");
        let screen = Arc::new(Mutex::new(vt100::Parser::new(ROWS, COLS, 2000)));
        let raw = Arc::new(Mutex::new(Vec::new()));
        let (s, r) = (screen.clone(), raw.clone());
        std::thread::spawn(move || {
            let _master = pair.master;
            let mut buf = [0u8; 8192];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                s.lock().unwrap().process(&buf[..n]);
                r.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Pty {
            child,
            writer,
            screen,
            raw,
        }
    }

    /// Runs `program args` on a fresh pty as [`Pty::spawn`] does, in `e`'s
    /// workspace with `e`'s `$DSH_HOME`, a model key and `env`.
    pub fn in_workspace(e: &Headless, program: &Path, args: &[&str], env: &[(&str, &str)]) -> Pty {
        let home = e.home.path().to_str().expect("a UTF-8 home");
        let codex = format!("{home}/codex");
        let mut vars = vec![
            ("DSH_HOME", home),
            ("CODEX_HOME", codex.as_str()),
            (KEY, MODEL_KEY),
        ];
        vars.extend_from_slice(env);
        Pty::spawn(program, args, e.work.path(), &vars)
    }

    /// `dsh-host --patch <e's patch> <args>` [`Pty::in_workspace`]: with
    /// no task and no profile, the chat.
    pub fn dsh_host(e: &Headless, args: &[&str], env: &[(&str, &str)]) -> Pty {
        let mut all = vec!["--patch", e.patch.to_str().expect("a UTF-8 patch path")];
        all.extend_from_slice(args);
        Pty::in_workspace(e, &target_dir().join("dsh-host"), &all, env)
    }

    /// Types `text` (escape sequences and control characters included).
    pub fn send(&mut self, text: &str) {
        self.writer
            .write_all(text.as_bytes())
            .expect("write to the pty");
        self.writer.flush().expect("flush the pty");
    }

    /// The whole screen, scrollback first, as text.
    pub fn contents(&self) -> String {
        let mut p = self.screen.lock().unwrap();
        // Everything ever shown: the scrollback, then the visible rows.
        p.screen_mut().set_scrollback(usize::MAX);
        let back = p.screen().scrollback();
        let mut rows: Vec<String> = Vec::new();
        if back > 0 {
            rows.extend(p.screen().rows(0, COLS).take(back));
        }
        p.screen_mut().set_scrollback(0);
        rows.extend(p.screen().rows(0, COLS));
        rows.join("\n")
    }

    /// Every byte the process wrote.
    pub fn raw(&self) -> Vec<u8> {
        self.raw.lock().unwrap().clone()
    }

    /// Waits until the screen holds `text`; panics with the screen after
    /// `secs` seconds.
    pub async fn wait_for(&self, text: &str, secs: u64) {
        self.wait_until(secs, |s| s.contains(text), text).await;
    }

    /// Waits until `text` shows `n` times.
    pub async fn wait_for_count(&self, text: &str, n: usize, secs: u64) {
        self.wait_until(secs, |s| s.matches(text).count() >= n, text)
            .await;
    }

    /// Polls on the test's runtime (the fake model server runs there too).
    async fn wait_until(&self, secs: u64, done: impl Fn(&str) -> bool, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.contents();
            if done(&s) {
                return;
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what:?}; the screen:\n{s}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the chat is idle: its prompt is the last line shown (a
    /// running turn hides an empty prompt).
    pub async fn wait_idle(&self, secs: u64) {
        self.wait_last_line("›", secs).await;
    }

    /// Waits until the last line shown (trimmed) is `line`.
    pub async fn wait_last_line(&self, line: &str, secs: u64) {
        self.wait_until(
            secs,
            |s| {
                s.lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map(str::trim)
                    == Some(line)
            },
            line,
        )
        .await;
    }

    /// Waits for the process to exit; its exit code.
    pub async fn wait_exit(&mut self, secs: u64) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status.exit_code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the process did not exit; the screen:\n{}", self.contents());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
    }
}
