//! The typed `sessions` API (`dsh_sdk::api::sessions`) against the real
//! `session` plugin: every method is called with its params type and its
//! reply parsed into its reply type, so the types and the provider cannot
//! drift without this failing.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::api::sessions::{
    AppendManyParams, AppendParams, AppendReply, Boundary, CreateMeta, CreateParams, CreateReply,
    ForkParams, ForkReply, FromParams, HeaderReply, IdParams, ListParams, NewEvent, ResumeReply,
    SurfaceReply,
};
use dsh_sdk::codes;
use dsh_sdk::names::{service, session_persistence, sessions};
use dsh_sdk::vocab::{event, SessionEvent};
use dsh_sdk::Error;
use dsh_testkit::msg;
use dsh_testkit::session::store;
use serde_json::{json, Value};

const CWD: &str = "/typed/sessions";

/// Calls `sessions.<method>` with typed params; the reply parsed into the
/// type the result is bound to. (A macro, so this crate need not name
/// serde's traits.)
macro_rules! ask {
    ($t:expr, $method:expr, $params:expr $(,)?) => {
        async {
            let method: &str = $method;
            let params = serde_json::to_value(&$params).unwrap();
            let reply: Result<Value, Error> = $t.host.call(service::SESSIONS, method, params).await;
            reply.map(|reply| {
                serde_json::from_value(reply.clone()).unwrap_or_else(|e| {
                    panic!("the reply of `{method}` does not parse ({e}): {reply}")
                })
            })
        }
    };
}

fn id(id: &str) -> IdParams {
    IdParams { id: id.to_owned() }
}

fn surface(kind: &str, data: Value) -> NewEvent {
    NewEvent {
        surface_op: Some(json!("append")),
        ..NewEvent::new(kind, data)
    }
}

#[tokio::test]
async fn every_method_speaks_its_types() {
    let (t, _root) = store().await;
    let created: CreateReply = ask!(
        &t,
        sessions::CREATE,
        CreateParams {
            id: Some("typed".into()),
            meta: Some(CreateMeta {
                cwd: Some(CWD.into()),
            }),
            ..CreateParams::default()
        },
    )
    .await
    .unwrap();
    assert_eq!((created.id.as_str(), created.seq), ("typed", 0));
    assert_eq!(created.header.cwd.as_deref(), Some(CWD));

    let start: AppendReply = ask!(
        &t,
        sessions::APPEND,
        AppendParams {
            id: "typed".into(),
            event: NewEvent::new(event::TURN_START, json!({"turn": 1})),
        },
    )
    .await
    .unwrap();
    assert_eq!((start.kind.as_str(), start.seq), (event::TURN_START, 0));
    let ts = json!({"turn": 1, "step": 1});
    let assistant = msg::assistant("a1", vec![msg::text("hello")], "p", "m");
    let seqs: Vec<u64> = ask!(
        &t,
        sessions::APPEND_MANY,
        AppendManyParams {
            expect_seq: None,
            id: "typed".into(),
            events: vec![
                surface(event::USER_MESSAGE, msg::user_text("u1", "hi")),
                NewEvent::new(event::STEP_START, ts.clone()),
                surface(
                    event::ASSISTANT_MESSAGE,
                    json!({"turn": 1, "step": 1, "message": assistant}),
                ),
                NewEvent::new(event::STEP_END, ts),
                NewEvent::new(
                    event::TURN_END,
                    json!({"turn": 1, "reason": {"kind": "completed"}}),
                ),
            ],
        },
    )
    .await
    .unwrap();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);

    let from = |from| FromParams {
        id: "typed".into(),
        from,
    };
    let tail: Vec<SessionEvent> = ask!(&t, sessions::EVENTS, from(4)).await.unwrap();
    assert_eq!(tail.iter().map(|e| e.seq).collect::<Vec<_>>(), [4, 5]);
    let derived: Vec<Value> = ask!(&t, sessions::DERIVE, id("typed")).await.unwrap();
    assert_eq!(derived, [msg::user_text("u1", "hi"), assistant]);
    let surfaced: SurfaceReply = ask!(&t, sessions::SURFACE, from(0)).await.unwrap();
    assert_eq!(surfaced.events.len(), 2);
    assert_eq!((surfaced.replaced, surfaced.seq), (false, 6));
    let context: Option<Value> = ask!(&t, sessions::REQUEST_CONTEXT, id("typed"))
        .await
        .unwrap();
    assert_eq!(context, None);
    let header: HeaderReply = ask!(&t, sessions::HEADER, id("typed")).await.unwrap();
    assert_eq!((header.header.id.as_str(), header.seq), ("typed", 6));
    let live: Vec<String> = ask!(&t, sessions::LIST, ListParams {}).await.unwrap();
    assert_eq!(live, ["typed"]);
    let flushed: bool = ask!(&t, sessions::FLUSH, id("typed")).await.unwrap();
    assert!(flushed, "session-jsonl took part");

    let fork: ForkReply = ask!(
        &t,
        sessions::FORK,
        ForkParams {
            id: "typed".into(),
            child_id: Some("kid".into()),
            boundary: Some(Boundary::from(5)),
            ..ForkParams::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(fork.id, "kid");
    assert_eq!(fork.header.parent_session.as_deref(), Some("typed"));
    assert_eq!(fork.header.seed_length, Some(6));
    assert_eq!(fork.header.cwd.as_deref(), Some(CWD));
    // The surface tail names the last request header in it (a meter
    // prices the system prompt and tools from it).
    let header = json!({"config": {"provider": "p", "model": "m"}, "system": "be brief"});
    let seqs: Vec<u64> = ask!(
        &t,
        sessions::APPEND_MANY,
        AppendManyParams {
            expect_seq: None,
            id: "kid".into(),
            events: vec![
                NewEvent::new(event::TURN_START, json!({"turn": 2})),
                NewEvent::new(event::STEP_START, json!({"turn": 2, "step": 1})),
                NewEvent::new(
                    event::REQUEST_HEADER,
                    json!({"header": header, "reason": "initial"}),
                ),
            ],
        },
    )
    .await
    .unwrap();
    let logged = seqs[2];
    let kid = |from| FromParams {
        id: "kid".into(),
        from,
    };
    let with: SurfaceReply = ask!(&t, sessions::SURFACE, kid(0)).await.unwrap();
    let at = with.request_header.expect("the header is in the tail");
    assert_eq!((at.seq, &at.header), (logged, &header));
    let after: SurfaceReply = ask!(&t, sessions::SURFACE, kid(logged + 1)).await.unwrap();
    assert!(after.request_header.is_none());

    let () = ask!(&t, sessions::CLOSE, id("typed")).await.unwrap();
    let resumed: ResumeReply = ask!(&t, sessions::RESUME, id("typed")).await.unwrap();
    assert_eq!(resumed.header.id, "typed");
    assert_eq!(
        (resumed.seq, resumed.last_turn),
        (7, 1),
        "the stored six and end-seed"
    );
    assert_eq!(resumed.last_end, Some(json!({"kind": "completed"})));
    assert_eq!(
        (resumed.request_header, resumed.request_context),
        (None, None)
    );
    assert!(resumed.splices.is_empty() && resumed.splice_seqs.is_empty());
    t.shutdown().await;
}

#[tokio::test]
async fn params_that_do_not_parse_name_the_method_and_the_field() {
    let (t, _root) = store().await;
    let refused = |params: Value, method: &'static str| {
        let t = &t;
        async move {
            t.host
                .call(service::SESSIONS, method, params)
                .await
                .unwrap_err()
        }
    };
    let e = refused(json!({"type": event::TURN_START}), sessions::APPEND).await;
    assert_eq!(e.code, codes::INVALID_PAYLOAD);
    assert!(
        e.message
            .starts_with("invalid params for `sessions.append`: missing field `id`"),
        "{e}"
    );
    let e = refused(json!({"id": "s", "from": "x"}), sessions::EVENTS).await;
    assert_eq!(e.code, codes::INVALID_PAYLOAD);
    assert!(e.message.contains("sessions.events"), "{e}");
    let e = refused(json!({"meta": {"cwd": 5}}), sessions::CREATE).await;
    assert_eq!(e.code, codes::INVALID_PAYLOAD);
    // A boundary is taken as sent and refused by what it is.
    let _: CreateReply = ask!(
        &t,
        sessions::CREATE,
        CreateParams {
            id: Some("src".into()),
            ..CreateParams::default()
        },
    )
    .await
    .unwrap();
    let e = refused(json!({"id": "src", "boundary": "0"}), sessions::FORK).await;
    assert_eq!(e.code, "INVALID_BOUNDARY", "{e}");
    t.shutdown().await;
}

/// Issue 19, item 2: a core event whose data does not read as its record
/// (`dsh_sdk::vocab::records`) is refused with `INVALID_APPEND` naming the
/// event and the field, and nothing changes, live or stored; a seed
/// holding one creates no session.
#[tokio::test]
async fn a_malformed_core_record_is_refused_naming_the_field_and_changes_nothing() {
    let (t, _root) = store().await;
    let _: CreateReply = ask!(
        &t,
        sessions::CREATE,
        CreateParams {
            id: Some("m".into()),
            meta: Some(CreateMeta {
                cwd: Some(CWD.into()),
            }),
            ..CreateParams::default()
        },
    )
    .await
    .unwrap();
    let opened: Vec<u64> = ask!(
        &t,
        sessions::APPEND_MANY,
        AppendManyParams {
            expect_seq: None,
            id: "m".into(),
            events: vec![
                NewEvent::new(event::TURN_START, json!({"turn": 1})),
                NewEvent::new(event::STEP_START, json!({"turn": 1, "step": 1})),
                NewEvent::new(
                    event::TOOL_CALL,
                    json!({"turn": 1, "step": 1, "callId": "c1", "name": "read", "arguments": "{}"}),
                ),
            ],
        },
    )
    .await
    .unwrap();
    assert_eq!(opened, [0, 1, 2]);
    let log = |from| FromParams {
        id: "m".into(),
        from,
    };
    let before: Vec<SessionEvent> = ask!(&t, sessions::EVENTS, log(0)).await.unwrap();
    let result = |message: Value| {
        surface(
            event::TOOL_RESULT,
            json!({"turn": 1, "step": 1, "message": message}),
        )
    };
    let cases = [
        (
            NewEvent::new(event::TURN_END, json!({"turn": 1})),
            "session event 3 (turn/end) has malformed data at `.`: missing field `reason`",
        ),
        (
            NewEvent::new(event::STEP_END, json!({"turn": 1, "step": "1"})),
            "session event 3 (step/end) has malformed data at `step`: invalid type: string \"1\", expected u64",
        ),
        (
            NewEvent::new(
                event::TOOL_CALL,
                json!({"turn": 1, "step": 1, "callId": "c2", "name": "read", "arguments": {}}),
            ),
            "session event 3 (tool/call) has malformed data at `arguments`: invalid type: map, expected a string",
        ),
        (
            result(json!({"role": "user", "content": [], "source": {"kind": "tool", "callId": "c1"}})),
            "session event 3 (tool/result) has malformed data at `message`: missing field `id`",
        ),
        (
            NewEvent::new(
                event::REQUEST_HEADER,
                json!({"header": {"config": {"provider": "p"}}, "reason": "initial"}),
            ),
            "session event 3 (request/header) has malformed data at `header.config`: missing field `model`",
        ),
    ];
    for (bad, why) in cases {
        let refused: Result<AppendReply, Error> = ask!(
            &t,
            sessions::APPEND,
            AppendParams {
                id: "m".into(),
                event: bad,
            },
        )
        .await;
        let e = refused.unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            ("INVALID_APPEND", why)
        );
    }
    let after: Vec<SessionEvent> = ask!(&t, sessions::EVENTS, log(0)).await.unwrap();
    assert_eq!(after, before, "the live log is unchanged");
    // The refused events took no seq, and none of them was stored.
    let closed: Vec<u64> = ask!(
        &t,
        sessions::APPEND_MANY,
        AppendManyParams {
            expect_seq: None,
            id: "m".into(),
            events: vec![
                NewEvent::new(event::STEP_END, json!({"turn": 1, "step": 1})),
                NewEvent::new(
                    event::TURN_END,
                    json!({"turn": 1, "reason": {"kind": "completed"}}),
                ),
            ],
        },
    )
    .await
    .unwrap();
    assert_eq!(closed, [3, 4]);
    let live: Vec<SessionEvent> = ask!(&t, sessions::EVENTS, log(0)).await.unwrap();
    assert_eq!(live[..3], before[..]);
    let flushed: bool = ask!(&t, sessions::FLUSH, id("m")).await.unwrap();
    assert!(flushed);
    let stored = t
        .host
        .call(
            service::SESSION_PERSISTENCE,
            session_persistence::LOAD,
            json!({"id": "m"}),
        )
        .await
        .unwrap();
    assert_eq!(stored["events"], json!(live), "nothing refused was stored");

    let seeded: Result<CreateReply, Error> = ask!(
        &t,
        sessions::CREATE,
        CreateParams {
            id: Some("seeded".into()),
            seed: Some(vec![SessionEvent::new(
                event::TURN_START,
                0,
                json!({"turn": "one"}),
            )]),
            ..CreateParams::default()
        },
    )
    .await;
    let e = seeded.unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.message.as_str()),
        (
            "INVALID_APPEND",
            "invalid seed event at index 0: session event 0 (turn/start) has malformed data at `turn`: invalid type: string \"one\", expected u64 at line 1 column 13"
        )
    );
    let live: Vec<String> = ask!(&t, sessions::LIST, ListParams {}).await.unwrap();
    assert_eq!(live, ["m"], "the seeded session was not created");
    t.shutdown().await;
}
