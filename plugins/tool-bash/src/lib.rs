//! `tool-bash`: the `bash` tool (see README.md).

mod jobs;
mod sandbox;

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_sdk::prelude::*;
use dsh_sdk::tool::register_tools;
use dsh_sdk::vocab::msg;

const DEFAULT_TIMEOUT_MS: u64 = 120_000;
const MAX_TIMEOUT_MS: u64 = 600_000;
const MAX_STREAM_BYTES: usize = 64_000;

/// Environment variables that look like credentials are not passed on.
fn is_credential(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    [
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "AUTH",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// Kills the process group when dropped (timeout, or the call was cancelled).
struct GroupGuard(i32);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.0 > 0 {
            // SAFETY: signalling our own child's process group.
            unsafe { libc::kill(-self.0, libc::SIGKILL) };
        }
    }
}

/// Set when the `execute` call that owns a run is dropped (its caller
/// cancelled), so the blocking run kills the process group instead of
/// waiting it out.
#[derive(Clone, Default)]
struct Cancel(Arc<AtomicBool>);

impl Cancel {
    fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Sets the flag when dropped: the async side of a run going away.
struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        (self.0).0.store(true, Ordering::Relaxed);
    }
}

struct Outcome {
    stdout: Vec<u8>,
    stdout_total: usize,
    stderr: Vec<u8>,
    stderr_total: usize,
    code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
}

/// Reads a pipe keeping the last `MAX_STREAM_BYTES` (and the total count),
/// spilling the whole stream to `spill` when it overflows.
fn drain(mut pipe: impl Read, spill: PathBuf) -> (Vec<u8>, usize) {
    let mut all = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = pipe.read(&mut buf) {
        if n == 0 {
            break;
        }
        all.extend_from_slice(&buf[..n]);
    }
    let total = all.len();
    if total > MAX_STREAM_BYTES {
        let _ = std::fs::write(&spill, &all);
        let tail = all.split_off(total - MAX_STREAM_BYTES);
        return (tail, total);
    }
    (all, total)
}

fn spill_dir() -> PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let dir = std::env::temp_dir().join(format!("dsh-bash-{}", std::process::id()));
    let _ = std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&dir);
    dir
}

fn run(
    mut cmd: Command,
    timeout: Duration,
    tag: String,
    cancel: Cancel,
) -> std::io::Result<Outcome> {
    let mut child = cmd.spawn()?;
    let guard = GroupGuard(child.id() as i32);
    let dir = spill_dir();
    let out = child.stdout.take();
    let err = child.stderr.take();
    let (o_path, e_path) = (
        dir.join(format!("{tag}.stdout")),
        dir.join(format!("{tag}.stderr")),
    );
    let readers = std::thread::scope(|s| -> std::io::Result<_> {
        let ro = s.spawn(move || out.map(|p| drain(p, o_path)).unwrap_or_default());
        let re = s.spawn(move || err.map(|p| drain(p, e_path)).unwrap_or_default());
        let deadline = Instant::now() + timeout;
        let mut timed_out = false;
        let status = loop {
            if let Some(st) = child.try_wait()? {
                break st;
            }
            if cancel.is_set() {
                // SAFETY: our child's process group.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                break child.wait()?;
            }
            if Instant::now() >= deadline {
                timed_out = true;
                // SAFETY: our child's process group.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                break child.wait()?;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        // The group leader is gone; make sure nothing it spawned keeps the
        // pipes open.
        // SAFETY: our child's process group.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        let (stdout, stdout_total) = ro.join().unwrap_or_default();
        let (stderr, stderr_total) = re.join().unwrap_or_default();
        Ok(Outcome {
            stdout,
            stdout_total,
            stderr,
            stderr_total,
            code: status.code(),
            signal: status.signal(),
            timed_out,
        })
    })?;
    drop(guard);
    Ok(readers)
}

fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGINT => "SIGINT".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGPIPE => "SIGPIPE".into(),
        other => format!("signal {other}"),
    }
}

fn render(
    o: &Outcome,
    timeout_ms: u64,
    sandbox_mode: Option<&str>,
    spill: &Path,
    tag: &str,
) -> String {
    let mut parts: Vec<String> = Vec::new();
    let stdout = String::from_utf8_lossy(&o.stdout).trim_end().to_owned();
    if o.stdout_total > MAX_STREAM_BYTES {
        parts.push(format!(
            "[output truncated: showing the last {MAX_STREAM_BYTES} of {} bytes; full output: {}]",
            o.stdout_total,
            spill.join(format!("{tag}.stdout")).display()
        ));
    }
    if !stdout.is_empty() {
        parts.push(stdout);
    }
    let stderr = String::from_utf8_lossy(&o.stderr).trim_end().to_owned();
    if !stderr.is_empty() {
        let mut s = String::from("[stderr]\n");
        if o.stderr_total > MAX_STREAM_BYTES {
            s.push_str(&format!(
                "[stderr truncated: showing the last {MAX_STREAM_BYTES} of {} bytes; full stderr: {}]\n",
                o.stderr_total,
                spill.join(format!("{tag}.stderr")).display()
            ));
        }
        s.push_str(&stderr);
        parts.push(s);
    }
    let failed = o.code != Some(0);
    if let Some(mode) = sandbox_mode {
        if failed
            && (stderr.contains("Permission denied") || stderr.contains("Read-only file system"))
        {
            parts.push(format!("[sandbox: file access denied under {mode} mode]"));
        }
    }
    if o.timed_out {
        parts.push(format!("[timed out after {timeout_ms}ms]"));
    } else if let Some(sig) = o.signal {
        parts.push(format!("[killed by signal: {}]", signal_name(sig)));
    } else if let Some(code) = o.code.filter(|c| *c != 0) {
        parts.push(format!("[exit code: {code}]"));
    }
    if parts.is_empty() {
        "(no output)".into()
    } else {
        parts.join("\n")
    }
}

/// A prepared `bash -c` (sandboxed per the mode the permission plugin
/// handed over).
pub(crate) struct Prepared {
    pub cmd: Command,
    pub landlock: Option<sandbox::Landlock>,
    pub mode: Option<String>,
    pub workdir: PathBuf,
    pub timeout_ms: u64,
    pub command: String,
}

fn prepare(params: &Value) -> Result<Prepared> {
    let args = &params["arguments"];
    let command = args["command"].as_str().unwrap_or_default().to_owned();
    let cwd = params["cwd"].as_str().unwrap_or(".").to_owned();
    let workdir = match args["workdir"].as_str() {
        Some(w) if Path::new(w).is_absolute() => PathBuf::from(w),
        Some(w) => Path::new(&cwd).join(w),
        None => PathBuf::from(&cwd),
    };
    let timeout_ms = args["timeoutMs"]
        .as_u64()
        .unwrap_or(DEFAULT_TIMEOUT_MS)
        .clamp(1, MAX_TIMEOUT_MS);
    let sandbox = &params["sandbox"];
    let mode = sandbox["mode"].as_str().map(str::to_owned);
    let root = PathBuf::from(sandbox["root"].as_str().unwrap_or(&cwd));

    let mut cmd;
    let mut landlock = None;
    match mode.as_deref() {
        None | Some("danger-full-access") => {
            cmd = Command::new("bash");
            cmd.arg("-c").arg(&command);
        }
        Some(m) => {
            let mut writable = vec![std::env::temp_dir(), PathBuf::from("/dev")];
            if m == "workspace-write" {
                writable.push(root.clone());
            }
            if let Some(bwrap) = sandbox::bwrap() {
                cmd = Command::new(bwrap);
                cmd.args([
                    "--ro-bind",
                    "/",
                    "/",
                    "--dev",
                    "/dev",
                    "--proc",
                    "/proc",
                    "--unshare-pid",
                    "--die-with-parent",
                ]);
                for w in writable.iter().filter(|w| w.as_path() != Path::new("/dev")) {
                    cmd.arg("--bind").arg(w).arg(w);
                }
                cmd.args(["--", "bash", "-c", &command]);
            } else if let Some(abi) = sandbox::landlock_abi() {
                let rules = sandbox::Landlock::new(abi, &writable).map_err(|e| {
                    Error::new(
                        "SANDBOX_UNAVAILABLE",
                        format!("cannot build the Landlock sandbox: {e}"),
                    )
                })?;
                cmd = Command::new("bash");
                cmd.arg("-c").arg(&command);
                let fd = rules.fd();
                // SAFETY: only async-signal-safe syscalls run after fork.
                unsafe { cmd.pre_exec(move || sandbox::restrict_self(fd)) };
                landlock = Some(rules);
            } else {
                return Err(Error::new(
                    "SANDBOX_UNAVAILABLE",
                    format!("bash needs a sandbox in {m} mode, but neither bubblewrap nor Landlock is available here; install bubblewrap, or set DSH_PERMISSION_MODE=danger-full-access to run unconfined"),
                ));
            }
        }
    }
    cmd.current_dir(&workdir)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("DSH_SHELL", "1");
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_credential) {
            cmd.env_remove(&name);
        }
    }
    Ok(Prepared {
        cmd,
        landlock,
        mode,
        workdir,
        timeout_ms,
        command,
    })
}

async fn execute(ctx: Context, jobs: jobs::Jobs, req: Request) -> Result<Reply> {
    let prepared = prepare(&req.params)?;
    if req.params["arguments"]["run_in_background"] == json!(true) {
        let agent = req.params["agent"].as_str().unwrap_or_default().to_owned();
        let label = req.params["arguments"]["description"]
            .as_str()
            .unwrap_or(&prepared.command)
            .to_owned();
        let id = jobs::start(&ctx, &jobs, prepared, agent, label)?;
        return Reply::json(
            json!({"content": [msg::text(&format!("started background job {id}"))], "value": {"jobId": id}}),
        );
    }
    let Prepared {
        cmd,
        landlock,
        mode,
        workdir,
        timeout_ms,
        ..
    } = prepared;
    let tag = dsh_sdk::new_id();
    let t2 = tag.clone();
    let cancel = Cancel::default();
    let _cancel_on_drop = CancelOnDrop(cancel.clone());
    let outcome = tokio::task::spawn_blocking(move || {
        let r = run(cmd, Duration::from_millis(timeout_ms), t2, cancel);
        drop(landlock);
        r
    })
    .await
    .map_err(|e| Error::msg(e.to_string()))?
    .map_err(|e| {
        Error::new(
            "BASH_FAILED",
            format!("cannot run bash in {}: {e}", workdir.display()),
        )
    })?;
    let text = render(
        &outcome,
        timeout_ms,
        mode.as_deref().filter(|m| *m != "danger-full-access"),
        &spill_dir(),
        &tag,
    );
    Reply::json(
        json!({"content": [msg::text(&text)], "value": {"exitCode": outcome.code, "timedOut": outcome.timed_out}}),
    )
}

struct Bash;

impl Plugin for Bash {
    const NAME: &'static str = "tool-bash";
    const DESCRIPTION: &'static str = "the `bash` tool";
    const INJECT: &'static [&'static str] = &["tools"];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        let jobs = jobs::Jobs::default();
        let j = jobs.clone();
        ctx.effect(move || async move { j.kill_all() });
        let mut schemas = vec![json!({
            "name": "bash",
            "description": "Execute a bash command (`bash -c`) and return its stdout/stderr. Each call runs in a fresh shell: no state (cwd, variables, functions) persists between calls — pass `workdir` instead of using `cd`. Non-zero exits are reported as `[exit code: N]`. Current harness environment facts are exposed through managed `$DSH_*` variables; inspect them when needed. Commands may run under a file sandbox; a blocked file operation is reported as `[sandbox: file access denied under <mode> mode]` — a policy denial, not a bug in the command; do not retry another way. Long output is truncated to its tail; the full output is saved to a file whose path is reported when available. Set `run_in_background: true` for long-running commands: the call returns a job id immediately; read its output with `job_output` and stop it with `job_kill`.",
            "parameters": {"type": "object", "properties": {
                "command": {"type": "string", "description": "The bash command to run."},
                "description": {"type": "string", "description": "A 5-10 word active-voice summary of what the command does, for the UI."},
                "timeoutMs": {"type": "number", "description": "Timeout in milliseconds. Defaults to 120000; at most 600000."},
                "workdir": {"type": "string", "description": "Working directory. Defaults to the session workspace; a relative path resolves against it."},
                "run_in_background": {"type": "boolean", "description": "Run as a background job and return its id at once. No timeout applies."}},
                "required": ["command", "description"]},
        })];
        schemas.extend(jobs::schemas());
        let (c, j) = (ctx.clone(), jobs.clone());
        register_tools(&ctx, schemas, move |req| {
            let (c, j) = (c.clone(), j.clone());
            async move {
                match req.params["name"].as_str() {
                    Some("bash") => execute(c, j, req).await,
                    _ => jobs::tool(&j, &req).await,
                }
            }
        })
        .await?;
        Ok(())
    }
}

dsh_sdk::export_plugin!(Bash);
