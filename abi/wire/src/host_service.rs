//! The `host` service: the one service the host itself provides to every
//! plugin (no plugin row provides it). Its names and the params and replies
//! of its methods live here, in the boundary layer, so the host and the SDK
//! spell them once.

use serde::{Deserialize, Serialize};

/// The service name.
pub const NAME: &str = "host";
/// The process arguments after the host's own (`Vec<String>`).
pub const ARGS: &str = "args";
/// Ends the process with [`ExitParams`] once the generation has stopped.
pub const EXIT: &str = "exit";
/// [`Info`] of this host.
pub const INFO: &str = "info";
/// Router statistics (messages, calls, listeners).
pub const STATS: &str = "stats";
/// Writes [`TextParams`] to stdout.
pub const PRINT: &str = "print";
/// Writes [`TextParams`] to stderr.
pub const EPRINT: &str = "eprint";
/// [`TerminalInfo`]: whether stdin and stdout are a terminal, and its size.
pub const TERMINAL: &str = "terminal";
/// The next terminal input after [`ReadInputParams::ack`], waiting for it
/// ([`Input`]); the host reads stdin on a thread of its own, so a plugin
/// never blocks in a read and a reload loses no keystroke.
pub const READ_INPUT: &str = "readInput";
/// Puts the terminal in raw mode with bracketed paste, or back
/// ([`RawModeParams`]); the host restores the original mode when it exits.
pub const SET_RAW_MODE: &str = "setRawMode";
/// The rows of the running composition ([`PluginRow`] list).
pub const PLUGINS: &str = "plugins";
/// Trusts the project [`Info::untrusted_project`] names
/// ([`TrustProjectParams`]): the host records it and recomposes, so its
/// servers start. Any other directory is refused.
pub const TRUST_PROJECT: &str = "trustProject";

/// Every method of the service.
pub const METHODS: [&str; 11] = [
    ARGS,
    EXIT,
    INFO,
    STATS,
    PRINT,
    EPRINT,
    TERMINAL,
    READ_INPUT,
    SET_RAW_MODE,
    PLUGINS,
    TRUST_PROJECT,
];

/// Params of [`PRINT`] and [`EPRINT`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextParams {
    /// Written as it is (no newline added).
    #[serde(default)]
    pub text: String,
}

/// Params of [`EXIT`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitParams {
    /// The process exit code.
    #[serde(default)]
    pub code: i32,
}

/// Reply of [`INFO`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Info {
    /// `$DSH_HOME`.
    pub home: String,
    /// Paths no tool may write (the home first).
    #[serde(default)]
    pub protected: Vec<String>,
    /// The host's working directory (absent when it cannot be read).
    #[serde(default)]
    pub cwd: Option<String>,
    /// The host's version.
    #[serde(default)]
    pub version: String,
    /// The host's process id.
    #[serde(default)]
    pub pid: u32,
    /// This run's `dsh-host --model` (`provider/model`, or `model` on the
    /// default route), as given: the model every app starts on for this
    /// run, not saved. Read by plugin `agent-default-model` (with
    /// [`crate::ModelChoice::parse`], as the command line checked it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// A project whose own configuration names servers that were not
    /// started because the project is not trusted (a front end may ask
    /// the user, then call [`TRUST_PROJECT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub untrusted_project: Option<UntrustedProject>,
}

/// A project not trusted, and what trusting it would start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UntrustedProject {
    /// The project's directory.
    pub dir: String,
    /// The file naming the servers (its `.mcp.json`).
    pub file: String,
    /// The servers not approved (new, changed, or the project is not
    /// trusted).
    pub servers: Vec<String>,
    /// What each of them runs, one line per server, every string quoted
    /// and escaped (a file an agent may have written is shown as data).
    #[serde(default)]
    pub runs: Vec<String>,
    /// This offer's id (a digest of what approving it records): answered
    /// in [`TrustProjectParams::offer`], so a yes never approves servers
    /// that changed after the user was asked.
    #[serde(default)]
    pub offer: String,
}

/// Params of [`TRUST_PROJECT`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustProjectParams {
    /// The project's directory, as [`UntrustedProject::dir`] says it.
    pub dir: String,
    /// The offer answered ([`UntrustedProject::offer`]).
    #[serde(default)]
    pub offer: String,
}

/// Reply of [`TERMINAL`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminalInfo {
    /// Stdin is a terminal (input can be read).
    pub stdin: bool,
    /// Stdout is a terminal (escape sequences are understood).
    pub stdout: bool,
    /// Columns (0 when unknown).
    pub cols: u16,
    /// Rows (0 when unknown).
    pub rows: u16,
}

/// Params of [`READ_INPUT`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadInputParams {
    /// The last input seq the caller has handled: the host forgets input up
    /// to it and answers with what follows. Without it, everything not yet
    /// acknowledged (by this plugin's earlier generation, say) is answered
    /// again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack: Option<u64>,
}

/// Reply of [`READ_INPUT`]: the input after the acknowledged seq, as text
/// (escape sequences included; a character split across reads is kept
/// whole).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Input {
    /// The seq of the last input in `text` (acknowledge it next).
    pub seq: u64,
    /// What was typed or pasted.
    pub text: String,
    /// Lines the host has to say (a reload, a warning) while a front end
    /// holds the terminal in raw mode: the front end shows them above its
    /// input, so they never break its drawing. Acknowledged with the input;
    /// what is never acknowledged goes to stderr when raw mode ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// Stdin reached its end (nothing more will come).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub eof: bool,
}

/// Params of [`SET_RAW_MODE`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RawModeParams {
    /// Raw (no echo, no line buffering, no signals from keys, pastes
    /// bracketed) or the mode the host started with.
    pub raw: bool,
}

/// [`PluginRow::state`] of a row applied and serving (the host's
/// `FiberState::Active`, lowercase).
pub const ROW_ACTIVE: &str = "active";

/// One row of [`PLUGINS`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginRow {
    /// The row id.
    pub id: String,
    /// The plugin it runs.
    pub plugin: String,
    /// Its state (`active`, `failed`, `pending`...).
    pub state: String,
    /// Its generation (0 before the first load).
    #[serde(default)]
    pub generation: u64,
    /// Its current fiber (changes on reload): the `Context::fiber` of the
    /// plugin serving the row, which a plugin may use in the names of the
    /// services it provides per row.
    #[serde(default)]
    pub fiber: u64,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_methods_are_unique() {
        let mut seen = super::METHODS.to_vec();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), super::METHODS.len());
    }

    #[test]
    fn params_and_replies_keep_their_wire_names() {
        let info = TerminalInfo {
            stdin: true,
            stdout: false,
            cols: 80,
            rows: 24,
        };
        assert_eq!(
            serde_json::to_string(&info).unwrap(),
            r#"{"stdin":true,"stdout":false,"cols":80,"rows":24}"#
        );
        let input = Input {
            seq: 3,
            text: "a".into(),
            ..Input::default()
        };
        assert_eq!(
            serde_json::to_string(&input).unwrap(),
            r#"{"seq":3,"text":"a"}"#
        );
        let ack: ReadInputParams = serde_json::from_str("{}").unwrap();
        assert_eq!(ack.ack, None);
        let exit: ExitParams = serde_json::from_str(r#"{"code":2}"#).unwrap();
        assert_eq!(exit.code, 2);
    }
}
