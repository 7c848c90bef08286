//! Cutting the middle out of content too long for the model's context
//! window: the first and last parts of its text are kept around a marker,
//! every other block stays where it was. The tool-result pruner cuts old
//! results with it; a compaction engine cuts an item that cannot fit the
//! window (an oversized message in a summary request, or one it excludes
//! from later requests). The log keeps the original: a cut is what the
//! model sees, never what was recorded.
//!
//! A cut is bounded in code points and bytes ([`Keep`]) and, with
//! [`cut_within`], in estimated tokens ([`crate::vocab::tokens`], the
//! meter's estimate): the bytes kept follow the text's own density, so a
//! page of digits (a token each) keeps fewer bytes than a page of prose.

use super::super::message::{ContentBlock, Message, TextBlock};
use super::super::tokens;

/// How much of a long text [`cut_middle`] keeps: its first and last parts,
/// each bounded in code points and in bytes (the smaller bound wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keep {
    /// Code points kept from the start.
    pub head_chars: usize,
    /// Code points kept from the end.
    pub tail_chars: usize,
    /// Bytes kept from the start (UTF-8; a cut never splits a character).
    pub head_bytes: usize,
    /// Bytes kept from the end.
    pub tail_bytes: usize,
}

impl Keep {
    /// Keeps `head` and `tail` code points, whatever their bytes.
    pub fn chars(head: usize, tail: usize) -> Keep {
        Keep {
            head_chars: head,
            tail_chars: tail,
            head_bytes: usize::MAX,
            tail_bytes: usize::MAX,
        }
    }

    /// Keeps at most `max` bytes in all, `marker` included: four fifths of
    /// the rest from the start, one fifth from the end (where a tool's
    /// output ends: its status, its last error).
    pub fn bytes(max: usize, marker: &str) -> Keep {
        Keep::chars(usize::MAX, usize::MAX).within_bytes(max, marker)
    }

    /// This keep, bounded further to `max` bytes in all (`marker`
    /// included), split as [`Keep::bytes`] splits it.
    pub fn within_bytes(self, max: usize, marker: &str) -> Keep {
        let room = max.saturating_sub(marker.len());
        let head = room / 5 * 4 + room % 5;
        Keep {
            head_bytes: self.head_bytes.min(head),
            tail_bytes: self.tail_bytes.min(room - head),
            ..self
        }
    }
}

/// The bytes of the text of `blocks` (its `text` blocks).
pub fn text_bytes(blocks: &[ContentBlock]) -> usize {
    blocks.iter().map(|b| text_of(b).map_or(0, str::len)).sum()
}

/// The text of a `text` block (the only blocks [`cut_middle`] cuts).
fn text_of(block: &ContentBlock) -> Option<&str> {
    match block {
        ContentBlock::Text(t) => Some(&t.text),
        _ => None,
    }
}

/// `blocks` with the middle of their text cut out: the text blocks read as
/// one text, of which the first and last parts `keep` allows stay, and
/// `marker` goes once where the cut begins. A text block keeps its other
/// fields; one left empty is dropped; every other block stays in place.
/// `None` when the text is short enough to keep whole.
pub fn cut_middle(blocks: &[ContentBlock], keep: Keep, marker: &str) -> Option<Vec<ContentBlock>> {
    let joined: String = blocks.iter().filter_map(text_of).collect();
    let (head_end, tail_start) = cut_range(&joined, keep)?;
    let mut out = Vec::with_capacity(blocks.len());
    let mut start = 0;
    let mut marked = false;
    for block in blocks {
        let ContentBlock::Text(TextBlock { text, extra }) = block else {
            out.push(block.clone());
            continue;
        };
        let end = start + text.len();
        // Positions in this block; block boundaries are character
        // boundaries of the joined text, so these are too.
        let local = |at: usize| at.saturating_sub(start).min(text.len());
        let mut kept = text[..local(head_end)].to_owned();
        if start < tail_start && end > head_end && !marked {
            marked = true;
            kept.push_str(marker);
        }
        kept.push_str(&text[local(tail_start)..]);
        if !kept.is_empty() {
            out.push(ContentBlock::Text(TextBlock {
                text: kept,
                extra: extra.clone(),
            }));
        }
        start = end;
    }
    Some(out)
}

/// The span of `text` a cut removes, as byte positions on character
/// boundaries; `None` when `keep` keeps all of it.
fn cut_range(text: &str, keep: Keep) -> Option<(usize, usize)> {
    let head_by_chars = text
        .char_indices()
        .nth(keep.head_chars)
        .map_or(text.len(), |(i, _)| i);
    let head_end = head_by_chars.min(floor_boundary(text, keep.head_bytes));
    let tail_by_chars = match keep.tail_chars {
        0 => text.len(),
        n => text.char_indices().rev().nth(n - 1).map_or(0, |(i, _)| i),
    };
    let tail_by_bytes = ceil_boundary(text, text.len().saturating_sub(keep.tail_bytes));
    let tail_start = tail_by_chars.max(tail_by_bytes);
    (head_end < tail_start).then_some((head_end, tail_start))
}

/// The largest character boundary of `text` at or before `at`.
fn floor_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// The smallest character boundary of `text` at or after `at`.
fn ceil_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// The most passes [`cut_within`] makes to bring a cut under its tokens.
const TOKEN_PASSES: usize = 4;

/// [`cut_middle`] with `keep`, then bounded further in bytes until the
/// estimate of what is kept ([`tokens::of_blocks`]) is at most
/// `max_tokens`: each pass keeps the bytes the kept text's own density
/// allows, less a tenth (the head and tail may be denser than the whole).
/// `None` when the blocks are within both bounds as they are. A cut that
/// still runs over after its passes (blocks that are not text, which are
/// never cut) is answered as it stands.
pub fn cut_within(
    blocks: &[ContentBlock],
    keep: Keep,
    max_tokens: Option<u64>,
    marker: &str,
) -> Option<Vec<ContentBlock>> {
    let cut = cut_middle(blocks, keep, marker);
    let Some(max) = max_tokens else {
        return cut;
    };
    let mut keep = keep;
    let mut current = cut;
    for _ in 0..TOKEN_PASSES {
        let kept = current.as_deref().unwrap_or(blocks);
        let estimate = tokens::of_blocks(kept);
        if estimate <= max {
            return current;
        }
        let bytes = text_bytes(kept) as u128;
        let allowed = bytes * u128::from(max) * 9 / 10 / u128::from(estimate);
        keep = keep.within_bytes(usize::try_from(allowed).unwrap_or(usize::MAX), marker);
        // No text left to cut: the rest is not text.
        current = Some(cut_middle(blocks, keep, marker)?);
    }
    current
}

/// `message` with the middle of its visible text cut out ([`cut_within`],
/// the message's estimate ([`tokens::of_typed_message`]) within
/// `max_tokens`): a tool result's content, or else the message's own text
/// blocks (tool calls, reasoning and other blocks are kept). Every other
/// field stays as it was. `None` when nothing needed cutting.
pub fn cut_message(
    message: &Message,
    keep: Keep,
    max_tokens: Option<u64>,
    marker: &str,
) -> Option<Message> {
    let mut cut = message.clone();
    if let [ContentBlock::ToolResult(result)] = cut.content.as_mut_slice() {
        // The result's block and the role frame its content.
        let max =
            max_tokens.map(|m| m.saturating_sub(tokens::BLOCK_OVERHEAD + tokens::ROLE_OVERHEAD));
        result.content = cut_within(&result.content, keep, max, marker)?;
    } else {
        let max = max_tokens.map(|m| m.saturating_sub(tokens::ROLE_OVERHEAD));
        cut.content = cut_within(&message.content, keep, max, marker)?;
    }
    Some(cut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const M: &str = "[cut]";

    fn text(t: &str) -> ContentBlock {
        ContentBlock::text(t)
    }

    #[test]
    fn code_points_and_bytes_bound_the_kept_parts() {
        let long: String = ('a'..='z').cycle().take(100).collect();
        let cut = cut_middle(&[text(&long)], Keep::chars(10, 5), M).unwrap();
        assert_eq!(cut, [text(&format!("{}{M}{}", &long[..10], &long[95..]))]);
        // Short enough: nothing to cut.
        assert_eq!(cut_middle(&[text("abc")], Keep::chars(2, 1), M), None);
        // Bytes: 4/5 of the room after the marker first, 1/5 last.
        let keep = Keep::bytes(30, M);
        assert_eq!((keep.head_bytes, keep.tail_bytes), (20, 5));
        let cut = cut_middle(&[text(&long)], keep, M).unwrap();
        assert_eq!(cut, [text(&format!("{}{M}{}", &long[..20], &long[95..]))]);
        assert!(text_bytes(&cut) <= 30);
        // The smaller bound wins.
        let both = Keep::chars(3, 50).within_bytes(30, M);
        let cut = cut_middle(&[text(&long)], both, M).unwrap();
        assert_eq!(cut, [text(&format!("{}{M}{}", &long[..3], &long[95..]))]);
    }

    #[test]
    fn a_byte_cut_never_splits_a_character() {
        let crabs = "🦀".repeat(20);
        let cut = cut_middle(&[text(&crabs)], Keep::bytes(27, M), M).unwrap();
        // 22 bytes of room: 18 from the start (4 crabs, 16 bytes), 4 from
        // the end (1 crab).
        assert_eq!(cut, [text(&format!("{}{M}🦀", "🦀".repeat(4)))]);
    }

    #[test]
    fn blocks_are_cut_across_and_other_blocks_are_kept_in_place() {
        let image: ContentBlock =
            serde_json::from_value(json!({"type": "image", "attachment": {"id": "x"}})).unwrap();
        let mut tagged = text(&"m".repeat(80));
        if let ContentBlock::Text(t) = &mut tagged {
            t.extra.insert("cache".into(), json!(true));
        }
        let blocks = [text(&"h".repeat(8)), image.clone(), tagged, text("tail!")];
        let cut = cut_middle(&blocks, Keep::chars(10, 5), M).unwrap();
        let mut kept = text(&format!("mm{M}"));
        if let ContentBlock::Text(t) = &mut kept {
            t.extra.insert("cache".into(), json!(true));
        }
        assert_eq!(cut, [text(&"h".repeat(8)), image, kept, text("tail!")]);
    }

    #[test]
    fn a_message_is_cut_in_its_result_content_or_its_own_text() {
        let user = Message::user_text("u1", "x".repeat(100));
        let cut = cut_message(&user, Keep::bytes(25, M), None, M).unwrap();
        assert_eq!((cut.id.as_str(), cut.source.kind()), ("u1", "user"));
        assert_eq!(text_bytes(&cut.content), 25);
        let result: Message = serde_json::from_value(json!({"id": "r", "role": "user",
            "content": [{"type": "tool-result", "toolCallId": "c", "content": [{"type": "text", "text": "y".repeat(100)}]}],
            "source": {"kind": "tool", "callId": "c"}}))
        .unwrap();
        let cut = cut_message(&result, Keep::bytes(25, M), None, M).unwrap();
        let block = cut.tool_result_block().unwrap();
        assert_eq!(text_bytes(&block.content), 25);
        assert_eq!(block.tool_call_id, "c");
        assert!(cut_message(&result, Keep::bytes(1000, M), None, M).is_none());
        // Within an estimate of 20 tokens, framing included.
        let all = Keep::chars(usize::MAX, usize::MAX);
        let cut = cut_message(&result, all, Some(20), M).unwrap();
        assert!(tokens::of_typed_message(&cut) <= 20);
        assert!(tokens::of_typed_message(&result) > 20);
        assert!(cut_message(&result, all, Some(1000), M).is_none());
    }

    #[test]
    fn a_token_bound_keeps_fewer_bytes_of_dense_text() {
        let all = Keep::chars(usize::MAX, usize::MAX);
        let digits: String = (0..2000).map(|i| format!("{i:05}\n")).collect();
        let prose = "the quick brown fox jumps over the lazy dog ".repeat(300);
        let (d, p) = (
            cut_within(&[text(&digits)], all, Some(500), M).unwrap(),
            cut_within(&[text(&prose)], all, Some(500), M).unwrap(),
        );
        for cut in [&d, &p] {
            let n = tokens::of_blocks(cut);
            assert!((400..=500).contains(&n), "{n}");
        }
        assert!(text_bytes(&d) * 2 < text_bytes(&p));
        // Within the bound already: nothing to cut.
        assert_eq!(cut_within(&[text("short")], all, Some(500), M), None);
        // The chars keep applies too.
        let both = cut_within(&[text(&prose)], Keep::chars(10, 10), Some(500), M).unwrap();
        assert_eq!(text_bytes(&both), 20 + M.len());
    }
}
