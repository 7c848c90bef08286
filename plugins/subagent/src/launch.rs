//! Making a child: the provider registry, the depth cap, the provider's
//! `create`, the delegation record, and the child's setup (delegation
//! notice, persona, tool filter, and `subagent/child-ready` for plugins
//! that add child-only tools); and resuming a settled child from its
//! stored session.

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

use dsh_sdk::api::agent_loop::SessionOrigin;
use dsh_sdk::api::agent_loop::{AgentLoop, AgentOptions, Preparation, Prepared, ResumeParams};
use dsh_sdk::api::agents::{Agents, SelectModelParams};
use dsh_sdk::api::permission::{ApprovalPolicy, Permission, PRESETS};
use dsh_sdk::api::session_persistence::SessionPersistence;
use dsh_sdk::api::sessions::{NewEvent, Sessions};
use dsh_sdk::api::subagents::{
    error_code, ChildReady, CreateChildParams, ProviderInfo, RegisterProviderParams, StartParams,
    DEFAULT_MAX_DEPTH,
};
use dsh_sdk::api::system_prompt::{SectionParams, SystemPrompt, VariableParams};
use dsh_sdk::api::tools::{RestrictParams, Tools};
use dsh_sdk::names::{bus, code};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::event;
use dsh_sdk::vocab::records::{RequestContext, SubagentDescriptor, SubagentMode, ToolFilter};

use crate::table::{Child, Shared, State};

/// The delegation notice every child sees as runtime context (the
/// original's `subagent:delegation`).
const DELEGATION_NAME: &str = "subagent:delegation";
const DELEGATION_ORDER: i64 = 120;
const DELEGATION_TEXT: &str = "You are a delegated subagent: your permission scope was fixed when you were started and cannot be widened from inside this session — operations that require approval are rejected automatically. When the task needs access beyond that scope, do not retry the denied operation; state the limitation in your reply so the delegating agent can handle it.";

/// The system prompt section a persona replaces.
const PERSONA_NAME: &str = "deployment:persona";

/// The child's own prompt variable its persona is the value of.
const PERSONA_VARIABLE: &str = "subagent_persona";

/// One registered provider.
struct Entry {
    info: ProviderInfo,
    service: String,
    owner: u64,
}

/// The providers, by registration order.
#[derive(Clone, Default)]
pub struct Providers(Rc<RefCell<Vec<Entry>>>);

impl Providers {
    /// `registerProvider`: `name` served by `service` until `owner` goes;
    /// then the children it made (which the registry owns) are disposed
    /// too.
    pub fn register(&self, ctx: &Context, table: &Shared, req: &Request) -> Result<()> {
        let p: RegisterProviderParams = req.params_as()?;
        if p.name.is_empty() || p.service.is_empty() {
            return Err(Error::new(
                codes::INVALID_PAYLOAD,
                "a subagent provider needs a name and a service",
            ));
        }
        if self.0.borrow().iter().any(|e| e.info.name == p.name) {
            return Err(Error::new(
                error_code::DUPLICATE_PROVIDER,
                format!(
                    "a subagent provider named \"{}\" is already registered",
                    p.name
                ),
            ));
        }
        let owner = req.caller;
        self.0.borrow_mut().push(Entry {
            info: ProviderInfo {
                name: p.name,
                inherits_parent_context: p.inherits_parent_context,
            },
            service: p.service,
            owner,
        });
        let (me, ctx2, table) = (self.clone(), ctx.clone(), table.clone());
        req.on_caller_gone(move || {
            let mut gone = Vec::new();
            me.0.borrow_mut().retain(|e| {
                let mine = e.owner == owner;
                if mine {
                    gone.push(e.info.name.clone());
                }
                !mine
            });
            let _ = ctx2.emit(bus::SUBAGENT_PROVIDERS_CHANGED, serde_json::Value::Null);
            let children: Vec<String> = gone.iter().flat_map(|name| table.made_by(name)).collect();
            let ctx3 = ctx2.clone();
            ctx2.spawn(async move {
                let agents = Agents::new(&ctx3);
                for child in children {
                    // A child that is not live (settled, stored) has
                    // nothing to end.
                    let _ = agents.dispose(&child).await;
                }
            });
        });
        ctx.emit(bus::SUBAGENT_PROVIDERS_CHANGED, serde_json::Value::Null)
    }

    /// The registered providers.
    pub fn list(&self) -> Vec<ProviderInfo> {
        self.0.borrow().iter().map(|e| e.info.clone()).collect()
    }

    /// The service of provider `name`.
    fn service_of(&self, name: &str) -> Result<String> {
        self.0
            .borrow()
            .iter()
            .find(|e| e.info.name == name)
            .map(|e| e.service.clone())
            .ok_or_else(|| {
                Error::new(
                    error_code::NO_PROVIDER,
                    format!("no subagent provider registered for \"{name}\""),
                )
            })
    }
}

/// The depth a child of `parent` would have, refused past `max_depth`.
async fn child_depth(ctx: &Context, parent: &str, max_depth: Option<u64>) -> Result<u64> {
    let header = Sessions::new(ctx).header(parent).await.map_err(|e| {
        Error::new(
            e.code.clone(),
            format!(
                "the delegating agent \"{parent}\" has no live session: {}",
                e.message
            ),
        )
    })?;
    let depth = header
        .header
        .delegation_depth
        .unwrap_or(0)
        .saturating_add(1);
    let max = max_depth.unwrap_or(DEFAULT_MAX_DEPTH);
    if depth > max {
        return Err(Error::new(
            error_code::DEPTH_EXCEEDED,
            format!("subagent depth {depth} exceeds maxDepth {max}"),
        ));
    }
    Ok(depth)
}

/// The child's options: what the start names, else the parent's route
/// (its latest request) and its `maxTokens` and reasoning effort.
async fn child_options(ctx: &Context, p: &StartParams) -> Result<AgentOptions> {
    let mut options = p.agent_options.clone().unwrap_or_default();
    let parent = Agents::new(ctx).status(&p.parent).await?.options;
    options.max_tokens = options.max_tokens.or(parent.max_tokens);
    options.reasoning_effort = options.reasoning_effort.or(parent.reasoning_effort);
    if options.provider.is_none() || options.model.is_none() {
        let context = Sessions::new(ctx).request_context(&p.parent).await?;
        if let Some(context) = context {
            let context: RequestContext = serde_json::from_value(context)?;
            if options.provider.is_none() {
                options.provider = Some(context.provider);
                options.model = options.model.or(Some(context.model));
            } else if options.model.is_none()
                && options.provider.as_deref() == Some(&context.provider)
            {
                options.model = Some(context.model);
            }
        }
    }
    Ok(options)
}

/// The delegation record of a child started with `p`.
fn descriptor(p: &StartParams, mode: SubagentMode, options: &AgentOptions) -> SubagentDescriptor {
    let continuable = mode == SubagentMode::Continuable;
    let overridden = p.agent_options.is_some() && continuable;
    SubagentDescriptor {
        version: SubagentDescriptor::VERSION,
        mode,
        provider: p.provider.clone(),
        label: (!p.label.is_empty()).then(|| p.label.clone()),
        agent_provider: options.provider.clone().filter(|_| overridden),
        agent_model: options.model.clone().filter(|_| overridden),
        persona: p.persona.clone().filter(|_| continuable),
        tool_filter: p.tool_filter.clone().filter(|_| continuable),
    }
}

/// Makes a child of `p.parent` through `p.provider`, records how, sets it
/// up, and publishes it (the agent loop's creation transaction: the
/// provider hands over a pending child, announced only once its scope is
/// complete). The registry owns it from then on. On any failure before
/// that, the child is rolled back: nothing of it was ever announced.
pub async fn create(
    ctx: &Context,
    providers: &Providers,
    table: &Shared,
    p: &StartParams,
    mode: SubagentMode,
) -> Result<String> {
    let service = providers.service_of(&p.provider)?;
    let depth = child_depth(ctx, &p.parent, p.max_depth).await?;
    let options = child_options(ctx, p).await?;
    let child_id = format!("session-{}", dsh_sdk::new_id());
    let created = dsh_sdk::api::subagents::Provider::new(ctx, &service)
        .create(&CreateChildParams {
            parent: p.parent.clone(),
            child_id: child_id.clone(),
            depth,
            agent_options: options.clone(),
        })
        .await?;
    let prepared = Prepared::adopt(ctx, created.agent);
    let child = prepared.agent().to_owned();
    let record = descriptor(p, mode, &options);
    let mut entry = Child::new(&p.parent, record.clone());
    entry.persona = p.persona.clone();
    entry.tool_filter = p.tool_filter.clone();
    table.insert(&child, entry);
    let made = async {
        // The parent may have gone while the child was made.
        if Agents::new(ctx).status(&p.parent).await.is_err() {
            return Err(Error::new(
                error_code::PARENT_UNAVAILABLE,
                format!(
                    "subagent parent \"{}\" is being disposed; the child was not established",
                    p.parent
                ),
            ));
        }
        Sessions::new(ctx)
            .append(
                &child,
                NewEvent::typed(event::SUBAGENT_DESCRIPTOR, &record)?,
            )
            .await?;
        inherit_permission(ctx, &p.parent, &child).await?;
        set_up(ctx, table, &child).await?;
        // The provider may have gone during the setup.
        providers.service_of(&p.provider).map(drop)
    };
    if let Err(e) = made.await {
        table.remove(&child);
        if let Err(e) = prepared.abandon().await {
            dsh_sdk::tracing::debug!("rolling back subagent {child}: {e}");
        }
        return Err(e);
    }
    if let Err(e) = prepared.commit().await {
        table.remove(&child);
        return Err(e);
    }
    Ok(child)
}

/// The child works under its parent's permission mode, and nobody is
/// asked to approve its calls (the delegation notice says so): what needs
/// approval is refused. Without a `permission` service there is nothing to
/// inherit.
async fn inherit_permission(ctx: &Context, parent: &str, child: &str) -> Result<()> {
    let permission = Permission::new(ctx);
    let of_parent = match permission.preset(parent).await {
        Ok(p) => p,
        Err(e) if e.code == codes::SERVICE_UNAVAILABLE => return Ok(()),
        Err(e) => return Err(e),
    };
    let Some(name) = PRESETS
        .iter()
        .find(|(_, mode, _)| *mode == of_parent.mode)
        .map(|(n, _, _)| *n)
    else {
        return Ok(());
    };
    permission
        .set_preset_with(child, name, Some(ApprovalPolicy::Never))
        .await
        .map(drop)
}

/// What every child gets before its first prompt (and again when it is
/// resumed): the delegation notice, its persona and tool filter, then
/// `subagent/child-ready`.
pub async fn set_up(ctx: &Context, table: &Shared, child: &str) -> Result<()> {
    let Some(entry) = table.get(child) else {
        return Err(Error::new(
            error_code::NOT_RESUMABLE,
            format!("subagent \"{child}\" is unavailable"),
        ));
    };
    let prompt = SystemPrompt::new(ctx);
    prompt
        .context(&SectionParams {
            scope: Some(child.to_owned()),
            name: DELEGATION_NAME.to_owned(),
            order: DELEGATION_ORDER.into(),
            text: Some(DELEGATION_TEXT.to_owned()),
            ..SectionParams::default()
        })
        .await?;
    if let Some(persona) = &entry.persona {
        // Through a variable: a persona's own `{{...}}` (a workflow
        // snippet, a template) is text, never a variable reference.
        prompt
            .variable(&VariableParams {
                scope: Some(child.to_owned()),
                name: PERSONA_VARIABLE.to_owned(),
                value: Some(persona.clone()),
            })
            .await?;
        prompt
            .section(&SectionParams {
                scope: Some(child.to_owned()),
                name: PERSONA_NAME.to_owned(),
                order: 0i64.into(),
                text: Some(format!("{{{{{PERSONA_VARIABLE}}}}}")),
                ..SectionParams::default()
            })
            .await?;
    }
    if let Some(filter) = &entry.tool_filter {
        restrict(ctx, child, filter).await?;
    }
    let ready = ChildReady {
        child: child.to_owned(),
        parent: entry.parent.clone(),
        mode: entry.descriptor.mode,
        label: entry.descriptor.label.clone().unwrap_or_default(),
    };
    ctx.parallel(bus::SUBAGENT_CHILD_READY, ready).await?;
    Ok(())
}

/// Applies `filter` to `child`'s tools, leaving out the names no tool
/// has now (a filter recorded when a child was started is applied again
/// at its resume, when a plugin may be gone): said, never a child that
/// cannot be resumed.
async fn restrict(ctx: &Context, child: &str, filter: &ToolFilter) -> Result<()> {
    let tools = Tools::new(ctx);
    let known: HashSet<String> = tools
        .schemas(None)
        .await?
        .into_iter()
        .map(|s| s.name)
        .collect();
    let keep = |names: &Option<Vec<String>>| {
        names.as_ref().map(|n| {
            let (kept, gone): (Vec<String>, Vec<String>) =
                n.iter().cloned().partition(|n| known.contains(n));
            if !gone.is_empty() {
                dsh_sdk::tracing::warn!(
                    "subagent {child}: its tool filter names tools this host does not have: {}",
                    gone.join(", ")
                );
            }
            kept
        })
    };
    let (allow, deny) = (keep(&filter.allow), keep(&filter.deny));
    // A deny list left empty denies nothing.
    let deny = deny.filter(|d| !d.is_empty());
    if allow.is_none() && deny.is_none() {
        return Ok(());
    }
    tools
        .restrict(&RestrictParams {
            scope: Some(child.to_owned()),
            allow,
            deny,
        })
        .await
}

/// The route a resumed child goes on with: the one its log names (its
/// latest `request/context`), else its parent's.
async fn select_logged_route(ctx: &Context, child: &str, parent: &str) -> Result<()> {
    let sessions = Sessions::new(ctx);
    let mut context = sessions.request_context(child).await?;
    if context.is_none() {
        context = sessions.request_context(parent).await?;
    }
    let Some(context) = context else {
        return Ok(());
    };
    let route: RequestContext = serde_json::from_value(context)?;
    Agents::new(ctx)
        .select_model(&SelectModelParams {
            agent: child.to_owned(),
            provider: Some(route.provider),
            model: Some(route.model),
        })
        .await
}

/// Checks, before anything touches it, that session `child` is a
/// continuable child of `parent`: its header names `parent` and the
/// subagent origin, and its first delegation record is a continuable one.
/// Answers its record and whether it is live now.
pub async fn lineage(
    ctx: &Context,
    parent: &str,
    child: &str,
) -> Result<(SubagentDescriptor, bool)> {
    let sessions = Sessions::new(ctx);
    let unavailable = |e: Error| {
        dsh_sdk::tracing::debug!("subagent {child} cannot be read: {e}");
        Error::new(
            error_code::NOT_RESUMABLE,
            format!("subagent \"{child}\" is unavailable"),
        )
    };
    let (header, events, live) = match sessions.header(child).await {
        Ok(h) => {
            let from = h.header.seed_length.unwrap_or(0);
            let events = sessions.events(child, from).await?;
            (h.header, events, true)
        }
        Err(e) if e.code == code::SESSION_NOT_FOUND => {
            let stored = SessionPersistence::new(ctx)
                .inspect(child)
                .await
                .map_err(unavailable)?;
            let from = stored.header.seed_length.unwrap_or(0);
            let events: Vec<_> = stored
                .events
                .into_iter()
                .filter(|e| e.seq >= from)
                .collect();
            (stored.header, events, false)
        }
        Err(e) => return Err(unavailable(e)),
    };
    let delegated = header.origin.as_deref() == Some(SessionOrigin::SUBAGENT);
    if header.parent_session.as_deref() != Some(parent) || !delegated {
        return Err(Error::new(
            error_code::UNAUTHORIZED,
            format!("subagent \"{child}\" belongs to another parent session"),
        ));
    }
    let record = events
        .iter()
        .find(|e| e.kind == event::SUBAGENT_DESCRIPTOR)
        .and_then(|e| e.data_as::<SubagentDescriptor>().ok())
        .filter(|d| {
            d.version == SubagentDescriptor::VERSION && d.mode == SubagentMode::Continuable
        });
    let Some(record) = record else {
        return Err(Error::new(
            error_code::NOT_RESUMABLE,
            format!("subagent \"{child}\" has no supported continuation state and cannot be resumed; do not retry send_message with this id"),
        ));
    };
    Ok((record, live))
}

/// Takes continuable child `child` of `parent` (checked by [`lineage`])
/// back into the table: resumed from its stored session when it is not
/// live (then on the route its log names), or, live (a child of an earlier
/// generation of this registry), adopted as it runs; and set up again from
/// its delegation record. What this call resumed is disposed again when it
/// fails.
pub async fn reopen(
    ctx: &Context,
    table: &Shared,
    parent: &str,
    child: &str,
    record: SubagentDescriptor,
    live: bool,
) -> Result<()> {
    let prepared = match live {
        true => None,
        false => {
            let params = ResumeParams {
                session_id: child.to_owned(),
                agent_options: AgentOptions::default(),
                setup: true,
            };
            let loop_ = AgentLoop::new(ctx);
            Some(loop_.prepare(ctx, Preparation::Resume(params)).await?)
        }
    };
    let mut entry = Child::new(parent, record.clone());
    entry.persona = record.persona.clone();
    entry.tool_filter = record.tool_filter.clone();
    // Not running until it is set up and prompted: a followup meanwhile
    // waits (its message must not start a turn on a half-made child).
    entry.state = State::Settling;
    table.insert(child, entry);
    let made = async {
        if !live {
            select_logged_route(ctx, child, parent).await?;
        }
        set_up(ctx, table, child).await
    };
    if let Err(e) = made.await {
        table.remove(child);
        if let Some(prepared) = prepared {
            if let Err(e) = prepared.abandon().await {
                dsh_sdk::tracing::debug!("rolling back the resume of subagent {child}: {e}");
            }
        }
        return Err(e);
    }
    if let Some(prepared) = prepared {
        if let Err(e) = prepared.commit().await {
            table.remove(child);
            return Err(e);
        }
    }
    Ok(())
}
