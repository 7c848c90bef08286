//! The router: services, listeners and replies, routed inline.
//!
//! A plugin's `send` runs on the plugin's own thread and is routed right
//! there: the router looks up the destination and pushes into its inbox
//! (waking its eventfd). A cross-plugin call therefore costs exactly two
//! thread wake-ups, the same as a bare two-thread ping-pong. The router is
//! host code; it never calls plugin code and never panics.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use dsh_abi::Envelope;
use dsh_wire::{codes, Cow, Error, Mode, ReplyKind, ToHost, ToPlugin};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::inbox::Inbox;
use crate::loader::{GenCtx, Sink};
use crate::report::{Level, Reports};

/// A fiber's id (0 is the host itself).
pub type FiberId = u64;

/// A reply delivered to the host.
#[derive(Debug, Clone)]
pub struct HostReply {
    /// Item, final result or final error.
    pub kind: ReplyKind,
    /// JSON text.
    pub payload: String,
}

impl HostReply {
    /// True for the last reply of a call.
    pub fn is_final(&self) -> bool {
        self.kind.is_final()
    }

    /// The reply as a result.
    pub fn result(&self) -> Result<Value, Error> {
        if self.kind == ReplyKind::Err {
            Err(Error::from_payload(&self.payload))
        } else if self.payload.is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_str(&self.payload).map_err(Error::from)
        }
    }
}

/// A service implemented by the host itself (always active). It answers at
/// once (`Some`), or keeps the [`Responder`] and answers later (`None`),
/// from any thread; it runs under the router's lock, so it must not block.
pub type Builtin =
    Arc<dyn Fn(&str, Value, FiberId, Responder) -> Option<Result<Value, Error>> + Send + Sync>;

/// Where the late answer of a builtin call goes (see [`Builtin`]).
pub struct Responder(ReplyTo);

impl Responder {
    /// Sends the final answer; false when the caller is gone (its
    /// generation stopped), so the answer was not delivered.
    pub fn reply(self, result: Result<Value, Error>) -> bool {
        let (kind, payload) = match result {
            Ok(v) => (ReplyKind::Ok, v.to_string()),
            Err(e) => (ReplyKind::Err, e.to_payload()),
        };
        match self.0 {
            ReplyTo::Plugin {
                inbox, local_id, ..
            } => inbox.push(
                ToPlugin::Reply {
                    id: local_id,
                    kind,
                    payload: Cow::Owned(payload),
                }
                .encode(),
            ),
            ReplyTo::Host(tx) => tx.send(HostReply { kind, payload }).is_ok(),
            // Listeners' chains never call a builtin.
            ReplyTo::Chain { .. } => false,
        }
    }
}

/// The innermost default of a host-dispatched waterfall.
pub type HostInner = Box<dyn FnOnce(Value) -> Result<Value, Error> + Send>;

#[derive(Clone)]
enum ReplyTo {
    Plugin {
        fiber: FiberId,
        inbox: Arc<Inbox>,
        local_id: u64,
    },
    Host(mpsc::UnboundedSender<HostReply>),
    Chain {
        chain: u64,
        index: usize,
    },
}

struct Pending {
    reply_to: ReplyTo,
    target: FiberId,
    /// For waterfall hops: (chain, hop index); the inner hop has index =
    /// number of listeners.
    waterfall: Option<(u64, usize)>,
}

#[derive(Clone)]
struct ListenerRoute {
    fiber: FiberId,
    id: u64,
    scope: Option<String>,
    inbox: Arc<Inbox>,
}

enum Inner {
    Plugin {
        fiber: FiberId,
        inbox: Arc<Inbox>,
        dispatch_id: u64,
    },
    Host(Option<HostInner>),
}

struct Chain {
    mode: Mode,
    event: String,
    scope: String,
    payload: String,
    listeners: Vec<ListenerRoute>,
    origin: ReplyTo,
    outstanding: usize,
    errors: Vec<Error>,
    nexted: Vec<bool>,
    inner: Inner,
}

struct FiberRoute {
    inbox: Arc<Inbox>,
    plugin: String,
    active: bool,
    stopping: Arc<AtomicBool>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    fibers: HashMap<FiberId, FiberRoute>,
    services: HashMap<String, FiberId>,
    listeners: HashMap<String, Vec<ListenerRoute>>,
    pending: HashMap<u64, Pending>,
    outgoing: HashMap<(FiberId, u64), u64>,
    chains: HashMap<u64, Chain>,
    /// child scope → (parent scope, the fiber that linked it).
    scope_parents: HashMap<String, (String, FiberId)>,
    rejections: HashMap<FiberId, Vec<String>>,
}

/// Something the supervisor must react to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouterEvent {
    /// A generation's actor returned while its fiber was not being stopped.
    Crashed {
        /// The fiber.
        fiber: FiberId,
        /// The actor's exit code.
        code: i32,
    },
}

/// Routes messages between plugin generations and the host.
pub struct Router {
    state: Mutex<State>,
    builtins: HashMap<String, Builtin>,
    reports: Reports,
    events: mpsc::UnboundedSender<RouterEvent>,
}

/// What the host asks of a generation's lifecycle.
pub enum Lifecycle {
    /// Apply the fiber with this config (JSON text) and the state its row's
    /// previous generation handed over (JSON text).
    Apply(String, Option<String>),
    /// Run every effect in reverse.
    Dispose,
}

fn cancel(id: u64) -> Envelope {
    ToPlugin::Cancel { id }.encode()
}

fn error_payload(code: &str, message: impl Into<String>) -> String {
    Error::new(code, message).to_payload()
}

impl State {
    fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn is_active(&self, fiber: FiberId) -> bool {
        self.fibers.get(&fiber).is_some_and(|f| f.active)
    }

    fn plugin_name(&self, fiber: FiberId) -> String {
        self.fibers
            .get(&fiber)
            .map_or_else(|| format!("fiber {fiber}"), |f| f.plugin.clone())
    }

    /// Delivers a (possibly final) reply to its destination.
    fn route_reply(&mut self, to: ReplyTo, kind: ReplyKind, payload: String) {
        let is_final = kind.is_final();
        match to {
            ReplyTo::Plugin {
                fiber,
                inbox,
                local_id,
            } => {
                if is_final {
                    self.outgoing.remove(&(fiber, local_id));
                }
                inbox.push(
                    ToPlugin::Reply {
                        id: local_id,
                        kind,
                        payload: Cow::Owned(payload),
                    }
                    .encode(),
                );
            }
            ReplyTo::Host(tx) => {
                let _ = tx.send(HostReply { kind, payload });
            }
            ReplyTo::Chain { chain, index } => {
                if is_final {
                    self.chain_step(chain, index, kind, payload);
                }
            }
        }
    }

    /// Sends a listener invocation; a gone listener answers with an error.
    fn invoke(
        &mut self,
        listener: &ListenerRoute,
        chain_id: u64,
        index: usize,
        payload: String,
        reply_to: ReplyTo,
        waterfall: bool,
    ) {
        let id = self.fresh_id();
        let Some(chain) = self.chains.get(&chain_id) else {
            return;
        };
        let env = ToPlugin::Event {
            invocation: id,
            listener: listener.id,
            mode: chain.mode,
            event: Cow::Borrowed(&chain.event),
            scope: Cow::Borrowed(&chain.scope),
            payload: Cow::Owned(payload),
        }
        .encode();
        self.pending.insert(
            id,
            Pending {
                reply_to: reply_to.clone(),
                target: listener.fiber,
                waterfall: waterfall.then_some((chain_id, index)),
            },
        );
        if !listener.inbox.push(env) {
            self.pending.remove(&id);
            let name = self.plugin_name(listener.fiber);
            self.finish_hop(
                reply_to,
                waterfall.then_some((chain_id, index)),
                ReplyKind::Err,
                error_payload(codes::DISPOSED, format!("the listener in `{name}` is gone")),
            );
        }
    }

    /// Routes a final hop reply, then drops a finished waterfall.
    fn finish_hop(
        &mut self,
        to: ReplyTo,
        waterfall: Option<(u64, usize)>,
        kind: ReplyKind,
        payload: String,
    ) {
        self.route_reply(to, kind, payload);
        if let Some((chain, 0)) = waterfall {
            self.chains.remove(&chain);
        }
    }

    /// Serial and parallel bookkeeping after listener `index` answered.
    fn chain_step(&mut self, chain_id: u64, index: usize, kind: ReplyKind, payload: String) {
        let Some(chain) = self.chains.get_mut(&chain_id) else {
            return;
        };
        let failed = kind == ReplyKind::Err;
        match chain.mode {
            Mode::Serial => {
                if failed || (payload != "null" && !payload.is_empty()) {
                    let origin = chain.origin.clone();
                    self.chains.remove(&chain_id);
                    let kind = if failed {
                        ReplyKind::Err
                    } else {
                        ReplyKind::Ok
                    };
                    return self.route_reply(origin, kind, payload);
                }
                let next = index + 1;
                if let Some(listener) = chain.listeners.get(next).cloned() {
                    let payload = chain.payload.clone();
                    let to = ReplyTo::Chain {
                        chain: chain_id,
                        index: next,
                    };
                    self.invoke(&listener, chain_id, next, payload, to, false);
                } else {
                    let origin = chain.origin.clone();
                    self.chains.remove(&chain_id);
                    self.route_reply(origin, ReplyKind::Ok, "null".into());
                }
            }
            _ => {
                if failed {
                    chain.errors.push(Error::from_payload(&payload));
                }
                chain.outstanding = chain.outstanding.saturating_sub(1);
                if chain.outstanding == 0 {
                    let Some(chain) = self.chains.remove(&chain_id) else {
                        return;
                    };
                    if chain.errors.is_empty() {
                        // A parallel dispatch answers `true` when listeners
                        // took part (none answers `null`, below in
                        // `dispatch`), so `flush` can tell.
                        self.route_reply(chain.origin, ReplyKind::Ok, "true".into());
                    } else {
                        let message = chain
                            .errors
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; ");
                        let code = if chain.errors.len() == 1 {
                            chain.errors[0].code.clone()
                        } else {
                            "AGGREGATE".to_owned()
                        };
                        self.route_reply(
                            chain.origin,
                            ReplyKind::Err,
                            error_payload(&code, format!("`{}`: {message}", chain.event)),
                        );
                    }
                }
            }
        }
    }

    fn admits(&self, listener: &ListenerRoute, scope: &str) -> bool {
        let Some(wanted) = &listener.scope else {
            return true;
        };
        let mut key = scope;
        let mut hops = 0;
        while !key.is_empty() && hops < 64 {
            if key == wanted {
                return true;
            }
            match self.scope_parents.get(key) {
                Some((parent, _)) => key = parent,
                None => return false,
            }
            hops += 1;
        }
        false
    }

    fn matching_listeners(&self, event: &str, scope: &str) -> Vec<ListenerRoute> {
        self.listeners
            .get(event)
            .map(|list| {
                list.iter()
                    .filter(|l| self.is_active(l.fiber) || self.fibers.contains_key(&l.fiber))
                    .filter(|l| self.admits(l, scope))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Starts a dispatch. `origin` receives the final result (unused by
    /// emit); `inner` is the waterfall default.
    fn dispatch(
        &mut self,
        mode: Mode,
        event: String,
        scope: String,
        payload: String,
        origin: ReplyTo,
        inner: Inner,
    ) {
        let listeners = self.matching_listeners(&event, &scope);
        if mode == Mode::Emit {
            for l in &listeners {
                let env = ToPlugin::Event {
                    invocation: 0,
                    listener: l.id,
                    mode,
                    event: Cow::Borrowed(&event),
                    scope: Cow::Borrowed(&scope),
                    payload: Cow::Borrowed(&payload),
                }
                .encode();
                l.inbox.push(env);
            }
            return;
        }
        let chain_id = self.fresh_id();
        let n = listeners.len();
        self.chains.insert(
            chain_id,
            Chain {
                mode,
                event,
                scope,
                payload: payload.clone(),
                listeners: listeners.clone(),
                origin: origin.clone(),
                outstanding: n,
                errors: Vec::new(),
                nexted: vec![false; n],
                inner,
            },
        );
        match mode {
            Mode::Waterfall => {
                if let Some(first) = listeners.first() {
                    self.invoke(first, chain_id, 0, payload, origin, true);
                } else {
                    self.run_inner(chain_id, 0, payload, origin);
                }
            }
            Mode::Serial if n > 0 => {
                let to = ReplyTo::Chain {
                    chain: chain_id,
                    index: 0,
                };
                self.invoke(&listeners[0], chain_id, 0, payload, to, false);
            }
            Mode::Parallel if n > 0 => {
                for (i, l) in listeners.iter().enumerate() {
                    let to = ReplyTo::Chain {
                        chain: chain_id,
                        index: i,
                    };
                    self.invoke(l, chain_id, i, payload.clone(), to, false);
                }
            }
            _ => {
                self.chains.remove(&chain_id);
                self.route_reply(origin, ReplyKind::Ok, "null".into());
            }
        }
    }

    /// The plugin that dispatched `local_id` stopped waiting: drop its chain
    /// and cancel every listener invocation still running in it.
    fn cancel_dispatch(&mut self, fiber: FiberId, local_id: u64) {
        let chain_id = self.chains.iter().find_map(|(id, c)| {
            matches!(&c.origin, ReplyTo::Plugin { fiber: f, local_id: l, .. }
                if *f == fiber && *l == local_id)
            .then_some(*id)
        });
        let Some(chain_id) = chain_id else {
            return;
        };
        self.chains.remove(&chain_id);
        let hops: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| {
                p.waterfall.is_some_and(|(c, _)| c == chain_id)
                    || matches!(p.reply_to, ReplyTo::Chain { chain, .. } if chain == chain_id)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in hops {
            let Some(p) = self.pending.remove(&id) else {
                continue;
            };
            if let Some(f) = self.fibers.get(&p.target) {
                f.inbox.push(cancel(id));
            }
        }
    }

    /// A plugin's reply to something the router sent it (`id` is the
    /// router's). Only the fiber that was asked may answer.
    fn reply(&mut self, gen: &GenCtx, id: u64, kind: ReplyKind, payload: Cow<'_, str>) -> i32 {
        let Some(p) = self.pending.get(&id) else {
            return 0;
        };
        if p.target != gen.fiber {
            return -1;
        }
        if kind.is_final() {
            if let Some(p) = self.pending.remove(&id) {
                self.finish_hop(p.reply_to, p.waterfall, kind, payload.into_owned());
            }
        } else {
            let to = p.reply_to.clone();
            self.route_reply(to, kind, payload.into_owned());
        }
        0
    }

    /// `fiber` stopped waiting for its call or dispatch `local_id`.
    fn cancel(&mut self, fiber: FiberId, local_id: u64) {
        if let Some(id) = self.outgoing.remove(&(fiber, local_id)) {
            if let Some(p) = self.pending.remove(&id) {
                if let Some(f) = self.fibers.get(&p.target) {
                    f.inbox.push(cancel(id));
                }
            }
        } else {
            self.cancel_dispatch(fiber, local_id);
        }
    }

    /// `fiber` provides `name`, unless another fiber already does (that
    /// is recorded as a rejection the supervisor reports).
    fn provide(&mut self, fiber: FiberId, name: String) {
        match self.services.get(&name).copied() {
            Some(other) if other != fiber => {
                let owner = self.plugin_name(other);
                let msg = format!("service `{name}` is already provided by `{owner}`");
                self.rejections.entry(fiber).or_default().push(msg);
            }
            _ => {
                self.services.insert(name, fiber);
            }
        }
    }

    /// Runs the innermost default of waterfall `chain_id`.
    fn run_inner(&mut self, chain_id: u64, index: usize, payload: String, reply_to: ReplyTo) {
        let Some(chain) = self.chains.get_mut(&chain_id) else {
            return;
        };
        match &mut chain.inner {
            Inner::Plugin {
                fiber,
                inbox,
                dispatch_id,
            } => {
                let (fiber, inbox, dispatch_id) = (*fiber, inbox.clone(), *dispatch_id);
                let id = self.fresh_id();
                let env = ToPlugin::Inner {
                    id,
                    dispatch: dispatch_id,
                    payload: Cow::Owned(payload),
                }
                .encode();
                self.pending.insert(
                    id,
                    Pending {
                        reply_to: reply_to.clone(),
                        target: fiber,
                        waterfall: Some((chain_id, index)),
                    },
                );
                if !inbox.push(env) {
                    self.pending.remove(&id);
                    self.finish_hop(
                        reply_to,
                        Some((chain_id, index)),
                        ReplyKind::Err,
                        error_payload(codes::DISPOSED, "the dispatcher is gone"),
                    );
                }
            }
            Inner::Host(f) => {
                let result = match (f.take(), serde_json::from_str::<Value>(&payload)) {
                    (Some(f), Ok(v)) => f(v),
                    (None, _) => Err(Error::msg("the waterfall default ran twice")),
                    (_, Err(e)) => Err(Error::from(e)),
                };
                let (fl, text) = match result {
                    Ok(v) => (ReplyKind::Ok, v.to_string()),
                    Err(e) => (ReplyKind::Err, e.to_payload()),
                };
                self.finish_hop(reply_to, Some((chain_id, index)), fl, text);
            }
        }
    }

    /// A waterfall listener (hop `index` of `chain_id`) called `next`.
    fn next(
        &mut self,
        caller: &GenCtx,
        local_id: u64,
        chain_id: u64,
        index: usize,
        payload: String,
    ) {
        let to = ReplyTo::Plugin {
            fiber: caller.fiber,
            inbox: caller.inbox.clone(),
            local_id,
        };
        let Some(chain) = self.chains.get_mut(&chain_id) else {
            return self.route_reply(
                to,
                ReplyKind::Err,
                error_payload(codes::DISPOSED, "the waterfall already finished"),
            );
        };
        if chain.nexted.get(index).copied().unwrap_or(true) {
            let event = chain.event.clone();
            return self.route_reply(
                to,
                ReplyKind::Err,
                error_payload(
                    codes::NEXT_CALLED_TWICE,
                    format!("a listener of `{event}` called next twice"),
                ),
            );
        }
        chain.nexted[index] = true;
        let next = index + 1;
        match chain.listeners.get(next).cloned() {
            Some(listener) => self.invoke(&listener, chain_id, next, payload, to, true),
            None => self.run_inner(chain_id, next, payload, to),
        }
    }

    /// Fails or drops everything in flight that involves `fiber`.
    fn forget_fiber(&mut self, fiber: FiberId, reason: &str) {
        let involved: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| {
                p.target == fiber
                    || matches!(&p.reply_to, ReplyTo::Plugin { fiber: f, .. } if *f == fiber)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in involved {
            let Some(p) = self.pending.remove(&id) else {
                continue;
            };
            let caller_gone =
                matches!(&p.reply_to, ReplyTo::Plugin { fiber: f, .. } if *f == fiber);
            if caller_gone {
                if p.target != fiber {
                    if let Some(target) = self.fibers.get(&p.target) {
                        target.inbox.push(cancel(id));
                    }
                }
                continue;
            }
            let name = self.plugin_name(fiber);
            self.finish_hop(
                p.reply_to,
                p.waterfall,
                ReplyKind::Err,
                error_payload(
                    codes::DISPOSED,
                    format!("`{name}` {reason} before answering"),
                ),
            );
        }
        self.outgoing.retain(|(f, _), _| *f != fiber);
        self.services.retain(|_, f| *f != fiber);
        for list in self.listeners.values_mut() {
            list.retain(|l| l.fiber != fiber);
        }
        self.listeners.retain(|_, l| !l.is_empty());
        self.scope_parents.retain(|_, (_, f)| *f != fiber);
    }

    /// Links scope `child` under `parent` (reference dsh-core §7
    /// `bindScopeParent`): once per scope, never into a cycle; only the
    /// fiber that made a link may move it (`rebind`).
    fn link_scope(&mut self, fiber: FiberId, child: String, parent: String, rebind: bool) -> i32 {
        match self.scope_parents.get(&child) {
            Some((_, owner)) if !rebind || *owner != fiber => return dsh_abi::SCOPE_ALREADY_BOUND,
            None if rebind => return dsh_abi::SCOPE_ALREADY_BOUND,
            _ => {}
        }
        let mut key = parent.as_str();
        loop {
            if key == child {
                return dsh_abi::SCOPE_CYCLE;
            }
            match self.scope_parents.get(key) {
                Some((up, _)) => key = up,
                None => break,
            }
        }
        self.scope_parents.insert(child, (parent, fiber));
        0
    }
}

impl Router {
    /// A router whose crash notices go to `events`.
    pub fn new(
        reports: Reports,
        events: mpsc::UnboundedSender<RouterEvent>,
        builtins: HashMap<String, Builtin>,
    ) -> Router {
        Router {
            state: Mutex::new(State::default()),
            builtins,
            reports,
            events,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds the routes of a generation (inactive until [`Router::set_active`]).
    pub fn register_fiber(
        &self,
        fiber: FiberId,
        plugin: &str,
        inbox: Arc<Inbox>,
    ) -> Arc<AtomicBool> {
        let stopping = Arc::new(AtomicBool::new(false));
        self.lock().fibers.insert(
            fiber,
            FiberRoute {
                inbox,
                plugin: plugin.to_owned(),
                active: false,
                stopping: stopping.clone(),
            },
        );
        stopping
    }

    /// Marks a fiber active (its services become visible) or not.
    pub fn set_active(&self, fiber: FiberId, active: bool) {
        if let Some(f) = self.lock().fibers.get_mut(&fiber) {
            f.active = active;
        }
    }

    /// True when `service` has an active provider.
    pub fn service_active(&self, service: &str) -> bool {
        if self.builtins.contains_key(service) {
            return true;
        }
        let s = self.lock();
        s.services.get(service).is_some_and(|f| s.is_active(*f))
    }

    /// Services registered by `fiber`.
    pub fn services_of(&self, fiber: FiberId) -> Vec<String> {
        let s = self.lock();
        let mut v: Vec<String> = s
            .services
            .iter()
            .filter(|(_, f)| **f == fiber)
            .map(|(n, _)| n.clone())
            .collect();
        v.sort();
        v
    }

    /// Errors recorded against `fiber` while it registered things.
    pub fn take_rejections(&self, fiber: FiberId) -> Vec<String> {
        self.lock().rejections.remove(&fiber).unwrap_or_default()
    }

    /// Removes every route of `fiber` (its services, listeners and calls in
    /// flight, which fail with `DISPOSED`) and tells the other fibers it is
    /// gone, so their registries drop what it registered.
    pub fn forget_fiber(&self, fiber: FiberId, reason: &str) {
        let mut s = self.lock();
        s.forget_fiber(fiber, reason);
        for (id, f) in &s.fibers {
            if *id != fiber {
                f.inbox.push(ToPlugin::FiberGone { fiber }.encode());
            }
        }
    }

    /// Drops the fiber entirely (after its generation stopped).
    pub fn unregister_fiber(&self, fiber: FiberId) {
        let mut s = self.lock();
        s.forget_fiber(fiber, "stopped");
        s.fibers.remove(&fiber);
    }

    /// Sends a lifecycle request (APPLY, DISPOSE) to `fiber`.
    pub fn request(&self, fiber: FiberId, what: Lifecycle) -> mpsc::UnboundedReceiver<HostReply> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut s = self.lock();
        let id = s.fresh_id();
        let Some(inbox) = s.fibers.get(&fiber).map(|f| f.inbox.clone()) else {
            let _ = tx.send(HostReply {
                kind: ReplyKind::Err,
                payload: error_payload(codes::DISPOSED, "no such generation"),
            });
            return rx;
        };
        let env = match what {
            Lifecycle::Apply(config, inherited) => ToPlugin::Apply {
                id,
                fiber,
                config: Cow::Owned(config),
                inherited: inherited.map(Cow::Owned),
            },
            Lifecycle::Dispose => ToPlugin::Dispose { id, fiber },
        }
        .encode();
        s.pending.insert(
            id,
            Pending {
                reply_to: ReplyTo::Host(tx.clone()),
                target: fiber,
                waterfall: None,
            },
        );
        if !inbox.push(env) {
            s.pending.remove(&id);
            let _ = tx.send(HostReply {
                kind: ReplyKind::Err,
                payload: error_payload(codes::DISPOSED, "the generation is closed"),
            });
        }
        rx
    }

    /// Tells a generation to leave its actor loop.
    pub fn stop(&self, fiber: FiberId) {
        let s = self.lock();
        if let Some(f) = s.fibers.get(&fiber) {
            f.stopping.store(true, Ordering::Release);
            f.inbox.push(ToPlugin::Stop.encode());
        }
    }

    /// A call from the host to `service`.
    pub fn host_call(
        &self,
        service: &str,
        method: &str,
        params: &Value,
    ) -> mpsc::UnboundedReceiver<HostReply> {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Some(builtin) = self.builtins.get(service) {
            let responder = Responder(ReplyTo::Host(tx.clone()));
            if let Some(result) = builtin(method, params.clone(), 0, responder) {
                Responder(ReplyTo::Host(tx)).reply(result);
            }
            return rx;
        }
        let mut s = self.lock();
        let provider = s.services.get(service).copied().filter(|f| s.is_active(*f));
        let Some(provider) = provider else {
            let _ = tx.send(HostReply {
                kind: ReplyKind::Err,
                payload: error_payload(
                    codes::SERVICE_UNAVAILABLE,
                    format!("no active provider for service `{service}`"),
                ),
            });
            return rx;
        };
        let id = s.fresh_id();
        s.pending.insert(
            id,
            Pending {
                reply_to: ReplyTo::Host(tx),
                target: provider,
                waterfall: None,
            },
        );
        let env = ToPlugin::Call {
            id,
            caller: 0,
            service: Cow::Borrowed(service),
            method: Cow::Borrowed(method),
            params: Cow::Owned(params.to_string()),
        }
        .encode();
        if let Some(f) = s.fibers.get(&provider) {
            f.inbox.push(env);
        }
        rx
    }

    /// A dispatch from the host. `inner` is the waterfall default.
    pub fn host_dispatch(
        &self,
        mode: Mode,
        event: &str,
        scope: &str,
        payload: &Value,
        inner: Option<HostInner>,
    ) -> mpsc::UnboundedReceiver<HostReply> {
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = Inner::Host(Some(inner.unwrap_or_else(|| Box::new(Ok))));
        self.lock().dispatch(
            mode,
            event.to_owned(),
            scope.to_owned(),
            payload.to_string(),
            ReplyTo::Host(tx),
            inner,
        );
        rx
    }

    /// One message from a generation, routed on the sender's thread. The
    /// answer is `send`'s return value: 0, or negative when refused.
    fn handle(&self, gen: &GenCtx, m: &Envelope) -> i32 {
        let message = match ToHost::decode(m) {
            Ok(message) => message,
            Err(e) => {
                tracing::warn!(plugin = gen.plugin.as_str(), "refused a message: {e}");
                return -3;
            }
        };
        let mut s = self.lock();
        let Some(route) = s.fibers.get(&gen.fiber) else {
            return -1;
        };
        if !route.inbox.is_open() {
            return -1;
        }
        let from = |local_id: u64| ReplyTo::Plugin {
            fiber: gen.fiber,
            inbox: gen.inbox.clone(),
            local_id,
        };
        match message {
            ToHost::Ready => {}
            ToHost::Reply { id, kind, payload } => return s.reply(gen, id, kind, payload),
            ToHost::Call {
                id,
                service,
                method,
                params,
            } => self.call(&mut s, gen, from(id), &service, &method, params),
            ToHost::Cancel { id } => s.cancel(gen.fiber, id),
            ToHost::Dispatch {
                id,
                event,
                scope,
                mode,
                payload,
            } => {
                let inner = Inner::Plugin {
                    fiber: gen.fiber,
                    inbox: gen.inbox.clone(),
                    dispatch_id: id,
                };
                s.dispatch(
                    mode,
                    event.into_owned(),
                    scope.into_owned(),
                    payload.into_owned(),
                    from(id),
                    inner,
                );
            }
            ToHost::Next {
                id,
                invocation,
                payload,
            } => {
                let hop = s
                    .pending
                    .get(&invocation)
                    .filter(|p| p.target == gen.fiber)
                    .and_then(|p| p.waterfall);
                match hop {
                    Some((chain, index)) => s.next(gen, id, chain, index, payload.into_owned()),
                    None => s.route_reply(
                        from(id),
                        ReplyKind::Err,
                        error_payload(codes::DISPOSED, "`next` called after the listener returned"),
                    ),
                }
            }
            ToHost::Provide { service } => s.provide(gen.fiber, service.into_owned()),
            ToHost::Withdraw { service } => {
                if s.services.get(service.as_ref()) == Some(&gen.fiber) {
                    s.services.remove(service.as_ref());
                }
            }
            ToHost::On {
                listener,
                event,
                scope,
                prepend,
            } => {
                let route = ListenerRoute {
                    fiber: gen.fiber,
                    id: listener,
                    scope: scope.map(Cow::into_owned),
                    inbox: gen.inbox.clone(),
                };
                let list = s.listeners.entry(event.into_owned()).or_default();
                if prepend {
                    list.insert(0, route);
                } else {
                    list.push(route);
                }
            }
            ToHost::Off { listener } => {
                for list in s.listeners.values_mut() {
                    list.retain(|l| !(l.fiber == gen.fiber && l.id == listener));
                }
            }
            ToHost::ScopeParent {
                child,
                parent,
                rebind,
            } => {
                return s.link_scope(gen.fiber, child.into_owned(), parent.into_owned(), rebind);
            }
        }
        0
    }

    /// A call from a plugin: a builtin answers at once; otherwise the call
    /// goes to the active provider, or fails `SERVICE_UNAVAILABLE`.
    fn call(
        &self,
        s: &mut State,
        gen: &GenCtx,
        caller: ReplyTo,
        service: &str,
        method: &str,
        params: Cow<'_, str>,
    ) {
        if let Some(builtin) = self.builtins.get(service) {
            let params = serde_json::from_str(&params).unwrap_or(Value::Null);
            if let Some(result) = builtin(method, params, gen.fiber, Responder(caller.clone())) {
                let (kind, text) = match result {
                    Ok(v) => (ReplyKind::Ok, v.to_string()),
                    Err(e) => (ReplyKind::Err, e.to_payload()),
                };
                s.route_reply(caller, kind, text);
            }
            return;
        }
        let provider = s.services.get(service).copied().filter(|f| s.is_active(*f));
        let Some(provider) = provider else {
            return s.route_reply(
                caller,
                ReplyKind::Err,
                error_payload(
                    codes::SERVICE_UNAVAILABLE,
                    format!("no active provider for service `{service}`"),
                ),
            );
        };
        let id = s.fresh_id();
        if let ReplyTo::Plugin { local_id, .. } = &caller {
            s.outgoing.insert((gen.fiber, *local_id), id);
        }
        s.pending.insert(
            id,
            Pending {
                reply_to: caller,
                target: provider,
                waterfall: None,
            },
        );
        let env = ToPlugin::Call {
            id,
            caller: gen.fiber,
            service: Cow::Borrowed(service),
            method: Cow::Borrowed(method),
            params,
        }
        .encode();
        if let Some(f) = s.fibers.get(&provider) {
            f.inbox.push(env);
        }
    }

    /// Called on a generation thread after its actor returned.
    pub fn actor_exited(&self, fiber: FiberId, code: i32) {
        let stopping = {
            let s = self.lock();
            s.fibers
                .get(&fiber)
                .is_none_or(|f| f.stopping.load(Ordering::Acquire))
        };
        if !stopping {
            let _ = self.events.send(RouterEvent::Crashed { fiber, code });
        }
    }
}

impl Sink for Router {
    fn deliver(&self, generation: &GenCtx, message: &Envelope) -> i32 {
        self.handle(generation, message)
    }

    fn log(&self, generation: &GenCtx, level: u8, target: &str, message: &str) {
        let plugin = generation.plugin.as_str();
        if level <= 2 {
            let lvl = if level == 1 {
                Level::Error
            } else {
                Level::Warn
            };
            self.reports
                .push(lvl, plugin, format!("{target}: {message}"));
            return;
        }
        match level {
            1 => tracing::error!(target: "dsh::plugin", plugin, "{target}: {message}"),
            2 => tracing::warn!(target: "dsh::plugin", plugin, "{target}: {message}"),
            3 => tracing::info!(target: "dsh::plugin", plugin, "{target}: {message}"),
            4 => tracing::debug!(target: "dsh::plugin", plugin, "{target}: {message}"),
            _ => tracing::trace!(target: "dsh::plugin", plugin, "{target}: {message}"),
        }
    }

    fn exited(&self, fiber: u64, code: i32) {
        self.actor_exited(fiber, code);
    }
}

#[cfg(test)]
mod tests;
