//! `llm.resolveModelInfo` through the real `llm` plugin and adapters: the
//! DeepSeek catalog's windows and output caps, the config's overrides for
//! another OpenAI-compatible route, a bare answer from an adapter without
//! a catalog, and the failures.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::api::llm::ModelInfo;
use dsh_sdk::names::{llm, service};
use dsh_testkit::agent::core_host;
use serde_json::json;

#[tokio::test]
async fn a_route_answers_its_models_window_and_output_cap() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../profiles/demo/script.json");
    let extra = r#"
[[row]]
id = "llm-local"
plugin = "llm-deepseek"
config = { provider = "local", baseUrl = "http://127.0.0.1:9", apiKeyEnv = "", reasoning = false, defaultContextWindow = 32768, maxTokens = 4096, models = [{ id = "qwen3", name = "Qwen 3", contextWindow = 131072 }] }
[[row]]
id = "llm-script"
plugin = "llm-script"
config = { script = "SCRIPT", provider = "script" }
"#
    .replace("SCRIPT", script);
    let (t, _fake) = core_host(|rows| rows + &extra).await;
    let info = |provider: &str, model: &str| {
        let h = t.host.clone();
        let params = json!({"provider": provider, "model": model});
        async move {
            h.call(service::LLM, llm::RESOLVE_MODEL_INFO, params)
                .await
                .map(|v| serde_json::from_value::<ModelInfo>(v).unwrap())
        }
    };
    // DeepSeek's catalog (the kit's route is called `fake`).
    let flash = info("fake", "deepseek-v4-flash").await.unwrap();
    assert_eq!(flash.name, "DeepSeek-V4-Flash");
    assert_eq!(flash.context.unwrap().context_window, 1_000_000);
    assert_eq!(flash.default_max_tokens, Some(256_000));
    // A configured route: its listed model, and one it does not list.
    let qwen = info("local", "qwen3").await.unwrap();
    assert_eq!(
        (qwen.name.as_str(), qwen.context.unwrap().context_window),
        ("Qwen 3", 131_072)
    );
    assert_eq!(qwen.default_max_tokens, Some(4096));
    let other = info("local", "llama").await.unwrap();
    assert_eq!(other.context.unwrap().context_window, 32_768);
    // An adapter without a catalog answers the id, nothing more.
    let scripted = info("script", "demo").await.unwrap();
    assert_eq!(
        (scripted.id.as_str(), scripted.name.as_str()),
        ("demo", "demo")
    );
    assert!(scripted.context.is_none());
    // No adapter for the route.
    let e = info("nowhere", "m").await.unwrap_err();
    assert_eq!(e.code, "NO_ADAPTER");
}
