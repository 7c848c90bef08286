//! The request header (`EpochHeader`, reference dsh-core §2.7): its
//! canonical form and equality, so a loop logs a `request/header` only when
//! the header really changed.

use serde_json::{Map, Value};

/// The canonical header: `config`, then `adapterDefaults` only when a marker
/// is `true`, `system` only when non-empty, `tools` only when non-empty
/// (`canonicalHeader`).
pub fn canonical_header(header: &Value) -> Value {
    let mut out = Map::new();
    out.insert("config".into(), header["config"].clone());
    let defaults = &header["adapterDefaults"];
    if defaults["reasoningEffort"] == true || defaults["maxTokens"] == true {
        out.insert("adapterDefaults".into(), defaults.clone());
    }
    if header["system"].as_str().is_some_and(|s| !s.is_empty()) {
        out.insert("system".into(), header["system"].clone());
    }
    if header["tools"].as_array().is_some_and(|t| !t.is_empty()) {
        out.insert("tools".into(), header["tools"].clone());
    }
    Value::Object(out)
}

/// One scalar of a call config, compared as JavaScript's `===` does: numbers
/// by value (`1` equals `1.0`), absent equals only absent.
fn same_scalar(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// `callConfigEquals`: provider, model, reasoningEffort, temperature,
/// maxTokens, and `stop` element-wise.
pub fn call_config_equals(a: &Value, b: &Value) -> bool {
    [
        "provider",
        "model",
        "reasoningEffort",
        "temperature",
        "maxTokens",
    ]
    .iter()
    .all(|k| same_scalar(&a[k], &b[k]))
        && a["stop"] == b["stop"]
}

/// `headerEquals`: field-wise equality of two headers: the call config, both
/// adapter-default markers, the system prompt, and the tools in order by
/// their JSON text (an absent tool list equals an empty one).
pub fn header_equals(a: &Value, b: &Value) -> bool {
    let marker = |h: &Value, k: &str| h["adapterDefaults"][k].clone();
    let tools = |h: &Value| h["tools"].as_array().cloned().unwrap_or_default();
    let (at, bt) = (tools(a), tools(b));
    call_config_equals(&a["config"], &b["config"])
        && marker(a, "reasoningEffort") == marker(b, "reasoningEffort")
        && marker(a, "maxTokens") == marker(b, "maxTokens")
        && a["system"] == b["system"]
        && at.len() == bt.len()
        && at
            .iter()
            .zip(&bt)
            .all(|(x, y)| serde_json::to_string(x).ok() == serde_json::to_string(y).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> Value {
        json!({"name": name, "description": "", "parameters": {"type": "object"}})
    }

    #[test]
    fn canonical_header_drops_empty_optionals() {
        let config = json!({"provider": "p", "model": "m"});
        let full = json!({"config": config, "adapterDefaults": {}, "system": "", "tools": []});
        assert_eq!(canonical_header(&full), json!({"config": config}));
        let kept = json!({"config": config, "adapterDefaults": {"maxTokens": true}, "system": "s", "tools": [tool("a")]});
        assert_eq!(canonical_header(&kept), kept);
    }

    #[test]
    fn header_equals_compares_all_fields_tool_order_matters_and_absent_is_empty_tools() {
        let config = json!({"provider": "p", "model": "m", "stop": ["x"]});
        let base = json!({"config": config, "system": "s", "tools": [tool("a"), tool("b")]});
        assert!(header_equals(&base, &base.clone()));
        let mut swapped = base.clone();
        swapped["tools"] = json!([tool("b"), tool("a")]);
        assert!(!header_equals(&base, &swapped));
        let bare = json!({"config": config});
        assert!(header_equals(
            &bare,
            &json!({"config": config, "tools": []})
        ));
        for (key, value) in [
            ("provider", json!("q")),
            ("model", json!("n")),
            ("reasoningEffort", json!("high")),
            ("temperature", json!(0.5)),
            ("maxTokens", json!(10)),
            ("stop", json!(["y"])),
        ] {
            let mut other = base.clone();
            other["config"][key] = value;
            assert!(!header_equals(&base, &other), "{key} is compared");
        }
        let mut system = base.clone();
        system["system"] = json!("t");
        assert!(!header_equals(&base, &system));
        let mut marker = base.clone();
        marker["adapterDefaults"] = json!({"maxTokens": true});
        assert!(!header_equals(&base, &marker));
        let mut integral = base.clone();
        integral["config"]["maxTokens"] = json!(10);
        let mut float = base;
        float["config"]["maxTokens"] = json!(10.0);
        assert!(header_equals(&integral, &float));
    }

    #[test]
    fn call_config_equals_compares_every_field_and_stop_element_wise() {
        let base = json!({"provider": "p", "model": "m"});
        let with = |k: &str, v: Value| {
            let mut c = base.clone();
            c[k] = v;
            c
        };
        assert!(call_config_equals(&base, &base));
        assert!(!call_config_equals(&base, &with("provider", json!("x"))));
        assert!(!call_config_equals(&base, &with("model", json!("x"))));
        assert!(!call_config_equals(
            &with("reasoningEffort", json!("high")),
            &base
        ));
        assert!(!call_config_equals(
            &with("reasoningEffort", json!("high")),
            &with("reasoningEffort", json!("low"))
        ));
        assert!(!call_config_equals(&with("temperature", json!(0.5)), &base));
        assert!(!call_config_equals(
            &with("maxTokens", json!(1)),
            &with("maxTokens", json!(2))
        ));
        let stop = |s: Value| with("stop", s);
        assert!(!call_config_equals(&stop(json!(["a"])), &base));
        assert!(
            !call_config_equals(&stop(json!([])), &base),
            "absent is not empty"
        );
        assert!(!call_config_equals(
            &stop(json!(["a"])),
            &stop(json!(["a", "b"]))
        ));
        assert!(!call_config_equals(
            &stop(json!(["a"])),
            &stop(json!(["b"]))
        ));
        assert!(!call_config_equals(
            &stop(json!(["a", "b"])),
            &stop(json!(["b", "a"]))
        ));
        assert!(call_config_equals(
            &stop(json!(["a", "b"])),
            &stop(json!(["a", "b"]))
        ));
    }
}
