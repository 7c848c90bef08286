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

/// Checks one `input` item's shape against the types OpenAI and vLLM
/// read it with (`EasyInputMessage`, `ResponseFunctionToolCall`,
/// `FunctionCallOutput`, `ResponseReasoningItem`).
fn validate_item(item: &Value) -> Result<(), String> {
    let string = |key: &str| item[key].as_str().is_some();
    let kind = item["type"]
        .as_str()
        .or_else(|| item.get("role").map(|_| "message"))
        .unwrap_or_default();
    match kind {
        "message" => {
            let role = item["role"].as_str().unwrap_or_default();
            if !["user", "assistant", "system", "developer"].contains(&role) {
                return Err(format!("a message of role {role:?}"));
            }
            match &item["content"] {
                Value::String(_) => Ok(()),
                Value::Array(parts) if role == "assistant" => {
                    // A list is an output message, whole: vLLM refuses
                    // `output_text` parts without it (and OpenAI wants
                    // their annotations).
                    let whole = string("id")
                        && string("status")
                        && parts.iter().all(|p| {
                            p["type"] == "output_text"
                                && string_at(p, "text")
                                && p["annotations"].is_array()
                        });
                    if whole {
                        Ok(())
                    } else {
                        Err("an assistant message of parts that is no whole output message (id, status, output_text with annotations): send its text as the content".into())
                    }
                }
                Value::Array(parts) => {
                    match parts
                        .iter()
                        .find(|p| !(p["type"] == "input_text" && string_at(p, "text")))
                    {
                        Some(p) => Err(format!("a {role} message part {p}")),
                        None => Ok(()),
                    }
                }
                other => Err(format!("a message whose content is {other}")),
            }
        }
        "function_call" => {
            if ["call_id", "name", "arguments"].iter().all(|k| string(k))
                && item["call_id"].as_str().is_some_and(|c| !c.is_empty())
            {
                Ok(())
            } else {
                Err("a function_call without a call_id, name or string arguments".into())
            }
        }
        "function_call_output" => {
            if string("call_id") && string("output") {
                Ok(())
            } else {
                Err("a function_call_output without a call_id or string output".into())
            }
        }
        "reasoning" => {
            let summary_ok = item["summary"].as_array().is_some_and(|parts| {
                parts
                    .iter()
                    .all(|p| p["type"] == "summary_text" && string_at(p, "text"))
            });
            if !summary_ok {
                return Err("a reasoning item without its summary list".into());
            }
            if item.get("encrypted_content").is_some() {
                if !string("encrypted_content") {
                    return Err("a reasoning item whose encrypted_content is no string".into());
                }
                if item.get("id").is_some() {
                    // OpenAI pairs an item sent with its id with the item
                    // that followed it, and refuses it without that one.
                    return Err("an encrypted reasoning item sent with its id".into());
                }
                return Ok(());
            }
            let text_ok = item["content"].as_array().is_some_and(|parts| {
                !parts.is_empty()
                    && parts
                        .iter()
                        .all(|p| p["type"] == "reasoning_text" && string_at(p, "text"))
            });
            if !text_ok || !string("id") {
                return Err("a reasoning item with neither encrypted content nor reasoning text and its id (vLLM's type requires the id)".into());
            }
            Ok(())
        }
        other => Err(format!("an input item of type {other:?}")),
    }
}

/// Whether `v[key]` is a string.
fn string_at(v: &Value, key: &str) -> bool {
    v[key].as_str().is_some()
}

/// Checks a Responses request body as OpenAI and vLLM read it, where an
/// adapter can get it wrong: each `input` item has a shape their types
/// take (an answer's text as its content, a function call and its output
/// with their ids, a reasoning item encrypted without its id or in the
/// clear with it); a reasoning item is followed by the output item it led
/// to (a function call or an answer's text); each output answers an
/// earlier call and each call is answered; no `temperature` with
/// `reasoning`, no `include` without it. The first thing wrong, said.
pub fn validate(request: &Value) -> Result<(), String> {
    let items = request["input"]
        .as_array()
        .ok_or("a request without an input list")?;
    let mut calls: Vec<String> = Vec::new();
    let mut answered: Vec<String> = Vec::new();
    for (at, item) in items.iter().enumerate() {
        validate_item(item).map_err(|e| format!("input {at}: {e}"))?;
        match item["type"].as_str().unwrap_or("message") {
            "reasoning" => {
                let next = items.get(at + 1);
                let leads = next.is_some_and(|n| {
                    n["type"] == "function_call"
                        || (n["type"] == "message" && n["role"] == "assistant")
                });
                if !leads {
                    return Err(format!(
                        "input {at}: a reasoning item not followed by the call or text it led to"
                    ));
                }
            }
            "function_call" => calls.push(item["call_id"].as_str().unwrap_or_default().to_owned()),
            "function_call_output" => {
                let id = item["call_id"].as_str().unwrap_or_default().to_owned();
                if !calls.contains(&id) {
                    return Err(format!(
                        "input {at}: the output of {id:?}, which no earlier call made"
                    ));
                }
                answered.push(id);
            }
            _ => {}
        }
    }
    if let Some(open) = calls.iter().find(|c| !answered.contains(c)) {
        return Err(format!("the call {open:?} has no output"));
    }
    let reasons = request.get("reasoning").is_some();
    if reasons && request.get("temperature").is_some() {
        return Err("a temperature with reasoning".into());
    }
    if !reasons && request.get("include").is_some() {
        return Err("include without reasoning".into());
    }
    Ok(())
}

/// The `data` payloads of an answer the fake served.
fn payloads_of(answer: &Answer) -> Vec<String> {
    match answer {
        Answer::Named(events) | Answer::Pings(events, _, _) => {
            events.iter().map(|(_, d)| d.clone()).collect()
        }
        Answer::Gated(before, _, after) => before.iter().chain(after).cloned().collect(),
        Answer::Stall(data)
        | Answer::Disconnect(data)
        | Answer::Reset(data)
        | Answer::Slow(data, _) => data.clone(),
        Answer::Sse(data) => data.iter().flatten().cloned().collect(),
        _ => Vec::new(),
    }
}

/// The reasoning items an answer gave (`response.output_item.done`).
fn reasoning_given(answer: &Answer) -> Vec<Value> {
    payloads_of(answer)
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|e| e["type"] == "response.output_item.done" && e["item"]["type"] == "reasoning")
        .map(|e| e["item"].clone())
        .collect()
}

/// Checks that each reasoning item a request sends back was given by an
/// answer to an earlier request for the same model (another model cannot
/// read it: OpenAI refuses it with `invalid_encrypted_content`), the
/// encrypted one by its content, the one in the clear by its id.
/// `served[m]` is the answer to `requests[m]` ([`FakeLlm::served`]).
///
/// [`FakeLlm::served`]: crate::fake_llm::FakeLlm::served
pub fn validate_replay(requests: &[Value], served: &[Answer]) -> Result<(), String> {
    for (n, request) in requests.iter().enumerate() {
        for item in items_of(request, "reasoning") {
            let same = |given: &Value| match item["encrypted_content"].as_str() {
                Some(enc) => given["encrypted_content"] == enc,
                None => given["id"] == item["id"],
            };
            let from = served
                .iter()
                .take(n)
                .enumerate()
                .find(|(_, a)| reasoning_given(a).iter().any(same))
                .map(|(m, _)| m);
            match from {
                None => {
                    return Err(format!(
                        "request {n}: a reasoning item no earlier answer gave: {item}"
                    ))
                }
                Some(m) if requests[m]["model"] != request["model"] => {
                    return Err(format!(
                        "request {n} (model {}) sends back the reasoning of model {}",
                        request["model"], requests[m]["model"]
                    ))
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// Panics, naming the request and the fault, unless every request the
/// fake received is one OpenAI and vLLM take ([`validate`]) and sends back
/// only reasoning its model gave ([`validate_replay`]).
pub fn assert_valid(fake: &crate::fake_llm::FakeLlm) {
    let requests = fake.requests();
    for (n, request) in requests.iter().enumerate() {
        if let Err(e) = validate(request) {
            panic!("request {n} is not one the Responses API takes: {e}\n{request}");
        }
    }
    if let Err(e) = validate_replay(&requests, &fake.served()) {
        panic!("{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_takes_what_the_servers_take_and_names_each_fault() {
        let body = |input: Value| json!({"model": "gpt-5", "input": input});
        let user = json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]});
        let call =
            json!({"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"});
        let output = json!({"type": "function_call_output", "call_id": "c1", "output": "ok"});
        let encrypted = json!({"type": "reasoning", "summary": [], "encrypted_content": "e"});
        let good = body(json!([user, encrypted, call, output,
                               {"type": "message", "role": "assistant", "content": "done"}]));
        assert_eq!(validate(&good), Ok(()));
        for (bad, says) in [
            (
                body(json!([user, {"type": "message", "role": "assistant",
                                   "content": [{"type": "output_text", "text": "hi"}]}])),
                "no whole output message",
            ),
            (
                body(
                    json!([user, {"type": "reasoning", "id": "rs_1", "summary": [],
                                   "encrypted_content": "e"}, call, output]),
                ),
                "sent with its id",
            ),
            (
                body(json!([user, encrypted])),
                "not followed by the call or text",
            ),
            (
                body(json!([user, encrypted, user])),
                "not followed by the call or text",
            ),
            (body(json!([user, output])), "which no earlier call made"),
            (body(json!([user, call])), "has no output"),
            (
                body(json!([user, {"type": "reasoning", "summary": [],
                                   "content": [{"type": "reasoning_text", "text": "t"}]}, call, output])),
                "vLLM's type requires the id",
            ),
        ] {
            let e = validate(&bad).unwrap_err();
            assert!(e.contains(says), "{e} (wanted {says:?}) for {bad}");
        }
        let mut warm = good.clone();
        warm["reasoning"] = json!({"effort": "medium"});
        warm["temperature"] = json!(0.5);
        assert!(validate(&warm).unwrap_err().contains("temperature"));
    }

    #[test]
    fn reasoning_goes_back_only_to_the_model_that_gave_it() {
        let served = vec![reasoning_text("s", "enc-1", "hi"), text("ok")];
        let request = |model: &str, input: Value| json!({"model": model, "input": input});
        let back = json!([{"type": "reasoning", "summary": [], "encrypted_content": "enc-1"},
                          {"type": "message", "role": "assistant", "content": "hi"}]);
        let first = request("gpt-5", json!([]));
        assert_eq!(
            validate_replay(&[first.clone(), request("gpt-5", back.clone())], &served),
            Ok(())
        );
        let e = validate_replay(&[first.clone(), request("o3", back)], &served).unwrap_err();
        assert!(e.contains("sends back the reasoning of model"), "{e}");
        let forged = json!([{"type": "reasoning", "summary": [], "encrypted_content": "made-up"},
                            {"type": "message", "role": "assistant", "content": "hi"}]);
        let e = validate_replay(&[first, request("gpt-5", forged)], &served).unwrap_err();
        assert!(e.contains("no earlier answer gave"), "{e}");
    }

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
