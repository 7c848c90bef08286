//! Every rule of the module doc, on the pure schedule: a simulated runner
//! answers the classifications from a list of modes, settles calls when
//! the test says so, and records each action.

use super::Action::{Classify, Commit, Done, Skip, Start, Wait};
use super::*;

/// A simulated runner. `modes` is one letter per call, in model order: `p`
/// parallel, `x` exclusive; an upper-case letter is a call whose
/// pre-execute stage settles it at once (a denial, say).
struct Sim {
    schedule: Schedule,
    modes: Vec<ToolMode>,
    instant: Vec<bool>,
    /// The calls started and not settled, in start order.
    running: Vec<usize>,
    /// How often each call was classified.
    asked: Vec<usize>,
    /// The most calls running at once.
    most: usize,
}

impl Sim {
    fn new(modes: &str, cap: usize) -> Sim {
        let mode = |c: char| match c.to_ascii_lowercase() {
            'p' => ToolMode::Parallel,
            'x' => ToolMode::Exclusive,
            other => panic!("unknown mode letter {other:?}"),
        };
        Sim {
            schedule: Schedule::new(modes.len(), cap),
            modes: modes.chars().map(mode).collect(),
            instant: modes.chars().map(|c| c.is_ascii_uppercase()).collect(),
            running: Vec::new(),
            asked: vec![0; modes.len()],
            most: 0,
        }
    }

    /// Takes actions until the schedule waits or is done (that last action
    /// included); the actions taken.
    fn run(&mut self) -> Vec<Action> {
        let mut taken = Vec::new();
        loop {
            let action = self.schedule.next_action();
            taken.push(action);
            match action {
                Classify(k) => {
                    self.asked[k] += 1;
                    self.schedule.classified(k, self.modes[k]);
                }
                Start(k) if self.instant[k] => self.schedule.settled(k),
                Start(k) => {
                    self.running.push(k);
                    self.most = self.most.max(self.running.len());
                }
                Wait | Done => return taken,
                Commit(_) | Skip(_) => {}
            }
            assert!(taken.len() < 1000, "the schedule does not end: {taken:?}");
        }
    }

    /// Call `k`, which must be running, settles.
    fn settle(&mut self, k: usize) {
        let at = self.running.iter().position(|&r| r == k);
        let at = at.unwrap_or_else(|| panic!("call {k} is not running: {:?}", self.running));
        self.running.remove(at);
        self.schedule.settled(k);
    }

    /// Runs to the end, settling the oldest running call at each wait; every
    /// action taken.
    fn finish(&mut self) -> Vec<Action> {
        let mut taken = self.run();
        while taken.last() == Some(&Wait) {
            let oldest = self.running[0];
            self.settle(oldest);
            taken.extend(self.run());
        }
        taken
    }
}

/// The order in which calls started.
fn starts(actions: &[Action]) -> Vec<usize> {
    actions
        .iter()
        .filter_map(|a| match a {
            Start(k) => Some(*k),
            _ => None,
        })
        .collect()
}

/// The order in which calls were answered (committed or skipped).
fn answers(actions: &[Action]) -> Vec<usize> {
    actions
        .iter()
        .filter_map(|a| match a {
            Commit(k) | Skip(k) => Some(*k),
            _ => None,
        })
        .collect()
}

#[test]
fn no_calls_is_done_at_once() {
    let mut sim = Sim::new("", 10);
    assert_eq!(sim.run(), [Done]);
}

#[test]
fn the_first_unstarted_call_is_classified_before_it_starts() {
    let mut sim = Sim::new("p", 10);
    assert_eq!(sim.run(), [Classify(0), Start(0), Wait]);
    sim.settle(0);
    assert_eq!(sim.run(), [Commit(0), Done]);
}

#[test]
fn an_exclusive_call_is_a_group_of_one() {
    let mut sim = Sim::new("xx", 10);
    assert_eq!(sim.run(), [Classify(0), Start(0), Wait]);
    sim.settle(0);
    // The next group begins only after the exclusive call is committed.
    assert_eq!(sim.run(), [Commit(0), Classify(1), Start(1), Wait]);
    sim.settle(1);
    assert_eq!(sim.run(), [Commit(1), Done]);
}

#[test]
fn parallel_siblings_start_together() {
    let mut sim = Sim::new("ppp", 10);
    assert_eq!(
        sim.run(),
        [
            Classify(0),
            Start(0),
            Classify(1),
            Start(1),
            Classify(2),
            Start(2),
            Wait
        ]
    );
    assert_eq!(sim.most, 3);
}

#[test]
fn an_exclusive_call_is_a_barrier_between_two_groups() {
    // The original's "exclusive call forms barrier (3 groups)".
    let mut sim = Sim::new("ppxp", 10);
    assert_eq!(
        sim.run(),
        [
            Classify(0),
            Start(0),
            Classify(1),
            Start(1),
            Classify(2),
            Wait
        ]
    );
    // The barrier waits for the whole pool, committed.
    sim.settle(1);
    assert_eq!(sim.run(), [Wait]);
    sim.settle(0);
    assert_eq!(sim.run(), [Commit(0), Commit(1), Start(2), Wait]);
    // The call after the barrier is classified afresh, after it.
    sim.settle(2);
    assert_eq!(sim.run(), [Commit(2), Classify(3), Start(3), Wait]);
    sim.settle(3);
    assert_eq!(sim.run(), [Commit(3), Done]);
}

#[test]
fn the_barrier_is_not_classified_twice() {
    let mut sim = Sim::new("pxp", 10);
    sim.finish();
    assert_eq!(sim.asked, [1, 1, 1]);
}

#[test]
fn the_pool_stops_when_the_next_call_is_exclusive() {
    // Slots are free, but the exclusive call does not join the pool.
    let mut sim = Sim::new("px", 10);
    assert_eq!(sim.run(), [Classify(0), Start(0), Classify(1), Wait]);
    assert_eq!(sim.running, [0]);
}

#[test]
fn a_group_that_begins_exclusive_takes_no_parallel_call_after_it() {
    let mut sim = Sim::new("xp", 10);
    assert_eq!(sim.run(), [Classify(0), Start(0), Wait]);
    assert_eq!(sim.asked, [1, 0], "call 1 is not asked while 0 runs");
}

#[test]
fn at_most_cap_calls_run_at_once() {
    let mut sim = Sim::new("pppp", 2);
    assert_eq!(
        sim.run(),
        [Classify(0), Start(0), Classify(1), Start(1), Wait]
    );
    // The next call is classified only when a slot is free.
    assert_eq!(sim.asked, [1, 1, 0, 0]);
    sim.finish();
    assert_eq!(sim.most, 2);
}

#[test]
fn the_pool_rolls_a_settled_call_frees_its_slot() {
    let mut sim = Sim::new("pppp", 2);
    sim.run();
    // Call 1 settles before call 0: call 2 takes its slot at once, though
    // call 0 (and so call 1) is not committed yet.
    sim.settle(1);
    assert_eq!(sim.run(), [Classify(2), Start(2), Wait]);
    sim.settle(0);
    assert_eq!(
        sim.run(),
        [Commit(0), Commit(1), Classify(3), Start(3), Wait]
    );
    assert_eq!(sim.running, [2, 3]);
}

#[test]
fn a_cap_of_one_is_strictly_serial() {
    let mut sim = Sim::new("ppp", 1);
    let taken = sim.finish();
    assert_eq!(
        taken,
        [
            Classify(0),
            Start(0),
            Wait,
            Commit(0),
            Classify(1),
            Start(1),
            Wait,
            Commit(1),
            Classify(2),
            Start(2),
            Wait,
            Commit(2),
            Done
        ]
    );
    assert_eq!(sim.most, 1);
}

#[test]
fn a_cap_of_zero_is_taken_as_one() {
    let mut sim = Sim::new("pp", 0);
    sim.finish();
    assert_eq!(sim.most, 1);
}

#[test]
fn results_are_committed_in_model_order_whatever_order_calls_settle_in() {
    let mut sim = Sim::new("pppp", 10);
    sim.run();
    let mut taken = Vec::new();
    for k in [3, 1, 2, 0] {
        sim.settle(k);
        taken.extend(sim.run());
    }
    assert_eq!(answers(&taken), [0, 1, 2, 3]);
    assert_eq!(taken.last(), Some(&Done));
    // Nothing was committed before call 0 settled.
    assert_eq!(
        taken[..6],
        [Wait, Wait, Wait, Commit(0), Commit(1), Commit(2)]
    );
}

#[test]
fn a_call_settled_at_start_is_committed_before_the_next_starts() {
    // Denied calls: their results need no dispatch.
    let mut sim = Sim::new("PXP", 10);
    assert_eq!(
        sim.run(),
        [
            Classify(0),
            Start(0),
            Commit(0),
            Classify(1),
            Start(1),
            Commit(1),
            Classify(2),
            Start(2),
            Commit(2),
            Done
        ]
    );
}

#[test]
fn every_mix_starts_and_answers_each_call_once_in_model_order_within_the_cap() {
    // Every mode string of up to six calls, every cap up to three, settling
    // the newest running call first (the most reordering).
    for len in 0..=6u32 {
        for bits in 0..(1u32 << len) {
            let modes: String = (0..len)
                .map(|i| if (bits >> i) & 1 == 1 { 'p' } else { 'x' })
                .collect();
            for cap in 1..=3 {
                let mut sim = Sim::new(&modes, cap);
                let mut taken = sim.run();
                while taken.last() == Some(&Wait) {
                    let newest = *sim.running.last().unwrap();
                    sim.settle(newest);
                    taken.extend(sim.run());
                }
                let all: Vec<usize> = (0..modes.len()).collect();
                assert_eq!(starts(&taken), all, "{modes} cap {cap}: {taken:?}");
                assert_eq!(answers(&taken), all, "{modes} cap {cap}: {taken:?}");
                assert!(sim.most <= cap, "{modes} cap {cap}: {taken:?}");
                assert!(
                    sim.asked.iter().all(|&n| n == 1),
                    "{modes}: {:?}",
                    sim.asked
                );
                // An exclusive call never runs beside another.
                for (k, c) in modes.chars().enumerate() {
                    if c == 'x' {
                        let at = taken.iter().position(|a| *a == Start(k)).unwrap();
                        let before: Vec<usize> = answers(&taken[..at]);
                        assert_eq!(before, (0..k).collect::<Vec<_>>(), "{modes}: {taken:?}");
                        let done = taken.iter().position(|a| *a == Commit(k)).unwrap();
                        assert!(
                            starts(&taken[at + 1..done]).is_empty(),
                            "{modes}: {taken:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn an_abort_before_a_group_starts_none_of_it() {
    let mut sim = Sim::new("xpp", 10);
    assert_eq!(sim.run(), [Classify(0), Start(0), Wait]);
    sim.schedule.abort();
    sim.settle(0);
    // The started call is committed; the others are answered without
    // being classified or started.
    assert_eq!(sim.run(), [Commit(0), Skip(1), Skip(2), Done]);
    assert_eq!(sim.asked, [1, 0, 0]);
}

#[test]
fn an_abort_stops_the_pool_and_commits_what_started() {
    let mut sim = Sim::new("pppp", 2);
    sim.run();
    sim.schedule.abort();
    // A slot frees, but nothing more starts: the started calls are waited
    // for, then committed in order, then the rest skipped.
    sim.settle(1);
    assert_eq!(sim.run(), [Wait]);
    sim.settle(0);
    assert_eq!(sim.run(), [Commit(0), Commit(1), Skip(2), Skip(3), Done]);
    assert_eq!(sim.asked, [1, 1, 0, 0]);
}

#[test]
fn no_barrier_is_classified_after_an_aborted_group() {
    let mut sim = Sim::new("ppxp", 10);
    sim.run();
    sim.schedule.abort();
    sim.settle(0);
    sim.settle(1);
    assert_eq!(sim.run(), [Commit(0), Commit(1), Skip(2), Skip(3), Done]);
    // Call 2 was classified (it closed the pool) but never started.
    assert_eq!(sim.asked, [1, 1, 1, 0]);
}

#[test]
fn an_abort_after_a_call_was_classified_skips_it() {
    let mut sim = Sim::new("pp", 10);
    assert_eq!(sim.schedule.next_action(), Classify(0));
    sim.schedule.classified(0, ToolMode::Parallel);
    sim.schedule.abort();
    assert_eq!(sim.run(), [Skip(0), Skip(1), Done]);
}

#[test]
fn a_failure_drains_the_running_calls_and_answers_nothing() {
    let mut sim = Sim::new("ppp", 10);
    sim.run();
    sim.settle(0);
    sim.schedule.fail();
    // No commit of the settled call, no skip of anything.
    assert_eq!(sim.run(), [Wait]);
    sim.settle(2);
    assert_eq!(sim.run(), [Wait]);
    sim.settle(1);
    assert_eq!(sim.run(), [Done]);
}

#[test]
fn a_failure_with_nothing_running_is_done_at_once() {
    let mut sim = Sim::new("xx", 10);
    assert_eq!(sim.schedule.next_action(), Classify(0));
    sim.schedule.fail();
    assert_eq!(sim.run(), [Done]);
    // An abort after it does not bring the skips back.
    sim.schedule.abort();
    assert_eq!(sim.run(), [Done]);
}

#[test]
fn answers_out_of_turn_are_ignored() {
    let mut sim = Sim::new("pp", 10);
    assert_eq!(sim.schedule.next_action(), Classify(0));
    // A classification of another call, and a settle of a call that is
    // not running, change nothing.
    sim.schedule.classified(1, ToolMode::Exclusive);
    sim.schedule.settled(0);
    sim.schedule.settled(7);
    assert_eq!(sim.schedule.next_action(), Classify(0));
    sim.schedule.classified(0, ToolMode::Parallel);
    assert_eq!(sim.schedule.next_action(), Start(0));
    sim.schedule.classified(0, ToolMode::Exclusive);
    assert_eq!(sim.schedule.next_action(), Classify(1));
}
