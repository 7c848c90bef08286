//! Conformance of the model seam (reference dsh-core §10.7, `service.spec`,
//! `topology.spec`, `invariant.spec`): the `llm` router and the DeepSeek
//! adapter as plugins in a real host, against the fake model server.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::time::{Duration, Instant};

use dsh_sdk::names::{llm, service};
use dsh_testkit::fake_llm::{text, Answer, FakeLlm};
use dsh_testkit::fixtures::stage_probe;
use dsh_testkit::TestHost;
use serde_json::{json, Value};

/// Generous: only a failing test waits this long.
const DEADLINE: Duration = Duration::from_secs(60);

const LLM: &str = "[[row]]\nid = 'llm'\nplugin = 'llm'\n";

fn adapter(fake: &FakeLlm) -> String {
    format!(
        "[[row]]\nid = 'llm-deepseek'\nplugin = 'llm-deepseek'\nconfig = {{ provider = 'fake', baseUrl = '{}', apiKeyEnv = '' }}\n",
        fake.base_url
    )
}

fn probe(listeners: &str) -> String {
    format!("[[row]]\nid = 'probe'\nplugin = 'probe'\nconfig = {{ tag = 'probe', listeners = [{listeners}] }}\n")
}

/// The events the probe's listeners received.
async fn journal(t: &TestHost) -> Vec<String> {
    let all: Vec<String> =
        serde_json::from_value(t.call("probe:probe", "journal", json!({})).await).unwrap();
    all.into_iter()
        .filter(|e| e.starts_with("event:"))
        .collect()
}

fn request(provider: &str) -> Value {
    json!({"provider": provider, "model": "m1", "messages": [
        {"id": "u1", "role": "user", "content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}}
    ]})
}

/// Every item of one `llm.stream` call.
async fn stream(t: &TestHost, req: Value) -> Vec<Result<Value, dsh_sdk::Error>> {
    let mut s = t.host.call_stream(service::LLM, llm::STREAM, req);
    let mut out = Vec::new();
    let until = Instant::now() + DEADLINE;
    while let Some(item) = tokio::time::timeout_at(until.into(), s.next())
        .await
        .expect("the stream ended")
    {
        out.push(item);
    }
    out
}

fn chunks(items: Vec<Result<Value, dsh_sdk::Error>>) -> Vec<Value> {
    items
        .into_iter()
        .map(|i| i.unwrap_or_else(|e| panic!("stream item failed: {e}")))
        .collect()
}

async fn providers(t: &TestHost) -> Value {
    t.call(service::LLM, llm::PROVIDERS, json!({})).await
}

#[tokio::test]
async fn an_unserved_provider_is_one_terminal_no_adapter_finish() {
    let t = TestHost::start().await;
    t.apply(LLM).await;
    let got = chunks(stream(&t, request("nope")).await);
    assert_eq!(
        got,
        [
            json!({"type": "finish", "reason": {"kind": "error", "failure": {
            "message": "no adapter serves provider `nope`", "code": "NO_ADAPTER"}}})
        ]
    );
    t.shutdown().await;
}

#[tokio::test]
async fn empty_and_duplicate_registrations_are_refused() {
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    t.apply(&format!("{LLM}{}", adapter(&fake))).await;
    for (params, code) in [
        (json!({"providers": [], "service": "s"}), "INVALID_ADAPTER"),
        (
            json!({"providers": [""], "service": "s"}),
            "INVALID_ADAPTER",
        ),
        (
            json!({"providers": ["fake"], "service": "s"}),
            "DUPLICATE_ADAPTER",
        ),
    ] {
        let e = t
            .host
            .call(service::LLM, llm::REGISTER_ADAPTER, params.clone())
            .await
            .err()
            .unwrap_or_else(|| panic!("{params} was registered"));
        assert_eq!(e.code, code, "{params}: {e}");
    }
    assert_eq!(providers(&t).await, json!(["fake"]), "nothing was added");
    t.shutdown().await;
}

#[tokio::test]
async fn an_adapter_leaves_the_routes_with_its_plugin() {
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    t.apply(&format!("{LLM}{}", adapter(&fake))).await;
    assert_eq!(providers(&t).await, json!(["fake"]));
    t.apply(LLM).await;
    assert_eq!(providers(&t).await, json!([]));
    let got = chunks(stream(&t, request("fake")).await);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["reason"]["failure"]["code"], "NO_ADAPTER");
    assert!(fake.requests().is_empty());
    t.shutdown().await;
}

#[tokio::test]
async fn a_registration_emits_adapters_updated() {
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    stage_probe(&t);
    let listen = probe("{ event = 'llm/adapters-updated', action = 'record' }");
    t.apply(&format!("{LLM}{listen}")).await;
    assert!(journal(&t).await.is_empty());
    t.apply(&format!("{LLM}{listen}{}", adapter(&fake))).await;
    let until = Instant::now() + DEADLINE;
    loop {
        let j = journal(&t).await;
        if !j.is_empty() {
            assert_eq!(j, ["event:llm/adapters-updated:{}"]);
            break;
        }
        assert!(Instant::now() < until, "no llm/adapters-updated");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    t.shutdown().await;
}

#[tokio::test]
async fn llm_stream_listeners_wrap_the_request_and_their_failures_stay_errors() {
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    stage_probe(&t);
    // A recording listener sees the request (without its history) and
    // passes it on: the adapter serves it.
    t.apply(&format!(
        "{LLM}{}{}",
        adapter(&fake),
        probe("{ event = 'llm/stream', action = 'record' }")
    ))
    .await;
    fake.push([text("Hi.")]);
    let got = chunks(stream(&t, request("fake")).await);
    assert_eq!(got.last().unwrap()["reason"], json!({"kind": "stop"}));
    let j = journal(&t).await;
    assert_eq!(j.len(), 1, "{j:?}");
    let seen: Value = serde_json::from_str(j[0].trim_start_matches("event:llm/stream:")).unwrap();
    assert_eq!(seen, json!({"provider": "fake", "model": "m1"}));
    // A failing listener is a failed call, not a model failure.
    t.apply(&format!(
        "{LLM}{}{}",
        adapter(&fake),
        probe("{ event = 'llm/stream', action = 'fail' }")
    ))
    .await;
    let items = stream(&t, request("fake")).await;
    assert_eq!(items.len(), 1, "{items:?}");
    let e = items[0].as_ref().expect_err("an error, not a chunk");
    assert_eq!(e.code, "PROBE_FAILED", "{e}");
    assert_eq!(fake.requests().len(), 1, "the adapter was not called");
    t.shutdown().await;
}

#[tokio::test]
async fn the_adapter_stream_keeps_the_chunk_grammar_and_attributes_its_requests() {
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    t.apply(&format!("{LLM}{}", adapter(&fake))).await;
    fake.push([text("Hello there.")]);
    let got = chunks(stream(&t, request("fake")).await);
    let types: Vec<&str> = got.iter().map(|c| c["type"].as_str().unwrap()).collect();
    // usage once, right before finish; nothing after finish.
    assert_eq!(types.iter().filter(|t| **t == "usage").count(), 1);
    assert_eq!(&types[types.len() - 2..], ["usage", "finish"], "{types:?}");
    assert_eq!(got.last().unwrap()["reason"], json!({"kind": "stop"}));
    // Every delta falls inside its open block of the same type.
    let mut open: Vec<(u64, String)> = Vec::new();
    for c in &got {
        let index = c["index"].as_u64();
        match c["type"].as_str().unwrap() {
            "block-start" => open.push((index.unwrap(), c["blockType"].as_str().unwrap().into())),
            "text-delta" => assert!(open.contains(&(index.unwrap(), "text".into())), "{c}"),
            "block-end" => {
                let kind = c["block"]["type"].as_str().unwrap().to_owned();
                let at = open
                    .iter()
                    .position(|o| *o == (index.unwrap(), kind.clone()));
                assert!(at.is_some(), "block-end without its block: {c}");
                open.retain(|o| *o != (index.unwrap(), kind.clone()));
            }
            _ => {}
        }
    }
    assert!(
        open.is_empty(),
        "a stop finish closes every block: {open:?}"
    );
    let text: String = got
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .filter_map(|c| c["text"].as_str())
        .collect();
    assert_eq!(text, "Hello there.");
    let head = fake.headers()[0].to_ascii_lowercase();
    assert!(
        head.contains(&format!(
            "\r\nuser-agent: dsh/{}\r\n",
            env!("CARGO_PKG_VERSION")
        )),
        "{head}"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn an_empty_stop_completion_is_a_retryable_empty_response() {
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    t.apply(&format!("{LLM}{}", adapter(&fake))).await;
    fake.push([Answer::Sse(vec![
        Some(json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}).to_string()),
        Some("[DONE]".into()),
    ])]);
    let got = chunks(stream(&t, request("fake")).await);
    let last = got.last().unwrap();
    assert_eq!(last["reason"]["kind"], "error", "{last}");
    assert_eq!(last["reason"]["failure"]["code"], "EMPTY_RESPONSE");
    assert!(dsh_sdk::vocab::RETRYABLE_CODES.contains(&"EMPTY_RESPONSE"));
    t.shutdown().await;
}
