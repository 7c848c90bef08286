//! The header record, a log's first line (reference dsh-core §8.3):
//! `{"type":"session", version, id, createdAt, cwd?, parentSession?,
//! seedLength?, origin?, delegationDepth, agentPreset?}`. It is written as
//! [`HeaderRecord`] ([`header_line`]) and read back through the checks the
//! original makes before it reads the header's shape ([`parse_header`]): the
//! tag, the format version (a foreign one is refused first), and the
//! retired fields.

use std::borrow::Cow;

use dsh_sdk::vocab::SessionHeader;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fields;

/// The fields the original retired from the header: a log holding one is
/// refused.
const RETIRED: [&str; 2] = ["sandboxMode", "approvalPolicy"];

/// The header record's `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HeaderTag {
    /// `"session"`, the only header record.
    #[serde(rename = "session")]
    Session,
}

/// The header record as stored: `type` first, then the header's fields in
/// [`SessionHeader`]'s order. `delegationDepth` is required on disk: a
/// header without one is written with 0, after its other fields.
#[derive(Debug, Serialize, Deserialize)]
pub struct HeaderRecord<'a> {
    /// Always [`HeaderTag::Session`].
    #[serde(rename = "type")]
    pub kind: HeaderTag,
    /// The header.
    #[serde(flatten)]
    pub header: Cow<'a, SessionHeader>,
    /// `Some(0)` when the header has no `delegationDepth` of its own (so
    /// the line carries one); never read (the header's own field is).
    #[serde(
        rename = "delegationDepth",
        skip_serializing_if = "Option::is_none",
        skip_deserializing
    )]
    top_level_depth: Option<u64>,
}

impl<'a> HeaderRecord<'a> {
    /// The record of `header`.
    pub fn new(header: &'a SessionHeader) -> HeaderRecord<'a> {
        HeaderRecord {
            kind: HeaderTag::Session,
            top_level_depth: header.delegation_depth.is_none().then_some(0),
            header: Cow::Borrowed(header),
        }
    }
}

/// The header line of `header`, newline included.
pub fn header_line(header: &SessionHeader) -> Result<String, serde_json::Error> {
    let mut line = serde_json::to_string(&HeaderRecord::new(header))?;
    line.push('\n');
    Ok(line)
}

/// What is checked of a header line before it is read as a header, each
/// field as written (any JSON value; `null` when absent): a line is
/// refused for its tag, then its version, then a retired field, and only
/// then for the header's shape, as the original refuses a foreign version
/// before anything else.
#[derive(Deserialize)]
struct HeaderProbe {
    #[serde(rename = "type", default)]
    kind: Value,
    #[serde(default)]
    version: Value,
    #[serde(rename = "sandboxMode", default, deserialize_with = "fields::present")]
    sandbox_mode: Option<IgnoredAny>,
    #[serde(
        rename = "approvalPolicy",
        default,
        deserialize_with = "fields::present"
    )]
    approval_policy: Option<IgnoredAny>,
}

impl HeaderProbe {
    /// Refuses a line that is not a v0 header record without retired
    /// fields.
    fn check(&self) -> Result<(), String> {
        if self.kind.as_str() != Some("session") {
            return Err("the first line is not a session header".into());
        }
        match self.version.as_i64() {
            Some(0) => {}
            Some(v) if v < 0 => {
                return Err(format!(
                    "the log uses format v{v}, older than the supported v0, and this build ships no upgrade path for it"
                ))
            }
            Some(v) => {
                return Err(format!(
                    "the log uses format v{v}, but this harness reads only v0: the log was written by a newer harness — upgrade the harness to open it"
                ))
            }
            None => {
                return Err(format!(
                    "corrupt header: version {} is not an integer",
                    self.version
                ))
            }
        }
        let retired = [&self.sandbox_mode, &self.approval_policy];
        match RETIRED
            .iter()
            .zip(retired)
            .find(|(_, field)| field.is_some())
        {
            Some((field, _)) => Err(format!("retired header field `{field}`")),
            None => Ok(()),
        }
    }
}

/// Reads the header record (a log's first line): a v0 `session` record
/// without retired fields.
pub fn parse_header(line: &str) -> Result<SessionHeader, String> {
    let corrupt = |e: serde_json::Error| format!("corrupt header: {e}");
    // A tree first: a repeated key reads as its last value, and a line that
    // is not an object is told apart before any field is looked at.
    let head: Value = serde_json::from_str(line.trim_end()).map_err(corrupt)?;
    if !head.is_object() {
        return Err("the first line is not a session header".into());
    }
    HeaderProbe::deserialize(&head).map_err(corrupt)?.check()?;
    let record = HeaderRecord::deserialize(head).map_err(corrupt)?;
    Ok(record.header.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> SessionHeader {
        SessionHeader {
            id: "s".into(),
            created_at: 1,
            ..SessionHeader::default()
        }
    }

    #[test]
    fn the_line_is_the_original_s_record_with_a_depth_always() {
        assert_eq!(
            header_line(&header()).unwrap(),
            "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0}\n"
        );
        // A header's own depth stays in its place; a missing one follows
        // every other field.
        let full = SessionHeader {
            cwd: Some("/w".into()),
            delegation_depth: Some(2),
            agent_preset: Some("p".into()),
            ..header()
        };
        assert_eq!(
            header_line(&full).unwrap(),
            "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"cwd\":\"/w\",\"delegationDepth\":2,\"agentPreset\":\"p\"}\n"
        );
        let no_depth = SessionHeader {
            delegation_depth: None,
            ..full.clone()
        };
        let line = header_line(&no_depth).unwrap();
        assert!(
            line.ends_with("\"agentPreset\":\"p\",\"delegationDepth\":0}\n"),
            "{line}"
        );
        assert_eq!(parse_header(&line).unwrap().delegation_depth, Some(0));
        assert_eq!(parse_header(&header_line(&full).unwrap()).unwrap(), full);
    }

    #[test]
    fn retired_header_fields_are_refused() {
        for field in RETIRED {
            let head = format!("{{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0,\"{field}\":\"x\"}}\n");
            assert_eq!(
                parse_header(&head).err(),
                Some(format!("retired header field `{field}`"))
            );
            let null = head.replace("\"x\"", "null");
            assert!(parse_header(&null).is_err(), "a null {field} is there too");
        }
    }

    #[test]
    fn a_foreign_version_is_refused_before_the_header_s_shape() {
        let newer = "{\"type\":\"session\",\"version\":1,\"createdAt\":\"x\"}";
        assert!(parse_header(newer)
            .unwrap_err()
            .contains("the log uses format v1, but this harness reads only v0"));
        let older = "{\"type\":\"session\",\"version\":-1,\"sandboxMode\":1}";
        assert!(parse_header(older)
            .unwrap_err()
            .contains("older than the supported v0"));
        for (line, why) in [
            (
                "{\"type\":\"session\",\"id\":\"s\"}",
                "corrupt header: version null is not an integer",
            ),
            (
                "{\"type\":\"session\",\"version\":1.5}",
                "corrupt header: version 1.5 is not an integer",
            ),
            (
                "{\"type\":\"sessions\",\"version\":0}",
                "the first line is not a session header",
            ),
            ("[\"session\",0]", "the first line is not a session header"),
            (
                "{\"type\":\"session\",\"version\":0,\"createdAt\":1}",
                "corrupt header: missing field `id`",
            ),
            (
                "garbage",
                "corrupt header: expected value at line 1 column 1",
            ),
        ] {
            assert_eq!(parse_header(line).unwrap_err(), why, "{line}");
        }
    }
}
