//! The pipeline's results ([`ToolResult`]): failures in the original's
//! format, the result a `tools/post-execute` block leaves, and the reading
//! of what a tool, a wrapper or a listener answers into its type.

use dsh_sdk::api::tools::{ErrorInfo, Feedback, ToolError, ToolResult};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::ContentBlock;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// An error result in the pipeline's format; `info` is the error's class
/// and code.
pub fn failure(message: &str, info: Option<(&str, &str)>) -> ToolResult {
    ToolResult::failure(message, info.map(|(name, code)| ErrorInfo::new(name, code)))
}

/// The error result of a failed call or listener.
pub fn from_error(e: &Error) -> ToolResult {
    failure(&e.message, Some(("ToolError", &e.code)))
}

/// The failure of a call to a tool the agent does not see.
pub fn unknown_tool(name: &str) -> ToolResult {
    failure(
        &format!("unknown tool \"{name}\""),
        Some(("ToolNotFoundError", "UNKNOWN_TOOL")),
    )
}

/// A result blocked by `tools/post-execute`: the feedback (content blocks,
/// or a text) is the content; the text of its text blocks is the message
/// (§5.3 step 8). Without feedback the message is the content.
pub fn blocked(feedback: Option<Feedback>) -> ToolResult {
    let content = feedback.map(Feedback::into_blocks).unwrap_or_default();
    let texts: Vec<&str> = content.iter().filter_map(ContentBlock::as_text).collect();
    let message = if texts.is_empty() {
        "tool result blocked by post-execute policy".to_owned()
    } else {
        texts.join("\n")
    };
    let content = if content.is_empty() {
        vec![ContentBlock::text(message.as_str())]
    } else {
        content
    };
    ToolResult {
        is_error: true,
        error: Some(ToolError {
            message,
            info: None,
        }),
        content,
        ..ToolResult::default()
    }
}

/// `answer` (what `who` answered: a tool, a wrapper, a listener) read as
/// `T`; a mismatch is `INVALID_PAYLOAD` naming who and the field at fault
/// (`content[0]: missing field `type``). `answer` is open JSON only
/// because the bus and the services hand answers on as JSON.
pub fn read<T: DeserializeOwned>(answer: Value, who: &str) -> Result<T> {
    serde_path_to_error::deserialize(answer).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." {
            String::new()
        } else {
            format!("{path}: ")
        };
        Error::new(
            codes::INVALID_PAYLOAD,
            format!("{who} is malformed: {at}{}", e.into_inner()),
        )
    })
}

/// `result` as JSON, for the bus (a result always serializes: its keys are
/// strings).
pub fn to_json(result: &ToolResult) -> Result<Value> {
    Ok(serde_json::to_value(result)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wire(r: &ToolResult) -> Value {
        serde_json::to_value(r).unwrap()
    }

    #[test]
    fn failures_are_in_the_originals_format() {
        assert_eq!(
            wire(&unknown_tool("nope")),
            json!({"isError": true,
                   "error": {"message": "unknown tool \"nope\"", "info": {"name": "ToolNotFoundError", "code": "UNKNOWN_TOOL"}},
                   "content": [{"type": "text", "text": "Error: unknown tool \"nope\""}]})
        );
        assert_eq!(
            serde_json::to_string(&failure("denied", None)).unwrap(),
            r#"{"isError":true,"error":{"message":"denied"},"content":[{"type":"text","text":"Error: denied"}]}"#
        );
    }

    #[test]
    fn a_block_shows_its_feedback_and_says_its_text() {
        let text = blocked(Some(Feedback::Text("not that file".into())));
        assert_eq!(
            wire(&text),
            json!({"isError": true, "error": {"message": "not that file"},
                   "content": [{"type": "text", "text": "not that file"}]})
        );
        let blocks = blocked(Some(Feedback::Blocks(vec![
            ContentBlock::text("a"),
            ContentBlock::reasoning("hidden"),
            ContentBlock::text("b"),
        ])));
        assert_eq!(blocks.error.map(|e| e.message).as_deref(), Some("a\nb"));
        assert_eq!(blocks.content.len(), 3);
        let bare = blocked(None);
        assert_eq!(
            wire(&bare),
            json!({"isError": true, "error": {"message": "tool result blocked by post-execute policy"},
                   "content": [{"type": "text", "text": "tool result blocked by post-execute policy"}]})
        );
        assert_eq!(
            wire(&blocked(Some(Feedback::Blocks(Vec::new())))),
            wire(&bare)
        );
    }

    #[test]
    fn a_malformed_answer_names_who_and_the_field() {
        let e =
            read::<ToolResult>(json!({"content": [{"type": "text"}]}), "the reply").unwrap_err();
        assert_eq!(e.code, codes::INVALID_PAYLOAD);
        assert_eq!(
            e.message,
            "the reply is malformed: content[0]: missing field `text`"
        );
        let e = read::<ToolResult>(json!(5), "the reply").unwrap_err();
        assert!(
            e.message
                .starts_with("the reply is malformed: invalid type"),
            "{e}"
        );
    }
}
