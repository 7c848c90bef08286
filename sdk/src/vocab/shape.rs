//! What the session log checks of an event's payload and of a session
//! header (reference dsh-core §2.3, §2.9): the shape of identified messages
//! and of durable request headers at the seed/load boundary, the legacy
//! header vocabulary refused everywhere, and the header's scalar fields.
//! Plugin-owned block details are not looked at. Messages follow the
//! original's wording.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::{event, SessionHeader};
use crate::LazyJson;

/// The log format version (`SESSION_FORMAT_VERSION`).
pub const SESSION_FORMAT_VERSION: u32 = 0;

/// Refuses request-header vocabulary removed with the legacy delta codec:
/// a `request/header` with reason `fallback` (at seed, append and load).
/// `location` names the event in the message, e.g. `session event
/// "request/header"` or `seed event at index 3`.
pub fn unsupported_request_header(kind: &str, data: &Value, location: &str) -> Option<String> {
    (kind == event::REQUEST_HEADER && data["reason"] == "fallback")
        .then(|| format!("{location} uses unsupported legacy request/header reason \"fallback\""))
}

/// The shape checks of a seed or loaded event at `index`: a request
/// header's provider/model and markers, and the identified message of a
/// surface event.
pub fn seed_event_shape(e: &super::SessionEvent, index: usize) -> Result<(), String> {
    if e.kind == event::REQUEST_HEADER {
        request_header_shape(&e.data["header"], index)?;
    }
    data_message_shape(
        &e.kind,
        &e.data,
        &format!("seed {} at index {index}", e.kind),
    )
}

/// [`message_shape`] of an event's data without parsing what it does not
/// look at. Unread text is first read into borrowed probes of the few
/// fields the check judges (a long answer or a tool output is skipped, not
/// built into a tree); a message they show valid is valid. Anything else (a
/// type the probes do not take, a failed check) is judged whole, so every
/// verdict and message is [`message_shape`]'s own.
pub fn data_message_shape(kind: &str, data: &LazyJson, subject: &str) -> Result<(), String> {
    if !is_message(kind) {
        // Its data is not read (most of a long session's never is).
        return Ok(());
    }
    if data
        .unread_text()
        .is_some_and(|text| fast_valid(kind, text))
    {
        return Ok(());
    }
    message_shape(kind, data, subject)
}

/// A message as the fast check reads it.
#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(borrow)]
    source: &'a RawValue,
    #[serde(borrow)]
    content: &'a RawValue,
}

/// A message's source as the fast check reads it.
#[derive(Deserialize)]
struct SourceProbe<'a> {
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    provider: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "callId")]
    call_id: Option<Cow<'a, str>>,
}

/// A tool result's block as the fast check reads it.
#[derive(Deserialize)]
struct BlockProbe<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    content: &'a RawValue,
    #[serde(borrow, rename = "toolCallId")]
    tool_call_id: Cow<'a, str>,
}

/// Whether `text`, the data of a `kind` event, is certainly a valid message:
/// every check of [`message_shape`] passes on the probed fields. `false`
/// says nothing (the caller judges the whole value).
fn fast_valid(kind: &str, text: &str) -> bool {
    #[derive(Deserialize)]
    struct Wrapper<'a> {
        #[serde(borrow)]
        message: &'a RawValue,
    }
    let message = if kind == event::USER_MESSAGE {
        text
    } else {
        match as_object(text).and_then(|t| serde_json::from_str::<Wrapper<'_>>(t).ok()) {
            Some(w) => w.message.get(),
            None => return false,
        }
    };
    fast_valid_message(kind, message).unwrap_or(false)
}

fn fast_valid_message(kind: &str, text: &str) -> Option<bool> {
    let m: Probe<'_> = serde_json::from_str(as_object(text)?).ok()?;
    let source: SourceProbe<'_> = serde_json::from_str(as_object(m.source.get())?).ok()?;
    let role = if kind == event::ASSISTANT_MESSAGE {
        "assistant"
    } else {
        "user"
    };
    let filled = |s: &Option<Cow<'_, str>>| s.as_deref().is_some_and(|s| !s.is_empty());
    if m.id.is_empty() || m.role != role || source.kind.is_empty() || !is_array(m.content) {
        return Some(false);
    }
    match kind {
        event::ASSISTANT_MESSAGE => {
            Some(source.kind == "model" && filled(&source.provider) && filled(&source.model))
        }
        event::TOOL_RESULT => {
            let call_id = source.call_id.as_deref().filter(|c| !c.is_empty());
            if source.kind != "tool" || call_id.is_none() {
                return Some(false);
            }
            let blocks: Vec<&RawValue> = serde_json::from_str(m.content.get()).ok()?;
            let [block] = blocks.as_slice() else {
                return Some(false);
            };
            let b: BlockProbe<'_> = serde_json::from_str(as_object(block.get())?).ok()?;
            Some(
                b.kind == "tool-result" && is_array(b.content) && Some(&*b.tool_call_id) == call_id,
            )
        }
        _ => Some(true),
    }
}

/// `text` when it is an object (a struct probe would also take an array,
/// field by position).
fn as_object(text: &str) -> Option<&str> {
    text.trim_start().starts_with('{').then_some(text)
}

fn is_array(raw: &RawValue) -> bool {
    raw.get().starts_with('[')
}

fn non_empty_str(v: &Value) -> bool {
    v.as_str().is_some_and(|s| !s.is_empty())
}

fn has_provider_model(v: &Value) -> bool {
    non_empty_str(&v["provider"]) && non_empty_str(&v["model"])
}

/// A durable request header: `config.provider`/`config.model` non-empty,
/// `reasoningEffort` a non-empty string when present, `adapterDefaults`
/// only `reasoningEffort`/`maxTokens` markers, each `true`, each naming a
/// config field that exists.
fn request_header_shape(header: &Value, index: usize) -> Result<(), String> {
    let config = &header["config"];
    if !header.is_object() || !config.is_object() || !has_provider_model(config) {
        return Err(format!(
            "seed request/header at index {index} lacks provider/model"
        ));
    }
    if config
        .get("reasoningEffort")
        .is_some_and(|r| !non_empty_str(r))
    {
        return Err(format!(
            "seed request/header at index {index} has an invalid reasoningEffort"
        ));
    }
    let Some(defaults) = header.get("adapterDefaults") else {
        return Ok(());
    };
    let valid = defaults.as_object().is_some_and(|d| {
        d.iter().all(|(key, marker)| {
            matches!(key.as_str(), "reasoningEffort" | "maxTokens")
                && *marker == Value::Bool(true)
                && config.get(key).is_some()
        })
    });
    if valid {
        Ok(())
    } else {
        Err(format!(
            "seed request/header at index {index} has invalid adapterDefaults"
        ))
    }
}

/// Whether events of `kind` hold a message ([`message_shape`] checks them).
pub fn is_message(kind: &str) -> bool {
    matches!(
        kind,
        event::USER_MESSAGE | event::ASSISTANT_MESSAGE | event::TOOL_RESULT
    )
}

/// The identified message of a `user/message`, `assistant/message` or
/// `tool/result` (other types pass): non-empty `id`, the right `role`, a
/// `source.kind`, a `content` array; an assistant message from a model
/// with provider and model; a tool result with a tool source and exactly
/// one `tool-result` block answering that call.
pub fn message_shape(kind: &str, data: &Value, subject: &str) -> Result<(), String> {
    let message = match kind {
        event::USER_MESSAGE => data,
        event::ASSISTANT_MESSAGE | event::TOOL_RESULT => &data["message"],
        _ => return Ok(()),
    };
    if !message.is_object() || !non_empty_str(&message["id"]) {
        return Err(format!("{subject} lacks an identified message"));
    }
    let role = if kind == event::ASSISTANT_MESSAGE {
        "assistant"
    } else {
        "user"
    };
    if message["role"] != role {
        return Err(format!("{subject} message must have role \"{role}\""));
    }
    let source = &message["source"];
    if !non_empty_str(&source["kind"]) {
        return Err(format!("{subject} message has invalid source"));
    }
    let Some(content) = message["content"].as_array() else {
        return Err(format!("{subject} message has invalid content"));
    };
    if kind == event::ASSISTANT_MESSAGE {
        if source["kind"] != "model" || !has_provider_model(source) {
            return Err(format!("{subject} message must have model source"));
        }
        return Ok(());
    }
    if kind != event::TOOL_RESULT {
        return Ok(());
    }
    if source["kind"] != "tool" || !non_empty_str(&source["callId"]) {
        return Err(format!("{subject} message must have tool source"));
    }
    match content.as_slice() {
        [block] if block["type"] == "tool-result" && block["content"].is_array() => {
            if block["toolCallId"] != source["callId"] {
                return Err(format!("{subject} message has mismatched tool call ids"));
            }
            Ok(())
        }
        _ => Err(format!(
            "{subject} message must contain one tool-result block"
        )),
    }
}

/// A session header's scalar fields (`validateSessionHeader`): version 0,
/// the id of the session it belongs to, an absolute `cwd`, `origin` only
/// `"subagent"`. Types (strings, non-negative integers) are the serde
/// type's.
pub fn session_header(id: &str, header: &SessionHeader) -> Result<(), String> {
    if header.version != SESSION_FORMAT_VERSION {
        return Err(format!(
            "session header version must be {SESSION_FORMAT_VERSION}, got {}",
            header.version
        ));
    }
    if header.id != id {
        return Err(format!(
            "session header id \"{}\" does not match session id \"{id}\"",
            header.id
        ));
    }
    if let Some(cwd) = header.cwd.as_deref().filter(|c| !c.starts_with('/')) {
        return Err(format!(
            "session header cwd must be an absolute path, got \"{cwd}\""
        ));
    }
    if header.origin.as_deref().is_some_and(|o| o != "subagent") {
        return Err("session header origin must be \"subagent\"".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::{msg, SessionEvent};
    use serde_json::json;

    fn ev(kind: &str, data: Value) -> SessionEvent {
        SessionEvent {
            kind: kind.into(),
            seq: 0,
            time: 0,
            data: data.into(),
            source_event_seqs: None,
            surface_op: Some(json!("append")),
            ignorable: None,
        }
    }

    #[test]
    fn a_request_header_without_provider_or_model_is_refused() {
        for config in [
            json!({"provider": "p"}),
            json!({"model": "m"}),
            json!({"provider": "", "model": "m"}),
        ] {
            let e = ev(
                event::REQUEST_HEADER,
                json!({"header": {"config": config}, "reason": "initial"}),
            );
            assert_eq!(
                seed_event_shape(&e, 2),
                Err("seed request/header at index 2 lacks provider/model".into())
            );
        }
        let ok = ev(
            event::REQUEST_HEADER,
            json!({"header": {"config": {"provider": "p", "model": "m"}}, "reason": "initial"}),
        );
        assert_eq!(seed_event_shape(&ok, 0), Ok(()));
    }

    #[test]
    fn invalid_reasoning_effort_and_adapter_defaults_are_refused() {
        let header = |config: Value, defaults: Option<Value>| {
            let mut h = json!({"config": config});
            if let Some(d) = defaults {
                h["adapterDefaults"] = d;
            }
            ev(
                event::REQUEST_HEADER,
                json!({"header": h, "reason": "initial"}),
            )
        };
        let pm = json!({"provider": "p", "model": "m"});
        let with = |k: &str, v: Value| {
            let mut c = pm.clone();
            c[k] = v;
            c
        };
        assert_eq!(
            seed_event_shape(&header(with("reasoningEffort", json!("")), None), 1),
            Err("seed request/header at index 1 has an invalid reasoningEffort".into())
        );
        assert_eq!(
            seed_event_shape(&header(with("reasoningEffort", json!(3)), None), 1),
            Err("seed request/header at index 1 has an invalid reasoningEffort".into())
        );
        let bad = "seed request/header at index 1 has invalid adapterDefaults";
        for (config, defaults) in [
            (pm.clone(), json!({"reasoningEffort": true})),
            (with("maxTokens", json!(10)), json!({"maxTokens": false})),
            (with("maxTokens", json!(10)), json!({"temperature": true})),
            (with("maxTokens", json!(10)), json!([true])),
        ] {
            assert_eq!(
                seed_event_shape(&header(config, Some(defaults)), 1),
                Err(bad.into())
            );
        }
        let good = header(
            with("reasoningEffort", json!("high")),
            Some(json!({"reasoningEffort": true})),
        );
        assert_eq!(seed_event_shape(&good, 1), Ok(()));
    }

    #[test]
    fn malformed_messages_are_refused_with_the_original_wording() {
        // Each case is judged on the value and on the text (probed), alike.
        let s = |kind: &str, data: Value| {
            let whole = message_shape(kind, &data, "seed x at index 0");
            let text = crate::LazyJson::from_text(data.to_string()).unwrap();
            assert_eq!(
                data_message_shape(kind, &text, "seed x at index 0"),
                whole,
                "{kind} {data}"
            );
            whole
        };
        let result =
            json!({"message": msg::tool_result("r1", "c1", vec![msg::text("out")], false)});
        let text = crate::LazyJson::from_text(result.to_string()).unwrap();
        assert_eq!(data_message_shape(event::TOOL_RESULT, &text, "x"), Ok(()));
        assert!(
            text.unread_text().is_some(),
            "the probe parsed nothing whole"
        );
        // Shapes a struct probe would misread are judged whole.
        let as_array = json!(["m1", "user", {"kind": "user"}, []]);
        assert!(s(event::USER_MESSAGE, as_array).is_err());
        let nulls = json!({"id": null, "role": "user", "source": {"kind": "user"}, "content": []});
        assert!(s(event::USER_MESSAGE, nulls).is_err());
        let wrapped_array = json!([{"id": "a", "role": "assistant"}]);
        assert!(s(event::ASSISTANT_MESSAGE, wrapped_array).is_err());
        let blocks_not_objects = json!({"message": {"id": "r", "role": "user", "source": {"kind": "tool", "callId": "c"}, "content": [["tool-result", [], "c"]]}});
        assert!(s(event::TOOL_RESULT, blocks_not_objects).is_err());
        let twice = r#"{"id":"","id":"m","role":"user","source":{"kind":"user"},"content":[]}"#;
        let whole: Value = serde_json::from_str(twice).unwrap();
        assert_eq!(
            data_message_shape(
                event::USER_MESSAGE,
                &crate::LazyJson::from_text(twice).unwrap(),
                "x"
            ),
            message_shape(event::USER_MESSAGE, &whole, "x"),
            "a duplicate key reads as the last one, as a value does"
        );
        let user = msg::user_text("u1", "hi");
        assert_eq!(s(event::USER_MESSAGE, user.clone()), Ok(()));
        let mut no_id = user.clone();
        no_id["id"] = json!("");
        assert_eq!(
            s(event::USER_MESSAGE, no_id),
            Err("seed x at index 0 lacks an identified message".into())
        );
        let mut role = user.clone();
        role["role"] = json!("assistant");
        assert_eq!(
            s(event::USER_MESSAGE, role),
            Err("seed x at index 0 message must have role \"user\"".into())
        );
        let mut source = user.clone();
        source["source"] = json!({});
        assert_eq!(
            s(event::USER_MESSAGE, source),
            Err("seed x at index 0 message has invalid source".into())
        );
        let mut content = user;
        content["content"] = json!("hi");
        assert_eq!(
            s(event::USER_MESSAGE, content),
            Err("seed x at index 0 message has invalid content".into())
        );
        // A plugin source's own fields are not looked at.
        let plugin = json!({"id": "p", "role": "user", "content": [], "source": {"kind": "plugin", "form": {"x": 1}}});
        assert_eq!(s(event::USER_MESSAGE, plugin), Ok(()));

        let assistant = |provider: &str, model: &str| json!({"message": msg::assistant("a1", vec![msg::text("ok")], provider, model)});
        assert_eq!(s(event::ASSISTANT_MESSAGE, assistant("p", "m")), Ok(()));
        for (p, m) in [("", "m"), ("p", "")] {
            assert_eq!(
                s(event::ASSISTANT_MESSAGE, assistant(p, m)),
                Err("seed x at index 0 message must have model source".into())
            );
        }

        let result =
            json!({"message": msg::tool_result("r1", "c1", vec![msg::text("out")], false)});
        assert_eq!(s(event::TOOL_RESULT, result.clone()), Ok(()));
        let mut mismatched = result.clone();
        mismatched["message"]["content"][0]["toolCallId"] = json!("c2");
        assert_eq!(
            s(event::TOOL_RESULT, mismatched),
            Err("seed x at index 0 message has mismatched tool call ids".into())
        );
        let mut two = result.clone();
        let block = two["message"]["content"][0].clone();
        two["message"]["content"] = json!([block.clone(), block]);
        assert_eq!(
            s(event::TOOL_RESULT, two),
            Err("seed x at index 0 message must contain one tool-result block".into())
        );
        let mut not_tool = result;
        not_tool["message"]["source"] = json!({"kind": "user"});
        assert_eq!(
            s(event::TOOL_RESULT, not_tool),
            Err("seed x at index 0 message must have tool source".into())
        );
    }

    #[test]
    fn the_fallback_reason_is_refused_and_other_reasons_pass() {
        let data = |reason: &str| json!({"header": {}, "reason": reason});
        assert_eq!(
            unsupported_request_header(
                event::REQUEST_HEADER,
                &data("fallback"),
                "seed event at index 4"
            ),
            Some(
                "seed event at index 4 uses unsupported legacy request/header reason \"fallback\""
                    .into()
            )
        );
        for reason in ["initial", "resume", "change"] {
            assert_eq!(
                unsupported_request_header(event::REQUEST_HEADER, &data(reason), "x"),
                None
            );
        }
        assert_eq!(
            unsupported_request_header("plugin/x", &data("fallback"), "x"),
            None
        );
    }

    #[test]
    fn a_header_of_another_session_or_origin_is_refused() {
        let h = SessionHeader {
            id: "a".into(),
            ..SessionHeader::default()
        };
        assert_eq!(session_header("a", &h), Ok(()));
        assert_eq!(
            session_header("b", &h),
            Err("session header id \"a\" does not match session id \"b\"".into())
        );
        let origin = SessionHeader {
            origin: Some("human".into()),
            ..h.clone()
        };
        assert_eq!(
            session_header("a", &origin),
            Err("session header origin must be \"subagent\"".into())
        );
        let version = SessionHeader { version: 1, ..h };
        assert_eq!(
            session_header("a", &version),
            Err("session header version must be 0, got 1".into())
        );
    }
}
