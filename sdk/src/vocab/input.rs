//! What a caller hands an agent's inbox: a [`UserInput`], either a full
//! [`Message`] or the `{text}` shorthand.
//!
//! The same form travels wherever a message is put in an inbox: the
//! `agents` sends (`followup`, `steer`, `inject`, `replace`), and the
//! contexts a tool call adds for the next step (a tool's reply, a
//! `tools/execute` wrapper's result, a `tools/post-execute` decision,
//! `tools.deferContext`). Reading it is where it is checked, so a malformed
//! one is refused by whoever reads it first (the tools registry fails that
//! call alone; the agent loop refuses that send), never later when it is
//! queued.

use serde::de::Error as _;
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::message::Message;

/// A message for an agent's inbox as a caller writes it.
///
/// Read from JSON: anything with a `role` is a full message and must then
/// be a well-formed [`Message`] (`the message is not a well-formed
/// message: missing field `source``); otherwise `{text}` (a string) is the
/// shorthand; anything else is refused (`a message needs `role` or
/// `text``). Written back as it was given: the message itself, or `{text}`.
#[derive(Debug, Clone, PartialEq)]
pub enum UserInput {
    /// A full message, queued as it is (its id, source and key order
    /// kept). Boxed: a message is large beside a text.
    Message(Box<Message>),
    /// `{text}`: a user message of this text from the user, with a fresh id
    /// when it is queued ([`UserInput::into_message`]).
    Text(String),
}

impl UserInput {
    /// The `{text}` shorthand.
    pub fn text(text: impl Into<String>) -> UserInput {
        UserInput::Text(text.into())
    }

    /// The message it stands for: the full message, or a user text message
    /// with a fresh id ([`crate::new_id`]).
    pub fn into_message(self) -> Message {
        match self {
            UserInput::Message(m) => *m,
            UserInput::Text(text) => Message::user_text(crate::new_id(), text),
        }
    }
}

impl From<Message> for UserInput {
    fn from(m: Message) -> UserInput {
        UserInput::Message(Box::new(m))
    }
}

/// How the shorthand is written.
#[derive(Serialize)]
struct Shorthand<'a> {
    text: &'a str,
}

impl Serialize for UserInput {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            UserInput::Message(m) => m.serialize(s),
            UserInput::Text(text) => Shorthand { text }.serialize(s),
        }
    }
}

/// What tells the two forms apart: a full message has a `role` (of any
/// value but null); the shorthand has a string `text`.
#[derive(Deserialize)]
struct Form {
    #[serde(default)]
    role: Option<IgnoredAny>,
    #[serde(default)]
    text: Option<String>,
}

impl<'de> Deserialize<'de> for UserInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Read whole first: the form decides how the rest is read. Open
        // JSON only for that moment.
        let input = Value::deserialize(d)?;
        match Form::deserialize(&input) {
            Ok(Form { role: Some(_), .. }) => Message::deserialize(input)
                .map(UserInput::from)
                .map_err(|e| {
                    D::Error::custom(format_args!(
                        "the message is not a well-formed message: {e}"
                    ))
                }),
            Ok(Form {
                text: Some(text), ..
            }) => Ok(UserInput::Text(text)),
            _ => Err(D::Error::custom("a message needs `role` or `text`")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(v: Value) -> Result<UserInput, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn a_full_message_is_kept_as_it_came() {
        let full = json!({"content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"},
                          "role": "user", "id": "m1"});
        let input = read(full.clone()).unwrap();
        assert_eq!(
            serde_json::to_string(&input).unwrap(),
            serde_json::to_string(&full).unwrap(),
            "written back as it came, key order included"
        );
        let m = input.into_message();
        assert_eq!(m.id, "m1");
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            serde_json::to_string(&full).unwrap()
        );
    }

    #[test]
    fn the_text_shorthand_is_a_user_message_with_a_fresh_id() {
        let input = read(json!({"text": "hello"})).unwrap();
        assert_eq!(input, UserInput::text("hello"));
        assert_eq!(
            serde_json::to_string(&input).unwrap(),
            r#"{"text":"hello"}"#
        );
        // A null role is no role.
        assert_eq!(
            read(json!({"role": null, "text": "x"})).unwrap(),
            UserInput::text("x")
        );
        let (a, b) = (input.clone().into_message(), input.into_message());
        assert_eq!((a.text(), a.source.kind()), ("hello".into(), "user"));
        assert!(!a.id.is_empty() && a.id != b.id, "a fresh id each time");
    }

    #[test]
    fn anything_else_is_refused_saying_what_a_message_needs() {
        for (input, message) in [
            (json!({"txt": "x"}), "a message needs `role` or `text`"),
            (json!({"text": 3}), "a message needs `role` or `text`"),
            (json!("hello"), "a message needs `role` or `text`"),
            (json!({}), "a message needs `role` or `text`"),
            (json!(null), "a message needs `role` or `text`"),
            (
                json!({"id": "m", "role": "user", "content": []}),
                "the message is not a well-formed message: missing field `source`",
            ),
            (
                json!({"role": "user"}),
                "the message is not a well-formed message: missing field `id`",
            ),
        ] {
            assert_eq!(read(input.clone()), Err(message.to_owned()), "{input}");
        }
    }

    #[test]
    fn a_refusal_inside_a_list_names_where() {
        #[derive(Debug, Deserialize)]
        #[serde(rename_all = "camelCase")]
        #[allow(dead_code)]
        struct Holder {
            additional_contexts: Vec<UserInput>,
        }
        let v = json!({"additionalContexts": [{"text": "ok"}, {"role": "user"}]});
        let e = serde_path_to_error::deserialize::<_, Holder>(v).unwrap_err();
        assert_eq!(e.path().to_string(), "additionalContexts[1]");
        assert_eq!(
            e.into_inner().to_string(),
            "the message is not a well-formed message: missing field `id`"
        );
    }
}
