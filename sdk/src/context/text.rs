//! Values to the JSON text that crosses the boundary.

use serde::Serialize;
use serde_json::Value;

use crate::error::Result;

/// Serializes `v` straight to JSON text (no intermediate [`Value`]).
pub(super) fn to_text(v: impl Serialize) -> Result<String> {
    Ok(serde_json::to_string(&v)?)
}

/// Serializes `v` to a [`Value`] (kept in memory, not sent yet).
pub(super) fn to_value(v: impl Serialize) -> Result<Value> {
    Ok(serde_json::to_value(v)?)
}
