//! Background jobs (`run_in_background`): `job_output`, `job_list`,
//! `job_kill`, and a completion notice steered into the owning agent.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_sdk::api::agents::Agents;
use dsh_sdk::api::tools::{Exec, RegisterParams, ToolReply};
use dsh_sdk::names::tool;
use dsh_sdk::prelude::*;
use dsh_sdk::tool::{declaration, ToolSpec};
use dsh_sdk::vocab::UserInput;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::capture::Capture;
use crate::exec::{self, Cancel, Group};
use crate::Prepared;

/// `job_output` (the original's schema, reference dsh-product §4.1).
struct JobOutput;

impl ToolSpec for JobOutput {
    const NAME: &'static str = tool::JOB_OUTPUT;
    const DESCRIPTION: &'static str =
        "Read new output of a background job. Every response ends with [status: ...].";
    type Args = JobOutputArgs;
}

#[derive(Deserialize, JsonSchema)]
struct JobOutputArgs {
    job_id: String,
    /// Wait for the job to finish (up to timeout_ms).
    wait: Option<bool>,
    /// How long to wait. Defaults to 30000; at most 600000.
    #[schemars(with = "Option<dsh_sdk::tool::Number>")]
    timeout_ms: Option<u64>,
}

/// `job_list`.
struct JobList;

impl ToolSpec for JobList {
    const NAME: &'static str = tool::JOB_LIST;
    const DESCRIPTION: &'static str = "List this agent's background jobs.";
    type Args = JobListArgs;
}

#[derive(Deserialize, JsonSchema)]
struct JobListArgs {}

/// `job_kill`.
struct JobKill;

impl ToolSpec for JobKill {
    const NAME: &'static str = tool::JOB_KILL;
    const DESCRIPTION: &'static str = "Stop a background job.";
    type Args = JobKillArgs;
}

#[derive(Deserialize, JsonSchema)]
struct JobKillArgs {
    job_id: String,
    // Not used: the original's parameter, kept so the model may give it
    // (no doc comment: that would be its model-visible description).
    #[allow(dead_code)]
    reason: Option<String>,
}

/// How much of a job's output memory keeps (the rest is in its spill
/// file).
const KEEP_BYTES: usize = 1024 * 1024;

/// What the job's pump fills in.
struct Shared {
    output: Capture,
    status: Option<String>,
}

struct Job {
    owner: String,
    label: String,
    /// The job's process group, signalled only while its leader is
    /// unreaped (its pump reaps it).
    group: Arc<Group>,
    shared: Arc<Mutex<Shared>>,
    read_upto: u64,
}

/// The jobs of this plugin generation.
#[derive(Clone, Default)]
pub struct Jobs {
    table: Rc<RefCell<BTreeMap<String, Job>>>,
    next: Rc<RefCell<u64>>,
}

impl Jobs {
    /// Kills every job still running (on dispose), so no blocking task
    /// outlives the fiber. A finished job's group is not signalled: its id
    /// may belong to another process by now ([`Group`]).
    pub fn kill_all(&self) {
        for job in self.table.borrow().values() {
            job.group.kill();
        }
    }
}

fn lock(s: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

fn describe(status: std::process::ExitStatus) -> String {
    match status.code() {
        Some(c) => format!("exited (code {c})"),
        None => "killed".to_owned(),
    }
}

/// Refuses a new job of `owner` when `max` of its jobs are still running.
fn check_room(jobs: &Jobs, owner: &str, max: usize) -> Result<()> {
    let running = jobs
        .table
        .borrow()
        .values()
        .filter(|j| j.owner == owner && lock(&j.shared).status.is_none())
        .count();
    if running >= max {
        return Err(Error::new(
            "TOO_MANY_JOBS",
            format!(
                "cannot start another background job: {running} of this agent's jobs are running (at most {max}); stop one with job_kill (job_list shows them) or wait for one to finish"
            ),
        ));
    }
    Ok(())
}

/// Starts a job; returns its id. Refused while `max_jobs` of `owner`'s
/// jobs run.
pub fn start(
    ctx: &Context,
    jobs: &Jobs,
    prepared: Prepared,
    spill_dir: &dsh_sdk::tempdir::DirHandle,
    owner: String,
    label: String,
    max_jobs: usize,
) -> Result<String> {
    check_room(jobs, &owner, max_jobs)?;
    let Prepared {
        mut cmd,
        keep,
        workdir,
        ..
    } = prepared;
    let id = {
        let mut n = jobs.next.borrow_mut();
        *n += 1;
        format!("bash-{n}")
    };
    // Spawned on the plugin's own thread: the job dies with it.
    let child = cmd.spawn().map_err(|e| {
        Error::new(
            "BASH_FAILED",
            format!("cannot run bash in {}: {e}", workdir.display()),
        )
    })?;
    drop(keep);
    let group = Arc::new(Group::new(child.id() as i32));
    let spill = format!("{id}-{}.output", dsh_sdk::new_id());
    let shared = Arc::new(Mutex::new(Shared {
        output: Capture::new(KEEP_BYTES, spill_dir.clone(), spill),
        status: None,
    }));
    let (s, g) = (shared.clone(), group.clone());
    let waiter = tokio::task::spawn_blocking(move || {
        let ended = exec::pump(child, &g, None, &Cancel::default(), |_, bytes| {
            lock(&s).output.push(bytes)
        });
        lock(&s).status = Some(match ended {
            Ok(e) => describe(e.status),
            Err(e) => format!("failed ({e})"),
        });
    });
    jobs.table.borrow_mut().insert(
        id.clone(),
        Job {
            owner: owner.clone(),
            label: label.clone(),
            group,
            shared,
            read_upto: 0,
        },
    );
    // The completion notice: steered into the owner (waking it when idle).
    let (c, jid, table) = (ctx.clone(), id.clone(), jobs.table.clone());
    ctx.spawn(async move {
        let _ = waiter.await;
        let status = table
            .borrow()
            .get(&jid)
            .and_then(|j| lock(&j.shared).status.clone())
            .unwrap_or_else(|| "finished".into());
        if owner.is_empty() {
            return;
        }
        // The inbox's `{text}` shorthand: a user text message with a
        // fresh id.
        let notice = UserInput::text(format!("background job {jid} (bash: {label}) finished [status: {status}]. Read its output with job_output."));
        let steered = Agents::new(&c).steer(&owner, notice).await.map(drop);
        // The owner may be gone (disposed) by now: nobody is left to tell.
        if let Err(e) = steered {
            dsh_sdk::tracing::debug!("the completion notice of job {jid} was not delivered: {e}");
        }
    });
    Ok(id)
}

fn status_of(job: &Job) -> String {
    let status = lock(&job.shared).status.clone();
    status.unwrap_or_else(|| "running".into())
}

/// `job_output`, `job_list`, `job_kill`.
pub async fn tool(jobs: &Jobs, req: &Request, exec: &Exec) -> Result<Reply> {
    let agent = exec.agent();
    let text = match Some(exec.name.as_str()) {
        Some(JobList::NAME) => {
            let JobListArgs {} = exec.arguments_for::<JobList>()?;
            let table = jobs.table.borrow();
            let lines: Vec<String> = table
                .iter()
                .filter(|(_, j)| j.owner == agent)
                .map(|(id, j)| format!("{id} [bash] {} — {}", status_of(j), j.label))
                .collect();
            if lines.is_empty() {
                "No background jobs".to_owned()
            } else {
                lines.join("\n")
            }
        }
        Some(JobOutput::NAME) => {
            let args = exec.arguments_for::<JobOutput>()?;
            let id = args.job_id;
            let wait = args.wait == Some(true);
            let timeout = Duration::from_millis(args.timeout_ms.unwrap_or(30_000).min(600_000));
            let deadline = Instant::now() + timeout;
            loop {
                let done = {
                    let table = jobs.table.borrow();
                    let job = table
                        .get(&id)
                        .filter(|j| j.owner == agent)
                        .ok_or_else(|| no_job(&id))?;
                    let done = lock(&job.shared).status.is_some();
                    done
                };
                if done || !wait || Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let mut table = jobs.table.borrow_mut();
            let job = table.get_mut(&id).ok_or_else(|| no_job(&id))?;
            let (skipped, new, total, note, status) = {
                let s = lock(&job.shared);
                let (skipped, new) = s.output.since(job.read_upto);
                (
                    skipped,
                    new,
                    s.output.total(),
                    s.output.saved_note("output"),
                    s.status.clone(),
                )
            };
            job.read_upto = total;
            let status = status.unwrap_or_else(|| "running".into());
            let mut body = String::new();
            if skipped > 0 {
                body.push_str(&format!("[{skipped} earlier bytes not shown; {note}]\n"));
            }
            let new = String::from_utf8_lossy(&new);
            body.push_str(if new.is_empty() && skipped == 0 {
                "(no new output)"
            } else {
                new.trim_end()
            });
            format!("{body}\n[status: {status}]")
        }
        Some(JobKill::NAME) => {
            let args = exec.arguments_for::<JobKill>()?;
            let id = args.job_id.as_str();
            let table = jobs.table.borrow();
            let job = table
                .get(id)
                .filter(|j| j.owner == agent)
                .ok_or_else(|| no_job(id))?;
            // Nothing is sent once the job has ended (its group id may be
            // another process's by now).
            job.group.kill();
            format!("killed background job {id}")
        }
        _ => return Err(req.unknown_method()),
    };
    Reply::json(ToolReply::text(&text))
}

fn no_job(id: &str) -> Error {
    Error::new(
        "JOB_NOT_FOUND",
        format!("no background job `{id}` for this agent"),
    )
}

/// The job tools' registrations.
pub fn schemas() -> Vec<RegisterParams> {
    vec![
        declaration::<JobOutput>(),
        declaration::<JobList>(),
        declaration::<JobKill>(),
    ]
}
