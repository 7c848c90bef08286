//! Rows and journals of the test fixtures in `tests/fixtures` (the `probe`,
//! the `hooks` and the `loop-kit`), which conformance tests compose to act
//! from inside a service, a seam or a tool.

use std::time::{Duration, Instant};

use dsh_sdk::names::{service, tools};
use serde_json::{json, Value};

use crate::TestHost;

/// The probe fixture as [`TestHost::stage`] takes it (rows name it `probe`).
pub const PROBE: (&str, &str) = ("dsh-fixture-probe", "probe.so");

/// The hooks fixture as [`TestHost::stage`] takes it (rows name it `hooks`).
pub const HOOKS: (&str, &str) = ("dsh-fixture-hooks", "hooks.so");

/// Stages the probe fixture in `t`'s plugin directory.
pub fn stage_probe(t: &TestHost) {
    t.stage(PROBE.0, PROBE.1);
}

/// A JSON value as one line of TOML (inline tables, quoted keys, arrays).
pub fn toml_value(v: &Value) -> String {
    match v {
        Value::Object(o) => {
            let pairs: Vec<String> = o
                .iter()
                .map(|(k, x)| format!("{} = {}", json!(k), toml_value(x)))
                .collect();
            format!("{{ {} }}", pairs.join(", "))
        }
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(toml_value).collect();
            format!("[{}]", items.join(", "))
        }
        other => other.to_string(),
    }
}

/// A probe row `id` (service `probe:<id>`) whose config is `tag = "<id>"`
/// followed by the TOML lines `extra`.
pub fn probe_row(id: &str, extra: &str) -> String {
    format!("[[row]]\nid = \"{id}\"\nplugin = \"probe\"\n[row.config]\ntag = \"{id}\"\n{extra}\n")
}

/// Everything probe `tag` journaled, in order (`event:<name>:<payload>`
/// entries among others).
pub async fn probe_journal(t: &TestHost, tag: &str) -> Vec<String> {
    let v = t.call(&format!("probe:{tag}"), "journal", json!({})).await;
    serde_json::from_value(v).unwrap_or_else(|e| panic!("journal of probe {tag}: {e}"))
}

/// `service.method(params)` called by probe `tag` (through its `call`),
/// so the probe's fiber owns what the call makes.
pub async fn probe_call(
    t: &TestHost,
    tag: &str,
    service: &str,
    method: &str,
    params: Value,
) -> Result<Value, dsh_sdk::Error> {
    t.host
        .call(
            &format!("probe:{tag}"),
            "call",
            json!({"service": service, "method": method, "params": params}),
        )
        .await
}

/// Registers tool `name` (service `impl-svc`, no parameters) through probe
/// `impl`, so the probe's fiber owns it; `more` adds or replaces
/// registration fields.
pub async fn register_tool(t: &TestHost, name: &str, more: Value) -> Result<Value, dsh_sdk::Error> {
    let mut params = json!({"name": name, "description": format!("the {name} tool"),
        "service": "impl-svc", "parameters": {"type": "object", "properties": {}}});
    for (k, v) in more.as_object().into_iter().flatten() {
        params[k] = v.clone();
    }
    probe_call(t, "impl", service::TOOLS, tools::REGISTER, params).await
}

/// A row of the hooks fixture with service `hooks:<tag>` and `config` (its
/// `tag` set).
pub fn hooks_row(tag: &str, mut config: Value) -> String {
    config["tag"] = json!(tag);
    format!(
        "[[row]]\nid = \"hooks-{tag}\"\nplugin = \"hooks\"\nconfig = {}\n",
        toml_value(&config)
    )
}

/// The journal of hooks fixture `tag`: every invocation of its listeners,
/// in order.
pub async fn hooks_journal(t: &TestHost, tag: &str) -> Vec<Value> {
    let v = t.call(&format!("hooks:{tag}"), "journal", json!({})).await;
    serde_json::from_value(v).unwrap_or_else(|e| panic!("journal of hooks {tag}: {e}"))
}

/// A loop-kit row tagged `tag` (service `loopkit:<tag>`) with `listeners`
/// and `tools` (the bodies of TOML arrays; empty for none).
pub fn kit_row(tag: &str, listeners: &str, tools: &str) -> String {
    format!(
        "[[row]]\nid = 'kit-{tag}'\nplugin = 'dsh-fixture-loop-kit'\n\
         config = {{ tag = '{tag}', listeners = [{listeners}], tools = [{tools}] }}\n"
    )
}

/// The journal of loop-kit `tag`: every listener invocation and every tool
/// start and end, in order.
pub async fn kit_journal(t: &TestHost, tag: &str) -> Vec<Value> {
    let v = t
        .call(&format!("loopkit:{tag}"), "journal", json!({}))
        .await;
    serde_json::from_value(v).unwrap_or_else(|e| panic!("journal of loop-kit {tag}: {e}"))
}

/// Polls the journal of loop-kit `tag` every 5 ms until `cond` holds; that
/// journal. Panics with the journal after a minute.
pub async fn wait_kit_journal(
    t: &TestHost,
    tag: &str,
    cond: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let j = kit_journal(t, tag).await;
        if cond(&j) {
            return j;
        }
        assert!(
            Instant::now() < deadline,
            "the journal never got there: {j:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
