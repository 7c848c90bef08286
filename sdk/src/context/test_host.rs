//! An in-memory host for the handles' unit tests, in the manner of
//! nushell's `interface::test_util::TestCase`: it stands on the other side
//! of the generation's `HostLink`, keeps every message a handle sends, and
//! answers `send` with a code the test chooses. The test plays the router:
//! it reads what left ([`Harness::take`]) and hands the runtime what the
//! host would (`on_reply`, `on_call`, `on_event`, `on_inner`, ...), so no
//! library is loaded and no host runs.

use std::ffi::c_void;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::task::Poll;

use abi_stable::std_types::{ROption, RStr};
use dsh_abi::{Envelope, HostHandle};
use dsh_wire::{Cow, ToHost};

use super::{Context, Shared};
use crate::link::HostLink;

/// The host's side of the link: what it received, and what `send` answers.
#[derive(Default)]
pub(crate) struct TestHost {
    received: Mutex<Vec<Envelope>>,
    /// What `send` answers: 0 takes the message, anything else refuses it
    /// (and the message is not kept).
    answer: AtomicI32,
}

/// `HostHandle::send`: keeps the envelope unless told to refuse.
extern "C" fn send(ctx: *const c_void, message: &Envelope) -> i32 {
    // SAFETY: `ctx` is the pointer `Harness::new` put in the handle: a
    // `TestHost` leaked there, so valid (and never freed) for the rest of
    // the process, and only read through shared references.
    let host = unsafe { &*ctx.cast::<TestHost>() };
    let answer = host.answer.load(Ordering::SeqCst);
    if answer == 0 {
        host.received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(message.clone());
    }
    answer
}

/// `HostHandle::try_recv`: the tests hand messages to the runtime directly.
extern "C" fn try_recv(_ctx: *const c_void) -> ROption<Envelope> {
    ROption::RNone
}

/// `HostHandle::log`: the runtime's log records are not checked here.
extern "C" fn log(_ctx: *const c_void, _level: u8, _target: RStr<'_>, _message: RStr<'_>) {}

/// One plugin generation wired to a [`TestHost`]: its runtime state and
/// the context a plugin would be given.
pub(crate) struct Harness {
    pub host: &'static TestHost,
    pub shared: Rc<Shared>,
    pub ctx: Context,
}

/// The name the harness's plugin has.
pub(crate) const PLUGIN: &str = "test-plugin";
/// The fiber the harness's plugin is.
pub(crate) const FIBER: u64 = 7;

impl Harness {
    /// A generation applied as fiber [`FIBER`]. The host is leaked on
    /// purpose: copies of the link live in handles and tasks that may be
    /// dropped after the test's own values (a dropped call still sends its
    /// cancel), and must never point at freed memory.
    pub fn new() -> Harness {
        let host: &'static TestHost = Box::leak(Box::default());
        let handle = HostHandle {
            ctx: std::ptr::from_ref(host).cast(),
            wake_fd: -1,
            send,
            try_recv,
            log,
        };
        let shared = Rc::new(Shared::new(HostLink::new(handle), PLUGIN));
        shared.set_fiber(FIBER);
        Harness {
            host,
            ctx: Context::new(shared.clone()),
            shared,
        }
    }

    /// From now on the host answers every `send` with `code` (0 takes it).
    pub fn answer(&self, code: i32) {
        self.host.answer.store(code, Ordering::SeqCst);
    }

    /// Takes every message the host received so far, in order.
    pub fn take(&self) -> Vec<ToHost<'static>> {
        self.host.take()
    }
}

impl TestHost {
    /// Takes every message received so far, in order.
    pub fn take(&self) -> Vec<ToHost<'static>> {
        let received =
            std::mem::take(&mut *self.received.lock().unwrap_or_else(PoisonError::into_inner));
        received
            .iter()
            .map(|env| owned(ToHost::decode(env).expect("the SDK sends only valid envelopes")))
            .collect()
    }
}

/// A decoded message that no longer borrows its envelope.
fn owned(message: ToHost<'_>) -> ToHost<'static> {
    fn o(s: Cow<'_, str>) -> Cow<'static, str> {
        Cow::Owned(s.into_owned())
    }
    match message {
        ToHost::Ready => ToHost::Ready,
        ToHost::Provide { service } => ToHost::Provide {
            service: o(service),
        },
        ToHost::Withdraw { service } => ToHost::Withdraw {
            service: o(service),
        },
        ToHost::On {
            listener,
            event,
            scope,
            prepend,
        } => ToHost::On {
            listener,
            event: o(event),
            scope: scope.map(o),
            prepend,
        },
        ToHost::Off { listener } => ToHost::Off { listener },
        ToHost::Call {
            id,
            service,
            method,
            params,
        } => ToHost::Call {
            id,
            service: o(service),
            method: o(method),
            params: o(params),
        },
        ToHost::Reply { id, kind, payload } => ToHost::Reply {
            id,
            kind,
            payload: o(payload),
        },
        ToHost::Cancel { id } => ToHost::Cancel { id },
        ToHost::Dispatch {
            id,
            event,
            scope,
            mode,
            payload,
        } => ToHost::Dispatch {
            id,
            event: o(event),
            scope: o(scope),
            mode,
            payload: o(payload),
        },
        ToHost::Next {
            id,
            invocation,
            payload,
        } => ToHost::Next {
            id,
            invocation,
            payload: o(payload),
        },
        ToHost::ScopeParent {
            child,
            parent,
            rebind,
        } => ToHost::ScopeParent {
            child: o(child),
            parent: o(parent),
            rebind,
        },
    }
}

/// Runs `test` as the actor runs a plugin: on a current-thread runtime,
/// inside a `LocalSet` (handlers and tasks are spawned locally).
pub(crate) fn run<F: Future>(test: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime for the test");
    tokio::task::LocalSet::new().block_on(&runtime, test)
}

/// Polls `fut` once without a waker: far enough for a call or dispatch to
/// leave (they send on their first poll) without waiting for its reply.
pub(crate) fn poll_once<F: Future + ?Sized>(fut: Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
}

/// Lets the spawned handler tasks run until they wait again (scheduler
/// turns, not time).
pub(crate) async fn settle() {
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
}

/// A reply the plugin sent: `Ok`, `Err` or `Item`, with its text.
pub(crate) fn reply(id: u64, kind: dsh_wire::ReplyKind, payload: &str) -> ToHost<'static> {
    ToHost::Reply {
        id,
        kind,
        payload: Cow::Owned(payload.to_owned()),
    }
}

/// The id and error of a final error reply, `None` for any other message.
pub(crate) fn error_reply(message: &ToHost<'_>) -> Option<(u64, crate::Error)> {
    match message {
        ToHost::Reply {
            id,
            kind: dsh_wire::ReplyKind::Err,
            payload,
        } => Some((*id, crate::Error::from_payload(payload))),
        _ => None,
    }
}
