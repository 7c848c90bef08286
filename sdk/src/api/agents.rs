//! The `agents` service (plugin `agent-loop`, reference dsh-core §4.3): the
//! params and reply of each method of [`crate::names::agents`], and
//! [`Agents`], a client with one method per service method.
//!
//! Every method names its agent with `agent`. A message sent is a
//! [`UserInput`]: a full message (anything with a `role`, which must then
//! be a well-formed [`crate::vocab::Message`]) or the `{text}` shorthand;
//! anything else is refused (`INVALID_PAYLOAD`) before it is queued.
//! Turn-end reasons and cancel causes are open (`{kind, ...}`: kinds of
//! other plugins are kept whole). The bus events the loop dispatches are in
//! [`super::agent_loop`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::names::{agents as method, service};
use crate::vocab::input::UserInput;
use crate::vocab::records::{CancelCause, TurnEndReason};
use crate::{Context, Result, Service};

// ---- params ----------------------------------------------------------------

/// Params of the methods that name only an agent: `pending`, `whenIdle`,
/// `status`, `dispose`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentParams {
    /// The agent (its session id).
    pub agent: String,
}

/// Params of `followup`, `steer` and `inject`: a message for the agent's
/// inbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SendParams {
    /// The agent.
    pub agent: String,
    /// A user message, or `{text}` (a user text message with a fresh id).
    pub message: UserInput,
}

/// Params of `replace`: the pending message `messageId` is replaced in
/// place by `message`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplaceParams {
    /// The agent.
    pub agent: String,
    /// The id of the pending message to replace.
    pub message_id: String,
    /// The replacement, as for [`SendParams::message`].
    pub message: UserInput,
}

/// Params of `remove`: the pending message `messageId` is cancelled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoveParams {
    /// The agent.
    pub agent: String,
    /// The id of the pending message to remove.
    pub message_id: String,
}

/// Params of `cancel`: ends the running turn `aborted{cause}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelParams {
    /// The agent.
    pub agent: String,
    /// Why; `{kind: "user"}` when absent or null. Any object with a string
    /// `kind` cancels: a kind of another plugin's is kept whole
    /// ([`CancelCause::Other`]); a known kind must be well-formed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<CancelCause>,
    /// Keep the pending messages; without it the inbox is cleared durably.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_inbox: bool,
}

/// Params of `selectModel`: both `provider` and `model` select a route for
/// the steps that follow; neither clears the selection; one alone is
/// refused (`INVALID_PAYLOAD`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectModelParams {
    /// The agent.
    pub agent: String,
    /// The provider route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// Params of `runMaintenance`: a call run while the agent stays idle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMaintenanceParams {
    /// The agent.
    pub agent: String,
    /// The task.
    #[serde(default)]
    pub task: MaintenanceTask,
}

/// The call a maintenance task makes: `service.method(params)`. The
/// provider refuses one without a service or a method (`INVALID_PAYLOAD`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MaintenanceTask {
    /// The service to call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Its method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The call's params (open: the callee's own), null when absent.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub params: Value,
}

// ---- replies ---------------------------------------------------------------

/// Reply of `followup`, `steer` and `inject`: the id of the queued message
/// (as the message carries it; a full message without an id gives null).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendReply {
    /// The queued message's id.
    pub message_id: Value,
}

/// Reply of `pending`: the messages waiting in each inbox list. Generic
/// over the list, so the provider serializes borrowed lists
/// (`PendingReply<&[Value]>`) and a caller reads owned ones (the default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingReply<L = Vec<Value>> {
    /// Claimed by the next turn, one per turn.
    pub next_turn: L,
    /// Claimed all together by the next step.
    pub next_step: L,
}

/// Reply of `whenIdle`: how the agent's last turn ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WhenIdleReply {
    /// The last turn's end reason, null before any turn.
    pub reason: Option<TurnEndReason>,
    /// The number of the last turn (0 when none).
    pub last_turn: u64,
}

/// Whether an agent is running a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// A turn is running.
    Running,
    /// No turn is running (a maintenance task may be).
    Idle,
}

/// Reply of `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReply {
    /// Running or idle.
    pub status: RunStatus,
    /// A maintenance task is running.
    pub maintenance: bool,
    /// The number of the last turn (0 when none).
    pub last_turn: u64,
    /// The last turn's end reason, null before any turn.
    pub last_end: Option<TurnEndReason>,
    /// The options it runs with (its route as made, its `maxTokens` and
    /// reasoning effort), which a delegated child inherits.
    #[serde(default)]
    pub options: crate::api::agent_loop::AgentOptions,
}

// ---- client ----------------------------------------------------------------

/// A typed client of the `agents` service: one method per service method,
/// each sending the params type above and parsing the reply type (an
/// unexpected reply is `INVALID_PAYLOAD`).
#[derive(Clone)]
pub struct Agents(Service);

impl Agents {
    /// The `agents` service of `ctx`.
    pub fn new(ctx: &Context) -> Agents {
        Agents(ctx.service(service::AGENTS))
    }

    /// The untyped client underneath.
    pub fn service(&self) -> &Service {
        &self.0
    }

    fn agent(agent: &str) -> AgentParams {
        AgentParams {
            agent: agent.to_owned(),
        }
    }

    fn send(agent: &str, message: impl Into<UserInput>) -> SendParams {
        SendParams {
            agent: agent.to_owned(),
            message: message.into(),
        }
    }

    /// `followup`: queues a message for the next turn, starting one when
    /// the agent is idle. `message` is a [`crate::vocab::Message`] or
    /// [`UserInput::text`].
    pub async fn followup(&self, agent: &str, message: impl Into<UserInput>) -> Result<SendReply> {
        let params = Self::send(agent, message);
        self.0.call_as(method::FOLLOWUP, &params).await
    }

    /// `steer`: queues a message for the next step, starting a turn when
    /// the agent is idle.
    pub async fn steer(&self, agent: &str, message: impl Into<UserInput>) -> Result<SendReply> {
        let params = Self::send(agent, message);
        self.0.call_as(method::STEER, &params).await
    }

    /// `inject`: queues a message for the next step without starting a
    /// turn.
    pub async fn inject(&self, agent: &str, message: impl Into<UserInput>) -> Result<SendReply> {
        let params = Self::send(agent, message);
        self.0.call_as(method::INJECT, &params).await
    }

    /// `replace`: replaces a pending message; false when none has that id.
    pub async fn replace(&self, params: &ReplaceParams) -> Result<bool> {
        self.0.call_as(method::REPLACE, params).await
    }

    /// `remove`: cancels a pending message; false when none has that id.
    pub async fn remove(&self, params: &RemoveParams) -> Result<bool> {
        self.0.call_as(method::REMOVE, params).await
    }

    /// `pending`: the messages waiting in each inbox list.
    pub async fn pending(&self, agent: &str) -> Result<PendingReply> {
        self.0.call_as(method::PENDING, Self::agent(agent)).await
    }

    /// `cancel`: ends the running turn (and clears the inbox unless
    /// `keepInbox`).
    pub async fn cancel(&self, params: &CancelParams) -> Result<()> {
        self.0.call_as(method::CANCEL, params).await
    }

    /// `whenIdle`: resolves once the agent is idle, with its last turn's
    /// end.
    pub async fn when_idle(&self, agent: &str) -> Result<WhenIdleReply> {
        self.0.call_as(method::WHEN_IDLE, Self::agent(agent)).await
    }

    /// `selectModel`: selects (or, with neither field, clears) the route of
    /// the steps that follow.
    pub async fn select_model(&self, params: &SelectModelParams) -> Result<()> {
        self.0.call_as(method::SELECT_MODEL, params).await
    }

    /// `runMaintenance`: runs a task while the agent stays idle and returns
    /// the task's reply (open: the callee's own).
    pub async fn run_maintenance(&self, agent: &str, task: MaintenanceTask) -> Result<Value> {
        let params = RunMaintenanceParams {
            agent: agent.to_owned(),
            task,
        };
        self.0.call_as(method::RUN_MAINTENANCE, &params).await
    }

    /// `status`: whether the agent runs a turn, and how the last one ended.
    pub async fn status(&self, agent: &str) -> Result<StatusReply> {
        self.0.call_as(method::STATUS, Self::agent(agent)).await
    }

    /// `dispose`: ends the agent (its pending work is kept in the log).
    pub async fn dispose(&self, agent: &str) -> Result<()> {
        self.0.call_as(method::DISPOSE, Self::agent(agent)).await
    }
}

#[cfg(test)]
mod tests;
