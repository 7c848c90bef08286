//! Opening one connection to a server: the child started through the
//! SDK's process helper (or the HTTP endpoint reached), the handshake on
//! rmcp's client, and the pieces the bridge keeps: the peer to send
//! requests through, a signal when the connection ends, and a drop that
//! ends it (the service cancelled, the child's group killed and reaped).

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;

use dsh_sdk::process::{spawn_piped, Launch, Piped};
use dsh_sdk::Context;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, RunningServiceCancellationToken,
};
use rmcp::{ClientHandler, Peer, RoleClient};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::sync::watch;

use crate::changes::Notices;
use crate::config::{Server, Stdio, Transport};
use crate::http;

/// The client's name and version in `initialize`.
const CLIENT_NAME: &str = "dsh-mcp-client";

/// The longest stderr line logged whole (a server that writes a binary
/// blob to stderr costs the log this much per newline).
const STDERR_LINE_MAX: usize = 4096;

/// Why a connection was not made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The server answered 401: it wants an OAuth login first.
    NeedsLogin(String),
    /// Anything else (retried with backoff).
    Other(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NeedsLogin(m) | Failure::Other(m) => f.write_str(m),
        }
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure::Other(message)
    }
}

/// One live connection.
pub struct Connection {
    /// Requests go through it.
    pub peer: Peer<RoleClient>,
    /// True once the service has stopped (transport closed or cancelled).
    closed: watch::Receiver<bool>,
    /// Ends the service when the connection is dropped.
    cancel: Option<RunningServiceCancellationToken>,
    /// The child of a stdio server: killed and reaped with the connection.
    _child: Option<Piped>,
}

impl Connection {
    /// Resolves once the connection has ended.
    pub async fn closed(&self) {
        let mut closed = self.closed.clone();
        let _ = closed.wait_for(|c| *c).await;
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(cancel) = self.cancel.take() {
            cancel.cancel();
        }
    }
}

/// rmcp's side of the client: says who we are, and passes the server's
/// notifications on (handlers run on rmcp's tasks, so they only signal).
#[derive(Clone)]
struct Handler {
    /// Told of each `notifications/tools/list_changed`.
    tools_changed: Arc<Notices>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new(CLIENT_NAME, env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notice();
    }
}

/// The protocol revisions offered, newest first: `server/discover` with
/// these, and a server that does not know it (every server on 2025-11-25
/// or older) is met with `initialize`.
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28, ProtocolVersion::V_2025_11_25],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    }
}

/// Connects to `server` within its startup timeout. `tools_changed` is
/// told whenever the server says its tool list changed; `token` is where
/// an HTTP server's OAuth token is kept.
pub async fn connect(
    ctx: &Context,
    server: &Server,
    tools_changed: Arc<Notices>,
    token: Option<std::path::PathBuf>,
) -> Result<Connection, Failure> {
    let handler = Handler { tools_changed };
    let limit = server.startup_timeout;
    let (running, child) = match &server.transport {
        Transport::Stdio(stdio) => {
            let mut child = spawn_piped(command(stdio))
                .map_err(|e| format!("cannot start `{}`: {e}", stdio.command))?;
            if let Some(stderr) = child.stderr.take() {
                ctx.spawn(log_stderr(server.name.clone(), stderr));
            }
            let (Some(read), Some(write)) = (child.stdout.take(), child.stdin.take()) else {
                return Err(Failure::Other("the child's pipes are missing".into()));
            };
            let running = handshake(
                limit,
                handler.serve_with_lifecycle((read, write), lifecycle()),
            )
            .await?;
            (running, Some(child))
        }
        Transport::Http(h) => {
            let running = match http::transport(h, token).await? {
                http::Transport::Plain(t) => {
                    handshake(limit, handler.serve_with_lifecycle(t, lifecycle())).await
                }
                http::Transport::Authorized(t) => {
                    handshake(limit, handler.serve_with_lifecycle(t, lifecycle())).await
                }
            };
            let running = match running {
                // The row sends its own credentials: a 401 refuses them
                // (a login would not be used).
                Err(Failure::NeedsLogin(_)) if h.sends_credentials() => {
                    return Err(Failure::Other(
                        "the server refused the row's credentials (401)".into(),
                    ))
                }
                other => other?,
            };
            (running, None)
        }
    };
    let peer = running.peer().clone();
    let cancel = running.cancellation_token();
    let (closed_tx, closed) = watch::channel(false);
    ctx.spawn(async move {
        let _ = running.waiting().await;
        let _ = closed_tx.send(true);
    });
    Ok(Connection {
        peer,
        closed,
        cancel: Some(cancel),
        _child: child,
    })
}

async fn handshake<T, E: std::error::Error + 'static>(
    limit: Duration,
    serve: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, Failure> {
    match tokio::time::timeout(limit, serve).await {
        Ok(Ok(running)) => Ok(running),
        Ok(Err(e)) if wants_authorization(&e) => Err(Failure::NeedsLogin(
            "the server requires authorization (OAuth)".into(),
        )),
        Ok(Err(e)) => Err(Failure::Other(format!("handshake failed: {e}"))),
        Err(_) => Err(Failure::Other(format!(
            "the server did not complete the handshake within {} ms",
            limit.as_millis()
        ))),
    }
}

/// Whether `e` (or an error under it) is the server's 401, or a stored
/// token that can no longer be refreshed.
fn wants_authorization(e: &(dyn std::error::Error + 'static)) -> bool {
    use rmcp::service::ClientInitializeError;
    use rmcp::transport::auth::AuthError;
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let mut at = Some(e);
    while let Some(e) = at {
        // Its transport error is not its `source`.
        if let Some(ClientInitializeError::TransportError { error, .. }) = e.downcast_ref() {
            at = Some(&*error.error);
            continue;
        }
        if let Some(h) = e.downcast_ref::<StreamableHttpError<reqwest013::Error>>() {
            if matches!(h, StreamableHttpError::AuthRequired(_)) {
                return true;
            }
        }
        if let Some(a) = e.downcast_ref::<AuthError>() {
            if matches!(
                a,
                AuthError::AuthorizationRequired | AuthError::TokenRefreshRejected(_)
            ) {
                return true;
            }
        }
        at = e.source();
    }
    false
}

/// Whether a host variable may reach a server unasked: not one that looks
/// like a credential, not the harness's own.
fn inherited(name: &OsStr) -> bool {
    let name = name.to_string_lossy().to_ascii_uppercase();
    !(name.starts_with("DSH_")
        || ["KEY", "PASSWORD", "SECRET", "TOKEN"]
            .iter()
            .any(|w| name.contains(w)))
}

/// The command of a stdio server: the host's environment without its
/// credentials, the variables the row passes through, then the row's own.
fn command(stdio: &Stdio) -> Launch {
    let mut c = Launch::new(&stdio.command);
    c.args(&stdio.args).retain_env(inherited);
    for name in &stdio.env_vars {
        if let Some(v) = std::env::var_os(name) {
            c.env(name, v);
        }
    }
    c.envs(&stdio.env);
    if let Some(cwd) = &stdio.cwd {
        c.current_dir(cwd);
    }
    c
}

/// Logs the server's stderr line by line (never the terminal's): long
/// lines cut, invalid UTF-8 replaced.
async fn log_stderr(server: String, stderr: impl AsyncRead + Unpin) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(STDERR_LINE_MAX as u64 + 1)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let whole = line.last() == Some(&b'\n');
        let text = String::from_utf8_lossy(&line[..line.len().min(STDERR_LINE_MAX)]);
        tracing::info!("mcp-client({server}) stderr: {}", text.trim_end());
        if !whole && line.len() > STDERR_LINE_MAX {
            // Skip the rest of an over-long line.
            let mut rest = Vec::new();
            if reader.read_until(b'\n', &mut rest).await.unwrap_or(0) == 0 {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_harness_variables_stay_home() {
        for name in [
            "DEEPSEEK_API_KEY",
            "github_token",
            "DB_PASSWORD",
            "MY_SECRET",
            "DSH_HOME",
        ] {
            assert!(!inherited(OsStr::new(name)), "{name}");
        }
        for name in ["PATH", "HOME", "LANG", "TERM"] {
            assert!(inherited(OsStr::new(name)), "{name}");
        }
    }

    #[test]
    fn the_row_passes_what_it_names() {
        std::env::set_var("DSH_MCP_TEST_API_KEY", "k");
        let stdio = Stdio {
            command: "srv".into(),
            args: vec!["-x".into()],
            env: [("A".to_owned(), "1".to_owned())].into(),
            env_vars: vec!["DSH_MCP_TEST_API_KEY".into()],
            cwd: Some("/tmp".into()),
        };
        std::env::set_var("DSH_MCP_TEST_SECRET", "s");
        let c = command(&stdio);
        assert_eq!(c.get_env("DSH_MCP_TEST_API_KEY"), Some(OsStr::new("k")));
        assert_eq!(c.get_env("A"), Some(OsStr::new("1")));
        assert_eq!(c.get_env("DSH_MCP_TEST_SECRET"), None);
        assert_eq!(c.get_current_dir(), Some(std::path::Path::new("/tmp")));
    }
}
