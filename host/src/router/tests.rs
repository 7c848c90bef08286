//! The router's state without plugins: generations are inboxes the test
//! reads, and their messages go through `Router::handle` exactly as a
//! plugin's `send` would route them.

use super::*;

/// A router and the crash notices it sends.
struct Net {
    router: Arc<Router>,
    events: mpsc::UnboundedReceiver<RouterEvent>,
}

fn net() -> Net {
    net_with(HashMap::new())
}

fn net_with(builtins: HashMap<String, Builtin>) -> Net {
    let (tx, events) = mpsc::unbounded_channel();
    Net {
        router: Arc::new(Router::new(Reports::default(), tx, builtins)),
        events,
    }
}

impl Net {
    /// An active generation of `plugin` serving `fiber`.
    fn fiber(&self, fiber: FiberId, plugin: &str) -> GenCtx {
        let inbox = Arc::new(Inbox::new().unwrap());
        self.router.register_fiber(fiber, plugin, inbox.clone());
        self.router.set_active(fiber, true);
        GenCtx {
            fiber,
            plugin: plugin.to_owned(),
            inbox,
            sink: self.router.clone(),
        }
    }

    fn send(&self, from: &GenCtx, message: ToHost<'_>) -> i32 {
        self.router.handle(from, &message.encode())
    }

    fn provide(&self, from: &GenCtx, service: &str) {
        let service = s(service);
        assert_eq!(self.send(from, ToHost::Provide { service }), 0);
    }

    fn call(&self, from: &GenCtx, id: u64, service: &str, params: &str) {
        let message = ToHost::Call {
            id,
            service: s(service),
            method: s("m"),
            params: s(params),
        };
        assert_eq!(self.send(from, message), 0);
    }

    fn reply(&self, from: &GenCtx, id: u64, kind: ReplyKind, payload: &str) -> i32 {
        let payload = s(payload);
        self.send(from, ToHost::Reply { id, kind, payload })
    }

    fn on(&self, from: &GenCtx, listener: u64, event: &str, scope: Option<&str>, prepend: bool) {
        let message = ToHost::On {
            listener,
            event: s(event),
            scope: scope.map(s),
            prepend,
        };
        assert_eq!(self.send(from, message), 0);
    }

    fn dispatch(&self, from: &GenCtx, id: u64, mode: Mode, scope: &str, payload: &str) {
        let message = ToHost::Dispatch {
            id,
            event: s("ev"),
            scope: s(scope),
            mode,
            payload: s(payload),
        };
        assert_eq!(self.send(from, message), 0);
    }

    fn link(&self, from: &GenCtx, child: &str, parent: &str, rebind: bool) -> i32 {
        let message = ToHost::ScopeParent {
            child: s(child),
            parent: s(parent),
            rebind,
        };
        self.send(from, message)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.router.lock()
    }

    /// Nothing in flight: no pending replies, outgoing calls or chains.
    fn idle(&self) -> bool {
        let s = self.state();
        s.pending.is_empty() && s.outgoing.is_empty() && s.chains.is_empty()
    }
}

fn s(text: &str) -> Cow<'static, str> {
    Cow::Owned(text.to_owned())
}

/// Everything waiting in `g`'s inbox, decoded.
fn recv(g: &GenCtx) -> Vec<ToPlugin<'static>> {
    std::iter::from_fn(|| g.inbox.pop())
        .map(|env| ToPlugin::decode(&env).unwrap().into_owned())
        .collect()
}

/// The one message waiting in `g`'s inbox.
fn one(g: &GenCtx) -> ToPlugin<'static> {
    let mut all = recv(g);
    assert_eq!(all.len(), 1, "{all:?}");
    all.remove(0)
}

/// The router's id of the call or invocation `m`.
fn id_of(m: &ToPlugin<'_>) -> u64 {
    match m {
        ToPlugin::Call { id, .. } | ToPlugin::Inner { id, .. } => *id,
        ToPlugin::Event { invocation, .. } => *invocation,
        other => panic!("not a call: {other:?}"),
    }
}

fn reply(id: u64, kind: ReplyKind, payload: &str) -> ToPlugin<'static> {
    ToPlugin::Reply {
        id,
        kind,
        payload: s(payload),
    }
}

/// The error of a reply message.
fn error_of(m: &ToPlugin<'_>) -> Error {
    match m {
        ToPlugin::Reply {
            kind: ReplyKind::Err,
            payload,
            ..
        } => Error::from_payload(payload),
        other => panic!("not an error reply: {other:?}"),
    }
}

/// The listener ids of the events waiting in `g`'s inbox, in order.
fn heard(g: &GenCtx) -> Vec<u64> {
    recv(g)
        .iter()
        .map(|m| match m {
            ToPlugin::Event { listener, .. } => *listener,
            other => panic!("not an event: {other:?}"),
        })
        .collect()
}

// ---- services and calls ----------------------------------------------------

#[test]
fn a_call_reaches_the_provider_and_its_replies_come_back_under_the_callers_id() {
    let n = net();
    let (caller, provider) = (n.fiber(1, "caller"), n.fiber(2, "provider"));
    n.provide(&provider, "svc");
    assert!(n.router.service_active("svc"));
    assert_eq!(n.router.services_of(2), ["svc"]);
    n.call(&caller, 7, "svc", r#"{"x":1}"#);
    let call = one(&provider);
    let rid = id_of(&call);
    assert_eq!(
        call,
        ToPlugin::Call {
            id: rid,
            caller: 1,
            service: s("svc"),
            method: s("m"),
            params: s(r#"{"x":1}"#),
        }
    );
    assert_eq!(n.reply(&provider, rid, ReplyKind::Item, "1"), 0);
    assert_eq!(one(&caller), reply(7, ReplyKind::Item, "1"));
    assert!(
        n.state().outgoing.contains_key(&(1, 7)),
        "a stream item is not final"
    );
    assert_eq!(n.reply(&provider, rid, ReplyKind::Ok, "2"), 0);
    assert_eq!(one(&caller), reply(7, ReplyKind::Ok, "2"));
    assert!(n.idle());
    // A reply to an id that is no longer pending goes nowhere.
    assert_eq!(n.reply(&provider, rid, ReplyKind::Ok, "3"), 0);
    assert!(recv(&caller).is_empty());
}

#[test]
fn only_the_fiber_that_was_asked_may_answer() {
    let n = net();
    let (caller, provider, other) = (n.fiber(1, "a"), n.fiber(2, "p"), n.fiber(3, "o"));
    n.provide(&provider, "svc");
    n.call(&caller, 1, "svc", "null");
    let rid = id_of(&one(&provider));
    assert_eq!(n.reply(&other, rid, ReplyKind::Ok, "\"forged\""), -1);
    assert!(recv(&caller).is_empty());
    assert_eq!(n.reply(&provider, rid, ReplyKind::Ok, "\"real\""), 0);
    assert_eq!(one(&caller), reply(1, ReplyKind::Ok, "\"real\""));
}

#[test]
fn a_second_provider_is_rejected_and_an_inactive_or_absent_one_is_unavailable() {
    let n = net();
    let (caller, first, second) = (n.fiber(1, "a"), n.fiber(2, "one"), n.fiber(3, "two"));
    n.provide(&first, "svc");
    n.provide(&first, "svc");
    n.provide(&second, "svc");
    assert!(
        n.router.take_rejections(2).is_empty(),
        "providing twice is fine"
    );
    assert_eq!(
        n.router.take_rejections(3),
        ["service `svc` is already provided by `one`"]
    );
    assert!(n.router.take_rejections(3).is_empty(), "taken once");
    n.router.set_active(2, false);
    assert!(!n.router.service_active("svc"));
    n.call(&caller, 4, "svc", "null");
    let e = error_of(&one(&caller));
    assert_eq!(e.code, codes::SERVICE_UNAVAILABLE);
    assert_eq!(e.message, "no active provider for service `svc`");
    assert!(recv(&first).is_empty());
    n.call(&caller, 5, "nobody", "null");
    assert_eq!(error_of(&one(&caller)).code, codes::SERVICE_UNAVAILABLE);
    // Only the provider withdraws its service.
    let withdraw = |g: &GenCtx| n.send(g, ToHost::Withdraw { service: s("svc") });
    assert_eq!(withdraw(&second), 0);
    assert_eq!(n.router.services_of(2), ["svc"]);
    assert_eq!(withdraw(&first), 0);
    assert!(n.router.services_of(2).is_empty());
}

#[test]
fn a_cancelled_call_cancels_the_provider_and_its_late_reply_is_dropped() {
    let n = net();
    let (caller, provider) = (n.fiber(1, "a"), n.fiber(2, "p"));
    n.provide(&provider, "svc");
    n.call(&caller, 9, "svc", "null");
    let rid = id_of(&one(&provider));
    assert_eq!(n.send(&caller, ToHost::Cancel { id: 9 }), 0);
    assert_eq!(one(&provider), ToPlugin::Cancel { id: rid });
    assert!(n.idle());
    assert_eq!(n.reply(&provider, rid, ReplyKind::Ok, "1"), 0);
    assert!(recv(&caller).is_empty());
    // Cancelling what is not in flight changes nothing.
    assert_eq!(n.send(&caller, ToHost::Cancel { id: 9 }), 0);
    assert!(recv(&provider).is_empty());
}

#[test]
fn builtins_answer_inline_for_plugins_and_for_the_host() {
    let echo: Builtin = Arc::new(|method, params, caller, _late| {
        if method == "fail" {
            return Some(Err(Error::new("NOPE", "asked to")));
        }
        Some(Ok(
            serde_json::json!({"method": method, "params": params, "caller": caller}),
        ))
    });
    let n = net_with(HashMap::from([("host".to_owned(), echo)]));
    let caller = n.fiber(4, "a");
    assert!(n.router.service_active("host"));
    n.call(&caller, 1, "host", r#"{"k":true}"#);
    assert_eq!(
        one(&caller),
        reply(
            1,
            ReplyKind::Ok,
            r#"{"method":"m","params":{"k":true},"caller":4}"#
        )
    );
    let mut rx = n.router.host_call("host", "fail", &serde_json::json!(null));
    let r = rx.try_recv().unwrap();
    assert_eq!(r.result().unwrap_err().code, "NOPE");
    let mut rx = n.router.host_call("missing", "m", &Value::Null);
    let e = rx.try_recv().unwrap().result().unwrap_err();
    assert_eq!(e.code, codes::SERVICE_UNAVAILABLE);
}

#[test]
fn a_builtin_may_answer_later_and_knows_when_its_caller_is_gone() {
    let kept: Arc<std::sync::Mutex<Vec<Responder>>> = Arc::default();
    let k = kept.clone();
    let late: Builtin = Arc::new(move |_, _, _, responder| {
        k.lock().unwrap().push(responder);
        None
    });
    let n = net_with(HashMap::from([("host".to_owned(), late)]));
    let caller = n.fiber(4, "a");
    n.call(&caller, 7, "host", "{}");
    assert!(recv(&caller).is_empty());
    let responder = kept.lock().unwrap().pop().unwrap();
    assert!(responder.reply(Ok(serde_json::json!(42))));
    assert_eq!(one(&caller), reply(7, ReplyKind::Ok, "42"));
    // From the host too; and a caller that is gone is told apart.
    let rx = n.router.host_call("host", "m", &Value::Null);
    drop(rx);
    let responder = kept.lock().unwrap().pop().unwrap();
    assert!(!responder.reply(Ok(Value::Null)));
}

#[test]
fn a_host_call_reaches_the_provider_as_caller_zero() {
    let n = net();
    let provider = n.fiber(2, "p");
    n.provide(&provider, "svc");
    let mut rx = n.router.host_call("svc", "m", &serde_json::json!({"a": 1}));
    let call = one(&provider);
    assert!(matches!(&call, ToPlugin::Call { caller: 0, params, .. } if params == r#"{"a":1}"#));
    assert_eq!(n.reply(&provider, id_of(&call), ReplyKind::Ok, "[1]"), 0);
    let r = rx.try_recv().unwrap();
    assert!(r.is_final());
    assert_eq!(r.result().unwrap(), serde_json::json!([1]));
}

// ---- listeners and dispatch modes -------------------------------------------

#[test]
fn listeners_run_in_registration_order_and_the_latest_prepend_first() {
    let n = net();
    let (dispatcher, l) = (n.fiber(1, "d"), n.fiber(2, "l"));
    n.on(&l, 10, "ev", None, false);
    n.on(&l, 11, "ev", None, false);
    n.on(&l, 12, "ev", None, true);
    n.on(&l, 13, "ev", None, true);
    n.on(&l, 14, "other", None, false);
    n.dispatch(&dispatcher, 1, Mode::Emit, "", "{}");
    assert_eq!(heard(&l), [13, 12, 10, 11]);
    assert!(recv(&dispatcher).is_empty(), "emit answers nothing");
    assert_eq!(n.send(&l, ToHost::Off { listener: 12 }), 0);
    n.dispatch(&dispatcher, 2, Mode::Emit, "", "{}");
    assert_eq!(heard(&l), [13, 10, 11]);
}

#[test]
fn an_event_carries_its_mode_scope_and_payload() {
    let n = net();
    let (dispatcher, l) = (n.fiber(1, "d"), n.fiber(2, "l"));
    n.on(&l, 5, "ev", None, false);
    n.dispatch(&dispatcher, 1, Mode::Emit, "agent-1", r#"{"p":1}"#);
    assert_eq!(
        one(&l),
        ToPlugin::Event {
            invocation: 0,
            listener: 5,
            mode: Mode::Emit,
            event: s("ev"),
            scope: s("agent-1"),
            payload: s(r#"{"p":1}"#),
        }
    );
}

#[test]
fn serial_asks_one_by_one_until_an_answer_or_a_failure() {
    let n = net();
    let (d, a, b) = (n.fiber(1, "d"), n.fiber(2, "a"), n.fiber(3, "b"));
    n.on(&a, 1, "ev", None, false);
    n.on(&b, 2, "ev", None, false);
    n.dispatch(&d, 7, Mode::Serial, "", "{}");
    let first = id_of(&one(&a));
    assert!(recv(&b).is_empty(), "one at a time");
    assert_eq!(n.reply(&a, first, ReplyKind::Ok, "null"), 0);
    let second = id_of(&one(&b));
    assert_eq!(n.reply(&b, second, ReplyKind::Ok, "\"b\""), 0);
    assert_eq!(one(&d), reply(7, ReplyKind::Ok, "\"b\""));
    assert!(n.state().chains.is_empty());
    // A failure stops the chain and is the answer.
    n.dispatch(&d, 8, Mode::Serial, "", "{}");
    let first = id_of(&one(&a));
    let failure = Error::new("BAD", "no").to_payload();
    assert_eq!(n.reply(&a, first, ReplyKind::Err, &failure), 0);
    assert_eq!(error_of(&one(&d)).code, "BAD");
    assert!(recv(&b).is_empty());
    // Every listener answering null, or none listening, answers null.
    n.dispatch(&d, 9, Mode::Serial, "", "{}");
    assert_eq!(n.reply(&a, id_of(&one(&a)), ReplyKind::Ok, "null"), 0);
    assert_eq!(n.reply(&b, id_of(&one(&b)), ReplyKind::Ok, ""), 0);
    assert_eq!(one(&d), reply(9, ReplyKind::Ok, "null"));
    n.send(&a, ToHost::Off { listener: 1 });
    n.send(&b, ToHost::Off { listener: 2 });
    n.dispatch(&d, 10, Mode::Serial, "", "{}");
    assert_eq!(one(&d), reply(10, ReplyKind::Ok, "null"));
}

#[test]
fn parallel_asks_everyone_and_answers_true_null_or_the_failures() {
    let n = net();
    let (d, a, b) = (n.fiber(1, "d"), n.fiber(2, "a"), n.fiber(3, "b"));
    n.dispatch(&d, 1, Mode::Parallel, "", "{}");
    assert_eq!(one(&d), reply(1, ReplyKind::Ok, "null"), "nobody took part");
    n.on(&a, 1, "ev", None, false);
    n.on(&b, 2, "ev", None, false);
    n.dispatch(&d, 2, Mode::Parallel, "", "{}");
    let (ia, ib) = (id_of(&one(&a)), id_of(&one(&b)));
    assert_eq!(n.reply(&b, ib, ReplyKind::Ok, "\"ignored\""), 0);
    assert!(recv(&d).is_empty(), "waits for all");
    assert_eq!(n.reply(&a, ia, ReplyKind::Ok, "null"), 0);
    assert_eq!(one(&d), reply(2, ReplyKind::Ok, "true"));
    // One failure keeps its code; several aggregate.
    let fail = |code: &str| Error::new(code, "x").to_payload();
    n.dispatch(&d, 3, Mode::Parallel, "", "{}");
    let (ia, ib) = (id_of(&one(&a)), id_of(&one(&b)));
    n.reply(&a, ia, ReplyKind::Err, &fail("ONE"));
    n.reply(&b, ib, ReplyKind::Ok, "null");
    let e = error_of(&one(&d));
    assert_eq!(
        (e.code.as_str(), e.message.as_str()),
        ("ONE", "`ev`: ONE: x")
    );
    n.dispatch(&d, 4, Mode::Parallel, "", "{}");
    let (ia, ib) = (id_of(&one(&a)), id_of(&one(&b)));
    n.reply(&a, ia, ReplyKind::Err, &fail("ONE"));
    n.reply(&b, ib, ReplyKind::Err, &fail("TWO"));
    assert_eq!(error_of(&one(&d)).code, "AGGREGATE");
    assert!(n.idle());
}

#[test]
fn a_waterfall_nests_each_next_and_ends_in_the_dispatchers_default() {
    let n = net();
    let (d, a, b) = (n.fiber(1, "d"), n.fiber(2, "a"), n.fiber(3, "b"));
    n.on(&a, 1, "ev", None, false);
    n.on(&b, 2, "ev", None, false);
    n.dispatch(&d, 9, Mode::Waterfall, "", "0");
    let outer = one(&a);
    assert!(
        matches!(&outer, ToPlugin::Event { mode: Mode::Waterfall, payload, .. } if payload == "0")
    );
    let ia = id_of(&outer);
    let next = |g: &GenCtx, id, invocation, payload: &str| {
        n.send(
            g,
            ToHost::Next {
                id,
                invocation,
                payload: s(payload),
            },
        )
    };
    assert_eq!(next(&a, 21, ia, "1"), 0);
    let inner = one(&b);
    assert!(matches!(&inner, ToPlugin::Event { payload, .. } if payload == "1"));
    let ib = id_of(&inner);
    assert_eq!(next(&b, 31, ib, "2"), 0);
    let default = one(&d);
    assert!(matches!(&default, ToPlugin::Inner { dispatch: 9, payload, .. } if payload == "2"));
    assert_eq!(n.reply(&d, id_of(&default), ReplyKind::Ok, "\"d\""), 0);
    assert_eq!(one(&b), reply(31, ReplyKind::Ok, "\"d\""));
    // A second `next` from the same hop is refused.
    assert_eq!(next(&a, 22, ia, "again"), 0);
    assert_eq!(error_of(&one(&a)).code, codes::NEXT_CALLED_TWICE);
    assert_eq!(n.reply(&b, ib, ReplyKind::Ok, "\"b\""), 0);
    assert_eq!(one(&a), reply(21, ReplyKind::Ok, "\"b\""));
    assert_eq!(n.reply(&a, ia, ReplyKind::Ok, "\"a\""), 0);
    assert_eq!(one(&d), reply(9, ReplyKind::Ok, "\"a\""));
    assert!(n.idle());
    // `next` after the listener returned has nothing to continue.
    assert_eq!(next(&a, 23, ia, "late"), 0);
    let e = error_of(&one(&a));
    assert_eq!(e.code, codes::DISPOSED);
    assert_eq!(e.message, "`next` called after the listener returned");
}

#[test]
fn a_listener_that_does_not_call_next_short_circuits_the_waterfall() {
    let n = net();
    let (d, a, b) = (n.fiber(1, "d"), n.fiber(2, "a"), n.fiber(3, "b"));
    n.on(&a, 1, "ev", None, false);
    n.on(&b, 2, "ev", None, false);
    n.dispatch(&d, 4, Mode::Waterfall, "", "0");
    assert_eq!(n.reply(&a, id_of(&one(&a)), ReplyKind::Ok, "\"mine\""), 0);
    assert_eq!(one(&d), reply(4, ReplyKind::Ok, "\"mine\""));
    assert!(recv(&b).is_empty());
    assert!(n.state().chains.is_empty());
}

#[test]
fn a_host_waterfall_without_listeners_runs_the_hosts_default() {
    let n = net();
    let inner: HostInner = Box::new(|v| Ok(serde_json::json!({"default": v})));
    let mut rx = n.router.host_dispatch(
        Mode::Waterfall,
        "ev",
        "",
        &serde_json::json!(1),
        Some(inner),
    );
    assert_eq!(
        rx.try_recv().unwrap().result().unwrap(),
        serde_json::json!({"default": 1})
    );
    assert!(n.state().chains.is_empty());
}

#[test]
fn cancelling_a_dispatch_drops_its_chain_and_cancels_running_listeners() {
    let n = net();
    let (d, a, b) = (n.fiber(1, "d"), n.fiber(2, "a"), n.fiber(3, "b"));
    n.on(&a, 1, "ev", None, false);
    n.on(&b, 2, "ev", None, false);
    n.dispatch(&d, 5, Mode::Parallel, "", "{}");
    let (ia, ib) = (id_of(&one(&a)), id_of(&one(&b)));
    assert_eq!(n.send(&d, ToHost::Cancel { id: 5 }), 0);
    assert_eq!(one(&a), ToPlugin::Cancel { id: ia });
    assert_eq!(one(&b), ToPlugin::Cancel { id: ib });
    assert!(n.idle());
    assert_eq!(n.reply(&a, ia, ReplyKind::Ok, "null"), 0);
    assert!(recv(&d).is_empty());
}

// ---- scopes -----------------------------------------------------------------

#[test]
fn a_scoped_listener_hears_its_scope_and_descendants_and_unscoped_hears_all() {
    let n = net();
    let (d, l) = (n.fiber(1, "d"), n.fiber(2, "l"));
    n.on(&l, 1, "ev", None, false);
    n.on(&l, 2, "ev", Some("a"), false);
    n.on(&l, 3, "ev", Some("b"), false);
    assert_eq!(n.link(&d, "a/1", "a", false), 0);
    assert_eq!(n.link(&d, "a/1/x", "a/1", false), 0);
    for (scope, want) in [
        ("", vec![1]),
        ("a", vec![1, 2]),
        ("a/1", vec![1, 2]),
        ("a/1/x", vec![1, 2]),
        ("b", vec![1, 3]),
        ("elsewhere", vec![1]),
    ] {
        n.dispatch(&d, 1, Mode::Emit, scope, "{}");
        assert_eq!(heard(&l), want, "scope {scope:?}");
    }
}

#[test]
fn a_scope_links_once_never_into_a_cycle_and_only_its_maker_moves_it() {
    let n = net();
    let (maker, other) = (n.fiber(1, "maker"), n.fiber(2, "other"));
    assert_eq!(n.link(&maker, "c", "p", false), 0);
    assert_eq!(
        n.link(&maker, "c", "q", false),
        dsh_abi::SCOPE_ALREADY_BOUND
    );
    assert_eq!(
        n.link(&other, "c", "q", false),
        dsh_abi::SCOPE_ALREADY_BOUND
    );
    assert_eq!(n.link(&maker, "p", "c", false), dsh_abi::SCOPE_CYCLE);
    assert_eq!(n.link(&maker, "x", "x", false), dsh_abi::SCOPE_CYCLE);
    assert_eq!(n.link(&maker, "g", "c", false), 0);
    assert_eq!(
        n.link(&maker, "p", "g", false),
        dsh_abi::SCOPE_CYCLE,
        "through two links"
    );
    // Rebinding: only the maker, only a linked scope, still no cycle.
    assert_eq!(n.link(&other, "c", "q", true), dsh_abi::SCOPE_ALREADY_BOUND);
    assert_eq!(
        n.link(&maker, "unlinked", "q", true),
        dsh_abi::SCOPE_ALREADY_BOUND
    );
    assert_eq!(n.link(&maker, "c", "g", true), dsh_abi::SCOPE_CYCLE);
    assert_eq!(n.link(&maker, "c", "q", true), 0);
    assert_eq!(
        n.state().scope_parents.get("c").map(|(p, _)| p.as_str()),
        Some("q")
    );
    // Links end with the fiber that made them.
    assert_eq!(n.link(&other, "o", "c", false), 0);
    n.router.forget_fiber(1, "stopped");
    assert!(n.state().scope_parents.keys().eq(["o"].iter()));
    assert_eq!(n.link(&other, "c", "elsewhere", false), 0);
}

// ---- a fiber going ------------------------------------------------------------

#[test]
fn when_a_provider_goes_its_calls_fail_disposed_and_its_routes_are_dropped() {
    let n = net();
    let (caller, provider) = (n.fiber(1, "caller"), n.fiber(2, "provider"));
    n.provide(&provider, "svc");
    n.on(&provider, 1, "ev", None, false);
    n.call(&caller, 3, "svc", "null");
    n.dispatch(&caller, 4, Mode::Parallel, "", "{}");
    assert_eq!(recv(&provider).len(), 2);
    n.router.forget_fiber(2, "stopped");
    let mut got = recv(&caller);
    assert_eq!(got.pop(), Some(ToPlugin::FiberGone { fiber: 2 }));
    got.sort_by_key(|m| match m {
        ToPlugin::Reply { id, .. } => *id,
        _ => 0,
    });
    let (call, dispatch) = (error_of(&got[0]), error_of(&got[1]));
    assert_eq!(call.code, codes::DISPOSED);
    assert_eq!(call.message, "`provider` stopped before answering");
    assert_eq!(dispatch.code, codes::DISPOSED);
    let st = n.state();
    assert!(st.services.is_empty() && st.listeners.is_empty());
    drop(st);
    assert!(n.idle());
    assert!(recv(&provider).is_empty(), "the one gone is not told");
}

#[test]
fn when_a_caller_goes_the_provider_is_told_to_cancel() {
    let n = net();
    let (caller, provider) = (n.fiber(1, "caller"), n.fiber(2, "provider"));
    n.provide(&provider, "svc");
    n.call(&caller, 3, "svc", "null");
    let rid = id_of(&one(&provider));
    n.router.forget_fiber(1, "stopped");
    assert_eq!(
        recv(&provider),
        [
            ToPlugin::Cancel { id: rid },
            ToPlugin::FiberGone { fiber: 1 }
        ]
    );
    assert!(n.idle());
    assert_eq!(n.router.services_of(2), ["svc"], "the provider stays");
}

#[test]
fn an_unregistered_fiber_loses_its_routes_and_can_send_nothing() {
    let n = net();
    let (caller, gone) = (n.fiber(1, "a"), n.fiber(2, "gone"));
    n.provide(&gone, "svc");
    n.router.unregister_fiber(2);
    assert!(!n.router.service_active("svc"));
    assert_eq!(n.send(&gone, ToHost::Ready), -1);
    n.call(&caller, 1, "svc", "null");
    assert_eq!(error_of(&one(&caller)).code, codes::SERVICE_UNAVAILABLE);
}

#[test]
fn refused_messages_answer_negative() {
    let n = net();
    let g = n.fiber(1, "a");
    let bad = Envelope {
        kind: 999,
        ..Envelope::default()
    };
    assert_eq!(n.router.handle(&g, &bad), -3);
    g.inbox.close();
    assert_eq!(n.send(&g, ToHost::Ready), -1, "a closed generation");
}

#[test]
fn a_crash_is_reported_unless_the_fiber_was_being_stopped() {
    let mut n = net();
    let g = n.fiber(1, "a");
    n.router.actor_exited(1, 2);
    assert_eq!(
        n.events.try_recv(),
        Ok(RouterEvent::Crashed { fiber: 1, code: 2 })
    );
    n.router.stop(1);
    assert_eq!(one(&g), ToPlugin::Stop);
    n.router.actor_exited(1, 0);
    assert!(n.events.try_recv().is_err());
}

#[test]
fn lifecycle_requests_are_answered_by_the_generation() {
    let n = net();
    let g = n.fiber(1, "a");
    let mut rx = n
        .router
        .request(1, Lifecycle::Apply("{}".into(), Some("7".into())));
    let apply = one(&g);
    let ToPlugin::Apply {
        id,
        fiber,
        config,
        inherited,
    } = &apply
    else {
        panic!("{apply:?}");
    };
    assert_eq!(
        (*fiber, config.as_ref(), inherited.as_deref()),
        (1, "{}", Some("7"))
    );
    assert_eq!(n.reply(&g, *id, ReplyKind::Ok, "null"), 0);
    assert_eq!(rx.try_recv().unwrap().result().unwrap(), Value::Null);
    let mut rx = n.router.request(9, Lifecycle::Dispose);
    assert_eq!(
        rx.try_recv().unwrap().result().unwrap_err().code,
        codes::DISPOSED
    );
}
