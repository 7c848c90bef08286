//! Replay state stays with the adapter instance that made it (the
//! original's `forAdapter`). An assistant message's `source.replayState` is
//! opaque data its adapter left for itself (a provider's reasoning
//! signature, say); sent to another adapter it would be misread, so before
//! a request reaches its adapter, the state of every assistant message
//! whose route is served by another adapter instance is removed.
//!
//! The history is raw text here, and most requests change nothing, so the
//! work is kept to what changes: one scan of the text finds where
//! `"replayState"` appears (a history without it is not parsed at all);
//! the list is then split into its messages' texts, borrowed, not copied;
//! only a message whose text holds a mark is read, and only its source's
//! kind, provider and whether it has a state ([`SourceProbe`]). A message
//! is read whole and written back only when its state goes, and a new list
//! is made only then: the messages it does not change are copied into it
//! as their text.

use std::borrow::Cow;

use dsh_sdk::vocab::message::source_kind;
use dsh_sdk::vocab::{Message, MessageSource};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;

/// The key of the replay state, as it appears in a message's text.
const MARK: &str = "\"replayState\"";

/// What of a message decides whether its replay state goes: its source.
/// Everything else is skipped unread.
#[derive(Deserialize)]
struct MessageProbe<'a> {
    #[serde(default, borrow)]
    source: Option<SourceProbe<'a>>,
}

/// A message's source, as far as it decides: its kind, its provider route
/// and whether it has a replay state (`null` is none, as the typed
/// [`dsh_sdk::vocab::message::ModelSource`] reads it).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SourceProbe<'a> {
    #[serde(default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    provider: Option<Cow<'a, str>>,
    #[serde(default)]
    replay_state: Option<IgnoredAny>,
}

/// `messages` (the request's history, a JSON array) with the replay state
/// of other adapters' messages removed; `None` when nothing changes.
/// `same_adapter(provider)` says whether `provider` is served by the
/// adapter the request goes to.
pub fn for_adapter(
    messages: &RawValue,
    same_adapter: impl Fn(&str) -> bool,
) -> serde_json::Result<Option<Box<RawValue>>> {
    let text = messages.get();
    let mut marks = text.match_indices(MARK).map(|(at, _)| at).peekable();
    if marks.peek().is_none() {
        return Ok(None);
    }
    let items: Vec<&RawValue> = serde_json::from_str(text)?;
    let mut changed: Vec<(usize, Box<RawValue>)> = Vec::new();
    for (at, item) in items.iter().enumerate() {
        let Some((start, end)) = span_in(text, item.get()) else {
            // Not a slice of the history (never, as serde_json borrows):
            // looked at on its own.
            if item.get().contains(MARK) {
                changed.extend(stripped(item, &same_adapter)?.map(|m| (at, m)));
            }
            continue;
        };
        while marks.next_if(|&m| m < start).is_some() {}
        if marks.peek().is_some_and(|&m| m < end) {
            changed.extend(stripped(item, &same_adapter)?.map(|m| (at, m)));
        }
    }
    if changed.is_empty() {
        return Ok(None);
    }
    let mut out = items;
    for (at, message) in &changed {
        out[*at] = &**message;
    }
    serde_json::value::to_raw_value(&out).map(Some)
}

/// Where `part` lies in `whole` (byte offsets), when it is a slice of it.
fn span_in(whole: &str, part: &str) -> Option<(usize, usize)> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= whole.len()).then_some((start, end))
}

/// The message `item` without its replay state, when it has another
/// adapter's; `None` when it keeps what it has.
fn stripped(
    item: &RawValue,
    same_adapter: &impl Fn(&str) -> bool,
) -> serde_json::Result<Option<Box<RawValue>>> {
    let probe: MessageProbe<'_> = serde_json::from_str(item.get())?;
    let Some(source) = probe.source else {
        return Ok(None);
    };
    if source.kind.as_deref() != Some(source_kind::MODEL) || source.replay_state.is_none() {
        return Ok(None);
    }
    if source.provider.as_deref().is_some_and(same_adapter) {
        return Ok(None);
    }
    // Another adapter's state (or a model source without a provider, which
    // the typed read refuses): read whole, written back without it.
    let mut message: Message = serde_json::from_str(item.get())?;
    let MessageSource::Model(model) = &mut message.source else {
        return Ok(None);
    };
    model.replay_state = None;
    serde_json::value::to_raw_value(&message).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc_count::allocated_during;

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
        assert_eq!(
            filtered.get(),
            concat!(
                r#"[{"id":"u","role":"user","content":[],"source":{"kind":"user"}},"#,
                r#"{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"mine","model":"m","replayState":{"sig":1}}},"#,
                r#"{"id":"b","role":"assistant","content":[],"source":{"kind":"model","provider":"theirs","model":"m"}}]"#
            ),
            "another adapter's state is removed; the rest kept as it was written"
        );
        // Everything served by the same adapter: the history is not touched.
        assert!(for_adapter(&history, |_| true).unwrap().is_none());
        let plain = raw(r#"[{"id":"u","role":"user","content":[],"source":{"kind":"user"}}]"#);
        assert!(for_adapter(&plain, |_| false).unwrap().is_none());
    }

    #[test]
    fn only_messages_that_mention_the_state_are_read() {
        // A message without the mark is passed on as it is, unread (it is
        // the adapter's to refuse); a null state is no state; the mark in
        // a text is not a state.
        let history = raw(concat!(
            r#"[{"not":"a message"},"#,
            r#"{"id":"a","role":"assistant","content":[{"type":"text","text":"the \"replayState\" key"}],"source":{"kind":"model","provider":"theirs","model":"m","replayState":null}},"#,
            r#"{"id":"b","role":"assistant","content":[],"source":{"kind":"model","provider":"theirs","model":"m","replayState":1}}]"#
        ));
        let filtered = for_adapter(&history, |_| false).unwrap().unwrap();
        let v: serde_json::Value = serde_json::from_str(filtered.get()).unwrap();
        assert_eq!(v[0], serde_json::json!({"not": "a message"}));
        assert!(v[2]["source"].get("replayState").is_none(), "{v}");
        // A message with the mark that is not a message is refused.
        let bad = raw(r#"[{"source":{"kind":"model","replayState":1}}]"#);
        assert!(for_adapter(&bad, |_| false).is_err());
    }

    /// A history of `n` assistant messages of provider `mine`, each with
    /// about 1 KiB of text and a replay state.
    fn long_history(n: usize) -> Box<RawValue> {
        let message = format!(
            r#"{{"id":"a","role":"assistant","content":[{{"type":"text","text":"{}"}}],"source":{{"kind":"model","provider":"mine","model":"m","replayState":{{"sig":"s"}}}}}}"#,
            "t".repeat(1024)
        );
        raw(&format!("[{}]", vec![message; n].join(",")))
    }

    #[test]
    fn a_history_that_keeps_its_state_is_not_copied() {
        let history = long_history(200);
        let (filtered, bytes) = allocated_during(|| for_adapter(&history, |p| p == "mine"));
        assert!(filtered.unwrap().is_none());
        // The list of borrowed message texts, not the messages: a copy of
        // the history would be above 200 KiB.
        assert!(
            bytes < history.get().len() / 10,
            "{bytes} bytes allocated for a history of {}",
            history.get().len()
        );
    }
}
