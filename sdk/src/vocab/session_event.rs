//! The envelope of one durable session event and the header of a stored
//! session.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One durable session event: `{type, seq, time, data}` plus, for surface
/// types, `sourceEventSeqs` and `surfaceOp`. Field order is the serialized
/// key order of the original.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionEvent {
    /// The event type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Position in the log (0-based, contiguous).
    pub seq: u64,
    /// Epoch milliseconds.
    pub time: u64,
    /// The payload, kept as text until it is read (most events of a long
    /// session never are).
    pub data: crate::LazyJson,
    /// Events this one was derived from.
    #[serde(
        rename = "sourceEventSeqs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub source_event_seqs: Option<Vec<u64>>,
    /// `"append"` or `{op: "replace", start, end}`.
    #[serde(rename = "surfaceOp", default, skip_serializing_if = "Option::is_none")]
    pub surface_op: Option<Value>,
    /// Unknown types with this flag load as-is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignorable: Option<bool>,
}

impl SessionEvent {
    /// A non-surface event of `kind` at `seq` with `data` (time 0, no
    /// sources): what a test or a renderer builds by hand.
    pub fn new(kind: impl Into<String>, seq: u64, data: Value) -> SessionEvent {
        SessionEvent {
            kind: kind.into(),
            seq,
            time: 0,
            data: data.into(),
            source_event_seqs: None,
            surface_op: None,
            ignorable: None,
        }
    }

    /// The data read as `T` (straight from the kept text when it was not
    /// read yet). A mismatch is `SESSION_CORRUPT`, naming the event's seq,
    /// its type and the field at fault.
    pub fn data_as<T: serde::de::DeserializeOwned>(&self) -> crate::Result<T> {
        self.data.parse_at().map_err(|(path, e)| {
            crate::Error::new(
                crate::names::code::SESSION_CORRUPT,
                format!(
                    "session event {} ({}) has malformed data at `{path}`: {e}",
                    self.seq, self.kind
                ),
            )
        })
    }
}

/// The header of a stored session (kept out of the event log).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionHeader {
    /// Log format version (0).
    pub version: u32,
    /// Session id.
    pub id: String,
    /// Epoch milliseconds.
    pub created_at: u64,
    /// Absolute working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The session this one was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<String>,
    /// Number of seed events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_length: Option<u64>,
    /// `"subagent"` for delegated sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Delegation depth (0 for top level).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation_depth: Option<u64>,
    /// Agent preset id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_preset: Option<String>,
}
