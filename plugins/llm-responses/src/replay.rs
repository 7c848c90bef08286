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

/// A reasoning item as it is sent back: its id, its summary and its
/// encrypted content (an item without encrypted content is not kept: the
/// server, which stores nothing, could not read it back by id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasoningItem {
    /// The server's id of the item (`rs_…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Its summary parts (possibly none; the wire requires the list).
    #[serde(default)]
    pub summary: Vec<SummaryPart>,
    /// The model's reasoning, encrypted for the server alone.
    pub encrypted_content: String,
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
                    encrypted_content: "enc".into(),
                })),
                None,
            ],
        };
        let value = state.clone().into_value().unwrap();
        assert_eq!(
            value,
            json!({"blocks": [{"type": "reasoning", "id": "rs_1",
                               "summary": [{"type": "summary_text", "text": "s"}],
                               "encrypted_content": "enc"}, null]})
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
