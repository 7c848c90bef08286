//! MCP servers as services: each `mcp-client` row provides
//! `mcp:<fiber>` (the fiber `host.plugins` lists for the row), whose `status` says how its connection stands and
//! `reconnect` makes it connect again. The chat's `/mcp` finds the rows
//! of [`PLUGIN`] in `host.plugins` and asks each.

use serde::{Deserialize, Serialize};

pub use crate::names::mcp as method;
use crate::{Context, Result, Service};
pub use dsh_wire::mcp::{transport, valid_server_name, AUTH_DIR, PLUGIN};

/// The prefix of every server's service name.
pub const SERVICE_PREFIX: &str = "mcp:";

/// The service of the server row served by `fiber`.
pub fn service_name(fiber: u64) -> String {
    format!("{SERVICE_PREFIX}{fiber}")
}

/// How a server's connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerState {
    /// The first connection is being made.
    Starting,
    /// Connected; its tools are offered.
    Connected,
    /// Lost or failed; the next attempt is scheduled (its tools fail
    /// meanwhile).
    Reconnecting,
    /// Given up, or reconnecting is off: waits for a `reconnect`.
    Stopped,
    /// The server wants an OAuth login first: waits for a `login`.
    NeedsLogin,
}

impl ServerState {
    /// Its wire name (`connected`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ServerState::Starting => "starting",
            ServerState::Connected => "connected",
            ServerState::Reconnecting => "reconnecting",
            ServerState::Stopped => "stopped",
            ServerState::NeedsLogin => "needs-login",
        }
    }
}

/// The reply of `status` and `reconnect`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    /// The row's `serverName`.
    pub server_name: String,
    /// The row's transport ([`transport`]).
    pub transport: String,
    /// How the connection stands.
    pub state: ServerState,
    /// Why it is not connected, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Tools registered now.
    pub tools: usize,
    /// Connections made since the row applied.
    pub connections: u64,
}

/// The reply of `login`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoginStarted {
    /// The authorization URL the user opens in a browser; once they
    /// approve, the token is stored and the server connects.
    pub url: String,
}

/// A typed client of one server's service.
#[derive(Clone)]
pub struct McpServer(Service);

impl McpServer {
    /// The service of the server row served by `fiber`.
    pub fn new(ctx: &Context, fiber: u64) -> McpServer {
        McpServer(ctx.service(service_name(fiber)))
    }

    /// `status`.
    pub async fn status(&self) -> Result<ServerStatus> {
        self.0.call_as(method::STATUS, ()).await
    }

    /// `reconnect`.
    pub async fn reconnect(&self) -> Result<ServerStatus> {
        self.0.call_as(method::RECONNECT, ()).await
    }

    /// `login`.
    pub async fn login(&self) -> Result<LoginStarted> {
        self.0.call_as(method::LOGIN, ()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_say_their_wire_names() {
        for state in [
            ServerState::Starting,
            ServerState::Connected,
            ServerState::Reconnecting,
            ServerState::Stopped,
            ServerState::NeedsLogin,
        ] {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
    }
}
