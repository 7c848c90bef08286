//! `BlockAssembler` against the original's assembler and properties specs
//! (`packages/llm/llm/tests/assembler.spec.ts`, `properties.spec.ts`).

use serde_json::{json, Value};

use super::*;
use crate::vocab::message::Message;

fn assemble(chunks: &[Value]) -> BlockAssembler {
    let mut a = BlockAssembler::default();
    for c in chunks {
        a.push(&serde_json::from_value(c.clone()).unwrap());
    }
    a
}

/// The blocks as JSON, to compare with the logged shapes.
trait AsJson {
    fn json_blocks(&self) -> Vec<Value>;
    fn json_interrupted(&self) -> Vec<Value>;
    fn finish_kind(&self) -> &'static str;
}

impl AsJson for BlockAssembler {
    fn json_blocks(&self) -> Vec<Value> {
        let blocks = self.blocks().unwrap();
        blocks
            .iter()
            .map(|b| serde_json::to_value(b).unwrap())
            .collect()
    }
    fn json_interrupted(&self) -> Vec<Value> {
        let blocks = self.interrupted_blocks();
        blocks
            .iter()
            .map(|b| serde_json::to_value(b).unwrap())
            .collect()
    }
    fn finish_kind(&self) -> &'static str {
        self.finish().kind()
    }
}

fn start(index: u64, block_type: &str) -> Value {
    json!({"type": "block-start", "index": index, "blockType": block_type})
}

fn text(index: u64, t: &str) -> Value {
    json!({"type": "text-delta", "index": index, "text": t})
}

fn reasoning(index: u64, t: &str) -> Value {
    json!({"type": "reasoning-delta", "index": index, "text": t})
}

fn call(index: u64, id: &str, name: Option<&str>, args: &str) -> Value {
    let mut c =
        json!({"type": "tool-call-delta", "index": index, "id": id, "argumentsDelta": args});
    if let Some(n) = name {
        c["name"] = json!(n);
    }
    c
}

fn end(index: u64, block: Value) -> Value {
    json!({"type": "block-end", "index": index, "block": block})
}

fn finish(kind: &str) -> Value {
    json!({"type": "finish", "reason": {"kind": kind}})
}

#[test]
fn interleaved_blocks_assemble_in_order_of_first_sighting() {
    let a = assemble(&[
        start(0, "reasoning"),
        reasoning(0, "think"),
        start(1, "text"),
        text(1, "Hel"),
        reasoning(0, "ing"),
        text(1, "lo"),
        start(2, "tool-call"),
        call(2, "c1", Some("read"), "{\"a\""),
        call(2, "c1", None, ":1}"),
        finish("tool-calls"),
    ]);
    assert_eq!(
        a.json_blocks(),
        [
            json!({"type": "reasoning", "text": "thinking"}),
            json!({"type": "text", "text": "Hello"}),
            json!({"type": "tool-call", "id": "c1", "name": "read", "arguments": "{\"a\":1}"}),
        ]
    );
    assert_eq!(a.finish_kind(), "tool-calls");
}

#[test]
fn block_end_is_authoritative_and_the_first_one_wins() {
    let a = assemble(&[
        start(0, "text"),
        text(0, "draft"),
        end(0, json!({"type": "text", "text": "final"})),
        end(0, json!({"type": "text", "text": "second close"})),
    ]);
    assert_eq!(a.json_blocks(), [json!({"type": "text", "text": "final"})]);
}

#[test]
fn deltas_without_a_block_start_are_tolerated() {
    let a = assemble(&[text(0, "a"), text(0, "b"), call(1, "k", Some("grep"), "{}")]);
    assert_eq!(
        a.json_blocks(),
        [
            json!({"type": "text", "text": "ab"}),
            json!({"type": "tool-call", "id": "k", "name": "grep", "arguments": "{}"}),
        ]
    );
}

#[test]
fn usage_is_absent_until_a_usage_chunk_and_then_the_last_one() {
    let mut a = assemble(&[text(0, "x")]);
    assert_eq!(a.usage(), None);
    for (i, o) in [(1, 2), (3, 4)] {
        a.push(&Chunk::Usage {
            usage: TokenUsage {
                input_tokens: i,
                output_tokens: o,
                ..TokenUsage::default()
            },
        });
    }
    assert_eq!(
        a.usage().map(|u| (u.input_tokens, u.output_tokens)),
        Some((3, 4))
    );
}

#[test]
fn a_duplicate_block_start_is_ignored() {
    let a = assemble(&[
        start(0, "text"),
        text(0, "a"),
        start(0, "text"),
        text(0, "b"),
    ]);
    assert_eq!(a.json_blocks(), [json!({"type": "text", "text": "ab"})]);
}

#[test]
fn deltas_after_a_block_end_are_ignored() {
    let a = assemble(&[
        start(0, "tool-call"),
        call(0, "k", Some("read"), "{}"),
        end(
            0,
            json!({"type": "tool-call", "id": "k", "name": "read", "arguments": "{}"}),
        ),
        call(0, "other", Some("write"), "junk"),
        text(1, "t"),
        end(1, json!({"type": "text", "text": "t"})),
        text(1, " straggler"),
    ]);
    assert_eq!(
        a.json_blocks(),
        [
            json!({"type": "tool-call", "id": "k", "name": "read", "arguments": "{}"}),
            json!({"type": "text", "text": "t"}),
        ]
    );
}

#[test]
fn an_open_tool_call_without_id_is_call_index_and_without_name_is_empty() {
    let a = assemble(&[start(3, "tool-call"), call(3, "", None, "{\"x\":")]);
    assert_eq!(
        a.json_blocks(),
        [json!({"type": "tool-call", "id": "call-3", "name": "", "arguments": "{\"x\":"})]
    );
}

#[test]
fn a_tool_call_keeps_its_last_non_empty_id_and_name() {
    // The original: `if (chunk.name) partial.toolCallName = chunk.name`.
    let a = assemble(&[
        call(0, "first", Some(""), "a"),
        call(0, "second", Some("read"), "b"),
        call(0, "", Some("write"), "c"),
    ]);
    assert_eq!(
        a.json_blocks(),
        [json!({"type": "tool-call", "id": "second", "name": "write", "arguments": "abc"})]
    );
}

#[test]
fn max_tokens_drops_every_tool_call() {
    let a = assemble(&[
        text(0, "partial"),
        call(1, "k1", Some("read"), "{\"fi"),
        end(
            2,
            json!({"type": "tool-call", "id": "k2", "name": "read", "arguments": "{}"}),
        ),
        finish("max-tokens"),
    ]);
    assert_eq!(
        a.json_blocks(),
        [json!({"type": "text", "text": "partial"})]
    );
}

#[test]
fn interrupted_blocks_keep_only_visible_text_and_reasoning() {
    let a = assemble(&[
        reasoning(0, "why"),
        text(1, "   \n"),
        call(2, "k", Some("read"), "{}"),
        text(3, "Half an ans"),
        end(4, json!({"type": "text", "text": "closed"})),
    ]);
    assert_eq!(
        a.json_interrupted(),
        [
            json!({"type": "reasoning", "text": "why"}),
            json!({"type": "text", "text": "Half an ans"}),
            json!({"type": "text", "text": "closed"}),
        ]
    );
}

#[test]
fn finish_is_the_last_finish_chunk_or_stop() {
    assert_eq!(assemble(&[text(0, "x")]).finish_kind(), "stop");
    assert!(!assemble(&[text(0, "x")]).finished());
    let a = assemble(&[finish("tool-calls"), finish("max-tokens")]);
    assert_eq!(a.finish_kind(), "max-tokens");
}

/// A small deterministic generator, so the properties run over many
/// chunk sequences without a dependency.
fn chunks(seed: u64, n: usize) -> Vec<Value> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    (0..n)
        .map(|_| {
            let i = next(4);
            match next(8) {
                0 => start(i, ["text", "reasoning", "tool-call"][next(3) as usize]),
                1 => text(i, "t"),
                2 => reasoning(i, "r"),
                3 => call(i, ["", "a", "b"][next(3) as usize], Some("n"), "{"),
                4 => end(i, json!({"type": "text", "text": "e"})),
                5 => json!({"type": "usage", "usage": {"inputTokens": i, "outputTokens": 0}}),
                6 => finish(["stop", "tool-calls", "max-tokens"][next(3) as usize]),
                _ => call(i, "c", None, "}"),
            }
        })
        .collect()
}

#[test]
fn partials_never_outnumber_distinct_indices_and_blocks_is_idempotent() {
    for seed in 0..500 {
        let cs = chunks(seed, 40);
        let a = assemble(&cs);
        let mut indices: Vec<u64> = cs
            .iter()
            .filter(|c| c["type"] != "usage" && c["type"] != "finish")
            .filter_map(|c| c["index"].as_u64())
            .collect();
        indices.sort_unstable();
        indices.dedup();
        let blocks = a.json_blocks();
        assert!(blocks.len() <= indices.len(), "seed {seed}");
        assert_eq!(
            a.json_blocks(),
            blocks,
            "seed {seed}: blocks() is idempotent"
        );
        let last_finish = cs.iter().rev().find(|c| c["type"] == "finish");
        let want = last_finish.map_or("stop", |f| f["reason"]["kind"].as_str().unwrap_or(""));
        assert_eq!(a.finish_kind(), want, "seed {seed}");
    }
}

#[test]
fn a_tool_result_message_couples_its_block_to_its_source() {
    let m = Message::tool_result("r1", "k7", vec![ContentBlock::text("out")], false);
    assert_eq!(
        serde_json::to_value(&m).unwrap(),
        json!({"id": "r1", "role": "user",
               "content": [{"type": "tool-result", "toolCallId": "k7", "content": [{"type": "text", "text": "out"}], "isError": false}],
               "source": {"kind": "tool", "callId": "k7"}})
    );
}

#[test]
fn an_assistant_message_has_role_assistant_and_a_model_source() {
    let m = serde_json::to_value(Message::assistant(
        "a1",
        vec![ContentBlock::text("hi")],
        "deepseek",
        "v4",
    ))
    .unwrap();
    assert_eq!(m["role"], "assistant");
    assert_eq!(
        m["source"],
        json!({"kind": "model", "provider": "deepseek", "model": "v4"})
    );
    assert_eq!(m["id"], "a1", "the given identity is kept");
}

#[test]
fn an_unknown_open_block_type_cannot_be_assembled() {
    // The original throws `cannot assemble incomplete block of type "x"`.
    let a = assemble(&[start(0, "text"), text(0, "a"), start(1, "image")]);
    assert_eq!(a.blocks(), Err(AssembleError::Incomplete("image".into())));
    // A closed one of any type is its block-end's block.
    let b = assemble(&[
        start(0, "image"),
        end(0, json!({"type": "image", "attachment": {"id": "i"}})),
    ]);
    assert_eq!(
        b.json_blocks(),
        [json!({"type": "image", "attachment": {"id": "i"}})]
    );
    assert_eq!(a.json_interrupted(), [json!({"type": "text", "text": "a"})]);
}

fn finish_with_replay(kind: &str, replay: Value) -> Value {
    json!({"type": "finish", "reason": {"kind": kind}, "replayState": replay})
}

#[test]
fn replay_state_passes_through_without_blocks_and_is_pruned_with_dropped_tool_calls() {
    let plain = assemble(&[
        text(0, "x"),
        finish_with_replay("stop", json!({"response": "r"})),
    ]);
    assert_eq!(plain.assemble().unwrap().1, Some(json!({"response": "r"})));
    let cut = assemble(&[
        text(0, "partial"),
        call(1, "k1", Some("read"), "{"),
        finish_with_replay(
            "max-tokens",
            json!({"response": "r", "blocks": ["b0", "b1"]}),
        ),
    ]);
    assert_eq!(
        cut.json_blocks(),
        [json!({"type": "text", "text": "partial"})]
    );
    assert_eq!(
        cut.assemble().unwrap().1,
        Some(json!({"response": "r", "blocks": ["b0"]}))
    );
}

#[test]
fn a_misaligned_replay_state_is_dropped() {
    let a = assemble(&[
        text(0, "x"),
        text(1, "y"),
        finish_with_replay("stop", json!({"response": "r", "blocks": ["only one"]})),
    ]);
    assert_eq!(a.assemble().unwrap().1, None);
    assert_eq!(a.json_blocks().len(), 2);
}
