//! Plugin-side logging: a scoped tracing dispatcher that forwards events to
//! the host, and a panic hook that reports the message and location only (no
//! backtrace symbolization, which would pin the library and leak its debug
//! info; see reference/actor-model-proof.md).

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::dispatcher::DefaultGuard;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Dispatch, Event, Level, Metadata, Subscriber};

use crate::link::{level, HostLink};

thread_local! {
    // `Cell<Option<Copy>>` has no destructor, so it registers no TLS dtor.
    static LINK: Cell<Option<HostLink>> = const { Cell::new(None) };
    static GUARD: RefCell<Option<DefaultGuard>> = const { RefCell::new(None) };
}

/// Forwards tracing events to the host's subscriber.
struct HostSubscriber {
    link: HostLink,
    max: Level,
    next_span: AtomicU64,
}

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let sep = if self.0.is_empty() { "" } else { " " };
            let _ = write!(self.0, "{sep}{}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let sep = if self.0.is_empty() { "" } else { " " };
            let _ = write!(self.0, "{sep}{}={value}", field.name());
        }
    }
}

fn level_number(l: &Level) -> u8 {
    match *l {
        Level::ERROR => level::ERROR,
        Level::WARN => level::WARN,
        Level::INFO => level::INFO,
        Level::DEBUG => level::DEBUG,
        Level::TRACE => level::TRACE,
    }
}

impl Subscriber for HostSubscriber {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= self.max
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::from_level(self.max))
    }

    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let meta = event.metadata();
        self.link
            .log(level_number(meta.level()), meta.target(), &fields.0);
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

fn max_level() -> Level {
    match std::env::var("DSH_PLUGIN_LOG")
        .unwrap_or_default()
        .to_ascii_lowercase()
        .as_str()
    {
        "error" => Level::ERROR,
        "warn" => Level::WARN,
        "debug" => Level::DEBUG,
        "trace" => Level::TRACE,
        _ => Level::INFO,
    }
}

/// Everything installed for one generation; dropping it uninstalls.
pub(crate) struct Installed {
    dispatch: Dispatch,
    _guard: DefaultGuard,
}

/// Installs the scoped dispatcher and the panic hook on the current
/// (generation) thread.
pub(crate) fn install(link: HostLink) -> Installed {
    LINK.with(|l| l.set(Some(link)));
    let dispatch = Dispatch::new(HostSubscriber {
        link,
        max: max_level(),
        next_span: AtomicU64::new(0),
    });
    let guard = tracing::dispatcher::set_default(&dispatch);
    std::panic::set_hook(Box::new(|info| {
        let message = info.payload_as_str().unwrap_or("Box<dyn Any>");
        let text = match info.location() {
            Some(loc) => format!("panicked at {}:{}: {message}", loc.file(), loc.line()),
            None => format!("panicked: {message}"),
        };
        match LINK.with(|l| l.get()) {
            Some(link) => link.log(level::ERROR, "panic", &text),
            None => eprintln!("dsh plugin: {text}"),
        }
    }));
    Installed {
        dispatch,
        _guard: guard,
    }
}

impl Installed {
    /// A closure for tokio's `on_thread_start`: blocking threads log too.
    pub(crate) fn thread_start(&self, link: HostLink) -> impl Fn() + Send + Sync + 'static {
        let dispatch = self.dispatch.clone();
        move || {
            LINK.with(|l| l.set(Some(link)));
            let guard = tracing::dispatcher::set_default(&dispatch);
            GUARD.with(|g| *g.borrow_mut() = Some(guard));
        }
    }
}

/// For tokio's `on_thread_stop`.
pub(crate) fn thread_stop() {
    GUARD.with(|g| g.borrow_mut().take());
    LINK.with(|l| l.set(None));
}

impl Drop for Installed {
    fn drop(&mut self) {
        // Restore std's default hook so the boxed closure is freed while the
        // library is still mapped.
        drop(std::panic::take_hook());
        LINK.with(|l| l.set(None));
    }
}
