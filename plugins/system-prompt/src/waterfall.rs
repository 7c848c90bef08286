//! The `system-prompt/assemble` waterfall's payload, and the check of its
//! authoritative answer (the original's companion validation): section and
//! context names non-empty and unique, their texts strings, tool names
//! non-empty, variable names `[a-z][a-z0-9_]*` with string (or absent)
//! values. A violation is `INVARIANT`, attributed to the package in the
//! original's words.

use dsh_sdk::api::system_prompt::{Assembly, NamedText};
use dsh_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::render::valid_variable_name;
use crate::tool_order::tool_name;

/// A malformed authoritative assembly (the original's `InvariantError`).
const INVARIANT: &str = "INVARIANT";
/// The package the original attributes assembly invariants to.
const INVARIANT_PACKAGE: &str = "@deepseek-ai/dsh-system-prompt";

/// What the waterfall's listeners receive: the assembly before rendering.
#[derive(Serialize)]
pub struct Draft<'a> {
    /// The visible sections, by order.
    pub sections: Vec<NamedText>,
    /// The visible runtime contexts, by order.
    pub contexts: Vec<NamedText>,
    /// The tool schemas, in canonical order (the `tools` service's JSON).
    pub tools: &'a [Value],
    /// The variables (a string, or null for "no value here").
    pub variables: &'a Map<String, Value>,
}

/// The waterfall's answer as a listener may have left it. `name` and
/// `text` stay the JSON the listener wrote until [`checked`] judges them:
/// their type is what is checked.
#[derive(Deserialize)]
struct Returned {
    #[serde(default)]
    sections: Vec<Unchecked>,
    #[serde(default)]
    contexts: Vec<Unchecked>,
    /// Tool schemas: open JSON, of which only `name` is checked.
    #[serde(default)]
    tools: Vec<Value>,
    /// Variable values: checked to be strings or null.
    #[serde(default)]
    variables: Map<String, Value>,
    /// Fields a listener added, passed on.
    #[serde(flatten)]
    extra: Map<String, Value>,
}

/// A section or context as a listener returned it.
#[derive(Deserialize)]
struct Unchecked {
    #[serde(default)]
    name: Value,
    #[serde(default)]
    text: Value,
}

/// The fields the rendering writes: a listener's own values of them are
/// replaced.
const RENDERED: [&str; 3] = ["system", "context", "contextSections"];

/// `name` as JSON, the way the original quotes names in its messages.
fn quoted(name: &str) -> String {
    Value::from(name).to_string()
}

fn invariant(message: impl std::fmt::Display) -> Error {
    Error::new(
        INVARIANT,
        format!("invariant violated by \"{INVARIANT_PACKAGE}\": {message}"),
    )
}

/// The entries of one list, checked: each name a non-empty string, unique,
/// each text a string.
fn entries(kind: &str, list: Vec<Unchecked>) -> std::result::Result<Vec<NamedText>, String> {
    let mut out: Vec<NamedText> = Vec::with_capacity(list.len());
    for entry in list {
        let name = entry.name.as_str().unwrap_or("");
        if name.is_empty() {
            return Err(format!("assembled {kind} names must be non-empty"));
        }
        if out.iter().any(|e| e.name == name) {
            return Err(format!(
                "assembled {kind} name {} is duplicated",
                quoted(name)
            ));
        }
        let Value::String(text) = entry.text else {
            return Err(format!(
                "assembled {kind} {} text must be a string",
                quoted(name)
            ));
        };
        out.push(NamedText {
            name: name.to_owned(),
            text,
        });
    }
    Ok(out)
}

/// Each tool schema has a non-empty name.
fn check_tools(tools: &[Value]) -> std::result::Result<(), String> {
    if tools.iter().any(|t| tool_name(t).is_empty()) {
        return Err("assembled tool names must be non-empty".to_owned());
    }
    Ok(())
}

/// Each variable has a valid name and a string or null value.
fn check_variables(variables: &Map<String, Value>) -> std::result::Result<(), String> {
    for (name, value) in variables {
        if !valid_variable_name(name) {
            return Err(format!(
                "assembled variable name {} is invalid",
                quoted(name)
            ));
        }
        if !(value.is_null() || value.is_string()) {
            return Err(format!(
                "assembled variable {} must be a string or undefined",
                quoted(name)
            ));
        }
    }
    Ok(())
}

/// The waterfall's answer as an [`Assembly`] (not rendered yet), or the
/// violated contract.
fn check(answer: Value) -> std::result::Result<Assembly, String> {
    let Returned {
        sections,
        contexts,
        tools,
        variables,
        mut extra,
    } = Returned::deserialize(answer).map_err(|e| format!("the assembly is malformed: {e}"))?;
    let sections = entries("section", sections)?;
    let contexts = entries("context", contexts)?;
    check_tools(&tools)?;
    check_variables(&variables)?;
    for key in RENDERED {
        extra.shift_remove(key);
    }
    Ok(Assembly {
        sections,
        contexts,
        tools,
        variables,
        extra,
        ..Assembly::default()
    })
}

/// The waterfall's answer, checked; a violation is `INVARIANT`.
pub fn checked(answer: Value) -> Result<Assembly> {
    check(answer).map_err(invariant)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_malformed_authoritative_assembly_names_the_violated_contract() {
        let valid = || {
            json!({"sections": [{"name": "identity", "text": "prompt"}],
                   "contexts": [{"name": "policy", "text": "current policy"}],
                   "tools": [{"name": "echo", "description": "Echo", "parameters": {}}],
                   "variables": {"cwd": "/repo", "optional": null}})
        };
        let a = check(valid()).unwrap();
        assert_eq!(a.sections[0].text, "prompt");
        assert_eq!(a.contexts[0].name, "policy");
        let with = |key: &str, v: Value| {
            let mut a = valid();
            a[key] = v;
            check(a).err().unwrap()
        };
        let cases = [
            (
                "sections",
                json!([{"name": "", "text": "x"}]),
                "assembled section names must be non-empty",
            ),
            (
                "sections",
                json!([{"text": "x"}]),
                "assembled section names must be non-empty",
            ),
            (
                "sections",
                json!([{"name": "x", "text": "a"}, {"name": "x", "text": "b"}]),
                "assembled section name \"x\" is duplicated",
            ),
            (
                "sections",
                json!([{"name": "x", "text": 1}]),
                "assembled section \"x\" text must be a string",
            ),
            (
                "contexts",
                json!([{"name": "", "text": "x"}]),
                "assembled context names must be non-empty",
            ),
            (
                "contexts",
                json!([{"name": "x", "text": "a"}, {"name": "x", "text": "b"}]),
                "assembled context name \"x\" is duplicated",
            ),
            (
                "contexts",
                json!([{"name": "x", "text": 1}]),
                "assembled context \"x\" text must be a string",
            ),
            (
                "tools",
                json!([{"name": "", "description": "x", "parameters": {}}]),
                "assembled tool names must be non-empty",
            ),
            (
                "variables",
                json!({"Bad": "x"}),
                "assembled variable name \"Bad\" is invalid",
            ),
            (
                "variables",
                json!({"value": 1}),
                "assembled variable \"value\" must be a string or undefined",
            ),
        ];
        for (key, value, message) in cases {
            assert_eq!(with(key, value), message);
        }
        assert!(with("sections", json!(5)).starts_with("the assembly is malformed: "));
        let e =
            checked(json!({"sections": [{"name": "x", "text": "a"}, {"name": "x", "text": "b"}]}))
                .unwrap_err();
        assert_eq!(e.code, INVARIANT);
        assert_eq!(
            e.message,
            "invariant violated by \"@deepseek-ai/dsh-system-prompt\": assembled section name \"x\" is duplicated"
        );
    }

    #[test]
    fn a_listeners_fields_pass_and_its_rendered_forms_are_replaced() {
        let a = check(json!({"sections": [], "note": 1, "system": "stale", "contextSections": 3}))
            .unwrap();
        assert_eq!(a.extra, *json!({"note": 1}).as_object().unwrap());
        assert_eq!(a.system, "");
    }
}
