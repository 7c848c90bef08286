//! `system-prompt`: ordered sections, dynamic runtime contexts, prompt
//! variables, the configured tool order and the `system-prompt/assemble`
//! waterfall (reference dsh-core §6; the original's
//! `packages/core/system-prompt/src/index.ts`).
//!
//! Every registration (`section`, `context`, `variable`,
//! `suppressRuntimeContext`) is global, or scoped to one agent with a
//! `scope` parameter; a scoped entry shadows a global one of the same name in
//! that agent's assemblies only. Each unwinds with the fiber that made it.

use std::cell::RefCell;
use std::rc::Rc;

use dsh_sdk::api::system_prompt::{
    AssembleParams, Changed, ProviderRequest, ScopeParams, SectionParams, SectionProvider,
    VariableParams,
};
use dsh_sdk::names::{bus, service, system_prompt};
use dsh_sdk::prelude::*;
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// The reserved `toolOrder` entry where unlisted tools are inserted,
/// lexicographically.
pub const TOOL_ORDER_REST: &str = "<unlisted-tools>";

/// Two sections (or contexts, or variables) of one name in one layer.
const DUPLICATE_SECTION: &str = "DUPLICATE_SECTION";
const DUPLICATE_CONTEXT: &str = "DUPLICATE_CONTEXT";
const DUPLICATE_VARIABLE: &str = "DUPLICATE_VARIABLE";
/// A variable name that no `{{name}}` reference can spell.
const INVALID_VARIABLE_NAME: &str = "INVALID_VARIABLE_NAME";
/// More than one effective `complete` section.
const MULTIPLE_COMPLETE: &str = "MULTIPLE_COMPLETE_SECTIONS";
/// `toolOrder` names a tool no provider knows, or a tool is named
/// `<unlisted-tools>`.
const TOOL_ORDER: &str = "TOOL_ORDER";
/// A render failure (malformed, unknown or valueless variable).
const PROMPT: &str = "PROMPT";
/// A malformed authoritative assembly (the original's `InvariantError`).
const INVARIANT: &str = "INVARIANT";
/// The package the original attributes assembly invariants to.
const INVARIANT_PACKAGE: &str = "@deepseek-ai/dsh-system-prompt";

/// The original's config fields, as users write them.
#[derive(Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    persona: String,
    include_harness_identity: bool,
    /// `false` suppresses every runtime context (contexts are neither
    /// evaluated nor accepted from the waterfall).
    include_runtime_context: bool,
    /// Model-facing tool names in order, with [`TOOL_ORDER_REST`] exactly
    /// once; omitted means lexicographic order.
    tool_order: Option<Vec<String>>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            persona: String::new(),
            include_harness_identity: true,
            include_runtime_context: true,
            tool_order: None,
        }
    }
}

/// `validateToolOrder`: no duplicates, the rest entry present. Listed names
/// are checked at assembly, when the tools are known.
fn validate_tool_order(order: &[String]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for name in order {
        if !seen.insert(name.as_str()) {
            return Err(Error::new(
                codes::INVALID_CONFIG,
                format!("toolOrder lists \"{name}\" more than once"),
            ));
        }
    }
    if !seen.contains(TOOL_ORDER_REST) {
        return Err(Error::new(
            codes::INVALID_CONFIG,
            format!("toolOrder must contain the \"{TOOL_ORDER_REST}\" rest entry (where unlisted tools are inserted)"),
        ));
    }
    Ok(())
}

fn tool_name(tool: &Value) -> &str {
    tool["name"].as_str().unwrap_or_default()
}

/// `orderTools`: lexicographic by name (stable), or the configured order
/// with the unlisted tools, sorted, at the rest entry. A listed name no
/// provider knows fails the assembly; a known one may be absent.
fn order_tools(
    mut tools: Vec<Value>,
    order: Option<&[String]>,
    known: &[String],
) -> Result<Vec<Value>> {
    if tools.iter().any(|t| tool_name(t) == TOOL_ORDER_REST) {
        return Err(Error::new(
            TOOL_ORDER,
            format!("tool provider returned reserved tool name \"{TOOL_ORDER_REST}\" (reserved for toolOrder's rest entry)"),
        ));
    }
    tools.sort_by(|a, b| tool_name(a).cmp(tool_name(b)));
    let Some(order) = order else {
        return Ok(tools);
    };
    let unknown: Vec<String> = order
        .iter()
        .filter(|n| n.as_str() != TOOL_ORDER_REST && !known.contains(n))
        .map(|n| format!("\"{n}\""))
        .collect();
    if !unknown.is_empty() {
        let mut names: Vec<&str> = known.iter().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        let names = if names.is_empty() {
            "(none)".to_owned()
        } else {
            names.join(", ")
        };
        let plural = if unknown.len() > 1 { "s" } else { "" };
        return Err(Error::new(
            TOOL_ORDER,
            format!(
                "toolOrder lists unregistered tool{plural} {}; known tools: {names}",
                unknown.join(", ")
            ),
        ));
    }
    let mut out = Vec::with_capacity(tools.len());
    for name in order {
        if name == TOOL_ORDER_REST {
            out.extend(
                tools
                    .iter()
                    .filter(|t| !order.iter().any(|n| n == tool_name(t)))
                    .cloned(),
            );
        } else {
            out.extend(tools.iter().filter(|t| tool_name(t) == name).cloned());
        }
    }
    Ok(out)
}

fn valid_variable_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Interpolates one section's or context's (`kind`) text with the
/// assembly's variables; diagnostics name the input.
fn interpolate(
    kind: &str,
    input: &str,
    text: &str,
    vars: &serde_json::Map<String, Value>,
) -> Result<String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let Some(end) = rest[start + 2..].find("}}") else {
            break;
        };
        out.push_str(&rest[..start]);
        let name = &rest[start + 2..start + 2 + end];
        if !valid_variable_name(name) {
            return Err(Error::new(
                PROMPT,
                format!(
                    "malformed prompt variable reference \"{{{{{name}}}}}\" in {kind} \"{input}\""
                ),
            ));
        }
        match vars.get(name) {
            Some(Value::String(v)) => out.push_str(v),
            Some(_) => {
                return Err(Error::new(
                    PROMPT,
                    format!("prompt variable \"{{{{{name}}}}}\" has no value for this assembly ({kind} \"{input}\")"),
                ))
            }
            None => {
                let mut known: Vec<&str> = vars.keys().map(String::as_str).collect();
                known.sort_unstable();
                let list = if known.is_empty() {
                    "(none)".to_owned()
                } else {
                    known.join(", ")
                };
                return Err(Error::new(PROMPT, format!("unknown prompt variable \"{{{{{name}}}}}\" in {kind} \"{input}\"; registered variables: {list}")));
            }
        }
        rest = &rest[start + 2 + end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The `(name, rendered text)` of each entry of `list` (`sections` or
/// `contexts`) that renders to something.
fn render_each(
    kind: &str,
    list: &Value,
    vars: &serde_json::Map<String, Value>,
) -> Result<Vec<(String, String)>> {
    let mut parts = Vec::new();
    for s in list.as_array().into_iter().flatten() {
        let name = s["name"].as_str().unwrap_or_default();
        let text = interpolate(kind, name, s["text"].as_str().unwrap_or_default(), vars)?;
        if !text.trim().is_empty() {
            parts.push((name.to_owned(), text));
        }
    }
    Ok(parts)
}

/// The model-facing runtime-context snapshot (`joinContextSections`), `""`
/// when no context is active.
fn join_context_sections(sections: &[(String, String)]) -> String {
    if sections.is_empty() {
        return String::new();
    }
    let body: Vec<&str> = sections.iter().map(|(_, t)| t.as_str()).collect();
    format!(
        "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\n\n{}",
        body.join("\n\n")
    )
}

/// Adds the rendered forms to an assembly: `system` (`renderPrompt`),
/// `context` (the runtime-context snapshot) and `contextSections` (its named
/// parts).
fn render(assembly: &mut Value) -> Result<()> {
    let vars = assembly["variables"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let sections = render_each("section", &assembly["sections"], &vars)?;
    let contexts = render_each("context", &assembly["contexts"], &vars)?;
    let system: Vec<&str> = sections.iter().map(|(_, t)| t.as_str()).collect();
    assembly["system"] = json!(system.join("\n\n"));
    assembly["context"] = json!(join_context_sections(&contexts));
    assembly["contextSections"] = Value::Array(
        contexts
            .iter()
            .map(|(name, text)| json!({"name": name, "text": text}))
            .collect(),
    );
    Ok(())
}

/// One registration in its layer (`scope`, `None` = global); `id` is what
/// its owner's disposal removes.
struct Entry<T> {
    id: u64,
    scope: Option<String>,
    item: T,
}

#[derive(Clone)]
struct Section {
    name: String,
    order: f64,
    /// The text, or (with `provider`) what the provider last answered.
    text: String,
    /// A service method answering the text at each assembly, called with
    /// [`ProviderRequest`] (the assembly's parameters without the tools).
    provider: Option<SectionProvider>,
    complete: bool,
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    sections: Vec<Entry<Section>>,
    contexts: Vec<Entry<Section>>,
    /// A variable's value; `None` is "registered, no value here".
    variables: Vec<Entry<(String, Option<String>)>>,
    suppressors: Vec<Entry<()>>,
}

type Shared = Rc<RefCell<Registry>>;

/// The entries visible to an assembly for `scope`: the global ones, then
/// those of the scope, a scoped name shadowing its global twin (in place of
/// it). `key` names an entry.
fn visible<'a, T>(
    list: &'a [Entry<T>],
    scope: Option<&str>,
    key: impl Fn(&T) -> &str,
) -> Vec<&'a T> {
    let mut out: Vec<&T> = list
        .iter()
        .filter(|e| e.scope.is_none())
        .map(|e| &e.item)
        .collect();
    let Some(scope) = scope else {
        return out;
    };
    for e in list.iter().filter(|e| e.scope.as_deref() == Some(scope)) {
        match out.iter().position(|g| key(g) == key(&e.item)) {
            Some(i) => out[i] = &e.item,
            None => out.push(&e.item),
        }
    }
    out
}

/// The duplicate message of the original, per layer.
fn duplicate(what: &str, name: &str, scoped: bool) -> String {
    if scoped {
        format!("prompt {what} \"{name}\" is already registered in this scope")
    } else {
        let per = if what == "variable" {
            "for a per-agent value"
        } else {
            "for a per-agent override"
        };
        format!("prompt {what} \"{name}\" is already registered ({per}, register it with that agent's `scope` instead)")
    }
}

/// Adds `item` to the layer of `scope` in the list `field` selects, removed
/// again (with a change event) when the calling fiber goes.
fn register<T: 'static>(
    ctx: &Context,
    reg: &Shared,
    req: &Request,
    field: fn(&mut Registry) -> &mut Vec<Entry<T>>,
    scope: Option<String>,
    item: T,
) -> Result<Reply> {
    let id = {
        let mut r = reg.borrow_mut();
        r.next_id += 1;
        let id = r.next_id;
        field(&mut r).push(Entry { id, scope, item });
        id
    };
    let (r2, ctx2) = (reg.clone(), ctx.clone());
    req.on_caller_gone(move || {
        field(&mut r2.borrow_mut()).retain(|e| e.id != id);
        let _ = ctx2.emit(bus::SYSTEM_PROMPT_CHANGE, Changed {});
    });
    ctx.emit(bus::SYSTEM_PROMPT_CHANGE, Changed {})?;
    Ok(Value::Null.into())
}

/// The refusal of a `scope` that is not an agent id.
fn bad_scope() -> Error {
    Error::new(
        codes::INVALID_PAYLOAD,
        "`scope` must be an agent id (a non-empty string)",
    )
}

/// Parses a registration's params. When they do not parse, a field with a
/// message of its own (a `scope` that is not a string, or what `field`
/// names) is refused with that message; otherwise the parse error names
/// the field.
fn params<T: DeserializeOwned>(
    req: &Request,
    field: impl Fn(&Value) -> Option<Error>,
) -> Result<T> {
    req.params_as().map_err(|e| {
        if !matches!(req.params["scope"], Value::Null | Value::String(_)) {
            return bad_scope();
        }
        field(&req.params).unwrap_or(e)
    })
}

/// The registration's layer: global, or an agent's.
fn scope_of(scope: Option<String>) -> Result<Option<String>> {
    match scope {
        Some(s) if s.is_empty() => Err(bad_scope()),
        scope => Ok(scope),
    }
}

/// A `section` or `context` registration's fields.
fn section_of(req: &Request, what: &str) -> Result<(Option<String>, Section)> {
    let unnamed = || {
        Error::new(
            codes::INVALID_PAYLOAD,
            format!("a prompt {what} needs a name and a finite order"),
        )
    };
    let bad_provider = |name: &str| {
        Error::new(
            codes::INVALID_PAYLOAD,
            format!("prompt {what} \"{name}\" provider must be {{service, method}}"),
        )
    };
    let p: SectionParams = params(req, |p| {
        if !p["name"].is_string() {
            return Some(unnamed());
        }
        let provider = &p["provider"];
        let malformed = !provider.is_null() && SectionProvider::deserialize(provider).is_err();
        malformed.then(|| bad_provider(p["name"].as_str().unwrap_or_default()))
    })?;
    let scope = scope_of(p.scope)?;
    let name = p.name;
    if name.is_empty() {
        return Err(unnamed());
    }
    // A missing or non-numeric order is refused, not read as 0.
    let Some(order) = p.order.get() else {
        return Err(Error::new(
            codes::INVALID_PAYLOAD,
            format!("prompt {what} \"{name}\" order must be a finite number"),
        ));
    };
    let provider = match p.provider {
        None => None,
        Some(provider) => {
            if provider.service.is_empty() || provider.method.is_empty() {
                return Err(bad_provider(&name));
            }
            if p.text.is_some() {
                return Err(Error::new(
                    codes::INVALID_PAYLOAD,
                    format!("prompt {what} \"{name}\" takes a `text` or a `provider`, not both"),
                ));
            }
            Some(provider)
        }
    };
    let section = Section {
        name,
        order,
        text: p.text.unwrap_or_default(),
        provider,
        complete: p.complete,
    };
    Ok((scope, section))
}

/// What a section provider is told of the assembly: its params without
/// the tools, as the caller sent them.
fn provider_context(req: &Request) -> Value {
    let mut context = req.params.value().clone();
    if let Some(o) = context.as_object_mut() {
        o.remove("tools");
    }
    context
}

/// Asks each provider of `list` (sections or contexts, `kind`) for its text
/// in this assembly; a failure names the entry.
async fn resolve(
    ctx: &Context,
    kind: &str,
    list: &mut [Section],
    scope: Option<&str>,
    req: &Request,
) -> Result<()> {
    for s in list.iter_mut() {
        let Some(p) = &s.provider else { continue };
        let request = ProviderRequest {
            kind: kind.to_owned(),
            name: s.name.clone(),
            scope: scope.map(str::to_owned),
            context: provider_context(req),
        };
        let answer = ctx
            .service(p.service.as_str())
            .call(&p.method, &request)
            .await
            .map_err(|e| {
                Error::new(
                    e.code.clone(),
                    format!(
                        "the provider of prompt {kind} \"{}\" failed: {}",
                        s.name, e.message
                    ),
                )
            })?;
        s.text = answer
            .as_str()
            .ok_or_else(|| {
                Error::new(
                    PROMPT,
                    format!(
                        "the provider of prompt {kind} \"{}\" answered {answer}, not a text",
                        s.name
                    ),
                )
            })?
            .to_owned();
    }
    Ok(())
}

async fn handle(
    ctx: Context,
    reg: Shared,
    tool_order: Rc<Option<Vec<String>>>,
    req: Request,
) -> Result<Reply> {
    match req.method.as_str() {
        system_prompt::SECTION => section(&ctx, &reg, &req),
        system_prompt::CONTEXT => context(&ctx, &reg, &req),
        system_prompt::VARIABLE => variable(&ctx, &reg, &req),
        system_prompt::SUPPRESS_RUNTIME_CONTEXT => suppress_runtime_context(&ctx, &reg, &req),
        system_prompt::ASSEMBLE => assemble(&ctx, &reg, tool_order.as_deref(), &req).await,
        _ => Err(req.unknown_method()),
    }
}

/// `section`: one name per layer.
fn section(ctx: &Context, reg: &Shared, req: &Request) -> Result<Reply> {
    let (scope, section) = section_of(req, "section")?;
    let taken = reg
        .borrow()
        .sections
        .iter()
        .any(|e| e.scope == scope && e.item.name == section.name);
    if taken {
        let msg = duplicate("section", &section.name, scope.is_some());
        return Err(Error::new(DUPLICATE_SECTION, msg));
    }
    register(ctx, reg, req, |r| &mut r.sections, scope, section)
}

/// `context`: one name per layer.
fn context(ctx: &Context, reg: &Shared, req: &Request) -> Result<Reply> {
    let (scope, context) = section_of(req, "context")?;
    let taken = reg
        .borrow()
        .contexts
        .iter()
        .any(|e| e.scope == scope && e.item.name == context.name);
    if taken {
        let msg = duplicate("context", &context.name, scope.is_some());
        return Err(Error::new(DUPLICATE_CONTEXT, msg));
    }
    register(ctx, reg, req, |r| &mut r.contexts, scope, context)
}

/// `variable`: a valid name, once per layer, with a string or no value.
fn variable(ctx: &Context, reg: &Shared, req: &Request) -> Result<Reply> {
    let p: VariableParams = params(req, |p| {
        let name = p["name"].as_str().unwrap_or_default();
        if !valid_variable_name(name) {
            return Some(invalid_variable_name(name));
        }
        (!matches!(p["value"], Value::Null | Value::String(_))).then(|| {
            Error::new(
                codes::INVALID_PAYLOAD,
                format!("prompt variable \"{name}\" value must be a string or null"),
            )
        })
    })?;
    let scope = scope_of(p.scope)?;
    let name = p.name;
    if !valid_variable_name(&name) {
        return Err(invalid_variable_name(&name));
    }
    let taken = reg
        .borrow()
        .variables
        .iter()
        .any(|e| e.scope == scope && e.item.0 == name);
    if taken {
        let msg = duplicate("variable", &name, scope.is_some());
        return Err(Error::new(DUPLICATE_VARIABLE, msg));
    }
    let item = (name, p.value);
    register(ctx, reg, req, |r| &mut r.variables, scope, item)
}

fn invalid_variable_name(name: &str) -> Error {
    Error::new(
        INVALID_VARIABLE_NAME,
        format!("invalid prompt variable name \"{name}\" (must match /^[a-z][a-z0-9_]*$/)"),
    )
}

/// `suppressRuntimeContext`: for the scope's assemblies (or all).
fn suppress_runtime_context(ctx: &Context, reg: &Shared, req: &Request) -> Result<Reply> {
    let p: ScopeParams = params(req, |_| None)?;
    let scope = scope_of(p.scope)?;
    register(ctx, reg, req, |r| &mut r.suppressors, scope, ())
}

/// `assemble`: the visible registrations of the caller's scope, the tools
/// it passes in canonical order, then the waterfall (whose result is
/// authoritative, except that a `complete` section is restored and a
/// suppressed runtime context stays empty), then the rendered forms.
async fn assemble(
    ctx: &Context,
    reg: &Shared,
    tool_order: Option<&[String]>,
    req: &Request,
) -> Result<Reply> {
    let params: AssembleParams = req.params_as()?;
    let scope = params.scope.as_deref();
    // The caller's variables (the loop's `provider`, `model`, `cwd`),
    // then the registered ones, a scoped value shadowing a global one.
    let mut variables = params.variables;
    let (mut sections, complete, mut contexts, suppressed) = {
        let r = reg.borrow();
        for (name, value) in visible(&r.variables, scope, |v| v.0.as_str()) {
            variables.insert(
                name.clone(),
                value.as_ref().map_or(Value::Null, |v| json!(v)),
            );
        }
        let suppressed = r
            .suppressors
            .iter()
            .any(|e| e.scope.is_none() || e.scope.as_deref() == scope);
        let mut sections: Vec<Section> = visible(&r.sections, scope, |s| s.name.as_str())
            .into_iter()
            .cloned()
            .collect();
        sections.sort_by(|a, b| a.order.total_cmp(&b.order));
        let complete: Vec<&Section> = sections.iter().filter(|s| s.complete).collect();
        if complete.len() > 1 {
            let names: Vec<String> = complete.iter().map(|s| format!("\"{}\"", s.name)).collect();
            return Err(Error::new(
                MULTIPLE_COMPLETE,
                format!(
                    "multiple complete prompt sections are active: {}",
                    names.join(", ")
                ),
            ));
        }
        let complete = complete.first().map(|s| s.name.clone());
        let mut contexts: Vec<Section> = if suppressed {
            Vec::new()
        } else {
            visible(&r.contexts, scope, |s| s.name.as_str())
                .into_iter()
                .cloned()
                .collect()
        };
        contexts.sort_by(|a, b| a.order.total_cmp(&b.order));
        (sections, complete, contexts, suppressed)
    };
    // Shadowing and suppression come first: a shadowed or suppressed
    // provider is never asked.
    resolve(ctx, "section", &mut sections, scope, req).await?;
    resolve(ctx, "context", &mut contexts, scope, req).await?;
    let complete = complete.and_then(|name| {
        let s = sections.iter().find(|s| s.name == name)?;
        Some(json!([{"name": s.name, "text": s.text}]))
    });
    let tools = params.tools;
    let known: Vec<String> = match params.known_tools {
        Some(names) => names,
        None => tools.iter().map(|t| tool_name(t).to_owned()).collect(),
    };
    let tools = order_tools(tools, tool_order, &known)?;
    let list = |l: &[Section]| -> Vec<Value> {
        l.iter()
            .map(|s| json!({"name": s.name, "text": s.text}))
            .collect()
    };
    let assembly = json!({
        "sections": list(&sections),
        "contexts": list(&contexts),
        "tools": tools,
        "variables": variables,
    });
    let mut d = ctx.dispatch(bus::SYSTEM_PROMPT_ASSEMBLE);
    if let Some(scope) = scope {
        d = d.scope(scope);
    }
    let mut assembly = d.waterfall(assembly, |a| async move { Ok(a) }).await?;
    validate_assembly(&assembly).map_err(|m| {
        Error::new(
            INVARIANT,
            format!("invariant violated by \"{INVARIANT_PACKAGE}\": {m}"),
        )
    })?;
    if let Some(complete) = complete {
        assembly["sections"] = complete;
    }
    if suppressed {
        assembly["contexts"] = json!([]);
    }
    render(&mut assembly)?;
    Ok(assembly.into())
}

/// The original's check of the waterfall's authoritative result: section
/// and context names non-empty and unique, their texts strings, tool names
/// non-empty, variable names `[a-z][a-z0-9_]*` with string (or absent)
/// values. The violated contract, in the original's words.
fn validate_assembly(assembly: &Value) -> std::result::Result<(), String> {
    for kind in ["section", "context"] {
        let mut seen = std::collections::HashSet::new();
        for entry in assembly[format!("{kind}s")]
            .as_array()
            .into_iter()
            .flatten()
        {
            let name = entry["name"].as_str().unwrap_or_default();
            if name.is_empty() {
                return Err(format!("assembled {kind} names must be non-empty"));
            }
            if !seen.insert(name) {
                return Err(format!(
                    "assembled {kind} name {} is duplicated",
                    json!(name)
                ));
            }
            if !entry["text"].is_string() {
                return Err(format!(
                    "assembled {kind} {} text must be a string",
                    json!(name)
                ));
            }
        }
    }
    for tool in assembly["tools"].as_array().into_iter().flatten() {
        if tool_name(tool).is_empty() {
            return Err("assembled tool names must be non-empty".to_owned());
        }
    }
    for (name, value) in assembly["variables"].as_object().into_iter().flatten() {
        if !valid_variable_name(name) {
            return Err(format!(
                "assembled variable name {} is invalid",
                json!(name)
            ));
        }
        if !(value.is_null() || value.is_string()) {
            return Err(format!(
                "assembled variable {} must be a string or undefined",
                json!(name)
            ));
        }
    }
    Ok(())
}

struct SystemPrompt;

impl Plugin for SystemPrompt {
    const NAME: &'static str = "system-prompt";
    const DESCRIPTION: &'static str = "prompt assembly (service `systemPrompt`)";
    const PROVIDES: &'static [&'static str] = &[service::SYSTEM_PROMPT];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        if let Some(order) = &config.tool_order {
            validate_tool_order(order)?;
        }
        let reg: Shared = Rc::default();
        {
            let mut r = reg.borrow_mut();
            let builtin = |id, name: &str, order, text: String| Entry {
                id,
                scope: None,
                item: Section {
                    name: name.to_owned(),
                    order,
                    text,
                    provider: None,
                    complete: false,
                },
            };
            if config.include_harness_identity {
                r.sections.push(builtin(
                    1,
                    "harness:identity",
                    -100.0,
                    "You are an AI agent powered by DeepSeek Harness.".into(),
                ));
            }
            r.sections
                .push(builtin(2, "deployment:persona", 0.0, config.persona));
            if !config.include_runtime_context {
                r.suppressors.push(Entry {
                    id: 3,
                    scope: None,
                    item: (),
                });
            }
            r.next_id = 3;
        }
        let tool_order = Rc::new(config.tool_order);
        let ctx2 = ctx.clone();
        ctx.provide(service::SYSTEM_PROMPT, move |req| {
            handle(ctx2.clone(), reg.clone(), tool_order.clone(), req)
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(SystemPrompt);

#[cfg(test)]
mod tests {
    #[test]
    fn a_malformed_authoritative_assembly_names_the_violated_contract() {
        let valid = || {
            json!({"sections": [{"name": "identity", "text": "prompt"}],
                   "contexts": [{"name": "policy", "text": "current policy"}],
                   "tools": [{"name": "echo", "description": "Echo", "parameters": {}}],
                   "variables": {"cwd": "/repo", "optional": null}})
        };
        assert_eq!(validate_assembly(&valid()), Ok(()));
        let with = |key: &str, v: Value| {
            let mut a = valid();
            a[key] = v;
            validate_assembly(&a).unwrap_err()
        };
        let cases = [
            (
                "sections",
                json!([{"name": "", "text": "x"}]),
                "assembled section names must be non-empty",
            ),
            (
                "sections",
                json!([{"name": "x", "text": "a"}, {"name": "x", "text": "b"}]),
                "assembled section name \"x\" is duplicated",
            ),
            (
                "sections",
                json!([{"name": "x", "text": 1}]),
                "assembled section \"x\" text must be a string",
            ),
            (
                "contexts",
                json!([{"name": "", "text": "x"}]),
                "assembled context names must be non-empty",
            ),
            (
                "contexts",
                json!([{"name": "x", "text": "a"}, {"name": "x", "text": "b"}]),
                "assembled context name \"x\" is duplicated",
            ),
            (
                "contexts",
                json!([{"name": "x", "text": 1}]),
                "assembled context \"x\" text must be a string",
            ),
            (
                "tools",
                json!([{"name": "", "description": "x", "parameters": {}}]),
                "assembled tool names must be non-empty",
            ),
            (
                "variables",
                json!({"Bad": "x"}),
                "assembled variable name \"Bad\" is invalid",
            ),
            (
                "variables",
                json!({"value": 1}),
                "assembled variable \"value\" must be a string or undefined",
            ),
        ];
        for (key, value, message) in cases {
            assert_eq!(with(key, value), message);
        }
    }

    use super::{
        interpolate, order_tools, validate_assembly, validate_tool_order, TOOL_ORDER_REST,
    };
    use serde_json::{json, Map, Value};

    fn vars(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn variables_are_substituted_and_values_never_rescanned() {
        let v = vars(json!({"model": "ds", "cwd": "{{model}}"}));
        assert_eq!(
            interpolate("section", "s", "m={{model}} at {{cwd}}", &v).unwrap(),
            "m=ds at {{model}}"
        );
    }

    #[test]
    fn a_lone_opening_brace_pair_is_literal() {
        let v = vars(json!({"model": "ds"}));
        assert_eq!(
            interpolate("section", "s", "{{model}} then {{ open", &v).unwrap(),
            "ds then {{ open"
        );
    }

    #[test]
    fn a_malformed_reference_is_an_error_naming_the_section() {
        let e = interpolate("section", "intro", "{{Bad-Name}}", &vars(json!({}))).unwrap_err();
        assert_eq!(
            e.message,
            "malformed prompt variable reference \"{{Bad-Name}}\" in section \"intro\""
        );
    }

    #[test]
    fn an_unknown_variable_lists_the_registered_ones() {
        let e = interpolate(
            "section",
            "intro",
            "{{nope}}",
            &vars(json!({"b": "1", "a": "2"})),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "unknown prompt variable \"{{nope}}\" in section \"intro\"; registered variables: a, b"
        );
        let e = interpolate("section", "intro", "{{nope}}", &vars(json!({}))).unwrap_err();
        assert!(e.message.ends_with("registered variables: (none)"), "{e}");
    }

    #[test]
    fn prototype_names_are_unknown_variables() {
        let e = interpolate("section", "s", "{{constructor}}", &vars(json!({}))).unwrap_err();
        assert!(
            e.message
                .starts_with("unknown prompt variable \"{{constructor}}\""),
            "{e}"
        );
    }

    #[test]
    fn a_variable_without_a_value_is_an_error() {
        let e =
            interpolate("section", "s", "{{model}}", &vars(json!({"model": null}))).unwrap_err();
        assert!(
            e.message
                .starts_with("prompt variable \"{{model}}\" has no value for this assembly"),
            "{e}"
        );
    }

    fn tools(names: &[&str]) -> Vec<Value> {
        names.iter().map(|n| json!({"name": n})).collect()
    }

    fn names(tools: &[Value]) -> Vec<&str> {
        tools.iter().map(|t| t["name"].as_str().unwrap()).collect()
    }

    fn order(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn without_a_tool_order_tools_are_lexicographic_whatever_the_registration_order() {
        let known = order(&["read", "bash", "edit"]);
        let a = order_tools(tools(&["read", "bash", "edit"]), None, &known).unwrap();
        let b = order_tools(tools(&["edit", "read", "bash"]), None, &known).unwrap();
        assert_eq!(names(&a), ["bash", "edit", "read"]);
        assert_eq!(names(&a), names(&b));
    }

    #[test]
    fn a_tool_order_places_listed_tools_and_the_rest_sorted_at_the_rest_entry() {
        let all = ["write", "read", "glob", "bash", "edit"];
        let cfg = order(&["read", TOOL_ORDER_REST, "bash"]);
        let out = order_tools(tools(&all), Some(&cfg), &order(&all)).unwrap();
        assert_eq!(names(&out), ["read", "edit", "glob", "write", "bash"]);
    }

    #[test]
    fn a_listed_tool_no_provider_knows_rejects_the_assembly_a_known_absent_one_does_not() {
        let cfg = order(&["read", "nope", TOOL_ORDER_REST, "typo"]);
        let e = order_tools(tools(&["read"]), Some(&cfg), &order(&["read"])).unwrap_err();
        assert_eq!(e.code, "TOOL_ORDER");
        assert_eq!(
            e.message,
            "toolOrder lists unregistered tools \"nope\", \"typo\"; known tools: read"
        );
        let cfg = order(&["read", TOOL_ORDER_REST]);
        let e = order_tools(Vec::new(), Some(&cfg), &[]).unwrap_err();
        assert_eq!(
            e.message,
            "toolOrder lists unregistered tool \"read\"; known tools: (none)"
        );
        // Known but hidden from this assembly: a normal absence.
        let out = order_tools(tools(&["bash"]), Some(&cfg), &order(&["read", "bash"])).unwrap();
        assert_eq!(names(&out), ["bash"]);
    }

    #[test]
    fn a_tool_named_like_the_rest_entry_rejects_the_assembly() {
        let e = order_tools(tools(&[TOOL_ORDER_REST]), None, &[]).unwrap_err();
        assert_eq!(
            e.message,
            "tool provider returned reserved tool name \"<unlisted-tools>\" (reserved for toolOrder's rest entry)"
        );
    }

    #[test]
    fn a_tool_order_needs_the_rest_entry_once_and_no_duplicates() {
        let e = validate_tool_order(&order(&["bash"])).unwrap_err();
        assert_eq!(e.code, dsh_sdk::codes::INVALID_CONFIG);
        assert_eq!(
            e.message,
            "toolOrder must contain the \"<unlisted-tools>\" rest entry (where unlisted tools are inserted)"
        );
        let e = validate_tool_order(&order(&["bash", TOOL_ORDER_REST, "bash"])).unwrap_err();
        assert_eq!(e.message, "toolOrder lists \"bash\" more than once");
        validate_tool_order(&order(&[TOOL_ORDER_REST])).unwrap();
    }
}
