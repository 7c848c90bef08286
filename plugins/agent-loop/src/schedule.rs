//! When each tool call of one assistant step runs: the scheduling rules of
//! the loop (the original's `tool-calls.ts`), as a pure state machine with
//! no I/O. `tool_calls.rs` runs the calls; it asks [`Schedule`] what to do
//! next and tells it what happened, so every rule below is unit-tested
//! without a host.
//!
//! The rules, for the calls `0..n` in model order:
//!
//! - **Groups.** A group begins at the first unstarted call, once every
//!   call before it is committed; that call is classified first (the
//!   registry's execution mode). An `exclusive` call is a group of one. A
//!   `parallel` call opens a *pool*: a rolling window over the calls after
//!   it. Each next call is classified just before it would start, and only
//!   when the pool has a free slot.
//! - **Barrier.** A call the pool classifies `exclusive` closes the pool
//!   and becomes the next group: it starts alone once every call of the
//!   pool is committed (it is not asked again).
//! - **Cap.** At most `cap` calls of a pool run at once (`cap` is
//!   `maxParallelToolCalls`, at least 1; 1 is strictly one call at a time).
//!   A call that settled (its result is known, even if not committed yet)
//!   frees its slot, and the pool starts the next call.
//! - **Commit order.** Results are committed strictly in model order: a
//!   call is committed once it settled and every call before it is
//!   committed; a settled call is committed before anything else starts.
//! - **Abort.** Nothing new is classified or started. The calls already
//!   started are waited for (the runner stops the running ones) and
//!   committed in order; then each call never started, of this group and
//!   every later one, is answered as aborted before dispatch, in model
//!   order. No later call is classified (no barrier after an aborted group).
//! - **Internal failure.** Nothing new starts and nothing more is
//!   committed or answered: the calls already running are waited for, then
//!   the runner reports the failure (no synthetic results).

use dsh_sdk::api::tools::ToolMode;

/// What the runner does next (see [`Schedule::next_action`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Ask the registry for call `k`'s execution mode and answer with
    /// [`Schedule::classified`].
    Classify(usize),
    /// Start call `k`: log its `tool/call`, run its pre-execute stage, and
    /// dispatch it. Once its result is known (at once, when the stage
    /// settled it), tell [`Schedule::settled`].
    Start(usize),
    /// Wait for one running call to settle, then tell
    /// [`Schedule::settled`]. Only asked while a call is running.
    Wait,
    /// Commit call `k`'s result (post-execute, `tool/result`, its
    /// additional contexts): it settled, and every call before it is
    /// committed.
    Commit(usize),
    /// Answer call `k`, which never started, as aborted before dispatch
    /// (its `tool/call` and `tool/result`).
    Skip(usize),
    /// Every call is answered (or, after a failure, none is running).
    Done,
}

/// Where one call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// Not started, not classified.
    Pending,
    /// Not started; the registry's mode for it.
    Classified(ToolMode),
    /// Started; its result is not known yet.
    Running,
    /// Its result is known, not committed yet.
    Settled,
    /// Committed, or answered as never started.
    Answered,
}

/// Whether the current group takes more calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Group {
    /// A parallel pool: the next call joins it if it is parallel too.
    Open,
    /// No group, an exclusive call, or a pool a barrier closed: the next
    /// call begins a new group once every started call is committed.
    Closed,
}

/// Why nothing new starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Halt {
    /// The turn was cancelled.
    Aborted,
    /// The runner failed (the session refused an append, say).
    Failed,
}

/// The schedule of one step's calls (see the module doc for the rules).
#[derive(Debug)]
pub(crate) struct Schedule {
    calls: Vec<Call>,
    /// The most calls of a pool running at once (at least 1).
    cap: usize,
    /// The first call not started (nor answered as never started).
    next: usize,
    /// The first call not answered.
    commit: usize,
    /// How many calls are [`Call::Running`].
    running: usize,
    group: Group,
    halt: Option<Halt>,
}

impl Schedule {
    /// The schedule of `calls` calls with at most `cap` running at once (a
    /// cap of 0 is taken as 1).
    pub(crate) fn new(calls: usize, cap: usize) -> Schedule {
        Schedule {
            calls: vec![Call::Pending; calls],
            cap: cap.max(1),
            next: 0,
            commit: 0,
            running: 0,
            group: Group::Closed,
            halt: None,
        }
    }

    /// The registry's `mode` for call `k` (asked by [`Action::Classify`]).
    /// Ignored unless `k` is the call the schedule asked about.
    pub(crate) fn classified(&mut self, k: usize, mode: ToolMode) {
        if k == self.next && self.calls.get(k) == Some(&Call::Pending) {
            self.calls[k] = Call::Classified(mode);
        }
    }

    /// Call `k`'s result is known. Ignored unless `k` is running.
    pub(crate) fn settled(&mut self, k: usize) {
        if self.calls.get(k) == Some(&Call::Running) {
            self.calls[k] = Call::Settled;
            self.running -= 1;
        }
    }

    /// The turn was cancelled: see the module doc's "Abort". A failure
    /// already reported stays in force.
    pub(crate) fn abort(&mut self) {
        self.halt.get_or_insert(Halt::Aborted);
    }

    /// The runner failed: see the module doc's "Internal failure".
    pub(crate) fn fail(&mut self) {
        self.halt = Some(Halt::Failed);
    }

    /// What to do next. The action returned is taken as done (a started
    /// call is running, a committed or skipped one answered), except that
    /// [`Action::Classify`] waits for [`Schedule::classified`] and a
    /// running call for [`Schedule::settled`].
    pub(crate) fn next_action(&mut self) -> Action {
        if self.halt == Some(Halt::Failed) {
            return self.wait_or(Action::Done);
        }
        if self.commit < self.next && self.calls[self.commit] == Call::Settled {
            let k = self.commit;
            self.answer(k);
            return Action::Commit(k);
        }
        let outstanding = self.commit < self.next;
        if self.halt == Some(Halt::Aborted) {
            if outstanding {
                return Action::Wait;
            }
            if self.next < self.calls.len() {
                let k = self.next;
                self.next += 1;
                self.answer(k);
                return Action::Skip(k);
            }
            return Action::Done;
        }
        if self.next == self.calls.len() {
            return self.wait_or(Action::Done);
        }
        let k = self.next;
        if self.group == Group::Open {
            match self.calls[k] {
                _ if self.running >= self.cap => return Action::Wait,
                Call::Pending => return Action::Classify(k),
                Call::Classified(ToolMode::Parallel) => return self.start(k, Group::Open),
                // The barrier: it waits for the pool, then runs alone.
                _ => self.group = Group::Closed,
            }
        }
        if outstanding {
            return Action::Wait;
        }
        match self.calls[k] {
            Call::Classified(ToolMode::Parallel) => self.start(k, Group::Open),
            Call::Classified(ToolMode::Exclusive) => self.start(k, Group::Closed),
            _ => Action::Classify(k),
        }
    }

    /// Starts call `k` (the next one) in a group that is then `group`.
    fn start(&mut self, k: usize, group: Group) -> Action {
        self.calls[k] = Call::Running;
        self.running += 1;
        self.next += 1;
        self.group = group;
        Action::Start(k)
    }

    /// Marks call `k` (the first unanswered one) answered.
    fn answer(&mut self, k: usize) {
        self.calls[k] = Call::Answered;
        self.commit += 1;
    }

    /// [`Action::Wait`] while a call runs, else `otherwise`.
    fn wait_or(&self, otherwise: Action) -> Action {
        if self.running > 0 {
            Action::Wait
        } else {
            otherwise
        }
    }
}

#[cfg(test)]
mod tests;
