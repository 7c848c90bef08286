//! Conformance with reference dsh-core §10.4 (tools), §10.5 (system prompt)
//! and §10.6 (scope): real plugin builds in a real host, one test per
//! behavior of the original's test files (see
//! `tests/CONFORMANCE.md` (§10.4-10.6)).
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::codes;
use dsh_sdk::names::{bus, code, service, system_prompt, tools};
use dsh_testkit::fixtures::{
    probe_call, probe_journal, probe_row, register_tool, stage_probe, toml_value,
};
use dsh_testkit::tools::text_of;
use dsh_testkit::{eventually, TestHost};
use serde_json::{json, Value};

// ---------------------------------------------------------------- helpers

/// The events probe `tag` heard, in order.
async fn heard(t: &TestHost, tag: &str) -> Vec<String> {
    probe_journal(t, tag)
        .await
        .into_iter()
        .filter(|e| e.starts_with("event:"))
        .collect()
}

async fn link(t: &TestHost, tag: &str, child: &str, parent: &str) -> Result<Value, dsh_sdk::Error> {
    t.host
        .call(
            &format!("probe:{tag}"),
            "scope_parent",
            json!({"child": child, "parent": parent}),
        )
        .await
}

async fn rebind(
    t: &TestHost,
    tag: &str,
    child: &str,
    parent: &str,
) -> Result<Value, dsh_sdk::Error> {
    t.host
        .call(
            &format!("probe:{tag}"),
            "scope_rebind",
            json!({"child": child, "parent": parent}),
        )
        .await
}

/// Emits `agent/x` for each scope, then a uniquely named marker for
/// `marker_scope` that the probe `tag` hears; returns what it heard from
/// these emits before the marker (the inbox is FIFO, so nothing it was
/// going to hear from them can arrive after the marker).
async fn deliveries(t: &TestHost, tag: &str, scopes: &[&str], marker_scope: &str) -> Vec<String> {
    let before = heard(t, tag).await.len();
    for s in scopes {
        t.host.emit("agent/x", s, json!(s));
    }
    let marker = format!("marker-{before}");
    t.host.emit("agent/x", marker_scope, json!(marker));
    let marker = format!("event:agent/x:\"{marker}\"");
    eventually("the marker is heard", || async {
        heard(t, tag).await.contains(&marker)
    })
    .await;
    let all = heard(t, tag).await;
    let at = all.iter().position(|e| *e == marker).unwrap();
    all[before..at].to_vec()
}

// ------------------------------------------------------------- §10.6 scope

#[tokio::test]
async fn scope_parent_chain_links_once_rejects_cycles_and_rebinds_only_via_its_binding() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let rows = format!(
        "{}{}",
        probe_row(
            "a",
            "listeners = [{ event = \"agent/x\", action = \"record\", scope = \"p1\" }]"
        ),
        probe_row("b", ""),
    );
    t.apply(&rows).await;
    link(&t, "a", "c", "p1").await.unwrap();
    // Links once: a second link of `c`, from anyone, is refused.
    let e = link(&t, "a", "c", "p2").await.unwrap_err();
    assert_eq!(e.code, codes::SCOPE_ALREADY_BOUND, "{e}");
    let e = link(&t, "b", "c", "p2").await.unwrap_err();
    assert_eq!(e.code, codes::SCOPE_ALREADY_BOUND, "{e}");
    // Cycles are refused: itself, its parent, and a longer loop.
    let e = link(&t, "a", "x", "x").await.unwrap_err();
    assert_eq!(e.code, codes::SCOPE_CYCLE, "{e}");
    let e = link(&t, "a", "p1", "c").await.unwrap_err();
    assert_eq!(e.code, codes::SCOPE_CYCLE, "{e}");
    link(&t, "a", "g", "c").await.unwrap();
    let e = link(&t, "a", "p1", "g").await.unwrap_err();
    assert_eq!(e.code, codes::SCOPE_CYCLE, "{e}");
    // The refused links changed nothing: `c` and `g` still descend from p1.
    assert_eq!(
        deliveries(&t, "a", &["c", "g", "p2"], "p1").await,
        ["event:agent/x:\"c\"", "event:agent/x:\"g\""]
    );
    // Rebinding goes through the binding only, and not into a cycle.
    let e = rebind(&t, "a", "c", "g").await.unwrap_err();
    assert_eq!(e.code, codes::SCOPE_CYCLE, "{e}");
    rebind(&t, "a", "c", "p2").await.unwrap();
    assert_eq!(
        deliveries(&t, "a", &["c"], "p1").await,
        Vec::<String>::new()
    );
    t.shutdown().await;
}

#[tokio::test]
async fn ancestor_listeners_hear_descendants_never_the_reverse() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let rows = format!(
        "{}{}{}",
        probe_row(
            "root",
            "listeners = [{ event = \"agent/x\", action = \"record\", scope = \"r\" }]"
        ),
        probe_row(
            "leaf",
            "listeners = [{ event = \"agent/x\", action = \"record\", scope = \"r.k.l\" }]"
        ),
        probe_row(
            "all",
            "listeners = [{ event = \"agent/x\", action = \"record\" }]"
        ),
    );
    t.apply(&rows).await;
    link(&t, "root", "r.k", "r").await.unwrap();
    link(&t, "root", "r.k.l", "r.k").await.unwrap();
    // The root hears itself and every descendant, never a stranger.
    assert_eq!(
        deliveries(&t, "root", &["r.k.l", "r.k", "s", ""], "r").await,
        ["event:agent/x:\"r.k.l\"", "event:agent/x:\"r.k\""]
    );
    // The leaf hears only itself: not its ancestors, not unscoped ones.
    assert_eq!(
        deliveries(&t, "leaf", &["r", "r.k", ""], "r.k.l").await,
        Vec::<String>::new()
    );
    // Untagged listeners are global: they hear every scope and none.
    eventually("the untagged listener hears every scope", || async {
        heard(&t, "all").await.len() == 9
    })
    .await;
    let all = heard(&t, "all").await;
    for s in ["r.k.l", "r.k", "s", "", "r", "marker-0", "marker-1"] {
        assert!(
            all.contains(&format!("event:agent/x:\"{s}\"")),
            "{s} missing from {all:?}"
        );
    }
    t.shutdown().await;
}

#[tokio::test]
async fn a_scope_link_ends_with_the_fiber_that_made_it() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let listener = probe_row(
        "l",
        "listeners = [{ event = \"agent/x\", action = \"record\", scope = \"p\" }]",
    );
    t.apply(&format!("{listener}{}", probe_row("linker", "")))
        .await;
    link(&t, "linker", "c", "p").await.unwrap();
    assert_eq!(
        deliveries(&t, "l", &["c"], "p").await,
        ["event:agent/x:\"c\""]
    );
    // The linker is disposed: its link goes, and `c` may be linked anew.
    t.apply(&listener).await;
    assert_eq!(deliveries(&t, "l", &["c"], "p").await, Vec::<String>::new());
    link(&t, "l", "c", "q").await.unwrap();
    t.shutdown().await;
}

// ------------------------------------------------------------- §10.4 tools

/// Rows: the registry, and a probe `impl` providing the tool service
/// `impl-svc`, with `extra` probe config (listeners, approval) and `more`
/// rows.
fn tool_rows(extra: &str, more: &str) -> String {
    format!(
        "[[row]]\nid = \"tools\"\nplugin = \"tools\"\n{}{more}",
        probe_row("impl", &format!("provides = [\"impl-svc\"]\n{extra}"))
    )
}

async fn tools_with(extra: &str, more: &str) -> TestHost {
    let t = TestHost::start().await;
    stage_probe(&t);
    t.apply(&tool_rows(extra, more)).await;
    register_tool(&t, "t", json!({})).await.unwrap();
    t
}

async fn exec(t: &TestHost, name: &str, args: Value) -> Value {
    t.call(
        service::TOOLS,
        tools::EXECUTE,
        json!({"callId": "c1", "name": name, "arguments": args, "agent": "a1", "cwd": "/"}),
    )
    .await
}

fn listener(event: &str, action: &str, reply: Option<Value>) -> String {
    match reply {
        Some(r) => format!(
            "{{ event = \"{event}\", action = \"{action}\", reply = {} }}",
            toml_value(&r)
        ),
        None => format!("{{ event = \"{event}\", action = \"{action}\" }}"),
    }
}

fn listeners_cfg(list: &[String]) -> String {
    format!("listeners = [{}]", list.join(", "))
}

/// The event names probe `tag` heard.
async fn heard_names(t: &TestHost, tag: &str) -> Vec<String> {
    heard(t, tag)
        .await
        .iter()
        .map(|e| e.split(':').take(2).collect::<Vec<_>>().join(":"))
        .collect()
}

#[tokio::test]
async fn execute_returns_the_tools_value_and_content() {
    let t = tools_with("", "").await;
    let r = exec(
        &t,
        "t",
        json!({"value": {"n": 1}, "content": [{"type": "text", "text": "hi"}]}),
    )
    .await;
    assert_eq!(
        r,
        json!({"isError": false, "value": {"n": 1}, "content": [{"type": "text", "text": "hi"}]})
    );
    t.shutdown().await;
}

#[tokio::test]
async fn an_unknown_tool_is_a_tool_not_found_error() {
    let t = tools_with("", "").await;
    let r = exec(&t, "nope", json!({})).await;
    assert_eq!(
        r,
        json!({"isError": true,
               "error": {"message": "unknown tool \"nope\"",
                         "info": {"name": "ToolNotFoundError", "code": "UNKNOWN_TOOL"}},
               "content": [{"type": "text", "text": "Error: unknown tool \"nope\""}]})
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_throwing_tool_is_an_error_result_carrying_its_code() {
    let t = tools_with("", "").await;
    let r = exec(&t, "t", json!({"fail": "PROBE_TOOL_FAILED"})).await;
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["error"]["info"]["code"], "PROBE_TOOL_FAILED", "{r}");
    assert_eq!(r["error"]["message"], "tool impl failed on purpose");
    assert_eq!(text_of(&r), "Error: tool impl failed on purpose");
    t.shutdown().await;
}

#[tokio::test]
async fn invalid_arguments_are_an_invalid_args_error_listing_every_violation() {
    let t = tools_with("", "").await;
    let params = json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                        "required": ["a", "b"]});
    register_tool(&t, "strict", json!({"parameters": params}))
        .await
        .unwrap();
    let r = exec(&t, "strict", json!({"a": 1, "value": "ran"})).await;
    assert_eq!(
        r["error"],
        json!({"message": "invalid arguments: b: required; a: expected string",
               "info": {"name": "ToolArgsError", "code": code::INVALID_ARGS}})
    );
    assert_eq!(r.get("value"), None, "the tool did not run: {r}");
    t.shutdown().await;
}

#[tokio::test]
async fn a_pre_execute_denial_skips_execute_but_reaches_post_execute_and_result() {
    let deny = listener(
        bus::TOOLS_PRE_EXECUTE,
        "reply",
        Some(json!({"kind": "deny", "reason": "not today"})),
    );
    let obs = listeners_cfg(&[
        listener(bus::TOOLS_EXECUTE, "record", None),
        listener(bus::TOOLS_POST_EXECUTE, "record", None),
        listener(bus::TOOLS_RESULT, "record", None),
    ]);
    let t = tools_with(&listeners_cfg(&[deny]), &probe_row("obs", &obs)).await;
    let r = exec(&t, "t", json!({"value": "ran"})).await;
    assert_eq!(
        r,
        json!({"isError": true, "error": {"message": "not today"},
               "content": [{"type": "text", "text": "Error: not today"}]})
    );
    eventually("tools/result is heard", || async {
        heard_names(&t, "obs")
            .await
            .contains(&"event:tools/result".to_owned())
    })
    .await;
    assert_eq!(
        heard_names(&t, "obs").await,
        ["event:tools/post-execute", "event:tools/result"]
    );
    t.shutdown().await;
}

#[tokio::test]
async fn an_ask_without_an_approval_service_is_denied_with_its_reason() {
    let ask =
        |reply: Value| listeners_cfg(&[listener(bus::TOOLS_PRE_EXECUTE, "reply", Some(reply))]);
    let t = tools_with(&ask(json!({"kind": "ask"})), "").await;
    let r = exec(&t, "t", json!({"value": "ran"})).await;
    assert_eq!(
        text_of(&r),
        "Error: tool \"t\" requires approval (not yet supported)"
    );
    assert_eq!(r["error"].get("info"), None, "{r}");
    t.apply(&tool_rows(
        &ask(json!({"kind": "ask", "reason": "needs a human"})),
        "",
    ))
    .await;
    register_tool(&t, "t", json!({})).await.unwrap();
    let r = exec(&t, "t", json!({"value": "ran"})).await;
    assert_eq!(text_of(&r), "Error: needs a human");
    t.shutdown().await;
}

#[tokio::test]
async fn approval_outcomes_cancelled_unavailable_and_rogue_deny_the_call() {
    let ask = listeners_cfg(&[listener(
        bus::TOOLS_PRE_EXECUTE,
        "reply",
        Some(json!({"kind": "ask"})),
    )]);
    let t = TestHost::start().await;
    stage_probe(&t);
    for (outcome, text) in [
        ("cancelled", "Error: approval for tool \"t\" was cancelled"),
        (
            "unavailable",
            "Error: tool \"t\" requires approval, but no approval channel is available",
        ),
        (
            "bogus",
            "Error: tool \"t\" requires approval, but no approval channel is available",
        ),
        ("rejected", "Error: the user rejected tool \"t\""),
    ] {
        t.apply(&tool_rows(
            &format!("{ask}\napproval_outcome = \"{outcome}\""),
            "",
        ))
        .await;
        register_tool(&t, "t", json!({})).await.unwrap();
        let r = exec(&t, "t", json!({"value": "ran"})).await;
        assert_eq!(r["isError"], true, "{outcome}: {r}");
        assert_eq!(text_of(&r), text, "{outcome}");
    }
    t.apply(&tool_rows(
        &format!("{ask}\napproval_outcome = \"allowed-once\""),
        "",
    ))
    .await;
    register_tool(&t, "t", json!({})).await.unwrap();
    let r = exec(&t, "t", json!({"value": "ran"})).await;
    assert_eq!(r["value"], "ran", "{r}");
    // Without an agent there is nobody to ask: denied, the tool not run.
    let r = t
        .call(
            service::TOOLS,
            tools::EXECUTE,
            json!({"callId": "c", "name": "t", "arguments": {"value": "ran"}, "cwd": "/"}),
        )
        .await;
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r.get("value"), None, "{r}");
    t.shutdown().await;
}

#[tokio::test]
async fn post_execute_accept_content_replaces_the_content_and_keeps_the_value() {
    let replace = listener(
        bus::TOOLS_POST_EXECUTE,
        "reply",
        Some(json!({"kind": "accept", "content": [{"type": "text", "text": "replaced"}]})),
    );
    let t = tools_with(&listeners_cfg(&[replace]), "").await;
    let r = exec(
        &t,
        "t",
        json!({"value": 7, "content": [{"type": "text", "text": "orig"}]}),
    )
    .await;
    assert_eq!(
        r,
        json!({"isError": false, "value": 7, "content": [{"type": "text", "text": "replaced"}]})
    );
    t.shutdown().await;
}

#[tokio::test]
async fn post_execute_block_is_a_valueless_failure_showing_the_feedback() {
    let block = listener(
        bus::TOOLS_POST_EXECUTE,
        "reply",
        Some(json!({"kind": "block", "feedback": [{"type": "text", "text": "not that file"}]})),
    );
    let t = tools_with(&listeners_cfg(&[block]), "").await;
    let r = exec(&t, "t", json!({"value": 7})).await;
    assert_eq!(
        r,
        json!({"isError": true, "error": {"message": "not that file"},
               "content": [{"type": "text", "text": "not that file"}]})
    );
    t.shutdown().await;
}

#[tokio::test]
async fn an_execute_wrapper_may_answer_without_calling_the_tool() {
    let wrapper = listener(
        bus::TOOLS_EXECUTE,
        "reply",
        Some(
            json!({"isError": false, "value": "cached", "content": [{"type": "text", "text": "from the wrapper"}]}),
        ),
    );
    let post = probe_row(
        "obs",
        &listeners_cfg(&[listener(bus::TOOLS_POST_EXECUTE, "record", None)]),
    );
    let t = tools_with(&listeners_cfg(&[wrapper]), &post).await;
    let r = exec(&t, "t", json!({"value": "ran"})).await;
    assert_eq!(r["value"], "cached", "{r}");
    assert_eq!(text_of(&r), "from the wrapper");
    // post-execute saw the wrapper's result.
    let seen = heard(&t, "obs").await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].contains("\"value\":\"cached\""), "{seen:?}");
    t.shutdown().await;
}

#[tokio::test]
async fn a_throwing_listener_in_any_stage_is_an_error_result_keeping_its_code() {
    let t = TestHost::start().await;
    stage_probe(&t);
    for stage in [
        bus::TOOLS_PRE_EXECUTE,
        bus::TOOLS_EXECUTE,
        bus::TOOLS_POST_EXECUTE,
    ] {
        t.apply(&tool_rows(
            &listeners_cfg(&[listener(stage, "fail", None)]),
            "",
        ))
        .await;
        register_tool(&t, "t", json!({})).await.unwrap();
        let r = exec(&t, "t", json!({"value": "ran"})).await;
        assert_eq!(r["isError"], true, "{stage}: {r}");
        assert_eq!(r["error"]["info"]["code"], "PROBE_FAILED", "{stage}: {r}");
        assert_eq!(r.get("value"), None, "{stage}: {r}");
    }
    t.shutdown().await;
}

#[tokio::test]
async fn tools_result_is_emitted_once_with_the_exec_and_the_result() {
    let obs = probe_row(
        "obs",
        &listeners_cfg(&[listener(bus::TOOLS_RESULT, "record", None)]),
    );
    let t = tools_with("", &obs).await;
    let r = exec(&t, "t", json!({"value": 3})).await;
    eventually("tools/result is heard", || async {
        !heard(&t, "obs").await.is_empty()
    })
    .await;
    // A second call's result arrives after the first one's: one per call.
    exec(&t, "nope", json!({})).await;
    eventually("the second tools/result is heard", || async {
        heard(&t, "obs").await.len() == 2
    })
    .await;
    let first = heard(&t, "obs").await[0].clone();
    let payload: Value =
        serde_json::from_str(first.strip_prefix("event:tools/result:").unwrap()).unwrap();
    assert_eq!(payload["result"], r);
    assert_eq!(payload["exec"]["callId"], "c1");
    assert_eq!(payload["exec"]["name"], "t");
    assert_eq!(payload["exec"]["agent"], "a1");
    t.shutdown().await;
}

#[tokio::test]
async fn registration_rejects_duplicates_per_layer_and_announces_changes() {
    let obs = probe_row(
        "obs",
        &listeners_cfg(&[listener(bus::TOOLS_CHANGE, "record", None)]),
    );
    let t = TestHost::start().await;
    stage_probe(&t);
    t.apply(&tool_rows("", &obs)).await;
    register_tool(&t, "t", json!({})).await.unwrap();
    eventually("tools/change on register", || async {
        heard(&t, "obs").await.len() == 1
    })
    .await;
    let e = register_tool(&t, "t", json!({})).await.unwrap_err();
    assert_eq!(e.code, "DUPLICATE_TOOL");
    assert_eq!(e.message, "tool \"t\" is already registered");
    // Another layer (a scope) may hold the same name.
    register_tool(&t, "t", json!({"scope": "a1"}))
        .await
        .unwrap();
    let e = register_tool(&t, "t", json!({"scope": "a1"}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "DUPLICATE_TOOL");
    // Disposing the registering fiber unregisters and announces it.
    let before = heard(&t, "obs").await.len();
    t.apply(&format!(
        "[[row]]\nid = \"tools\"\nplugin = \"tools\"\n{obs}"
    ))
    .await;
    eventually("tools/change on disposal", || async {
        heard(&t, "obs").await.len() > before
    })
    .await;
    assert_eq!(
        t.call(service::TOOLS, tools::SCHEMAS, json!({"scope": "a1"}))
            .await,
        json!([])
    );
    t.shutdown().await;
}

#[tokio::test]
async fn schemas_project_name_description_and_parameters_only() {
    let t = tools_with("", "").await;
    register_tool(
        &t,
        "rich",
        json!({"parallel": true, "timeoutMs": 500, "presentCall": "x", "output": {"schema": {}}}),
    )
    .await
    .unwrap();
    let schemas = t.call(service::TOOLS, tools::SCHEMAS, json!({})).await;
    assert_eq!(
        schemas,
        json!([
            {"name": "rich", "description": "the rich tool", "parameters": {"type": "object", "properties": {}}},
            {"name": "t", "description": "the t tool", "parameters": {"type": "object", "properties": {}}},
        ])
    );
    t.shutdown().await;
}

#[tokio::test]
async fn execution_mode_is_parallel_only_for_exact_true() {
    let t = tools_with("", "").await;
    for (name, parallel) in [
        ("yes", json!(true)),
        ("str", json!("true")),
        ("one", json!(1)),
        ("no", json!(false)),
    ] {
        register_tool(&t, name, json!({"parallel": parallel}))
            .await
            .unwrap();
    }
    for (name, mode) in [
        ("yes", "parallel"),
        ("str", "exclusive"),
        ("one", "exclusive"),
        ("no", "exclusive"),
        ("t", "exclusive"),
        ("unknown", "exclusive"),
    ] {
        assert_eq!(
            t.call(service::TOOLS, tools::MODE, json!({"name": name}))
                .await,
            json!(mode),
            "{name}"
        );
    }
    t.shutdown().await;
}

#[tokio::test]
async fn a_scoped_tool_shadows_the_global_one_in_either_order() {
    let t = tools_with("", "").await;
    // Global first, then scoped.
    register_tool(&t, "t", json!({"scope": "a1", "description": "a1's t"}))
        .await
        .unwrap();
    // Scoped first, then global.
    register_tool(&t, "u", json!({"scope": "a1", "description": "a1's u"}))
        .await
        .unwrap();
    register_tool(&t, "u", json!({})).await.unwrap();
    let descriptions = |v: Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| {
                format!(
                    "{}={}",
                    s["name"].as_str().unwrap(),
                    s["description"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(
        descriptions(
            t.call(service::TOOLS, tools::SCHEMAS, json!({"scope": "a1"}))
                .await
        ),
        ["t=a1's t", "u=a1's u"]
    );
    assert_eq!(
        descriptions(
            t.call(service::TOOLS, tools::SCHEMAS, json!({"scope": "a2"}))
                .await
        ),
        ["t=the t tool", "u=the u tool"]
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_scoped_pre_execute_listener_gates_only_its_agent() {
    let deny = "listeners = [{ event = \"tools/pre-execute\", action = \"reply\", scope = \"a1\", reply = { kind = \"deny\", reason = \"a1 only\" } }]";
    let t = tools_with(deny, "").await;
    let r = exec(&t, "t", json!({"value": 1})).await;
    assert_eq!(text_of(&r), "Error: a1 only");
    let r = t
        .call(
            service::TOOLS,
            tools::EXECUTE,
            json!({"callId": "c", "name": "t", "arguments": {"value": 1}, "agent": "a2", "cwd": "/"}),
        )
        .await;
    assert_eq!(r["value"], 1, "{r}");
    t.shutdown().await;
}

// ----------------------------------------------------- §10.5 system prompt

fn prompt_rows(config: &str, more: &str) -> String {
    format!("[[row]]\nid = \"sp\"\nplugin = \"system-prompt\"\nconfig = {{ {config} }}\n{more}")
}

async fn assemble(t: &TestHost) -> Value {
    t.call(
        service::SYSTEM_PROMPT,
        system_prompt::ASSEMBLE,
        json!({"variables": {"model": "m"}}),
    )
    .await
}

fn section_names(a: &Value) -> Vec<String> {
    a["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}

const IDENTITY: &str = "You are an AI agent powered by DeepSeek Harness.";

#[tokio::test]
async fn identity_and_persona_are_built_in_an_empty_persona_renders_nothing() {
    let t = TestHost::start().await;
    t.apply(&prompt_rows("", "")).await;
    let a = assemble(&t).await;
    // The empty persona is in the assembly but renders nothing.
    assert_eq!(
        section_names(&a),
        ["harness:identity", "deployment:persona"]
    );
    assert_eq!(a["system"], IDENTITY);
    t.apply(&prompt_rows("persona = \"Be {{model}}.\"", ""))
        .await;
    let a = assemble(&t).await;
    assert_eq!(
        section_names(&a),
        ["harness:identity", "deployment:persona"]
    );
    assert_eq!(a["system"], format!("{IDENTITY}\n\nBe m."));
    t.shutdown().await;
}

#[tokio::test]
async fn the_identity_can_be_omitted_with_the_originals_config_key() {
    let t = TestHost::start().await;
    t.apply(&prompt_rows(
        "includeHarnessIdentity = false, persona = \"P\"",
        "",
    ))
    .await;
    assert_eq!(format!("{:?}", t.status("sp").await.state), "Active");
    let a = assemble(&t).await;
    assert_eq!(section_names(&a), ["deployment:persona"]);
    assert_eq!(a["system"], "P");
    t.shutdown().await;
}

async fn section(
    t: &TestHost,
    name: &str,
    order: Value,
    text: &str,
) -> Result<Value, dsh_sdk::Error> {
    probe_call(
        t,
        "impl",
        service::SYSTEM_PROMPT,
        system_prompt::SECTION,
        json!({"name": name, "order": order, "text": text}),
    )
    .await
}

#[tokio::test]
async fn sections_sort_by_order_reject_duplicates_and_leave_with_their_fiber() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let obs = probe_row(
        "obs",
        &listeners_cfg(&[listener(bus::SYSTEM_PROMPT_CHANGE, "record", None)]),
    );
    let rows = prompt_rows(
        "persona = \"P\"",
        &format!("{}{obs}", probe_row("impl", "")),
    );
    t.apply(&rows).await;
    section(&t, "late", json!(200), "L").await.unwrap();
    section(&t, "early", json!(-200), "E").await.unwrap();
    section(&t, "empty", json!(50), "").await.unwrap();
    eventually("a change per registration", || async {
        heard(&t, "obs").await.len() == 3
    })
    .await;
    let a = assemble(&t).await;
    // Ordered by `order`; the assembly keeps the empty section (as the
    // original's does), the rendered prompt drops it.
    assert_eq!(
        section_names(&a),
        [
            "early",
            "harness:identity",
            "deployment:persona",
            "empty",
            "late"
        ]
    );
    assert_eq!(a["system"], format!("E\n\n{IDENTITY}\n\nP\n\nL"));
    let e = section(&t, "late", json!(1), "again").await.unwrap_err();
    assert_eq!(e.code, "DUPLICATE_SECTION");
    let e = section(&t, "odd", json!("high"), "x").await.unwrap_err();
    assert_eq!(e.code, codes::INVALID_PAYLOAD);
    // Disposing the registering fiber removes its sections and says so.
    t.apply(&prompt_rows("persona = \"P\"", &obs)).await;
    // Each registration is its own effect: three removals, three changes.
    eventually("a change per removed section", || async {
        heard(&t, "obs").await.len() == 6
    })
    .await;
    assert_eq!(
        section_names(&assemble(&t).await),
        ["harness:identity", "deployment:persona"]
    );
    t.shutdown().await;
}

#[tokio::test]
async fn the_assemble_waterfall_composes_and_may_short_circuit() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let short = probe_row(
        "w",
        &listeners_cfg(&[listener(
            bus::SYSTEM_PROMPT_ASSEMBLE,
            "reply",
            Some(
                json!({"sections": [{"name": "only", "text": "replaced"}], "tools": [], "variables": {}}),
            ),
        )]),
    );
    t.apply(&prompt_rows("", &short)).await;
    let a = assemble(&t).await;
    assert_eq!(section_names(&a), ["only"]);
    assert_eq!(a["system"], "replaced");
    // A listener that calls next sees the assembly and passes it on.
    let pass = probe_row(
        "w",
        &listeners_cfg(&[listener(bus::SYSTEM_PROMPT_ASSEMBLE, "record", None)]),
    );
    t.apply(&prompt_rows("", &pass)).await;
    let a = assemble(&t).await;
    assert_eq!(a["system"], IDENTITY);
    let seen = heard(&t, "w").await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].starts_with(
            "event:system-prompt/assemble:{\"sections\":[{\"name\":\"harness:identity\""
        ),
        "{seen:?}"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn an_interpolation_error_fails_the_assembly_naming_its_section() {
    let t = TestHost::start().await;
    t.apply(&prompt_rows("persona = \"{{nope}}\"", "")).await;
    let e = t
        .host
        .call(
            service::SYSTEM_PROMPT,
            system_prompt::ASSEMBLE,
            json!({"variables": {"model": "m"}}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        "unknown prompt variable \"{{nope}}\" in section \"deployment:persona\"; registered variables: model"
    );
    t.shutdown().await;
}
