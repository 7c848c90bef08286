//! The row's configuration: the original's fields and defaults, checked
//! into a [`Server`] before anything starts.

use std::collections::BTreeMap;
use std::time::Duration;

use dsh_sdk::api::mcp::{transport, valid_server_name};
use dsh_sdk::prelude::*;
use serde::Deserialize;

/// The longest delay a reconnect option may name (the original's timer
/// bound: 2^31 - 1 ms).
const MAX_DELAY_MS: u64 = 2_147_483_647;

/// `config = { ... }` of an `mcp-client` row, as written.
#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RowConfig {
    /// `stdio` or `streamable-http`.
    transport: Option<String>,
    /// The server's name in tool names and logs: `[A-Za-z0-9_-]{1,32}`.
    server_name: Option<String>,
    /// stdio: the program.
    command: Option<String>,
    /// stdio: its arguments.
    args: Option<Vec<String>>,
    /// stdio: variables set for it (over the scrubbed parent environment).
    env: Option<BTreeMap<String, String>>,
    /// stdio: names of the host's variables passed through even when they
    /// look like credentials (codex's `env_vars`).
    env_vars: Option<Vec<String>>,
    /// stdio: its working directory (empty: the host's).
    cwd: Option<String>,
    /// streamable-http: the endpoint.
    url: Option<String>,
    /// streamable-http: headers sent with every request.
    headers: Option<BTreeMap<String, String>>,
    /// streamable-http: headers whose values are read from the named
    /// variables when connecting (codex's `env_http_headers`).
    env_headers: Option<BTreeMap<String, String>>,
    /// streamable-http: the variable holding a bearer token.
    bearer_token_env_var: Option<String>,
    /// Only these tools of the server are offered (codex's
    /// `enabled_tools`).
    enabled_tools: Option<Vec<String>>,
    /// These tools of the server are never offered (codex's
    /// `disabled_tools`).
    disabled_tools: Option<Vec<String>>,
    /// The longest one tool call may take.
    tool_call_timeout_ms: Option<u64>,
    /// The longest connecting (spawn, handshake, first tool list) may take.
    startup_timeout_ms: Option<u64>,
    /// A failed first connection fails the row instead of leaving it
    /// without tools.
    fail_on_startup_error: Option<bool>,
    /// Reconnecting after the connection is lost.
    reconnect: Option<ReconnectConfig>,
}

/// `reconnect = { ... }`, as written.
#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReconnectConfig {
    enabled: Option<bool>,
    initial_delay_ms: Option<u64>,
    max_delay_ms: Option<u64>,
    max_attempts: Option<u32>,
}

/// A checked row: one server.
#[derive(Debug, Clone, PartialEq)]
pub struct Server {
    /// Its name.
    pub name: String,
    /// How it is reached.
    pub transport: Transport,
    /// The longest one tool call may take.
    pub call_timeout: Duration,
    /// The longest connecting may take.
    pub startup_timeout: Duration,
    /// A failed first connection fails the row.
    pub fail_on_startup_error: bool,
    /// Reconnecting.
    pub reconnect: Reconnect,
    /// Which of the server's tools are offered.
    pub filter: ToolFilter,
}

/// Which of a server's tools are offered, by the server's names.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolFilter {
    /// Only these (all when `None`).
    pub enabled: Option<Vec<String>>,
    /// Never these.
    pub disabled: Vec<String>,
}

impl ToolFilter {
    /// Whether tool `raw` is offered.
    pub fn offers(&self, raw: &str) -> bool {
        self.enabled
            .as_ref()
            .is_none_or(|only| only.iter().any(|t| t == raw))
            && !self.disabled.iter().any(|t| t == raw)
    }
}

/// How a server is reached.
#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    /// A child process speaking JSON-RPC lines on its stdin and stdout.
    Stdio(Stdio),
    /// An HTTP endpoint (MCP's Streamable HTTP).
    Http(Http),
}

/// A child process.
#[derive(Debug, Clone, PartialEq)]
pub struct Stdio {
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables set for it.
    pub env: BTreeMap<String, String>,
    /// Host variables passed through as they are.
    pub env_vars: Vec<String>,
    /// Its working directory (`None`: the host's).
    pub cwd: Option<String>,
}

/// An HTTP endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Http {
    /// The endpoint.
    pub url: String,
    /// Headers sent with every request.
    pub headers: BTreeMap<String, String>,
    /// Headers whose values are read from these variables.
    pub env_headers: BTreeMap<String, String>,
    /// The variable holding a bearer token.
    pub bearer_token_env_var: Option<String>,
}

impl Http {
    /// Whether the row sends credentials of its own (a bearer variable,
    /// an `Authorization` header): then OAuth is not used.
    pub fn sends_credentials(&self) -> bool {
        self.bearer_token_env_var.is_some()
            || self
                .headers
                .keys()
                .chain(self.env_headers.keys())
                .any(|k| k.eq_ignore_ascii_case("authorization"))
    }
}

/// Reconnect policy: `initial * 2^(attempt-1)`, at most `max`, for at most
/// `attempts` consecutive failures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reconnect {
    /// Reconnect at all.
    pub enabled: bool,
    /// The first delay.
    pub initial: Duration,
    /// The longest delay; a connection that lived this long resets the
    /// count.
    pub max: Duration,
    /// Consecutive failed attempts before giving up.
    pub attempts: u32,
}

impl Reconnect {
    /// The delay before attempt `attempt` (from 1).
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(30);
        self.initial.saturating_mul(factor).min(self.max)
    }
}

fn invalid(message: String) -> Error {
    Error::new(codes::INVALID_CONFIG, message)
}

impl RowConfig {
    /// Checks the row: every missing required field, every field of the
    /// other transport and every out-of-range number is an error naming it.
    pub fn check(self) -> Result<Server> {
        let name = self
            .server_name
            .ok_or_else(|| invalid("mcp-client: `serverName` is required".into()))?;
        if !valid_server_name(&name) {
            return Err(invalid(format!(
                "mcp-client: serverName {name:?} must match [A-Za-z0-9_-]{{1,32}}"
            )));
        }
        let at = format!("mcp-client({name})");
        let transport = match self.transport.as_deref() {
            Some(transport::STDIO) => {
                for (field, set) in [
                    ("url", self.url.is_some()),
                    ("headers", self.headers.is_some()),
                    ("envHeaders", self.env_headers.is_some()),
                    ("bearerTokenEnvVar", self.bearer_token_env_var.is_some()),
                ] {
                    if set {
                        return Err(invalid(format!("{at}: `{field}` is not a stdio option")));
                    }
                }
                let command = self
                    .command
                    .filter(|c| !c.trim().is_empty())
                    .ok_or_else(|| invalid(format!("{at}: `command` is required for stdio")))?;
                Transport::Stdio(Stdio {
                    command,
                    args: self.args.unwrap_or_default(),
                    env: self.env.unwrap_or_default(),
                    env_vars: self.env_vars.unwrap_or_default(),
                    cwd: self.cwd.filter(|c| !c.is_empty()),
                })
            }
            Some(transport::STREAMABLE_HTTP) => {
                for (field, set) in [
                    ("command", self.command.is_some()),
                    ("args", self.args.is_some()),
                    ("env", self.env.is_some()),
                    ("envVars", self.env_vars.is_some()),
                    ("cwd", self.cwd.is_some()),
                ] {
                    if set {
                        return Err(invalid(format!(
                            "{at}: `{field}` is not a streamable-http option"
                        )));
                    }
                }
                let url = self.url.ok_or_else(|| {
                    invalid(format!("{at}: `url` is required for streamable-http"))
                })?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid(format!("{at}: url {url:?} is not http(s)")));
                }
                Transport::Http(Http {
                    url,
                    headers: self.headers.unwrap_or_default(),
                    env_headers: self.env_headers.unwrap_or_default(),
                    bearer_token_env_var: self.bearer_token_env_var.filter(|v| !v.is_empty()),
                })
            }
            Some(other) => {
                return Err(invalid(format!(
                    "{at}: transport {other:?} is not `stdio` or `streamable-http`"
                )))
            }
            None => return Err(invalid(format!("{at}: `transport` is required"))),
        };
        let positive = |field: &str, v: Option<u64>, default: u64| match v {
            None => Ok(default),
            Some(0) => Err(invalid(format!("{at}: {field} must be positive"))),
            Some(v) => Ok(v),
        };
        let call = positive("toolCallTimeoutMs", self.tool_call_timeout_ms, 60_000)?;
        let startup = positive("startupTimeoutMs", self.startup_timeout_ms, 60_000)?;
        Ok(Server {
            transport,
            call_timeout: Duration::from_millis(call),
            startup_timeout: Duration::from_millis(startup),
            fail_on_startup_error: self.fail_on_startup_error.unwrap_or(false),
            reconnect: check_reconnect(&at, self.reconnect.unwrap_or_default())?,
            filter: ToolFilter {
                enabled: self.enabled_tools,
                disabled: self.disabled_tools.unwrap_or_default(),
            },
            name,
        })
    }
}

fn check_reconnect(at: &str, r: ReconnectConfig) -> Result<Reconnect> {
    let path = format!("{at}: reconnect");
    let delay = |field: &str, v: Option<u64>, default: u64| match v {
        None => Ok(default),
        Some(v) if (1..=MAX_DELAY_MS).contains(&v) => Ok(v),
        Some(_) => Err(invalid(format!(
            "{path}.{field} must be a positive finite number no greater than {MAX_DELAY_MS}"
        ))),
    };
    let initial = delay("initialDelayMs", r.initial_delay_ms, 500)?;
    let max = delay("maxDelayMs", r.max_delay_ms, 30_000)?;
    if initial > max {
        return Err(invalid(format!(
            "{path}.initialDelayMs must be less than or equal to maxDelayMs"
        )));
    }
    let attempts = match r.max_attempts {
        None => 10,
        Some(0) => {
            return Err(invalid(format!(
                "{path}.maxAttempts must be a positive integer"
            )))
        }
        Some(n) => n,
    };
    Ok(Reconnect {
        enabled: r.enabled.unwrap_or(true),
        initial: Duration::from_millis(initial),
        max: Duration::from_millis(max),
        attempts,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(v: serde_json::Value) -> Result<Server> {
        serde_json::from_value::<RowConfig>(v).unwrap().check()
    }

    #[test]
    fn defaults_are_the_originals() {
        let s = check(json!({"transport": "stdio", "serverName": "fs", "command": "srv"})).unwrap();
        assert_eq!(s.call_timeout, Duration::from_secs(60));
        assert!(!s.fail_on_startup_error);
        let r = s.reconnect;
        assert!(r.enabled);
        assert_eq!(
            (r.initial, r.max, r.attempts),
            (Duration::from_millis(500), Duration::from_secs(30), 10)
        );
        let delays: Vec<u128> = (1..=8).map(|a| r.delay(a).as_millis()).collect();
        assert_eq!(delays, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
        assert_eq!(r.delay(1000), Duration::from_secs(30));
    }

    #[test]
    fn bad_rows_are_named() {
        let cases = [
            (
                json!({"transport": "stdio", "command": "x"}),
                "`serverName` is required",
            ),
            (
                json!({"transport": "stdio", "serverName": "a.b", "command": "x"}),
                "must match",
            ),
            (
                json!({"transport": "stdio", "serverName": "a"}),
                "`command` is required",
            ),
            (
                json!({"transport": "stdio", "serverName": "a", "command": "x", "url": "http://h"}),
                "`url` is not a stdio option",
            ),
            (
                json!({"transport": "streamable-http", "serverName": "a", "url": "ftp://h"}),
                "is not http(s)",
            ),
            (
                json!({"transport": "sse", "serverName": "a"}),
                "is not `stdio` or `streamable-http`",
            ),
            (
                json!({"transport": "stdio", "serverName": "a", "command": "x", "reconnect": {"initialDelayMs": 5, "maxDelayMs": 4}}),
                "initialDelayMs must be less than or equal to maxDelayMs",
            ),
            (
                json!({"transport": "stdio", "serverName": "a", "command": "x", "reconnect": {"maxAttempts": 0}}),
                "maxAttempts must be a positive integer",
            ),
            (
                json!({"transport": "stdio", "serverName": "a", "command": "x", "toolCallTimeoutMs": 0}),
                "toolCallTimeoutMs must be positive",
            ),
        ];
        for (row, want) in cases {
            let e = check(row.clone()).unwrap_err();
            assert!(e.message.contains(want), "{row}: {}", e.message);
        }
        let unknown =
            serde_json::from_value::<RowConfig>(json!({"serverName": "a", "comand": "x"}));
        assert!(unknown.unwrap_err().to_string().contains("comand"));
    }
}
