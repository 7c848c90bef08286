//! Typed tools: a tool's parameters are one Rust type that derives
//! `Deserialize` and `JsonSchema`, so the schema the model sees and the
//! parsing of its arguments cannot drift apart.
//!
//! ```ignore
//! #[derive(Deserialize, JsonSchema)]
//! struct ReadArgs {
//!     /// Path to read.
//!     file_path: String,
//!     /// 1-based first line to return.
//!     #[schemars(with = "Option<dsh_sdk::tool::Number>")]
//!     offset: Option<u64>,
//! }
//!
//! struct Read;
//! impl ToolSpec for Read {
//!     const NAME: &'static str = "read";
//!     const DESCRIPTION: &'static str = "Read a text file.";
//!     const PARALLEL: bool = true;
//!     type Args = ReadArgs;
//! }
//!
//! register_tools(&ctx, vec![declaration::<Read>()], |req| async move {
//!     let a = arguments::<Read>(&req)?;
//!     ...
//! }).await
//! ```

use std::borrow::Cow;

use schemars::generate::SchemaSettings;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use crate::context::Request;
use crate::error::{Error, Result};

/// The code of a tool call whose arguments do not fit the tool's type (the
/// tools registry gives schema violations the same code).
pub use crate::names::code::INVALID_ARGS;

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

/// The registration of tool `T` for [`super::register_tools`]: `{name,
/// description, parameters, parallel?}` (`parallel` only when true, as the
/// registry reads it).
pub fn declaration<T: ToolSpec>() -> Value {
    let mut d = json!({
        "name": T::NAME,
        "description": T::DESCRIPTION,
        "parameters": parameters::<T::Args>(),
    });
    if T::PARALLEL {
        d["parallel"] = json!(true);
    }
    d
}

/// The JSON schema of `A` as the model should see it: a plain object
/// schema (`type`, `properties`, `required`, `additionalProperties` when the
/// type sets it), every subschema inline, no `$schema` or `title`, and
/// optional properties without the `null` alternative (absent and `null`
/// both mean "not given"). Definitions are kept only for a recursive type,
/// whose inner occurrences refer to them (`$ref`).
pub fn parameters<A: JsonSchema>() -> Value {
    let settings = SchemaSettings::draft07().with(|s| {
        s.inline_subschemas = true;
        s.meta_schema = None;
    });
    let mut schema = settings.into_generator().into_root_schema_for::<A>();
    for key in ["$schema", "title", "description"] {
        schema.remove(key);
    }
    if !refers_to_definitions(schema.as_value()) {
        for key in ["definitions", "$defs"] {
            schema.remove(key);
        }
    }
    if !schema
        .as_value()
        .get("properties")
        .is_some_and(Value::is_object)
    {
        schema.insert("properties".into(), json!({}));
    }
    let mut value = schema.to_value();
    drop_null_alternatives(&mut value);
    value
}

/// Whether `schema` holds a `$ref` to one of its definitions (schemars
/// inlines every subschema but the recursive occurrences of a type).
fn refers_to_definitions(schema: &Value) -> bool {
    match schema {
        Value::Object(o) => o.iter().any(|(k, v)| {
            (k == "$ref"
                && v.as_str()
                    .is_some_and(|r| r.starts_with("#/definitions/") || r.starts_with("#/$defs/")))
                || refers_to_definitions(v)
        }),
        Value::Array(a) => a.iter().any(refers_to_definitions),
        _ => false,
    }
}

/// Removes the `null` alternative schemars adds to `Option` fields, in
/// every object schema inside `schema`.
fn drop_null_alternatives(schema: &mut Value) {
    match schema {
        Value::Object(o) => {
            if let Some(Value::Object(props)) = o.get_mut("properties") {
                props.values_mut().for_each(without_null);
            }
            o.values_mut().for_each(drop_null_alternatives);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_null_alternatives),
        _ => {}
    }
}

/// `{"type": [T, "null"]}` → `{"type": T}` (and `null` out of its
/// `enum`, as an optional enum has it); `{"anyOf": [S, {"type":
/// "null"}]}` → `S` (keeping the property's own keys, e.g. its
/// description).
fn without_null(property: &mut Value) {
    let Some(o) = property.as_object_mut() else {
        return;
    };
    if let Some(Value::Array(types)) = o.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            o.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(values)) = o.get_mut("enum") {
        if values.iter().any(|v| !v.is_null()) {
            values.retain(|v| !v.is_null());
        }
    }
    let Some(Value::Array(options)) = o.get("anyOf") else {
        return;
    };
    let rest: Vec<&Value> = options
        .iter()
        .filter(|s| **s != json!({"type": "null"}))
        .collect();
    if let [Value::Object(only)] = rest.as_slice() {
        let only: Map<String, Value> = only.clone();
        o.remove("anyOf");
        for (k, v) in only {
            o.entry(k).or_insert(v);
        }
    }
}

/// The schema type of a count or size the model gives as a JSON `number`
/// (the original's tools declare them so), for `#[schemars(with =
/// "Option<dsh_sdk::tool::Number>")]` on an optional integer field (or
/// `with = "dsh_sdk::tool::Number"` on a required one): the field's own
/// type still decides what parses (a fraction or a negative for a `u64`
/// fails with [`INVALID_ARGS`]).
pub struct Number;

impl JsonSchema for Number {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Number".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "number"})
    }
}

/// `value` parsed as `T`; a mismatch fails with [`INVALID_ARGS`] and a
/// message naming the field (`todos[0].status: unknown variant ...`).
/// Missing or `null` arguments parse as `{}`.
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

/// The `arguments` of an `execute` request for tool `T`, parsed by
/// [`args`].
pub fn arguments<T: ToolSpec>(req: &Request) -> Result<T::Args> {
    args(&req.params["arguments"])
}

#[cfg(test)]
mod tests;
