use super::*;
use serde_json::{json, Value};

use dsh_llm_http::testing::chunk_types as types;

/// Feeds `events` in order; the chunks, or the first failure.
fn run(s: &mut StreamState, events: &[Value]) -> Result<Vec<Chunk>, LlmFailure> {
    let mut all = Vec::new();
    for e in events {
        all.extend(s.on_data(&e.to_string())?);
    }
    Ok(all)
}

fn feed(events: &[Value]) -> Vec<Chunk> {
    run(&mut StreamState::default(), events).unwrap()
}

fn fail(events: &[Value]) -> LlmFailure {
    run(&mut StreamState::default(), events).unwrap_err()
}

fn added(output: u64, item: Value) -> Value {
    json!({"type": "response.output_item.added", "output_index": output, "item": item, "sequence_number": 1})
}

fn done(output: u64, item: Value) -> Value {
    json!({"type": "response.output_item.done", "output_index": output, "item": item})
}

fn text_delta(output: u64, delta: &str) -> Value {
    json!({"type": "response.output_text.delta", "item_id": "msg", "output_index": output,
           "content_index": 0, "delta": delta})
}

fn summary_delta(output: u64, part: u64, delta: &str) -> Value {
    json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs", "output_index": output,
           "summary_index": part, "delta": delta})
}

fn args_delta(output: u64, delta: &str) -> Value {
    json!({"type": "response.function_call_arguments.delta", "item_id": "fc", "output_index": output,
           "delta": delta})
}

fn completed(usage: Value) -> Value {
    json!({"type": "response.completed", "response": {"id": "resp", "status": "completed", "usage": usage}})
}

fn call(call_id: &str, name: &str, arguments: &str) -> Value {
    json!({"type": "function_call", "id": "fc", "call_id": call_id, "name": name, "arguments": arguments})
}

fn the_finish(chunks: &[Chunk]) -> (FinishReason, Option<Value>) {
    match chunks.last() {
        Some(Chunk::Finish {
            reason,
            replay_state,
        }) => (reason.clone(), replay_state.clone()),
        other => panic!("no finish at the end: {other:?}"),
    }
}

#[test]
fn a_text_answer_becomes_one_block_then_usage_then_stop() {
    let chunks = feed(&[
        json!({"type": "response.created", "response": {"id": "resp", "status": "in_progress"}}),
        json!({"type": "response.in_progress", "response": {}}),
        added(
            0,
            json!({"type": "message", "id": "msg", "role": "assistant", "content": []}),
        ),
        json!({"type": "response.content_part.added", "output_index": 0, "part": {"type": "output_text", "text": ""}}),
        text_delta(0, "Hello "),
        text_delta(0, "there."),
        json!({"type": "response.output_text.done", "output_index": 0, "text": "Hello there."}),
        done(
            0,
            json!({"type": "message", "content": [{"type": "output_text", "text": "Hello there."}]}),
        ),
        completed(
            json!({"input_tokens": 20, "input_tokens_details": {"cached_tokens": 8},
                         "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}}),
        ),
    ]);
    assert_eq!(
        types(&chunks),
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
            block: ContentBlock::text("Hello there.")
        }
    );
    assert_eq!(
        serde_json::to_value(&chunks[4]).unwrap(),
        json!({"type": "usage", "usage": {"inputTokens": 12, "outputTokens": 5,
                                          "cacheReadTokens": 8, "reasoningTokens": 0}})
    );
    assert_eq!(the_finish(&chunks), (FinishReason::Stop, None));
}

#[test]
fn reasoning_and_calls_in_several_deltas_keep_the_reasoning_item_for_replay() {
    let mut s = StreamState::default();
    let chunks = run(
        &mut s,
        &[
            added(0, json!({"type": "reasoning", "id": "rs_1", "summary": []})),
            summary_delta(0, 0, "**Plan**"),
            summary_delta(0, 1, "Read it."),
            done(
                0,
                json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "enc-1",
                           "summary": [{"type": "summary_text", "text": "**Plan**"},
                                       {"type": "summary_text", "text": "Read it."}]}),
            ),
            added(1, call("call_a", "read", "")),
            args_delta(1, "{\"file_"),
            args_delta(1, "path\":\"a\"}"),
            json!({"type": "response.function_call_arguments.done", "output_index": 1,
                   "arguments": "{\"file_path\":\"a\"}"}),
            done(1, call("call_a", "read", "{\"file_path\":\"a\"}")),
            added(2, call("call_b", "bash", "")),
            args_delta(2, "{}"),
            done(2, call("call_b", "bash", "{}")),
            completed(json!({"input_tokens": 30, "output_tokens": 7})),
        ],
    )
    .unwrap();
    assert_eq!(
        types(&chunks),
        [
            "block-start",
            "reasoning-delta",
            "reasoning-delta",
            "block-end",
            "block-start",
            "tool-call-delta",
            "tool-call-delta",
            "tool-call-delta",
            "block-end",
            "block-start",
            "tool-call-delta",
            "tool-call-delta",
            "block-end",
            "usage",
            "finish"
        ]
    );
    assert_eq!(
        chunks[3],
        Chunk::BlockEnd {
            index: 0,
            block: ContentBlock::reasoning("**Plan**\n\nRead it.")
        }
    );
    assert_eq!(
        chunks[8],
        Chunk::BlockEnd {
            index: 1,
            block: ContentBlock::tool_call("call_a", "read", "{\"file_path\":\"a\"}")
        }
    );
    let (reason, replay) = the_finish(&chunks);
    assert_eq!(reason, FinishReason::ToolCalls);
    assert_eq!(
        replay,
        Some(json!({"blocks": [
            {"type": "reasoning", "id": "rs_1", "encrypted_content": "enc-1",
             "summary": [{"type": "summary_text", "text": "**Plan**"},
                         {"type": "summary_text", "text": "Read it."}]},
            null, null]}))
    );
}

#[test]
fn items_that_arrive_whole_give_their_text_and_arguments() {
    // A server that streams no deltas: the items' `.done` carry it all.
    let chunks = feed(&[
        done(
            0,
            json!({"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": "e"}),
        ),
        done(
            1,
            json!({"type": "message", "content": [{"type": "output_text", "text": "Done."}]}),
        ),
        done(2, call("c", "read", "{}")),
        completed(json!(null)),
    ]);
    let blocks: Vec<&ContentBlock> = chunks
        .iter()
        .filter_map(|c| match c {
            Chunk::BlockEnd { block, .. } => Some(block),
            _ => None,
        })
        .collect();
    assert_eq!(
        blocks,
        [
            &ContentBlock::reasoning(""),
            &ContentBlock::text("Done."),
            &ContentBlock::tool_call("c", "read", "{}")
        ]
    );
    let (reason, replay) = the_finish(&chunks);
    assert_eq!(reason, FinishReason::ToolCalls);
    assert_eq!(replay.unwrap()["blocks"][0]["encrypted_content"], "e");
}

#[test]
fn unknown_event_and_item_types_are_skipped_unread() {
    let chunks = feed(&[
        json!({"type": "response.future_thing", "delta": 5, "output_index": "x"}),
        json!({"type": "response.reasoning_summary_part.added", "output_index": 0, "part": {}}),
        json!({"no_type": true}),
        added(
            0,
            json!({"type": "web_search_call", "id": "ws", "action": {"query": 1}, "name": 7}),
        ),
        done(0, json!({"type": "web_search_call", "id": "ws"})),
        text_delta(1, "ok"),
        completed(json!({})),
    ]);
    assert_eq!(
        types(&chunks),
        ["block-start", "text-delta", "block-end", "usage", "finish"]
    );
    // `[DONE]` is not JSON and not an event: the adapter skips it before
    // this reader (see lib.rs); here it is malformed.
    assert_eq!(fail(&[json!("x")]).code, code::MALFORMED_RESPONSE);
}

#[test]
fn a_malformed_or_mistyped_event_is_a_clear_failure() {
    let mut s = StreamState::default();
    let f = s
        .on_data("{\"type\": \"response.output_text.delta\", ")
        .unwrap_err();
    assert_eq!(f.code, code::MALFORMED_RESPONSE);
    assert!(
        f.message.starts_with("the provider sent malformed JSON"),
        "{}",
        f.message
    );
    for bad in [
        json!({"type": "response.output_text.delta", "output_index": 0, "delta": 5}),
        json!({"type": "response.output_text.delta", "output_index": -1, "delta": "a"}),
        json!({"type": "response.output_text.delta", "delta": "a"}),
        added(
            0,
            json!({"type": "function_call", "call_id": "c", "name": ["read"]}),
        ),
    ] {
        let f = fail(std::slice::from_ref(&bad));
        assert_eq!(f.code, code::MALFORMED_RESPONSE, "{bad}");
        assert!(
            f.message
                .starts_with("the provider sent a stream event this adapter cannot read"),
            "{bad}: {}",
            f.message
        );
    }
    // Arguments for a call never announced, text for a call, text after
    // its item was done: the stream cannot be followed.
    for (events, says) in [
        (vec![args_delta(3, "{}")], "no function call started"),
        (
            vec![added(0, call("c", "read", "")), text_delta(0, "x")],
            "output item 0 is a function call",
        ),
        (
            vec![
                text_delta(0, "a"),
                done(0, json!({"type": "message"})),
                text_delta(0, "b"),
            ],
            "grew after it was done",
        ),
    ] {
        let f = fail(&events);
        assert_eq!(f.code, code::MALFORMED_RESPONSE);
        assert!(f.message.contains(says), "{}", f.message);
    }
}

#[test]
fn a_failed_response_maps_its_error_like_an_http_error() {
    let failed = |error: Value| json!({"type": "response.failed", "response": {"status": "failed", "error": error}});
    for (error, want) in [
        (
            json!({"code": "context_length_exceeded",
                   "message": "Your input exceeds the context window of this model. Please adjust your input and try again."}),
            code::CONTEXT_WINDOW_EXCEEDED,
        ),
        (
            json!({"code": "rate_limit_exceeded", "message": "Rate limit reached"}),
            code::RATE_LIMIT,
        ),
        // The wording alone, as a server without OpenAI's codes sends it.
        (
            json!({"message": "Your input exceeds the context window of this model."}),
            code::CONTEXT_WINDOW_EXCEEDED,
        ),
        (
            json!({"code": "insufficient_quota", "message": "pay"}),
            code::QUOTA,
        ),
        (
            json!({"code": "server_error", "message": "oops"}),
            code::SERVER,
        ),
    ] {
        let f = fail(&[text_delta(0, "partial"), failed(error.clone())]);
        assert_eq!(f.code, want, "{error}");
        assert!(
            f.message.contains(error["message"].as_str().unwrap()),
            "{}",
            f.message
        );
    }
    let f = fail(&[json!({"type": "response.failed", "response": {"status": "failed"}})]);
    assert_eq!(f.code, code::SERVER);
    assert!(f.message.contains("without an error"), "{}", f.message);
}

#[test]
fn an_error_event_is_the_failure_with_the_servers_words() {
    let f = fail(&[json!({"type": "error", "code": "rate_limit_exceeded",
                          "message": "Please try again in 20s", "param": null, "sequence_number": 3})]);
    assert_eq!(f.code, code::RATE_LIMIT);
    assert_eq!(
        f.message,
        "the provider reported an error mid-stream: Please try again in 20s (code: rate_limit_exceeded)"
    );
    let f = fail(&[
        json!({"type": "error", "error": {"message": "overloaded", "type": "server_error"}}),
    ]);
    assert_eq!(f.code, code::SERVER);
    // An error sent the chat-completions way (no type) fails the same.
    let f = fail(&[
        json!({"error": {"message": "context length exceeded", "code": "context_length_exceeded"}}),
    ]);
    assert_eq!(f.code, code::CONTEXT_WINDOW_EXCEEDED);
    // An event of a known type that does not read, but carries an error,
    // is that error.
    let f = fail(&[json!({"type": "response.output_text.delta", "delta": 5,
                          "error": {"message": "slow down", "code": "rate_limit_exceeded"}})]);
    assert_eq!(f.code, code::RATE_LIMIT);
}

#[test]
fn an_incomplete_response_is_max_tokens_or_a_quoted_stop() {
    let incomplete = |reason: Value| {
        json!({"type": "response.incomplete", "response": {"status": "incomplete",
               "incomplete_details": {"reason": reason}, "usage": {"input_tokens": 3, "output_tokens": 9}}})
    };
    let chunks = feed(&[text_delta(0, "cut"), incomplete(json!("max_output_tokens"))]);
    assert_eq!(the_finish(&chunks).0, FinishReason::MaxTokens);
    assert!(types(&chunks).contains(&"usage".to_owned()));
    // The content filter is a refusal: the same prompt is stopped again.
    let chunks = feed(&[text_delta(0, "cut"), incomplete(json!("content_filter"))]);
    match the_finish(&chunks).0 {
        FinishReason::Error { failure } => {
            assert_eq!(failure.code, REFUSAL);
            assert!(
                failure.message.contains("content filter"),
                "{}",
                failure.message
            );
        }
        other => panic!("{other:?}"),
    }
    for (reason, says) in [
        (json!("other_reason"), "(\"other_reason\")"),
        (json!(null), "(no reason given)"),
        (json!("x\u{1b}]52"), "(\"x\\u{1b}]52\")"),
    ] {
        let chunks = feed(&[text_delta(0, "cut"), incomplete(reason)]);
        match the_finish(&chunks).0 {
            FinishReason::Error { failure } => {
                assert_eq!(failure.code, code::SERVER);
                assert!(failure.message.ends_with(says), "{}", failure.message);
            }
            other => panic!("{other:?}"),
        }
    }
    // A `completed` event whose status says incomplete is read as such.
    let chunks = feed(&[
        text_delta(0, "cut"),
        json!({"type": "response.completed", "response": {"status": "incomplete",
               "incomplete_details": {"reason": "max_output_tokens"}}}),
    ]);
    assert_eq!(the_finish(&chunks).0, FinishReason::MaxTokens);
}

#[test]
fn a_complete_answer_with_nothing_in_it_is_empty() {
    let chunks = feed(&[
        added(0, json!({"type": "message", "content": []})),
        completed(json!({})),
    ]);
    match the_finish(&chunks).0 {
        FinishReason::Error { failure } => assert_eq!(failure.code, code::EMPTY_RESPONSE),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_caps_stop_a_flood_before_it_is_kept() {
    let mut s = StreamState::new(100, 2);
    let f = run(
        &mut s,
        &[
            text_delta(0, &"x".repeat(60)),
            text_delta(0, &"y".repeat(60)),
        ],
    )
    .unwrap_err();
    assert_eq!(f.code, code::MALFORMED_RESPONSE);
    assert!(
        f.message.contains("maxAnswerBytes") && f.message.contains("llm-responses config"),
        "{}",
        f.message
    );
    let mut s = StreamState::new(DEFAULT_MAX_ANSWER_BYTES, 2);
    let f = run(
        &mut s,
        &[
            added(0, call("a", "read", "")),
            added(1, call("b", "read", "")),
            added(2, call("c", "read", "")),
        ],
    )
    .unwrap_err();
    assert!(f.message.contains("maxToolCalls"), "{}", f.message);
    // Encrypted reasoning counts too: it is kept with the answer.
    let mut s = StreamState::new(1000, 2);
    let f = run(
        &mut s,
        &[done(
            0,
            json!({"type": "reasoning", "summary": [], "encrypted_content": "e".repeat(2000)}),
        )],
    )
    .unwrap_err();
    assert!(f.message.contains("maxAnswerBytes"), "{}", f.message);
}

#[test]
fn calls_without_or_with_repeated_ids_get_unique_ones() {
    let chunks = feed(&[
        added(
            0,
            json!({"type": "function_call", "name": "read", "arguments": "{}"}),
        ),
        added(1, call("same", "read", "{}")),
        added(2, call("same", "read", "{}")),
        completed(json!({})),
    ]);
    let ids: Vec<String> = chunks
        .iter()
        .filter_map(|c| match c {
            Chunk::BlockEnd {
                block: ContentBlock::ToolCall(t),
                ..
            } => Some(t.id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(
        ids[0].starts_with("call_") && ids[1] == "same" && ids[2] != "same",
        "{ids:?}"
    );
}

#[test]
fn a_response_with_only_its_terminal_event_is_read_from_its_output() {
    // Some servers send no item events: the answer is the response's
    // `output`, not an empty response.
    let output = json!([
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}],
         "encrypted_content": "enc"},
        {"type": "message", "id": "msg", "role": "assistant",
         "content": [{"type": "output_text", "text": "Reading.", "annotations": []}]},
        call("call_1", "read", "{\"file_path\":\"a\"}"),
    ]);
    let chunks = feed(&[json!({"type": "response.completed",
        "response": {"status": "completed", "output": output,
                     "usage": {"input_tokens": 5, "output_tokens": 2}}})]);
    let mut a = dsh_sdk::vocab::assembler::BlockAssembler::default();
    for c in &chunks {
        a.push(c);
    }
    let (blocks, _) = a.assemble().unwrap();
    assert_eq!(
        blocks,
        [
            ContentBlock::reasoning("plan"),
            ContentBlock::text("Reading."),
            ContentBlock::tool_call("call_1", "read", "{\"file_path\":\"a\"}"),
        ]
    );
    let (reason, replay) = the_finish(&chunks);
    assert_eq!(reason, FinishReason::ToolCalls);
    assert_eq!(replay.unwrap()["blocks"][0]["encrypted_content"], "enc");
    // An output that is not a list is an unreadable event.
    let f = fail(&[json!({"type": "response.completed", "response": {"output": 5}})]);
    assert_eq!(f.code, code::MALFORMED_RESPONSE);
}

#[test]
fn reasoning_in_the_clear_is_kept_to_be_sent_back() {
    // gpt-oss on vLLM: reasoning_text deltas, the item done with its
    // content and no encrypted content.
    let reasoning_delta = |delta: &str| {
        json!({"type": "response.reasoning_text.delta", "item_id": "rs_9", "output_index": 0,
               "content_index": 0, "delta": delta})
    };
    let chunks = feed(&[
        added(0, json!({"type": "reasoning", "id": "rs_9", "summary": []})),
        reasoning_delta("Let me "),
        reasoning_delta("think."),
        done(
            0,
            json!({"type": "reasoning", "id": "rs_9", "summary": [],
                       "content": [{"type": "reasoning_text", "text": "Let me think."}]}),
        ),
        added(1, call("c1", "bash", "")),
        done(1, call("c1", "bash", "{}")),
        completed(json!({})),
    ]);
    let (_, replay) = the_finish(&chunks);
    assert_eq!(
        replay.unwrap(),
        json!({"blocks": [{"type": "reasoning", "id": "rs_9", "summary": [],
                           "content": [{"type": "reasoning_text", "text": "Let me think."}]}, null]})
    );
    // Streamed without content at its done: the streamed text is kept;
    // a summary alone (OpenAI without encrypted content) is not.
    let chunks = feed(&[
        reasoning_delta("Hmm."),
        done(0, json!({"type": "reasoning", "id": "rs_9", "summary": []})),
        completed(json!({})),
    ]);
    assert_eq!(
        the_finish(&chunks).1.unwrap()["blocks"][0]["content"][0]["text"],
        "Hmm."
    );
    let chunks = feed(&[
        summary_delta(0, 0, "Summary."),
        done(0, json!({"type": "reasoning", "id": "rs_1", "summary": []})),
        completed(json!({})),
    ]);
    assert_eq!(the_finish(&chunks).1, None);
}
