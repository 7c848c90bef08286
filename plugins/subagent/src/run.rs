//! Running children: a one-shot child's run to its outcome, a continuable
//! child's watch until it settles (and the notice its parent gets), and
//! what a parent's going does to its children.

use dsh_sdk::api::agents::{Agents, CancelParams, RunStatus};
use dsh_sdk::api::sessions::Sessions;
use dsh_sdk::api::subagents::{RunOutcome, StopReason};
use dsh_sdk::prelude::*;
use dsh_sdk::tracing;
use dsh_sdk::vocab::records::{CancelCause, TurnEndReason};
use dsh_sdk::vocab::Message;

use crate::outcome;
use crate::table::{Shared, State};

/// How a run ended: its stop reason, final answer and diagnostic.
struct Ended {
    stop: StopReason,
    output: String,
    diagnostic: Option<String>,
}

/// Reads how `child`'s run, begun at seq `from`, ended for `reason`.
async fn ended(ctx: &Context, child: &str, from: u64, reason: Option<&TurnEndReason>) -> Ended {
    // The log of a child disposed under the run (its provider unloaded)
    // is closed: the run then has no answer to give.
    let output = match Sessions::new(ctx).events(child, from).await {
        Ok(events) => outcome::final_output(&events),
        Err(e) => {
            tracing::debug!("subagent {child}: its log could not be read back: {e}");
            String::new()
        }
    };
    Ended {
        stop: outcome::stop_reason(reason),
        output,
        diagnostic: outcome::diagnostic(reason),
    }
}

/// Cancels and disposes a one-shot child whose caller went away before
/// its run ended (the parent's turn was cancelled).
struct DisposeOnDrop {
    ctx: Context,
    table: Shared,
    child: Option<String>,
}

impl Drop for DisposeOnDrop {
    fn drop(&mut self) {
        let Some(child) = self.child.take() else {
            return;
        };
        let (ctx, table) = (self.ctx.clone(), self.table.clone());
        self.ctx.spawn(async move {
            let agents = Agents::new(&ctx);
            let cancel = CancelParams {
                agent: child.clone(),
                cause: Some(CancelCause::Parent),
                keep_inbox: false,
            };
            let _ = agents.cancel(&cancel).await;
            let _ = agents.dispose(&child).await;
            table.remove(&child);
        });
    }
}

/// Waits until `child` is idle with none of its own children running
/// (their notices wake it: it answers them first); how its last turn
/// ended, or `None` when it went away (disposed) meanwhile.
async fn quiet(agents: &Agents, table: &Shared, child: &str) -> Option<Option<TurnEndReason>> {
    loop {
        let Ok(idle) = agents.when_idle(child).await else {
            return None;
        };
        let changed = table.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if !table.any_running_below(child) {
            return Some(idle.reason);
        }
        changed.await;
    }
}

/// Runs one-shot child `child` on `prompt` to its end (and the end of
/// any background children it started), then disposes it. Dropping the
/// future cancels the child.
pub async fn one_shot(
    ctx: &Context,
    table: &Shared,
    child: String,
    prompt: &str,
) -> Result<RunOutcome> {
    let mut guard = DisposeOnDrop {
        ctx: ctx.clone(),
        table: table.clone(),
        child: Some(child.clone()),
    };
    let agents = Agents::new(ctx);
    let from = Sessions::new(ctx).header(&child).await?.seq;
    agents
        .followup(&child, Message::user_text(dsh_sdk::new_id(), prompt))
        .await?;
    let reason = match quiet(&agents, table, &child).await {
        Some(reason) => reason,
        None => {
            tracing::debug!("subagent {child} went away mid-run");
            None
        }
    };
    let run = ended(ctx, &child, from, reason.as_ref()).await;
    guard.child = None;
    if let Err(e) = agents.dispose(&child).await {
        tracing::debug!("subagent {child}: disposing it after its run: {e}");
    }
    table.remove(&child);
    Ok(RunOutcome {
        child_id: child,
        stop_reason: run.stop,
        output: run.output,
        diagnostic: run.diagnostic,
    })
}

/// Watches continuable child `child`, whose run began at seq `from`, until
/// it settles: idle, with no message on its way to it and none of its own
/// children running. Then it is disposed (its session stays stored: a
/// `followup` resumes it) and its parent gets the notice: its next turn
/// when idle, its next step when busy — quietly when the parent was stopped with it, or when
/// the child went away under the watch (its provider unloaded, the host
/// closing): nothing then wakes a parent into a turn.
pub async fn watch(ctx: Context, table: Shared, child: String, from: u64) {
    let agents = Agents::new(&ctx);
    let mut gone = false;
    let reason = loop {
        let Ok(idle) = agents.when_idle(&child).await else {
            gone = true;
            break None;
        };
        table.set_state(&child, State::Settling);
        let changed = table.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        // A followup on its way, or one that woke it between its going
        // idle and now: it is not settled.
        if table.pending(&child) > 0 {
            table.set_state(&child, State::Running);
            changed.await;
            continue;
        }
        match agents.status(&child).await {
            Ok(s) if s.status == RunStatus::Running => {
                table.set_state(&child, State::Running);
                continue;
            }
            Ok(_) => {}
            Err(_) => {
                gone = true;
                break idle.reason;
            }
        }
        if !table.any_running_below(&child) && table.pending(&child) == 0 {
            break idle.reason;
        }
        // Its own children's notices wake it: settle after them.
        table.set_state(&child, State::Running);
        let changed = table.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if table.any_running_below(&child) || table.pending(&child) > 0 {
            changed.await;
        }
    };
    let run = ended(&ctx, &child, from, reason.as_ref()).await;
    if let Err(e) = agents.dispose(&child).await {
        tracing::debug!("subagent {child}: disposing it once settled: {e}");
    }
    let Some(entry) = table.get(&child) else {
        return;
    };
    // The notice is in the parent's inbox before the child counts as
    // settled: whoever waits for the settlement then finds the parent
    // woken by it.
    let notice = outcome::notice(&child, run.stop, run.diagnostic.as_deref(), &run.output);
    let sent = if entry.stopped_with_parent || gone {
        agents.inject(&entry.parent, notice).await
    } else {
        // An idle parent gets one ordinary turn; a busy one is steered,
        // so children settling together cost it one step, not a turn
        // each (as the original delivers it).
        match agents.status(&entry.parent).await {
            Ok(s) if s.status == RunStatus::Idle => agents.followup(&entry.parent, notice).await,
            _ => agents.steer(&entry.parent, notice).await,
        }
    };
    if let Err(e) = sent {
        tracing::warn!(
            "subagent \"{child}\" settlement notice was not delivered to its parent: {e}"
        );
    }
    table.set_state(&child, State::Ready);
}

/// Stops every running descendant of `agent` along with it: their notices
/// then arrive without waking it.
pub async fn stop_below(ctx: &Context, table: &Shared, agent: &str, dispose: bool) {
    let agents = Agents::new(ctx);
    for (id, child, _) in table.descendants_of(agent) {
        if child.state == State::Ready {
            continue;
        }
        table.mark_stopped_with_parent(&id);
        let result = if dispose {
            agents.dispose(&id).await
        } else {
            let cancel = CancelParams {
                agent: id.clone(),
                cause: Some(CancelCause::Parent),
                keep_inbox: false,
            };
            agents.cancel(&cancel).await
        };
        if let Err(e) = result {
            tracing::debug!("subagent {id}: stopping it with its parent: {e}");
        }
    }
}

/// Whether `agent`'s last turn was cancelled by the user.
pub async fn cancelled_by_user(ctx: &Context, agent: &str) -> bool {
    matches!(
        Agents::new(ctx).status(agent).await,
        Ok(s) if matches!(s.last_end, Some(TurnEndReason::Aborted { reason: CancelCause::User }))
    )
}
