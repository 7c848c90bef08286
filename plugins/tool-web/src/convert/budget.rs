//! When a conversion stops early: the caller cancels, or the call's deadline
//! passes. Checked between tokens (the clock every [`CLOCK_EVERY`] of them)
//! and for every element the stack closes, so neither a long run of tokens
//! nor one end tag (or the end of the page) that closes 256 elements, each
//! writing out what it captured, can run past either.

use std::time::Instant;

use dsh_sdk::blocking::Cancel;

/// How many token checks pass between two looks at the clock.
pub const CLOCK_EVERY: usize = 64;

/// Why a conversion stopped early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The caller cancelled: the result is dropped.
    Cancelled,
    /// The deadline passed: the result is what was converted so far.
    TimedOut,
}

/// The cancel flag and the deadline of one conversion.
pub struct Budget<'a> {
    deadline: Instant,
    cancel: &'a Cancel,
    checks: usize,
    stop: Option<Stop>,
}

impl<'a> Budget<'a> {
    /// A budget that ends at `deadline` or when `cancel` is set.
    pub fn new(deadline: Instant, cancel: &'a Cancel) -> Self {
        Budget {
            deadline,
            cancel,
            checks: 0,
            stop: None,
        }
    }

    /// Between tokens (each costs amortized O(1)): whether to stop. Reads
    /// the clock every [`CLOCK_EVERY`] calls.
    pub fn spent(&mut self) -> bool {
        let clock = self.checks.is_multiple_of(CLOCK_EVERY);
        self.checks = self.checks.wrapping_add(1);
        self.check(clock)
    }

    /// Before work that may cost up to the output bound (closing an
    /// element writes out its capture): whether to stop. Reads the clock.
    pub fn spent_now(&mut self) -> bool {
        self.check(true)
    }

    fn check(&mut self, clock: bool) -> bool {
        if self.stop.is_none() {
            if self.cancel.is_cancelled() {
                self.stop = Some(Stop::Cancelled);
            } else if clock && Instant::now() >= self.deadline {
                self.stop = Some(Stop::TimedOut);
            }
        }
        self.stop.is_some()
    }

    /// Why the conversion stopped, if it did.
    pub fn stopped(&self) -> Option<Stop> {
        self.stop
    }
}
