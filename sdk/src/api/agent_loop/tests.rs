//! The types of `agentLoop` and of the `agent/*` events against the JSON
//! the loop and its callers send today: the wire does not change.

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
fn create_and_resume_params_read_what_callers_send() {
    // headless: options and a cwd.
    let p: CreateParams = parse(
        json!({"agentOptions": {"provider": "p", "model": "m", "maxTokens": 9}, "meta": {"cwd": "/w"}}),
    );
    assert_eq!(p.agent_options.provider.as_deref(), Some("p"));
    assert_eq!(
        p.agent_options.max_tokens.as_ref().and_then(MaxTokens::get),
        Some(9)
    );
    assert_eq!(p.meta.as_ref().and_then(|m| m.cwd.as_deref()), Some("/w"));
    assert_eq!(
        wire(&p),
        r#"{"agentOptions":{"provider":"p","model":"m","maxTokens":9},"meta":{"cwd":"/w"}}"#
    );
    assert_eq!(wire(CreateParams::default()), r#"{"agentOptions":{}}"#);
    // A maxTokens that is not a positive integer still parses: `create`
    // refuses it with the original's message.
    for bad in [json!(-1), json!(1.5), json!("9")] {
        let p: CreateParams = parse(json!({"agentOptions": {"maxTokens": bad}}));
        assert_eq!(p.agent_options.max_tokens.and_then(|m| m.get()), None);
    }
    let r: ResumeParams = parse(json!({"sessionId": "s"}));
    assert_eq!(r.agent_options, AgentOptions::default());
    assert_eq!(wire(&r), r#"{"sessionId":"s","agentOptions":{}}"#);
    let e = serde_json::from_value::<ResumeParams>(json!({})).unwrap_err();
    assert!(e.to_string().contains("missing field `sessionId`"), "{e}");
    assert_eq!(wire(AgentRef { agent: "a".into() }), r#"{"agent":"a"}"#);
}

#[test]
fn the_step_events_are_what_the_loop_dispatches() {
    let pre = PreStep {
        agent: "a".into(),
        messages: vec![json!({"role": "user"})],
        turn: 1,
        step: 2,
        signal: Some("s".into()),
    };
    assert_eq!(
        wire(&pre),
        r#"{"agent":"a","messages":[{"role":"user"}],"turn":1,"step":2,"signal":"s"}"#
    );
    let enter: PreStepDecision = parse(json!({"kind": "enter", "messages": []}));
    assert_eq!(enter.kind, PreStepKind::Enter);
    let reject: PreStepDecision = parse(json!({"kind": "reject"}));
    assert_eq!(reject.kind, PreStepKind::Reject);
    // A listener that answers the payload as it came enters its messages.
    let passed: PreStepDecision = parse(serde_json::to_value(&pre).unwrap());
    assert_eq!(
        (passed.kind, passed.messages.len()),
        (PreStepKind::Enter, 1)
    );

    let request = AgentRequest {
        agent: "a".into(),
        turn: 1,
        step: 1,
        config: RequestConfig {
            provider: "p".into(),
            model: "m".into(),
            max_tokens: None,
        },
    };
    assert_eq!(
        wire(&request),
        r#"{"agent":"a","turn":1,"step":1,"config":{"provider":"p","model":"m"}}"#
    );
    let open: AgentRequest = parse(
        json!({"agent": "a", "turn": 1, "step": 1, "config": {"model": "m", "provider": "p", "x": 1}}),
    );
    assert_eq!(
        wire(&open.config),
        r#"{"model":"m","provider":"p","x":1}"#,
        "a listener's config keeps its keys and their order"
    );

    let error = RequestError {
        agent: "a".into(),
        turn: 1,
        step: 2,
        provider: "p".into(),
        failure: json!({"code": "SERVER"}),
        retry_policy: RetryPolicy::default(),
    };
    assert_eq!(
        wire(&error),
        r#"{"agent":"a","turn":1,"step":2,"provider":"p","failure":{"code":"SERVER"},"retryPolicy":{"mode":"normal","maxRetries":5,"initialDelayMs":500,"maxDelayMs":10000,"jitterRatio":0.1}}"#
    );
    let retry: RequestErrorDecision = parse(json!({"kind": "retry"}));
    assert!(retry.is_retry());
    assert_eq!(wire(RequestErrorDecision::retry()), r#"{"kind":"retry"}"#);
    let none: Option<RequestErrorDecision> = parse(Value::Null);
    assert!(none.is_none());
}

#[test]
fn the_notifications_are_what_the_loop_emits() {
    let m = json!({"id": "m"});
    assert_eq!(
        wire(InboxMessage {
            agent: "a".into(),
            message: &m
        }),
        r#"{"agent":"a","message":{"id":"m"}}"#
    );
    assert_eq!(
        wire(InboxClaimed {
            agent: "a".into(),
            message: &m,
            turn: 3
        }),
        r#"{"agent":"a","message":{"id":"m"},"turn":3}"#
    );
    assert_eq!(
        wire(StatusChanged {
            agent: "a".into(),
            status: super::super::agents::RunStatus::Running
        }),
        r#"{"agent":"a","status":"running"}"#
    );
    assert_eq!(
        wire(TurnStopping {
            agent: "a".into(),
            turn: 1
        }),
        r#"{"agent":"a","turn":1}"#
    );
    let error = Error::new("X", "broke");
    assert_eq!(
        wire(AgentError {
            agent: "a".into(),
            turn: 1,
            step: Some(0),
            error: error.clone()
        }),
        r#"{"agent":"a","turn":1,"step":0,"error":{"code":"X","message":"broke"}}"#
    );
    assert_eq!(
        wire(AgentError {
            agent: "a".into(),
            turn: 1,
            step: None,
            error: error.clone()
        }),
        r#"{"agent":"a","turn":1,"error":{"code":"X","message":"broke"}}"#
    );
    assert_eq!(
        wire(SessionStart {
            agent: "a".into(),
            source: SessionSource::Resume
        }),
        r#"{"agent":"a","source":"resume"}"#
    );
    assert_eq!(
        wire(ConfigStartFailed {
            session_id: "s".into(),
            error
        }),
        r#"{"sessionId":"s","error":{"code":"X","message":"broke"}}"#
    );
}

#[test]
fn create_meta_carries_the_lineage_of_a_subagent_session() {
    let text = r#"{"agentOptions":{},"meta":{"cwd":"/w","parentSession":"p-1","origin":"subagent","delegationDepth":2}}"#;
    // Read from text (as a service reads its params) and from a tree.
    for p in [
        serde_json::from_str::<CreateParams>(text).unwrap(),
        parse::<CreateParams>(serde_json::from_str(text).unwrap()),
    ] {
        let meta = p.meta.clone().unwrap();
        assert_eq!(meta.parent_session.as_deref(), Some("p-1"));
        assert_eq!(meta.origin, Some(SessionOrigin::Subagent));
        assert_eq!(meta.delegation_depth, Some(2));
        assert_eq!(wire(&p), text);
    }
    // Absent and null are the same: none.
    let bare: CreateMeta =
        parse(json!({"parentSession": null, "origin": null, "delegationDepth": null}));
    assert_eq!(bare, CreateMeta::default());
    assert_eq!(wire(CreateMeta::default()), "{}");
    assert_eq!(
        parse::<CreateMeta>(json!({"delegationDepth": 0})).delegation_depth,
        Some(0)
    );
}

#[test]
fn create_meta_refuses_bad_lineage_naming_the_field() {
    let refused = |meta: &str| -> String {
        let text = format!(r#"{{"agentOptions":{{}},"meta":{meta}}}"#);
        let from_text = serde_json::from_str::<CreateParams>(&text)
            .unwrap_err()
            .to_string();
        let tree: Value = serde_json::from_str(&text).unwrap();
        let from_tree = serde_json::from_value::<CreateParams>(tree)
            .unwrap_err()
            .to_string();
        assert!(
            from_text.starts_with(&from_tree),
            "{from_text} / {from_tree}"
        );
        from_tree
    };
    assert_eq!(
        refused(r#"{"origin":"worker"}"#),
        r#"`origin` must be "subagent", got "worker" (leave `origin` out for a session that is not a subagent's)"#
    );
    assert!(refused(r#"{"origin":1}"#).contains(r#"expected `origin` "subagent""#));
    assert_eq!(
        refused(r#"{"delegationDepth":-1}"#),
        "`delegationDepth` must be a non-negative integer (0 for a top-level session), got -1"
    );
    for bad in ["1.5", r#""1""#, "true"] {
        let e = refused(&format!(r#"{{"delegationDepth":{bad}}}"#));
        assert!(
            e.contains("expected `delegationDepth` as a non-negative integer"),
            "{bad}: {e}"
        );
    }
    assert!(refused(r#"{"parentSession":""}"#)
        .starts_with("`parentSession` must be the id of the session that delegated this one, got an empty string"));
    assert!(refused(r#"{"parentSession":7}"#).contains("expected `parentSession` as the id"));
}

mod prepared {
    //! The creation handle: the caller's half of the creation transaction.
    //! An agent made with `setup` is the caller's to commit; until then,
    //! dropping the handle (an error, a cancelled task) is the creation's
    //! signal, rolling it back; once committed (or handed over) the handle
    //! has no say any more.

    use dsh_wire::{ReplyKind, ToHost};

    use super::super::Prepared;
    use crate::context::test_host::{run, Harness};
    use crate::names::{agent_loop as method, service};

    /// The calls the plugin sent, as (service, method, params).
    fn calls(h: &Harness) -> Vec<(String, String, String)> {
        h.take()
            .into_iter()
            .filter_map(|m| match m {
                ToHost::Call {
                    service,
                    method,
                    params,
                    ..
                } => Some((
                    service.into_owned(),
                    method.into_owned(),
                    params.into_owned(),
                )),
                _ => None,
            })
            .collect()
    }

    async fn settle() {
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
    }

    #[test]
    fn dropped_before_its_commit_the_creation_is_rolled_back() {
        run(async {
            let h = Harness::new();
            let prepared = Prepared::adopt(&h.ctx, "kid".into());
            assert_eq!(prepared.agent(), "kid");
            drop(prepared);
            settle().await;
            assert_eq!(
                calls(&h),
                [(
                    service::AGENT_LOOP.to_owned(),
                    method::ABANDON.to_owned(),
                    r#"{"agent":"kid"}"#.to_owned()
                )]
            );
        });
    }

    #[test]
    fn committed_or_handed_over_it_is_never_rolled_back() {
        run(async {
            let h = Harness::new();
            let commit = tokio::task::spawn_local(Prepared::adopt(&h.ctx, "kid".into()).commit());
            settle().await;
            let sent = calls(&h);
            assert_eq!(sent.len(), 1);
            assert_eq!(
                (sent[0].1.as_str(), sent[0].2.as_str()),
                (method::COMMIT, r#"{"agent":"kid"}"#)
            );
            h.shared
                .on_reply(1, ReplyKind::Ok, r#"{"agent":"kid"}"#.to_owned());
            assert_eq!(commit.await.unwrap().unwrap().agent, "kid");
            // A handle handed to another plugin leaves it to that one.
            let id = Prepared::adopt(&h.ctx, "other".into()).hand_over();
            assert_eq!(id, "other");
            settle().await;
            assert!(
                calls(&h).is_empty(),
                "no abandon after a commit or a hand-over"
            );
        });
    }
}
