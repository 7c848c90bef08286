//! The harness's messages and tools as the Responses request carries them.
//!
//! A harness [`Message`] becomes input items:
//! - a user message: one `function_call_output` per tool result, then a
//!   `user` message of its text parts (an image or an unknown block is not
//!   part of this wire);
//! - a system message: a `developer` message (the system prompt itself
//!   travels as `instructions`);
//! - an assistant message, block by block in order: its text as
//!   `assistant` messages of `output_text` (consecutive texts together),
//!   each tool call as a `function_call`, and each reasoning block that its
//!   replay state gives an item for as that `reasoning` item, with its
//!   encrypted content ([`crate::replay`]). A reasoning block without one
//!   (another model's thinking, or a server that sent no encrypted
//!   content) is not sent: the server could not read it.

use std::borrow::Cow;

use dsh_sdk::vocab::message::joined_text;
use dsh_sdk::vocab::{ContentBlock, Message, MessageSource, Role};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::replay::{ReasoningItem, ReplayItem, ReplayState};

/// The `type` of a tool on this wire.
const FUNCTION: &str = "function";

/// The output of a tool result that returned no text.
const NO_OUTPUT: &str = "(no output)";

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

/// One part of a message's content.
#[derive(Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Part<'a> {
    /// Text the model is given.
    InputText {
        /// Its text.
        text: &'a str,
    },
    /// Text the model wrote.
    OutputText {
        /// Its text.
        text: &'a str,
    },
}

/// One input item, keys in the order the wire has them.
#[derive(Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum InputItem<'a> {
    /// A message.
    Message {
        /// Who it is from.
        role: WireRole,
        /// Its parts.
        content: Vec<Part<'a>>,
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
    /// A reasoning item sent back with its encrypted content.
    Reasoning(ReasoningItem),
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

/// Moves the text parts gathered so far into one assistant message.
fn flush<'a>(texts: &mut Vec<Part<'a>>, out: &mut Vec<InputItem<'a>>) {
    if !texts.is_empty() {
        out.push(InputItem::Message {
            role: WireRole::Assistant,
            content: std::mem::take(texts),
        });
    }
}

/// An assistant message's blocks as input items, in order.
fn assistant_items(m: &Message) -> Vec<InputItem<'_>> {
    let mut replay = replayed(m).into_iter();
    let mut out = Vec::new();
    let mut texts: Vec<Part<'_>> = Vec::new();
    for block in &m.content {
        let item = replay.next().flatten();
        match block {
            ContentBlock::Text(t) if !t.text.is_empty() => {
                texts.push(Part::OutputText { text: &t.text });
            }
            ContentBlock::ToolCall(c) => {
                flush(&mut texts, &mut out);
                out.push(InputItem::FunctionCall {
                    call_id: &c.id,
                    name: &c.name,
                    arguments: &c.arguments,
                });
            }
            ContentBlock::Reasoning(_) => {
                if let Some(ReplayItem::Reasoning(r)) = item {
                    flush(&mut texts, &mut out);
                    out.push(InputItem::Reasoning(r));
                }
            }
            _ => {}
        }
    }
    flush(&mut texts, &mut out);
    out
}

/// The text parts of `blocks` as input text.
fn input_texts(blocks: &[ContentBlock]) -> Vec<Part<'_>> {
    blocks
        .iter()
        .filter_map(ContentBlock::as_text)
        .filter(|t| !t.is_empty())
        .map(|text| Part::InputText { text })
        .collect()
}

/// One harness message as input items.
pub(crate) fn items_of(m: &Message) -> Vec<InputItem<'_>> {
    match m.role {
        Role::Assistant => assistant_items(m),
        Role::System => vec![InputItem::Message {
            role: WireRole::Developer,
            content: input_texts(&m.content),
        }],
        Role::User => {
            let mut out: Vec<InputItem<'_>> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolResult(r) => Some(r),
                    _ => None,
                })
                .map(|r| {
                    let text = joined_text(&r.content, "");
                    InputItem::FunctionCallOutput {
                        call_id: &r.tool_call_id,
                        output: if text.is_empty() {
                            Cow::Borrowed(NO_OUTPUT)
                        } else {
                            Cow::Owned(text)
                        },
                    }
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
                    content,
                });
            }
            out
        }
    }
}

/// A tool as the harness request lists it (`{name, description,
/// parameters}`), borrowed from the request's text.
#[derive(Deserialize)]
pub(crate) struct ToolIn<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    description: Option<Cow<'a, str>>,
    /// The arguments' JSON Schema: open (whatever the tool declares), so
    /// it is passed on as its text.
    #[serde(default, borrow)]
    parameters: Option<&'a RawValue>,
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

    #[test]
    fn an_answer_is_sent_back_item_by_item_with_its_reasoning() {
        let replay = json!({"blocks": [
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}],
             "encrypted_content": "enc-1"},
            null, null, null]});
        assert_eq!(
            wire(
                json!({"id": "a", "role": "assistant", "source": model_source(Some(replay)),
                "content": [{"type": "reasoning", "text": "plan"}, {"type": "text", "text": "Let me look."},
                            {"type": "tool-call", "id": "call_1", "name": "read", "arguments": "{\"file_path\":\"a\"}"},
                            {"type": "text", "text": "after"}]})
            ),
            json!([
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}],
                 "encrypted_content": "enc-1"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
                {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{\"file_path\":\"a\"}"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "after"}]}
            ])
        );
    }

    #[test]
    fn reasoning_without_an_item_or_with_a_foreign_state_is_not_sent() {
        let content =
            json!([{"type": "reasoning", "text": "think"}, {"type": "text", "text": "hi"}]);
        let want = json!([{"type": "message", "role": "assistant",
                           "content": [{"type": "output_text", "text": "hi"}]}]);
        for replay in [
            None,
            Some(json!({"sig": 1})),
            Some(json!({"blocks": [null]})),
            Some(json!({"blocks": [{"type": "signature", "x": 1}, null]})),
        ] {
            let got = wire(
                json!({"id": "a", "role": "assistant", "source": model_source(replay.clone()),
                                  "content": content}),
            );
            assert_eq!(got, want, "{replay:?}");
        }
    }

    #[test]
    fn user_system_and_tool_result_messages_have_their_wire_shape() {
        // Tool results first, then the text; an empty result says so.
        assert_eq!(
            wire(
                json!({"id": "r", "role": "user", "source": {"kind": "tool", "callId": "c1"},
                "content": [{"type": "tool-result", "toolCallId": "c1", "content": [], "isError": false},
                            {"type": "tool-result", "toolCallId": "c2", "content": [{"type": "text", "text": "out"}]},
                            {"type": "text", "text": "and"}]})
            ),
            json!([{"type": "function_call_output", "call_id": "c1", "output": NO_OUTPUT},
                   {"type": "function_call_output", "call_id": "c2", "output": "out"},
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
            wire(
                json!({"id": "u", "role": "user", "source": {"kind": "user"},
                "content": [{"type": "image", "attachment": {"id": "i"}}]})
            ),
            json!([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": ""}]}])
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
