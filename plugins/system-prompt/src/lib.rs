//! `system-prompt`: ordered sections, variables (`provider`, `model`, `cwd`)
//! and the `system-prompt/assemble` waterfall (reference dsh-core §6).

use std::cell::RefCell;
use std::rc::Rc;

use dsh_sdk::prelude::*;
use serde::Deserialize;

/// The original's config fields, as users write them (`persona`,
/// `includeHarnessIdentity`).
#[derive(Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    persona: String,
    include_harness_identity: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            persona: String::new(),
            include_harness_identity: true,
        }
    }
}

#[derive(Clone)]
struct Section {
    name: String,
    order: f64,
    text: String,
    owner: u64,
}

type Sections = Rc<RefCell<Vec<Section>>>;

fn interpolate(section: &str, text: &str, vars: &serde_json::Map<String, Value>) -> Result<String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let Some(end) = rest[start + 2..].find("}}") else {
            break;
        };
        out.push_str(&rest[..start]);
        let name = &rest[start + 2..start + 2 + end];
        let valid = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(Error::new("PROMPT", format!("malformed prompt variable reference \"{{{{{name}}}}}\" in section \"{section}\"")));
        }
        match vars.get(name) {
            Some(Value::String(v)) => out.push_str(v),
            Some(_) => {
                return Err(Error::new(
                    "PROMPT",
                    format!("prompt variable \"{{{{{name}}}}}\" has no value for this assembly"),
                ))
            }
            None => {
                let mut known: Vec<&String> = vars.keys().collect();
                known.sort();
                let list = if known.is_empty() {
                    "(none)".into()
                } else {
                    known
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(Error::new("PROMPT", format!("unknown prompt variable \"{{{{{name}}}}}\" in section \"{section}\"; registered variables: {list}")));
            }
        }
        rest = &rest[start + 2 + end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `renderPrompt(assembly)`: each section interpolated with the assembly's
/// variables, empty ones dropped, joined by blank lines.
fn render(assembly: &Value) -> Result<String> {
    let vars = assembly["variables"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut parts = Vec::new();
    for s in assembly["sections"].as_array().into_iter().flatten() {
        let name = s["name"].as_str().unwrap_or_default();
        let text = interpolate(name, s["text"].as_str().unwrap_or_default(), &vars)?;
        if !text.trim().is_empty() {
            parts.push(text);
        }
    }
    Ok(parts.join("\n\n"))
}

async fn handle(ctx: Context, sections: Sections, req: Request) -> Result<Reply> {
    match req.method.as_str() {
        "section" => {
            let name = req.params["name"].as_str().unwrap_or_default().to_owned();
            // A missing or non-numeric order is refused, not read as 0.
            let order = req.params["order"].as_f64().unwrap_or(f64::NAN);
            if name.is_empty() || !order.is_finite() {
                return Err(Error::new(
                    codes::INVALID_PAYLOAD,
                    "a section needs a name and a finite order",
                ));
            }
            if sections.borrow().iter().any(|s| s.name == name) {
                return Err(Error::new(
                    "DUPLICATE_SECTION",
                    format!("prompt section \"{name}\" is already registered"),
                ));
            }
            let owner = req.caller;
            sections.borrow_mut().push(Section {
                name,
                order,
                text: req.params["text"].as_str().unwrap_or_default().to_owned(),
                owner,
            });
            let (s2, ctx2) = (sections.clone(), ctx.clone());
            req.on_caller_gone(move || {
                s2.borrow_mut().retain(|s| s.owner != owner);
                let _ = ctx2.emit("system-prompt/change", json!({}));
            });
            ctx.emit("system-prompt/change", json!({}))?;
            Ok(Value::Null.into())
        }
        "assemble" => {
            let vars = req.params["variables"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            let mut list = sections.borrow().clone();
            list.sort_by(|a, b| a.order.total_cmp(&b.order));
            let raw: Vec<Value> = list
                .iter()
                .map(|s| json!({"name": s.name, "text": s.text}))
                .collect();
            let assembly =
                json!({"sections": raw, "tools": req.params["tools"].clone(), "variables": vars});
            let mut d = ctx.dispatch("system-prompt/assemble");
            if let Some(scope) = req.params["scope"].as_str() {
                d = d.scope(scope);
            }
            // The waterfall's result is authoritative, its variables
            // included: the prompt is rendered from it (reference §6.2–6.3).
            let mut assembly = d.waterfall(assembly, |a| async move { Ok(a) }).await?;
            assembly["system"] = json!(render(&assembly)?);
            Ok(assembly.into())
        }
        _ => Err(req.unknown_method()),
    }
}

struct SystemPrompt;

impl Plugin for SystemPrompt {
    const NAME: &'static str = "system-prompt";
    const DESCRIPTION: &'static str = "prompt assembly (service `systemPrompt`)";
    const PROVIDES: &'static [&'static str] = &["systemPrompt"];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let sections: Sections = Rc::default();
        if config.include_harness_identity {
            sections.borrow_mut().push(Section {
                name: "harness:identity".into(),
                order: -100.0,
                text: "You are an AI agent powered by DeepSeek Harness.".into(),
                owner: 0,
            });
        }
        sections.borrow_mut().push(Section {
            name: "deployment:persona".into(),
            order: 0.0,
            text: config.persona,
            owner: 0,
        });
        let ctx2 = ctx.clone();
        ctx.provide("systemPrompt", move |req| {
            handle(ctx2.clone(), sections.clone(), req)
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(SystemPrompt);

#[cfg(test)]
mod tests {
    use super::interpolate;
    use serde_json::{json, Map, Value};

    fn vars(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn variables_are_substituted_and_values_never_rescanned() {
        let v = vars(json!({"model": "ds", "cwd": "{{model}}"}));
        assert_eq!(
            interpolate("s", "m={{model}} at {{cwd}}", &v).unwrap(),
            "m=ds at {{model}}"
        );
    }

    #[test]
    fn a_lone_opening_brace_pair_is_literal() {
        let v = vars(json!({"model": "ds"}));
        assert_eq!(
            interpolate("s", "{{model}} then {{ open", &v).unwrap(),
            "ds then {{ open"
        );
    }

    #[test]
    fn a_malformed_reference_is_an_error_naming_the_section() {
        let e = interpolate("intro", "{{Bad-Name}}", &vars(json!({}))).unwrap_err();
        assert_eq!(
            e.message,
            "malformed prompt variable reference \"{{Bad-Name}}\" in section \"intro\""
        );
    }

    #[test]
    fn an_unknown_variable_lists_the_registered_ones() {
        let e = interpolate("intro", "{{nope}}", &vars(json!({"b": "1", "a": "2"}))).unwrap_err();
        assert_eq!(
            e.message,
            "unknown prompt variable \"{{nope}}\" in section \"intro\"; registered variables: a, b"
        );
        let e = interpolate("intro", "{{nope}}", &vars(json!({}))).unwrap_err();
        assert!(e.message.ends_with("registered variables: (none)"), "{e}");
    }

    #[test]
    fn prototype_names_are_unknown_variables() {
        let e = interpolate("s", "{{constructor}}", &vars(json!({}))).unwrap_err();
        assert!(
            e.message
                .starts_with("unknown prompt variable \"{{constructor}}\""),
            "{e}"
        );
    }

    #[test]
    fn a_variable_without_a_value_is_an_error() {
        let e = interpolate("s", "{{model}}", &vars(json!({"model": null}))).unwrap_err();
        assert!(
            e.message
                .starts_with("prompt variable \"{{model}}\" has no value for this assembly"),
            "{e}"
        );
    }
}
