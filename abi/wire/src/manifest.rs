//! What a plugin library declares about itself.

use serde::{Deserialize, Serialize};

/// What a plugin library declares about itself. Read by the host before the
/// plugin runs (`dsh-host plugins check` prints it); produced by the SDK's
/// `export_plugin!` from the plugin's `Plugin` impl.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The plugin name rows refer to.
    pub name: String,
    /// The plugin crate's version.
    pub version: String,
    /// The message-protocol version it was built against.
    pub abi_version: u32,
    /// One line about what it does.
    #[serde(default)]
    pub description: String,
    /// Services it provides.
    #[serde(default)]
    pub provides: Vec<String>,
    /// Services that must be active before it is applied.
    #[serde(default)]
    pub inject: Vec<String>,
    /// JSON Schema of its config, when it publishes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_schema: Option<serde_json::Value>,
}
