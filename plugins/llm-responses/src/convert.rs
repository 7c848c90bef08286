//! The harness's messages and tools as the Responses request carries them.
//!
//! A harness [`Message`] becomes input items:
//! - a user message: one `function_call_output` per tool result (a failed
//!   tool's output starts with [`ERROR_PREFIX`]: the wire has no error
//!   flag), then a `user` message of its text parts, each image said where
//!   it was ([`IMAGE_OMITTED`]: this adapter sends no images);
//! - a system message: a `developer` message (the system prompt itself
//!   travels as `instructions`);
//! - an assistant message, block by block in order: each text as an
//!   `assistant` message whose content is the text itself (the shape every
//!   server takes: vLLM refuses `output_text` parts without the id, status
//!   and annotations of a whole output message), each tool call as a
//!   `function_call`, and each reasoning block that its replay state gives
//!   an item for as that `reasoning` item ([`crate::replay`]): encrypted
//!   without its id (OpenAI pairs an item sent with its id with the item
//!   that followed it, and refuses it when that one was left out), in the
//!   clear with its id (vLLM's types require one). A reasoning block
//!   without an item (another model's thinking, or a server that sent
//!   neither) is not sent: the server could not read it; nor is a
//!   reasoning item the answer kept nothing after (its calls were cut at
//!   the output cap, its text was empty).

use std::borrow::Cow;

use dsh_llm_http::conversion::{result_text, ToolIn, IMAGE_OMITTED};
use dsh_sdk::vocab::{ContentBlock, Message, MessageSource, Role};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::replay::{ReasoningItem, ReasoningPart, ReplayItem, ReplayState, SummaryPart};

/// The `type` of a tool on this wire.
const FUNCTION: &str = "function";

/// What starts the output of a tool that failed: the wire's
/// `function_call_output` has no error flag.
pub(crate) const ERROR_PREFIX: &str = "Error: ";

/// Who a message of the input is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WireRole {
    /// The user (and tool results' text, context plugins add).
    User,
    /// The model.
    Assistant,
    /// A system message of the history.
    Developer,
}

/// One part of a user or developer message's content.
#[derive(Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Part<'a> {
    /// Text the model is given.
    InputText {
        /// Its text.
        text: &'a str,
    },
}

/// A message's content: its text (an answer's), or parts.
#[derive(Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub(crate) enum Content<'a> {
    /// The text itself.
    Text(&'a str),
    /// Parts.
    Parts(Vec<Part<'a>>),
}

/// A reasoning item as it goes on the wire: the kept item
/// ([`ReasoningItem`]), its id left out when it is encrypted.
#[derive(Debug, PartialEq, Serialize)]
pub(crate) struct WireReasoning {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    summary: Vec<SummaryPart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<Vec<ReasoningPart>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    encrypted_content: Option<String>,
}

impl WireReasoning {
    /// Whether it carries encrypted reasoning (else its text).
    pub(crate) fn is_encrypted(&self) -> bool {
        self.encrypted_content.is_some()
    }
}

impl From<ReasoningItem> for WireReasoning {
    fn from(r: ReasoningItem) -> WireReasoning {
        let encrypted = r.is_encrypted();
        WireReasoning {
            id: r.id.filter(|_| !encrypted),
            summary: r.summary,
            content: r.content,
            encrypted_content: r.encrypted_content,
        }
    }
}

/// One input item, keys in the order the wire has them.
#[derive(Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum InputItem<'a> {
    /// A message.
    Message {
        /// Who it is from.
        role: WireRole,
        /// Its content.
        content: Content<'a>,
    },
    /// A tool call the model made.
    FunctionCall {
        /// The call's id, which its output names.
        call_id: &'a str,
        /// The tool.
        name: &'a str,
        /// The raw JSON arguments, as the model wrote them.
        arguments: &'a str,
    },
    /// A tool's result.
    FunctionCallOutput {
        /// The call it answers.
        call_id: &'a str,
        /// Its text.
        output: Cow<'a, str>,
    },
    /// A reasoning item sent back.
    Reasoning(WireReasoning),
}

/// The reasoning item of each block of an assistant message, from its
/// replay state. A state that does not read, or does not line up with the
/// blocks (it was not this adapter's), gives none, with a warning: the
/// answer is still sent, without its reasoning.
fn replayed(m: &Message) -> Vec<Option<ReplayItem>> {
    let MessageSource::Model(source) = &m.source else {
        return Vec::new();
    };
    let Some(state) = &source.replay_state else {
        return Vec::new();
    };
    match ReplayState::deserialize(state) {
        Ok(state) if state.blocks.len() == m.content.len() => state.blocks,
        Ok(state) => {
            dsh_sdk::tracing::warn!(
                "{}: the replay state of message {} has {} entries for {} blocks; its \
                 reasoning is not sent back",
                crate::PLUGIN,
                m.id,
                state.blocks.len(),
                m.content.len()
            );
            Vec::new()
        }
        Err(e) => {
            dsh_sdk::tracing::warn!(
                "{}: the replay state of message {} is not this adapter's ({e}); its \
                 reasoning is not sent back",
                crate::PLUGIN,
                m.id
            );
            Vec::new()
        }
    }
}

/// An assistant message's blocks as input items, in order.
fn assistant_items(m: &Message) -> Vec<InputItem<'_>> {
    let mut replay = replayed(m).into_iter();
    let mut out = Vec::new();
    for block in &m.content {
        let item = replay.next().flatten();
        match block {
            ContentBlock::Text(t) if !t.text.is_empty() => out.push(InputItem::Message {
                role: WireRole::Assistant,
                content: Content::Text(&t.text),
            }),
            ContentBlock::ToolCall(c) => out.push(InputItem::FunctionCall {
                call_id: &c.id,
                name: &c.name,
                arguments: &c.arguments,
            }),
            ContentBlock::Reasoning(_) => {
                if let Some(ReplayItem::Reasoning(r)) = item {
                    out.push(InputItem::Reasoning(r.into()));
                }
            }
            _ => {}
        }
    }
    // A reasoning item goes back only with the item it led to: one the
    // answer kept nothing after is left out.
    while matches!(out.last(), Some(InputItem::Reasoning(_))) {
        out.pop();
    }
    out
}

/// The text parts of `blocks` as input text, each image said where it was.
fn input_texts(blocks: &[ContentBlock]) -> Vec<Part<'_>> {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) if !t.text.is_empty() => Some(t.text.as_str()),
            ContentBlock::Image(_) => Some(IMAGE_OMITTED),
            _ => None,
        })
        .map(|text| Part::InputText { text })
        .collect()
}

/// A tool result's output: its text, after [`ERROR_PREFIX`] when the tool
/// failed.
fn output_of(r: &dsh_sdk::vocab::message::ToolResultBlock) -> Cow<'static, str> {
    let text = result_text(r);
    if r.is_error == Some(true) {
        Cow::Owned(format!("{ERROR_PREFIX}{text}"))
    } else {
        text
    }
}

/// One harness message as input items.
pub(crate) fn items_of(m: &Message) -> Vec<InputItem<'_>> {
    match m.role {
        Role::Assistant => assistant_items(m),
        Role::System => vec![InputItem::Message {
            role: WireRole::Developer,
            content: Content::Parts(input_texts(&m.content)),
        }],
        Role::User => {
            let mut out: Vec<InputItem<'_>> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolResult(r) => Some(r),
                    _ => None,
                })
                .map(|r| InputItem::FunctionCallOutput {
                    call_id: &r.tool_call_id,
                    output: output_of(r),
                })
                .collect();
            let texts = input_texts(&m.content);
            if !texts.is_empty() || out.is_empty() {
                // A user message with nothing to say is still a message.
                let content = if texts.is_empty() {
                    vec![Part::InputText { text: "" }]
                } else {
                    texts
                };
                out.push(InputItem::Message {
                    role: WireRole::User,
                    content: Content::Parts(content),
                });
            }
            out
        }
    }
}

/// A tool as the Responses request lists it: a function, its schema not
/// enforced strictly (the harness's schemas are not all strict-mode
/// schemas; the tool checks its arguments).
#[derive(Serialize)]
pub(crate) struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    parameters: Option<&'a RawValue>,
    strict: bool,
}

impl<'a> WireTool<'a> {
    /// `tool` on this wire.
    pub(crate) fn of(tool: &'a ToolIn<'a>) -> Self {
        WireTool {
            kind: FUNCTION,
            name: &tool.name,
            description: tool.description.as_deref(),
            parameters: tool.parameters,
            strict: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_llm_http::conversion::NO_OUTPUT;
    use serde_json::{json, Value};

    fn wire(message: Value) -> Value {
        let m: Message = serde_json::from_value(message).unwrap();
        serde_json::to_value(items_of(&m)).unwrap()
    }

    fn model_source(replay: Option<Value>) -> Value {
        let mut source = json!({"kind": "model", "provider": "openai", "model": "gpt-5"});
        if let Some(r) = replay {
            source["replayState"] = r;
        }
        source
    }

    fn answer(content: Value, replay: Option<Value>) -> Value {
        json!({"id": "a", "role": "assistant", "source": model_source(replay), "content": content})
    }

    #[test]
    fn an_answer_is_sent_back_item_by_item_with_its_reasoning() {
        let replay = json!({"blocks": [
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}],
             "encrypted_content": "enc-1"},
            null, null, null]});
        assert_eq!(
            wire(answer(
                json!([{"type": "reasoning", "text": "plan"}, {"type": "text", "text": "Let me look."},
                       {"type": "tool-call", "id": "call_1", "name": "read", "arguments": "{\"file_path\":\"a\"}"},
                       {"type": "text", "text": "after"}]),
                Some(replay)
            )),
            json!([
                // Encrypted: without its id.
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "plan"}],
                 "encrypted_content": "enc-1"},
                // An answer's text is the message's content itself.
                {"type": "message", "role": "assistant", "content": "Let me look."},
                {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{\"file_path\":\"a\"}"},
                {"type": "message", "role": "assistant", "content": "after"}
            ])
        );
    }

    #[test]
    fn reasoning_text_goes_back_with_its_id() {
        let replay = json!({"blocks": [
            {"type": "reasoning", "id": "rs_7", "summary": [],
             "content": [{"type": "reasoning_text", "text": "think"}]}, null]});
        assert_eq!(
            wire(answer(
                json!([{"type": "reasoning", "text": "think"},
                       {"type": "tool-call", "id": "c", "name": "bash", "arguments": "{}"}]),
                Some(replay)
            )),
            json!([
                {"type": "reasoning", "id": "rs_7", "summary": [],
                 "content": [{"type": "reasoning_text", "text": "think"}]},
                {"type": "function_call", "call_id": "c", "name": "bash", "arguments": "{}"}
            ])
        );
    }

    #[test]
    fn a_reasoning_item_whose_following_item_was_lost_is_not_sent() {
        let item =
            json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"});
        // Cut at the output cap: the call was pruned, the reasoning stayed;
        // or the text that followed it was empty.
        for content in [
            json!([{"type": "text", "text": "a"}, {"type": "reasoning", "text": ""}]),
            json!([{"type": "text", "text": "a"}, {"type": "reasoning", "text": ""},
                   {"type": "text", "text": ""}]),
        ] {
            let n = content.as_array().unwrap().len();
            let mut blocks = vec![Value::Null; n];
            blocks[1] = item.clone();
            let got = wire(answer(content, Some(json!({"blocks": blocks}))));
            assert_eq!(
                got,
                json!([{"type": "message", "role": "assistant", "content": "a"}])
            );
        }
    }

    #[test]
    fn reasoning_without_an_item_or_with_a_foreign_state_is_not_sent() {
        let content =
            json!([{"type": "reasoning", "text": "think"}, {"type": "text", "text": "hi"}]);
        let want = json!([{"type": "message", "role": "assistant", "content": "hi"}]);
        for replay in [
            None,
            Some(json!({"sig": 1})),
            Some(json!({"blocks": [null]})),
            Some(json!({"blocks": [{"type": "signature", "x": 1}, null]})),
        ] {
            let got = wire(answer(content.clone(), replay.clone()));
            assert_eq!(got, want, "{replay:?}");
        }
    }

    #[test]
    fn user_system_and_tool_result_messages_have_their_wire_shape() {
        // Tool results first, then the text; an empty result says so; a
        // failed one says it failed.
        assert_eq!(
            wire(
                json!({"id": "r", "role": "user", "source": {"kind": "tool", "callId": "c1"},
                "content": [{"type": "tool-result", "toolCallId": "c1", "content": [], "isError": false},
                            {"type": "tool-result", "toolCallId": "c2", "content": [{"type": "text", "text": "out"}]},
                            {"type": "tool-result", "toolCallId": "c3", "isError": true,
                             "content": [{"type": "text", "text": "no such file"}]},
                            {"type": "text", "text": "and"}]})
            ),
            json!([{"type": "function_call_output", "call_id": "c1", "output": NO_OUTPUT},
                   {"type": "function_call_output", "call_id": "c2", "output": "out"},
                   {"type": "function_call_output", "call_id": "c3", "output": "Error: no such file"},
                   {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and"}]}])
        );
        assert_eq!(
            wire(
                json!({"id": "s", "role": "system", "source": {"kind": "user"},
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})
            ),
            json!([{"type": "message", "role": "developer",
                    "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]}])
        );
        // A user message with nothing to say is still a message.
        assert_eq!(
            wire(json!({"id": "u", "role": "user", "source": {"kind": "user"}, "content": []})),
            json!([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": ""}]}])
        );
    }

    #[test]
    fn images_are_said_where_they_were_not_dropped() {
        let image = json!({"type": "image", "attachment": {"id": "i"}});
        assert_eq!(
            wire(
                json!({"id": "u", "role": "user", "source": {"kind": "user"},
                       "content": [image, {"type": "text", "text": "what is this?"}]})
            ),
            json!([{"type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": IMAGE_OMITTED},
                                {"type": "input_text", "text": "what is this?"}]}])
        );
        assert_eq!(
            wire(
                json!({"id": "r", "role": "user", "source": {"kind": "tool", "callId": "c"},
                       "content": [{"type": "tool-result", "toolCallId": "c", "content": [image]}]})
            ),
            json!([{"type": "function_call_output", "call_id": "c",
                    "output": format!("{IMAGE_OMITTED}\n")}])
        );
    }

    #[test]
    fn the_wire_keeps_the_key_order() {
        let m: Message = serde_json::from_value(
            json!({"id": "r", "role": "user", "source": {"kind": "user"},
            "content": [{"type": "tool-result", "toolCallId": "c", "content": []}, {"type": "text", "text": "t"}]}),
        )
        .unwrap();
        assert_eq!(
            serde_json::to_string(&items_of(&m)).unwrap(),
            concat!(
                r#"[{"type":"function_call_output","call_id":"c","output":"(no output)"},"#,
                r#"{"type":"message","role":"user","content":[{"type":"input_text","text":"t"}]}]"#
            )
        );
    }
}
