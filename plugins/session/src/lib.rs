//! `session`: the append-only session log (reference dsh-core §2).

mod framing;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use dsh_sdk::names::{bus, code, service, session_persistence, sessions};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::surface::Surface;
use dsh_sdk::vocab::{
    canonical_header, derive_messages, event, lossless, shape, SessionEvent, SessionHeader,
};
use dsh_sdk::{new_id, now_ms};
use framing::Framing;
use serde::Deserialize;

struct Session {
    header: SessionHeader,
    events: Vec<SessionEvent>,
    framing: Framing,
    surface: Surface,
    /// The latest `request/context` record (`session.requestContext()`),
    /// folded as each event enters the log.
    request_context: Option<Value>,
}

type Store = Rc<RefCell<HashMap<String, Session>>>;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AppendArgs {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    data: Value,
    #[serde(default)]
    surface_op: Option<Value>,
    #[serde(default)]
    source_event_seqs: Option<Vec<u64>>,
    /// Marks a type of the appending plugin's own that readers may drop;
    /// an unknown type must carry it (reference §2.1).
    #[serde(default)]
    ignorable: Option<bool>,
}

fn invalid(message: String) -> Error {
    Error::new("INVALID_APPEND", message)
}

fn not_found(id: &str) -> Error {
    Error::new(code::SESSION_NOT_FOUND, format!("no live session `{id}`"))
}

fn id_of(req: &Request) -> Result<String> {
    req.params["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| Error::new(codes::INVALID_PAYLOAD, "missing session `id`"))
}

impl Session {
    fn append(&mut self, args: AppendArgs) -> Result<SessionEvent> {
        if let Some(why) = event::refuse_unknown(&args.kind, args.ignorable) {
            return Err(invalid(why));
        }
        let surface = event::SURFACE.contains(&args.kind.as_str());
        if surface && args.surface_op.is_none() {
            return Err(invalid(format!("`{}` needs a surfaceOp", args.kind)));
        }
        if !surface && (args.surface_op.is_some() || args.source_event_seqs.is_some()) {
            return Err(invalid(format!(
                "`{}` may not carry surface metadata",
                args.kind
            )));
        }
        if !lossless(&args.data) {
            return Err(invalid(format!(
                "session event \"{}\" carries non-JSON-serializable data",
                args.kind
            )));
        }
        let location = format!("session event \"{}\"", args.kind);
        if let Some(why) = shape::unsupported_request_header(&args.kind, &args.data, &location) {
            return Err(invalid(why));
        }
        let seq = self.events.len() as u64;
        if let Some(src) = &args.source_event_seqs {
            if src.iter().any(|s| *s >= seq) {
                return Err(invalid("sourceEventSeqs must precede the event".into()));
            }
        }
        let ev = SessionEvent {
            kind: args.kind,
            seq,
            time: now_ms(),
            data: args.data,
            source_event_seqs: args.source_event_seqs,
            surface_op: args.surface_op,
            ignorable: args.ignorable.filter(|i| *i),
        };
        let plan = self.surface.plan(&ev, &self.events).map_err(invalid)?;
        self.framing.check(&ev).map_err(invalid)?;
        self.commit(ev.clone(), plan);
        Ok(ev)
    }

    /// Takes a checked event into the log and every fold over it.
    fn commit(&mut self, ev: SessionEvent, plan: dsh_sdk::vocab::surface::Plan) {
        self.framing.apply(&ev);
        self.surface.apply(plan);
        if ev.kind == event::REQUEST_CONTEXT {
            self.request_context = Some(ev.data.clone());
        }
        self.events.push(ev);
    }
}

/// A session built from `seed` (replay, fork, resume), each seed event
/// checked like an append. With a seed (even an empty one) the log ends in
/// `session/end-seed`, appended unless the seed already ends in one; a
/// fresh session (`None`) starts empty (reference §2.8).
fn seeded(header: SessionHeader, seed: Option<Vec<SessionEvent>>) -> Result<Session> {
    let has_seed = seed.is_some();
    let mut s = Session {
        header,
        events: Vec::new(),
        framing: Framing::default(),
        surface: Surface::default(),
        request_context: None,
    };
    for (i, e) in seed.unwrap_or_default().into_iter().enumerate() {
        if e.seq != i as u64 {
            return Err(invalid(format!("seed event {i} has seq {}", e.seq)));
        }
        if let Some(why) = event::refuse_unknown(&e.kind, e.ignorable) {
            return Err(invalid(format!("seed event {i}: {why}")));
        }
        let surface = event::SURFACE.contains(&e.kind.as_str());
        if surface && e.surface_op.is_none() {
            return Err(invalid(format!(
                "seed event {i}: `{}` needs a surfaceOp",
                e.kind
            )));
        }
        if !surface && (e.surface_op.is_some() || e.source_event_seqs.is_some()) {
            return Err(invalid(format!(
                "seed event {i}: `{}` may not carry surface metadata",
                e.kind
            )));
        }
        if !lossless(&e.data) {
            return Err(invalid(format!(
                "session event \"{}\" carries non-JSON-serializable data",
                e.kind
            )));
        }
        let location = format!("seed event at index {i}");
        if let Some(why) = shape::unsupported_request_header(&e.kind, &e.data, &location) {
            return Err(invalid(why));
        }
        shape::seed_event_shape(&e, i).map_err(invalid)?;
        let plan = s
            .surface
            .plan(&e, &s.events)
            .map_err(|why| invalid(format!("invalid seed event at index {i}: {why}")))?;
        s.commit(e, plan);
    }
    if has_seed
        && s.events
            .last()
            .is_none_or(|e| e.kind != event::SESSION_END_SEED)
    {
        let seq = s.events.len() as u64;
        let ev = SessionEvent {
            kind: event::SESSION_END_SEED.into(),
            seq,
            time: now_ms(),
            data: json!({}),
            source_event_seqs: None,
            surface_op: None,
            ignorable: None,
        };
        s.events.push(ev);
    }
    Ok(s)
}

/// What an agent needs to continue a session: the last turn and its end,
/// the request header in force, and the inbox splices after the seed (with
/// their seqs, `spliceSeqs`, so a bad one can be named).
fn resume_summary(session: &Session) -> Value {
    let events = &session.events;
    let last = |kind: &str| events.iter().rev().find(|e| e.kind == kind);
    let seed_len = session.header.seed_length.unwrap_or(0);
    let logged: Vec<&SessionEvent> = events
        .iter()
        .filter(|e| e.seq >= seed_len && e.kind == event::INBOX_SPLICED)
        .collect();
    let splices: Vec<&Value> = logged.iter().map(|e| &e.data).collect();
    let splice_seqs: Vec<u64> = logged.iter().map(|e| e.seq).collect();
    json!({
        "header": session.header,
        "seq": events.len(),
        "lastTurn": last(event::TURN_START).map_or(json!(0), |e| e.data["turn"].clone()),
        "lastEnd": last(event::TURN_END).map_or(Value::Null, |e| e.data["reason"].clone()),
        "requestHeader": last(event::REQUEST_HEADER).map_or(Value::Null, |e| canonical_header(&e.data["header"])),
        "requestContext": session.request_context,
        "splices": splices,
        "spliceSeqs": splice_seqs,
    })
}

async fn handle(ctx: Context, store: Store, req: Request) -> Result<Reply> {
    match req.method.as_str() {
        sessions::CREATE => {
            let id = req.params["id"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("session-{}", new_id()));
            if store.borrow().contains_key(&id) {
                return Err(Error::new(
                    code::SESSION_ALREADY_EXISTS,
                    format!("session `{id}` is already live"),
                ));
            }
            let mut header: SessionHeader = match req.params.get("header") {
                Some(h) if !h.is_null() => {
                    let header = serde_json::from_value(h.clone())?;
                    shape::session_header(&id, &header)
                        .map_err(|why| Error::new(codes::INVALID_PAYLOAD, why))?;
                    header
                }
                _ => SessionHeader {
                    id: id.clone(),
                    ..SessionHeader::default()
                },
            };
            if header.created_at == 0 {
                header.created_at = now_ms();
            }
            if let Some(cwd) = req.params["meta"]["cwd"].as_str() {
                header.cwd = Some(cwd.to_owned());
            }
            if header.cwd.as_deref().is_some_and(|c| !c.starts_with('/')) {
                return Err(Error::new(
                    codes::INVALID_PAYLOAD,
                    "session cwd must be absolute",
                ));
            }
            let seed: Option<Vec<SessionEvent>> = match req.params.get("seed") {
                Some(s) if !s.is_null() => Some(serde_json::from_value(s.clone())?),
                _ => None,
            };
            // `seedStored`: the seed came from persistence, so only what
            // follows it (the end-seed marker) still needs to be written.
            let resumed = req.params["seedStored"] == json!(true);
            let stored = if resumed {
                seed.as_ref().map_or(0, Vec::len)
            } else {
                0
            };
            let session = seeded(header.clone(), seed)?;
            let seq = session.events.len();
            let fresh = session.events[stored.min(seq)..].to_vec();
            store.borrow_mut().insert(id.clone(), session);
            ctx.emit(
                bus::SESSION_CREATED,
                json!({"header": header, "stored": stored, "resumed": resumed, "events": fresh}),
            )?;
            Reply::json(json!({"id": id, "header": header, "seq": seq}))
        }
        sessions::APPEND => {
            let id = id_of(&req)?;
            let args: AppendArgs = req.params_as()?;
            let ev = {
                let mut s = store.borrow_mut();
                let session = s.get_mut(&id).ok_or_else(|| not_found(&id))?;
                session.append(args)?
            };
            ctx.emit(bus::SESSION_EVENT, json!({"sessionId": id, "event": ev}))?;
            Reply::json(ev)
        }
        sessions::APPEND_MANY => {
            let id = id_of(&req)?;
            let batch: Vec<AppendArgs> = serde_json::from_value(req.params["events"].clone())?;
            let mut appended = Vec::with_capacity(batch.len());
            {
                let mut s = store.borrow_mut();
                let session = s.get_mut(&id).ok_or_else(|| not_found(&id))?;
                for args in batch {
                    appended.push(session.append(args)?);
                }
            }
            let seqs: Vec<u64> = appended.iter().map(|e| e.seq).collect();
            for ev in appended {
                ctx.emit(bus::SESSION_EVENT, json!({"sessionId": id, "event": ev}))?;
            }
            Reply::json(seqs)
        }
        sessions::EVENTS => {
            let id = id_of(&req)?;
            let from = req.params["from"].as_u64().unwrap_or(0) as usize;
            let s = store.borrow();
            let session = s.get(&id).ok_or_else(|| not_found(&id))?;
            Reply::json(&session.events[from.min(session.events.len())..])
        }
        sessions::DERIVE => {
            let id = id_of(&req)?;
            let s = store.borrow();
            let session = s.get(&id).ok_or_else(|| not_found(&id))?;
            Reply::json(derive_messages(&session.events))
        }
        sessions::SURFACE => {
            // Surface events from `from` on, and whether a replace occurred
            // (a consumer deriving incrementally must then derive afresh).
            let id = id_of(&req)?;
            let from = req.params["from"].as_u64().unwrap_or(0) as usize;
            let s = store.borrow();
            let session = s.get(&id).ok_or_else(|| not_found(&id))?;
            let tail = &session.events[from.min(session.events.len())..];
            let surface: Vec<&SessionEvent> =
                tail.iter().filter(|e| e.surface_op.is_some()).collect();
            let replaced = surface
                .iter()
                .any(|e| e.surface_op != Some(json!("append")));
            Reply::json(
                json!({"events": surface, "replaced": replaced, "seq": session.events.len()}),
            )
        }
        sessions::REQUEST_CONTEXT => {
            let id = id_of(&req)?;
            let s = store.borrow();
            let session = s.get(&id).ok_or_else(|| not_found(&id))?;
            Reply::json(&session.request_context)
        }
        sessions::HEADER => {
            let id = id_of(&req)?;
            let s = store.borrow();
            let session = s.get(&id).ok_or_else(|| not_found(&id))?;
            Reply::json(json!({"header": session.header, "seq": session.events.len()}))
        }
        sessions::LIST => {
            let s = store.borrow();
            let mut ids: Vec<&String> = s.keys().collect();
            ids.sort();
            Reply::json(ids)
        }
        sessions::FLUSH => {
            let id = id_of(&req)?;
            if !store.borrow().contains_key(&id) {
                return Err(not_found(&id));
            }
            // Whether any listener (a persistence backend) took part.
            let participated = ctx
                .parallel(bus::SESSION_FLUSH, json!({"sessionId": id}))
                .await?;
            Reply::json(participated)
        }
        sessions::RESUME => {
            // Makes a stored session live (loading it from persistence here,
            // so the log does not travel through the caller) and returns
            // what an agent needs to continue it.
            let id = id_of(&req)?;
            if !store.borrow().contains_key(&id) {
                let stored = ctx
                    .service(service::SESSION_PERSISTENCE)
                    .call(session_persistence::LOAD, json!({"id": id}))
                    .await
                    .map_err(|e| {
                        if e.code == codes::SERVICE_UNAVAILABLE {
                            Error::new(
                                "NO_PERSISTENCE",
                                "cannot resume: session persistence is not configured",
                            )
                        } else {
                            e
                        }
                    })?;
                let header: SessionHeader = serde_json::from_value(stored["header"].clone())?;
                shape::session_header(&id, &header)
                    .map_err(|why| Error::new(code::SESSION_CORRUPT, why))?;
                let seed: Vec<SessionEvent> = serde_json::from_value(stored["events"].clone())?;
                let stored_len = seed.len();
                let session = seeded(header.clone(), Some(seed))?;
                let fresh = session.events[stored_len.min(session.events.len())..].to_vec();
                store.borrow_mut().insert(id.clone(), session);
                ctx.emit(
                    bus::SESSION_CREATED,
                    json!({"header": header, "stored": stored_len, "resumed": true, "events": fresh}),
                )?;
            }
            let s = store.borrow();
            let session = s.get(&id).ok_or_else(|| not_found(&id))?;
            Reply::json(resume_summary(session))
        }
        sessions::FORK => {
            let id = id_of(&req)?;
            let child = req.params["childId"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("session-{}", new_id()));
            let (seed, cwd) = {
                let s = store.borrow();
                if s.contains_key(&child) {
                    return Err(Error::new(
                        code::SESSION_ALREADY_EXISTS,
                        format!("session `{child}` is already live"),
                    ));
                }
                let session = s.get(&id).ok_or_else(|| not_found(&id))?;
                let len = session.events.len() as u64;
                let boundary = match req.params.get("boundary").filter(|b| !b.is_null()) {
                    None => len.saturating_sub(1),
                    Some(b) => match b.as_u64() {
                        Some(b) if b < len && session.events[b as usize].seq == b => b,
                        _ => {
                            return Err(Error::new(
                                "INVALID_BOUNDARY",
                                format!(
                                    "fork boundary {b} must be a non-negative safe integer below the log length {len}"
                                ),
                            ))
                        }
                    },
                };
                let seed: Vec<SessionEvent> = if len == 0 {
                    Vec::new()
                } else {
                    session.events[..=boundary as usize].to_vec()
                };
                let last_frame = seed
                    .iter()
                    .rev()
                    .find(|e| e.kind == event::TURN_START || e.kind == event::TURN_END);
                if last_frame.is_some_and(|e| e.kind == event::TURN_START) {
                    return Err(Error::new(
                        code::OPEN_TURN,
                        "cannot fork inside an open turn",
                    ));
                }
                (seed, session.header.cwd.clone())
            };
            // The child's lineage: the source's cwd, the source as parent,
            // and the seed's length (nothing else of the source's header).
            let header = SessionHeader {
                id: child.clone(),
                created_at: now_ms(),
                cwd,
                parent_session: Some(id),
                seed_length: Some(seed.len() as u64),
                ..SessionHeader::default()
            };
            let session = seeded(header.clone(), Some(seed))?;
            let events = session.events.clone();
            store.borrow_mut().insert(child.clone(), session);
            ctx.emit(
                bus::SESSION_CREATED,
                json!({"header": header, "events": events}),
            )?;
            Reply::json(json!({"id": child, "header": header}))
        }
        sessions::CLOSE => {
            let id = id_of(&req)?;
            if store.borrow_mut().remove(&id).is_some() {
                ctx.emit(bus::SESSION_DISPOSED, json!({"sessionId": id}))?;
            }
            Ok(Value::Null.into())
        }
        _ => Err(req.unknown_method()),
    }
}

struct SessionPlugin;

impl Plugin for SessionPlugin {
    const NAME: &'static str = "session";
    const DESCRIPTION: &'static str = "the append-only session log (service `sessions`)";
    const PROVIDES: &'static [&'static str] = &[service::SESSIONS];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        let store: Store = Rc::default();
        let ctx2 = ctx.clone();
        ctx.provide(service::SESSIONS, move |req| {
            handle(ctx2.clone(), store.clone(), req)
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(SessionPlugin);
