//! Reading a record tagged by a field whose set of values is open: the
//! original lets plugins add content blocks, message sources, turn-end
//! reasons and cancel causes, so a reader must keep a member it does not
//! know instead of refusing the log, and must still refuse a known member
//! that is malformed (serde's `untagged` would quietly take it as
//! unknown).

use serde::de::Error;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::message::Extra;

/// A record read from its fields once they are an ordered map. This part
/// does not depend on the deserializer, so it is compiled once per type,
/// not once per deserializer a plugin happens to use.
pub(crate) trait FromMap: Sized {
    /// The record of `map`, or why not.
    fn from_map(map: Extra) -> Result<Self, String>;
}

/// Deserializes a [`FromMap`] record: its fields as a map, then the rest.
pub(crate) fn deserialize<'de, D: Deserializer<'de>, T: FromMap>(d: D) -> Result<T, D::Error> {
    T::from_map(Extra::deserialize(d)?).map_err(D::Error::custom)
}

/// `map` judged by its `tag` field: `Ok(value)` to deserialize as a known
/// member when the tag is one of `known`, `Err(map)` to keep whole when it
/// is another string. A missing or non-string tag is an error.
pub(crate) fn split(
    map: Extra,
    tag: &'static str,
    known: &[&str],
) -> Result<Result<Value, Extra>, String> {
    match map.get(tag) {
        Some(Value::String(t)) if known.contains(&t.as_str()) => Ok(Ok(Value::Object(map))),
        Some(Value::String(_)) => Ok(Err(map)),
        Some(_) => Err(format!("`{tag}` must be a string")),
        None => Err(format!("missing field `{tag}`")),
    }
}

/// A known member of `T` read from its map as a value.
pub(crate) fn known<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, String> {
    T::deserialize(value).map_err(|e: serde_json::Error| e.to_string())
}
