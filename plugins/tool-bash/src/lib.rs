//! `tool-bash`: the `bash` tool (see README.md).

mod bwrap;
mod capture;
mod contain;
mod exec;
mod hide;
mod jobs;
mod kernel;
mod limits;
mod loopback;
mod protect;
mod sandbox;
mod scrub;
mod seccomp;

use std::cell::Cell;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use capture::Capture;
use contain::{Fenced, Plan, Support};
use dsh_confine::landlock::{self, Ruleset};
use dsh_confine::seccomp::Filter;
use dsh_sdk::api::host::Host;
use dsh_sdk::api::tools::{Exec, ToolReply};
use dsh_sdk::fence::{Fence, Mode, ReadPolicy, Reads};
use dsh_sdk::names::{service, tool};
use dsh_sdk::prelude::*;
use dsh_sdk::tempdir::{DirHandle, PrivateDir};
use dsh_sdk::tool::{declaration, register_tools, ToolSpec};
use exec::{Cancel, Stream};
use schemars::JsonSchema;
use seccomp::Sockets;
use serde::{Deserialize, Serialize};

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

/// Devices a fenced command may write (Landlock rules on single files);
/// the rest of `/dev` (disks included) is not writable. The namespaced
/// path adds its own fresh `/dev/pts` and `/dev/shm`.
const DEV_FILES: [&str; 7] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
];

/// The default of `maxJobs`.
const DEFAULT_MAX_JOBS: usize = 16;

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

/// The row's config (see README.md).
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
struct Config {
    /// Which sandbox runs fenced commands.
    sandbox: SandboxKind,
    /// Fenced commands get the host's network (otherwise a network
    /// namespace of their own, loopback only, and no unix sockets).
    network: bool,
    /// danger-full-access commands keep the harness's capabilities (a root
    /// container where `apt-get install` must work).
    keep_capabilities: bool,
    /// Running background jobs per agent.
    max_jobs: usize,
    /// Processes and threads per command (its PID namespace's `pid_max`);
    /// by default from the machine's `pid_max` and `max_jobs`
    /// ([`limits`]).
    max_processes: Option<u32>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            sandbox: SandboxKind::Auto,
            network: false,
            keep_capabilities: false,
            max_jobs: DEFAULT_MAX_JOBS,
            max_processes: None,
        }
    }
}

/// This generation's settings and what it learnt about the kernel.
struct Bash {
    config: Config,
    /// `maxProcesses`, or its default here.
    max_processes: u32,
    /// Whether the namespaces of the Landlock path can be made here
    /// (probed on first use; not kept while probing fails).
    namespaces: Cell<Option<bool>>,
    /// The kernel's files fenced commands may not change or read, as this
    /// kernel has them.
    kernel: kernel::KernelFiles,
    /// This generation's private directory for full outputs and the blank
    /// file hidden files are covered with (removed when the fiber is
    /// disposed), held by its descriptor: spill files are created through
    /// it, never by path (a command may swap the path for a symlink).
    outputs: DirHandle,
    /// What is never read, as found here at the start: added to the fence
    /// each call carries (see `Reads::union`), then hidden from fenced
    /// commands.
    own_reads: Reads,
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
    dir: &DirHandle,
    cancel: &Cancel,
) -> std::io::Result<Outcome> {
    let tag = dsh_sdk::new_id();
    let mut stdout = Capture::new(MAX_STREAM_BYTES, dir.clone(), format!("{tag}.stdout"));
    let mut stderr = Capture::new(MAX_STREAM_BYTES, dir.clone(), format!("{tag}.stderr"));
    let child = cmd.spawn()?;
    let group = exec::Group::new(child.id() as i32);
    let ended = exec::pump(
        child,
        &group,
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

/// What must stay open until the command is spawned.
#[derive(Default)]
pub(crate) struct KeepOpen {
    /// The Landlock ruleset the child applies.
    _landlock: Option<Ruleset>,
    /// The seccomp program bubblewrap reads.
    _seccomp: Option<OwnedFd>,
}

/// A prepared `bash -c`, contained and (per the fence the permission
/// plugin handed over) sandboxed.
pub(crate) struct Prepared {
    pub cmd: Command,
    pub keep: KeepOpen,
    pub mode: Option<Mode>,
    pub workdir: PathBuf,
    pub timeout_ms: u64,
    pub command: String,
}

/// What a fenced command's mounts are made of besides the fence.
struct FencedParts<'a> {
    /// Read-only again under the writable roots ([`protect`]).
    read_only: &'a [PathBuf],
    /// Not readable at all ([`hide`]).
    hidden: &'a hide::Hidden,
    /// The temp directory as a private scratch (read-only mode).
    scratch: Option<&'a Path>,
}

fn unavailable(message: String) -> Error {
    Error::new("SANDBOX_UNAVAILABLE", message)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

impl Bash {
    /// Whether the Landlock path's namespaces can be made here, found once:
    /// first one `unshare` of them ([`contain::namespace_support`]); where
    /// the kernel or its policy refuses it, commands run under Landlock
    /// alone (logged). Where it works, `probe` (the plan of the command at
    /// hand) runs `true`: if that fails, or the `unshare` failed for
    /// another reason, the command is refused (`SANDBOX_UNAVAILABLE`)
    /// rather than run with less, and the next command tries again.
    fn namespaces(&self, probe: impl FnOnce() -> Result<(Plan, Ruleset)>) -> Result<bool> {
        if let Some(known) = self.namespaces.get() {
            return Ok(known);
        }
        match contain::namespace_support(!self.config.network) {
            Support::Works => {}
            Support::Unsupported(e) => {
                dsh_sdk::tracing::warn!("no user/PID/mount namespaces here ({e}): bash runs under Landlock alone (see the tool-bash README for what that leaves open)");
                self.namespaces.set(Some(false));
                return Ok(false);
            }
            Support::Failed(e) => {
                return Err(unavailable(format!(
                    "bash cannot tell whether its sandbox's namespaces can be made here: trying failed ({e}); it does not fall back to Landlock alone on a guess. Try again; if this persists, install bubblewrap, or set DSH_PERMISSION_MODE=danger-full-access to run unconfined"
                )));
            }
        }
        let (plan, rules) = probe()?;
        let mut cmd = Command::new("bash");
        cmd.args(["-c", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: only raw syscalls on prepared memory run after fork.
        unsafe { cmd.pre_exec(move || plan.in_child()) };
        let ran = cmd.output();
        drop(rules);
        let failure = match ran {
            Ok(out) if out.status.success() => None,
            Ok(out) => {
                let stderr = String::from_utf8_lossy(&out.stderr);
                let stderr: String = stderr.trim().chars().take(500).collect();
                Some(format!(
                    "a test command ended with {}: {stderr}",
                    out.status
                ))
            }
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = failure {
            return Err(unavailable(format!(
                "bash cannot set up its sandbox here: the kernel allows its user, PID, mount and IPC namespaces, but making the sandbox in them failed ({why}). It does not fall back to Landlock alone, which leaves more open (see the tool-bash README). Install bubblewrap, or set DSH_PERMISSION_MODE=danger-full-access to run unconfined"
            )));
        }
        self.namespaces.set(Some(true));
        Ok(true)
    }

    /// The Landlock path's plan with namespaces for `fence`, and the
    /// ruleset it applies (kept open until the command is spawned).
    fn namespaced_plan(
        &self,
        abi: u32,
        fence: &Fence,
        parts: &FencedParts<'_>,
        workdir: &Path,
    ) -> Result<(Plan, Ruleset)> {
        let mut dirs = fence.writable.clone();
        dirs.extend(parts.scratch.map(Path::to_owned));
        let files: Vec<PathBuf> = DEV_FILES.iter().map(PathBuf::from).collect();
        let rules = sandbox::write_rules(abi, &dirs, &files)
            .map_err(|e| unavailable(format!("cannot build the Landlock sandbox: {e}")))?;
        let plan = Plan::fenced(Fenced {
            writable: &fence.writable,
            protected: parts.read_only,
            hidden: parts.hidden,
            kernel: &self.kernel,
            scratch: parts.scratch,
            landlock: Some(rules.raw()),
            cwd: workdir,
            workspace: &fence.root,
            own_network: !self.config.network,
        })
        .with_seccomp(self.filter(Sockets::OwnNetwork)?)
        .with_pid_max(Some(self.max_processes));
        Ok((plan, rules))
    }

    /// The seccomp filter of a fenced command (none with the network on).
    fn filter(&self, sockets: Sockets) -> Result<Option<Filter>> {
        if self.config.network {
            return Ok(None);
        }
        seccomp::network_off(sockets)
            .map_err(|e| unavailable(format!("cannot prepare the seccomp filter: {e}")))
    }

    /// `danger-full-access` (or no fence): a session of its own, a PID
    /// namespace as root, no capabilities unless `keepCapabilities`.
    fn unfenced(&self, command: &str) -> (Command, Plan) {
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(command);
        let plan = if is_root() {
            Plan::pid_only().with_pid_max(Some(self.max_processes))
        } else {
            Plan::bare()
        };
        let plan = if self.config.keep_capabilities {
            plan.keeping_capabilities()
        } else {
            plan
        };
        (cmd, plan)
    }

    /// A fenced command: under bubblewrap, or Landlock (with namespaces
    /// where the kernel allows them). What the child needs open until it
    /// is spawned goes into `keep`.
    fn fenced(
        &self,
        fence: &Fence,
        command: &str,
        workdir: &Path,
        keep: &mut KeepOpen,
    ) -> Result<(Command, Plan)> {
        let temp = std::env::temp_dir();
        // Read-only mode: the temp directory is a private scratch.
        let scratch = (fence.mode == Mode::ReadOnly).then_some(temp.as_path());
        let mut read_only = protect::read_only(fence);
        // The plugin's own directory (bash's saved outputs and the blank
        // file bound over hidden files) lies in the temp directory, a
        // writable root: read-only to every command, so none can swap the
        // blank file for a link to a secret, or the directory for a link.
        read_only.push(self.outputs.path().to_owned());
        let hidden = hide::Hidden::of(fence, scratch, self.outputs.path()).map_err(|e| {
            unavailable(format!(
                "cannot prepare the sandbox's hidden files in {}: {e}",
                self.outputs.path().display()
            ))
        })?;
        let bwrap = match self.config.sandbox {
            SandboxKind::Landlock => None,
            SandboxKind::Auto => sandbox::bwrap(),
            SandboxKind::Bubblewrap => Some(sandbox::bwrap().ok_or_else(|| {
                unavailable("tool-bash is configured with sandbox = \"bubblewrap\", but bwrap is not installed".into())
            })?),
        };
        if let Some(bwrap) = bwrap {
            let seccomp = self
                .filter(Sockets::OwnNetwork)?
                .map(|f| f.memfd(c"dsh-bash-seccomp"))
                .transpose()
                .map_err(|e| unavailable(format!("cannot prepare the seccomp filter: {e}")))?;
            let seccomp_fd = seccomp.as_ref().map(|fd| fd.as_raw_fd());
            keep._seccomp = seccomp;
            let options = bwrap::Options {
                scratch,
                read_only: &read_only,
                hidden: &hidden,
                kernel: &self.kernel,
                network: self.config.network,
                seccomp_fd,
                root: is_root(),
            };
            let plan = Plan::bubblewrap(seccomp_fd);
            // As root, bubblewrap runs in a PID namespace made here, so
            // that its own (nested in it) is bounded like the Landlock
            // path's. Where pid_max is global (before Linux 6.14) there is
            // nothing to bound.
            let plan = if is_root() && contain::pid_max_per_namespace() {
                plan.in_pid_namespace()
                    .with_pid_max(Some(self.max_processes))
            } else {
                plan
            };
            return Ok((bwrap::command(&bwrap, fence, &options, command), plan));
        }
        let abi = landlock::abi().ok_or_else(|| unavailable(format!(
            "bash needs a sandbox in {} mode, but neither bubblewrap nor Landlock is available here; install bubblewrap, or set DSH_PERMISSION_MODE=danger-full-access to run unconfined",
            fence.mode
        )))?;
        let parts = FencedParts {
            read_only: &read_only,
            hidden: &hidden,
            scratch,
        };
        // The probe runs in `/`: a missing working directory is the
        // command's error, not the sandbox's.
        let namespaces =
            self.namespaces(|| self.namespaced_plan(abi, fence, &parts, Path::new("/")))?;
        let (plan, rules) = if namespaces {
            self.namespaced_plan(abi, fence, &parts, workdir)?
        } else {
            // Landlock alone: the host's /dev/shm (no fresh instance).
            let mut dirs = fence.writable.clone();
            dirs.extend(scratch.map(Path::to_owned));
            dirs.push(PathBuf::from("/dev/shm"));
            let files: Vec<PathBuf> = DEV_FILES.iter().map(PathBuf::from).collect();
            let rules = sandbox::write_rules(abi, &dirs, &files)
                .map_err(|e| unavailable(format!("cannot build the Landlock sandbox: {e}")))?;
            let plan =
                Plan::landlock_only(rules.raw()).with_seccomp(self.filter(Sockets::NetlinkOnly)?);
            (plan, rules)
        };
        keep._landlock = Some(rules);
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(command);
        Ok((cmd, plan))
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
        let mode = exec.sandbox.as_ref().map(|f| f.mode);
        let mut keep = KeepOpen::default();
        let (mut cmd, plan) = match exec
            .sandbox
            .as_ref()
            .filter(|f| f.mode != Mode::DangerFullAccess)
        {
            None => self.unfenced(&command),
            Some(fence) => {
                let fence = fence.clone().with_own_reads(&self.own_reads);
                self.fenced(&fence, &command, &workdir, &mut keep)?
            }
        };
        // SAFETY: only raw syscalls on prepared memory run after fork.
        unsafe { cmd.pre_exec(move || plan.in_child()) };
        // No process_group: the child starts a session of its own (setsid
        // in `in_child`), which is also a process group led by its pid.
        cmd.current_dir(&workdir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("DSH_SHELL", "1");
        for (name, value) in std::env::vars_os() {
            if scrub::is_credential(&name.to_string_lossy(), &value.to_string_lossy()) {
                cmd.env_remove(&name);
            }
        }
        Ok(Prepared {
            cmd,
            keep,
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
        let id = jobs::start(
            &ctx,
            &jobs,
            prepared,
            &bash.outputs,
            agent,
            label,
            bash.config.max_jobs,
        )?;
        let started = serde_json::to_value(JobStarted { job_id: id.clone() })?;
        return Reply::json(ToolReply::text_with_value(
            &format!("started background job {id}"),
            started,
        ));
    }
    let Prepared {
        mut cmd,
        keep,
        mode,
        workdir,
        timeout_ms,
        ..
    } = prepared;
    let cancel = Cancel::default();
    let _cancel_on_drop = CancelOnDrop(cancel.clone());
    let dir = bash.outputs.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        let r = run(&mut cmd, Duration::from_millis(timeout_ms), &dir, &cancel);
        drop(keep);
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
    let value = serde_json::to_value(Finished {
        exit_code: outcome.code,
        timed_out: outcome.timed_out,
    })?;
    Reply::json(ToolReply::text_with_value(&text, value))
}

/// The value of a background start: `{jobId}`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JobStarted {
    job_id: String,
}

/// The value of a finished command: `{exitCode, timedOut}`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Finished {
    exit_code: Option<i32>,
    timed_out: bool,
}

struct BashPlugin;

impl Plugin for BashPlugin {
    const NAME: &'static str = "tool-bash";
    const DESCRIPTION: &'static str = "the `bash` tool";
    const INJECT: &'static [&'static str] = &[service::TOOLS];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let max_processes = match config.max_processes {
            Some(n) if n < limits::MIN_PROCESSES => {
                return Err(Error::new(
                    codes::INVALID_CONFIG,
                    format!(
                        "tool-bash: maxProcesses = {n} is below {}, the kernel's smallest pid_max; raise it",
                        limits::MIN_PROCESSES
                    ),
                ));
            }
            Some(n) => n,
            None => limits::default_max_processes(config.max_jobs),
        };
        // Made first, so its removal is the last effect to run (after the
        // jobs that write into it are killed). Making it sweeps the ones
        // dead hosts left.
        let spill = PrivateDir::new(SPILL_PREFIX).map_err(|e| {
            Error::new(
                "BASH_FAILED",
                format!("cannot make the output directory: {e}"),
            )
        })?;
        // What is never read, as found here: hidden from fenced commands
        // with what the fence of each call names.
        let home = Host::new(&ctx).info().await?.home;
        let own_reads = Reads::discover(ReadPolicy::Allow, Path::new(&home), &std::env::temp_dir());
        let bash = Rc::new(Bash {
            config,
            max_processes,
            namespaces: Cell::new(None),
            kernel: kernel::KernelFiles::here(),
            outputs: spill.handle(),
            own_reads,
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
