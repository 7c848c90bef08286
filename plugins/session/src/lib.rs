//! `session`: the append-only session log (reference dsh-core §2).
//!
//! The params and replies of service `sessions` are the types of
//! `dsh_sdk::api::sessions`, which callers use too; `handle` parses each
//! request into its method's params and hands it to one function per
//! method.

mod framing;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use dsh_sdk::api::session_persistence::SessionPersistence;
use dsh_sdk::api::sessions::{
    AppendManyParams, AppendParams, Boundary, CreateParams, CreateReply, ForkParams, ForkReply,
    FromParams, HeaderAt, HeaderReply, IdParams, NewEvent, ResumeParams, ResumeReply,
    SessionAppended, SessionCreated, SessionRef, SurfaceReply,
};
use dsh_sdk::names::{bus, code, service, sessions};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::records::{EndSeed, RequestHeader, RequestHeaderRecord, TurnEnd, TurnStart};
use dsh_sdk::vocab::surface::{Plan, Surface};
use dsh_sdk::vocab::{derive_messages, event, shape, SessionEvent, SessionHeader, SurfaceOp};
use dsh_sdk::{new_id, now_ms};
use framing::{Advance, Framing};
// Open on purpose: a `request/context` record and the inbox splices are
// handed back as logged (their readers judge them), and `close` answers
// null.
use serde_json::Value;

struct Session {
    header: SessionHeader,
    events: Vec<SessionEvent>,
    framing: Framing,
    surface: Surface,
    /// The latest `request/context` record (`session.requestContext()`),
    /// folded as each event enters the log and answered as logged.
    request_context: Option<Value>,
    /// Made but not announced yet (`unpublished`): what its
    /// `session/created` will say about what is stored already.
    unpublished: Option<Unpublished>,
}

/// The parts of a `session/created` that are fixed when an unpublished
/// session is made; its events are the log from `stored` on as it stands
/// when published.
struct Unpublished {
    stored: Option<u64>,
    resumed: Option<bool>,
    /// This making of the id, so its creator's cleanup never drops a
    /// later session of the same id.
    token: String,
    /// The plugin making it: the only one that may `resume` it meanwhile.
    creator: u64,
    /// Its creator's going drops it; taken back once it is settled.
    cleanup: Option<dsh_sdk::CallerCleanup>,
}

impl Unpublished {
    /// It is settled (published or taken back): its creator's going no
    /// longer concerns it.
    fn settle(mut self) {
        if let Some(cleanup) = self.cleanup.take() {
            cleanup.cancel();
        }
    }
}

fn invalid(message: String) -> Error {
    Error::new("INVALID_APPEND", message)
}

fn not_found(id: &str) -> Error {
    Error::new(code::SESSION_NOT_FOUND, format!("no live session `{id}`"))
}

/// Tells a store that loaded unpublished session `id` (for a resume) to
/// let go of its log: the creation was rolled back.
fn discarded(ctx: &Context, id: String) {
    let _ = ctx.emit(bus::SESSION_DISCARDED, SessionRef { session_id: id });
}

fn being_created(id: &str) -> Error {
    Error::new(
        code::SESSION_ALREADY_EXISTS,
        format!("session `{id}` is being created"),
    )
}

fn already_live(id: &str) -> Error {
    Error::new(
        code::SESSION_ALREADY_EXISTS,
        format!("session `{id}` is already live"),
    )
}

/// A session id for a caller that gave none.
fn fresh_session_id() -> String {
    format!("session-{}", new_id())
}

/// A seq from the wire as an index into a log (past the end when it does
/// not fit).
fn index(seq: u64) -> usize {
    usize::try_from(seq).unwrap_or(usize::MAX)
}

/// The checks every event entering a log shares (append, seed, load): a
/// known or ignorable type, surface metadata exactly on surface types,
/// lossless data, no unsupported request header. `seed` is the index of a
/// seed event, which the original names in these messages.
fn check_entry(e: &SessionEvent, seed: Option<usize>) -> Result<(), String> {
    let prefix = || seed.map_or_else(String::new, |i| format!("seed event {i}: "));
    if let Some(why) = event::refuse_unknown(&e.kind, e.ignorable) {
        return Err(format!("{}{why}", prefix()));
    }
    let surface = event::SURFACE.contains(&e.kind.as_str());
    if surface && e.surface_op.is_none() {
        return Err(format!("{}`{}` needs a surfaceOp", prefix(), e.kind));
    }
    if !surface && (e.surface_op.is_some() || e.source_event_seqs.is_some()) {
        return Err(format!(
            "{}`{}` may not carry surface metadata",
            prefix(),
            e.kind
        ));
    }
    if !e.data.is_lossless() {
        return Err(format!(
            "session event \"{}\" carries non-JSON-serializable data",
            e.kind
        ));
    }
    if e.kind != event::REQUEST_HEADER {
        return Ok(());
    }
    let location = match seed {
        Some(i) => format!("seed event at index {i}"),
        None => format!("session event \"{}\"", e.kind),
    };
    match shape::unsupported_request_header(&e.kind, &e.data, &location) {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// The header of a `request/header` event (read whole: a record that does
/// not read is `SESSION_CORRUPT`, naming the seq and the field).
fn logged_header(e: &SessionEvent) -> Result<RequestHeader> {
    Ok(e.data_as::<RequestHeaderRecord>()?.header)
}

/// Reads the records the log hands back later (a `request/header`'s
/// header, for `surface` and `resume`) as `e` enters the log, so that a
/// malformed one is refused at the door rather than failing every read.
/// Runs after the original's shape checks, which keep their wording.
fn check_record(e: &SessionEvent) -> Result<(), String> {
    if e.kind == event::REQUEST_HEADER {
        logged_header(e).map_err(|err| err.message)?;
    }
    Ok(())
}

impl Session {
    fn append(&mut self, new: NewEvent) -> Result<SessionEvent> {
        let seq = self.events.len() as u64;
        let ev = SessionEvent {
            kind: new.kind,
            seq,
            time: now_ms(),
            data: new.data.into(),
            source_event_seqs: new.source_event_seqs,
            surface_op: new.surface_op,
            ignorable: new.ignorable.filter(|i| *i),
        };
        check_entry(&ev, None).map_err(invalid)?;
        if let Some(src) = &ev.source_event_seqs {
            if src.iter().any(|s| *s >= seq) {
                return Err(invalid("sourceEventSeqs must precede the event".into()));
            }
        }
        check_record(&ev).map_err(invalid)?;
        let plan = self.surface.plan(&ev, &self.events).map_err(invalid)?;
        let advance = self.framing.check(&ev).map_err(invalid)?;
        self.commit(ev.clone(), plan, advance);
        Ok(ev)
    }

    /// Takes a checked event into the log and every fold over it.
    fn commit(&mut self, ev: SessionEvent, plan: Plan, advance: Advance) {
        self.framing.apply(advance);
        self.surface.apply(plan);
        if ev.kind == event::REQUEST_CONTEXT {
            self.request_context = Some(ev.data.clone().into());
        }
        self.events.push(ev);
    }

    /// Checks seed event `i` like an append (plus the message shapes of a
    /// stored log) and takes it in.
    fn take_seed(&mut self, i: usize, e: SessionEvent) -> Result<()> {
        if e.seq != i as u64 {
            return Err(invalid(format!("seed event {i} has seq {}", e.seq)));
        }
        check_entry(&e, Some(i)).map_err(invalid)?;
        shape::seed_event_shape(&e, i).map_err(invalid)?;
        let refused = |why: String| invalid(format!("invalid seed event at index {i}: {why}"));
        check_record(&e).map_err(refused)?;
        let plan = self.surface.plan(&e, &self.events).map_err(refused)?;
        let advance = Advance::of(&e).map_err(refused)?;
        self.commit(e, plan, advance);
        Ok(())
    }

    /// The `surface` reply: surface events from `from` on.
    fn surface_from(&self, from: u64) -> Result<SurfaceReply<&SessionEvent>> {
        let tail = &self.events[index(from).min(self.events.len())..];
        let events: Vec<&SessionEvent> = tail.iter().filter(|e| e.surface_op.is_some()).collect();
        // Every logged op passed the surface rules, so it is one or the
        // other.
        let replaced = events
            .iter()
            .any(|e| SurfaceOp::is_replace(e.surface_op.as_ref()));
        let request_header = tail
            .iter()
            .rev()
            .find(|e| e.kind == event::REQUEST_HEADER)
            .map(|e| -> Result<HeaderAt> {
                Ok(HeaderAt {
                    seq: e.seq,
                    header: serde_json::to_value(logged_header(e)?)?,
                })
            })
            .transpose()?;
        Ok(SurfaceReply {
            events,
            replaced,
            seq: self.events.len() as u64,
            request_header,
        })
    }

    /// What an agent needs to continue the session: the last turn and its
    /// end, the request header in force, and the inbox splices after the
    /// seed (with their seqs, so a bad one can be named).
    ///
    /// The records were read as they entered the log, so reading them
    /// again fails only on a log this plugin did not check
    /// (`SESSION_CORRUPT`, naming the seq and the field).
    fn resume_summary(&self) -> Result<ResumeReply<&Value>> {
        let events = &self.events;
        let last = |kind: &str| events.iter().rev().find(|e| e.kind == kind);
        // The seed a session was forked with (its `seedLength` events) is
        // its source's history, splices included; without one, every
        // splice is this session's own.
        let after_seed = |e: &SessionEvent| self.header.seed_length.is_none_or(|n| e.seq >= n);
        let logged: Vec<&SessionEvent> = events
            .iter()
            .filter(|e| e.kind == event::INBOX_SPLICED && after_seed(e))
            .collect();
        // Turn 0 is "no turn yet": the first turn is 1.
        let last_turn = match last(event::TURN_START) {
            Some(e) => e.data_as::<TurnStart>()?.turn,
            None => 0,
        };
        let last_end = match last(event::TURN_END) {
            Some(e) => Some(serde_json::to_value(e.data_as::<TurnEnd>()?.reason)?),
            None => None,
        };
        let request_header = match last(event::REQUEST_HEADER) {
            Some(e) => Some(serde_json::to_value(logged_header(e)?.canonical())?),
            None => None,
        };
        Ok(ResumeReply {
            header: self.header.clone(),
            seq: events.len() as u64,
            last_turn,
            last_end,
            request_header,
            request_context: self.request_context.clone(),
            // As logged: the agent reads each and names a bad one by seq.
            splices: logged.iter().map(|e| e.data.value()).collect(),
            splice_seqs: logged.iter().map(|e| e.seq).collect(),
            unpublished: self.unpublished.is_some(),
        })
    }

    /// The seed of a fork at `boundary` (the last event when `None`), and
    /// the source's cwd.
    fn fork_seed(&self, boundary: Option<Boundary>) -> Result<Vec<SessionEvent>> {
        let len = self.events.len() as u64;
        let boundary = match boundary {
            None => len.saturating_sub(1),
            Some(b) => match b.seq() {
                Some(seq) if seq < len && self.events[index(seq)].seq == seq => seq,
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
            self.events[..=index(boundary)].to_vec()
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
        Ok(seed)
    }
}

/// A session built from `seed` (replay, fork, resume), each seed event
/// checked like an append. With a seed (even an empty one) the log ends in
/// `session/end-seed`, appended unless the seed already ends in one; a
/// fresh session (`None`) starts empty (reference §2.8).
fn seeded(header: SessionHeader, seed: Option<Vec<SessionEvent>>) -> Result<Session> {
    let mut s = Session {
        header,
        events: Vec::new(),
        framing: Framing::default(),
        surface: Surface::default(),
        request_context: None,
        unpublished: None,
    };
    let Some(seed) = seed else {
        return Ok(s);
    };
    s.events.reserve(seed.len() + 1);
    for (i, e) in seed.into_iter().enumerate() {
        s.take_seed(i, e)?;
    }
    if s.events
        .last()
        .is_none_or(|e| e.kind != event::SESSION_END_SEED)
    {
        let seq = s.events.len() as u64;
        s.events.push(SessionEvent {
            kind: event::SESSION_END_SEED.into(),
            seq,
            time: now_ms(),
            data: serde_json::to_value(EndSeed::default())?.into(),
            source_event_seqs: None,
            surface_op: None,
            ignorable: None,
        });
    }
    Ok(s)
}

/// The provider of `sessions`: every live session, by id. Sessions are not
/// owned by the fiber that created them (see the README).
struct Log {
    ctx: Context,
    live: Rc<RefCell<HashMap<String, Session>>>,
}

/// Dispatches a `sessions` request to its method, with its params parsed
/// into the method's type (`INVALID_PAYLOAD` naming the field otherwise).
async fn handle(log: Rc<Log>, req: Request) -> Result<Reply> {
    match req.method.as_str() {
        sessions::CREATE => log.create(&req, req.params_as()?),
        sessions::APPEND => log.append(req.params_as()?),
        sessions::APPEND_MANY => log.append_many(req.params_as()?),
        sessions::EVENTS => log.events(req.params_as()?),
        sessions::DERIVE => log.derive(req.params_as()?),
        sessions::SURFACE => log.surface(req.params_as()?),
        sessions::REQUEST_CONTEXT => log.request_context(req.params_as()?),
        sessions::HEADER => log.header(req.params_as()?),
        sessions::LIST => log.list(),
        sessions::FLUSH => log.flush(req.params_as()?).await,
        sessions::RESUME => log.resume(&req, req.params_as()?).await,
        sessions::FORK => log.fork(&req, req.params_as()?),
        sessions::CLOSE => log.close(req.params_as()?).await,
        sessions::PUBLISH => log.publish(req.params_as()?),
        sessions::DISCARD => log.discard(req.params_as()?).await,
        _ => Err(req.unknown_method()),
    }
}

impl Log {
    /// Runs `f` over the live session `id`.
    fn with<T>(&self, id: &str, f: impl FnOnce(&Session) -> T) -> Result<T> {
        let live = self.live.borrow();
        live.get(id).map(f).ok_or_else(|| not_found(id))
    }

    /// Runs `f` over the live session `id`, mutably.
    fn with_mut<T>(&self, id: &str, f: impl FnOnce(&mut Session) -> Result<T>) -> Result<T> {
        let mut live = self.live.borrow_mut();
        live.get_mut(id).map_or_else(|| Err(not_found(id)), f)
    }

    fn is_live(&self, id: &str) -> bool {
        self.live.borrow().contains_key(id)
    }

    /// Takes a new session in and tells persistence about it, or, made
    /// `unpublished` by `req`, keeps it quiet until `publish`; it is then
    /// dropped if `req`'s plugin goes first (its creation never finished).
    fn open(
        &self,
        req: &Request,
        id: String,
        mut session: Session,
        created: SessionCreated,
        unpublished: bool,
    ) -> Result<()> {
        if !unpublished {
            self.live.borrow_mut().insert(id, session);
            return self.ctx.emit(bus::SESSION_CREATED, created);
        }
        let token = new_id();
        let live = Rc::downgrade(&self.live);
        let (key, mine, ctx) = (id.clone(), token.clone(), self.ctx.clone());
        let cleanup = req.on_caller_gone(move || {
            let Some(live) = live.upgrade() else { return };
            let same = live
                .borrow()
                .get(&key)
                .and_then(|s| s.unpublished.as_ref())
                .is_some_and(|u| u.token == mine);
            if same {
                live.borrow_mut().remove(&key);
                discarded(&ctx, key);
            }
        });
        session.unpublished = Some(Unpublished {
            stored: created.stored,
            resumed: created.resumed,
            token,
            creator: req.caller,
            cleanup: Some(cleanup),
        });
        self.live.borrow_mut().insert(id, session);
        Ok(())
    }

    /// `publish`: announces an unpublished session with what it holds now.
    fn publish(&self, p: IdParams) -> Result<Reply> {
        let created = self.with_mut(&p.id, |s| {
            Ok(s.unpublished.take().map(|u| {
                let created = SessionCreated {
                    header: s.header.clone(),
                    stored: u.stored,
                    resumed: u.resumed,
                    events: s.events[index(u.stored.unwrap_or(0)).min(s.events.len())..].to_vec(),
                };
                u.settle();
                created
            }))
        })?;
        let Some(created) = created else {
            return Reply::json(false);
        };
        self.ctx.emit(bus::SESSION_CREATED, created)?;
        Reply::json(true)
    }

    /// `discard`: an unpublished session goes without a trace; a published
    /// one is closed (its `session/disposed` pairs its `session/created`).
    async fn discard(&self, p: IdParams) -> Result<Reply> {
        let unpublished = self
            .live
            .borrow()
            .get(&p.id)
            .map(|s| s.unpublished.is_some());
        match unpublished {
            Some(true) => {
                let gone = self.live.borrow_mut().remove(&p.id);
                if let Some(u) = gone.and_then(|s| s.unpublished) {
                    u.settle();
                }
                discarded(&self.ctx, p.id);
                Ok(Value::Null.into())
            }
            Some(false) => self.close(p).await,
            None => Ok(Value::Null.into()),
        }
    }

    fn create(&self, req: &Request, p: CreateParams) -> Result<Reply> {
        let id = p.id.unwrap_or_else(fresh_session_id);
        if self.is_live(&id) {
            return Err(already_live(&id));
        }
        let mut header = match p.header {
            Some(header) => {
                shape::session_header(&id, &header)
                    .map_err(|why| Error::new(codes::INVALID_PAYLOAD, why))?;
                header
            }
            None => SessionHeader {
                id: id.clone(),
                ..SessionHeader::default()
            },
        };
        if header.created_at == 0 {
            header.created_at = now_ms();
        }
        if let Some(cwd) = p.meta.and_then(|m| m.cwd) {
            header.cwd = Some(cwd);
        }
        if header.cwd.as_deref().is_some_and(|c| !c.starts_with('/')) {
            return Err(Error::new(
                codes::INVALID_PAYLOAD,
                "session cwd must be absolute",
            ));
        }
        // `seedStored`: the seed came from persistence, so only what
        // follows it (the end-seed marker) still needs to be written.
        let resumed = p.seed_stored;
        let stored = if resumed {
            p.seed.as_ref().map_or(0, Vec::len)
        } else {
            0
        };
        let session = seeded(header.clone(), p.seed)?;
        let seq = session.events.len();
        let events = session.events[stored.min(seq)..].to_vec();
        let created = SessionCreated {
            header: header.clone(),
            stored: Some(stored as u64),
            resumed: Some(resumed),
            events,
        };
        self.open(req, id.clone(), session, created, p.unpublished)?;
        Reply::json(CreateReply {
            id,
            header,
            seq: seq as u64,
        })
    }

    fn append(&self, p: AppendParams) -> Result<Reply> {
        let AppendParams { id, event } = p;
        let (ev, quiet) =
            self.with_mut(&id, |s| Ok((s.append(event)?, s.unpublished.is_some())))?;
        if quiet {
            // Announced with the session, in its `session/created`.
            return Reply::json(ev);
        }
        self.ctx.emit(
            bus::SESSION_EVENT,
            SessionAppended {
                session_id: id,
                event: &ev,
            },
        )?;
        Reply::json(ev)
    }

    fn append_many(&self, p: AppendManyParams) -> Result<Reply> {
        let AppendManyParams {
            id,
            events,
            expect_seq,
        } = p;
        // Events before an invalid one stay appended, and are announced
        // like any other, so persistence never misses one.
        let mut appended = Vec::with_capacity(events.len());
        let mut quiet = false;
        let outcome = self.with_mut(&id, |s| {
            quiet = s.unpublished.is_some();
            let len = s.events.len() as u64;
            if let Some(expected) = expect_seq.filter(|e| *e != len) {
                return Err(Error::new(
                    code::APPEND_CONFLICT,
                    format!(
                        "appendMany expected the log of {id} at seq {expected}, it is at {len}"
                    ),
                ));
            }
            for (i, e) in events.into_iter().enumerate() {
                let ev = s.append(e).map_err(|e| {
                    Error::new(
                        e.code.clone(),
                        format!(
                            "appendMany event {i}: {} ({i} earlier events were appended)",
                            e.message
                        ),
                    )
                })?;
                appended.push(ev);
            }
            Ok(())
        });
        let seqs: Vec<u64> = appended.iter().map(|e| e.seq).collect();
        // An unpublished session's events are announced with it.
        for event in appended.into_iter().filter(|_| !quiet) {
            self.ctx.emit(
                bus::SESSION_EVENT,
                SessionAppended {
                    session_id: id.clone(),
                    event,
                },
            )?;
        }
        outcome?;
        Reply::json(seqs)
    }

    fn events(&self, p: FromParams) -> Result<Reply> {
        self.with(&p.id, |s| {
            Reply::json(&s.events[index(p.from).min(s.events.len())..])
        })?
    }

    fn derive(&self, p: IdParams) -> Result<Reply> {
        self.with(&p.id, |s| Reply::json(derive_messages(&s.events)))?
    }

    fn surface(&self, p: FromParams) -> Result<Reply> {
        self.with(&p.id, |s| Reply::json(s.surface_from(p.from)?))?
    }

    fn request_context(&self, p: IdParams) -> Result<Reply> {
        self.with(&p.id, |s| Reply::json(&s.request_context))?
    }

    fn header(&self, p: IdParams) -> Result<Reply> {
        self.with(&p.id, |s| {
            Reply::json(HeaderReply {
                header: s.header.clone(),
                seq: s.events.len() as u64,
            })
        })?
    }

    fn list(&self) -> Result<Reply> {
        let live = self.live.borrow();
        let mut ids: Vec<&String> = live
            .iter()
            .filter(|(_, s)| s.unpublished.is_none())
            .map(|(id, _)| id)
            .collect();
        ids.sort();
        Reply::json(ids)
    }

    /// Answers whether any `session/flush` listener (a persistence backend)
    /// took part.
    async fn flush(&self, p: IdParams) -> Result<Reply> {
        let unpublished = self.with(&p.id, |s| s.unpublished.is_some())?;
        if unpublished {
            // Persistence has not heard of it yet: nothing to make durable.
            return Reply::json(false);
        }
        let participated = self
            .ctx
            .parallel(bus::SESSION_FLUSH, SessionRef { session_id: p.id })
            .await?;
        Reply::json(participated)
    }

    /// Makes a stored session live (loading it from persistence here, so
    /// the log does not travel through the caller) and returns what an
    /// agent needs to continue it.
    async fn resume(&self, req: &Request, p: ResumeParams) -> Result<Reply> {
        let id = p.id;
        let creator = self
            .live
            .borrow()
            .get(&id)
            .and_then(|s| s.unpublished.as_ref().map(|u| u.creator));
        if creator.is_some_and(|c| c != req.caller) {
            return Err(being_created(&id));
        }
        if !self.is_live(&id) {
            self.load(req, &id, p.unpublished).await?;
        }
        self.with(&id, |s| Reply::json(s.resume_summary()?))?
    }

    /// Loads stored session `id` through `sessionPersistence` and makes it
    /// live; a stored header that does not fit is `SESSION_CORRUPT`.
    async fn load(&self, req: &Request, id: &str, unpublished: bool) -> Result<()> {
        let stored = SessionPersistence::new(&self.ctx)
            .load(id)
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
        let header = stored.header;
        shape::session_header(id, &header).map_err(|why| Error::new(code::SESSION_CORRUPT, why))?;
        let seed = stored.events;
        let stored_len = seed.len();
        let session = seeded(header.clone(), Some(seed))?;
        let events = session.events[stored_len.min(session.events.len())..].to_vec();
        let created = SessionCreated {
            header,
            stored: Some(stored_len as u64),
            resumed: Some(true),
            events,
        };
        if self.is_live(id) {
            // Made live by another call while this one loaded it.
            return Err(already_live(id));
        }
        self.open(req, id.to_owned(), session, created, unpublished)
    }

    fn fork(&self, req: &Request, p: ForkParams) -> Result<Reply> {
        let child = p.child_id.unwrap_or_else(fresh_session_id);
        // An existing child id wins over a missing source and a bad
        // boundary.
        if self.is_live(&child) {
            return Err(already_live(&child));
        }
        let (seed, cwd) = self.with(&p.id, |s| {
            s.fork_seed(p.boundary)
                .map(|seed| (seed, s.header.cwd.clone()))
        })??;
        // The child's lineage: the source's cwd, the source as parent,
        // the seed's length and, for a delegated child, its origin and
        // depth (nothing else of the source's header).
        let header = SessionHeader {
            id: child.clone(),
            created_at: now_ms(),
            cwd,
            parent_session: Some(p.id),
            seed_length: Some(seed.len() as u64),
            origin: p.origin.map(|o| o.as_str().to_owned()),
            delegation_depth: p.delegation_depth,
            ..SessionHeader::default()
        };
        let session = seeded(header.clone(), Some(seed))?;
        let created = SessionCreated {
            header: header.clone(),
            stored: None,
            resumed: None,
            events: session.events.clone(),
        };
        self.open(req, child.clone(), session, created, p.unpublished)?;
        Reply::json(ForkReply { id: child, header })
    }

    /// Detaches a live session and answers once every `session/disposed`
    /// listener has: the store's final write is durable and its writer lock
    /// released, so another host may resume or remove the session at once.
    /// A final write that failed is the caller's error.
    async fn close(&self, p: IdParams) -> Result<Reply> {
        // An unpublished session goes quietly: nobody heard it was made.
        let removed = self.live.borrow_mut().remove(&p.id);
        let announced = match removed.map(|s| s.unpublished) {
            Some(Some(u)) => {
                u.settle();
                discarded(&self.ctx, p.id.clone());
                false
            }
            Some(None) => true,
            None => false,
        };
        if announced {
            self.ctx
                .parallel(bus::SESSION_DISPOSED, SessionRef { session_id: p.id })
                .await?;
        }
        Ok(Value::Null.into())
    }
}

struct SessionPlugin;

impl Plugin for SessionPlugin {
    const NAME: &'static str = "session";
    const DESCRIPTION: &'static str = "the append-only session log (service `sessions`)";
    const PROVIDES: &'static [&'static str] = &[service::SESSIONS];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        let log = Rc::new(Log {
            ctx: ctx.clone(),
            live: Rc::default(),
        });
        ctx.provide(service::SESSIONS, move |req| handle(log.clone(), req));
        Ok(())
    }
}

dsh_sdk::export_plugin!(SessionPlugin);
