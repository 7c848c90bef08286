//! The `permission` service: the preset in force for each agent (the
//! configured mode and policy until `setPreset` switches it), read by the
//! `tools/pre-execute` listener for every call of that agent. A switch
//! lasts as long as the agent (it is forgotten on `agent/disposed`) and is
//! not logged: a resumed session starts from the configured preset again.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use dsh_sdk::api::permission::{
    preset, preset_name, AgentParams, ApprovalPolicy, PresetReply, SetPresetParams, PRESETS,
};
use dsh_sdk::fence::Mode;
use dsh_sdk::names::{code, permission, service};
use dsh_sdk::prelude::*;
use dsh_sdk::scopes::ScopeWatch;

/// The configured preset and each agent's switch.
#[derive(Clone)]
pub struct Presets {
    default: (Mode, ApprovalPolicy),
    agents: Rc<RefCell<BTreeMap<String, (Mode, ApprovalPolicy)>>>,
    /// An agent's switch lives in its scope: refused once that closed.
    scopes: ScopeWatch,
}

impl Presets {
    /// Presets whose default is `mode` with `approval`.
    pub fn new(mode: Mode, approval: ApprovalPolicy) -> Presets {
        Presets {
            default: (mode, approval),
            agents: Rc::default(),
            scopes: ScopeWatch::default(),
        }
    }

    /// What is in force for `agent` (`""`: outside an agent, the default).
    pub fn of(&self, agent: &str) -> (Mode, ApprovalPolicy) {
        self.agents
            .borrow()
            .get(agent)
            .copied()
            .unwrap_or(self.default)
    }

    /// The reply that describes what is in force for `agent`.
    fn reply(&self, agent: &str) -> PresetReply {
        let (mode, approval) = self.of(agent);
        PresetReply {
            preset: preset_name(mode, approval).map(str::to_owned),
            mode,
            approval,
            presets: PRESETS.iter().map(|(n, _, _)| (*n).to_owned()).collect(),
        }
    }

    /// Switches `agent` to preset `name` (its approval policy replaced by
    /// `approval`, when given).
    fn set(
        &self,
        agent: &str,
        name: &str,
        approval: Option<ApprovalPolicy>,
    ) -> Result<PresetReply> {
        let Some(mut chosen) = preset(name) else {
            let names: Vec<&str> = PRESETS.iter().map(|(n, _, _)| *n).collect();
            return Err(Error::new(
                code::UNKNOWN_PRESET,
                format!(
                    "unknown preset \"{name}\" (available: {})",
                    names.join(", ")
                ),
            ));
        };
        if agent.is_empty() {
            return Err(Error::new(
                codes::INVALID_PAYLOAD,
                "setPreset needs an agent",
            ));
        }
        self.scopes.check(Some(agent))?;
        if let Some(approval) = approval {
            chosen.1 = approval;
        }
        self.agents.borrow_mut().insert(agent.to_owned(), chosen);
        Ok(self.reply(agent))
    }
}

/// Provides the `permission` service and forgets an agent's switch when the
/// agent is disposed.
pub fn provide(ctx: &Context, presets: &Presets) {
    let p = presets.clone();
    ctx.provide(service::PERMISSION, move |req| {
        let p = p.clone();
        async move {
            match req.method.as_str() {
                permission::PRESET => {
                    let AgentParams { agent } = req.params_as()?;
                    Reply::json(p.reply(&agent))
                }
                permission::SET_PRESET => {
                    let SetPresetParams {
                        agent,
                        preset,
                        approval,
                    } = req.params_as()?;
                    Reply::json(p.set(&agent, &preset, approval)?)
                }
                _ => Err(req.unknown_method()),
            }
        }
    });
    let agents = presets.agents.clone();
    presets.scopes.follow(ctx, move |agent| {
        agents.borrow_mut().remove(agent);
        Ok(())
    });
}
