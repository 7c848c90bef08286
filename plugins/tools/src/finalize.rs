//! The last stages, in the caller's order: the `tools/post-execute`
//! waterfall and its decision (accept, replace the content or the value,
//! add contexts, block), then the tool's `finalizeContent` and the
//! `tools/result` emit.

use dsh_sdk::api::tools::{Exec, Outcome, PostExecuteDecision, PostExecuteKind, ToolResult};
use dsh_sdk::names::{bus, tool_service};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::ContentBlock;

use crate::contract::{invalid_output, project};
use crate::prepare::dispatcher;
use crate::registry::Registry;
use crate::results::{blocked, failure, from_error, read, unknown_tool};
use crate::signal::{unless_cancelled, Signal};

/// `tools/post-execute` over `result` and its decision, then [`finish`].
pub async fn finalize(
    ctx: &Context,
    registry: &Registry,
    exec: &Exec,
    result: ToolResult,
    signal: &Signal,
) -> ToolResult {
    let outcome = Outcome {
        exec: exec.clone(),
        result: &result,
    };
    let who = format!("the {} decision", bus::TOOLS_POST_EXECUTE);
    let decision = dispatcher(ctx, exec, bus::TOOLS_POST_EXECUTE)
        .waterfall(&outcome, |_| async {
            Ok(serde_json::to_value(PostExecuteDecision::new(
                PostExecuteKind::Accept,
            ))?)
        })
        .await
        .and_then(|d| read::<Option<PostExecuteDecision>>(d, &who))
        .map(Option::unwrap_or_default);
    let result = match decision {
        Ok(decision) => {
            unless_cancelled(signal, decide(ctx, registry, exec, result, decision).await)
        }
        Err(e) => from_error(&e),
    };
    finish(ctx, registry, exec, result).await
}

/// `result` after a post-execute `decision` (reference §5.3 step 8). A
/// block keeps only the decision's contexts; an accept appends them to the
/// result's. A new value is validated and rendered again.
async fn decide(
    ctx: &Context,
    registry: &Registry,
    exec: &Exec,
    mut result: ToolResult,
    decision: PostExecuteDecision,
) -> ToolResult {
    let is_block = decision.is_block();
    let PostExecuteDecision {
        content,
        value,
        feedback,
        additional_contexts: added,
        ..
    } = decision;
    let with_contexts = |mut r: ToolResult, mut contexts: Vec<_>| {
        contexts.extend(added.into_iter().flatten());
        if !contexts.is_empty() {
            r.additional_contexts = Some(contexts);
        }
        r
    };
    if is_block {
        return with_contexts(blocked(feedback), Vec::new());
    }
    let own = result.additional_contexts.take().unwrap_or_default();
    if content.is_some() && value.is_some() {
        return failure(
            "tools/post-execute accept decision cannot replace both value and content",
            None,
        );
    }
    if let Some(value) = value {
        if result.is_error {
            return failure(
                "tools/post-execute cannot replace the value of a failed result",
                None,
            );
        }
        let name = exec.name.as_str();
        let Some((service, output)) = registry
            .borrow()
            .visible(exec.agent(), name)
            .map(|t| (t.service.clone(), t.output.clone()))
        else {
            return unknown_tool(name);
        };
        let Some(output) = output.filter(|o| o.render) else {
            return invalid_output(name, &["output.render is not declared".to_owned()]);
        };
        let mut replaced =
            match project(ctx, &service, &output, exec, value, Vec::new(), None).await {
                Ok(r) => r,
                Err(failed) => return failed,
            };
        replaced.concludes_turn = result.concludes_turn;
        return with_contexts(replaced, own);
    }
    // A `null` content counts as given above but replaces nothing.
    if let Some(Some(content)) = content {
        result.content = content;
    }
    with_contexts(result, own)
}

/// The last stage: the tool's `finalizeContent` (when it declares one),
/// then the `tools/result` emit; answers the final result.
pub async fn finish(
    ctx: &Context,
    registry: &Registry,
    exec: &Exec,
    result: ToolResult,
) -> ToolResult {
    let result = finalize_content(ctx, registry, exec, result).await;
    let outcome = Outcome {
        exec: exec.clone(),
        result: &result,
    };
    let _ = dispatcher(ctx, exec, bus::TOOLS_RESULT).emit(&outcome);
    result
}

/// The tool's last word on the model-facing content of every outcome
/// (reference `finalizeContent`): its service's `finalizeContent`
/// (`{exec, result}`) answers content blocks, or null to keep them. A
/// failing finalizer fails the call.
async fn finalize_content(
    ctx: &Context,
    registry: &Registry,
    exec: &Exec,
    mut result: ToolResult,
) -> ToolResult {
    let name = exec.name.as_str();
    let Some(service) = registry
        .borrow()
        .visible(exec.agent(), name)
        .filter(|t| t.finalize_content)
        .map(|t| t.service.clone())
    else {
        return result;
    };
    let outcome = Outcome {
        exec: exec.clone(),
        result: &result,
    };
    let answer = match ctx
        .service(service)
        .call(tool_service::FINALIZE_CONTENT, &outcome)
        .await
    {
        Ok(answer) => answer,
        Err(e) => return from_error(&e),
    };
    let who = format!("the finalizeContent answer of tool \"{name}\"");
    match read::<Option<Vec<ContentBlock>>>(answer, &who) {
        Ok(None) => result,
        Ok(Some(content)) => {
            result.content = content;
            result
        }
        Err(e) => failure(
            &format!(
                "tool \"{name}\": finalizeContent must answer content blocks or null ({})",
                e.message
            ),
            Some(("ToolError", codes::INVALID_PAYLOAD)),
        ),
    }
}
