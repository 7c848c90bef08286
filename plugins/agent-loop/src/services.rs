//! The `agents` and `agentLoop` services: one function per method, each
//! parsing its params into the SDK's type and answering its reply type
//! (`dsh_sdk::api::agents`, `dsh_sdk::api::agent_loop`).

use dsh_sdk::api::agent_loop::{AgentOptions, CreateParams, MaxTokens, ResumeParams};
use dsh_sdk::api::agents::{
    AgentParams, CancelParams, PendingReply, RemoveParams, ReplaceParams, RunMaintenanceParams,
    RunStatus, SelectModelParams, SendParams, StatusReply,
};
use dsh_sdk::names::{agent_loop, agents};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::records::{CancelCause, SpliceTarget};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::{no_agent, Loop, NEXT_STEP, NEXT_TURN};

/// The params fields that name what a method is about, as callers write
/// them.
mod field {
    pub const AGENT: &str = "agent";
    pub const CAUSE: &str = "cause";
    pub const MESSAGE_ID: &str = "messageId";
    pub const SESSION_ID: &str = "sessionId";
}

/// Parses a method's params. When they do not parse and one of `ids` (the
/// fields that name the agent, message or session, in the order they are
/// checked) is not a string, the error is the loop's own `missing `id``.
fn params<T: DeserializeOwned>(req: &Request, ids: &[&str]) -> Result<T> {
    req.params_as().map_err(
        |e| match ids.iter().find(|id| !req.params[**id].is_string()) {
            Some(id) => Error::new(codes::INVALID_PAYLOAD, format!("missing `{id}`")),
            None => e,
        },
    )
}

const AGENT: &[&str] = &[field::AGENT];
const MESSAGE: &[&str] = &[field::AGENT, field::MESSAGE_ID];

/// The `agents` service.
pub(crate) async fn handle_agents(l: Loop, req: Request) -> Result<Reply> {
    match req.method.as_str() {
        agents::FOLLOWUP => send(&l, &req, NEXT_TURN, true).await,
        agents::STEER => send(&l, &req, NEXT_STEP, true).await,
        agents::INJECT => send(&l, &req, NEXT_STEP, false).await,
        agents::REPLACE => replace(&l, &req).await,
        agents::REMOVE => remove(&l, &req).await,
        agents::PENDING => pending(&l, &req),
        agents::CANCEL => cancel(&l, &req).await,
        agents::WHEN_IDLE => when_idle(&l, &req).await,
        agents::SELECT_MODEL => select_model(&l, &req),
        agents::RUN_MAINTENANCE => run_maintenance(&l, &req).await,
        agents::STATUS => status(&l, &req),
        agents::DISPOSE => dispose(&l, &req).await,
        _ => Err(req.unknown_method()),
    }
}

/// `followup`, `steer`, `inject`: queues the message in `target`, waking
/// the agent when `wakeup`.
async fn send(l: &Loop, req: &Request, target: SpliceTarget, wakeup: bool) -> Result<Reply> {
    let p: SendParams = params(req, AGENT)?;
    Reply::json(l.send(&p.agent, p.message, target, wakeup).await?)
}

/// `replace`: true when a pending message was replaced.
async fn replace(l: &Loop, req: &Request) -> Result<Reply> {
    let p: ReplaceParams = params(req, MESSAGE)?;
    Reply::json(l.replace(&p.agent, &p.message_id, p.message).await?)
}

/// `remove`: true when a pending message was removed.
async fn remove(l: &Loop, req: &Request) -> Result<Reply> {
    let p: RemoveParams = params(req, MESSAGE)?;
    Reply::json(l.remove(&p.agent, &p.message_id).await?)
}

/// `pending`: both inbox lists.
fn pending(l: &Loop, req: &Request) -> Result<Reply> {
    let p: AgentParams = params(req, AGENT)?;
    let agents = l.agents.borrow();
    let a = agents.get(&p.agent).ok_or_else(|| no_agent(&p.agent))?;
    Reply::json(PendingReply {
        next_turn: &a.inbox.next_turn,
        next_step: &a.inbox.next_step,
    })
}

/// `cancel`: a user cause unless one is given. Every cause that reads as
/// a [`CancelCause`] cancels: the original's, `legacy`, and a kind of
/// another plugin's (kept whole, as the original keeps what it is given).
/// Only one that does not read (not an object with a string `kind`, or a
/// known kind that is malformed, which would make the log unreadable) is
/// refused with `INVALID_PAYLOAD`, and then nothing is cancelled.
async fn cancel(l: &Loop, req: &Request) -> Result<Reply> {
    let p: CancelParams = match params(req, AGENT) {
        Ok(p) => p,
        Err(e) => return Err(refused_cause(&req.params[field::CAUSE]).unwrap_or(e)),
    };
    let cause = p.cause.unwrap_or(CancelCause::User);
    l.cancel(&p.agent, cause, p.keep_inbox).await?;
    Ok(Value::Null.into())
}

/// The refusal of a cancel's `cause` that does not read as one, saying
/// why and what a cause is; `None` when the cause is absent or reads (the
/// params failed for another field).
fn refused_cause(cause: &Value) -> Option<Error> {
    if cause.is_null() {
        return None;
    }
    let e = CancelCause::deserialize(cause).err()?;
    Some(Error::new(
        codes::INVALID_PAYLOAD,
        format!(
            "the cancel's `cause` {cause} is refused ({e}), and nothing was cancelled: a cause \
             is an object with a string `kind`, such as {{kind: \"user\"}}, {{kind: \"parent\"}}, \
             {{kind: \"hook\", reason}}, {{kind: \"disposed\"}} or a kind of another plugin's"
        ),
    ))
}

/// `whenIdle`.
async fn when_idle(l: &Loop, req: &Request) -> Result<Reply> {
    let p: AgentParams = params(req, AGENT)?;
    Reply::json(l.when_idle(&p.agent).await?)
}

/// `selectModel`: `{provider, model}` selects a route from the next
/// step's assembly on; neither clears the selection (the agent's own
/// options again).
fn select_model(l: &Loop, req: &Request) -> Result<Reply> {
    let p: SelectModelParams = params(req, AGENT)?;
    let selection = match (p.provider, p.model) {
        (Some(provider), Some(model)) => Some((provider, model)),
        (None, None) => None,
        _ => {
            return Err(Error::new(
                codes::INVALID_PAYLOAD,
                "selectModel needs both `provider` and `model`, or neither",
            ))
        }
    };
    if let Some(a) = l.agents.borrow_mut().get_mut(&p.agent) {
        a.selection = selection;
        return Ok(Value::Null.into());
    }
    // A pending agent's route is part of its setup.
    l.pending_mut(&p.agent, |a| a.selection = selection)
        .ok_or_else(|| no_agent(&p.agent))?;
    Ok(Value::Null.into())
}

/// `runMaintenance`: the task's own reply.
async fn run_maintenance(l: &Loop, req: &Request) -> Result<Reply> {
    let p: RunMaintenanceParams = params(req, AGENT)?;
    Ok(l.run_maintenance(&p.agent, p.task).await?.into())
}

/// `status`.
fn status(l: &Loop, req: &Request) -> Result<Reply> {
    let p: AgentParams = params(req, AGENT)?;
    let agents = l.agents.borrow();
    let a = agents.get(&p.agent).ok_or_else(|| no_agent(&p.agent))?;
    Reply::json(StatusReply {
        status: if a.running {
            RunStatus::Running
        } else {
            RunStatus::Idle
        },
        maintenance: a.maintenance,
        last_turn: a.last_turn,
        last_end: a.last_end.clone(),
        options: AgentOptions {
            provider: Some(a.provider.clone()).filter(|p| !p.is_empty()),
            model: Some(a.model.clone()).filter(|m| !m.is_empty()),
            max_tokens: a.max_tokens.map(MaxTokens::from),
            reasoning_effort: a.reasoning_effort.clone(),
        },
    })
}

/// `dispose`.
async fn dispose(l: &Loop, req: &Request) -> Result<Reply> {
    let p: AgentParams = params(req, AGENT)?;
    if !l.agents.borrow().contains_key(&p.agent) {
        return Err(no_agent(&p.agent));
    }
    l.dispose(&p.agent).await;
    Ok(Value::Null.into())
}

/// The `agentLoop` service.
pub(crate) async fn handle_loop(l: Loop, req: Request) -> Result<Reply> {
    match req.method.as_str() {
        agent_loop::CREATE => create(&l, &req).await,
        agent_loop::RESUME => resume(&l, &req).await,
        agent_loop::COMMIT => {
            let p: AgentParams = params(&req, AGENT)?;
            Reply::json(l.publish(Some(&req), &p.agent).await?)
        }
        agent_loop::ABANDON => {
            let p: AgentParams = params(&req, AGENT)?;
            l.abandon(&p.agent).await?;
            Ok(Value::Null.into())
        }
        agent_loop::LIST => list(&l),
        agent_loop::ROOTS => {
            let mut roots: Vec<String> = l
                .agents
                .borrow()
                .iter()
                .filter(|(_, a)| a.parent.is_none())
                .map(|(id, _)| id.clone())
                .collect();
            roots.sort();
            Reply::json(roots)
        }
        agent_loop::IS_OWNED_BY => {
            let p: AgentParams = params(&req, AGENT)?;
            let agents = l.agents.borrow();
            let a = agents.get(&p.agent).ok_or_else(|| no_agent(&p.agent))?;
            Reply::json(a.owner == Some(req.caller))
        }
        agent_loop::RELEASE => {
            let p: AgentParams = params(&req, AGENT)?;
            l.release(&p.agent)?;
            Ok(Value::Null.into())
        }
        _ => Err(req.unknown_method()),
    }
}

/// `create`: the agent belongs to the caller (once committed, with
/// `setup`).
async fn create(l: &Loop, req: &Request) -> Result<Reply> {
    let p: CreateParams = params(req, &[])?;
    Reply::json(l.create(Some(req), &p).await?)
}

/// `resume`: a resumed agent belongs to the caller; a live one keeps the
/// owner that created it, unless it was released (then the caller owns
/// it).
async fn resume(l: &Loop, req: &Request) -> Result<Reply> {
    let p: ResumeParams = params(req, &[field::SESSION_ID])?;
    let released = l.agents.borrow().get(&p.session_id).map(|a| a.released);
    let resumed = l.resume(Some(req), &p).await?;
    // Live and released: the caller takes it over (resumed from the store,
    // the commit made the caller its owner).
    if released == Some(true) {
        l.own(req, &resumed);
    }
    Reply::json(resumed)
}

/// `list`: the live agents' ids.
fn list(l: &Loop) -> Result<Reply> {
    let ids: Vec<String> = l.agents.borrow().keys().cloned().collect();
    Reply::json(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cause_that_reads_is_not_refused() {
        for cause in [
            json!(null),
            json!({"kind": "user"}),
            json!({"kind": "hook"}),
            json!({"kind": "hook", "reason": "policy"}),
            json!({"kind": "legacy"}),
            json!({"kind": "timeout", "afterMs": 5}),
        ] {
            assert!(refused_cause(&cause).is_none(), "{cause}");
        }
    }

    #[test]
    fn a_cause_that_does_not_read_is_refused_saying_what_a_cause_is() {
        let what = "and nothing was cancelled: a cause is an object with a string `kind`, \
                    such as {kind: \"user\"}, {kind: \"parent\"}, {kind: \"hook\", reason}, \
                    {kind: \"disposed\"} or a kind of another plugin's";
        for (cause, why) in [
            (
                json!("user"),
                "invalid type: string \"user\", expected a map",
            ),
            (json!({"reason": "x"}), "missing field `kind`"),
            (json!({"kind": 3}), "`kind` must be a string"),
            (
                json!({"kind": "hook", "reason": 3}),
                "invalid type: integer `3`, expected a string",
            ),
        ] {
            let e = refused_cause(&cause).expect("refused");
            assert_eq!(e.code, codes::INVALID_PAYLOAD);
            assert_eq!(
                e.message,
                format!("the cancel's `cause` {cause} is refused ({why}), {what}")
            );
        }
    }
}
