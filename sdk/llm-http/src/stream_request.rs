//! The harness request (`llm-adapter.stream` params) as every adapter
//! reads it; other fields pass by. The history stays as the JSON texts the
//! messages were logged as, read only where a session's previous request
//! did not carry the same text ([`crate::conversion`]); the tool list stays
//! text too, converted once per distinct list.
//!
//! The fields only some wires take (`stop`, `purpose`) are kept as sent
//! and read by the adapter that uses them ([`StreamRequest::stop`],
//! [`StreamRequest::purpose`]): a wire without them never reads them.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Number;

/// The harness request, as the adapters read it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamRequest {
    /// The model asked for; the route's when absent or empty
    /// ([`StreamRequest::model_or`]).
    #[serde(default)]
    pub model: Option<String>,
    /// The history: each message as the JSON text it was logged as.
    #[serde(default)]
    pub messages: Vec<Box<RawValue>>,
    /// The system prompt.
    #[serde(default)]
    pub system: Option<String>,
    /// The tool schemas (`[{name, description, parameters}]`), as their
    /// text ([`crate::conversion::Converter::tools`]).
    #[serde(default)]
    pub tools: Option<Box<RawValue>>,
    /// The output cap.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// The reasoning effort.
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    /// Passed on as written (a `Number` keeps `1` and `1.0` apart).
    #[serde(default)]
    pub temperature: Option<Number>,
    /// The session, whose conversions are kept for its next request (and
    /// which some wires send: a header, `prompt_cache_key`).
    #[serde(default)]
    pub session_id: Option<String>,
    /// The stop sequences, as sent ([`StreamRequest::stop`]).
    #[serde(default)]
    stop: Option<Box<RawValue>>,
    /// An auxiliary call's purpose (`compaction`...), as sent
    /// ([`StreamRequest::purpose`]).
    #[serde(default)]
    purpose: Option<Box<RawValue>>,
}

/// The sequences that stop the model: one, or several (sent on as
/// written).
#[derive(Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Stop {
    /// One sequence.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl Stop {
    /// The sequences, in order.
    pub fn sequences(&self) -> Vec<&str> {
        match self {
            Stop::One(s) => vec![s.as_str()],
            Stop::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

impl StreamRequest {
    /// The model asked for, or `default` (the route's) when none is.
    pub fn model_or<'a>(&'a self, default: &'a str) -> &'a str {
        self.model
            .as_deref()
            .filter(|m| !m.is_empty())
            .unwrap_or(default)
    }

    /// The stop sequences, read for a wire that takes them; `None` when
    /// none were sent (or `null`).
    pub fn stop(&self) -> serde_json::Result<Option<Stop>> {
        self.stop
            .as_deref()
            .map(|raw| serde_json::from_str(raw.get()))
            .transpose()
    }

    /// The call's purpose, read for a wire that uses it; `None` when none
    /// was sent (or `null`).
    pub fn purpose(&self) -> serde_json::Result<Option<String>> {
        self.purpose
            .as_deref()
            .map(|raw| serde_json::from_str(raw.get()))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> StreamRequest {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn the_model_falls_back_to_the_routes_when_absent_or_empty() {
        assert_eq!(read(r#"{"model":"m"}"#).model_or("d"), "m");
        assert_eq!(read(r#"{"model":""}"#).model_or("d"), "d");
        assert_eq!(read("{}").model_or("d"), "d");
    }

    #[test]
    fn stop_and_purpose_are_read_by_the_wire_that_takes_them() {
        let r = read(r#"{"stop":["x","y"],"purpose":"compaction","other":{"a":1}}"#);
        assert_eq!(r.stop().unwrap().unwrap().sequences(), ["x", "y"]);
        assert_eq!(r.purpose().unwrap().as_deref(), Some("compaction"));
        let r = read(r#"{"stop":"end","purpose":null}"#);
        assert_eq!(r.stop().unwrap().unwrap().sequences(), ["end"]);
        assert_eq!(r.purpose().unwrap(), None);
        // A stop of another shape reads only where it is read.
        let odd = read(r#"{"stop":5,"purpose":7}"#);
        assert!(odd.stop().is_err() && odd.purpose().is_err());
        assert!(read("{}").stop().unwrap().is_none());
    }
}
