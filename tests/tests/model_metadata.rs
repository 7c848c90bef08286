//! Model metadata in the call config (reference dsh-core §3.10 call-config
//! resolution, §4.6 request construction; the original's
//! `request-reconstruction.spec` and `service.spec`): the model's default
//! `maxTokens` and reasoning effort materialized before dispatch and marked
//! in `request/header`'s `adapterDefaults`, an explicit effort restored on
//! resume, efforts the model does not offer refused, a slow lookup dropped
//! when the agent is disposed, and the model's window in `request/context`.
//!
//! The real `llm`, `agent-loop`, `llm-deepseek` (against the fake model
//! server) and `llm-script` (whose config `models` describes models: a
//! window, a default cap, reasoning efforts, a slow lookup) plugins; what
//! reaches an adapter is read from the fake's requests or from a loop-kit
//! listener on `llm/stream`.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::names::{agent_loop, agents, llm, service, sessions};
use dsh_sdk::vocab::event;
use dsh_testkit::agent::{agent_with, core_host, events, of_type, send, turn};
use dsh_testkit::fake_llm::{text, FakeLlm};
use dsh_testkit::fixtures::{kit_journal, kit_row, wait_kit_journal};
use dsh_testkit::{TempDir, TestHost};
use serde_json::{json, Value};

/// One answer per request, as many as a test needs.
const SCRIPT: &str =
    r#"{"responses": [{"text": "one"}, {"text": "two"}, {"text": "three"}, {"text": "four"}]}"#;

/// The `llm-script` row serving route `script` with the model catalog
/// `models` (an inline TOML array), its script written under `dir`.
fn script_row(dir: &TempDir, models: &str) -> String {
    let file = dir.path().join("script.json");
    std::fs::write(&file, SCRIPT).unwrap();
    format!(
        "[[row]]\nid = 'llm-script'\nplugin = 'llm-script'\n\
         config = {{ script = '{}', provider = 'script', models = {models} }}\n",
        file.display()
    )
}

/// A second DeepSeek route, `small`, on the same fake server, whose models
/// default to an 8,192-token output cap (their window stated, so nothing
/// asks the fake for one).
fn small_route(fake_url: &str) -> String {
    format!(
        "[[row]]\nid = 'llm-small'\nplugin = 'llm-deepseek'\n\
         config = {{ provider = 'small', baseUrl = '{fake_url}', apiKeyEnv = '', maxTokens = 8192, defaultContextWindow = 32768 }}\n"
    )
}

/// A model of DeepSeek's catalog (window and default cap known to the
/// adapter).
const FLASH: &str = "deepseek-v4-flash";

/// The core rows plus `extra(the fake server's base URL)`, every row
/// active.
async fn setup(extra: impl FnOnce(&str) -> String) -> (TestHost, FakeLlm) {
    core_host(|rows| {
        // The fake's URL, as the core rows' `llm-deepseek` row names it.
        let base = rows
            .split("baseUrl = \"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .expect("the core rows name the fake's baseUrl")
            .to_owned();
        let extra = extra(&base);
        rows + &extra
    })
    .await
}

/// The `request/header` data of the log, in order.
fn headers(ev: &[Value]) -> Vec<Value> {
    of_type(ev, event::REQUEST_HEADER)
        .iter()
        .map(|e| e["data"].clone())
        .collect()
}

/// What reached the adapters (the `llm/stream` payloads a loop-kit
/// `record` listener saw), in order.
async fn streamed(t: &TestHost, tag: &str) -> Vec<Value> {
    kit_journal(t, tag)
        .await
        .into_iter()
        .filter(|e| e["event"] == "llm/stream")
        .map(|e| e["payload"].clone())
        .collect()
}

/// `llm.resolveCallConfig(config)`.
async fn resolve(t: &TestHost, config: Value) -> Result<Value, dsh_sdk::Error> {
    t.host
        .call(service::LLM, llm::RESOLVE_CALL_CONFIG, config)
        .await
}

/// Ends `agent` (its session written and closed), then resumes it with
/// `options`.
async fn resume_as(t: &TestHost, agent: &str, options: Value) {
    t.call(service::SESSIONS, sessions::FLUSH, json!({"id": agent}))
        .await;
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": agent}))
        .await;
    t.call(
        service::AGENT_LOOP,
        agent_loop::RESUME,
        json!({"sessionId": agent, "agentOptions": options}),
    )
    .await;
}

/// The end reason of a turn that completed.
fn completed() -> Value {
    json!({"kind": "completed"})
}

// ---- request-reconstruction.spec ---------------------------------------------

/// The original's `logs an adapter-owned maxTokens default before dispatch`
/// and `rematerializes the selected adapter maxTokens default after a
/// provider switch`: the route's default cap is in the first request and
/// its header, marked as the adapter's; after an `agent/request` listener
/// switches to a route with another default, that one is.
#[tokio::test]
async fn the_default_max_tokens_is_materialized_and_rematerialized_after_a_provider_switch() {
    let listeners = "{ event = 'agent/request', action = 'merge', value = { config = { provider = 'small', model = 'm2' } }, when = { turn = 2 } }";
    let (t, fake) = setup(|url| small_route(url) + &kit_row("k", listeners, "")).await;
    fake.push([text("first"), text("second")]);
    let agent = agent_with(&t, json!({"provider": "fake", "model": FLASH})).await;
    assert_eq!(turn(&t, &agent, "first").await, completed());
    assert_eq!(turn(&t, &agent, "second").await, completed());

    let requests = fake.requests();
    let sent: Vec<(&Value, &Value)> = requests
        .iter()
        .map(|r| (&r["model"], &r["max_tokens"]))
        .collect();
    assert_eq!(
        sent,
        [
            (&json!(FLASH), &json!(256_000)),
            (&json!("m2"), &json!(8192))
        ]
    );
    let logged = headers(&events(&t, &agent).await);
    let configs: Vec<&Value> = logged.iter().map(|h| &h["header"]["config"]).collect();
    assert_eq!(
        configs,
        [
            &json!({"provider": "fake", "model": FLASH, "reasoningEffort": "high", "maxTokens": 256_000}),
            &json!({"provider": "small", "model": "m2", "reasoningEffort": "high", "maxTokens": 8192}),
        ]
    );
    let markers: Vec<&Value> = logged
        .iter()
        .map(|h| &h["header"]["adapterDefaults"])
        .collect();
    assert_eq!(
        markers,
        [
            &json!({"reasoningEffort": true, "maxTokens": true}),
            &json!({"reasoningEffort": true, "maxTokens": true})
        ]
    );
    t.shutdown().await;
}

/// The original's `logs adapter defaults, supports per-turn effort changes,
/// and restores the effective value`: the model's default effort is sent
/// and logged marked as the adapter's; an effort an `agent/request`
/// listener asks for replaces it (a `change` header without the marker); a
/// resume on the same model restores that chosen effort, and a resume on
/// another model does not (its default is resolved afresh).
#[tokio::test]
async fn adapter_defaults_are_logged_and_a_chosen_effort_is_restored_on_the_same_model_only() {
    let dir = TempDir::new("model-metadata");
    let reasoning = "reasoning = { efforts = [{ id = 'high', name = 'High' }, { id = 'max', name = 'Max' }], defaultEffort = 'high' }";
    let models =
        format!("[{{ id = 'reasoner', {reasoning} }}, {{ id = 'replacement', {reasoning} }}]");
    let listeners = "{ event = 'agent/request', action = 'merge', value = { config = { reasoningEffort = 'max' } }, when = { turn = 2 } }, \
                     { event = 'llm/stream', action = 'record' }";
    let (t, _fake) = setup(|_| script_row(&dir, &models) + &kit_row("k", listeners, "")).await;
    let options = json!({"provider": "script", "model": "reasoner"});
    let agent = agent_with(&t, options.clone()).await;
    assert_eq!(turn(&t, &agent, "first").await, completed());
    assert_eq!(turn(&t, &agent, "second").await, completed());
    let logged = headers(&events(&t, &agent).await);
    let efforts: Vec<&Value> = logged
        .iter()
        .map(|h| &h["header"]["config"]["reasoningEffort"])
        .collect();
    assert_eq!(efforts, [&json!("high"), &json!("max")]);
    let markers: Vec<&Value> = logged
        .iter()
        .map(|h| &h["header"]["adapterDefaults"])
        .collect();
    assert_eq!(markers, [&json!({"reasoningEffort": true}), &Value::Null]);
    let reasons: Vec<&Value> = logged.iter().map(|h| &h["reason"]).collect();
    assert_eq!(reasons, [&json!("initial"), &json!("change")]);

    // A fresh loop on the same model restores the chosen effort...
    resume_as(&t, &agent, options).await;
    assert_eq!(turn(&t, &agent, "same model").await, completed());
    // ...and on another model resolves that model's default instead.
    resume_as(
        &t,
        &agent,
        json!({"provider": "script", "model": "replacement"}),
    )
    .await;
    assert_eq!(turn(&t, &agent, "other model").await, completed());
    let logged = headers(&events(&t, &agent).await);
    let resumed: Vec<(&Value, &Value, &Value, &Value)> = logged[2..]
        .iter()
        .map(|h| {
            (
                &h["reason"],
                &h["header"]["config"]["model"],
                &h["header"]["config"]["reasoningEffort"],
                &h["header"]["adapterDefaults"],
            )
        })
        .collect();
    assert_eq!(
        resumed,
        [
            (
                &json!("resume"),
                &json!("reasoner"),
                &json!("max"),
                &Value::Null
            ),
            (
                &json!("resume"),
                &json!("replacement"),
                &json!("high"),
                &json!({"reasoningEffort": true})
            ),
        ]
    );
    // What reached the adapter is what was logged.
    let sent: Vec<Value> = streamed(&t, "k")
        .await
        .iter()
        .map(|p| json!([p["model"], p["reasoningEffort"]]))
        .collect();
    assert_eq!(
        sent,
        [
            json!(["reasoner", "high"]),
            json!(["reasoner", "max"]),
            json!(["reasoner", "max"]),
            json!(["replacement", "high"]),
        ]
    );
    t.shutdown().await;
}

/// The original's `aborts a blocked reasoning lookup before quiescent
/// disposal completes`: a model whose metadata lookup never answers holds
/// the step before anything is logged or sent; disposing the agent drops
/// the lookup (the adapter sees its caller go), the turn ends `aborted`
/// with cause `disposed`, and no header was logged and no model request
/// made.
#[tokio::test]
async fn a_blocked_metadata_lookup_is_dropped_when_the_agent_is_disposed() {
    let dir = TempDir::new("model-metadata");
    // An hour: the lookup is still waiting whenever the dispose lands.
    let models = "[{ id = 'slow', lookupDelayMs = 3600000 }]";
    let listeners =
        "{ event = 'llm-script/lookup', action = 'record' }, { event = 'llm/stream', action = 'record' }";
    let (t, _fake) = setup(|_| script_row(&dir, models) + &kit_row("k", listeners, "")).await;
    let agent = agent_with(&t, json!({"provider": "script", "model": "slow"})).await;
    send(&t, agents::FOLLOWUP, &agent, "go").await;
    let lookup = |state: &'static str| {
        move |j: &[Value]| {
            j.iter()
                .any(|e| e["event"] == "llm-script/lookup" && e["payload"]["state"] == state)
        }
    };
    wait_kit_journal(&t, "k", lookup("started")).await;
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": agent}))
        .await;
    let j = wait_kit_journal(&t, "k", lookup("dropped")).await;
    let lookups: Vec<&Value> = j
        .iter()
        .filter(|e| e["event"] == "llm-script/lookup")
        .map(|e| &e["payload"])
        .collect();
    assert_eq!(
        lookups,
        [
            &json!({"provider": "script", "model": "slow", "state": "started"}),
            &json!({"provider": "script", "model": "slow", "state": "dropped"}),
        ]
    );
    assert!(streamed(&t, "k").await.is_empty(), "no model request");
    let ev = events(&t, &agent).await;
    assert!(headers(&ev).is_empty(), "no request/header: {ev:?}");
    assert!(of_type(&ev, event::ASSISTANT_CHUNK).is_empty());
    let ends = of_type(&ev, event::TURN_END);
    assert_eq!(
        ends.last().map(|e| &e["data"]["reason"]),
        Some(&json!({"kind": "aborted", "reason": {"kind": "disposed"}}))
    );
    t.shutdown().await;
}

/// The original's `request/context capacity records`: a route's window is
/// recorded with it, once while it holds; a switch to a model whose window
/// nobody knows records the route without one, clearing the older window.
#[tokio::test]
async fn request_context_carries_the_window_and_is_cleared_when_capacity_is_absent() {
    let dir = TempDir::new("model-metadata");
    let models = "[{ id = 'known', contextWindow = 64000 }]";
    let listeners = "{ event = 'agent/request', action = 'merge', value = { config = { model = 'unknown' } }, when = { turn = 3 } }";
    let (t, _fake) = setup(|_| script_row(&dir, models) + &kit_row("k", listeners, "")).await;
    let agent = agent_with(&t, json!({"provider": "script", "model": "known"})).await;
    for prompt in ["first", "second", "third"] {
        assert_eq!(turn(&t, &agent, prompt).await, completed());
    }
    let ev = events(&t, &agent).await;
    let records: Vec<&Value> = of_type(&ev, event::REQUEST_CONTEXT)
        .iter()
        .map(|e| &e["data"])
        .collect();
    assert_eq!(
        records,
        [
            &json!({"provider": "script", "model": "known", "contextWindow": 64000}),
            &json!({"provider": "script", "model": "unknown"}),
        ]
    );
    t.shutdown().await;
}

// ---- service.spec (10.7) -----------------------------------------------------

/// The original's `resolves detached adapter-owned reasoning metadata and
/// materializes its default` and `rejects unsupported reasoning efforts
/// without clamping`: `llm.resolveCallConfig` fills in the model's default
/// effort (marked) and keeps an offered one; an effort the model does not
/// offer is refused, not clamped to the one it does, and so is any effort
/// for a model without reasoning metadata; malformed metadata is the
/// adapter's fault. Through the loop, a refused effort ends the turn with
/// that error before anything is logged or sent.
#[tokio::test]
async fn reasoning_defaults_are_resolved_and_an_unsupported_effort_is_refused_without_clamping() {
    let dir = TempDir::new("model-metadata");
    let models = "[\
        { id = 'model', reasoning = { efforts = [{ id = 'standard', name = 'Standard' }, { id = 'ultra', name = 'Ultra', description = 'Largest budget' }], defaultEffort = 'standard' } }, \
        { id = 'ultra-only', reasoning = { efforts = [{ id = 'ultra', name = 'Ultra' }] } }, \
        { id = 'broken', reasoning = { efforts = [{ id = 'same', name = 'One' }, { id = 'same', name = 'Two' }] } }]";
    let listeners = "{ event = 'agent/request', action = 'merge', value = { config = { reasoningEffort = 'standard' } } }, \
                     { event = 'llm/stream', action = 'record' }";
    let (t, _fake) = setup(|_| script_row(&dir, models) + &kit_row("k", listeners, "")).await;
    let call = |model: &str, effort: Option<&str>| {
        let mut c = json!({"provider": "script", "model": model});
        if let Some(e) = effort {
            c["reasoningEffort"] = json!(e);
        }
        c
    };
    assert_eq!(
        resolve(&t, call("model", None)).await.unwrap(),
        json!({"config": {"provider": "script", "model": "model", "reasoningEffort": "standard"},
               "adapterDefaults": {"reasoningEffort": true}})
    );
    assert_eq!(
        resolve(&t, call("model", Some("ultra"))).await.unwrap(),
        json!({"config": {"provider": "script", "model": "model", "reasoningEffort": "ultra"},
               "adapterDefaults": {}})
    );
    // Efforts without a default: a call naming none gets none.
    assert_eq!(
        resolve(&t, call("ultra-only", None)).await.unwrap()["config"],
        json!({"provider": "script", "model": "ultra-only"})
    );
    let e = resolve(&t, call("ultra-only", Some("standard")))
        .await
        .unwrap_err();
    assert_eq!(e.code, "UNSUPPORTED_REASONING_EFFORT");
    assert_eq!(
        e.message,
        "provider \"script\" model \"ultra-only\" does not support reasoning effort \"standard\"; it offers \"ultra\""
    );
    let e = resolve(&t, call("plain", Some("standard")))
        .await
        .unwrap_err();
    assert_eq!(e.code, "UNSUPPORTED_REASONING_EFFORT");
    assert!(
        e.message.contains("it takes no reasoning effort"),
        "{}",
        e.message
    );
    let e = resolve(&t, call("broken", None)).await.unwrap_err();
    assert_eq!(e.code, "INVALID_MODEL_REASONING");

    // The loop: the listener asks `standard` of a model that offers only
    // `ultra`.
    let agent = agent_with(&t, json!({"provider": "script", "model": "ultra-only"})).await;
    let end = turn(&t, &agent, "go").await;
    assert_eq!(end["kind"], "error", "{end}");
    assert_eq!(
        end["error"]["code"], "UNSUPPORTED_REASONING_EFFORT",
        "{end}"
    );
    let ev = events(&t, &agent).await;
    assert!(headers(&ev).is_empty(), "no request/header: {ev:?}");
    assert!(streamed(&t, "k").await.is_empty(), "no model request");
    t.shutdown().await;
}

/// The original's `materializes an adapter-owned maxTokens default while
/// preserving an explicit cap`: a call without a cap gets the model's
/// default, marked; an explicit cap is kept, unmarked — on a scripted
/// model and on the DeepSeek route alike.
#[tokio::test]
async fn the_default_max_tokens_fills_a_call_without_a_cap_and_an_explicit_cap_is_kept() {
    let dir = TempDir::new("model-metadata");
    let models = "[{ id = 'capped', contextWindow = 32000, defaultMaxTokens = 4096 }]";
    let (t, _fake) = setup(|_| script_row(&dir, models)).await;
    assert_eq!(
        resolve(&t, json!({"provider": "script", "model": "capped"}))
            .await
            .unwrap(),
        json!({"config": {"provider": "script", "model": "capped", "maxTokens": 4096},
               "adapterDefaults": {"maxTokens": true}, "context": {"contextWindow": 32000}})
    );
    assert_eq!(
        resolve(
            &t,
            json!({"provider": "script", "model": "capped", "maxTokens": 512})
        )
        .await
        .unwrap(),
        json!({"config": {"provider": "script", "model": "capped", "maxTokens": 512},
               "adapterDefaults": {}, "context": {"contextWindow": 32000}})
    );
    let deepseek = resolve(&t, json!({"provider": "fake", "model": FLASH}))
        .await
        .unwrap();
    assert_eq!(deepseek["config"]["maxTokens"], 256_000);
    // The DeepSeek route's default effort is an adapter default too.
    assert_eq!(
        deepseek["adapterDefaults"],
        json!({"reasoningEffort": true, "maxTokens": true})
    );
    // A model without a default cap, a route nobody serves.
    assert_eq!(
        resolve(&t, json!({"provider": "script", "model": "other"}))
            .await
            .unwrap(),
        json!({"config": {"provider": "script", "model": "other"}, "adapterDefaults": {}})
    );
    let e = resolve(&t, json!({"provider": "nowhere", "model": "m"}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "NO_ADAPTER");
    t.shutdown().await;
}
