//! Argument validation against the JSON Schema subset tools use: object
//! properties, `required`, primitive `type`s, `enum`, array `items`.
//! Extra keys are allowed; no defaults are applied.
//!
//! Both sides are open JSON by nature: a schema is whatever a tool
//! registered (keywords outside the subset, or of the wrong type, are
//! ignored), and the arguments are the model's before any tool parses them.
//! So this module reads both by key.

use serde_json::Value;

/// Every violation of `schema` by `value`, as `path: problem`.
pub fn validate(schema: &Value, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    check(schema, value, "", &mut out);
    out
}

/// Every violation of an output contract's `schema` by a tool's `value`,
/// as `value.path: problem`.
pub fn validate_output(schema: &Value, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    check(schema, value, "value", &mut out);
    out
}

fn type_ok(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "integer" => v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "number" => v.is_number(),
        _ => true,
    }
}

fn check(schema: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
    let at = if path.is_empty() {
        "arguments".to_owned()
    } else {
        path.to_owned()
    };
    if let Some(t) = schema["type"].as_str() {
        if !type_ok(t, v) {
            out.push(format!("{at}: expected {t}"));
            return;
        }
    }
    if let Some(options) = schema["enum"].as_array() {
        if !options.contains(v) {
            out.push(format!(
                "{at}: must be one of {}",
                Value::Array(options.clone())
            ));
        }
    }
    if let (Some(props), Some(obj)) = (schema["properties"].as_object(), v.as_object()) {
        for req in schema["required"].as_array().into_iter().flatten() {
            if let Some(k) = req.as_str() {
                if obj.get(k).is_none_or(Value::is_null) {
                    out.push(format!("{}: required", join(path, k)));
                }
            }
        }
        for (k, sub) in props {
            if let Some(val) = obj.get(k).filter(|v| !v.is_null()) {
                check(sub, val, &join(path, k), out);
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, item) in arr.iter().enumerate() {
            check(items, item, &format!("{at}[{i}]"), out);
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::{validate, validate_output};
    use serde_json::json;

    fn schema() -> serde_json::Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string"},
            "count": {"type": "integer"},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}}, "required": ["deep"]},
            "tags": {"type": "array", "items": {"type": "string"}},
        }, "required": ["path"]})
    }

    #[test]
    fn valid_arguments_have_no_violations_and_extra_keys_are_allowed() {
        let args = json!({"path": "p", "count": 3, "mode": "a", "opts": {"deep": true},
                          "tags": ["x"], "extra": {"anything": 1}});
        assert_eq!(validate(&schema(), &args), Vec::<String>::new());
    }

    #[test]
    fn missing_required_keys_are_flagged_and_no_default_is_applied() {
        let args = json!({});
        assert_eq!(validate(&schema(), &args), ["path: required"]);
        assert_eq!(args, json!({}));
    }

    #[test]
    fn types_and_enums_are_checked() {
        let args = json!({"path": 1, "count": 1.5, "mode": "c"});
        assert_eq!(
            validate(&schema(), &args),
            [
                "path: expected string",
                "count: expected integer",
                "mode: must be one of [\"a\",\"b\"]"
            ]
        );
    }

    #[test]
    fn nested_objects_and_arrays_are_checked_with_their_paths() {
        let args = json!({"path": "p", "opts": {}, "tags": ["x", 2]});
        assert_eq!(
            validate(&schema(), &args),
            ["opts.deep: required", "tags[1]: expected string"]
        );
    }

    #[test]
    fn validation_is_total_on_any_value() {
        for v in [
            json!(null),
            json!(1),
            json!("s"),
            json!([1]),
            json!({"path": []}),
        ] {
            assert!(!validate(&schema(), &v).is_empty(), "{v}");
        }
        // A schema outside the subset (raw JSON Schema) never panics.
        let raw = json!({"oneOf": [{"type": "string"}], "properties": 3});
        assert_eq!(validate(&raw, &json!({"a": 1})), Vec::<String>::new());
    }

    #[test]
    fn output_violations_are_rooted_at_value() {
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
        assert_eq!(
            validate_output(&schema, &json!({"text": "x"})),
            Vec::<String>::new()
        );
        assert_eq!(
            validate_output(&schema, &json!({"text": 1})),
            ["value.text: expected string"]
        );
        assert_eq!(
            validate_output(&schema, &json!({})),
            ["value.text: required"]
        );
        assert_eq!(
            validate_output(&json!({"type": "string"}), &json!(5)),
            ["value: expected string"]
        );
    }
}
