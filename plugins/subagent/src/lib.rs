//! `subagent`: the `subagents` service, delegation's registry (the
//! original's `packages/subagent/subagent`). Providers register by name
//! (`spawn`, `fork`: plugin `subagent-in-process`) and only make the child
//! agent; this plugin caps the depth, records the child's
//! `subagent/descriptor`, sets the child up (delegation notice, persona,
//! tool filter, `subagent/child-ready`), runs it, and tells its parent how
//! it went. See `dsh_sdk::api::subagents` for the two kinds of child.
//!
//! Modules: `table` (the children and their states), `listing` (the
//! listings, stored children included), `launch` (providers,
//! making, setting up and resuming a child), `run` (a one-shot run, a
//! continuable child's watch, a parent's going), `outcome` (stop reasons,
//! final answers, the notice and report texts).

mod launch;
mod listing;
mod outcome;
mod run;
mod table;

use dsh_sdk::api::agent_loop::{AgentRef, StatusChanged};
use dsh_sdk::api::agents::{Agents, CancelParams, RunStatus};
use dsh_sdk::api::sessions::Sessions;
use dsh_sdk::api::subagents::{
    error_code, AgentParams, ChildEntry, Delivered, FollowupParams, InterruptParams, ReportParams,
    Running, Settled, StartParams, Started,
};
use dsh_sdk::names::{bus, service, subagents};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::records::{CancelCause, SubagentMode};
use dsh_sdk::vocab::Message;
use serde_json::Value;

use launch::Providers;
use table::{Shared, State};

/// The registry's state, as its handlers share it.
#[derive(Clone)]
struct Registry {
    ctx: Context,
    providers: Providers,
    table: Shared,
}

impl Registry {
    async fn handle(self, req: Request) -> Result<Reply> {
        match req.method.as_str() {
            subagents::REGISTER_PROVIDER => {
                self.providers.register(&self.ctx, &self.table, &req)?;
                Reply::json(())
            }
            subagents::PROVIDERS => Reply::json(self.providers.list()),
            subagents::START => self.start(req.params_as()?).await,
            subagents::START_CONTINUABLE => self.start_continuable(req.params_as()?).await,
            subagents::FOLLOWUP => Reply::json(self.followup(req.params_as()?).await?),
            subagents::INTERRUPT => {
                self.interrupt(req.params_as()?).await?;
                Reply::json(())
            }
            subagents::REPORT_FROM => Reply::json(self.report(req.params_as()?).await?),
            subagents::LIST_CHILDREN => {
                let AgentParams { agent } = req.params_as()?;
                Reply::json(self.list(&agent, false).await)
            }
            subagents::LIST_DESCENDANTS => {
                let AgentParams { agent } = req.params_as()?;
                Reply::json(self.list(&agent, true).await)
            }
            subagents::RUNNING_BELOW => {
                let AgentParams { agent } = req.params_as()?;
                let running = self.table.running_below(&agent) as u64;
                Reply::json(Running { running })
            }
            subagents::WHEN_SETTLED => {
                let AgentParams { agent } = req.params_as()?;
                Reply::json(self.when_settled(&agent).await)
            }
            _ => Err(req.unknown_method()),
        }
    }

    /// `start`: a one-shot child, run to its end (and disposed if the
    /// caller goes away first).
    async fn start(&self, p: StartParams) -> Result<Reply> {
        let (ctx, providers, table, params) = (
            self.ctx.clone(),
            self.providers.clone(),
            self.table.clone(),
            p.clone(),
        );
        let made = async move {
            launch::create(&ctx, &providers, &table, &params, SubagentMode::OneShot).await
        };
        let (ctx, table) = (self.ctx.clone(), self.table.clone());
        let child = detached(&self.ctx, made, move |child: String| {
            let c = ctx.clone();
            ctx.spawn(async move {
                let _ = Agents::new(&c).dispose(&child).await;
                table.remove(&child);
            });
        })
        .await?;
        Reply::json(run::one_shot(&self.ctx, &self.table, child, &p.prompt).await?)
    }

    /// `startContinuable`: a background child, watched until it settles.
    /// Made, prompted and watched on a task of its own: a caller that goes
    /// away midway (its turn cancelled) cannot leave a child nobody
    /// watches; such a child is stopped along with its parent.
    async fn start_continuable(&self, p: StartParams) -> Result<Reply> {
        let me = self.clone();
        let made = async move {
            let child = launch::create(
                &me.ctx,
                &me.providers,
                &me.table,
                &p,
                SubagentMode::Continuable,
            )
            .await?;
            let prompt = Message::user_text(dsh_sdk::new_id(), p.prompt.as_str());
            match me.run(&child, prompt).await {
                Ok(message_id) => Ok(Started {
                    child_id: child,
                    message_id,
                }),
                Err(e) => {
                    let _ = Agents::new(&me.ctx).dispose(&child).await;
                    me.table.remove(&child);
                    Err(e)
                }
            }
        };
        let (ctx, table) = (self.ctx.clone(), self.table.clone());
        let started = detached(&self.ctx, made, move |started: Started| {
            table.mark_stopped_with_parent(&started.child_id);
            let c = ctx.clone();
            ctx.spawn(async move {
                let cancel = CancelParams {
                    agent: started.child_id,
                    cause: Some(CancelCause::Parent),
                    keep_inbox: false,
                };
                let _ = Agents::new(&c).cancel(&cancel).await;
            });
        })
        .await?;
        Reply::json(started)
    }

    /// Gives live child `child` `message` as its next turn and watches the
    /// run that follows.
    async fn run(&self, child: &str, message: Message) -> Result<Value> {
        let from = Sessions::new(&self.ctx).header(child).await?.seq;
        self.table.set_state(child, State::Running);
        let sent = self.deliver(child, message).await?;
        let (ctx, table, id) = (self.ctx.clone(), self.table.clone(), child.to_owned());
        self.ctx.spawn(run::watch(ctx, table, id, from));
        Ok(sent)
    }

    /// `followup` of `message` into live child `child`, counted as on its
    /// way until the inbox took it (a watch does not settle the child
    /// meanwhile).
    async fn deliver(&self, child: &str, message: Message) -> Result<Value> {
        self.table.admit(child);
        let sent = Agents::new(&self.ctx).followup(child, message).await;
        self.table.admitted(child);
        Ok(sent?.message_id)
    }

    /// `followup`: another turn for a continuable child of `p.parent`; a
    /// settled (or stored) child is checked to be one before anything
    /// touches it, then resumed.
    async fn followup(&self, p: FollowupParams) -> Result<Delivered> {
        loop {
            let changed = self.table.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let entry = self.table.get(&p.child);
            if let Some(entry) = &entry {
                if entry.parent != p.parent {
                    return Err(Error::new(
                        error_code::UNAUTHORIZED,
                        format!("subagent \"{}\" belongs to another parent session", p.child),
                    ));
                }
                if entry.descriptor.mode != SubagentMode::Continuable {
                    return Err(Error::new(
                        error_code::NOT_RESUMABLE,
                        format!("subagent \"{}\" has no supported continuation state and cannot be resumed; do not retry send_message with this id", p.child),
                    ));
                }
            }
            let message = outcome::from_parent(&p.parent, &p.message);
            match entry.map(|e| e.state) {
                Some(State::Running) => {
                    let message_id = self.deliver(&p.child, message).await?;
                    return Ok(Delivered { message_id });
                }
                Some(State::Settling) => changed.await,
                Some(State::Ready) | None => {
                    // One resume at a time: a second followup waits for it.
                    if !self.table.begin_resume(&p.child) {
                        changed.await;
                        continue;
                    }
                    let me = self.clone();
                    let (parent, child) = (p.parent.clone(), p.child.clone());
                    let resumed = async move {
                        let done = me.resume_and_send(&parent, &child, message).await;
                        me.table.end_resume(&child);
                        done
                    };
                    let message_id = detached(&self.ctx, resumed, |_| {}).await?;
                    return Ok(Delivered { message_id });
                }
            }
        }
    }

    /// Checks, resumes (or adopts) and prompts child `child` of `parent`.
    async fn resume_and_send(&self, parent: &str, child: &str, message: Message) -> Result<Value> {
        let (record, live) = launch::lineage(&self.ctx, parent, child).await?;
        launch::reopen(&self.ctx, &self.table, parent, child, record, live).await?;
        match self.run(child, message).await {
            Ok(id) => Ok(id),
            Err(e) => {
                if !live {
                    let _ = Agents::new(&self.ctx).dispose(child).await;
                }
                self.table.set_state(child, State::Ready);
                Err(e)
            }
        }
    }

    /// `interrupt`: stops the current turn of a descendant of `p.caller`
    /// (its inbox kept). A descendant that is not running is a no-op.
    async fn interrupt(&self, p: InterruptParams) -> Result<()> {
        if p.caller == p.target {
            return Err(Error::new(
                error_code::UNAUTHORIZED,
                format!("agent \"{}\" cannot interrupt itself", p.caller),
            ));
        }
        if !self.descends(&p.target, &p.caller) {
            return Err(Error::new(
                error_code::UNAUTHORIZED,
                format!(
                    "subagent \"{}\" is not a live descendant of agent \"{}\"",
                    p.target, p.caller
                ),
            ));
        }
        if self.table.get(&p.target).map(|c| c.state) == Some(State::Ready) {
            return Ok(());
        }
        let cancel = CancelParams {
            agent: p.target.clone(),
            cause: Some(CancelCause::Parent),
            keep_inbox: true,
        };
        match Agents::new(&self.ctx).cancel(&cancel).await {
            // Gone between the check and the cancel: it finished.
            Err(e) if e.code == dsh_sdk::names::code::AGENT_NOT_FOUND => Ok(()),
            other => other,
        }
    }

    /// Whether `agent` is a descendant of `ancestor` in this table.
    fn descends(&self, agent: &str, ancestor: &str) -> bool {
        let mut at = agent.to_owned();
        // The depth cap bounds a real chain; the bound guards a cycle.
        for _ in 0..1024 {
            let Some(entry) = self.table.get(&at) else {
                return false;
            };
            if entry.parent == ancestor {
                return true;
            }
            at = entry.parent;
        }
        false
    }

    /// `reportFrom`: a live continuable child's message to its parent, as
    /// the parent's next step (woken if idle).
    async fn report(&self, p: ReportParams) -> Result<Delivered> {
        let entry = self
            .table
            .get(&p.child)
            .filter(|c| c.descriptor.mode == SubagentMode::Continuable && c.state != State::Ready)
            .ok_or_else(|| {
                Error::new(
                    error_code::UNAUTHORIZED,
                    format!(
                        "agent \"{}\" is not a live continuable subagent and cannot report",
                        p.child
                    ),
                )
            })?;
        let message = outcome::report(&p.child, &p.output);
        let sent = Agents::new(&self.ctx)
            .steer(&entry.parent, message)
            .await
            .map_err(|e| {
                dsh_sdk::tracing::debug!("the report of {} was not delivered: {e}", p.child);
                Error::new(
                    error_code::PARENT_UNAVAILABLE,
                    "direct parent is not live; report was not delivered",
                )
            })?;
        Ok(Delivered {
            message_id: sent.message_id,
        })
    }

    /// `listChildren` / `listDescendants` (see `listing`).
    async fn list(&self, agent: &str, walk: bool) -> Vec<ChildEntry> {
        listing::list(&self.ctx, &self.table, agent, walk).await
    }

    /// `whenSettled`: waits until no descendant of `agent` runs.
    async fn when_settled(&self, agent: &str) -> Settled {
        let waited = self.table.running_below(agent) as u64;
        loop {
            let changed = self.table.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !self.table.any_running_below(agent) {
                return Settled { waited };
            }
            changed.await;
        }
    }

    /// A parent's turn ended: when the user cancelled it, its running
    /// children stop too.
    async fn on_status(&self, ev: StatusChanged) {
        if ev.status != RunStatus::Idle || !self.table.any_running_below(&ev.agent) {
            return;
        }
        if run::cancelled_by_user(&self.ctx, &ev.agent).await {
            run::stop_below(&self.ctx, &self.table, &ev.agent, false).await;
        }
    }

    /// An agent went away: so do its running children.
    async fn on_disposed(&self, agent: &str) {
        if self.table.any_running_below(agent) {
            run::stop_below(&self.ctx, &self.table, agent, true).await;
        }
    }
}

/// Runs `work` on a task of its own and answers its result: a caller that
/// goes away (its tool call cancelled) cannot cut it in half. A result
/// nobody waits for any more goes to `orphaned`.
async fn detached<T: 'static>(
    ctx: &Context,
    work: impl std::future::Future<Output = Result<T>> + 'static,
    orphaned: impl FnOnce(T) + 'static,
) -> Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    ctx.spawn(async move {
        if let Err(Ok(value)) = tx.send(work.await) {
            orphaned(value);
        }
    });
    rx.await
        .map_err(|_| Error::new(codes::DISPOSED, "the subagent registry went away"))?
}

struct Subagent;

impl Plugin for Subagent {
    const NAME: &'static str = "subagent";
    const DESCRIPTION: &'static str =
        "delegation: the subagent provider registry and its children (service `subagents`)";
    const PROVIDES: &'static [&'static str] = &[service::SUBAGENTS];
    const INJECT: &'static [&'static str] = &[
        service::AGENTS,
        service::AGENT_LOOP,
        service::SESSIONS,
        service::TOOLS,
        service::SYSTEM_PROMPT,
    ];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        let registry = Registry {
            ctx: ctx.clone(),
            providers: Providers::default(),
            table: Shared::default(),
        };
        let r = registry.clone();
        ctx.provide(service::SUBAGENTS, move |req| r.clone().handle(req));
        let r = registry.clone();
        ctx.on(bus::AGENT_STATUS, move |ev| {
            let r = r.clone();
            async move {
                r.on_status(ev.payload_as()?).await;
                Ok(Value::Null)
            }
        });
        ctx.on(bus::AGENT_DISPOSED, move |ev| {
            let r = registry.clone();
            async move {
                let AgentRef { agent } = ev.payload_as()?;
                r.on_disposed(&agent).await;
                Ok(Value::Null)
            }
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Subagent);
