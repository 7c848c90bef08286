//! The pipeline's results: failures in the original's format, and the
//! result a `tools/post-execute` block leaves. Results stay JSON: wrappers
//! author them and other plugins extend them.

use dsh_sdk::prelude::*;
use dsh_sdk::vocab::msg;

/// An error result in the pipeline's format.
pub fn failure(message: &str, info: Option<(&str, &str)>) -> Value {
    let mut error = json!({"message": message});
    if let Some((name, code)) = info {
        error["info"] = json!({"name": name, "code": code});
    }
    json!({"isError": true, "error": error, "content": [msg::text(&format!("Error: {message}"))]})
}

/// The error result of a failed call or listener.
pub fn from_error(e: &Error) -> Value {
    failure(&e.message, Some(("ToolError", &e.code)))
}

/// The failure of a call to a tool the agent does not see.
pub fn unknown_tool(name: &str) -> Value {
    failure(
        &format!("unknown tool \"{name}\""),
        Some(("ToolNotFoundError", "UNKNOWN_TOOL")),
    )
}

/// A result blocked by `tools/post-execute`: the feedback (content blocks,
/// or a string) is the content; its text is the message (§5.3 step 8).
pub fn blocked(feedback: &Value) -> Value {
    let content = match feedback {
        Value::String(text) => json!([msg::text(text)]),
        Value::Array(_) => feedback.clone(),
        _ => json!([]),
    };
    let text: Vec<&str> = content
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["text"].as_str())
        .collect();
    let message = if text.is_empty() {
        "tool result blocked by post-execute policy".to_owned()
    } else {
        text.join("\n")
    };
    if content.as_array().is_some_and(Vec::is_empty) {
        return json!({"isError": true, "error": {"message": message},
                      "content": [msg::text(&message)]});
    }
    json!({"isError": true, "error": {"message": message}, "content": content})
}

/// The contexts of a result (none when it has no list).
pub fn contexts_of(result: &Value) -> Vec<Value> {
    result["additionalContexts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}
