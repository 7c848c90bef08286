//! The harness's messages and tools as the Messages API carries them.
//!
//! A harness [`Message`] becomes one [`Part`]: a role and its content
//! blocks. Assistant messages keep their text, their tool calls
//! (`tool_use`, the arguments as the `input` object) and the reasoning
//! this adapter can send back: a reasoning block whose replay entry holds
//! a signature is a `thinking` block, one holding data a
//! `redacted_thinking` block ([`crate::replay`]); reasoning without one
//! (another provider's, or cut off) is left out, as the API accepts no
//! unsigned thinking. User-role messages keep their tool results
//! (`tool_result`) and text; a system message of the history is sent as
//! user text (the wire has no system role in `messages`). Images are not
//! sent: each is said in the text where it was
//! ([`dsh_llm_http::conversion::IMAGE_OMITTED`]); blocks of unknown types
//! are not part of this wire. Empty text is left out (the API refuses
//! empty text blocks); [`crate::request`] joins the parts into
//! alternating messages.

use dsh_llm_http::conversion::{result_text, ToolIn, IMAGE_OMITTED};
use dsh_sdk::vocab::message::ToolCallBlock;
use dsh_sdk::vocab::{ContentBlock, Message, MessageSource, Role};
use serde::Serialize;
use serde_json::value::RawValue;

use crate::replay::{self, ReplayBlock};

/// A message's role on this wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WireRole {
    /// The user, tool results included.
    User,
    /// The model.
    Assistant,
}

/// A cache breakpoint: the prefix up to the block that carries it is
/// cached (`{"type": "ephemeral"}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum CacheControl {
    /// The API's default cache (five minutes).
    Ephemeral,
}

/// A `tool_use` block's `input`: the call's arguments as the model wrote
/// them when they are a JSON object, else `{}` (the API takes only an
/// object; arguments that are not one were cut or malformed, and the
/// tool's result that follows says so).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub(crate) enum ToolInput {
    /// The arguments' JSON text, an object.
    Sent(Box<RawValue>),
    /// `{}`.
    Empty(EmptyObject),
}

/// `{}`.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct EmptyObject {}

impl ToolInput {
    /// The `input` of a call with `arguments`.
    fn of(arguments: &str) -> ToolInput {
        match serde_json::from_str::<&RawValue>(arguments) {
            Ok(raw) if raw.get().trim_start().starts_with('{') => ToolInput::Sent(raw.to_owned()),
            _ => ToolInput::Empty(EmptyObject {}),
        }
    }
}

/// A `tool_result`'s content: its text, or text parts (the result's,
/// then text the history holds after the results of the step, which the
/// API would have read as a new prompt).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub(crate) enum ResultContent {
    /// The result's text.
    Text(String),
    /// Text parts.
    Parts(Vec<TextPart>),
}

/// One text part of a [`ResultContent`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct TextPart {
    #[serde(rename = "type")]
    kind: &'static str,
    text: String,
}

impl TextPart {
    /// A part of `text`.
    pub(crate) fn new(text: String) -> TextPart {
        TextPart { kind: "text", text }
    }
}

impl ResultContent {
    /// The content with `texts` added after it.
    pub(crate) fn with(&self, texts: impl IntoIterator<Item = String>) -> ResultContent {
        let mut parts = match self {
            ResultContent::Text(t) => vec![TextPart::new(t.clone())],
            ResultContent::Parts(p) => p.clone(),
        };
        parts.extend(texts.into_iter().map(TextPart::new));
        ResultContent::Parts(parts)
    }
}

/// One content block on this wire, keys in the wire's order.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum WireBlock {
    /// Visible text.
    Text {
        /// The text (never empty).
        text: String,
        /// A cache breakpoint, on the request's last block.
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    /// The model's thinking, sent back with its signature.
    Thinking {
        /// The text.
        thinking: String,
        /// The signature the server gave it.
        signature: String,
    },
    /// Thinking the server sent encrypted, sent back as it came.
    RedactedThinking {
        /// The encrypted data.
        data: String,
    },
    /// A tool call of the model.
    ToolUse {
        /// The call id.
        id: String,
        /// The tool.
        name: String,
        /// The arguments.
        input: ToolInput,
        /// A cache breakpoint, on the request's last block.
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    /// A tool's result.
    ToolResult {
        /// The call it answers.
        tool_use_id: String,
        /// Its text (and text sent while it ran, [`crate::request`]).
        content: ResultContent,
        /// Whether the tool failed.
        is_error: bool,
        /// A cache breakpoint, on the request's last block.
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
}

impl WireBlock {
    /// A `thinking` or `redacted_thinking` block.
    pub(crate) fn is_thinking(&self) -> bool {
        matches!(
            self,
            WireBlock::Thinking { .. } | WireBlock::RedactedThinking { .. }
        )
    }

    /// A `tool_result` block.
    pub(crate) fn is_tool_result(&self) -> bool {
        matches!(self, WireBlock::ToolResult { .. })
    }

    /// A `tool_use` block.
    pub(crate) fn is_tool_use(&self) -> bool {
        matches!(self, WireBlock::ToolUse { .. })
    }

    /// This block with its tool id (a `tool_use`'s id, a `tool_result`'s
    /// `tool_use_id`) set to `id`.
    pub(crate) fn with_tool_id(&self, id: String) -> WireBlock {
        let mut block = self.clone();
        match &mut block {
            WireBlock::ToolUse { id: at, .. }
            | WireBlock::ToolResult {
                tool_use_id: at, ..
            } => *at = id,
            _ => {}
        }
        block
    }

    /// The tool id of a `tool_use` (its id) or a `tool_result` (its
    /// `tool_use_id`).
    pub(crate) fn tool_id(&self) -> Option<&str> {
        match self {
            WireBlock::ToolUse { id, .. }
            | WireBlock::ToolResult {
                tool_use_id: id, ..
            } => Some(id),
            _ => None,
        }
    }

    /// A text block's text.
    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            WireBlock::Text { text, .. } => Some(text),
            _ => None,
        }
    }

    /// This block with a cache breakpoint; `None` for thinking, which
    /// takes none.
    pub(crate) fn cached(&self) -> Option<WireBlock> {
        let mut block = self.clone();
        match &mut block {
            WireBlock::Text { cache_control, .. }
            | WireBlock::ToolUse { cache_control, .. }
            | WireBlock::ToolResult { cache_control, .. } => {
                *cache_control = Some(CacheControl::Ephemeral);
                Some(block)
            }
            WireBlock::Thinking { .. } | WireBlock::RedactedThinking { .. } => None,
        }
    }
}

/// One harness message on this wire: its role and blocks, and for an
/// answer the model that wrote it (its thinking is sent back only to that
/// model: a signature is the model's).
#[derive(Debug, Clone)]
pub(crate) struct Part {
    /// The role.
    pub role: WireRole,
    /// The blocks (maybe none: an empty part is not sent).
    pub blocks: Vec<WireBlock>,
    /// The model of an assistant message.
    pub model: Option<String>,
}

/// A text block of `text`; `None` when it is empty.
fn text_block(text: &str) -> Option<WireBlock> {
    (!text.is_empty()).then(|| WireBlock::Text {
        text: text.to_owned(),
        cache_control: None,
    })
}

/// A tool call as a `tool_use` block.
fn tool_use(call: &ToolCallBlock) -> WireBlock {
    WireBlock::ToolUse {
        id: call.id.clone(),
        name: call.name.clone(),
        input: ToolInput::of(&call.arguments),
        cache_control: None,
    }
}

/// An answer's blocks: reasoning with a replay entry, text, tool calls.
fn assistant_blocks(m: &Message, replay: Option<Vec<Option<ReplayBlock>>>) -> Vec<WireBlock> {
    let entry = |at: usize| {
        replay
            .as_ref()
            .and_then(|r| r.get(at))
            .and_then(Option::as_ref)
    };
    m.content
        .iter()
        .enumerate()
        .filter_map(|(at, block)| match block {
            ContentBlock::Reasoning(r) => match entry(at)? {
                ReplayBlock::Thinking { signature } => Some(WireBlock::Thinking {
                    thinking: r.text.clone(),
                    signature: signature.clone(),
                }),
                ReplayBlock::RedactedThinking { data } => {
                    Some(WireBlock::RedactedThinking { data: data.clone() })
                }
            },
            ContentBlock::Text(t) => text_block(&t.text),
            ContentBlock::ToolCall(c) => Some(tool_use(c)),
            _ => None,
        })
        .collect()
}

/// A user-role message's blocks: tool results and text, each image said
/// where it was.
fn user_blocks(m: &Message) -> Vec<WireBlock> {
    m.content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::ToolResult(r) => Some(WireBlock::ToolResult {
                tool_use_id: r.tool_call_id.clone(),
                // The API refuses an empty result.
                content: ResultContent::Text(result_text(r).into_owned()),
                is_error: r.is_error == Some(true),
                cache_control: None,
            }),
            ContentBlock::Text(t) => text_block(&t.text),
            ContentBlock::Image(_) => text_block(IMAGE_OMITTED),
            _ => None,
        })
        .collect()
}

/// One harness message on this wire.
pub(crate) fn part_of(m: &Message) -> Part {
    match m.role {
        Role::Assistant => {
            let (model, replay) = match &m.source {
                MessageSource::Model(source) => (
                    Some(source.model.clone()),
                    replay::entries(source.replay_state.as_ref(), m.content.len()),
                ),
                _ => (None, None),
            };
            Part {
                role: WireRole::Assistant,
                blocks: assistant_blocks(m, replay),
                model,
            }
        }
        Role::User | Role::System => Part {
            role: WireRole::User,
            blocks: user_blocks(m),
            model: None,
        },
    }
}

/// The schema of a tool that declares none: an object without
/// properties (the API requires an object schema).
#[derive(Serialize)]
pub(crate) struct NoParameters {
    #[serde(rename = "type")]
    kind: &'static str,
    properties: EmptyObject,
}

/// A tool's `input_schema`: the tool's own, or [`NoParameters`].
#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum Schema<'a> {
    /// The schema the tool declares, as its text.
    Sent(&'a RawValue),
    /// None declared.
    None(NoParameters),
}

/// A tool as the Messages API lists it.
#[derive(Serialize)]
pub(crate) struct WireTool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: Schema<'a>,
}

impl<'a> WireTool<'a> {
    /// `tool` on this wire.
    pub(crate) fn of(tool: &'a ToolIn<'a>) -> Self {
        WireTool {
            name: &tool.name,
            description: tool.description.as_deref().filter(|d| !d.is_empty()),
            input_schema: match tool.parameters {
                Some(schema) => Schema::Sent(schema),
                None => Schema::None(NoParameters {
                    kind: "object",
                    properties: EmptyObject {},
                }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_llm_http::conversion::NO_OUTPUT;
    use serde_json::{json, Value};

    fn part(message: Value) -> (WireRole, Value, Option<String>) {
        let m: Message = serde_json::from_value(message).unwrap();
        let p = part_of(&m);
        (p.role, serde_json::to_value(&p.blocks).unwrap(), p.model)
    }

    fn answer(content: Value, replay: Option<Value>) -> Value {
        let mut source = json!({"kind": "model", "provider": "anthropic", "model": "claude"});
        if let Some(r) = replay {
            source["replayState"] = r;
        }
        json!({"id": "a", "role": "assistant", "content": content, "source": source})
    }

    #[test]
    fn an_answer_keeps_signed_thinking_text_and_tool_calls() {
        let (role, blocks, model) = part(answer(
            json!([{"type": "reasoning", "text": "hmm"}, {"type": "reasoning", "text": ""},
                   {"type": "text", "text": "Reading."},
                   {"type": "tool-call", "id": "toolu_1", "name": "read", "arguments": "{\"file_path\":\"a\"}"}]),
            Some(json!({"blocks": [{"type": "thinking", "signature": "sig"},
                                   {"type": "redacted_thinking", "data": "enc"}, null, null]})),
        ));
        assert_eq!(
            (role, model.as_deref()),
            (WireRole::Assistant, Some("claude"))
        );
        assert_eq!(
            blocks,
            json!([{"type": "thinking", "thinking": "hmm", "signature": "sig"},
                   {"type": "redacted_thinking", "data": "enc"},
                   {"type": "text", "text": "Reading."},
                   {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"file_path": "a"}}])
        );
    }

    #[test]
    fn reasoning_without_a_signature_and_empty_text_are_left_out() {
        // Another provider's reasoning (its replay state was removed by
        // `llm`), and a state that does not line up.
        for replay in [
            None,
            Some(json!({"blocks": [{"type": "thinking", "signature": "s"}]})),
        ] {
            let (_, blocks, _) = part(answer(
                json!([{"type": "reasoning", "text": "r"}, {"type": "text", "text": ""},
                       {"type": "tool-call", "id": "c", "name": "bash", "arguments": "{}"}]),
                replay,
            ));
            assert_eq!(
                blocks,
                json!([{"type": "tool_use", "id": "c", "name": "bash", "input": {}}])
            );
        }
    }

    #[test]
    fn arguments_that_are_not_an_object_are_sent_as_an_empty_input() {
        for bad in ["", "{\"cut", "[1]", "5"] {
            let (_, blocks, _) = part(answer(
                json!([{"type": "tool-call", "id": "c", "name": "read", "arguments": bad}]),
                None,
            ));
            assert_eq!(blocks[0]["input"], json!({}), "{bad:?}");
        }
    }

    #[test]
    fn a_user_message_keeps_tool_results_and_text() {
        let (role, blocks, model) = part(
            json!({"id": "r", "role": "user", "source": {"kind": "user"},
            "content": [{"type": "tool-result", "toolCallId": "c1", "content": [], "isError": false},
                        {"type": "tool-result", "toolCallId": "c2", "isError": true,
                         "content": [{"type": "text", "text": "no such file"}]},
                        {"type": "image", "attachment": {"id": "i"}},
                        {"type": "text", "text": "and"}]}),
        );
        assert_eq!((role, model), (WireRole::User, None));
        assert_eq!(
            blocks,
            json!([{"type": "tool_result", "tool_use_id": "c1", "content": NO_OUTPUT, "is_error": false},
                   {"type": "tool_result", "tool_use_id": "c2", "content": "no such file", "is_error": true},
                   {"type": "text", "text": IMAGE_OMITTED},
                   {"type": "text", "text": "and"}])
        );
        let (role, blocks, _) = part(
            json!({"id": "s", "role": "system", "source": {"kind": "user"},
            "content": [{"type": "text", "text": "be brief"}]}),
        );
        assert_eq!(
            (role, blocks),
            (
                WireRole::User,
                json!([{"type": "text", "text": "be brief"}])
            )
        );
    }

    #[test]
    fn images_are_said_where_they_were_not_dropped() {
        let image = json!({"type": "image", "attachment": {"id": "i"}});
        // An image-only tool result is not "(no output)": it had an image.
        let (_, blocks, _) = part(
            json!({"id": "r", "role": "user", "source": {"kind": "user"},
            "content": [{"type": "tool-result", "toolCallId": "c1", "content": [image], "isError": false}]}),
        );
        assert_eq!(
            blocks[0]["content"],
            json!(format!("{IMAGE_OMITTED}\n")),
            "{blocks}"
        );
        // An image-only user message does not disappear.
        let (_, blocks, _) = part(
            json!({"id": "u", "role": "user", "source": {"kind": "user"}, "content": [image]}),
        );
        assert_eq!(blocks, json!([{"type": "text", "text": IMAGE_OMITTED}]));
    }

    #[test]
    fn a_cached_block_carries_the_breakpoint_and_thinking_takes_none() {
        let text = text_block("hi").unwrap();
        assert_eq!(
            serde_json::to_value(text.cached().unwrap()).unwrap(),
            json!({"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}})
        );
        let thinking = WireBlock::Thinking {
            thinking: "t".into(),
            signature: "s".into(),
        };
        assert!(thinking.cached().is_none());
    }

    #[test]
    fn tools_carry_their_schema_or_an_empty_object_schema() {
        let tools: Vec<ToolIn<'_>> = serde_json::from_str(
            r#"[{"name":"read","description":"Reads.","parameters":{"type":"object","properties":{"file_path":{"type":"string"}}}},
                {"name":"now"}]"#,
        )
        .unwrap();
        let wire: Vec<WireTool<'_>> = tools.iter().map(WireTool::of).collect();
        assert_eq!(
            serde_json::to_string(&wire).unwrap(),
            concat!(
                r#"[{"name":"read","description":"Reads.","input_schema":{"type":"object","properties":{"file_path":{"type":"string"}}}},"#,
                r#"{"name":"now","input_schema":{"type":"object","properties":{}}}]"#
            )
        );
    }
}
