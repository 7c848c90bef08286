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
//! A child is made pending (the agent loop's creation transaction, with
//! `setup`) and handed to the `subagents` registry, which sets it up and
//! publishes it; until then it is rolled back, announcing nothing, if this
//! plugin goes. Once published, the registry owns it and disposes it when
//! this provider is removed.

use dsh_sdk::api::agent_loop::{
    AgentLoop, CreateMeta, CreateParams, ForkFrom, Preparation, SessionOrigin,
};
use dsh_sdk::api::sessions::{Boundary, Sessions};
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
    prepare(ctx, p, None).await
}

/// A child seeded with `p.parent`'s completed turns (every event up to its
/// last `turn/end`); a fresh one when the parent has completed none.
async fn fork(ctx: &Context, p: CreateChildParams) -> Result<CreatedChild> {
    let boundary = Sessions::new(ctx)
        .events(&p.parent, 0)
        .await?
        .iter()
        .rev()
        .find(|e| e.kind == event::TURN_END)
        .map(|e| e.seq);
    let from = boundary.map(|b| ForkFrom {
        session: p.parent.clone(),
        boundary: Some(Boundary::from(b)),
    });
    prepare(ctx, p, from).await
}

/// The pending child: a new session, or a fork of its parent's `from`.
async fn prepare(
    ctx: &Context,
    p: CreateChildParams,
    from: Option<ForkFrom>,
) -> Result<CreatedChild> {
    let cwd = match &from {
        // A fork's header takes the source's cwd.
        Some(_) => None,
        None => Sessions::new(ctx).header(&p.parent).await?.header.cwd,
    };
    let forked = from.is_some();
    let params = CreateParams {
        session_id: Some(p.child_id),
        agent_options: p.agent_options,
        meta: Some(CreateMeta {
            cwd,
            parent_session: Some(p.parent),
            origin: Some(SessionOrigin::Subagent),
            delegation_depth: Some(p.depth),
        }),
        fork: from,
        setup: true,
    };
    let prepared = AgentLoop::new(ctx)
        .prepare(ctx, Preparation::Create(params))
        .await?;
    let seed_length = if forked {
        let header = Sessions::new(ctx).header(prepared.agent()).await?.header;
        header.seed_length.unwrap_or(0)
    } else {
        0
    };
    Ok(CreatedChild {
        agent: prepared.hand_over(),
        seed_length,
    })
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
