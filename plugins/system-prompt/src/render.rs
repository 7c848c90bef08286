//! Rendering an assembly: `{{variable}}` interpolation, the system prompt
//! (`renderPrompt`: the sections rendered, joined) and the runtime-context
//! snapshot (`joinContextSections`).

use dsh_sdk::api::system_prompt::{Assembly, NamedText};
use dsh_sdk::prelude::*;
use serde_json::{Map, Value};

/// A render failure (malformed, unknown or valueless variable).
const PROMPT: &str = "PROMPT";

/// The error of a render failure, or of a provider that answered no text.
pub fn prompt_error(message: String) -> Error {
    Error::new(PROMPT, message)
}

/// Whether `name` is a variable name a `{{name}}` reference can spell
/// (`[a-z][a-z0-9_]*`).
pub fn valid_variable_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Interpolates one section's or context's (`kind`) text with the
/// assembly's variables (a string, or null for "no value here");
/// diagnostics name the input.
pub fn interpolate(
    kind: &str,
    input: &str,
    text: &str,
    vars: &Map<String, Value>,
) -> Result<String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let Some(end) = rest[start + 2..].find("}}") else {
            break;
        };
        out.push_str(&rest[..start]);
        let name = &rest[start + 2..start + 2 + end];
        if !valid_variable_name(name) {
            return Err(prompt_error(format!(
                "malformed prompt variable reference \"{{{{{name}}}}}\" in {kind} \"{input}\""
            )));
        }
        match vars.get(name) {
            Some(Value::String(v)) => out.push_str(v),
            Some(_) => {
                return Err(prompt_error(format!("prompt variable \"{{{{{name}}}}}\" has no value for this assembly ({kind} \"{input}\")")))
            }
            None => {
                let mut known: Vec<&str> = vars.keys().map(String::as_str).collect();
                known.sort_unstable();
                let list = if known.is_empty() {
                    "(none)".to_owned()
                } else {
                    known.join(", ")
                };
                return Err(prompt_error(format!("unknown prompt variable \"{{{{{name}}}}}\" in {kind} \"{input}\"; registered variables: {list}")));
            }
        }
        rest = &rest[start + 2 + end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Each entry of `list` (`section`s or `context`s) rendered, those that
/// render to something.
fn render_each(
    kind: &str,
    list: &[NamedText],
    vars: &Map<String, Value>,
) -> Result<Vec<NamedText>> {
    let mut parts = Vec::new();
    for s in list {
        let text = interpolate(kind, &s.name, &s.text, vars)?;
        if !text.trim().is_empty() {
            parts.push(NamedText {
                name: s.name.clone(),
                text,
            });
        }
    }
    Ok(parts)
}

/// The model-facing runtime-context snapshot (`joinContextSections`), `""`
/// when no context is active.
fn join_context_sections(sections: &[NamedText]) -> String {
    if sections.is_empty() {
        return String::new();
    }
    let body: Vec<&str> = sections.iter().map(|s| s.text.as_str()).collect();
    format!(
        "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\n\n{}",
        body.join("\n\n")
    )
}

/// Adds the rendered forms to an assembly: `system` (`renderPrompt`),
/// `context` (the runtime-context snapshot) and `contextSections` (its named
/// parts).
pub fn render(assembly: &mut Assembly) -> Result<()> {
    let sections = render_each("section", &assembly.sections, &assembly.variables)?;
    let contexts = render_each("context", &assembly.contexts, &assembly.variables)?;
    let system: Vec<&str> = sections.iter().map(|s| s.text.as_str()).collect();
    assembly.system = system.join("\n\n");
    assembly.context = join_context_sections(&contexts);
    assembly.context_sections = contexts;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn variables_are_substituted_and_values_never_rescanned() {
        let v = vars(json!({"model": "ds", "cwd": "{{model}}"}));
        assert_eq!(
            interpolate("section", "s", "m={{model}} at {{cwd}}", &v).unwrap(),
            "m=ds at {{model}}"
        );
    }

    #[test]
    fn a_lone_opening_brace_pair_is_literal() {
        let v = vars(json!({"model": "ds"}));
        assert_eq!(
            interpolate("section", "s", "{{model}} then {{ open", &v).unwrap(),
            "ds then {{ open"
        );
    }

    #[test]
    fn a_malformed_reference_is_an_error_naming_the_section() {
        let e = interpolate("section", "intro", "{{Bad-Name}}", &vars(json!({}))).unwrap_err();
        assert_eq!(
            e.message,
            "malformed prompt variable reference \"{{Bad-Name}}\" in section \"intro\""
        );
    }

    #[test]
    fn an_unknown_variable_lists_the_registered_ones() {
        let e = interpolate(
            "section",
            "intro",
            "{{nope}}",
            &vars(json!({"b": "1", "a": "2"})),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "unknown prompt variable \"{{nope}}\" in section \"intro\"; registered variables: a, b"
        );
        let e = interpolate("section", "intro", "{{nope}}", &vars(json!({}))).unwrap_err();
        assert!(e.message.ends_with("registered variables: (none)"), "{e}");
    }

    #[test]
    fn prototype_names_are_unknown_variables() {
        let e = interpolate("section", "s", "{{constructor}}", &vars(json!({}))).unwrap_err();
        assert!(
            e.message
                .starts_with("unknown prompt variable \"{{constructor}}\""),
            "{e}"
        );
    }

    #[test]
    fn a_variable_without_a_value_is_an_error() {
        let e =
            interpolate("section", "s", "{{model}}", &vars(json!({"model": null}))).unwrap_err();
        assert!(
            e.message
                .starts_with("prompt variable \"{{model}}\" has no value for this assembly"),
            "{e}"
        );
    }

    #[test]
    fn rendering_joins_the_sections_and_frames_the_contexts() {
        let text = |name: &str, text: &str| NamedText {
            name: name.into(),
            text: text.into(),
        };
        let mut a = Assembly {
            sections: vec![text("a", "one {{x}}"), text("b", "  "), text("c", "two")],
            contexts: vec![text("p", "policy")],
            variables: vars(json!({"x": "1"})),
            ..Assembly::default()
        };
        render(&mut a).unwrap();
        assert_eq!(a.system, "one 1\n\ntwo");
        assert_eq!(
            a.context,
            "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\n\npolicy"
        );
        assert_eq!(a.context_sections, [text("p", "policy")]);
        a.contexts.clear();
        render(&mut a).unwrap();
        assert_eq!((a.context.as_str(), a.context_sections.len()), ("", 0));
    }
}
