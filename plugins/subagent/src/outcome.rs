//! How a child's run went, read from how its turn ended and what it
//! logged since the run began; and the notice its parent gets for it
//! (the original's texts, `packages/subagent/subagent/src/continuation.ts`
//! and `lifecycle.ts`).

use dsh_sdk::api::subagents::StopReason;
use dsh_sdk::vocab::message::{ContentBlock, Message, MessageSource, RelaySource};
use dsh_sdk::vocab::records::{AssistantChunk, AssistantMessage, TurnEndReason};
use dsh_sdk::vocab::Chunk;
use dsh_sdk::vocab::{event, SessionEvent};

/// The stop reason of a turn that ended for `reason` (none: the agent
/// went away before its turn ended, as a disposal does).
pub fn stop_reason(reason: Option<&TurnEndReason>) -> StopReason {
    match reason {
        Some(TurnEndReason::Completed) => StopReason::Completed,
        Some(TurnEndReason::Aborted { .. }) | None => StopReason::Aborted,
        Some(TurnEndReason::MaxTokens) => StopReason::MaxTokens,
        Some(TurnEndReason::Blocked) => StopReason::Refusal,
        Some(TurnEndReason::Error { .. } | TurnEndReason::Interrupted) => StopReason::Error,
        Some(TurnEndReason::Other(_)) => StopReason::Abnormal,
    }
}

/// What went wrong, for a turn that failed.
pub fn diagnostic(reason: Option<&TurnEndReason>) -> Option<String> {
    match reason {
        Some(TurnEndReason::Error { error }) => Some(format!("{}: {}", error.code, error.message)),
        Some(TurnEndReason::Interrupted) => Some("the process died mid-turn".to_owned()),
        // The reason's own kind, as the original names an abnormal end.
        Some(TurnEndReason::Other(other)) => Some(
            other
                .get("kind")
                .and_then(|k| k.as_str())
                .unwrap_or("unknown")
                .to_owned(),
        ),
        _ => None,
    }
}

/// The run's final answer: the text of the last assistant message with
/// any text among `events`; when none has any (a run cancelled mid-stream),
/// the text it streamed, so a partial answer is not lost ("" when none).
pub fn final_output(events: &[SessionEvent]) -> String {
    let last = events
        .iter()
        .rev()
        .filter(|e| e.kind == event::ASSISTANT_MESSAGE)
        .filter_map(|e| e.data_as::<AssistantMessage>().ok())
        .map(|m| m.message.text())
        .find(|t| !t.trim().is_empty());
    last.unwrap_or_else(|| streamed_text(events))
}

/// The text deltas among `events`, in order.
fn streamed_text(events: &[SessionEvent]) -> String {
    events
        .iter()
        .filter(|e| e.kind == event::ASSISTANT_CHUNK)
        .filter_map(|e| e.data_as::<AssistantChunk>().ok())
        .filter_map(|c| match c.chunk {
            Chunk::TextDelta { text, .. } => Some(text),
            _ => None,
        })
        .collect()
}

/// The first line of a settlement notice (`diagnostic` names an abnormal
/// end's reason).
pub fn summary(child: &str, stop: StopReason, diagnostic: Option<&str>) -> String {
    let subject = format!("Background subagent {child}");
    match stop {
        StopReason::Completed => {
            format!("{subject} finished and will do no further work unless you send it more.")
        }
        StopReason::Aborted => format!("{subject} was stopped before it finished."),
        StopReason::MaxTokens => format!("{subject} ran out of room before it finished."),
        StopReason::Refusal => format!("{subject} declined the task."),
        StopReason::Error => format!("{subject} failed before it finished."),
        StopReason::Abnormal => format!(
            "{subject} ended abnormally ({}) before it finished.",
            diagnostic.unwrap_or("unknown")
        ),
    }
}

/// The longest a source's `summary` is, in characters (the original's
/// `boundContextSummary`).
const SUMMARY_CHARS: usize = 120;

/// `text` cut to [`SUMMARY_CHARS`] characters, an ellipsis marking a cut.
fn bounded(text: &str) -> String {
    if text.chars().count() <= SUMMARY_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(SUMMARY_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// The notice a parent gets when `child`'s run settles: the summary, then
/// the closing message (or that there was none).
pub fn notice(child: &str, stop: StopReason, diagnostic: Option<&str>, output: &str) -> Message {
    let summary = summary(child, stop, diagnostic);
    let mut content = vec![ContentBlock::text(summary.clone())];
    if output.trim().is_empty() {
        content.push(ContentBlock::text("It left no closing message."));
    } else {
        content.push(ContentBlock::text("Its closing message:"));
        content.push(ContentBlock::text(output));
    }
    let mut source = RelaySource::new(RelaySource::NOTICE, child);
    source.summary = Some(bounded(&summary));
    Message::user(
        dsh_sdk::new_id(),
        content,
        MessageSource::SubagentSettled(source),
    )
}

/// The message a parent gets for `child`'s report.
pub fn report(child: &str, output: &str) -> Message {
    let content = vec![
        ContentBlock::text(format!("Background subagent {child} reported:")),
        ContentBlock::text(output),
    ];
    let source = RelaySource::new(RelaySource::RELAY, child);
    Message::user(
        dsh_sdk::new_id(),
        content,
        MessageSource::SubagentReport(source),
    )
}

/// A parent's message to its child.
pub fn from_parent(parent: &str, text: &str) -> Message {
    let source = RelaySource::new(RelaySource::RELAY, parent);
    Message::user(
        dsh_sdk::new_id(),
        vec![ContentBlock::text(text)],
        MessageSource::Coordinator(source),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn logged(seq: u64, kind: &str, data: serde_json::Value) -> SessionEvent {
        serde_json::from_value(json!({"type": kind, "seq": seq, "time": 0, "data": data})).unwrap()
    }

    #[test]
    fn the_final_output_is_the_last_message_with_text_else_what_was_streamed() {
        let chunk = |seq, text: &str| {
            let data = json!({"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": text}});
            logged(seq, event::ASSISTANT_CHUNK, data)
        };
        let reasoning = logged(
            2,
            event::ASSISTANT_CHUNK,
            json!({"turn": 1, "step": 1, "chunk": {"type": "reasoning-delta", "index": 0, "text": "hmm"}}),
        );
        let cut = [chunk(0, "Half an "), chunk(1, "answer"), reasoning];
        assert_eq!(final_output(&cut), "Half an answer");
        assert_eq!(final_output(&[]), "");
    }

    #[test]
    fn a_notice_says_how_it_ended_and_carries_the_closing_message() {
        let m = notice("kid", StopReason::Completed, None, "all done");
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            v["content"],
            json!([
                {"type": "text", "text": "Background subagent kid finished and will do no further work unless you send it more."},
                {"type": "text", "text": "Its closing message:"},
                {"type": "text", "text": "all done"}
            ])
        );
        assert_eq!(v["source"]["kind"], "subagent-settled");
        assert_eq!(v["source"]["form"], "notice");
        assert_eq!(v["source"]["senderSessionId"], "kid");
        let silent = serde_json::to_value(notice("kid", StopReason::Error, None, " ")).unwrap();
        assert_eq!(silent["content"][1]["text"], "It left no closing message.");
        assert_eq!(
            silent["content"][0]["text"],
            "Background subagent kid failed before it finished."
        );
        let odd = serde_json::json!({"kind": "timeout"});
        let reason: TurnEndReason = serde_json::from_value(odd).unwrap();
        let (stop, why) = (stop_reason(Some(&reason)), diagnostic(Some(&reason)));
        assert_eq!(
            summary("kid", stop, why.as_deref()),
            "Background subagent kid ended abnormally (timeout) before it finished."
        );
    }

    #[test]
    fn a_long_summary_is_bounded() {
        let long = "x".repeat(300);
        let cut = bounded(&long);
        assert_eq!(cut.chars().count(), SUMMARY_CHARS);
        assert!(cut.ends_with('…'));
        assert_eq!(bounded("short"), "short");
    }

    #[test]
    fn the_final_output_is_the_last_assistant_text() {
        let msg = |text: &str| {
            json!({"turn": 1, "step": 1, "message": {"id": "a", "role": "assistant",
                "content": [{"type": "text", "text": text}],
                "source": {"kind": "model", "provider": "p", "model": "m"}}})
        };
        let events = vec![
            SessionEvent::new(event::ASSISTANT_MESSAGE, 1, msg("first")),
            SessionEvent::new(event::ASSISTANT_MESSAGE, 2, msg("second")),
            SessionEvent::new(event::ASSISTANT_MESSAGE, 3, msg("")),
        ];
        assert_eq!(final_output(&events), "second");
        assert_eq!(final_output(&[]), "");
    }
}
