//! `agent-loop`: agents and the turn/step algorithm (reference dsh-core §4).

mod driver;
mod inbox;
mod runtime_context;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use dsh_sdk::names::{agent_loop, agents, bus, code, service, session_persistence, sessions};
use dsh_sdk::new_id;
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::event;
use serde::Deserialize;
use tokio::sync::{oneshot, Mutex, Notify};

pub(crate) use inbox::{Inbox, NEXT_STEP, NEXT_TURN};

/// The default of [`Config::max_steps_per_turn`].
pub(crate) const DEFAULT_MAX_STEPS_PER_TURN: u64 = 200;
/// The config field that sets the step limit, as users write it.
pub(crate) const MAX_STEPS_FIELD: &str = "maxStepsPerTurn";
/// The code of a turn that reached the step limit.
pub(crate) const STEP_LIMIT: &str = "STEP_LIMIT";
/// JavaScript's `Number.MAX_SAFE_INTEGER`: the largest `maxTokens` the
/// original accepts (a "positive safe integer").
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

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

    fn agent_options(&self) -> Value {
        let mut options = json!({});
        for (key, value) in [
            ("provider", self.provider.clone().map(Value::from)),
            ("model", self.model.clone().map(Value::from)),
            ("maxTokens", self.max_tokens.clone()),
        ] {
            if let Some(v) = value {
                options[key] = v;
            }
        }
        options
    }
}

/// `runMaintenance` on an agent that is running or already in maintenance.
pub(crate) const AGENT_BUSY: &str = "AGENT_BUSY";

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
    pub cause: RefCell<Option<Value>>,
    pub notify: Notify,
}

impl Abort {
    pub fn abort(&self, cause: Value) {
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
    pub running: bool,
    /// A `runMaintenance` task is running (status stays idle; waking sends
    /// are latched and replayed when it ends).
    pub maintenance: bool,
    pub last_turn: u64,
    pub last_end: Value,
    pub abort: Option<Rc<Abort>>,
    pub idle: Vec<oneshot::Sender<Value>>,
    pub logged_header: Option<Value>,
    pub logged_context: Option<Value>,
    /// The model history derived so far, and the log length it covers.
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
    pub config: Config,
}

impl Loop {
    /// Emits an agent-scoped notification (contained).
    pub fn notify(&self, agent: &str, name: &str, payload: Value) {
        let _ = self.ctx.dispatch(name).scope(agent).emit(payload);
    }

    pub async fn append(
        &self,
        session: &str,
        kind: &str,
        data: Value,
        surface: bool,
        sources: Option<Vec<u64>>,
    ) -> Result<u64> {
        let mut args = json!({"id": session, "type": kind, "data": data});
        if surface {
            args["surfaceOp"] = json!("append");
        }
        if let Some(s) = sources {
            args["sourceEventSeqs"] = json!(s);
        }
        let ev = self
            .ctx
            .service(service::SESSIONS)
            .call(sessions::APPEND, args)
            .await?;
        Ok(ev["seq"].as_u64().unwrap_or(0))
    }

    /// The lock that orders `agent`'s inbox mutations (see `Agent::inbox_lock`).
    pub fn inbox_lock(&self, agent: &str) -> Result<Rc<Mutex<()>>> {
        let agents = self.agents.borrow();
        let a = agents.get(agent).ok_or_else(|| no_agent(agent))?;
        Ok(a.inbox_lock.clone())
    }

    fn agent_id(req: &Request) -> Result<String> {
        req.params["agent"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| Error::new(codes::INVALID_PAYLOAD, "missing `agent`"))
    }

    /// Adds an agent for session `id`; `summary` is what `sessions.resume`
    /// returns (null for a new session). Fails, adding nothing, when a
    /// logged inbox splice does not replay.
    fn register(
        &self,
        id: &str,
        options: &Value,
        cwd: Option<String>,
        summary: &Value,
    ) -> Result<()> {
        let seqs = summary["spliceSeqs"].as_array();
        let splices = summary["splices"].as_array().into_iter().flatten();
        let inbox = Inbox::replay(splices.enumerate().map(|(i, splice)| {
            let seq = seqs.and_then(|s| s.get(i)).and_then(Value::as_u64);
            (seq.unwrap_or(0), splice)
        }))?;
        let agent = Agent {
            provider: options["provider"].as_str().unwrap_or_default().to_owned(),
            model: options["model"].as_str().unwrap_or_default().to_owned(),
            max_tokens: options["maxTokens"].as_u64(),
            selection: None,
            assembled: None,
            cwd,
            inbox,
            inbox_lock: Rc::default(),
            registration: new_id(),
            running: false,
            maintenance: false,
            last_turn: summary["lastTurn"].as_u64().unwrap_or(0),
            last_end: summary["lastEnd"].clone(),
            abort: None,
            idle: Vec::new(),
            logged_header: Some(summary["requestHeader"].clone()).filter(|h| !h.is_null()),
            // The route in force (`session.requestContext()`), so a
            // resumed agent logs `request/context` only when it changes.
            logged_context: Some(summary["requestContext"].clone()).filter(|c| !c.is_null()),
            history: Vec::new(),
            history_seq: 0,
            runtime_context: Default::default(),
            first_request: true,
            wake_requested: false,
        };
        self.agents.borrow_mut().insert(id.to_owned(), agent);
        self.notify(id, bus::AGENT_CREATED, json!({"agent": id}));
        Ok(())
    }

    async fn create(&self, params: &Value) -> Result<Value> {
        let options = params["agentOptions"].clone();
        if let Some(mt) = options.get("maxTokens").filter(|v| !v.is_null()) {
            if mt.as_u64().is_none_or(|n| n == 0 || n > MAX_SAFE_INTEGER) {
                return Err(Error::new(
                    codes::INVALID_PAYLOAD,
                    "agent maxTokens must be a positive safe integer",
                ));
            }
        }
        // Without `meta.cwd` the session has no cwd (not `/`).
        let cwd = params["meta"]["cwd"].as_str().map(str::to_owned);
        let mut args = json!({"meta": {}});
        if let Some(cwd) = &cwd {
            args["meta"]["cwd"] = json!(cwd);
        }
        if let Some(id) = params["sessionId"].as_str() {
            args["id"] = json!(id);
        }
        let created = self
            .ctx
            .service(service::SESSIONS)
            .call(sessions::CREATE, args)
            .await?;
        let id = created["id"].as_str().unwrap_or_default().to_owned();
        self.register(&id, &options, cwd, &Value::Null)?;
        self.notify(
            &id,
            bus::AGENT_SESSION_START,
            json!({"agent": id, "source": "startup"}),
        );
        Ok(json!({"agent": id}))
    }

    async fn resume(&self, params: &Value) -> Result<Value> {
        let id = params["sessionId"]
            .as_str()
            .ok_or_else(|| Error::new(codes::INVALID_PAYLOAD, "missing `sessionId`"))?
            .to_owned();
        if self.agents.borrow().contains_key(&id) {
            return Ok(json!({"agent": id}));
        }
        let summary = self
            .ctx
            .service(service::SESSIONS)
            .call(sessions::RESUME, json!({"id": id}))
            .await?;
        let cwd = summary["header"]["cwd"].as_str().map(str::to_owned);
        let options = params["agentOptions"].clone();
        if let Err(e) = self.register(&id, &options, cwd, &summary) {
            // No agent: release the session the resume made live.
            let _ = self
                .ctx
                .service(service::SESSIONS)
                .call(sessions::CLOSE, json!({"id": id}))
                .await;
            return Err(e);
        }
        self.notify(
            &id,
            bus::AGENT_SESSION_START,
            json!({"agent": id, "source": "resume"}),
        );
        Ok(json!({"agent": id}))
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
                    let params = json!({"sessionId": resume_id, "agentOptions": options});
                    ("resume", resume_id.to_owned(), self.resume(&params).await)
                }
                None => {
                    let id = a
                        .session_id
                        .clone()
                        .unwrap_or_else(|| format!("{}-session-{}", a.id, new_id()));
                    let mut create = json!({"sessionId": id, "agentOptions": options});
                    if let Some(cwd) = &a.cwd {
                        create["meta"] = json!({"cwd": cwd});
                    }
                    let outcome = match &a.session_id {
                        Some(_) => self.restore_or_create(&id, &options, &create).await,
                        None => self.create(&create).await,
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
                    json!({"sessionId": session_id, "error": {"code": e.code, "message": e.message}}),
                );
            }
        }
    }

    /// An exact configured id: resumed when stored, created when absent;
    /// a stored session that does not resume (corrupt, unreadable) fails.
    async fn restore_or_create(&self, id: &str, options: &Value, create: &Value) -> Result<Value> {
        let resumed = self
            .resume(&json!({"sessionId": id, "agentOptions": options}))
            .await;
        let Err(error) = resumed else {
            return resumed;
        };
        let stored = match self
            .ctx
            .service(service::SESSION_PERSISTENCE)
            .call(session_persistence::LIST, json!({}))
            .await
        {
            Ok(list) => list
                .as_array()
                .is_some_and(|l| l.iter().any(|h| h["id"] == id)),
            // No persistence: nothing is stored, so this is a first use.
            Err(e) if e.code == codes::SERVICE_UNAVAILABLE => false,
            Err(e) => return Err(e),
        };
        if stored {
            return Err(error);
        }
        self.create(create).await
    }

    /// `runMaintenance(task)` of reference §4.3: from idle only, runs
    /// `task` (`{service, method, params}`, a call) while the agent stays
    /// idle; a cancel aborts it (the call is dropped, which stops it in its
    /// plugin) and the reply is `ABORTED`. Waking sends meanwhile are
    /// latched and replayed when the task ends, if work is still pending.
    async fn run_maintenance(&self, agent: &str, task: &Value) -> Result<Value> {
        let (Some(service), Some(method)) = (task["service"].as_str(), task["method"].as_str())
        else {
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
            let call = callee.call(method, task["params"].clone());
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

    /// Disposal: parks pending work (a resume restores it), never latches a
    /// wake (see `wake`), ends the running turn, then removes the agent and
    /// emits `agent/disposed`.
    async fn dispose(&self, agent: &str) {
        if self
            .cancel(agent, json!({"kind": "disposed"}), true)
            .await
            .is_err()
        {
            return;
        }
        let _ = self.when_idle(agent).await;
        if self.agents.borrow_mut().remove(agent).is_some() {
            self.notify(agent, bus::AGENT_DISPOSED, json!({"agent": agent}));
        }
    }

    /// Ties the agent `reply` names to the plugin that asked for it: when
    /// that plugin is disposed (unloaded, reloaded), so is the agent, as the
    /// original's registry unregisters an agent with its owner. A later
    /// agent under the same id (the first disposed, the id reopened) is not
    /// that owner's and stays.
    fn own(&self, req: &Request, reply: &Value) {
        let Some(id) = reply["agent"].as_str().map(str::to_owned) else {
            return;
        };
        let Some(registration) = self
            .agents
            .borrow()
            .get(&id)
            .map(|a| a.registration.clone())
        else {
            return;
        };
        let l = self.clone();
        req.on_caller_gone(move || {
            let current = l.agents.borrow().get(&id).map(|a| a.registration.clone());
            if current.as_deref() == Some(registration.as_str()) {
                let l2 = l.clone();
                l.ctx.spawn(async move { l2.dispose(&id).await });
            }
        });
    }

    /// `send(m, target, wakeup)` of reference §4.3.
    async fn send(
        &self,
        agent: &str,
        message: Value,
        target: &'static str,
        wakeup: bool,
    ) -> Result<Value> {
        let message = normalize_message(message)?;
        let id = message["id"].clone();
        // Whether this wake lands in an aborting turn is decided just
        // before the insertion (reference §4.3 step 1).
        self.splice_inbox(agent, |a| {
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
        Ok(json!({"messageId": id}))
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
        plan: impl FnOnce(&Agent) -> Option<(&'static str, f64, f64, Vec<Value>)>,
    ) -> Result<Option<Vec<Value>>> {
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
            if splice.get("removedCount").is_some() {
                splice["outcome"] = json!("canceled");
            }
            splice
        };
        self.append(agent, event::INBOX_SPLICED, splice.clone(), false, None)
            .await?;
        let removed = match self.agents.borrow_mut().get_mut(agent) {
            Some(a) => a.inbox.apply(&splice)?,
            None => return Err(no_agent(agent)),
        };
        for message in &removed {
            self.notify(
                agent,
                bus::AGENT_INBOX_DISCARDED,
                json!({"agent": agent, "message": message}),
            );
        }
        for message in splice["inserted"].as_array().into_iter().flatten() {
            self.notify(
                agent,
                bus::AGENT_INBOX_INSERTED,
                json!({"agent": agent, "message": message}),
            );
        }
        Ok(Some(removed))
    }

    /// Appends one message at the end of `target`.
    pub async fn append_inbox(&self, agent: &str, target: &'static str, m: Value) -> Result<()> {
        self.splice_inbox(agent, |_| Some((target, f64::INFINITY, 0.0, vec![m])))
            .await?;
        Ok(())
    }

    /// `inbox.replace(messageId, message)`: the pending message with that id,
    /// in either list, is replaced in place (discarded, the new one
    /// inserted). False when no such message is pending; an error when the
    /// replacement's id is already pending elsewhere.
    async fn replace(&self, agent: &str, message_id: &str, message: Value) -> Result<bool> {
        let message = normalize_message(message)?;
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
            if a.maintenance {
                // Maintenance cannot deliver a wake: latch it for replay
                // when the task ends, unless the agent is being disposed.
                let cause = a.abort.as_ref().and_then(|x| x.cause.borrow().clone());
                if cause.is_none_or(|c| c["kind"] != "disposed") {
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
                if cause.is_some_and(|c| c["kind"] != "disposed") {
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
            agent,
            bus::AGENT_STATUS,
            json!({"agent": agent, "status": "running"}),
        );
        true
    }

    async fn when_idle(&self, agent: &str) -> Result<Value> {
        let rx = {
            let mut agents = self.agents.borrow_mut();
            let a = agents.get_mut(agent).ok_or_else(|| no_agent(agent))?;
            if !a.running && !a.maintenance {
                return Ok(json!({"reason": a.last_end, "lastTurn": a.last_turn}));
            }
            let (tx, rx) = oneshot::channel();
            a.idle.push(tx);
            rx
        };
        let reason = rx
            .await
            .map_err(|_| Error::new(codes::DISPOSED, "the agent was disposed"))?;
        let last_turn = self.agents.borrow().get(agent).map_or(0, |a| a.last_turn);
        Ok(json!({"reason": reason, "lastTurn": last_turn}))
    }

    /// `cancel(cause, {keepInbox})` of reference §4.3. Without `keepInbox`
    /// the inbox is cleared durably: one `canceled` splice per non-empty
    /// list (next-step first), so a resumed agent does not restore work the
    /// user cancelled, then one `agent/inbox/discarded` per message.
    async fn cancel(&self, agent: &str, cause: Value, keep_inbox: bool) -> Result<()> {
        {
            let mut agents = self.agents.borrow_mut();
            let a = agents.get_mut(agent).ok_or_else(|| no_agent(agent))?;
            if cause["kind"] == "disposed" || !keep_inbox {
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
        let events: Vec<Value> = removed
            .iter()
            .map(|(target, list)| {
                json!({"type": event::INBOX_SPLICED, "data": {"target": target, "start": 0,
                       "removedCount": list.len(), "inserted": [], "outcome": "canceled"}})
            })
            .collect();
        self.ctx
            .service(service::SESSIONS)
            .call(
                sessions::APPEND_MANY,
                json!({"id": agent, "events": events}),
            )
            .await?;
        for (_, list) in removed {
            for message in list {
                self.notify(
                    agent,
                    bus::AGENT_INBOX_DISCARDED,
                    json!({"agent": agent, "message": message}),
                );
            }
        }
        Ok(())
    }
}

fn no_agent(id: &str) -> Error {
    Error::new("AGENT_NOT_FOUND", format!("no agent `{id}`"))
}

fn message_id(req: &Request) -> Result<String> {
    req.params["messageId"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| Error::new(codes::INVALID_PAYLOAD, "missing `messageId`"))
}

/// Accepts a full user message or `{text}` shorthand.
fn normalize_message(m: Value) -> Result<Value> {
    if m.get("role").is_some() {
        return Ok(m);
    }
    let text = m["text"]
        .as_str()
        .ok_or_else(|| Error::new(codes::INVALID_PAYLOAD, "a message needs `role` or `text`"))?;
    Ok(dsh_sdk::vocab::msg::user_text(&new_id(), text))
}

async fn handle_agents(l: Loop, req: Request) -> Result<Reply> {
    let agent = Loop::agent_id(&req)?;
    let message = req.params["message"].clone();
    match req.method.as_str() {
        agents::FOLLOWUP => Ok(l.send(&agent, message, NEXT_TURN, true).await?.into()),
        agents::STEER => Ok(l.send(&agent, message, NEXT_STEP, true).await?.into()),
        agents::INJECT => Ok(l.send(&agent, message, NEXT_STEP, false).await?.into()),
        agents::REPLACE => Reply::json(l.replace(&agent, &message_id(&req)?, message).await?),
        agents::REMOVE => Reply::json(l.remove(&agent, &message_id(&req)?).await?),
        agents::PENDING => {
            let agents = l.agents.borrow();
            let a = agents.get(&agent).ok_or_else(|| no_agent(&agent))?;
            Reply::json(json!({"nextTurn": a.inbox.next_turn, "nextStep": a.inbox.next_step}))
        }
        agents::CANCEL => {
            let cause = match req.params.get("cause") {
                Some(c) if !c.is_null() => c.clone(),
                _ => json!({"kind": "user"}),
            };
            l.cancel(&agent, cause, req.params["keepInbox"] == json!(true))
                .await?;
            Ok(Value::Null.into())
        }
        agents::WHEN_IDLE => Ok(l.when_idle(&agent).await?.into()),
        agents::SELECT_MODEL => {
            // `{provider, model}` selects a route from the next step's
            // assembly on; neither clears the selection (the agent's own
            // options again).
            let selection = match (
                req.params["provider"].as_str(),
                req.params["model"].as_str(),
            ) {
                (Some(p), Some(m)) => Some((p.to_owned(), m.to_owned())),
                (None, None) => None,
                _ => {
                    return Err(Error::new(
                        codes::INVALID_PAYLOAD,
                        "selectModel needs both `provider` and `model`, or neither",
                    ))
                }
            };
            let mut agents = l.agents.borrow_mut();
            let a = agents.get_mut(&agent).ok_or_else(|| no_agent(&agent))?;
            a.selection = selection;
            Ok(Value::Null.into())
        }
        agents::RUN_MAINTENANCE => Ok(l.run_maintenance(&agent, &req.params["task"]).await?.into()),
        agents::STATUS => {
            let agents = l.agents.borrow();
            let a = agents.get(&agent).ok_or_else(|| no_agent(&agent))?;
            Reply::json(
                json!({"status": if a.running { "running" } else { "idle" }, "maintenance": a.maintenance, "lastTurn": a.last_turn, "lastEnd": a.last_end}),
            )
        }
        agents::DISPOSE => {
            if !l.agents.borrow().contains_key(&agent) {
                return Err(no_agent(&agent));
            }
            l.dispose(&agent).await;
            Ok(Value::Null.into())
        }
        _ => Err(req.unknown_method()),
    }
}

async fn handle_loop(l: Loop, req: Request) -> Result<Reply> {
    match req.method.as_str() {
        agent_loop::CREATE => {
            let created = l.create(&req.params).await?;
            l.own(&req, &created);
            Ok(created.into())
        }
        agent_loop::RESUME => {
            let live = req.params["sessionId"]
                .as_str()
                .is_some_and(|id| l.agents.borrow().contains_key(id));
            let resumed = l.resume(&req.params).await?;
            // A live agent keeps the owner that created it.
            if !live {
                l.own(&req, &resumed);
            }
            Ok(resumed.into())
        }
        agent_loop::LIST => {
            let ids: Vec<String> = l.agents.borrow().keys().cloned().collect();
            Reply::json(ids)
        }
        _ => Err(req.unknown_method()),
    }
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
            config,
        };
        let l2 = l.clone();
        ctx.provide(service::AGENTS, move |req| handle_agents(l2.clone(), req));
        let l3 = l.clone();
        ctx.provide(service::AGENT_LOOP, move |req| handle_loop(l3.clone(), req));
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
                let _ = l4.cancel(&id, json!({"kind": "disposed"}), true).await;
                let _ = l4.when_idle(&id).await;
            }
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(AgentLoop);

#[cfg(test)]
mod tests {
    use super::*;

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
}
