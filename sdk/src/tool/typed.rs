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
use serde::Deserialize;
// JSON Schema is open by nature: the schema is built and trimmed as JSON.
use serde_json::{Map, Value};

use crate::api::tools::RegisterParams;
use crate::context::Request;
use crate::error::Result;

pub use crate::api::tools::{args, ToolSpec};

/// The code of a tool call whose arguments do not fit the tool's type (the
/// tools registry gives schema violations the same code).
pub use crate::names::code::INVALID_ARGS;

/// The registration of tool `T` for [`super::register_tools`]: `{name,
/// description, parameters, parallel?}` (`parallel` only when true, as the
/// registry reads it); [`super::register_tools`] names the service.
pub fn declaration<T: ToolSpec>() -> RegisterParams {
    RegisterParams {
        name: T::NAME.to_owned(),
        description: T::DESCRIPTION.to_owned(),
        parameters: parameters::<T::Args>(),
        parallel: T::PARALLEL,
        ..RegisterParams::default()
    }
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
        schema.insert("properties".into(), Value::Object(Map::new()));
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
    let rest: Vec<&Value> = options.iter().filter(|s| !is_null_schema(s)).collect();
    if let [Value::Object(only)] = rest.as_slice() {
        let only: Map<String, Value> = only.clone();
        o.remove("anyOf");
        for (k, v) in only {
            o.entry(k).or_insert(v);
        }
    }
}

/// Whether `schema` is exactly `{"type": "null"}`.
fn is_null_schema(schema: &Value) -> bool {
    schema
        .as_object()
        .is_some_and(|o| o.len() == 1 && o.get("type").and_then(Value::as_str) == Some("null"))
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

/// The `arguments` of an `execute` request for tool `T`, parsed by
/// [`args`] (the rest of the call is not read: see [`super::exec`]).
pub fn arguments<T: ToolSpec>(req: &Request) -> Result<T::Args> {
    /// The one field of an `execute` request read here.
    #[derive(Deserialize)]
    struct Call {
        // The model's arguments before the tool's type parses them: open.
        #[serde(default)]
        arguments: Value,
    }
    let call: Call = req.params_as()?;
    args(&call.arguments)
}

#[cfg(test)]
mod tests;
