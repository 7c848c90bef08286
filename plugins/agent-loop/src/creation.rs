//! The creation transaction: an agent and its session are made first
//! without a word to anyone, so whoever creates the agent can set up its
//! scope (tools, prompt sections, restrictions, all scoped to its id)
//! before anything can see it; then they are published in one order:
//! `session/created`, `agent/created`, `agent/session-start`.
//!
//! `create`/`resume` without `setup` run both halves in one call. With
//! `setup` the reply names a pending agent, and the creator finishes with
//! `commit` or `abandon`. Until the commit the creation is rolled back,
//! announcing nothing, when the creator asks, when its plugin goes, when
//! it cancels the call that is creating, or when the agent loop itself
//! goes: the agent's scope closes (`agent/scope-closed`, so what its setup
//! registered goes too) and the session it made is discarded (its id free
//! again, nothing written). If the session was published just before a
//! rollback caught up with it, it is closed, so its `session/disposed`
//! pairs the `session/created`. Once committed, the creation's caller
//! owns the agent, and cancelling no longer affects it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use dsh_sdk::api::agent_loop::{AgentRef, CreateParams, ResumeParams, SessionSource, SessionStart};
use dsh_sdk::api::sessions::{ForkParams, ResumeParams as SessionResume, Sessions};
use dsh_sdk::names::{bus, code};
use dsh_sdk::new_id;
use dsh_sdk::prelude::*;
use dsh_sdk::CallerCleanup;

use crate::{new_session, Agent, Loop, MAX_SAFE_INTEGER};

/// An agent made and not announced yet.
pub(crate) struct Pending {
    agent: Agent,
    source: SessionSource,
    /// The session was made (or loaded) for this creation, so a rollback
    /// takes it back; a session live before it is left as it was.
    owns_session: bool,
    /// This creation of the id, so a stale cleanup never rolls back a
    /// later one.
    token: String,
    /// The creator's going rolls it back; taken back once it is settled.
    cleanup: Option<CallerCleanup>,
}

/// Rolls a creation back when dropped armed: the creating call was
/// cancelled (its future dropped) at one of its awaits.
struct Rollback {
    l: Loop,
    id: String,
    owns_session: bool,
    armed: bool,
}

impl Rollback {
    fn new(l: &Loop, id: &str, owns_session: bool) -> Rollback {
        Rollback {
            l: l.clone(),
            id: id.to_owned(),
            owns_session,
            armed: true,
        }
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Rollback {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (l, id, owns) = (
            self.l.clone(),
            std::mem::take(&mut self.id),
            self.owns_session,
        );
        self.l.ctx.spawn(async move {
            l.take_pending(&id);
            l.roll_back(&id, owns).await;
        });
    }
}

/// Ids marked while something is under way for them (a publication, a
/// resume), each with a flag for what came up meanwhile.
pub(crate) type Marks = Rc<RefCell<HashMap<String, bool>>>;

/// Holds a mark until dropped (done, or the call cancelled).
struct Marked {
    marks: Marks,
    id: String,
}

impl Marked {
    /// Marks `id` in `marks`; `None` when it is marked already.
    fn new(marks: &Marks, id: &str) -> Option<Marked> {
        let mut m = marks.borrow_mut();
        if m.contains_key(id) {
            return None;
        }
        m.insert(id.to_owned(), false);
        Some(Marked {
            marks: marks.clone(),
            id: id.to_owned(),
        })
    }

    /// Whether the flag was raised meanwhile.
    fn raised(&self) -> bool {
        self.marks.borrow().get(&self.id).copied().unwrap_or(false)
    }
}

impl Drop for Marked {
    fn drop(&mut self) {
        self.marks.borrow_mut().remove(&self.id);
    }
}

fn being_created(id: &str) -> Error {
    Error::new(
        code::SESSION_ALREADY_EXISTS,
        format!("agent \"{id}\" is being created"),
    )
}

fn not_pending(id: &str) -> Error {
    Error::new(
        code::NOT_PENDING,
        format!(
            "agent \"{id}\" has no creation under way (never prepared, committed already, or rolled back because its creator or the agent loop went away)"
        ),
    )
}

impl Loop {
    /// `create`: a new agent, published at once, or pending with `setup`.
    /// Published, it belongs to `req`'s caller.
    pub(crate) async fn create(&self, req: Option<&Request>, p: &CreateParams) -> Result<AgentRef> {
        check_max_tokens(p)?;
        let sessions = Sessions::new(&self.ctx);
        let (id, cwd) = match &p.fork {
            None => {
                let args = new_session::session_create(p);
                let cwd = args.meta.as_ref().and_then(|m| m.cwd.clone());
                (sessions.create(&args).await?.id, cwd)
            }
            Some(from) => {
                let meta = p.meta.clone().unwrap_or_default();
                let forked = sessions
                    .fork(&ForkParams {
                        id: from.session.clone(),
                        child_id: p.session_id.clone(),
                        boundary: from.boundary.clone(),
                        origin: meta.origin,
                        delegation_depth: meta.delegation_depth,
                        unpublished: true,
                    })
                    .await?;
                (forked.id, forked.header.cwd)
            }
        };
        let guard = Rollback::new(self, &id, true);
        // A fork goes on from its seed: its turns, its inbox, its route.
        let seeded = match p.fork {
            Some(_) => Some(
                sessions
                    .resume_with(&SessionResume {
                        id: id.clone(),
                        unpublished: true,
                    })
                    .await?,
            ),
            None => None,
        };
        let mut agent = self.build(&id, &p.agent_options, cwd, seeded.as_ref())?;
        let lineage = p.meta.as_ref().and_then(|m| m.parent_session.clone());
        agent.parent = lineage.or(p.fork.as_ref().map(|f| f.session.clone()));
        self.stage(req, &id, agent, SessionSource::Startup, true)
            .await?;
        guard.disarm();
        self.finish(req, &id, p.setup).await
    }

    /// `resume`: an agent on a stored session, published at once, or
    /// pending with `setup`; a live agent of that id is answered as is
    /// (refused with `setup`: it was announced long ago).
    pub(crate) async fn resume(&self, req: Option<&Request>, p: &ResumeParams) -> Result<AgentRef> {
        let id = p.session_id.clone();
        // A disposal under way finishes first; then the stored session is
        // resumed as any other.
        if self.is_disposing(&id) {
            self.dispose(&id).await;
        }
        if self.agents.borrow().contains_key(&id) {
            if p.setup {
                return Err(Error::new(
                    code::SESSION_ALREADY_EXISTS,
                    format!("agent \"{id}\" is live: there is no creation to set up"),
                ));
            }
            return Ok(AgentRef { agent: id });
        }
        if self.pending.borrow().contains_key(&id) {
            return Err(being_created(&id));
        }
        // One resume of an id at a time (marked before the first await).
        let Some(_resuming) = Marked::new(&self.resuming, &id) else {
            return Err(being_created(&id));
        };
        let summary = Sessions::new(&self.ctx)
            .resume_with(&SessionResume {
                id: id.clone(),
                unpublished: true,
            })
            .await?;
        let owns_session = summary.unpublished;
        let guard = Rollback::new(self, &id, owns_session);
        let cwd = summary.header.cwd.clone();
        let agent = self.build(&id, &p.agent_options, cwd, Some(&summary))?;
        self.stage(req, &id, agent, SessionSource::Resume, owns_session)
            .await?;
        guard.disarm();
        self.finish(req, &id, p.setup).await
    }

    /// The end of `create`/`resume`: with `setup` the pending agent is
    /// the reply, else it is published now.
    async fn finish(&self, req: Option<&Request>, id: &str, setup: bool) -> Result<AgentRef> {
        if setup {
            return Ok(AgentRef {
                agent: id.to_owned(),
            });
        }
        self.publish(req, id).await
    }

    /// Holds `agent` pending and opens its scope. The creation is rolled
    /// back if `req`'s caller goes before the commit.
    async fn stage(
        &self,
        req: Option<&Request>,
        id: &str,
        agent: Agent,
        source: SessionSource,
        owns_session: bool,
    ) -> Result<()> {
        let token = new_id();
        let cleanup = req.map(|req| {
            let (l, id, token) = (self.clone(), id.to_owned(), token.clone());
            req.on_caller_gone(move || {
                let mine = l
                    .pending
                    .borrow()
                    .get(&id)
                    .is_some_and(|p| p.token == token);
                if mine {
                    let l2 = l.clone();
                    l.ctx.spawn(async move {
                        let _ = l2.abandon(&id).await;
                    });
                }
            })
        });
        self.pending.borrow_mut().insert(
            id.to_owned(),
            Pending {
                agent,
                source,
                owns_session,
                token,
                cleanup,
            },
        );
        let scope = AgentRef {
            agent: id.to_owned(),
        };
        self.ctx.parallel(bus::AGENT_SCOPE_OPENED, scope).await?;
        Ok(())
    }

    /// `commit`: publishes pending agent `id` (its session, then the agent,
    /// then its session start); `req`'s caller owns it from then on.
    pub(crate) async fn publish(&self, req: Option<&Request>, id: &str) -> Result<AgentRef> {
        let Some(pending) = self.take_pending(id) else {
            return Err(not_pending(id));
        };
        let Pending {
            agent,
            source,
            owns_session,
            ..
        } = pending;
        let guard = Rollback::new(self, id, owns_session);
        let publishing = Marked::new(&self.publishing, id);
        Sessions::new(&self.ctx).publish(id).await?;
        guard.disarm();
        // A dispose that arrived while it was being published.
        let disposed_meanwhile = publishing.as_ref().is_some_and(Marked::raised);
        drop(publishing);
        self.agents.borrow_mut().insert(id.to_owned(), agent);
        let created = AgentRef {
            agent: id.to_owned(),
        };
        if let Some(req) = req {
            self.own(req, &created);
        }
        self.notify(bus::AGENT_CREATED, &created);
        let start = SessionStart {
            agent: id.to_owned(),
            source,
        };
        self.notify(bus::AGENT_SESSION_START, &start);
        if disposed_meanwhile {
            let (l, id) = (self.clone(), id.to_owned());
            self.ctx.spawn(async move { l.dispose(&id).await });
        }
        Ok(created)
    }

    /// Runs `f` over pending agent `id` (its setup changing it).
    pub(crate) fn pending_mut<T>(&self, id: &str, f: impl FnOnce(&mut Agent) -> T) -> Option<T> {
        self.pending
            .borrow_mut()
            .get_mut(id)
            .map(|p| f(&mut p.agent))
    }

    /// Takes pending agent `id` out of the creations under way (its
    /// creator's cleanup with it).
    fn take_pending(&self, id: &str) -> Option<Pending> {
        let mut pending = self.pending.borrow_mut().remove(id)?;
        if let Some(cleanup) = pending.cleanup.take() {
            cleanup.cancel();
        }
        Some(pending)
    }

    /// `abandon`: rolls pending agent `id` back.
    pub(crate) async fn abandon(&self, id: &str) -> Result<()> {
        let Some(pending) = self.take_pending(id) else {
            return Err(not_pending(id));
        };
        // On a task of its own, so a caller that stops waiting never
        // leaves it half done.
        let (done, finished) = tokio::sync::oneshot::channel();
        let (l, id) = (self.clone(), id.to_owned());
        self.ctx.spawn(async move {
            l.roll_back(&id, pending.owns_session).await;
            let _ = done.send(());
        });
        let _ = finished.await;
        Ok(())
    }

    /// Every creation still pending, rolled back here and now (the agent
    /// loop is going: no task of it would run).
    pub(crate) async fn abandon_all(&self) {
        let ids: Vec<String> = self.pending.borrow().keys().cloned().collect();
        for id in ids {
            if let Some(pending) = self.take_pending(&id) {
                self.roll_back(&id, pending.owns_session).await;
            }
        }
    }

    /// Closes `id`'s scope and takes back the session made for it.
    async fn roll_back(&self, id: &str, owns_session: bool) {
        let scope = AgentRef {
            agent: id.to_owned(),
        };
        if let Err(e) = self.ctx.parallel(bus::AGENT_SCOPE_CLOSED, scope).await {
            dsh_sdk::tracing::warn!("closing the scope of agent {id} rolled back: {e}");
        }
        if owns_session {
            if let Err(e) = Sessions::new(&self.ctx).discard(id).await {
                dsh_sdk::tracing::warn!("discarding the session of agent {id} rolled back: {e}");
            }
        }
    }
}

/// A `maxTokens` that is given must be a positive safe integer.
fn check_max_tokens(p: &CreateParams) -> Result<()> {
    let given = p.agent_options.max_tokens.as_ref().filter(|v| !v.is_null());
    if given.is_some_and(|mt| mt.get().is_none_or(|n| n == 0 || n > MAX_SAFE_INTEGER)) {
        return Err(Error::new(
            codes::INVALID_PAYLOAD,
            "agent maxTokens must be a positive safe integer",
        ));
    }
    Ok(())
}
