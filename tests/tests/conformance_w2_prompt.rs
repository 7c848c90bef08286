//! Conformance, §10.5 and the §10.3 rows about the system prompt: runtime
//! contexts (`context()`, `includeRuntimeContext`), registered variables,
//! `complete` sections, scoped layers and `toolOrder` — real plugin builds in
//! the real host. The rows of `tests/CONFORMANCE.md` name these tests; the
//! pure cores (`order_tools`, `validate_tool_order`, `interpolate`) have unit
//! tests in `plugins/system-prompt/src/lib.rs`.
//!
//! Registrations are made by a probe fiber (`probe:impl`.`call`), so their
//! removal with that fiber is observable; waterfall listeners are loop-kit
//! rows. Nothing here sleeps to synchronize.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::names::{service, sessions, system_prompt};
use dsh_sdk::vocab::event;
use dsh_testkit::fixtures::{kit_row, probe_call, stage_probe};
use dsh_testkit::TestHost;
use serde_json::{json, Value};

// ---------------------------------------------------------------- helpers

const IDENTITY: &str = "You are an AI agent powered by DeepSeek Harness.";
const SNAPSHOT_HEAD: &str =
    "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.";

/// The system-prompt row with `config`, the registering probe `impl`, and
/// `more` rows.
fn rows(config: &str, more: &str) -> String {
    format!(
        "[[row]]\nid = \"sp\"\nplugin = \"system-prompt\"\nconfig = {{ {config} }}\n\
         [[row]]\nid = \"impl\"\nplugin = \"probe\"\n[row.config]\ntag = \"impl\"\n{more}"
    )
}

/// A loop-kit row tagged `tag` with `listeners` (a TOML array body), and
/// the tool registry it injects.
fn kit(tag: &str, listeners: &str) -> String {
    format!(
        "[[row]]\nid = 'tools'\nplugin = 'tools'\n{}",
        kit_row(tag, listeners, "")
    )
}

async fn host(config: &str, more: &str) -> TestHost {
    let t = TestHost::start().await;
    stage_probe(&t);
    t.apply(&rows(config, more)).await;
    t.assert_all_active().await;
    t
}

/// `systemPrompt.<method>(params)` called by the probe fiber.
async fn register(t: &TestHost, method: &str, params: Value) -> Result<Value, dsh_sdk::Error> {
    probe_call(t, "impl", service::SYSTEM_PROMPT, method, params).await
}

async fn assemble(t: &TestHost, params: Value) -> Result<Value, dsh_sdk::Error> {
    t.host
        .call(service::SYSTEM_PROMPT, system_prompt::ASSEMBLE, params)
        .await
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}

fn tools(list: &[&str]) -> Value {
    Value::Array(
        list.iter()
            .map(|n| json!({"name": n, "description": format!("tool {n}"), "parameters": {}}))
            .collect(),
    )
}

/// Drops the probe (and its registrations) by re-applying without it.
async fn without_probe(t: &TestHost, config: &str, more: &str) {
    t.apply(&format!(
        "[[row]]\nid = \"sp\"\nplugin = \"system-prompt\"\nconfig = {{ {config} }}\n{more}"
    ))
    .await;
}

// ------------------------------------------------------ runtime contexts

#[tokio::test]
async fn contexts_render_as_one_ordered_snapshot_and_leave_with_their_fiber() {
    let t = host("", "").await;
    register(
        &t,
        system_prompt::CONTEXT,
        json!({"name": "late", "order": 20, "text": "B in {{cwd}}"}),
    )
    .await
    .unwrap();
    register(
        &t,
        system_prompt::CONTEXT,
        json!({"name": "early", "order": -5, "text": "A"}),
    )
    .await
    .unwrap();
    register(
        &t,
        system_prompt::CONTEXT,
        json!({"name": "blank", "order": 0, "text": ""}),
    )
    .await
    .unwrap();
    let a = assemble(&t, json!({"variables": {"cwd": "/w"}}))
        .await
        .unwrap();
    // Ordered by `order`; an empty one is kept in the assembly, not rendered.
    assert_eq!(names(&a["contexts"]), ["early", "blank", "late"]);
    assert_eq!(a["context"], format!("{SNAPSHOT_HEAD}\n\nA\n\nB in /w"));
    assert_eq!(
        a["contextSections"],
        json!([{"name": "early", "text": "A"}, {"name": "late", "text": "B in /w"}])
    );
    // Contexts never reach the system prompt.
    assert_eq!(a["system"], IDENTITY);
    let e = register(
        &t,
        system_prompt::CONTEXT,
        json!({"name": "late", "order": 1, "text": "x"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "DUPLICATE_CONTEXT");
    assert_eq!(
        e.message,
        "prompt context \"late\" is already registered (for a per-agent override, register it with that agent's `scope` instead)"
    );
    let e = register(
        &t,
        system_prompt::CONTEXT,
        json!({"name": "odd", "order": "high", "text": "x"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, dsh_sdk::codes::INVALID_PAYLOAD);
    assert_eq!(
        e.message,
        "prompt context \"odd\" order must be a finite number"
    );
    // An interpolation failure names the context.
    register(
        &t,
        system_prompt::CONTEXT,
        json!({"name": "bad", "order": 1, "text": "{{nope}}"}),
    )
    .await
    .unwrap();
    let e = assemble(&t, json!({"variables": {"cwd": "/w"}}))
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        "unknown prompt variable \"{{nope}}\" in context \"bad\"; registered variables: cwd"
    );
    without_probe(&t, "", "").await;
    let a = assemble(&t, json!({})).await.unwrap();
    assert_eq!(a["contexts"], json!([]));
    assert_eq!(a["context"], "");
    t.shutdown().await;
}

#[tokio::test]
async fn suppressed_runtime_context_drops_registered_contexts_and_waterfall_additions() {
    let add = kit(
        "w",
        "{ event = 'system-prompt/assemble', action = 'merge', value = { contexts = [{ name = 'late', text = 'late context' }] } }",
    );
    let t = host("includeRuntimeContext = false", &add).await;
    register(
        &t,
        system_prompt::CONTEXT,
        json!({"name": "policy", "order": 0, "text": "policy"}),
    )
    .await
    .unwrap();
    let a = assemble(&t, json!({})).await.unwrap();
    assert_eq!(a["contexts"], json!([]));
    assert_eq!(a["context"], "");
    // Without the suppression, the same rows show both.
    let t2 = host("", &add).await;
    register(
        &t2,
        system_prompt::CONTEXT,
        json!({"name": "policy", "order": 0, "text": "policy"}),
    )
    .await
    .unwrap();
    let a = assemble(&t2, json!({})).await.unwrap();
    assert_eq!(names(&a["contexts"]), ["late"]);
    assert_eq!(a["context"], format!("{SNAPSHOT_HEAD}\n\nlate context"));
    t2.shutdown().await;
    t.shutdown().await;
}

#[tokio::test]
async fn a_scoped_suppressor_silences_only_its_scope_and_leaves_with_its_fiber() {
    let t = host("", "").await;
    register(
        &t,
        system_prompt::CONTEXT,
        json!({"name": "policy", "order": 0, "text": "policy"}),
    )
    .await
    .unwrap();
    register(
        &t,
        system_prompt::SUPPRESS_RUNTIME_CONTEXT,
        json!({"scope": "child"}),
    )
    .await
    .unwrap();
    let child = assemble(&t, json!({"scope": "child"})).await.unwrap();
    let other = assemble(&t, json!({"scope": "other"})).await.unwrap();
    assert_eq!(child["context"], "");
    assert_eq!(other["context"], format!("{SNAPSHOT_HEAD}\n\npolicy"));
    without_probe(&t, "", "").await;
    // The context went with the probe too; a fresh one shows the scope is
    // no longer suppressed.
    t.apply(&rows("", "")).await;
    register(
        &t,
        system_prompt::CONTEXT,
        json!({"name": "policy", "order": 0, "text": "back"}),
    )
    .await
    .unwrap();
    let child = assemble(&t, json!({"scope": "child"})).await.unwrap();
    assert_eq!(child["context"], format!("{SNAPSHOT_HEAD}\n\nback"));
    t.shutdown().await;
}

// --------------------------------------------------------- text providers

/// The probe's `text` method: answers `text <n>` on its n-th call.
fn provider() -> Value {
    json!({"service": "probe:impl", "method": "text"})
}

/// The provider calls the probe journaled.
async fn provider_calls(t: &TestHost) -> Vec<String> {
    let j: Vec<String> =
        serde_json::from_value(t.call("probe:impl", "journal", json!({})).await).unwrap();
    j.into_iter().filter(|e| e.starts_with("text:")).collect()
}

#[tokio::test]
async fn provider_texts_are_resolved_at_each_assembly_after_shadowing() {
    let t = host("", "").await;
    register(
        &t,
        system_prompt::SECTION,
        json!({"name": "shared", "order": 1, "provider": provider()}),
    )
    .await
    .unwrap();
    register(
        &t,
        system_prompt::SECTION,
        json!({"scope": "child", "name": "shared", "order": 1, "text": "scoped text"}),
    )
    .await
    .unwrap();
    register(
        &t,
        system_prompt::CONTEXT,
        json!({"name": "policy", "order": 0, "provider": provider()}),
    )
    .await
    .unwrap();
    let a = assemble(&t, json!({"variables": {"model": "m"}}))
        .await
        .unwrap();
    assert_eq!(a["system"], format!("{IDENTITY}\n\ntext 1"));
    assert_eq!(a["context"], format!("{SNAPSHOT_HEAD}\n\ntext 2"));
    let a = assemble(&t, json!({})).await.unwrap();
    assert_eq!(a["system"], format!("{IDENTITY}\n\ntext 3"));
    // The provider hears what it provides, for which scope, in which assembly.
    let calls = provider_calls(&t).await;
    let first: Value = serde_json::from_str(calls[0].trim_start_matches("text:")).unwrap();
    assert_eq!(
        first,
        json!({"kind": "section", "name": "shared", "scope": null,
               "context": {"variables": {"model": "m"}}})
    );
    // Shadowed in the child's scope: the global provider is not asked.
    let a = assemble(&t, json!({"scope": "child"})).await.unwrap();
    assert_eq!(a["system"], format!("{IDENTITY}\n\nscoped text"));
    assert_eq!(
        provider_calls(&t).await.len(),
        5,
        "one call for the child's context"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_suppressed_context_provider_is_never_asked() {
    let t = host("includeRuntimeContext = false", "").await;
    register(
        &t,
        system_prompt::CONTEXT,
        json!({"name": "policy", "order": 0, "provider": provider()}),
    )
    .await
    .unwrap();
    // Sections are not suppressed: their provider is the one call.
    register(
        &t,
        system_prompt::SECTION,
        json!({"name": "s", "order": 1, "provider": provider()}),
    )
    .await
    .unwrap();
    let a = assemble(&t, json!({})).await.unwrap();
    assert_eq!(a["context"], "");
    assert_eq!(a["system"], format!("{IDENTITY}\n\ntext 1"));
    let calls = provider_calls(&t).await;
    assert_eq!(calls.len(), 1, "{calls:?}");
    let call: Value = serde_json::from_str(calls[0].trim_start_matches("text:")).unwrap();
    assert_eq!(call["kind"], "section");
    t.shutdown().await;
}

#[tokio::test]
async fn a_failing_or_misdeclared_provider_is_an_error_naming_its_section() {
    let t = host("", "").await;
    let e = register(
        &t,
        system_prompt::SECTION,
        json!({"name": "both", "order": 1, "text": "t", "provider": provider()}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, dsh_sdk::codes::INVALID_PAYLOAD);
    assert_eq!(
        e.message,
        "prompt section \"both\" takes a `text` or a `provider`, not both"
    );
    register(
        &t,
        system_prompt::SECTION,
        json!({"name": "broken", "order": 1, "provider": {"service": "probe:impl", "method": "nope"}}),
    )
    .await
    .unwrap();
    let e = assemble(&t, json!({})).await.unwrap_err();
    assert_eq!(e.code, dsh_sdk::codes::UNKNOWN_METHOD);
    assert_eq!(
        e.message,
        "the provider of prompt section \"broken\" failed: service `probe:impl` has no method `nope`"
    );
    t.shutdown().await;
}

// ------------------------------------------------------------- variables

#[tokio::test]
async fn registered_variables_render_reject_duplicates_and_invalid_names_and_leave_with_their_fiber(
) {
    let t = host("persona = \"You run on {{model}} in {{cwd}}.\"", "").await;
    register(
        &t,
        system_prompt::VARIABLE,
        json!({"name": "model", "value": "deepseek-v4"}),
    )
    .await
    .unwrap();
    register(
        &t,
        system_prompt::VARIABLE,
        json!({"name": "cwd", "value": "/work"}),
    )
    .await
    .unwrap();
    let a = assemble(&t, json!({})).await.unwrap();
    assert_eq!(
        a["variables"],
        json!({"model": "deepseek-v4", "cwd": "/work"})
    );
    assert_eq!(
        a["system"],
        format!("{IDENTITY}\n\nYou run on deepseek-v4 in /work.")
    );
    let e = register(
        &t,
        system_prompt::VARIABLE,
        json!({"name": "model", "value": "m2"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "DUPLICATE_VARIABLE");
    assert_eq!(
        e.message,
        "prompt variable \"model\" is already registered (for a per-agent value, register it with that agent's `scope` instead)"
    );
    let e = register(
        &t,
        system_prompt::VARIABLE,
        json!({"name": "Not Valid", "value": "x"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "INVALID_VARIABLE_NAME");
    assert_eq!(
        e.message,
        "invalid prompt variable name \"Not Valid\" (must match /^[a-z][a-z0-9_]*$/)"
    );
    // Neither failed registration leaked.
    let a = assemble(&t, json!({})).await.unwrap();
    assert_eq!(
        a["variables"],
        json!({"model": "deepseek-v4", "cwd": "/work"})
    );
    // A variable registered without a value is "registered, no value here".
    register(&t, system_prompt::VARIABLE, json!({"name": "who"}))
        .await
        .unwrap();
    let a = assemble(&t, json!({})).await.unwrap();
    assert_eq!(a["variables"]["who"], Value::Null);
    without_probe(&t, "", "").await;
    let a = assemble(&t, json!({})).await.unwrap();
    assert_eq!(a["variables"], json!({}));
    t.shutdown().await;
}

#[tokio::test]
async fn a_waterfall_listener_adds_or_overrides_variables_before_render() {
    let over = kit(
        "w",
        "{ event = 'system-prompt/assemble', action = 'merge', value = { variables = { extra = 'from-waterfall', model = 'over' } } }",
    );
    let t = host("persona = \"{{extra}} {{model}}\"", &over).await;
    register(
        &t,
        system_prompt::VARIABLE,
        json!({"name": "model", "value": "registered"}),
    )
    .await
    .unwrap();
    let a = assemble(&t, json!({})).await.unwrap();
    assert_eq!(a["system"], format!("{IDENTITY}\n\nfrom-waterfall over"));
    t.shutdown().await;
}

// ------------------------------------------------------ complete sections

#[tokio::test]
async fn a_complete_section_is_restored_after_the_waterfall_and_two_are_rejected() {
    let mutate = kit(
        "w",
        "{ event = 'system-prompt/assemble', action = 'merge', value = { sections = [{ name = 'complete', text = 'mutated' }, { name = 'late', text = 'late' }] } }",
    );
    let t = host("", &mutate).await;
    register(
        &t,
        system_prompt::SECTION,
        json!({"name": "complete", "order": 10, "text": "Exact prompt.", "complete": true}),
    )
    .await
    .unwrap();
    register(
        &t,
        system_prompt::SECTION,
        json!({"name": "extra", "order": 20, "text": "extra"}),
    )
    .await
    .unwrap();
    let a = assemble(&t, json!({})).await.unwrap();
    assert_eq!(
        a["sections"],
        json!([{"name": "complete", "text": "Exact prompt."}])
    );
    assert_eq!(a["system"], "Exact prompt.");
    register(
        &t,
        system_prompt::SECTION,
        json!({"name": "second", "order": 30, "text": "second", "complete": true}),
    )
    .await
    .unwrap();
    let e = assemble(&t, json!({})).await.unwrap_err();
    assert_eq!(e.code, "MULTIPLE_COMPLETE_SECTIONS");
    assert_eq!(
        e.message,
        "multiple complete prompt sections are active: \"complete\", \"second\""
    );
    t.shutdown().await;
}

// --------------------------------------------------------- scoped layers

#[tokio::test]
async fn scoped_persona_sections_variables_and_contexts_shadow_for_their_scope_and_clean_up() {
    let t = host("persona = \"You are the deployment.\"", "").await;
    let scoped = |name: &str, order: i64, text: &str| json!({"scope": "child", "name": name, "order": order, "text": text});
    register(
        &t,
        system_prompt::SECTION,
        scoped("deployment:persona", 0, "You run tests for {{who}}."),
    )
    .await
    .unwrap();
    register(
        &t,
        system_prompt::SECTION,
        scoped("child:extra", 50, "Extra guidance."),
    )
    .await
    .unwrap();
    register(
        &t,
        system_prompt::VARIABLE,
        json!({"name": "who", "value": "everyone"}),
    )
    .await
    .unwrap();
    register(
        &t,
        system_prompt::VARIABLE,
        json!({"scope": "child", "name": "who", "value": "the child"}),
    )
    .await
    .unwrap();
    register(
        &t,
        system_prompt::CONTEXT,
        json!({"name": "policy", "order": 0, "text": "global policy"}),
    )
    .await
    .unwrap();
    register(
        &t,
        system_prompt::CONTEXT,
        scoped("policy", 0, "child policy"),
    )
    .await
    .unwrap();
    let child = assemble(&t, json!({"scope": "child"})).await.unwrap();
    assert_eq!(
        child["system"],
        format!("{IDENTITY}\n\nYou run tests for the child.\n\nExtra guidance.")
    );
    assert_eq!(child["context"], format!("{SNAPSHOT_HEAD}\n\nchild policy"));
    for global in [
        assemble(&t, json!({})).await.unwrap(),
        assemble(&t, json!({"scope": "other"})).await.unwrap(),
    ] {
        assert_eq!(
            global["system"],
            format!("{IDENTITY}\n\nYou are the deployment.")
        );
        assert_eq!(global["variables"]["who"], "everyone");
        assert_eq!(
            global["context"],
            format!("{SNAPSHOT_HEAD}\n\nglobal policy")
        );
    }
    // Duplicates are per layer: the scoped layer names "this scope".
    let e = register(
        &t,
        system_prompt::SECTION,
        scoped("child:extra", 1, "again"),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "DUPLICATE_SECTION");
    assert_eq!(
        e.message,
        "prompt section \"child:extra\" is already registered in this scope"
    );
    without_probe(&t, "persona = \"You are the deployment.\"", "").await;
    let child = assemble(&t, json!({"scope": "child"})).await.unwrap();
    assert_eq!(
        child["system"],
        format!("{IDENTITY}\n\nYou are the deployment.")
    );
    assert_eq!(child["variables"], json!({}));
    assert_eq!(child["context"], "");
    t.shutdown().await;
}

#[tokio::test]
async fn a_scoped_assemble_listener_shapes_only_its_scopes_assemblies() {
    let listener = "[[row.config.listeners]]\nevent = \"system-prompt/assemble\"\naction = \"reply\"\nscope = \"child\"\n\
                    reply = { sections = [{ name = \"only\", text = \"child prompt\" }], contexts = [], tools = [], variables = {} }\n";
    let t = host("", listener).await;
    let child = assemble(&t, json!({"scope": "child"})).await.unwrap();
    assert_eq!(child["system"], "child prompt");
    for other in [json!({}), json!({"scope": "other"})] {
        assert_eq!(assemble(&t, other).await.unwrap()["system"], IDENTITY);
    }
    t.shutdown().await;
}

// -------------------------------------------------------------- toolOrder

#[tokio::test]
async fn tool_order_places_listed_tools_rest_sorted_before_the_waterfall_and_rejects_unknown_names()
{
    let seen = kit(
        "w",
        "{ event = 'system-prompt/assemble', action = 'record' }",
    );
    let t = host(
        "toolOrder = [\"read\", \"<unlisted-tools>\", \"bash\"]",
        &seen,
    )
    .await;
    let all = tools(&["write", "read", "glob", "bash", "edit"]);
    let a = assemble(&t, json!({"tools": all})).await.unwrap();
    assert_eq!(
        names(&a["tools"]),
        ["read", "edit", "glob", "write", "bash"]
    );
    // The waterfall already saw the canonical order.
    let journal = t.call("loopkit:w", "journal", json!({})).await;
    assert_eq!(
        names(&journal[0]["payload"]["tools"]),
        ["read", "edit", "glob", "write", "bash"]
    );
    let e = assemble(&t, json!({"tools": tools(&["write", "read"])}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "TOOL_ORDER");
    assert_eq!(
        e.message,
        "toolOrder lists unregistered tool \"bash\"; known tools: read, write"
    );
    // Known to the registry but hidden from this scope: a normal absence.
    let a = assemble(
        &t,
        json!({"tools": tools(&["write", "read"]), "knownTools": ["bash", "read", "write"]}),
    )
    .await
    .unwrap();
    assert_eq!(names(&a["tools"]), ["read", "write"]);
    // Without a toolOrder: lexicographic, whatever order they came in.
    let t2 = host("", "").await;
    let a = assemble(&t2, json!({"tools": all})).await.unwrap();
    assert_eq!(
        names(&a["tools"]),
        ["bash", "edit", "glob", "read", "write"]
    );
    t2.shutdown().await;
    t.shutdown().await;
}

#[tokio::test]
async fn a_tool_order_without_the_rest_entry_or_with_a_duplicate_fails_the_row() {
    for (config, message) in [
        (
            "toolOrder = [\"bash\"]",
            "toolOrder must contain the \"<unlisted-tools>\" rest entry (where unlisted tools are inserted)",
        ),
        (
            "toolOrder = [\"bash\", \"<unlisted-tools>\", \"bash\"]",
            "toolOrder lists \"bash\" more than once",
        ),
    ] {
        let t = TestHost::start().await;
        t.apply(&format!(
            "[[row]]\nid = \"sp\"\nplugin = \"system-prompt\"\nconfig = {{ {config} }}\n"
        ))
        .await;
        let s = t.status("sp").await;
        assert_eq!(format!("{:?}", s.state), "Failed", "{s:?}");
        let error = s.error.unwrap_or_default();
        assert!(error.ends_with(message), "{error}");
        t.shutdown().await;
    }
}

// ------------------------------------- §10.3 the loop: runtime context

use dsh_testkit::agent::{events, new_agent, turn};
use dsh_testkit::fake_llm::{text, FakeLlm};

const SOURCE: &str = "@deepseek-ai/dsh-system-prompt";
const CLEARED: &str =
    "Current runtime context: none. Earlier runtime-context snapshots no longer apply.";

/// The probe row that registers contexts (`probe:ctx`).
const CTX_PROBE: &str =
    "[[row]]\nid = \"ctx\"\nplugin = \"dsh-fixture-probe\"\n[row.config]\ntag = \"ctx\"\n";

/// The agent core against a fake model answering "ok", and one agent.
struct Loop {
    t: TestHost,
    fake: FakeLlm,
    /// The core rows; `apply(extra)` reconciles to them plus `extra`.
    rows: String,
    agent: String,
}

impl Loop {
    async fn start(extra: &str) -> Loop {
        let fake = FakeLlm::start().await;
        fake.set_fallback(text("ok"));
        let t = TestHost::start().await;
        let rows = dsh_testkit::core_rows(&fake.base_url, &t.home.path().join("sessions"));
        let l = Loop {
            t,
            fake,
            rows,
            agent: String::new(),
        };
        l.apply(extra).await;
        let agent = new_agent(&l.t, "/tmp").await;
        Loop { agent, ..l }
    }

    async fn apply(&self, extra: &str) {
        self.t.apply(&format!("{}{extra}", self.rows)).await;
        for s in self.t.host.status().await {
            assert_eq!(format!("{:?}", s.state), "Active", "{s:?}");
        }
    }

    /// Registers runtime context `policy` with `text` from `probe:ctx`.
    async fn policy(&self, text: &str) {
        self.t
            .call(
                "probe:ctx",
                "call",
                json!({"service": service::SYSTEM_PROMPT, "method": system_prompt::CONTEXT,
                       "params": {"name": "policy", "order": 0, "text": text}}),
            )
            .await;
    }

    async fn turn(&self, prompt: &str) {
        assert_eq!(
            turn(&self.t, &self.agent, prompt).await,
            json!({"kind": "completed"})
        );
    }

    /// The runtime-context snapshots in the log: `(seq, message)`.
    async fn snapshots(&self) -> Vec<(u64, Value)> {
        events(&self.t, &self.agent)
            .await
            .into_iter()
            .filter(|e| e["type"] == event::USER_MESSAGE && e["data"]["source"]["plugin"] == SOURCE)
            .map(|e| (e["seq"].as_u64().unwrap(), e["data"].clone()))
            .collect()
    }

    /// Appends a plugin's one-text user message to the agent's session with
    /// `surface_op` (and `sources`); its seq.
    async fn append(
        &self,
        plugin: &str,
        text: &str,
        surface_op: Value,
        sources: Option<u64>,
    ) -> u64 {
        let mut args = json!({"id": self.agent, "type": event::USER_MESSAGE,
            "data": {"id": dsh_sdk::new_id(), "role": "user",
                     "content": [{"type": "text", "text": text}],
                     "source": {"kind": "plugin", "plugin": plugin}},
            "surfaceOp": surface_op});
        if let Some(seq) = sources {
            args["sourceEventSeqs"] = json!([seq]);
        }
        self.t.call(service::SESSIONS, sessions::APPEND, args).await["seq"]
            .as_u64()
            .unwrap()
    }

    /// Whether the `n`th model request carried a message with `text`.
    fn request_has(&self, n: usize, text: &str) -> bool {
        self.fake.requests()[n]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "user" && m["content"] == text)
    }
}

fn snapshot(body: &str) -> String {
    format!("{SNAPSHOT_HEAD}\n\n{body}")
}

fn one_text(text: &str) -> Value {
    json!([{"type": "text", "text": text}])
}

#[tokio::test]
async fn runtime_context_is_appended_at_the_history_tail_only_when_it_changes_and_never_in_the_system_header(
) {
    let l = Loop::start(CTX_PROBE).await;
    l.policy("Mode: read-only.").await;
    l.turn("first").await;
    let snaps = l.snapshots().await;
    assert_eq!(snaps.len(), 1, "{snaps:?}");
    assert_eq!(
        snaps[0].1["content"],
        one_text(&snapshot("Mode: read-only."))
    );
    assert_eq!(
        snaps[0].1["source"],
        json!({"kind": "plugin", "plugin": SOURCE, "form": "snapshot",
               "sections": [{"name": "policy", "text": "Mode: read-only."}]})
    );
    // At the tail: after the claimed message, the last thing the model reads.
    let first = l.fake.requests()[0]["messages"].clone();
    let n = first.as_array().unwrap().len();
    assert_eq!(first[n - 2], json!({"role": "user", "content": "first"}));
    assert_eq!(
        first[n - 1],
        json!({"role": "user", "content": snapshot("Mode: read-only.")})
    );
    l.turn("unchanged").await;
    assert_eq!(l.snapshots().await.len(), 1);
    // A changed context: a new snapshot.
    l.apply("").await;
    l.apply(CTX_PROBE).await;
    l.policy("Mode: danger-full-access.").await;
    l.turn("changed").await;
    let snaps = l.snapshots().await;
    assert_eq!(snaps.len(), 2, "{snaps:?}");
    assert_eq!(
        snaps[1].1["content"],
        one_text(&snapshot("Mode: danger-full-access."))
    );
    // No context left: the cleared marker, once, without sections.
    l.apply("").await;
    l.turn("cleared").await;
    let snaps = l.snapshots().await;
    assert_eq!(snaps.len(), 3, "{snaps:?}");
    assert_eq!(snaps[2].1["content"], one_text(CLEARED));
    assert_eq!(
        snaps[2].1["source"],
        json!({"kind": "plugin", "plugin": SOURCE})
    );
    l.turn("still clear").await;
    assert_eq!(l.snapshots().await.len(), 3);
    // The system prompt never changed, so one header was logged.
    let requests = l.fake.requests();
    assert_eq!(requests.len(), 5);
    for r in &requests {
        assert_eq!(r["messages"][0], requests[0]["messages"][0]);
        assert_eq!(r["messages"][0]["role"], "system");
    }
    let headers = events(&l.t, &l.agent)
        .await
        .into_iter()
        .filter(|e| e["type"] == event::REQUEST_HEADER)
        .count();
    assert_eq!(headers, 1);
    l.t.shutdown().await;
}

#[tokio::test]
async fn an_unchanged_runtime_context_is_re_emitted_after_a_replace_removed_its_snapshot() {
    let l = Loop::start(CTX_PROBE).await;
    l.policy("Mode: read-only.").await;
    l.turn("first").await;
    let seq = l.snapshots().await[0].0;
    let replace = json!({"op": "replace", "start": seq, "end": seq});
    l.append("test-compaction", "compacted summary", replace, Some(seq))
        .await;
    l.turn("after compaction").await;
    assert_eq!(l.snapshots().await.len(), 2);
    assert!(l.request_has(1, &snapshot("Mode: read-only.")));
    l.t.shutdown().await;
}

#[tokio::test]
async fn a_replaced_snapshot_is_cleared_once_its_contexts_are_gone() {
    let l = Loop::start(CTX_PROBE).await;
    l.policy("Mode: read-only.").await;
    l.turn("first").await;
    let seq = l.snapshots().await[0].0;
    let replace = json!({"op": "replace", "start": seq, "end": seq});
    l.append(
        "test-compaction",
        "summary retaining old mode: read-only",
        replace,
        Some(seq),
    )
    .await;
    l.apply("").await;
    l.turn("after compaction").await;
    assert!(l.request_has(1, CLEARED));
    l.t.shutdown().await;
}

#[tokio::test]
async fn an_unrelated_replace_does_not_clear_a_runtime_context_that_never_existed() {
    let l = Loop::start(CTX_PROBE).await;
    let old = l
        .append("test-context", "old context", json!("append"), None)
        .await;
    let replace = json!({"op": "replace", "start": old, "end": old});
    l.append("test-compaction", "compacted summary", replace, Some(old))
        .await;
    l.turn("after compaction").await;
    assert!(l.snapshots().await.is_empty());
    assert!(!l.request_has(0, CLEARED));
    // A context appearing later is its first snapshot, not a clearing.
    l.policy("Mode: read-only.").await;
    l.turn("now with context").await;
    let snaps = l.snapshots().await;
    assert_eq!(snaps.len(), 1, "{snaps:?}");
    assert_eq!(
        snaps[0].1["content"],
        one_text(&snapshot("Mode: read-only."))
    );
    l.t.shutdown().await;
}

#[tokio::test]
async fn a_malformed_retained_snapshot_is_replaced_by_the_complete_current_one() {
    let l = Loop::start(CTX_PROBE).await;
    l.policy("Mode: read-only.").await;
    let broken = json!({"id": dsh_sdk::new_id(), "role": "user",
        "content": [{"type": "text", "text": "broken"}, {"type": "text", "text": "snapshot"}],
        "source": {"kind": "plugin", "plugin": SOURCE}});
    l.t.call(
        service::SESSIONS,
        sessions::APPEND,
        json!({"id": l.agent, "type": event::USER_MESSAGE, "data": broken, "surfaceOp": "append"}),
    )
    .await;
    l.turn("repair context").await;
    let snaps = l.snapshots().await;
    assert_eq!(snaps.len(), 2, "{snaps:?}");
    assert_eq!(
        snaps[1].1["content"],
        one_text(&snapshot("Mode: read-only."))
    );
    l.t.shutdown().await;
}

// ------------------------------------------------ §10.3 the loop: toolOrder

/// The system prompt row patched with `toolOrder`.
fn tool_order(order: &str) -> String {
    format!(
        "[[patch]]\nid = \"system-prompt\"\nconfig = {{ persona = \"P\", toolOrder = {order} }}\n"
    )
}

fn tool_names(tools: &Value) -> Vec<String> {
    names(tools)
}

#[tokio::test]
async fn a_configured_tool_order_is_honored_in_the_logged_header_and_the_request() {
    // The core rows register `read`, `bash` and bash's job tools.
    let l = Loop::start(&tool_order("[\"read\", \"<unlisted-tools>\", \"bash\"]")).await;
    l.turn("go").await;
    let header = events(&l.t, &l.agent)
        .await
        .into_iter()
        .find(|e| e["type"] == event::REQUEST_HEADER)
        .unwrap();
    assert_eq!(
        tool_names(&header["data"]["header"]["tools"]),
        ["read", "job_kill", "job_list", "job_output", "bash"]
    );
    let requests = l.fake.requests();
    let sent: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(sent, ["read", "job_kill", "job_list", "job_output", "bash"]);
    l.t.shutdown().await;
}

#[tokio::test]
async fn an_unknown_tool_order_name_closes_a_turn_without_a_step_or_a_model_call() {
    let l = Loop::start(&tool_order("[\"ghost\", \"<unlisted-tools>\"]")).await;
    // The core rows know bash (and its job tools) and read.
    assert_eq!(
        turn(&l.t, &l.agent, "go").await,
        json!({"kind": "error", "error": {"code": "TOOL_ORDER",
            "message": "toolOrder lists unregistered tool \"ghost\"; known tools: bash, job_kill, job_list, job_output, read"}})
    );
    let types: Vec<String> = events(&l.t, &l.agent)
        .await
        .into_iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect();
    assert!(types.contains(&event::TURN_START.to_owned()), "{types:?}");
    assert!(types.contains(&event::TURN_END.to_owned()), "{types:?}");
    for absent in [event::STEP_START, event::STEP_END, event::REQUEST_HEADER] {
        assert!(!types.contains(&absent.to_owned()), "{types:?}");
    }
    assert!(l.fake.requests().is_empty());
    l.t.shutdown().await;
}
