//! The types of `commands` against the JSON of the original's contract
//! (`packages/interaction/commands/src/types.ts`) and the line parser
//! against its `parseCommand`.

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::*;
use crate::api::permission::{preset, preset_name, ApprovalPolicy, PresetReply, SetPresetParams};
use crate::fence::Mode;

fn parse_json<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn wire(v: impl Serialize) -> String {
    serde_json::to_string(&v).unwrap()
}

#[test]
fn a_line_is_a_command_when_a_name_follows_the_slash_and_ends_at_whitespace() {
    let p = parse("/model deepseek-chat").unwrap();
    assert_eq!((p.name, p.args), ("model", " deepseek-chat"));
    // The arguments keep every byte after the name, separators included.
    assert_eq!(parse("/echo \t a  b ").unwrap().args, " \t a  b ");
    assert_eq!(parse("/echo\nline").unwrap().args, "\nline");
    assert_eq!(
        parse("/help").unwrap(),
        Parsed {
            name: "help",
            args: ""
        }
    );
    assert_eq!(parse("/a_b-9").unwrap().name, "a_b-9");
    for not_a_command in [
        "",
        "/",
        "help",
        " /help",
        "//help",
        "/Help",
        "/9lives",
        "/-x",
        "/help!",
        "/model:x",
        "/é",
        "/help\u{a0}x",
    ] {
        assert_eq!(parse(not_a_command), None, "{not_a_command:?}");
    }
}

#[test]
fn names_are_lowercase_starting_with_a_letter() {
    for ok in ["a", "help", "a1", "x_y", "x-y"] {
        assert!(valid_name(ok), "{ok}");
    }
    for bad in ["", "A", "1a", "_a", "-a", "a b", "a/b", "aé"] {
        assert!(!valid_name(bad), "{bad}");
    }
}

#[test]
fn a_registration_reads_and_writes_the_wire_fields() {
    let raw = json!({"name": "compact", "description": "Compact the history",
                     "input": {"hint": "[focus]"}, "recordInput": false,
                     "service": "command:x:1", "scope": "a1"});
    let p: RegisterParams = parse_json(raw.clone());
    assert_eq!(p.record_input, Some(false));
    assert_eq!(p.input.as_ref().unwrap().hint, "[focus]");
    assert_eq!(serde_json::to_value(&p).unwrap(), raw);
    let bare = RegisterParams::new("help", "List the commands");
    assert_eq!(
        wire(&bare),
        r#"{"name":"help","description":"List the commands","service":""}"#
    );
    let hinted = RegisterParams::new("model", "Switch")
        .with_hint("<name>")
        .scoped("a");
    assert_eq!(
        wire(hinted.descriptor()),
        r#"{"name":"model","description":"Switch","input":{"hint":"<name>"}}"#
    );
    // A missing name or a wrong type is refused.
    assert!(serde_json::from_value::<RegisterParams>(json!({"description": "d"})).is_err());
    assert!(serde_json::from_value::<RegisterParams>(
        json!({"name": "x", "description": "d", "recordInput": "no"})
    )
    .is_err());
}

#[test]
fn list_and_execute_params_name_the_agent() {
    assert_eq!(wire(ListParams { agent: "a".into() }), r#"{"agent":"a"}"#);
    assert_eq!(
        wire(ExecuteParams {
            agent: "a".into(),
            line: "/help".into()
        }),
        r#"{"agent":"a","line":"/help"}"#
    );
    let d: Vec<Descriptor> = parse_json(json!([{"name": "help", "description": "d"}]));
    assert_eq!(d[0].input, None);
}

#[test]
fn results_are_success_or_error_with_optional_text() {
    assert_eq!(
        wire(CommandResult::success("ok")),
        r#"{"kind":"success","text":"ok"}"#
    );
    assert_eq!(
        wire(CommandResult::error("no")),
        r#"{"kind":"error","text":"no"}"#
    );
    let bare: CommandResult = parse_json(json!({"kind": "success"}));
    assert_eq!(wire(&bare), r#"{"kind":"success"}"#);
    let sourced: CommandResult = parse_json(json!({"kind": "success", "sourceEventSeq": 4}));
    assert_eq!(sourced.source_event_seq, Some(4));
    assert!(serde_json::from_value::<CommandResult>(json!({"kind": "maybe"})).is_err());
    // An error needs a text; an error's source event is dropped.
    let blank: CommandResult = parse_json(json!({"kind": "error", "text": "  "}));
    assert_eq!(
        blank.checked("x").unwrap_err(),
        "command \"x\" error text must be a non-empty string"
    );
    let untexted: CommandResult = parse_json(json!({"kind": "error"}));
    assert!(untexted.checked("x").is_err());
    let sourced_error: CommandResult =
        parse_json(json!({"kind": "error", "text": "t", "sourceEventSeq": 1}));
    assert_eq!(sourced_error.checked("x").unwrap().source_event_seq, None);
}

#[test]
fn an_execution_pairs_the_command_id_with_the_result() {
    let e = Execution {
        command_id: "cmd-1".into(),
        result: CommandResult::success("hi"),
    };
    assert_eq!(
        wire(&e),
        r#"{"commandId":"cmd-1","result":{"kind":"success","text":"hi"}}"#
    );
    let none: ExecuteReply = parse_json(Value::Null);
    assert_eq!(none, None);
    let some: ExecuteReply = parse_json(serde_json::to_value(&e).unwrap());
    assert_eq!(some, Some(e));
}

#[test]
fn a_run_carries_the_id_agent_name_and_args() {
    let r = RunParams {
        command_id: "cmd-1".into(),
        agent: "a".into(),
        name: "echo".into(),
        args: " x".into(),
    };
    assert_eq!(
        wire(&r),
        r#"{"commandId":"cmd-1","agent":"a","name":"echo","args":" x"}"#
    );
}

#[test]
fn the_lifecycle_events_are_the_originals() {
    let run = CommandRun {
        command_id: "cmd-1".into(),
        name: "echo".into(),
        args: Some(" x".into()),
        source: CommandSource::User,
    };
    assert_eq!(
        wire(&run),
        r#"{"commandId":"cmd-1","name":"echo","args":" x","source":{"kind":"user"}}"#
    );
    let unrecorded = CommandRun { args: None, ..run };
    assert_eq!(
        wire(&unrecorded),
        r#"{"commandId":"cmd-1","name":"echo","source":{"kind":"user"}}"#
    );
    let done = CommandDone::of("cmd-1", &CommandResult::error("bad"));
    assert_eq!(
        wire(&done),
        r#"{"commandId":"cmd-1","kind":"error","text":"bad"}"#
    );
    let back: CommandDone = parse_json(json!({"commandId": "c", "kind": "success"}));
    assert_eq!(back.text, None);
    assert_eq!(wire(CommandsChanged {}), "{}");
}

#[test]
fn permission_presets_are_the_originals() {
    assert_eq!(
        preset("workspace-write"),
        Some((Mode::WorkspaceWrite, ApprovalPolicy::Ask))
    );
    assert_eq!(
        preset("danger-full-access"),
        Some((Mode::DangerFullAccess, ApprovalPolicy::Never))
    );
    assert_eq!(preset("yolo"), None);
    assert_eq!(
        preset_name(Mode::ReadOnly, ApprovalPolicy::Ask),
        Some("read-only")
    );
    assert_eq!(preset_name(Mode::ReadOnly, ApprovalPolicy::Never), None);
    let reply = PresetReply {
        preset: Some("read-only".into()),
        mode: Mode::ReadOnly,
        approval: ApprovalPolicy::Ask,
        presets: vec!["read-only".into()],
    };
    assert_eq!(
        wire(&reply),
        r#"{"preset":"read-only","mode":"read-only","approval":"ask","presets":["read-only"]}"#
    );
    assert_eq!(
        wire(SetPresetParams {
            agent: "a".into(),
            preset: "read-only".into(),
            approval: None,
        }),
        r#"{"agent":"a","preset":"read-only"}"#
    );
}

#[test]
fn the_lifecycle_types_are_known_to_the_log() {
    assert!(crate::vocab::event::is_known(event::COMMAND_RUN));
    assert!(crate::vocab::event::is_known(event::COMMAND_DONE));
}
