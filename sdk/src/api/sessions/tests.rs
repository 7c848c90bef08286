//! The types of `sessions` against the JSON its untyped callers send and
//! its provider answers today: the wire does not change.

use serde::de::DeserializeOwned;
use serde_json::json;

use super::*;
use crate::vocab::event;

fn parse<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn wire(v: impl Serialize) -> String {
    serde_json::to_string(&v).unwrap()
}

fn event(kind: &str, seq: u64, data: Value) -> SessionEvent {
    SessionEvent {
        kind: kind.into(),
        seq,
        time: 7,
        data: data.into(),
        source_event_seqs: None,
        surface_op: None,
        ignorable: None,
    }
}

#[test]
fn create_params_read_what_callers_send_and_write_it_back() {
    // agent-loop: `{"meta": {}}` plus an optional id and cwd.
    let bare: CreateParams = parse(json!({"meta": {}}));
    assert_eq!(bare.id, None);
    assert_eq!(bare.meta, Some(CreateMeta::default()));
    let p: CreateParams = parse(json!({"id": "s", "meta": {"cwd": "/w"}}));
    assert_eq!(p.meta.and_then(|m| m.cwd).as_deref(), Some("/w"));
    let header: CreateParams = parse(json!({"id": "k", "header":
        {"version": 0, "id": "k", "createdAt": 0, "delegationDepth": 2, "origin": "subagent"}}));
    let h = header.header.unwrap();
    assert_eq!(
        (h.delegation_depth, h.origin.as_deref()),
        (Some(2), Some("subagent"))
    );
    // Nulls are absences; nothing absent is written.
    let nulls: CreateParams = parse(json!({"id": null, "header": null, "seed": null}));
    assert_eq!(nulls, CreateParams::default());
    assert_eq!(wire(CreateParams::default()), "{}");
    let seeded = CreateParams {
        id: Some("s".into()),
        meta: Some(CreateMeta {
            cwd: Some("/w".into()),
        }),
        seed: Some(vec![event(event::TURN_START, 0, json!({"turn": 1}))]),
        seed_stored: true,
        ..CreateParams::default()
    };
    assert_eq!(
        wire(&seeded),
        r#"{"id":"s","meta":{"cwd":"/w"},"seed":[{"type":"turn/start","seq":0,"time":7,"data":{"turn":1}}],"seedStored":true}"#
    );
    assert_eq!(
        parse::<CreateParams>(serde_json::to_value(&seeded).unwrap()),
        seeded
    );
}

#[test]
fn a_wrong_type_is_an_error_that_names_the_field() {
    let e = serde_json::from_value::<CreateParams>(json!({"meta": {"cwd": 5}})).unwrap_err();
    assert!(e.to_string().contains("invalid type: integer `5`"), "{e}");
    let e = serde_json::from_value::<AppendParams>(json!({"type": "turn/start"})).unwrap_err();
    assert!(e.to_string().contains("missing field `id`"), "{e}");
    let e = serde_json::from_value::<AppendManyParams>(json!({"id": "s"})).unwrap_err();
    assert!(e.to_string().contains("missing field `events`"), "{e}");
    let e = serde_json::from_value::<IdParams>(json!({"id": 3})).unwrap_err();
    assert!(e.to_string().contains("invalid type"), "{e}");
}

#[test]
fn append_params_are_the_id_beside_the_event_fields() {
    let raw = json!({"id": "s", "type": event::USER_MESSAGE, "data": {"id": "u"},
                     "surfaceOp": "append", "sourceEventSeqs": [0], "ignorable": true});
    let p: AppendParams = parse(raw.clone());
    assert_eq!(p.id, "s");
    assert_eq!(p.event.kind, event::USER_MESSAGE);
    assert_eq!(p.event.surface_op, Some(json!("append")));
    assert_eq!(p.event.source_event_seqs, Some(vec![0]));
    assert_eq!(serde_json::to_value(&p).unwrap(), raw);
    // Absent data is null; absent surface fields are not written.
    let plain: AppendParams = parse(json!({"id": "s", "type": event::TURN_START}));
    assert_eq!(plain.event, NewEvent::new(event::TURN_START, Value::Null));
    assert_eq!(
        wire(AppendParams {
            id: "s".into(),
            event: NewEvent::new(event::LLM_RETRY, json!({"n": 1})),
        }),
        r#"{"id":"s","type":"llm/retry","data":{"n":1}}"#
    );
    let many = AppendManyParams {
        id: "s".into(),
        events: vec![NewEvent::new(event::TURN_START, json!({"turn": 1}))],
        expect_seq: None,
    };
    assert_eq!(
        wire(&many),
        r#"{"id":"s","events":[{"type":"turn/start","data":{"turn":1}}]}"#
    );
}

#[test]
fn from_defaults_to_zero_and_list_takes_an_empty_object() {
    assert_eq!(parse::<FromParams>(json!({"id": "s"})).from, 0);
    assert_eq!(parse::<FromParams>(json!({"id": "s", "from": 4})).from, 4);
    assert_eq!(
        wire(FromParams {
            id: "s".into(),
            from: 2
        }),
        r#"{"id":"s","from":2}"#
    );
    assert_eq!(wire(ListParams {}), "{}");
    assert_eq!(wire(IdParams { id: "s".into() }), r#"{"id":"s"}"#);
}

#[test]
fn a_fork_boundary_is_kept_as_sent_so_a_bad_one_can_be_named() {
    let p: ForkParams = parse(json!({"id": "src", "childId": "kid", "boundary": 3}));
    assert_eq!(p.child_id.as_deref(), Some("kid"));
    assert_eq!(p.boundary.as_ref().and_then(Boundary::seq), Some(3));
    for bad in [json!(-1), json!(1.5), json!("3")] {
        let p: ForkParams = parse(json!({"id": "src", "boundary": bad.clone()}));
        let b = p.boundary.unwrap();
        assert_eq!(b.seq(), None, "{bad}");
        assert_eq!(b.to_string(), bad.to_string());
    }
    assert_eq!(
        parse::<ForkParams>(json!({"id": "s", "boundary": null})).boundary,
        None
    );
    let fork = ForkParams {
        id: "src".into(),
        child_id: None,
        boundary: Some(Boundary::from(8)),
        ..ForkParams::default()
    };
    assert_eq!(wire(&fork), r#"{"id":"src","boundary":8}"#);
}

#[test]
fn replies_read_the_providers_json() {
    let header = json!({"version": 0, "id": "s", "createdAt": 5, "cwd": "/w"});
    let created: CreateReply = parse(json!({"id": "s", "header": header, "seq": 0}));
    assert_eq!(created.header.cwd.as_deref(), Some("/w"));
    let h: HeaderReply = parse(json!({"header": header, "seq": 3}));
    assert_eq!(h.seq, 3);
    let fork: ForkReply = parse(json!({"id": "kid", "header": header}));
    assert_eq!(fork.id, "kid");
    let surface: SurfaceReply = parse(json!({"events": [], "replaced": false, "seq": 9}));
    assert_eq!(
        (surface.events.len(), surface.replaced, surface.seq),
        (0, false, 9)
    );
    let resumed: ResumeReply = parse(json!({
        "header": header, "seq": 4, "lastTurn": 1, "lastEnd": {"kind": "completed"},
        "requestHeader": null, "requestContext": null, "splices": [{"target": "next-turn"}],
        "spliceSeqs": [3]}));
    assert_eq!(resumed.last_turn, 1);
    assert_eq!(resumed.last_end, Some(json!({"kind": "completed"})));
    assert_eq!(
        (resumed.request_header, resumed.request_context),
        (None, None)
    );
    assert_eq!(resumed.splice_seqs, [3]);
    assert_eq!(parse::<Option<Value>>(Value::Null), None);
    parse::<()>(Value::Null);
}

#[test]
fn borrowed_and_owned_replies_write_the_same_json_in_the_wire_order() {
    let ev = event(event::USER_MESSAGE, 0, json!({"id": "u"}));
    let borrowed = SurfaceReply {
        events: vec![&ev],
        replaced: true,
        seq: 1,
        request_header: None,
    };
    let owned = SurfaceReply {
        events: vec![ev.clone()],
        replaced: true,
        seq: 1,
        request_header: None,
    };
    assert_eq!(wire(&borrowed), wire(&owned));
    assert_eq!(
        wire(&borrowed),
        r#"{"events":[{"type":"user/message","seq":0,"time":7,"data":{"id":"u"}}],"replaced":true,"seq":1}"#
    );
    let splice = json!({"target": "next-turn"});
    let resume = ResumeReply {
        header: SessionHeader {
            id: "s".into(),
            ..SessionHeader::default()
        },
        seq: 2,
        last_turn: 0,
        last_end: None,
        request_header: None,
        request_context: Some(json!({"window": 8})),
        splices: vec![&splice],
        splice_seqs: vec![1],
        unpublished: false,
    };
    assert_eq!(
        wire(&resume),
        r#"{"header":{"version":0,"id":"s","createdAt":0},"seq":2,"lastTurn":0,"lastEnd":null,"requestHeader":null,"requestContext":{"window":8},"splices":[{"target":"next-turn"}],"spliceSeqs":[1]}"#
    );
}

#[test]
fn bus_payloads_keep_the_original_keys() {
    let header = SessionHeader {
        id: "s".into(),
        ..SessionHeader::default()
    };
    let created = SessionCreated {
        header: header.clone(),
        stored: Some(0),
        resumed: Some(false),
        events: vec![],
    };
    assert_eq!(
        wire(&created),
        r#"{"header":{"version":0,"id":"s","createdAt":0},"stored":0,"resumed":false,"events":[]}"#
    );
    // A fork's notice has neither `stored` nor `resumed`.
    let forked = SessionCreated {
        stored: None,
        resumed: None,
        ..created
    };
    assert_eq!(
        wire(&forked),
        r#"{"header":{"version":0,"id":"s","createdAt":0},"events":[]}"#
    );
    let ev = event(event::TURN_START, 0, json!({"turn": 1}));
    let appended = SessionAppended {
        session_id: "s".into(),
        event: &ev,
    };
    assert_eq!(
        wire(&appended),
        r#"{"sessionId":"s","event":{"type":"turn/start","seq":0,"time":7,"data":{"turn":1}}}"#
    );
    let back: SessionAppended = parse(serde_json::to_value(&appended).unwrap());
    assert_eq!(back.event, ev);
    assert_eq!(
        wire(SessionRef {
            session_id: "s".into()
        }),
        r#"{"sessionId":"s"}"#
    );
}
