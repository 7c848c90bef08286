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
    assert_eq!(d["name"], "sample");
    assert_eq!(d["description"], "A sample.");
    assert_eq!(d["parallel"], true);
    assert_eq!(d["parameters"], parameters::<Sample>());
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
