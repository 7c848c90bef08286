//! What this adapter keeps of an answer to send it back unchanged: the
//! `signature` of each `thinking` block and the `data` of each
//! `redacted_thinking` block. The Messages API checks both when an answer
//! returns in the history (a tool loop with thinking on needs them), and
//! the harness's reasoning block holds only text.
//!
//! They travel as the answer's replay state (the `finish` chunk's
//! `replayState`, kept by the loop in the message's `source.replayState`):
//! `{"blocks": [entry, ...]}`, one entry per block of the answer in block
//! order, `null` for a block without one. `llm` removes the state before
//! a request reaches another adapter, so no other wire sees it; the
//! assembler drops it when its `blocks` no longer line up with the
//! message's.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One block's entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ReplayBlock {
    /// A `thinking` block: its signature, as the server sent it.
    Thinking {
        /// The signature (opaque).
        signature: String,
    },
    /// A `redacted_thinking` block: its encrypted data, as sent.
    RedactedThinking {
        /// The data (opaque).
        data: String,
    },
}

/// An answer's replay state, as written.
#[derive(Debug, Serialize)]
pub struct ReplayState<'a> {
    /// One entry per block of the answer (`None` for a block without one).
    pub blocks: &'a [Option<ReplayBlock>],
}

impl ReplayState<'_> {
    /// The state as the `finish` chunk carries it; `None` when no block
    /// has an entry (nothing to send back).
    pub fn value(blocks: &[Option<ReplayBlock>]) -> Option<Value> {
        if blocks.iter().all(Option::is_none) {
            return None;
        }
        // Strings and nulls only: serializing cannot fail.
        serde_json::to_value(ReplayState { blocks }).ok()
    }
}

/// The entries of a stored replay state, one per block of `len` blocks;
/// `None` when there is no state, it is not this adapter's shape, or its
/// blocks do not line up with the message's (then no block is sent back
/// with a signature, and the model's earlier thinking is left out).
pub fn entries(state: Option<&Value>, len: usize) -> Option<Vec<Option<ReplayBlock>>> {
    let blocks = state?.get("blocks")?.as_array()?;
    if blocks.len() != len {
        return None;
    }
    // An entry of another shape is no entry (the state is opaque to
    // everything but this adapter, but a log may have been edited).
    Some(
        blocks
            .iter()
            .map(|b| ReplayBlock::deserialize(b).ok())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_state_round_trips_and_is_absent_without_entries() {
        let blocks = [
            Some(ReplayBlock::Thinking {
                signature: "sig".into(),
            }),
            None,
            Some(ReplayBlock::RedactedThinking { data: "enc".into() }),
        ];
        let value = ReplayState::value(&blocks).unwrap();
        assert_eq!(
            value,
            json!({"blocks": [{"type": "thinking", "signature": "sig"}, null,
                              {"type": "redacted_thinking", "data": "enc"}]})
        );
        assert_eq!(entries(Some(&value), 3).unwrap(), blocks);
        assert_eq!(ReplayState::value(&[None, None]), None);
    }

    #[test]
    fn a_state_that_does_not_line_up_or_is_not_ours_is_none() {
        let value = json!({"blocks": [{"type": "thinking", "signature": "s"}]});
        assert_eq!(entries(Some(&value), 2), None);
        assert_eq!(entries(Some(&json!({"sig": 1})), 1), None);
        assert_eq!(entries(None, 0), None);
        assert_eq!(
            entries(Some(&json!({"blocks": [{"type": "thinking"}, 5]})), 2).unwrap(),
            [None, None]
        );
    }
}
