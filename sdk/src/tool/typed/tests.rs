use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{args, declaration, parameters, ToolSpec, INVALID_ARGS};

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Status {
    Pending,
    InProgress,
}

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
#[schemars(extend("additionalProperties" = false))]
struct Item {
    content: String,
    status: Status,
}

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Inner {
    /// How deep.
    depth: u32,
}

/// Not sent: the tool's description is `ToolSpec::DESCRIPTION`.
#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Sample {
    /// The file.
    file_path: String,
    /// A line count.
    #[schemars(with = "Option<super::Number>")]
    limit: Option<u64>,
    /// Whether to go on.
    #[serde(default)]
    more: bool,
    /// The items.
    items: Vec<Item>,
    /// Where.
    inner: Option<Inner>,
}

struct SampleTool;

impl ToolSpec for SampleTool {
    const NAME: &'static str = "sample";
    const DESCRIPTION: &'static str = "A sample.";
    const PARALLEL: bool = true;
    type Args = Sample;
}

#[test]
fn the_schema_is_a_plain_inline_object_schema_with_descriptions_from_doc_comments() {
    assert_eq!(
        parameters::<Sample>(),
        json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "The file."},
                "limit": {"type": "number", "description": "A line count."},
                "more": {"type": "boolean", "description": "Whether to go on.", "default": false},
                "items": {"type": "array", "description": "The items.", "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string"},
                        "status": {"type": "string", "enum": ["pending", "in_progress"]}
                    },
                    "required": ["content", "status"],
                    "additionalProperties": false
                }},
                "inner": {"type": "object", "description": "Where.", "properties": {
                    "depth": {"type": "integer", "format": "uint32", "minimum": 0, "description": "How deep."}
                }, "required": ["depth"]}
            },
            "required": ["file_path", "items"]
        })
    );
}

#[test]
fn a_declaration_carries_name_description_parameters_and_parallel() {
    let d = declaration::<SampleTool>();
    assert_eq!(
        (d.name.as_str(), d.description.as_str(), d.parallel),
        ("sample", "A sample.", true)
    );
    assert_eq!(d.parameters, parameters::<Sample>());
    // As the registry receives it once `register_tools` names the service.
    let wire = serde_json::to_value(&d).unwrap();
    assert_eq!(
        wire,
        json!({"name": "sample", "description": "A sample.",
               "parameters": parameters::<Sample>(), "service": "", "parallel": true})
    );
}

#[test]
fn an_empty_struct_is_an_object_with_no_properties() {
    #[derive(Deserialize, JsonSchema)]
    struct Nothing {}
    assert_eq!(
        parameters::<Nothing>(),
        json!({"type": "object", "properties": {}})
    );
}

#[test]
fn a_wrong_type_is_invalid_args_naming_the_field() {
    let e = args::<Sample>(&json!({"file_path": "a", "limit": "x", "items": []})).unwrap_err();
    assert_eq!(e.code, INVALID_ARGS);
    assert_eq!(
        e.message,
        "invalid arguments: limit: invalid type: string \"x\", expected u64"
    );
}

#[test]
fn a_nested_mismatch_names_its_path() {
    let e = args::<Sample>(&json!({"file_path": "a", "items": [
        {"content": "c", "status": "pending"},
        {"content": "c", "status": "done"}
    ]}))
    .unwrap_err();
    assert_eq!(e.code, INVALID_ARGS);
    assert!(
        e.message
            .starts_with("invalid arguments: items[1].status: unknown variant `done`"),
        "{}",
        e.message
    );
}

#[test]
fn a_missing_required_field_is_invalid_args_naming_it() {
    let e = args::<Sample>(&json!({"items": []})).unwrap_err();
    assert_eq!(e.code, INVALID_ARGS);
    assert_eq!(e.message, "invalid arguments: missing field `file_path`");
}

#[test]
fn unknown_fields_are_ignored_and_defaults_apply() {
    let a = args::<Sample>(&json!({"file_path": "a", "items": [], "future": {"x": 1}})).unwrap();
    assert_eq!(
        a,
        Sample {
            file_path: "a".into(),
            limit: None,
            more: false,
            items: vec![],
            inner: None
        }
    );
}

#[test]
fn null_arguments_parse_as_an_empty_object() {
    #[derive(Debug, Deserialize, PartialEq)]
    struct Optional {
        wait: Option<bool>,
    }
    assert_eq!(
        args::<Optional>(&serde_json::Value::Null).unwrap(),
        Optional { wait: None }
    );
}

// The original's `defineTool` parameter DSL compiled to JSON Schema
// (reference dsh-core §5.1, tools.spec and properties/schema.spec): here the
// derive of one Rust type is the DSL, and `parameters` its compile rules.

#[derive(Debug, Deserialize, serde::Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Fast,
    Careful,
}

fn careful() -> Mode {
    Mode::Careful
}

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Documented {
    /// Not started.
    Pending,
    /// Being done.
    InProgress,
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Shapes {
    #[serde(default = "careful")]
    mode: Mode,
    #[serde(default)]
    retries: u32,
    optional_mode: Option<Status>,
    step: Documented,
    grid: Vec<Vec<String>>,
    tags: Option<Vec<String>>,
    env: std::collections::BTreeMap<String, String>,
}

#[test]
fn defaults_enums_and_nested_items_compile_into_the_schema() {
    assert_eq!(
        parameters::<Shapes>(),
        json!({
            "type": "object",
            "properties": {
                "mode": {"type": "string", "enum": ["fast", "careful"], "default": "careful"},
                "retries": {"type": "integer", "format": "uint32", "minimum": 0, "default": 0},
                "optional_mode": {"type": "string", "enum": ["pending", "in_progress"]},
                "step": {"oneOf": [
                    {"type": "string", "const": "pending", "description": "Not started."},
                    {"type": "string", "const": "in_progress", "description": "Being done."}
                ]},
                "grid": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
                "tags": {"type": "array", "items": {"type": "string"}},
                "env": {"type": "object", "additionalProperties": {"type": "string"}}
            },
            "required": ["step", "grid", "env"]
        })
    );
}

#[test]
fn an_optional_enum_offers_only_its_variants() {
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Filter {
        status: Option<Status>,
    }
    assert_eq!(
        parameters::<Filter>()["properties"]["status"],
        json!({"type": "string", "enum": ["pending", "in_progress"]})
    );
    // `null` still parses, as "not given".
    #[derive(Debug, Deserialize, PartialEq)]
    struct Parsed {
        status: Option<Status>,
    }
    assert_eq!(
        args::<Parsed>(&json!({"status": null})).unwrap(),
        Parsed { status: None }
    );
}

#[test]
fn a_struct_of_optional_fields_has_no_required_array() {
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct AllOptional {
        a: Option<String>,
        #[serde(default)]
        b: bool,
    }
    assert_eq!(
        parameters::<AllOptional>(),
        json!({"type": "object", "properties": {
            "a": {"type": "string"},
            "b": {"type": "boolean", "default": false}
        }})
    );
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Node {
    name: String,
    children: Vec<Node>,
}

#[test]
fn a_recursive_type_keeps_the_definition_its_reference_names() {
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Tree {
        root: Node,
    }
    let schema = parameters::<Tree>();
    assert_eq!(
        schema["properties"]["root"]["properties"]["children"]["items"],
        json!({"$ref": "#/definitions/Node"})
    );
    assert_eq!(
        schema["definitions"]["Node"]["required"],
        json!(["name", "children"])
    );
    assert_model_ready("Tree", &schema);
}

/// Every `$ref` in `schema` resolves inside it; the root is an open or
/// closed object schema with `properties` and no `$schema`/`title`; no
/// property offers `null` (by `type`, `anyOf` or `enum`).
fn assert_model_ready(name: &str, schema: &serde_json::Value) {
    use serde_json::Value;
    assert_eq!(schema["type"], "object", "{name}: {schema}");
    assert!(schema["properties"].is_object(), "{name}: {schema}");
    for key in ["$schema", "title", "description"] {
        assert!(schema.get(key).is_none(), "{name}: `{key}` in {schema}");
    }
    fn walk(root: &Value, at: &Value, name: &str) {
        match at {
            Value::Object(o) => {
                if let Some(r) = o.get("$ref").and_then(Value::as_str) {
                    let target = r.strip_prefix('#').and_then(|p| {
                        if p.is_empty() {
                            Some(root)
                        } else {
                            root.pointer(p)
                        }
                    });
                    assert!(target.is_some(), "{name}: dangling `$ref` {r} in {root}");
                }
                if let Some(Value::Object(props)) = o.get("properties") {
                    for (key, p) in props {
                        let offers_null = p["type"] == "null"
                            || p["type"]
                                .as_array()
                                .is_some_and(|t| t.contains(&json!("null")))
                            || p["enum"]
                                .as_array()
                                .is_some_and(|e| e.contains(&Value::Null))
                            || p["anyOf"]
                                .as_array()
                                .is_some_and(|a| a.contains(&json!({"type": "null"})));
                        assert!(!offers_null, "{name}: `{key}` offers null: {p}");
                    }
                }
                o.values().for_each(|v| walk(root, v, name));
            }
            Value::Array(a) => a.iter().for_each(|v| walk(root, v, name)),
            _ => {}
        }
    }
    walk(schema, schema, name);
}

#[test]
fn every_argument_type_compiles_to_a_model_ready_object_schema() {
    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Closed {
        a: String,
    }
    #[derive(Deserialize, JsonSchema)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    #[allow(dead_code)]
    enum Op {
        Add { n: u32 },
        Clear,
    }
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Ops {
        op: Op,
        then: Option<Op>,
        pair: (u32, Option<String>),
    }
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Flattened {
        #[serde(flatten)]
        inner: Inner,
        more: Option<bool>,
    }
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Nested {
        /// A chain of itself.
        next: Option<Box<Nested>>,
        forest: Option<Vec<Node>>,
    }
    #[derive(Deserialize, JsonSchema)]
    struct Nothing {}
    let schemas = [
        ("Sample", parameters::<Sample>()),
        ("Shapes", parameters::<Shapes>()),
        ("Nothing", parameters::<Nothing>()),
        ("Closed", parameters::<Closed>()),
        ("Ops", parameters::<Ops>()),
        ("Flattened", parameters::<Flattened>()),
        ("Nested", parameters::<Nested>()),
    ];
    for (name, schema) in &schemas {
        assert_model_ready(name, schema);
    }
    // The root is open unless the type denies unknown fields, and then the
    // parsing refuses them too.
    assert!(parameters::<Sample>().get("additionalProperties").is_none());
    assert_eq!(parameters::<Closed>()["additionalProperties"], false);
    let e = match args::<Closed>(&json!({"a": "x", "b": 1})) {
        Ok(_) => panic!("an unknown field of a closed type parsed"),
        Err(e) => e,
    };
    assert_eq!(e.code, INVALID_ARGS);
    assert!(e.message.contains("unknown field `b`"), "{}", e.message);
}
