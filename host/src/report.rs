//! Problems worth telling the user about (failed fibers, quarantined
//! generations, contained listener failures), kept in memory so `plugins
//! list`, tests and apps can show them, and logged as they happen.

use std::sync::{Arc, Mutex};

/// How serious a report is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Something failed.
    Error,
    /// Something degraded but the host continued.
    Warn,
    /// Worth knowing.
    Info,
}

/// One report.
#[derive(Debug, Clone)]
pub struct Report {
    /// Severity.
    pub level: Level,
    /// The plugin or row concerned.
    pub source: String,
    /// What happened.
    pub message: String,
}

/// A bounded, shared list of reports.
#[derive(Clone, Default)]
pub struct Reports(Arc<Mutex<Vec<Report>>>);

const KEEP: usize = 1000;

impl Reports {
    /// Records a report and logs it.
    pub fn push(&self, level: Level, source: &str, message: impl Into<String>) {
        let message = message.into();
        match level {
            Level::Error => tracing::error!(target: "dsh", "{source}: {message}"),
            Level::Warn => tracing::warn!(target: "dsh", "{source}: {message}"),
            Level::Info => tracing::info!(target: "dsh", "{source}: {message}"),
        }
        self.record(level, source, message);
    }

    /// Records a report without logging it: for what its caller has said
    /// already (the CLI says each configuration warning once, as it
    /// composes).
    pub fn record(&self, level: Level, source: &str, message: impl Into<String>) {
        let message = message.into();
        let mut list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if list.len() >= KEEP {
            list.remove(0);
        }
        list.push(Report {
            level,
            source: source.to_owned(),
            message,
        });
    }

    /// A copy of every report so far.
    pub fn all(&self) -> Vec<Report> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
