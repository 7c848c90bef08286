//! One `tool/result` of the surface, pruned: its `compaction/prune` record
//! (the shadow price), the replacing `tool/result` (the same record with
//! the pruned content, nothing else changed) and the reply's entry.

use dsh_sdk::api::compaction::PrunedEntry;
use dsh_sdk::vocab::compaction::{CompactionPrune, ShadowedRange};
use dsh_sdk::vocab::records::ToolResult;
use dsh_sdk::vocab::{tokens, ContentBlock};

use crate::prune::{prune_content, text_chars, Config};

/// What pruning one result appends and reports.
#[derive(Debug)]
pub struct Pruned {
    /// The `compaction/prune` record.
    pub record: CompactionPrune,
    /// The replacing `tool/result`.
    pub replacement: ToolResult,
    /// The reply's entry (its `replacementSeq` is known once appended).
    pub entry: PrunedEntry,
}

/// `original` (the `tool/result` at `seq`) pruned, or `None` when its text
/// is within the threshold (and its estimate within `max_tokens`) or its
/// message holds no `tool-result` block.
pub fn prune_result(
    config: &Config,
    seq: u64,
    original: ToolResult,
    max_tokens: Option<u64>,
) -> Option<Pruned> {
    // A result message is one `tool-result` block; anything else has no
    // result content to prune.
    let Some(ContentBlock::ToolResult(block)) = original.message.content.first() else {
        return None;
    };
    let pruned = prune_content(config, &block.content, max_tokens)?;
    let record = CompactionPrune {
        shadowed_range: ShadowedRange {
            start: seq,
            end: seq,
        },
        shadowed_seqs: vec![seq],
        shadowed_token_count: tokens::of_typed_message(&original.message),
    };
    let entry = PrunedEntry {
        original_seq: seq,
        replacement_seq: 0,
        call_id: original
            .message
            .call_id()
            .unwrap_or(&block.tool_call_id)
            .to_owned(),
        chars_before: text_chars(&block.content) as u64,
        chars_after: text_chars(&pruned) as u64,
    };
    let mut replacement = original;
    if let Some(ContentBlock::ToolResult(block)) = replacement.message.content.first_mut() {
        block.content = pruned;
    }
    Some(Pruned {
        record,
        replacement,
        entry,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prune::PRUNE_MARKER;

    fn small() -> Config {
        Config {
            threshold_chars: 60,
            head_chars: 10,
            tail_chars: 5,
        }
        .checked()
        .unwrap()
    }

    /// A `tool/result` as the original writes it (its own key order, an
    /// extra field on the text block and on the record).
    fn original_text(text: &str) -> String {
        format!(
            r#"{{"turn":1,"step":2,"message":{{"source":{{"kind":"tool","callId":"c7"}},"content":[{{"type":"tool-result","toolCallId":"c7","content":[{{"type":"text","text":"{text}","cache":true}},{{"type":"image","attachment":{{"id":"i"}}}}],"isError":false}}],"role":"user","id":"m1"}},"meta":{{"lines":3}},"later":1}}"#
        )
    }

    #[test]
    fn the_replacement_differs_from_the_original_in_its_content_alone() {
        let long = "x".repeat(100);
        let original: ToolResult = serde_json::from_str(&original_text(&long)).unwrap();
        let p = prune_result(&small(), 9, original, None).unwrap();
        let kept = format!("{}{}{}", "x".repeat(10), PRUNE_MARKER, "x".repeat(5));
        let escaped = serde_json::to_string(&kept).unwrap();
        assert_eq!(
            serde_json::to_string(&p.replacement).unwrap(),
            original_text(&escaped[1..escaped.len() - 1])
        );
        assert_eq!((p.entry.call_id.as_str(), p.entry.original_seq), ("c7", 9));
        assert_eq!(
            (p.entry.chars_before, p.entry.chars_after),
            (100, kept.chars().count() as u64)
        );
        assert_eq!(p.record.shadowed_seqs, [9]);
        assert_eq!(
            (p.record.shadowed_range.start, p.record.shadowed_range.end),
            (9, 9)
        );
        let message = serde_json::from_str::<ToolResult>(&original_text(&long))
            .unwrap()
            .message;
        assert_eq!(
            p.record.shadowed_token_count,
            tokens::of_typed_message(&message)
        );
    }

    #[test]
    fn a_short_result_or_a_message_without_a_result_block_is_left_alone() {
        let short: ToolResult = serde_json::from_str(&original_text("short")).unwrap();
        assert!(prune_result(&small(), 1, short, None).is_none());
        let odd = r#"{"turn":1,"step":1,"message":{"id":"m","role":"user","content":[{"type":"text","text":"no result block"}],"source":{"kind":"tool","callId":"c"}}}"#;
        let odd: ToolResult = serde_json::from_str(odd).unwrap();
        assert!(prune_result(&small(), 1, odd, None).is_none());
    }
}
