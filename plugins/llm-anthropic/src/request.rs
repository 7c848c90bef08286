//! The request body of one generate call (`POST /v1/messages`), built from
//! the harness request without re-encoding the history: each harness
//! message is converted once ([`crate::convert::part_of`]), and later
//! requests of the same session reuse the conversion of every message they
//! share with the previous one (`dsh_llm_http::conversion`).
//!
//! The parts are then joined into the alternating messages the API takes:
//! empty parts are left out, consecutive parts of one role become one
//! message (a tool's results, each logged as a message of its own, join
//! the user message that answers the calls), and a user message lists its
//! tool results first, as the API requires. Text the history holds after
//! a step's results (a message sent while the tools ran) goes inside the
//! last result, after its output and marked [`SENT_WHILE_TOOLS_RAN`]:
//! Anthropic documents that text after tool results teaches the model to
//! end its turn there, with an empty answer. Tool ids the API would
//! refuse (another provider's, or repeated) are sent made over
//! ([`crate::tool_ids`]).
//!
//! Thinking (`thinking: {type: "enabled", budget_tokens}`) follows the
//! request's `reasoningEffort`, else the config's: `off` sends none, and
//! `low`, `medium`, `high`, `max` a budget of 2,048, 8,192, 16,384 or
//! 32,000 tokens, at most half of `max_tokens` (the API wants the budget
//! below `max_tokens`, and the answer needs room too); a budget under
//! 1,024 tokens (the API's least) sends none. With thinking on, the
//! answers' signed thinking is sent back (to the model that wrote it);
//! with it off, none is (the API refuses thinking then). A request that
//! continues a tool loop whose first answer has no signed thinking (it was
//! another provider's or model's, or thinking was off) goes without
//! thinking, which the API would refuse. `temperature` is sent only
//! without thinking (the API takes none with it).
//!
//! Prompt caching (config `promptCaching`, on by default) marks two cache
//! breakpoints: the system prompt (which caches the tools before it too)
//! and the last block of the last message, so each request reads the
//! prefix the previous one wrote.

use std::borrow::Cow;

use dsh_llm_http::conversion::{self, ConvertError, Converted, ToolIn};
use dsh_llm_http::stream_request::Stop;
use serde::Serialize;
use serde_json::value::{to_raw_value, RawValue};
use serde_json::Number;

use crate::convert::{part_of, CacheControl, Part, WireBlock, WireRole, WireTool};
use crate::models::{self, Catalog};
use crate::tool_ids::ToolIds;
use crate::Config;

/// What marks text the history holds after a step's tool results, moved
/// inside the last result ([`join`]).
pub(crate) const SENT_WHILE_TOOLS_RAN: &str = "[Sent while the tools ran]";

/// The harness request, as every adapter reads it
/// (`dsh_llm_http::stream_request`): `stop` is sent as `stop_sequences`.
pub(crate) use dsh_llm_http::stream_request::StreamRequest as Request;

/// The reasoning efforts this adapter maps to a thinking budget.
pub(crate) mod effort {
    /// No thinking.
    pub const OFF: &str = "off";
    /// 2,048 tokens.
    pub const LOW: &str = "low";
    /// 8,192 tokens.
    pub const MEDIUM: &str = "medium";
    /// 16,384 tokens.
    pub const HIGH: &str = "high";
    /// 32,000 tokens.
    pub const MAX: &str = "max";
    /// Every effort, in order (for the message that refuses another).
    pub const ALL: [&str; 5] = [OFF, LOW, MEDIUM, HIGH, MAX];
}

/// The least thinking budget the API takes.
const MIN_THINKING_BUDGET: u64 = 1024;

/// The thinking budget of `effort` (`None` for `off`), or why the effort
/// is not one this adapter knows.
fn budget_of(effort: &str) -> Result<Option<u64>, String> {
    Ok(Some(match effort {
        effort::OFF => return Ok(None),
        effort::LOW => 2048,
        effort::MEDIUM => 8192,
        effort::HIGH => 16_384,
        effort::MAX => 32_000,
        other => {
            return Err(format!(
                "reasoningEffort {other:?} is not one of {}",
                effort::ALL.join(", ")
            ))
        }
    }))
}

/// The thinking of a request with `effort` and `max_tokens`: the effort's
/// budget, at most half of `max_tokens`; none when that is under the
/// API's least.
fn thinking_for(effort: &str, max_tokens: u64) -> Result<Option<Thinking>, String> {
    Ok(budget_of(effort)?
        .map(|b| b.min(max_tokens / 2))
        .filter(|b| *b >= MIN_THINKING_BUDGET)
        .map(|budget_tokens| Thinking::Enabled { budget_tokens }))
}

/// The `thinking` switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Thinking {
    /// Thinking with a budget.
    Enabled {
        /// The most tokens the model may think.
        budget_tokens: u64,
    },
}

/// A block of the system prompt.
#[derive(Serialize)]
struct SystemBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

/// The system prompt: its text, or one text block with a cache
/// breakpoint.
#[derive(Serialize)]
#[serde(untagged)]
enum System<'a> {
    Text(&'a str),
    Blocks([SystemBlock<'a>; 1]),
}

/// One message of the body: a role and its blocks (borrowed from the
/// kept conversions; the one with a cache breakpoint is a copy).
#[derive(Serialize)]
struct WireMessage<'a> {
    role: WireRole,
    content: Vec<Cow<'a, WireBlock>>,
}

/// The Messages request body, keys in the wire's order.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    max_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<System<'a>>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<&'a Number>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stop_sequences: Vec<&'a str>,
}

/// The conversions kept per session (each message's [`Part`]), and the
/// last tool list's.
#[derive(Default)]
pub(crate) struct Converter {
    cache: conversion::Converter<Part>,
}

/// The request's tool list on the wire.
fn convert_tools(tools: &[ToolIn<'_>]) -> serde_json::Result<Box<RawValue>> {
    let wire: Vec<WireTool<'_>> = tools.iter().map(WireTool::of).collect();
    to_raw_value(&wire)
}

/// The parts joined into alternating messages: empty ones left out,
/// consecutive ones of a role joined, a user message's tool results
/// first. Thinking is kept when `thinking` is on and the answer is
/// `model`'s.
fn join<'a>(parts: &'a [Converted<Part>], model: &str, thinking: bool) -> Vec<WireMessage<'a>> {
    let mut out: Vec<WireMessage<'a>> = Vec::with_capacity(parts.len());
    for part in parts.iter().map(|c| &c.wire) {
        let keep_thinking = thinking && part.model.as_deref() == Some(model);
        let blocks = part
            .blocks
            .iter()
            .filter(|b| keep_thinking || !b.is_thinking())
            .map(Cow::Borrowed);
        match out.last_mut() {
            Some(last) if last.role == part.role => last.content.extend(blocks),
            _ => {
                let content: Vec<Cow<'a, WireBlock>> = blocks.collect();
                if !content.is_empty() {
                    out.push(WireMessage {
                        role: part.role,
                        content,
                    });
                }
            }
        }
    }
    for m in out.iter_mut().filter(|m| m.role == WireRole::User) {
        // Stable: results keep their order, and so does the rest.
        m.content.sort_by_key(|b| !b.is_tool_result());
        text_into_results(m);
    }
    name_tools(&mut out);
    out
}

/// A user message with tool results and text: the text goes inside the
/// last result, after its output, each part marked
/// [`SENT_WHILE_TOOLS_RAN`] (the results come first already).
fn text_into_results(m: &mut WireMessage<'_>) {
    let results = m.content.iter().filter(|b| b.is_tool_result()).count();
    if results == 0 || results == m.content.len() {
        return;
    }
    let texts: Vec<String> = m
        .content
        .drain(results..)
        .filter_map(|b| b.text().map(|t| format!("{SENT_WHILE_TOOLS_RAN}\n{t}")))
        .collect();
    if let Some(last) = m.content.last_mut() {
        if let WireBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
            cache_control,
        } = last.as_ref()
        {
            *last = Cow::Owned(WireBlock::ToolResult {
                tool_use_id: tool_use_id.clone(),
                content: content.with(texts),
                is_error: *is_error,
                cache_control: *cache_control,
            });
        }
    }
}

/// The tool ids of `messages` as the API takes them: each call's and its
/// result's made over where the API would refuse it ([`ToolIds`]).
fn name_tools(messages: &mut [WireMessage<'_>]) {
    let mut ids = ToolIds::default();
    for m in messages {
        if m.role == WireRole::Assistant {
            ids.answer();
        }
        for block in &mut m.content {
            let renamed = match (block.is_tool_use(), block.tool_id()) {
                (true, Some(id)) => ids.call(id),
                (false, Some(id)) => ids.result(id),
                (_, None) => None,
            };
            if let Some(id) = renamed {
                *block = Cow::Owned(block.with_tool_id(id));
            }
        }
    }
}

/// Whether `messages` continue a tool loop (they end with tool results)
/// whose first answer does not start with thinking: with thinking on, the
/// API refuses that.
fn unsigned_tool_loop(messages: &[WireMessage<'_>]) -> bool {
    let has_results = |m: &WireMessage<'_>| m.content.iter().any(|b| b.is_tool_result());
    match messages.last() {
        Some(last) if last.role == WireRole::User && has_results(last) => {}
        _ => return false,
    }
    // The turn starts after the last user message that is no tool result.
    let start = messages
        .iter()
        .rposition(|m| m.role == WireRole::User && !has_results(m))
        .map_or(0, |at| at + 1);
    messages[start..]
        .iter()
        .find(|m| m.role == WireRole::Assistant)
        .is_some_and(|first| {
            first.content.iter().any(|b| b.is_tool_use())
                && !first.content.first().is_some_and(|b| b.is_thinking())
        })
}

impl Converter {
    /// The Messages request body for `req`, as JSON bytes; `catalog` gives
    /// the output cap of a request that sets none. A request without a
    /// session id keeps no conversions.
    pub(crate) fn body(
        &self,
        config: &Config,
        catalog: &Catalog,
        mut req: Request,
    ) -> Result<Vec<u8>, ConvertError> {
        let stop = req.stop().map_err(ConvertError::at("the stop sequences"))?;
        let history = std::mem::take(&mut req.messages);
        let session = req.session_id.as_deref();
        let converted = self.cache.messages(session, history, |m| Ok(part_of(m)))?;
        let tools = match req.tools.as_deref() {
            Some(t) => self.cache.tools(t, convert_tools)?,
            None => None,
        };
        let model = req.model_or(&config.model);
        let max_tokens = req
            .max_tokens
            .unwrap_or_else(|| models::default_max_tokens(catalog, config.max_tokens, model));
        let effort = req
            .reasoning_effort
            .as_deref()
            .unwrap_or(&config.reasoning_effort);
        let mut thinking =
            thinking_for(effort, max_tokens).map_err(ConvertError::at("the reasoning effort"))?;
        let mut messages = join(&converted, model, thinking.is_some());
        if thinking.is_some() && unsigned_tool_loop(&messages) {
            dsh_sdk::tracing::debug!(
                "{}: the tool loop this request continues began without signed thinking; \
                 this request goes without thinking",
                crate::PLUGIN
            );
            thinking = None;
            messages = join(&converted, model, false);
        }
        if config.prompt_caching {
            if let Some(last) = messages.last_mut().and_then(|m| m.content.last_mut()) {
                if let Some(cached) = last.cached() {
                    *last = Cow::Owned(cached);
                }
            }
        }
        let system = req.system.as_deref().filter(|s| !s.is_empty()).map(|text| {
            if config.prompt_caching {
                System::Blocks([SystemBlock {
                    kind: "text",
                    text,
                    cache_control: Some(CacheControl::Ephemeral),
                }])
            } else {
                System::Text(text)
            }
        });
        let body = Body {
            model,
            max_tokens,
            system,
            messages,
            tools: tools.as_deref(),
            stream: true,
            thinking,
            temperature: req.temperature.as_ref().filter(|_| thinking.is_none()),
            stop_sequences: stop.as_ref().map_or_else(Vec::new, Stop::sequences),
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
    use serde_json::{json, Value};

    fn config(extra: Value) -> Config {
        let mut c = json!({"baseUrl": "http://x", "model": "dflt"});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(c).unwrap()
    }

    fn body_with(c: &Converter, config: &Config, req: Value) -> Value {
        let req: Request = serde_json::from_value(req).unwrap();
        let catalog = models::catalog_of(None);
        serde_json::from_slice(&c.body(config, &catalog, req).unwrap()).unwrap()
    }

    fn body(c: &Converter, req: Value) -> Value {
        body_with(c, &config(json!({})), req)
    }

    fn user(id: &str, text: &str) -> Value {
        json!({"id": id, "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}})
    }

    fn answer(id: &str, content: Value, replay: Option<Value>) -> Value {
        let mut source = json!({"kind": "model", "provider": "anthropic", "model": "m"});
        if let Some(r) = replay {
            source["replayState"] = r;
        }
        json!({"id": id, "role": "assistant", "content": content, "source": source})
    }

    fn result(call: &str, text: &str) -> Value {
        json!({"id": format!("r-{call}"), "role": "user", "source": {"kind": "tool", "callId": call},
               "content": [{"type": "tool-result", "toolCallId": call, "isError": false,
                            "content": [{"type": "text", "text": text}]}]})
    }

    /// A tool loop: the ask, an answer with signed thinking calling two
    /// tools, their two results (each a message).
    fn tool_loop() -> Vec<Value> {
        vec![
            user("u", "look"),
            answer(
                "a",
                json!([{"type": "reasoning", "text": "plan"},
                       {"type": "tool-call", "id": "t1", "name": "read", "arguments": "{\"file_path\":\"a\"}"},
                       {"type": "tool-call", "id": "t2", "name": "read", "arguments": "{\"file_path\":\"b\"}"}]),
                Some(json!({"blocks": [{"type": "thinking", "signature": "sig"}, null, null]})),
            ),
            result("t1", "A"),
            result("t2", "B"),
        ]
    }

    fn roles(b: &Value) -> Vec<&str> {
        b["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn the_body_has_the_messages_shape_in_order() {
        let c = Converter::default();
        let b = body(
            &c,
            json!({"model": "m", "system": "sys", "maxTokens": 5000, "reasoningEffort": "high",
                   "messages": tool_loop(), "sessionId": "s",
                   "tools": [{"name": "read", "description": "d", "parameters": {"type": "object"}}]}),
        );
        let keys: Vec<&str> = b.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "model",
                "max_tokens",
                "system",
                "messages",
                "tools",
                "stream",
                "thinking"
            ]
        );
        assert_eq!(b["max_tokens"], 5000);
        assert_eq!(b["stream"], true);
        // Half of max_tokens: the answer keeps room.
        assert_eq!(
            b["thinking"],
            json!({"type": "enabled", "budget_tokens": 2500})
        );
        assert_eq!(
            b["system"],
            json!([{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}])
        );
        assert_eq!(
            b["tools"],
            json!([{"name": "read", "description": "d", "input_schema": {"type": "object"}}])
        );
        assert_eq!(
            b["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "look"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "plan", "signature": "sig"},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {"file_path": "a"}},
                    {"type": "tool_use", "id": "t2", "name": "read", "input": {"file_path": "b"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "A", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "t2", "content": "B", "is_error": false,
                     "cache_control": {"type": "ephemeral"}}]}
            ])
        );
    }

    #[test]
    fn user_text_after_results_goes_inside_the_last_result() {
        let c = Converter::default();
        let mut messages = tool_loop();
        // A steer typed while the tools ran, logged between the results.
        messages.insert(3, user("steer", "also this"));
        let b = body(&c, json!({"model": "m", "messages": messages}));
        assert_eq!(roles(&b), ["user", "assistant", "user"]);
        // No text after the results (Anthropic: it teaches the model to end
        // its turn there): the steer is inside the last result, marked.
        assert_eq!(
            b["messages"][2]["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "t1", "content": "A", "is_error": false},
                {"type": "tool_result", "tool_use_id": "t2", "is_error": false,
                 "content": [{"type": "text", "text": "B"},
                             {"type": "text", "text": format!("{SENT_WHILE_TOOLS_RAN}\nalso this")}],
                 "cache_control": {"type": "ephemeral"}}
            ])
        );
        // Text alone stays text.
        let b = body(&c, json!({"model": "m", "messages": [user("u", "hi")]}));
        assert_eq!(b["messages"][0]["content"][0]["text"], "hi");
    }

    #[test]
    fn tool_ids_the_api_refuses_are_made_over_in_the_call_and_its_result() {
        // Another provider's answers: `call_0` in each, and a dotted id.
        let step = |n: &str, id: &str| {
            vec![
                answer(
                    &format!("a{n}"),
                    json!([{"type": "tool-call", "id": id, "name": "read", "arguments": "{}"}]),
                    None,
                ),
                result(id, n),
            ]
        };
        let mut messages = vec![user("u", "go")];
        for (n, id) in [("1", "call_0"), ("2", "call_0"), ("3", "fc.item:7")] {
            messages.extend(step(n, id));
        }
        let c = Converter::default();
        let b = body(&c, json!({"model": "m", "messages": messages}));
        let ids = |role: usize, key: &str| -> Vec<String> {
            b["messages"]
                .as_array()
                .unwrap()
                .iter()
                .skip(role)
                .step_by(2)
                .map(|m| m["content"][0][key].as_str().unwrap().to_owned())
                .collect()
        };
        let calls = ids(1, "id");
        let results = ids(2, "tool_use_id");
        assert_eq!(calls, results, "each result names its call");
        assert_eq!(calls[0], "call_0");
        for id in &calls[1..] {
            assert!(
                crate::tool_ids::is_valid(id) && id.starts_with("toolu_"),
                "{id}"
            );
        }
        let unique: std::collections::HashSet<&String> = calls.iter().collect();
        assert_eq!(unique.len(), 3, "{calls:?}");
        // The next request of the session sends the same ids.
        let again = body(
            &Converter::default(),
            json!({"model": "m", "messages": messages}),
        );
        assert_eq!(again["messages"], b["messages"]);
    }

    #[test]
    fn empty_parts_are_left_out_and_roles_alternate() {
        let c = Converter::default();
        let b = body(
            &c,
            json!({"model": "m", "messages": [
                user("1", "a"),
                answer("2", json!([{"type": "reasoning", "text": "unsigned"}]), None),
                user("3", "b"),
                user("4", ""),
                answer("5", json!([{"type": "text", "text": "ok"}]), None),
                answer("6", json!([{"type": "text", "text": "more"}]), None),
                user("7", "c")]}),
        );
        assert_eq!(roles(&b), ["user", "assistant", "user"]);
        assert_eq!(
            b["messages"][0]["content"],
            json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
        );
        assert_eq!(b["messages"][1]["content"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn thinking_off_sends_no_thinking_and_keeps_the_temperature() {
        let c = Converter::default();
        let b = body(
            &c,
            json!({"model": "m", "reasoningEffort": "off", "temperature": 0.5, "stop": "END",
                   "messages": tool_loop()}),
        );
        assert!(b.get("thinking").is_none(), "{b}");
        assert_eq!(b["temperature"], 0.5);
        assert_eq!(b["stop_sequences"], json!(["END"]));
        assert_eq!(b["messages"][1]["content"][0]["type"], "tool_use");
        // With thinking on, the temperature is not sent.
        let b = body(
            &c,
            json!({"model": "m", "reasoningEffort": "low", "temperature": 0.5, "messages": tool_loop()}),
        );
        assert_eq!(
            b["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        assert!(b.get("temperature").is_none(), "{b}");
    }

    #[test]
    fn a_tool_loop_begun_without_signed_thinking_goes_without_thinking() {
        let c = Converter::default();
        // Another model's answer: its signature is not this model's.
        let b = body(
            &c,
            json!({"model": "other", "reasoningEffort": "high", "messages": tool_loop()}),
        );
        assert!(b.get("thinking").is_none(), "{b}");
        assert_eq!(b["messages"][1]["content"][0]["type"], "tool_use");
        // A new turn after the loop may think again.
        let mut messages = tool_loop();
        messages.push(answer("z", json!([{"type": "text", "text": "done"}]), None));
        messages.push(user("next", "go on"));
        let b = body(
            &c,
            json!({"model": "other", "reasoningEffort": "high", "messages": messages}),
        );
        assert_eq!(b["thinking"]["type"], "enabled");
    }

    #[test]
    fn the_output_cap_comes_from_the_request_the_catalog_or_the_config() {
        let c = Converter::default();
        let cap = |config: &Config, model: &str| {
            body_with(
                &c,
                config,
                json!({"model": model, "messages": [user("u", "x")]}),
            )["max_tokens"]
                .clone()
        };
        assert_eq!(cap(&config(json!({})), "claude-opus-4-1"), 32_000);
        assert_eq!(
            cap(&config(json!({})), "unlisted"),
            models::DEFAULT_MAX_TOKENS
        );
        assert_eq!(cap(&config(json!({"maxTokens": 1000})), "unlisted"), 1000);
        // Too small a cap for the least budget: no thinking.
        let b = body(
            &c,
            json!({"model": "m", "maxTokens": 2000, "reasoningEffort": "max", "messages": [user("u", "x")]}),
        );
        assert!(b.get("thinking").is_none(), "{b}");
    }

    #[test]
    fn an_unknown_effort_is_refused_naming_the_known_ones() {
        let c = Converter::default();
        let req: Request =
            serde_json::from_value(json!({"reasoningEffort": "extreme", "messages": []})).unwrap();
        let e = c
            .body(&config(json!({})), &models::catalog_of(None), req)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "the reasoning effort: reasoningEffort \"extreme\" is not one of off, low, medium, high, max"
        );
    }

    #[test]
    fn without_prompt_caching_no_breakpoint_is_sent() {
        let c = Converter::default();
        let b = body_with(
            &c,
            &config(json!({"promptCaching": false})),
            json!({"system": "sys", "messages": [user("u", "x")]}),
        );
        assert_eq!(b["system"], "sys");
        assert!(!b.to_string().contains("cache_control"), "{b}");
    }

    #[test]
    fn a_later_request_reuses_the_shared_prefix_and_converts_what_changed() {
        let c = Converter::default();
        body(
            &c,
            json!({"messages": [user("1", "a"), user("2", "b")], "sessionId": "s"}),
        );
        let b = body(
            &c,
            json!({"messages": [user("1", "a"), user("2", "B"), answer("3", json!([{"type": "text", "text": "c"}]), None)],
                   "sessionId": "s"}),
        );
        assert_eq!(b["messages"][0]["content"][1]["text"], "B");
        assert_eq!(b["model"], "dflt");
        assert_eq!(c.cache.sessions_kept(), 1);
        assert_eq!(c.cache.kept_for("s"), Some(3));
    }

    #[test]
    fn a_message_that_is_not_a_message_is_refused_naming_it() {
        let c = Converter::default();
        let req: Request = serde_json::from_str(
            r#"{"messages":[{"id":"u","role":"user","content":[],"source":{"kind":"user"}},
                            {"id":"v","role":"user","content":[{"type":"text"}],"source":{"kind":"user"}}]}"#,
        )
        .unwrap();
        let e = c
            .body(&config(json!({})), &models::catalog_of(None), req)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("message 1: ") && e.contains("text"), "{e}");
    }
}
