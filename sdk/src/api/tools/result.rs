//! What a call answers: a tool's [`ToolReply`], and the pipeline's
//! [`ToolResult`] made of it (or of a failure: [`ToolError`],
//! [`ErrorInfo`]). Content is typed ([`ContentBlock`]), and so are the
//! contexts a call adds ([`UserInput`]); the `value` and `meta` are each
//! tool's own shapes and stay JSON.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{exactly_true, is_false, nullable, present};
use crate::vocab::input::UserInput;
use crate::vocab::message::ContentBlock;

/// What a tool's `execute` answers: its content, and optionally a
/// canonical value, presentation meta, messages for the next step and a
/// conclusion (`Reply::json(ToolReply::text(&text))`).
///
/// A reply is always a success. A tool fails by returning
/// `Err(Error::new(code, message))` from its handler: the registry makes
/// that the call's [`ToolResult`] (`isError: true`, `error: {message, info:
/// {name: "ToolError", code}}`, one text block `Error: <message>`), which
/// the model sees; the turn goes on. A reply whose content is not a list of
/// content blocks fails the call the same way (`INVALID_PAYLOAD`, naming
/// the field).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolReply {
    /// Content blocks the model sees (absent or `null`: none).
    #[serde(default, deserialize_with = "nullable")]
    pub content: Vec<ContentBlock>,
    /// The canonical value (checked against the tool's output schema).
    /// Open JSON: its shape is the tool's own (declared by its `output`
    /// contract, if any), not the pipeline's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// Presentation meta (logged as `tool/result.meta`); the tool's own
    /// shape, for front-ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// User messages the agent loop queues for the next step, in the
    /// inbox's input form (a message, or the `{text}` shorthand). One that
    /// is neither fails the call (`INVALID_PAYLOAD` naming
    /// `additionalContexts[i]`), not the agent's step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_contexts: Option<Vec<UserInput>>,
    /// The call ends the turn.
    #[serde(
        default,
        deserialize_with = "exactly_true",
        skip_serializing_if = "is_false"
    )]
    pub concludes_turn: bool,
}

impl ToolReply {
    /// A reply of one text block.
    pub fn text(text: &str) -> ToolReply {
        ToolReply {
            content: vec![ContentBlock::text(text)],
            ..ToolReply::default()
        }
    }

    /// A reply of one text block and a canonical value. The value is open
    /// JSON because each tool defines its own (serialize the tool's type
    /// into it: `serde_json::to_value(&MyValue { .. })?`).
    pub fn text_with_value(text: &str, value: Value) -> ToolReply {
        ToolReply {
            value: Some(value),
            ..ToolReply::text(text)
        }
    }
}

/// A result of the pipeline (what `execute`, `finalize` and `finish`
/// answer, and what `tools/result` carries): a success (`isError: false`,
/// `value`, `content`, `meta?`) or a failure (`isError: true`, `error`,
/// `content`), with the contexts and conclusion of the call. Fields of
/// other plugins are kept (`extra`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// The call failed (denied, invalid, aborted, or the tool's error).
    #[serde(default)]
    pub is_error: bool,
    /// Why, on a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// The canonical value, on a success: `Some(Value::Null)` for a tool
    /// that gave none (the pipeline writes `value: null` on every success),
    /// `None` when absent (failures). Open JSON: each tool's own shape.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub value: Option<Value>,
    /// Content blocks the model sees.
    #[serde(default, deserialize_with = "nullable")]
    pub content: Vec<ContentBlock>,
    /// Presentation meta; the tool's own shape, for front-ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// User messages the agent loop queues for the next step (as
    /// [`ToolReply::additional_contexts`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_contexts: Option<Vec<UserInput>>,
    /// The call ends the turn.
    #[serde(
        default,
        deserialize_with = "exactly_true",
        skip_serializing_if = "is_false"
    )]
    pub concludes_turn: bool,
    /// Fields of other plugins.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ToolResult {
    /// A success in the pipeline's format: `{isError: false, value,
    /// content, meta?}` (`value: null` when the tool gave none).
    pub fn success(value: Value, content: Vec<ContentBlock>, meta: Option<Value>) -> ToolResult {
        ToolResult {
            value: Some(value),
            content,
            meta,
            ..ToolResult::default()
        }
    }

    /// A failure in the pipeline's format: `{isError: true, error:
    /// {message, info?}, content: [Error: <message>]}`.
    pub fn failure(message: &str, info: Option<ErrorInfo>) -> ToolResult {
        ToolResult {
            is_error: true,
            error: Some(ToolError {
                message: message.to_owned(),
                info,
            }),
            content: vec![ContentBlock::text(format!("Error: {message}"))],
            ..ToolResult::default()
        }
    }

    /// The contexts it carries (none when it has no list).
    pub fn contexts(&self) -> &[UserInput] {
        self.additional_contexts.as_deref().unwrap_or(&[])
    }
}

/// The `error` of a failed [`ToolResult`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolError {
    /// For people (and the model).
    pub message: String,
    /// The error's class and code, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<ErrorInfo>,
}

/// The `info` of a [`ToolError`]: `{name, code}` (`ToolError`,
/// `INVALID_ARGS`...). A hook may replace a result with an `info` of its
/// own: missing fields read as absent and unknown ones are kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// The error class (`ToolError`, `ToolArgsError`, `AbortError`...).
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// The error code, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Fields of other plugins.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ErrorInfo {
    /// The info of class `name` with `code`.
    pub fn new(name: impl Into<String>, code: impl Into<String>) -> ErrorInfo {
        ErrorInfo {
            name: name.into(),
            code: Some(code.into()),
            extra: Map::new(),
        }
    }
}
