//! The types of `agents` against the JSON its callers send and its
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
fn sends_carry_the_agent_and_the_message_as_given() {
    let p = SendParams {
        agent: "a".into(),
        message: UserInput::text("hi"),
    };
    assert_eq!(wire(&p), r#"{"agent":"a","message":{"text":"hi"}}"#);
    assert_eq!(
        parse::<SendParams>(json!({"agent": "a", "message": {"text": "hi"}})),
        p
    );
    let reply: SendReply = parse(json!({"messageId": "m1"}));
    assert_eq!(reply.message_id, json!("m1"));
    assert_eq!(wire(&reply), r#"{"messageId":"m1"}"#);
}

#[test]
fn replace_and_remove_name_the_message_in_camel_case() {
    let r = ReplaceParams {
        agent: "a".into(),
        message_id: "m".into(),
        message: UserInput::text("x"),
    };
    assert_eq!(
        wire(&r),
        r#"{"agent":"a","messageId":"m","message":{"text":"x"}}"#
    );
    let r = RemoveParams {
        agent: "a".into(),
        message_id: "m".into(),
    };
    assert_eq!(wire(&r), r#"{"agent":"a","messageId":"m"}"#);
}

#[test]
fn cancel_defaults_to_no_cause_and_clearing_the_inbox() {
    let bare: CancelParams = parse(json!({"agent": "a"}));
    assert_eq!((bare.cause.clone(), bare.keep_inbox), (None, false));
    assert_eq!(wire(&bare), r#"{"agent":"a"}"#);
    let null: CancelParams = parse(json!({"agent": "a", "cause": null}));
    assert_eq!(null.cause, None);
    let full: CancelParams =
        parse(json!({"agent": "a", "cause": {"kind": "disposed"}, "keepInbox": true}));
    assert_eq!(
        wire(&full),
        r#"{"agent":"a","cause":{"kind":"disposed"},"keepInbox":true}"#
    );
    assert_eq!(full.cause, Some(CancelCause::Disposed));
    // A cause of another plugin's is kept whole.
    let other: CancelParams = parse(json!({"agent": "a", "cause": {"kind": "timeout", "ms": 5}}));
    assert_eq!(other.cause.as_ref().map(CancelCause::kind), Some("timeout"));
    assert_eq!(
        wire(&other),
        r#"{"agent":"a","cause":{"kind":"timeout","ms":5}}"#
    );
}

#[test]
fn a_sent_message_is_a_message_or_the_text_shorthand() {
    let full = json!({"id": "m1", "role": "user", "content": [{"type": "text", "text": "hi"}],
                      "source": {"kind": "user"}});
    let p: SendParams = parse(json!({"agent": "a", "message": full.clone()}));
    assert!(matches!(&p.message, UserInput::Message(m) if m.id == "m1"));
    assert_eq!(serde_json::to_value(&p.message).unwrap(), full);
    for (message, why) in [
        (json!({"content": 5}), "a message needs `role` or `text`"),
        (
            json!({"role": "user", "content": []}),
            "the message is not a well-formed message: missing field `id`",
        ),
    ] {
        let e = serde_json::from_value::<SendParams>(json!({"agent": "a", "message": message}))
            .unwrap_err();
        assert_eq!(e.to_string(), why);
    }
    let e = serde_json::from_value::<SendParams>(json!({"agent": "a"})).unwrap_err();
    assert_eq!(e.to_string(), "missing field `message`");
}

#[test]
fn select_model_and_maintenance_read_what_callers_send() {
    let both: SelectModelParams = parse(json!({"agent": "a", "provider": "p", "model": "m"}));
    assert_eq!(
        (both.provider.as_deref(), both.model.as_deref()),
        (Some("p"), Some("m"))
    );
    let neither: SelectModelParams = parse(json!({"agent": "a"}));
    assert_eq!(wire(&neither), r#"{"agent":"a"}"#);
    let m: RunMaintenanceParams =
        parse(json!({"agent": "a", "task": {"service": "s", "method": "go", "params": {"n": 1}}}));
    assert_eq!(m.task.service.as_deref(), Some("s"));
    assert_eq!(m.task.params, json!({"n": 1}));
    assert_eq!(
        wire(&m),
        r#"{"agent":"a","task":{"service":"s","method":"go","params":{"n":1}}}"#
    );
    // No task: the provider refuses it with its own message.
    let none: RunMaintenanceParams = parse(json!({"agent": "a"}));
    assert_eq!(none.task, MaintenanceTask::default());
}

#[test]
fn replies_are_what_the_provider_writes() {
    let pending = PendingReply {
        next_turn: &[json!({"id": "t"})][..],
        next_step: &[][..],
    };
    assert_eq!(wire(pending), r#"{"nextTurn":[{"id":"t"}],"nextStep":[]}"#);
    let owned: PendingReply = parse(json!({"nextTurn": [], "nextStep": [{"id": "s"}]}));
    assert_eq!(owned.next_step, vec![json!({"id": "s"})]);
    let idle = WhenIdleReply {
        reason: Some(crate::vocab::records::TurnEndReason::Completed),
        last_turn: 2,
    };
    assert_eq!(
        wire(&idle),
        r#"{"reason":{"kind":"completed"},"lastTurn":2}"#
    );
    let status = StatusReply {
        status: RunStatus::Idle,
        maintenance: false,
        last_turn: 0,
        last_end: None,
        options: crate::api::agent_loop::AgentOptions {
            max_tokens: Some(8.into()),
            ..Default::default()
        },
    };
    assert_eq!(
        wire(&status),
        r#"{"status":"idle","maintenance":false,"lastTurn":0,"lastEnd":null,"options":{"maxTokens":8}}"#
    );
    assert_eq!(wire(RunStatus::Running), r#""running""#);
}

#[test]
fn a_wrong_type_is_an_error_that_names_the_field() {
    let e = serde_json::from_value::<AgentParams>(json!({})).unwrap_err();
    assert!(e.to_string().contains("missing field `agent`"), "{e}");
    let e = serde_json::from_value::<CancelParams>(json!({"agent": "a", "keepInbox": "yes"}))
        .unwrap_err();
    assert!(e.to_string().contains("invalid type"), "{e}");
    let e = serde_json::from_value::<RemoveParams>(json!({"agent": "a"})).unwrap_err();
    assert!(e.to_string().contains("missing field `messageId`"), "{e}");
}
