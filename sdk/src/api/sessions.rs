//! The `sessions` service (plugin `session`, reference dsh-core §2): the
//! params and reply of each method of [`crate::names::sessions`], the
//! payloads of the bus events the provider dispatches, and [`Sessions`], a
//! client with one method per service method.
//!
//! Field names are the wire's (camelCase where the original spells them so).
//! `serde_json::Value` stays only where a payload is open: event data,
//! surface ops, derived messages, request headers and contexts, turn-end
//! reasons and inbox splices, whose shapes belong to other plugins.
//!
//! Replies that carry many events are generic over the event type, so the
//! provider serializes borrowed events (`SurfaceReply<&SessionEvent>`) and
//! a caller reads owned ones (the default) from one definition.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::api::agent_loop::SessionOrigin;
use crate::names::{service, sessions as method};
use crate::vocab::history::SurfaceTail;
use crate::vocab::{SessionEvent, SessionHeader};
use crate::{Context, Result, Service};

// ---- params ----------------------------------------------------------------

/// Params of `create`: a new live session, optionally seeded (replay, fork,
/// resume from a stored log).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateParams {
    /// The session id; the provider makes up `session-<uuid>` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// A supplied header: version 0, the session's own id, `origin` only
    /// `"subagent"` (`INVALID_PAYLOAD` otherwise). A bare v0 header when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<SessionHeader>,
    /// Metadata merged into the header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<CreateMeta>,
    /// Events to seed the log with, each checked like an append; the log
    /// then ends in `session/end-seed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<Vec<SessionEvent>>,
    /// The seed came from persistence, so only what follows it still needs
    /// to be written.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seed_stored: bool,
    /// Made but not announced: no `session/created` until `publish`, left
    /// out of `list`, its appends announced with it, and dropped without a
    /// trace by `discard` or when the creating plugin goes (the first half
    /// of an agent's creation transaction; a dsh extension).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unpublished: bool,
}

/// The `meta` of [`CreateParams`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateMeta {
    /// The session's working directory (absolute); overrides the header's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// One event to append: `type` and `data`, plus the surface fields of a
/// surface type (`user/message`, `assistant/message`, `tool/result`). The
/// provider assigns `seq` and `time`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewEvent {
    /// The event type (a type of [`crate::vocab::event::KNOWN`], or any
    /// type marked `ignorable`).
    #[serde(rename = "type")]
    pub kind: String,
    /// The payload (lossless JSON; null when absent).
    #[serde(default)]
    pub data: Value,
    /// `"append"` or `{op: "replace", start, end}`; required on surface
    /// types, refused on others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface_op: Option<Value>,
    /// Earlier events this one was derived from (surface types only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_event_seqs: Option<Vec<u64>>,
    /// Marks a type of the appending plugin's own that readers may drop; an
    /// unknown type must carry it (reference §2.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignorable: Option<bool>,
}

impl NewEvent {
    /// A non-surface event of `kind` with typed `data` (a record of
    /// [`crate::vocab::records`], say).
    pub fn typed(kind: impl Into<String>, data: &impl Serialize) -> crate::Result<NewEvent> {
        Ok(NewEvent::new(kind, serde_json::to_value(data)?))
    }

    /// A surface event of `kind` with typed `data`, `op` and the events it
    /// was derived from.
    pub fn surface(
        kind: impl Into<String>,
        data: &impl Serialize,
        op: crate::vocab::SurfaceOp,
        sources: Option<Vec<u64>>,
    ) -> crate::Result<NewEvent> {
        let mut event = NewEvent::typed(kind, data)?;
        event.surface_op = Some(op.to_value());
        event.source_event_seqs = sources;
        Ok(event)
    }

    /// A non-surface event of `kind` with `data`.
    pub fn new(kind: impl Into<String>, data: Value) -> NewEvent {
        NewEvent {
            kind: kind.into(),
            data,
            surface_op: None,
            source_event_seqs: None,
            ignorable: None,
        }
    }
}

/// Params of `append`: the session id beside the event's own fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppendParams {
    /// The live session.
    pub id: String,
    /// The event.
    #[serde(flatten)]
    pub event: NewEvent,
}

/// Params of `appendMany`: events appended in order, up to the first
/// invalid one (those before it stay appended; the error says how many).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppendManyParams {
    /// The live session.
    pub id: String,
    /// The events.
    pub events: Vec<NewEvent>,
    /// Appends only when the log's length is this (`APPEND_CONFLICT`
    /// otherwise), so the events may cite each other's seqs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_seq: Option<u64>,
}

/// Params of the methods that name only a session: `derive`,
/// `requestContext`, `header`, `flush`, `resume`, `close`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdParams {
    /// The session.
    pub id: String,
}

/// Params of `resume`: a stored session to make live.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeParams {
    /// The session.
    pub id: String,
    /// Loaded unpublished (as [`CreateParams::unpublished`]) when it is
    /// not live yet.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unpublished: bool,
}

/// Params of `events` and `surface`: a session and the first seq wanted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FromParams {
    /// The live session.
    pub id: String,
    /// The first seq (0 when absent; past the end gives nothing).
    #[serde(default)]
    pub from: u64,
}

/// Params of `list` (none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListParams {}

/// Params of `fork`: a child session seeded with the source's log up to
/// and including `boundary`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkParams {
    /// The source session (live).
    pub id: String,
    /// The child's id; the provider makes up `session-<uuid>` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_id: Option<String>,
    /// The last seq of the seed; the source's last event when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boundary: Option<Boundary>,
    /// `"subagent"` for a delegated child's session (a dsh extension: the
    /// original's fork providers write the header themselves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<SessionOrigin>,
    /// The child's delegation depth (with `origin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation_depth: Option<u64>,
    /// The child is made unpublished (as [`CreateParams::unpublished`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unpublished: bool,
}

/// A fork boundary as sent: any JSON value, so that one which is not a seq
/// of the source (negative, fractional, a string, past the end) is refused
/// with `INVALID_BOUNDARY` naming it, rather than as a malformed payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Boundary(Value);

impl Boundary {
    /// The boundary as a seq, if it is a non-negative integer.
    pub fn seq(&self) -> Option<u64> {
        self.0.as_u64()
    }
}

impl From<u64> for Boundary {
    fn from(seq: u64) -> Boundary {
        Boundary(Value::from(seq))
    }
}

impl fmt::Display for Boundary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

// ---- replies ---------------------------------------------------------------

/// Reply of `create`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateReply {
    /// The session id.
    pub id: String,
    /// Its header as created.
    pub header: SessionHeader,
    /// The seq the next append gets (the log's length).
    pub seq: u64,
}

/// Reply of `append`: the event as logged ([`SessionEvent`]). Reply of
/// `appendMany`: the seqs given, in order (`Vec<u64>`).
pub type AppendReply = SessionEvent;

/// Reply of `surface`: the surface events from `from` on, and whether any
/// of them is a replace (a consumer deriving incrementally must then
/// derive afresh).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SurfaceReply<E = SessionEvent> {
    /// Events with a `surfaceOp`, in log order.
    pub events: Vec<E>,
    /// True when one of them is not `"append"`.
    pub replaced: bool,
    /// The log's length.
    pub seq: u64,
    /// The last `request/header` logged from `from` on, if one was: what a
    /// token meter prices the request's system prompt and tools from.
    #[serde(
        rename = "requestHeader",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub request_header: Option<HeaderAt>,
}

pub use crate::vocab::history::HeaderAt;

/// Reply of `header`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeaderReply {
    /// The session header.
    pub header: SessionHeader,
    /// The log's length.
    pub seq: u64,
}

/// Reply of `resume`: what an agent needs to continue a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeReply<S = Value> {
    /// The session header.
    pub header: SessionHeader,
    /// The log's length.
    pub seq: u64,
    /// The number of the last `turn/start` (0 when none).
    pub last_turn: u64,
    /// The reason of the last `turn/end`, null when none.
    pub last_end: Option<Value>,
    /// The last `request/header`'s header, canonical; null when none.
    pub request_header: Option<Value>,
    /// The latest `request/context` data; null when none.
    pub request_context: Option<Value>,
    /// The data of each `agent/inbox/spliced` after the seed, in order.
    pub splices: Vec<S>,
    /// The seq of each of `splices`, so a bad one can be named.
    pub splice_seqs: Vec<u64>,
    /// The session is unpublished: this `resume` loaded it so (nobody else
    /// can resume a session being created).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unpublished: bool,
}

/// Reply of `fork`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkReply {
    /// The child session.
    pub id: String,
    /// Its header: the source's cwd, the source as `parentSession`, and the
    /// seed's length.
    pub header: SessionHeader,
}

// ---- bus payloads ----------------------------------------------------------

/// Payload of [`crate::names::bus::SESSION_CREATED`] (emitted): a session
/// became live, with the events a persistence backend has yet to write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionCreated {
    /// The session header.
    pub header: SessionHeader,
    /// How many leading events are already stored (absent on a fork: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<u64>,
    /// True when the session came from persistence (absent on a fork).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<bool>,
    /// The events after the stored ones.
    pub events: Vec<SessionEvent>,
}

/// Payload of [`crate::names::bus::SESSION_EVENT`] (emitted once per
/// appended event, in seq order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionAppended<E = SessionEvent> {
    /// The session.
    pub session_id: String,
    /// The event as logged.
    pub event: E,
}

/// Payload of [`crate::names::bus::SESSION_FLUSH`] (parallel: a
/// persistence backend makes the session durable) and of
/// [`crate::names::bus::SESSION_DISPOSED`] (emitted when it is closed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRef {
    /// The session.
    pub session_id: String,
}

// ---- client ----------------------------------------------------------------

/// A typed client of the `sessions` service: one method per service
/// method, each sending the params type above and parsing the reply type
/// (an unexpected reply is `INVALID_PAYLOAD`).
#[derive(Clone)]
pub struct Sessions(Service);

impl Sessions {
    /// The `sessions` service of `ctx`.
    pub fn new(ctx: &Context) -> Sessions {
        Sessions(ctx.service(service::SESSIONS))
    }

    /// The untyped client underneath.
    pub fn service(&self) -> &Service {
        &self.0
    }

    fn id(id: &str) -> IdParams {
        IdParams { id: id.to_owned() }
    }

    /// `create`: opens a session.
    pub async fn create(&self, params: &CreateParams) -> Result<CreateReply> {
        self.0.call_as(method::CREATE, params).await
    }

    /// `append`: appends one event and returns it as logged.
    pub async fn append(&self, id: &str, event: NewEvent) -> Result<AppendReply> {
        let params = AppendParams {
            id: id.to_owned(),
            event,
        };
        self.0.call_as(method::APPEND, &params).await
    }

    /// `appendMany`: appends events atomically and returns their seqs.
    pub async fn append_many(&self, id: &str, events: Vec<NewEvent>) -> Result<Vec<u64>> {
        let params = AppendManyParams {
            id: id.to_owned(),
            events,
            expect_seq: None,
        };
        self.0.call_as(method::APPEND_MANY, &params).await
    }

    /// `appendMany` at a known position: the first event gets seq
    /// `expect_seq`, or nothing is appended (`APPEND_CONFLICT`) because
    /// the log has moved on.
    pub async fn append_many_at(
        &self,
        id: &str,
        expect_seq: u64,
        events: Vec<NewEvent>,
    ) -> Result<Vec<u64>> {
        let params = AppendManyParams {
            id: id.to_owned(),
            events,
            expect_seq: Some(expect_seq),
        };
        self.0.call_as(method::APPEND_MANY, &params).await
    }

    /// `events`: the log from seq `from` on.
    pub async fn events(&self, id: &str, from: u64) -> Result<Vec<SessionEvent>> {
        let params = FromParams {
            id: id.to_owned(),
            from,
        };
        self.0.call_as(method::EVENTS, &params).await
    }

    /// `derive`: the model-facing messages projected from the log.
    pub async fn derive(&self, id: &str) -> Result<Vec<Value>> {
        self.0.call_as(method::DERIVE, Self::id(id)).await
    }

    /// `derive`, each message kept as the JSON text it was logged as (for
    /// a caller that only copies the history on).
    pub async fn derive_raw(&self, id: &str) -> Result<Vec<Box<RawValue>>> {
        self.0.call_as(method::DERIVE, Self::id(id)).await
    }

    /// `surface`: surface events from seq `from` on.
    pub async fn surface(&self, id: &str, from: u64) -> Result<SurfaceReply> {
        self.surface_as(id, from).await
    }

    /// `surface`, its events read only as far as an incremental history
    /// needs them ([`crate::vocab::history::SurfaceTail`]).
    pub async fn surface_tail(&self, id: &str, from: u64) -> Result<SurfaceTail> {
        self.surface_as(id, from).await
    }

    async fn surface_as<T: DeserializeOwned>(&self, id: &str, from: u64) -> Result<T> {
        let params = FromParams {
            id: id.to_owned(),
            from,
        };
        self.0.call_as(method::SURFACE, &params).await
    }

    /// `requestContext`: the latest `request/context` data, if any.
    pub async fn request_context(&self, id: &str) -> Result<Option<Value>> {
        self.0.call_as(method::REQUEST_CONTEXT, Self::id(id)).await
    }

    /// `header`: the header and the log's length.
    pub async fn header(&self, id: &str) -> Result<HeaderReply> {
        self.0.call_as(method::HEADER, Self::id(id)).await
    }

    /// `list`: the live session ids, sorted.
    pub async fn list(&self) -> Result<Vec<String>> {
        self.0.call_as(method::LIST, ListParams {}).await
    }

    /// `flush`: makes everything appended so far durable; true when a
    /// persistence backend took part.
    pub async fn flush(&self, id: &str) -> Result<bool> {
        self.0.call_as(method::FLUSH, Self::id(id)).await
    }

    /// `resume`: makes a stored session live (if it is not) and returns
    /// what an agent needs to continue it.
    pub async fn resume(&self, id: &str) -> Result<ResumeReply> {
        self.resume_with(&ResumeParams {
            id: id.to_owned(),
            unpublished: false,
        })
        .await
    }

    /// `resume` with every param.
    pub async fn resume_with(&self, params: &ResumeParams) -> Result<ResumeReply> {
        self.0.call_as(method::RESUME, params).await
    }

    /// `publish`: announces an unpublished session (`session/created` with
    /// everything appended so far); false when it was published already.
    pub async fn publish(&self, id: &str) -> Result<bool> {
        self.0.call_as(method::PUBLISH, Self::id(id)).await
    }

    /// `discard`: takes back a session whose creation failed. An
    /// unpublished one goes without a trace (its id is free again); one
    /// that was published meanwhile is closed, so its `session/disposed`
    /// pairs its `session/created`. Nothing when it is not live.
    pub async fn discard(&self, id: &str) -> Result<()> {
        self.0.call_as(method::DISCARD, Self::id(id)).await
    }

    /// `fork`: a child session seeded from `params.id`.
    pub async fn fork(&self, params: &ForkParams) -> Result<ForkReply> {
        self.0.call_as(method::FORK, params).await
    }

    /// `close`: detaches a live session (nothing when it is not live),
    /// answering once its `session/disposed` listeners have (the final
    /// write of its store is done and the writer lock released).
    pub async fn close(&self, id: &str) -> Result<()> {
        self.0.call_as(method::CLOSE, Self::id(id)).await
    }
}

#[cfg(test)]
mod tests;
