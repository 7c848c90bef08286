//! Listening to an event: the options of a registration, and the
//! registration itself.

use std::future::Future;
use std::rc::Weak;

use dsh_wire::{Cow, ToHost};
use serde_json::Value;

use super::runtime::Shared;
use super::{Context, Event};
use crate::error::Result;

/// A registered listener; `off()` removes it before the fiber is disposed.
/// Dropping it leaves the listener registered until the fiber is disposed.
pub struct Listener {
    id: u64,
    shared: Weak<Shared>,
}

impl Listener {
    /// Removes the listener.
    pub fn off(self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.remove_listener(self.id);
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
    /// A listener for `event` without options.
    pub(in crate::context) fn new(ctx: Context, event: String) -> Self {
        ListenerBuilder {
            ctx,
            event,
            prepend: false,
            scope: None,
        }
    }

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
        let id = shared.add_listener(listener);
        shared.send(ToHost::On {
            listener: id,
            event: Cow::Owned(self.event),
            scope: self.scope.map(Cow::Owned),
            prepend: self.prepend,
        });
        Listener {
            id,
            shared: std::rc::Rc::downgrade(shared),
        }
    }
}

#[cfg(test)]
mod tests {
    use dsh_wire::{Cow, Mode, ReplyKind, ToHost};
    use serde_json::json;

    use crate::context::test_host::{error_reply, reply, run, Harness};
    use crate::context::EventMsg;
    use crate::error::codes;

    fn ping() -> EventMsg {
        EventMsg {
            mode: Mode::Serial,
            name: "ping".to_owned(),
            scope: String::new(),
            payload: "null".to_owned(),
        }
    }

    /// Asserts the host's only message is invocation `id` answered
    /// `DISPOSED`: the listener is gone.
    fn assert_removed(h: &Harness, id: u64) {
        let sent = h.take();
        assert_eq!(sent.len(), 1, "{sent:?}");
        let (replied, e) = error_reply(&sent[0]).unwrap();
        assert_eq!((replied, e.code.as_str()), (id, codes::DISPOSED));
    }

    #[test]
    fn a_listener_is_registered_with_its_options() {
        run(async {
            let h = Harness::new();
            h.ctx
                .listen("ping")
                .prepend()
                .scope("agent-1")
                .on(|_ev| async { Ok(json!(null)) });
            h.ctx.on("pong", |_ev| async { Ok(json!(null)) });
            assert_eq!(
                h.take(),
                [
                    ToHost::On {
                        listener: 1,
                        event: Cow::Borrowed("ping"),
                        scope: Some(Cow::Borrowed("agent-1")),
                        prepend: true
                    },
                    ToHost::On {
                        listener: 2,
                        event: Cow::Borrowed("pong"),
                        scope: None,
                        prepend: false
                    },
                ]
            );
        });
    }

    #[test]
    fn off_unregisters_and_a_later_invocation_is_disposed() {
        run(async {
            let h = Harness::new();
            let listener = h.ctx.on("ping", |_ev| async { Ok(json!("pong")) });
            h.take();
            listener.off();
            assert_eq!(h.take(), [ToHost::Off { listener: 1 }]);
            h.shared.on_event(5, 1, ping());
            assert_removed(&h, 5);
        });
    }

    #[test]
    fn a_dropped_handle_keeps_listening_until_the_fiber_is_disposed() {
        run(async {
            let h = Harness::new();
            drop(h.ctx.on("ping", |_ev| async { Ok(json!("pong")) }));
            h.take();
            h.shared.on_event(5, 1, ping());
            assert_eq!(h.take(), [reply(5, ReplyKind::Ok, r#""pong""#)]);
            assert_eq!(h.shared.dispose().await, None);
            h.shared.on_event(6, 1, ping());
            assert_removed(&h, 6);
        });
    }

    #[test]
    fn off_after_the_plugin_is_gone_sends_nothing() {
        run(async {
            let h = Harness::new();
            let listener = h.ctx.on("ping", |_ev| async { Ok(json!(null)) });
            h.take();
            let host = h.host;
            drop(h);
            listener.off();
            let received = host.take();
            assert!(received.is_empty(), "{received:?}");
        });
    }
}
