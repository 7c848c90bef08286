//! A `tools/call` result as the model and programs see it: the model gets
//! one text block (text blocks joined by newlines, a placeholder saying
//! what each other block was), programs get the server's blocks as sent
//! (`value.content`, and `value.structuredContent` when there is one).
//! The placeholders are the original's words.

use dsh_sdk::api::tools::ToolReply;
use dsh_sdk::names::code;
use dsh_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A `tools/call` result, read leniently: a block of a type this client
/// does not know is kept, not a reason to drop the result.
#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase")]
pub struct CallResult {
    /// The server's content blocks. Open JSON: MCP adds block types over
    /// time and programs get them as sent.
    #[serde(default)]
    content: Vec<Value>,
    /// The structured result (any JSON, per the tool's output schema).
    #[serde(default)]
    structured_content: Option<Value>,
    /// The tool failed.
    #[serde(default)]
    is_error: Option<bool>,
    /// The 2024-11-05 shape: one value instead of content (any JSON).
    #[serde(default)]
    tool_result: Option<Value>,
}

/// What programs read back: the server's blocks and structured content.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CallValue {
    content: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    structured_content: Option<Value>,
}

/// Why an image is not shown to the model: dsh has no attachment store
/// yet, so no image reaches a request.
const NO_IMAGE_STORE: &str = "no attachment store is mounted";

impl CallResult {
    /// The reply of tool `raw`: a success, or the server's own error as
    /// the call's failure (the model reads `Error: <text>`).
    pub fn into_reply(self, raw: &str) -> Result<ToolReply> {
        let text = self.model_text(raw);
        if self.is_error == Some(true) {
            return Err(Error::new(code::MCP_TOOL_ERROR, text));
        }
        let value = CallValue {
            content: self.content,
            structured_content: self.structured_content,
        };
        Ok(ToolReply::text_with_value(
            &text,
            serde_json::to_value(value)?,
        ))
    }

    fn model_text(&self, raw: &str) -> String {
        if self.content.is_empty() {
            if let Some(legacy) = &self.tool_result {
                return legacy.to_string();
            }
            return format!("({raw} returned no model-visible content)");
        }
        let parts: Vec<String> = self.content.iter().map(block_text).collect();
        parts.join("\n")
    }
}

fn str_field<'a>(block: &'a Value, key: &str) -> Option<&'a str> {
    block.get(key).and_then(Value::as_str)
}

/// What the model reads for one block.
fn block_text(block: &Value) -> String {
    if !block.is_object() {
        return "[unsupported MCP content block: expected an object]".into();
    }
    match str_field(block, "type").unwrap_or("") {
        "text" => str_field(block, "text").unwrap_or("").to_owned(),
        "image" => format!(
            "[image unavailable: {}; {NO_IMAGE_STORE}; raw image data remains available to programmatic callers]",
            str_field(block, "mimeType").unwrap_or("unknown media type")
        ),
        "audio" => format!(
            "[audio result unsupported: {}; raw audio data remains available to programmatic callers]",
            str_field(block, "mimeType").unwrap_or("unknown media type")
        ),
        "resource" => embedded_resource(block),
        "resource_link" => match (str_field(block, "name"), str_field(block, "uri")) {
            (Some(name), Some(uri)) => format!("Resource link: {name} ({uri})"),
            _ => "[resource link unavailable: the MCP block is missing its name or URI]".into(),
        },
        other => format!("[unsupported MCP content type: {other}]"),
    }
}

/// An embedded resource: its text when it is text (what a file-reading
/// server answers), a placeholder for a blob.
fn embedded_resource(block: &Value) -> String {
    let resource = block.get("resource");
    match resource.and_then(|r| str_field(r, "text")) {
        Some(text) => {
            let uri = resource.and_then(|r| str_field(r, "uri")).unwrap_or("");
            format!("Resource {uri}:\n{text}")
        }
        None => {
            "[embedded resource unsupported; raw resource data remains available to programmatic callers]"
                .into()
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn reply(v: Value) -> Result<ToolReply> {
        serde_json::from_value::<CallResult>(v)
            .unwrap()
            .into_reply("t")
    }

    fn text(r: &ToolReply) -> String {
        serde_json::to_value(&r.content).unwrap()[0]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn text_image_resource_and_unknown_blocks() {
        let r = reply(json!({"content": [
            {"type": "text", "text": "a"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///x", "text": "body"}},
            {"type": "resource", "resource": {"uri": "file:///y", "blob": "AAAA"}},
            {"type": "resource_link", "uri": "file:///z", "name": "z"},
            {"type": "hologram"},
            7
        ], "structuredContent": {"n": 1}}))
        .unwrap();
        assert_eq!(
            text(&r),
            "a\n[image unavailable: image/png; no attachment store is mounted; raw image data remains available to programmatic callers]\nResource file:///x:\nbody\n[embedded resource unsupported; raw resource data remains available to programmatic callers]\nResource link: z (file:///z)\n[unsupported MCP content type: hologram]\n[unsupported MCP content block: expected an object]"
        );
        let value = r.value.unwrap();
        assert_eq!(value["content"][1]["data"], "AAAA");
        assert_eq!(value["structuredContent"], json!({"n": 1}));
    }

    #[test]
    fn errors_empty_and_legacy_results() {
        let e = reply(json!({"content": [{"type": "text", "text": "nope"}], "isError": true}))
            .unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            (code::MCP_TOOL_ERROR, "nope")
        );
        assert_eq!(
            text(&reply(json!({})).unwrap()),
            "(t returned no model-visible content)"
        );
        assert_eq!(
            text(&reply(json!({"toolResult": {"a": 1}})).unwrap()),
            r#"{"a":1}"#
        );
    }
}
