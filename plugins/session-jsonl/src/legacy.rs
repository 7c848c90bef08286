//! What a stored log is turned into before anything reads it (the
//! original's `snapshotStoredEvents`, reference dsh-core §8.2): the exact
//! older v0 records it still imports are upgraded (pre-react-loop
//! `turn/start` triggers, `steering/message`, old `turn/end` reasons,
//! pre-identity messages), then every message event is checked for its
//! identified shape (§2.3). Nothing on disk changes: later appends use the
//! current format.

use std::collections::HashMap;

use dsh_sdk::codes;
use dsh_sdk::vocab::{event, shape, SessionEvent};
use serde_json::{json, Map, Value};

/// The removed steering surface event.
const STEERING_MESSAGE: &str = "steering/message";

/// Upgrades the legacy records of session `id` and validates the message
/// shapes of the result; the error is the original's message.
pub fn import(id: &str, mut events: Vec<SessionEvent>) -> Result<Vec<SessionEvent>, String> {
    let mut message_ids: HashMap<u64, String> = HashMap::new();
    // In place, and only the kinds an upgrade or a check concerns: most of
    // a long log (chunks, steps) is left where it lies.
    for slot in &mut events {
        if !concerned(&slot.kind) {
            continue;
        }
        let e = std::mem::replace(slot, SessionEvent::new("", 0, Value::Null));
        let e = migrate_turn_start(e, id)?;
        let e = migrate_turn_end(e, id)?;
        let e = migrate_steering(e, id)?;
        let e = migrate_message(e, id, &message_ids);
        shape::data_message_shape(
            &e.kind,
            &e.data,
            &format!("stored {} at seq {}", e.kind, e.seq),
        )?;
        if let Some(mid) = message_id(&e) {
            message_ids.insert(e.seq, mid);
        }
        *slot = e;
    }
    Ok(events)
}

/// Whether events of `kind` may need an upgrade or a shape check.
fn concerned(kind: &str) -> bool {
    matches!(kind, event::TURN_START | event::TURN_END | STEERING_MESSAGE)
        || shape::is_message(kind)
}

/// The deterministic id of a message persisted before identities existed.
fn legacy_message_id(id: &str, seq: u64) -> String {
    format!("legacy-message:{id}:{seq}")
}

/// True when `record` holds every `required` key and nothing outside
/// `required` and `optional`.
fn has_only_keys(record: &Map<String, Value>, required: &[&str], optional: &[&str]) -> bool {
    record
        .keys()
        .all(|k| required.contains(&k.as_str()) || optional.contains(&k.as_str()))
        && required.iter().all(|k| record.contains_key(*k))
}

fn is_turn_number(v: &Value) -> bool {
    v.as_u64().is_some_and(|t| t >= 1)
}

fn malformed(id: &str, what: &str, seq: u64) -> String {
    format!("session \"{id}\" contains malformed pre-react-loop {what} at seq {seq}")
}

/// A pre-react-loop `turn/start` loses its obsolete `trigger`.
fn migrate_turn_start(mut e: SessionEvent, id: &str) -> Result<SessionEvent, String> {
    if e.kind != event::TURN_START {
        return Ok(e);
    }
    let Some(data) = e.data.as_object() else {
        return Ok(e);
    };
    if !data.contains_key("trigger") {
        return Ok(e);
    }
    let trigger_ok = data["trigger"]["kind"]
        .as_str()
        .is_some_and(|k| !k.is_empty());
    if !is_turn_number(&data["turn"])
        || !has_only_keys(data, &["turn", "trigger"], &[])
        || !trigger_ok
    {
        return Err(malformed(id, event::TURN_START, e.seq));
    }
    e.data = json!({"turn": data["turn"]}).into();
    Ok(e)
}

/// An older `turn/end` reason mapped to the current one: `aborted` without
/// a cause → `aborted {legacy}`, `disposed` → `aborted {disposed}`, an
/// `error` with a `failure` or a `message` → `error {error}`.
fn migrate_turn_end(mut e: SessionEvent, id: &str) -> Result<SessionEvent, String> {
    if e.kind != event::TURN_END {
        return Ok(e);
    }
    let Some(data) = e.data.as_object() else {
        return Ok(e);
    };
    let bad = || malformed(id, event::TURN_END, e.seq);
    let Some(reason) = data["reason"]
        .as_object()
        .filter(|_| is_turn_number(&data["turn"]) && has_only_keys(data, &["turn", "reason"], &[]))
    else {
        return Err(bad());
    };
    let Some(kind) = reason.get("kind").and_then(Value::as_str) else {
        return Err(bad());
    };
    let current = match kind {
        "completed" | "blocked" | "max-tokens" | "interrupted" => {
            return has_only_keys(reason, &["kind"], &[])
                .then_some(e.clone())
                .ok_or_else(bad)
        }
        "aborted" if reason.contains_key("reason") => return Ok(e.clone()),
        "aborted" if has_only_keys(reason, &["kind"], &[]) => {
            json!({"kind": "aborted", "reason": {"kind": "legacy"}})
        }
        "disposed" if has_only_keys(reason, &["kind"], &[]) => {
            json!({"kind": "aborted", "reason": {"kind": "disposed"}})
        }
        "error" if reason.contains_key("error") => return Ok(e.clone()),
        "error" => json!({"kind": "error", "error": legacy_failure(reason).ok_or_else(bad)?}),
        "aborted" | "disposed" => return Err(bad()),
        _ => return Ok(e.clone()),
    };
    let mut upgraded = data.clone();
    upgraded.insert("reason".into(), current);
    e.data = Value::Object(upgraded).into();
    Ok(e)
}

/// The failure an old `error` reason carried: its `failure` record, or its
/// `message` (and `code`, `UNKNOWN` when absent).
fn legacy_failure(reason: &Map<String, Value>) -> Option<Value> {
    reason.get("step").and_then(Value::as_u64)?;
    if let Some(failure) = reason.get("failure").and_then(Value::as_object) {
        let optional_ok = failure.get("status").is_none_or(Value::is_number)
            && failure
                .get("providerRetryAfterMs")
                .is_none_or(Value::is_number)
            && failure.get("requestId").is_none_or(Value::is_string);
        let ok = has_only_keys(reason, &["kind", "step", "failure"], &[])
            && has_only_keys(
                failure,
                &["message", "code"],
                &["status", "providerRetryAfterMs", "requestId"],
            )
            && failure["message"].is_string()
            && failure["code"].is_string()
            && optional_ok;
        if ok {
            return Some(Value::Object(failure.clone()));
        }
    }
    let keys: &[&str] = if reason.contains_key("code") {
        &["kind", "step", "message", "code"]
    } else {
        &["kind", "step", "message"]
    };
    let message = reason.get("message").and_then(Value::as_str)?;
    let code = match reason.get("code") {
        None => codes::UNKNOWN,
        Some(c) => c.as_str()?,
    };
    has_only_keys(reason, keys, &[]).then(|| json!({"message": message, "code": code}))
}

/// A removed `steering/message` becomes the same identified `user/message`
/// (a wrapped message verbatim; a flat one gets the legacy id).
fn migrate_steering(mut e: SessionEvent, id: &str) -> Result<SessionEvent, String> {
    if e.kind != STEERING_MESSAGE {
        return Ok(e);
    }
    let bad = || malformed(id, STEERING_MESSAGE, e.seq);
    let data = e.data.as_object().ok_or_else(bad)?.clone();
    let turn_ok = data.get("turn").and_then(Value::as_u64).is_some();
    if let Some(wrapped) = data.get("message").filter(|m| m.is_object()) {
        if turn_ok && has_only_keys(&data, &["turn", "message"], &[]) {
            e.data = wrapped.clone().into();
            e.kind = event::USER_MESSAGE.into();
            return Ok(e);
        }
    }
    if !turn_ok || !has_only_keys(&data, &["turn", "content", "source"], &[]) {
        return Err(bad());
    }
    let mut message = data;
    message.remove("turn");
    message.insert("id".into(), json!(legacy_message_id(id, e.seq)));
    message.insert("role".into(), json!("user"));
    e.kind = event::USER_MESSAGE.into();
    e.data = Value::Object(message).into();
    Ok(e)
}

/// A pre-identity message event in the current wrapper shape; an event
/// that looks current is left for validation to judge.
fn migrate_message(mut e: SessionEvent, id: &str, ids: &HashMap<u64, String>) -> SessionEvent {
    // Only a message without the current wrapper is upgraded (and copied):
    // the data of every other event is not even read.
    let pre_identity = match e.kind.as_str() {
        event::USER_MESSAGE => !has_any_key(&e.data, &["id", "role", "message"]),
        event::ASSISTANT_MESSAGE | event::TOOL_RESULT => !has_any_key(&e.data, &["message"]),
        _ => false,
    };
    if !pre_identity {
        return e;
    }
    let Some(data) = e.data.as_object().cloned() else {
        return e;
    };
    let has = |k: &str| data.contains_key(k);
    let upgraded = match e.kind.as_str() {
        event::USER_MESSAGE if !has("id") && !has("role") && !has("message") => {
            if !has("content") || !has("source") {
                return e;
            }
            let mut m = data;
            m.insert("id".into(), json!(legacy_message_id(id, e.seq)));
            m.insert("role".into(), json!("user"));
            m
        }
        event::ASSISTANT_MESSAGE if !has("message") && has("content") && has("provenance") => {
            let mut rest = data;
            let content = rest.remove("content").unwrap_or(Value::Null);
            let mut source = rest
                .remove("provenance")
                .and_then(|p| p.as_object().cloned())
                .unwrap_or_default();
            source.insert("kind".into(), json!("model"));
            let message = json!({"id": legacy_message_id(id, e.seq), "role": "assistant", "content": content, "source": source});
            rest.insert("message".into(), message);
            rest
        }
        event::TOOL_RESULT
            if !has("message") && has("callId") && has("content") && has("isError") =>
        {
            let mut rest = data;
            let call_id = rest.remove("callId").unwrap_or(Value::Null);
            let content = rest.remove("content").unwrap_or(Value::Null);
            let is_error = rest.remove("isError").unwrap_or(Value::Null);
            let message_id = match replacement_start(&e) {
                None => Some(legacy_message_id(id, e.seq)),
                Some(start) => ids.get(&start).cloned(),
            };
            let block = json!({"type": "tool-result", "toolCallId": call_id, "content": content, "isError": is_error});
            let message = json!({"id": message_id, "role": "user", "content": [block], "source": {"kind": "tool", "callId": call_id}});
            rest.insert("message".into(), message);
            rest
        }
        _ => return e,
    };
    e.data = Value::Object(upgraded).into();
    e
}

/// Whether `data` is an object with one of `keys` (`id`, `role`,
/// `message`). Unread text is probed, not parsed; a null field reads as
/// absent there, which only sends the event on to the full check.
fn has_any_key(data: &dsh_sdk::LazyJson, keys: &[&str]) -> bool {
    #[derive(serde::Deserialize)]
    struct Keys {
        id: Option<serde::de::IgnoredAny>,
        role: Option<serde::de::IgnoredAny>,
        message: Option<serde::de::IgnoredAny>,
    }
    let probed = data
        .unread_text()
        .filter(|t| t.trim_start().starts_with('{'))
        .and_then(|t| serde_json::from_str::<Keys>(t).ok());
    keys.iter().any(|k| match (&probed, *k) {
        (Some(p), "id") => p.id.is_some(),
        (Some(p), "role") => p.role.is_some(),
        (Some(p), "message") => p.message.is_some(),
        _ => data.get(*k).is_some(),
    })
}

/// The seq a replacement's `surfaceOp` starts at.
fn replacement_start(e: &SessionEvent) -> Option<u64> {
    let op = e.surface_op.as_ref()?;
    (op["op"] == "replace")
        .then(|| op["start"].as_u64())
        .flatten()
}

/// The id of the identified message a validated event carries.
/// Unread text is probed for the id, not parsed.
fn message_id(e: &SessionEvent) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Id {
        id: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Wrapped {
        message: Option<Id>,
    }
    if !shape::is_message(&e.kind) {
        return None;
    }
    let user = e.kind == event::USER_MESSAGE;
    if let Some(text) = e.data.unread_text() {
        let probed = if user {
            serde_json::from_str::<Id>(text).map(|m| m.id)
        } else {
            serde_json::from_str::<Wrapped>(text).map(|w| w.message.and_then(|m| m.id))
        };
        if let Ok(id) = probed {
            return id;
        }
    }
    let message = if user { &*e.data } else { &e.data["message"] };
    message["id"].as_str().map(str::to_owned)
}
