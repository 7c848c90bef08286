//! Helpers for the adapters' unit tests, built only with the `testing`
//! feature (each adapter's dev-dependency on this crate turns it on): the
//! chunk grammar as the adapters' stream tests read and expect it.

use dsh_sdk::vocab::message::block_type;
use dsh_sdk::vocab::{Chunk, ContentBlock, FinishReason, TokenUsage};

/// The `type` tag of each chunk, as logged (`block-start`, `text-delta`,
/// `usage`, `finish`...).
pub fn chunk_types(chunks: &[Chunk]) -> Vec<String> {
    chunks
        .iter()
        .map(|c| match serde_json::to_value(c) {
            Ok(v) => match v["type"].as_str() {
                Some(kind) => kind.to_owned(),
                None => panic!("a chunk without a string `type`: {v}"),
            },
            Err(e) => panic!("a chunk that does not serialize: {c:?}: {e}"),
        })
        .collect()
}

/// The chunks of an answer of one text block streamed as `deltas`, then
/// `usage`, then `finish: stop`: what an adapter makes of a plain text
/// answer.
pub fn text_answer(deltas: &[&str], usage: TokenUsage) -> Vec<Chunk> {
    let mut chunks = vec![Chunk::BlockStart {
        index: 0,
        block_type: block_type::TEXT.into(),
    }];
    chunks.extend(deltas.iter().map(|d| Chunk::text(0, *d)));
    chunks.push(Chunk::BlockEnd {
        index: 0,
        block: ContentBlock::text(deltas.concat()),
    });
    chunks.push(Chunk::Usage { usage });
    chunks.push(Chunk::finish(FinishReason::Stop));
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_answer_reads_as_its_chunk_types() {
        let chunks = text_answer(&["a", "b"], TokenUsage::default());
        assert_eq!(
            chunk_types(&chunks),
            [
                "block-start",
                "text-delta",
                "text-delta",
                "block-end",
                "usage",
                "finish"
            ]
        );
        assert_eq!(
            chunks[3],
            Chunk::BlockEnd {
                index: 0,
                block: ContentBlock::text("ab")
            }
        );
    }
}
