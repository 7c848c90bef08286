//! Local and hosted model servers, as the DeepSeek/OpenAI-compatible
//! adapter meets them (issue 20, items 1 and 2), through the real `llm`
//! and `llm-deepseek` plugins against the fake server replaying each
//! server's recorded answers (`sdk/llm-http/testdata/`):
//!
//! - every recorded overflow body reaches the caller as
//!   `CONTEXT_WINDOW_EXCEEDED` (its near misses do not), and llama.cpp's
//!   makes `compaction-basic`'s overflow recovery run;
//! - each server's window endpoint is learned (llama.cpp `/props`, vLLM
//!   `/v1/models`, Ollama `/api/ps` and `/api/show`, LM Studio
//!   `/api/v1/models`), once per route and model, not at all when the
//!   config states the window; garbage, slow and huge answers fall back to
//!   the default; the figure survives a restart, is asked again when stale
//!   or after an overflow; `/status` says where it came from.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_sdk::names::{commands, llm, service};
use dsh_sdk::vocab::compaction as records;
use dsh_testkit::agent::{events, model_info, new_agent, of_type, turn};
use dsh_testkit::fake_llm::{recorded_window as window_body, text, Answer, FakeLlm};
use dsh_testkit::{core_rows, eventually, TempDir, TestHost};
use serde_json::{json, Value};

/// The route the tests' adapter serves.
const ROUTE: &str = "local";

const LLM_ROW: &str = "[[row]]\nid = 'llm'\nplugin = 'llm'\n";

/// `sdk/llm-http/testdata/<part>`.
fn testdata(part: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sdk/llm-http/testdata")
        .join(part)
}

/// A recorded error (`testdata/errors/<name>.json`).
fn recorded_error(name: &str) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(testdata(&format!("errors/{name}.json"))).unwrap(),
    )
    .unwrap()
}

/// The rows of `llm` and the adapter serving [`ROUTE`] at the fake's
/// `/v1`, with `extra` config keys (`, key = value` TOML).
fn adapter_rows(fake: &FakeLlm, extra: &str) -> String {
    format!(
        "{LLM_ROW}[[row]]\nid = 'llm-deepseek'\nplugin = 'llm-deepseek'\n\
         config = {{ provider = '{ROUTE}', baseUrl = '{}/v1', apiKeyEnv = '', reasoning = false{extra} }}\n",
        fake.base_url
    )
}

/// A host running [`adapter_rows`].
async fn adapter_host(fake: &FakeLlm, extra: &str) -> TestHost {
    let t = TestHost::start().await;
    t.apply(&adapter_rows(fake, extra)).await;
    t.assert_all_active().await;
    t
}

/// `llm.resolveModelInfo` of `model` on [`ROUTE`].
async fn resolve(t: &TestHost, model: &str) -> Value {
    model_info(t, ROUTE, model).await
}

/// llama.cpp's recorded `/props`, stating a window of `tokens`.
fn props_stating(tokens: u64) -> String {
    window_body("llama-cpp-props").replace("4096", &tokens.to_string())
}

/// Waits until the route states a window of `tokens` for model `m`
/// (asked again in the background).
async fn relearned(t: &TestHost, what: &str, tokens: u64) {
    eventually(what, || async {
        window_of(&resolve(t, "m").await).0 == tokens
    })
    .await;
}

/// The window and where it came from, as `resolveModelInfo` says.
fn window_of(info: &Value) -> (u64, Value) {
    (
        info["context"]["contextWindow"].as_u64().unwrap(),
        info["contextSource"].clone(),
    )
}

fn server(endpoint: &str) -> Value {
    json!({"kind": "server", "endpoint": endpoint})
}

/// The terminal chunk of one `llm.stream` request on [`ROUTE`].
async fn finish_of_one_request(t: &TestHost) -> Value {
    let request = json!({"provider": ROUTE, "model": "m", "messages": [
        {"id": "u1", "role": "user", "content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}}
    ]});
    let mut s = t.host.call_stream(service::LLM, llm::STREAM, request);
    let mut last = Value::Null;
    while let Some(item) = tokio::time::timeout(Duration::from_secs(60), s.next())
        .await
        .expect("the stream never ended")
    {
        last = item.unwrap();
    }
    assert_eq!(last["type"], "finish", "{last}");
    last
}

// ---- item 1: overflow recognized -------------------------------------------

#[tokio::test]
async fn every_recorded_overflow_reaches_the_caller_as_context_window_exceeded() {
    let fake = FakeLlm::start().await;
    let t = adapter_host(&fake, ", defaultContextWindow = 4096").await;
    let mut names: Vec<String> = std::fs::read_dir(testdata("errors"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 20, "{names:?}");
    for name in &names {
        let r = recorded_error(name);
        let body = r["body"].to_string();
        fake.push([match r["status"].as_u64() {
            Some(status) => Answer::Status(status as u16, vec![], body),
            // An error event inside a 200 stream, after some text.
            None => Answer::Sse(vec![
                Some(json!({"choices": [{"delta": {"content": "partial"}}]}).to_string()),
                Some(body),
            ]),
        }]);
        let finish = finish_of_one_request(&t).await;
        let failure = &finish["reason"]["failure"];
        assert_eq!(failure["code"], r["expect"], "{name}: {finish}");
        let message = failure["message"].as_str().unwrap();
        for m in r["mentions"].as_array().unwrap() {
            assert!(
                message.contains(m.as_str().unwrap()),
                "{name}: the message lost {m}: {message}"
            );
        }
    }
    assert_eq!(fake.requests().len(), names.len());
    t.shutdown().await;
}

/// A summary the fake answers a compaction with.
const SUMMARY: &str = "## Primary Request and Intent\n- the summary";

#[tokio::test]
async fn a_llama_cpp_overflow_runs_overflow_recovery_and_the_turn_answers() {
    // The issue's server: llama.cpp with a small window, stated at
    // /props, answering an oversized request with its own overflow body.
    let fake = FakeLlm::start().await;
    fake.set_get("/props", 200, &props_stating(10_000));
    let llama = recorded_error("llama-cpp-admission")["body"].to_string();
    fake.push([
        text("ok"),
        Answer::Status(400, vec![], llama),
        text(SUMMARY),
        text("recovered"),
    ]);
    let root = TempDir::new("sessions");
    let rows = core_rows(&fake.base_url, root.path()).replace(
        &format!("baseUrl = \"{}\"", fake.base_url),
        &format!("baseUrl = \"{}/v1\"", fake.base_url),
    ) + "[[row]]\nid = \"compaction-basic\"\nplugin = \"compaction-basic\"\n";
    let t = TestHost::start().await;
    t.apply(&rows).await;
    t.assert_all_active().await;
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(
        turn(&t, &agent, &"alpha ".repeat(1400)).await["kind"],
        "completed"
    );
    // The second turn's request overflows; recovery compacts and retries.
    assert_eq!(turn(&t, &agent, "next").await["kind"], "completed");
    let requests = fake.requests();
    assert_eq!(requests.len(), 4, "the overflow, the summary, the retry");
    let ev = events(&t, &agent).await;
    assert_eq!(of_type(&ev, records::START).len(), 1);
    let end = of_type(&ev, records::END);
    assert!(end[0]["data"].get("error").is_none(), "{}", end[0]);
    assert!(
        requests[3].to_string().contains("<compacted-summary>"),
        "the retry holds the summary: {}",
        requests[3]
    );
    assert_eq!(
        of_type(&ev, dsh_sdk::vocab::event::ASSISTANT_MESSAGE)
            .last()
            .unwrap()["data"]["message"]["content"][0]["text"],
        "recovered"
    );
    // The window came from the server (asked again after the overflow,
    // when the route's window is next resolved).
    let asked = fake.asked();
    assert!(
        !asked.is_empty() && asked.len() <= 2 && asked.iter().all(|a| a == "GET /props"),
        "{asked:?}"
    );
    t.shutdown().await;
}

// ---- item 2: windows learned ------------------------------------------------

/// One server's recorded endpoints, the model asked about, and what must
/// be learned.
struct Server {
    name: &'static str,
    routes: Vec<(&'static str, &'static str)>,
    model: &'static str,
    window: u64,
    endpoint: &'static str,
    asked: Vec<&'static str>,
}

#[tokio::test]
async fn each_servers_window_endpoint_is_learned() {
    let servers = [
        Server {
            name: "llama.cpp",
            routes: vec![("/props", "llama-cpp-props")],
            model: "smollm2",
            window: 4096,
            endpoint: "/props",
            asked: vec!["GET /props"],
        },
        Server {
            name: "vLLM",
            routes: vec![("/v1/models", "vllm-models")],
            model: "Qwen/Qwen3-4B",
            window: 8192,
            endpoint: "/v1/models",
            asked: vec!["GET /props", "GET /v1/models"],
        },
        Server {
            name: "Ollama, the model loaded",
            routes: vec![("/v1/models", "ollama-v1-models"), ("/api/ps", "ollama-ps")],
            model: "qwen3:4b",
            window: 8192,
            endpoint: "/api/ps",
            asked: vec!["GET /props", "GET /v1/models", "GET /api/ps"],
        },
        Server {
            name: "Ollama, num_ctx in the Modelfile",
            routes: vec![
                ("/v1/models", "ollama-v1-models"),
                ("/api/ps", "ollama-ps-empty"),
                ("/api/show", "ollama-show"),
            ],
            model: "qwen3:4b",
            window: 16384,
            endpoint: "/api/show",
            asked: vec![
                "GET /props",
                "GET /v1/models",
                "GET /api/ps",
                "POST /api/show",
            ],
        },
        Server {
            // Not loaded: the smaller of its trained 40,960 and Ollama's
            // smallest default context.
            name: "Ollama, the model not loaded",
            routes: vec![
                ("/v1/models", "ollama-v1-models"),
                ("/api/ps", "ollama-ps-empty"),
                ("/api/show", "ollama-show-no-num-ctx"),
            ],
            model: "qwen3:4b",
            window: 4096,
            endpoint: "/api/show",
            asked: vec![
                "GET /props",
                "GET /v1/models",
                "GET /api/ps",
                "POST /api/show",
            ],
        },
        Server {
            name: "LM Studio",
            routes: vec![
                ("/v1/models", "lmstudio-v1-chat-models"),
                ("/api/v1/models", "lmstudio-v1-models"),
            ],
            model: "qwen3-4b",
            window: 8192,
            endpoint: "/api/v1/models",
            asked: vec![
                "GET /props",
                "GET /v1/models",
                "GET /api/ps",
                "POST /api/show",
                "GET /api/v1/models",
            ],
        },
    ];
    for s in servers {
        let fake = FakeLlm::start().await;
        for (path, body) in &s.routes {
            fake.set_get(path, 200, &window_body(body));
        }
        let t = adapter_host(&fake, "").await;
        let info = resolve(&t, s.model).await;
        assert_eq!(
            window_of(&info),
            (s.window, server(s.endpoint)),
            "{}: {info}",
            s.name
        );
        // A learned window keeps a share of itself for the answer.
        assert_eq!(info["defaultMaxTokens"], s.window / 4, "{}", s.name);
        assert_eq!(fake.asked(), s.asked, "{}", s.name);
        assert!(fake.requests().is_empty(), "{}", s.name);
        t.shutdown().await;
    }
}

#[tokio::test]
async fn the_config_wins_and_nothing_is_asked() {
    let fake = FakeLlm::start().await;
    fake.set_get("/props", 200, &window_body("llama-cpp-props"));
    // A model entry's window, and the config's default window.
    let t = adapter_host(
        &fake,
        ", models = [{ id = 'm', contextWindow = 32768 }], defaultContextWindow = 65536",
    )
    .await;
    let config = json!({"kind": "config"});
    assert_eq!(window_of(&resolve(&t, "m").await), (32768, config.clone()));
    assert_eq!(window_of(&resolve(&t, "other").await), (65536, config));
    t.shutdown().await;
    // DeepSeek's catalog, on any route that keeps it.
    let t = adapter_host(&fake, "").await;
    assert_eq!(
        window_of(&resolve(&t, "deepseek-v4-pro").await),
        (1_000_000, json!({"kind": "catalog"}))
    );
    t.shutdown().await;
    // Lookups switched off.
    let t = adapter_host(&fake, ", windowLookup = false").await;
    assert_eq!(
        window_of(&resolve(&t, "m").await),
        (1_000_000, json!({"kind": "default"}))
    );
    t.shutdown().await;
    assert!(fake.asked().is_empty(), "{:?}", fake.asked());
}

#[tokio::test]
async fn a_route_asks_once_per_model_even_when_asked_at_once() {
    let fake = FakeLlm::start().await;
    fake.set_get("/props", 200, &window_body("llama-cpp-props"));
    let t = adapter_host(&fake, "").await;
    let many = futures_join(&t, "m", 8).await;
    for info in &many {
        assert_eq!(window_of(info), (4096, server("/props")));
    }
    resolve(&t, "m").await;
    assert_eq!(fake.asked(), ["GET /props"]);
    // Another model of the route is its own question.
    resolve(&t, "m2").await;
    assert_eq!(fake.asked(), ["GET /props", "GET /props"]);
    t.shutdown().await;
}

/// `n` concurrent `resolveModelInfo` of `model`.
async fn futures_join(t: &TestHost, model: &str, n: usize) -> Vec<Value> {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (host, model) = (t.host.clone(), model.to_owned());
        set.spawn(async move {
            host.call(
                service::LLM,
                llm::RESOLVE_MODEL_INFO,
                json!({"provider": ROUTE, "model": model}),
            )
            .await
        });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        out.push(r.unwrap().unwrap());
    }
    out
}

/// Every endpoint a lookup that finds nothing asks, in order.
const ALL_ENDPOINTS: [&str; 6] = [
    "GET /props",
    "GET /v1/models",
    "GET /api/ps",
    "POST /api/show",
    "GET /api/v1/models",
    "GET /api/v0/models",
];

#[tokio::test]
async fn garbage_huge_and_slow_answers_fall_back_to_the_default() {
    let default = (1_000_000, json!({"kind": "default"}));
    // Garbage: an HTML page, a list that is not one, a window of the wrong
    // type; every endpoint is tried, none believed.
    let fake = FakeLlm::start().await;
    fake.set_get("/props", 200, "<html>llama</html>");
    fake.set_get("/v1/models", 200, r#"{"data": "nope"}"#);
    fake.set_get(
        "/api/ps",
        200,
        r#"{"models": [{"name": "m", "context_length": "4k"}]}"#,
    );
    let t = adapter_host(&fake, "").await;
    assert_eq!(window_of(&resolve(&t, "m").await), default);
    assert_eq!(fake.asked(), ALL_ENDPOINTS);
    t.shutdown().await;

    // Huge: a /props past the answer cap, its window at the end, is not
    // read (it would say 4096).
    let fake = FakeLlm::start().await;
    let pad = "x".repeat(2 * 1024 * 1024);
    fake.set_get(
        "/props",
        200,
        &format!(r#"{{"pad": "{pad}", "default_generation_settings": {{"n_ctx": 4096}}}}"#),
    );
    let t = adapter_host(&fake, "").await;
    assert_eq!(window_of(&resolve(&t, "m").await), default);
    t.shutdown().await;

    // Slow: a /props that answers in an hour; the lookup gives up after
    // its time (300 ms here) and asks nothing more.
    let fake = FakeLlm::start().await;
    fake.set_slow_get("/props", 3_600_000, 200, &window_body("llama-cpp-props"));
    let t = adapter_host(&fake, ", windowLookupTimeoutMs = 300").await;
    let info = tokio::time::timeout(Duration::from_secs(30), resolve(&t, "m"))
        .await
        .expect("the lookup was not bounded by its time");
    assert_eq!(window_of(&info), default);
    assert_eq!(fake.asked(), ["GET /props"]);
    // The route still streams.
    fake.push([text("fine")]);
    let finish = finish_of_one_request(&t).await;
    assert_eq!(finish["reason"]["kind"], "stop", "{finish}");
    t.shutdown().await;
}

/// The cache files of `home`.
fn cache_files(home: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(home.join("cache/models")) {
        Ok(dir) => dir.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Copies `from`'s window cache into `to`'s `$DSH_HOME`.
fn copy_cache(from: &[PathBuf], to: &Path) {
    let dir = to.join("cache/models");
    std::fs::create_dir_all(&dir).unwrap();
    for f in from {
        std::fs::copy(f, dir.join(f.file_name().unwrap())).unwrap();
    }
}

#[tokio::test]
async fn a_learned_window_survives_a_restart_and_a_stale_one_is_asked_again() {
    use std::os::unix::fs::PermissionsExt;
    let fake = FakeLlm::start().await;
    fake.set_get("/props", 200, &window_body("llama-cpp-props"));
    let t = adapter_host(&fake, "").await;
    assert_eq!(window_of(&resolve(&t, "m").await), (4096, server("/props")));
    let files = cache_files(t.home.path());
    assert_eq!(files.len(), 1, "{files:?}");
    let mode = std::fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let saved = TempDir::new("window-cache");
    copy_cache(&files, saved.path());
    t.shutdown().await;
    assert_eq!(fake.asked(), ["GET /props"]);

    // The next start, with the same $DSH_HOME cache, asks nothing.
    let saved_files = cache_files(saved.path());
    let t = TestHost::start().await;
    copy_cache(&saved_files, t.home.path());
    t.apply(&adapter_rows(&fake, "")).await;
    assert_eq!(window_of(&resolve(&t, "m").await), (4096, server("/props")));
    assert_eq!(fake.asked(), ["GET /props"], "the restart asked again");
    t.shutdown().await;

    // A day later the server runs with 2048: the cached figure is used at
    // once and asked again in the background.
    let mut entry: Value =
        serde_json::from_str(&std::fs::read_to_string(&saved_files[0]).unwrap()).unwrap();
    entry["learnedAtMs"] = json!(1_000);
    std::fs::write(&saved_files[0], entry.to_string()).unwrap();
    fake.set_get("/props", 200, &props_stating(2048));
    let t = TestHost::start().await;
    copy_cache(&saved_files, t.home.path());
    t.apply(&adapter_rows(&fake, "")).await;
    assert_eq!(window_of(&resolve(&t, "m").await), (4096, server("/props")));
    relearned(&t, "the stale window is asked again", 2048).await;
    assert_eq!(fake.asked(), ["GET /props", "GET /props"]);
    t.shutdown().await;
}

#[tokio::test]
async fn an_overflow_makes_the_route_ask_its_window_again() {
    let fake = FakeLlm::start().await;
    fake.set_get("/props", 200, &window_body("llama-cpp-props"));
    let t = adapter_host(&fake, "").await;
    assert_eq!(window_of(&resolve(&t, "m").await), (4096, server("/props")));
    // The server restarts with a smaller context; the next request
    // overflows.
    fake.set_get("/props", 200, &props_stating(2048));
    fake.push([Answer::Status(
        400,
        vec![],
        recorded_error("llama-cpp-slot")["body"].to_string(),
    )]);
    let finish = finish_of_one_request(&t).await;
    assert_eq!(
        finish["reason"]["failure"]["code"], "CONTEXT_WINDOW_EXCEEDED",
        "{finish}"
    );
    relearned(&t, "the window is asked again after the overflow", 2048).await;
    assert_eq!(fake.asked(), ["GET /props", "GET /props"]);
    t.shutdown().await;
}

#[tokio::test]
async fn status_says_where_the_window_came_from() {
    let fake = FakeLlm::start().await;
    fake.set_get("/props", 200, &window_body("llama-cpp-props"));
    let root = TempDir::new("sessions");
    let rows = core_rows(&fake.base_url, root.path())
        + "[[row]]\nid = \"compaction-basic\"\nplugin = \"compaction-basic\"\n\
           [[row]]\nid = \"commands\"\nplugin = \"commands\"\n";
    let t = TestHost::start().await;
    t.apply(&rows).await;
    t.assert_all_active().await;
    let agent = new_agent(&t, "/tmp").await;
    fake.push([text("one")]);
    turn(&t, &agent, "hi").await;
    let r = t
        .call(
            service::COMMANDS,
            commands::EXECUTE,
            json!({"agent": agent, "line": "/status"}),
        )
        .await;
    let status = r["result"]["text"].as_str().unwrap();
    let context = status.lines().last().unwrap();
    assert!(
        context.starts_with("context: ~")
            && context.contains(" tokens of 4096 (")
            && context.ends_with(" (window from the server's /props)"),
        "{status}"
    );
    t.shutdown().await;
}
