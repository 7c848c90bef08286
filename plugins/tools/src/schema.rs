//! Argument validation against the JSON Schema subset tools use: object
//! properties, `required`, primitive `type`s, `enum`, array `items`.
//! Extra keys are allowed; no defaults are applied.

use serde_json::Value;

/// Every violation of `schema` by `value`, as `path: problem`.
pub fn validate(schema: &Value, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    check(schema, value, "", &mut out);
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
