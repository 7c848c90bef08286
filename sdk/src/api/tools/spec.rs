//! What a tool is to the code that calls it: its [`ToolSpec`] (name,
//! description, whether its calls may overlap, the type its arguments parse
//! into) and [`args`], the one parsing of a call's arguments.
//!
//! These live beside the `tools` service types (not in [`crate::tool`]) so
//! that the dependency runs one way: [`crate::tool`] (the helpers that
//! serve tools) builds on [`crate::api::tools`], which uses nothing of it.
//! `crate::tool` re-exports both, as plugin code names them.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::names::code::INVALID_ARGS;

/// A tool a plugin serves: what the model is told about it and the type its
/// arguments parse into.
pub trait ToolSpec {
    /// The name the model calls it by.
    const NAME: &'static str;
    /// What the model is told it does. (A doc comment on [`ToolSpec::Args`]
    /// is not sent: this is the tool's one description.)
    const DESCRIPTION: &'static str;
    /// Whether its calls may run alongside other calls of the same step
    /// (`parallel` in the registration); `false` runs them exclusively.
    const PARALLEL: bool = false;
    /// Its parameters: doc comments on fields and on nested types become
    /// model-visible descriptions (write plain `//` comments for notes the
    /// model should not see), `Option` fields are optional, unknown fields are
    /// ignored unless the type denies them.
    type Args: DeserializeOwned + JsonSchema;
}

/// `value` parsed as `T`; a mismatch fails with [`INVALID_ARGS`] and a
/// message naming the field (`todos[0].status: unknown variant ...`).
/// Missing or `null` arguments parse as `{}`.
///
/// `value` is the model's arguments before the tool parses them: open JSON
/// by nature, this function is where they stop being so.
pub fn args<T: DeserializeOwned>(value: &Value) -> Result<T> {
    let empty = Value::Object(Map::new());
    let value = if value.is_null() { &empty } else { value };
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = if path == "." {
            format!("invalid arguments: {inner}")
        } else {
            format!("invalid arguments: {path}: {inner}")
        };
        Error::new(INVALID_ARGS, message)
    })
}
