//! The last stages, in the caller's order: the `tools/post-execute`
//! waterfall and its decision (accept, replace the content or the value,
//! add contexts, block), then the tool's `finalizeContent` and the
//! `tools/result` emit.

use dsh_sdk::api::tools::{Exec, Outcome, PostExecuteDecision};
use dsh_sdk::names::{bus, tool_service};
use dsh_sdk::prelude::*;

use crate::contract::{invalid_output, project};
use crate::prepare::dispatcher;
use crate::registry::Registry;
use crate::results::{blocked, contexts_of, failure, from_error, unknown_tool};
use crate::signal::{unless_cancelled, Signal};

/// `tools/post-execute` over `result` and its decision, then [`finish`].
pub async fn finalize(
    ctx: &Context,
    registry: &Registry,
    exec: &Exec,
    result: Value,
    signal: &Signal,
) -> Value {
    let outcome = Outcome {
        exec: exec.clone(),
        result: &result,
    };
    let decision = dispatcher(ctx, exec, bus::TOOLS_POST_EXECUTE)
        .waterfall(&outcome, |_| async { Ok(json!({"kind": "accept"})) })
        .await
        .and_then(|d| {
            serde_json::from_value::<Option<PostExecuteDecision>>(d)
                .map(Option::unwrap_or_default)
                .map_err(|e| {
                    Error::new(
                        codes::INVALID_PAYLOAD,
                        format!("invalid {} decision: {e}", bus::TOOLS_POST_EXECUTE),
                    )
                })
        });
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
    result: Value,
    decision: PostExecuteDecision,
) -> Value {
    let added = decision.additional_contexts.clone().unwrap_or_default();
    let with_contexts = |mut r: Value, mut contexts: Vec<Value>| {
        contexts.extend(added.iter().cloned());
        if !contexts.is_empty() {
            r["additionalContexts"] = Value::Array(contexts);
        }
        r
    };
    if decision.is_block() {
        return with_contexts(blocked(&decision.feedback), Vec::new());
    }
    let own = contexts_of(&result);
    let PostExecuteDecision { content, value, .. } = decision;
    if content.is_some() && value.is_some() {
        return failure(
            "tools/post-execute accept decision cannot replace both value and content",
            None,
        );
    }
    if let Some(value) = value {
        if result["isError"] == json!(true) {
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
        let mut replaced = match project(ctx, &service, &output, exec, value, json!([]), None).await
        {
            Ok(r) => r,
            Err(failed) => return failed,
        };
        if result["concludesTurn"] == json!(true) {
            replaced["concludesTurn"] = json!(true);
        }
        return with_contexts(replaced, own);
    }
    let mut result = result;
    if let Some(content) = content.filter(Value::is_array) {
        result["content"] = content;
    }
    if let Some(map) = result.as_object_mut() {
        map.remove("additionalContexts");
    }
    with_contexts(result, own)
}

/// The last stage: the tool's `finalizeContent` (when it declares one),
/// then the `tools/result` emit; answers the final result.
pub async fn finish(ctx: &Context, registry: &Registry, exec: &Exec, result: Value) -> Value {
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
    mut result: Value,
) -> Value {
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
    match ctx
        .service(service)
        .call(tool_service::FINALIZE_CONTENT, &outcome)
        .await
    {
        Ok(Value::Null) => result,
        Ok(content @ Value::Array(_)) => {
            result["content"] = content;
            result
        }
        Ok(_) => failure(
            &format!("tool \"{name}\": finalizeContent must answer content blocks or null"),
            Some(("ToolError", codes::INVALID_PAYLOAD)),
        ),
        Err(e) => from_error(&e),
    }
}
