//! Typed tool arguments (issue 9, "tool parameters are a derive struct"):
//! the schemas the model receives are derived from each tool's argument
//! type and equal the original's, and arguments of the wrong type come back
//! as an `INVALID_ARGS` tool result naming the field, whether the
//! registry's schema check or the tool's own typed parse refuses them.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_testkit::agent::{core_host, events, new_agent, of_type, turn};
use dsh_testkit::fake_llm::{text, tool_calls, FakeLlm};
use dsh_testkit::tools::{run, text_of};
use dsh_testkit::{TempDir, TestHost};
use serde_json::{json, Value};

const TODO_ROW: &str = "[[row]]\nid = \"tool-todo\"\nplugin = \"tool-todo\"\n";

/// The core host plus `todo_write`.
async fn agent_host() -> (TestHost, FakeLlm) {
    core_host(|rows| rows + TODO_ROW).await
}

/// The `function` the model was offered as tool `name` in `request`.
fn offered<'a>(request: &'a Value, name: &str) -> &'a Value {
    request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["function"])
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name} in {}", request["tools"]))
}

#[tokio::test]
async fn the_model_receives_the_derived_schemas_of_read_bash_and_todo_write() {
    let (t, fake) = agent_host().await;
    fake.push([text("ok")]);
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(turn(&t, &agent, "hi").await, json!({"kind": "completed"}));
    let request = &fake.requests()[0];

    let read = offered(request, "read");
    assert_eq!(
        read["description"],
        "Read a UTF-8 text file and return line-numbered content."
    );
    assert_eq!(
        read["parameters"],
        json!({"type": "object", "properties": {
            "file_path": {"type": "string", "description": "Path to read, resolved by the filesystem backend."},
            "offset": {"type": "number", "description": "1-based first line to return. Defaults to 1."},
            "limit": {"type": "number", "description": "Maximum number of lines to return. Defaults to 2000."}
        }, "required": ["file_path"]})
    );

    assert_eq!(
        offered(request, "bash")["parameters"],
        json!({"type": "object", "properties": {
            "command": {"type": "string", "description": "The bash command to run."},
            "description": {"type": "string", "description": "A 5-10 word active-voice summary of what the command does, for the UI."},
            "timeoutMs": {"type": "number", "description": "Timeout in milliseconds. Defaults to 120000; at most 600000."},
            "workdir": {"type": "string", "description": "Working directory. Defaults to the session workspace; a relative path resolves against it."},
            "run_in_background": {"type": "boolean", "description": "Run as a background job and return its id at once. No timeout applies."}
        }, "required": ["command", "description"]})
    );

    assert_eq!(
        offered(request, "todo_write")["parameters"],
        json!({"type": "object", "properties": {"todos": {"type": "array", "items": {
            "type": "object", "additionalProperties": false,
            "properties": {
                "content": {"type": "string"},
                "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}
            },
            "required": ["content", "status"]
        }}}, "required": ["todos"]})
    );
    assert_eq!(
        offered(request, "job_list")["parameters"],
        json!({"type": "object", "properties": {}})
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_wrong_type_for_a_read_field_comes_back_to_the_model_as_invalid_args_naming_it() {
    let (t, fake) = agent_host().await;
    let ws = TempDir::new("typed-read");
    std::fs::write(ws.path().join("a.txt"), "one\n").unwrap();
    fake.push([
        tool_calls(&[("read", json!({"file_path": "a.txt", "offset": "x"}))]),
        text("ok"),
    ]);
    let agent = new_agent(&t, ws.path().to_str().unwrap()).await;
    assert_eq!(turn(&t, &agent, "read").await, json!({"kind": "completed"}));
    let ev = events(&t, &agent).await;
    let results = of_type(&ev, "tool/result");
    assert_eq!(results.len(), 1, "{results:?}");
    let result = &results[0]["data"];
    assert_eq!(result["error"]["code"], "INVALID_ARGS", "{result}");
    assert_eq!(
        fake.tool_results_of_last_request(),
        ["Error: invalid arguments: offset: expected number"]
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_read_offset_the_schema_admits_but_the_type_refuses_is_invalid_args_naming_it() {
    let t = dsh_testkit::tools::host("workspace-write", "").await;
    let ws = TempDir::new("typed-read-offset");
    std::fs::write(ws.path().join("a.txt"), "one\ntwo\n").unwrap();
    // A JSON number, so the registry's schema check passes; not a line
    // number, so the tool's typed parse refuses it (the original requires
    // a positive integer too).
    for (offset, why) in [
        (
            json!(1.5),
            "invalid type: floating point `1.5`, expected u64",
        ),
        (json!(-3), "invalid value: integer `-3`, expected u64"),
    ] {
        let r = run(
            &t,
            ws.path(),
            "read",
            json!({"file_path": "a.txt", "offset": offset}),
        )
        .await;
        assert_eq!(r["isError"], true, "{r}");
        assert_eq!(r["error"]["info"]["code"], "INVALID_ARGS", "{r}");
        assert_eq!(
            text_of(&r),
            format!("Error: invalid arguments: offset: {why}")
        );
    }
    // A well-typed call still reads.
    let r = run(
        &t,
        ws.path(),
        "read",
        json!({"file_path": "a.txt", "offset": 2, "future": {"x": 1}}),
    )
    .await;
    assert!(text_of(&r).contains("2: two"), "{r}");
    t.shutdown().await;
}

#[tokio::test]
async fn todo_items_keep_keys_the_schema_does_not_name() {
    let t = dsh_testkit::tools::host("workspace-write", "").await;
    let ws = TempDir::new("typed-todo");
    t.call("sessions", "create", json!({"id": "agent-1"})).await;
    t.call(
        "sessions",
        "append",
        json!({"id": "agent-1", "type": "turn/start", "data": {"turn": 1}}),
    )
    .await;
    let todos = json!([{"content": "a", "status": "pending", "priority": "high"}]);
    let r = run(&t, ws.path(), "todo_write", json!({"todos": todos})).await;
    assert_eq!(
        text_of(&r),
        "Updated todo list: 1 pending, 0 in progress, 0 completed.",
        "{r}"
    );
    let ev = t.call("sessions", "events", json!({"id": "agent-1"})).await;
    let written = ev
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "todo/write")
        .unwrap();
    assert_eq!(written["data"]["todos"], todos);
    t.shutdown().await;
}
