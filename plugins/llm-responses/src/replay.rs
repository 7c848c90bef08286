//! What an answer leaves for its next request: the reasoning items a
//! stateless reasoning model needs back.
//!
//! This adapter never asks the server to keep anything (`store: false`, no
//! `previous_response_id`): every request sends the whole history. A
//! reasoning model's thinking then survives from one request to the next
//! only as the reasoning item it streamed, sent back with its
//! `encrypted_content`. The item is kept in the answer's replay state
//! (`source.replayState` of the assistant message, which `llm` hands back
//! only to the adapter instance that made it) as `{"blocks": [...]}`, one
//! entry per content block of the message: the reasoning item for a
//! reasoning block that has one, `null` for every other block. The agent
//! loop's assembler keeps `blocks` aligned with the message's blocks (it
//! prunes both together), so the item is sent back at its block's place.
//!
//! A server that streams its reasoning as text instead of encrypting it
//! (vLLM and others serving gpt-oss: `reasoning_text`) gets that text back
//! the same way, while the tool loop it belongs to is open
//! ([`crate::request`]).

use serde::{Deserialize, Serialize};

/// One summary part of a reasoning item, as the wire has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SummaryPart {
    /// A summary's text.
    SummaryText {
        /// The text.
        text: String,
    },
}

/// One part of a reasoning item's own text, as the wire has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ReasoningPart {
    /// The model's reasoning, in the clear.
    ReasoningText {
        /// The text.
        text: String,
    },
}

/// A reasoning item as it is kept to be sent back: its id, its summary,
/// and either its encrypted content (OpenAI) or its reasoning text (a
/// server that streams it in the clear). An item with neither is not
/// kept: the server, which stores nothing, could not read it back by id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasoningItem {
    /// The server's id of the item (`rs_…`). Sent back only with
    /// reasoning text (vLLM's types require it); an encrypted item goes
    /// without it, as OpenAI's pairing check by id refuses an item whose
    /// following item was left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Its summary parts (possibly none; the wire requires the list).
    #[serde(default)]
    pub summary: Vec<SummaryPart>,
    /// The model's reasoning in the clear (`reasoning_text` parts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<ReasoningPart>>,
    /// The model's reasoning, encrypted for the server alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_content: Option<String>,
}

impl ReasoningItem {
    /// Whether it carries encrypted reasoning (else its text).
    pub fn is_encrypted(&self) -> bool {
        self.encrypted_content.is_some()
    }
}

/// One entry of the replay state: an input item to send back, tagged by
/// its wire `type`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ReplayItem {
    /// A reasoning item.
    Reasoning(ReasoningItem),
}

/// An answer's replay state: one entry per content block of its message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayState {
    /// The item each block is sent back with, `None` for a block that is
    /// sent from its content alone.
    pub blocks: Vec<Option<ReplayItem>>,
}

impl ReplayState {
    /// The state as a finish chunk carries it; `None` when no block has
    /// anything to send back.
    pub fn into_value(self) -> Option<serde_json::Value> {
        if self.blocks.iter().all(Option::is_none) {
            return None;
        }
        // Strings and plain enums only: serializing cannot fail.
        serde_json::to_value(self).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_state_is_the_wire_items_aligned_with_the_blocks() {
        let state = ReplayState {
            blocks: vec![
                Some(ReplayItem::Reasoning(ReasoningItem {
                    id: Some("rs_1".into()),
                    summary: vec![SummaryPart::SummaryText { text: "s".into() }],
                    content: None,
                    encrypted_content: Some("enc".into()),
                })),
                None,
                Some(ReplayItem::Reasoning(ReasoningItem {
                    id: Some("rs_2".into()),
                    summary: Vec::new(),
                    content: Some(vec![ReasoningPart::ReasoningText { text: "t".into() }]),
                    encrypted_content: None,
                })),
            ],
        };
        let value = state.clone().into_value().unwrap();
        assert_eq!(
            value,
            json!({"blocks": [{"type": "reasoning", "id": "rs_1",
                               "summary": [{"type": "summary_text", "text": "s"}],
                               "encrypted_content": "enc"}, null,
                              {"type": "reasoning", "id": "rs_2", "summary": [],
                               "content": [{"type": "reasoning_text", "text": "t"}]}]})
        );
        assert_eq!(serde_json::from_value::<ReplayState>(value).unwrap(), state);
        assert_eq!(
            ReplayState {
                blocks: vec![None, None]
            }
            .into_value(),
            None
        );
    }
}
