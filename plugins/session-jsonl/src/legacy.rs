//! What a stored log is turned into before anything reads it (the
//! original's `snapshotStoredEvents`, reference dsh-core §8.2): the exact
//! older v0 records it still imports are upgraded (pre-react-loop
//! `turn/start` triggers, `steering/message`, old `turn/end` reasons,
//! pre-identity messages), then every message event is checked for its
//! identified shape (§2.3). Nothing on disk changes: later appends use the
//! current format.
//!
//! Each upgrade reads the old record as a serde type of its old shape (the
//! fields it had, nothing else where the original is that strict) and
//! builds the current record from the typed vocabulary
//! ([`dsh_sdk::vocab::records`], [`Message`]), written in that
//! vocabulary's field order. A message event that reads as neither shape
//! is left as it is, for the shape check to judge; an old lifecycle record
//! that is not exactly its old shape is refused, naming the field.

use std::collections::HashMap;
use std::fmt::Display;

use dsh_sdk::codes;
use dsh_sdk::vocab::message::ModelSource;
use dsh_sdk::vocab::records::{
    turn_end_kind, AssistantMessage, CancelCause, ToolErrorRef, ToolResult, TurnEnd, TurnEndReason,
    TurnStart,
};
use dsh_sdk::vocab::{
    event, shape, ContentBlock, Extra, LlmFailure, Message, MessageSource, SessionEvent, SurfaceOp,
    TokenUsage,
};
use dsh_sdk::LazyJson;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};

use crate::fields::{self, Object};

/// The removed steering surface event.
const STEERING_MESSAGE: &str = "steering/message";
/// The old `turn/end` reason kind of a disposed agent (now `aborted`
/// with cause `disposed`).
const DISPOSED: &str = "disposed";

/// Upgrades the legacy records of session `id` and validates the message
/// shapes of the result; the error is the original's message.
pub fn import(id: &str, mut events: Vec<SessionEvent>) -> Result<Vec<SessionEvent>, String> {
    let mut message_ids: HashMap<u64, String> = HashMap::new();
    // In place, and only the kinds an upgrade or a check concerns: most of
    // a long log (chunks, steps) is left where it lies.
    for e in &mut events {
        match e.kind.as_str() {
            event::TURN_START => migrate_turn_start(e, id)?,
            event::TURN_END => migrate_turn_end(e, id)?,
            STEERING_MESSAGE => migrate_steering(e, id)?,
            _ => {}
        }
        if !shape::is_message(&e.kind) {
            continue;
        }
        migrate_message(e, id, &message_ids)?;
        shape::data_message_shape(
            &e.kind,
            &e.data,
            &format!("stored {} at seq {}", e.kind, e.seq),
        )?;
        if let Some(mid) = message_id(e) {
            message_ids.insert(e.seq, mid);
        }
    }
    Ok(events)
}

/// The deterministic id of a message persisted before identities existed.
fn legacy_message_id(id: &str, seq: u64) -> String {
    format!("legacy-message:{id}:{seq}")
}

/// The original's refusal of an old record, with why.
fn malformed(id: &str, what: &str, seq: u64, why: impl Display) -> String {
    format!("session \"{id}\" contains malformed pre-react-loop {what} at seq {seq}: {why}")
}

/// The data of `e` read as `T`, or the refusal of a malformed old `what`
/// naming the field at fault.
fn strict<T: DeserializeOwned>(e: &SessionEvent, id: &str, what: &str) -> Result<T, String> {
    e.data
        .parse_at::<Object<T>>()
        .map(|Object(record)| record)
        .map_err(|(path, err)| malformed(id, what, e.seq, format_args!("at `{path}`: {err}")))
}

/// The data of an upgraded record.
fn written(record: &impl Serialize) -> Result<LazyJson, String> {
    serde_json::to_value(record)
        .map(LazyJson::from)
        .map_err(|e| format!("an upgraded record cannot be written: {e}"))
}

/// Which fields of a record are there (`null` included); the rest is not
/// read.
#[derive(Deserialize)]
struct Present {
    #[serde(default, deserialize_with = "fields::present")]
    trigger: Option<IgnoredAny>,
    #[serde(default, deserialize_with = "fields::present")]
    message: Option<IgnoredAny>,
    #[serde(default, deserialize_with = "fields::present")]
    id: Option<IgnoredAny>,
    #[serde(default, deserialize_with = "fields::present")]
    role: Option<IgnoredAny>,
}

/// The fields `data` has, when it is an object.
fn present(data: &LazyJson) -> Option<Present> {
    data.parse::<Object<Present>>().ok().map(|Object(p)| p)
}

/// `turn/start` before the react loop: the turn and the trigger that
/// started it, nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TriggeredTurnStart {
    turn: u64,
    #[serde(deserialize_with = "fields::object")]
    trigger: Trigger,
}

/// An old turn trigger: only its kind is checked (it is dropped whole).
#[derive(Deserialize)]
struct Trigger {
    kind: String,
}

/// A pre-react-loop `turn/start` loses its obsolete `trigger`.
fn migrate_turn_start(e: &mut SessionEvent, id: &str) -> Result<(), String> {
    if present(&e.data).and_then(|p| p.trigger).is_none() {
        return Ok(());
    }
    let old: TriggeredTurnStart = strict(e, id, event::TURN_START)?;
    if old.turn < 1 || old.trigger.kind.is_empty() {
        let why = "the turn must be 1 or more and the trigger's kind not empty";
        return Err(malformed(id, event::TURN_START, e.seq, why));
    }
    e.data = written(&TurnStart::new(old.turn))?;
    Ok(())
}

/// `turn/end` as both vocabularies write it: exactly the turn and its
/// reason, read as `R`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, bound = "R: DeserializeOwned")]
struct StoredTurnEnd<R> {
    turn: u64,
    #[serde(deserialize_with = "fields::object")]
    reason: R,
}

/// A reason's kind, and which of the fields that tell old from current it
/// has.
#[derive(Deserialize)]
struct ReasonKind {
    kind: String,
    #[serde(default, deserialize_with = "fields::present")]
    reason: Option<IgnoredAny>,
    #[serde(default, deserialize_with = "fields::present")]
    error: Option<IgnoredAny>,
    #[serde(default, deserialize_with = "fields::present")]
    failure: Option<IgnoredAny>,
}

/// A reason that is its kind alone.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KindAlone {
    #[serde(rename = "kind")]
    _kind: IgnoredAny,
}

/// An old `error` reason carrying the failure record of its step.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FailedStep {
    #[serde(rename = "kind")]
    _kind: IgnoredAny,
    #[serde(rename = "step")]
    _step: u64,
    #[serde(deserialize_with = "fields::object")]
    failure: OldFailure,
}

/// The failure record of an old reason: [`LlmFailure`]'s fields, nothing
/// else (an optional one, when there, not `null`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct OldFailure {
    message: String,
    code: String,
    #[serde(default, deserialize_with = "fields::present")]
    status: Option<u16>,
    #[serde(default, deserialize_with = "fields::present")]
    provider_retry_after_ms: Option<u64>,
    #[serde(default, deserialize_with = "fields::present")]
    request_id: Option<String>,
}

impl From<OldFailure> for LlmFailure {
    fn from(old: OldFailure) -> LlmFailure {
        LlmFailure {
            message: old.message,
            code: old.code,
            status: old.status,
            provider_retry_after_ms: old.provider_retry_after_ms,
            request_id: old.request_id,
        }
    }
}

/// An old `error` reason carrying what its step threw: a message, and a
/// code when it had one.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ThrownAtStep {
    #[serde(rename = "kind")]
    _kind: IgnoredAny,
    #[serde(rename = "step")]
    _step: u64,
    message: String,
    #[serde(default, deserialize_with = "fields::present")]
    code: Option<String>,
}

/// An older `turn/end` reason mapped to the current one: `aborted` without
/// a cause → `aborted {legacy}`, `disposed` → `aborted {disposed}`, an
/// `error` with a `failure` or a `message` → `error {error}`. Every
/// `turn/end` that is an object must be exactly `{turn, reason}`, and a
/// reason of a known kind exactly its shape; another kind is kept as it is.
fn migrate_turn_end(e: &mut SessionEvent, id: &str) -> Result<(), String> {
    if present(&e.data).is_none() {
        // Not an object: not a record this import reads.
        return Ok(());
    }
    let what = event::TURN_END;
    let stored: StoredTurnEnd<ReasonKind> = strict(e, id, what)?;
    if stored.turn < 1 {
        return Err(malformed(id, what, e.seq, "the turn must be 1 or more"));
    }
    let reason = &stored.reason;
    let current = match reason.kind.as_str() {
        turn_end_kind::COMPLETED
        | turn_end_kind::BLOCKED
        | turn_end_kind::MAX_TOKENS
        | turn_end_kind::INTERRUPTED => {
            strict::<StoredTurnEnd<KindAlone>>(e, id, what)?;
            return Ok(());
        }
        turn_end_kind::ABORTED if reason.reason.is_some() => return Ok(()),
        turn_end_kind::ABORTED => {
            strict::<StoredTurnEnd<KindAlone>>(e, id, what)?;
            TurnEndReason::Aborted {
                reason: CancelCause::Legacy,
            }
        }
        DISPOSED => {
            strict::<StoredTurnEnd<KindAlone>>(e, id, what)?;
            TurnEndReason::Aborted {
                reason: CancelCause::Disposed,
            }
        }
        turn_end_kind::ERROR if reason.error.is_some() => return Ok(()),
        turn_end_kind::ERROR if reason.failure.is_some() => {
            let old: StoredTurnEnd<FailedStep> = strict(e, id, what)?;
            TurnEndReason::Error {
                error: old.reason.failure.into(),
            }
        }
        turn_end_kind::ERROR => {
            let old: StoredTurnEnd<ThrownAtStep> = strict(e, id, what)?;
            let code = old.reason.code.as_deref().unwrap_or(codes::UNKNOWN);
            TurnEndReason::Error {
                error: LlmFailure::new(code, old.reason.message),
            }
        }
        _ => return Ok(()),
    };
    e.data = written(&TurnEnd::new(stored.turn, current))?;
    Ok(())
}

/// A `steering/message` wrapping the message it steered with.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WrappedSteering {
    #[serde(rename = "turn")]
    _turn: u64,
    /// Kept as its text: it becomes the `user/message` as it is.
    message: LazyJson,
}

/// A flat `steering/message` of before message identities.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FlatSteering {
    #[serde(rename = "turn")]
    _turn: u64,
    content: Vec<ContentBlock>,
    source: MessageSource,
}

/// A removed `steering/message` becomes the same identified `user/message`
/// (a wrapped message verbatim; a flat one gets the legacy id).
fn migrate_steering(e: &mut SessionEvent, id: &str) -> Result<(), String> {
    let what = STEERING_MESSAGE;
    let Some(fields) = present(&e.data) else {
        return Err(malformed(id, what, e.seq, "its data is not an object"));
    };
    e.data = if fields.message.is_some() {
        let wrapped: WrappedSteering = strict(e, id, what)?;
        if present(&wrapped.message).is_none() {
            let why = "at `message`: not an object";
            return Err(malformed(id, what, e.seq, why));
        }
        wrapped.message
    } else {
        let flat: FlatSteering = strict(e, id, what)?;
        let message = Message::user(legacy_message_id(id, e.seq), flat.content, flat.source);
        written(&message)?
    };
    e.kind = event::USER_MESSAGE.into();
    Ok(())
}

/// A `user/message` of before message identities: the message without
/// `id` and `role`.
#[derive(Deserialize)]
struct PreIdentityUser {
    content: Vec<ContentBlock>,
    source: MessageSource,
    #[serde(flatten)]
    extra: Extra,
}

/// An `assistant/message` of before message identities: the message's
/// content and its model (`provenance`) beside the step's fields.
#[derive(Deserialize)]
struct PreIdentityAssistant {
    turn: u64,
    step: u64,
    content: Vec<ContentBlock>,
    #[serde(deserialize_with = "fields::object")]
    provenance: ModelSource,
    #[serde(default)]
    usage: Option<TokenUsage>,
    #[serde(default)]
    interrupted: Option<bool>,
    #[serde(flatten)]
    extra: Extra,
}

/// A `tool/result` of before message identities: the call's result as
/// flat fields.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PreIdentityToolResult {
    turn: u64,
    step: u64,
    call_id: String,
    content: Vec<ContentBlock>,
    is_error: bool,
    #[serde(default)]
    error: Option<ToolErrorRef>,
    /// The tool's presentation metadata: its own shape, kept as it is
    /// (`ToolResult::meta`).
    #[serde(default, deserialize_with = "fields::present")]
    meta: Option<serde_json::Value>,
    #[serde(flatten)]
    extra: Extra,
}

/// A pre-identity message event in the current wrapper shape. Only an
/// object without the current message's keys is read further; one that
/// reads as no old shape either is left for the shape check to judge.
fn migrate_message(
    e: &mut SessionEvent,
    id: &str,
    ids: &HashMap<u64, String>,
) -> Result<(), String> {
    let Some(fields) = present(&e.data) else {
        return Ok(());
    };
    let legacy_id = legacy_message_id(id, e.seq);
    e.data = match e.kind.as_str() {
        event::USER_MESSAGE if fields.id.is_none() && fields.role.is_none() => {
            if fields.message.is_some() {
                return Ok(());
            }
            let Ok(old) = e.data.parse::<PreIdentityUser>() else {
                return Ok(());
            };
            let mut message = Message::user(legacy_id, old.content, old.source);
            message.extra = old.extra;
            written(&message)?
        }
        event::ASSISTANT_MESSAGE if fields.message.is_none() => {
            let Ok(old) = e.data.parse::<PreIdentityAssistant>() else {
                return Ok(());
            };
            let mut source = old.provenance;
            // The tag is the source's own (`model`), whatever the
            // provenance said.
            source.extra.shift_remove("kind");
            let mut message = Message::assistant(legacy_id, old.content, "", "");
            message.source = MessageSource::Model(source);
            written(&AssistantMessage {
                turn: old.turn,
                step: old.step,
                message,
                usage: old.usage,
                interrupted: old.interrupted,
                extra: old.extra,
            })?
        }
        event::TOOL_RESULT if fields.message.is_none() => {
            let Ok(old) = e.data.parse::<PreIdentityToolResult>() else {
                return Ok(());
            };
            // A content replacement keeps the id of the result it
            // replaces; without one it stays unidentified (and refused).
            let message_id = match replacement_start(e) {
                None => legacy_id,
                Some(start) => match ids.get(&start) {
                    Some(target) => target.clone(),
                    None => return Ok(()),
                },
            };
            written(&ToolResult {
                turn: old.turn,
                step: old.step,
                message: Message::tool_result(message_id, old.call_id, old.content, old.is_error),
                error: old.error,
                meta: old.meta,
                extra: old.extra,
            })?
        }
        _ => return Ok(()),
    };
    Ok(())
}

/// The seq a replacement's `surfaceOp` starts at.
fn replacement_start(e: &SessionEvent) -> Option<u64> {
    match e.surface_op.as_ref().and_then(SurfaceOp::of)? {
        SurfaceOp::Replace { start, .. } => Some(start),
        SurfaceOp::Append => None,
    }
}

/// The id of the identified message a validated event carries, read
/// without the rest of the message.
fn message_id(e: &SessionEvent) -> Option<String> {
    #[derive(Deserialize)]
    struct Id {
        id: Option<String>,
    }
    #[derive(Deserialize)]
    struct Wrapped {
        message: Option<Id>,
    }
    match e.kind.as_str() {
        event::USER_MESSAGE => e.data.parse::<Id>().ok()?.id,
        _ => e.data.parse::<Wrapped>().ok()?.message?.id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// The events of `(kind, data)` at seqs from 0, as a log holds them
    /// (unread text).
    fn log(events: &[(&str, Value)]) -> Vec<SessionEvent> {
        events
            .iter()
            .zip(0..)
            .map(|((kind, data), seq)| {
                let line = json!({"type": kind, "seq": seq, "time": 1, "data": data});
                serde_json::from_str(&line.to_string()).unwrap()
            })
            .collect()
    }

    fn texts(events: &[SessionEvent]) -> Vec<String> {
        events.iter().map(|e| e.data.text().into_owned()).collect()
    }

    #[test]
    fn old_lifecycle_records_become_the_current_ones() {
        let events = log(&[
            (
                "turn/start",
                json!({"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}}),
            ),
            (
                "turn/end",
                json!({"turn": 1, "reason": {"kind": "aborted"}}),
            ),
            (
                "turn/end",
                json!({"turn": 2, "reason": {"kind": "disposed"}}),
            ),
            (
                "turn/end",
                json!({"turn": 3, "reason": {"kind": "error", "step": 0, "failure": {"code": "RATE_LIMIT", "message": "m", "status": 429}}}),
            ),
            (
                "turn/end",
                json!({"turn": 4, "reason": {"kind": "error", "step": 1, "message": "thrown"}}),
            ),
            (
                "turn/end",
                json!({"turn": 5, "reason": {"kind": "completed"}}),
            ),
            (
                "turn/end",
                json!({"turn": 6, "reason": {"kind": "handed-off", "to": "x"}}),
            ),
        ]);
        let events = import("s", events).unwrap();
        assert_eq!(
            texts(&events),
            [
                r#"{"turn":1}"#,
                r#"{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"legacy"}}}"#,
                r#"{"turn":2,"reason":{"kind":"aborted","reason":{"kind":"disposed"}}}"#,
                r#"{"turn":3,"reason":{"kind":"error","error":{"message":"m","code":"RATE_LIMIT","status":429}}}"#,
                r#"{"turn":4,"reason":{"kind":"error","error":{"message":"thrown","code":"UNKNOWN"}}}"#,
                r#"{"turn":5,"reason":{"kind":"completed"}}"#,
                r#"{"turn":6,"reason":{"kind":"handed-off","to":"x"}}"#,
            ]
        );
        assert!(
            !events[5].data.is_parsed() && !events[6].data.is_parsed(),
            "a current record is kept as its text"
        );
    }

    #[test]
    fn an_old_record_off_its_shape_is_refused_naming_the_field() {
        for (kind, data, needle) in [
            (
                "turn/start",
                json!({"turn": 1, "trigger": null}),
                "turn/start at seq 0: at `trigger`",
            ),
            (
                "turn/start",
                json!({"turn": 0, "trigger": {"kind": "retry"}}),
                "turn/start at seq 0: the turn must be 1 or more",
            ),
            (
                "turn/end",
                json!({"turn": 1, "reason": {"kind": "error", "step": 1, "failure": {"message": "m", "code": "C", "status": null}}}),
                "turn/end at seq 0: at `reason.failure.status`",
            ),
            (
                "turn/end",
                json!({"turn": 1, "reason": {"kind": "disposed", "by": "x"}}),
                "turn/end at seq 0: at `reason.by`: unknown field `by`",
            ),
            (
                "turn/end",
                json!({"turn": 1, "reason": {"kind": "completed"}, "step": 1}),
                "turn/end at seq 0: at `step`: unknown field `step`",
            ),
            (
                "steering/message",
                json!({"turn": 1, "message": [1]}),
                "steering/message at seq 0: at `message`: not an object",
            ),
            (
                "steering/message",
                json!({"turn": 1, "content": [], "source": {"kind": "user"}, "extra": true}),
                "steering/message at seq 0: at `extra`: unknown field `extra`",
            ),
        ] {
            let err = import("s", log(&[(kind, data.clone())]))
                .err()
                .unwrap_or_else(|| panic!("{data} was taken"));
            assert!(err.contains("malformed pre-react-loop"), "{err}");
            assert!(err.contains(needle), "{needle}: {err}");
        }
    }

    #[test]
    fn pre_identity_messages_get_legacy_ids_and_the_current_wrapper() {
        let mut events = log(&[
            (
                "steering/message",
                json!({"turn": 1, "content": [{"type": "text", "text": "s"}], "source": {"kind": "user"}}),
            ),
            (
                "user/message",
                json!({"content": [{"type": "text", "text": "u"}], "source": {"kind": "user"}, "note": 1}),
            ),
            (
                "assistant/message",
                json!({"turn": 1, "step": 1, "content": [], "provenance": {"provider": "p", "model": "m", "kind": "x"}, "usage": {"inputTokens": 1, "outputTokens": 2}}),
            ),
            (
                "tool/result",
                json!({"turn": 1, "step": 1, "callId": "c", "content": [{"type": "text", "text": "full"}], "isError": false}),
            ),
            (
                "tool/result",
                json!({"turn": 1, "step": 1, "callId": "c", "content": [], "isError": false}),
            ),
            (
                "steering/message",
                json!({"turn": 1, "message": {"id": "w", "role": "user", "content": [], "source": {"kind": "user"}}}),
            ),
        ]);
        events[4].surface_op = Some(json!({"op": "replace", "start": 3, "end": 3}));
        let events = import("s", events).unwrap();
        assert_eq!(
            texts(&events),
            [
                r#"{"id":"legacy-message:s:0","role":"user","content":[{"type":"text","text":"s"}],"source":{"kind":"user"}}"#,
                r#"{"id":"legacy-message:s:1","role":"user","content":[{"type":"text","text":"u"}],"source":{"kind":"user"},"note":1}"#,
                r#"{"turn":1,"step":1,"message":{"id":"legacy-message:s:2","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}},"usage":{"inputTokens":1,"outputTokens":2}}"#,
                r#"{"turn":1,"step":1,"message":{"id":"legacy-message:s:3","role":"user","content":[{"type":"tool-result","toolCallId":"c","content":[{"type":"text","text":"full"}],"isError":false}],"source":{"kind":"tool","callId":"c"}}}"#,
                r#"{"turn":1,"step":1,"message":{"id":"legacy-message:s:3","role":"user","content":[{"type":"tool-result","toolCallId":"c","content":[],"isError":false}],"source":{"kind":"tool","callId":"c"}}}"#,
                r#"{"id":"w","role":"user","content":[],"source":{"kind":"user"}}"#,
            ]
        );
        assert_eq!(events[0].kind, "user/message");
        assert_eq!(events[5].kind, "user/message");
    }

    #[test]
    fn a_message_of_neither_shape_is_judged_by_the_shape_check() {
        for (kind, data) in [
            // No provenance: not the old shape, not the current one.
            (
                "assistant/message",
                json!({"turn": 1, "step": 1, "content": []}),
            ),
            // Content that is no list of blocks.
            (
                "user/message",
                json!({"content": "not blocks", "source": {"kind": "user"}}),
            ),
        ] {
            let err = import("s", log(&[(kind, data)])).unwrap_err();
            assert_eq!(
                err,
                format!("stored {kind} at seq 0 lacks an identified message")
            );
        }
        let mut orphan = log(&[(
            "tool/result",
            json!({"turn": 1, "step": 1, "callId": "c", "content": [], "isError": false}),
        )]);
        orphan[0].surface_op = Some(json!({"op": "replace", "start": 7, "end": 7}));
        assert_eq!(
            import("s", orphan).unwrap_err(),
            "stored tool/result at seq 0 lacks an identified message"
        );
    }

    #[test]
    fn data_already_read_into_a_tree_upgrades_the_same() {
        let data = json!({"turn": 1, "message": {"id": "w", "role": "user", "content": [], "source": {"kind": "user"}}});
        let mut e = SessionEvent::new(STEERING_MESSAGE, 0, data);
        e.surface_op = Some(json!("append"));
        let events = import("s", vec![e]).unwrap();
        assert_eq!(
            events[0].data,
            json!({"id": "w", "role": "user", "content": [], "source": {"kind": "user"}})
        );
    }
}
