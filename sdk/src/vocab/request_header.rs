//! The request header (`EpochHeader`): its canonical form and equality, so
//! a loop logs a `request/header` only when the header really changed. The
//! header type is [`RequestHeader`].

pub use super::records::{CallConfig, RequestHeader};

impl RequestHeader {
    /// The canonical header (`canonicalHeader`): `adapterDefaults` only
    /// when a marker is `true`, `system` only when non-empty, `tools` only
    /// when non-empty.
    pub fn canonical(mut self) -> RequestHeader {
        let marked = self
            .adapter_defaults
            .as_ref()
            .is_some_and(|d| d.reasoning_effort == Some(true) || d.max_tokens == Some(true));
        if !marked {
            self.adapter_defaults = None;
        }
        if self.system.as_deref().is_some_and(str::is_empty) {
            self.system = None;
        }
        if self.tools.as_ref().is_some_and(Vec::is_empty) {
            self.tools = None;
        }
        self
    }

    /// `headerEquals`: the call config, both adapter-default markers, the
    /// system prompt, and the tools in order by their JSON text (an absent
    /// tool list equals an empty one).
    pub fn same_as(&self, other: &RequestHeader) -> bool {
        let markers = |h: &RequestHeader| {
            let d = h.adapter_defaults.clone().unwrap_or_default();
            (d.reasoning_effort, d.max_tokens)
        };
        let tools = |h: &RequestHeader| {
            h.tools
                .iter()
                .flatten()
                .map(|t| serde_json::to_string(t).ok())
                .collect::<Vec<_>>()
        };
        self.config.same_as(&other.config)
            && markers(self) == markers(other)
            && self.system == other.system
            && tools(self) == tools(other)
    }
}

impl CallConfig {
    /// `callConfigEquals`: provider, model, reasoningEffort, temperature,
    /// maxTokens, and `stop` element-wise (absent is not empty).
    pub fn same_as(&self, other: &CallConfig) -> bool {
        self.provider == other.provider
            && self.model == other.model
            && self.reasoning_effort == other.reasoning_effort
            && self.temperature == other.temperature
            && self.max_tokens == other.max_tokens
            && self.stop == other.stop
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// [`RequestHeader::canonical`] of a logged header; a header that is not
    /// one is returned as it is (the log's shape checks judge it).
    fn canonical_header(header: &Value) -> Value {
        match RequestHeader::deserialize_from(header) {
            Some(h) => serde_json::to_value(h.canonical()).unwrap_or_else(|_| header.clone()),
            None => header.clone(),
        }
    }

    /// [`RequestHeader::same_as`] of two logged headers; `false` when either
    /// is not a header.
    fn header_equals(a: &Value, b: &Value) -> bool {
        match (
            RequestHeader::deserialize_from(a),
            RequestHeader::deserialize_from(b),
        ) {
            (Some(a), Some(b)) => a.same_as(&b),
            _ => false,
        }
    }

    /// [`CallConfig::same_as`] of two logged configs; `false` when either is
    /// not one.
    fn call_config_equals(a: &Value, b: &Value) -> bool {
        let read = |v: &Value| serde::Deserialize::deserialize(v).ok();
        match (read(a), read(b)) {
            (Some(a), Some(b)) => CallConfig::same_as(&a, &b),
            _ => false,
        }
    }

    impl RequestHeader {
        fn deserialize_from(value: &Value) -> Option<RequestHeader> {
            serde::Deserialize::deserialize(value).ok()
        }
    }
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
