//! The provider's stream events as the harness's chunks: blocks open,
//! grow by deltas and close whole; usage, then one `finish`.

use std::collections::{HashMap, HashSet};

use dsh_sdk::vocab::message::block_type;
use dsh_sdk::vocab::{Chunk, ContentBlock, FinishReason, LlmFailure, TokenUsage};

use serde_json::value::RawValue;

use crate::response::{finish_reason, CallDelta, SentCall, StreamEvent};
use dsh_llm_http::answer_cap::{AnswerBudget, DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_TOOL_CALLS};
use dsh_llm_http::call_ids::CallIds;
use dsh_llm_http::failure::{code, event_error, quoted_reason, stream_failure, unreadable};
use dsh_llm_http::lenient::Count;

#[derive(Clone, Copy, PartialEq)]
enum Open {
    Reasoning(u64),
    Text(u64),
}

/// One tool call of the answer, as its deltas arrive.
struct Call {
    /// Its block index in the chunk grammar.
    block: u64,
    /// Its id, settled when the call starts ([`CallIds::assign`]).
    id: String,
    name: String,
    args: String,
}

/// Turns provider deltas into the harness's chunk grammar.
pub struct StreamState {
    next_index: u64,
    open: Option<Open>,
    text: String,
    reasoning: String,
    /// The tool calls, in the order they started.
    calls: Vec<Call>,
    /// Provider tool index -> position in `calls`.
    by_index: HashMap<u64, usize>,
    ids: CallIds,
    budget: AnswerBudget,
    finish: Option<String>,
    usage: Option<TokenUsage>,
    any_content: bool,
}

impl Default for StreamState {
    fn default() -> Self {
        StreamState::new(DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_TOOL_CALLS)
    }
}

/// The bytes one delta adds to the answer (its text, reasoning, and each
/// tool call's id, name and arguments), and how many chunks carry them.
fn delta_size(reasoning: Option<&str>, text: Option<&str>, calls: &[CallDelta]) -> (usize, usize) {
    let bytes = reasoning.map_or(0, str::len)
        + text.map_or(0, str::len)
        + calls.iter().map(CallDelta::size).sum::<usize>();
    let parts = usize::from(reasoning.is_some()) + usize::from(text.is_some()) + calls.len();
    (bytes, parts)
}

impl StreamState {
    /// A stream whose answer may hold `max_answer_bytes` and
    /// `max_tool_calls` tool calls (see [`dsh_llm_http::answer_cap`]).
    pub fn new(max_answer_bytes: usize, max_tool_calls: usize) -> Self {
        StreamState {
            next_index: 0,
            open: None,
            text: String::new(),
            reasoning: String::new(),
            calls: Vec::new(),
            by_index: HashMap::new(),
            ids: CallIds::new(crate::PLUGIN),
            budget: AnswerBudget::new(crate::PLUGIN, max_answer_bytes, max_tool_calls),
            finish: None,
            usage: None,
            any_content: false,
        }
    }

    fn close_open(&mut self, out: &mut Vec<Chunk>) {
        let (index, block) = match self.open.take() {
            Some(Open::Reasoning(i)) => (
                i,
                ContentBlock::reasoning(std::mem::take(&mut self.reasoning)),
            ),
            Some(Open::Text(i)) => (i, ContentBlock::text(std::mem::take(&mut self.text))),
            None => return,
        };
        out.push(Chunk::BlockEnd { index, block });
    }

    /// Opens a block of `kind` at the next index, closing the open one.
    fn open_block(&mut self, kind: &str, out: &mut Vec<Chunk>) -> u64 {
        self.close_open(out);
        let index = self.next_index;
        self.next_index += 1;
        out.push(Chunk::BlockStart {
            index,
            block_type: kind.to_owned(),
        });
        index
    }

    /// One `data:` payload. A delta that takes the answer past its cap is
    /// refused before anything of it is kept. An `error` in the payload
    /// comes first: it is the failure even when the payload's other fields
    /// cannot be read (looked for alone, a second reading of the text,
    /// only then).
    pub fn on_data(&mut self, data: &str) -> Result<Vec<Chunk>, LlmFailure> {
        let event: StreamEvent<'_> = match serde_json::from_str(data) {
            Ok(event) => event,
            Err(e) => {
                return Err(match event_error(data) {
                    Some(error) => stream_failure(error),
                    None => unreadable(&e),
                })
            }
        };
        if let Some(error) = event.error {
            return Err(stream_failure(error));
        }
        let mut out = Vec::new();
        if let Some(u) = &event.usage.0 {
            self.usage = Some(u.usage());
        }
        let Some(choice) = event.choices.0 else {
            return Ok(out);
        };
        if let Some(delta) = &choice.delta {
            let reasoning = delta.reasoning_content.as_deref().filter(|s| !s.is_empty());
            let text = delta.content.as_deref().filter(|s| !s.is_empty());
            let pieces = usize::from(reasoning.is_some()) + usize::from(text.is_some());
            let calls = self.read_calls(delta.tool_calls, pieces)?;
            let (bytes, parts) = delta_size(reasoning, text, &calls);
            self.budget.charge(bytes, parts)?;
            self.budget.start_calls(self.new_calls(&calls))?;
            if let Some(r) = reasoning {
                let index = match self.open {
                    Some(Open::Reasoning(i)) => i,
                    _ => {
                        let i = self.open_block(block_type::REASONING, &mut out);
                        self.open = Some(Open::Reasoning(i));
                        i
                    }
                };
                self.reasoning.push_str(r);
                self.any_content = true;
                out.push(Chunk::ReasoningDelta {
                    index,
                    text: r.to_owned(),
                });
            }
            if let Some(t) = text {
                let index = match self.open {
                    Some(Open::Text(i)) => i,
                    _ => {
                        let i = self.open_block(block_type::TEXT, &mut out);
                        self.open = Some(Open::Text(i));
                        i
                    }
                };
                self.text.push_str(t);
                self.any_content = true;
                out.push(Chunk::text(index, t));
            }
            for call in &calls {
                self.on_call(call, &mut out);
            }
        }
        if let Some(r) = choice.finish_reason.0 {
            // Kept until the answer ends: it counts like the answer's text.
            self.budget.charge(r.len(), 0)?;
            self.finish = Some(r);
        }
        Ok(out)
    }

    /// The tool-call deltas of an event (`tool_calls`, as its text): each
    /// is a piece the answer's cap charges, so they are counted first, and
    /// read only when they and the event's `pieces` other pieces fit. A
    /// delta without an index is the call at its position in the list.
    fn read_calls(
        &self,
        raw: Option<&RawValue>,
        pieces: usize,
    ) -> Result<Vec<CallDelta>, LlmFailure> {
        let Some(raw) = raw else {
            return Ok(Vec::new());
        };
        let Count(n) = serde_json::from_str(raw.get()).map_err(|e| unreadable(&e))?;
        self.budget.check_parts(n.saturating_add(pieces))?;
        let sent: Vec<SentCall> = serde_json::from_str(raw.get()).map_err(|e| unreadable(&e))?;
        Ok(sent
            .into_iter()
            .enumerate()
            .map(|(position, call)| call.at(position))
            .collect())
    }

    /// One tool-call delta: joins its call (started here when new).
    fn on_call(&mut self, call: &CallDelta, out: &mut Vec<Chunk>) {
        let at = self.call_at(call, out);
        let t = &mut self.calls[at];
        let name = call.name();
        if let (Some(n), true) = (name, t.name.is_empty()) {
            t.name = n.to_owned();
        }
        let args = call.arguments();
        t.args.push_str(args);
        self.any_content = true;
        out.push(Chunk::ToolCallDelta {
            index: t.block,
            id: t.id.clone(),
            name: name.map(str::to_owned),
            arguments_delta: args.to_owned(),
        });
    }

    /// How many calls of a delta's `tool_calls` start a call of their own
    /// (a provider index not seen before in this answer).
    fn new_calls(&self, calls: &[CallDelta]) -> usize {
        calls
            .iter()
            .map(|c| c.index)
            .filter(|i| !self.by_index.contains_key(i))
            .collect::<HashSet<u64>>()
            .len()
    }

    /// The position in `calls` of the call a tool-call delta belongs to (by
    /// its provider index); a call seen first starts its block and settles
    /// its id: the delta's, unless that is missing, empty or another call's.
    /// The call's later deltas join it by index, whatever id they carry.
    fn call_at(&mut self, call: &CallDelta, out: &mut Vec<Chunk>) -> usize {
        if let Some(&at) = self.by_index.get(&call.index) {
            return at;
        }
        let block = self.open_block(block_type::TOOL_CALL, out);
        let id = self.ids.assign(call.index, call.id.as_ref());
        self.calls.push(Call {
            block,
            id,
            name: String::new(),
            args: String::new(),
        });
        let at = self.calls.len() - 1;
        self.by_index.insert(call.index, at);
        at
    }

    /// At `[DONE]`: close blocks, then usage, then finish. An answer with
    /// no content that stopped is one `EMPTY_RESPONSE` finish.
    pub fn finish(&mut self) -> Vec<Chunk> {
        let mut out = Vec::new();
        self.close_open(&mut out);
        self.by_index.clear();
        for Call {
            block,
            id,
            name,
            args,
        } in std::mem::take(&mut self.calls)
        {
            out.push(Chunk::BlockEnd {
                index: block,
                block: ContentBlock::tool_call(id, name, args),
            });
        }
        if let Some(usage) = self.usage.take() {
            out.push(Chunk::Usage { usage });
        }
        let reason = match self.finish.as_deref() {
            Some(finish_reason::STOP) | None if !self.any_content => {
                return vec![LlmFailure::new(
                    code::EMPTY_RESPONSE,
                    "the model returned an empty completion",
                )
                .finish(false)];
            }
            Some(finish_reason::STOP) | None => FinishReason::Stop,
            Some(finish_reason::TOOL_CALLS) => FinishReason::ToolCalls,
            Some(finish_reason::LENGTH) => FinishReason::MaxTokens,
            Some(other) => FinishReason::Error {
                failure: LlmFailure::new(
                    code::SERVER,
                    format!("the model stopped: {}", quoted_reason(other)),
                ),
            },
        };
        out.push(Chunk::finish(reason));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_llm_http::failure::MAX_MESSAGE_CHARS;
    use dsh_llm_http::lenient::MAX_TOKEN_COUNT;
    use dsh_sdk::vocab::message::ToolCallBlock;
    use serde_json::{json, Value};

    use dsh_llm_http::testing::{chunk_types as types, text_answer};

    #[test]
    fn deltas_become_the_chunk_grammar() {
        let mut s = StreamState::default();
        let mut all = Vec::new();
        for d in [
            r#"{"choices":[{"delta":{"reasoning_content":""}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"think"}}]}"#,
            r#"{"choices":[{"delta":{"content":"hi"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"read","arguments":"{\"a\""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_cache_hit_tokens":4}}"#,
        ] {
            all.extend(s.on_data(d).unwrap());
        }
        all.extend(s.finish());
        assert_eq!(
            types(&all),
            [
                "block-start",
                "reasoning-delta",
                "block-end",
                "block-start",
                "text-delta",
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
            all[9],
            Chunk::BlockEnd {
                index: 2,
                block: ContentBlock::tool_call("c1", "read", "{\"a\":1}")
            }
        );
        assert_eq!(
            serde_json::to_value(&all[10]).unwrap(),
            json!({"type": "usage", "usage": {"inputTokens": 6, "outputTokens": 5, "cacheReadTokens": 4}})
        );
        assert_eq!(all[11], Chunk::finish(FinishReason::ToolCalls));
    }

    fn in_stream(payload: Value) -> LlmFailure {
        let mut s = StreamState::default();
        s.on_data(&payload.to_string()).unwrap_err()
    }

    #[test]
    fn in_stream_errors_map_like_http_errors_and_keep_the_servers_words() {
        let cases = [
            (
                json!({"message": "This model's maximum context length is 65536 tokens", "code": "context_length_exceeded", "type": "invalid_request_error"}),
                code::CONTEXT_WINDOW_EXCEEDED,
            ),
            (
                json!({"message": "Rate limit reached", "code": "rate_limit_exceeded", "type": "requests"}),
                code::RATE_LIMIT,
            ),
            (
                json!({"message": "You exceeded your current quota", "code": "insufficient_quota", "type": "insufficient_quota"}),
                code::QUOTA,
            ),
            (
                json!({"message": "Overloaded", "type": "overloaded_error"}),
                code::SERVER,
            ),
            (
                json!({"message": "The server had an error", "type": "server_error"}),
                code::SERVER,
            ),
            (
                json!({"message": "odd", "code": "weird_thing"}),
                code::SERVER,
            ),
            // vLLM sends the HTTP status as a numeric code.
            (
                json!({"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}),
                code::INVALID_REQUEST,
            ),
            (json!({"message": "busy", "code": 503}), code::SERVER),
        ];
        for (error, want) in cases {
            let f = in_stream(json!({"error": error}));
            assert_eq!(f.code, want, "{error}");
            assert!(
                f.message.contains(error["message"].as_str().unwrap()),
                "{}",
                f.message
            );
            if let Some(c) = error.get("code") {
                assert!(
                    f.message.contains(&c.to_string().replace('"', "")),
                    "{}",
                    f.message
                );
            }
            assert_eq!(f.status, None, "a 200 stream has no error status");
        }
        let f = in_stream(json!({"error": "plain text error"}));
        assert_eq!(
            (f.code.as_str(), f.message.contains("plain text error")),
            (code::SERVER, true)
        );
        assert!(
            in_stream(json!({"error": {"message": "x", "code": "c", "type": "t"}}))
                .message
                .ends_with("x (code: c, type: t)")
        );
    }

    /// The tool-call blocks `finish` closes an answer with.
    fn closed_calls(s: &mut StreamState) -> Vec<ToolCallBlock> {
        s.finish()
            .into_iter()
            .filter_map(|c| match c {
                Chunk::BlockEnd {
                    block: ContentBlock::ToolCall(call),
                    ..
                } => Some(call),
                _ => None,
            })
            .collect()
    }

    fn call_delta(call: Value) -> String {
        json!({"choices": [{"delta": {"tool_calls": [call]}}]}).to_string()
    }

    #[test]
    fn a_call_without_an_id_gets_one_that_its_later_deltas_carry() {
        for first in [
            json!({"index": 0, "function": {"name": "read", "arguments": "{\"a\""}}),
            json!({"index": 0, "id": "", "function": {"name": "read", "arguments": "{\"a\""}}),
        ] {
            let mut s = StreamState::default();
            let mut deltas = s.on_data(&call_delta(first)).unwrap();
            deltas.extend(
                s.on_data(&call_delta(
                    json!({"index": 0, "function": {"arguments": ":1}"}}),
                ))
                .unwrap(),
            );
            let ids: Vec<String> = deltas
                .into_iter()
                .filter_map(|c| match c {
                    Chunk::ToolCallDelta { id, .. } => Some(id),
                    _ => None,
                })
                .collect();
            let id = ids[0].clone();
            assert!(id.starts_with("call_") && id.len() > 5, "{id}");
            assert_eq!(ids, [id.clone(), id.clone()], "stable within the answer");
            let calls = closed_calls(&mut s);
            assert_eq!(
                calls
                    .iter()
                    .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
                    .collect::<Vec<_>>(),
                [(id.as_str(), "read", "{\"a\":1}")]
            );
        }
    }

    #[test]
    fn a_second_call_with_the_first_ones_id_gets_its_own() {
        let mut s = StreamState::default();
        for (index, args) in [(0, "{}"), (1, "{\"b\":2}")] {
            s.on_data(&call_delta(json!({"index": index, "id": "call_0", "function": {"name": "read", "arguments": args}})))
                .unwrap();
        }
        // A later delta of the second call repeating the id still joins it.
        s.on_data(&call_delta(
            json!({"index": 1, "id": "call_0", "function": {"arguments": ""}}),
        ))
        .unwrap();
        let calls = closed_calls(&mut s);
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].arguments.as_str()),
            ("call_0", "{}")
        );
        let second = &calls[1].id;
        assert!(
            second.starts_with("call_") && second != "call_0",
            "{second}"
        );
        assert_eq!(calls[1].arguments, "{\"b\":2}");
    }

    #[test]
    fn unique_ids_pass_untouched() {
        let mut s = StreamState::default();
        for (index, id) in [(0, "a"), (1, "b")] {
            s.on_data(&call_delta(
                json!({"index": index, "id": id, "function": {"name": "read", "arguments": "{}"}}),
            ))
            .unwrap();
        }
        let ids: Vec<String> = closed_calls(&mut s).into_iter().map(|c| c.id).collect();
        assert_eq!(ids, ["a", "b"]);
    }

    fn reasoning(text: &str) -> String {
        json!({"choices": [{"delta": {"reasoning_content": text}}]}).to_string()
    }

    #[test]
    fn an_answer_past_its_cap_fails_malformed_as_the_delta_arrives() {
        use dsh_llm_http::answer_cap::DELTA_COST;
        // Two deltas of 50 bytes fit a cap of 100 + 2 delta costs; a third
        // byte in any field does not, before anything of it is kept.
        let cap = 100 + 2 * DELTA_COST;
        let mut s = StreamState::new(cap, DEFAULT_MAX_TOOL_CALLS);
        s.on_data(&reasoning(&"r".repeat(50))).unwrap();
        s.on_data(&json!({"choices": [{"delta": {"content": "t".repeat(50)}}]}).to_string())
            .unwrap();
        for over in [
            reasoning("r"),
            json!({"choices": [{"delta": {"content": "t"}}]}).to_string(),
            call_delta(json!({"index": 0, "id": "c", "function": {"name": "", "arguments": ""}})),
        ] {
            let f = s.on_data(&over).unwrap_err();
            assert_eq!(f.code, code::MALFORMED_RESPONSE, "{over}");
            assert!(f.message.contains("maxAnswerBytes"), "{}", f.message);
        }
        assert_eq!(
            (s.reasoning.len(), s.text.len()),
            (0, 50),
            "nothing more kept"
        );
        assert!(s.calls.is_empty());
    }

    #[test]
    fn tool_call_arguments_count_toward_the_cap() {
        let mut s = StreamState::new(1000, DEFAULT_MAX_TOOL_CALLS);
        let big = "x".repeat(400);
        s.on_data(&call_delta(
            json!({"index": 0, "id": "c", "function": {"name": "read", "arguments": big}}),
        ))
        .unwrap();
        s.on_data(&call_delta(
            json!({"index": 0, "function": {"arguments": big}}),
        ))
        .unwrap();
        let f = s
            .on_data(&call_delta(
                json!({"index": 0, "function": {"arguments": big}}),
            ))
            .unwrap_err();
        assert_eq!(f.code, code::MALFORMED_RESPONSE);
    }

    #[test]
    fn empty_and_usage_only_payloads_cost_nothing() {
        // Only the finish reason `stop` counts: 4 bytes.
        let mut s = StreamState::new(4, DEFAULT_MAX_TOOL_CALLS);
        s.on_data(r#"{"choices":[{"delta":{"content":"","reasoning_content":""}}]}"#)
            .unwrap();
        s.on_data(r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}"#)
            .unwrap();
        s.on_data(r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#)
            .unwrap();
    }

    #[test]
    fn usage_counts_are_clamped_and_odd_ones_dropped() {
        let mut s = StreamState::default();
        s.on_data(&json!({"choices": [{"delta": {"content": "hi"}}]}).to_string())
            .unwrap();
        s.on_data(
            &json!({"choices": [], "usage": {"prompt_tokens": u64::MAX, "completion_tokens": u64::MAX,
                "prompt_cache_hit_tokens": -5, "completion_tokens_details": {"reasoning_tokens": 1.5}}})
            .to_string(),
        )
        .unwrap();
        let usage = s.finish().into_iter().find_map(|c| match c {
            Chunk::Usage { usage } => Some(usage),
            _ => None,
        });
        assert_eq!(
            usage,
            Some(TokenUsage {
                input_tokens: MAX_TOKEN_COUNT,
                output_tokens: MAX_TOKEN_COUNT,
                ..TokenUsage::default()
            })
        );
    }

    #[test]
    fn an_answer_past_its_tool_call_cap_fails_malformed() {
        let mut s = StreamState::new(DEFAULT_MAX_ANSWER_BYTES, 3);
        let call = |i: u64| json!({"index": i, "id": format!("c{i}"), "function": {"name": "x", "arguments": ""}});
        // Three calls fit, later deltas of a started call still join it.
        s.on_data(&json!({"choices": [{"delta": {"tool_calls": [call(0), call(1)]}}]}).to_string())
            .unwrap();
        s.on_data(&call_delta(call(2))).unwrap();
        s.on_data(&call_delta(
            json!({"index": 1, "function": {"arguments": "{}"}}),
        ))
        .unwrap();
        let f = s.on_data(&call_delta(call(3))).unwrap_err();
        assert_eq!(f.code, code::MALFORMED_RESPONSE);
        assert!(f.message.contains("maxToolCalls"), "{}", f.message);
        assert_eq!(s.calls.len(), 3, "the fourth call was not kept");
    }

    #[test]
    fn a_long_finish_reason_is_cut_escaped_and_counted() {
        let reason = format!("\u{1b}]52;c;aGVsbG8=\u{7}{}", "F".repeat(5000));
        let mut s = StreamState::default();
        s.on_data(&json!({"choices": [{"delta": {"content": "hi"}}]}).to_string())
            .unwrap();
        s.on_data(&json!({"choices": [{"delta": {}, "finish_reason": reason}]}).to_string())
            .unwrap();
        let Some(Chunk::Finish {
            reason: FinishReason::Error { failure },
            ..
        }) = s.finish().pop()
        else {
            panic!("not an error finish");
        };
        let message = failure.message;
        assert!(message.len() < 300, "{message}");
        assert!(
            message.starts_with("the model stopped: \"\\u{1b}]52;c;aGVsbG8=\\u{7}FFF")
                && message.ends_with("… (cut: 5016 bytes in all)"),
            "{message}"
        );
        let mut s = StreamState::new(100, DEFAULT_MAX_TOOL_CALLS);
        let f = s
            .on_data(
                &json!({"choices": [{"delta": {}, "finish_reason": "F".repeat(101)}]}).to_string(),
            )
            .unwrap_err();
        assert_eq!(f.code, code::MALFORMED_RESPONSE);
    }

    #[test]
    fn a_long_in_stream_error_message_is_cut_saying_so() {
        let long = "M".repeat(50_000);
        let f = in_stream(json!({"error": {"message": long, "code": "x"}}));
        assert!(
            f.message.len() < MAX_MESSAGE_CHARS + 200
                && f.message.contains("(cut: the message was 50000 bytes)"),
            "{}",
            &f.message[f.message.len() - 100..]
        );
    }

    #[test]
    fn a_null_error_field_is_not_an_error() {
        let mut s = StreamState::default();
        assert!(s
            .on_data(r#"{"error":null,"choices":[{"delta":{"content":"hi"}}]}"#)
            .is_ok());
    }

    #[test]
    fn an_empty_stop_is_an_empty_response() {
        let mut s = StreamState::default();
        s.on_data(r#"{"choices":[{"delta":{"content":null},"finish_reason":"stop"}]}"#)
            .unwrap();
        let chunks = s.finish();
        assert_eq!(chunks.len(), 1, "{chunks:?}");
        let Chunk::Finish {
            reason: FinishReason::Error { failure },
            ..
        } = &chunks[0]
        else {
            panic!("{chunks:?}");
        };
        assert_eq!(failure.code, code::EMPTY_RESPONSE);
    }

    /// Every chunk of a stream of `payloads`, then `[DONE]`.
    fn run(payloads: &[&str]) -> Result<Vec<Chunk>, LlmFailure> {
        let mut s = StreamState::default();
        let mut all = Vec::new();
        for p in payloads {
            all.extend(s.on_data(p)?);
        }
        all.extend(s.finish());
        Ok(all)
    }

    fn usage_of(chunks: &[Chunk]) -> Option<TokenUsage> {
        chunks.iter().find_map(|c| match c {
            Chunk::Usage { usage } => Some(usage.clone()),
            _ => None,
        })
    }

    const HI: &str = r#"{"choices":[{"delta":{"content":"hi"}}]}"#;
    const STOP: &str = r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#;

    #[test]
    fn odd_usage_after_a_complete_answer_keeps_the_answer_and_its_usage() {
        let all = run(&[
            HI,
            STOP,
            r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"completion_tokens_details":5}}"#,
        ])
        .unwrap();
        assert_eq!(
            all,
            text_answer(
                &["hi"],
                TokenUsage {
                    input_tokens: 1,
                    output_tokens: 1,
                    ..TokenUsage::default()
                }
            )
        );
        // Details of other shapes and unknown nested fields are skipped.
        for usage in [
            r#"{"prompt_tokens":1,"completion_tokens":1,"prompt_tokens_details":"none"}"#,
            r#"{"prompt_tokens":1,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":0,
                "audio":{"in":[1,{"x":null}]}},"completion_tokens_details":{"reasoning_tokens":[0]},
                "cost":{"usd":{"amount":1.5}}}"#,
        ] {
            let all = run(&[HI, STOP, &format!(r#"{{"choices":[],"usage":{usage}}}"#)]).unwrap();
            assert_eq!(
                usage_of(&all).map(|u| (u.input_tokens, u.output_tokens)),
                Some((1, 1)),
                "{usage}"
            );
            assert_eq!(
                all.last(),
                Some(&Chunk::finish(FinishReason::Stop)),
                "{usage}"
            );
        }
        // A usage that is no object is not reported; the answer stands.
        let all = run(&[HI, STOP, r#"{"choices":[],"usage":"lots"}"#]).unwrap();
        assert_eq!(usage_of(&all), None);
        assert_eq!(all.last(), Some(&Chunk::finish(FinishReason::Stop)));
    }

    #[test]
    fn choices_that_hold_nothing_and_a_non_string_finish_reason_are_skipped() {
        let all = run(&[
            HI,
            r#"{"choices":{},"usage":{"prompt_tokens":2,"completion_tokens":1}}"#,
            r#"{"choices":[{"delta":{"content":"!"},"finish_reason":{"why":1}}]}"#,
        ])
        .unwrap();
        let text: String = all
            .iter()
            .filter_map(|c| match c {
                Chunk::TextDelta { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "hi!");
        assert_eq!(usage_of(&all).map(|u| u.input_tokens), Some(2));
        assert_eq!(all.last(), Some(&Chunk::finish(FinishReason::Stop)));
        // A finish reason sent first stays when a later one is no string.
        let all = run(&[
            &call_delta(
                json!({"index": 0, "id": "c", "function": {"name": "read", "arguments": "{}"}}),
            ),
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":7}]}"#,
        ])
        .unwrap();
        assert_eq!(all.last(), Some(&Chunk::finish(FinishReason::ToolCalls)));
    }

    #[test]
    fn a_null_tool_call_index_is_the_calls_position() {
        let mut s = StreamState::default();
        s.on_data(
            &json!({"choices": [{"delta": {"tool_calls": [
                {"index": null, "id": "a", "function": {"name": "read", "arguments": "{\"x\""}},
                {"index": null, "id": "b", "function": {"name": "glob", "arguments": "{}"}}
            ]}}]})
            .to_string(),
        )
        .unwrap();
        // A later delta without an index joins the call at its position.
        s.on_data(&call_delta(
            json!({"index": null, "function": {"arguments": ":1}"}}),
        ))
        .unwrap();
        s.on_data(r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#)
            .unwrap();
        let calls = closed_calls(&mut s);
        assert_eq!(
            calls
                .iter()
                .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
                .collect::<Vec<_>>(),
            [("a", "read", "{\"x\":1}"), ("b", "glob", "{}")]
        );
    }

    #[test]
    fn the_answers_own_parts_stay_strict() {
        for bad in [
            r#"{"choices":[{"delta":{"content":5}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":{"a":1}}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":"0","function":{"arguments":"{}"}}]}}]}"#,
            r#"{"choices":{"0":{"delta":{"content":"hi"}}}}"#,
        ] {
            let f = run(&[HI, bad]).unwrap_err();
            assert_eq!(f.code, code::MALFORMED_RESPONSE, "{bad}");
            assert!(
                f.message
                    .starts_with("the provider sent a stream event this adapter cannot read"),
                "{}",
                f.message
            );
        }
    }

    #[test]
    fn an_error_keeps_its_code_beside_a_field_that_cannot_be_read() {
        for sibling in [
            r#""choices":[{"delta":{"content":5}}]"#,
            r#""choices":"n/a""#,
            r#""usage":"lots""#,
        ] {
            let payload = format!(
                r#"{{"error":{{"message":"Rate limit reached","code":"rate_limit_exceeded"}},{sibling}}}"#
            );
            let f = run(&[HI, &payload]).unwrap_err();
            assert_eq!(f.code, code::RATE_LIMIT, "{payload}: {}", f.message);
            assert!(
                f.message
                    .contains("Rate limit reached (code: rate_limit_exceeded)"),
                "{}",
                f.message
            );
            // The error read alone, after the field: the same.
            let payload = format!(
                r#"{{{sibling},"error":{{"message":"Rate limit reached","code":"rate_limit_exceeded"}}}}"#
            );
            assert_eq!(
                run(&[&payload]).unwrap_err().code,
                code::RATE_LIMIT,
                "{payload}"
            );
        }
    }

    #[test]
    fn bad_json_and_unreadable_events_fail_malformed_saying_which() {
        let mut s = StreamState::default();
        let f = s.on_data("{\"choices\":").unwrap_err();
        assert_eq!(f.code, code::MALFORMED_RESPONSE);
        assert!(
            f.message.starts_with("the provider sent malformed JSON"),
            "{}",
            f.message
        );
        let f = s
            .on_data(r#"{"choices":[{"delta":{"content":["x"]}}]}"#)
            .unwrap_err();
        assert_eq!(f.code, code::MALFORMED_RESPONSE);
        assert!(
            f.message
                .starts_with("the provider sent a stream event this adapter cannot read")
                && f.message.contains("invalid type"),
            "{}",
            f.message
        );
    }
}
