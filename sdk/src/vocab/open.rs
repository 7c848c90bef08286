//! Reading a record tagged by a field whose set of values is open: the
//! original lets plugins add content blocks, message sources, turn-end
//! reasons and cancel causes, so a reader must keep a member it does not
//! know instead of refusing the log, and must still refuse a known member
//! that is malformed (serde's `untagged` would quietly take it as
//! unknown).

use serde::de::Error;
use serde_json::Value;

use super::message::Extra;

/// `map` judged by its `tag` field: `Ok(value)` to deserialize as a known
/// member when the tag is one of `known`, `Err(map)` to keep whole when it
/// is another string. A missing or non-string tag is an error.
pub(crate) fn split<E: Error>(
    map: Extra,
    tag: &'static str,
    known: &[&str],
) -> Result<Result<Value, Extra>, E> {
    match map.get(tag) {
        Some(Value::String(t)) if known.contains(&t.as_str()) => Ok(Ok(Value::Object(map))),
        Some(Value::String(_)) => Ok(Err(map)),
        Some(_) => Err(E::custom(format_args!("`{tag}` must be a string"))),
        None => Err(E::missing_field(tag)),
    }
}
