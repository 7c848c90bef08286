//! `tool-subagent`: the model's delegation tools over the `subagents`
//! service (the original's `tool-subagent`, `tool-subagent-control` and
//! `tool-subagent-report`): `subagent` (a fresh child, provider `spawn`),
//! `subagent_fork` (a child with this conversation, provider `fork`),
//! `send_message`, `interrupt_agent`, `list_agents`, and `report`, which
//! only continuable children get (scoped to each, at
//! `subagent/child-ready`).
//!
//! Both delegation tools run in the background by default (the
//! original's shipped presets' `continuable` mode): the call answers
//! `started subagent <id>` and the parent gets a notice when the child
//! settles; `run_in_background: false` waits and answers the child's
//! final text. `subagent` also offers the agent definitions of
//! `definitions` by `subagent_type`; they are read again at every start,
//! and the tool's description follows a changed definition file from the
//! step after the one that noticed it (steps notice after their prompt
//! is assembled).

mod definitions;
mod offer;
mod spec;

use std::cell::RefCell;
use std::collections::HashSet;
use std::path::PathBuf;
use std::rc::Rc;

use dsh_sdk::api::agent_loop::AgentOptions;
use dsh_sdk::api::host::Host;
use dsh_sdk::api::subagents::{
    ChildReady, FollowupParams, InterruptParams, ReportParams, RunOutcome, StartParams, StopReason,
    Subagents,
};
use dsh_sdk::api::system_prompt::{tool_section_name, SectionParams, SystemPrompt};
use dsh_sdk::api::tools::{Exec, RegisterParams, Tools};
use dsh_sdk::names::{bus, service, tool};
use dsh_sdk::prelude::*;
use dsh_sdk::tool::{declaration, text_reply, ToolSpec, INVALID_ARGS};
use dsh_sdk::vocab::records::{SubagentMode, ToolFilter};
use serde::Deserialize;
use serde_json::Value;

use definitions::Definition;
use spec::{Fork, InterruptAgent, ListAgents, Report, Scope, SendMessage, Spawn};

/// The row's config.
#[derive(Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    /// The deepest a child may be (the top-level agent is 0).
    max_depth: u64,
    /// The provider `subagent` starts children with.
    spawn_provider: String,
    /// The provider `subagent_fork` starts children with.
    fork_provider: String,
    /// Read agent definitions (`subagent_type`).
    definitions: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_depth: 3,
            spawn_provider: "spawn".into(),
            fork_provider: "fork".into(),
            definitions: true,
        }
    }
}

/// The code of a delegated run that did not complete.
const SUBAGENT_FAILED: &str = "SUBAGENT_FAILED";

/// The definitions as last read, and what was already said about them.
#[derive(Default)]
struct Known {
    /// When the files were last looked at (`agent/pre-step`).
    looked: Option<std::time::Instant>,
    fingerprint: Option<u64>,
    found: Vec<Definition>,
    reported: HashSet<(PathBuf, String)>,
}

/// The plugin's state, as its handlers share it.
#[derive(Clone)]
struct State {
    ctx: Context,
    config: Rc<Config>,
    /// The service the tools are registered with.
    service: Rc<String>,
    dirs: Rc<Vec<PathBuf>>,
    known: Rc<RefCell<Known>>,
    offered: offer::Offered,
}

impl State {
    /// Whether the files are due another look at a step (a second after
    /// the last one).
    fn due(&self) -> bool {
        let now = std::time::Instant::now();
        let mut known = self.known.borrow_mut();
        let due = known
            .looked
            .is_none_or(|t| now.duration_since(t) >= std::time::Duration::from_secs(1));
        if due {
            known.looked = Some(now);
        }
        due
    }

    /// Reads the definitions again when a file changed; true when they
    /// did. A file that does not read is reported once per version.
    fn refresh(&self) -> bool {
        if !self.config.definitions {
            return false;
        }
        let print = definitions::fingerprint(&self.dirs);
        let mut known = self.known.borrow_mut();
        if known.fingerprint == Some(print) {
            return false;
        }
        let (found, problems) = definitions::load(&self.dirs);
        for p in problems {
            if known.reported.insert((p.path.clone(), p.why.clone())) {
                dsh_sdk::tracing::warn!(
                    "agent definition {} is skipped: {}",
                    p.path.display(),
                    p.why
                );
            }
        }
        let changed = known.found != found;
        known.found = found;
        known.fingerprint = Some(print);
        changed
    }

    /// The registration of `subagent` as the definitions now stand.
    fn spawn_declaration(&self) -> RegisterParams {
        let mut d = declaration::<Spawn>();
        d.description.push_str(spec::BACKGROUND_SUFFIX);
        let known = self.known.borrow();
        if known.found.is_empty() {
            if let Some(props) = d
                .parameters
                .get_mut("properties")
                .and_then(Value::as_object_mut)
            {
                props.remove(Spawn::TYPE_PROPERTY);
            }
        } else {
            d.description.push_str(&definitions::listing(&known.found));
        }
        d.service = self.service.to_string();
        d
    }

    /// The registration of `subagent_fork`.
    fn fork_declaration(&self) -> RegisterParams {
        let mut d = declaration::<Fork>();
        d.description.push_str(spec::BACKGROUND_SUFFIX);
        d.service = self.service.to_string();
        d
    }

    async fn execute(self, req: Request) -> Result<Reply> {
        let exec = dsh_sdk::tool::exec(&req)?;
        let parent = exec.agent.clone().ok_or_else(|| {
            Error::new(
                INVALID_ARGS,
                format!(
                    "{} requires a calling agent (exec.agent was undefined)",
                    exec.name
                ),
            )
        })?;
        let subagents = Subagents::new(&self.ctx);
        match exec.name.as_str() {
            tool::SUBAGENT => {
                let a = exec.arguments_for::<Spawn>()?;
                let mut start = self.start_params(
                    &parent,
                    &self.config.spawn_provider,
                    a.description,
                    a.prompt,
                );
                if let Some(name) = a.subagent_type.filter(|n| !n.is_empty()) {
                    self.apply_definition(&mut start, &name).await?;
                }
                self.delegate(start, a.run_in_background).await
            }
            tool::SUBAGENT_FORK => {
                let a = exec.arguments_for::<Fork>()?;
                let start =
                    self.start_params(&parent, &self.config.fork_provider, a.description, a.prompt);
                self.delegate(start, a.run_in_background).await
            }
            tool::SEND_MESSAGE => {
                let a = exec.arguments_for::<SendMessage>()?;
                subagents
                    .followup(&FollowupParams {
                        parent,
                        child: a.subagent_id.clone(),
                        message: a.message,
                    })
                    .await?;
                text_reply(&format!(
                    "message queued as the next turn for subagent {}",
                    a.subagent_id
                ))
            }
            tool::INTERRUPT_AGENT => {
                let a = exec.arguments_for::<InterruptAgent>()?;
                subagents
                    .interrupt(&InterruptParams {
                        caller: parent,
                        target: a.agent_id.clone(),
                    })
                    .await?;
                text_reply(&format!("interrupt requested for agent {}", a.agent_id))
            }
            tool::LIST_AGENTS => self.list(&subagents, &exec, &parent).await,
            tool::REPORT => {
                let a = exec.arguments_for::<Report>()?;
                let sent = subagents
                    .report_from(&ReportParams {
                        child: parent,
                        output: a.output,
                    })
                    .await?;
                // The inbox's id, as it took it (a string; anything else
                // is shown as the JSON it is, never as nothing).
                let id = match &sent.message_id {
                    Value::String(id) => id.clone(),
                    other => other.to_string(),
                };
                text_reply(&format!(
                    "report accepted by the agent that started you as message {id}"
                ))
            }
            other => Err(Error::new(
                codes::UNKNOWN_METHOD,
                format!("tool-subagent serves no tool \"{other}\""),
            )),
        }
    }

    fn start_params(
        &self,
        parent: &str,
        provider: &str,
        label: String,
        prompt: String,
    ) -> StartParams {
        StartParams {
            provider: provider.to_owned(),
            parent: parent.to_owned(),
            label,
            prompt,
            max_depth: Some(self.config.max_depth),
            ..StartParams::default()
        }
    }

    /// Gives `start` definition `name`'s persona, tools and model (read
    /// again now: an edited file applies to this start).
    async fn apply_definition(&self, start: &mut StartParams, name: &str) -> Result<()> {
        if self.refresh() {
            self.update_spawn().await?;
        }
        let found = self
            .known
            .borrow()
            .found
            .iter()
            .find(|d| d.name == name)
            .cloned();
        let Some(d) = found else {
            let known = self.known.borrow();
            let names: Vec<&str> = known.found.iter().map(|d| d.name.as_str()).collect();
            return Err(Error::new(
                INVALID_ARGS,
                if names.is_empty() {
                    format!("unknown subagent_type \"{name}\": no agent definitions exist")
                } else {
                    format!(
                        "unknown subagent_type \"{name}\"; available: {}",
                        names.join(", ")
                    )
                },
            ));
        };
        start.persona = (!d.persona.is_empty()).then(|| d.persona.clone());
        // Names this host has no tool for are left out (and said) by the
        // registry when it applies the filter.
        start.tool_filter = d.tools.clone().map(|tools| ToolFilter {
            allow: Some(tools),
            deny: None,
        });
        if let Some((provider, model)) = &d.model {
            start.agent_options = Some(AgentOptions {
                provider: Some(provider.clone()),
                model: Some(model.clone()),
                ..AgentOptions::default()
            });
        }
        Ok(())
    }

    /// Starts the child: in the background unless `background` is false.
    async fn delegate(&self, start: StartParams, background: Option<bool>) -> Result<Reply> {
        let subagents = Subagents::new(&self.ctx);
        if background.unwrap_or(true) {
            let started = subagents.start_continuable(&start).await?;
            return text_reply(&format!("started subagent {}", started.child_id));
        }
        let RunOutcome {
            stop_reason,
            output,
            diagnostic,
            ..
        } = subagents.start(&start).await?;
        if stop_reason == StopReason::Completed {
            return text_reply(&output);
        }
        Err(Error::new(
            SUBAGENT_FAILED,
            failure_text(stop_reason, diagnostic.as_deref(), &output),
        ))
    }

    async fn list(&self, subagents: &Subagents, exec: &Exec, parent: &str) -> Result<Reply> {
        let scope = exec.arguments_for::<ListAgents>()?.scope;
        let walk = scope == Some(Scope::Descendants);
        let entries = if walk {
            subagents.list_descendants(parent).await?
        } else {
            subagents.list_children(parent).await?
        };
        if entries.is_empty() {
            return text_reply("(no subagents)");
        }
        let lines: Vec<String> = entries
            .iter()
            .map(|e| {
                let at = match (&e.parent, e.depth) {
                    (Some(p), Some(d)) if walk => format!(" parent={p} depth={d}"),
                    _ => String::new(),
                };
                match e.diagnostic {
                    Some(d) => format!("{} [diagnostic: {}]{at}", e.id, d.as_str()),
                    None => format!("{} [{}]{at} — {}", e.id, e.status.as_str(), e.label),
                }
            })
            .collect();
        text_reply(&lines.join("\n"))
    }

    /// A continuable child gets `report` and the section asking for it.
    async fn child_ready(&self, ready: ChildReady) -> Result<()> {
        if ready.mode != SubagentMode::Continuable {
            return Ok(());
        }
        let mut d = declaration::<Report>();
        d.service = self.service.to_string();
        d.scope = Some(ready.child.clone());
        // A resumed child registers it again.
        d.replace = true;
        Tools::new(&self.ctx).register(&d).await?;
        let section = SectionParams {
            scope: Some(ready.child),
            name: tool_section_name(tool::REPORT),
            order: spec::REPORT_SECTION_ORDER.into(),
            text: Some(spec::REPORT_SECTION.to_owned()),
            ..SectionParams::default()
        };
        match SystemPrompt::new(&self.ctx).section(&section).await {
            // Registered for this child already (a resumed child).
            Err(e) if e.message.contains("already registered") => Ok(()),
            other => other,
        }
    }
}

/// The tool error text of a run that did not complete (the original's
/// words): the headline, the diagnostic, the partial output.
fn failure_text(stop: StopReason, diagnostic: Option<&str>, output: &str) -> String {
    let mut text = match stop {
        StopReason::Aborted => "subagent run was cancelled".to_owned(),
        StopReason::Error => "subagent run failed".to_owned(),
        StopReason::MaxTokens => "subagent run hit its token limit before finishing".to_owned(),
        StopReason::Refusal => "subagent declined the task".to_owned(),
        StopReason::Abnormal => format!(
            "subagent run ended abnormally ({})",
            diagnostic.unwrap_or("unknown")
        ),
        StopReason::Completed => "subagent run completed".to_owned(),
    };
    if let Some(d) = diagnostic.filter(|_| stop != StopReason::Abnormal) {
        text.push_str("\nDiagnostic: ");
        text.push_str(d);
    }
    if !output.trim().is_empty() {
        text.push_str("\nPartial output before the run ended:\n");
        text.push_str(output);
    }
    text
}

struct ToolSubagent;

impl Plugin for ToolSubagent {
    const NAME: &'static str = "tool-subagent";
    const DESCRIPTION: &'static str =
        "the delegation tools: subagent, subagent_fork, send_message, interrupt_agent, list_agents, report";
    const INJECT: &'static [&'static str] =
        &[service::TOOLS, service::SUBAGENTS, service::SYSTEM_PROMPT];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let info = Host::new(&ctx).info().await?;
        let project = info
            .cwd
            .map(PathBuf::from)
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_else(|| PathBuf::from("/"));
        let state = State {
            ctx: ctx.clone(),
            config: Rc::new(config),
            service: Rc::new(format!("tool:{}:{}", ctx.plugin_name(), ctx.fiber())),
            dirs: Rc::new(definitions::dirs(&project, &PathBuf::from(&info.home))),
            known: Rc::default(),
            offered: Rc::default(),
        };
        let s = state.clone();
        ctx.provide(state.service.to_string(), move |req| {
            let s = s.clone();
            async move {
                if req.method != dsh_sdk::names::tool_service::EXECUTE {
                    return Err(req.unknown_method());
                }
                s.execute(req).await
            }
        });
        state.refresh();
        let tools = Tools::new(&ctx);
        for mut d in [
            declaration::<SendMessage>(),
            declaration::<InterruptAgent>(),
            declaration::<ListAgents>(),
        ] {
            d.service = state.service.to_string();
            tools.register(&d).await?;
        }
        state.sync_offer().await?;
        let s = state.clone();
        ctx.on(bus::SUBAGENT_PROVIDERS_CHANGED, move |_| {
            let s = s.clone();
            async move {
                match s.sync_offer().await {
                    // The registry itself is going (a shutdown, a reload):
                    // this plugin goes with it, its tools too.
                    Err(e) if e.code == codes::SERVICE_UNAVAILABLE => Ok(Value::Null),
                    outcome => outcome.map(|()| Value::Null),
                }
            }
        });
        // Each goes with its tool (`TOOL_SECTION_PREFIX`): absent while the
        // tool is.
        let prompt = SystemPrompt::new(&ctx);
        for name in [Spawn::NAME, Fork::NAME] {
            prompt
                .section(&SectionParams {
                    name: tool_section_name(name),
                    order: spec::SECTION_ORDER.into(),
                    text: Some(spec::section(name)),
                    ..SectionParams::default()
                })
                .await?;
        }
        let s = state.clone();
        ctx.on(bus::SUBAGENT_CHILD_READY, move |ev| {
            let s = s.clone();
            async move {
                s.child_ready(ev.payload_as()?).await?;
                Ok(Value::Null)
            }
        });
        // A definition file added, edited or removed: `subagent` is
        // registered again, so the next assembly describes them as they
        // are (this step's prompt is assembled already).
        // Looked at no more than once a second (three directories read);
        // a failure to describe them is said, never a failed step.
        ctx.on(bus::AGENT_PRE_STEP, move |ev| {
            let s = state.clone();
            async move {
                if s.due() && s.refresh() {
                    if let Err(e) = s.update_spawn().await {
                        dsh_sdk::tracing::warn!(
                            "tool-subagent: cannot describe the agent definitions: {e}"
                        );
                    }
                }
                ev.forward().await
            }
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(ToolSubagent);
