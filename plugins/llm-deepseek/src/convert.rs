//! The harness's messages and tools as the chat-completions request
//! carries them.
//!
//! A harness [`Message`] becomes one chat-completions message, or, for a
//! user-role message with tool results, one `tool` message per result
//! (then the user's text, if any). Only text, reasoning, tool calls and
//! tool results are sent: blocks of other types (images, unknown ones) are
//! not part of this wire.

use dsh_llm_http::conversion::{result_text, ToolIn};
use dsh_sdk::vocab::message::{joined_text, ToolCallBlock};
use dsh_sdk::vocab::{ContentBlock, Message, Role};
use serde::Serialize;
use serde_json::value::RawValue;

/// The `type` of a tool and of a tool call on this wire.
const FUNCTION: &str = "function";

/// One chat-completions message, keys in the order the wire has them.
#[derive(Debug, PartialEq, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub(crate) enum WireMessage<'a> {
    /// The system prompt (or a system message of the history).
    System {
        /// Its text.
        content: String,
    },
    /// The user's text.
    User {
        /// Its text.
        content: String,
    },
    /// The model's answer: its text, its reasoning (sent back, as DeepSeek
    /// asks), its tool calls.
    Assistant {
        /// Its visible text.
        content: String,
        /// Its reasoning, when it had any.
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning_content: Option<String>,
        /// Its tool calls, when it made any.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    /// One tool's result.
    Tool {
        /// The call it answers.
        tool_call_id: &'a str,
        /// Its text.
        content: String,
    },
}

/// A tool call of an assistant message.
#[derive(Debug, PartialEq, Serialize)]
pub(crate) struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

/// The function a tool call calls.
#[derive(Debug, PartialEq, Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    /// The raw JSON arguments, as the model wrote them.
    arguments: &'a str,
}

impl<'a> WireToolCall<'a> {
    fn of(call: &'a ToolCallBlock) -> Self {
        WireToolCall {
            id: &call.id,
            kind: FUNCTION,
            function: WireFunctionCall {
                name: &call.name,
                arguments: &call.arguments,
            },
        }
    }
}

/// The texts of the reasoning blocks of `blocks`, joined.
fn reasoning_of(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Reasoning(r) => Some(r.text.as_str()),
            _ => None,
        })
        .collect()
}

/// One harness message as chat-completions messages.
pub(crate) fn messages_of(m: &Message) -> Vec<WireMessage<'_>> {
    let text = || joined_text(&m.content, "");
    match m.role {
        Role::Assistant => {
            let reasoning = reasoning_of(&m.content);
            vec![WireMessage::Assistant {
                content: text(),
                reasoning_content: (!reasoning.is_empty()).then_some(reasoning),
                tool_calls: m.tool_calls().map(WireToolCall::of).collect(),
            }]
        }
        Role::System => vec![WireMessage::System { content: text() }],
        Role::User => {
            let mut out: Vec<WireMessage<'_>> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolResult(r) => Some(r),
                    _ => None,
                })
                .map(|r| WireMessage::Tool {
                    tool_call_id: &r.tool_call_id,
                    content: result_text(r).into_owned(),
                })
                .collect();
            let text = text();
            if !text.is_empty() || out.is_empty() {
                out.push(WireMessage::User { content: text });
            }
            out
        }
    }
}

/// A tool as the chat-completions request lists it.
#[derive(Serialize)]
pub(crate) struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

/// The function a tool offers (`description` and `parameters` are `null`
/// when the harness tool had none).
#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: Option<&'a str>,
    parameters: Option<&'a RawValue>,
}

impl<'a> WireTool<'a> {
    /// `tool` on this wire.
    pub(crate) fn of(tool: &'a ToolIn<'a>) -> Self {
        WireTool {
            kind: FUNCTION,
            function: WireFunction {
                name: &tool.name,
                description: tool.description.as_deref(),
                parameters: tool.parameters,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_llm_http::conversion::NO_OUTPUT;
    use serde_json::json;

    fn wire(message: serde_json::Value) -> serde_json::Value {
        let m: Message = serde_json::from_value(message).unwrap();
        serde_json::to_value(messages_of(&m)).unwrap()
    }

    #[test]
    fn each_role_has_its_wire_shape() {
        assert_eq!(
            wire(
                json!({"id": "a", "role": "assistant", "source": {"kind": "model", "provider": "p", "model": "m"},
                "content": [{"type": "reasoning", "text": "r"}, {"type": "text", "text": "t"},
                            {"type": "tool-call", "id": "c1", "name": "read", "arguments": "{}"}]})
            ),
            json!([{"role": "assistant", "content": "t", "reasoning_content": "r",
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]}])
        );
        assert_eq!(
            wire(
                json!({"id": "a", "role": "assistant", "source": {"kind": "model", "provider": "p", "model": "m"},
                "content": [{"type": "text", "text": "only"}]})
            ),
            json!([{"role": "assistant", "content": "only"}])
        );
        assert_eq!(
            wire(
                json!({"id": "s", "role": "system", "source": {"kind": "user"},
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})
            ),
            json!([{"role": "system", "content": "ab"}])
        );
        // Tool results first, then the text; an empty result says so.
        assert_eq!(
            wire(
                json!({"id": "r", "role": "user", "source": {"kind": "user"},
                "content": [{"type": "tool-result", "toolCallId": "c1", "content": [], "isError": false},
                            {"type": "tool-result", "toolCallId": "c2", "content": [{"type": "text", "text": "out"}]},
                            {"type": "text", "text": "and"}]})
            ),
            json!([{"role": "tool", "tool_call_id": "c1", "content": NO_OUTPUT},
                   {"role": "tool", "tool_call_id": "c2", "content": "out"},
                   {"role": "user", "content": "and"}])
        );
        // A user message with nothing to say is still a message.
        assert_eq!(
            wire(
                json!({"id": "u", "role": "user", "source": {"kind": "user"},
                "content": [{"type": "image", "attachment": {"id": "i"}}]})
            ),
            json!([{"role": "user", "content": ""}])
        );
    }

    #[test]
    fn the_wire_keeps_the_key_order() {
        let m: Message = serde_json::from_value(
            json!({"id": "r", "role": "user", "source": {"kind": "user"},
            "content": [{"type": "tool-result", "toolCallId": "c", "content": []}]}),
        )
        .unwrap();
        assert_eq!(
            serde_json::to_string(&messages_of(&m)).unwrap(),
            r#"[{"role":"tool","tool_call_id":"c","content":"(no output)"}]"#
        );
    }
}
