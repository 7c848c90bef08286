//! The plugin `Context`: services, events, effects and tasks of one fiber.
//!
//! Everything here runs on the plugin's own thread inside a current-thread
//! runtime, so the context is `!Send` and uses `Rc`/`RefCell` freely.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use dsh_wire::{Cow, Mode, ReplyKind, ToHost};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use crate::error::{codes, Error, Result};
use crate::link::HostLink;
use crate::payload::Payload;
use crate::unwind::catch;

pub(crate) type LocalBoxFuture<T> = Pin<Box<dyn Future<Output = T>>>;
type ServiceFn = Rc<dyn Fn(Request) -> LocalBoxFuture<Result<Reply>>>;
type ListenerFn = Rc<dyn Fn(Event) -> LocalBoxFuture<Result<Value>>>;
type InnerFn = Box<dyn FnOnce(Value) -> LocalBoxFuture<Result<Value>>>;
type EffectFn = Box<dyn FnOnce() -> LocalBoxFuture<()>>;
type Cleanups = HashMap<FiberId, Vec<Box<dyn FnOnce()>>>;

/// Identifies a fiber (one application of a plugin) across the whole host.
pub type FiberId = u64;

/// A reply awaited by this plugin.
enum Pending {
    /// A plain call; stream items, if the provider streams, are collected.
    Call {
        tx: oneshot::Sender<Result<Payload>>,
        items: Vec<Payload>,
    },
    /// A streaming call.
    Stream(mpsc::UnboundedSender<Result<Payload>>),
}

/// State of one plugin generation, shared by every handle on this thread.
pub(crate) struct Shared {
    pub(crate) link: HostLink,
    pub(crate) name: &'static str,
    fiber: Cell<FiberId>,
    next_id: Cell<u64>,
    disposing: Cell<bool>,
    pending: RefCell<HashMap<u64, Pending>>,
    services: RefCell<HashMap<String, ServiceFn>>,
    listeners: RefCell<HashMap<u64, ListenerFn>>,
    inners: RefCell<HashMap<u64, InnerFn>>,
    /// Inner defaults running now, by waterfall: the INNER request to
    /// answer and the task to stop if the waterfall's dispatcher goes away.
    running_inners: RefCell<HashMap<u64, (u64, AbortHandle)>>,
    effects: RefCell<Vec<EffectFn>>,
    tasks: RefCell<Vec<AbortHandle>>,
    incoming: RefCell<HashMap<u64, AbortHandle>>,
    caller_cleanups: RefCell<Cleanups>,
    lifecycle: RefCell<Option<AbortHandle>>,
    /// The state this generation hands to its successor, made at dispose.
    handoff: RefCell<Option<HandoffFn>>,
    /// The state the predecessor handed over (JSON text), until taken.
    inherited: RefCell<Option<String>>,
}

type HandoffFn = Box<dyn Fn() -> Result<Value>>;

/// The handle a plugin uses to talk to the host. Cheap to clone.
#[derive(Clone)]
pub struct Context {
    pub(crate) shared: Rc<Shared>,
}

impl Shared {
    pub(crate) fn new(link: HostLink, name: &'static str) -> Self {
        Shared {
            link,
            name,
            fiber: Cell::new(0),
            next_id: Cell::new(1),
            disposing: Cell::new(false),
            pending: RefCell::default(),
            services: RefCell::default(),
            listeners: RefCell::default(),
            inners: RefCell::default(),
            running_inners: RefCell::default(),
            effects: RefCell::default(),
            tasks: RefCell::default(),
            incoming: RefCell::default(),
            caller_cleanups: RefCell::default(),
            lifecycle: RefCell::default(),
            handoff: RefCell::default(),
            inherited: RefCell::default(),
        }
    }

    /// Keeps what the predecessor handed over for [`Context::inherited`].
    pub(crate) fn set_inherited(&self, state: Option<String>) {
        *self.inherited.borrow_mut() = state;
    }

    /// The state for the successor, if this generation offers one: made
    /// before any effect runs, so it sees the state the effects tear down.
    fn take_handoff(&self) -> Option<Value> {
        let make = self.handoff.borrow_mut().take()?;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(make)) {
            Ok(Ok(state)) => Some(state),
            Ok(Err(e)) => {
                tracing::warn!("the state handed to the next generation failed: {e}");
                None
            }
            Err(payload) => {
                let e = crate::unwind::panic_error(payload.as_ref());
                tracing::warn!("the state handed to the next generation panicked: {e}");
                None
            }
        }
    }

    fn next_id(&self) -> u64 {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        id
    }

    pub(crate) fn send(&self, message: ToHost<'_>) -> bool {
        self.link.send(message)
    }

    /// Links scope `child` under `parent` (or moves the link: `rebind`).
    fn link_scope(&self, child: &str, parent: &str, rebind: bool) -> Result<()> {
        let link = ToHost::ScopeParent {
            child: Cow::Borrowed(child),
            parent: Cow::Borrowed(parent),
            rebind,
        };
        match self.link.send_code(link) {
            0 => Ok(()),
            dsh_abi::SCOPE_ALREADY_BOUND => Err(Error::new(
                codes::SCOPE_ALREADY_BOUND,
                format!("scope \"{child}\" already has a parent; only its binding can rebind it"),
            )),
            dsh_abi::SCOPE_CYCLE => Err(Error::new(
                codes::SCOPE_CYCLE,
                format!(
                    "scope \"{child}\" cannot descend from \"{parent}\": that would be a cycle"
                ),
            )),
            _ => Err(host_refused()),
        }
    }

    fn reply(&self, id: u64, result: Result<String>) {
        let (kind, payload) = match result {
            Ok(text) => (ReplyKind::Ok, text),
            Err(e) => (ReplyKind::Err, e.to_payload()),
        };
        self.send(ToHost::Reply {
            id,
            kind,
            payload: Cow::Owned(payload),
        });
    }

    fn reply_item(&self, id: u64, item: String) {
        self.send(ToHost::Reply {
            id,
            kind: ReplyKind::Item,
            payload: Cow::Owned(item),
        });
    }

    pub(crate) fn set_fiber(&self, fiber: FiberId) {
        self.fiber.set(fiber);
        self.disposing.set(false);
    }

    pub(crate) fn set_lifecycle(&self, handle: AbortHandle) {
        if let Some(old) = self.lifecycle.replace(Some(handle)) {
            old.abort();
        }
    }

    /// Handles a REPLY for one of our outgoing calls.
    pub(crate) fn on_reply(&self, id: u64, kind: ReplyKind, payload: String) {
        let result = match kind {
            ReplyKind::Err => Err(Error::from_payload(&payload)),
            ReplyKind::Ok | ReplyKind::Item => Ok(Payload::from_text(payload)),
        };
        let stream_item = !kind.is_final();
        let mut pending = self.pending.borrow_mut();
        match pending.get_mut(&id) {
            None => {}
            Some(Pending::Call { items, .. }) if stream_item => {
                if let Ok(v) = result {
                    items.push(v);
                }
            }
            Some(Pending::Stream(tx)) if stream_item => {
                let _ = tx.send(result);
            }
            Some(_) => match pending.remove(&id) {
                Some(Pending::Call { tx, items }) => {
                    let result = if items.is_empty() {
                        result
                    } else {
                        result.map(|_| collect_items(items))
                    };
                    let _ = tx.send(result);
                }
                Some(Pending::Stream(tx)) => {
                    if let Err(e) = result {
                        let _ = tx.send(Err(e));
                    }
                }
                None => {}
            },
        }
    }

    /// Handles an incoming service CALL.
    pub(crate) fn on_call(
        self: &Rc<Self>,
        id: u64,
        caller: FiberId,
        service: String,
        method: String,
        params: String,
    ) {
        let handler = self.services.borrow().get(&service).cloned();
        let Some(handler) = handler else {
            self.reply(
                id,
                Err(Error::new(
                    codes::SERVICE_UNAVAILABLE,
                    format!("plugin `{}` does not provide `{service}`", self.name),
                )),
            );
            return;
        };
        let request = Request {
            service,
            method,
            params: Payload::from_text(params),
            caller,
            shared: Rc::downgrade(self),
        };
        let fut = handler(request);
        let shared = self.clone();
        self.run_or_spawn(
            Some(id),
            Box::pin(async move {
                match catch(fut).await {
                    Ok(Ok(Reply::Value(v))) => shared.reply(id, Ok(v.to_string())),
                    Ok(Ok(Reply::Payload(p))) => shared.reply(id, Ok(p.into_text())),
                    Ok(Ok(Reply::Stream(mut rx))) => {
                        let mut failed = false;
                        while let Some(item) = rx.recv().await {
                            match item {
                                Ok(text) => shared.reply_item(id, text),
                                Err(e) => {
                                    shared.reply(id, Err(e));
                                    failed = true;
                                    break;
                                }
                            }
                        }
                        if !failed {
                            shared.reply(id, Ok(NULL.to_owned()));
                        }
                    }
                    Ok(Err(e)) | Err(e) => shared.reply(id, Err(e)),
                }
                shared.incoming.borrow_mut().remove(&id);
            }),
        );
    }

    /// Polls `fut` once right here; only a future that has to wait becomes a
    /// task. Most handlers answer at once, and this saves a task spawn and a
    /// scheduler turn per call. The first poll uses a no-op waker: a pending
    /// future is spawned at once, and a spawned task is polled (and
    /// re-registers its interests) immediately.
    fn run_or_spawn(&self, id: Option<u64>, mut fut: LocalBoxFuture<()>) {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if fut.as_mut().poll(&mut cx).is_ready() {
            return;
        }
        let task = tokio::task::spawn_local(fut);
        if let Some(id) = id {
            self.incoming.borrow_mut().insert(id, task.abort_handle());
        }
    }

    /// The caller of an incoming call went away.
    pub(crate) fn on_cancel(&self, id: u64) {
        if let Some(task) = self.incoming.borrow_mut().remove(&id) {
            task.abort();
        }
    }

    /// Handles an EVENT: one listener invocation.
    pub(crate) fn on_event(self: &Rc<Self>, invocation: u64, listener: u64, event: EventMsg) {
        let EventMsg {
            mode,
            name,
            scope,
            payload,
        } = event;
        let listener = self.listeners.borrow().get(&listener).cloned();
        let Some(listener) = listener else {
            if invocation != 0 {
                self.reply(
                    invocation,
                    Err(Error::new(codes::DISPOSED, "the listener was removed")),
                );
            }
            return;
        };
        let event = Event {
            name: name.clone(),
            payload: Payload::from_text(payload),
            scope: (!scope.is_empty()).then_some(scope),
            invocation,
            waterfall: mode == Mode::Waterfall,
            next_used: Cell::new(false),
            shared: Rc::downgrade(self),
        };
        let fut = listener(event);
        let shared = self.clone();
        self.run_or_spawn(
            (invocation != 0).then_some(invocation),
            Box::pin(async move {
                let result = catch(fut).await.and_then(|r| r);
                if invocation == 0 {
                    if let Err(e) = result {
                        tracing::warn!("listener for `{name}` failed (contained): {e}");
                    }
                } else {
                    shared.reply(invocation, result.map(|v| v.to_string()));
                    shared.incoming.borrow_mut().remove(&invocation);
                }
            }),
        );
    }

    /// Runs the innermost default of one of our waterfalls.
    pub(crate) fn on_inner(self: &Rc<Self>, id: u64, waterfall: u64, payload: &str) {
        let inner = self.inners.borrow_mut().remove(&waterfall);
        let Some(inner) = inner else {
            return self.reply(
                id,
                Err(Error::new(codes::DISPOSED, "the waterfall is gone")),
            );
        };
        let payload = match parse_payload(payload) {
            Ok(v) => v,
            Err(e) => return self.reply(id, Err(e)),
        };
        let shared = self.clone();
        let task = tokio::task::spawn_local(async move {
            let result = catch(inner(payload)).await.and_then(|r| r);
            shared.running_inners.borrow_mut().remove(&waterfall);
            shared.reply(id, result.map(|v| v.to_string()));
        });
        if !task.is_finished() {
            self.running_inners
                .borrow_mut()
                .insert(waterfall, (id, task.abort_handle()));
        }
    }

    /// The dispatcher of waterfall `id` stopped waiting: forget its inner
    /// default and stop it if it runs, answering the listener that called
    /// `next` so the chain unwinds.
    fn drop_waterfall(&self, id: u64) {
        self.inners.borrow_mut().remove(&id);
        let running = self.running_inners.borrow_mut().remove(&id);
        if let Some((request, task)) = running {
            task.abort();
            self.reply(
                request,
                Err(Error::new(codes::DISPOSED, "the waterfall was cancelled")),
            );
        }
    }

    /// Another fiber was disposed: drop what it registered with us.
    pub(crate) fn on_fiber_gone(&self, fiber: FiberId) {
        let cleanups = self.caller_cleanups.borrow_mut().remove(&fiber);
        for cleanup in cleanups.into_iter().flatten().rev() {
            if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(cleanup)) {
                let e = crate::unwind::panic_error(payload.as_ref());
                tracing::warn!("cleanup for disposed fiber {fiber} failed: {e}");
            }
        }
    }

    /// Runs every effect in reverse and forgets every registration.
    /// Answers the state handed to the successor (see [`Context::handoff`]).
    pub(crate) async fn dispose(&self) -> Option<Value> {
        self.disposing.set(true);
        let handoff = self.take_handoff();
        self.inherited.borrow_mut().take();
        if let Some(apply) = self.lifecycle.borrow_mut().take() {
            apply.abort();
        }
        // Effects first (in reverse): a disposer may still need the fiber's
        // tasks, e.g. to let a running job close cleanly. Then the tasks go.
        loop {
            let effect = self.effects.borrow_mut().pop();
            let Some(effect) = effect else { break };
            if let Err(e) = catch(effect()).await {
                tracing::warn!("an effect of `{}` failed while disposing: {e}", self.name);
            }
        }
        for task in self.tasks.borrow_mut().drain(..) {
            task.abort();
        }
        self.services.borrow_mut().clear();
        self.listeners.borrow_mut().clear();
        self.inners.borrow_mut().clear();
        for (_, (_, task)) in self.running_inners.borrow_mut().drain() {
            task.abort();
        }
        self.caller_cleanups.borrow_mut().clear();
        for (_, task) in self.incoming.borrow_mut().drain() {
            task.abort();
        }
        handoff
    }

    /// Fails every outgoing call (the actor is stopping).
    pub(crate) fn shutdown(&self) {
        let pending: Vec<_> = self.pending.borrow_mut().drain().collect();
        for (_, p) in pending {
            let err = Error::new(codes::DISPOSED, "the plugin is stopping");
            match p {
                Pending::Call { tx, .. } => {
                    let _ = tx.send(Err(err));
                }
                Pending::Stream(tx) => {
                    let _ = tx.send(Err(err));
                }
            }
        }
    }

    /// Sends the message `build` makes from a fresh id and registers a
    /// one-shot reply slot for it.
    fn request(&self, build: impl FnOnce(u64) -> ToHost<'static>) -> OutgoingCall {
        self.request_with(build, |_| {})
    }

    /// Like `request`, running `prepare(id)` before the message leaves.
    fn request_with(
        &self,
        build: impl FnOnce(u64) -> ToHost<'static>,
        prepare: impl FnOnce(u64),
    ) -> OutgoingCall {
        let id = self.next_id();
        let msg = build(id);
        prepare(id);
        let (tx, rx) = oneshot::channel();
        self.pending.borrow_mut().insert(
            id,
            Pending::Call {
                tx,
                items: Vec::new(),
            },
        );
        if !self.send(msg) {
            self.pending.borrow_mut().remove(&id);
            return OutgoingCall::refused();
        }
        OutgoingCall {
            id,
            rx: Some(rx),
            link: Some(self.link),
            done: false,
        }
    }
}

/// A listener invocation's event, as the host sent it.
pub(crate) struct EventMsg {
    pub mode: Mode,
    pub name: String,
    pub scope: String,
    pub payload: String,
}

const NULL: &str = "null";

fn parse_payload(text: &str) -> Result<Value> {
    if text.is_empty() {
        return Ok(Value::Null);
    }
    Ok(serde_json::from_str(text)?)
}

fn to_value(v: impl Serialize) -> Result<Value> {
    Ok(serde_json::to_value(v)?)
}

/// Serializes `v` straight to JSON text (no intermediate [`Value`]).
fn to_text(v: impl Serialize) -> Result<String> {
    Ok(serde_json::to_string(&v)?)
}

/// The items of a stream answered to a plain call, as one JSON array
/// (their texts joined, not parsed).
fn collect_items(items: Vec<Payload>) -> Payload {
    let mut text =
        String::with_capacity(items.iter().map(|i| i.as_str().len() + 1).sum::<usize>() + 2);
    text.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(item.as_str());
    }
    text.push(']');
    Payload::from_text(text)
}

/// An outgoing call awaiting one reply; cancels the call when dropped early.
struct OutgoingCall {
    id: u64,
    rx: Option<oneshot::Receiver<Result<Payload>>>,
    link: Option<HostLink>,
    done: bool,
}

impl OutgoingCall {
    fn refused() -> Self {
        OutgoingCall {
            id: 0,
            rx: None,
            link: None,
            done: true,
        }
    }

    async fn wait(mut self) -> Result<Payload> {
        let Some(rx) = self.rx.take() else {
            return Err(host_refused());
        };
        let result = rx
            .await
            .unwrap_or_else(|_| Err(Error::new(codes::DISPOSED, "the call was dropped")));
        self.done = true;
        result
    }
}

impl Drop for OutgoingCall {
    fn drop(&mut self) {
        if !self.done {
            if let Some(link) = self.link {
                link.send(ToHost::Cancel { id: self.id });
            }
        }
    }
}

fn host_refused() -> Error {
    Error::new(codes::HOST_REFUSED, "the host refused the message")
}

/// What a service handler returns: one value, or a stream of values.
pub enum Reply {
    /// A single value.
    Value(Value),
    /// A single value already in JSON text: forwarded as it is.
    Payload(Payload),
    /// Items arrive through the paired [`ReplySender`].
    Stream(mpsc::UnboundedReceiver<Result<String>>),
}

impl From<Value> for Reply {
    fn from(v: Value) -> Self {
        Reply::Value(v)
    }
}

impl Reply {
    /// Serializes `v` into a single-value reply.
    pub fn json(v: impl Serialize) -> Result<Reply> {
        Ok(Reply::Payload(Payload::from_text(to_text(v)?)))
    }

    /// A streaming reply and the sender that feeds it. The stream ends when
    /// the sender is dropped.
    pub fn stream() -> (ReplySender, Reply) {
        let (tx, rx) = mpsc::unbounded_channel();
        (ReplySender(tx), Reply::Stream(rx))
    }
}

/// Feeds a streaming [`Reply`].
#[derive(Clone)]
pub struct ReplySender(mpsc::UnboundedSender<Result<String>>);

impl ReplySender {
    /// Sends one item; false when the caller is gone.
    pub fn send(&self, item: impl Serialize) -> bool {
        self.0.send(to_text(item)).is_ok()
    }

    /// Sends one item that is JSON text already (forwarded as it is);
    /// false when the caller is gone.
    pub fn send_payload(&self, item: Payload) -> bool {
        self.0.send(Ok(item.into_text())).is_ok()
    }

    /// Ends the stream with an error.
    pub fn fail(self, error: Error) {
        let _ = self.0.send(Err(error));
    }

    /// True when the caller stopped listening.
    pub fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

/// An incoming service call.
pub struct Request {
    /// The service name the call was addressed to.
    pub service: String,
    /// The method.
    pub method: String,
    /// The parameters: JSON text, parsed on first read (see [`Payload`]).
    pub params: Payload,
    /// The calling fiber (0 for the host itself).
    pub caller: FiberId,
    shared: std::rc::Weak<Shared>,
}

impl Request {
    /// Deserializes the parameters.
    pub fn params_as<T: DeserializeOwned>(&self) -> Result<T> {
        self.params.parse().map_err(|e| {
            Error::new(
                codes::INVALID_PAYLOAD,
                format!("invalid params for `{}.{}`: {e}", self.service, self.method),
            )
        })
    }

    /// Runs `cleanup` when the calling fiber is disposed: this is how a
    /// registry ties a registration to the plugin that made it.
    pub fn on_caller_gone(&self, cleanup: impl FnOnce() + 'static) {
        if let Some(shared) = self.shared.upgrade() {
            shared
                .caller_cleanups
                .borrow_mut()
                .entry(self.caller)
                .or_default()
                .push(Box::new(cleanup));
        }
    }

    /// The error to return for a method the service does not know.
    pub fn unknown_method(&self) -> Error {
        Error::new(
            codes::UNKNOWN_METHOD,
            format!("service `{}` has no method `{}`", self.service, self.method),
        )
    }
}

/// One listener invocation.
pub struct Event {
    /// The event name.
    pub name: String,
    /// The payload: JSON text, parsed on first read (see [`Payload`]).
    pub payload: Payload,
    /// The scope key of the dispatch (an agent id), if any.
    pub scope: Option<String>,
    invocation: u64,
    waterfall: bool,
    next_used: Cell<bool>,
    shared: std::rc::Weak<Shared>,
}

impl Event {
    /// Deserializes the payload.
    pub fn payload_as<T: DeserializeOwned>(&self) -> Result<T> {
        Ok(self.payload.parse()?)
    }

    /// True when this listener runs inside a waterfall (and may call `next`).
    pub fn is_waterfall(&self) -> bool {
        self.waterfall
    }

    /// Waterfall only: calls the rest of the chain with `payload` and
    /// returns its result. May be called at most once.
    pub async fn next(&self, payload: impl Serialize) -> Result<Value> {
        let payload = Payload::from_text(to_text(payload)?);
        Ok(self.next_payload(payload).await?.into_value())
    }

    /// Waterfall only: calls the rest of the chain with this listener's own
    /// payload, unchanged and unparsed, and returns its result.
    pub async fn forward(&self) -> Result<Value> {
        Ok(self.next_payload(self.payload.clone()).await?.into_value())
    }

    /// Waterfall only: [`Event::next`] with a payload in JSON text already;
    /// neither the payload nor the result is parsed here.
    pub async fn next_payload(&self, payload: Payload) -> Result<Payload> {
        if !self.waterfall {
            return Err(Error::msg(format!(
                "`next` called by a listener of `{}`, which is not a waterfall",
                self.name
            )));
        }
        if self.next_used.replace(true) {
            return Err(Error::new(
                codes::NEXT_CALLED_TWICE,
                format!("a listener of `{}` called next twice", self.name),
            ));
        }
        let shared = self
            .shared
            .upgrade()
            .ok_or_else(|| Error::new(codes::DISPOSED, "the plugin is disposed"))?;
        let invocation = self.invocation;
        shared
            .request(|id| ToHost::Next {
                id,
                invocation,
                payload: Cow::Owned(payload.into_text()),
            })
            .wait()
            .await
    }
}

/// A client for one service.
#[derive(Clone)]
pub struct Service {
    ctx: Context,
    name: String,
}

impl Service {
    /// The service name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn call_msg(&self, id: u64, method: &str, params: String) -> ToHost<'static> {
        ToHost::Call {
            id,
            service: Cow::Owned(self.name.clone()),
            method: Cow::Owned(method.to_owned()),
            params: Cow::Owned(params),
        }
    }

    /// Calls `method` and returns its JSON result. If the provider streams,
    /// the items are collected into an array.
    pub async fn call(&self, method: &str, params: impl Serialize) -> Result<Value> {
        let params = Payload::from_text(to_text(params)?);
        Ok(self.call_payload(method, params).await?.into_value())
    }

    /// Calls `method` with parameters in JSON text already and returns the
    /// result as text: neither is parsed here (a hop that only routes).
    pub async fn call_payload(&self, method: &str, params: Payload) -> Result<Payload> {
        self.ctx
            .shared
            .request(|id| self.call_msg(id, method, params.into_text()))
            .wait()
            .await
    }

    /// Calls `method` and deserializes the result.
    pub async fn call_as<R: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<R> {
        let params = Payload::from_text(to_text(params)?);
        let reply = self.call_payload(method, params).await?;
        reply.parse().map_err(|e| {
            Error::new(
                codes::INVALID_PAYLOAD,
                format!("unexpected reply from `{}.{method}`: {e}", self.name),
            )
        })
    }

    /// Calls `method` and returns the stream of items it replies with.
    pub fn stream(&self, method: &str, params: impl Serialize) -> CallStream {
        match to_text(params) {
            Ok(text) => self.stream_payload(method, Payload::from_text(text)),
            Err(e) => {
                let (tx, rx) = mpsc::unbounded_channel();
                let _ = tx.send(Err(e));
                CallStream {
                    id: 0,
                    rx,
                    link: None,
                }
            }
        }
    }

    /// [`Service::stream`] with parameters in JSON text already (sent as
    /// they are, not parsed or re-encoded).
    pub fn stream_payload(&self, method: &str, params: Payload) -> CallStream {
        let shared = &self.ctx.shared;
        let (tx, rx) = mpsc::unbounded_channel();
        let id = shared.next_id();
        let msg = self.call_msg(id, method, params.into_text());
        shared
            .pending
            .borrow_mut()
            .insert(id, Pending::Stream(tx.clone()));
        if !shared.send(msg) {
            shared.pending.borrow_mut().remove(&id);
            let _ = tx.send(Err(host_refused()));
            return CallStream { id, rx, link: None };
        }
        CallStream {
            id,
            rx,
            link: Some(shared.link),
        }
    }
}

/// The items of a streaming call. Dropping it cancels the call.
pub struct CallStream {
    id: u64,
    rx: mpsc::UnboundedReceiver<Result<Payload>>,
    link: Option<HostLink>,
}

impl CallStream {
    /// The next item; `None` at the end. An error ends the stream.
    pub async fn next(&mut self) -> Option<Result<Value>> {
        Some(self.next_payload().await?.map(Payload::into_value))
    }

    /// The next item as JSON text (not parsed); `None` at the end.
    pub async fn next_payload(&mut self) -> Option<Result<Payload>> {
        let item = self.rx.recv().await;
        if item.is_none() {
            self.link = None;
        }
        item
    }
}

impl CallStream {
    /// The next item if one is already waiting (no waiting).
    pub fn try_next(&mut self) -> Option<Result<Value>> {
        self.rx.try_recv().ok().map(|r| r.map(Payload::into_value))
    }
}

impl Drop for CallStream {
    fn drop(&mut self) {
        if let Some(link) = self.link.take() {
            link.send(ToHost::Cancel { id: self.id });
        }
    }
}

/// A registered listener; `off()` removes it before the fiber is disposed.
pub struct Listener {
    id: u64,
    shared: std::rc::Weak<Shared>,
}

impl Listener {
    /// Removes the listener.
    pub fn off(self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.listeners.borrow_mut().remove(&self.id);
            shared.send(ToHost::Off { listener: self.id });
        }
    }
}

/// Options for a listener: `ctx.listen("event").prepend().scope(k).on(f)`.
pub struct ListenerBuilder {
    ctx: Context,
    event: String,
    prepend: bool,
    scope: Option<String>,
}

impl ListenerBuilder {
    /// Run before ordinary listeners (the most recent prepend runs first).
    pub fn prepend(mut self) -> Self {
        self.prepend = true;
        self
    }

    /// Only receive dispatches for scope `key` (an agent id) or its
    /// descendants.
    pub fn scope(mut self, key: impl Into<String>) -> Self {
        self.scope = Some(key.into());
        self
    }

    /// Registers the listener.
    pub fn on<F, Fut>(self, listener: F) -> Listener
    where
        F: Fn(Event) -> Fut + 'static,
        Fut: Future<Output = Result<Value>> + 'static,
    {
        let shared = &self.ctx.shared;
        let id = shared.next_id();
        let f: ListenerFn = Rc::new(move |ev| Box::pin(listener(ev)));
        shared.listeners.borrow_mut().insert(id, f);
        shared.send(ToHost::On {
            listener: id,
            event: Cow::Owned(self.event),
            scope: self.scope.map(Cow::Owned),
            prepend: self.prepend,
        });
        Listener {
            id,
            shared: Rc::downgrade(shared),
        }
    }
}

/// A dispatch under construction: `ctx.dispatch("event").scope(k).emit(p)`.
pub struct Dispatch {
    ctx: Context,
    event: String,
    scope: Option<String>,
}

impl Dispatch {
    /// Dispatch for scope `key`: unscoped listeners, and listeners scoped to
    /// `key` or one of its ancestors, receive it.
    pub fn scope(mut self, key: impl Into<String>) -> Self {
        self.scope = Some(key.into());
        self
    }

    fn msg(&self, id: u64, mode: Mode, payload: String) -> ToHost<'static> {
        ToHost::Dispatch {
            id,
            event: Cow::Owned(self.event.clone()),
            scope: Cow::Owned(self.scope.clone().unwrap_or_default()),
            mode,
            payload: Cow::Owned(payload),
        }
    }

    /// Fire and forget. Listener failures are contained and logged.
    pub fn emit(self, payload: impl Serialize) -> Result<()> {
        let msg = self.msg(0, Mode::Emit, to_text(payload)?);
        if self.ctx.shared.send(msg) {
            Ok(())
        } else {
            Err(host_refused())
        }
    }

    /// Listeners one by one; returns the first non-null result. The first
    /// failure stops the dispatch and is returned.
    pub async fn serial(self, payload: impl Serialize) -> Result<Value> {
        let payload = to_text(payload)?;
        let call = self
            .ctx
            .shared
            .request(|id| self.msg(id, Mode::Serial, payload));
        Ok(call.wait().await?.into_value())
    }

    /// All listeners concurrently; waits for all; fails if any failed.
    /// Answers whether any listener took part.
    pub async fn parallel(self, payload: impl Serialize) -> Result<bool> {
        let payload = to_text(payload)?;
        let call = self
            .ctx
            .shared
            .request(|id| self.msg(id, Mode::Parallel, payload));
        let reply = call.wait().await?;
        Ok(*reply == Value::Bool(true))
    }

    /// Around-middleware: the first listener is outermost; each may call
    /// `next`; `inner` runs after the last one.
    pub async fn waterfall<F, Fut>(self, payload: impl Serialize, inner: F) -> Result<Value>
    where
        F: FnOnce(Value) -> Fut + 'static,
        Fut: Future<Output = Result<Value>> + 'static,
    {
        let shared = self.ctx.shared.clone();
        let payload = to_text(payload)?;
        let mut waterfall_id = 0;
        let build = |id| self.msg(id, Mode::Waterfall, payload);
        let call = shared.request_with(build, |id| {
            waterfall_id = id;
            shared
                .inners
                .borrow_mut()
                .insert(id, Box::new(move |v| Box::pin(inner(v))));
        });
        /// Runs `drop_waterfall` however the dispatch ends, including when
        /// the dispatching future is dropped (its caller cancelled).
        struct Forget(Rc<Shared>, u64);
        impl Drop for Forget {
            fn drop(&mut self) {
                self.0.drop_waterfall(self.1);
            }
        }
        let _forget = Forget(shared.clone(), waterfall_id);
        Ok(call.wait().await?.into_value())
    }
}

impl Context {
    pub(crate) fn new(shared: Rc<Shared>) -> Self {
        Context { shared }
    }

    /// The plugin's name (from its manifest).
    pub fn plugin_name(&self) -> &'static str {
        self.shared.name
    }

    /// This fiber's id.
    pub fn fiber(&self) -> FiberId {
        self.shared.fiber.get()
    }

    /// Provides service `name`; every call to it runs `handler`. The
    /// registration is an effect of this fiber: it is withdrawn on disposal.
    pub fn provide<F, Fut>(&self, name: impl Into<String>, handler: F)
    where
        F: Fn(Request) -> Fut + 'static,
        Fut: Future<Output = Result<Reply>> + 'static,
    {
        let name = name.into();
        let f: ServiceFn = Rc::new(move |req| Box::pin(handler(req)));
        self.shared.services.borrow_mut().insert(name.clone(), f);
        self.shared.send(ToHost::Provide {
            service: Cow::Owned(name),
        });
    }

    /// Hands state to this plugin's next generation: when this generation
    /// is disposed because its row is reloaded (a rebuilt library, a
    /// restarted provider), `make` runs before any effect and its value is
    /// given to the successor's [`Context::inherited`]. Only a generation
    /// of the same plugin in the same row receives it; a failing `make`
    /// hands nothing. The last call wins.
    pub fn handoff<T, F>(&self, make: F)
    where
        T: Serialize,
        F: Fn() -> T + 'static,
    {
        *self.shared.handoff.borrow_mut() = Some(Box::new(move || to_value(make())));
    }

    /// The state the previous generation of this row handed over with
    /// [`Context::handoff`], once (later calls answer `None`). `None` on a
    /// first load, and an error when the state does not fit `T` (a
    /// successor that changed its state type decides what to do with it).
    pub fn inherited<T: DeserializeOwned>(&self) -> Result<Option<T>> {
        let Some(text) = self.shared.inherited.borrow_mut().take() else {
            return Ok(None);
        };
        serde_json::from_str(&text).map(Some).map_err(|e| {
            Error::new(
                codes::INVALID_PAYLOAD,
                format!("the state handed over by the previous generation does not fit: {e}"),
            )
        })
    }

    /// A client for service `name`.
    pub fn service(&self, name: impl Into<String>) -> Service {
        Service {
            ctx: self.clone(),
            name: name.into(),
        }
    }

    /// Adds an unscoped listener for `event`.
    pub fn on<F, Fut>(&self, event: impl Into<String>, listener: F) -> Listener
    where
        F: Fn(Event) -> Fut + 'static,
        Fut: Future<Output = Result<Value>> + 'static,
    {
        self.listen(event).on(listener)
    }

    /// Starts a listener with options (`prepend`, `scope`).
    pub fn listen(&self, event: impl Into<String>) -> ListenerBuilder {
        ListenerBuilder {
            ctx: self.clone(),
            event: event.into(),
            prepend: false,
            scope: None,
        }
    }

    /// Starts a dispatch with options (`scope`).
    pub fn dispatch(&self, event: impl Into<String>) -> Dispatch {
        Dispatch {
            ctx: self.clone(),
            event: event.into(),
            scope: None,
        }
    }

    /// Unscoped `emit`.
    pub fn emit(&self, event: impl Into<String>, payload: impl Serialize) -> Result<()> {
        self.dispatch(event).emit(payload)
    }

    /// Unscoped `serial`.
    pub async fn serial(&self, event: impl Into<String>, payload: impl Serialize) -> Result<Value> {
        self.dispatch(event).serial(payload).await
    }

    /// Unscoped `parallel`; answers whether any listener took part.
    pub async fn parallel(
        &self,
        event: impl Into<String>,
        payload: impl Serialize,
    ) -> Result<bool> {
        self.dispatch(event).parallel(payload).await
    }

    /// Unscoped `waterfall`.
    pub async fn waterfall<F, Fut>(
        &self,
        event: impl Into<String>,
        payload: impl Serialize,
        inner: F,
    ) -> Result<Value>
    where
        F: FnOnce(Value) -> Fut + 'static,
        Fut: Future<Output = Result<Value>> + 'static,
    {
        self.dispatch(event).waterfall(payload, inner).await
    }

    /// Registers a disposer; disposers run in reverse order when the fiber
    /// is disposed.
    pub fn effect<F, Fut>(&self, disposer: F)
    where
        F: FnOnce() -> Fut + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        self.shared
            .effects
            .borrow_mut()
            .push(Box::new(move || Box::pin(disposer())));
    }

    /// Spawns a task tied to this fiber: it is aborted when the fiber is
    /// disposed.
    pub fn spawn<F>(&self, fut: F) -> AbortHandle
    where
        F: Future<Output = ()> + 'static,
    {
        let handle = tokio::task::spawn_local(fut).abort_handle();
        let mut tasks = self.shared.tasks.borrow_mut();
        tasks.retain(|t| !t.is_finished());
        tasks.push(handle.clone());
        handle
    }

    /// Declares that scope `child` (an agent id) descends from `parent`, so
    /// listeners scoped to `parent` hear dispatches for `child` (reference
    /// dsh-core §7 `bindScopeParent`). A scope is linked once
    /// (`SCOPE_ALREADY_BOUND`), never into a cycle (`SCOPE_CYCLE`); the
    /// returned binding alone may move the link. The link ends with this
    /// fiber.
    pub fn scope_parent(
        &self,
        child: impl Into<String>,
        parent: impl Into<String>,
    ) -> Result<ScopeBinding> {
        let child = child.into();
        self.shared.link_scope(&child, &parent.into(), false)?;
        Ok(ScopeBinding {
            child,
            shared: Rc::downgrade(&self.shared),
        })
    }
}

/// The link of one scope to its parent, from [`Context::scope_parent`].
pub struct ScopeBinding {
    child: String,
    shared: std::rc::Weak<Shared>,
}

impl ScopeBinding {
    /// The linked scope.
    pub fn child(&self) -> &str {
        &self.child
    }

    /// Moves the scope under `parent` (refused with `SCOPE_CYCLE` when
    /// `parent` descends from it).
    pub fn rebind(&self, parent: impl Into<String>) -> Result<()> {
        let shared = self.shared.upgrade().ok_or_else(host_refused)?;
        shared.link_scope(&self.child, &parent.into(), true)
    }
}
