//! `tools`: the tool registry and the execution pipeline (reference
//! dsh-core §5): `tools/pre-execute` → `tools/execute` → `tools/post-execute`
//! (waterfalls), then `tools/result` (emit). A failing tool is an error
//! result the model sees, never a crashed turn. The stages are also served
//! one by one (`prepare`, `dispatch`, `finalize`, `finish`) for the agent
//! loop, which keeps policy and results in model order; output contracts,
//! restrictions, guards, deferred contexts and the caller's signal are in
//! the README.
//!
//! A tool plugin registers [`RegisterParams`] (a `scope` — an agent id —
//! makes the tool that agent's alone) and provides `service`, whose
//! `execute` method receives the call's [`Exec`] and answers a
//! `ToolReply` (or an error). Registrations are owned by the registering
//! fiber. Every method's params and reply are the types of
//! [`dsh_sdk::api::tools`].
//!
//! Modules: `registry` (the state), `restrictions`, `prepare`,
//! `dispatch` and `finalize` (the stages), `contract` (output
//! contracts), `signal` (the caller's cancellation), `results` (the
//! result format) and `schema` (the JSON Schema subset of parameters).

mod contract;
mod dispatch;
mod finalize;
mod prepare;
mod registry;
mod restrictions;
mod results;
mod schema;
mod signal;

use std::rc::Rc;

use dsh_sdk::api::tools::{
    CallRef, DeferContextParams, Exec, GuardParams, ModeParams, Outcome, RegisterParams,
    ScopeParams, StageKind, ToolMode, ToolResult, ToolsChanged,
};
use dsh_sdk::names::{bus, service, tools};
use dsh_sdk::prelude::*;
// The registry's own replies are `null`; a deferred context is open (the
// inbox's input form, which the agent loop completes).
use serde_json::Value;

use registry::{Guard, Registry, Tool};
use signal::CallSignal;

/// Tells listeners that the tools one agent sees may have changed.
fn changed(ctx: &Context) -> Result<()> {
    ctx.emit(bus::TOOLS_CHANGE, ToolsChanged {})
}

/// `register`: adds a tool, owned by the calling fiber.
fn register(ctx: &Context, registry: &Registry, req: &Request) -> Result<Reply> {
    let params: RegisterParams = req.params_as()?;
    registry.borrow().scopes.check(params.scope.as_deref())?;
    let scope = params.scope.clone().unwrap_or_default();
    let replace = params.replace;
    let owner = req.caller;
    let tool = Tool::from_registration(params, owner)?;
    let key = (scope, tool.schema.name.clone());
    // The fiber that registered a tool may replace it (`replace`), to
    // change its description or parameters; anything else is refused.
    let previous = registry.borrow().tools.get(&key).map(|t| t.owner);
    match previous {
        Some(o) if o != owner || !replace => {
            return Err(Error::new(
                "DUPLICATE_TOOL",
                format!("tool \"{}\" is already registered", key.1),
            ))
        }
        Some(_) => {
            registry.borrow_mut().tools.insert(key, tool);
            return changed(ctx).map(|()| Value::Null.into());
        }
        None => {}
    }
    registry.borrow_mut().tools.insert(key, tool);
    drop_with_owner(ctx, registry, req);
    changed(ctx)?;
    Ok(Value::Null.into())
}

/// `unregister`: removes a tool the calling fiber registered (another's is
/// refused, as a duplicate registration is); true when there was one.
fn unregister(ctx: &Context, registry: &Registry, req: &Request) -> Result<Reply> {
    let ModeParams { name, scope } = req.params_as()?;
    let key = (scope.unwrap_or_default(), name);
    let owner = registry.borrow().tools.get(&key).map(|t| t.owner);
    match owner {
        None => Reply::json(false),
        Some(o) if o != req.caller => Err(Error::new(
            codes::INVALID_PAYLOAD,
            format!("tool \"{}\" was registered by another plugin", key.1),
        )),
        Some(_) => {
            registry.borrow_mut().tools.remove(&key);
            changed(ctx)?;
            Reply::json(true)
        }
    }
}

/// `schemas`: what agent `scope` is offered.
fn schemas(registry: &Registry, req: &Request) -> Result<Reply> {
    let ScopeParams { scope } = req.params_as()?;
    Reply::json(
        registry
            .borrow()
            .schemas(scope.as_deref().unwrap_or_default()),
    )
}

/// `mode`: whether a tool's calls may overlap.
fn mode(registry: &Registry, req: &Request) -> Result<Reply> {
    let ModeParams { name, scope } = req.params_as()?;
    let parallel = registry
        .borrow()
        .visible(scope.as_deref().unwrap_or_default(), &name)
        .is_some_and(|t| t.parallel);
    Reply::json(if parallel {
        ToolMode::Parallel
    } else {
        ToolMode::Exclusive
    })
}

/// `restrict`: masks the global tools of one agent, owned by the calling
/// fiber.
fn restrict(ctx: &Context, registry: &Registry, req: &Request) -> Result<Reply> {
    let owner = req.caller;
    let params = restrictions::params(req)?;
    registry.borrow().scopes.check(params.scope.as_deref())?;
    let r = restrictions::restriction(&registry.borrow(), params, owner)?;
    registry.borrow_mut().restrictions.push(r);
    drop_with_owner(ctx, registry, req);
    changed(ctx)?;
    Ok(Value::Null.into())
}

/// `guard`: a check after pre-execute, owned by the calling fiber.
fn guard(ctx: &Context, registry: &Registry, req: &Request) -> Result<Reply> {
    let GuardParams { service, scope } = req.params_as()?;
    registry.borrow().scopes.check(scope.as_deref())?;
    let Some(service) = service.filter(|s| !s.is_empty()) else {
        return Err(Error::new(
            codes::INVALID_PAYLOAD,
            "a guard needs a service (whose `check` answers a denial reason or null)",
        ));
    };
    let owner = req.caller;
    registry.borrow_mut().guards.push(Guard {
        scope: scope.unwrap_or_default(),
        service,
        owner,
    });
    drop_with_owner(ctx, registry, req);
    Ok(Value::Null.into())
}

/// What `req`'s caller registers (tools, restrictions, guards) goes when
/// that fiber goes.
fn drop_with_owner(ctx: &Context, registry: &Registry, req: &Request) {
    let (r2, ctx2, owner) = (registry.clone(), ctx.clone(), req.caller);
    let owners = registry.borrow().owners.clone();
    req.on_caller_gone_once(&owners, move || {
        let mut r = r2.borrow_mut();
        let before = r.tools.len() + r.restrictions.len();
        r.tools.retain(|_, t| t.owner != owner);
        r.restrictions.retain(|x| x.owner != owner);
        r.guards.retain(|g| g.owner != owner);
        let removed = before - r.tools.len() - r.restrictions.len();
        drop(r);
        // Each registration is its own effect: a change per one removed.
        for _ in 0..removed {
            let _ = changed(&ctx2);
        }
    });
}

/// `deferContext`: a tool (or a wrapper) defers a context of the call it
/// runs. A context that is not a message nor `{text}` is refused as the
/// params are read (`INVALID_PAYLOAD`, saying what a message needs).
fn defer_context(registry: &Registry, req: &Request) -> Result<Reply> {
    let DeferContextParams { call, context } = req.params_as()?;
    let key = call.key();
    match registry.borrow_mut().deferred.get_mut(&key) {
        Some(list) => list.push(context),
        None => {
            return Err(Error::new(
                "NOT_DISPATCHING",
                format!("tool call \"{}\" is not dispatching", key.1),
            ))
        }
    }
    Ok(Value::Null.into())
}

/// `cancel`: the caller's signal of a running `execute` call.
fn cancel(registry: &Registry, req: &Request) -> Result<Reply> {
    let call: CallRef = req.params_as()?;
    let signal = registry.borrow().signals.get(&call.key()).cloned();
    let Some(signal) = signal else {
        return Err(Error::new(
            "NOT_RUNNING",
            format!("tool call \"{}\" is not running", call.key().1),
        ));
    };
    signal.aborted.set(true);
    signal.notify.notify_one();
    Ok(Value::Null.into())
}

/// The whole pipeline for one call: the stages in a row, under the
/// caller's signal (`exec.cancelled: true` when it is already aborted;
/// `cancel {agent, callId}` aborts it on the way).
async fn execute(ctx: &Context, registry: &Registry, exec: Exec) -> ToolResult {
    /// Forgets the call's signal however the call ends.
    struct Tracked(Registry, (String, String));
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.borrow_mut().signals.remove(&self.1);
        }
    }
    let state = Rc::new(CallSignal::default());
    state.aborted.set(exec.cancelled);
    let key = exec.key();
    registry
        .borrow_mut()
        .signals
        .insert(key.clone(), state.clone());
    let _tracked = Tracked(registry.clone(), key);
    let signal = Some(state);
    let prepared = prepare::prepare(ctx, registry, exec, &signal).await;
    let exec = prepared.exec;
    let (kind, result) = match prepared.kind {
        StageKind::Dispatch => {
            let d = dispatch::dispatch(ctx, registry, &exec, &signal).await;
            (d.kind, d.result)
        }
        kind => match prepared.result {
            Some(result) => (kind, result),
            // Every stage but a dispatch carries its result (see `prepare`).
            None => (
                StageKind::FinalResult,
                results::failure(
                    &format!("tools.prepare settled the call ({kind:?}) without its result"),
                    None,
                ),
            ),
        },
    };
    if kind == StageKind::PostResult {
        finalize::finalize(ctx, registry, &exec, result, &signal).await
    } else {
        finalize::finish(ctx, registry, &exec, result).await
    }
}

async fn handle(ctx: Context, registry: Registry, req: Request) -> Result<Reply> {
    match req.method.as_str() {
        tools::REGISTER => register(&ctx, &registry, &req),
        tools::UNREGISTER => unregister(&ctx, &registry, &req),
        tools::SCHEMAS => schemas(&registry, &req),
        tools::MODE => mode(&registry, &req),
        tools::RESTRICT => restrict(&ctx, &registry, &req),
        tools::GUARD => guard(&ctx, &registry, &req),
        tools::DEFER_CONTEXT => defer_context(&registry, &req),
        tools::EXECUTE => Reply::json(execute(&ctx, &registry, req.params_as()?).await),
        // The stages, for a scheduler that orders policy and results while
        // dispatches overlap (the agent loop).
        tools::PREPARE => {
            Reply::json(prepare::prepare(&ctx, &registry, req.params_as()?, &None).await)
        }
        tools::DISPATCH => {
            Reply::json(dispatch::dispatch(&ctx, &registry, &req.params_as()?, &None).await)
        }
        tools::FINALIZE => {
            let Outcome { exec, result } = req.params_as()?;
            Reply::json(finalize::finalize(&ctx, &registry, &exec, result, &None).await)
        }
        tools::CANCEL => cancel(&registry, &req),
        tools::FINISH => {
            let Outcome { exec, result } = req.params_as()?;
            Reply::json(finalize::finish(&ctx, &registry, &exec, result).await)
        }
        _ => Err(req.unknown_method()),
    }
}

struct Tools;

impl Plugin for Tools {
    const NAME: &'static str = "tools";
    const DESCRIPTION: &'static str = "tool registry and execution pipeline (service `tools`)";
    const PROVIDES: &'static [&'static str] = &[service::TOOLS];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        let registry: Registry = Rc::default();
        let (ctx2, r2) = (ctx.clone(), registry.clone());
        ctx.provide(service::TOOLS, move |req| {
            handle(ctx2.clone(), r2.clone(), req)
        });
        // An agent's own registrations die with the agent (a subagent's
        // `report`, its tool filter), not only with the plugin that made
        // them.
        let (ctx3, scopes) = (ctx.clone(), registry.borrow().scopes.clone());
        scopes.follow(&ctx, move |agent| {
            if registry.borrow_mut().drop_scope(agent) {
                changed(&ctx3)?;
            }
            Ok(())
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Tools);
