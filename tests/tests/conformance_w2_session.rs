//! Conformance of the session log's validation (reference dsh-core §10.1:
//! session.spec, surface.spec, request-header.spec, invariant.spec,
//! scoped.spec): message shapes and request headers at seed and load
//! (§2.3), the surface transition at append (§2.5), the legacy header
//! reason, the pairing of results with calls (§2.10), the folded request
//! context, a supplied header's id, and what `flush` answers. The
//! `session` and `session-jsonl` plugins (and, for the request context, the
//! agent core) in a real host. Rows: `tests/CONFORMANCE.md` (§10.1).
//!
//! No waits here: every call is answered after its effects.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::names::{agent_loop, agents, code, service, sessions};
use dsh_sdk::vocab::event;
use dsh_sdk::Error;
use dsh_testkit::agent::{core_host, events, new_agent, turn};
use dsh_testkit::fake_llm::text;
use dsh_testkit::session::store;
use dsh_testkit::TestHost;
use serde_json::{json, Value};

const CWD: &str = "/conformance/w2-session";

/// A host with the session log alone: nothing listens to `session/flush`.
async fn bare() -> TestHost {
    let t = TestHost::start().await;
    t.apply("[[row]]\nid='session'\nplugin='session'\n").await;
    t
}

async fn try_call(t: &TestHost, method: &str, params: Value) -> Result<Value, Error> {
    t.host.call(service::SESSIONS, method, params).await
}

async fn create(t: &TestHost, id: &str) {
    t.call(
        service::SESSIONS,
        sessions::CREATE,
        json!({"id": id, "meta": {"cwd": CWD}}),
    )
    .await;
}

/// Appends `kind` with `extra` envelope fields (`surfaceOp`,
/// `sourceEventSeqs`); a surface type without them gets `append`.
async fn try_append(
    t: &TestHost,
    id: &str,
    kind: &str,
    data: Value,
    extra: Value,
) -> Result<Value, Error> {
    let mut a = json!({"id": id, "type": kind, "data": data});
    if event::SURFACE.contains(&kind) {
        a["surfaceOp"] = json!("append");
    }
    for (k, v) in extra.as_object().into_iter().flatten() {
        a[k] = v.clone();
    }
    try_call(t, sessions::APPEND, a).await
}

async fn append(t: &TestHost, id: &str, kind: &str, data: Value) -> Value {
    try_append(t, id, kind, data, json!({}))
        .await
        .unwrap_or_else(|e| panic!("append {kind}: {e}"))
}

fn refused(r: Result<Value, Error>) -> Error {
    match r {
        Ok(v) => panic!("expected a refusal, got {v}"),
        Err(e) => e,
    }
}

/// Asserts `r` was refused with `code` and exactly `message`.
fn assert_refused(r: Result<Value, Error>, code: &str, message: &str) {
    let e = refused(r);
    assert_eq!((e.code.as_str(), e.message.as_str()), (code, message));
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}})
}

fn assistant(source: Value) -> Value {
    json!({"turn": 1, "step": 1, "message": {"id": "a1", "role": "assistant",
        "content": [{"type": "text", "text": "ok"}], "source": source}})
}

fn tool_result(id: &str, call: &str, text: &str) -> Value {
    json!({"turn": 1, "step": 1, "message": {"id": id, "role": "user",
        "content": [{"type": "tool-result", "toolCallId": call, "content": [{"type": "text", "text": text}], "isError": false}],
        "source": {"kind": "tool", "callId": call}}})
}

fn header(config: Value) -> Value {
    json!({"header": {"config": config}, "reason": "initial"})
}

/// A seed event at `seq`.
fn seed_event(seq: u64, kind: &str, data: Value) -> Value {
    let mut e = json!({"type": kind, "seq": seq, "time": 1, "data": data});
    if event::SURFACE.contains(&kind) {
        e["surfaceOp"] = json!("append");
    }
    e
}

/// Creates session `id` from `seed` (a turn start, then `events`).
async fn try_seed(t: &TestHost, id: &str, events: &[(&str, Value)]) -> Result<Value, Error> {
    let mut seed = vec![seed_event(0, event::TURN_START, json!({"turn": 1}))];
    seed.extend(
        events
            .iter()
            .enumerate()
            .map(|(i, (kind, data))| seed_event(i as u64 + 1, kind, data.clone())),
    );
    try_call(t, sessions::CREATE, json!({"id": id, "seed": seed})).await
}

/// An open turn 1 with step 1.
async fn open_step(t: &TestHost, id: &str) {
    create(t, id).await;
    append(t, id, event::TURN_START, json!({"turn": 1})).await;
    append(t, id, event::STEP_START, json!({"turn": 1, "step": 1})).await;
}

// ---- session.spec.ts: §2.3 shapes at seed and load ----------------------

#[tokio::test]
async fn seed_and_load_reject_request_headers_lacking_provider_or_model() {
    let (t, root) = store().await;
    for (n, config) in [
        json!({"provider": "p"}),
        json!({"model": "m"}),
        json!({"provider": "", "model": "m"}),
    ]
    .into_iter()
    .enumerate()
    {
        let r = try_seed(
            &t,
            &format!("h{n}"),
            &[(event::REQUEST_HEADER, header(config))],
        )
        .await;
        assert_refused(
            r,
            "INVALID_APPEND",
            "seed request/header at index 1 lacks provider/model",
        );
    }
    let ok = header(json!({"provider": "p", "model": "m"}));
    try_seed(&t, "h-ok", &[(event::REQUEST_HEADER, ok)])
        .await
        .unwrap();

    // A stored log is checked the same way when it is loaded to resume.
    let dir = root.join("--conformance-w2-session--");
    std::fs::create_dir_all(&dir).unwrap();
    let head = json!({"type": "session", "version": 0, "id": "stored", "createdAt": 1, "cwd": CWD});
    let lines = [
        seed_event(0, event::TURN_START, json!({"turn": 1})),
        seed_event(1, event::REQUEST_HEADER, header(json!({"provider": "p"}))),
        seed_event(
            2,
            event::TURN_END,
            json!({"turn": 1, "reason": {"kind": "completed"}}),
        ),
    ];
    let body: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(
        dir.join("stored.jsonl"),
        format!("{head}\n{}\n", body.join("\n")),
    )
    .unwrap();
    assert_refused(
        try_call(&t, sessions::RESUME, json!({"id": "stored"})).await,
        "INVALID_APPEND",
        "seed request/header at index 1 lacks provider/model",
    );
    t.shutdown().await;
}

#[tokio::test]
async fn seed_rejects_assistant_messages_lacking_provider_or_model() {
    let (t, _) = store().await;
    let step = json!({"turn": 1, "step": 1});
    for (n, source) in [
        json!({"kind": "model", "provider": "p"}),
        json!({"kind": "model", "model": "m"}),
        json!({"kind": "user", "provider": "p", "model": "m"}),
    ]
    .into_iter()
    .enumerate()
    {
        let r = try_seed(
            &t,
            &format!("a{n}"),
            &[
                (event::STEP_START, step.clone()),
                (event::ASSISTANT_MESSAGE, assistant(source)),
            ],
        )
        .await;
        assert_refused(
            r,
            "INVALID_APPEND",
            "seed assistant/message at index 2 message must have model source",
        );
    }
    let good = json!({"kind": "model", "provider": "p", "model": "m"});
    try_seed(
        &t,
        "a-ok",
        &[
            (event::STEP_START, step),
            (event::ASSISTANT_MESSAGE, assistant(good)),
        ],
    )
    .await
    .unwrap();
    t.shutdown().await;
}

#[tokio::test]
async fn seed_rejects_malformed_message_shapes() {
    let (t, _) = store().await;
    let mut no_id = user("u", "hi");
    no_id["id"] = json!("");
    let mut role = user("u", "hi");
    role["role"] = json!("assistant");
    let mut source = user("u", "hi");
    source["source"] = json!({"kind": ""});
    let mut content = user("u", "hi");
    content["content"] = json!({"type": "text"});
    let mut mismatched = tool_result("r", "c1", "out");
    mismatched["message"]["content"][0]["toolCallId"] = json!("c2");
    let mut two_blocks = tool_result("r", "c1", "out");
    let block = two_blocks["message"]["content"][0].clone();
    two_blocks["message"]["content"] = json!([block.clone(), block]);
    let mut not_tool = tool_result("r", "c1", "out");
    not_tool["message"]["source"] = json!({"kind": "user"});
    let cases = [
        (
            event::USER_MESSAGE,
            no_id,
            "seed user/message at index 1 lacks an identified message",
        ),
        (
            event::USER_MESSAGE,
            role,
            "seed user/message at index 1 message must have role \"user\"",
        ),
        (
            event::USER_MESSAGE,
            source,
            "seed user/message at index 1 message has invalid source",
        ),
        (
            event::USER_MESSAGE,
            content,
            "seed user/message at index 1 message has invalid content",
        ),
        (
            event::TOOL_RESULT,
            mismatched,
            "seed tool/result at index 1 message has mismatched tool call ids",
        ),
        (
            event::TOOL_RESULT,
            two_blocks,
            "seed tool/result at index 1 message must contain one tool-result block",
        ),
        (
            event::TOOL_RESULT,
            not_tool,
            "seed tool/result at index 1 message must have tool source",
        ),
    ];
    for (n, (kind, data, message)) in cases.into_iter().enumerate() {
        let r = try_seed(&t, &format!("m{n}"), &[(kind, data)]).await;
        assert_refused(r, "INVALID_APPEND", message);
    }
    // Shapes are a seed/load check: a live append of the same is the
    // appending plugin's business (the original validates only its
    // surface metadata there).
    create(&t, "live").await;
    let mut odd = user("u", "hi");
    odd["source"] = json!({"kind": ""});
    append(&t, "live", event::USER_MESSAGE, odd).await;
    t.shutdown().await;
}

#[tokio::test]
async fn seed_rejects_invalid_reasoning_effort_and_adapter_default_values() {
    let (t, _) = store().await;
    let with = |extra: Value, defaults: Option<Value>| {
        let mut config = json!({"provider": "p", "model": "m"});
        for (k, v) in extra.as_object().into_iter().flatten() {
            config[k] = v.clone();
        }
        let mut h = json!({"config": config});
        if let Some(d) = defaults {
            h["adapterDefaults"] = d;
        }
        json!({"header": h, "reason": "initial"})
    };
    let effort = "seed request/header at index 1 has an invalid reasoningEffort";
    let defaults = "seed request/header at index 1 has invalid adapterDefaults";
    let cases = [
        (with(json!({"reasoningEffort": ""}), None), effort),
        (with(json!({"reasoningEffort": 2}), None), effort),
        (
            with(json!({}), Some(json!({"reasoningEffort": true}))),
            defaults,
        ),
        (
            with(json!({"maxTokens": 8}), Some(json!({"maxTokens": false}))),
            defaults,
        ),
        (
            with(
                json!({"maxTokens": 8}),
                Some(json!({"maxTokens": true, "stop": true})),
            ),
            defaults,
        ),
    ];
    for (n, (data, message)) in cases.into_iter().enumerate() {
        let r = try_seed(&t, &format!("r{n}"), &[(event::REQUEST_HEADER, data)]).await;
        assert_refused(r, "INVALID_APPEND", message);
    }
    let good = with(
        json!({"reasoningEffort": "high", "maxTokens": 8}),
        Some(json!({"reasoningEffort": true, "maxTokens": true})),
    );
    try_seed(&t, "r-ok", &[(event::REQUEST_HEADER, good)])
        .await
        .unwrap();
    t.shutdown().await;
}

#[tokio::test]
async fn a_supplied_header_of_another_id_or_an_unknown_origin_is_refused() {
    let (t, _) = store().await;
    let h = |id: &str, origin: Option<&str>| {
        let mut h = json!({"version": 0, "id": id, "createdAt": 5});
        if let Some(o) = origin {
            h["origin"] = json!(o);
        }
        h
    };
    assert_refused(
        try_call(
            &t,
            sessions::CREATE,
            json!({"id": "mine", "header": h("theirs", None)}),
        )
        .await,
        "INVALID_PAYLOAD",
        "session header id \"theirs\" does not match session id \"mine\"",
    );
    assert_refused(
        try_call(
            &t,
            sessions::CREATE,
            json!({"id": "mine", "header": h("mine", Some("human"))}),
        )
        .await,
        "INVALID_PAYLOAD",
        "session header origin must be \"subagent\"",
    );
    let mut v1 = h("mine", None);
    v1["version"] = json!(1);
    assert_refused(
        try_call(&t, sessions::CREATE, json!({"id": "mine", "header": v1})).await,
        "INVALID_PAYLOAD",
        "session header version must be 0, got 1",
    );
    // Nothing was created; a matching header is accepted as given.
    let made = t
        .call(
            service::SESSIONS,
            sessions::CREATE,
            json!({"id": "mine", "header": h("mine", Some("subagent"))}),
        )
        .await;
    assert_eq!(made["header"]["id"], "mine");
    assert_eq!(made["header"]["origin"], "subagent");
    assert_eq!(made["header"]["createdAt"], 5);
    t.shutdown().await;
}

// ---- surface.spec.ts: the surface transition at append -------------------

#[tokio::test]
async fn append_rejects_invalid_replace_surface_ops_and_leaves_the_log_alone() {
    let (t, _) = store().await;
    create(&t, "s").await;
    append(&t, "s", event::USER_MESSAGE, user("u0", "a")).await;
    append(&t, "s", event::USER_MESSAGE, user("u1", "b")).await;
    let replace = |start: Value, end: Value| json!({"op": "replace", "start": start, "end": end});
    let cases = [
        (
            json!({"surfaceOp": replace(json!(7), json!(1)), "sourceEventSeqs": [0, 1]}),
            "surface replace: start seq 7 not found in surface",
        ),
        (
            json!({"surfaceOp": replace(json!(0), json!(9)), "sourceEventSeqs": [0, 1]}),
            "surface replace: end seq 9 not found in surface",
        ),
        (
            json!({"surfaceOp": replace(json!(1), json!(0)), "sourceEventSeqs": [0, 1]}),
            "surface replace: start seq 1 (index 1) is after end seq 0 (index 0)",
        ),
        (
            json!({"surfaceOp": {"op": "replace", "start": 0}, "sourceEventSeqs": [0]}),
            "session event \"user/message\" carries an invalid replace surfaceOp",
        ),
        (
            json!({"surfaceOp": {"op": "replace", "start": 0, "end": 1, "extra": true}, "sourceEventSeqs": [0, 1]}),
            "session event \"user/message\" carries an invalid replace surfaceOp",
        ),
        (
            json!({"surfaceOp": "prepend"}),
            "session event \"user/message\" carries an invalid surfaceOp",
        ),
    ];
    for (extra, message) in cases {
        let r = try_append(&t, "s", event::USER_MESSAGE, user("r", "sum"), extra).await;
        assert_refused(r, "INVALID_APPEND", message);
    }
    assert_eq!(events(&t, "s").await.len(), 2);
    // A valid replace still splices.
    let ok = json!({"surfaceOp": replace(json!(0), json!(1)), "sourceEventSeqs": [0, 1]});
    try_append(&t, "s", event::USER_MESSAGE, user("r", "sum"), ok)
        .await
        .unwrap();
    let derived = t
        .call(service::SESSIONS, sessions::DERIVE, json!({"id": "s"}))
        .await;
    assert_eq!(derived, json!([user("r", "sum")]));
    t.shutdown().await;
}

#[tokio::test]
async fn a_replace_must_cite_every_shadowed_node() {
    let (t, _) = store().await;
    create(&t, "c").await;
    for n in 0..3 {
        append(&t, "c", event::USER_MESSAGE, user(&format!("u{n}"), "x")).await;
    }
    let op = json!({"op": "replace", "start": 0, "end": 2});
    for (sources, missing) in [(json!([1]), "0, 2"), (Value::Null, "0, 1, 2")] {
        let mut extra = json!({"surfaceOp": op});
        if !sources.is_null() {
            extra["sourceEventSeqs"] = sources;
        }
        let r = try_append(&t, "c", event::USER_MESSAGE, user("r", "sum"), extra).await;
        assert_refused(
            r,
            "INVALID_APPEND",
            &format!("surface replace: sourceEventSeqs must include every shadowed surface node; missing {missing}"),
        );
    }
    t.shutdown().await;
}

#[tokio::test]
async fn empty_source_event_seqs_are_allowed_only_on_assistant_messages() {
    let (t, _) = store().await;
    open_step(&t, "e").await;
    let empty = json!({"sourceEventSeqs": []});
    assert_refused(
        try_append(&t, "e", event::USER_MESSAGE, user("u", "x"), empty.clone()).await,
        "INVALID_APPEND",
        "sourceEventSeqs must not be empty except on assistant/message",
    );
    append(
        &t,
        "e",
        event::TOOL_CALL,
        json!({"turn": 1, "step": 1, "callId": "c1", "name": "read", "arguments": "{}"}),
    )
    .await;
    assert_refused(
        try_append(
            &t,
            "e",
            event::TOOL_RESULT,
            tool_result("r", "c1", "x"),
            empty.clone(),
        )
        .await,
        "INVALID_APPEND",
        "sourceEventSeqs must not be empty except on assistant/message",
    );
    let source = json!({"kind": "model", "provider": "p", "model": "m"});
    let kept = try_append(&t, "e", event::ASSISTANT_MESSAGE, assistant(source), empty)
        .await
        .unwrap();
    assert_eq!(kept["sourceEventSeqs"], json!([]));
    assert_refused(
        try_append(
            &t,
            "e",
            event::USER_MESSAGE,
            user("u", "x"),
            json!({"sourceEventSeqs": [0, 0]}),
        )
        .await,
        "INVALID_APPEND",
        "sourceEventSeqs must not contain duplicates",
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_tool_result_replacement_rewrites_exactly_one_result_and_only_its_content() {
    let (t, _) = store().await;
    open_step(&t, "tr").await;
    append(&t, "tr", event::USER_MESSAGE, user("u", "go")).await; // seq 2
    append(
        &t,
        "tr",
        event::TOOL_CALL,
        json!({"turn": 1, "step": 1, "callId": "c1", "name": "read", "arguments": "{}"}),
    )
    .await; // seq 3
    append(
        &t,
        "tr",
        event::TOOL_RESULT,
        tool_result("r1", "c1", "long output"),
    )
    .await; // seq 4
    let one = |start: u64, end: u64, sources: Value| json!({"surfaceOp": {"op": "replace", "start": start, "end": end}, "sourceEventSeqs": sources});
    let cases = [
        (
            tool_result("r1", "c1", "x"),
            one(2, 4, json!([2, 4])),
            "tool/result surface replacement must rewrite exactly one current node",
        ),
        (
            tool_result("r1", "c1", "x"),
            one(2, 2, json!([2])),
            "tool/result surface replacement must target a current tool/result",
        ),
        (
            tool_result("r-other-id", "c1", "x"),
            one(4, 4, json!([4])),
            "tool/result surface replacement may change only content",
        ),
    ];
    for (data, extra, message) in cases {
        let r = try_append(&t, "tr", event::TOOL_RESULT, data, extra).await;
        assert_refused(r, "INVALID_APPEND", message);
    }
    let spilled = try_append(
        &t,
        "tr",
        event::TOOL_RESULT,
        tool_result("r1", "c1", "[spilled]"),
        one(4, 4, json!([4])),
    )
    .await
    .unwrap();
    assert_eq!(spilled["seq"], 5);
    let derived = t
        .call(service::SESSIONS, sessions::DERIVE, json!({"id": "tr"}))
        .await;
    assert_eq!(
        derived[1]["content"][0]["content"],
        json!([{"type": "text", "text": "[spilled]"}])
    );
    t.shutdown().await;
}

// ---- request-header.spec.ts ----------------------------------------------

#[tokio::test]
async fn a_request_header_with_reason_fallback_is_rejected_at_append_and_seed() {
    let (t, _) = store().await;
    create(&t, "f").await;
    append(&t, "f", event::TURN_START, json!({"turn": 1})).await;
    let fallback =
        json!({"header": {"config": {"provider": "p", "model": "m"}}, "reason": "fallback"});
    assert_refused(
        try_append(&t, "f", event::REQUEST_HEADER, fallback.clone(), json!({})).await,
        "INVALID_APPEND",
        "session event \"request/header\" uses unsupported legacy request/header reason \"fallback\"",
    );
    assert_eq!(events(&t, "f").await.len(), 1);
    assert_refused(
        try_seed(&t, "f-seed", &[(event::REQUEST_HEADER, fallback)]).await,
        "INVALID_APPEND",
        "seed event at index 1 uses unsupported legacy request/header reason \"fallback\"",
    );
    t.shutdown().await;
}

#[tokio::test]
async fn the_request_context_fold_keeps_the_last_record_and_a_resumed_agent_does_not_relog_it() {
    let (t, _) = store().await;
    create(&t, "rc").await;
    let rc = || {
        t.call(
            service::SESSIONS,
            sessions::REQUEST_CONTEXT,
            json!({"id": "rc"}),
        )
    };
    assert_eq!(rc().await, Value::Null);
    append(&t, "rc", event::TURN_START, json!({"turn": 1})).await;
    append(
        &t,
        "rc",
        event::REQUEST_CONTEXT,
        json!({"provider": "p", "model": "m1"}),
    )
    .await;
    append(&t, "rc", event::USER_MESSAGE, user("u", "x")).await;
    assert_eq!(rc().await, json!({"provider": "p", "model": "m1"}));
    append(
        &t,
        "rc",
        event::REQUEST_CONTEXT,
        json!({"provider": "p", "model": "m2", "contextWindow": 64000}),
    )
    .await;
    assert_eq!(
        rc().await,
        json!({"provider": "p", "model": "m2", "contextWindow": 64000})
    );
    t.shutdown().await;

    // The agent loop compares against the session's fold: a resumed agent
    // on the same route logs no second `request/context`.
    let (t, fake) = core_host(|rows| rows).await;
    let agent = new_agent(&t, "/tmp").await;
    fake.push([text("one")]);
    assert_eq!(
        turn(&t, &agent, "first").await,
        json!({"kind": "completed"})
    );
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": agent}))
        .await;
    t.call(
        service::AGENT_LOOP,
        agent_loop::RESUME,
        json!({"sessionId": agent, "agentOptions": {"provider": "fake", "model": "m1"}}),
    )
    .await;
    fake.push([text("two")]);
    assert_eq!(
        turn(&t, &agent, "second").await,
        json!({"kind": "completed"})
    );
    let ev = events(&t, &agent).await;
    let contexts: Vec<&Value> = ev
        .iter()
        .filter(|e| e["type"] == event::REQUEST_CONTEXT)
        .map(|e| &e["data"])
        .collect();
    // One record, with the window the route's adapter answers for the
    // model (the DeepSeek adapter's default for a model it does not list).
    assert_eq!(
        contexts,
        [&json!({"provider": "fake", "model": "m1", "contextWindow": 1_000_000})]
    );
    let headers: Vec<&Value> = ev
        .iter()
        .filter(|e| e["type"] == event::REQUEST_HEADER)
        .map(|e| &e["data"]["reason"])
        .collect();
    assert_eq!(headers, [&json!("initial"), &json!("resume")]);
    t.shutdown().await;
}

// ---- invariant.spec.ts: results pair with calls of their step ------------

#[tokio::test]
async fn a_tool_result_needs_a_call_of_its_own_step_unless_it_is_a_not_started_repair() {
    let (t, _) = store().await;
    open_step(&t, "p").await;
    let call = |id: &str, step: u64| json!({"turn": 1, "step": step, "callId": id, "name": "read", "arguments": "{}"});
    append(&t, "p", event::TOOL_CALL, call("c1", 1)).await;
    assert_refused(
        try_append(
            &t,
            "p",
            event::TOOL_RESULT,
            tool_result("r", "c2", "x"),
            json!({}),
        )
        .await,
        "INVALID_APPEND",
        "tool/result for c2 with no prior tool/call in this step",
    );
    append(&t, "p", event::TOOL_RESULT, tool_result("r1", "c1", "x")).await;
    assert_refused(
        try_append(
            &t,
            "p",
            event::TOOL_RESULT,
            tool_result("r1b", "c1", "x"),
            json!({}),
        )
        .await,
        "INVALID_APPEND",
        "tool/result for c1 with no prior tool/call in this step",
    );
    // A call left unanswered at step end is allowed, and does not carry
    // over into the next step.
    append(&t, "p", event::TOOL_CALL, call("c3", 1)).await;
    append(&t, "p", event::STEP_END, json!({"turn": 1, "step": 1})).await;
    append(&t, "p", event::STEP_START, json!({"turn": 1, "step": 2})).await;
    let mut late = tool_result("r3", "c3", "x");
    late["step"] = json!(2);
    assert_refused(
        try_append(&t, "p", event::TOOL_RESULT, late, json!({})).await,
        "INVALID_APPEND",
        "tool/result for c3 with no prior tool/call in this step",
    );
    // The crash-repair result of a call that never started needs no call.
    let mut not_started = tool_result("r4", "c4", "not started");
    not_started["step"] = json!(2);
    not_started["message"]["content"][0]["isError"] = json!(true);
    not_started["error"] = json!({"name": "ToolNotStartedError", "code": code::TOOL_NOT_STARTED});
    append(&t, "p", event::TOOL_RESULT, not_started).await;
    t.shutdown().await;
}

// ---- scoped.spec.ts: flush -------------------------------------------------

#[tokio::test]
async fn flush_answers_whether_any_listener_took_part() {
    let t = bare().await;
    create(&t, "alone").await;
    assert_eq!(
        t.call(service::SESSIONS, sessions::FLUSH, json!({"id": "alone"}))
            .await,
        json!(false)
    );
    t.shutdown().await;
    let (t, _) = store().await;
    create(&t, "stored").await;
    append(&t, "stored", event::USER_MESSAGE, user("u", "x")).await;
    assert_eq!(
        t.call(service::SESSIONS, sessions::FLUSH, json!({"id": "stored"}))
            .await,
        json!(true)
    );
    t.shutdown().await;
}
