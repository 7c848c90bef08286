//! The configured tool order (`toolOrder`): validated when the row is
//! applied, then applied to each assembly's tools (`orderTools`).
//!
//! Tool schemas stay JSON here: they are the `tools` service's, open to the
//! fields their providers and `system-prompt/assemble` listeners write; only
//! their `name` is read.

use dsh_sdk::prelude::*;
use serde_json::Value;

/// The reserved `toolOrder` entry where unlisted tools are inserted,
/// lexicographically.
pub const TOOL_ORDER_REST: &str = "<unlisted-tools>";

/// `toolOrder` names a tool no provider knows, or a tool is named
/// `<unlisted-tools>`.
const TOOL_ORDER: &str = "TOOL_ORDER";

/// `validateToolOrder`: no duplicates, the rest entry present. Listed names
/// are checked at assembly, when the tools are known.
pub fn validate_tool_order(order: &[String]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for name in order {
        if !seen.insert(name.as_str()) {
            return Err(Error::new(
                codes::INVALID_CONFIG,
                format!("toolOrder lists \"{name}\" more than once"),
            ));
        }
    }
    if !seen.contains(TOOL_ORDER_REST) {
        return Err(Error::new(
            codes::INVALID_CONFIG,
            format!("toolOrder must contain the \"{TOOL_ORDER_REST}\" rest entry (where unlisted tools are inserted)"),
        ));
    }
    Ok(())
}

/// A schema's `name`; a schema without a string name has the empty one,
/// which the assembly check refuses ("assembled tool names must be
/// non-empty").
pub fn tool_name(tool: &Value) -> &str {
    tool.get("name").and_then(Value::as_str).unwrap_or("")
}

/// `orderTools`: lexicographic by name (stable), or the configured order
/// with the unlisted tools, sorted, at the rest entry. A listed name no
/// provider knows fails the assembly; a known one may be absent.
pub fn order_tools(
    mut tools: Vec<Value>,
    order: Option<&[String]>,
    known: &[String],
) -> Result<Vec<Value>> {
    if tools.iter().any(|t| tool_name(t) == TOOL_ORDER_REST) {
        return Err(Error::new(
            TOOL_ORDER,
            format!("tool provider returned reserved tool name \"{TOOL_ORDER_REST}\" (reserved for toolOrder's rest entry)"),
        ));
    }
    tools.sort_by(|a, b| tool_name(a).cmp(tool_name(b)));
    let Some(order) = order else {
        return Ok(tools);
    };
    let unknown: Vec<String> = order
        .iter()
        .filter(|n| n.as_str() != TOOL_ORDER_REST && !known.contains(n))
        .map(|n| format!("\"{n}\""))
        .collect();
    if !unknown.is_empty() {
        let mut names: Vec<&str> = known.iter().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        let names = if names.is_empty() {
            "(none)".to_owned()
        } else {
            names.join(", ")
        };
        let plural = if unknown.len() > 1 { "s" } else { "" };
        return Err(Error::new(
            TOOL_ORDER,
            format!(
                "toolOrder lists unregistered tool{plural} {}; known tools: {names}",
                unknown.join(", ")
            ),
        ));
    }
    let mut out = Vec::with_capacity(tools.len());
    for name in order {
        if name == TOOL_ORDER_REST {
            out.extend(
                tools
                    .iter()
                    .filter(|t| !order.iter().any(|n| n == tool_name(t)))
                    .cloned(),
            );
        } else {
            out.extend(tools.iter().filter(|t| tool_name(t) == name).cloned());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools(names: &[&str]) -> Vec<Value> {
        names.iter().map(|n| json!({"name": n})).collect()
    }

    fn names(tools: &[Value]) -> Vec<&str> {
        tools.iter().map(tool_name).collect()
    }

    fn order(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn without_a_tool_order_tools_are_lexicographic_whatever_the_registration_order() {
        let known = order(&["read", "bash", "edit"]);
        let a = order_tools(tools(&["read", "bash", "edit"]), None, &known).unwrap();
        let b = order_tools(tools(&["edit", "read", "bash"]), None, &known).unwrap();
        assert_eq!(names(&a), ["bash", "edit", "read"]);
        assert_eq!(names(&a), names(&b));
    }

    #[test]
    fn a_tool_order_places_listed_tools_and_the_rest_sorted_at_the_rest_entry() {
        let all = ["write", "read", "glob", "bash", "edit"];
        let cfg = order(&["read", TOOL_ORDER_REST, "bash"]);
        let out = order_tools(tools(&all), Some(&cfg), &order(&all)).unwrap();
        assert_eq!(names(&out), ["read", "edit", "glob", "write", "bash"]);
    }

    #[test]
    fn a_listed_tool_no_provider_knows_rejects_the_assembly_a_known_absent_one_does_not() {
        let cfg = order(&["read", "nope", TOOL_ORDER_REST, "typo"]);
        let e = order_tools(tools(&["read"]), Some(&cfg), &order(&["read"])).unwrap_err();
        assert_eq!(e.code, "TOOL_ORDER");
        assert_eq!(
            e.message,
            "toolOrder lists unregistered tools \"nope\", \"typo\"; known tools: read"
        );
        let cfg = order(&["read", TOOL_ORDER_REST]);
        let e = order_tools(Vec::new(), Some(&cfg), &[]).unwrap_err();
        assert_eq!(
            e.message,
            "toolOrder lists unregistered tool \"read\"; known tools: (none)"
        );
        // Known but hidden from this assembly: a normal absence.
        let out = order_tools(tools(&["bash"]), Some(&cfg), &order(&["read", "bash"])).unwrap();
        assert_eq!(names(&out), ["bash"]);
    }

    #[test]
    fn a_tool_named_like_the_rest_entry_rejects_the_assembly() {
        let e = order_tools(tools(&[TOOL_ORDER_REST]), None, &[]).unwrap_err();
        assert_eq!(
            e.message,
            "tool provider returned reserved tool name \"<unlisted-tools>\" (reserved for toolOrder's rest entry)"
        );
    }

    #[test]
    fn a_tool_order_needs_the_rest_entry_once_and_no_duplicates() {
        let e = validate_tool_order(&order(&["bash"])).unwrap_err();
        assert_eq!(e.code, dsh_sdk::codes::INVALID_CONFIG);
        assert_eq!(
            e.message,
            "toolOrder must contain the \"<unlisted-tools>\" rest entry (where unlisted tools are inserted)"
        );
        let e = validate_tool_order(&order(&["bash", TOOL_ORDER_REST, "bash"])).unwrap_err();
        assert_eq!(e.message, "toolOrder lists \"bash\" more than once");
        validate_tool_order(&order(&[TOOL_ORDER_REST])).unwrap();
    }
}
