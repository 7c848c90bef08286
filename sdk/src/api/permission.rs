//! The `permission` service (plugin `permission`): the permission preset
//! in force for each agent, and a switch (`/permission <preset>`). A preset
//! is a fence mode plus an approval policy, as the original's
//! permission-presets name them (reference dsh-product §2):
//! `read-only` (read-only, ask), `workspace-write` (workspace-write, ask),
//! `danger-full-access` (danger-full-access, never).

use serde::{Deserialize, Serialize};

use crate::fence::Mode;
use crate::names::{permission as method, service};
use crate::{Context, Result, Service};

/// What happens to a call beyond the fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalPolicy {
    /// The approval seam is asked (and refuses when no one can answer).
    Ask,
    /// It is refused.
    Never,
}

impl ApprovalPolicy {
    /// The policy's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalPolicy::Ask => "ask",
            ApprovalPolicy::Never => "never",
        }
    }
}

/// The presets, in the original's order: (name, mode, approval).
pub const PRESETS: [(&str, Mode, ApprovalPolicy); 3] = [
    ("read-only", Mode::ReadOnly, ApprovalPolicy::Ask),
    ("workspace-write", Mode::WorkspaceWrite, ApprovalPolicy::Ask),
    (
        "danger-full-access",
        Mode::DangerFullAccess,
        ApprovalPolicy::Never,
    ),
];

/// The preset `name`, as (mode, approval).
pub fn preset(name: &str) -> Option<(Mode, ApprovalPolicy)> {
    PRESETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, m, a)| (*m, *a))
}

/// The name of the preset that is (mode, approval), if one is.
pub fn preset_name(mode: Mode, approval: ApprovalPolicy) -> Option<&'static str> {
    PRESETS
        .iter()
        .find(|(_, m, a)| *m == mode && *a == approval)
        .map(|(n, _, _)| *n)
}

/// Params of `preset`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentParams {
    /// The agent (its session id).
    pub agent: String,
}

/// Params of `setPreset`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetPresetParams {
    /// The agent.
    pub agent: String,
    /// The preset's name (`UNKNOWN_PRESET` when there is none).
    pub preset: String,
    /// Overrides the preset's approval policy for this agent (a dsh
    /// extension: a delegated child works in its parent's mode with
    /// `never`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalPolicy>,
}

/// Reply of `preset` and `setPreset`: what is in force for the agent now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresetReply {
    /// The preset's name; null when the configured mode and policy match
    /// none.
    pub preset: Option<String>,
    /// The fence mode.
    pub mode: Mode,
    /// The approval policy.
    pub approval: ApprovalPolicy,
    /// Every preset's name, in order.
    pub presets: Vec<String>,
}

/// A typed client of the `permission` service.
#[derive(Clone)]
pub struct Permission(Service);

impl Permission {
    /// The `permission` service of `ctx`.
    pub fn new(ctx: &Context) -> Permission {
        Permission(ctx.service(service::PERMISSION))
    }

    /// `preset`: what is in force for `agent`.
    pub async fn preset(&self, agent: &str) -> Result<PresetReply> {
        let params = AgentParams {
            agent: agent.to_owned(),
        };
        self.0.call_as(method::PRESET, &params).await
    }

    /// `setPreset`: switches `agent` to `preset`; what is in force after.
    pub async fn set_preset(&self, agent: &str, preset: &str) -> Result<PresetReply> {
        self.set_preset_with(agent, preset, None).await
    }

    /// `setPreset` with the preset's approval policy replaced by
    /// `approval` (when given).
    pub async fn set_preset_with(
        &self,
        agent: &str,
        preset: &str,
        approval: Option<ApprovalPolicy>,
    ) -> Result<PresetReply> {
        let params = SetPresetParams {
            agent: agent.to_owned(),
            preset: preset.to_owned(),
            approval,
        };
        self.0.call_as(method::SET_PRESET, &params).await
    }
}
