//! The first stage (reference: the registry's `prepare`): the
//! `tools/pre-execute` waterfall, the approval seam and the guards, in the
//! caller's order.

use dsh_sdk::api::approval::{Approval, ApprovalOutcome, ApprovalRequest};
use dsh_sdk::api::tools::{
    Exec, ExecParams, PreExecuteDecision, PreExecuteKind, Prepared, StageKind, ToolResult,
};
use dsh_sdk::names::{bus, tool_service};
use dsh_sdk::prelude::*;
use dsh_sdk::Dispatch;

use crate::registry::Registry;
use crate::results::{failure, from_error, read};
use crate::signal::{aborted, cancelled, Signal};

/// A stage's dispatcher for `exec`'s agent: scope-filtered when it has one.
pub fn dispatcher(ctx: &Context, exec: &Exec, event: &str) -> Dispatch {
    let d = ctx.dispatch(event);
    match exec.agent.as_deref().filter(|a| !a.is_empty()) {
        Some(scope) => d.scope(scope),
        None => d,
    }
}

fn stage(kind: StageKind, exec: Exec, result: Option<ToolResult>) -> Prepared {
    Prepared { kind, exec, result }
}

/// Mints the execution's token, then runs `tools/pre-execute` and the
/// approval seam. Answers [`StageKind::Dispatch`] (run the call with this
/// `exec`), [`StageKind::PostResult`] (a denial: no dispatch, but
/// post-execute still sees it, §5.3 step 5) or [`StageKind::FinalResult`]
/// (a failing listener: only the `tools/result` emit is left).
pub async fn prepare(
    ctx: &Context,
    registry: &Registry,
    mut exec: Exec,
    signal: &Signal,
) -> Prepared {
    // One token for this execution, the same in every stage's `exec`
    // (reference `exec.token`); the caller cannot choose it.
    exec.token = Some(dsh_sdk::new_id());
    // A call cancelled before it started publishes its result alone.
    if aborted(signal) {
        return stage(StageKind::FinalResult, exec, Some(cancelled(signal, None)));
    }
    let who = format!("the {} decision", bus::TOOLS_PRE_EXECUTE);
    let decision = dispatcher(ctx, &exec, bus::TOOLS_PRE_EXECUTE)
        .waterfall(ExecParams { exec: exec.clone() }, |_| async {
            Ok(serde_json::to_value(PreExecuteDecision::new(
                PreExecuteKind::Allow,
                None,
            ))?)
        })
        .await
        .and_then(|d| read::<Option<PreExecuteDecision>>(d, &who))
        .map(Option::unwrap_or_default);
    let decision = match decision {
        Ok(d) => d,
        Err(e) => return stage(StageKind::FinalResult, exec, Some(from_error(&e))),
    };
    // A policy may hand the tool its sandbox (mode and workspace root).
    if let Some(sandbox) = decision.sandbox.clone() {
        exec.sandbox = Some(sandbox);
    }
    // And a cap on the result the model is shown (the agent's window);
    // the smaller wins.
    if let Some(max) = decision.max_result_tokens {
        exec.max_result_tokens = Some(exec.max_result_tokens.map_or(max, |own| own.min(max)));
    }
    let denial = match &decision.kind {
        Some(PreExecuteKind::Allow) | None => None,
        Some(PreExecuteKind::Ask) => match approve(ctx, &exec, &decision).await {
            // The user allowed this call beyond the fence: the tool must
            // not refuse it again.
            Ok(()) => {
                exec.approved = true;
                None
            }
            // Cancelled by the caller and by the approval channel alike:
            // the caller's cancellation overtook the approval.
            Err((_, true)) if aborted(signal) => {
                return stage(StageKind::PostResult, exec, Some(cancelled(signal, None)));
            }
            Err((reason, _)) => Some(failure(&reason, None)),
        },
        Some(PreExecuteKind::Deny | PreExecuteKind::Other(_)) => Some(failure(
            decision.reason.as_deref().unwrap_or("denied by policy"),
            None,
        )),
    };
    if let Some(denied) = denial {
        return stage(StageKind::PostResult, exec, Some(denied));
    }
    match guard_reason(ctx, registry, &exec).await {
        Ok(Some(reason)) => stage(StageKind::PostResult, exec, Some(failure(&reason, None))),
        // Cancelled while the policy ran: no dispatch; a denial above
        // stands.
        Ok(None) if aborted(signal) => {
            stage(StageKind::PostResult, exec, Some(cancelled(signal, None)))
        }
        Ok(None) => stage(StageKind::Dispatch, exec, None),
        Err(e) => stage(StageKind::FinalResult, exec, Some(from_error(&e))),
    }
}

/// The approval seam (reference dsh-core §5.3): an `ask` decision goes to
/// the optional `approval` service; without one (headless) the call is
/// denied with the policy's reason, which says how to change the mode.
/// Denied, it answers the reason and whether the approval channel reported
/// a cancellation.
async fn approve(
    ctx: &Context,
    exec: &Exec,
    decision: &PreExecuteDecision,
) -> std::result::Result<(), (String, bool)> {
    let name = exec.name.as_str();
    let reason = decision.reason.clone();
    let Some(agent) = exec.agent.as_deref().filter(|a| !a.is_empty()) else {
        return Err((
            reason.unwrap_or_else(|| {
                format!("tool \"{name}\" requires approval, but no agent asked for it")
            }),
            false,
        ));
    };
    let request = ApprovalRequest {
        agent: agent.to_owned(),
        tool_name: name.to_owned(),
        call_id: exec.call_id.clone(),
        reason: reason.clone(),
        arguments: Some(exec.arguments.clone()),
        always_ask: decision.always_ask,
    };
    match Approval::new(ctx).request(&request).await {
        // No approval service: denied with the policy's reason.
        Err(e) if e.code == codes::SERVICE_UNAVAILABLE => Err((
            reason.unwrap_or_else(|| {
                format!("tool \"{name}\" requires approval (not yet supported)")
            }),
            false,
        )),
        Err(e) => Err((format!("approval for tool \"{name}\" failed: {e}"), false)),
        // An answer without a known outcome: no channel could answer.
        Ok(reply) => match reply.outcome {
            Some(ApprovalOutcome::AllowedOnce) => Ok(()),
            Some(ApprovalOutcome::Rejected) => {
                Err((format!("the user rejected tool \"{name}\""), false))
            }
            Some(ApprovalOutcome::Cancelled) => {
                Err((format!("approval for tool \"{name}\" was cancelled"), true))
            }
            Some(ApprovalOutcome::Other(_)) | None => Err((
                format!("tool \"{name}\" requires approval, but no approval channel is available"),
                false,
            )),
        },
    }
}

/// The first denial of the guards that see `exec`: the global ones, then
/// its agent's, each in registration order. A guard's `check` answers a
/// reason or null; any other answer fails the call (a guard that cannot
/// say no clearly must not let it through).
async fn guard_reason(ctx: &Context, registry: &Registry, exec: &Exec) -> Result<Option<String>> {
    let services = registry.borrow().guards_of(exec.agent());
    for service in services {
        let answer = ctx
            .service(service.clone())
            .call(tool_service::CHECK, ExecParams { exec: exec.clone() })
            .await?;
        let who = format!("the check answer of guard \"{service}\" (a denial reason or null)");
        if let Some(reason) = read::<Option<String>>(answer, &who)? {
            return Ok(Some(reason));
        }
    }
    Ok(None)
}
