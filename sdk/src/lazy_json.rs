//! JSON kept as the text it arrived as and parsed on first read: the data
//! of a session event.
//!
//! A session crosses several plugins on its way to an agent (the store
//! reads it, `sessions` checks and keeps it, the loop derives a history from
//! it), and most of its events are never read by any of them: chunks,
//! lifecycle records. As a [`LazyJson`], an event's data is checked to be
//! JSON once and copied as text at every hop; only the data somebody reads
//! (a message, a turn number) is parsed, once, and kept.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::OnceLock;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// A JSON value held as its text until it is read. Reads go through
/// `Deref` to a [`Value`] (`data["turn"]`), parsed on the first read and
/// kept; a write (`DerefMut`) drops the text, so what is serialized is
/// always what is read. Serializing an unread value copies its text as it
/// came, byte for byte.
#[derive(Default, Clone)]
pub struct LazyJson {
    /// The text as it came; `None` once built from a value or written.
    raw: Option<Box<RawValue>>,
    /// The value, parsed on first read (or given).
    value: OnceLock<Value>,
}

impl LazyJson {
    /// `text` when it is JSON.
    pub fn from_text(text: impl Into<String>) -> serde_json::Result<LazyJson> {
        Ok(LazyJson {
            raw: Some(RawValue::from_string(text.into())?),
            value: OnceLock::new(),
        })
    }

    /// The JSON text (serialized again when the value was built or
    /// written here).
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match &self.raw {
            Some(raw) => std::borrow::Cow::Borrowed(raw.get()),
            None => std::borrow::Cow::Owned(self.value().to_string()),
        }
    }

    /// The text as it came, while it was neither parsed nor written.
    pub fn unread_text(&self) -> Option<&str> {
        match (self.value.get(), &self.raw) {
            (None, Some(raw)) => Some(raw.get()),
            _ => None,
        }
    }

    /// Whether the value was parsed (or given) already.
    pub fn is_parsed(&self) -> bool {
        self.value.get().is_some()
    }

    /// The value, parsed on first use.
    pub fn value(&self) -> &Value {
        self.value.get_or_init(|| parse(self.raw.as_deref()))
    }

    /// The owned value.
    pub fn into_value(self) -> Value {
        let LazyJson { raw, value } = self;
        value.into_inner().unwrap_or_else(|| parse(raw.as_deref()))
    }

    /// Whether the value is lossless JSON ([`crate::vocab::lossless`]: no
    /// `-0`, nothing out of range). Unread text is checked as text, so
    /// this does not parse it.
    pub fn is_lossless(&self) -> bool {
        match (self.value.get(), &self.raw) {
            (None, Some(raw)) => text_is_lossless(raw.get()),
            _ => crate::vocab::lossless(self.value()),
        }
    }

    /// Deserializes `T`: from the text, or from the value when it was
    /// parsed already.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        match (self.value.get(), &self.raw) {
            (None, Some(raw)) => serde_json::from_str(raw.get()),
            _ => T::deserialize(self.value()),
        }
    }
}

impl LazyJson {
    /// Deserializes `T` like [`LazyJson::parse`], and on failure names the
    /// path of the field at fault (`message.content[0].text`; `.` for the
    /// root).
    pub fn parse_at<T: serde::de::DeserializeOwned>(
        &self,
    ) -> Result<T, (String, serde_json::Error)> {
        let located = match (self.value.get(), &self.raw) {
            (None, Some(raw)) => {
                let mut de = serde_json::Deserializer::from_str(raw.get());
                serde_path_to_error::deserialize(&mut de)
            }
            _ => serde_path_to_error::deserialize(self.value()),
        };
        located.map_err(|e| (e.path().to_string(), e.into_inner()))
    }
}

/// The deepest nesting an event's data may have: serde_json refuses to
/// parse deeper JSON (its recursion limit), so data nested deeper
/// would load as text and fail every reader; it is refused where the
/// lossless check runs (append, seed, load), naming the event.
const MAX_DEPTH: usize = 127;

/// [`LazyJson::is_lossless`] of JSON text: every number reads back as
/// itself: not `-0` (serde reads it as the float negative zero), and a
/// decimal or exponent form finite and not negative zero.
fn text_is_lossless(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    let mut depth = 0usize;
    while i < b.len() {
        match b[i] {
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return false;
                }
                i += 1;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                let token = &text[start..i];
                if token == "-0" {
                    return false;
                }
                if token.contains(['.', 'e', 'E']) {
                    match token.parse::<f64>() {
                        Ok(f) if f.is_finite() && !(f == 0.0 && f.is_sign_negative()) => {}
                        _ => return false,
                    }
                }
            }
            _ => i += 1,
        }
    }
    true
}

/// The value of checked JSON text (`null` without text; text past the
/// parser's nesting limit reads as `null` too, and is logged).
fn parse(raw: Option<&RawValue>) -> Value {
    let Some(raw) = raw else {
        return Value::Null;
    };
    serde_json::from_str(raw.get()).unwrap_or_else(|e| {
        tracing::warn!("event data does not parse ({e}); it reads as null");
        Value::Null
    })
}

impl Deref for LazyJson {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value()
    }
}

impl DerefMut for LazyJson {
    fn deref_mut(&mut self) -> &mut Value {
        let value = self
            .value
            .take()
            .unwrap_or_else(|| parse(self.raw.as_deref()));
        self.raw = None;
        self.value.get_or_init(|| value);
        match self.value.get_mut() {
            Some(v) => v,
            None => unreachable!("the value was set just above"),
        }
    }
}

impl From<Value> for LazyJson {
    fn from(v: Value) -> LazyJson {
        LazyJson {
            raw: None,
            value: OnceLock::from(v),
        }
    }
}

impl From<LazyJson> for Value {
    fn from(d: LazyJson) -> Value {
        d.into_value()
    }
}

/// Equal when the values are (the texts may differ in spacing).
impl PartialEq for LazyJson {
    fn eq(&self, other: &LazyJson) -> bool {
        match (&self.raw, &other.raw) {
            (Some(a), Some(b)) if a.get() == b.get() => true,
            _ => self.value() == other.value(),
        }
    }
}

impl PartialEq<Value> for LazyJson {
    fn eq(&self, other: &Value) -> bool {
        self.value() == other
    }
}

impl PartialEq<LazyJson> for Value {
    fn eq(&self, other: &LazyJson) -> bool {
        self == other.value()
    }
}

impl fmt::Debug for LazyJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.value(), f)
    }
}

impl fmt::Display for LazyJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

impl Serialize for LazyJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.raw {
            Some(raw) => raw.serialize(s),
            None => self.value().serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for LazyJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<LazyJson, D::Error> {
        Ok(LazyJson {
            raw: Some(Box::<RawValue>::deserialize(d)?),
            value: OnceLock::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{LazyJson, MAX_DEPTH};
    use serde_json::json;
    use serde_json::Value;

    #[test]
    fn unread_text_is_copied_as_it_came_and_read_once() {
        let d: LazyJson = serde_json::from_str(r#"{"b": 1,  "a":[2]}"#).unwrap();
        assert!(!d.is_parsed());
        assert_eq!(serde_json::to_string(&d).unwrap(), r#"{"b": 1,  "a":[2]}"#);
        assert_eq!(d["a"][0], 2);
        assert!(d.is_parsed());
        assert_eq!(d, json!({"a": [2], "b": 1}));
    }

    #[test]
    fn a_write_is_what_is_serialized_after_it() {
        let mut d: LazyJson = serde_json::from_str(r#"{"turn":1}"#).unwrap();
        d["turn"] = json!(2);
        assert_eq!(serde_json::to_string(&d).unwrap(), r#"{"turn":2}"#);
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v, json!({"turn": 2}));
    }

    #[test]
    fn it_goes_through_a_value_both_ways() {
        let d: LazyJson = serde_json::from_value(json!({"x": [1, "y"]})).unwrap();
        assert_eq!(d["x"][1], "y");
        let back = serde_json::to_value(LazyJson::from(json!({"k": null}))).unwrap();
        assert_eq!(back, json!({"k": null}));
        let raw: LazyJson = serde_json::from_str("[1]").unwrap();
        assert_eq!(serde_json::to_value(&raw).unwrap(), json!([1]));
    }

    #[test]
    fn data_nested_deeper_than_the_parser_reads_is_not_lossless() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let deepest = nested(MAX_DEPTH);
        assert!(
            serde_json::from_str::<Value>(&deepest).is_ok(),
            "the parser reads it"
        );
        assert!(LazyJson::from_text(deepest).unwrap().is_lossless());
        let deeper = LazyJson::from_text(nested(MAX_DEPTH + 1)).unwrap();
        assert!(!deeper.is_lossless());
        // Brackets inside strings do not count.
        let text = format!("[\"{}\"]", "[".repeat(500));
        assert!(LazyJson::from_text(text).unwrap().is_lossless());
    }

    #[test]
    fn losslessness_is_judged_on_the_text_as_on_the_value() {
        for text in [
            r#"{"a": -0.0}"#,
            r#"[1, {"b": -0e3}]"#,
            "1e400",
            r#"{"n": -0.000}"#,
            r#"{"i": -0}"#,
        ] {
            let d: LazyJson = serde_json::from_str(text).unwrap();
            assert!(!d.is_lossless(), "{text}");
        }
        for text in [
            r#"{"a": -1, "s": "-0.0 \" -0.0", "b": 0.0, "c": -1.5e-3, "d": -0.5}"#,
            r#"[null, true, "x", 1.5, -3, 12345678901234567890]"#,
        ] {
            let d: LazyJson = serde_json::from_str(text).unwrap();
            assert!(d.is_lossless(), "{text}");
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            assert!(crate::vocab::lossless(&v), "{text}");
        }
    }

    #[test]
    fn text_that_is_not_json_is_refused() {
        assert!(LazyJson::from_text("{").is_err());
        assert_eq!(LazyJson::from_text("[ 1 ]").unwrap().text(), "[ 1 ]");
    }
}
