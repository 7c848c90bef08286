//! The `surfaceOp` of a surface event: `"append"`, or `{op: "replace",
//! start, end}`. On the wire it stays JSON (`sessions.append` judges a
//! malformed one with the original's messages); this is the typed view of
//! a valid one.

use serde_json::{json, Value};

/// A valid `surfaceOp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SurfaceOp {
    /// The event adds a node.
    Append,
    /// The event replaces the nodes from `start` to `end` (seqs, both
    /// current surface nodes, `start` first in surface order).
    Replace {
        /// The first shadowed node.
        start: u64,
        /// The last shadowed node.
        end: u64,
    },
}

impl SurfaceOp {
    /// The op as logged.
    pub fn to_value(self) -> Value {
        match self {
            SurfaceOp::Append => json!("append"),
            SurfaceOp::Replace { start, end } => {
                json!({"op": "replace", "start": start, "end": end})
            }
        }
    }

    /// The op of a logged value, if it is a valid one.
    pub fn of(value: &Value) -> Option<SurfaceOp> {
        match value {
            Value::String(s) if s == "append" => Some(SurfaceOp::Append),
            Value::Object(o) if o.len() == 3 && o.get("op") == Some(&json!("replace")) => {
                Some(SurfaceOp::Replace {
                    start: o.get("start")?.as_u64()?,
                    end: o.get("end")?.as_u64()?,
                })
            }
            _ => None,
        }
    }

    /// Whether `op` (an event's `surfaceOp`) is an append.
    pub fn is_append(op: Option<&Value>) -> bool {
        op.and_then(SurfaceOp::of) == Some(SurfaceOp::Append)
    }

    /// Whether `op` (an event's `surfaceOp`) is a replace.
    pub fn is_replace(op: Option<&Value>) -> bool {
        matches!(op.and_then(SurfaceOp::of), Some(SurfaceOp::Replace { .. }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_read_back_as_written_and_malformed_ones_are_none() {
        for op in [SurfaceOp::Append, SurfaceOp::Replace { start: 1, end: 4 }] {
            assert_eq!(SurfaceOp::of(&op.to_value()), Some(op));
        }
        for bad in [
            json!("replace"),
            json!({"op": "replace", "start": 1}),
            json!({"op": "replace", "start": 1, "end": 2, "x": 0}),
            json!({"op": "append", "start": 1, "end": 2}),
            json!({"op": "replace", "start": -1, "end": 2}),
        ] {
            assert_eq!(SurfaceOp::of(&bad), None, "{bad}");
        }
    }
}
