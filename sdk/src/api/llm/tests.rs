//! The types of `llm` against the JSON its callers send and its provider
//! answers today: the wire does not change.

use serde::de::DeserializeOwned;
use serde_json::json;

use super::*;

fn parse<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn wire(v: impl Serialize) -> String {
    serde_json::to_string(&v).unwrap()
}

#[test]
fn registrations_read_what_adapters_send() {
    let p: RegisterAdapterParams = parse(json!({"providers": ["fake"], "service": "llm-fake"}));
    assert_eq!(p.providers, ["fake"]);
    assert_eq!(wire(&p), r#"{"providers":["fake"],"service":"llm-fake"}"#);
    // A missing service is refused by the provider (`INVALID_ADAPTER`).
    let bare: RegisterAdapterParams = parse(json!({"providers": []}));
    assert_eq!(bare.service, "");
    let e = serde_json::from_value::<RegisterAdapterParams>(json!({"service": "s"})).unwrap_err();
    assert!(e.to_string().contains("missing field `providers`"), "{e}");
    assert_eq!(
        wire(CancelParams { signal: "x".into() }),
        r#"{"signal":"x"}"#
    );
    assert_eq!(wire(ProvidersParams {}), "{}");
    assert_eq!(wire(AdaptersUpdated {}), "{}");
}

#[test]
fn a_stream_request_embeds_the_history_as_logged() {
    let mut config = Map::new();
    config.insert("provider".into(), json!("p"));
    config.insert("model".into(), json!("m"));
    config.insert("maxTokens".into(), json!(8));
    // Spacing and key order of the logged text survive: not re-encoded.
    let messages: Vec<Box<RawValue>> =
        vec![RawValue::from_string(r#"{"role":"user", "id":"u"}"#.into()).unwrap()];
    let tools = [json!({"name": "read"})];
    let request = StreamRequest {
        config: &config,
        messages: &messages,
        system: Some("sys"),
        tools: Some(&tools),
        session_id: "s",
        signal: None,
    };
    assert_eq!(
        wire(request),
        r#"{"provider":"p","model":"m","maxTokens":8,"messages":[{"role":"user", "id":"u"}],"system":"sys","tools":[{"name":"read"}],"sessionId":"s"}"#
    );
    let bare = StreamRequest {
        system: None,
        tools: None,
        signal: Some("sig"),
        ..request
    };
    assert_eq!(
        wire(bare),
        r#"{"provider":"p","model":"m","maxTokens":8,"messages":[{"role":"user", "id":"u"}],"sessionId":"s","signal":"sig"}"#
    );
}

#[test]
fn the_routing_payload_keeps_the_other_fields_in_order() {
    let r: StreamRouting =
        parse(json!({"provider": "p", "model": "m", "sessionId": "s", "maxTokens": 3}));
    assert_eq!(r.provider, "p");
    assert_eq!(
        wire(&r),
        r#"{"provider":"p","model":"m","sessionId":"s","maxTokens":3}"#
    );
}

#[test]
fn model_metadata_and_a_resolved_call_read_the_originals_field_names() {
    let info: ModelInfo = parse(json!({
        "provider": "p", "id": "m", "name": "M",
        "context": {"contextWindow": 4096}, "defaultMaxTokens": 512,
        "reasoning": {"efforts": [{"id": "high", "name": "High", "description": "more"}],
                      "defaultEffort": "high"},
        "inputModalities": ["text"]
    }));
    let reasoning = info.reasoning.clone().unwrap();
    assert_eq!(reasoning.efforts[0].id, "high");
    assert_eq!(reasoning.default_effort.as_deref(), Some("high"));
    // Fields of other adapters stay; reasoning is no longer one of them.
    assert_eq!(info.extra.keys().collect::<Vec<_>>(), ["inputModalities"]);
    assert_eq!(
        wire(&info),
        r#"{"provider":"p","id":"m","name":"M","context":{"contextWindow":4096},"defaultMaxTokens":512,"reasoning":{"efforts":[{"id":"high","name":"High","description":"more"}],"defaultEffort":"high"},"inputModalities":["text"]}"#
    );
    let resolved: ResolvedCall = parse(json!({
        "config": {"provider": "p", "model": "m", "maxTokens": 512},
        "adapterDefaults": {"maxTokens": true},
        "context": {"contextWindow": 4096}
    }));
    assert_eq!(resolved.config.max_tokens, Some(512));
    assert_eq!(resolved.adapter_defaults.max_tokens, Some(true));
    assert_eq!(
        wire(&resolved),
        r#"{"config":{"provider":"p","model":"m","maxTokens":512},"adapterDefaults":{"maxTokens":true},"context":{"contextWindow":4096}}"#
    );
    // Nothing materialized, no capacity known.
    let bare: ResolvedCall = parse(json!({"config": {"provider": "p", "model": "m"}}));
    assert_eq!(bare.adapter_defaults, AdapterDefaults::default());
    assert_eq!(
        wire(&bare),
        r#"{"config":{"provider":"p","model":"m"},"adapterDefaults":{}}"#
    );
}
