//! `tools`: the tool registry and the execution pipeline (reference
//! dsh-core §5): `tools/pre-execute` → `tools/execute` → `tools/post-execute`
//! (waterfalls), then `tools/result` (emit). A failing tool is an error
//! result the model sees, never a crashed turn. The stages are also served
//! one by one (`prepare`, `dispatch`, `finalize`, `finish`) for the agent
//! loop, which keeps policy and results in model order; output contracts,
//! restrictions, guards, deferred contexts and the caller's signal are in
//! the README.
//!
//! A tool plugin registers `{name, description, parameters, service,
//! parallel?, scope?}` (a `scope` — an agent id — makes the tool that
//! agent's alone) and provides `service`, whose `execute` method receives
//! `{arguments, callId, agent, cwd}` and returns `{content: [blocks]}` (or
//! an error), optionally with `value`, `meta` (presentation, logged as
//! `tool/result.meta`), `additionalContexts` (user messages the loop queues
//! for the next step) and `concludesTurn: true`. Registrations are owned by
//! the registering fiber.

mod schema;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use dsh_sdk::names::{approval, bus, code, service, tool_service, tools};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::msg;
use dsh_sdk::Dispatch;

struct Tool {
    schema: Value,
    service: String,
    parallel: bool,
    output: Option<Output>,
    /// Its service answers `finalizeContent`.
    finalize_content: bool,
    /// The longest its body may run (registration `timeoutMs`); never sent
    /// to the model.
    timeout: Option<std::time::Duration>,
    owner: u64,
}

/// A call whose body outran the tool's `timeoutMs`.
const TOOL_TIMEOUT: &str = "TOOL_TIMEOUT";

/// Reads a registration's `timeoutMs`: absent, or a finite number > 0.
fn timeout_of(name: &str, v: &Value) -> Result<Option<std::time::Duration>> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => match n.as_f64() {
            Some(ms) if ms.is_finite() && ms > 0.0 => {
                Ok(Some(std::time::Duration::from_secs_f64(ms / 1000.0)))
            }
            _ => Err(bad_timeout(name, v)),
        },
        _ => Err(bad_timeout(name, v)),
    }
}

fn bad_timeout(name: &str, v: &Value) -> Error {
    Error::new(
        codes::INVALID_PAYLOAD,
        format!("tool \"{name}\": timeoutMs must be a finite number greater than 0, got {v}"),
    )
}

/// A tool's output contract (reference: `output: {schema, render,
/// presentationMeta}`): the JSON Schema its canonical `value` must satisfy,
/// and whether its service answers `render` (`{arguments, value, ...}` →
/// `{content, meta?}`), the projection of a value into the content the
/// model sees and the presentation meta.
#[derive(Clone)]
struct Output {
    schema: Value,
    render: bool,
}

/// The failure of a value that breaks its tool's output contract.
fn invalid_output(name: &str, violations: &[String]) -> Value {
    failure(
        &format!(
            "tool \"{name}\" returned invalid output: {}",
            violations.join("; ")
        ),
        Some(("ToolOutputError", "INVALID_TOOL_OUTPUT")),
    )
}

/// A successful result for `value` under `output` (validated, then
/// rendered by the tool's service when it declares `render`; otherwise the
/// body's `content` and `meta` stand). `Err` is the failed call.
async fn project(
    ctx: &Context,
    service: &str,
    output: &Output,
    exec: &Value,
    value: Value,
    content: Value,
    meta: Option<Value>,
) -> std::result::Result<Value, Value> {
    let name = exec["name"].as_str().unwrap_or_default();
    let violations = schema::validate_output(&output.schema, &value);
    if !violations.is_empty() {
        return Err(invalid_output(name, &violations));
    }
    let (content, meta) = if output.render {
        let mut params = exec.clone();
        params["value"] = value.clone();
        let rendered = ctx
            .service(service.to_owned())
            .call(tool_service::RENDER, params)
            .await
            .map_err(|e| invalid_output(name, &[format!("output.render failed: {}", e.message)]))?;
        let Some(content) = rendered.get("content").filter(|c| c.is_array()) else {
            return Err(invalid_output(
                name,
                &["output.render returned no content blocks".to_owned()],
            ));
        };
        (
            content.clone(),
            rendered.get("meta").filter(|m| !m.is_null()).cloned(),
        )
    } else {
        (content, meta)
    };
    let mut result = json!({"isError": false, "value": value, "content": content});
    if let Some(meta) = meta {
        result["meta"] = meta;
    }
    Ok(result)
}

/// A mask of the global tools one agent sees (reference `tools.restrict`):
/// `allow` keeps only those names, `deny` removes those.
struct Restriction {
    scope: String,
    allow: Option<BTreeSet<String>>,
    deny: Option<BTreeSet<String>>,
    owner: u64,
}

impl Restriction {
    fn admits(&self, name: &str) -> bool {
        self.allow.as_ref().is_none_or(|a| a.contains(name))
            && self.deny.as_ref().is_none_or(|d| !d.contains(name))
    }
}

#[derive(Default)]
struct State {
    /// Tools by (scope, name); scope `""` is global, otherwise an agent id
    /// whose calls alone see the tool (and for whom it shadows a global one).
    tools: BTreeMap<(String, String), Tool>,
    restrictions: Vec<Restriction>,
    guards: Vec<Guard>,
    /// Contexts deferred by calls dispatching now, by (agent, callId)
    /// (reference `exec.deferContext`): they lead the result's own.
    deferred: BTreeMap<(String, String), Vec<Value>>,
    /// The caller signals of the `execute` calls running now, by (agent,
    /// callId); `cancel` aborts one.
    signals: BTreeMap<(String, String), Rc<CallSignal>>,
}

/// A caller's cancellation of one `execute` call (reference: the caller
/// `signal`). The pipeline checks it between stages; a running body is
/// cancelled by dropping its call (bash kills its process group).
#[derive(Default)]
struct CallSignal {
    aborted: Cell<bool>,
    body_invoked: Cell<bool>,
    notify: tokio::sync::Notify,
}

/// `None` for the staged API, whose caller checks its own signal.
type Signal = Option<Rc<CallSignal>>;

fn aborted(signal: &Signal) -> bool {
    signal.as_ref().is_some_and(|s| s.aborted.get())
}

/// The original's result for a call cancelled before its body ran
/// (`ABORTED_BEFORE_DISPATCH`) or while or after it ran (`ABORTED`),
/// keeping the contexts of `prior`.
fn cancelled(signal: &Signal, prior: Option<&Value>) -> Value {
    let started = signal.as_ref().is_some_and(|s| s.body_invoked.get());
    let (message, code) = if started {
        ("tool call aborted", code::ABORTED)
    } else {
        (
            "tool call aborted before dispatch",
            code::ABORTED_BEFORE_DISPATCH,
        )
    };
    let mut result = failure(message, Some(("AbortError", code)));
    if let Some(contexts) = prior
        .and_then(|p| p["additionalContexts"].as_array())
        .filter(|c| !c.is_empty())
    {
        result["additionalContexts"] = Value::Array(contexts.clone());
    }
    result
}

/// A success the caller's cancellation overtook becomes the cancellation
/// result; failures (denials, tool errors) are kept.
fn unless_cancelled(signal: &Signal, result: Value) -> Value {
    if aborted(signal) && result["isError"] != json!(true) {
        cancelled(signal, Some(&result))
    } else {
        result
    }
}

/// The key of `exec` among the dispatching calls.
fn call_key(exec: &Value) -> (String, String) {
    (
        exec["agent"].as_str().unwrap_or_default().to_owned(),
        exec["callId"].as_str().unwrap_or_default().to_owned(),
    )
}

/// A monotonic check after `tools/pre-execute` (reference `tools.guard`):
/// its service's `check` answers a denial reason or null; it cannot allow.
/// Scope `""` guards every call, otherwise that agent's.
struct Guard {
    scope: String,
    service: String,
    owner: u64,
}

impl State {
    /// The tool `name` as agent `scope` sees it: its own, else a global one
    /// that every restriction of the scope admits (they intersect; the
    /// scope's own tools are exempt).
    fn visible(&self, scope: &str, name: &str) -> Option<&Tool> {
        if let Some(own) = self.tools.get(&(scope.to_owned(), name.to_owned())) {
            return Some(own);
        }
        self.tools
            .get(&(String::new(), name.to_owned()))
            .filter(|_| {
                self.restrictions
                    .iter()
                    .filter(|r| !scope.is_empty() && r.scope == scope)
                    .all(|r| r.admits(name))
            })
    }
}

type Registry = Rc<RefCell<State>>;

/// `tools.restrict {scope, allow?, deny?}`: fails loud on a global (no
/// scope) or empty filter and on names that are not global tools.
fn restriction(state: &State, params: &Value, owner: u64) -> Result<Restriction> {
    let invalid = |message: String| Error::new("INVALID_RESTRICTION", message);
    let scope = params["scope"].as_str().filter(|s| !s.is_empty()).ok_or_else(|| {
        invalid("tools.restrict() requires a scope (an agent id): a global restriction would mask every agent — deny the tool for the intended agent instead".to_owned())
    })?;
    let names = |key: &str| -> Result<Option<BTreeSet<String>>> {
        match &params[key] {
            Value::Null => Ok(None),
            Value::Array(a) => a
                .iter()
                .map(|n| {
                    n.as_str().map(str::to_owned).ok_or_else(|| {
                        invalid(format!("tools.restrict() {key} must list tool names"))
                    })
                })
                .collect::<Result<BTreeSet<String>>>()
                .map(Some),
            _ => Err(invalid(format!(
                "tools.restrict() {key} must list tool names"
            ))),
        }
    };
    let (allow, deny) = (names("allow")?, names("deny")?);
    if allow.is_none() && deny.is_none() {
        return Err(invalid("tools.restrict({}) is a no-op: pass `allow` and/or `deny` (an empty filter is almost always a materialized-empty-config bug)".to_owned()));
    }
    let known: BTreeSet<&str> = state
        .tools
        .keys()
        .filter(|(s, _)| s.is_empty())
        .map(|(_, n)| n.as_str())
        .collect();
    let unknown: Vec<String> = allow
        .iter()
        .chain(deny.iter())
        .flatten()
        .filter(|n| !known.contains(n.as_str()))
        .map(|n| format!("\"{n}\""))
        .collect();
    if !unknown.is_empty() {
        let listed: Vec<&str> = known.into_iter().collect();
        return Err(Error::new(
            "UNKNOWN_TOOL",
            format!(
                "tools.restrict() names unknown global tool{} {}; known global tools: {}",
                if unknown.len() > 1 { "s" } else { "" },
                unknown.join(", "),
                if listed.is_empty() {
                    "(none)".to_owned()
                } else {
                    listed.join(", ")
                }
            ),
        ));
    }
    Ok(Restriction {
        scope: scope.to_owned(),
        allow,
        deny,
        owner,
    })
}

/// An error result in the pipeline's format.
fn failure(message: &str, info: Option<(&str, &str)>) -> Value {
    let mut error = json!({"message": message});
    if let Some((name, code)) = info {
        error["info"] = json!({"name": name, "code": code});
    }
    json!({"isError": true, "error": error, "content": [msg::text(&format!("Error: {message}"))]})
}

fn from_error(e: &Error) -> Value {
    failure(&e.message, Some(("ToolError", &e.code)))
}

async fn run_tool(ctx: &Context, registry: &Registry, exec: &Value, signal: &Signal) -> Value {
    let name = exec["name"].as_str().unwrap_or_default();
    let scope = exec["agent"].as_str().unwrap_or_default();
    let Some((service, schema, output, timeout)) =
        registry.borrow().visible(scope, name).map(|t| {
            (
                t.service.clone(),
                t.schema.clone(),
                t.output.clone(),
                t.timeout,
            )
        })
    else {
        return failure(
            &format!("unknown tool \"{name}\""),
            Some(("ToolNotFoundError", "UNKNOWN_TOOL")),
        );
    };
    let violations = schema::validate(&schema["parameters"], &exec["arguments"]);
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
    let call = tool.call(tool_service::EXECUTE, exec.clone());
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
    match answer {
        Ok(v) => {
            let value = v.get("value").cloned().unwrap_or(Value::Null);
            let content = v.get("content").cloned().unwrap_or_else(|| json!([]));
            let meta = v.get("meta").filter(|m| !m.is_null()).cloned();
            // The output contract, before any wrapper or post-execute sees
            // the result: a value that breaks it is a failed call.
            let mut result = match &output {
                Some(output) => {
                    match project(ctx, &service, output, exec, value, content, meta).await {
                        Ok(result) => result,
                        Err(failed) => return failed,
                    }
                }
                None => {
                    let mut result = json!({"isError": false, "value": value, "content": content});
                    // Presentation meta (reference §5.3 step 7).
                    if let Some(meta) = meta {
                        result["meta"] = meta;
                    }
                    result
                }
            };
            // What the tool adds beyond its content: messages for the next
            // step, a conclusion.
            if let Some(contexts) = v.get("additionalContexts").filter(|c| c.is_array()) {
                result["additionalContexts"] = contexts.clone();
            }
            if v.get("concludesTurn") == Some(&json!(true)) {
                result["concludesTurn"] = json!(true);
            }
            result
        }
        Err(e) => from_error(&e),
    }
}

/// The approval seam (reference dsh-core §5.3): an `ask` decision goes to
/// the optional `approval` service; without one (headless) the call is
/// denied with the policy's reason, which says how to change the mode.
/// Denied, it answers the reason and whether the approval channel reported
/// a cancellation.
async fn approve(
    ctx: &Context,
    exec: &Value,
    decision: &Value,
) -> std::result::Result<(), (String, bool)> {
    let name = exec["name"].as_str().unwrap_or_default();
    let reason = decision["reason"].as_str().map(str::to_owned);
    let Some(agent) = exec["agent"].as_str().filter(|a| !a.is_empty()) else {
        return Err((
            reason.unwrap_or_else(|| {
                format!("tool \"{name}\" requires approval, but no agent asked for it")
            }),
            false,
        ));
    };
    let asked = ctx
        .service(service::APPROVAL)
        .call(
            approval::REQUEST,
            json!({"agent": agent, "toolName": name, "callId": exec["callId"], "reason": reason}),
        )
        .await;
    match asked {
        // No approval service: denied with the policy's reason.
        Err(e) if e.code == codes::SERVICE_UNAVAILABLE => Err((
            reason.unwrap_or_else(|| {
                format!("tool \"{name}\" requires approval (not yet supported)")
            }),
            false,
        )),
        Err(e) => Err((format!("approval for tool \"{name}\" failed: {e}"), false)),
        Ok(v) => match v["outcome"].as_str() {
            Some("allowed-once") => Ok(()),
            Some("rejected") => Err((format!("the user rejected tool \"{name}\""), false)),
            Some("cancelled") => Err((format!("approval for tool \"{name}\" was cancelled"), true)),
            _ => Err((
                format!("tool \"{name}\" requires approval, but no approval channel is available"),
                false,
            )),
        },
    }
}

/// A stage's dispatcher for `exec`'s agent: scope-filtered when it has one.
fn dispatcher(ctx: &Context, exec: &Value, event: &str) -> Dispatch {
    let d = ctx.dispatch(event);
    match exec["agent"].as_str().filter(|a| !a.is_empty()) {
        Some(scope) => d.scope(scope),
        None => d,
    }
}

/// The scheduler's first stage (reference: the registry's `prepare`): the
/// `tools/pre-execute` waterfall and the approval seam, in the caller's
/// order. Answers `{kind, exec, result?}`: `dispatch` (run the call with
/// this `exec`), `post-result` (a denial: no dispatch, but post-execute
/// still sees it, §5.3 step 5) or `final-result` (a failing listener: only
/// the `tools/result` emit is left).
async fn prepare(ctx: &Context, registry: &Registry, mut exec: Value, signal: &Signal) -> Value {
    // One token for this execution, the same in every stage's `exec`
    // (reference `exec.token`); the caller cannot choose it.
    exec["token"] = json!(dsh_sdk::new_id());
    // A call cancelled before it started publishes its result alone.
    if aborted(signal) {
        return stage("final-result", exec, Some(cancelled(signal, None)));
    }
    let decision = match dispatcher(ctx, &exec, bus::TOOLS_PRE_EXECUTE)
        .waterfall(json!({"exec": exec}), |_| async {
            Ok(json!({"kind": "allow"}))
        })
        .await
    {
        Ok(d) => d,
        Err(e) => return stage("final-result", exec, Some(from_error(&e))),
    };
    // A policy may hand the tool its sandbox (mode and workspace root).
    let mut exec = exec;
    if let Some(sandbox) = decision.get("sandbox") {
        exec["sandbox"] = sandbox.clone();
    }
    let denial = match decision["kind"].as_str() {
        Some("allow") | None => None,
        Some("ask") => match approve(ctx, &exec, &decision).await {
            // The user allowed this call beyond the fence: the tool must
            // not refuse it again.
            Ok(()) => {
                exec["approved"] = json!(true);
                None
            }
            // Cancelled by the caller and by the approval channel alike:
            // the caller's cancellation overtook the approval.
            Err((_, true)) if aborted(signal) => {
                return stage("post-result", exec, Some(cancelled(signal, None)));
            }
            Err((reason, _)) => Some(failure(&reason, None)),
        },
        Some(_) => Some(failure(
            decision["reason"].as_str().unwrap_or("denied by policy"),
            None,
        )),
    };
    if let Some(denied) = denial {
        return stage("post-result", exec, Some(denied));
    }
    match guard_reason(ctx, registry, &exec).await {
        Ok(Some(reason)) => stage("post-result", exec, Some(failure(&reason, None))),
        // Cancelled while the policy ran: no dispatch; a denial above
        // stands.
        Ok(None) if aborted(signal) => stage("post-result", exec, Some(cancelled(signal, None))),
        Ok(None) => stage("dispatch", exec, None),
        Err(e) => stage("final-result", exec, Some(from_error(&e))),
    }
}

/// The first denial of the guards that see `exec`: the global ones, then
/// its agent's, each in registration order.
async fn guard_reason(ctx: &Context, registry: &Registry, exec: &Value) -> Result<Option<String>> {
    let scope = exec["agent"].as_str().unwrap_or_default();
    let services: Vec<String> = {
        let state = registry.borrow();
        let global = state.guards.iter().filter(|g| g.scope.is_empty());
        let scoped = state
            .guards
            .iter()
            .filter(|g| !scope.is_empty() && g.scope == scope);
        global.chain(scoped).map(|g| g.service.clone()).collect()
    };
    for service in services {
        let answer = ctx
            .service(service)
            .call(tool_service::CHECK, json!({"exec": exec}))
            .await?;
        if let Some(reason) = answer.as_str() {
            return Ok(Some(reason.to_owned()));
        }
    }
    Ok(None)
}

/// The second stage: the `tools/execute` waterfall around the tool body.
/// Calls of one step may overlap here. Answers `{kind, result}`:
/// `post-result`, or `final-result` when a wrapper failed.
async fn dispatch(ctx: &Context, registry: &Registry, exec: &Value, signal: &Signal) -> Value {
    /// Ends the call's deferral window however the dispatch ends.
    struct Window(Registry, (String, String));
    impl Drop for Window {
        fn drop(&mut self) {
            self.0.borrow_mut().deferred.remove(&self.1);
        }
    }
    let key = call_key(exec);
    registry
        .borrow_mut()
        .deferred
        .insert(key.clone(), Vec::new());
    let window = Window(registry.clone(), key);
    // What this dispatch's body produced, to tell it from a result a
    // wrapper authored (or brought from another dispatch).
    let canonical: Rc<RefCell<Option<Value>>> = Rc::default();
    let (c, r, x, sig, slot) = (
        ctx.clone(),
        registry.clone(),
        exec.clone(),
        signal.clone(),
        canonical.clone(),
    );
    let outcome = dispatcher(ctx, exec, bus::TOOLS_EXECUTE)
        .waterfall(json!({"exec": exec}), move |_| async move {
            let result = run_tool(&c, &r, &x, &sig).await;
            *slot.borrow_mut() = Some(result.clone());
            Ok(result)
        })
        .await;
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
                let own = result["additionalContexts"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                result["additionalContexts"] =
                    Value::Array(deferred.into_iter().chain(own).collect());
            }
            json!({"kind": "post-result", "result": unless_cancelled(signal, result)})
        }
        Err(e) => json!({"kind": "final-result", "result": from_error(&e)}),
    }
}

/// A success a `tools/execute` wrapper authored goes through the tool's
/// output contract like the body's own (validated, rendered again); its
/// contexts and conclusion stay. Failures and tools without a contract are
/// taken as they are.
async fn normalize(ctx: &Context, registry: &Registry, exec: &Value, result: Value) -> Value {
    if result["isError"] == json!(true) {
        return result;
    }
    let name = exec["name"].as_str().unwrap_or_default();
    let scope = exec["agent"].as_str().unwrap_or_default();
    let Some((service, Some(output))) = registry
        .borrow()
        .visible(scope, name)
        .map(|t| (t.service.clone(), t.output.clone()))
    else {
        return result;
    };
    let value = result.get("value").cloned().unwrap_or(Value::Null);
    let content = result.get("content").cloned().unwrap_or_else(|| json!([]));
    let meta = result.get("meta").filter(|m| !m.is_null()).cloned();
    match project(ctx, &service, &output, exec, value, content, meta).await {
        Ok(mut normalized) => {
            for key in ["additionalContexts", "concludesTurn"] {
                if let Some(v) = result.get(key) {
                    normalized[key] = v.clone();
                }
            }
            normalized
        }
        Err(failed) => failed,
    }
}

/// The third stage, in the caller's order: the `tools/post-execute`
/// waterfall and its decision (accept, replace the content or the value,
/// add contexts, block), then [`finish`].
async fn finalize(
    ctx: &Context,
    registry: &Registry,
    exec: &Value,
    result: Value,
    signal: &Signal,
) -> Value {
    let result = match dispatcher(ctx, exec, bus::TOOLS_POST_EXECUTE)
        .waterfall(json!({"exec": exec, "result": result}), |_| async {
            Ok(json!({"kind": "accept"}))
        })
        .await
    {
        Ok(decision) => {
            unless_cancelled(signal, decide(ctx, registry, exec, result, &decision).await)
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
    exec: &Value,
    result: Value,
    decision: &Value,
) -> Value {
    let added = decision["additionalContexts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let with_contexts = |mut r: Value, mut contexts: Vec<Value>| {
        contexts.extend(added.iter().cloned());
        if !contexts.is_empty() {
            r["additionalContexts"] = Value::Array(contexts);
        }
        r
    };
    if decision["kind"] == "block" {
        return with_contexts(blocked(&decision["feedback"]), Vec::new());
    }
    let own = result["additionalContexts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let (content, value) = (decision.get("content"), decision.get("value"));
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
        let name = exec["name"].as_str().unwrap_or_default();
        let scope = exec["agent"].as_str().unwrap_or_default();
        let Some((service, output)) = registry
            .borrow()
            .visible(scope, name)
            .map(|t| (t.service.clone(), t.output.clone()))
        else {
            return failure(
                &format!("unknown tool \"{name}\""),
                Some(("ToolNotFoundError", "UNKNOWN_TOOL")),
            );
        };
        let Some(output) = output.filter(|o| o.render) else {
            return invalid_output(name, &["output.render is not declared".to_owned()]);
        };
        let mut replaced =
            match project(ctx, &service, &output, exec, value.clone(), json!([]), None).await {
                Ok(r) => r,
                Err(failed) => return failed,
            };
        if result["concludesTurn"] == json!(true) {
            replaced["concludesTurn"] = json!(true);
        }
        return with_contexts(replaced, own);
    }
    let mut result = result;
    if let Some(content) = content.filter(|c| c.is_array()) {
        result["content"] = content.clone();
    }
    if let Some(map) = result.as_object_mut() {
        map.remove("additionalContexts");
    }
    with_contexts(result, own)
}

fn stage(kind: &str, exec: Value, result: Option<Value>) -> Value {
    let mut out = json!({"kind": kind, "exec": exec});
    if let Some(result) = result {
        out["result"] = result;
    }
    out
}

/// The whole pipeline for one call: the stages in a row, under the
/// caller's signal (`exec.cancelled: true` when it is already aborted;
/// `cancel {agent, callId}` aborts it on the way).
async fn execute(ctx: Context, registry: Registry, exec: Value) -> Value {
    /// Forgets the call's signal however the call ends.
    struct Tracked(Registry, (String, String));
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.borrow_mut().signals.remove(&self.1);
        }
    }
    let state = Rc::new(CallSignal::default());
    state.aborted.set(exec["cancelled"] == json!(true));
    let key = call_key(&exec);
    registry
        .borrow_mut()
        .signals
        .insert(key.clone(), state.clone());
    let _tracked = Tracked(registry.clone(), key);
    let signal = Some(state);
    let prepared = prepare(&ctx, &registry, exec, &signal).await;
    let exec = prepared["exec"].clone();
    let (kind, result) = match prepared["kind"].as_str() {
        Some("dispatch") => {
            let d = dispatch(&ctx, &registry, &exec, &signal).await;
            (d["kind"].clone(), d["result"].clone())
        }
        _ => (prepared["kind"].clone(), prepared["result"].clone()),
    };
    if kind == "post-result" {
        finalize(&ctx, &registry, &exec, result, &signal).await
    } else {
        finish(&ctx, &registry, &exec, result).await
    }
}

/// A result blocked by `tools/post-execute`: the feedback (content blocks,
/// or a string) is the content; its text is the message (§5.3 step 8).
fn blocked(feedback: &Value) -> Value {
    let content = match feedback {
        Value::String(text) => json!([msg::text(text)]),
        Value::Array(_) => feedback.clone(),
        _ => json!([]),
    };
    let text: Vec<&str> = content
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["text"].as_str())
        .collect();
    let message = if text.is_empty() {
        "tool result blocked by post-execute policy".to_owned()
    } else {
        text.join("\n")
    };
    if content.as_array().is_some_and(Vec::is_empty) {
        return json!({"isError": true, "error": {"message": message},
                      "content": [msg::text(&message)]});
    }
    json!({"isError": true, "error": {"message": message}, "content": content})
}

/// The last stage: the tool's `finalizeContent` (when it declares one),
/// then the `tools/result` emit; answers the final result.
async fn finish(ctx: &Context, registry: &Registry, exec: &Value, result: Value) -> Value {
    let result = finalize_content(ctx, registry, exec, result).await;
    let _ = dispatcher(ctx, exec, bus::TOOLS_RESULT).emit(json!({"exec": exec, "result": result}));
    result
}

/// The tool's last word on the model-facing content of every outcome
/// (reference `finalizeContent`): its service's `finalizeContent`
/// (`{exec, result}`) answers content blocks, or null to keep them. A
/// failing finalizer fails the call.
async fn finalize_content(
    ctx: &Context,
    registry: &Registry,
    exec: &Value,
    mut result: Value,
) -> Value {
    let name = exec["name"].as_str().unwrap_or_default();
    let scope = exec["agent"].as_str().unwrap_or_default();
    let Some(service) = registry
        .borrow()
        .visible(scope, name)
        .filter(|t| t.finalize_content)
        .map(|t| t.service.clone())
    else {
        return result;
    };
    match ctx
        .service(service)
        .call(
            tool_service::FINALIZE_CONTENT,
            json!({"exec": exec, "result": result}),
        )
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

async fn handle(ctx: Context, registry: Registry, req: Request) -> Result<Reply> {
    match req.method.as_str() {
        tools::REGISTER => {
            let name = req.params["name"].as_str().unwrap_or_default().to_owned();
            let service = req.params["service"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if name.is_empty() || service.is_empty() {
                return Err(Error::new(
                    codes::INVALID_PAYLOAD,
                    "a tool needs a name and a service",
                ));
            }
            let scope = req.params["scope"].as_str().unwrap_or_default().to_owned();
            if registry
                .borrow()
                .tools
                .contains_key(&(scope.clone(), name.clone()))
            {
                return Err(Error::new(
                    "DUPLICATE_TOOL",
                    format!("tool \"{name}\" is already registered"),
                ));
            }
            let schema = json!({
                "name": name,
                "description": req.params["description"].as_str().unwrap_or_default(),
                "parameters": req.params["parameters"].clone(),
            });
            let output = match &req.params["output"] {
                Value::Null => None,
                Value::Object(o) => Some(Output {
                    schema: o.get("schema").cloned().unwrap_or(Value::Null),
                    render: o.get("render") == Some(&json!(true)),
                }),
                _ => {
                    return Err(Error::new(
                        codes::INVALID_PAYLOAD,
                        format!("tool \"{name}\": output must be {{schema, render?}}"),
                    ))
                }
            };
            let timeout = timeout_of(&name, &req.params["timeoutMs"])?;
            let owner = req.caller;
            registry.borrow_mut().tools.insert(
                (scope, name.clone()),
                Tool {
                    schema,
                    service,
                    parallel: req.params["parallel"] == json!(true),
                    output,
                    finalize_content: req.params["finalizeContent"] == json!(true),
                    timeout,
                    owner,
                },
            );
            let (r2, ctx2) = (registry.clone(), ctx.clone());
            req.on_caller_gone(move || {
                r2.borrow_mut().tools.retain(|_, t| t.owner != owner);
                let _ = ctx2.emit(bus::TOOLS_CHANGE, json!({}));
            });
            ctx.emit(bus::TOOLS_CHANGE, json!({}))?;
            Ok(Value::Null.into())
        }
        tools::SCHEMAS => {
            // Global tools, shadowed by and joined with the scope's own.
            let scope = req.params["scope"].as_str().unwrap_or_default();
            let state = registry.borrow();
            let mut names: Vec<&String> = state
                .tools
                .keys()
                .filter(|(s, _)| s.is_empty() || s == scope)
                .map(|(_, n)| n)
                .collect();
            names.sort();
            names.dedup();
            let schemas: Vec<Value> = names
                .into_iter()
                .filter_map(|n| state.visible(scope, n).map(|t| t.schema.clone()))
                .collect();
            Reply::json(schemas)
        }
        tools::MODE => {
            let name = req.params["name"].as_str().unwrap_or_default();
            let scope = req.params["scope"].as_str().unwrap_or_default();
            let parallel = registry
                .borrow()
                .visible(scope, name)
                .is_some_and(|t| t.parallel);
            Reply::json(if parallel { "parallel" } else { "exclusive" })
        }
        tools::RESTRICT => {
            let owner = req.caller;
            let r = restriction(&registry.borrow(), &req.params, owner)?;
            registry.borrow_mut().restrictions.push(r);
            let (r2, ctx2) = (registry.clone(), ctx.clone());
            req.on_caller_gone(move || {
                r2.borrow_mut().restrictions.retain(|r| r.owner != owner);
                let _ = ctx2.emit(bus::TOOLS_CHANGE, json!({}));
            });
            ctx.emit(bus::TOOLS_CHANGE, json!({}))?;
            Ok(Value::Null.into())
        }
        tools::GUARD => {
            let Some(service) = req.params["service"].as_str().filter(|s| !s.is_empty()) else {
                return Err(Error::new(
                    codes::INVALID_PAYLOAD,
                    "a guard needs a service (whose `check` answers a denial reason or null)",
                ));
            };
            let owner = req.caller;
            registry.borrow_mut().guards.push(Guard {
                scope: req.params["scope"].as_str().unwrap_or_default().to_owned(),
                service: service.to_owned(),
                owner,
            });
            let r2 = registry.clone();
            req.on_caller_gone(move || r2.borrow_mut().guards.retain(|g| g.owner != owner));
            Ok(Value::Null.into())
        }
        tools::DEFER_CONTEXT => {
            // A tool (or a wrapper) defers a context of the call it runs.
            let key = call_key(&req.params);
            let context = req.params["context"].clone();
            match registry.borrow_mut().deferred.get_mut(&key) {
                Some(list) if context.is_object() => list.push(context),
                Some(_) => {
                    return Err(Error::new(
                        codes::INVALID_PAYLOAD,
                        "deferContext needs a context (a user message)",
                    ))
                }
                None => {
                    return Err(Error::new(
                        "NOT_DISPATCHING",
                        format!("tool call \"{}\" is not dispatching", key.1),
                    ))
                }
            }
            Ok(Value::Null.into())
        }
        tools::EXECUTE => Ok(execute(ctx, registry, req.params.value().clone())
            .await
            .into()),
        // The stages, for a scheduler that orders policy and results while
        // dispatches overlap (the agent loop).
        tools::PREPARE => Ok(prepare(&ctx, &registry, req.params.value().clone(), &None)
            .await
            .into()),
        tools::DISPATCH => Ok(dispatch(&ctx, &registry, &req.params, &None).await.into()),
        tools::FINALIZE => {
            let (exec, result) = (&req.params["exec"], req.params["result"].clone());
            Ok(finalize(&ctx, &registry, exec, result, &None).await.into())
        }
        tools::CANCEL => {
            // The caller's signal of a running `execute` call.
            let signal = registry
                .borrow()
                .signals
                .get(&call_key(&req.params))
                .cloned();
            let Some(signal) = signal else {
                return Err(Error::new(
                    "NOT_RUNNING",
                    format!(
                        "tool call \"{}\" is not running",
                        req.params["callId"].as_str().unwrap_or_default()
                    ),
                ));
            };
            signal.aborted.set(true);
            signal.notify.notify_one();
            Ok(Value::Null.into())
        }
        tools::FINISH => {
            let (exec, result) = (&req.params["exec"], req.params["result"].clone());
            Ok(finish(&ctx, &registry, exec, result).await.into())
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
        let ctx2 = ctx.clone();
        ctx.provide(service::TOOLS, move |req| {
            handle(ctx2.clone(), registry.clone(), req)
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Tools);
