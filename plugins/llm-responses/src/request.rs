//! The request body of one call, built from the harness request without
//! re-encoding the history: each harness message is converted to input
//! items once, and later requests of the same session reuse the
//! conversion of every message they share with the previous one
//! (`dsh_llm_http::conversion`).
//!
//! The request is stateless: the whole history every time, `store: false`,
//! no `previous_response_id`; a reasoning model's earlier thinking goes
//! back as its reasoning items, which it asks to be given
//! (`include: ["reasoning.encrypted_content"]`).
//!
//! Reasoning items go back only to the model that wrote them (another
//! model cannot read them: OpenAI refuses them with
//! `invalid_encrypted_content`), and only when the request reasons; items
//! of reasoning in the clear (a server serving gpt-oss) only while the
//! tool loop they belong to is open (after the last prompt of the user).
//! `temperature` is not sent with `reasoning` (reasoning models refuse
//! it). A request the server refused for its reasoning is sent again
//! without it ([`Fallback`], chosen by the adapter).

use dsh_llm_http::conversion::{self, ConvertError, ToolIn};
use dsh_sdk::vocab::{ContentBlock, Message, MessageSource, Role};
use serde::Serialize;
use serde_json::value::{to_raw_value, RawValue};
use serde_json::Number;

use crate::convert::{items_of, InputItem, WireTool};
use crate::models::Catalog;
use crate::Config;

/// What a request leaves out because the server refused it in an
/// earlier try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fallback {
    /// Nothing: all the model takes.
    Full,
    /// The encrypted reasoning items: the server could not read them
    /// (`invalid_encrypted_content`).
    WithoutEncrypted,
    /// Reasoning altogether (no `reasoning`, no `include`, no reasoning
    /// items): the model takes none ("Encrypted content is not supported
    /// with this model").
    WithoutReasoning,
}

/// The harness request, as every adapter reads it
/// (`dsh_llm_http::stream_request`): its `sessionId` is sent as
/// `prompt_cache_key` (when the config allows); `stop`, which this wire
/// does not have, is not read.
pub(crate) use dsh_llm_http::stream_request::StreamRequest as Request;

/// The effort that turns reasoning off.
const EFFORT_OFF: &str = "off";

/// What the stream should include: the reasoning items' encrypted content.
const INCLUDE_ENCRYPTED_REASONING: &str = "reasoning.encrypted_content";

/// `reasoning`: how hard the model thinks, and the summary it streams.
#[derive(Serialize)]
struct Reasoning<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    effort: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<&'a str>,
}

/// The Responses request body, keys in the wire's order.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<&'a str>,
    /// Each message converted once (`dsh_llm_http::conversion`);
    /// reasoning items only for a model that reasons.
    input: Vec<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    stream: bool,
    store: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<Reasoning<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    include: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<&'a Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
}

/// What an input item is, for the items a request leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ItemKind {
    /// A message, a call or an output: always sent.
    Plain,
    /// A reasoning item with encrypted content.
    Encrypted,
    /// A reasoning item in the clear.
    ReasoningText,
}

/// One input item, as its JSON text.
struct WireItem {
    raw: Box<RawValue>,
    kind: ItemKind,
}

/// One logged message as input items, with what decides which of its
/// reasoning items go.
pub(crate) struct MessageItems {
    items: Vec<WireItem>,
    /// The model of an answer (its reasoning goes back to it alone).
    model: Option<String>,
    /// A prompt of the user (no tool results): a new turn starts, and the
    /// tool loop before it is closed.
    opens_turn: bool,
}

/// The conversions kept per session (each message's input items), and
/// the last tool list's.
#[derive(Default)]
pub(crate) struct Converter {
    cache: conversion::Converter<MessageItems>,
}

/// One logged message as input items.
fn convert(message: &Message) -> serde_json::Result<MessageItems> {
    let items = items_of(message)
        .iter()
        .map(|item| {
            Ok(WireItem {
                raw: to_raw_value(item)?,
                kind: match item {
                    InputItem::Reasoning(r) if r.is_encrypted() => ItemKind::Encrypted,
                    InputItem::Reasoning(_) => ItemKind::ReasoningText,
                    _ => ItemKind::Plain,
                },
            })
        })
        .collect::<serde_json::Result<_>>()?;
    let model = match &message.source {
        MessageSource::Model(source) => Some(source.model.clone()),
        _ => None,
    };
    let opens_turn = message.role == Role::User
        && !message.content.is_empty()
        && !message
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult(_)));
    Ok(MessageItems {
        items,
        model,
        opens_turn,
    })
}

/// The request's tool list on the wire.
fn convert_tools(tools: &[ToolIn<'_>]) -> serde_json::Result<Box<RawValue>> {
    let wire: Vec<WireTool<'_>> = tools.iter().map(WireTool::of).collect();
    to_raw_value(&wire)
}

impl Converter {
    /// The Responses request body for `req`, as JSON bytes, leaving out
    /// what `fallback` says. A request without a session id keeps no
    /// conversions.
    pub(crate) fn body(
        &self,
        config: &Config,
        catalog: &Catalog,
        mut req: Request,
        fallback: Fallback,
    ) -> Result<Vec<u8>, ConvertError> {
        let history = std::mem::take(&mut req.messages);
        let session = req.session_id.as_deref().filter(|s| !s.is_empty());
        let converted = self.cache.messages(session, history, convert)?;
        let tools = match req.tools.as_deref() {
            Some(t) => self.cache.tools(t, convert_tools)?,
            None => None,
        };
        let model = req.model_or(&config.model);
        let default_effort = catalog.default_effort(model);
        let effort = req
            .reasoning_effort
            .as_deref()
            .or(default_effort.as_deref());
        let reasons = fallback != Fallback::WithoutReasoning
            && catalog.reasons(model)
            && effort != Some(EFFORT_OFF);
        // The tool loop open: the messages after the user's last prompt.
        let turn = converted.iter().rposition(|c| c.wire.opens_turn);
        let input: Vec<&RawValue> = converted
            .iter()
            .enumerate()
            .flat_map(|(at, c)| {
                let own = reasons && c.wire.model.as_deref() == Some(model);
                let open = turn.is_none_or(|t| at > t);
                c.wire.items.iter().filter(move |w| match w.kind {
                    ItemKind::Plain => true,
                    ItemKind::Encrypted => own && fallback == Fallback::Full,
                    ItemKind::ReasoningText => own && open,
                })
            })
            .map(|w| &*w.raw)
            .collect();
        let summary = Some(config.reasoning_summary.as_str()).filter(|s| !s.is_empty());
        let body = Body {
            model,
            instructions: req.system.as_deref().filter(|s| !s.is_empty()),
            input,
            tools: tools.as_deref(),
            stream: true,
            store: false,
            max_output_tokens: req.max_tokens.or(config.max_tokens),
            reasoning: reasons.then_some(Reasoning { effort, summary }),
            include: if reasons {
                vec![INCLUDE_ENCRYPTED_REASONING]
            } else {
                Vec::new()
            },
            // Reasoning models refuse a temperature.
            temperature: req.temperature.as_ref().filter(|_| !reasons),
            prompt_cache_key: session.filter(|_| config.prompt_cache_key),
        };
        let bytes = serde_json::to_vec(&body).map_err(ConvertError::at("the body"))?;
        drop(body);
        self.cache.keep(session, converted);
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models;
    use serde_json::{json, Value};

    fn config() -> Config {
        serde_json::from_value(json!({"baseUrl": "http://x", "model": "gpt-5"})).unwrap()
    }

    fn body_with(c: &Converter, config: &Config, req: Value) -> Value {
        body_falling_back(c, config, req, Fallback::Full)
    }

    fn body_falling_back(c: &Converter, config: &Config, req: Value, fallback: Fallback) -> Value {
        let req: Request = serde_json::from_value(req).unwrap();
        let bytes = c.body(config, &config.catalog(), req, fallback).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn body(c: &Converter, req: Value) -> Value {
        body_with(c, &config(), req)
    }

    fn user(id: &str, text: &str) -> Value {
        json!({"id": id, "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}})
    }

    #[test]
    fn the_body_is_stateless_and_in_the_wires_order() {
        let c = Converter::default();
        let b = body(
            &c,
            json!({"provider": "openai", "model": "o3", "system": "sys", "maxTokens": 5, "temperature": 0.5,
                   "reasoningEffort": "high", "stop": ["x"],
                   "messages": [user("u", "hi")],
                   "tools": [{"name": "read", "description": "d", "parameters": {"type": "object"}}],
                   "sessionId": "s"}),
        );
        let keys: Vec<&str> = b.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "model",
                "instructions",
                "input",
                "tools",
                "stream",
                "store",
                "max_output_tokens",
                "reasoning",
                "include",
                "prompt_cache_key"
            ]
        );
        // A reasoning model refuses a temperature: it is not sent.
        assert!(b.get("temperature").is_none(), "{b}");
        assert_eq!(b["store"], false);
        assert!(b.get("previous_response_id").is_none());
        assert_eq!(b["instructions"], "sys");
        assert_eq!(
            b["input"],
            json!([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}])
        );
        assert_eq!(
            b["tools"],
            json!([{"type": "function", "name": "read", "description": "d",
                    "parameters": {"type": "object"}, "strict": false}])
        );
        assert_eq!(b["reasoning"], json!({"effort": "high", "summary": "auto"}));
        assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(b["prompt_cache_key"], "s");
        // A model that does not reason gets it.
        let b = body(
            &c,
            json!({"model": "gpt-4.1", "temperature": 0.5, "messages": [user("u", "hi")]}),
        );
        assert_eq!(b["temperature"], 0.5);
    }

    #[test]
    fn reasoning_follows_the_model_and_the_effort() {
        let c = Converter::default();
        // The model's default effort when the call names none.
        let b = body(&c, json!({"messages": [user("u", "hi")]}));
        assert_eq!(b["model"], "gpt-5");
        assert_eq!(
            b["reasoning"],
            json!({"effort": "medium", "summary": "auto"})
        );
        // A model that does not reason gets neither `reasoning` nor `include`.
        let b = body(&c, json!({"model": "gpt-4.1", "messages": []}));
        assert!(
            b.get("reasoning").is_none() && b.get("include").is_none(),
            "{b}"
        );
        // `off` turns it off; an unlisted model follows the config.
        let b = body(&c, json!({"reasoningEffort": "off"}));
        assert!(
            b.get("reasoning").is_none() && b.get("include").is_none(),
            "{b}"
        );
        let mut quiet = config();
        quiet.reasoning = false;
        quiet.reasoning_summary = String::new();
        let b = body_with(&c, &quiet, json!({"model": "qwen3"}));
        assert!(b.get("reasoning").is_none(), "{b}");
        quiet.reasoning = true;
        let b = body_with(&c, &quiet, json!({"model": "qwen3"}));
        assert_eq!(b["reasoning"], json!({"effort": "medium"}));
        let mut no_key = config();
        no_key.prompt_cache_key = false;
        let b = body_with(&c, &no_key, json!({"sessionId": "s"}));
        assert!(b.get("prompt_cache_key").is_none(), "{b}");
    }

    /// An answer of `model` with a reasoning item (`item`) then text.
    fn answer(id: &str, model: &str, item: Value, text: &str) -> Value {
        json!({"id": id, "role": "assistant",
            "source": {"kind": "model", "provider": "openai", "model": model,
                       "replayState": {"blocks": [item, null]}},
            "content": [{"type": "reasoning", "text": ""}, {"type": "text", "text": text}]})
    }

    fn encrypted(enc: &str) -> Value {
        json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": enc})
    }

    fn types(b: &Value) -> Vec<String> {
        b["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["type"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn reasoning_items_go_back_only_to_the_model_that_wrote_them() {
        let c = Converter::default();
        let history = json!([
            user("u", "q"),
            answer("a", "gpt-5", encrypted("enc"), "hi"),
            user("v", "more")
        ]);
        let b = body(&c, json!({"messages": history, "sessionId": "s"}));
        assert_eq!(types(&b), ["message", "reasoning", "message", "message"]);
        // The same history (its conversion reused) to a model that does
        // not reason, to another reasoning model (it cannot read gpt-5's
        // encrypted reasoning), then back.
        for other in ["gpt-4.1", "o3"] {
            let b = body(
                &c,
                json!({"model": other, "messages": history, "sessionId": "s"}),
            );
            assert_eq!(types(&b), ["message", "message", "message"], "{other}");
        }
        let b = body(
            &c,
            json!({"model": "gpt-5", "messages": history, "sessionId": "s"}),
        );
        assert_eq!(types(&b)[1], "reasoning");
    }

    #[test]
    fn a_fallback_leaves_out_what_the_server_refused() {
        let c = Converter::default();
        let config = config();
        let history = json!([
            user("u", "q"),
            answer("a", "gpt-5", encrypted("enc"), "hi"),
            user("v", "more")
        ]);
        let req = json!({"messages": history});
        let b = body_falling_back(&c, &config, req.clone(), Fallback::WithoutEncrypted);
        assert_eq!(types(&b), ["message", "message", "message"]);
        assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
        let b = body_falling_back(&c, &config, req, Fallback::WithoutReasoning);
        assert_eq!(types(&b), ["message", "message", "message"]);
        assert!(
            b.get("reasoning").is_none() && b.get("include").is_none(),
            "{b}"
        );
    }

    #[test]
    fn reasoning_text_goes_back_while_its_tool_loop_is_open() {
        let c = Converter::default();
        let mut config = config();
        config.models = Some(vec![serde_json::from_value(
            json!({"id": "gpt-oss", "reasoningEfforts": ["low", "medium", "high"]}),
        )
        .unwrap()]);
        let clear = json!({"type": "reasoning", "id": "rs_9", "summary": [],
                           "content": [{"type": "reasoning_text", "text": "think"}]});
        let call = json!({"id": "a", "role": "assistant",
            "source": {"kind": "model", "provider": "local", "model": "gpt-oss",
                       "replayState": {"blocks": [clear, null]}},
            "content": [{"type": "reasoning", "text": "think"},
                        {"type": "tool-call", "id": "c1", "name": "bash", "arguments": "{}"}]});
        let output = json!({"id": "r", "role": "user", "source": {"kind": "tool", "callId": "c1"},
            "content": [{"type": "tool-result", "toolCallId": "c1", "content": [{"type": "text", "text": "ok"}]}]});
        let open = json!([user("u", "q"), call, output]);
        let b = body_with(&c, &config, json!({"model": "gpt-oss", "messages": open}));
        assert_eq!(
            types(&b),
            [
                "message",
                "reasoning",
                "function_call",
                "function_call_output"
            ]
        );
        assert_eq!(b["input"][1]["id"], "rs_9");
        // After the user's next prompt the loop is closed: not sent.
        let closed = json!([user("u", "q"), call, output, user("w", "next")]);
        let b = body_with(&c, &config, json!({"model": "gpt-oss", "messages": closed}));
        assert!(!types(&b).contains(&"reasoning".to_owned()), "{b}");
    }

    #[test]
    fn a_later_request_reuses_the_shared_prefix_and_converts_what_changed() {
        let c = Converter::default();
        let first = json!({"messages": [user("1", "a"), user("2", "b")], "sessionId": "s"});
        assert_eq!(body(&c, first)["input"].as_array().unwrap().len(), 2);
        let second =
            json!({"messages": [user("1", "a"), user("2", "B"), user("3", "c")], "sessionId": "s"});
        let b = body(&c, second);
        let texts: Vec<&str> = b["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"][0]["text"].as_str().unwrap())
            .collect();
        assert_eq!(texts, ["a", "B", "c"]);
    }

    #[test]
    fn a_message_that_is_not_a_message_is_refused_naming_it() {
        let c = Converter::default();
        let config = config();
        let text = |req: &str| {
            let req: Request = serde_json::from_str(req).unwrap();
            c.body(&config, &config.catalog(), req, Fallback::Full)
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        let e = text(
            r#"{"messages":[{"id":"u","role":"user","content":[],"source":{"kind":"user"}},
                            {"id":"v","role":"user","content":[{"type":"text"}],"source":{"kind":"user"}}]}"#,
        );
        assert!(e.starts_with("message 1: ") && e.contains("text"), "{e}");
        let e = text(r#"{"tools":{"name":"t"}}"#);
        assert!(e.starts_with("the tools: "), "{e}");
        // The catalog the tests use is OpenAI's.
        assert_eq!(config.catalog().entries.models, models::openai());
    }
}
