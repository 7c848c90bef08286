//! Conformance, §10.4 (second pass): the tool pipeline's output contracts
//! (validation, render, presentation meta), post-execute decisions (value
//! replacement, contexts, invalid decisions) and the staged pipeline the
//! agent loop drives (a cancel during pre-execute) — real plugin builds in
//! a real host. The rows of `tests/CONFORMANCE.md` (§10.4) name these tests.
//! Nothing here sleeps to synchronize or asserts a duration.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::codes;
use dsh_sdk::names::{agent_loop, agents, bus, code, service, sessions, tools};
use dsh_sdk::vocab::event;
use dsh_testkit::agent::core_host_applied;
use dsh_testkit::fake_llm::{raw_calls, text, Answer, FakeLlm};
use dsh_testkit::fixtures::{
    kit_row, probe_call, register_tool, stage_probe, toml_value, HOOKS, PROBE,
};
use dsh_testkit::TestHost;
use serde_json::{json, Value};

// ------------------------------------------------ the registry, with a probe

/// Rows: the registry, and a probe `impl` providing the tool service
/// `impl-svc` (its `render` answers `render:<value>` and meta
/// `{projected: value}`) and the guard services `g1`, `g2` (their `check`
/// denies with the call's `arguments.deny.<service>`), with probe
/// `listeners` (TOML).
fn tool_rows(listeners: &str) -> String {
    format!(
        "[[row]]\nid = \"tools\"\nplugin = \"tools\"\n\
         [[row]]\nid = \"impl\"\nplugin = \"probe\"\n[row.config]\ntag = \"impl\"\n\
         provides = [\"impl-svc\", \"g1\", \"g2\"]\nlisteners = [{listeners}]\n"
    )
}

/// A host with the registry and tool `t` (service `impl-svc`) registered
/// with the registration fields `more`.
async fn tools_with(listeners: &str, more: Value) -> TestHost {
    let t = TestHost::start().await;
    stage_probe(&t);
    t.apply(&tool_rows(listeners)).await;
    register(&t, more).await.unwrap();
    t
}

async fn register(t: &TestHost, more: Value) -> Result<Value, dsh_sdk::Error> {
    register_tool(t, "t", more).await
}

async fn exec(t: &TestHost, args: Value) -> Value {
    exec_as(t, "a1", args).await
}

async fn exec_as(t: &TestHost, agent: &str, args: Value) -> Value {
    t.call(
        service::TOOLS,
        tools::EXECUTE,
        json!({"callId": "c1", "name": "t", "arguments": args, "agent": agent, "cwd": "/"}),
    )
    .await
}

/// Probe listeners recording every stage of an execution (pre-execute,
/// execute, post-execute, result), as a TOML array body.
fn record_every_stage() -> String {
    [
        bus::TOOLS_PRE_EXECUTE,
        bus::TOOLS_EXECUTE,
        bus::TOOLS_POST_EXECUTE,
        bus::TOOLS_RESULT,
    ]
    .iter()
    .map(|e| format!("{{ event = \"{e}\", action = \"record\" }}"))
    .collect::<Vec<_>>()
    .join(", ")
}

/// A probe listener on `event` answering `reply` (no `next`).
fn reply(event: &str, reply: &Value) -> String {
    format!(
        "{{ event = \"{event}\", action = \"reply\", reply = {} }}",
        toml_value(reply)
    )
}

/// The payloads of `event` the probe heard, in order.
async fn heard(t: &TestHost, event: &str) -> Vec<Value> {
    let journal: Vec<String> =
        serde_json::from_value(t.call("probe:impl", "journal", json!({})).await).unwrap();
    let prefix = format!("event:{event}:");
    journal
        .iter()
        .filter_map(|e| e.strip_prefix(&prefix))
        .map(|p| serde_json::from_str(p).unwrap())
        .collect()
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "content": [{"type": "text", "text": text}],
           "source": {"kind": "user"}})
}

const STRING_OUTPUT: &str = r#"{"schema": {"type": "string"}, "render": true}"#;

fn string_output() -> Value {
    json!({"output": serde_json::from_str::<Value>(STRING_OUTPUT).unwrap()})
}

/// A value that breaks the output schema is the original's
/// `INVALID_TOOL_OUTPUT` failure, and post-execute already sees the failure.
#[tokio::test]
async fn a_value_breaking_the_output_schema_is_invalid_tool_output_before_post_execute() {
    let t = tools_with(
        "{ event = \"tools/post-execute\", action = \"record\" }",
        json!({"output": {"schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}),
    )
    .await;
    let failed = json!({"isError": true,
        "error": {"message": "tool \"t\" returned invalid output: value.text: expected string",
                  "info": {"name": "ToolOutputError", "code": "INVALID_TOOL_OUTPUT"}},
        "content": [{"type": "text", "text": "Error: tool \"t\" returned invalid output: value.text: expected string"}]});
    assert_eq!(exec(&t, json!({"value": {"text": 5}})).await, failed);
    let post = heard(&t, bus::TOOLS_POST_EXECUTE).await;
    assert_eq!(post.len(), 1);
    assert_eq!(post[0]["result"], failed);
    // A value that keeps the contract passes, with the body's own content
    // (no `render` declared).
    assert_eq!(
        exec(
            &t,
            json!({"value": {"text": "ok"}, "content": [{"type": "text", "text": "body"}]})
        )
        .await,
        json!({"isError": false, "value": {"text": "ok"}, "content": [{"type": "text", "text": "body"}]})
    );
    t.shutdown().await;
}

/// With `output.render`, the content and the presentation meta are the
/// tool's projections of its value, not what the body answered.
#[tokio::test]
async fn render_projects_the_value_into_the_content_and_the_meta() {
    let t = tools_with("", string_output()).await;
    assert_eq!(
        exec(
            &t,
            json!({"value": "hi", "content": [{"type": "text", "text": "body"}]})
        )
        .await,
        json!({"isError": false, "value": "hi",
               "content": [{"type": "text", "text": "render:hi"}], "meta": {"projected": "hi"}})
    );
    t.shutdown().await;
}

/// A failing `render` is one failed call (`INVALID_TOOL_OUTPUT`, no value).
#[tokio::test]
async fn a_failing_render_is_one_failed_call() {
    let t = tools_with("", string_output()).await;
    let r = exec(&t, json!({"value": "hi", "failRender": true})).await;
    assert_eq!(
        r,
        json!({"isError": true,
               "error": {"message": "tool \"t\" returned invalid output: output.render failed: renderer exploded",
                         "info": {"name": "ToolOutputError", "code": "INVALID_TOOL_OUTPUT"}},
               "content": [{"type": "text", "text": "Error: tool \"t\" returned invalid output: output.render failed: renderer exploded"}]})
    );
    t.shutdown().await;
}

/// Content replacement keeps the value and the meta; value replacement
/// renders both projections again, and its contexts follow.
#[tokio::test]
async fn content_replacement_keeps_the_meta_and_value_replacement_renders_again() {
    let content = reply(
        bus::TOOLS_POST_EXECUTE,
        &json!({"kind": "accept", "content": [{"type": "text", "text": "policy content"}]}),
    );
    let t = tools_with(&content, string_output()).await;
    assert_eq!(
        exec(&t, json!({"value": "body"})).await,
        json!({"isError": false, "value": "body",
               "content": [{"type": "text", "text": "policy content"}], "meta": {"projected": "body"}})
    );
    t.shutdown().await;

    let value = reply(
        bus::TOOLS_POST_EXECUTE,
        &json!({"kind": "accept", "value": "policy value",
                "additionalContexts": [user("u1", "value context")]}),
    );
    let t = tools_with(&value, string_output()).await;
    assert_eq!(
        exec(&t, json!({"value": "body"})).await,
        json!({"isError": false, "value": "policy value",
               "content": [{"type": "text", "text": "render:policy value"}],
               "meta": {"projected": "policy value"},
               "additionalContexts": [user("u1", "value context")]})
    );
    t.shutdown().await;
}

/// A decision replacing both projections, a value on a failed result, a
/// value breaking the contract, and a value for a tool that cannot render
/// it: each fails the call.
#[tokio::test]
async fn invalid_post_execute_decisions_fail_the_call() {
    let cases = [
        (
            json!({"kind": "accept", "value": "v", "content": [{"type": "text", "text": "c"}]}),
            json!({"value": "body"}),
            string_output(),
            json!({"message": "tools/post-execute accept decision cannot replace both value and content"}),
        ),
        (
            json!({"kind": "accept", "value": "v"}),
            json!({"fail": "BODY_FAILED"}),
            string_output(),
            json!({"message": "tools/post-execute cannot replace the value of a failed result"}),
        ),
        (
            json!({"kind": "accept", "value": 1}),
            json!({"value": "body"}),
            string_output(),
            json!({"message": "tool \"t\" returned invalid output: value: expected string",
                   "info": {"name": "ToolOutputError", "code": "INVALID_TOOL_OUTPUT"}}),
        ),
        (
            json!({"kind": "accept", "value": "v"}),
            json!({"value": "body"}),
            json!({}),
            json!({"message": "tool \"t\" returned invalid output: output.render is not declared",
                   "info": {"name": "ToolOutputError", "code": "INVALID_TOOL_OUTPUT"}}),
        ),
    ];
    for (decision, args, registration, error) in cases {
        let t = tools_with(&reply(bus::TOOLS_POST_EXECUTE, &decision), registration).await;
        let r = exec(&t, args).await;
        assert_eq!(r["isError"], json!(true), "{decision}");
        assert_eq!(r["error"], error, "{decision}");
        assert_eq!(r.get("value"), None, "{decision}");
        t.shutdown().await;
    }
}

/// Post-execute contexts follow the tool's own; a block keeps only its own.
#[tokio::test]
async fn post_execute_contexts_follow_the_tools_and_a_block_keeps_only_its_own() {
    let tool = json!({"value": 1, "content": [{"type": "text", "text": "c"}],
                      "additionalContexts": [user("u1", "tool context")]});
    let accept = reply(
        bus::TOOLS_POST_EXECUTE,
        &json!({"kind": "accept", "additionalContexts": [user("u2", "post context")]}),
    );
    let t = tools_with(&accept, json!({})).await;
    assert_eq!(
        exec(&t, tool.clone()).await["additionalContexts"],
        json!([user("u1", "tool context"), user("u2", "post context")])
    );
    t.shutdown().await;

    let block = reply(
        bus::TOOLS_POST_EXECUTE,
        &json!({"kind": "block", "feedback": [{"type": "text", "text": "no"}],
                "additionalContexts": [user("u2", "post context")]}),
    );
    let t = tools_with(&block, json!({})).await;
    assert_eq!(
        exec(&t, tool).await,
        json!({"isError": true, "error": {"message": "no"},
               "content": [{"type": "text", "text": "no"}],
               "additionalContexts": [user("u2", "post context")]})
    );
    t.shutdown().await;
}

/// An output contract is an object.
#[tokio::test]
async fn an_output_contract_that_is_not_an_object_is_refused() {
    let t = tools_with("", json!({})).await;
    let e = as_probe(
        &t,
        tools::REGISTER,
        json!({"name": "u", "service": "impl-svc", "output": "string"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, codes::INVALID_PAYLOAD);
    assert_eq!(e.message, "tool \"u\": output must be {schema, render?}");
    t.shutdown().await;
}

/// Calls `tools.<method>` as the probe (so its fiber owns what it makes).
async fn as_probe(t: &TestHost, method: &str, params: Value) -> Result<Value, dsh_sdk::Error> {
    probe_call(t, "impl", service::TOOLS, method, params).await
}

/// The tool names agent `scope` is offered.
async fn offered(t: &TestHost, scope: &str) -> Vec<String> {
    let schemas = t
        .call(service::TOOLS, tools::SCHEMAS, json!({"scope": scope}))
        .await;
    schemas
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}

/// A restriction masks the global tools of its agent alone (offered,
/// classified and executed alike); the agent's own tools are exempt; two
/// restrictions intersect.
#[tokio::test]
async fn restrict_masks_globals_for_its_agent_exempts_its_own_and_intersects() {
    let t = tools_with("", json!({"parallel": true})).await;
    for name in ["a", "b", "c"] {
        register_tool(&t, name, json!({})).await.unwrap();
    }
    register_tool(&t, "mine", json!({"scope": "a1"}))
        .await
        .unwrap();
    as_probe(
        &t,
        tools::RESTRICT,
        json!({"scope": "a1", "deny": ["t", "c"]}),
    )
    .await
    .unwrap();
    assert_eq!(offered(&t, "a1").await, ["a", "b", "mine"]);
    assert_eq!(offered(&t, "a2").await, ["a", "b", "c", "t"]);
    assert_eq!(
        t.call(
            service::TOOLS,
            tools::MODE,
            json!({"name": "t", "scope": "a1"})
        )
        .await,
        json!("exclusive")
    );
    assert_eq!(
        t.call(
            service::TOOLS,
            tools::MODE,
            json!({"name": "t", "scope": "a2"})
        )
        .await,
        json!("parallel")
    );
    let r = exec(&t, json!({"value": 1})).await;
    assert_eq!(r["error"]["info"]["code"], json!("UNKNOWN_TOOL"));
    // Restrictions intersect: only what every one admits stays.
    as_probe(
        &t,
        tools::RESTRICT,
        json!({"scope": "a1", "allow": ["a", "b"]}),
    )
    .await
    .unwrap();
    as_probe(
        &t,
        tools::RESTRICT,
        json!({"scope": "a1", "allow": ["b", "c"]}),
    )
    .await
    .unwrap();
    assert_eq!(offered(&t, "a1").await, ["b", "mine"]);
    t.shutdown().await;
}

/// A restriction without a scope, an empty one, and one naming a tool that
/// is not global are refused with what to do instead.
#[tokio::test]
async fn restrict_fails_loud_on_unscoped_empty_and_unknown() {
    let t = tools_with("", json!({})).await;
    register_tool(&t, "mine", json!({"scope": "a1"}))
        .await
        .unwrap();
    let cases = [
        (
            json!({"deny": ["t"]}),
            "INVALID_RESTRICTION",
            "tools.restrict() requires a scope (an agent id): a global restriction would mask every agent — deny the tool for the intended agent instead",
        ),
        (
            json!({"scope": "a1"}),
            "INVALID_RESTRICTION",
            "tools.restrict({}) is a no-op: pass `allow` and/or `deny` (an empty filter is almost always a materialized-empty-config bug)",
        ),
        (
            json!({"scope": "a1", "allow": ["t", "nope", "mine"]}),
            "UNKNOWN_TOOL",
            "tools.restrict() names unknown global tools \"mine\", \"nope\"; known global tools: t",
        ),
        (
            json!({"scope": "a1", "deny": ["nope"]}),
            "UNKNOWN_TOOL",
            "tools.restrict() names unknown global tool \"nope\"; known global tools: t",
        ),
    ];
    for (params, code, message) in cases {
        let e = as_probe(&t, tools::RESTRICT, params.clone())
            .await
            .unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            (code, message),
            "{params}"
        );
    }
    assert_eq!(offered(&t, "a1").await, ["mine", "t"]);
    t.shutdown().await;
}

/// Guards run after pre-execute and deny even what a listener allowed
/// without `next`; the global ones first, then the agent's; a scoped guard
/// sees only its agent's calls; a denial still reaches post-execute.
#[tokio::test]
async fn guards_deny_after_pre_execute_monotonically_global_first_and_scoped_to_their_agent() {
    let listeners = format!(
        "{}, {{ event = \"tools/post-execute\", action = \"record\" }}",
        reply(bus::TOOLS_PRE_EXECUTE, &json!({"kind": "allow"}))
    );
    let t = tools_with(&listeners, json!({})).await;
    as_probe(&t, tools::GUARD, json!({"service": "g2", "scope": "a1"}))
        .await
        .unwrap();
    as_probe(&t, tools::GUARD, json!({"service": "g1"}))
        .await
        .unwrap();
    let denied = |reason: &str| {
        json!({"isError": true, "error": {"message": reason},
               "content": [{"type": "text", "text": format!("Error: {reason}")}]})
    };
    let only_g2 = json!({"value": 1, "deny": {"g2": "g2 says no"}});
    assert_eq!(
        exec_as(&t, "a1", only_g2.clone()).await,
        denied("g2 says no")
    );
    assert_eq!(exec_as(&t, "a2", only_g2).await["value"], json!(1));
    let both = json!({"value": 1, "deny": {"g1": "g1 says no", "g2": "g2 says no"}});
    assert_eq!(exec_as(&t, "a1", both).await, denied("g1 says no"));
    assert_eq!(
        exec_as(&t, "a1", json!({"value": 1})).await["value"],
        json!(1)
    );
    let post = heard(&t, bus::TOOLS_POST_EXECUTE).await;
    assert_eq!(post[0]["result"], denied("g2 says no"));
    t.shutdown().await;
}

/// Contexts in the original's order: the ones the tool deferred while it
/// ran, then the result's own (here a `tools/execute` wrapper's), then
/// post-execute's; a failing body keeps its deferred contexts; a block
/// keeps only its own.
#[tokio::test]
async fn deferred_contexts_lead_then_the_wrappers_then_post_executes() {
    let t = TestHost::start().await;
    for (lib, file) in [PROBE, HOOKS] {
        t.stage(lib, file);
    }
    let post = reply(
        bus::TOOLS_POST_EXECUTE,
        &json!({"kind": "accept", "additionalContexts": [user("p", "post")]}),
    );
    let wrapper = "[[row]]\nid = \"hooks-w\"\nplugin = \"hooks\"\n\
        config = { tag = \"w\", listeners = [{ event = \"tools/execute\", \
        merge = { additionalContexts = [{ id = \"w\", role = \"user\", \
        content = [{ type = \"text\", text = \"wrapper\" }], source = { kind = \"user\" } }] } }] }\n";
    // The hooks fixture needs the system prompt service.
    let prompt = "[[row]]\nid = \"system-prompt\"\nplugin = \"system-prompt\"\n";
    t.apply(&format!("{}{wrapper}{prompt}", tool_rows(&post)))
        .await;
    t.assert_all_active().await;
    register(&t, json!({})).await.unwrap();
    let r = exec(&t, json!({"value": 1, "defer": [user("d", "deferred")]})).await;
    assert_eq!(
        r["additionalContexts"],
        json!([
            user("d", "deferred"),
            user("w", "wrapper"),
            user("p", "post")
        ])
    );
    // Outside a dispatch there is nothing to defer to.
    let e = as_probe(
        &t,
        tools::DEFER_CONTEXT,
        json!({"agent": "a1", "callId": "c1", "context": user("d", "late")}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "NOT_DISPATCHING");
    t.shutdown().await;

    let t = tools_with("", json!({})).await;
    let r = exec(
        &t,
        json!({"defer": [user("d", "deferred")], "fail": "BOOM"}),
    )
    .await;
    assert_eq!(r["error"]["info"]["code"], json!("BOOM"));
    assert_eq!(r["additionalContexts"], json!([user("d", "deferred")]));
    t.shutdown().await;

    let block = reply(
        bus::TOOLS_POST_EXECUTE,
        &json!({"kind": "block", "feedback": [{"type": "text", "text": "no"}]}),
    );
    let t = tools_with(&block, json!({})).await;
    let r = exec(&t, json!({"value": 1, "defer": [user("d", "deferred")]})).await;
    assert_eq!(r["error"], json!({"message": "no"}));
    assert_eq!(r.get("additionalContexts"), None);
    t.shutdown().await;
}

/// `finalizeContent` has the last word on the content of every outcome:
/// after post-execute, and on a failure that bypassed it; null keeps the
/// content; observers see the finalized result; a failing finalizer fails
/// the call.
#[tokio::test]
async fn finalize_content_runs_last_on_every_outcome_and_null_keeps_the_content() {
    let listeners = format!(
        "{}, {{ event = \"tools/result\", action = \"record\" }}",
        reply(
            bus::TOOLS_POST_EXECUTE,
            &json!({"kind": "accept", "content": [{"type": "text", "text": "policy"}]})
        )
    );
    let t = tools_with(&listeners, json!({"finalizeContent": true})).await;
    let r = exec(&t, json!({"value": 1})).await;
    assert_eq!(
        r,
        json!({"isError": false, "value": 1, "content": [{"type": "text", "text": "final:policy"}]})
    );
    let published = results(&t).await;
    assert_eq!(published[0]["result"], r);
    assert_eq!(
        exec(&t, json!({"value": 1, "keepContent": true})).await["content"],
        json!([{"type": "text", "text": "policy"}])
    );
    let failed = exec(&t, json!({"value": 1, "failFinalize": true})).await;
    assert_eq!(
        failed["error"],
        json!({"message": "finalizer exploded", "info": {"name": "ToolError", "code": "FINALIZE_FAILED"}})
    );
    t.shutdown().await;

    // A failing pre-execute listener skips post-execute; the finalizer
    // still runs.
    let t = tools_with(
        "{ event = \"tools/pre-execute\", action = \"fail\" }",
        json!({"finalizeContent": true}),
    )
    .await;
    let r = exec(&t, json!({"value": 1})).await;
    assert_eq!(r["error"]["info"]["code"], json!("PROBE_FAILED"));
    assert_eq!(
        r["content"],
        json!([{"type": "text", "text": "final:Error: listener impl failed on purpose"}])
    );
    t.shutdown().await;
}

/// A success a `tools/execute` wrapper authors (a cached result of another
/// dispatch, say) goes through the tool's output contract: a value breaking
/// it fails; a valid one is rendered again; a tool without a contract takes
/// it as it is.
#[tokio::test]
async fn a_wrapper_authored_success_is_revalidated_and_rendered_again() {
    let authored = |value: Value| {
        reply(
            bus::TOOLS_EXECUTE,
            &json!({"isError": false, "value": value, "content": [{"type": "text", "text": "cached"}],
                    "additionalContexts": [user("w", "wrapper")]}),
        )
    };
    let t = tools_with(&authored(json!(5)), string_output()).await;
    let r = exec(&t, json!({"value": "body"})).await;
    assert_eq!(r["error"]["info"]["code"], json!("INVALID_TOOL_OUTPUT"));
    assert_eq!(
        r["error"]["message"],
        json!("tool \"t\" returned invalid output: value: expected string")
    );
    t.shutdown().await;

    let t = tools_with(&authored(json!("other")), string_output()).await;
    assert_eq!(
        exec(&t, json!({"value": "body"})).await,
        json!({"isError": false, "value": "other",
               "content": [{"type": "text", "text": "render:other"}], "meta": {"projected": "other"},
               "additionalContexts": [user("w", "wrapper")]})
    );
    t.shutdown().await;

    let t = tools_with(&authored(json!(5)), json!({})).await;
    assert_eq!(
        exec(&t, json!({"value": "body"})).await,
        json!({"isError": false, "value": 5, "content": [{"type": "text", "text": "cached"}],
               "additionalContexts": [user("w", "wrapper")]})
    );
    t.shutdown().await;
}

/// Every stage of one execution sees one token and the same arguments; a
/// second execution has its own token.
#[tokio::test]
async fn one_token_and_one_argument_value_across_the_pipeline() {
    let record = record_every_stage();
    let t = tools_with(&record, json!({})).await;
    as_probe(&t, tools::GUARD, json!({"service": "g1"}))
        .await
        .unwrap();
    let denied = exec(&t, json!({"deny": {"g1": "no"}})).await;
    assert_eq!(denied["error"]["message"], json!("no"));
    let args = json!({"value": 1, "nested": {"deep": [1, 2]}});
    assert_eq!(exec(&t, args.clone()).await["value"], json!(1));
    let mut execs = Vec::new();
    for _ in 0..2000 {
        execs.clear();
        for stage in [
            bus::TOOLS_PRE_EXECUTE,
            bus::TOOLS_EXECUTE,
            bus::TOOLS_POST_EXECUTE,
            bus::TOOLS_RESULT,
        ] {
            execs.extend(
                heard(&t, stage)
                    .await
                    .into_iter()
                    .map(|p| p["exec"].clone()),
            );
        }
        if execs.len() == 7 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // The denied call: pre, post, result; the other: all four stages.
    assert_eq!(execs.len(), 7, "{execs:?}");
    let token_of = |args: &Value| -> Vec<Value> {
        let mut tokens: Vec<Value> = execs
            .iter()
            .filter(|e| &e["arguments"] == args)
            .map(|e| e["token"].clone())
            .collect();
        tokens.dedup();
        tokens
    };
    let (first, second) = (token_of(&json!({"deny": {"g1": "no"}})), token_of(&args));
    assert_eq!((first.len(), second.len()), (1, 1), "{execs:?}");
    assert!(first[0].as_str().is_some_and(|t| !t.is_empty()));
    assert_ne!(first, second);
    assert_eq!(execs.iter().filter(|e| e["arguments"] == args).count(), 4);
    t.shutdown().await;
}

// ------------------------------------------------ the caller's signal

/// A host with the registry, tool `t`, a probe recording every pipeline
/// event (and answering approvals with `approval`), and hooks `hooks`
/// (JSON listeners of the hooks fixture, which act inside a stage).
async fn signal_host(hooks: Value, approval: Option<&str>) -> TestHost {
    let t = TestHost::start().await;
    for (lib, file) in [PROBE, HOOKS] {
        t.stage(lib, file);
    }
    let record = record_every_stage();
    let mut rows = tool_rows(&record);
    if let Some(outcome) = approval {
        rows.push_str(&format!("approval_outcome = \"{outcome}\"\n"));
    }
    rows.push_str(&format!(
        "[[row]]\nid = \"hooks-h\"\nplugin = \"hooks\"\nconfig = {{ tag = \"h\", listeners = {} }}\n\
         [[row]]\nid = \"system-prompt\"\nplugin = \"system-prompt\"\n",
        toml_value(&hooks)
    ));
    t.apply(&rows).await;
    t.assert_all_active().await;
    register(&t, json!({})).await.unwrap();
    t
}

/// A hooks listener on `event` that cancels call `c1` of its agent first.
fn cancel_in(event: &str, result: Option<Value>) -> Value {
    let mut hook = json!({"event": event, "calls": [{"service": service::TOOLS, "method": tools::CANCEL,
                          "params": {"agent": "$agent", "callId": "c1"}}]});
    if let Some(r) = result {
        hook["result"] = r;
    }
    hook
}

fn aborted_before_dispatch() -> Value {
    json!({"isError": true,
           "error": {"message": "tool call aborted before dispatch",
                     "info": {"name": "AbortError", "code": code::ABORTED_BEFORE_DISPATCH}},
           "content": [{"type": "text", "text": "Error: tool call aborted before dispatch"}]})
}

/// Waits (bounded) until the probe heard `tools/result`, which is emitted.
async fn results(t: &TestHost) -> Vec<Value> {
    for _ in 0..2000 {
        let heard = heard(t, bus::TOOLS_RESULT).await;
        if !heard.is_empty() {
            return heard;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("tools/result never emitted");
}

/// A call whose caller signal is already aborted publishes one result and
/// enters no stage.
#[tokio::test]
async fn a_pre_aborted_call_publishes_one_result_without_phases() {
    let t = signal_host(json!([]), None).await;
    let r = t
        .call(
            service::TOOLS,
            tools::EXECUTE,
            json!({"callId": "c1", "name": "t", "arguments": {"value": 1}, "agent": "a1", "cwd": "/", "cancelled": true}),
        )
        .await;
    assert_eq!(r, aborted_before_dispatch());
    let published = results(&t).await;
    assert_eq!(published.len(), 1);
    assert_eq!(published[0]["result"], r);
    for stage in [
        bus::TOOLS_PRE_EXECUTE,
        bus::TOOLS_EXECUTE,
        bus::TOOLS_POST_EXECUTE,
    ] {
        assert_eq!(heard(&t, stage).await, Vec::<Value>::new(), "{stage}");
    }
    t.shutdown().await;
}

/// A cancel while pre-execute runs skips the dispatch; post-execute sees
/// `ABORTED_BEFORE_DISPATCH`. A denial that settles after the cancel stands.
#[tokio::test]
async fn a_cancel_during_pre_execute_skips_the_dispatch_and_a_late_denial_stands() {
    let t = signal_host(json!([cancel_in(bus::TOOLS_PRE_EXECUTE, None)]), None).await;
    let r = exec(&t, json!({"value": 1})).await;
    assert_eq!(r, aborted_before_dispatch());
    assert_eq!(heard(&t, bus::TOOLS_EXECUTE).await, Vec::<Value>::new());
    let post = heard(&t, bus::TOOLS_POST_EXECUTE).await;
    assert_eq!(post.len(), 1);
    assert_eq!(post[0]["result"], aborted_before_dispatch());
    t.shutdown().await;

    let deny = json!({"kind": "deny", "reason": "not now"});
    let t = signal_host(json!([cancel_in(bus::TOOLS_PRE_EXECUTE, Some(deny))]), None).await;
    assert_eq!(
        exec(&t, json!({"value": 1})).await,
        json!({"isError": true, "error": {"message": "not now"},
               "content": [{"type": "text", "text": "Error: not now"}]})
    );
    t.shutdown().await;
}

/// A caller cancellation that overtakes an approval the channel cancelled
/// is `ABORTED_BEFORE_DISPATCH`; a rejection stands; an approval the
/// cancel overtook does not dispatch.
#[tokio::test]
async fn cancellation_overtaking_approval_is_aborted_before_dispatch() {
    let ask = || {
        json!([cancel_in(
            bus::TOOLS_PRE_EXECUTE,
            Some(json!({"kind": "ask"}))
        )])
    };
    for (outcome, expected) in [
        ("cancelled", aborted_before_dispatch()),
        (
            "rejected",
            json!({"isError": true, "error": {"message": "the user rejected tool \"t\""},
                   "content": [{"type": "text", "text": "Error: the user rejected tool \"t\""}]}),
        ),
        ("allowed-once", aborted_before_dispatch()),
    ] {
        let t = signal_host(ask(), Some(outcome)).await;
        assert_eq!(exec(&t, json!({"value": 1})).await, expected, "{outcome}");
        assert_eq!(
            heard(&t, bus::TOOLS_EXECUTE).await,
            Vec::<Value>::new(),
            "{outcome}"
        );
        t.shutdown().await;
    }
}

/// A cancel inside the `tools/execute` wrapper is rechecked before the
/// body, which never runs; a wrapper's short-circuit it overtook becomes
/// `ABORTED_BEFORE_DISPATCH` keeping the wrapper's contexts.
#[tokio::test]
async fn a_cancel_inside_the_wrapper_skips_the_body_and_keeps_a_short_circuits_contexts() {
    let t = signal_host(json!([cancel_in(bus::TOOLS_EXECUTE, None)]), None).await;
    // The body would defer a context if it ran.
    let r = exec(&t, json!({"value": 1, "defer": [user("d", "deferred")]})).await;
    assert_eq!(r, aborted_before_dispatch());
    t.shutdown().await;

    let short = json!({"isError": false, "value": 1, "content": [{"type": "text", "text": "wrapper"}],
                       "additionalContexts": [user("w", "wrapper context")]});
    let t = signal_host(json!([cancel_in(bus::TOOLS_EXECUTE, Some(short))]), None).await;
    let mut expected = aborted_before_dispatch();
    expected["additionalContexts"] = json!([user("w", "wrapper context")]);
    assert_eq!(exec(&t, json!({"value": 1})).await, expected);
    t.shutdown().await;
}

/// A success the cancel overtakes after the body ran is `ABORTED`, keeping
/// its contexts; a failure stands.
#[tokio::test]
async fn a_late_success_is_aborted_with_its_contexts_and_a_failure_stands() {
    let t = signal_host(json!([cancel_in(bus::TOOLS_POST_EXECUTE, None)]), None).await;
    let r = exec(&t, json!({"value": 1, "defer": [user("d", "deferred")]})).await;
    assert_eq!(
        r,
        json!({"isError": true,
               "error": {"message": "tool call aborted", "info": {"name": "AbortError", "code": code::ABORTED}},
               "content": [{"type": "text", "text": "Error: tool call aborted"}],
               "additionalContexts": [user("d", "deferred")]})
    );
    let r = exec(&t, json!({"fail": "TOOL_FAILED"})).await;
    assert_eq!(r["error"]["info"]["code"], json!("TOOL_FAILED"));
    t.shutdown().await;
}

/// Only a running `execute` call can be cancelled.
#[tokio::test]
async fn cancelling_a_call_that_is_not_running_is_refused() {
    let t = tools_with("", json!({})).await;
    let e = t
        .host
        .call(
            service::TOOLS,
            tools::CANCEL,
            json!({"agent": "a1", "callId": "c9"}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.message.as_str()),
        ("NOT_RUNNING", "tool call \"c9\" is not running")
    );
    t.shutdown().await;
}

// ------------------------------------------------- the loop drives the stages

async fn loop_setup(extra: &str) -> (TestHost, FakeLlm) {
    core_host_applied(&[], |rows| rows + extra).await
}

fn kit(listeners: &str) -> String {
    kit_row("k", listeners, "{ name = 'p', parallel = true }")
}

fn one_call(id: &str) -> Answer {
    raw_calls(&[(id, "p", "{}")])
}

/// A cancel while pre-execute runs skips the dispatch: the tool never
/// starts, post-execute sees `ABORTED_BEFORE_DISPATCH`, and that is the
/// logged result.
#[tokio::test]
async fn a_cancel_during_pre_execute_skips_the_dispatch_and_post_execute_sees_it() {
    let listeners = "{ event = 'tools/pre-execute', action = 'cancel' }, \
                     { event = 'tools/post-execute', action = 'record' }";
    let (t, fake) = loop_setup(&kit(listeners)).await;
    fake.push([one_call("c0"), text("never")]);
    let agent = t
        .call(
            service::AGENT_LOOP,
            agent_loop::CREATE,
            json!({"agentOptions": {"provider": "fake", "model": "m1"}, "meta": {"cwd": "/tmp"}}),
        )
        .await["agent"]
        .as_str()
        .unwrap()
        .to_owned();
    t.call(
        service::AGENTS,
        agents::FOLLOWUP,
        json!({"agent": agent, "message": {"text": "go"}}),
    )
    .await;
    let end = t
        .call(service::AGENTS, agents::WHEN_IDLE, json!({"agent": agent}))
        .await;
    assert_eq!(
        end["reason"],
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    let journal: Vec<Value> =
        serde_json::from_value(t.call("loopkit:k", "journal", json!({})).await).unwrap();
    assert!(
        !journal.iter().any(|e| e["event"] == "tool:start"),
        "{journal:?}"
    );
    let aborted = json!({"name": "AbortError", "code": code::ABORTED_BEFORE_DISPATCH});
    let post: Vec<&Value> = journal
        .iter()
        .filter(|e| e["event"] == bus::TOOLS_POST_EXECUTE)
        .collect();
    assert_eq!(post.len(), 1, "{journal:?}");
    assert_eq!(post[0]["payload"]["result"]["error"]["info"], aborted);
    let events: Vec<Value> = serde_json::from_value(
        t.call(service::SESSIONS, sessions::EVENTS, json!({"id": agent}))
            .await,
    )
    .unwrap();
    let results: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == event::TOOL_RESULT)
        .collect();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["data"]["error"], aborted);
    assert_eq!(fake.requests().len(), 1);
    t.shutdown().await;
}
