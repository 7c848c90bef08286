//! `tool-bash`: the `bash` tool (see README.md).

mod capture;
mod contain;
mod exec;
mod jobs;
mod sandbox;

use std::cell::Cell;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use capture::Capture;
use contain::{Fenced, Plan};
use dsh_sdk::api::tools::Exec;
use dsh_sdk::fence::{Fence, Mode};
use dsh_sdk::names::{service, tool};
use dsh_sdk::prelude::*;
use dsh_sdk::tempdir::PrivateDir;
use dsh_sdk::tool::{declaration, register_tools, ToolSpec};
use dsh_sdk::vocab::msg;
use exec::{Cancel, Stream};
use schemars::JsonSchema;
use serde::Deserialize;

const DEFAULT_TIMEOUT_MS: u64 = 120_000;
const MAX_TIMEOUT_MS: u64 = 600_000;
const MAX_STREAM_BYTES: usize = 64_000;
/// Full outputs live in `<temp>/dsh-bash-<pid>-<tag>/`.
const SPILL_PREFIX: &str = "dsh-bash-";

/// The `bash` tool (the original's schema, reference dsh-product §4.1).
struct BashTool;

impl ToolSpec for BashTool {
    const NAME: &'static str = tool::BASH;
    const DESCRIPTION: &'static str = "Execute a bash command (`bash -c`) and return its stdout/stderr. Each call runs in a fresh shell: no state (cwd, variables, functions) persists between calls — pass `workdir` instead of using `cd`. Non-zero exits are reported as `[exit code: N]`. Current harness environment facts are exposed through managed `$DSH_*` variables; inspect them when needed. Commands may run under a file sandbox; a blocked file operation is reported as `[sandbox: file access denied under <mode> mode]` — a policy denial, not a bug in the command; do not retry another way. Long output is truncated to its tail; the full output is saved to a file whose path is reported when available. Set `run_in_background: true` for long-running commands: the call returns a job id immediately; read its output with `job_output` and stop it with `job_kill`.";
    type Args = BashArgs;
}

#[derive(Deserialize, JsonSchema)]
struct BashArgs {
    /// The bash command to run.
    command: String,
    /// A 5-10 word active-voice summary of what the command does, for the UI.
    description: String,
    /// Timeout in milliseconds. Defaults to 120000; at most 600000.
    #[serde(rename = "timeoutMs")]
    #[schemars(with = "Option<dsh_sdk::tool::Number>")]
    timeout_ms: Option<u64>,
    /// Working directory. Defaults to the session workspace; a relative path resolves against it.
    workdir: Option<String>,
    /// Run as a background job and return its id at once. No timeout applies.
    run_in_background: Option<bool>,
}

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

/// Which sandbox runs fenced commands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum SandboxKind {
    /// bubblewrap when installed, else Landlock.
    #[default]
    Auto,
    /// bubblewrap only (refused when it is not installed).
    Bubblewrap,
    /// Landlock (with namespaces where the kernel allows them) only.
    Landlock,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Config {
    sandbox: SandboxKind,
}

/// This generation's settings and what it learnt about the kernel.
struct Bash {
    config: Config,
    /// Whether user, PID and mount namespaces can be made here (probed on
    /// first use).
    namespaces: Cell<Option<bool>>,
    /// This generation's private directory for full outputs (removed when
    /// the fiber is disposed).
    spill: PathBuf,
}

/// Sets the run's cancel flag when dropped: the async side of a run going
/// away (its call was cancelled).
struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.set();
    }
}

/// What a foreground run produced.
struct Outcome {
    stdout: Capture,
    stderr: Capture,
    code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
}

fn run(
    cmd: &mut Command,
    timeout: Duration,
    dir: &Path,
    cancel: &Cancel,
) -> std::io::Result<Outcome> {
    let tag = dsh_sdk::new_id();
    let mut stdout = Capture::new(MAX_STREAM_BYTES, dir.join(format!("{tag}.stdout")));
    let mut stderr = Capture::new(MAX_STREAM_BYTES, dir.join(format!("{tag}.stderr")));
    let child = cmd.spawn()?;
    let ended = exec::pump(
        child,
        Some(Instant::now() + timeout),
        cancel,
        |s, bytes| match s {
            Stream::Out => stdout.push(bytes),
            Stream::Err => stderr.push(bytes),
        },
    )?;
    Ok(Outcome {
        stdout,
        stderr,
        code: ended.status.code(),
        signal: ended.status.signal(),
        timed_out: ended.timed_out,
    })
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

fn render(o: &Outcome, timeout_ms: u64, sandbox_mode: Option<Mode>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let stdout = String::from_utf8_lossy(&o.stdout.tail())
        .trim_end()
        .to_owned();
    if o.stdout.truncated() {
        parts.push(format!(
            "[output truncated: showing the last {MAX_STREAM_BYTES} of {} bytes; {}]",
            o.stdout.total(),
            o.stdout.saved_note("output")
        ));
    }
    if !stdout.is_empty() {
        parts.push(stdout);
    }
    let stderr = String::from_utf8_lossy(&o.stderr.tail())
        .trim_end()
        .to_owned();
    if !stderr.is_empty() {
        let mut s = String::from("[stderr]\n");
        if o.stderr.truncated() {
            s.push_str(&format!(
                "[stderr truncated: showing the last {MAX_STREAM_BYTES} of {} bytes; {}]\n",
                o.stderr.total(),
                o.stderr.saved_note("stderr")
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

/// A prepared `bash -c`, contained and (per the fence the permission
/// plugin handed over) sandboxed.
pub(crate) struct Prepared {
    pub cmd: Command,
    pub landlock: Option<sandbox::Landlock>,
    pub mode: Option<Mode>,
    pub workdir: PathBuf,
    pub timeout_ms: u64,
    pub command: String,
}

fn unavailable(message: String) -> Error {
    Error::new("SANDBOX_UNAVAILABLE", message)
}

/// The bubblewrap command line of a fenced command.
fn bwrap_command(bwrap: &Path, fence: &Fence, scratch: Option<&Path>, command: &str) -> Command {
    let mut cmd = Command::new(bwrap);
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
        "--new-session",
    ]);
    for w in fence.writable.iter().filter(|w| w.exists()) {
        cmd.arg("--bind").arg(w).arg(w);
    }
    if let Some(s) = scratch {
        cmd.arg("--tmpfs").arg(s);
        // The workspace stays visible (read-only) if the scratch covers it.
        if fence.root.starts_with(s) {
            cmd.arg("--ro-bind").arg(&fence.root).arg(&fence.root);
        }
    }
    for p in &fence.protected {
        if p.exists() && fence.root_for(p).is_some() {
            cmd.arg("--ro-bind").arg(p).arg(p);
        }
    }
    cmd.args(["--", "bash", "-c", command]);
    cmd
}

impl Bash {
    /// Whether namespaces can be made here: one contained `true`, once.
    fn namespaces(&self, rules: &sandbox::Landlock, fence: &Fence) -> bool {
        if let Some(known) = self.namespaces.get() {
            return known;
        }
        let plan = Plan::fenced(Fenced {
            writable: &fence.writable,
            protected: &[],
            scratch: None,
            landlock: Some(rules.fd()),
            cwd: Path::new("/"),
            workspace: &fence.root,
        });
        let mut probe = Command::new("bash");
        probe
            .args(["-c", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only raw syscalls on prepared memory run after fork.
        unsafe { probe.pre_exec(move || plan.in_child()) };
        let works = probe.status().is_ok_and(|s| s.success());
        if !works {
            dsh_sdk::tracing::warn!("no user/PID/mount namespaces here: bash runs under Landlock alone (see the tool-bash README for what that leaves open)");
        }
        self.namespaces.set(Some(works));
        works
    }

    fn prepare(&self, exec: &Exec, args: &BashArgs) -> Result<Prepared> {
        let command = args.command.clone();
        let cwd = exec.cwd_or(".").to_owned();
        let workdir = match args.workdir.as_deref() {
            Some(w) if Path::new(w).is_absolute() => PathBuf::from(w),
            Some(w) => Path::new(&cwd).join(w),
            None => PathBuf::from(&cwd),
        };
        let timeout_ms = args
            .timeout_ms
            .unwrap_or(DEFAULT_TIMEOUT_MS)
            .clamp(1, MAX_TIMEOUT_MS);
        let fence = exec.sandbox.as_ref();
        let mode = fence.map(|f| f.mode);
        let mut landlock = None;
        let (mut cmd, plan) = match fence.filter(|f| f.mode != Mode::DangerFullAccess) {
            None => {
                let mut cmd = Command::new("bash");
                cmd.arg("-c").arg(&command);
                // SAFETY: geteuid has no preconditions.
                let root = unsafe { libc::geteuid() } == 0;
                (cmd, if root { Plan::pid_only() } else { Plan::bare() })
            }
            Some(fence) => {
                let temp = std::env::temp_dir();
                // Read-only mode: the temp directory is a private scratch.
                let scratch = (fence.mode == Mode::ReadOnly).then_some(temp.as_path());
                let bwrap = match self.config.sandbox {
                    SandboxKind::Landlock => None,
                    SandboxKind::Auto => sandbox::bwrap(),
                    SandboxKind::Bubblewrap => Some(sandbox::bwrap().ok_or_else(|| {
                        unavailable("tool-bash is configured with sandbox = \"bubblewrap\", but bwrap is not installed".into())
                    })?),
                };
                if let Some(bwrap) = bwrap {
                    (
                        bwrap_command(&bwrap, fence, scratch, &command),
                        Plan::bare(),
                    )
                } else {
                    let abi = sandbox::landlock_abi().ok_or_else(|| unavailable(format!(
                        "bash needs a sandbox in {} mode, but neither bubblewrap nor Landlock is available here; install bubblewrap, or set DSH_PERMISSION_MODE=danger-full-access to run unconfined",
                        fence.mode
                    )))?;
                    let mut writable = fence.writable.clone();
                    writable.push(PathBuf::from("/dev"));
                    writable.extend(scratch.map(Path::to_owned));
                    let rules = sandbox::Landlock::new(abi, &writable).map_err(|e| {
                        unavailable(format!("cannot build the Landlock sandbox: {e}"))
                    })?;
                    let plan = if self.namespaces(&rules, fence) {
                        Plan::fenced(Fenced {
                            writable: &fence.writable,
                            protected: &fence.protected,
                            scratch,
                            landlock: Some(rules.fd()),
                            cwd: &workdir,
                            workspace: &fence.root,
                        })
                    } else {
                        Plan::landlock_only(rules.fd())
                    };
                    landlock = Some(rules);
                    let mut cmd = Command::new("bash");
                    cmd.arg("-c").arg(&command);
                    (cmd, plan)
                }
            }
        };
        // SAFETY: only raw syscalls on prepared memory run after fork.
        unsafe { cmd.pre_exec(move || plan.in_child()) };
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
}

async fn execute(ctx: Context, bash: Rc<Bash>, jobs: jobs::Jobs, exec: Exec) -> Result<Reply> {
    let args = exec.arguments_for::<BashTool>()?;
    let prepared = bash.prepare(&exec, &args)?;
    if args.run_in_background == Some(true) {
        let agent = exec.agent().to_owned();
        // A blank summary labels the job with its command.
        let label = if args.description.trim().is_empty() {
            prepared.command.clone()
        } else {
            args.description
        };
        let id = jobs::start(&ctx, &jobs, prepared, &bash.spill, agent, label)?;
        return Reply::json(
            json!({"content": [msg::text(&format!("started background job {id}"))], "value": {"jobId": id}}),
        );
    }
    let Prepared {
        mut cmd,
        landlock,
        mode,
        workdir,
        timeout_ms,
        ..
    } = prepared;
    let cancel = Cancel::default();
    let _cancel_on_drop = CancelOnDrop(cancel.clone());
    let dir = bash.spill.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        let r = run(&mut cmd, Duration::from_millis(timeout_ms), &dir, &cancel);
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
        mode.filter(|m| *m != Mode::DangerFullAccess),
    );
    Reply::json(
        json!({"content": [msg::text(&text)], "value": {"exitCode": outcome.code, "timedOut": outcome.timed_out}}),
    )
}

struct BashPlugin;

impl Plugin for BashPlugin {
    const NAME: &'static str = "tool-bash";
    const DESCRIPTION: &'static str = "the `bash` tool";
    const INJECT: &'static [&'static str] = &[service::TOOLS];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        // Made first, so its removal is the last effect to run (after the
        // jobs that write into it are killed). Making it sweeps the ones
        // dead hosts left.
        let spill = PrivateDir::new(SPILL_PREFIX).map_err(|e| {
            Error::new(
                "BASH_FAILED",
                format!("cannot make the output directory: {e}"),
            )
        })?;
        let bash = Rc::new(Bash {
            config,
            namespaces: Cell::new(None),
            spill: spill.path().to_owned(),
        });
        ctx.effect(move || async move { drop(spill) });
        let jobs = jobs::Jobs::default();
        let j = jobs.clone();
        ctx.effect(move || async move { j.kill_all() });
        let mut schemas = vec![declaration::<BashTool>()];
        schemas.extend(jobs::schemas());
        let (c, j) = (ctx.clone(), jobs.clone());
        register_tools(&ctx, schemas, move |req| {
            let (c, b, j) = (c.clone(), bash.clone(), j.clone());
            async move {
                let exec = dsh_sdk::tool::exec(&req)?;
                if exec.name == BashTool::NAME {
                    execute(c, b, j, exec).await
                } else {
                    jobs::tool(&j, &req, &exec).await
                }
            }
        })
        .await?;
        Ok(())
    }
}

dsh_sdk::export_plugin!(BashPlugin);
