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

use abi_stable::std_types::RString;
use dsh_abi::{flags, kind, Envelope};
use dsh_sdk::{codes, Error};
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
    /// Envelope flags (`ERROR`, `STREAM`).
    pub flags: u32,
    /// JSON text.
    pub payload: String,
}

impl HostReply {
    /// True for the last reply of a call.
    pub fn is_final(&self) -> bool {
        self.flags & flags::STREAM == 0
    }

    /// The reply as a result.
    pub fn result(&self) -> Result<Value, Error> {
        if self.flags & flags::ERROR != 0 {
            Err(Error::from_payload(&self.payload))
        } else if self.payload.is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_str(&self.payload).map_err(Error::from)
        }
    }
}

/// A service implemented by the host itself (always active).
pub type Builtin = Arc<dyn Fn(&str, Value, FiberId) -> Result<Value, Error> + Send + Sync>;

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
    mode: u32,
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

fn envelope(kind: u32, id: u64) -> Envelope {
    Envelope {
        kind,
        id,
        ..Envelope::default()
    }
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
    fn route_reply(&mut self, to: ReplyTo, flags_: u32, payload: String) {
        let is_final = flags_ & flags::STREAM == 0;
        match to {
            ReplyTo::Plugin {
                fiber,
                inbox,
                local_id,
            } => {
                if is_final {
                    self.outgoing.remove(&(fiber, local_id));
                }
                let mut env = envelope(kind::REPLY, local_id);
                env.flags = flags_;
                env.payload = RString::from(payload);
                inbox.push(env);
            }
            ReplyTo::Host(tx) => {
                let _ = tx.send(HostReply {
                    flags: flags_,
                    payload,
                });
            }
            ReplyTo::Chain { chain, index } => {
                if is_final {
                    self.chain_step(chain, index, flags_, payload);
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
        let Some(chain) = self.chains.get(&chain_id) else {
            return;
        };
        let mut env = envelope(kind::EVENT, 0);
        env.ref_id = listener.id;
        env.flags = chain.mode;
        env.target = RString::from(chain.event.as_str());
        env.method = RString::from(chain.scope.as_str());
        let id = self.fresh_id();
        env.id = id;
        env.payload = RString::from(payload);
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
                flags::ERROR,
                error_payload(codes::DISPOSED, format!("the listener in `{name}` is gone")),
            );
        }
    }

    /// Routes a final hop reply, then drops a finished waterfall.
    fn finish_hop(
        &mut self,
        to: ReplyTo,
        waterfall: Option<(u64, usize)>,
        flags_: u32,
        payload: String,
    ) {
        self.route_reply(to, flags_, payload);
        if let Some((chain, 0)) = waterfall {
            self.chains.remove(&chain);
        }
    }

    /// Serial and parallel bookkeeping after listener `index` answered.
    fn chain_step(&mut self, chain_id: u64, index: usize, flags_: u32, payload: String) {
        let Some(chain) = self.chains.get_mut(&chain_id) else {
            return;
        };
        let failed = flags_ & flags::ERROR != 0;
        match chain.mode {
            flags::MODE_SERIAL => {
                if failed || (payload != "null" && !payload.is_empty()) {
                    let origin = chain.origin.clone();
                    self.chains.remove(&chain_id);
                    return self.route_reply(origin, flags_ & flags::ERROR, payload);
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
                    self.route_reply(origin, 0, "null".into());
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
                        self.route_reply(chain.origin, 0, "true".into());
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
                            flags::ERROR,
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
        mode: u32,
        event: String,
        scope: String,
        payload: String,
        origin: ReplyTo,
        inner: Inner,
    ) {
        let listeners = self.matching_listeners(&event, &scope);
        if mode == flags::MODE_EMIT {
            for l in &listeners {
                let mut env = envelope(kind::EVENT, 0);
                env.ref_id = l.id;
                env.target = RString::from(event.as_str());
                env.method = RString::from(scope.as_str());
                env.payload = RString::from(payload.as_str());
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
            flags::MODE_WATERFALL => {
                if let Some(first) = listeners.first() {
                    self.invoke(first, chain_id, 0, payload, origin, true);
                } else {
                    self.run_inner(chain_id, 0, payload, origin);
                }
            }
            flags::MODE_SERIAL if n > 0 => {
                let to = ReplyTo::Chain {
                    chain: chain_id,
                    index: 0,
                };
                self.invoke(&listeners[0], chain_id, 0, payload, to, false);
            }
            flags::MODE_PARALLEL if n > 0 => {
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
                self.route_reply(origin, 0, "null".into());
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
                f.inbox.push(envelope(kind::CANCEL, id));
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
                let mut env = envelope(kind::INNER, id);
                env.ref_id = dispatch_id;
                env.payload = RString::from(payload);
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
                        flags::ERROR,
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
                    Ok(v) => (0, v.to_string()),
                    Err(e) => (flags::ERROR, e.to_payload()),
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
                flags::ERROR,
                error_payload(codes::DISPOSED, "the waterfall already finished"),
            );
        };
        if chain.nexted.get(index).copied().unwrap_or(true) {
            let event = chain.event.clone();
            return self.route_reply(
                to,
                flags::ERROR,
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
                        target.inbox.push(envelope(kind::CANCEL, id));
                    }
                }
                continue;
            }
            let name = self.plugin_name(fiber);
            self.finish_hop(
                p.reply_to,
                p.waterfall,
                flags::ERROR,
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

    /// The fiber that registered `service`, active or not.
    pub fn provider_of(&self, service: &str) -> Option<FiberId> {
        self.lock().services.get(service).copied()
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
                let mut env = envelope(kind::FIBER_GONE, 0);
                env.fiber = fiber;
                f.inbox.push(env);
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
    pub fn request(
        &self,
        fiber: FiberId,
        kind_: u32,
        payload: String,
    ) -> mpsc::UnboundedReceiver<HostReply> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut s = self.lock();
        let id = s.fresh_id();
        let Some(inbox) = s.fibers.get(&fiber).map(|f| f.inbox.clone()) else {
            let _ = tx.send(HostReply {
                flags: flags::ERROR,
                payload: error_payload(codes::DISPOSED, "no such generation"),
            });
            return rx;
        };
        let mut env = envelope(kind_, id);
        env.fiber = fiber;
        env.payload = RString::from(payload);
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
                flags: flags::ERROR,
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
            f.inbox.push(envelope(kind::STOP, 0));
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
            let reply = match builtin(method, params.clone(), 0) {
                Ok(v) => HostReply {
                    flags: 0,
                    payload: v.to_string(),
                },
                Err(e) => HostReply {
                    flags: flags::ERROR,
                    payload: e.to_payload(),
                },
            };
            let _ = tx.send(reply);
            return rx;
        }
        let mut s = self.lock();
        let provider = s.services.get(service).copied().filter(|f| s.is_active(*f));
        let Some(provider) = provider else {
            let _ = tx.send(HostReply {
                flags: flags::ERROR,
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
        let mut env = envelope(kind::CALL, id);
        env.target = RString::from(service);
        env.method = RString::from(method);
        env.payload = RString::from(params.to_string());
        if let Some(f) = s.fibers.get(&provider) {
            f.inbox.push(env);
        }
        rx
    }

    /// A dispatch from the host. `inner` is the waterfall default.
    pub fn host_dispatch(
        &self,
        mode: u32,
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

    fn handle(&self, gen: &GenCtx, m: &Envelope) -> i32 {
        let mut s = self.lock();
        let Some(route) = s.fibers.get(&gen.fiber) else {
            return -1;
        };
        if !route.inbox.is_open() {
            return -1;
        }
        let caller = ReplyTo::Plugin {
            fiber: gen.fiber,
            inbox: gen.inbox.clone(),
            local_id: m.id,
        };
        match m.kind {
            kind::READY => {}
            kind::REPLY => {
                let is_final = m.flags & flags::STREAM == 0;
                let Some(p) = s.pending.get(&m.id) else {
                    return 0;
                };
                if p.target != gen.fiber {
                    return -1;
                }
                if is_final {
                    if let Some(p) = s.pending.remove(&m.id) {
                        s.finish_hop(p.reply_to, p.waterfall, m.flags, m.payload.to_string());
                    }
                } else {
                    let to = p.reply_to.clone();
                    s.route_reply(to, m.flags, m.payload.to_string());
                }
            }
            kind::CALL => {
                let service = m.target.as_str();
                if let Some(builtin) = self.builtins.get(service) {
                    let params = serde_json::from_str(m.payload.as_str()).unwrap_or(Value::Null);
                    let (fl, text) = match builtin(m.method.as_str(), params, gen.fiber) {
                        Ok(v) => (0, v.to_string()),
                        Err(e) => (flags::ERROR, e.to_payload()),
                    };
                    s.route_reply(caller, fl, text);
                    return 0;
                }
                let provider = s.services.get(service).copied().filter(|f| s.is_active(*f));
                let Some(provider) = provider else {
                    s.route_reply(
                        caller,
                        flags::ERROR,
                        error_payload(
                            codes::SERVICE_UNAVAILABLE,
                            format!("no active provider for service `{service}`"),
                        ),
                    );
                    return 0;
                };
                let id = s.fresh_id();
                s.outgoing.insert((gen.fiber, m.id), id);
                s.pending.insert(
                    id,
                    Pending {
                        reply_to: caller,
                        target: provider,
                        waterfall: None,
                    },
                );
                let mut env = envelope(kind::CALL, id);
                env.fiber = gen.fiber;
                env.target = m.target.clone();
                env.method = m.method.clone();
                env.payload = m.payload.clone();
                if let Some(f) = s.fibers.get(&provider) {
                    f.inbox.push(env);
                }
            }
            kind::CANCEL => {
                if let Some(id) = s.outgoing.remove(&(gen.fiber, m.id)) {
                    if let Some(p) = s.pending.remove(&id) {
                        if let Some(f) = s.fibers.get(&p.target) {
                            f.inbox.push(envelope(kind::CANCEL, id));
                        }
                    }
                } else {
                    s.cancel_dispatch(gen.fiber, m.id);
                }
            }
            kind::DISPATCH => {
                let inner = Inner::Plugin {
                    fiber: gen.fiber,
                    inbox: gen.inbox.clone(),
                    dispatch_id: m.id,
                };
                s.dispatch(
                    m.flags & flags::MODE_MASK,
                    m.target.to_string(),
                    m.method.to_string(),
                    m.payload.to_string(),
                    caller,
                    inner,
                );
            }
            kind::NEXT => {
                let hop = s
                    .pending
                    .get(&m.ref_id)
                    .filter(|p| p.target == gen.fiber)
                    .and_then(|p| p.waterfall);
                match hop {
                    Some((chain, index)) => {
                        s.next(gen, m.id, chain, index, m.payload.to_string());
                    }
                    None => s.route_reply(
                        caller,
                        flags::ERROR,
                        error_payload(codes::DISPOSED, "`next` called after the listener returned"),
                    ),
                }
            }
            kind::PROVIDE => {
                let name = m.target.to_string();
                match s.services.get(&name).copied() {
                    Some(other) if other != gen.fiber => {
                        let owner = s.plugin_name(other);
                        let msg = format!("service `{name}` is already provided by `{owner}`");
                        s.rejections.entry(gen.fiber).or_default().push(msg);
                    }
                    _ => {
                        s.services.insert(name, gen.fiber);
                    }
                }
            }
            kind::WITHDRAW => {
                let name = m.target.as_str();
                if s.services.get(name) == Some(&gen.fiber) {
                    s.services.remove(name);
                }
            }
            kind::ON => {
                let route = ListenerRoute {
                    fiber: gen.fiber,
                    id: m.id,
                    scope: (!m.method.is_empty()).then(|| m.method.to_string()),
                    inbox: gen.inbox.clone(),
                };
                let list = s.listeners.entry(m.target.to_string()).or_default();
                if m.flags & flags::PREPEND != 0 {
                    list.insert(0, route);
                } else {
                    list.push(route);
                }
            }
            kind::OFF => {
                for list in s.listeners.values_mut() {
                    list.retain(|l| !(l.fiber == gen.fiber && l.id == m.id));
                }
            }
            kind::SCOPE_PARENT => {
                let (child, parent) = (m.target.to_string(), m.method.to_string());
                return s.link_scope(gen.fiber, child, parent, m.flags & flags::REBIND != 0);
            }
            _ => return -3,
        }
        0
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
