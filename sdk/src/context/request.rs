//! An incoming service call, as a provider's handler receives it.

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::{Rc, Weak};

use serde::de::DeserializeOwned;

use super::runtime::Shared;
use super::FiberId;
use crate::error::{codes, Error, Result};
use crate::payload::Payload;

/// A cleanup registered with [`Request::on_caller_gone`].
#[derive(Debug)]
pub struct CallerCleanup {
    shared: Weak<Shared>,
    caller: FiberId,
    id: u64,
}

impl CallerCleanup {
    /// Takes the cleanup back: it will not run.
    pub fn cancel(self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.remove_caller_cleanup(self.caller, self.id);
        }
    }
}

/// The callers that have a cleanup installed through
/// [`Request::on_caller_gone_once`].
#[derive(Debug, Clone, Default)]
pub struct CallerSet(Rc<RefCell<HashSet<FiberId>>>);

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
    shared: Weak<Shared>,
}

impl Request {
    /// The request the runtime hands a handler for a CALL.
    pub(in crate::context) fn new(
        service: String,
        method: String,
        params: Payload,
        caller: FiberId,
        shared: Weak<Shared>,
    ) -> Self {
        Request {
            service,
            method,
            params,
            caller,
            shared,
        }
    }

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
    /// registry ties a registration to the plugin that made it. The
    /// handle takes the cleanup back ([`CallerCleanup::cancel`]) when the
    /// registration ends first, so registrations made and ended over a
    /// long session leave nothing behind; dropping the handle keeps it.
    pub fn on_caller_gone(&self, cleanup: impl FnOnce() + 'static) -> CallerCleanup {
        let id = self
            .shared
            .upgrade()
            .map_or(0, |shared| shared.add_caller_cleanup(self.caller, cleanup));
        CallerCleanup {
            shared: self.shared.clone(),
            caller: self.caller,
            id,
        }
    }

    /// Runs `cleanup` when the calling fiber is disposed, once per caller
    /// in `once` (a registry whose cleanup for a caller drops everything
    /// that caller owns needs it only once, however many registrations the
    /// caller makes).
    pub fn on_caller_gone_once(&self, once: &CallerSet, cleanup: impl FnOnce() + 'static) {
        if !once.0.borrow_mut().insert(self.caller) {
            return;
        }
        let (set, caller) = (once.0.clone(), self.caller);
        // Kept until the caller goes, as its cleanup is.
        let _ = self.on_caller_gone(move || {
            set.borrow_mut().remove(&caller);
            cleanup();
        });
    }

    /// The error to return for a method the service does not know.
    pub fn unknown_method(&self) -> Error {
        Error::new(
            codes::UNKNOWN_METHOD,
            format!("service `{}` has no method `{}`", self.service, self.method),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use dsh_wire::{Cow, ReplyKind, ToHost};
    use serde::Deserialize;
    use serde_json::json;

    use crate::context::test_host::{error_reply, reply, run, settle, Harness, PLUGIN};
    use crate::context::Reply;
    use crate::error::codes;

    #[derive(Deserialize)]
    struct Say {
        text: String,
    }

    /// A harness whose plugin provides `echo`: `say` answers its `text`.
    fn echo() -> Harness {
        let h = Harness::new();
        h.ctx.provide("echo", |req| async move {
            match req.method.as_str() {
                "say" => Ok(Reply::from(json!(req.params_as::<Say>()?.text))),
                _ => Err(req.unknown_method()),
            }
        });
        h
    }

    fn call(h: &Harness, id: u64, method: &str, params: &str) {
        h.shared
            .on_call(id, 3, "echo".into(), method.into(), params.into());
    }

    #[test]
    fn a_cancelled_cleanup_never_runs_and_once_installs_one_per_caller() {
        run(async {
            let h = Harness::new();
            let req = |caller| {
                super::Request::new(
                    "s".into(),
                    "m".into(),
                    crate::payload::Payload::from_text("{}"),
                    caller,
                    std::rc::Rc::downgrade(&h.shared),
                )
            };
            let ran = Rc::new(RefCell::new(Vec::new()));
            let r = ran.clone();
            let kept = req(3).on_caller_gone(move || r.borrow_mut().push("kept"));
            let r = ran.clone();
            req(3)
                .on_caller_gone(move || r.borrow_mut().push("cancelled"))
                .cancel();
            let set = super::CallerSet::default();
            for _ in 0..3 {
                let r = ran.clone();
                req(4).on_caller_gone_once(&set, move || r.borrow_mut().push("once"));
            }
            h.shared.on_fiber_gone(3);
            h.shared.on_fiber_gone(4);
            assert_eq!(*ran.borrow(), ["kept", "once"]);
            kept.cancel(); // already run: nothing to take back
                           // Once it went, the caller's next registration installs again.
            let r = ran.clone();
            req(4).on_caller_gone_once(&set, move || r.borrow_mut().push("again"));
            h.shared.on_fiber_gone(4);
            assert_eq!(*ran.borrow(), ["kept", "once", "again"]);
        });
    }

    #[test]
    fn a_provided_service_is_announced_and_answers_a_routed_call() {
        run(async {
            let h = echo();
            assert_eq!(
                h.take(),
                [ToHost::Provide {
                    service: Cow::Borrowed("echo")
                }]
            );
            call(&h, 9, "say", r#"{"text":"hi"}"#);
            assert_eq!(h.take(), [reply(9, ReplyKind::Ok, r#""hi""#)]);
        });
    }

    #[test]
    fn params_that_do_not_fit_are_invalid_payload_naming_service_and_method() {
        run(async {
            let h = echo();
            h.take();
            call(&h, 9, "say", r#"{"words":"hi"}"#);
            let sent = h.take();
            let (id, e) = error_reply(&sent[0]).unwrap();
            assert_eq!((id, e.code.as_str()), (9, codes::INVALID_PAYLOAD));
            assert!(e.message.contains("`echo.say`"), "{e}");
        });
    }

    #[test]
    fn an_unknown_method_is_unknown_method_naming_it() {
        run(async {
            let h = echo();
            h.take();
            call(&h, 9, "shout", "{}");
            let (_, e) = error_reply(&h.take()[0]).unwrap();
            assert_eq!(e.code, codes::UNKNOWN_METHOD);
            assert!(e.message.contains("`shout`"), "{e}");
        });
    }

    #[test]
    fn a_call_for_a_service_not_provided_is_service_unavailable() {
        run(async {
            let h = echo();
            h.take();
            h.shared
                .on_call(9, 3, "other".into(), "m".into(), "{}".into());
            let (id, e) = error_reply(&h.take()[0]).unwrap();
            assert_eq!((id, e.code.as_str()), (9, codes::SERVICE_UNAVAILABLE));
            assert!(
                e.message.contains(PLUGIN) && e.message.contains("`other`"),
                "{e}"
            );
        });
    }

    #[test]
    fn a_panicking_handler_answers_panic_and_the_plugin_stays_up() {
        run(async {
            let h = Harness::new();
            h.ctx.provide("boom", |req| async move {
                if req.method == "panic" {
                    panic!("handler bug");
                }
                Ok(Reply::from(json!("fine")))
            });
            h.take();
            h.shared
                .on_call(9, 3, "boom".into(), "panic".into(), "null".into());
            let (_, e) = error_reply(&h.take()[0]).unwrap();
            assert_eq!(e.code, codes::PANIC);
            assert!(e.message.contains("handler bug"), "{e}");
            h.shared
                .on_call(10, 3, "boom".into(), "ok".into(), "null".into());
            assert_eq!(h.take(), [reply(10, ReplyKind::Ok, r#""fine""#)]);
        });
    }

    #[test]
    fn cleanups_run_in_reverse_when_their_caller_is_gone_and_only_then() {
        run(async {
            let h = Harness::new();
            let ran = Rc::new(RefCell::new(Vec::new()));
            let log = ran.clone();
            h.ctx.provide("registry", move |req| {
                let log = log.clone();
                async move {
                    let name = req.params_as::<String>()?;
                    req.on_caller_gone(move || log.borrow_mut().push(name));
                    Ok(Reply::from(json!(null)))
                }
            });
            for (id, name) in [(1, r#""a""#), (2, r#""b""#)] {
                h.shared
                    .on_call(id, 3, "registry".into(), "add".into(), name.into());
            }
            h.shared
                .on_call(3, 4, "registry".into(), "add".into(), r#""c""#.into());
            h.shared.on_fiber_gone(5);
            assert!(ran.borrow().is_empty(), "an unrelated fiber went away");
            h.shared.on_fiber_gone(3);
            assert_eq!(*ran.borrow(), ["b", "a"]);
            h.shared.on_fiber_gone(3);
            assert_eq!(*ran.borrow(), ["b", "a"], "cleanups run once");
            h.shared.on_fiber_gone(4);
            assert_eq!(*ran.borrow(), ["b", "a", "c"]);
        });
    }

    #[test]
    fn a_cancelled_call_stops_its_waiting_handler_without_a_reply() {
        run(async {
            let h = Harness::new();
            let stopped = Rc::new(RefCell::new(false));
            let flag = stopped.clone();
            h.ctx.provide("slow", move |_req| {
                let guard = SetOnDrop(flag.clone());
                async move {
                    let _guard = guard;
                    std::future::pending::<()>().await;
                    Ok(Reply::from(json!(null)))
                }
            });
            h.take();
            h.shared
                .on_call(9, 3, "slow".into(), "wait".into(), "null".into());
            settle().await;
            assert!(
                h.take().is_empty() && !*stopped.borrow(),
                "the handler waits"
            );
            h.shared.on_cancel(9);
            settle().await;
            assert!(*stopped.borrow(), "the handler was stopped");
            assert!(h.take().is_empty(), "nobody waits for a reply");
        });
    }

    /// Sets its flag when dropped (the handler's future was dropped).
    struct SetOnDrop(Rc<RefCell<bool>>);

    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            *self.0.borrow_mut() = true;
        }
    }
}
