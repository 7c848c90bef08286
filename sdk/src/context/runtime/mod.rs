//! The actor's side of the context: the state one plugin generation shares
//! between all its handles, and what the actor calls when the host speaks.
//!
//! - this file: [`Shared`] itself: the registries the handles fill (services,
//!   listeners, inner defaults, effects, tasks, cleanups for callers), the
//!   id counter, the fiber, the apply task and the state handed across a
//!   reload;
//! - `incoming.rs`: the host's calls, listener invocations, inner defaults,
//!   cancels and departed fibers, each run as a handler future;
//! - `outgoing.rs`: this plugin's own calls, dispatches and `next` calls
//!   awaiting replies;
//! - `dispose.rs`: unwinding a fiber (effects in reverse, then tasks and
//!   registrations) and stopping.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use dsh_wire::ToHost;
use serde_json::Value;
use tokio::task::AbortHandle;

use super::{Event, FiberId, Reply, Request};
use crate::error::{codes, Error, Result};
use crate::link::HostLink;

mod dispose;
mod incoming;
mod outgoing;

pub(crate) use incoming::EventMsg;

type LocalBoxFuture<T> = Pin<Box<dyn Future<Output = T>>>;
type ServiceFn = Rc<dyn Fn(Request) -> LocalBoxFuture<Result<Reply>>>;
type ListenerFn = Rc<dyn Fn(Event) -> LocalBoxFuture<Result<Value>>>;
type InnerFn = Box<dyn FnOnce(Value) -> LocalBoxFuture<Result<Value>>>;
type EffectFn = Box<dyn FnOnce() -> LocalBoxFuture<()>>;
type HandoffFn = Box<dyn Fn() -> Result<Value>>;
/// Cleanups by calling fiber, each under the id its handle cancels it by.
type Cleanups = HashMap<FiberId, Vec<(u64, Box<dyn FnOnce()>)>>;

/// State of one plugin generation, shared by every handle on this thread.
pub(crate) struct Shared {
    link: HostLink,
    name: &'static str,
    fiber: Cell<FiberId>,
    next_id: Cell<u64>,
    /// Outgoing calls awaiting replies, by local id.
    pending: RefCell<HashMap<u64, outgoing::Pending>>,
    services: RefCell<HashMap<String, ServiceFn>>,
    listeners: RefCell<HashMap<u64, ListenerFn>>,
    /// Inner defaults of this plugin's waterfalls, by dispatch id.
    inners: RefCell<HashMap<u64, InnerFn>>,
    /// Inner defaults running now, by waterfall: the INNER request to
    /// answer and the task to stop if the waterfall's dispatcher goes away.
    running_inners: RefCell<HashMap<u64, (u64, AbortHandle)>>,
    effects: RefCell<Vec<EffectFn>>,
    tasks: RefCell<Vec<AbortHandle>>,
    /// Incoming calls and invocations that had to wait, by host id.
    incoming: RefCell<HashMap<u64, AbortHandle>>,
    caller_cleanups: RefCell<Cleanups>,
    next_cleanup: std::cell::Cell<u64>,
    /// The running `apply` of this generation.
    lifecycle: RefCell<Option<AbortHandle>>,
    /// The state this generation hands to its successor, made at dispose.
    handoff: RefCell<Option<HandoffFn>>,
    /// The state the predecessor handed over (JSON text), until taken.
    inherited: RefCell<Option<String>>,
}

/// The error for a message the host did not take (the generation is
/// stopping).
pub(in crate::context) fn host_refused() -> Error {
    Error::new(codes::HOST_REFUSED, "the host refused the message")
}

impl Shared {
    pub(crate) fn new(link: HostLink, name: &'static str) -> Self {
        Shared {
            link,
            name,
            fiber: Cell::new(0),
            next_id: Cell::new(1),
            pending: RefCell::default(),
            services: RefCell::default(),
            listeners: RefCell::default(),
            inners: RefCell::default(),
            running_inners: RefCell::default(),
            effects: RefCell::default(),
            tasks: RefCell::default(),
            incoming: RefCell::default(),
            caller_cleanups: RefCell::default(),
            next_cleanup: std::cell::Cell::new(0),
            lifecycle: RefCell::default(),
            handoff: RefCell::default(),
            inherited: RefCell::default(),
        }
    }

    /// The plugin's name (from its manifest).
    pub(in crate::context) fn name(&self) -> &'static str {
        self.name
    }

    /// The fiber this generation currently is.
    pub(in crate::context) fn fiber(&self) -> FiberId {
        self.fiber.get()
    }

    pub(crate) fn set_fiber(&self, fiber: FiberId) {
        self.fiber.set(fiber);
    }

    /// Keeps the running `apply`, aborting the one before it.
    pub(crate) fn set_lifecycle(&self, handle: AbortHandle) {
        if let Some(old) = self.lifecycle.replace(Some(handle)) {
            old.abort();
        }
    }

    /// A fresh local id (calls, dispatches, listeners).
    pub(in crate::context) fn next_id(&self) -> u64 {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        id
    }

    /// Sends a message; false when the host refused it.
    pub(crate) fn send(&self, message: ToHost<'_>) -> bool {
        self.link.send(message)
    }

    /// Sends a message; the host's answer (0: accepted, else a refusal
    /// code such as [`dsh_abi::SCOPE_CYCLE`]).
    pub(in crate::context) fn send_code(&self, message: ToHost<'_>) -> i32 {
        self.link.send_code(message)
    }

    /// Keeps what the predecessor handed over for [`Context::inherited`].
    ///
    /// [`Context::inherited`]: super::Context::inherited
    pub(crate) fn set_inherited(&self, state: Option<String>) {
        *self.inherited.borrow_mut() = state;
    }

    /// The state the predecessor handed over, once.
    pub(in crate::context) fn take_inherited(&self) -> Option<String> {
        self.inherited.borrow_mut().take()
    }

    /// Sets what this generation hands to its successor (the last call
    /// wins).
    pub(in crate::context) fn set_handoff(&self, make: impl Fn() -> Result<Value> + 'static) {
        *self.handoff.borrow_mut() = Some(Box::new(make));
    }

    /// Routes calls to service `name` to `handler` (replacing an earlier
    /// one of the same name).
    pub(in crate::context) fn add_service<F, Fut>(&self, name: String, handler: F)
    where
        F: Fn(Request) -> Fut + 'static,
        Fut: Future<Output = Result<Reply>> + 'static,
    {
        let f: ServiceFn = Rc::new(move |req| Box::pin(handler(req)));
        self.services.borrow_mut().insert(name, f);
    }

    /// Keeps `listener` under a fresh id and answers the id.
    pub(in crate::context) fn add_listener<F, Fut>(&self, listener: F) -> u64
    where
        F: Fn(Event) -> Fut + 'static,
        Fut: Future<Output = Result<Value>> + 'static,
    {
        let id = self.next_id();
        let f: ListenerFn = Rc::new(move |ev| Box::pin(listener(ev)));
        self.listeners.borrow_mut().insert(id, f);
        id
    }

    /// Forgets listener `id`; true if it was still registered.
    pub(in crate::context) fn remove_listener(&self, id: u64) -> bool {
        self.listeners.borrow_mut().remove(&id).is_some()
    }

    /// Keeps the inner default of waterfall dispatch `id`.
    pub(in crate::context) fn add_inner<F, Fut>(&self, id: u64, inner: F)
    where
        F: FnOnce(Value) -> Fut + 'static,
        Fut: Future<Output = Result<Value>> + 'static,
    {
        self.inners
            .borrow_mut()
            .insert(id, Box::new(move |v| Box::pin(inner(v))));
    }

    /// Adds a disposer; disposers run in reverse at dispose.
    pub(in crate::context) fn add_effect<F, Fut>(&self, disposer: F)
    where
        F: FnOnce() -> Fut + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        self.effects
            .borrow_mut()
            .push(Box::new(move || Box::pin(disposer())));
    }

    /// Ties a task to this fiber (aborted at dispose), forgetting the
    /// finished ones.
    pub(in crate::context) fn add_task(&self, handle: AbortHandle) {
        let mut tasks = self.tasks.borrow_mut();
        tasks.retain(|t| !t.is_finished());
        tasks.push(handle);
    }

    /// Runs `cleanup` when fiber `caller` is disposed.
    pub(in crate::context) fn add_caller_cleanup(
        &self,
        caller: FiberId,
        cleanup: impl FnOnce() + 'static,
    ) -> u64 {
        let id = self.next_cleanup.get() + 1;
        self.next_cleanup.set(id);
        self.caller_cleanups
            .borrow_mut()
            .entry(caller)
            .or_default()
            .push((id, Box::new(cleanup)));
        id
    }

    /// Forgets cleanup `id` of `caller` (never run).
    pub(in crate::context) fn remove_caller_cleanup(&self, caller: FiberId, id: u64) {
        let mut all = self.caller_cleanups.borrow_mut();
        if let Some(list) = all.get_mut(&caller) {
            list.retain(|(i, _)| *i != id);
            if list.is_empty() {
                all.remove(&caller);
            }
        }
    }
}
