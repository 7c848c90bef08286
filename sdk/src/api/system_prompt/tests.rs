//! The types of `systemPrompt` against the JSON its callers send and its
//! provider answers today: the wire does not change.

use serde::de::DeserializeOwned;
use serde_json::json;

use super::*;

fn parse<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn wire(v: impl Serialize) -> String {
    serde_json::to_string(&v).unwrap()
}

#[test]
fn sections_read_what_callers_send() {
    let s: SectionParams = parse(json!({"name": "n", "order": 2, "text": "t", "scope": "a"}));
    assert_eq!(s.order.get(), Some(2.0));
    assert_eq!(s.scope.as_deref(), Some("a"));
    assert_eq!(wire(&s), r#"{"scope":"a","name":"n","order":2,"text":"t"}"#);
    // An order that is not a number still parses: the provider refuses it
    // naming the entry.
    let odd: SectionParams = parse(json!({"name": "odd", "order": "high"}));
    assert_eq!(odd.order.get(), None);
    assert_eq!(odd.order.to_string(), r#""high""#);
    let missing: SectionParams = parse(json!({"name": "n"}));
    assert_eq!(missing.order.get(), None);
    let provided: SectionParams = parse(
        json!({"name": "n", "order": 1, "provider": {"service": "s", "method": "m"}, "complete": true}),
    );
    assert_eq!(
        provided.provider,
        Some(SectionProvider {
            service: "s".into(),
            method: "m".into()
        })
    );
    assert!(provided.complete);
    let e = serde_json::from_value::<SectionParams>(
        json!({"name": "n", "provider": {"service": "s", "method": "m", "x": 1}}),
    )
    .unwrap_err();
    assert!(e.to_string().contains("unknown field `x`"), "{e}");
}

#[test]
fn variables_and_scopes_read_what_callers_send() {
    let v: VariableParams = parse(json!({"name": "cwd", "value": "/w"}));
    assert_eq!(v.value.as_deref(), Some("/w"));
    let null: VariableParams = parse(json!({"name": "cwd", "value": null}));
    assert_eq!(null.value, None);
    assert_eq!(wire(&null), r#"{"name":"cwd","value":null}"#);
    let e = serde_json::from_value::<VariableParams>(json!({"name": "n", "value": 3})).unwrap_err();
    assert!(e.to_string().contains("invalid type"), "{e}");
    assert_eq!(wire(ScopeParams::default()), "{}");
}

#[test]
fn assemble_params_are_what_the_loop_sends() {
    let mut variables = Map::new();
    variables.insert("provider".into(), json!("p"));
    variables.insert("model".into(), Value::Null);
    variables.insert("cwd".into(), json!("/w"));
    let p = AssembleParams {
        scope: Some("a".into()),
        tools: vec![json!({"name": "read"})],
        variables,
        known_tools: None,
    };
    assert_eq!(
        wire(&p),
        r#"{"scope":"a","tools":[{"name":"read"}],"variables":{"provider":"p","model":null,"cwd":"/w"}}"#
    );
    let bare: AssembleParams = parse(json!({}));
    assert_eq!(bare, AssembleParams::default());
    let known: AssembleParams = parse(json!({"knownTools": ["a", "b"]}));
    assert_eq!(known.known_tools, Some(vec!["a".into(), "b".into()]));
}

#[test]
fn an_assembly_reads_the_rendered_forms_and_keeps_added_fields() {
    let a: Assembly = parse(json!({
        "sections": [{"name": "id", "text": "I am"}],
        "contexts": [],
        "tools": [],
        "variables": {"cwd": "/w"},
        "system": "I am",
        "context": "",
        "contextSections": [],
        "note": 1,
    }));
    assert_eq!(a.system, "I am");
    assert_eq!(a.sections[0].name, "id");
    assert_eq!(a.extra.get("note"), Some(&json!(1)));
    assert_eq!(
        wire(&a),
        r#"{"sections":[{"name":"id","text":"I am"}],"contexts":[],"tools":[],"variables":{"cwd":"/w"},"system":"I am","context":"","contextSections":[],"note":1}"#
    );
    let request = ProviderRequest {
        kind: "section".into(),
        name: "n".into(),
        scope: None,
        context: json!({"scope": null}),
    };
    assert_eq!(
        wire(&request),
        r#"{"kind":"section","name":"n","scope":null,"context":{"scope":null}}"#
    );
    assert_eq!(wire(Changed {}), "{}");
}
