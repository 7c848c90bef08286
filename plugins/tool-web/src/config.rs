//! The `tool-web` row's configuration.

use serde::Deserialize;

/// `config = { ... }` of the `tool-web` row.
#[derive(Deserialize, Clone, Debug)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Register `web_fetch` at all (off by default, as in the original).
    pub fetch: bool,
    /// Allow private, loopback and link-local addresses (SSRF guard off).
    pub allow_private: bool,
    /// The most bytes a body may have, checked against its declared length
    /// and while it streams.
    pub max_bytes: usize,
    /// The most characters returned.
    pub max_chars: usize,
    /// The most one call may take, from the DNS lookup to the last converted
    /// token.
    pub timeout_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            fetch: false,
            allow_private: false,
            max_bytes: 5_000_000,
            max_chars: 100_000,
            timeout_ms: 30_000,
        }
    }
}
