//! The plugin actor: the only entry point into plugin code. It builds a
//! current-thread runtime on the generation thread, waits on the host's
//! eventfd, drains the inbox and dispatches each message.

use std::os::fd::{AsRawFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;

use dsh_abi::HostHandle;
use dsh_wire::{Cow, ReplyKind, ToHost, ToPlugin};
use serde_json::Value;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::context::{Context, EventMsg, Shared};
use crate::error::{codes, Error};
use crate::link::{level, HostLink};
use crate::logging;
use crate::unwind::{catch, panic_error};
use crate::Plugin;

/// The host-owned eventfd. Never closed by the plugin.
struct WakeFd(RawFd);

impl AsRawFd for WakeFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Exit codes of `run`.
pub(crate) mod exit {
    pub const OK: i32 = 0;
    pub const RUNTIME: i32 = 2;
    pub const PANIC: i32 = 99;
}

/// The body of the exported `run`: never unwinds.
pub fn run<P: Plugin>(handle: HostHandle) -> i32 {
    let link = HostLink::new(handle);
    match catch_unwind(AssertUnwindSafe(|| run_inner::<P>(link))) {
        Ok(code) => code,
        Err(payload) => {
            let e = panic_error(payload.as_ref());
            link.log(level::ERROR, P::NAME, &format!("actor failed: {e}"));
            exit::PANIC
        }
    }
}

fn run_inner<P: Plugin>(link: HostLink) -> i32 {
    let installed = logging::install(link);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_start(installed.thread_start(link))
        .on_thread_stop(logging::thread_stop)
        .build();
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            link.log(level::ERROR, P::NAME, &format!("cannot build runtime: {e}"));
            return exit::RUNTIME;
        }
    };
    let local = tokio::task::LocalSet::new();
    let code = runtime.block_on(local.run_until(actor::<P>(link)));
    // Tasks hold plugin state; drop them, then the runtime (which joins its
    // blocking threads), all before `run` returns.
    drop(local);
    drop(runtime);
    drop(installed);
    code
}

async fn actor<P: Plugin>(link: HostLink) -> i32 {
    let shared = Rc::new(Shared::new(link, P::NAME));
    // SAFETY: the host keeps the eventfd open until this generation's thread
    // has been joined, which is after this AsyncFd is dropped.
    let registered =
        unsafe { AsyncFd::register_with_interest(WakeFd(link.wake_fd()), Interest::READABLE) };
    let fd = match registered {
        Ok(fd) => fd,
        Err(e) => {
            let e = e.into_parts().1;
            link.log(
                level::ERROR,
                P::NAME,
                &format!("cannot poll the wake fd: {e}"),
            );
            return exit::RUNTIME;
        }
    };
    link.send(ToHost::Ready);
    loop {
        let mut guard = match fd.readable().await {
            Ok(g) => g,
            Err(e) => {
                link.log(level::ERROR, P::NAME, &format!("wake fd failed: {e}"));
                return exit::RUNTIME;
            }
        };
        // The registration is edge-triggered and every eventfd write is an
        // edge, so the counter need not be read: clear readiness, then drain.
        // A write racing with the drain raises a new edge, so no message is
        // ever stranded (and the hop costs one syscall less).
        guard.clear_ready();
        if drain::<P>(&shared, link) {
            return exit::OK;
        }
    }
}

/// Handles every waiting message; true when told to stop.
fn drain<P: Plugin>(shared: &Rc<Shared>, link: HostLink) -> bool {
    while let Some(message) = link.try_recv() {
        match message {
            Ok(ToPlugin::Stop) => {
                shared.shutdown();
                return true;
            }
            Ok(message) => handle::<P>(shared, message),
            Err(e) => tracing::warn!("ignoring a message from the host: {e}"),
        }
    }
    false
}

fn handle<P: Plugin>(shared: &Rc<Shared>, message: ToPlugin<'static>) {
    match message {
        ToPlugin::Apply {
            id,
            fiber,
            config,
            inherited,
        } => {
            shared.set_inherited(inherited.map(Cow::into_owned));
            apply::<P>(shared, id, fiber, &config);
        }
        ToPlugin::Dispose { id, .. } => {
            let shared2 = shared.clone();
            tokio::task::spawn_local(async move {
                let handoff = shared2.dispose().await;
                shared2.send(ToHost::Reply {
                    id,
                    kind: ReplyKind::Ok,
                    payload: Cow::Owned(handoff.unwrap_or(Value::Null).to_string()),
                });
            });
        }
        ToPlugin::Stop => shared.shutdown(),
        ToPlugin::Call {
            id,
            caller,
            service,
            method,
            params,
        } => shared.on_call(
            id,
            caller,
            service.into_owned(),
            method.into_owned(),
            params.into_owned(),
        ),
        ToPlugin::Reply { id, kind, payload } => shared.on_reply(id, kind, payload.into_owned()),
        ToPlugin::Cancel { id } => shared.on_cancel(id),
        ToPlugin::Event {
            invocation,
            listener,
            mode,
            event,
            scope,
            payload,
        } => shared.on_event(
            invocation,
            listener,
            EventMsg {
                mode,
                name: event.into_owned(),
                scope: scope.into_owned(),
                payload: payload.into_owned(),
            },
        ),
        ToPlugin::Inner {
            id,
            dispatch,
            payload,
        } => shared.on_inner(id, dispatch, &payload),
        ToPlugin::FiberGone { fiber } => shared.on_fiber_gone(fiber),
    }
}

fn reply(shared: &Shared, id: u64, result: Result<(), Error>) {
    let (kind, payload) = match result {
        Ok(()) => (ReplyKind::Ok, "null".to_owned()),
        Err(e) => (ReplyKind::Err, e.to_payload()),
    };
    shared.send(ToHost::Reply {
        id,
        kind,
        payload: Cow::Owned(payload),
    });
}

/// Parses a row's config; `null` and `{}` are interchangeable so that both
/// `()` and structs with defaults accept an absent config.
pub(crate) fn parse_config<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, Error> {
    let value: Value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(text)?
    };
    let empty = value.is_null() || value.as_object().is_some_and(|o| o.is_empty());
    match serde_json::from_value::<T>(value) {
        Ok(c) => Ok(c),
        Err(_) if empty => serde_json::from_value(Value::Object(Default::default()))
            .or_else(|_| serde_json::from_value(Value::Null))
            .map_err(|e| Error::new(codes::INVALID_CONFIG, format!("invalid config: {e}"))),
        Err(e) => Err(Error::new(
            codes::INVALID_CONFIG,
            format!("invalid config: {e}"),
        )),
    }
}

fn apply<P: Plugin>(shared: &Rc<Shared>, id: u64, fiber: u64, config: &str) {
    shared.set_fiber(fiber);
    let config = match parse_config::<P::Config>(config) {
        Ok(c) => c,
        Err(e) => return reply(shared, id, Err(e)),
    };
    let ctx = Context::new(shared.clone());
    let shared2 = shared.clone();
    let task = tokio::task::spawn_local(async move {
        match catch(P::apply(ctx, config)).await {
            Ok(Ok(())) => reply(&shared2, id, Ok(())),
            Ok(Err(e)) | Err(e) => reply(&shared2, id, Err(e)),
        }
    });
    shared.set_lifecycle(task.abort_handle());
}
