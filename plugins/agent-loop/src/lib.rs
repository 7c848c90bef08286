//! `agent-loop`: agents and the turn/step algorithm (reference dsh-core §4).

mod creation;
mod disposal;
mod driver;
mod inbox;
mod new_session;
mod runtime_context;
mod schedule;
mod services;
mod tool_calls;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use dsh_sdk::api::agent_loop::{
    AgentOptions, AgentRef, ConfigStartFailed, CreateMeta, CreateParams, InboxMessage, MaxTokens,
    ResumeParams, StatusChanged,
};
use dsh_sdk::api::agents::{MaintenanceTask, RunStatus, SendReply, WhenIdleReply};
use dsh_sdk::api::session_persistence::SessionPersistence;
use dsh_sdk::api::sessions::{NewEvent, ResumeReply, Sessions};
use dsh_sdk::names::{bus, code, service};
use dsh_sdk::new_id;
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::records::{
    CancelCause, RequestContext, RequestHeader, SpliceTarget, TurnEndReason,
};
use dsh_sdk::vocab::{event, Message, UserInput};
use dsh_sdk::Subject;
use serde::{Deserialize, Serialize};
// `Value` stays where data is open: a `maxTokens` as configured (refused
// with the original's message when it is not a positive safe integer), a
// maintenance task's reply.
use serde_json::Value;
use tokio::sync::{oneshot, Mutex, Notify};

pub(crate) use inbox::{Inbox, CANCELED, NEXT_STEP, NEXT_TURN};

/// The default of [`Config::max_steps_per_turn`].
pub(crate) const DEFAULT_MAX_STEPS_PER_TURN: u64 = 200;
/// The config field that sets the step limit, as users write it.
pub(crate) const MAX_STEPS_FIELD: &str = "maxStepsPerTurn";
/// The code of a turn that reached the step limit.
pub(crate) const STEP_LIMIT: &str = "STEP_LIMIT";
/// JavaScript's `Number.MAX_SAFE_INTEGER`: the largest `maxTokens` the
/// original accepts (a "positive safe integer").
pub(crate) const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

#[derive(Deserialize, Clone)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Config {
    pub max_parallel_tool_calls: usize,
    /// The most steps (model calls) one turn may run; a turn that would go
    /// further ends `error` with code `STEP_LIMIT`. 0 means the default.
    pub max_steps_per_turn: u64,
    /// Agents created (or resumed) when the plugin starts.
    pub agents: Vec<ConfigAgent>,
}

/// One entry of `agents[]` (reference §4.7).
#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ConfigAgent {
    /// A label for reports, and the prefix of a fresh session id.
    pub id: String,
    /// An exact session id: resumed when it is stored, created otherwise.
    pub session_id: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub max_tokens: Option<Value>,
    /// The working directory of a fresh session.
    pub cwd: Option<String>,
    /// A stored session to resume instead of creating one.
    pub resume_session_id: Option<String>,
}

impl ConfigAgent {
    fn resume_id(&self) -> Option<&str> {
        self.resume_session_id
            .as_deref()
            .filter(|id| !id.is_empty())
    }

    fn agent_options(&self) -> AgentOptions {
        AgentOptions {
            provider: self.provider.clone(),
            model: self.model.clone(),
            max_tokens: self.max_tokens.clone().map(MaxTokens::from),
            reasoning_effort: None,
        }
    }
}

/// `runMaintenance` on an agent that is running or already in maintenance.
pub(crate) use dsh_sdk::names::code::AGENT_BUSY;

impl Default for Config {
    fn default() -> Self {
        Config {
            max_parallel_tool_calls: 10,
            max_steps_per_turn: DEFAULT_MAX_STEPS_PER_TURN,
            agents: Vec::new(),
        }
    }
}

impl Config {
    /// Refuses values the original refuses (`maxParallelToolCalls` is an
    /// integer >= 1), rather than quietly running with another.
    pub fn validate(&self) -> Result<()> {
        if self.max_parallel_tool_calls == 0 {
            return Err(Error::new(
                codes::INVALID_PAYLOAD,
                "maxParallelToolCalls must be an integer >= 1",
            ));
        }
        self.validate_agents()
    }

    /// The identity rules of `agents[]`, checked before any agent starts:
    /// no empty `sessionId`, not both `sessionId` and `resumeSessionId`, no
    /// exact id used twice (the original's messages).
    fn validate_agents(&self) -> Result<()> {
        let invalid = |m: String| Error::new(codes::INVALID_CONFIG, m);
        let mut exact: Vec<(&str, &str)> = Vec::new();
        for a in &self.agents {
            if a.session_id.as_deref() == Some("") {
                return Err(invalid(format!(
                    "agent \"{}\": sessionId: expected string length >= 1",
                    a.id
                )));
            }
            if a.session_id.is_some() && a.resume_id().is_some() {
                return Err(invalid(format!(
                    "agent \"{}\": sessionId and resumeSessionId are mutually exclusive",
                    a.id
                )));
            }
            let Some(identity) = a.resume_id().or(a.session_id.as_deref()) else {
                continue;
            };
            if let Some((first, _)) = exact.iter().find(|(_, x)| *x == identity) {
                return Err(invalid(format!(
                    "agents \"{first}\" and \"{}\" use duplicate exact session identity \"{identity}\"",
                    a.id
                )));
            }
            exact.push((&a.id, identity));
        }
        Ok(())
    }

    /// The step limit in force (never unlimited).
    pub fn max_steps(&self) -> u64 {
        match self.max_steps_per_turn {
            0 => DEFAULT_MAX_STEPS_PER_TURN,
            n => n,
        }
    }
}

/// Why a turn stops early; first cause wins.
#[derive(Default)]
pub(crate) struct Abort {
    pub cause: RefCell<Option<CancelCause>>,
    pub notify: Notify,
}

impl Abort {
    pub fn abort(&self, cause: CancelCause) {
        if self.cause.borrow().is_none() {
            *self.cause.borrow_mut() = Some(cause);
        }
        self.notify.notify_waiters();
    }

    pub fn is_aborted(&self) -> bool {
        self.cause.borrow().is_some()
    }
}

pub(crate) struct Agent {
    pub provider: String,
    pub model: String,
    pub max_tokens: Option<u64>,
    /// The options' reasoning effort: the seed of a request on the options'
    /// route (`provider`, `model`) when the log restores none
    /// (`driver::seed_effort`).
    pub reasoning_effort: Option<String>,
    /// A route chosen with `agents.selectModel`, over the options' one.
    pub selection: Option<(String, String)>,
    /// The route the current step's prompt was assembled for, which its
    /// requests use too.
    pub assembled: Option<(String, String)>,
    /// The session's working directory; none when it was created without
    /// one (the original leaves the header's `cwd` undefined then).
    pub cwd: Option<String>,
    pub inbox: Inbox,
    /// Held from computing an inbox splice until it is applied, so the
    /// lists change in the order their splices are logged (the original's
    /// mutations are synchronous; here the append is awaited).
    pub inbox_lock: Rc<Mutex<()>>,
    /// This registration of the id: an owner's cleanup disposes the agent
    /// only while it is still the one that owner created.
    pub registration: String,
    /// Its owner let go of it (`release`): the next `resume` owns it.
    pub released: bool,
    /// The plugin that owns it (disposed with it): its creator, or whoever
    /// resumed it after a `release`; none for the loop's own `agents[]`.
    pub owner: Option<u64>,
    /// The agent that delegated to it (its session's `parentSession`):
    /// none for a root.
    pub parent: Option<String>,
    /// Its owner's going disposes it; taken back when it goes first (or
    /// changes hands).
    pub owner_cleanup: Option<dsh_sdk::CallerCleanup>,
    /// Its disposal has begun: a message sent now is parked (a resume
    /// finds it), never a wake, so no turn starts on an agent going away.
    pub disposing: bool,
    pub running: bool,
    /// A `runMaintenance` task is running (status stays idle; waking sends
    /// are latched and replayed when it ends).
    pub maintenance: bool,
    pub last_turn: u64,
    /// How the last turn ended (none before the first).
    pub last_end: Option<TurnEndReason>,
    pub abort: Option<Rc<Abort>>,
    pub idle: Vec<oneshot::Sender<Option<TurnEndReason>>>,
    /// The session's log had a `request/header` when the agent was made
    /// (its first request logs `resume` rather than `initial`).
    pub resumed_header: bool,
    /// The request header this agent last logged; before its first
    /// request, the one its session's log holds (a resume's).
    pub logged_header: Option<RequestHeader>,
    /// The route in force (`session.requestContext()`).
    pub logged_context: Option<RequestContext>,
    /// The model history derived so far, and the log length it covers.
    /// Kept as the JSON text each message was logged as, on purpose: a
    /// request copies the history on without parsing or re-encoding it
    /// (`vocab::history`), which keeps long sessions' steps fast.
    pub history: Vec<Box<serde_json::value::RawValue>>,
    pub history_seq: u64,
    /// The runtime-context snapshot the log retains.
    pub runtime_context: runtime_context::Projection,
    pub first_request: bool,
    pub wake_requested: bool,
}

pub(crate) type Agents = Rc<RefCell<HashMap<String, Agent>>>;

/// Everything the driver needs, cheap to clone into tasks.
#[derive(Clone)]
pub(crate) struct Loop {
    pub ctx: Context,
    pub agents: Agents,
    /// Agents made and not announced yet (see `creation`).
    pub pending: Rc<RefCell<HashMap<String, creation::Pending>>>,
    /// Agents being disposed, with whoever waits for that (see `disposal`).
    pub disposing: disposal::Disposing,
    /// Agents being published (see `creation`), each with whether a
    /// dispose arrived meanwhile (done once the publication is).
    pub publishing: creation::Marks,
    /// Stored sessions being resumed now: a second resume of one waits
    /// its turn by being refused (see `creation`).
    pub resuming: creation::Marks,
    pub config: Config,
}

impl Loop {
    /// Emits a notification about the agent its payload names, scoped to
    /// that agent (contained).
    pub fn notify<P: Serialize + Subject>(&self, name: &str, payload: &P) {
        let _ = self.ctx.dispatch_about(name, payload).emit();
    }

    /// Appends `event` (built with `NewEvent::typed` / `NewEvent::surface`
    /// from a record of `dsh_sdk::vocab::records`) to `session`; its seq.
    pub async fn append(&self, session: &str, event: NewEvent) -> Result<u64> {
        Ok(Sessions::new(&self.ctx).append(session, event).await?.seq)
    }

    /// Appends a non-surface event of `kind` whose data is `record`; its
    /// seq.
    pub async fn append_record(
        &self,
        session: &str,
        kind: &str,
        record: &impl Serialize,
    ) -> Result<u64> {
        self.append(session, NewEvent::typed(kind, record)?).await
    }

    /// The lock that orders `agent`'s inbox mutations (see `Agent::inbox_lock`).
    pub fn inbox_lock(&self, agent: &str) -> Result<Rc<Mutex<()>>> {
        let agents = self.agents.borrow();
        let a = agents.get(agent).ok_or_else(|| no_agent(agent))?;
        Ok(a.inbox_lock.clone())
    }

    /// An agent for session `id`; `summary` is what `sessions.resume`
    /// returns (none for a new session). Fails when a logged inbox splice
    /// does not replay.
    fn build(
        &self,
        id: &str,
        options: &AgentOptions,
        cwd: Option<String>,
        summary: Option<&ResumeReply>,
    ) -> Result<Agent> {
        let inbox = match summary {
            Some(s) => {
                if s.splice_seqs.len() != s.splices.len() {
                    return Err(Error::new(
                        codes::INVALID_PAYLOAD,
                        format!(
                            "`sessions.resume` of \"{id}\" answered {} inbox splices with {} seqs; \
                             each splice needs its seq",
                            s.splices.len(),
                            s.splice_seqs.len()
                        ),
                    ));
                }
                Inbox::replay(s.splice_seqs.iter().copied().zip(&s.splices))?
            }
            None => Inbox::default(),
        };
        let last_end = summary
            .and_then(|s| s.last_end.as_ref())
            .map(|reason| stored(id, "the last `turn/end`'s reason", reason))
            .transpose()?;
        // The route in force (`session.requestContext()`), so a resumed
        // agent logs `request/context` only when it changes.
        let logged_context = summary
            .and_then(|s| s.request_context.as_ref())
            .map(|context| stored(id, "the latest `request/context`", context))
            .transpose()?;
        // The header in force, so the first request restores the reasoning
        // effort it chose (`driver::restored_effort`).
        let logged_header: Option<RequestHeader> = summary
            .and_then(|s| s.request_header.as_ref())
            .map(|header| stored(id, "the latest `request/header`", header))
            .transpose()?;
        let agent = Agent {
            // An unset route is empty, as the original seeds it: an
            // `agent/request` listener may supply it (else the turn fails
            // with the original's message).
            provider: options.provider.clone().unwrap_or_default(),
            model: options.model.clone().unwrap_or_default(),
            max_tokens: options.max_tokens.as_ref().and_then(MaxTokens::get),
            reasoning_effort: options.reasoning_effort.clone(),
            selection: None,
            assembled: None,
            cwd,
            inbox,
            inbox_lock: Rc::default(),
            registration: new_id(),
            released: false,
            owner: None,
            owner_cleanup: None,
            disposing: false,
            parent: summary.and_then(|s| s.header.parent_session.clone()),
            running: false,
            maintenance: false,
            last_turn: summary.map_or(0, |s| s.last_turn),
            last_end,
            abort: None,
            idle: Vec::new(),
            resumed_header: logged_header.is_some(),
            logged_header,
            logged_context,
            history: Vec::new(),
            history_seq: 0,
            runtime_context: Default::default(),
            first_request: true,
            wake_requested: false,
        };
        Ok(agent)
    }

    /// Starts the configured `agents[]` (reference §4.7), in order. Without
    /// an exact id an agent gets a fresh session `<id>-session-<uuid>`; with
    /// `sessionId` the stored session of that id is resumed, or created when
    /// none is stored; with `resumeSessionId` the stored session is resumed.
    /// A failure is contained: a warning and `agent-loop/config-start-failed
    /// {sessionId, error}`, no agent, the others still start.
    async fn start_configured(&self) {
        for a in self.config.agents.clone() {
            let options = a.agent_options();
            let (action, session_id, outcome) = match a.resume_id() {
                Some(resume_id) => {
                    let params = ResumeParams {
                        session_id: resume_id.to_owned(),
                        agent_options: options,
                        setup: false,
                    };
                    let resumed = self.resume(None, &params).await;
                    ("resume", resume_id.to_owned(), resumed)
                }
                None => {
                    let id = a
                        .session_id
                        .clone()
                        .unwrap_or_else(|| format!("{}-session-{}", a.id, new_id()));
                    let create = CreateParams {
                        session_id: Some(id.clone()),
                        agent_options: options,
                        meta: a.cwd.clone().map(|cwd| CreateMeta {
                            cwd: Some(cwd),
                            ..CreateMeta::default()
                        }),
                        ..CreateParams::default()
                    };
                    let outcome = match &a.session_id {
                        Some(exact) => self.restore_or_create(exact, &create).await,
                        None => self.create(None, &create).await,
                    };
                    ("restore", id, outcome)
                }
            };
            if let Err(e) = outcome {
                dsh_sdk::tracing::warn!(
                    "agent \"{}\": config-driven {action} of \"{session_id}\" failed: {e}",
                    a.id
                );
                let _ = self.ctx.emit(
                    bus::AGENT_LOOP_CONFIG_START_FAILED,
                    ConfigStartFailed {
                        session_id,
                        error: e,
                    },
                );
            }
        }
    }

    /// An exact configured id (`create` names it too): resumed when
    /// stored, created when absent; a stored session that does not resume
    /// (corrupt, unreadable) fails.
    async fn restore_or_create(&self, id: &str, create: &CreateParams) -> Result<AgentRef> {
        let resumed = self
            .resume(
                None,
                &ResumeParams {
                    session_id: id.to_owned(),
                    agent_options: create.agent_options.clone(),
                    setup: false,
                },
            )
            .await;
        let Err(error) = resumed else {
            return resumed;
        };
        let stored = match SessionPersistence::new(&self.ctx).list(None).await {
            Ok(list) => list.iter().any(|h| h.id == id),
            // No persistence: nothing is stored, so this is a first use.
            Err(e) if e.code == codes::SERVICE_UNAVAILABLE => false,
            Err(e) => return Err(e),
        };
        if stored {
            return Err(error);
        }
        self.create(None, create).await
    }

    /// `runMaintenance(task)` of reference §4.3: from idle only, runs
    /// `task` (`{service, method, params}`, a call) while the agent stays
    /// idle; a cancel aborts it (the call is dropped, which stops it in its
    /// plugin) and the reply is `ABORTED`. Waking sends meanwhile are
    /// latched and replayed when the task ends, if work is still pending.
    async fn run_maintenance(&self, agent: &str, task: MaintenanceTask) -> Result<Value> {
        let (Some(service), Some(method)) = (task.service, task.method) else {
            return Err(Error::new(
                codes::INVALID_PAYLOAD,
                "maintenance needs `task.service` and `task.method`",
            ));
        };
        let abort = {
            let mut agents = self.agents.borrow_mut();
            let a = agents.get_mut(agent).ok_or_else(|| no_agent(agent))?;
            if a.running || a.maintenance {
                return Err(Error::new(
                    AGENT_BUSY,
                    format!("agent \"{agent}\" already has active work"),
                ));
            }
            a.maintenance = true;
            a.wake_requested = false;
            let abort = Rc::new(Abort::default());
            a.abort = Some(abort.clone());
            abort
        };
        let outcome = {
            let aborted = abort.notify.notified();
            tokio::pin!(aborted);
            aborted.as_mut().enable();
            let callee = self.ctx.service(service);
            let call = callee.call(&method, task.params);
            tokio::select! {
                biased;
                _ = aborted => Err(Error::new(code::ABORTED, "maintenance aborted")),
                r = call => r,
            }
        };
        let (waiters, end, again) = {
            let mut agents = self.agents.borrow_mut();
            let Some(a) = agents.get_mut(agent) else {
                return outcome;
            };
            a.maintenance = false;
            a.abort = None;
            let again = a.wake_requested && a.inbox.has_pending();
            a.wake_requested = false;
            (std::mem::take(&mut a.idle), a.last_end.clone(), again)
        };
        for w in waiters {
            let _ = w.send(end.clone());
        }
        if again {
            self.wake(agent);
        }
        outcome
    }

    /// Ties the agent `reply` names to the plugin that asked for it: when
    /// that plugin is disposed (unloaded, reloaded), so is the agent, as the
    /// original's registry unregisters an agent with its owner. A later
    /// agent under the same id (the first disposed, the id reopened) is not
    /// that owner's and stays.
    fn own(&self, req: &Request, reply: &AgentRef) {
        let id = reply.agent.clone();
        let Some(registration) = self.agents.borrow_mut().get_mut(&id).map(|a| {
            a.released = false;
            a.owner = Some(req.caller);
            a.registration.clone()
        }) else {
            return;
        };
        let (l, key) = (self.clone(), id.clone());
        let cleanup = req.on_caller_gone(move || {
            let current = l.agents.borrow().get(&id).map(|a| a.registration.clone());
            if current.as_deref() == Some(registration.as_str()) {
                let l2 = l.clone();
                l.ctx.spawn(async move { l2.dispose(&id).await });
            }
        });
        let previous = match self.agents.borrow_mut().get_mut(&key) {
            Some(a) => a.owner_cleanup.replace(cleanup),
            None => Some(cleanup),
        };
        if let Some(previous) = previous {
            previous.cancel();
        }
    }

    /// Lets go of `agent`: a fresh registration, so its owner's cleanup no
    /// longer matches it, and the next `resume` owns it.
    pub(crate) fn release(&self, agent: &str) -> Result<()> {
        let mut agents = self.agents.borrow_mut();
        let a = agents.get_mut(agent).ok_or_else(|| no_agent(agent))?;
        a.registration = new_id();
        a.released = true;
        a.owner = None;
        if let Some(cleanup) = a.owner_cleanup.take() {
            cleanup.cancel();
        }
        Ok(())
    }

    /// `send(m, target, wakeup)` of reference §4.3 (`message` was checked
    /// when the params were read).
    async fn send(
        &self,
        agent: &str,
        message: UserInput,
        target: SpliceTarget,
        wakeup: bool,
    ) -> Result<SendReply> {
        let message = message.into_message();
        let id = Value::String(message.id.clone());
        let mut wakeup = wakeup;
        // Whether this wake lands in an aborting turn is decided just
        // before the insertion (reference §4.3 step 1).
        self.splice_inbox(agent, |a| {
            // Disposal never latches a wake: the message is parked.
            wakeup &= !a.disposing;
            let busy = a.running || a.maintenance;
            let waking_after_abort =
                wakeup && busy && a.abort.as_ref().is_some_and(|x| x.is_aborted());
            let target = if waking_after_abort {
                NEXT_TURN
            } else {
                target
            };
            Some((target, f64::INFINITY, 0.0, vec![message]))
        })
        .await?;
        if wakeup {
            self.wake_opening_turn(agent).await;
        }
        Ok(SendReply { message_id: id })
    }

    /// One live inbox mutation (reference §4.2). `plan` picks the splice
    /// from the current lists, under the inbox lock: `(target, start,
    /// deleteCount, inserted)` in `Array.splice` coordinates, or `None` to
    /// do nothing. The splice is normalized, validated (in range, no id
    /// pending twice), logged as `agent/inbox/spliced` first, then applied,
    /// then `agent/inbox/discarded` is emitted per removed message (a
    /// removal here is a cancellation, `outcome: "canceled"`) and
    /// `agent/inbox/inserted` per inserted one. A no-op logs nothing.
    /// Returns the removed messages, or `None` when `plan` declined.
    pub async fn splice_inbox(
        &self,
        agent: &str,
        plan: impl FnOnce(&Agent) -> Option<(SpliceTarget, f64, f64, Vec<Message>)>,
    ) -> Result<Option<Vec<Message>>> {
        let lock = self.inbox_lock(agent)?;
        let _ordered = lock.lock().await;
        let splice = {
            let agents = self.agents.borrow();
            let a = agents.get(agent).ok_or_else(|| no_agent(agent))?;
            let Some((target, start, delete_count, inserted)) = plan(a) else {
                return Ok(None);
            };
            let Some(mut splice) = a.inbox.normalize(target, start, delete_count, inserted) else {
                return Ok(Some(Vec::new()));
            };
            a.inbox.validate(&splice)?;
            if splice.removed_count.is_some() {
                splice.outcome = Some(CANCELED.to_owned());
            }
            splice
        };
        self.append_record(agent, event::INBOX_SPLICED, &splice)
            .await?;
        let removed = match self.agents.borrow_mut().get_mut(agent) {
            Some(a) => a.inbox.apply(&splice)?,
            None => return Err(no_agent(agent)),
        };
        for message in &removed {
            self.notify(
                bus::AGENT_INBOX_DISCARDED,
                &InboxMessage {
                    agent: agent.to_owned(),
                    message,
                },
            );
        }
        for message in &splice.inserted {
            self.notify(
                bus::AGENT_INBOX_INSERTED,
                &InboxMessage {
                    agent: agent.to_owned(),
                    message,
                },
            );
        }
        Ok(Some(removed))
    }

    /// Appends one message at the end of `target`.
    pub async fn append_inbox(&self, agent: &str, target: SpliceTarget, m: Message) -> Result<()> {
        self.splice_inbox(agent, |_| Some((target, f64::INFINITY, 0.0, vec![m])))
            .await?;
        Ok(())
    }

    /// `inbox.replace(messageId, message)`: the pending message with that id,
    /// in either list, is replaced in place (discarded, the new one
    /// inserted). False when no such message is pending; an error when the
    /// replacement's id is already pending elsewhere.
    async fn replace(&self, agent: &str, message_id: &str, message: UserInput) -> Result<bool> {
        let message = message.into_message();
        let replaced = self
            .splice_inbox(agent, |a| {
                let (target, i) = a.inbox.locate(message_id)?;
                Some((target, i as f64, 1.0, vec![message]))
            })
            .await?;
        Ok(replaced.is_some())
    }

    /// `inbox.remove(messageId)`: cancels one pending message durably. False
    /// when no such message is pending.
    async fn remove(&self, agent: &str, message_id: &str) -> Result<bool> {
        let removed = self
            .splice_inbox(agent, |a| {
                let (target, i) = a.inbox.locate(message_id)?;
                Some((target, i as f64, 1.0, Vec::new()))
            })
            .await?;
        Ok(removed.is_some())
    }

    /// Starts the driver if the agent is idle; latches a wake otherwise.
    pub fn wake(&self, agent: &str) {
        if self.reserve_driver(agent) {
            let me = self.clone();
            let id = agent.to_owned();
            self.ctx.spawn(async move { me.drive(&id, None).await });
        }
    }

    /// A waking send into an idle agent: the turn is opened and its first
    /// batch claimed before the send replies (the original starts the
    /// driver synchronously), so a send right after it is claimed by the
    /// next step, never by this one. The rest of the turn runs on a task.
    /// The driver runs on its own task either way, so a caller that goes
    /// away mid-send cannot strand a reserved driver.
    async fn wake_opening_turn(&self, agent: &str) {
        if !self.reserve_driver(agent) {
            return;
        }
        let (claimed, first_claim) = oneshot::channel();
        let me = self.clone();
        let id = agent.to_owned();
        self.ctx
            .spawn(async move { me.drive(&id, Some(claimed)).await });
        // An error means the turn ended before claiming (its start failed,
        // or a cancel came first): nothing left to wait for.
        let _ = first_claim.await;
    }

    /// Reserves the driver of an idle agent (status `running`, a fresh
    /// abort); latches the wake when the agent is busy. True when reserved.
    fn reserve_driver(&self, agent: &str) -> bool {
        {
            let mut agents = self.agents.borrow_mut();
            let Some(a) = agents.get_mut(agent) else {
                return false;
            };
            if a.disposing {
                return false;
            }
            if a.maintenance {
                // Maintenance cannot deliver a wake: latch it for replay
                // when the task ends, unless the agent is being disposed.
                let cause = a.abort.as_ref().and_then(|x| x.cause.borrow().clone());
                if cause != Some(CancelCause::Disposed) {
                    a.wake_requested = true;
                }
                return false;
            }
            if a.running {
                // A live driver claims the work itself (or parks it when its
                // turn is blocked or fails); only a wake into an aborting
                // turn is latched and replayed once idle, never a wake into
                // a disposal (reference §4.3).
                let cause = a.abort.as_ref().and_then(|x| x.cause.borrow().clone());
                if cause.is_some_and(|c| c != CancelCause::Disposed) {
                    a.wake_requested = true;
                }
                return false;
            }
            a.running = true;
            a.wake_requested = false;
            // Installed now, not when the driver task first runs: a cancel
            // that arrives in between must close the turn it asked for.
            a.abort = Some(Rc::new(Abort::default()));
        }
        self.notify(
            bus::AGENT_STATUS,
            &StatusChanged {
                agent: agent.to_owned(),
                status: RunStatus::Running,
            },
        );
        true
    }

    async fn when_idle(&self, agent: &str) -> Result<WhenIdleReply> {
        let rx = {
            let mut agents = self.agents.borrow_mut();
            let a = agents.get_mut(agent).ok_or_else(|| no_agent(agent))?;
            if !a.running && !a.maintenance {
                return Ok(WhenIdleReply {
                    reason: a.last_end.clone(),
                    last_turn: a.last_turn,
                });
            }
            let (tx, rx) = oneshot::channel();
            a.idle.push(tx);
            rx
        };
        let reason = rx
            .await
            .map_err(|_| Error::new(codes::DISPOSED, "the agent was disposed"))?;
        let last_turn = self.agents.borrow().get(agent).map_or(0, |a| a.last_turn);
        Ok(WhenIdleReply { reason, last_turn })
    }

    /// `cancel(cause, {keepInbox})` of reference §4.3. Without `keepInbox`
    /// the inbox is cleared durably: one `canceled` splice per non-empty
    /// list (next-step first), so a resumed agent does not restore work the
    /// user cancelled, then one `agent/inbox/discarded` per message.
    async fn cancel(&self, agent: &str, cause: CancelCause, keep_inbox: bool) -> Result<()> {
        {
            let mut agents = self.agents.borrow_mut();
            let a = agents.get_mut(agent).ok_or_else(|| no_agent(agent))?;
            if cause == CancelCause::Disposed || !keep_inbox {
                a.wake_requested = false;
            }
            if let Some(abort) = &a.abort {
                abort.abort(cause);
            }
        }
        if keep_inbox {
            return Ok(());
        }
        // After any inbox mutation in flight, so the clear removes it too.
        let lock = self.inbox_lock(agent)?;
        let _ordered = lock.lock().await;
        let removed = match self.agents.borrow_mut().get_mut(agent) {
            Some(a) => a.inbox.clear(),
            None => return Err(no_agent(agent)),
        };
        if removed.is_empty() {
            return Ok(());
        }
        // One batch, so no send can land between the two splices.
        let events = removed
            .iter()
            .map(|(target, list)| {
                let splice = Inbox::removal(*target, list.len(), Some(CANCELED));
                NewEvent::typed(event::INBOX_SPLICED, &splice)
            })
            .collect::<Result<Vec<_>>>()?;
        Sessions::new(&self.ctx).append_many(agent, events).await?;
        for (_, list) in removed {
            for message in list {
                self.notify(
                    bus::AGENT_INBOX_DISCARDED,
                    &InboxMessage {
                        agent: agent.to_owned(),
                        message,
                    },
                );
            }
        }
        Ok(())
    }
}

fn no_agent(id: &str) -> Error {
    Error::new(code::AGENT_NOT_FOUND, format!("no agent `{id}`"))
}

/// A record `sessions.resume` read from the stored log of session `id`
/// (`what` names it), typed; a malformed one is the log's corruption.
fn stored<T: serde::de::DeserializeOwned>(id: &str, what: &str, value: &Value) -> Result<T> {
    T::deserialize(value).map_err(|e| {
        Error::new(
            code::SESSION_CORRUPT,
            format!("session \"{id}\": {what} is malformed: {e}"),
        )
    })
}

struct AgentLoop;

impl Plugin for AgentLoop {
    const NAME: &'static str = "agent-loop";
    const DESCRIPTION: &'static str =
        "agents and the turn/step loop (services `agents`, `agentLoop`)";
    const PROVIDES: &'static [&'static str] = &[service::AGENTS, service::AGENT_LOOP];
    const INJECT: &'static [&'static str] = &[
        service::SESSIONS,
        service::LLM,
        service::TOOLS,
        service::SYSTEM_PROMPT,
    ];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        config.validate()?;
        let l = Loop {
            ctx: ctx.clone(),
            agents: Rc::default(),
            pending: Rc::default(),
            disposing: Rc::default(),
            publishing: Rc::default(),
            resuming: Rc::default(),
            config,
        };
        let l2 = l.clone();
        ctx.provide(service::AGENTS, move |req| {
            services::handle_agents(l2.clone(), req)
        });
        let l3 = l.clone();
        ctx.provide(service::AGENT_LOOP, move |req| {
            services::handle_loop(l3.clone(), req)
        });
        if !l.config.agents.is_empty() {
            let starter = l.clone();
            ctx.spawn(async move { starter.start_configured().await });
        }
        let l4 = l.clone();
        ctx.effect(move || async move {
            // A running turn ends `aborted{disposed}` and the driver closes it
            // (answering unstarted tool calls) before the fiber goes, so the
            // log stays balanced across a hot swap.
            let ids: Vec<String> = l4.agents.borrow().keys().cloned().collect();
            for id in ids {
                let _ = l4.cancel(&id, CancelCause::Disposed, true).await;
                let _ = l4.when_idle(&id).await;
            }
            // Creations under way publish nothing.
            l4.abandon_all().await;
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(AgentLoop);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(v: Value) -> Config {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_parallel_cap_defaults_to_ten_and_must_be_positive() {
        assert_eq!(config(json!({})).max_parallel_tool_calls, 10);
        assert!(config(json!({})).validate().is_ok());
        let zero = config(json!({"maxParallelToolCalls": 0})).validate();
        assert_eq!(
            zero.map_err(|e| e.code),
            Err(codes::INVALID_PAYLOAD.to_owned())
        );
        assert!(serde_json::from_value::<Config>(json!({"maxParallelToolCalls": -1})).is_err());
        assert!(serde_json::from_value::<Config>(json!({"maxParallelToolCalls": 1.5})).is_err());
    }

    #[test]
    fn the_step_limit_defaults_when_absent_or_zero() {
        assert_eq!(config(json!({})).max_steps(), DEFAULT_MAX_STEPS_PER_TURN);
        assert_eq!(
            config(json!({MAX_STEPS_FIELD: 0})).max_steps(),
            DEFAULT_MAX_STEPS_PER_TURN
        );
        // The field name quoted in the limit's message is the one parsed.
        assert_eq!(config(json!({MAX_STEPS_FIELD: 3})).max_steps(), 3);
    }

    #[test]
    fn a_stored_record_that_does_not_read_is_the_logs_corruption() {
        let reason: TurnEndReason =
            stored("s", "the reason", &json!({"kind": "max-tokens"})).unwrap();
        assert_eq!(reason, TurnEndReason::MaxTokens);
        let e = stored::<TurnEndReason>(
            "s",
            "the last `turn/end`'s reason",
            &json!({"kind": "error"}),
        )
        .unwrap_err();
        assert_eq!(e.code, code::SESSION_CORRUPT);
        assert_eq!(
            e.message,
            "session \"s\": the last `turn/end`'s reason is malformed: missing field `error`"
        );
    }
}
