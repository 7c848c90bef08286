//! How one agent log accounts for the work it consumed (the original's
//! `foldConsumedWork`, packages/core/agent/src/consumed-work.ts).
//!
//! A turn that stops before its first step logs a `turn/end` shaped like the
//! no-op turns a rejection or an empty claim produces. The inbox's own
//! record tells them apart: a claim is a removal without `outcome`, a
//! cancellation is a removal with `outcome: "canceled"`.

use std::collections::HashSet;

use super::records::{InboxSpliced, StepBoundary, TurnEnd, TurnEndReason, TurnStart};
use super::{event, SessionEvent};

/// What [`fold_consumed_work`] finds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConsumedWork {
    /// The latest closed turn that accounts for consumed work: one that
    /// entered a model step, or one that claimed inbox input and then
    /// failed, was stopped or was rejected. `None` when no turn closed over
    /// any work.
    pub end: Option<SessionEvent>,
    /// Whether accepted work was cancelled out of the inbox, unrun, after
    /// that turn.
    pub dropped_unrun: bool,
}

/// Whether a turn that claimed input but never reached a step ends in a way
/// that accounts for that input. Only `completed` does not: its claim was
/// rewritten away, leaving nothing to run. Any other ending (`blocked`,
/// `aborted`, `interrupted`, `error`, or one this code does not know) does.
fn accounts_for_claim(reason: &TurnEndReason) -> bool {
    *reason != TurnEndReason::Completed
}

/// Folds one agent log, or an owned suffix of one, in a single pass.
pub fn fold_consumed_work(events: &[SessionEvent]) -> ConsumedWork {
    let mut stepped = HashSet::new();
    let mut claimed = HashSet::new();
    let mut open: Option<u64> = None;
    let mut out = ConsumedWork::default();
    for e in events {
        match e.kind.as_str() {
            event::TURN_START => open = e.data_as::<TurnStart>().ok().map(|t| t.turn),
            event::STEP_START => {
                if let Ok(s) = e.data_as::<StepBoundary>() {
                    stepped.insert(s.turn);
                }
            }
            event::INBOX_SPLICED => {
                let Ok(splice) = e.data_as::<InboxSpliced>() else {
                    continue;
                };
                if splice.removed_count.is_none() {
                    continue;
                }
                if splice.outcome.as_deref() == Some("canceled") {
                    // A replacement keeps the work pending under a new
                    // identity; only a cancellation leaving nothing drops it.
                    out.dropped_unrun |= splice.inserted.is_empty();
                } else if let Some(turn) = open {
                    // A claim: the loop's own step-boundary read.
                    claimed.insert(turn);
                }
            }
            event::TURN_END => {
                open = None;
                let Ok(end) = e.data_as::<TurnEnd>() else {
                    continue;
                };
                let turn = end.turn;
                let stepped_turn = stepped.remove(&turn);
                if stepped_turn || (claimed.remove(&turn) && accounts_for_claim(&end.reason)) {
                    out.end = Some(e.clone());
                    // A drop before this turn closed is what its ending
                    // reports; only a later one is still unaccounted for.
                    out.dropped_unrun = false;
                }
            }
            _ => {}
        }
    }
    out
}
