//! `tools`: the tool registry and the execution pipeline (reference
//! dsh-core §5): `tools/pre-execute` → `tools/execute` → `tools/post-execute`
//! (waterfalls), then `tools/result` (emit). A failing tool is an error
//! result the model sees, never a crashed turn.
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

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use dsh_sdk::prelude::*;
use dsh_sdk::vocab::msg;

struct Tool {
    schema: Value,
    service: String,
    parallel: bool,
    owner: u64,
}

/// Tools by (scope, name); scope `""` is global, otherwise an agent id whose
/// calls alone see the tool (and for whom it shadows a global one).
type Registry = Rc<RefCell<BTreeMap<(String, String), Tool>>>;

/// The tool `name` as agent `scope` sees it.
fn visible<'a>(
    tools: &'a BTreeMap<(String, String), Tool>,
    scope: &str,
    name: &str,
) -> Option<&'a Tool> {
    tools
        .get(&(scope.to_owned(), name.to_owned()))
        .or_else(|| tools.get(&(String::new(), name.to_owned())))
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

async fn run_tool(ctx: &Context, registry: &Registry, exec: &Value) -> Value {
    let name = exec["name"].as_str().unwrap_or_default();
    let scope = exec["agent"].as_str().unwrap_or_default();
    let Some((service, schema)) =
        visible(&registry.borrow(), scope, name).map(|t| (t.service.clone(), t.schema.clone()))
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
            Some(("ToolArgsError", "INVALID_ARGS")),
        );
    }
    match ctx.service(service).call("execute", exec.clone()).await {
        Ok(v) => {
            let mut result = json!({"isError": false, "value": v.get("value").cloned().unwrap_or(Value::Null),
                                    "content": v.get("content").cloned().unwrap_or_else(|| json!([]))});
            // What the tool adds beyond its content (reference §5.3 step 7):
            // presentation meta, messages for the next step, a conclusion.
            if let Some(meta) = v.get("meta").filter(|m| !m.is_null()) {
                result["meta"] = meta.clone();
            }
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
async fn approve(ctx: &Context, exec: &Value, decision: &Value) -> std::result::Result<(), String> {
    let name = exec["name"].as_str().unwrap_or_default();
    let reason = decision["reason"].as_str().map(str::to_owned);
    let Some(agent) = exec["agent"].as_str().filter(|a| !a.is_empty()) else {
        return Err(reason.unwrap_or_else(|| {
            format!("tool \"{name}\" requires approval, but no agent asked for it")
        }));
    };
    let asked = ctx
        .service("approval")
        .call(
            "request",
            json!({"agent": agent, "toolName": name, "callId": exec["callId"], "reason": reason}),
        )
        .await;
    match asked {
        // No approval service: denied with the policy's reason.
        Err(e) if e.code == codes::SERVICE_UNAVAILABLE => Err(reason
            .unwrap_or_else(|| format!("tool \"{name}\" requires approval (not yet supported)"))),
        Err(e) => Err(format!("approval for tool \"{name}\" failed: {e}")),
        Ok(v) => match v["outcome"].as_str() {
            Some("allowed-once") => Ok(()),
            Some("rejected") => Err(format!("the user rejected tool \"{name}\"")),
            Some("cancelled") => Err(format!("approval for tool \"{name}\" was cancelled")),
            _ => Err(format!(
                "tool \"{name}\" requires approval, but no approval channel is available"
            )),
        },
    }
}

async fn execute(ctx: Context, registry: Registry, exec: Value) -> Value {
    let scope = exec["agent"].as_str().unwrap_or_default().to_owned();
    let dispatch = |event: &str| {
        let d = ctx.dispatch(event);
        if scope.is_empty() {
            d
        } else {
            d.scope(scope.clone())
        }
    };
    let decision = match dispatch("tools/pre-execute")
        .waterfall(json!({"exec": exec}), |_| async {
            Ok(json!({"kind": "allow"}))
        })
        .await
    {
        Ok(d) => d,
        Err(e) => return from_error(&e),
    };
    // A policy may hand the tool its sandbox (mode and workspace root).
    let mut exec = exec;
    if let Some(sandbox) = decision.get("sandbox") {
        exec["sandbox"] = sandbox.clone();
    }
    // A denial skips `tools/execute` but, unlike a failure before the
    // policy ran, still goes through `tools/post-execute` (§5.3 step 5).
    let denial = match decision["kind"].as_str() {
        Some("allow") | None => None,
        Some("ask") => match approve(&ctx, &exec, &decision).await {
            // The user allowed this call beyond the fence: the tool must
            // not refuse it again.
            Ok(()) => {
                exec["approved"] = json!(true);
                None
            }
            Err(reason) => Some(failure(&reason, None)),
        },
        Some(_) => Some(failure(
            decision["reason"].as_str().unwrap_or("denied by policy"),
            None,
        )),
    };
    let mut result = match denial {
        Some(denied) => denied,
        None => {
            let (c, r, x) = (ctx.clone(), registry.clone(), exec.clone());
            match dispatch("tools/execute")
                .waterfall(json!({"exec": exec}), move |_| async move {
                    Ok(run_tool(&c, &r, &x).await)
                })
                .await
            {
                Ok(r) => r,
                Err(e) => from_error(&e),
            }
        }
    };
    match dispatch("tools/post-execute")
        .waterfall(json!({"exec": exec, "result": result}), |_| async {
            Ok(json!({"kind": "accept"}))
        })
        .await
    {
        // Either decision may attach `additionalContexts`: a block exposes
        // only its own (the result's are dropped with the result), an
        // accept adds them after the result's (reference §5.3 step 8).
        Ok(d) if d["kind"] == "block" => {
            result = blocked(&d["feedback"]);
            with_contexts(&mut result, &d["additionalContexts"]);
        }
        Ok(d) => {
            if let Some(content) = d.get("content").filter(|c| c.is_array()) {
                result["content"] = content.clone();
            }
            with_contexts(&mut result, &d["additionalContexts"]);
        }
        Err(e) => result = from_error(&e),
    }
    finish(&ctx, &exec, result)
}

/// Appends a post-execute decision's `additionalContexts` (when it has
/// any) after those the result already carries.
fn with_contexts(result: &mut Value, decision: &Value) {
    let Some(added) = decision.as_array().filter(|a| !a.is_empty()) else {
        return;
    };
    let mut all = result["additionalContexts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    all.extend(added.iter().cloned());
    result["additionalContexts"] = Value::Array(all);
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

fn finish(ctx: &Context, exec: &Value, result: Value) -> Value {
    let scope = exec["agent"].as_str().unwrap_or_default();
    let mut d = ctx.dispatch("tools/result");
    if !scope.is_empty() {
        d = d.scope(scope);
    }
    let _ = d.emit(json!({"exec": exec, "result": result}));
    result
}

async fn handle(ctx: Context, registry: Registry, req: Request) -> Result<Reply> {
    match req.method.as_str() {
        "register" => {
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
            let owner = req.caller;
            registry.borrow_mut().insert(
                (scope, name.clone()),
                Tool {
                    schema,
                    service,
                    parallel: req.params["parallel"] == json!(true),
                    owner,
                },
            );
            let (r2, ctx2) = (registry.clone(), ctx.clone());
            req.on_caller_gone(move || {
                r2.borrow_mut().retain(|_, t| t.owner != owner);
                let _ = ctx2.emit("tools/change", json!({}));
            });
            ctx.emit("tools/change", json!({}))?;
            Ok(Value::Null.into())
        }
        "schemas" => {
            // Global tools, shadowed by and joined with the scope's own.
            let scope = req.params["scope"].as_str().unwrap_or_default();
            let tools = registry.borrow();
            let mut names: Vec<&String> = tools
                .keys()
                .filter(|(s, _)| s.is_empty() || s == scope)
                .map(|(_, n)| n)
                .collect();
            names.sort();
            names.dedup();
            let schemas: Vec<Value> = names
                .into_iter()
                .filter_map(|n| visible(&tools, scope, n).map(|t| t.schema.clone()))
                .collect();
            Reply::json(schemas)
        }
        "mode" => {
            let name = req.params["name"].as_str().unwrap_or_default();
            let scope = req.params["scope"].as_str().unwrap_or_default();
            let parallel = visible(&registry.borrow(), scope, name).is_some_and(|t| t.parallel);
            Reply::json(if parallel { "parallel" } else { "exclusive" })
        }
        "execute" => Ok(execute(ctx, registry, req.params.clone()).await.into()),
        _ => Err(req.unknown_method()),
    }
}

struct Tools;

impl Plugin for Tools {
    const NAME: &'static str = "tools";
    const DESCRIPTION: &'static str = "tool registry and execution pipeline (service `tools`)";
    const PROVIDES: &'static [&'static str] = &["tools"];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        let registry: Registry = Rc::default();
        let ctx2 = ctx.clone();
        ctx.provide("tools", move |req| {
            handle(ctx2.clone(), registry.clone(), req)
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Tools);
