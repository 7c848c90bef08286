//! The types of `tools` against the JSON its callers send, its provider
//! answers and its listeners hand on today: the wire does not change.

use serde::de::DeserializeOwned;
use serde_json::json;

use super::*;
use crate::fence::Mode;

fn parse<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn wire(v: impl Serialize) -> String {
    serde_json::to_string(&v).unwrap()
}

#[test]
fn an_exec_reads_what_the_agent_loop_sends_and_writes_it_back() {
    let raw = json!({"callId": "c1", "name": "read", "arguments": {"file_path": "a"},
                     "agent": "a1", "cwd": "/w"});
    let exec: Exec = parse(raw.clone());
    assert_eq!(
        (
            exec.call_id(),
            exec.name.as_str(),
            exec.agent(),
            exec.cwd_or(".")
        ),
        ("c1", "read", "a1", "/w")
    );
    assert_eq!(exec.key(), ("a1".to_owned(), "c1".to_owned()));
    assert_eq!(
        wire(&exec),
        r#"{"callId":"c1","name":"read","arguments":{"file_path":"a"},"agent":"a1","cwd":"/w"}"#
    );
    assert_eq!(serde_json::to_value(&exec).unwrap(), raw);
    // Absent and null read alike; nothing absent is written.
    let bare: Exec = parse(json!({"name": null, "agent": null}));
    assert_eq!(bare, Exec::default());
    assert_eq!((bare.agent(), bare.cwd_or(".")), ("", "."));
    assert_eq!(wire(Exec::default()), r#"{"name":""}"#);
}

#[test]
fn an_exec_keeps_the_pipelines_fields_and_those_of_others() {
    let fence = json!({"mode": "workspace-write", "root": "/w", "writable": ["/w", "/tmp"],
                       "protected": ["/h"]});
    let raw = json!({"callId": "c", "name": "write", "arguments": {}, "agent": "a", "cwd": "/w",
                     "token": "t-1", "sandbox": fence, "approved": true, "cancelled": true,
                     "subagent": {"depth": 1}});
    let exec: Exec = parse(raw.clone());
    let sandbox = exec.sandbox.as_ref().unwrap();
    assert_eq!(sandbox.mode, Mode::WorkspaceWrite);
    assert_eq!(sandbox.protected, [PathBuf::from("/h")]);
    assert!(exec.approved && exec.cancelled);
    assert_eq!(exec.token.as_deref(), Some("t-1"));
    assert_eq!(exec.extra["subagent"], json!({"depth": 1}));
    assert_eq!(serde_json::to_value(&exec).unwrap(), raw);
    // False flags are not written.
    let plain = Exec {
        approved: false,
        cancelled: false,
        ..exec
    };
    let v = serde_json::to_value(&plain).unwrap();
    assert_eq!((v.get("approved"), v.get("cancelled")), (None, None));
}

#[test]
fn a_wrong_type_in_an_exec_or_its_arguments_names_the_field() {
    let e = serde_json::from_value::<Exec>(json!({"name": "t", "agent": 5})).unwrap_err();
    assert!(e.to_string().contains("invalid type: integer `5`"), "{e}");
    let e =
        serde_json::from_value::<Exec>(json!({"name": "t", "sandbox": {"mode": "x"}})).unwrap_err();
    assert!(e.to_string().contains("unknown variant `x`"), "{e}");
    #[derive(Deserialize, Debug)]
    struct Args {
        #[allow(dead_code)]
        file_path: String,
    }
    let exec = Exec::new("read", json!({"file_path": 3}));
    let e = exec.arguments_as::<Args>().unwrap_err();
    assert_eq!(e.code, crate::names::code::INVALID_ARGS);
    assert!(
        e.message.starts_with("invalid arguments: file_path: "),
        "{e}"
    );
}

#[test]
fn render_params_are_the_exec_fields_beside_the_value() {
    let p = RenderParams {
        exec: Exec {
            call_id: Some("c".into()),
            ..Exec::new("t", json!({"x": 1}))
        },
        value: json!({"n": 2}),
    };
    assert_eq!(
        wire(&p),
        r#"{"callId":"c","name":"t","arguments":{"x":1},"value":{"n":2}}"#
    );
    let back: RenderParams = parse(serde_json::to_value(&p).unwrap());
    assert_eq!(back, p);
    assert!(back.exec.extra.is_empty());
    let rendered: Rendered = parse(json!({"content": [{"type": "text", "text": "n=2"}]}));
    assert_eq!(rendered.content.map(|c| c.len()), Some(1));
    assert_eq!(parse::<Rendered>(json!({})), Rendered::default());
}

#[test]
fn registrations_read_what_tool_plugins_send() {
    let raw = json!({"name": "slow", "description": "d", "parameters": {"type": "object"},
                     "parallel": true, "service": "tool:kit:3", "scope": "a1",
                     "output": {"schema": {"type": "object"}, "render": true},
                     "finalizeContent": true, "timeoutMs": 250});
    let p: RegisterParams = parse(raw.clone());
    assert_eq!(
        (p.name.as_str(), p.service.as_str()),
        ("slow", "tool:kit:3")
    );
    assert!(p.parallel && p.finalize_content);
    assert_eq!(p.scope.as_deref(), Some("a1"));
    let contract = p.output.as_ref().and_then(OutputField::contract).unwrap();
    assert!(contract.render);
    assert_eq!(contract.schema, json!({"type": "object"}));
    assert_eq!(
        p.timeout_ms.as_ref().and_then(TimeoutMs::duration),
        Some(Duration::from_millis(250))
    );
    assert_eq!(serde_json::to_value(&p).unwrap(), raw);
    // A bare one: the provider refuses the empty name and service itself.
    let bare: RegisterParams = parse(json!({}));
    assert_eq!(bare, RegisterParams::default());
    assert_eq!(
        wire(&bare),
        r#"{"name":"","description":"","parameters":null,"service":""}"#
    );
}

#[test]
fn a_malformed_output_or_timeout_is_kept_to_be_refused_by_name() {
    let p: RegisterParams = parse(json!({"name": "u", "output": "string", "timeoutMs": "soon"}));
    assert_eq!(p.output.and_then(|o| o.contract()), None);
    let t = p.timeout_ms.unwrap();
    assert_eq!(
        (t.duration(), t.to_string()),
        (None, r#""soon""#.to_owned())
    );
    for bad in [json!(0), json!(-5), json!(-0.5), json!(null)] {
        assert_eq!(parse::<TimeoutMs>(bad.clone()).duration(), None, "{bad}");
    }
    // A render that is not `true` is no render.
    let c = parse::<OutputField>(json!({"render": "yes"}))
        .contract()
        .unwrap();
    assert_eq!(c, OutputContract::default());
    assert_eq!(
        wire(OutputField::from(OutputContract {
            schema: json!({}),
            render: true
        })),
        r#"{"schema":{},"render":true}"#
    );
    assert_eq!(wire(TimeoutMs::from(Duration::from_millis(5))), "5");
}

#[test]
fn the_small_params_default_their_absent_fields() {
    assert_eq!(parse::<ScopeParams>(json!({})), ScopeParams::default());
    assert_eq!(wire(ScopeParams::default()), "{}");
    let m: ModeParams = parse(json!({"name": "t", "scope": "a1"}));
    assert_eq!((m.name.as_str(), m.scope.as_deref()), ("t", Some("a1")));
    let r: RestrictParams = parse(json!({"scope": "a1", "allow": ["b", "c"]}));
    assert_eq!(r.allow, Some(vec!["b".into(), "c".into()]));
    assert_eq!(r.deny, None);
    assert_eq!(wire(&r), r#"{"scope":"a1","allow":["b","c"]}"#);
    let e = serde_json::from_value::<RestrictParams>(json!({"allow": [1]})).unwrap_err();
    assert!(e.to_string().contains("invalid type"), "{e}");
    let g: GuardParams = parse(json!({"service": "g1"}));
    assert_eq!((g.service.as_deref(), g.scope), (Some("g1"), None));
    let d: DeferContextParams =
        parse(json!({"agent": "a1", "callId": "c1", "context": {"text": "later"}}));
    assert_eq!(d.call.key(), ("a1".to_owned(), "c1".to_owned()));
    assert_eq!(
        wire(&d),
        r#"{"agent":"a1","callId":"c1","context":{"text":"later"}}"#
    );
    let e = serde_json::from_value::<DeferContextParams>(
        json!({"agent": "a1", "callId": "c1", "context": {"role": "user"}}),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "the message is not a well-formed message: missing field `id`"
    );
    assert_eq!(CallRef::default().key(), (String::new(), String::new()));
}

#[test]
fn replies_read_the_providers_json() {
    let schemas: Vec<ToolSchema> =
        parse(json!([{"name": "t", "description": "d", "parameters": {"type": "object"}}]));
    assert_eq!(
        wire(&schemas),
        r#"[{"name":"t","description":"d","parameters":{"type":"object"}}]"#
    );
    assert_eq!(parse::<ToolMode>(json!("parallel")), ToolMode::Parallel);
    assert_eq!(wire(ToolMode::Exclusive), r#""exclusive""#);
    let prepared: Prepared<ToolResult> = parse(json!({"kind": "dispatch",
        "exec": {"callId": "c", "name": "t", "token": "k"}}));
    assert_eq!(prepared.kind, StageKind::Dispatch);
    assert_eq!(prepared.result, None);
    let denied: Prepared = parse(json!({"kind": "post-result", "exec": {"name": "t"},
        "result": {"isError": true, "error": {"message": "no"}, "content": []}}));
    assert_eq!(denied.kind, StageKind::PostResult);
    assert_eq!(
        wire(&denied),
        r#"{"kind":"post-result","exec":{"name":"t"},"result":{"isError":true,"error":{"message":"no"},"content":[]}}"#
    );
    let d: Dispatched = parse(json!({"kind": "final-result", "result": {}}));
    assert_eq!(d.kind, StageKind::FinalResult);
}

#[test]
fn results_read_successes_failures_and_unknown_fields() {
    let ok: ToolResult = parse(json!({"isError": false, "value": {"n": 1},
        "content": [{"type": "text", "text": "1"}], "meta": {"m": true},
        "additionalContexts": [{"text": "note"}], "concludesTurn": true, "cached": 1}));
    assert!(!ok.is_error && ok.concludes_turn);
    assert_eq!(ok.value, Some(json!({"n": 1})));
    assert_eq!(ok.contexts(), [UserInput::text("note")]);
    assert_eq!(ok.extra["cached"], 1);
    let failed: ToolResult = parse(json!({"isError": true,
        "error": {"message": "m", "info": {"name": "ToolError", "code": "X"}},
        "content": [{"type": "text", "text": "Error: m"}]}));
    let info = failed.error.as_ref().and_then(|e| e.info.as_ref()).unwrap();
    assert_eq!(
        (info.name.as_str(), info.code.as_deref().unwrap()),
        ("ToolError", "X")
    );
    assert_eq!(
        wire(&failed),
        r#"{"isError":true,"error":{"message":"m","info":{"name":"ToolError","code":"X"}},"content":[{"type":"text","text":"Error: m"}]}"#
    );
    assert_eq!(
        wire(ToolReply::text_with_value("hi", json!({"jobId": "j"}))),
        r#"{"content":[{"type":"text","text":"hi"}],"value":{"jobId":"j"}}"#
    );
    assert_eq!(
        wire(ToolReply::text("x")),
        r#"{"content":[{"type":"text","text":"x"}]}"#
    );
}

#[test]
fn a_context_that_is_not_a_message_fails_the_reply_naming_it() {
    let reply = json!({"content": [], "additionalContexts": [
        {"text": "fine"},
        {"id": "m", "role": "user", "content": []},
    ]});
    let e = serde_path_to_error::deserialize::<_, ToolReply>(reply).unwrap_err();
    assert_eq!(e.path().to_string(), "additionalContexts[1]");
    assert_eq!(
        e.into_inner().to_string(),
        "the message is not a well-formed message: missing field `source`"
    );
    let full = json!({"id": "m", "role": "user", "content": [], "source": {"kind": "user"}});
    let reply: ToolReply = parse(json!({"additionalContexts": [full.clone(), {"text": "t"}]}));
    assert_eq!(
        serde_json::to_value(reply.additional_contexts).unwrap(),
        json!([full, {"text": "t"}])
    );
}

#[test]
fn pre_execute_decisions_keep_unknown_kinds_and_fields() {
    let allow: PreExecuteDecision = parse(json!({"kind": "allow"}));
    assert_eq!(allow.kind, Some(PreExecuteKind::Allow));
    let ask: PreExecuteDecision = parse(json!({"kind": "ask", "reason": "outside",
        "sandbox": {"mode": "read-only", "root": "/w"}, "note": 1}));
    assert_eq!(ask.kind, Some(PreExecuteKind::Ask));
    assert_eq!(ask.sandbox.as_ref().map(|f| f.mode), Some(Mode::ReadOnly));
    assert_eq!(
        wire(&ask),
        r#"{"kind":"ask","reason":"outside","sandbox":{"mode":"read-only","root":"/w","writable":[],"protected":[]},"note":1}"#
    );
    let other: PreExecuteDecision = parse(json!({"kind": "later"}));
    assert_eq!(other.kind, Some(PreExecuteKind::Other("later".into())));
    assert_eq!(wire(&other), r#"{"kind":"later"}"#);
    assert_eq!(
        wire(PreExecuteDecision::new(
            PreExecuteKind::Deny,
            Some("no".into())
        )),
        r#"{"kind":"deny","reason":"no"}"#
    );
    assert_eq!(parse::<PreExecuteDecision>(json!({})).kind, None);
}

#[test]
fn post_execute_decisions_tell_a_null_from_an_absent_replacement() {
    let plain: PostExecuteDecision = parse(json!({"kind": "accept"}));
    assert_eq!(plain, PostExecuteDecision::new(PostExecuteKind::Accept));
    assert_eq!(wire(&plain), r#"{"kind":"accept"}"#);
    let null: PostExecuteDecision = parse(json!({"kind": "accept", "value": null}));
    assert_eq!((null.value, null.content), (Some(Value::Null), None));
    let spilled: PostExecuteDecision = parse(json!({"kind": "accept",
        "content": [{"type": "text", "text": "preview"}], "additionalContexts": [{"text": "t"}], "x": 2}));
    assert_eq!(
        wire(&spilled),
        r#"{"kind":"accept","content":[{"type":"text","text":"preview"}],"additionalContexts":[{"text":"t"}],"x":2}"#
    );
    let block: PostExecuteDecision = parse(json!({"kind": "block", "feedback": "nope"}));
    assert!(block.is_block());
    assert_eq!(block.feedback, Some(Feedback::Text("nope".into())));
    assert_eq!(wire(&block), r#"{"kind":"block","feedback":"nope"}"#);
    assert!(!parse::<PostExecuteDecision>(json!({"kind": "hmm"})).is_block());
    // A null content counts as given (it cannot go with a value) but
    // replaces nothing; it is written back as it came.
    let null_content: PostExecuteDecision = parse(json!({"kind": "accept", "content": null}));
    assert_eq!(null_content.content, Some(None));
    assert_eq!(wire(&null_content), r#"{"kind":"accept","content":null}"#);
}

#[test]
fn feedback_is_a_text_or_content_blocks_and_anything_else_is_named() {
    let blocks: PostExecuteDecision = parse(json!({"kind": "block",
        "feedback": [{"type": "text", "text": "no"}, {"type": "later-block", "x": 1}]}));
    let Some(Feedback::Blocks(b)) = blocks.feedback.clone() else {
        panic!("blocks read as {:?}", blocks.feedback);
    };
    assert_eq!(b[0], ContentBlock::text("no"));
    assert_eq!(b[1].block_type(), "later-block");
    assert_eq!(
        wire(&blocks),
        r#"{"kind":"block","feedback":[{"type":"text","text":"no"},{"type":"later-block","x":1}]}"#
    );
    assert_eq!(
        Feedback::Text("t".into()).into_blocks(),
        [ContentBlock::text("t")]
    );
    let null: PostExecuteDecision = parse(json!({"kind": "block", "feedback": null}));
    assert_eq!(null.feedback, None);
    let e = serde_json::from_value::<PostExecuteDecision>(json!({"kind": "block", "feedback": 5}))
        .unwrap_err();
    assert!(
        e.to_string().contains("a text or a list of content blocks"),
        "{e}"
    );
    let e = serde_json::from_value::<PostExecuteDecision>(
        json!({"kind": "block", "feedback": [{"text": "untyped"}]}),
    )
    .unwrap_err();
    assert!(e.to_string().contains("missing field `type`"), "{e}");
}

#[test]
fn content_is_typed_and_its_json_is_unchanged() {
    let raw = r#"{"isError":false,"value":null,"content":[{"type":"text","text":"a"},{"type":"image","attachment":{"id":"i"}},{"type":"later-block","z":[1]}],"meta":{"m":1}}"#;
    let r: ToolResult = serde_json::from_str(raw).unwrap();
    assert_eq!(r.value, Some(Value::Null), "a success's null value is kept");
    assert_eq!(r.content[0].as_text(), Some("a"));
    assert_eq!(r.content[2].block_type(), "later-block");
    assert_eq!(wire(&r), raw);
    assert_eq!(
        wire(ToolResult::success(
            Value::Null,
            vec![ContentBlock::text("a")],
            None
        )),
        r#"{"isError":false,"value":null,"content":[{"type":"text","text":"a"}]}"#
    );
    assert_eq!(
        wire(ToolResult::failure(
            "m",
            Some(ErrorInfo::new("ToolError", "X"))
        )),
        r#"{"isError":true,"error":{"message":"m","info":{"name":"ToolError","code":"X"}},"content":[{"type":"text","text":"Error: m"}]}"#
    );
    // A reply with null content has none; a malformed block is named.
    assert_eq!(
        parse::<ToolReply>(json!({"content": null})),
        ToolReply::default()
    );
    let e =
        serde_json::from_value::<ToolReply>(json!({"content": [{"type": "text"}]})).unwrap_err();
    assert!(e.to_string().contains("missing field `text`"), "{e}");
    let rendered: Rendered = parse(json!({"content": [{"type": "text", "text": "r"}],
        "meta": {"k": 1}}));
    assert_eq!(
        wire(&rendered),
        r#"{"content":[{"type":"text","text":"r"}],"meta":{"k":1}}"#
    );
}

#[test]
fn outcomes_and_exec_params_wrap_the_exec() {
    let o: Outcome = parse(json!({"exec": {"name": "t"}, "result": {"isError": false}}));
    assert_eq!(o.exec.name, "t");
    assert_eq!(
        wire(&o),
        r#"{"exec":{"name":"t"},"result":{"isError":false,"content":[]}}"#
    );
    // A writer that keeps its result may send a reference.
    let by_ref = Outcome {
        exec: o.exec.clone(),
        result: &o.result,
    };
    assert_eq!(wire(&by_ref), wire(&o));
    let typed: Outcome<ToolResult> = parse(json!({"exec": {"name": "t"},
        "result": {"isError": false, "content": []}}));
    assert!(!typed.result.is_error);
    let p = ExecParams {
        exec: Exec::new("t", Value::Null),
    };
    assert_eq!(wire(&p), r#"{"exec":{"name":"t"}}"#);
    assert_eq!(wire(ToolsChanged {}), "{}");
}

#[test]
fn fs_payloads_are_what_tool_read_and_tool_fs_send() {
    let seen: FsObserved = parse(json!({"agent": "a1", "path": "/w/f", "version": "v1"}));
    assert_eq!(seen.path, PathBuf::from("/w/f"));
    assert_eq!(
        wire(&seen),
        r#"{"agent":"a1","path":"/w/f","version":"v1"}"#
    );
    // Outside an agent tool-read sends a null agent.
    let anon = FsObserved {
        agent: None,
        ..seen
    };
    assert_eq!(
        wire(&anon),
        r#"{"agent":null,"path":"/w/f","version":"v1"}"#
    );
    let w = FsWriteIntent {
        agent: String::new(),
        path: "/w/f".into(),
        exists: true,
    };
    assert_eq!(wire(&w), r#"{"agent":"","path":"/w/f","exists":true}"#);
    let e = FsEditIntent {
        agent: "a".into(),
        path: "/w/f".into(),
        count: 2,
    };
    assert_eq!(wire(&e), r#"{"agent":"a","path":"/w/f","count":2}"#);
    let deny: FsIntentDecision = parse(json!({"kind": "deny", "reason": "r"}));
    assert!(deny.is_deny());
    assert!(!parse::<FsIntentDecision>(json!({"kind": "allow"})).is_deny());
}

#[test]
fn flags_are_set_only_by_an_exact_true() {
    for (v, set) in [
        (json!(true), true),
        (json!("true"), false),
        (json!(1), false),
        (json!(false), false),
        (json!(null), false),
    ] {
        let p: RegisterParams = parse(json!({"parallel": v, "finalizeContent": v}));
        assert_eq!((p.parallel, p.finalize_content), (set, set), "{v}");
        let e: Exec = parse(json!({"approved": v, "cancelled": v}));
        assert_eq!((e.approved, e.cancelled), (set, set), "{v}");
        let r: ToolResult = parse(json!({"concludesTurn": v}));
        assert_eq!(r.concludes_turn, set, "{v}");
    }
}

#[test]
fn an_error_info_of_a_hook_keeps_its_fields_and_may_lack_a_code() {
    let failed: ToolResult = parse(json!({"isError": true,
        "error": {"message": "m", "info": {"name": "HookError", "hook": "h"}}, "content": []}));
    let info = failed.error.as_ref().and_then(|e| e.info.as_ref()).unwrap();
    assert_eq!(
        (info.name.as_str(), info.code.as_deref()),
        ("HookError", None)
    );
    assert_eq!(
        wire(&failed),
        r#"{"isError":true,"error":{"message":"m","info":{"name":"HookError","hook":"h"}},"content":[]}"#
    );
}
