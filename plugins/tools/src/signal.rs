//! The caller's signal of an `execute` call (reference: the caller
//! `signal`): `exec.cancelled: true` when it is already aborted, `cancel
//! {agent, callId}` while it runs. The pipeline checks it between stages; a
//! running body is cancelled by dropping its call (bash kills its process
//! group).

use std::cell::Cell;
use std::rc::Rc;

use dsh_sdk::api::tools::ToolResult;
use dsh_sdk::names::code;

use crate::results::failure;

/// A caller's cancellation of one `execute` call.
#[derive(Default)]
pub struct CallSignal {
    /// The caller aborted.
    pub aborted: Cell<bool>,
    /// The body was called (a cancel now is `ABORTED`, not
    /// `ABORTED_BEFORE_DISPATCH`).
    pub body_invoked: Cell<bool>,
    /// Wakes a running body's watcher when the caller aborts.
    pub notify: tokio::sync::Notify,
}

/// `None` for the staged API, whose caller checks its own signal.
pub type Signal = Option<Rc<CallSignal>>;

/// Whether the caller aborted.
pub fn aborted(signal: &Signal) -> bool {
    signal.as_ref().is_some_and(|s| s.aborted.get())
}

/// The original's result for a call cancelled before its body ran
/// (`ABORTED_BEFORE_DISPATCH`) or while or after it ran (`ABORTED`),
/// keeping the contexts of `prior`.
pub fn cancelled(signal: &Signal, prior: Option<&ToolResult>) -> ToolResult {
    let started = signal.as_ref().is_some_and(|s| s.body_invoked.get());
    let (message, code) = if started {
        ("tool call aborted", code::ABORTED)
    } else {
        (
            "tool call aborted before dispatch",
            code::ABORTED_BEFORE_DISPATCH,
        )
    };
    let mut result = failure(message, Some(("AbortError", code)));
    if let Some(prior) = prior.filter(|p| !p.contexts().is_empty()) {
        result.additional_contexts = Some(prior.contexts().to_vec());
    }
    result
}

/// A success the caller's cancellation overtook becomes the cancellation
/// result; failures (denials, tool errors) are kept.
pub fn unless_cancelled(signal: &Signal, result: ToolResult) -> ToolResult {
    if aborted(signal) && !result.is_error {
        cancelled(signal, Some(&result))
    } else {
        result
    }
}
