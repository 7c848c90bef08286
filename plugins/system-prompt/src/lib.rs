//! `system-prompt`: ordered sections, dynamic runtime contexts, prompt
//! variables, the configured tool order and the `system-prompt/assemble`
//! waterfall (reference dsh-core §6; the original's
//! `packages/core/system-prompt/src/index.ts`).
//!
//! Every registration (`section`, `context`, `variable`,
//! `suppressRuntimeContext`) is global, or scoped to one agent with a
//! `scope` parameter; a scoped entry shadows a global one of the same name in
//! that agent's assemblies only. Each unwinds with the fiber that made it.
//!
//! Modules: `tool_order` (the configured tool order), `waterfall` (the
//! `system-prompt/assemble` payload and the check of its answer), `render`
//! (variables, the system prompt and the runtime-context snapshot).

mod render;
mod tool_order;
mod waterfall;

use std::cell::RefCell;
use std::rc::Rc;

use dsh_sdk::api::system_prompt::{
    AssembleParams, Changed, NamedText, ProviderRequest, ScopeParams, SectionParams,
    SectionProvider, VariableParams, TOOL_SECTION_PREFIX,
};
use dsh_sdk::names::{bus, service, system_prompt};
use dsh_sdk::prelude::*;
use dsh_sdk::scopes::ScopeWatch;
use dsh_sdk::{CallerSet, FiberId};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use render::{prompt_error, render, valid_variable_name};
use tool_order::{order_tools, tool_name, validate_tool_order};
use waterfall::{checked, Draft};

/// Two sections (or contexts, or variables) of one name in one layer.
const DUPLICATE_SECTION: &str = "DUPLICATE_SECTION";
const DUPLICATE_CONTEXT: &str = "DUPLICATE_CONTEXT";
const DUPLICATE_VARIABLE: &str = "DUPLICATE_VARIABLE";
/// A variable name that no `{{name}}` reference can spell.
const INVALID_VARIABLE_NAME: &str = "INVALID_VARIABLE_NAME";
/// More than one effective `complete` section.
const MULTIPLE_COMPLETE: &str = "MULTIPLE_COMPLETE_SECTIONS";

/// The original's config fields, as users write them.
#[derive(Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    persona: String,
    include_harness_identity: bool,
    /// `false` suppresses every runtime context (contexts are neither
    /// evaluated nor accepted from the waterfall).
    include_runtime_context: bool,
    /// Model-facing tool names in order, with
    /// [`tool_order::TOOL_ORDER_REST`] exactly once; omitted means
    /// lexicographic order.
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

/// One registration in its layer (`scope`, `None` = global), removed when
/// its `owner` goes (`None`: the plugin's own, from its config).
struct Entry<T> {
    owner: Option<FiberId>,
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
    sections: Vec<Entry<Section>>,
    contexts: Vec<Entry<Section>>,
    /// A variable's value; `None` is "registered, no value here".
    variables: Vec<Entry<(String, Option<String>)>>,
    suppressors: Vec<Entry<()>>,
    /// The agent scopes that closed: an entry for one is refused.
    scopes: ScopeWatch,
    /// The fibers whose entries are removed when they go (one cleanup
    /// each, however many entries they add).
    owners: CallerSet,
}

impl Registry {
    /// Forgets the entries `owner` added; how many there were.
    fn drop_owner(&mut self, owner: FiberId) -> usize {
        let other = |e: Option<FiberId>| e != Some(owner);
        let before = self.len();
        self.sections.retain(|e| other(e.owner));
        self.contexts.retain(|e| other(e.owner));
        self.variables.retain(|e| other(e.owner));
        self.suppressors.retain(|e| other(e.owner));
        before - self.len()
    }

    fn len(&self) -> usize {
        self.sections.len() + self.contexts.len() + self.variables.len() + self.suppressors.len()
    }

    /// Forgets the entries of agent `scope` alone.
    fn drop_scope(&mut self, scope: &str) {
        let other = |e: &Option<String>| e.as_deref() != Some(scope);
        self.sections.retain(|e| other(&e.scope));
        self.contexts.retain(|e| other(&e.scope));
        self.variables.retain(|e| other(&e.scope));
        self.suppressors.retain(|e| other(&e.scope));
    }
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
    reg.borrow().scopes.check(scope.as_deref())?;
    let owners = {
        let mut r = reg.borrow_mut();
        let owner = Some(req.caller);
        field(&mut r).push(Entry { owner, scope, item });
        r.owners.clone()
    };
    let (r2, ctx2, owner) = (reg.clone(), ctx.clone(), req.caller);
    req.on_caller_gone_once(&owners, move || {
        // Each registration is its own effect: a change per entry removed.
        let removed = r2.borrow_mut().drop_owner(owner);
        for _ in 0..removed {
            let _ = ctx2.emit(bus::SYSTEM_PROMPT_CHANGE, Changed {});
        }
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

/// A registration's params as sent, read only when they did not parse: the
/// fields whose wrong type has a message of its own. Each stays the JSON
/// the caller wrote, since its type is what is judged.
#[derive(Default, Deserialize)]
struct Sent {
    #[serde(default)]
    scope: Value,
    #[serde(default)]
    name: Value,
    #[serde(default)]
    provider: Value,
    #[serde(default)]
    value: Value,
}

impl Sent {
    /// The name, if it is a string.
    fn name(&self) -> Option<&str> {
        self.name.as_str()
    }
}

/// Parses a registration's params. When they do not parse, a field with a
/// message of its own (a `scope` that is not a string, or what `field`
/// names) is refused with that message; otherwise the parse error names
/// the field.
fn params<T: DeserializeOwned>(req: &Request, field: impl Fn(&Sent) -> Option<Error>) -> Result<T> {
    req.params_as().map_err(|e| {
        // Params that are not an object have none of the fields.
        let sent: Sent = req.params_as().unwrap_or_default();
        if !matches!(sent.scope, Value::Null | Value::String(_)) {
            return bad_scope();
        }
        field(&sent).unwrap_or(e)
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
        let Some(name) = p.name() else {
            return Some(unnamed());
        };
        let provider = &p.provider;
        let malformed = !provider.is_null() && SectionProvider::deserialize(provider).is_err();
        malformed.then(|| bad_provider(name))
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
                prompt_error(format!(
                    "the provider of prompt {kind} \"{}\" answered {answer}, not a text",
                    s.name
                ))
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
        // A name that is not a string is no valid name: refused as "".
        let name = p.name().unwrap_or("");
        if !valid_variable_name(name) {
            return Some(invalid_variable_name(name));
        }
        (!matches!(p.value, Value::Null | Value::String(_))).then(|| {
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
                value.clone().map_or(Value::Null, Value::String),
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
    // A tool's section goes with its tool.
    sections.retain(|s| {
        s.name
            .strip_prefix(TOOL_SECTION_PREFIX)
            .is_none_or(|tool| params.tools.iter().any(|t| tool_name(t) == tool))
    });
    // Shadowing and suppression come first: a shadowed or suppressed
    // provider is never asked.
    resolve(ctx, "section", &mut sections, scope, req).await?;
    resolve(ctx, "context", &mut contexts, scope, req).await?;
    let complete = complete.and_then(|name| {
        let s = sections.iter().find(|s| s.name == name)?;
        Some(named(s))
    });
    let tools = params.tools;
    let known: Vec<String> = match params.known_tools {
        Some(names) => names,
        None => tools.iter().map(|t| tool_name(t).to_owned()).collect(),
    };
    let tools = order_tools(tools, tool_order, &known)?;
    let draft = Draft {
        sections: sections.iter().map(named).collect(),
        contexts: contexts.iter().map(named).collect(),
        tools: &tools,
        variables: &variables,
    };
    let mut d = ctx.dispatch(bus::SYSTEM_PROMPT_ASSEMBLE);
    if let Some(scope) = scope {
        d = d.scope(scope);
    }
    let answer = d.waterfall(draft, |a| async move { Ok(a) }).await?;
    let mut assembly = checked(answer)?;
    if let Some(complete) = complete {
        assembly.sections = vec![complete];
    }
    if suppressed {
        assembly.contexts.clear();
    }
    render(&mut assembly)?;
    Reply::json(assembly)
}

/// A section's or context's name and (raw) text.
fn named(s: &Section) -> NamedText {
    NamedText {
        name: s.name.clone(),
        text: s.text.clone(),
    }
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
            let builtin = |name: &str, order, text: String| Entry {
                owner: None,
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
                    "harness:identity",
                    -100.0,
                    "You are an AI agent powered by DeepSeek Harness.".into(),
                ));
            }
            r.sections
                .push(builtin("deployment:persona", 0.0, config.persona));
            if !config.include_runtime_context {
                r.suppressors.push(Entry {
                    owner: None,
                    scope: None,
                    item: (),
                });
            }
        }
        let tool_order = Rc::new(config.tool_order);
        let (ctx2, reg2) = (ctx.clone(), reg.clone());
        ctx.provide(service::SYSTEM_PROMPT, move |req| {
            handle(ctx2.clone(), reg2.clone(), tool_order.clone(), req)
        });
        // An agent's own entries die with the agent (a subagent's persona
        // and delegation notice), not only with the plugin that made them.
        let scopes = reg.borrow().scopes.clone();
        scopes.follow(&ctx, move |agent| {
            reg.borrow_mut().drop_scope(agent);
            Ok(())
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(SystemPrompt);
