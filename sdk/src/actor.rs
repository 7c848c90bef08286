//! The plugin actor: the only entry point into plugin code. It builds a
//! current-thread runtime on the generation thread, waits on the host's
//! eventfd, drains the inbox and dispatches each message.

use std::os::fd::{AsRawFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;

use dsh_abi::{kind, HostHandle};
use serde_json::Value;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::context::{Context, Shared};
use crate::error::{codes, Error};
use crate::link::{level, HostLink, Msg};
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
    link.send(Msg::new(kind::READY));
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
    while let Some(msg) = link.try_recv() {
        if msg.kind == kind::STOP {
            shared.shutdown();
            return true;
        }
        handle::<P>(shared, msg);
    }
    false
}

fn handle<P: Plugin>(shared: &Rc<Shared>, msg: Msg) {
    match msg.kind {
        kind::APPLY => apply::<P>(shared, msg),
        kind::DISPOSE => {
            let shared2 = shared.clone();
            tokio::task::spawn_local(async move {
                shared2.dispose().await;
                reply_ok(&shared2, msg.id);
            });
        }
        kind::CALL => shared.on_call(msg),
        kind::REPLY => shared.on_reply(msg),
        kind::CANCEL => shared.on_cancel(msg),
        kind::EVENT => shared.on_event(msg),
        kind::INNER => shared.on_inner(msg),
        kind::FIBER_GONE => shared.on_fiber_gone(msg.fiber),
        other => tracing::warn!("ignoring unknown message kind {other}"),
    }
}

fn reply_ok(shared: &Shared, id: u64) {
    let mut reply = Msg::new(kind::REPLY);
    reply.id = id;
    reply.payload = "null".into();
    shared.send(reply);
}

fn reply_err(shared: &Shared, id: u64, e: &Error) {
    let mut reply = Msg::new(kind::REPLY);
    reply.id = id;
    reply.flags = dsh_abi::flags::ERROR;
    reply.payload = e.to_payload();
    shared.send(reply);
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

fn apply<P: Plugin>(shared: &Rc<Shared>, msg: Msg) {
    shared.set_fiber(msg.fiber);
    let id = msg.id;
    let config = match parse_config::<P::Config>(&msg.payload) {
        Ok(c) => c,
        Err(e) => return reply_err(shared, id, &e),
    };
    let ctx = Context::new(shared.clone());
    let shared2 = shared.clone();
    let task = tokio::task::spawn_local(async move {
        match catch(P::apply(ctx, config)).await {
            Ok(Ok(())) => reply_ok(&shared2, id),
            Ok(Err(e)) | Err(e) => reply_err(&shared2, id, &e),
        }
    });
    shared.set_lifecycle(task.abort_handle());
}
