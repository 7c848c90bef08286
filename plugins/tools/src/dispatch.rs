//! The second stage: the `tools/execute` waterfall around the tool's body.
//! Calls of one step may overlap here. The body's arguments are checked
//! against the tool's schema, its time is limited by the registration's
//! `timeoutMs`, its value is held to the output contract, and contexts the
//! call defers lead its result's own.

use std::cell::RefCell;
use std::rc::Rc;

use dsh_sdk::api::tools::{Dispatched, Exec, ExecParams, StageKind, ToolReply, ToolResult};
use dsh_sdk::names::{bus, code, tool_service};
use dsh_sdk::prelude::*;
use serde_json::Value;

use crate::contract::project;
use crate::prepare::dispatcher;
use crate::registry::Registry;
use crate::results::{failure, from_error, read, to_json, unknown_tool};
use crate::signal::{aborted, cancelled, unless_cancelled, Signal};

/// A call whose body outran the tool's `timeoutMs`.
const TOOL_TIMEOUT: &str = "TOOL_TIMEOUT";

/// Runs the body of `exec` inside the `tools/execute` waterfall. Answers
/// [`StageKind::PostResult`], or [`StageKind::FinalResult`] when a wrapper
/// failed.
pub async fn dispatch(
    ctx: &Context,
    registry: &Registry,
    exec: &Exec,
    signal: &Signal,
) -> Dispatched {
    /// Ends the call's deferral window however the dispatch ends.
    struct Window(Registry, (String, String));
    impl Drop for Window {
        fn drop(&mut self) {
            self.0.borrow_mut().deferred.remove(&self.1);
        }
    }
    let key = exec.key();
    registry
        .borrow_mut()
        .deferred
        .insert(key.clone(), Vec::new());
    let window = Window(registry.clone(), key);
    // What this dispatch's body produced, to tell it from a result a
    // wrapper authored (or brought from another dispatch).
    let canonical: Rc<RefCell<Option<ToolResult>>> = Rc::default();
    let (c, r, x, sig, slot) = (
        ctx.clone(),
        registry.clone(),
        exec.clone(),
        signal.clone(),
        canonical.clone(),
    );
    let outcome = dispatcher(ctx, exec, bus::TOOLS_EXECUTE)
        .waterfall(ExecParams { exec: exec.clone() }, move |_| async move {
            let result = run_tool(&c, &r, &x, &sig).await;
            let json = to_json(&result);
            *slot.borrow_mut() = Some(result);
            json
        })
        .await
        // A wrapper's answer that is not a result fails like the wrapper.
        .and_then(|answer| read::<ToolResult>(answer, "the tools/execute result"));
    let outcome = match outcome {
        Ok(result) if canonical.borrow().as_ref() != Some(&result) => {
            Ok(normalize(ctx, registry, exec, result).await)
        }
        other => other,
    };
    let deferred = registry
        .borrow_mut()
        .deferred
        .remove(&window.1)
        .unwrap_or_default();
    drop(window);
    match outcome {
        Ok(mut result) => {
            // Deferred contexts first, then the result's own (a wrapper's
            // or the tool's); a failed body keeps them too.
            if !deferred.is_empty() {
                let own = result.additional_contexts.take().unwrap_or_default();
                result.additional_contexts = Some(deferred.into_iter().chain(own).collect());
            }
            Dispatched {
                kind: StageKind::PostResult,
                result: unless_cancelled(signal, result),
            }
        }
        Err(e) => Dispatched {
            kind: StageKind::FinalResult,
            result: from_error(&e),
        },
    }
}

/// The body: the tool `exec` names, as its agent sees it, with arguments
/// valid under its schema, called through its service.
async fn run_tool(ctx: &Context, registry: &Registry, exec: &Exec, signal: &Signal) -> ToolResult {
    let name = exec.name.as_str();
    let Some((service, parameters, output, timeout)) =
        registry.borrow().visible(exec.agent(), name).map(|t| {
            (
                t.service.clone(),
                t.schema.parameters.clone(),
                t.output.clone(),
                t.timeout,
            )
        })
    else {
        return unknown_tool(name);
    };
    let violations = crate::schema::validate(&parameters, &exec.arguments);
    if !violations.is_empty() {
        return failure(
            &format!("invalid arguments: {}", violations.join("; ")),
            Some(("ToolArgsError", code::INVALID_ARGS)),
        );
    }
    // Cancelled while a wrapper ran: the body never starts.
    if aborted(signal) {
        return cancelled(signal, None);
    }
    let tool = ctx.service(service.clone());
    let call = tool.call(tool_service::EXECUTE, exec);
    let body = async move {
        let Some(limit) = timeout else {
            return call.await;
        };
        // Dropping the call cancels it in the tool's plugin.
        tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
            Err(Error::new(
                TOOL_TIMEOUT,
                format!("tool call timed out after {}ms", limit.as_millis()),
            ))
        })
    };
    let answer = match signal {
        None => body.await,
        Some(s) => {
            s.body_invoked.set(true);
            tokio::select! {
                biased;
                () = s.notify.notified() => return cancelled(signal, None),
                answer = body => answer,
            }
        }
    };
    let who = format!("the reply of tool \"{name}\"");
    let reply = match answer.and_then(|answer| read::<ToolReply>(answer, &who)) {
        Ok(reply) => reply,
        Err(e) => return from_error(&e),
    };
    let ToolReply {
        content,
        value,
        meta,
        additional_contexts,
        concludes_turn,
    } = reply;
    let (value, meta) = (value.unwrap_or(Value::Null), meta.filter(|m| !m.is_null()));
    // The output contract, before any wrapper or post-execute sees the
    // result: a value that breaks it is a failed call.
    let mut result = match &output {
        Some(output) => match project(ctx, &service, output, exec, value, content, meta).await {
            Ok(result) => result,
            Err(failed) => return failed,
        },
        None => ToolResult::success(value, content, meta),
    };
    // What the tool adds beyond its content: messages for the next step, a
    // conclusion.
    result.additional_contexts = additional_contexts;
    result.concludes_turn = concludes_turn;
    result
}

/// A success a `tools/execute` wrapper authored goes through the tool's
/// output contract like the body's own (validated, rendered again); its
/// contexts and conclusion stay. Failures and tools without a contract are
/// taken as they are.
async fn normalize(
    ctx: &Context,
    registry: &Registry,
    exec: &Exec,
    result: ToolResult,
) -> ToolResult {
    if result.is_error {
        return result;
    }
    let Some((service, Some(output))) = registry
        .borrow()
        .visible(exec.agent(), &exec.name)
        .map(|t| (t.service.clone(), t.output.clone()))
    else {
        return result;
    };
    let ToolResult {
        value,
        content,
        meta,
        additional_contexts,
        concludes_turn,
        ..
    } = result;
    let value = value.unwrap_or(Value::Null);
    match project(ctx, &service, &output, exec, value, content, meta).await {
        Ok(normalized) => ToolResult {
            additional_contexts,
            concludes_turn,
            ..normalized
        },
        Err(failed) => failed,
    }
}
