//! The chat loop: terminal input in (through the host, never a read of our
//! own), session events and turn ends out, approvals asked in between.
//! Everything the next generation needs to go on after a reload lives in
//! [`View`], handed over on dispose.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use dsh_sdk::api::agent_default_model::{
    follows_from_route, CurrentSelection, ModelSelection, Place, Provenance,
};
use dsh_sdk::api::agent_loop::{
    AgentLoop, AgentOptions, AgentRef, CreateMeta, CreateParams, ResumeParams,
};
use dsh_sdk::api::agents::{Agents, CancelParams, RunStatus, WhenIdleReply};
use dsh_sdk::api::approval::{ApprovalOutcome, ApprovalReply, ApprovalRequest};
use dsh_sdk::api::commands::{
    CommandResult, Commands, ExecuteReply, RegisterParams, ResultKind, RunParams,
};
use dsh_sdk::api::host::{Host, PluginRow, UntrustedProject, ROW_ACTIVE};
use dsh_sdk::api::mcp::{self, McpServer, ServerStatus};
use dsh_sdk::api::session_persistence::SessionPersistence;
use dsh_sdk::api::sessions::{ForkParams, Sessions};
use dsh_sdk::api::subagents::Subagents;
use dsh_sdk::names::{bus, code};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::records::{RequestContext, ToolCall, ToolResult, TurnEndReason};
use dsh_sdk::vocab::{event, ContentBlock, Message, SessionEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::children::Children;
use crate::editor::{Action, Editor};
use crate::keys::{Key, KeyParser};
use crate::render::{Out, Renderer, Theme, Tone};
use crate::screen::{sanitize, Prompt, Screen};
use crate::transcript::last_exchange;
use crate::Config;

/// What reaches the loop besides input.
pub enum Msg {
    /// An event of the current session's log.
    Event(SessionEvent),
    /// The turn started by the chat went idle.
    TurnDone(String, Result<WhenIdleReply>),
    /// A tool call asks for approval; the answer goes back on the sender.
    Approval(ApprovalRequest, oneshot::Sender<ApprovalReply>),
    /// Keys were queued in [`View::keys`] (false: the terminal ended), or
    /// reading failed.
    Input(Result<bool>),
    /// The registry runs one of the chat's own commands; the result goes
    /// back on the sender.
    Command(RunParams, oneshot::Sender<CommandResult>),
    /// A command line the chat sent to the registry settled.
    CommandDone(String, Result<ExecuteReply>),
    /// The chat's agent started a subagent `(id, label)`.
    ChildStarted(String, String),
    /// An event of a running subagent's log.
    ChildEvent(String, SessionEvent),
    /// A subagent went away (it settled, or was stopped).
    ChildGone(String),
}

/// The chat's own commands, registered with the `commands` seam (so they
/// are listed and logged like any other) and run by the chat loop.
pub fn own_commands() -> Vec<RegisterParams> {
    vec![
        RegisterParams::new("new", "start a new session"),
        RegisterParams::new("sessions", "the stored sessions of this directory"),
        RegisterParams::new("resume", "continue a stored session").with_hint("<id>"),
        RegisterParams::new("fork", "continue in a copy of this session"),
        RegisterParams::new("plugins", "every row: state, generation, why it failed"),
        RegisterParams::new("agents", "the subagents of this session and what they do"),
        RegisterParams::new(
            "mcp",
            "MCP servers: state and tools; reconnect or log in to one",
        )
        .with_hint("[reconnect|login <name>]"),
        RegisterParams::new("exit", "leave (Ctrl-D, or Ctrl-C twice)"),
    ]
}

/// What survives a reload (handed to the next generation).
#[derive(Serialize, Deserialize, Default)]
pub struct View {
    /// The agent (its id is the session id).
    pub agent: String,
    /// The last terminal input received: acknowledged once its keys are
    /// in `keys` (handed over with them).
    pub ack: Option<u64>,
    /// Keys received and not yet handled (a reload hands them over).
    pub keys: std::collections::VecDeque<Key>,
    /// The host's lines received and not yet shown (a reload's own line
    /// among them: it reaches the generation it announces).
    #[serde(default)]
    pub notices: std::collections::VecDeque<String>,
    /// An escape sequence or paste split across reads.
    pub parser: KeyParser,
    pub editor: Editor,
    pub screen: Screen,
    pub renderer: Renderer,
    /// A turn started here runs.
    pub running: bool,
    /// (agent, tool) pairs the user allowed for the session.
    pub allowed: Vec<(String, String)>,
    /// Tool calls seen: callId → (name, arguments), for approval prompts.
    pub calls: HashMap<String, (String, String)>,
    /// A Ctrl-C at an empty prompt was seen (the next one exits).
    pub armed_exit: bool,
    /// The predecessor released the agent to this generation (see
    /// [`App::reopen`]).
    #[serde(default)]
    pub released: bool,
    /// The route the session was started or resumed on: what a reload
    /// goes on with when the settings cannot be read and the log names no
    /// route yet.
    #[serde(default)]
    pub route: Option<ModelSelection>,
    /// The settings' override of a patched row was said (it is said once).
    #[serde(default)]
    pub override_said: bool,
    /// The last offer of trust asked about (each offer is asked once, a
    /// reload included; a server added later is a new offer).
    #[serde(default)]
    pub trust_offered: Option<UntrustedProject>,
    /// The subagents of the agent that run, shown above the prompt.
    #[serde(default)]
    pub children: Children,
}

/// The approval being asked.
struct Asking {
    request: ApprovalRequest,
    reply: oneshot::Sender<ApprovalReply>,
}

/// The running chat.
pub struct App {
    ctx: Context,
    host: Host,
    config: Config,
    pub view: Rc<RefCell<View>>,
    asking: Option<Asking>,
    /// When the approval prompt was drawn (keys typed before a person could
    /// have seen it do not answer it).
    asked_at: Option<std::time::Instant>,
    queued_approvals: Vec<Asking>,
    /// The project offered for trust, while the question is asked.
    trust_question: Option<UntrustedProject>,
    tx: mpsc::UnboundedSender<Msg>,
    quit: bool,
    /// `/exit` ran through the registry: leave once it settled (so its
    /// `command/done` is logged).
    exit_after_command: bool,
    /// Who chose the route of the session (for a failure that follows
    /// from it).
    chosen: Option<Provenance>,
}

/// Keys this soon after an approval prompt was drawn do not answer it.
const APPROVAL_GRACE: std::time::Duration = std::time::Duration::from_millis(300);

/// How long a reloaded chat waits for its predecessor's agent to go.
const REOPEN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl App {
    /// A chat on `view` (a fresh one, or the predecessor's).
    pub fn new(
        ctx: &Context,
        config: Config,
        view: Rc<RefCell<View>>,
        tx: mpsc::UnboundedSender<Msg>,
    ) -> App {
        App {
            ctx: ctx.clone(),
            host: Host::new(ctx),
            config,
            view,
            asking: None,
            trust_question: None,
            asked_at: None,
            queued_approvals: Vec::new(),
            tx,
            quit: false,
            exit_after_command: false,
            chosen: None,
        }
    }

    async fn print(&self, text: &str) {
        if !text.is_empty() {
            let _ = self.host.print(text).await;
        }
    }

    /// Prints output above the input area and draws the input again.
    async fn show(&self, out: &Out) {
        let text = {
            let mut v = self.view.borrow_mut();
            let styled = if v.renderer.theme.color {
                &out.styled
            } else {
                &out.plain
            };
            let mut text = v.screen.output(styled, &out.plain);
            text.push_str(&self.input_area(&mut v));
            text
        };
        self.print(&text).await;
    }

    /// Prints lines of our own above an answer that is streaming (it is
    /// printed again below them and goes on there), and draws the input
    /// again.
    async fn interject(&self, out: &Out) {
        let text = {
            let mut v = self.view.borrow_mut();
            let styled = if v.renderer.theme.color {
                &out.styled
            } else {
                &out.plain
            };
            let mut text = v.screen.interject(styled, &out.plain);
            text.push_str(&self.input_area(&mut v));
            text
        };
        self.print(&text).await;
    }

    /// A line of our own (a notice), on a line of its own. While a turn
    /// runs it goes above the streaming answer, which is left as it is
    /// (a command's output never lands inside it); otherwise the answer's
    /// block is ended first.
    async fn notice(&self, tone: Tone, text: &str) {
        let (out, running) = {
            let mut v = self.view.borrow_mut();
            let running = v.running;
            let mut out = if running {
                Out::default()
            } else {
                v.renderer.finish_block()
            };
            let theme = v.renderer.theme;
            let text = sanitize(text);
            theme.push(&mut out, tone, &text);
            if !text.ends_with('\n') {
                theme.push(&mut out, Tone::Plain, "\n");
            }
            (out, running)
        };
        if running {
            self.interject(&out).await;
        } else {
            self.show(&out).await;
        }
    }

    /// The input area's text: drawn at an idle prompt, while an approval
    /// or the project's trust is asked, or when something is typed during
    /// a turn.
    fn input_area(&self, v: &mut View) -> String {
        // A question being asked (an approval first) takes the input area.
        let question = match (&self.asking, &self.trust_question) {
            (Some(a), _) => Some(approval_question(&a.request, &v.calls)),
            (None, Some(project)) => Some(trust_question(project)),
            (None, None) => None,
        };
        if let Some(question) = question {
            let prompt = Prompt {
                prefix: "? ",
                styled_prefix: "? ",
                text: &question,
                cursor: question.chars().count(),
                status: &[],
            };
            return v.screen.draw_input(&prompt);
        }
        let text = v.editor.text();
        let status = v.children.lines(v.renderer.theme, v.screen.cols);
        if v.running && text.is_empty() {
            if status.is_empty() {
                return v.screen.erase_input();
            }
            // The subagents' lines alone, the cursor below them.
            let prompt = Prompt {
                prefix: "",
                styled_prefix: "",
                text: "",
                cursor: 0,
                status: &status,
            };
            return v.screen.draw_input(&prompt);
        }
        // A large paste is shown folded: the screen never floods.
        let (text, cursor) = match folded(&text) {
            Some(short) => {
                let end = short.chars().count();
                (short, end)
            }
            None => (text, v.editor.cursor()),
        };
        let styled = if v.renderer.theme.color {
            format!(
                "{}› {}",
                anstyle::Effects::BOLD.render(),
                anstyle::Reset.render()
            )
        } else {
            "› ".to_owned()
        };
        let prompt = Prompt {
            prefix: "› ",
            styled_prefix: &styled,
            text: &text,
            cursor,
            status: &status,
        };
        v.screen.draw_input(&prompt)
    }

    async fn redraw(&self) {
        let text = {
            let mut v = self.view.borrow_mut();
            self.input_area(&mut v)
        };
        self.print(&text).await;
    }

    fn agent(&self) -> String {
        self.view.borrow().agent.clone()
    }

    /// Opens the session to chat in: the predecessor's, one to resume, or
    /// a new one.
    pub async fn open(&mut self, resume: Option<String>, cwd: &str) -> Result<()> {
        if !self.view.borrow().agent.is_empty() {
            return self.reopen().await;
        }
        // Before the chat opens, a refusal is read on the command line.
        match resume {
            Some(id) => self.resume(&id, Place::CommandLine).await?,
            None => self.new_session(cwd, Place::CommandLine).await?,
        }
        Ok(())
    }

    /// After a reload: the agent-loop disposes an agent with the plugin
    /// generation that created it (a turn running then ends `disposed`),
    /// so this generation waits for that and resumes the session, which
    /// the disposal left stored.
    async fn reopen(&mut self) -> Result<()> {
        let agent = self.agent();
        // A settings file broken meanwhile does not end the chat: the
        // session goes on with its route (said below).
        let current = crate::route::current(&self.ctx).await;
        if std::mem::take(&mut self.view.borrow_mut().released) {
            // Released by the predecessor: resuming the live agent owns
            // it, a running turn included (its route with it).
            let params = ResumeParams {
                session_id: agent.clone(),
                agent_options: self.reopen_options(&current),
                ..Default::default()
            };
            if AgentLoop::new(&self.ctx).resume(&params).await.is_ok() {
                self.say_unreadable(&current).await;
                return self.adopt_live(&agent).await;
            }
        }
        let (tx, disposed) = oneshot::channel();
        let tx = RefCell::new(Some(tx));
        let id = agent.clone();
        let tx = Rc::new(tx);
        let listener = self.ctx.on(bus::AGENT_DISPOSED, move |ev| {
            let (tx, id) = (tx.clone(), id.clone());
            async move {
                let gone: AgentRef = ev.payload_as()?;
                if gone.agent == id {
                    if let Some(tx) = tx.borrow_mut().take() {
                        let _ = tx.send(());
                    }
                }
                Ok(Value::Null)
            }
        });
        let agents = Agents::new(&self.ctx);
        match agents.status(&agent).await {
            Err(e) if e.code == code::AGENT_NOT_FOUND => {}
            Err(e) => return Err(e),
            Ok(_) => {
                if tokio::time::timeout(REOPEN_WAIT, disposed).await.is_err() {
                    drop(listener);
                    return self.adopt_live(&agent).await;
                }
            }
        }
        drop(listener);
        let was_running = self.view.borrow().running;
        let params = ResumeParams {
            session_id: agent.clone(),
            agent_options: self.reopen_options(&current),
            ..Default::default()
        };
        let resumed = AgentLoop::new(&self.ctx).resume(&params).await?;
        let started_on = self.view.borrow().route.clone();
        let chosen = match crate::route::after_resume(
            &self.ctx,
            &resumed.agent,
            &current,
            Place::Chat,
        )
        .await
        {
            Ok(chosen) => chosen,
            Err(e) => match started_on {
                // The session never reached a model and the settings
                // cannot be read: it goes on with the route it started
                // on (its options above).
                Some(route) if current.is_err() && e.code == code::INVALID_SETTINGS => Provenance {
                    route,
                    chosen: "chosen by this chat when it started the session".to_owned(),
                    advice: String::new(),
                    effort_chosen: None,
                }
                .in_chat(),
                _ => return Err(e),
            },
        };
        self.switch_to(resumed.agent);
        self.chosen = Some(chosen.in_chat());
        self.say_unreadable(&current).await;
        if was_running {
            self.notice(Tone::Dim, "(the reload ended the running turn)")
                .await;
        }
        self.redraw().await;
        Ok(())
    }

    /// Says why the selection could not be read, when it could not: the
    /// session goes on with its route.
    async fn say_unreadable(&self, current: &Result<CurrentSelection>) {
        if let Err(e) = current {
            let text = format!(
                "⚠ {}: {} (the session goes on with its route)",
                e.code, e.message
            );
            self.notice(Tone::Dim, &text).await;
        }
    }

    /// The options a reload resumes the session with: the selection's, or,
    /// when the settings cannot be read, the route the session started on
    /// (the log's, if it names one, is selected after the resume).
    fn reopen_options(&self, current: &Result<CurrentSelection>) -> AgentOptions {
        match (current, &self.view.borrow().route) {
            (Err(_), Some(route)) => route.agent_options(self.config.max_tokens),
            _ => crate::route::for_resume(current, &self.config),
        }
    }

    /// The agent outlived the reload (an agent-loop that does not dispose
    /// with its creator): go on with it as it is.
    async fn adopt_live(&mut self, agent: &str) -> Result<()> {
        let status = Agents::new(&self.ctx).status(agent).await?;
        let running = status.status == RunStatus::Running;
        self.view.borrow_mut().running = running;
        if running {
            self.watch_turn(agent.to_owned());
        }
        self.redraw().await;
        Ok(())
    }

    async fn new_session(&mut self, cwd: &str, place: Place) -> Result<()> {
        let start = crate::route::for_new(&self.ctx, &self.config, place).await?;
        let params = CreateParams {
            session_id: None,
            agent_options: start.options,
            meta: Some(CreateMeta {
                cwd: Some(cwd.to_owned()),
                ..CreateMeta::default()
            }),
            ..Default::default()
        };
        let created = AgentLoop::new(&self.ctx).create(&params).await?;
        self.switch_to(created.agent);
        let route = start.chosen.route.clone();
        self.view.borrow_mut().route = Some(route.clone());
        self.chosen = Some(start.chosen.in_chat());
        let banner = format!(
            "dsh chat · {} · {}   /help for commands · Ctrl-D exits\n",
            route.model, route.provider
        );
        self.notice(Tone::Dim, &banner).await;
        if let Some(note) = start.notice {
            if !std::mem::replace(&mut self.view.borrow_mut().override_said, true) {
                self.notice(Tone::Dim, &note).await;
            }
        }
        Ok(())
    }

    /// Resumes stored session `id`. When its route cannot be used (no
    /// adapter serves it), the agent the resume made is disposed again, so
    /// the session is not left live and locked to this chat.
    async fn resume(&mut self, id: &str, place: Place) -> Result<()> {
        // A colliding folder key must never yield another directory's
        // session: its header names the directory it belongs to.
        let cwd = self.host.info().await?.cwd.unwrap_or_else(|| "/".into());
        SessionPersistence::new(&self.ctx)
            .resumable_from(id, &cwd)
            .await?;
        let current = crate::route::current(&self.ctx).await;
        let params = ResumeParams {
            session_id: id.to_owned(),
            agent_options: crate::route::for_resume(&current, &self.config),
            ..Default::default()
        };
        let was_live = id == self.agent();
        let resumed = AgentLoop::new(&self.ctx).resume(&params).await?;
        let chosen =
            match crate::route::after_resume(&self.ctx, &resumed.agent, &current, place).await {
                Ok(chosen) => chosen,
                Err(e) => {
                    if !was_live {
                        let _ = Agents::new(&self.ctx).dispose(&resumed.agent).await;
                    }
                    return Err(e);
                }
            };
        self.switch_to(resumed.agent.clone());
        self.view.borrow_mut().route = Some(chosen.route.clone());
        self.chosen = Some(chosen.in_chat());
        if let Err(e) = &current {
            let text = format!(
                "⚠ {}: {} (the session goes on with the route its log names)",
                e.code, e.message
            );
            self.notice(Tone::Dim, &text).await;
        }
        let events = Sessions::new(&self.ctx).events(&resumed.agent, 0).await?;
        self.notice(
            Tone::Dim,
            &format!(
                "resumed session {} ({} events)",
                resumed.agent,
                events.len()
            ),
        )
        .await;
        // The last exchange, as a reminder of where it stood.
        match last_exchange(&events) {
            Ok((prompt, answer)) => {
                if let Some(prompt) = prompt {
                    self.notice(Tone::Dim, &format!("› {}", sanitize(&prompt)))
                        .await;
                }
                if let Some(answer) = answer.filter(|a| !a.trim().is_empty()) {
                    self.notice(Tone::Plain, &sanitize(&answer)).await;
                }
            }
            Err(e) => {
                let text = format!(
                    "✗ the last exchange cannot be shown: {}: {}",
                    e.code, e.message
                );
                self.notice(Tone::Error, &text).await;
            }
        }
        Ok(())
    }

    fn switch_to(&mut self, agent: String) {
        let mut v = self.view.borrow_mut();
        v.agent = agent;
        v.running = false;
        v.calls.clear();
    }

    /// The loop: until the user exits.
    pub async fn run(&mut self, rx: &mut mpsc::UnboundedReceiver<Msg>) -> Result<()> {
        self.redraw().await;
        self.read_terminal();
        // Keys and notices a predecessor received and did not handle.
        self.show_notices().await;
        self.offer_trust().await;
        self.handle_keys().await;
        while !self.quit {
            match rx.recv().await {
                Some(msg) => self.message(msg).await,
                None => break,
            }
        }
        Ok(())
    }

    /// Reads the terminal on a task of its own, so a read is always
    /// outstanding (the host's Ctrl-C fail-safe sees a live reader) and
    /// input is parsed into [`View::keys`] before it is acknowledged: a
    /// reload at any point hands over every key not yet handled.
    fn read_terminal(&self) {
        let (host, view, tx) = (self.host.clone(), self.view.clone(), self.tx.clone());
        self.ctx.spawn(async move {
            loop {
                let ack = view.borrow().ack;
                let (more, done) = match host.read_input(ack).await {
                    Ok(input) => {
                        let mut v = view.borrow_mut();
                        let keys = v.parser.feed(&input.text);
                        v.keys.extend(keys);
                        v.notices.extend(input.notices);
                        v.ack = Some(input.seq);
                        (!input.eof, Ok(!input.eof))
                    }
                    Err(e) => (false, Err(e)),
                };
                if tx.send(Msg::Input(done)).is_err() || !more {
                    return;
                }
            }
        });
    }

    /// Shows the host's queued lines above the input, dimmed; whether
    /// there were any.
    async fn show_notices(&mut self) -> bool {
        let mut any = false;
        loop {
            let line = self.view.borrow_mut().notices.pop_front();
            let Some(line) = line else {
                return any;
            };
            any = true;
            self.notice(Tone::Dim, &line).await;
        }
    }

    /// Handles the queued keys, one at a time.
    async fn handle_keys(&mut self) {
        loop {
            let key = self.view.borrow_mut().keys.pop_front();
            let Some(key) = key else {
                return;
            };
            self.key(key).await;
            if self.quit {
                return;
            }
        }
    }

    async fn message(&mut self, msg: Msg) {
        match msg {
            Msg::Input(Ok(open)) => {
                if self.show_notices().await {
                    self.offer_trust().await;
                }
                self.handle_keys().await;
                if !open && !self.quit {
                    self.exit().await;
                }
            }
            Msg::Command(run, reply) => {
                let result = self.run_own(&run.name, run.args.trim()).await;
                let _ = reply.send(result);
            }
            Msg::CommandDone(line, done) => self.command_done(&line, done).await,
            Msg::ChildStarted(id, label) => {
                self.view.borrow_mut().children.add(&id, &label);
                self.redraw().await;
            }
            Msg::ChildEvent(id, e) => {
                if self.view.borrow_mut().children.event(&id, &e) {
                    self.redraw().await;
                }
            }
            Msg::ChildGone(id) => {
                if self.view.borrow_mut().children.remove(&id) {
                    self.redraw().await;
                }
            }
            Msg::Input(Err(e)) => {
                self.notice(Tone::Error, &format!("✗ cannot read the terminal: {e}"))
                    .await;
                self.exit().await;
            }
            Msg::Event(e) => {
                self.note_call(&e);
                let out = self.view.borrow_mut().renderer.event(&e);
                if !out.plain.is_empty() {
                    self.show(&out).await;
                }
            }
            Msg::TurnDone(agent, done) => {
                if agent != self.agent() {
                    return;
                }
                // Input sent as the turn ended may have started another:
                // then the chat still runs one, and watches it.
                if let Ok(status) = Agents::new(&self.ctx).status(&agent).await {
                    if status.status == RunStatus::Running {
                        self.watch_turn(agent);
                        return;
                    }
                }
                self.view.borrow_mut().running = false;
                // Questions of the ended turn are moot (their callers
                // were cancelled with it).
                self.asking = None;
                self.queued_approvals.clear();
                let reason = done.map(|idle| idle.reason);
                let out = match &reason {
                    Ok(reason) => self.view.borrow_mut().renderer.turn_end(reason.as_ref()),
                    Err(e) => {
                        let theme = self.view.borrow().renderer.theme;
                        let text = format!("✗ {}: {}\n", e.code, sanitize(&e.message));
                        theme.one(Tone::Error, &text)
                    }
                };
                self.show(&out).await;
                if let Ok(Some(TurnEndReason::Error { error })) = &reason {
                    if follows_from_route(error) {
                        self.say_route(&agent).await;
                    }
                }
                let _ = Sessions::new(&self.ctx).flush(&self.agent()).await;
            }
            Msg::Approval(request, reply) => {
                let key = (request.agent.clone(), request.tool_name.clone());
                // A call asked for every time (a change to the workspace's
                // configuration) is never answered by an earlier "allow
                // for this session".
                if !request.always_ask && self.view.borrow().allowed.contains(&key) {
                    let _ = reply.send(ApprovalReply {
                        outcome: Some(ApprovalOutcome::AllowedOnce),
                    });
                    return;
                }
                let asking = Asking { request, reply };
                if self.asking.is_some() {
                    self.queued_approvals.push(asking);
                } else {
                    self.ask(asking).await;
                }
            }
        }
    }

    /// After a failure that follows from the route (no key, no adapter, a
    /// model the server does not know): who chose the route the request
    /// went to, and `/model` to change it.
    async fn say_route(&self, agent: &str) {
        let logged = Sessions::new(&self.ctx)
            .request_context(agent)
            .await
            .ok()
            .flatten()
            .and_then(|c| RequestContext::deserialize(&c).ok())
            .map(|c| ModelSelection::new(c.provider, c.model));
        let text = match (&self.chosen, logged) {
            (Some(chosen), Some(route)) if !chosen.route.same_route(&route) => format!(
                "(route {}, switched in this session; `/model <route> <model>` switches it)",
                route.route()
            ),
            (Some(chosen), _) => format!("({})", chosen.explain()),
            (None, Some(route)) => format!(
                "(route {}; `/model <route> <model>` switches it)",
                route.route()
            ),
            (None, None) => return,
        };
        self.notice(Tone::Dim, &text).await;
    }

    /// Keeps the tool calls seen (an approval prompt shows the call's
    /// arguments) until their results arrive. A malformed record is left
    /// to the renderer, which shows what is wrong with it.
    fn note_call(&self, e: &SessionEvent) {
        match e.kind.as_str() {
            event::TOOL_CALL => {
                if let Ok(call) = e.data_as::<ToolCall>() {
                    let entry = (call.name, call.arguments);
                    self.view.borrow_mut().calls.insert(call.call_id, entry);
                }
            }
            event::TOOL_RESULT => {
                if let Ok(result) = e.data_as::<ToolResult>() {
                    if let Some(ContentBlock::ToolResult(block)) = result.message.content.first() {
                        self.view.borrow_mut().calls.remove(&block.tool_call_id);
                    }
                }
            }
            _ => {}
        }
    }

    async fn key(&mut self, key: Key) {
        if self.asking.is_some() {
            return self.approval_key(key).await;
        }
        if self.trust_question.is_some() {
            return self.trust_key(key).await;
        }
        let action = self.view.borrow_mut().editor.handle(key);
        match action {
            Action::Edited => {
                self.view.borrow_mut().armed_exit = false;
                self.redraw().await;
            }
            Action::Submit(text) => {
                self.view.borrow_mut().armed_exit = false;
                self.submit(text).await;
            }
            Action::Interrupt { had_input } => self.interrupt(had_input).await,
            Action::Eof => self.exit().await,
            Action::ClearScreen => {
                self.view.borrow_mut().screen.forget_input();
                self.print("\x1b[H\x1b[2J").await;
                self.redraw().await;
            }
            Action::ToggleReasoning => {
                let shown = {
                    let mut v = self.view.borrow_mut();
                    v.renderer.show_reasoning = !v.renderer.show_reasoning;
                    v.renderer.show_reasoning
                };
                let text = if shown {
                    "(reasoning shown)"
                } else {
                    "(reasoning folded)"
                };
                self.notice(Tone::Dim, text).await;
            }
        }
    }

    /// Ctrl-C: cancels a running turn; at the prompt it clears the input,
    /// and a second one on an empty prompt exits.
    async fn interrupt(&mut self, had_input: bool) {
        let running = self.view.borrow().running;
        if running {
            // No cause is the user's (`{kind: "user"}`).
            let params = CancelParams {
                agent: self.agent(),
                cause: None,
                keep_inbox: false,
            };
            if let Err(e) = Agents::new(&self.ctx).cancel(&params).await {
                self.notice(Tone::Error, &format!("✗ cannot cancel: {e}"))
                    .await;
            }
            return;
        }
        if had_input {
            self.redraw().await;
            return;
        }
        let armed = std::mem::replace(&mut self.view.borrow_mut().armed_exit, true);
        if armed {
            return self.exit().await;
        }
        self.notice(Tone::Dim, "(Ctrl-C again or Ctrl-D to exit)")
            .await;
    }

    /// Shows an approval prompt; keys typed before it was drawn (a steer
    /// being typed, say) are not taken as its answer.
    async fn ask(&mut self, asking: Asking) {
        self.asking = Some(asking);
        self.redraw().await;
        self.asked_at = Some(std::time::Instant::now());
    }

    async fn approval_key(&mut self, key: Key) {
        if self.asked_at.is_some_and(|t| t.elapsed() < APPROVAL_GRACE) {
            return;
        }
        let (outcome, word, tone) = match key {
            Key::Char('y' | 'Y') => (ApprovalOutcome::AllowedOnce, "allowed once", Tone::Ok),
            Key::Char('a' | 'A') => (
                ApprovalOutcome::AllowedOnce,
                "allowed for this session",
                Tone::Ok,
            ),
            Key::Char('n' | 'N') | Key::Esc | Key::Interrupt => {
                (ApprovalOutcome::Rejected, "rejected", Tone::Error)
            }
            _ => return,
        };
        let Some(asking) = self.asking.take() else {
            return;
        };
        // Allowed for the session: remembered, unless the call is asked
        // for every time (then it is allowed once).
        let word = match key {
            Key::Char('a' | 'A') if asking.request.always_ask => {
                "allowed once (changes to the workspace's configuration are asked for every time)"
            }
            Key::Char('a' | 'A') => {
                let pair = (
                    asking.request.agent.clone(),
                    asking.request.tool_name.clone(),
                );
                self.view.borrow_mut().allowed.push(pair);
                word
            }
            _ => word,
        };
        let _ = asking.reply.send(ApprovalReply {
            outcome: Some(outcome),
        });
        self.notice(tone, &format!("  {} {word}", asking.request.tool_name))
            .await;
        // The rest of what was typed with the answer answers nothing.
        self.view.borrow_mut().keys.clear();
        if self.queued_approvals.is_empty() {
            self.redraw().await;
        } else {
            let next = self.queued_approvals.remove(0);
            self.ask(next).await;
        }
    }

    /// Asks whether to trust a project whose servers the host did not
    /// start for want of approval: once per offer (at start, and when the
    /// host said something, as it does after composing again).
    async fn offer_trust(&mut self) {
        if self.trust_question.is_some() {
            return;
        }
        let Ok(info) = self.host.info().await else {
            return;
        };
        let Some(project) = info.untrusted_project else {
            return;
        };
        {
            let mut v = self.view.borrow_mut();
            if v.trust_offered.as_ref() == Some(&project) {
                return;
            }
            v.trust_offered = Some(project.clone());
        }
        self.trust_question = Some(project);
        self.redraw().await;
        self.asked_at = Some(std::time::Instant::now());
    }

    async fn trust_key(&mut self, key: Key) {
        if self.asked_at.is_some_and(|t| t.elapsed() < APPROVAL_GRACE) {
            return;
        }
        let yes = match key {
            Key::Char('y' | 'Y') => true,
            Key::Char('n' | 'N') | Key::Esc | Key::Interrupt => false,
            _ => return,
        };
        let Some(project) = self.trust_question.take() else {
            return;
        };
        if yes {
            match self.host.trust_project(&project).await {
                Ok(()) => {
                    let text = format!("  trusted {}: starting its MCP servers", project.dir);
                    self.notice(Tone::Ok, &text).await;
                }
                Err(e) => {
                    let text = format!("  could not trust {}: {}", project.dir, e.message);
                    self.notice(Tone::Error, &text).await;
                }
            }
        } else {
            let text = format!(
                "  not trusted: its servers stay off (`dsh-host trust {}` trusts it later)",
                project.dir
            );
            self.notice(Tone::Dim, &text).await;
        }
        self.view.borrow_mut().keys.clear();
        self.redraw().await;
    }

    async fn submit(&mut self, text: String) {
        crate::history::save(&self.config.history_path, &text);
        // The terminal may have been resized since the last prompt.
        if let Ok(term) = self.host.terminal().await {
            let mut v = self.view.borrow_mut();
            if term.cols > 0 {
                v.screen.cols = usize::from(term.cols);
                v.renderer.cols = usize::from(term.cols).max(20);
            }
            v.screen.rows = usize::from(term.rows);
        }
        let running = self.view.borrow().running;
        // The line as typed stays above the output (above the streaming
        // answer while a turn runs).
        let echo = {
            let mut v = self.view.borrow_mut();
            let mut out = if running {
                Out::default()
            } else {
                v.renderer.finish_block()
            };
            let theme = v.renderer.theme;
            let mark = if running { "↳ " } else { "› " };
            theme.push(&mut out, Tone::Bold, mark);
            let shown = folded(&text).unwrap_or_else(|| text.clone());
            theme.push(&mut out, Tone::Plain, &format!("{}\n", sanitize(&shown)));
            out
        };
        if running {
            self.interject(&echo).await;
        } else {
            self.show(&echo).await;
        }
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return;
        }
        if trimmed.starts_with('/') {
            return self.command(trimmed).await;
        }
        let agents = Agents::new(&self.ctx);
        let message = Message::user_text(dsh_sdk::new_id(), text);
        if running {
            if let Err(e) = agents.steer(&self.agent(), message).await {
                self.notice(Tone::Error, &format!("✗ {}: {}", e.code, e.message))
                    .await;
            }
            return;
        }
        match agents.followup(&self.agent(), message).await {
            Ok(_) => {
                self.view.borrow_mut().running = true;
                self.watch_turn(self.agent());
                self.redraw().await;
            }
            Err(e) => {
                self.notice(Tone::Error, &format!("✗ {}: {}", e.code, e.message))
                    .await
            }
        }
    }

    /// Tells the loop when the agent's turn(s) end.
    fn watch_turn(&self, agent: String) {
        let (ctx, tx) = (self.ctx.clone(), self.tx.clone());
        self.ctx.spawn(async move {
            let done = Agents::new(&ctx).when_idle(&agent).await;
            let _ = tx.send(Msg::TurnDone(agent, done));
        });
    }

    /// A `/` line: through the `commands` registry when one is loaded
    /// (logged as `command/run` and `command/done`, other plugins'
    /// commands included), else the chat's own commands directly. The
    /// registry may call back into the chat, so the loop does not wait
    /// for it: the outcome arrives as [`Msg::CommandDone`].
    async fn command(&mut self, line: &str) {
        let (ctx, tx, agent, line) = (
            self.ctx.clone(),
            self.tx.clone(),
            self.agent(),
            line.to_owned(),
        );
        self.ctx.spawn(async move {
            let done = Commands::new(&ctx).execute(&agent, &line).await;
            let _ = tx.send(Msg::CommandDone(line, done));
        });
    }

    async fn command_done(&mut self, line: &str, done: Result<ExecuteReply>) {
        let result = match done {
            Ok(Some(execution)) => execution.result,
            Ok(None) => {
                let name = line[1..].split_whitespace().next().unwrap_or_default();
                CommandResult::error(format!("unknown command /{name} (try /help)"))
            }
            // No registry in this composition: the chat's own commands.
            Err(e) if e.code == codes::SERVICE_UNAVAILABLE => {
                let (name, rest) = line[1..]
                    .split_once(char::is_whitespace)
                    .unwrap_or((&line[1..], ""));
                match name {
                    "help" => CommandResult::success(HELP),
                    name if own_commands().iter().any(|c| c.name == name) => {
                        self.run_own(name, rest.trim()).await
                    }
                    _ => CommandResult::error(format!("unknown command /{name} (try /help)")),
                }
            }
            Err(e) => CommandResult::error(format!("{}: {}", e.code, e.message)),
        };
        let help = line.trim() == "/help";
        match (result.kind, result.text.as_deref()) {
            (ResultKind::Error, text) => {
                let text = text.unwrap_or("the command failed");
                self.notice(Tone::Error, &format!("✗ {text}")).await
            }
            (ResultKind::Success, Some(text)) if !text.trim().is_empty() => {
                self.notice(Tone::Plain, text).await
            }
            (ResultKind::Success, _) => self.redraw().await,
        }
        if help {
            self.notice(Tone::Dim, KEYS).await;
        }
        if std::mem::take(&mut self.exit_after_command) {
            self.exit().await;
        }
    }

    /// Runs one of the chat's own commands.
    async fn run_own(&mut self, name: &str, rest: &str) -> CommandResult {
        let running = self.view.borrow().running;
        let result = match name {
            "exit" => {
                self.exit_after_command = true;
                Ok(String::new())
            }
            "new" | "resume" | "fork" if running => Err(Error::msg(format!(
                "/{name} waits until the turn ends (Ctrl-C cancels it)"
            ))),
            "new" => self.command_new().await,
            "sessions" => self.command_sessions().await,
            "resume" => match rest {
                "" => Err(Error::msg("/resume needs a session id (see /sessions)")),
                id => self.resume(id, Place::Chat).await.map(|()| String::new()),
            },
            "fork" => self.command_fork().await,
            "plugins" => self.command_plugins().await,
            "agents" => self.command_agents().await,
            "mcp" => self.command_mcp(rest).await,
            other => Err(Error::msg(format!("the chat has no command /{other}"))),
        };
        match result {
            Ok(text) => CommandResult::success(text),
            Err(e) => CommandResult::error(e.message),
        }
    }

    /// `/agents`: the background subagents below this session's agent,
    /// one line each (`<id> [<status>] depth=<n> — <label>`).
    async fn command_agents(&self) -> Result<String> {
        let below = match Subagents::new(&self.ctx)
            .list_descendants(&self.agent())
            .await
        {
            Err(e) if e.code == codes::SERVICE_UNAVAILABLE => {
                return Ok("delegation is not loaded (no `subagent` row)".to_owned())
            }
            other => other?,
        };
        if below.is_empty() {
            return Ok("(no subagents)".to_owned());
        }
        let lines: Vec<String> = below
            .iter()
            .map(|c| {
                let depth = c.depth.unwrap_or(1);
                match c.diagnostic {
                    Some(d) => format!("{} [cannot be read: {}] depth={depth}", c.id, d.as_str()),
                    None => format!(
                        "{} [{}] depth={depth} — {}",
                        c.id,
                        c.status.as_str(),
                        c.label
                    ),
                }
            })
            .collect();
        Ok(lines.join("\n"))
    }

    async fn command_new(&mut self) -> Result<String> {
        let _ = Sessions::new(&self.ctx).flush(&self.agent()).await;
        let cwd = self.host.info().await?.cwd.unwrap_or_else(|| "/".into());
        self.new_session(&cwd, Place::Chat).await?;
        Ok(String::new())
    }

    async fn command_sessions(&self) -> Result<String> {
        let cwd = self.host.info().await?.cwd;
        let list = SessionPersistence::new(&self.ctx)
            .list(cwd.as_deref())
            .await?;
        if list.is_empty() {
            return Ok("no stored sessions for this directory".into());
        }
        let current = self.agent();
        let mut out = String::new();
        for s in list.iter().take(20) {
            let mark = if s.id == current { "*" } else { " " };
            let prompt: String = s.last_prompt.chars().take(50).collect();
            out.push_str(&format!(
                "{mark} {}  {:>3} turns  {}\n",
                s.id,
                s.turns,
                sanitize(&prompt).replace('\n', " ")
            ));
        }
        out.push_str("/resume <id> continues one");
        Ok(out)
    }

    async fn command_fork(&mut self) -> Result<String> {
        let sessions = Sessions::new(&self.ctx);
        let source = self.agent();
        sessions.flush(&source).await?;
        let forked = sessions
            .fork(&ForkParams {
                id: source.clone(),
                ..ForkParams::default()
            })
            .await?;
        self.resume(&forked.id, Place::Chat).await?;
        Ok(format!("forked {source} into {}", forked.id))
    }

    async fn command_plugins(&self) -> Result<String> {
        let rows = self.host.plugins().await?;
        let mut out = format!(
            "{:<22} {:<22} {:<10} {:>4}\n",
            "ROW", "PLUGIN", "STATE", "GEN"
        );
        for r in rows {
            out.push_str(&format!(
                "{:<22} {:<22} {:<10} {:>4}",
                r.id, r.plugin, r.state, r.generation
            ));
            if let Some(e) = r.error {
                out.push_str(&format!("  {}", sanitize(&e).replace('\n', " ")));
            }
            out.push('\n');
        }
        Ok(out.trim_end().to_owned())
    }

    /// `/mcp`: every MCP server row, its state and tools (`/mcp reconnect
    /// NAME` connects one again). A row that is not active shows the
    /// host's state and why.
    async fn command_mcp(&self, args: &str) -> Result<String> {
        let rows: Vec<PluginRow> = self
            .host
            .plugins()
            .await?
            .into_iter()
            .filter(|r| r.plugin == mcp::PLUGIN)
            .collect();
        let mut servers = Vec::new();
        for row in rows {
            let status = match row.state.as_str() {
                ROW_ACTIVE => Some(McpServer::new(&self.ctx, row.fiber).status().await),
                _ => None,
            };
            servers.push((row, status));
        }
        let live = |name: &str| {
            let found = servers.iter().find(|(row, status)| {
                matches!(status, Some(Ok(s)) if s.server_name == name) || row.id == name
            });
            match found {
                Some((row, Some(Ok(_)))) => Ok(McpServer::new(&self.ctx, row.fiber)),
                Some((row, _)) => Err(Error::msg(format!(
                    "MCP server {name} is {} (row {}): a reload or a config change starts it",
                    row.state, row.id
                ))),
                None => Err(Error::msg(format!("no MCP server {name} (see /mcp)"))),
            }
        };
        match args.split_whitespace().collect::<Vec<_>>()[..] {
            [] => Ok(mcp_table(&servers)),
            ["reconnect", name] => {
                live(name)?.reconnect().await?;
                Ok(format!("reconnecting {name}"))
            }
            ["login", name] => {
                let started = live(name)?.login().await?;
                Ok(format!(
                    "open this URL in a browser to authorize {name}:\n{}\n\
                     the server connects once you approve (the link is good for 10 minutes)",
                    started.url
                ))
            }
            _ => Err(Error::msg(
                "usage: /mcp, /mcp reconnect <name>, or /mcp login <name>",
            )),
        }
    }

    /// Flushes the session, gives the terminal back and ends the process.
    async fn exit(&mut self) {
        self.quit = true;
        if self.view.borrow().running {
            // No cause is the user's (`{kind: "user"}`).
            let params = CancelParams {
                agent: self.agent(),
                cause: None,
                keep_inbox: false,
            };
            let _ = Agents::new(&self.ctx).cancel(&params).await;
            let _ = Agents::new(&self.ctx).when_idle(&self.agent()).await;
        }
        let agent = self.agent();
        if !agent.is_empty() {
            let _ = Sessions::new(&self.ctx).flush(&agent).await;
        }
        let text = {
            let mut v = self.view.borrow_mut();
            let mut text = v.screen.erase_input();
            text.push_str(&v.screen.end_line());
            text
        };
        self.print(&text).await;
        let _ = self.host.set_raw_mode(false).await;
        let _ = self.host.exit(0).await;
    }
}

/// Inputs longer than this are shown folded (so the input area stays well
/// inside a 24-row terminal).
const FOLD_LINES: usize = 8;
const FOLD_CHARS: usize = 800;

/// The folded form of a long input: its first lines and how much more
/// there is (`None` when it fits).
fn folded(text: &str) -> Option<String> {
    let lines = text.lines().count();
    if lines <= FOLD_LINES && text.len() <= FOLD_CHARS {
        return None;
    }
    let head: String = text
        .lines()
        .take(3)
        .map(|l| l.chars().take(200).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n");
    Some(format!(
        "{head}\n[… {lines} lines, {} characters in all; Enter sends it]",
        text.chars().count()
    ))
}

/// The approval question: the tool, its arguments, the policy's reason
/// and the choices.
fn approval_question(
    request: &ApprovalRequest,
    calls: &HashMap<String, (String, String)>,
) -> String {
    let args = match &request.arguments {
        Some(a) if !a.is_null() => a.to_string(),
        _ => request
            .call_id
            .as_ref()
            .and_then(|id| calls.get(id))
            .map(|(_, args)| args.clone())
            .unwrap_or_default(),
    };
    let args: String = sanitize(&args)
        .replace('\n', " ")
        .chars()
        .take(1000)
        .collect();
    let mut q = format!("{} {args}", sanitize(&request.tool_name));
    if let Some(reason) = &request.reason {
        q.push_str(&format!("\n({})", sanitize(reason)));
    }
    if request.always_ask {
        q.push_str("\nallow once [y] · reject [n] (asked for every time)");
    } else {
        q.push_str("\nallow once [y] · allow for this session [a] · reject [n]");
    }
    q
}

/// The trust question: what the project's file would start, and that it
/// runs outside the sandbox.
fn trust_question(project: &UntrustedProject) -> String {
    let runs: String = project
        .runs
        .iter()
        .map(|line| format!("  {}\n", sanitize(line)))
        .collect();
    format!(
        "{} names MCP servers ({}): programs that run on this machine, outside the sandbox,\n\
         in the project (so with its files):\n{runs}\
         Trust {} and start them? yes [y] · no [n]",
        project.file,
        project.servers.join(", "),
        project.dir
    )
}

/// The `/mcp` table: one line per server row.
fn mcp_table(servers: &[(PluginRow, Option<Result<ServerStatus>>)]) -> String {
    if servers.is_empty() {
        return "no MCP servers (.mcp.json, ~/.codex/config.toml, or an `mcp-client` row)".into();
    }
    let mut out = format!(
        "{:<20} {:<13} {:>5}  {:<22} DETAIL\n",
        "SERVER", "STATE", "TOOLS", "ROW"
    );
    for (row, status) in servers {
        let (name, state, tools, detail) = match status {
            Some(Ok(s)) => (
                s.server_name.clone(),
                s.state.as_str().to_owned(),
                s.tools.to_string(),
                s.detail.clone().unwrap_or_default(),
            ),
            Some(Err(e)) => ("?".into(), row.state.clone(), "-".into(), e.message.clone()),
            None => (
                "-".into(),
                row.state.clone(),
                "-".into(),
                row.error.clone().unwrap_or_default(),
            ),
        };
        out.push_str(&format!(
            "{name:<20} {state:<13} {tools:>5}  {:<22} {}\n",
            row.id,
            sanitize(&detail).replace('\n', " ")
        ));
    }
    out.trim_end().to_owned()
}

/// `/help` without a registry.
const HELP: &str = "\
/help              this list
/new               a new session
/sessions          the stored sessions of this directory
/resume <id>       continue a stored session
/fork              continue in a copy of this session
/plugins           every row: state, generation, why it failed
/agents            the subagents of this session and what they do
/mcp [cmd N]       MCP servers; `reconnect N` or `login N` (OAuth) one
/exit              leave (Ctrl-D, or Ctrl-C twice)";

/// The keys, after `/help`.
const KEYS: &str = "\
keys: Enter sends · Alt-Enter or Ctrl-J new line · Up/Down history ·
      Ctrl-C cancels a turn · Ctrl-T shows or folds reasoning · Ctrl-L clears
typing while a turn runs steers it";

/// The theme for this terminal: colors unless `NO_COLOR` is set or stdout
/// is not a terminal.
pub fn theme(stdout_is_terminal: bool) -> Theme {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    Theme {
        color: stdout_is_terminal && !no_color,
    }
}
