//! `headless`: `dsh-host --profile headless "task"` (reference dsh-product
//! §5). Runs the task to quiescence in a persisted session for the current
//! directory, prints the last assistant text on stdout and exits 0 iff the
//! final turn completed (else 1, with `dsh: <CODE>: <message>` on stderr).
//!
//! App arguments: `[--output text|jsonl] [--resume <session-id> |
//! --continue] task...` (`--continue`: the latest stored session of the
//! current directory); any other `--option` is refused (a misplaced
//! dsh-host option would otherwise become words of the task), unless it
//! follows a literal `--`. The stored sessions (`dsh-host sessions ...`):
//! `--list-sessions` (of the current directory), `--show-session <id>`,
//! `--fork-session <id>` (prints the new id), `--remove-session <id>`.
//!
//! The model is the one every app starts on (`agentDefaultModel`, with
//! this run's `dsh-host --model`); a resumed session keeps the route its
//! log names unless the run has a `--model`.

mod outcome;
mod stdout;
mod stored;
mod stream;

use std::rc::Rc;

use dsh_sdk::api::agent_default_model::{
    ensure_served, follows_from_route, resume_options, resume_route, route_moved,
    AgentDefaultModel, Place,
};
use dsh_sdk::api::agent_loop::{AgentLoop, CreateMeta, CreateParams, ResumeParams};
use dsh_sdk::api::agents::{Agents, WhenIdleReply};
use dsh_sdk::api::host::Host;
use dsh_sdk::api::session_persistence::SessionPersistence;
use dsh_sdk::api::sessions::{SessionAppended, Sessions};
use dsh_sdk::api::subagents::Subagents;
use dsh_sdk::names::{bus, service};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::records::TurnEndReason;
use dsh_sdk::vocab::Message;
use serde::Deserialize;
use serde_json::Value;

use crate::outcome::Outcome;
use crate::stdout::Stdout;
use crate::stream::EventLine;

#[derive(Deserialize, Default, Clone)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    /// Moved to the `agent-default-model` row: refused with a message
    /// saying so (see `dsh_sdk::api::agent_default_model::route_moved`).
    provider: Option<Value>,
    /// Moved, as `provider`.
    model: Option<Value>,
    max_tokens: Option<u64>,
    /// Print assistant text as it streams (and tool calls as they start)
    /// instead of only the last answer at the end.
    stream: bool,
}

/// What to do with the stored sessions instead of running a task.
#[derive(Debug, PartialEq)]
enum Stored {
    List,
    Show(String),
    Fork(String),
    Remove(String),
}

#[derive(Default, Debug)]
struct Args {
    jsonl: bool,
    resume: Option<String>,
    /// `--continue`: resume the latest session of the current directory.
    latest: bool,
    stored: Option<Stored>,
    task: String,
}

/// The id after `flag`, or why there is none.
fn id_after<'a>(
    flag: &str,
    it: &mut impl Iterator<Item = &'a String>,
) -> std::result::Result<String, String> {
    it.next()
        .filter(|id| !id.is_empty())
        .cloned()
        .ok_or_else(|| format!("{flag} needs a session id"))
}

fn parse(args: &[String]) -> std::result::Result<Args, String> {
    let mut out = Args::default();
    let mut words = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let stored = match a.as_str() {
            "--list-sessions" => Some(Stored::List),
            "--show-session" => Some(Stored::Show(id_after(a, &mut it)?)),
            "--fork-session" => Some(Stored::Fork(id_after(a, &mut it)?)),
            "--remove-session" => Some(Stored::Remove(id_after(a, &mut it)?)),
            _ => None,
        };
        if stored.is_some() {
            out.stored = stored;
            continue;
        }
        match a.as_str() {
            "--output" => match it.next().map(String::as_str) {
                Some("jsonl") => out.jsonl = true,
                Some("text") => out.jsonl = false,
                other => return Err(format!("--output takes `text` or `jsonl`, got {other:?}")),
            },
            "--resume" => out.resume = Some(id_after(a, &mut it)?),
            "--continue" => out.latest = true,
            "--" => words.extend(it.by_ref().cloned()),
            option if looks_like_option(option) => return Err(unknown_option(option)),
            _ => words.push(a.clone()),
        }
    }
    if out.latest && out.resume.is_some() {
        return Err("--continue and --resume <id> cannot be combined: pick one session".into());
    }
    out.task = words.join(" ");
    Ok(out)
}

/// A word of the arguments that reads as an option (`--name` or
/// `--name=value`), not as a word of the task.
fn looks_like_option(word: &str) -> bool {
    word.strip_prefix("--").is_some_and(|rest| {
        let name = rest.split_once('=').map_or(rest, |(name, _)| name);
        name.starts_with(|c: char| c.is_ascii_alphabetic())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

/// Why an option the app does not take is refused rather than sent to the
/// model as words of the task (a misplaced `--model` would otherwise run
/// the task on another route than asked).
fn unknown_option(word: &str) -> String {
    let name = word.split_once('=').map_or(word, |(name, _)| name);
    format!(
        "unknown option `{name}`: headless takes --output, --resume and --continue; a dsh-host \
         option (--model, --profile, --patch...) goes before the task, and a task word that \
         starts with `--` goes after a literal `--` (dsh-host \"the task\" -- {name})"
    )
}

async fn print(ctx: &Context, text: &str) {
    let _ = Host::new(ctx).print(text).await;
}

async fn eprint(ctx: &Context, text: &str) {
    let _ = Host::new(ctx).eprint(text).await;
}

/// `dsh: <CODE>: <message>` for stderr. Always sanitized: an error can
/// quote the model, a tool or a stored log, and stderr is read by a person
/// (no script relies on its exact bytes).
fn error_line(code: &str, message: &str) -> String {
    let sanitize = dsh_sdk::terminal_text::sanitize;
    format!("dsh: {}: {}\n", sanitize(code), sanitize(message))
}

async fn exit(ctx: &Context, code: i32) {
    let _ = Host::new(ctx).exit(code).await;
}

/// `id`, once its stored header says it is a session of `cwd` (or of no
/// directory): `--resume` of another directory's session is refused with
/// `SESSION_OTHER_DIRECTORY` before anything is loaded, locked or repaired.
/// `--continue` checks the session it picked from `list` the same way: the
/// listing matched a log's own header, but `load` finds the id's log in
/// any folder, so the check reads the header of the log that is loaded.
async fn resumable(ctx: &Context, id: &str, cwd: &str) -> Result<String> {
    SessionPersistence::new(ctx).resumable_from(id, cwd).await?;
    Ok(id.to_owned())
}

async fn run(ctx: Context, config: Config) -> Result<i32> {
    let host = Host::new(&ctx);
    let argv = host.args().await?;
    let args = match parse(&argv) {
        Ok(a) => a,
        Err(e) => {
            eprint(&ctx, &format!("dsh: {e}\n")).await;
            return Ok(1);
        }
    };
    let cwd = host.info().await?.cwd.unwrap_or_else(|| "/".to_owned());
    if let Some(what) = &args.stored {
        return stored::run(&ctx, what, &cwd).await;
    }
    let resume = match (&args.resume, args.latest) {
        (Some(id), _) => Some(resumable(&ctx, id, &cwd).await?),
        (None, true) => match SessionPersistence::new(&ctx).latest(&cwd).await? {
            Some(latest) => Some(resumable(&ctx, &latest.id, &cwd).await?),
            None => {
                eprint(
                    &ctx,
                    &format!("dsh: no stored session of {} to continue; run a task without --continue to start one\n", dsh_sdk::terminal_text::sanitize(&cwd)),
                )
                .await;
                return Ok(1);
            }
        },
        (None, false) => None,
    };
    if args.task.trim().is_empty() {
        eprint(
            &ctx,
            "dsh: a task is required, for example: dsh-host --profile headless \"run the tests\"\n",
        )
        .await;
        return Ok(1);
    }
    // The model choice of every app; a new session starts on it only once
    // a route serves it (a bad `--model` leaves no empty session behind).
    // A resumed session goes on with its logged route even when the
    // settings file cannot be read (said as a warning below).
    let current = AgentDefaultModel::new(&ctx).current_selection().await;
    let mut chosen = None;
    if resume.is_none() {
        let current = current.as_ref().map_err(Clone::clone)?;
        if let Some(note) = current.override_notice() {
            eprint(
                &ctx,
                &format!("dsh: {}\n", dsh_sdk::terminal_text::sanitize(&note)),
            )
            .await;
        }
        let provenance = current.provenance(Place::CommandLine);
        ensure_served(&ctx, &provenance).await?;
        chosen = Some(provenance);
    }
    let options = resume_options(&current, config.max_tokens);
    let loop_ = AgentLoop::new(&ctx);
    let created = match &resume {
        Some(id) => {
            let params = ResumeParams {
                session_id: id.clone(),
                agent_options: options,
                ..Default::default()
            };
            loop_.resume(&params).await?
        }
        None => {
            let params = CreateParams {
                session_id: None,
                agent_options: options,
                meta: Some(CreateMeta {
                    cwd: Some(cwd.clone()),
                    ..CreateMeta::default()
                }),
                ..Default::default()
            };
            loop_.create(&params).await?
        }
    };
    let agent = created.agent;
    let chosen = match chosen {
        Some(chosen) => chosen,
        None => {
            // The route its log names goes on, unless the run has a --model.
            let chosen = resume_route(&ctx, &agent, &current, Place::CommandLine).await?;
            if let Err(e) = &current {
                let warning = format!(
                    "warning: {}: {} (the session goes on with the route its log names, {})",
                    e.code,
                    e.message,
                    chosen.route.route()
                );
                eprint(
                    &ctx,
                    &format!("dsh: {}\n", dsh_sdk::terminal_text::sanitize(&warning)),
                )
                .await;
            }
            chosen
        }
    };
    let start = Sessions::new(&ctx).header(&agent).await?.seq;
    // Model and tool text is sanitized on a terminal, exact on a pipe.
    let stdout = Rc::new(Stdout::detect(&host).await);
    // Each retry of a model request, on stderr (every output mode).
    stream::say_retries(&ctx, &agent);
    if config.stream && !args.jsonl {
        let (c, id, out) = (ctx.clone(), agent.clone(), stdout.clone());
        ctx.on(bus::SESSION_EVENT, move |ev| {
            let (c, id, out) = (c.clone(), id.clone(), out.clone());
            async move {
                let appended: SessionAppended = ev.payload_as()?;
                if appended.session_id != id {
                    return Ok(Value::Null);
                }
                match stream::stream_text(&appended.event, &out) {
                    Ok(Some(text)) if !text.is_empty() => print(&c, &text).await,
                    Ok(_) => {}
                    // Said, and the run goes on: the log is the record.
                    Err(e) => eprint(&c, &error_line(&e.code, &e.message)).await,
                }
                Ok(Value::Null)
            }
        });
    }
    if args.jsonl {
        let (c, id, out) = (ctx.clone(), agent.clone(), stdout.clone());
        ctx.on(bus::SESSION_EVENT, move |ev| {
            let (c, id, out) = (c.clone(), id.clone(), out.clone());
            async move {
                // The event is printed as it was emitted, never re-encoded.
                let appended: SessionAppended<Payload> = ev.payload_as()?;
                if appended.session_id == id {
                    let line = serde_json::to_string(&EventLine {
                        kind: EventLine::KIND,
                        session_id: &id,
                        event: &appended.event,
                    })?;
                    print(&c, &format!("{}\n", out.json(&line))).await;
                }
                Ok(Value::Null)
            }
        });
    }
    let agents = Agents::new(&ctx);
    let task = Message::user_text(dsh_sdk::new_id(), args.task);
    agents.followup(&agent, task).await?;
    let idle = settled(&ctx, &agent).await?;
    let sessions = Sessions::new(&ctx);
    sessions.flush(&agent).await?;
    let events = sessions.events(&agent, start).await?;
    let outcome = Outcome::read(&events, &idle.reason)?;
    let completed = outcome.completed();
    if args.jsonl {
        // Let the last session_event lines go out first.
        tokio::task::yield_now().await;
        let line = outcome.result_line(&agent)?;
        print(&ctx, &format!("{}\n", stdout.json(&line))).await;
    } else if config.stream {
        tokio::task::yield_now().await;
    } else if !outcome.output.is_empty() || completed {
        print(&ctx, &format!("{}\n", stdout.text(&outcome.output))).await;
    }
    if completed {
        return Ok(0);
    }
    let (code, mut message) = outcome.failure();
    if let Some(TurnEndReason::Error { error }) = &outcome.reason {
        if follows_from_route(error) {
            message = format!("{message} ({})", chosen.explain());
        }
    }
    eprint(&ctx, &error_line(&code, &message)).await;
    Ok(1)
}

/// Waits until `agent` is idle and none of the background subagents it
/// started runs: a child's settlement notice wakes the agent, which
/// answers it, so the answer printed is the one given after the last
/// child. Said on stderr while it waits. Without a `subagents` service,
/// the agent's going idle is all.
async fn settled(ctx: &Context, agent: &str) -> Result<WhenIdleReply> {
    let (agents, subagents) = (Agents::new(ctx), Subagents::new(ctx));
    loop {
        let idle = agents.when_idle(agent).await?;
        let running = match subagents.running_below(agent).await {
            Ok(r) => r.running,
            Err(e) if e.code == codes::SERVICE_UNAVAILABLE => return Ok(idle),
            Err(e) => return Err(e),
        };
        if running > 0 {
            let s = if running == 1 { "" } else { "s" };
            eprint(
                ctx,
                &format!("dsh: waiting for {running} background subagent{s}\n"),
            )
            .await;
        }
        // None ran: nothing can wake the idle agent any more. A registry
        // that went away meanwhile (unloaded) has no children left.
        match subagents.when_settled(agent).await {
            Ok(settled) if settled.waited > 0 => {}
            Ok(_) => return Ok(idle),
            Err(e) => {
                dsh_sdk::tracing::debug!("waiting for the subagents of {agent}: {e}");
                return Ok(idle);
            }
        }
    }
}

struct Headless;

impl Plugin for Headless {
    const NAME: &'static str = "headless";
    const DESCRIPTION: &'static str = "one-shot task runner";
    const INJECT: &'static [&'static str] = &[
        service::AGENTS,
        service::AGENT_LOOP,
        service::SESSIONS,
        service::AGENT_DEFAULT_MODEL,
    ];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        if config.provider.is_some() || config.model.is_some() {
            return Err(route_moved(Self::NAME));
        }
        let c = ctx.clone();
        ctx.spawn(async move {
            let code = match run(c.clone(), config).await {
                Ok(code) => code,
                Err(e) => {
                    eprint(&c, &error_line(&e.code, &e.message)).await;
                    1
                }
            };
            exit(&c, code).await;
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Headless);

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> std::result::Result<Args, String> {
        parse(&words.iter().map(|w| w.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn session_flags_parse_and_bad_ones_say_why() {
        let a = args(&["--continue", "next", "task"]).unwrap();
        assert!(a.latest && a.resume.is_none());
        assert_eq!(a.task, "next task");
        let a = args(&["--show-session", "s-1"]).unwrap();
        assert_eq!(a.stored, Some(Stored::Show("s-1".into())));
        assert_eq!(
            args(&["--fork-session", "s-1"]).unwrap().stored,
            Some(Stored::Fork("s-1".into()))
        );
        assert_eq!(
            args(&["--remove-session", "s-1"]).unwrap().stored,
            Some(Stored::Remove("s-1".into()))
        );
        assert_eq!(
            args(&["--remove-session"]).unwrap_err(),
            "--remove-session needs a session id"
        );
        assert!(args(&["--continue", "--resume", "s", "t"])
            .unwrap_err()
            .contains("cannot be combined"));
    }

    #[test]
    fn an_unknown_option_is_refused_unless_it_follows_a_literal_escape() {
        let e = args(&["review src/", "--model", "local/qwen3"]).unwrap_err();
        assert!(
            e.starts_with("unknown option `--model`: ")
                && e.contains("goes before the task")
                && e.contains("after a literal `--`"),
            "{e}"
        );
        assert!(args(&["fix", "--verbose=2"])
            .unwrap_err()
            .contains("`--verbose`"));
        // Escaped, or not an option's shape: words of the task.
        let a = args(&["explain", "--", "--model", "flag"]).unwrap();
        assert_eq!(a.task, "explain --model flag");
        let a = args(&["--output", "jsonl", "why --x y?", "--", "-- note"]).unwrap();
        assert_eq!(a.task, "why --x y? -- note");
        assert!(a.jsonl);
        let a = args(&["fix it", "--output", "jsonl"]).unwrap();
        assert!(a.jsonl && a.task == "fix it");
        assert_eq!(args(&["--", "--4 is"]).unwrap().task, "--4 is");
        assert_eq!(args(&["a", "---"]).unwrap().task, "a ---");
    }
}
