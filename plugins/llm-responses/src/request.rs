//! The request body of one call, built from the harness request without
//! re-encoding the history: each harness message is converted to input
//! items once, and later requests of the same session reuse the
//! conversion of every message they share with the previous one.
//!
//! The request is stateless: the whole history every time, `store: false`,
//! no `previous_response_id`; a reasoning model's earlier thinking goes
//! back as its reasoning items, which it asks to be given
//! (`include: ["reasoning.encrypted_content"]`).

use std::cell::RefCell;
use std::fmt;

use dsh_sdk::vocab::Message;
use serde::{Deserialize, Serialize};
use serde_json::value::{to_raw_value, RawValue};
use serde_json::Number;

use crate::convert::{items_of, InputItem, ToolIn, WireTool};
use crate::models::Catalog;
use crate::Config;

/// The harness request (`llm-adapter.stream` params) as this adapter reads
/// it; other fields pass by (`stop`, which this wire does not have,
/// among them). The history stays as the JSON texts the messages were
/// logged as: each is read as a [`Message`] only when the session's
/// previous request did not carry the same text.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Request {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    messages: Vec<Box<RawValue>>,
    #[serde(default)]
    system: Option<String>,
    /// The tool schemas, converted once per distinct list ([`Converter`]).
    #[serde(default)]
    tools: Option<Box<RawValue>>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    reasoning_effort: Option<String>,
    /// Passed on as written (a `Number` keeps `1` and `1.0` apart).
    #[serde(default)]
    temperature: Option<Number>,
    /// The session, sent as `prompt_cache_key` (when the config allows).
    #[serde(default)]
    pub session_id: Option<String>,
}

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
    /// Each message converted once ([`Converted::wire`]); reasoning items
    /// only for a model that reasons.
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

/// Why a request could not become a body: which part, and the reading
/// error.
#[derive(Debug)]
pub(crate) struct ConvertError {
    part: String,
    error: serde_json::Error,
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.part, self.error)
    }
}

impl ConvertError {
    fn at(part: impl Into<String>) -> impl FnOnce(serde_json::Error) -> ConvertError {
        let part = part.into();
        move |error| ConvertError { part, error }
    }
}

/// One input item, and whether it is a reasoning item (sent only to a
/// model that reasons: one that does not may refuse it, after a switch of
/// model within the route).
struct WireItem {
    raw: Box<RawValue>,
    reasoning: bool,
}

/// One harness message and the input items it became.
struct Converted {
    source: Box<RawValue>,
    wire: Vec<WireItem>,
}

/// How many sessions keep their conversions (the least recently used goes).
const SESSIONS_KEPT: usize = 16;

/// Conversions kept per session, and the last tool list's.
#[derive(Default)]
pub(crate) struct Converter {
    sessions: RefCell<Vec<(String, Vec<Converted>)>>,
    tools: RefCell<Option<(Box<RawValue>, Box<RawValue>)>>,
}

/// Reads one logged message and converts it.
fn convert(source: Box<RawValue>) -> serde_json::Result<Converted> {
    let message: Message = serde_json::from_str(source.get())?;
    let wire = items_of(&message)
        .iter()
        .map(|item| {
            Ok(WireItem {
                raw: to_raw_value(item)?,
                reasoning: matches!(item, InputItem::Reasoning(_)),
            })
        })
        .collect::<serde_json::Result<_>>()?;
    Ok(Converted { source, wire })
}

/// The request's tool list on the wire; `None` when it is empty.
fn convert_tools(tools: &RawValue) -> serde_json::Result<Option<Box<RawValue>>> {
    let tools: Vec<ToolIn<'_>> = serde_json::from_str(tools.get())?;
    if tools.is_empty() {
        return Ok(None);
    }
    let wire: Vec<WireTool<'_>> = tools.iter().map(WireTool::of).collect();
    Ok(Some(to_raw_value(&wire)?))
}

impl Converter {
    /// The conversions of `messages` for `session`: reused for the prefix
    /// the session's previous request shares, made for the rest.
    fn messages(
        &self,
        session: Option<&str>,
        messages: Vec<Box<RawValue>>,
    ) -> Result<Vec<Converted>, ConvertError> {
        let previous = match session {
            Some(session) => {
                let mut sessions = self.sessions.borrow_mut();
                match sessions.iter().position(|(s, _)| s == session) {
                    Some(at) => sessions.remove(at).1,
                    None => Vec::new(),
                }
            }
            None => Vec::new(),
        };
        let mut previous = previous.into_iter();
        let mut out = Vec::with_capacity(messages.len());
        let mut reusing = true;
        for (at, m) in messages.into_iter().enumerate() {
            if reusing {
                match previous.next() {
                    Some(c) if c.source.get() == m.get() => {
                        out.push(c);
                        continue;
                    }
                    _ => reusing = false,
                }
            }
            out.push(convert(m).map_err(ConvertError::at(format!("message {at}")))?);
        }
        Ok(out)
    }

    fn keep(&self, session: String, converted: Vec<Converted>) {
        let mut sessions = self.sessions.borrow_mut();
        if sessions.len() >= SESSIONS_KEPT {
            sessions.remove(0);
        }
        sessions.push((session, converted));
    }

    fn tools(&self, tools: &RawValue) -> serde_json::Result<Option<Box<RawValue>>> {
        if let Some((source, wire)) = &*self.tools.borrow() {
            if source.get() == tools.get() {
                return Ok(Some(wire.clone()));
            }
        }
        let wire = convert_tools(tools)?;
        if let Some(w) = &wire {
            *self.tools.borrow_mut() = Some((tools.to_owned(), w.clone()));
        }
        Ok(wire)
    }

    /// The Responses request body for `req`, as JSON bytes. A request
    /// without a session id keeps no conversions.
    pub(crate) fn body(
        &self,
        config: &Config,
        catalog: &Catalog,
        req: Request,
    ) -> Result<Vec<u8>, ConvertError> {
        let session = req.session_id.clone().filter(|s| !s.is_empty());
        let converted = self.messages(session.as_deref(), req.messages)?;
        let tools = req
            .tools
            .as_deref()
            .map(|t| self.tools(t))
            .transpose()
            .map_err(ConvertError::at("the tools"))?
            .flatten();
        let model = req
            .model
            .as_deref()
            .filter(|m| !m.is_empty())
            .unwrap_or(&config.model);
        let default_effort = catalog.default_effort(model);
        let effort = req
            .reasoning_effort
            .as_deref()
            .or(default_effort.as_deref());
        let reasons = catalog.reasons(model) && effort != Some(EFFORT_OFF);
        let input: Vec<&RawValue> = converted
            .iter()
            .flat_map(|c| c.wire.iter())
            .filter(|w| reasons || !w.reasoning)
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
            temperature: req.temperature.as_ref(),
            prompt_cache_key: session.as_deref().filter(|_| config.prompt_cache_key),
        };
        let bytes = serde_json::to_vec(&body).map_err(ConvertError::at("the body"))?;
        drop(body);
        if let Some(session) = session {
            self.keep(session, converted);
        }
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
        let req: Request = serde_json::from_value(req).unwrap();
        let bytes = c.body(config, &config.catalog(), req).unwrap();
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
                "temperature",
                "prompt_cache_key"
            ]
        );
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

    #[test]
    fn reasoning_items_go_back_only_to_a_model_that_reasons() {
        let c = Converter::default();
        let answer = json!({"id": "a", "role": "assistant",
            "source": {"kind": "model", "provider": "openai", "model": "gpt-5",
                       "replayState": {"blocks": [{"type": "reasoning", "id": "rs_1", "summary": [],
                                                   "encrypted_content": "enc"}, null]}},
            "content": [{"type": "reasoning", "text": ""}, {"type": "text", "text": "hi"}]});
        let types = |b: &Value| -> Vec<String> {
            b["input"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["type"].as_str().unwrap().to_owned())
                .collect()
        };
        let history = json!([user("u", "q"), answer, user("v", "more")]);
        let b = body(&c, json!({"messages": history, "sessionId": "s"}));
        assert_eq!(types(&b), ["message", "reasoning", "message", "message"]);
        // The same history (its conversion reused) to a model that does
        // not reason, then back.
        let b = body(
            &c,
            json!({"model": "gpt-4.1", "messages": history, "sessionId": "s"}),
        );
        assert_eq!(types(&b), ["message", "message", "message"]);
        let b = body(
            &c,
            json!({"model": "o3", "messages": history, "sessionId": "s"}),
        );
        assert_eq!(types(&b)[1], "reasoning");
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
    fn sessions_kept_are_bounded() {
        let c = Converter::default();
        for i in 0..(SESSIONS_KEPT + 5) {
            body(
                &c,
                json!({"messages": [user("1", "a")], "sessionId": format!("s{i}")}),
            );
        }
        assert_eq!(c.sessions.borrow().len(), SESSIONS_KEPT);
    }

    #[test]
    fn a_message_that_is_not_a_message_is_refused_naming_it() {
        let c = Converter::default();
        let config = config();
        let text = |req: &str| {
            let req: Request = serde_json::from_str(req).unwrap();
            c.body(&config, &config.catalog(), req)
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
        assert_eq!(config.catalog().models, models::openai());
    }
}
