//! The event reader: a stream's events in, chunks out.

use super::*;
use dsh_llm_http::answer_cap::DELTA_COST;
use dsh_llm_http::failure::MAX_MESSAGE_CHARS;
use dsh_llm_http::testing;
use dsh_sdk::vocab::assembler::BlockAssembler;
use serde_json::{json, Value};

fn start_message(usage: Value) -> String {
    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
           "content": [], "model": "claude", "stop_reason": null, "usage": usage}})
    .to_string()
}

fn block_start(index: u64, block: Value) -> String {
    json!({"type": "content_block_start", "index": index, "content_block": block}).to_string()
}

fn delta(index: u64, delta: Value) -> String {
    json!({"type": "content_block_delta", "index": index, "delta": delta}).to_string()
}

fn text_delta(index: u64, text: &str) -> String {
    delta(index, json!({"type": "text_delta", "text": text}))
}

fn block_stop(index: u64) -> String {
    json!({"type": "content_block_stop", "index": index}).to_string()
}

fn message_delta(stop: &str, output: u64) -> String {
    json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
           "usage": {"output_tokens": output}})
    .to_string()
}

const STOP: &str = r#"{"type":"message_stop"}"#;
const PING: &str = r#"{"type":"ping"}"#;

/// A text answer's events: `hello world`, 10 input tokens, 3 output.
fn text_answer() -> Vec<String> {
    vec![
        start_message(json!({"input_tokens": 10, "output_tokens": 1})),
        PING.into(),
        block_start(0, json!({"type": "text", "text": ""})),
        text_delta(0, "hello "),
        text_delta(0, "world"),
        block_stop(0),
        message_delta("end_turn", 3),
        STOP.into(),
    ]
}

/// Every chunk of a stream of `events` (then `finish`, when it stopped).
fn run_with(mut s: StreamState, events: &[String]) -> Result<Vec<Chunk>, LlmFailure> {
    let mut all = Vec::new();
    for e in events {
        all.extend(s.on_data(e)?);
        if s.stopped() {
            all.extend(s.finish());
            break;
        }
    }
    Ok(all)
}

fn run(events: &[String]) -> Result<Vec<Chunk>, LlmFailure> {
    run_with(StreamState::default(), events)
}

fn assembled(chunks: &[Chunk]) -> BlockAssembler {
    let mut a = BlockAssembler::default();
    for c in chunks {
        a.push(c);
    }
    a
}

fn last_failure(chunks: &[Chunk]) -> LlmFailure {
    match chunks.last() {
        Some(Chunk::Finish {
            reason: FinishReason::Error { failure },
            ..
        }) => failure.clone(),
        other => panic!("not an error finish: {other:?}"),
    }
}

#[test]
fn a_text_answer_streams_its_chunks_in_the_harness_grammar() {
    let all = run(&text_answer()).unwrap();
    assert_eq!(
        all,
        testing::text_answer(
            &["hello ", "world"],
            TokenUsage {
                input_tokens: 10,
                output_tokens: 3,
                ..TokenUsage::default()
            }
        )
    );
}

/// Thinking (signed), text, then two tool calls whose input streams in
/// pieces; cache reads and writes in the usage.
fn thinking_tool_answer() -> Vec<String> {
    vec![
        start_message(
            json!({"input_tokens": 12, "cache_creation_input_tokens": 300,
                             "cache_read_input_tokens": 4000, "output_tokens": 1}),
        ),
        block_start(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        delta(0, json!({"type": "thinking_delta", "thinking": "Let me "})),
        delta(0, json!({"type": "thinking_delta", "thinking": "look."})),
        delta(
            0,
            json!({"type": "signature_delta", "signature": "EqQBsig=="}),
        ),
        block_stop(0),
        block_start(1, json!({"type": "text", "text": ""})),
        text_delta(1, "Reading."),
        block_stop(1),
        block_start(
            2,
            json!({"type": "tool_use", "id": "toolu_01", "name": "read", "input": {}}),
        ),
        delta(2, json!({"type": "input_json_delta", "partial_json": ""})),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "{\"file_pa"}),
        ),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "th\": \"a.txt\"}"}),
        ),
        block_stop(2),
        block_start(
            3,
            json!({"type": "tool_use", "id": "toolu_02", "name": "bash", "input": {}}),
        ),
        block_stop(3),
        message_delta("tool_use", 90),
        STOP.into(),
    ]
}

#[test]
fn thinking_text_and_tool_calls_assemble_with_the_signature_in_the_replay_state() {
    let all = run(&thinking_tool_answer()).unwrap();
    let a = assembled(&all);
    let (blocks, replay) = a.assemble().unwrap();
    assert_eq!(
        blocks,
        [
            ContentBlock::reasoning("Let me look."),
            ContentBlock::text("Reading."),
            ContentBlock::tool_call("toolu_01", "read", "{\"file_path\": \"a.txt\"}"),
            // No input streamed: an empty object.
            ContentBlock::tool_call("toolu_02", "bash", "{}"),
        ]
    );
    assert_eq!(
        replay,
        Some(json!({"blocks": [{"type": "thinking", "signature": "EqQBsig=="}, null, null, null]}))
    );
    assert_eq!(a.finish(), FinishReason::ToolCalls);
    assert_eq!(
        a.usage(),
        Some(&TokenUsage {
            input_tokens: 12,
            output_tokens: 90,
            cache_read_tokens: Some(4000),
            cache_write_tokens: Some(300),
            reasoning_tokens: None,
        })
    );
    // The call's name arrives with its first delta, the reasoning as
    // reasoning deltas; the empty input piece sends nothing.
    assert!(all.contains(&Chunk::ToolCallDelta {
        index: 2,
        id: "toolu_01".into(),
        name: Some("read".into()),
        arguments_delta: String::new()
    }));
    assert!(all.contains(&Chunk::ReasoningDelta {
        index: 0,
        text: "Let me ".into()
    }));
    let empty_pieces = all
        .iter()
        .filter(|c| matches!(c, Chunk::ToolCallDelta { name: None, arguments_delta, .. } if arguments_delta.is_empty()))
        .count();
    assert_eq!(empty_pieces, 0);
}

#[test]
fn redacted_thinking_is_an_empty_reasoning_block_whose_data_is_kept() {
    let all = run(&[
        start_message(json!({"input_tokens": 1, "output_tokens": 1})),
        block_start(0, json!({"type": "redacted_thinking", "data": "ENCRYPTED"})),
        block_stop(0),
        block_start(1, json!({"type": "text", "text": "Done."})),
        block_stop(1),
        message_delta("end_turn", 5),
        STOP.into(),
    ])
    .unwrap();
    let (blocks, replay) = assembled(&all).assemble().unwrap();
    assert_eq!(
        blocks,
        [ContentBlock::reasoning(""), ContentBlock::text("Done.")]
    );
    assert_eq!(
        replay,
        Some(json!({"blocks": [{"type": "redacted_thinking", "data": "ENCRYPTED"}, null]}))
    );
}

#[test]
fn unknown_events_blocks_and_deltas_are_skipped() {
    let mut events = text_answer();
    events.insert(
        1,
        r#"{"type":"future_event","index":"x","delta":[1]}"#.into(),
    );
    events.insert(
        2,
        block_start(
            7,
            json!({"type": "server_tool_use", "id": "srv", "name": "web_search", "input": {}}),
        ),
    );
    events.insert(
        3,
        delta(
            7,
            json!({"type": "input_json_delta", "partial_json": "{\"q\":1}"}),
        ),
    );
    events.insert(4, block_stop(7));
    events.insert(
        7,
        delta(
            0,
            json!({"type": "citations_delta", "citation": {"cited_text": "x"}}),
        ),
    );
    let all = run(&events).unwrap();
    assert_eq!(all, run(&text_answer()).unwrap());
}

#[test]
fn an_error_event_mid_stream_is_the_failure_with_the_servers_words() {
    let mut events = text_answer();
    events.truncate(4);
    events.push(
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
            .to_string(),
    );
    let f = run(&events).unwrap_err();
    assert_eq!(f.code, code::SERVER, "{f:?}");
    assert_eq!(
        f.message,
        "the provider reported an error mid-stream: Overloaded (type: overloaded_error)"
    );
    // A rate limit stays retryable as such; an error without words says so.
    let f = run(&[
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}})
            .to_string(),
    ])
    .unwrap_err();
    assert_eq!(f.code, code::RATE_LIMIT);
    let f = run(&[r#"{"type":"error"}"#.to_owned()]).unwrap_err();
    assert_eq!(f.code, code::SERVER);
    assert!(f.message.contains("without saying what"), "{}", f.message);
    // A long message is cut.
    let long = "M".repeat(50_000);
    let f = run(&[
        json!({"type": "error", "error": {"type": "api_error", "message": long}}).to_string(),
    ])
    .unwrap_err();
    assert!(
        f.message.len() < MAX_MESSAGE_CHARS + 200
            && f.message.contains("(cut: the message was 50000 bytes)"),
        "{}",
        &f.message[f.message.len() - 100..]
    );
}

#[test]
fn bad_json_and_unreadable_events_fail_malformed_saying_which() {
    let f = run(&["{\"type\":".to_owned()]).unwrap_err();
    assert_eq!(f.code, code::MALFORMED_RESPONSE);
    assert!(
        f.message.starts_with("the provider sent malformed JSON"),
        "{}",
        f.message
    );
    for bad in [
        r#"{"index":0}"#.to_owned(),
        text_delta(0, "x").replace("\"x\"", "5"),
        block_start(0, json!({"type": "tool_use", "id": "t"})),
        json!({"type": "content_block_stop", "index": "0"}).to_string(),
        block_start(0, json!({"type": "redacted_thinking"})),
    ] {
        let mut events = vec![block_start(0, json!({"type": "text", "text": ""}))];
        if bad.contains("content_block_start") {
            events.clear();
        }
        events.push(bad.clone());
        let f = run(&events).unwrap_err();
        assert_eq!(f.code, code::MALFORMED_RESPONSE, "{bad}");
        assert!(
            f.message
                .starts_with("the provider sent a stream event this adapter cannot read"),
            "{bad}: {}",
            f.message
        );
    }
}

#[test]
fn events_out_of_order_fail_malformed_naming_the_block() {
    let text = || block_start(0, json!({"type": "text", "text": ""}));
    let tool = || {
        block_start(
            1,
            json!({"type": "tool_use", "id": "t", "name": "read", "input": {}}),
        )
    };
    for (events, says) in [
        (
            vec![text_delta(0, "x")],
            "a text_delta for content block 0, which never started",
        ),
        (
            vec![text(), block_stop(0), text_delta(0, "x")],
            "a text_delta for content block 0 after its content_block_stop",
        ),
        (vec![text(), text()], "content block 0 twice"),
        (
            vec![block_stop(3)],
            "a content_block_stop for content block 3, which never started",
        ),
        (
            vec![tool(), text_delta(1, "x")],
            "a text_delta for content block 1, a tool_use block",
        ),
        (
            vec![
                text(),
                delta(0, json!({"type": "signature_delta", "signature": "s"})),
            ],
            "a signature_delta for content block 0, a text block",
        ),
        (
            vec![block_start(
                0,
                json!({"type": "tool_use", "id": "t", "name": "read", "input": [1]}),
            )],
            "a tool_use block 0 whose input is not an object",
        ),
    ] {
        let f = run(&events).unwrap_err();
        assert_eq!(f.code, code::MALFORMED_RESPONSE, "{says}");
        assert_eq!(f.message, format!("the provider sent {says}"));
    }
    // A second stop of a closed block is harmless.
    let mut events = text_answer();
    events.insert(6, block_stop(0));
    assert_eq!(run(&events).unwrap(), run(&text_answer()).unwrap());
}

#[test]
fn stop_reasons_map_to_finishes() {
    let answer = |stop: &str| {
        let mut events = text_answer();
        events[6] = message_delta(stop, 3);
        run(&events).unwrap()
    };
    assert_eq!(
        answer("stop_sequence").last(),
        Some(&Chunk::finish(FinishReason::Stop))
    );
    assert_eq!(
        answer("pause_turn").last(),
        Some(&Chunk::finish(FinishReason::Stop))
    );
    assert_eq!(
        answer("max_tokens").last(),
        Some(&Chunk::finish(FinishReason::MaxTokens))
    );
    assert_eq!(
        answer("model_context_window_exceeded").last(),
        Some(&Chunk::finish(FinishReason::MaxTokens))
    );
    let f = last_failure(&answer("refusal"));
    assert_eq!(f.code, REFUSAL);
    assert!(f.message.contains("declined"), "{}", f.message);
    let odd = format!("\u{1b}]52;c;x\u{7}{}", "F".repeat(500));
    let f = last_failure(&answer(&odd));
    assert_eq!(f.code, code::SERVER);
    assert!(
        f.message
            .starts_with("the model stopped: \"\\u{1b}]52;c;x\\u{7}FFF")
            && f.message.ends_with("(cut: 509 bytes in all)"),
        "{}",
        f.message
    );
}

#[test]
fn a_cut_answer_drops_its_calls_and_their_replay_entries() {
    let mut events = thinking_tool_answer();
    let at = events.len() - 2;
    events[at] = message_delta("max_tokens", 90);
    let (blocks, replay) = assembled(&run(&events).unwrap()).assemble().unwrap();
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    assert_eq!(
        replay,
        Some(json!({"blocks": [{"type": "thinking", "signature": "EqQBsig=="}, null]}))
    );
}

#[test]
fn an_empty_answer_is_an_empty_response() {
    let all = run(&[
        start_message(json!({"input_tokens": 1, "output_tokens": 1})),
        block_start(0, json!({"type": "text", "text": ""})),
        block_stop(0),
        message_delta("end_turn", 1),
        STOP.into(),
    ])
    .unwrap();
    assert_eq!(last_failure(&all).code, code::EMPTY_RESPONSE);
    // The empty answer was billed: its usage is reported before the failure.
    assert_eq!(
        all[all.len() - 2],
        Chunk::Usage {
            usage: TokenUsage {
                input_tokens: 1,
                output_tokens: 1,
                ..TokenUsage::default()
            }
        },
        "{all:?}"
    );
}

#[test]
fn a_flood_of_empty_blocks_ends_at_the_answer_cap() {
    // Each block counts as a delta, so empty text blocks (or blocks of a
    // type this adapter skips) cannot pile up past the cap.
    for block in [
        json!({"type": "text", "text": ""}),
        json!({"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}),
    ] {
        let mut s = StreamState::new(100 * DELTA_COST, DEFAULT_MAX_TOOL_CALLS);
        let mut failure = None;
        for i in 0..1000u64 {
            let r = s
                .on_data(&block_start(i, block.clone()))
                .and_then(|_| s.on_data(&block_stop(i)));
            if let Err(f) = r {
                failure = Some((i, f));
                break;
            }
        }
        let (at, f) = failure.expect("the flood ends");
        assert_eq!(f.code, code::MALFORMED_RESPONSE, "{block}");
        assert!(f.message.contains("maxAnswerBytes"), "{}", f.message);
        assert_eq!(at, 100, "{block}");
    }
}

#[test]
fn an_input_sent_whole_at_the_start_is_not_doubled_by_deltas() {
    let all = run(&[
        block_start(
            0,
            json!({"type": "tool_use", "id": "t", "name": "read", "input": {"file_path": "x"}}),
        ),
        delta(
            0,
            json!({"type": "input_json_delta", "partial_json": "{\"file_path\": \"x\"}"}),
        ),
        block_stop(0),
        message_delta("tool_use", 1),
        STOP.into(),
    ])
    .unwrap();
    let (blocks, _) = assembled(&all).assemble().unwrap();
    assert_eq!(
        blocks,
        [ContentBlock::tool_call(
            "t",
            "read",
            "{\"file_path\":\"x\"}"
        )]
    );
}

#[test]
fn blocks_left_open_at_message_stop_close_in_order() {
    let all = run(&[
        block_start(0, json!({"type": "text", "text": "a"})),
        block_start(
            1,
            json!({"type": "tool_use", "id": "t", "name": "read", "input": {"file_path": "x"}}),
        ),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}}).to_string(),
        STOP.into(),
    ])
    .unwrap();
    let (blocks, _) = assembled(&all).assemble().unwrap();
    assert_eq!(
        blocks,
        [
            ContentBlock::text("a"),
            // An input sent whole at the start is the arguments.
            ContentBlock::tool_call("t", "read", "{\"file_path\":\"x\"}"),
        ]
    );
    // No usage reported, none sent.
    assert!(!all.iter().any(|c| matches!(c, Chunk::Usage { .. })));
}

#[test]
fn a_missing_or_repeated_call_id_gets_a_fresh_one() {
    let all = run(&[
        block_start(
            0,
            json!({"type": "tool_use", "id": "same", "name": "read", "input": {}}),
        ),
        block_start(
            1,
            json!({"type": "tool_use", "id": "same", "name": "read", "input": {}}),
        ),
        block_start(2, json!({"type": "tool_use", "name": "read", "input": {}})),
        message_delta("tool_use", 1),
        STOP.into(),
    ])
    .unwrap();
    let (blocks, _) = assembled(&all).assemble().unwrap();
    let ids: Vec<String> = blocks
        .iter()
        .map(|b| match b {
            ContentBlock::ToolCall(c) => c.id.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ids[0], "same");
    assert!(
        ids[1].starts_with("call_") && ids[2].starts_with("call_") && ids[1] != ids[2],
        "{ids:?}"
    );
}

#[test]
fn an_answer_past_its_cap_fails_malformed_as_the_delta_arrives() {
    // The block, then its two deltas.
    let cap = 100 + 3 * DELTA_COST;
    let mut s = StreamState::new(cap, DEFAULT_MAX_TOOL_CALLS);
    s.on_data(&block_start(0, json!({"type": "thinking", "thinking": ""})))
        .unwrap();
    s.on_data(&delta(
        0,
        json!({"type": "thinking_delta", "thinking": "r".repeat(50)}),
    ))
    .unwrap();
    s.on_data(&delta(
        0,
        json!({"type": "thinking_delta", "thinking": "r".repeat(50)}),
    ))
    .unwrap();
    for over in [
        delta(0, json!({"type": "thinking_delta", "thinking": "r"})),
        delta(0, json!({"type": "signature_delta", "signature": "s"})),
        block_start(
            1,
            json!({"type": "tool_use", "id": "t", "name": "x", "input": {}}),
        ),
        block_start(1, json!({"type": "redacted_thinking", "data": "d"})),
        message_delta("end_turn", 1),
    ] {
        let f = s.on_data(&over).unwrap_err();
        assert_eq!(f.code, code::MALFORMED_RESPONSE, "{over}");
        assert!(f.message.contains("maxAnswerBytes"), "{}", f.message);
    }
    assert_eq!(s.open[&0].text.len(), 100, "nothing more kept");
    assert_eq!(s.open.len(), 1, "no block opened past the cap");
}

#[test]
fn an_answer_past_its_tool_call_cap_fails_malformed() {
    let mut s = StreamState::new(DEFAULT_MAX_ANSWER_BYTES, 2);
    let call = |i: u64| {
        block_start(
            i,
            json!({"type": "tool_use", "id": format!("t{i}"), "name": "x", "input": {}}),
        )
    };
    s.on_data(&call(0)).unwrap();
    s.on_data(&call(1)).unwrap();
    let f = s.on_data(&call(2)).unwrap_err();
    assert_eq!(f.code, code::MALFORMED_RESPONSE);
    assert!(f.message.contains("maxToolCalls"), "{}", f.message);
    assert_eq!(s.open.len(), 2, "the third call was not kept");
}
