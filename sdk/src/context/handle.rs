//! [`Context`]: the handle a plugin holds. Every other handle starts here.

use std::future::Future;
use std::rc::Rc;

use dsh_wire::{Cow, ToHost};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tokio::task::AbortHandle;

use super::runtime::Shared;
use super::text::to_value;
use super::Service;
use super::{
    AboutDispatch, Dispatch, Event, FiberId, Listener, ListenerBuilder, Reply, Request,
    ScopeBinding, Subject,
};
use crate::error::{codes, Error, Result};

/// The handle a plugin uses to talk to the host. Cheap to clone.
#[derive(Clone)]
pub struct Context {
    pub(crate) shared: Rc<Shared>,
}

impl Context {
    pub(crate) fn new(shared: Rc<Shared>) -> Self {
        Context { shared }
    }

    /// The plugin's name (from its manifest).
    pub fn plugin_name(&self) -> &'static str {
        self.shared.name()
    }

    /// This fiber's id.
    pub fn fiber(&self) -> FiberId {
        self.shared.fiber()
    }

    /// Provides service `name`; every call to it runs `handler`. The
    /// registration is an effect of this fiber: it is withdrawn on disposal.
    pub fn provide<F, Fut>(&self, name: impl Into<String>, handler: F)
    where
        F: Fn(Request) -> Fut + 'static,
        Fut: Future<Output = Result<Reply>> + 'static,
    {
        let name = name.into();
        self.shared.add_service(name.clone(), handler);
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
        self.shared.set_handoff(move || to_value(make()));
    }

    /// The state the previous generation of this row handed over with
    /// [`Context::handoff`], once (later calls answer `None`). `None` on a
    /// first load, and an error when the state does not fit `T` (a
    /// successor that changed its state type decides what to do with it).
    pub fn inherited<T: DeserializeOwned>(&self) -> Result<Option<T>> {
        let Some(text) = self.shared.take_inherited() else {
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
        Service::new(self.clone(), name.into())
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
        ListenerBuilder::new(self.clone(), event.into())
    }

    /// Starts a dispatch with options (`scope`).
    pub fn dispatch(&self, event: impl Into<String>) -> Dispatch {
        Dispatch::new(self.clone(), event.into())
    }

    /// Starts a dispatch of `payload` scoped to the subject it names
    /// ([`Subject`]): the scope cannot disagree with the payload.
    pub fn dispatch_about<'a, P: Serialize + Subject>(
        &self,
        event: impl Into<String>,
        payload: &'a P,
    ) -> AboutDispatch<'a, P> {
        AboutDispatch::new(self.clone(), event.into(), payload)
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
        self.shared.add_effect(disposer);
    }

    /// Spawns a task tied to this fiber: it is aborted when the fiber is
    /// disposed.
    pub fn spawn<F>(&self, fut: F) -> AbortHandle
    where
        F: Future<Output = ()> + 'static,
    {
        let handle = tokio::task::spawn_local(fut).abort_handle();
        self.shared.add_task(handle.clone());
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
        ScopeBinding::link(&self.shared, child.into(), &parent.into())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;

    use serde::Deserialize;
    use serde_json::json;

    use crate::context::test_host::{error_reply, run, settle, Harness, FIBER, PLUGIN};
    use crate::context::Reply;
    use crate::error::codes;

    #[test]
    fn the_context_knows_its_plugin_and_fiber() {
        let h = Harness::new();
        assert_eq!((h.ctx.plugin_name(), h.ctx.fiber()), (PLUGIN, FIBER));
    }

    #[test]
    fn dispose_withdraws_every_service() {
        run(async {
            let h = Harness::new();
            h.ctx
                .provide("echo", |_req| async { Ok(Reply::from(json!(1))) });
            h.take();
            h.shared.dispose().await;
            h.shared
                .on_call(9, 3, "echo".into(), "m".into(), "null".into());
            let (id, e) = error_reply(&h.take()[0]).unwrap();
            assert_eq!((id, e.code.as_str()), (9, codes::SERVICE_UNAVAILABLE));
        });
    }

    #[test]
    fn effects_run_in_reverse_while_the_fibers_tasks_still_run_then_the_tasks_stop() {
        run(async {
            let h = Harness::new();
            let order = Rc::new(RefCell::new(Vec::new()));
            let task_alive = Rc::new(Cell::new(false));
            let alive = task_alive.clone();
            let task = h.ctx.spawn(async move {
                alive.set(true);
                std::future::pending::<()>().await;
            });
            settle().await;
            for n in [1, 2] {
                let order = order.clone();
                let task = task.clone();
                h.ctx.effect(move || async move {
                    // A task aborted already would finish while this waits.
                    settle().await;
                    order.borrow_mut().push((n, task.is_finished()));
                });
            }
            h.shared.dispose().await;
            settle().await;
            assert!(task_alive.get());
            assert_eq!(*order.borrow(), [(2, false), (1, false)]);
            assert!(task.is_finished(), "the fiber's task was stopped");
        });
    }

    #[test]
    fn the_handoff_is_made_before_the_effects_and_the_last_one_wins() {
        run(async {
            let h = Harness::new();
            let state = Rc::new(Cell::new(1));
            let seen = state.clone();
            h.ctx.handoff(|| "first");
            h.ctx.handoff(move || json!({"n": seen.get()}));
            let teardown = state.clone();
            h.ctx.effect(move || async move { teardown.set(0) });
            assert_eq!(h.shared.dispose().await, Some(json!({"n": 1})));
            assert_eq!(state.get(), 0);
        });
    }

    #[test]
    fn a_failing_handoff_hands_nothing() {
        run(async {
            let h = Harness::new();
            h.ctx.handoff(|| -> u32 { panic!("no state") });
            assert_eq!(h.shared.dispose().await, None);
        });
    }

    #[test]
    fn inherited_state_is_read_once_and_a_misfit_is_invalid_payload() {
        #[derive(Deserialize, Debug, PartialEq)]
        struct Counter {
            n: u32,
        }
        let h = Harness::new();
        assert_eq!(h.ctx.inherited::<Counter>().unwrap(), None);
        h.shared.set_inherited(Some(r#"{"n":4}"#.to_owned()));
        assert_eq!(
            h.ctx.inherited::<Counter>().unwrap(),
            Some(Counter { n: 4 })
        );
        assert_eq!(h.ctx.inherited::<Counter>().unwrap(), None, "read once");
        h.shared.set_inherited(Some(r#"{"count":4}"#.to_owned()));
        let e = h.ctx.inherited::<Counter>().unwrap_err();
        assert_eq!(e.code, codes::INVALID_PAYLOAD);
        assert!(e.message.contains("previous generation"), "{e}");
    }
}
