//! The OpenAI Responses wire for [`crate::fake_llm::FakeLlm`]: builders of
//! the streams a Responses server sends (named SSE events with a
//! `sequence_number`, ending in `response.completed`, `.incomplete`,
//! `.failed` or `error`, without `[DONE]`), its error bodies, and readers
//! of the requests the fake received.
//!
//! ```ignore
//! fake.push([
//!     Stream::new().reasoning("rs_1", "Plan.", "enc-1").call("call_1", "read", &args).completed(&Usage::default()),
//!     fake_responses::text("Done."),
//! ]);
//! ```

use serde_json::{json, Value};

use crate::fake_llm::Answer;

/// A response's token usage, as `response.completed` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens, cached ones included.
    pub input: u64,
    /// Of which were read from the cache.
    pub cached: u64,
    /// Output tokens, reasoning included.
    pub output: u64,
    /// Of which were reasoning.
    pub reasoning: u64,
}

impl Default for Usage {
    /// 20 input tokens (8 of them cached), 5 output tokens (2 reasoning).
    fn default() -> Self {
        Usage {
            input: 20,
            cached: 8,
            output: 5,
            reasoning: 2,
        }
    }
}

impl Usage {
    /// The `usage` object.
    pub fn value(&self) -> Value {
        json!({
            "input_tokens": self.input,
            "input_tokens_details": {"cached_tokens": self.cached},
            "output_tokens": self.output,
            "output_tokens_details": {"reasoning_tokens": self.reasoning},
            "total_tokens": self.input + self.output,
        })
    }
}

/// The events of one response, built item by item as a server streams
/// them; ended by [`Stream::completed`] (or another terminal) into an
/// [`Answer::Named`].
#[derive(Debug, Clone)]
pub struct Stream {
    events: Vec<(String, Value)>,
    /// The items done so far, as `response.output` lists them.
    output: Vec<Value>,
}

impl Default for Stream {
    fn default() -> Self {
        Stream::new()
    }
}

/// `text` in `n` pieces of about equal length (at char boundaries).
fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(n.max(1)).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

impl Stream {
    /// `response.created` and `response.in_progress`.
    pub fn new() -> Stream {
        let response =
            json!({"id": "resp_1", "object": "response", "status": "in_progress", "output": []});
        let mut s = Stream {
            events: Vec::new(),
            output: Vec::new(),
        };
        s.push("response.created", json!({"response": response}));
        s.push("response.in_progress", json!({"response": response}));
        s
    }

    /// Appends an event of `kind` with the fields of `data` (an object),
    /// after its `type` and before its `sequence_number`.
    pub fn event(mut self, kind: &str, data: Value) -> Stream {
        self.push(kind, data);
        self
    }

    fn push(&mut self, kind: &str, data: Value) {
        let mut event = serde_json::Map::new();
        event.insert("type".into(), json!(kind));
        if let Value::Object(fields) = data {
            event.extend(fields);
        }
        event.insert("sequence_number".into(), json!(self.events.len()));
        self.events.push((kind.to_owned(), Value::Object(event)));
    }

    /// The next item's `output_index`.
    fn next_index(&self) -> usize {
        self.output.len()
    }

    /// A message item whose text streams word by word.
    pub fn text(mut self, text: &str) -> Stream {
        let at = self.next_index();
        let id = format!("msg_{at}");
        self.push(
            "response.output_item.added",
            json!({"output_index": at, "item": {"id": id, "type": "message", "status": "in_progress",
                   "role": "assistant", "content": []}}),
        );
        let empty = json!({"type": "output_text", "text": "", "annotations": []});
        self.push(
            "response.content_part.added",
            json!({"item_id": id, "output_index": at, "content_index": 0, "part": empty}),
        );
        for word in text.split_inclusive(' ') {
            self.push(
                "response.output_text.delta",
                json!({"item_id": id, "output_index": at, "content_index": 0, "delta": word, "logprobs": []}),
            );
        }
        self.push(
            "response.output_text.done",
            json!({"item_id": id, "output_index": at, "content_index": 0, "text": text}),
        );
        let part = json!({"type": "output_text", "text": text, "annotations": []});
        self.push(
            "response.content_part.done",
            json!({"item_id": id, "output_index": at, "content_index": 0, "part": part}),
        );
        let item = json!({"id": id, "type": "message", "status": "completed", "role": "assistant",
                          "content": [part]});
        self.done(at, item)
    }

    /// A reasoning item `id` whose summary streams in two deltas and whose
    /// encrypted content arrives with the item's `done`.
    pub fn reasoning(mut self, id: &str, summary: &str, encrypted: &str) -> Stream {
        let at = self.next_index();
        self.push(
            "response.output_item.added",
            json!({"output_index": at, "item": {"id": id, "type": "reasoning", "summary": []}}),
        );
        self.push(
            "response.reasoning_summary_part.added",
            json!({"item_id": id, "output_index": at, "summary_index": 0,
                   "part": {"type": "summary_text", "text": ""}}),
        );
        for piece in pieces(summary, 2) {
            self.push(
                "response.reasoning_summary_text.delta",
                json!({"item_id": id, "output_index": at, "summary_index": 0, "delta": piece}),
            );
        }
        self.push(
            "response.reasoning_summary_text.done",
            json!({"item_id": id, "output_index": at, "summary_index": 0, "text": summary}),
        );
        let part = json!({"type": "summary_text", "text": summary});
        self.push(
            "response.reasoning_summary_part.done",
            json!({"item_id": id, "output_index": at, "summary_index": 0, "part": part}),
        );
        let item = json!({"id": id, "type": "reasoning", "summary": [part],
                          "encrypted_content": encrypted});
        self.done(at, item)
    }

    /// A function call `call_id` of tool `name` whose arguments (the JSON
    /// text of `arguments`) stream in three deltas.
    pub fn call(mut self, call_id: &str, name: &str, arguments: &Value) -> Stream {
        let at = self.next_index();
        let id = format!("fc_{at}");
        let text = arguments.to_string();
        self.push(
            "response.output_item.added",
            json!({"output_index": at, "item": {"id": id, "type": "function_call", "status": "in_progress",
                   "call_id": call_id, "name": name, "arguments": ""}}),
        );
        for piece in pieces(&text, 3) {
            self.push(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": at, "delta": piece}),
            );
        }
        self.push(
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": at, "arguments": text}),
        );
        let item = json!({"id": id, "type": "function_call", "status": "completed",
                          "call_id": call_id, "name": name, "arguments": text});
        self.done(at, item)
    }

    /// `response.output_item.done` of the item at `at`.
    fn done(mut self, at: usize, item: Value) -> Stream {
        self.push(
            "response.output_item.done",
            json!({"output_index": at, "item": item}),
        );
        self.output.push(item);
        self
    }

    /// The response as a terminal event carries it.
    fn response(&self, status: &str) -> serde_json::Map<String, Value> {
        let mut r = serde_json::Map::new();
        r.insert("id".into(), json!("resp_1"));
        r.insert("object".into(), json!("response"));
        r.insert("status".into(), json!(status));
        r.insert("output".into(), Value::Array(self.output.clone()));
        r
    }

    /// `response.completed` with `usage`: the answer.
    pub fn completed(self, usage: &Usage) -> Answer {
        let mut response = self.response("completed");
        response.insert("usage".into(), usage.value());
        self.event("response.completed", json!({"response": response}))
            .answer()
    }

    /// `response.incomplete` for `reason` (`max_output_tokens`,
    /// `content_filter`), with the default usage.
    pub fn incomplete(self, reason: &str) -> Answer {
        let mut response = self.response("incomplete");
        response.insert("incomplete_details".into(), json!({"reason": reason}));
        response.insert("usage".into(), Usage::default().value());
        self.event("response.incomplete", json!({"response": response}))
            .answer()
    }

    /// `response.failed` with the error `{code, message}`.
    pub fn failed(self, code: &str, message: &str) -> Answer {
        let mut response = self.response("failed");
        response.insert("error".into(), json!({"code": code, "message": message}));
        self.event("response.failed", json!({"response": response}))
            .answer()
    }

    /// An `error` event `{code, message, param}`.
    pub fn error(self, code: &str, message: &str) -> Answer {
        self.event(
            "error",
            json!({"code": code, "message": message, "param": null}),
        )
        .answer()
    }

    /// The events so far as an answer (a stream that ends without a
    /// terminal event, unless one was added).
    pub fn answer(self) -> Answer {
        Answer::Named(self.events())
    }

    /// The events so far, each its name and its `data:` text.
    pub fn events(self) -> Vec<(String, String)> {
        self.events
            .into_iter()
            .map(|(name, data)| (name, data.to_string()))
            .collect()
    }

    /// The `data:` texts of the events so far (for [`Answer::Gated`],
    /// which writes `data:` lines only: the type is in each).
    pub fn payloads(self) -> Vec<String> {
        self.events().into_iter().map(|(_, data)| data).collect()
    }
}

/// A text answer, streamed word by word, with the default usage.
pub fn text(answer: &str) -> Answer {
    Stream::new().text(answer).completed(&Usage::default())
}

/// A reasoning item (`rs_1`, its `summary` and `encrypted` content), then
/// a text answer.
pub fn reasoning_text(summary: &str, encrypted: &str, answer: &str) -> Answer {
    Stream::new()
        .reasoning("rs_1", summary, encrypted)
        .text(answer)
        .completed(&Usage::default())
}

/// A reasoning item (`rs_calls`, encrypted content `enc-calls`), then
/// function calls `(call_id, name, arguments)` in one response.
pub fn calls(calls: &[(&str, &str, Value)]) -> Answer {
    let mut s = Stream::new().reasoning("rs_calls", "I need a tool.", "enc-calls");
    for (id, name, arguments) in calls {
        s = s.call(id, name, arguments);
    }
    s.completed(&Usage::default())
}

/// An HTTP error as OpenAI sends it: `{"error": {message, type, param,
/// code}}` with `status`.
pub fn error_status(status: u16, kind: &str, code: &str, message: &str) -> Answer {
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
    Answer::Status(status, Vec::new(), body.to_string())
}

/// OpenAI's context overflow: HTTP 400, `context_length_exceeded`.
pub fn overflow() -> Answer {
    error_status(
        400,
        "invalid_request_error",
        "context_length_exceeded",
        "Your input exceeds the context window of this model. Please adjust your input and try again.",
    )
}

/// The `input` items of a request body; panics when it has none.
pub fn input(request: &Value) -> &[Value] {
    request["input"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_else(|| panic!("a request without an input list: {request}"))
}

/// The `input` items of `kind` (`function_call_output`, `reasoning`,
/// `function_call`, `message`), in order.
pub fn items_of(request: &Value, kind: &str) -> Vec<Value> {
    input(request)
        .iter()
        .filter(|i| i["type"] == kind)
        .cloned()
        .collect()
}

/// The tool outputs of a request, each `(call_id, output)`; an output
/// that is not a string counts as `""`.
pub fn call_outputs(request: &Value) -> Vec<(String, String)> {
    items_of(request, "function_call_output")
        .iter()
        .map(|i| {
            (
                i["call_id"].as_str().unwrap_or_default().to_owned(),
                i["output"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(answer: Answer) -> Vec<Value> {
        match answer {
            Answer::Named(events) => events
                .into_iter()
                .map(|(name, data)| {
                    let v: Value = serde_json::from_str(&data).unwrap();
                    assert_eq!(v["type"], name.as_str(), "the name repeats the type");
                    v
                })
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_stream_numbers_its_events_and_ends_with_its_output() {
        let all = events(calls(&[("call_1", "read", json!({"file_path": "a"}))]));
        let seqs: Vec<u64> = all
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, (0..all.len() as u64).collect::<Vec<_>>());
        let last = all.last().unwrap();
        assert_eq!(last["type"], "response.completed");
        assert_eq!(
            last["response"]["output"][0]["encrypted_content"],
            "enc-calls"
        );
        assert_eq!(last["response"]["output"][1]["call_id"], "call_1");
        assert_eq!(
            last["response"]["usage"]["input_tokens_details"]["cached_tokens"],
            8
        );
        let args: String = all
            .iter()
            .filter(|e| e["type"] == "response.function_call_arguments.delta")
            .map(|e| e["delta"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(args, r#"{"file_path":"a"}"#);
        assert_eq!(pieces("héllo", 2), ["hél", "lo"]);
    }
}
