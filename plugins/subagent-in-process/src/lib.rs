//! `subagent-in-process`: the `spawn` and `fork` providers of the
//! `subagents` registry (the original's `subagent-spawn-in-process` and
//! `subagent-fork-in-process`). Each makes a child agent of this host's
//! agent loop, with its own session whose header names its parent, its
//! delegation depth and `origin: "subagent"`:
//!
//! - `spawn`: a fresh session (no history);
//! - `fork`: a session seeded with the parent's completed turns (every
//!   event up to its last `turn/end`: the turn calling the tool is still
//!   open and is not part of it); a parent with no completed turn gives a
//!   fresh session, as `spawn` does.
//!
//! The children belong to this plugin: unloading it disposes those still
//! live (their turns end aborted, their logs balanced).

use dsh_sdk::api::agent_loop::{AgentLoop, CreateMeta, CreateParams, ResumeParams, SessionOrigin};
use dsh_sdk::api::sessions::{Boundary, ForkParams, Sessions};
use dsh_sdk::api::subagents::{CreateChildParams, CreatedChild, RegisterProviderParams, Subagents};
use dsh_sdk::names::{service, subagent_provider};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::event;

/// The provider that starts fresh children.
pub const SPAWN: &str = "spawn";

/// The provider whose children inherit the parent's completed turns.
pub const FORK: &str = "fork";

/// A fresh child of `p.parent`, in the parent's directory.
async fn spawn(ctx: &Context, p: CreateChildParams) -> Result<CreatedChild> {
    let cwd = Sessions::new(ctx).header(&p.parent).await?.header.cwd;
    let created = AgentLoop::new(ctx)
        .create(&CreateParams {
            session_id: Some(p.child_id),
            agent_options: p.agent_options,
            meta: Some(CreateMeta {
                cwd,
                parent_session: Some(p.parent),
                origin: Some(SessionOrigin::Subagent),
                delegation_depth: Some(p.depth),
            }),
        })
        .await?;
    Ok(CreatedChild {
        agent: created.agent,
        seed_length: 0,
    })
}

/// A child of `p.parent` seeded with its completed turns.
async fn fork(ctx: &Context, p: CreateChildParams) -> Result<CreatedChild> {
    let sessions = Sessions::new(ctx);
    let boundary = sessions
        .events(&p.parent, 0)
        .await?
        .iter()
        .rev()
        .find(|e| e.kind == event::TURN_END)
        .map(|e| e.seq);
    let Some(boundary) = boundary else {
        return spawn(ctx, p).await;
    };
    let forked = sessions
        .fork(&ForkParams {
            id: p.parent,
            child_id: Some(p.child_id),
            boundary: Some(Boundary::from(boundary)),
            origin: Some(SessionOrigin::Subagent),
            delegation_depth: Some(p.depth),
        })
        .await?;
    let seed_length = forked.header.seed_length.unwrap_or(0);
    let resumed = AgentLoop::new(ctx)
        .resume(&ResumeParams {
            session_id: forked.id.clone(),
            agent_options: p.agent_options,
        })
        .await;
    match resumed {
        Ok(agent) => Ok(CreatedChild {
            agent: agent.agent,
            seed_length,
        }),
        Err(e) => {
            // The forked session is live but nobody drives it.
            let _ = sessions.close(&forked.id).await;
            Err(e)
        }
    }
}

/// Registers provider `name`, made by `make`, under a service of its own.
async fn provide<F, Fut>(ctx: &Context, name: &str, inherits: bool, make: F) -> Result<()>
where
    F: Fn(Context, CreateChildParams) -> Fut + 'static,
    Fut: std::future::Future<Output = Result<CreatedChild>> + 'static,
{
    let service = format!("subagent-provider:{name}:{}", ctx.fiber());
    let c = ctx.clone();
    let make = std::rc::Rc::new(make);
    ctx.provide(service.clone(), move |req| {
        let (c, make) = (c.clone(), make.clone());
        async move {
            if req.method != subagent_provider::CREATE {
                return Err(req.unknown_method());
            }
            Reply::json(make(c, req.params_as()?).await?)
        }
    });
    Subagents::new(ctx)
        .register_provider(&RegisterProviderParams {
            name: name.to_owned(),
            service,
            inherits_parent_context: inherits,
        })
        .await
}

struct InProcess;

impl Plugin for InProcess {
    const NAME: &'static str = "subagent-in-process";
    const DESCRIPTION: &'static str =
        "the `spawn` and `fork` subagent providers (children of this host's agent loop)";
    const INJECT: &'static [&'static str] =
        &[service::SUBAGENTS, service::AGENT_LOOP, service::SESSIONS];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        provide(&ctx, SPAWN, false, |c, p| async move { spawn(&c, p).await }).await?;
        provide(&ctx, FORK, true, |c, p| async move { fork(&c, p).await }).await?;
        Ok(())
    }
}

dsh_sdk::export_plugin!(InProcess);
