//! JSON payloads as they cross the boundary: text, parsed only when a
//! plugin reads them.
//!
//! Every call, reply and event carries its payload as JSON text. A hop that
//! only routes or wraps (a registry, a waterfall listener that passes the
//! payload on) forwards that text without parsing it; the plugin that uses
//! the payload parses it once, into its own type ([`Payload::parse`]) or, for
//! code that indexes by hand, into a [`Value`] (on first use, kept).
//! [`RawObject`] splits an object into raw fields, so a hop can read or
//! replace a small field and pass a large one (a history) through untouched.

use std::cell::OnceCell;
use std::fmt;
use std::ops::Deref;

use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// A JSON payload: the text that crossed the boundary, and the [`Value`]
/// parsed from it on first use. Reads through `Deref` (`req.params["id"]`)
/// parse once; [`Payload::parse`] deserializes a type straight from the
/// text; forwarding ([`crate::Service::call_payload`],
/// [`crate::Event::forward`], [`crate::Reply::Payload`]) never parses.
///
/// Text that is not JSON reads as `null` through `Deref` (and is logged);
/// [`Payload::parse`] reports it.
#[derive(Clone, Default)]
pub struct Payload {
    text: String,
    /// The parsed value, and whether the text was JSON (else it reads as
    /// `null`).
    value: OnceCell<(Value, bool)>,
}

impl Payload {
    /// A payload from JSON text as received (the empty text is `null`).
    pub fn from_text(text: impl Into<String>) -> Payload {
        let mut text = text.into();
        if text.is_empty() {
            text.push_str("null");
        }
        Payload {
            text,
            value: OnceCell::new(),
        }
    }

    /// Serializes `v` into a payload, without an intermediate [`Value`].
    pub fn json(v: &impl Serialize) -> serde_json::Result<Payload> {
        Ok(Payload::from_text(serde_json::to_string(v)?))
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The JSON text, owned.
    pub fn into_text(self) -> String {
        self.text
    }

    /// Deserializes `T` from the payload: from the text, or from the
    /// [`Value`] when it was parsed already.
    pub fn parse<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        match self.value.get() {
            Some((v, true)) => T::deserialize(v),
            _ => serde_json::from_str(&self.text),
        }
    }

    /// The payload as a [`Value`], parsed on first use.
    pub fn value(&self) -> &Value {
        &self.value.get_or_init(|| parse_or_null(&self.text)).0
    }

    /// The payload as an owned [`Value`].
    pub fn into_value(self) -> Value {
        self.value
            .into_inner()
            .unwrap_or_else(|| parse_or_null(&self.text))
            .0
    }
}

/// The value of `text`, and whether it was JSON (text that is not reads as
/// `null`, and is logged).
fn parse_or_null(text: &str) -> (Value, bool) {
    match serde_json::from_str(text) {
        Ok(v) => (v, true),
        Err(e) => {
            tracing::warn!("a payload is not JSON ({e}); it reads as null");
            (Value::Null, false)
        }
    }
}

impl Deref for Payload {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value()
    }
}

impl From<Value> for Payload {
    fn from(v: Value) -> Payload {
        Payload {
            text: v.to_string(),
            value: OnceCell::from((v, true)),
        }
    }
}

impl PartialEq<Value> for Payload {
    fn eq(&self, other: &Value) -> bool {
        self.value() == other
    }
}

impl fmt::Display for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Payload({})", self.text)
    }
}

/// Embeds the text as it is (it is checked to be JSON, not parsed into a
/// tree).
impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let raw: &RawValue = serde_json::from_str(&self.text).map_err(serde::ser::Error::custom)?;
        raw.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Payload, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        Ok(Payload::from_text(String::from(raw.get())))
    }
}

/// A JSON object as raw fields in order: each value stays JSON text. A hop
/// that reads one small field or swaps one field parses the object's
/// structure once and copies the rest through.
#[derive(Debug, Clone, Default)]
pub struct RawObject(Vec<(String, Box<RawValue>)>);

impl RawObject {
    /// Removes field `key` and answers its raw value.
    pub fn remove(&mut self, key: &str) -> Option<Box<RawValue>> {
        let at = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(at).1)
    }

    /// The raw value of field `key`.
    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| &**v)
    }

    /// Deserializes field `key`; `None` when it is absent.
    pub fn get_as<T: DeserializeOwned>(&self, key: &str) -> serde_json::Result<Option<T>> {
        self.get(key)
            .map(|raw| serde_json::from_str(raw.get()))
            .transpose()
    }

    /// Sets field `key` (in place when present, else at the end).
    pub fn insert(&mut self, key: &str, value: Box<RawValue>) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.0.push((key.to_owned(), value)),
        }
    }

    /// The object `v` as raw fields; `None` when `v` is not an object.
    pub fn from_value(v: &Value) -> serde_json::Result<Option<RawObject>> {
        let Some(map) = v.as_object() else {
            return Ok(None);
        };
        let mut fields = Vec::with_capacity(map.len());
        for (k, v) in map {
            fields.push((k.clone(), serde_json::value::to_raw_value(v)?));
        }
        Ok(Some(RawObject(fields)))
    }
}

impl Serialize for RawObject {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawObject, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = RawObject;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((k, v)) = map.next_entry::<String, Box<RawValue>>()? {
                    fields.push((k, v));
                }
                Ok(RawObject(fields))
            }
        }
        d.deserialize_map(Fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_payload_reads_parses_and_forwards_its_text() {
        let p = Payload::from_text(r#"{"a":1,"b":[true]}"#);
        assert_eq!(p["a"], 1);
        assert_eq!(p, json!({"a": 1, "b": [true]}));
        #[derive(Deserialize)]
        struct A {
            a: u8,
        }
        assert_eq!(p.parse::<A>().unwrap().a, 1);
        assert_eq!(
            serde_json::to_string(&json!({"x": p})).unwrap(),
            r#"{"x":{"a":1,"b":[true]}}"#
        );
        assert_eq!(Payload::from_text("").as_str(), "null");
    }

    #[test]
    fn text_that_is_not_json_reads_as_null_and_fails_to_parse_or_forward() {
        let p = Payload::from_text("{nope");
        assert!(p.is_null());
        assert!(p.parse::<Value>().is_err());
        assert!(serde_json::to_string(&p).is_err());
    }

    #[test]
    fn a_raw_object_keeps_order_and_text_and_swaps_fields() {
        let mut o: RawObject =
            serde_json::from_str(r#"{"provider":"p","messages":[{"x":1}],"n":2}"#).unwrap();
        let messages = o.remove("messages").unwrap();
        assert_eq!(messages.get(), r#"[{"x":1}]"#);
        assert_eq!(
            o.get_as::<String>("provider").unwrap().as_deref(),
            Some("p")
        );
        assert_eq!(o.get_as::<String>("absent").unwrap(), None);
        o.insert("messages", messages);
        o.insert("n", serde_json::value::to_raw_value(&3).unwrap());
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"provider":"p","n":3,"messages":[{"x":1}]}"#
        );
        let from = RawObject::from_value(&json!({"k": [1, 2]}))
            .unwrap()
            .unwrap();
        assert_eq!(serde_json::to_string(&from).unwrap(), r#"{"k":[1,2]}"#);
        assert!(RawObject::from_value(&json!(1)).unwrap().is_none());
    }
}
