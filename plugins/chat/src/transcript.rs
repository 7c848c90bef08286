//! What the chat reads back from the session besides the live events: the
//! last exchange, shown when a session is resumed.

use dsh_sdk::vocab::records::AssistantMessage;
use dsh_sdk::vocab::{event, Message, MessageSource, SessionEvent};
use dsh_sdk::Result;

/// The last prompt the user typed and the last answer of the model, read
/// from `events` (a malformed message is an error naming the event).
pub fn last_exchange(events: &[SessionEvent]) -> Result<(Option<String>, Option<String>)> {
    let mut prompt = None;
    for e in events
        .iter()
        .rev()
        .filter(|e| e.kind == event::USER_MESSAGE)
    {
        let message: Message = e.data_as()?;
        if let MessageSource::User(_) = message.source {
            prompt = Some(message.text());
            break;
        }
    }
    let answer = match events
        .iter()
        .rev()
        .find(|e| e.kind == event::ASSISTANT_MESSAGE)
    {
        Some(e) => Some(e.data_as::<AssistantMessage>()?.message.text()),
        None => None,
    };
    Ok((prompt, answer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use serde_json::Value;

    fn user(seq: u64, text: &str, source: Value) -> SessionEvent {
        let data = json!({"id": format!("u{seq}"), "role": "user",
            "content": [{"type": "text", "text": text}], "source": source});
        SessionEvent::new(event::USER_MESSAGE, seq, data)
    }

    fn answer(seq: u64, text: &str) -> SessionEvent {
        let data = json!({"turn": 1, "step": 1, "message": {"id": "a", "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "source": {"kind": "model", "provider": "p", "model": "m"}}});
        SessionEvent::new(event::ASSISTANT_MESSAGE, seq, data)
    }

    #[test]
    fn the_last_exchange_is_the_users_last_prompt_and_the_last_answer() {
        // A `user/message`'s data is the message itself: read through a
        // `message` field (as before), the prompt was never found.
        let events = [
            user(0, "remember apple", json!({"kind": "user"})),
            answer(1, "Noted."),
            user(2, "<context>", json!({"kind": "plugin", "plugin": "x"})),
        ];
        assert_eq!(
            last_exchange(&events).unwrap(),
            (Some("remember apple".into()), Some("Noted.".into()))
        );
        assert_eq!(last_exchange(&[]).unwrap(), (None, None));
    }

    #[test]
    fn a_malformed_message_or_reason_is_an_error_naming_it() {
        let broken = SessionEvent::new(event::USER_MESSAGE, 4, json!({"role": "user"}));
        let err = last_exchange(&[broken]).unwrap_err();
        assert_eq!(err.code, dsh_sdk::names::code::SESSION_CORRUPT);
        assert!(
            err.message.contains("session event 4 (user/message)"),
            "{}",
            err.message
        );
    }
}
