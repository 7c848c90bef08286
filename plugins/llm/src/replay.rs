//! Replay state stays with the adapter instance that made it (the
//! original's `forAdapter`). An assistant message's `source.replayState` is
//! opaque data its adapter left for itself (a provider's reasoning
//! signature, say); sent to another adapter it would be misread, so before
//! a request reaches its adapter, the state of every assistant message
//! whose route is served by another adapter instance is removed. The
//! history is raw text here: only a message whose text mentions
//! `replayState` is parsed.

use dsh_sdk::vocab::{Message, MessageSource};
use serde_json::value::RawValue;

/// `messages` (the request's history, a JSON array) with the replay state
/// of other adapters' messages removed; `None` when nothing changes.
/// `same_adapter(provider)` says whether `provider` is served by the
/// adapter the request goes to.
pub fn for_adapter(
    messages: &RawValue,
    same_adapter: impl Fn(&str) -> bool,
) -> serde_json::Result<Option<Box<RawValue>>> {
    if !messages.get().contains("\"replayState\"") {
        return Ok(None);
    }
    let items: Vec<&RawValue> = serde_json::from_str(messages.get())?;
    let mut changed = false;
    let mut out: Vec<Box<RawValue>> = Vec::with_capacity(items.len());
    for item in items {
        let kept = || RawValue::from_string(item.get().to_owned());
        if !item.get().contains("\"replayState\"") {
            out.push(kept()?);
            continue;
        }
        let mut message: Message = serde_json::from_str(item.get())?;
        match &mut message.source {
            MessageSource::Model(model)
                if model.replay_state.is_some() && !same_adapter(&model.provider) =>
            {
                model.replay_state = None;
                changed = true;
                out.push(serde_json::value::to_raw_value(&message)?);
            }
            _ => out.push(kept()?),
        }
    }
    if !changed {
        return Ok(None);
    }
    serde_json::value::to_raw_value(&out).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn replay_state_is_kept_only_for_the_same_adapter_instance() {
        let history = raw(concat!(
            r#"[{"id":"u","role":"user","content":[],"source":{"kind":"user"}},"#,
            r#"{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"mine","model":"m","replayState":{"sig":1}}},"#,
            r#"{"id":"b","role":"assistant","content":[],"source":{"kind":"model","provider":"theirs","model":"m","replayState":{"sig":2}}}]"#
        ));
        let same = |p: &str| p == "mine";
        let filtered = for_adapter(&history, same).unwrap().unwrap();
        let v: serde_json::Value = serde_json::from_str(filtered.get()).unwrap();
        assert_eq!(v[1]["source"]["replayState"], serde_json::json!({"sig": 1}));
        assert_eq!(
            v[2]["source"],
            serde_json::json!({"kind": "model", "provider": "theirs", "model": "m"}),
            "another adapter's state is removed, the rest of the source kept"
        );
        assert_eq!(
            v[0],
            serde_json::json!({"id":"u","role":"user","content":[],"source":{"kind":"user"}})
        );
        // Everything served by the same adapter: the history is not touched.
        assert!(for_adapter(&history, |_| true).unwrap().is_none());
        let plain = raw(r#"[{"id":"u","role":"user","content":[],"source":{"kind":"user"}}]"#);
        assert!(for_adapter(&plain, |_| false).unwrap().is_none());
    }
}
