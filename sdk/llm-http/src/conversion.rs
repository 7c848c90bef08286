//! The history of a request converted to a wire without re-encoding it:
//! each harness message is read and converted once, and later requests of
//! the same session reuse the conversion of every message they share with
//! the previous one (compared by the message's logged JSON text). The tool
//! list is converted once per distinct list the same way.
//!
//! [`Converter`] is generic over what one message becomes (`W`): the
//! chat-completions adapter's list of wire messages, the Messages
//! adapter's role and blocks, the Responses adapter's input items. It
//! keeps the conversions of the last [`SESSIONS_KEPT`] sessions (the least
//! recently used goes); a request without a session id keeps none.
//!
//! The harness's side of a request that every wire reads the same way is
//! here too: a tool as the request lists it ([`ToolIn`]), a tool
//! result's text ([`result_text`]) and an image these wires do not send
//! ([`IMAGE_OMITTED`]).

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;

use dsh_sdk::vocab::message::ToolResultBlock;
use dsh_sdk::vocab::{ContentBlock, Message};
use serde::Deserialize;
use serde_json::value::RawValue;

/// How many sessions keep their conversions (the least recently used goes).
pub const SESSIONS_KEPT: usize = 16;

/// The text of a tool result that returned none (the Messages API refuses
/// an empty one; the others are told the same).
pub const NO_OUTPUT: &str = "(no output)";

/// What stands in the text for an image: no adapter here sends images,
/// and an image left out without a word would leave the model thinking
/// the user (or the tool) sent nothing.
pub const IMAGE_OMITTED: &str = "[image omitted: this route does not send images]";

/// Why a request could not become a body: which part (`message 3`, `the
/// tools`, `the body`...), and why.
#[derive(Debug)]
pub struct ConvertError {
    part: String,
    error: String,
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.part, self.error)
    }
}

impl std::error::Error for ConvertError {}

impl ConvertError {
    /// Names `part` as what an error is about (for `map_err`).
    pub fn at<E: fmt::Display>(part: impl Into<String>) -> impl FnOnce(E) -> ConvertError {
        let part = part.into();
        move |error| ConvertError {
            part,
            error: error.to_string(),
        }
    }
}

/// A tool as the harness request lists it (`{name, description,
/// parameters}`), borrowed from the request's text.
#[derive(Deserialize)]
pub struct ToolIn<'a> {
    /// Its name.
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    /// What it does.
    #[serde(default, borrow)]
    pub description: Option<Cow<'a, str>>,
    /// The arguments' JSON Schema: open (whatever the tool declares), so
    /// it is passed on as its text.
    #[serde(default, borrow)]
    pub parameters: Option<&'a RawValue>,
}

/// A tool result's text: its text parts joined, each image said where it
/// was ([`IMAGE_OMITTED`], on a line of its own), else [`NO_OUTPUT`].
pub fn result_text(result: &ToolResultBlock) -> Cow<'static, str> {
    let mut text = String::new();
    for block in &result.content {
        match block {
            ContentBlock::Text(t) => text.push_str(&t.text),
            ContentBlock::Image(_) => {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(IMAGE_OMITTED);
                text.push('\n');
            }
            _ => {}
        }
    }
    if text.is_empty() {
        Cow::Borrowed(NO_OUTPUT)
    } else {
        Cow::Owned(text)
    }
}

/// One harness message (its logged text) and what it became on the wire.
pub struct Converted<W> {
    source: Box<RawValue>,
    /// The message on the wire.
    pub wire: W,
}

/// The conversions kept per session, and the last tool list's.
pub struct Converter<W> {
    sessions: RefCell<Vec<(String, Vec<Converted<W>>)>>,
    tools: RefCell<Option<(Box<RawValue>, Box<RawValue>)>>,
}

impl<W> Default for Converter<W> {
    fn default() -> Self {
        Converter {
            sessions: RefCell::default(),
            tools: RefCell::default(),
        }
    }
}

/// `session` when it names one (an empty id keeps nothing).
fn named(session: Option<&str>) -> Option<&str> {
    session.filter(|s| !s.is_empty())
}

impl<W> Converter<W> {
    /// The conversions of `messages` for `session`: reused for the prefix
    /// the session's previous request shares, made with `convert` for the
    /// rest (each message read as a [`Message`] first). The session's
    /// conversions are taken out until [`Converter::keep`] puts them back.
    pub fn messages(
        &self,
        session: Option<&str>,
        messages: Vec<Box<RawValue>>,
        convert: impl Fn(&Message) -> serde_json::Result<W>,
    ) -> Result<Vec<Converted<W>>, ConvertError> {
        let previous = match named(session) {
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
        for (at, source) in messages.into_iter().enumerate() {
            if reusing {
                match previous.next() {
                    Some(c) if c.source.get() == source.get() => {
                        out.push(c);
                        continue;
                    }
                    _ => reusing = false,
                }
            }
            let wire = serde_json::from_str::<Message>(source.get())
                .and_then(|message| convert(&message))
                .map_err(ConvertError::at(format!("message {at}")))?;
            out.push(Converted { source, wire });
        }
        Ok(out)
    }

    /// Keeps `converted` for the next request of `session` (nothing when
    /// the request had no session id), forgetting the least recently used
    /// session past [`SESSIONS_KEPT`].
    pub fn keep(&self, session: Option<&str>, converted: Vec<Converted<W>>) {
        let Some(session) = named(session) else {
            return;
        };
        let mut sessions = self.sessions.borrow_mut();
        if sessions.len() >= SESSIONS_KEPT {
            sessions.remove(0);
        }
        sessions.push((session.to_owned(), converted));
    }

    /// The request's tool list on the wire, made with `convert` unless it
    /// is the list of the last request; `None` when it is empty.
    pub fn tools(
        &self,
        tools: &RawValue,
        convert: impl FnOnce(&[ToolIn<'_>]) -> serde_json::Result<Box<RawValue>>,
    ) -> Result<Option<Box<RawValue>>, ConvertError> {
        if let Some((source, wire)) = &*self.tools.borrow() {
            if source.get() == tools.get() {
                return Ok(Some(wire.clone()));
            }
        }
        let at = ConvertError::at("the tools");
        let list: Vec<ToolIn<'_>> = match serde_json::from_str(tools.get()) {
            Ok(list) => list,
            Err(e) => return Err(at(e)),
        };
        if list.is_empty() {
            return Ok(None);
        }
        let wire = convert(&list).map_err(at)?;
        *self.tools.borrow_mut() = Some((tools.to_owned(), wire.clone()));
        Ok(Some(wire))
    }

    /// How many sessions keep conversions.
    pub fn sessions_kept(&self) -> usize {
        self.sessions.borrow().len()
    }

    /// How many messages' conversions `session` keeps; `None` when it
    /// keeps none.
    pub fn kept_for(&self, session: &str) -> Option<usize> {
        self.sessions
            .borrow()
            .iter()
            .find(|(s, _)| s == session)
            .map(|(_, c)| c.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(v: serde_json::Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&v).unwrap()
    }

    fn user(id: &str, text: &str) -> Box<RawValue> {
        raw(
            json!({"id": id, "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}}),
        )
    }

    /// Converts to the message's id, counting the conversions made.
    fn convert<'a>(
        made: &'a RefCell<Vec<String>>,
    ) -> impl Fn(&Message) -> serde_json::Result<String> + 'a {
        move |m| {
            made.borrow_mut().push(m.id.clone());
            Ok(m.id.clone())
        }
    }

    #[test]
    fn a_later_request_reuses_the_shared_prefix_and_converts_the_rest() {
        let c = Converter::default();
        let made = RefCell::new(Vec::new());
        let first = c
            .messages(
                Some("s"),
                vec![user("1", "a"), user("2", "b")],
                convert(&made),
            )
            .unwrap();
        c.keep(Some("s"), first);
        assert_eq!(c.kept_for("s"), Some(2));
        let second = c
            .messages(
                Some("s"),
                vec![user("1", "a"), user("2", "B"), user("3", "c")],
                convert(&made),
            )
            .unwrap();
        let wire: Vec<&str> = second.iter().map(|c| c.wire.as_str()).collect();
        assert_eq!(wire, ["1", "2", "3"]);
        // The first message was converted once; the changed one and what
        // follows it again.
        assert_eq!(*made.borrow(), ["1", "2", "2", "3"]);
        // Taken out until kept again.
        assert_eq!(c.kept_for("s"), None);
    }

    #[test]
    fn no_session_keeps_nothing_and_sessions_are_bounded() {
        let c: Converter<String> = Converter::default();
        let made = RefCell::new(Vec::new());
        for session in [None, Some("")] {
            let m = c
                .messages(session, vec![user("1", "a")], convert(&made))
                .unwrap();
            c.keep(session, m);
        }
        assert_eq!(c.sessions_kept(), 0);
        for i in 0..(SESSIONS_KEPT + 5) {
            let s = format!("s{i}");
            let m = c
                .messages(Some(&s), vec![user("1", "a")], convert(&made))
                .unwrap();
            c.keep(Some(&s), m);
        }
        assert_eq!(c.sessions_kept(), SESSIONS_KEPT);
        assert_eq!(c.kept_for("s0"), None);
    }

    #[test]
    fn what_does_not_read_is_refused_naming_it() {
        let c: Converter<String> = Converter::default();
        let made = RefCell::new(Vec::new());
        let e = c
            .messages(
                None,
                vec![user("1", "a"), raw(json!({"id": "v"}))],
                convert(&made),
            )
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("message 1: "), "{e}");
        let tools = raw(json!({"name": "t"}));
        let e = c.tools(&tools, |_| unreachable!()).unwrap_err().to_string();
        assert!(e.starts_with("the tools: "), "{e}");
    }

    #[test]
    fn a_results_images_are_said_where_they_were_and_an_empty_one_is_no_output() {
        let result = |content: serde_json::Value| -> ToolResultBlock {
            serde_json::from_value(json!({"toolCallId": "c", "content": content})).unwrap()
        };
        let image = json!({"type": "image", "attachment": {"id": "i"}});
        assert_eq!(
            result_text(&result(json!([image]))),
            format!("{IMAGE_OMITTED}\n")
        );
        assert_eq!(
            result_text(&result(
                json!([{"type": "text", "text": "a"}, image, {"type": "text", "text": "b"}])
            )),
            format!("a\n{IMAGE_OMITTED}\nb")
        );
        assert_eq!(result_text(&result(json!([]))), NO_OUTPUT);
        assert_eq!(
            result_text(&result(
                json!([{"type": "text", "text": "x"}, {"type": "text", "text": "y"}])
            )),
            "xy"
        );
    }

    #[test]
    fn a_tool_list_is_converted_once_and_an_empty_one_is_none() {
        let c: Converter<String> = Converter::default();
        let tools = raw(json!([{"name": "read", "description": "d"}, {"name": "now"}]));
        let calls = RefCell::new(0);
        let convert = |list: &[ToolIn<'_>]| {
            *calls.borrow_mut() += 1;
            let names: Vec<&str> = list.iter().map(|t| t.name.as_ref()).collect();
            serde_json::value::to_raw_value(&names)
        };
        for _ in 0..2 {
            let wire = c.tools(&tools, convert).unwrap().unwrap();
            assert_eq!(wire.get(), r#"["read","now"]"#);
        }
        assert_eq!(*calls.borrow(), 1);
        assert!(c.tools(&raw(json!([])), convert).unwrap().is_none());
    }
}
