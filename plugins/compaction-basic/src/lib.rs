//! `compaction-basic`: the `compaction` service (see
//! `dsh_sdk::api::compaction`). Before each step it compacts a session
//! whose context reached `floor(window × 0.8)`, keeping the most recent
//! `0.16 × window` tokens verbatim; after `CONTEXT_WINDOW_EXCEEDED` it
//! prunes and compacts, then retries the step once; `compactNow` compacts
//! an idle agent on request (`/compact`). Matches the original's
//! `packages/compaction/compaction-basic`, and keeps small windows alive:
//! every tool result is capped to a share of the window (`maxResultTokens`
//! on each call), the summary request fits the window, and a request that
//! cannot fit ends its turn with an error naming the window and the item,
//! which is cut for the next request (README.md).

mod config;
mod engine;
mod fit;
mod meter;
mod oversized;
mod summarizer;
mod surfaced;

use std::rc::Rc;

use dsh_sdk::api::agent_loop::{PreStep, RequestError, RequestErrorDecision};
use dsh_sdk::api::agents::{Agents, MaintenanceTask};
use dsh_sdk::api::compaction::{AgentParams, CompactNowParams, CompactionResult};
use dsh_sdk::api::sessions::SessionRef;
use dsh_sdk::api::tools::{forward_as, ExecParams, PreExecuteDecision};
use dsh_sdk::names::{bus, compaction, llm_failure, service};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::LlmFailure;
use serde::Deserialize;
use serde_json::Value;

use config::Config;
use engine::{Engine, Recovery};

struct CompactionBasic;

impl Plugin for CompactionBasic {
    const NAME: &'static str = "compaction-basic";
    const DESCRIPTION: &'static str = "compacts long sessions into checkpoints";
    const INJECT: &'static [&'static str] = &[service::SESSIONS, service::LLM];
    const PROVIDES: &'static [&'static str] = &[service::COMPACTION];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let engine = Engine::new(ctx.clone(), config.checked()?);
        provide(&ctx, &engine);
        if engine.config.auto {
            on_pre_step(&ctx, &engine);
            on_request_error(&ctx, &engine);
        }
        on_pre_execute(&ctx, &engine);
        let e = engine.clone();
        ctx.on(bus::LLM_ADAPTERS_UPDATED, move |_| {
            e.forget_windows();
            async { Ok(Value::Null) }
        });
        let e = engine.clone();
        ctx.on(bus::SESSION_DISPOSED, move |ev| {
            let e = e.clone();
            async move {
                let SessionRef { session_id } = ev.payload_as()?;
                e.forget(&session_id);
                Ok(Value::Null)
            }
        });
        Ok(())
    }
}

/// The `compaction` service.
fn provide(ctx: &Context, engine: &Rc<Engine>) {
    let (e, c) = (engine.clone(), ctx.clone());
    ctx.provide(service::COMPACTION, move |req| {
        let (e, c) = (e.clone(), c.clone());
        async move {
            match req.method.as_str() {
                compaction::MEASURE => {
                    let AgentParams { agent } = req.params_as()?;
                    Reply::json(e.measure(&agent).await?)
                }
                compaction::COMPACT_NOW => {
                    let p: CompactNowParams = req.params_as()?;
                    Reply::json(compact_now(&c, p).await?)
                }
                compaction::COMPACT_IDLE => Reply::json(e.compact_idle(req.params_as()?).await?),
                _ => Err(req.unknown_method()),
            }
        }
    });
}

/// `compactNow`: the idle part runs as the agent's maintenance, so no turn
/// starts while it does (a busy agent is `COMPACTION_BUSY`).
async fn compact_now(ctx: &Context, p: CompactNowParams) -> Result<Option<CompactionResult>> {
    let agent = p.agent.clone();
    let task = MaintenanceTask {
        service: Some(service::COMPACTION.to_owned()),
        method: Some(compaction::COMPACT_IDLE.to_owned()),
        params: serde_json::to_value(p)?,
    };
    match Agents::new(ctx).run_maintenance(&agent, task).await {
        Ok(v) => Ok(serde_json::from_value(v)?),
        Err(e) if e.code == dsh_sdk::names::code::AGENT_BUSY => Err(Error::new(
            dsh_sdk::names::code::COMPACTION_BUSY,
            format!("manual compaction needs an idle agent: {}", e.message),
        )),
        Err(e) => Err(e),
    }
}

/// Pressure: checked before every step; a failure is logged and the turn
/// goes on.
fn on_pre_step(ctx: &Context, engine: &Rc<Engine>) {
    let e = engine.clone();
    ctx.on(bus::AGENT_PRE_STEP, move |ev| {
        let e = e.clone();
        async move {
            let p: PreStep = ev.payload_as()?;
            if let Err(err) = e.on_pressure(&p.agent, p.turn, p.signal.as_deref()).await {
                dsh_sdk::tracing::warn!(
                    "step compaction of {} failed: {err}; continuing the turn",
                    p.agent
                );
            }
            ev.forward().await
        }
    });
}

/// Overflow: prune, compact, and retry the step once when that changed
/// the surface.
fn on_request_error(ctx: &Context, engine: &Rc<Engine>) {
    let e = engine.clone();
    ctx.on(bus::AGENT_REQUEST_ERROR, move |ev| {
        let e = e.clone();
        async move {
            let p: RequestError = ev.payload_as()?;
            let Some(failure) = overflow(&p) else {
                return ev.forward().await;
            };
            match e
                .on_overflow(&p.agent, (p.turn, p.step), &failure.message)
                .await
            {
                Ok(Recovery::Retry) => {
                    return Ok(serde_json::to_value(RequestErrorDecision::retry())?)
                }
                // The turn ends with this error: it names the window and
                // what does not fit (a failing listener fails the turn).
                Ok(Recovery::Fail(error)) => return Err(error),
                Ok(Recovery::GiveUp) => {}
                Err(err) => dsh_sdk::tracing::warn!(
                    "context-overflow compaction of {} failed: {err}; keeping the request error",
                    p.agent
                ),
            }
            ev.forward().await
        }
    });
}

/// The cap on each tool result: `maxResultTokens`, `resultShare` of the
/// agent's window, on every call's decision. Prepended, so it is the
/// outermost listener: it sees the decision whatever the policy inside
/// answered (`permission` asks without forwarding). A call made outside an
/// agent, or before its window is known, gets no cap from here.
fn on_pre_execute(ctx: &Context, engine: &Rc<Engine>) {
    let e = engine.clone();
    ctx.listen(bus::TOOLS_PRE_EXECUTE).prepend().on(move |ev| {
        let e = e.clone();
        async move {
            let ExecParams { exec } = ev.payload_as()?;
            let mut decision: PreExecuteDecision =
                forward_as::<Option<_>>(&ev).await?.unwrap_or_default();
            let agent = exec.agent();
            if agent.is_empty() {
                return Ok(serde_json::to_value(decision)?);
            }
            match e.result_budget(agent).await {
                Ok(Some(max)) => {
                    decision.max_result_tokens =
                        Some(decision.max_result_tokens.map_or(max, |own| own.min(max)));
                }
                Ok(None) => {}
                Err(err) => dsh_sdk::tracing::warn!(
                    "compaction: no result cap for a call of {agent}: {err}"
                ),
            }
            Ok(serde_json::to_value(decision)?)
        }
    });
}

/// The failure, when the request failed for `CONTEXT_WINDOW_EXCEEDED`. A
/// failure in another shape is not this plugin's to judge: it is warned
/// about and the chain goes on.
fn overflow(p: &RequestError) -> Option<LlmFailure> {
    match Option::<LlmFailure>::deserialize(&p.failure) {
        Ok(failure) => failure.filter(|f| f.code == llm_failure::CONTEXT_WINDOW_EXCEEDED),
        Err(e) => {
            dsh_sdk::tracing::warn!(
                "compaction: the request error of {} has a malformed failure ({e}); not compacting",
                p.agent
            );
            None
        }
    }
}

dsh_sdk::export_plugin!(CompactionBasic);
