//! One enum per direction, and the only conversion to and from [`Envelope`].
//!
//! The encoded form is the protocol of [`dsh_abi::ABI_VERSION`]: which
//! envelope field carries what is written once, in `encode`/`decode` below,
//! and pinned by the snapshot tests at the end of this file.

use std::borrow::Cow;

use abi_stable::std_types::RString;
use dsh_abi::{flags, kind, Envelope};

/// How a dispatch runs its listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Fire and forget: every listener gets the payload; nobody answers.
    Emit,
    /// Listeners awaited one by one; the first non-null result wins.
    Serial,
    /// Listeners run concurrently; all are awaited.
    Parallel,
    /// Around-middleware: each listener calls `next` to reach the one after
    /// it; the dispatcher's default is the innermost.
    Waterfall,
}

impl Mode {
    fn bits(self) -> u32 {
        match self {
            Mode::Emit => flags::MODE_EMIT,
            Mode::Serial => flags::MODE_SERIAL,
            Mode::Parallel => flags::MODE_PARALLEL,
            Mode::Waterfall => flags::MODE_WATERFALL,
        }
    }

    fn from_bits(bits: u32) -> Mode {
        match bits & flags::MODE_MASK {
            flags::MODE_SERIAL => Mode::Serial,
            flags::MODE_PARALLEL => Mode::Parallel,
            flags::MODE_WATERFALL => Mode::Waterfall,
            _ => Mode::Emit,
        }
    }
}

/// What a reply says about the call it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplyKind {
    /// The final reply: the payload is the result (JSON text; empty = null).
    Ok,
    /// The final reply: the payload is an [`crate::Error`] object.
    Err,
    /// A stream item; the call stays open until a final reply.
    Item,
}

impl ReplyKind {
    /// True for the last reply of a call.
    pub fn is_final(self) -> bool {
        self != ReplyKind::Item
    }

    fn bits(self) -> u32 {
        match self {
            ReplyKind::Ok => 0,
            ReplyKind::Err => flags::ERROR,
            ReplyKind::Item => flags::STREAM,
        }
    }

    fn from_bits(env: &Envelope) -> Result<ReplyKind, DecodeError> {
        match env.flags {
            0 => Ok(ReplyKind::Ok),
            flags::ERROR => Ok(ReplyKind::Err),
            flags::STREAM => Ok(ReplyKind::Item),
            _ => Err(DecodeError::flags(env)),
        }
    }
}

/// Everything a plugin sends to the host (through `HostHandle::send`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToHost<'a> {
    /// Sent once by the SDK's actor when it is running and polls its inbox.
    Ready,
    /// A plugin starts providing `service`; the host routes calls to it.
    Provide {
        /// The service name.
        service: Cow<'a, str>,
    },
    /// A plugin stops providing `service` (an effect unwinding).
    Withdraw {
        /// The service name.
        service: Cow<'a, str>,
    },
    /// A plugin adds listener `listener` (its own id) for `event`.
    On {
        /// The plugin-chosen listener id, echoed in every invocation.
        listener: u64,
        /// The event name.
        event: Cow<'a, str>,
        /// Only dispatches scoped to this key or a descendant reach it.
        scope: Option<Cow<'a, str>>,
        /// Run before ordinary listeners (invariant companions).
        prepend: bool,
    },
    /// A plugin removes its listener `listener`.
    Off {
        /// The id given in [`ToHost::On`].
        listener: u64,
    },
    /// A plugin calls `service.method(params)`; replies come back as
    /// [`ToPlugin::Reply`] with the same `id`.
    Call {
        /// The caller's own call id.
        id: u64,
        /// The service name.
        service: Cow<'a, str>,
        /// The method name.
        method: Cow<'a, str>,
        /// JSON text.
        params: Cow<'a, str>,
    },
    /// A plugin answers a [`ToPlugin::Call`], [`ToPlugin::Event`],
    /// [`ToPlugin::Inner`] or lifecycle request `id` (items, then one final).
    Reply {
        /// The host's id of what is answered.
        id: u64,
        /// Item, final result or final error.
        kind: ReplyKind,
        /// JSON text.
        payload: Cow<'a, str>,
    },
    /// The plugin stops waiting for its call or dispatch `id`; the host
    /// cancels the work it started for it.
    Cancel {
        /// The caller's own call or dispatch id.
        id: u64,
    },
    /// A plugin dispatches `event`; non-emit modes get one final
    /// [`ToPlugin::Reply`] with `id`, and a waterfall's innermost default
    /// comes back as [`ToPlugin::Inner`].
    Dispatch {
        /// The dispatcher's own id.
        id: u64,
        /// The event name.
        event: Cow<'a, str>,
        /// The scope key; empty for an unscoped dispatch.
        scope: Cow<'a, str>,
        /// How listeners run.
        mode: Mode,
        /// JSON text.
        payload: Cow<'a, str>,
    },
    /// A waterfall listener calls `next` from invocation `invocation`; the
    /// result of the rest of the chain comes back as a reply to `id`.
    Next {
        /// The caller's own call id.
        id: u64,
        /// The invocation id of the [`ToPlugin::Event`] being handled.
        invocation: u64,
        /// JSON text: the value handed down the chain.
        payload: Cow<'a, str>,
    },
    /// Scope `child` is a child of scope `parent`. Linked once; `send`
    /// answers [`dsh_abi::SCOPE_ALREADY_BOUND`] or [`dsh_abi::SCOPE_CYCLE`]
    /// when refused.
    ScopeParent {
        /// The child scope key.
        child: Cow<'a, str>,
        /// The parent scope key.
        parent: Cow<'a, str>,
        /// Move a link this fiber made.
        rebind: bool,
    },
}

/// Everything the host sends to a plugin (through its inbox).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToPlugin<'a> {
    /// Apply the plugin as fiber `fiber` with its row's config; reply to `id`.
    Apply {
        /// Request id to reply to.
        id: u64,
        /// The fiber this generation is.
        fiber: u64,
        /// JSON text of the row's config (empty: none).
        config: Cow<'a, str>,
        /// JSON text of the state the previous generation of this row
        /// handed over in its dispose reply, if any.
        inherited: Option<Cow<'a, str>>,
    },
    /// Run every effect in reverse and forget all handlers; reply to `id`
    /// (the reply's payload is the state handed to the next generation of
    /// the row, or `null`).
    Dispose {
        /// Request id to reply to.
        id: u64,
        /// The fiber being disposed.
        fiber: u64,
    },
    /// Leave the actor loop (after [`ToPlugin::Dispose`], or at exit).
    Stop,
    /// A call to a service this plugin provides; reply to `id`.
    Call {
        /// Host call id to reply to.
        id: u64,
        /// The calling fiber (0: the host itself).
        caller: u64,
        /// The service name.
        service: Cow<'a, str>,
        /// The method name.
        method: Cow<'a, str>,
        /// JSON text.
        params: Cow<'a, str>,
    },
    /// A reply to this plugin's call, dispatch or `next` with local id `id`.
    Reply {
        /// The plugin's own id.
        id: u64,
        /// Item, final result or final error.
        kind: ReplyKind,
        /// JSON text.
        payload: Cow<'a, str>,
    },
    /// The caller of call or invocation `id` is gone; stop working on it.
    Cancel {
        /// The host's call or invocation id.
        id: u64,
    },
    /// Invoke listener `listener` for `event`; reply to `invocation` unless
    /// the mode is [`Mode::Emit`].
    Event {
        /// Invocation id to reply to (0 for an emit).
        invocation: u64,
        /// The plugin's listener id.
        listener: u64,
        /// How the dispatch runs.
        mode: Mode,
        /// The event name.
        event: Cow<'a, str>,
        /// The dispatch scope (empty: unscoped).
        scope: Cow<'a, str>,
        /// JSON text.
        payload: Cow<'a, str>,
    },
    /// Run the innermost default of this plugin's waterfall dispatch
    /// `dispatch`; reply to `id`.
    Inner {
        /// Invocation id to reply to.
        id: u64,
        /// The plugin's own dispatch id.
        dispatch: u64,
        /// JSON text: the value handed down by the last listener.
        payload: Cow<'a, str>,
    },
    /// Fiber `fiber` was disposed; drop what it registered here.
    FiberGone {
        /// The fiber that is gone.
        fiber: u64,
    },
}

/// An envelope that is not a message of this protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The kind is not one this direction carries.
    #[error("unknown message kind {0}")]
    Kind(u32),
    /// The flags are not valid for the kind.
    #[error("invalid flags {flags:#x} on message kind {kind}")]
    Flags {
        /// The envelope's kind.
        kind: u32,
        /// The envelope's flags.
        flags: u32,
    },
}

impl DecodeError {
    fn flags(env: &Envelope) -> DecodeError {
        DecodeError::Flags {
            kind: env.kind,
            flags: env.flags,
        }
    }
}

fn text(s: Cow<'_, str>) -> RString {
    RString::from(s.into_owned())
}

fn bare(kind: u32, id: u64) -> Envelope {
    Envelope {
        kind,
        id,
        ..Envelope::default()
    }
}

/// Refuses flag bits outside `allowed`.
fn only(env: &Envelope, allowed: u32) -> Result<(), DecodeError> {
    if env.flags & !allowed == 0 {
        Ok(())
    } else {
        Err(DecodeError::flags(env))
    }
}

/// Borrows an envelope string.
fn b(s: &RString) -> Cow<'_, str> {
    Cow::Borrowed(s.as_str())
}

fn owned(s: Cow<'_, str>) -> Cow<'static, str> {
    Cow::Owned(s.into_owned())
}

impl ToHost<'_> {
    /// The envelope that carries this message.
    pub fn encode(self) -> Envelope {
        match self {
            ToHost::Ready => bare(kind::READY, 0),
            ToHost::Provide { service } => Envelope {
                target: text(service),
                ..bare(kind::PROVIDE, 0)
            },
            ToHost::Withdraw { service } => Envelope {
                target: text(service),
                ..bare(kind::WITHDRAW, 0)
            },
            ToHost::On {
                listener,
                event,
                scope,
                prepend,
            } => Envelope {
                flags: if prepend { flags::PREPEND } else { 0 },
                target: text(event),
                method: scope.map(text).unwrap_or_default(),
                ..bare(kind::ON, listener)
            },
            ToHost::Off { listener } => bare(kind::OFF, listener),
            ToHost::Call {
                id,
                service,
                method,
                params,
            } => Envelope {
                target: text(service),
                method: text(method),
                payload: text(params),
                ..bare(kind::CALL, id)
            },
            ToHost::Reply { id, kind, payload } => Envelope {
                flags: kind.bits(),
                payload: text(payload),
                ..bare(dsh_abi::kind::REPLY, id)
            },
            ToHost::Cancel { id } => bare(kind::CANCEL, id),
            ToHost::Dispatch {
                id,
                event,
                scope,
                mode,
                payload,
            } => Envelope {
                flags: mode.bits(),
                target: text(event),
                method: text(scope),
                payload: text(payload),
                ..bare(kind::DISPATCH, id)
            },
            ToHost::Next {
                id,
                invocation,
                payload,
            } => Envelope {
                ref_id: invocation,
                payload: text(payload),
                ..bare(kind::NEXT, id)
            },
            ToHost::ScopeParent {
                child,
                parent,
                rebind,
            } => Envelope {
                flags: if rebind { flags::REBIND } else { 0 },
                target: text(child),
                method: text(parent),
                ..bare(kind::SCOPE_PARENT, 0)
            },
        }
    }

    /// Reads a plugin's envelope, borrowing its strings.
    pub fn decode(env: &Envelope) -> Result<ToHost<'_>, DecodeError> {
        let message = match env.kind {
            kind::READY => ToHost::Ready,
            kind::PROVIDE => ToHost::Provide {
                service: b(&env.target),
            },
            kind::WITHDRAW => ToHost::Withdraw {
                service: b(&env.target),
            },
            kind::ON => {
                only(env, flags::PREPEND)?;
                ToHost::On {
                    listener: env.id,
                    event: b(&env.target),
                    scope: (!env.method.is_empty()).then(|| b(&env.method)),
                    prepend: env.flags & flags::PREPEND != 0,
                }
            }
            kind::OFF => ToHost::Off { listener: env.id },
            kind::CALL => ToHost::Call {
                id: env.id,
                service: b(&env.target),
                method: b(&env.method),
                params: b(&env.payload),
            },
            kind::REPLY => ToHost::Reply {
                id: env.id,
                kind: ReplyKind::from_bits(env)?,
                payload: b(&env.payload),
            },
            kind::CANCEL => ToHost::Cancel { id: env.id },
            kind::DISPATCH => {
                only(env, flags::MODE_MASK)?;
                ToHost::Dispatch {
                    id: env.id,
                    event: b(&env.target),
                    scope: b(&env.method),
                    mode: Mode::from_bits(env.flags),
                    payload: b(&env.payload),
                }
            }
            kind::NEXT => ToHost::Next {
                id: env.id,
                invocation: env.ref_id,
                payload: b(&env.payload),
            },
            kind::SCOPE_PARENT => {
                only(env, flags::REBIND)?;
                ToHost::ScopeParent {
                    child: b(&env.target),
                    parent: b(&env.method),
                    rebind: env.flags & flags::REBIND != 0,
                }
            }
            other => return Err(DecodeError::Kind(other)),
        };
        Ok(message)
    }
}

impl ToPlugin<'_> {
    /// The envelope that carries this message.
    pub fn encode(self) -> Envelope {
        match self {
            ToPlugin::Apply {
                id,
                fiber,
                config,
                inherited,
            } => Envelope {
                fiber,
                method: inherited.map(text).unwrap_or_default(),
                payload: text(config),
                ..bare(kind::APPLY, id)
            },
            ToPlugin::Dispose { id, fiber } => Envelope {
                fiber,
                ..bare(kind::DISPOSE, id)
            },
            ToPlugin::Stop => bare(kind::STOP, 0),
            ToPlugin::Call {
                id,
                caller,
                service,
                method,
                params,
            } => Envelope {
                fiber: caller,
                target: text(service),
                method: text(method),
                payload: text(params),
                ..bare(kind::CALL, id)
            },
            ToPlugin::Reply { id, kind, payload } => Envelope {
                flags: kind.bits(),
                payload: text(payload),
                ..bare(dsh_abi::kind::REPLY, id)
            },
            ToPlugin::Cancel { id } => bare(kind::CANCEL, id),
            ToPlugin::Event {
                invocation,
                listener,
                mode,
                event,
                scope,
                payload,
            } => Envelope {
                flags: mode.bits(),
                ref_id: listener,
                target: text(event),
                method: text(scope),
                payload: text(payload),
                ..bare(kind::EVENT, invocation)
            },
            ToPlugin::Inner {
                id,
                dispatch,
                payload,
            } => Envelope {
                ref_id: dispatch,
                payload: text(payload),
                ..bare(kind::INNER, id)
            },
            ToPlugin::FiberGone { fiber } => Envelope {
                fiber,
                ..bare(kind::FIBER_GONE, 0)
            },
        }
    }

    /// Reads a host envelope, borrowing its strings.
    pub fn decode(env: &Envelope) -> Result<ToPlugin<'_>, DecodeError> {
        let message = match env.kind {
            kind::APPLY => ToPlugin::Apply {
                id: env.id,
                fiber: env.fiber,
                config: b(&env.payload),
                inherited: (!env.method.is_empty()).then(|| b(&env.method)),
            },
            kind::DISPOSE => ToPlugin::Dispose {
                id: env.id,
                fiber: env.fiber,
            },
            kind::STOP => ToPlugin::Stop,
            kind::CALL => ToPlugin::Call {
                id: env.id,
                caller: env.fiber,
                service: b(&env.target),
                method: b(&env.method),
                params: b(&env.payload),
            },
            kind::REPLY => ToPlugin::Reply {
                id: env.id,
                kind: ReplyKind::from_bits(env)?,
                payload: b(&env.payload),
            },
            kind::CANCEL => ToPlugin::Cancel { id: env.id },
            kind::EVENT => {
                only(env, flags::MODE_MASK)?;
                ToPlugin::Event {
                    invocation: env.id,
                    listener: env.ref_id,
                    mode: Mode::from_bits(env.flags),
                    event: b(&env.target),
                    scope: b(&env.method),
                    payload: b(&env.payload),
                }
            }
            kind::INNER => ToPlugin::Inner {
                id: env.id,
                dispatch: env.ref_id,
                payload: b(&env.payload),
            },
            kind::FIBER_GONE => ToPlugin::FiberGone { fiber: env.fiber },
            other => return Err(DecodeError::Kind(other)),
        };
        Ok(message)
    }

    /// The same message owning its strings (to move it into a task).
    pub fn into_owned(self) -> ToPlugin<'static> {
        match self {
            ToPlugin::Apply {
                id,
                fiber,
                config,
                inherited,
            } => ToPlugin::Apply {
                id,
                fiber,
                config: owned(config),
                inherited: inherited.map(owned),
            },
            ToPlugin::Dispose { id, fiber } => ToPlugin::Dispose { id, fiber },
            ToPlugin::Stop => ToPlugin::Stop,
            ToPlugin::Call {
                id,
                caller,
                service,
                method,
                params,
            } => ToPlugin::Call {
                id,
                caller,
                service: owned(service),
                method: owned(method),
                params: owned(params),
            },
            ToPlugin::Reply { id, kind, payload } => ToPlugin::Reply {
                id,
                kind,
                payload: owned(payload),
            },
            ToPlugin::Cancel { id } => ToPlugin::Cancel { id },
            ToPlugin::Event {
                invocation,
                listener,
                mode,
                event,
                scope,
                payload,
            } => ToPlugin::Event {
                invocation,
                listener,
                mode,
                event: owned(event),
                scope: owned(scope),
                payload: owned(payload),
            },
            ToPlugin::Inner {
                id,
                dispatch,
                payload,
            } => ToPlugin::Inner {
                id,
                dispatch,
                payload: owned(payload),
            },
            ToPlugin::FiberGone { fiber } => ToPlugin::FiberGone { fiber },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Cow<'_, str> {
        Cow::Borrowed(s)
    }

    /// One line per envelope field that is set: the encoded form, pinned.
    fn snapshot(env: &Envelope) -> String {
        format!(
            "kind={} flags={:#x} id={} ref={} fiber={} target={:?} method={:?} payload={:?}",
            env.kind, env.flags, env.id, env.ref_id, env.fiber, env.target, env.method, env.payload
        )
    }

    fn to_host_samples() -> Vec<ToHost<'static>> {
        vec![
            ToHost::Ready,
            ToHost::Provide {
                service: c("tools"),
            },
            ToHost::Withdraw {
                service: c("tools"),
            },
            ToHost::On {
                listener: 7,
                event: c("agent/end"),
                scope: Some(c("a1")),
                prepend: true,
            },
            ToHost::On {
                listener: 8,
                event: c("agent/end"),
                scope: None,
                prepend: false,
            },
            ToHost::Off { listener: 7 },
            ToHost::Call {
                id: 3,
                service: c("sessions"),
                method: c("append"),
                params: c("{\"id\":\"s\"}"),
            },
            ToHost::Reply {
                id: 4,
                kind: ReplyKind::Ok,
                payload: c("1"),
            },
            ToHost::Reply {
                id: 4,
                kind: ReplyKind::Err,
                payload: c("{}"),
            },
            ToHost::Reply {
                id: 4,
                kind: ReplyKind::Item,
                payload: c("2"),
            },
            ToHost::Cancel { id: 5 },
            ToHost::Dispatch {
                id: 6,
                event: c("tools/pre-execute"),
                scope: c(""),
                mode: Mode::Waterfall,
                payload: c("{}"),
            },
            ToHost::Next {
                id: 9,
                invocation: 10,
                payload: c("[]"),
            },
            ToHost::ScopeParent {
                child: c("child"),
                parent: c("parent"),
                rebind: true,
            },
        ]
    }

    fn to_plugin_samples() -> Vec<ToPlugin<'static>> {
        vec![
            ToPlugin::Apply {
                id: 1,
                fiber: 2,
                config: c("{}"),
                inherited: None,
            },
            ToPlugin::Apply {
                id: 1,
                fiber: 3,
                config: c("{}"),
                inherited: Some(c("{\"count\":3}")),
            },
            ToPlugin::Dispose { id: 1, fiber: 2 },
            ToPlugin::Stop,
            ToPlugin::Call {
                id: 3,
                caller: 4,
                service: c("llm"),
                method: c("stream"),
                params: c("{}"),
            },
            ToPlugin::Reply {
                id: 5,
                kind: ReplyKind::Item,
                payload: c("{}"),
            },
            ToPlugin::Cancel { id: 6 },
            ToPlugin::Event {
                invocation: 0,
                listener: 7,
                mode: Mode::Emit,
                event: c("session/event"),
                scope: c(""),
                payload: c("{}"),
            },
            ToPlugin::Event {
                invocation: 8,
                listener: 7,
                mode: Mode::Serial,
                event: c("agent/request"),
                scope: c("a1"),
                payload: c("{}"),
            },
            ToPlugin::Inner {
                id: 9,
                dispatch: 10,
                payload: c("null"),
            },
            ToPlugin::FiberGone { fiber: 11 },
        ]
    }

    #[test]
    fn every_plugin_message_survives_a_round_trip() {
        for m in to_host_samples() {
            let env = m.clone().encode();
            assert_eq!(ToHost::decode(&env).as_ref(), Ok(&m), "{m:?}");
        }
    }

    #[test]
    fn every_host_message_survives_a_round_trip() {
        for m in to_plugin_samples() {
            let env = m.clone().encode();
            assert_eq!(ToPlugin::decode(&env).as_ref(), Ok(&m), "{m:?}");
            assert_eq!(ToPlugin::decode(&env).map(ToPlugin::into_owned), Ok(m));
        }
    }

    #[test]
    fn the_encoded_form_is_the_protocol_of_abi_version_1() {
        assert_eq!(dsh_abi::ABI_VERSION, 1, "the snapshots below pin version 1");
        let host: Vec<String> = to_host_samples()
            .into_iter()
            .map(|m| snapshot(&m.encode()))
            .collect();
        assert_eq!(
            host,
            [
                r#"kind=1 flags=0x0 id=0 ref=0 fiber=0 target="" method="" payload="""#,
                r#"kind=5 flags=0x0 id=0 ref=0 fiber=0 target="tools" method="" payload="""#,
                r#"kind=6 flags=0x0 id=0 ref=0 fiber=0 target="tools" method="" payload="""#,
                r#"kind=7 flags=0x4 id=7 ref=0 fiber=0 target="agent/end" method="a1" payload="""#,
                r#"kind=7 flags=0x0 id=8 ref=0 fiber=0 target="agent/end" method="" payload="""#,
                r#"kind=8 flags=0x0 id=7 ref=0 fiber=0 target="" method="" payload="""#,
                r#"kind=9 flags=0x0 id=3 ref=0 fiber=0 target="sessions" method="append" payload="{\"id\":\"s\"}""#,
                r#"kind=10 flags=0x0 id=4 ref=0 fiber=0 target="" method="" payload="1""#,
                r#"kind=10 flags=0x1 id=4 ref=0 fiber=0 target="" method="" payload="{}""#,
                r#"kind=10 flags=0x2 id=4 ref=0 fiber=0 target="" method="" payload="2""#,
                r#"kind=11 flags=0x0 id=5 ref=0 fiber=0 target="" method="" payload="""#,
                r#"kind=12 flags=0x300 id=6 ref=0 fiber=0 target="tools/pre-execute" method="" payload="{}""#,
                r#"kind=14 flags=0x0 id=9 ref=10 fiber=0 target="" method="" payload="[]""#,
                r#"kind=17 flags=0x8 id=0 ref=0 fiber=0 target="child" method="parent" payload="""#,
            ]
        );
        let plugin: Vec<String> = to_plugin_samples()
            .into_iter()
            .map(|m| snapshot(&m.encode()))
            .collect();
        assert_eq!(
            plugin,
            [
                r#"kind=2 flags=0x0 id=1 ref=0 fiber=2 target="" method="" payload="{}""#,
                r#"kind=2 flags=0x0 id=1 ref=0 fiber=3 target="" method="{\"count\":3}" payload="{}""#,
                r#"kind=3 flags=0x0 id=1 ref=0 fiber=2 target="" method="" payload="""#,
                r#"kind=4 flags=0x0 id=0 ref=0 fiber=0 target="" method="" payload="""#,
                r#"kind=9 flags=0x0 id=3 ref=0 fiber=4 target="llm" method="stream" payload="{}""#,
                r#"kind=10 flags=0x2 id=5 ref=0 fiber=0 target="" method="" payload="{}""#,
                r#"kind=11 flags=0x0 id=6 ref=0 fiber=0 target="" method="" payload="""#,
                r#"kind=13 flags=0x0 id=0 ref=7 fiber=0 target="session/event" method="" payload="{}""#,
                r#"kind=13 flags=0x100 id=8 ref=7 fiber=0 target="agent/request" method="a1" payload="{}""#,
                r#"kind=15 flags=0x0 id=9 ref=10 fiber=0 target="" method="" payload="null""#,
                r#"kind=16 flags=0x0 id=0 ref=0 fiber=11 target="" method="" payload="""#,
            ]
        );
    }

    #[test]
    fn kinds_of_the_other_direction_and_stray_flags_are_refused() {
        let apply = ToPlugin::Apply {
            id: 1,
            fiber: 1,
            config: c(""),
            inherited: None,
        }
        .encode();
        assert_eq!(ToHost::decode(&apply), Err(DecodeError::Kind(kind::APPLY)));
        let ready = ToHost::Ready.encode();
        assert_eq!(
            ToPlugin::decode(&ready),
            Err(DecodeError::Kind(kind::READY))
        );
        let mut reply = ToHost::Reply {
            id: 1,
            kind: ReplyKind::Err,
            payload: c("{}"),
        }
        .encode();
        reply.flags |= flags::STREAM;
        assert!(matches!(
            ToHost::decode(&reply),
            Err(DecodeError::Flags { .. })
        ));
        let mut on = ToHost::Off { listener: 1 }.encode();
        on.kind = kind::ON;
        on.flags = flags::REBIND;
        assert!(matches!(
            ToHost::decode(&on),
            Err(DecodeError::Flags { .. })
        ));
    }
}
