//! `chat`: the interactive terminal front end (`dsh-host` with no task).
//! Streams the agent's answers, tool calls and results as they are logged,
//! takes input through the host's terminal (the host reads stdin; a
//! plugin never blocks in a read, so a reload mid-conversation keeps the
//! session, the typed input and every keystroke), steers a running turn
//! with what is typed during it, cancels it with Ctrl-C, and is the
//! `approval` service's approver.
//!
//! App arguments: `[--continue] [--resume <session-id>]`.
//!
//! The model is the one every app starts on (`agentDefaultModel`, with
//! this run's `dsh-host --model`; module `route`); `/model` switches the
//! live agent and saves the choice for later sessions.

mod app;
mod children;
mod editor;
mod history;
mod keys;
mod render;
mod route;
mod screen;
mod transcript;

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

use dsh_sdk::api::agent_default_model::route_moved;
use dsh_sdk::api::agent_loop::{AgentLoop, AgentRef};
use dsh_sdk::api::approval::{ApprovalOutcome, ApprovalReply, ApprovalRequest};
use dsh_sdk::api::host::Host;
use dsh_sdk::api::session_persistence::SessionPersistence;
use dsh_sdk::api::sessions::SessionAppended;
use dsh_sdk::api::subagents::ChildReady;
use dsh_sdk::names::{bus, service};
use dsh_sdk::prelude::*;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use app::{App, Msg, View};
use editor::Editor;
use render::Renderer;
use screen::Screen;

/// The chat's configuration (its row's `config`).
#[derive(Deserialize, Default, Clone)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Moved to the `agent-default-model` row: refused with a message
    /// saying so (see `dsh_sdk::api::agent_default_model::route_moved`).
    provider: Option<Value>,
    /// Moved, as `provider`.
    model: Option<Value>,
    max_tokens: Option<u64>,
    /// The input history (default `$DSH_HOME/chat-history`).
    history_file: Option<PathBuf>,
    #[serde(skip)]
    history_path: PathBuf,
}

/// What the app arguments ask for.
enum Start {
    New,
    Continue,
    Resume(String),
}

fn parse_args(args: &[String]) -> std::result::Result<Start, String> {
    let mut start = Start::New;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if !matches!(start, Start::New) {
            return Err("--continue and --resume <id> cannot be combined: pick one session".into());
        }
        start = match a.as_str() {
            "--continue" => Start::Continue,
            "--resume" => Start::Resume(it.next().ok_or("--resume needs a session id")?.clone()),
            other => {
                return Err(format!(
                    "chat takes no task (`{other}`): type it at the prompt, or run `dsh-host \"task\"` for a one-shot run"
                ))
            }
        };
    }
    Ok(start)
}

/// `dsh: <text>` for stderr before the chat starts, sanitized: an error
/// can quote an argument, a stored header (its `cwd`) or a stored log, and
/// none of their control sequences may reach the terminal.
fn startup_error(text: &str) -> String {
    format!("dsh: {}\n", dsh_sdk::terminal_text::sanitize(text))
}

async fn run(
    ctx: Context,
    mut config: Config,
    view: Rc<RefCell<View>>,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    tx: mpsc::UnboundedSender<Msg>,
) -> Result<i32> {
    let host = Host::new(&ctx);
    let info = host.info().await?;
    config.history_path = config
        .history_file
        .clone()
        .unwrap_or_else(|| PathBuf::from(&info.home).join("chat-history"));
    let fresh = view.borrow().agent.is_empty();
    let mut resume = None;
    if fresh {
        let start = match parse_args(&host.args().await?) {
            Ok(s) => s,
            Err(e) => {
                let _ = host.eprint(&startup_error(&e.to_string())).await;
                return Ok(1);
            }
        };
        let term = host.terminal().await?;
        if !term.stdin {
            let _ = host
                .eprint("dsh: chat needs a terminal on stdin; for a one-shot run give a task: dsh-host \"run the tests\"\n")
                .await;
            return Ok(1);
        }
        let cwd = info.cwd.clone().unwrap_or_else(|| "/".to_owned());
        resume = match start {
            Start::New => None,
            Start::Resume(id) => Some(id),
            Start::Continue => match SessionPersistence::new(&ctx).latest(&cwd).await? {
                Some(latest) => Some(latest.id),
                None => {
                    let _ = host
                        .eprint("dsh: --continue: no stored session for this directory\n")
                        .await;
                    return Ok(1);
                }
            },
        };
        {
            let mut v = view.borrow_mut();
            let cols = usize::from(term.cols).max(20);
            v.screen = Screen::new(cols);
            v.renderer = Renderer::new(app::theme(term.stdout), cols);
            v.editor = Editor::new(history::load(&config.history_path));
        }
        // Raw, with bracketed paste: a paste arrives as one key.
        host.set_raw_mode(true).await?;
    }
    let cwd = info.cwd.unwrap_or_else(|| "/".to_owned());
    let mut app = App::new(&ctx, config, view, tx);
    if let Err(e) = app.open(resume, &cwd).await {
        let _ = host.set_raw_mode(false).await;
        let _ = host
            .eprint(&startup_error(&format!("{}: {}", e.code, e.message)))
            .await;
        return Ok(1);
    }
    app.run(&mut rx).await?;
    Ok(0)
}

struct Chat;

impl Plugin for Chat {
    const NAME: &'static str = "chat";
    const DESCRIPTION: &'static str = "interactive terminal chat";
    const INJECT: &'static [&'static str] = &[
        service::AGENTS,
        service::AGENT_LOOP,
        service::SESSIONS,
        service::COMMANDS,
        service::AGENT_DEFAULT_MODEL,
    ];
    const PROVIDES: &'static [&'static str] = &[service::APPROVAL];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        if config.provider.is_some() || config.model.is_some() {
            return Err(route_moved(Self::NAME));
        }
        let inherited: Option<View> = ctx.inherited()?;
        let view = Rc::new(RefCell::new(inherited.unwrap_or_default()));
        let (tx, rx) = mpsc::unbounded_channel();
        // The next generation goes on where this one stands.
        // The agent is released to it (agent-loop disposes an agent with
        // its owner), so a running turn goes on across the reload.
        let (v, reloading) = (view.clone(), Rc::new(std::cell::Cell::new(false)));
        let r = reloading.clone();
        ctx.handoff(move || {
            let mut view = v.borrow_mut();
            view.released = !view.agent.is_empty();
            r.set(view.released);
            match serde_json::to_value(&*view) {
                Ok(state) => state,
                Err(e) => {
                    // Null hands nothing: the next generation starts afresh.
                    dsh_sdk::tracing::warn!("chat: cannot hand the conversation over: {e}");
                    Value::Null
                }
            }
        });
        let (c, v) = (ctx.clone(), view.clone());
        ctx.effect(move || async move {
            if reloading.get() {
                let agent = v.borrow().agent.clone();
                if let Err(e) = AgentLoop::new(&c).release(&agent).await {
                    dsh_sdk::tracing::warn!("chat: cannot hand the agent over: {e}");
                }
            }
        });
        // The current session's events, as they are logged.
        let (v, t) = (view.clone(), tx.clone());
        ctx.on(bus::SESSION_EVENT, move |ev| {
            let (v, t) = (v.clone(), t.clone());
            async move {
                let appended: SessionAppended = ev.payload_as()?;
                if appended.session_id == v.borrow().agent {
                    let _ = t.send(Msg::Event(appended.event));
                } else if v.borrow().children.has(&appended.session_id) {
                    let _ = t.send(Msg::ChildEvent(appended.session_id, appended.event));
                }
                Ok(Value::Null)
            }
        });
        // The subagents the chat's agent starts, and their going.
        let (v, t) = (view.clone(), tx.clone());
        ctx.on(bus::SUBAGENT_CHILD_READY, move |ev| {
            let (v, t) = (v.clone(), t.clone());
            async move {
                let ready: ChildReady = ev.payload_as()?;
                if ready.parent == v.borrow().agent {
                    let _ = t.send(Msg::ChildStarted(ready.child, ready.label));
                }
                Ok(Value::Null)
            }
        });
        let (v, t) = (view.clone(), tx.clone());
        ctx.on(bus::AGENT_DISPOSED, move |ev| {
            let (v, t) = (v.clone(), t.clone());
            async move {
                let AgentRef { agent } = ev.payload_as()?;
                if v.borrow().children.has(&agent) {
                    let _ = t.send(Msg::ChildGone(agent));
                }
                Ok(Value::Null)
            }
        });
        // The terminal is the approver.
        let t = tx.clone();
        ctx.provide(service::APPROVAL, move |req| {
            let t = t.clone();
            async move {
                let request: ApprovalRequest = req.params_as()?;
                let (reply, answer) = oneshot::channel();
                let cancelled = ApprovalReply {
                    outcome: Some(ApprovalOutcome::Cancelled),
                };
                if t.send(Msg::Approval(request, reply)).is_err() {
                    return Reply::json(cancelled);
                }
                Reply::json(answer.await.unwrap_or(cancelled))
            }
        });
        // The chat's own commands, through the registry when there is one.
        let t = tx.clone();
        let serve = dsh_sdk::api::commands::serve(&ctx, app::own_commands(), move |run| {
            let t = t.clone();
            async move {
                let (reply, answer) = oneshot::channel();
                t.send(Msg::Command(run, reply))
                    .map_err(|_| Error::msg("the chat is gone"))?;
                answer
                    .await
                    .map_err(|_| Error::msg("the chat ended before the command did"))
            }
        })
        .await;
        if let Err(e) = serve {
            if e.code != codes::SERVICE_UNAVAILABLE {
                return Err(e);
            }
        }
        let c = ctx.clone();
        ctx.spawn(async move {
            let code = match run(c.clone(), config, view, rx, tx).await {
                Ok(code) => code,
                Err(e) => {
                    let host = Host::new(&c);
                    let _ = host.set_raw_mode(false).await;
                    let _ = host
                        .eprint(&format!("dsh: {}: {}\n", e.code, e.message))
                        .await;
                    1
                }
            };
            if code != 0 {
                let _ = Host::new(&c).exit(code).await;
            }
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Chat);

/// For `cargo xtask bench`: the rendering work of streamed chunks.
#[doc(hidden)]
pub mod bench {
    use std::time::{Duration, Instant};

    use dsh_sdk::vocab::records::AssistantChunk;
    use dsh_sdk::vocab::{event, Chunk, Extra, SessionEvent};
    use dsh_sdk::{LazyJson, Result};
    use serde_json::Value;

    use crate::render::{Renderer, Theme};
    use crate::screen::Screen;

    /// Time to render `n` streamed text chunks (a word each, a fenced code
    /// block among them) as the chat does for each: the event to styled
    /// text, placed above the input area. The events are read from their
    /// text, as the chat gets them from the bus.
    pub fn render_chunks(n: usize) -> Result<Duration> {
        let words = [
            "Here ",
            "is ",
            "the ",
            "fix:\n",
            "```rs\n",
            "let x = 1;\n",
            "```\n",
            "done. ",
        ];
        let events = (0..n)
            .map(|i| {
                let data = AssistantChunk {
                    turn: 1,
                    step: 1,
                    chunk: Chunk::text(0, words[i % words.len()]),
                    extra: Extra::new(),
                };
                let mut e = SessionEvent::new(event::ASSISTANT_CHUNK, i as u64, Value::Null);
                e.data = LazyJson::from_text(serde_json::to_string(&data)?)?;
                Ok(e)
            })
            .collect::<Result<Vec<SessionEvent>>>()?;
        let mut renderer = Renderer::new(Theme { color: true }, 100);
        let mut screen = Screen::new(100);
        let mut bytes = 0;
        let t = Instant::now();
        for e in &events {
            let out = renderer.event(e);
            let text = screen.output(&out.styled, &out.plain);
            bytes += text.len();
        }
        let elapsed = t.elapsed();
        std::hint::black_box(bytes);
        Ok(elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_startup_error_reaches_the_terminal_without_its_escapes() {
        // A crafted header `cwd` quoted by SESSION_OTHER_DIRECTORY.
        let cwd = "/tmp/x\x1b]0;owned\x07\x1b]52;c;ZWNobyBoaQ==\x07\u{202e}y";
        let line = startup_error(&format!(
            "SESSION_OTHER_DIRECTORY: session \"s\" belongs to {cwd}, not to /w"
        ));
        assert!(!line.contains('\x1b') && !line.contains('\x07'), "{line:?}");
        assert!(!line.contains('\u{202e}'), "{line:?}");
        assert!(line.starts_with("dsh: SESSION_OTHER_DIRECTORY: session \"s\" belongs to /tmp/x"));
        assert!(line.ends_with(", not to /w\n"), "{line:?}");
        assert!(!startup_error("--resume \x1b[2Jx").contains('\x1b'));
    }
}
