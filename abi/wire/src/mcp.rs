//! MCP server vocabulary the host and the `mcp-client` plugin share: the
//! host makes rows of this plugin from other products' files (`.mcp.json`,
//! codex's `[mcp_servers]`), the plugin reads them.

/// The plugin of MCP server rows.
pub const PLUGIN: &str = "mcp-client";

/// The directory of `$DSH_HOME` holding MCP OAuth tokens (the host
/// creates it, so the tool sandbox always hides it).
pub const AUTH_DIR: &str = "mcp-auth";

/// The `transport` values of a row.
pub mod transport {
    /// A child process over stdin and stdout.
    pub const STDIO: &str = "stdio";
    /// MCP's Streamable HTTP.
    pub const STREAMABLE_HTTP: &str = "streamable-http";
}

/// Whether `name` can be a server's name: `[A-Za-z0-9_-]{1,32}` (it is the
/// middle of every tool name, `mcp__<server>__<tool>`).
pub fn valid_server_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_are_short_and_plain() {
        for ok in ["a", "github", "my-server_2", &"x".repeat(32)] {
            assert!(valid_server_name(ok), "{ok}");
        }
        for bad in ["", "a.b", "a b", "é", &"x".repeat(33)] {
            assert!(!valid_server_name(bad), "{bad}");
        }
    }
}
