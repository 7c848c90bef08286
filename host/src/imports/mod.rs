//! Rows made from files other products own: a layer may say
//! `imports = ["mcp-servers"]`, and the host splices in, right after it,
//! one layer per file it read: the MCP servers of `~/.codex/config.toml`
//! and of the project's `.mcp.json`. Each layer is labelled with its file
//! (so `--dump-config` names it) and its rows are patchable by id like
//! any row; every file looked at is watched under `--watch`.

use std::path::PathBuf;

use dsh_wire::host_service::UntrustedProject;

use crate::config::{ConfigError, Layer};

mod mcp;

pub use mcp::project_to_trust;

/// The import of MCP servers (`.mcp.json`, codex's `[mcp_servers]`).
pub const MCP_SERVERS: &str = "mcp-servers";

/// Where the imported files are.
#[derive(Debug, Clone)]
pub struct Sources {
    /// The directory the host runs in (the project's `.mcp.json` is there
    /// or in an ancestor up to the repository's root).
    pub cwd: PathBuf,
    /// `$DSH_HOME` (its trust record).
    pub home: PathBuf,
    /// codex's home (`$CODEX_HOME`, else `~/.codex`), if known.
    pub codex_home: Option<PathBuf>,
    /// The user's home (`$HOME`): a project's `.mcp.json` is never looked
    /// for above it.
    pub user_home: Option<PathBuf>,
}

/// `$HOME`, if set.
pub fn user_home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

impl Sources {
    /// The sources of this process: its directory, `$CODEX_HOME` or
    /// `$HOME/.codex`.
    pub fn of_process(home: PathBuf) -> Sources {
        let codex_home = std::env::var_os("CODEX_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| user_home().map(|h| h.join(".codex")));
        Sources {
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            home,
            codex_home,
            user_home: user_home(),
        }
    }
}

/// What an import adds.
#[derive(Debug, Default)]
pub struct Imported {
    /// Layers, in order.
    pub layers: Vec<Layer>,
    /// Files to watch (read or not: creating one is a change too).
    pub files: Vec<PathBuf>,
    /// Problems that skipped a server (never the whole import).
    pub warnings: Vec<String>,
    /// What the user should know once: servers of an untrusted project.
    pub notices: Vec<String>,
    /// The project whose servers were not started, for a front end to
    /// offer trusting it.
    pub untrusted: Option<Untrusted>,
}

/// A project whose servers were not started for want of approval.
#[derive(Debug, Clone)]
pub struct Untrusted {
    /// What a front end shows.
    pub project: UntrustedProject,
    /// What trusting it approves: every server as the user is shown it,
    /// never as the file may be by the time they answer.
    pub pins: crate::trust::Pins,
    /// The rows of the servers not approved: kept off in the composed
    /// tree whatever a later patch says.
    pub rows: Vec<String>,
}

/// Expands import `kind` (named by layer `origin`).
pub fn expand(kind: &str, origin: &str, sources: &Sources) -> Result<Imported, ConfigError> {
    match kind {
        MCP_SERVERS => Ok(mcp::import(sources)),
        other => Err(ConfigError::Invalid(format!(
            "{origin}: unknown import `{other}` (known: `{MCP_SERVERS}`)"
        ))),
    }
}
