//! The chat-completions wire format: request bodies from the harness's
//! messages, and stream chunks from the provider's deltas.

use std::collections::{HashMap, HashSet};

use dsh_sdk::vocab::{msg, LlmFailure};
use serde_json::{json, Value};

use crate::answer_cap::{AnswerBudget, DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_TOOL_CALLS};
use crate::call_ids::CallIds;

fn texts(blocks: &[Value], kind: &str) -> String {
    blocks
        .iter()
        .filter(|b| b["type"] == kind)
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("")
}

/// One harness message as chat-completions messages.
pub(crate) fn messages_of(m: &Value) -> Vec<Value> {
    let blocks = m["content"].as_array().cloned().unwrap_or_default();
    match m["role"].as_str() {
        Some("assistant") => {
            let calls: Vec<Value> = blocks
                .iter()
                .filter(|b| b["type"] == "tool-call")
                .map(|b| json!({"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": b["arguments"]}}))
                .collect();
            let mut out = json!({"role": "assistant", "content": texts(&blocks, "text")});
            let reasoning = texts(&blocks, "reasoning");
            if !reasoning.is_empty() {
                out["reasoning_content"] = json!(reasoning);
            }
            if !calls.is_empty() {
                out["tool_calls"] = json!(calls);
            }
            vec![out]
        }
        Some("system") => vec![json!({"role": "system", "content": texts(&blocks, "text")})],
        _ => {
            let mut out = Vec::new();
            for b in blocks.iter().filter(|b| b["type"] == "tool-result") {
                let inner = b["content"].as_array().cloned().unwrap_or_default();
                let text = texts(&inner, "text");
                let text = if text.is_empty() {
                    "(no output)".to_owned()
                } else {
                    text
                };
                out.push(json!({"role": "tool", "tool_call_id": b["toolCallId"], "content": text}));
            }
            let text = texts(&blocks, "text");
            if !text.is_empty() || out.is_empty() {
                out.push(json!({"role": "user", "content": text}));
            }
            out
        }
    }
}

/// Failure codes this adapter reports (reference dsh-product §3.1.1).
pub use dsh_sdk::names::llm_failure as code;

/// The `error` object an OpenAI-compatible server sends, in an HTTP error
/// body or as a `data:` payload mid-stream: `{message, code?, type?}`.
/// `code` may be a string (OpenAI, DeepSeek) or a number (vLLM).
struct ProviderError {
    message: String,
    code: Option<String>,
    kind: Option<String>,
}

impl ProviderError {
    /// Reads `{"error": ...}`; a bare string error is its message.
    fn of(v: &Value) -> Option<ProviderError> {
        let e = v.get("error").filter(|e| !e.is_null())?;
        if let Some(m) = e.as_str() {
            return Some(ProviderError {
                message: m.to_owned(),
                code: None,
                kind: None,
            });
        }
        let text = |k: &str| match &e[k] {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        };
        Some(ProviderError {
            message: text("message").unwrap_or_else(|| e.to_string().chars().take(500).collect()),
            code: text("code"),
            kind: text("type"),
        })
    }

    /// `(code: x, type: y)`, or "" when the server sent neither.
    fn tags(&self) -> String {
        let tags: Vec<String> = [("code", &self.code), ("type", &self.kind)]
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}: {v}")))
            .collect();
        if tags.is_empty() {
            String::new()
        } else {
            format!(" ({})", tags.join(", "))
        }
    }

    /// The server's code and type, lowercased, for matching.
    fn labels(&self) -> String {
        [&self.code, &self.kind]
            .into_iter()
            .flatten()
            .map(|s| s.to_ascii_lowercase())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// A context overflow, by its code or by the wording servers use.
    fn is_context_overflow(&self) -> bool {
        let message = self.message.to_ascii_lowercase();
        self.labels().contains("context_length")
            || (message.contains("context")
                && ["length", "window", "maximum"]
                    .iter()
                    .any(|w| message.contains(w)))
    }

    /// A numeric `code` that is an HTTP error status (vLLM sends those).
    fn status_code(&self) -> Option<u16> {
        self.code
            .as_deref()
            .and_then(|c| c.parse::<u16>().ok())
            .filter(|s| (400..=599).contains(s))
    }
}

/// The harness code for a provider error: by HTTP status when the server
/// sent one (an error body, or a numeric `code` mid-stream), else by the
/// server's code and type. The one mapping for both routes.
fn classify(status: Option<u16>, error: &ProviderError) -> String {
    match status.or_else(|| error.status_code()) {
        Some(401 | 403) => code::AUTH.to_owned(),
        Some(402) => code::QUOTA.to_owned(),
        Some(429) => code::RATE_LIMIT.to_owned(),
        Some(400) if error.is_context_overflow() => code::CONTEXT_WINDOW_EXCEEDED.to_owned(),
        Some(400 | 413 | 422) => code::INVALID_REQUEST.to_owned(),
        Some(500..=599) => code::SERVER.to_owned(),
        Some(s) => format!("HTTP_{s}"),
        None => classify_labels(error).to_owned(),
    }
}

/// The code for an error without a status, from what the server called it
/// (its code and type, not its prose, except for the overflow wording).
fn classify_labels(error: &ProviderError) -> &'static str {
    let labels = error.labels();
    let has = |needles: &[&str]| needles.iter().any(|n| labels.contains(n));
    if error.is_context_overflow() {
        code::CONTEXT_WINDOW_EXCEEDED
    } else if has(&["rate_limit", "too_many_requests"]) {
        code::RATE_LIMIT
    } else if has(&["quota", "insufficient_balance"]) {
        code::QUOTA
    } else if has(&["invalid_api_key", "authentication", "permission"]) {
        code::AUTH
    } else {
        // Overloaded, internal and unknown errors alike: the server failed.
        code::SERVER
    }
}

/// The most characters of a server's error message a failure keeps.
/// Messages go to the log, the terminal and the model: a server's error is
/// a sentence or two, and a longer one is cut, saying so.
pub(crate) const MAX_MESSAGE_CHARS: usize = 2000;

/// The first `n` characters of `text` when it has more than `n`; `None`
/// when it has no more (it is then whole).
pub(crate) fn cut_chars(text: &str, n: usize) -> Option<&str> {
    text.char_indices().nth(n).map(|(end, _)| &text[..end])
}

/// `message`, cut to [`MAX_MESSAGE_CHARS`] characters with a note of its
/// whole length when longer.
fn cut_message(message: &str) -> String {
    match cut_chars(message, MAX_MESSAGE_CHARS) {
        None => message.to_owned(),
        Some(cut) => format!("{cut}… (cut: the message was {} bytes)", message.len()),
    }
}

/// Maps an HTTP error response to a failure: `body` is what was read of
/// its body, `cut` why the reading stopped early (see
/// [`crate::error_body`]), said at the end of the message.
pub fn http_failure(status: u16, body: &str, cut: Option<&str>) -> LlmFailure {
    let error = serde_json::from_str::<Value>(body)
        .ok()
        .as_ref()
        .and_then(ProviderError::of)
        .unwrap_or_else(|| ProviderError {
            message: body.chars().take(500).collect(),
            code: None,
            kind: None,
        });
    let mut message = format!("HTTP {status}: {}", cut_message(&error.message));
    if let Some(cut) = cut {
        message.push_str(&format!(" ({cut})"));
    }
    let mut f = LlmFailure::new(&classify(Some(status), &error), message);
    f.status = Some(status);
    f
}

/// Maps an `error` payload sent inside a 200 stream to a failure that keeps
/// the server's message, code and type.
fn stream_failure(error: &ProviderError) -> LlmFailure {
    LlmFailure::new(
        &classify(None, error),
        format!(
            "the provider reported an error mid-stream: {}{}",
            cut_message(&error.message),
            error.tags()
        ),
    )
}

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
    usage: Option<Value>,
    any_content: bool,
}

impl Default for StreamState {
    fn default() -> Self {
        StreamState::new(DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_TOOL_CALLS)
    }
}

/// The largest token count passed on: 2^53 − 1, the largest integer every
/// reader of the log holds exactly (JavaScript's numbers included). A
/// server's count above it is clamped, so sums of a session's usage stay
/// far from `u64::MAX` (they saturate there anyway).
pub(crate) const MAX_TOKEN_COUNT: u64 = (1 << 53) - 1;

/// A token count a server reported: a non-negative integer, clamped to
/// [`MAX_TOKEN_COUNT`]; `None` for anything else (a float, a negative
/// number, a string), which is dropped as not reported.
fn token_count(v: &Value) -> Option<u64> {
    v.as_u64().map(|n| n.min(MAX_TOKEN_COUNT))
}

/// The harness's usage from a chat-completions `usage` object: uncached
/// input, output, and the cache hits and reasoning tokens when reported.
fn usage_of(u: &Value) -> Value {
    let prompt = token_count(&u["prompt_tokens"]).unwrap_or(0);
    let hit = token_count(&u["prompt_cache_hit_tokens"])
        .or_else(|| token_count(&u["prompt_tokens_details"]["cached_tokens"]));
    let mut usage = json!({"inputTokens": prompt.saturating_sub(hit.unwrap_or(0)),
                           "outputTokens": token_count(&u["completion_tokens"]).unwrap_or(0)});
    if let Some(h) = hit {
        usage["cacheReadTokens"] = json!(h);
    }
    if let Some(r) = token_count(&u["completion_tokens_details"]["reasoning_tokens"]) {
        usage["reasoningTokens"] = json!(r);
    }
    usage
}

/// The most characters of an unknown `finish_reason` a failure quotes.
const FINISH_REASON_CHARS: usize = 100;

/// An unknown `finish_reason` as a failure quotes it: control characters
/// escaped, cut to [`FINISH_REASON_CHARS`] characters (it is the server's
/// text, and the failure goes to the log and the terminal).
fn quoted_reason(reason: &str) -> String {
    match cut_chars(reason, FINISH_REASON_CHARS) {
        None => format!("{reason:?}"),
        Some(cut) => format!("{cut:?}… (cut: {} bytes in all)", reason.len()),
    }
}

/// The bytes one delta adds to the answer (its text, reasoning, and each
/// tool call's id, name and arguments), and how many chunks carry them.
fn delta_size(reasoning: Option<&str>, text: Option<&str>, calls: &[Value]) -> (usize, usize) {
    let len = |v: &Value| v.as_str().map_or(0, str::len);
    let mut bytes = reasoning.map_or(0, str::len) + text.map_or(0, str::len);
    let mut parts = usize::from(reasoning.is_some()) + usize::from(text.is_some());
    for call in calls {
        let function = &call["function"];
        bytes += len(&call["id"]) + len(&function["name"]) + len(&function["arguments"]);
        parts += 1;
    }
    (bytes, parts)
}

impl StreamState {
    /// A stream whose answer may hold `max_answer_bytes` and
    /// `max_tool_calls` tool calls (see [`crate::answer_cap`]).
    pub fn new(max_answer_bytes: usize, max_tool_calls: usize) -> Self {
        StreamState {
            next_index: 0,
            open: None,
            text: String::new(),
            reasoning: String::new(),
            calls: Vec::new(),
            by_index: HashMap::new(),
            ids: CallIds::default(),
            budget: AnswerBudget::new(max_answer_bytes, max_tool_calls),
            finish: None,
            usage: None,
            any_content: false,
        }
    }

    fn close_open(&mut self, out: &mut Vec<Value>) {
        match self.open.take() {
            Some(Open::Reasoning(i)) => {
                out.push(json!({"type": "block-end", "index": i, "block": {"type": "reasoning", "text": std::mem::take(&mut self.reasoning)}}));
            }
            Some(Open::Text(i)) => {
                out.push(json!({"type": "block-end", "index": i, "block": msg::text(&std::mem::take(&mut self.text))}));
            }
            None => {}
        }
    }

    /// One `data:` payload. A delta that takes the answer past its cap is
    /// refused before anything of it is kept.
    pub fn on_data(&mut self, data: &str) -> Result<Vec<Value>, LlmFailure> {
        let v: Value = serde_json::from_str(data).map_err(|e| {
            LlmFailure::new(
                code::MALFORMED_RESPONSE,
                format!("the provider sent malformed JSON: {e}"),
            )
        })?;
        if let Some(error) = ProviderError::of(&v) {
            return Err(stream_failure(&error));
        }
        let mut out = Vec::new();
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            self.usage = Some(usage_of(u));
        }
        let Some(choice) = v["choices"].get(0) else {
            return Ok(out);
        };
        let delta = &choice["delta"];
        let reasoning = delta["reasoning_content"]
            .as_str()
            .filter(|s| !s.is_empty());
        let text = delta["content"].as_str().filter(|s| !s.is_empty());
        let calls = delta["tool_calls"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        let (bytes, parts) = delta_size(reasoning, text, calls);
        self.budget.charge(bytes, parts)?;
        self.budget.start_calls(self.new_calls(calls))?;
        if let Some(r) = reasoning {
            if !matches!(self.open, Some(Open::Reasoning(_))) {
                self.close_open(&mut out);
                let i = self.next_index;
                self.next_index += 1;
                self.open = Some(Open::Reasoning(i));
                out.push(json!({"type": "block-start", "index": i, "blockType": "reasoning"}));
            }
            if let Some(Open::Reasoning(i)) = self.open {
                self.reasoning.push_str(r);
                self.any_content = true;
                out.push(json!({"type": "reasoning-delta", "index": i, "text": r}));
            }
        }
        if let Some(t) = text {
            if !matches!(self.open, Some(Open::Text(_))) {
                self.close_open(&mut out);
                let i = self.next_index;
                self.next_index += 1;
                self.open = Some(Open::Text(i));
                out.push(json!({"type": "block-start", "index": i, "blockType": "text"}));
            }
            if let Some(Open::Text(i)) = self.open {
                self.text.push_str(t);
                self.any_content = true;
                out.push(json!({"type": "text-delta", "index": i, "text": t}));
            }
        }
        for call in calls {
            let at = self.call_at(call, &mut out);
            let t = &mut self.calls[at];
            let name = call["function"]["name"].as_str().filter(|s| !s.is_empty());
            if let (Some(n), true) = (name, t.name.is_empty()) {
                t.name = n.to_owned();
            }
            let args = call["function"]["arguments"].as_str().unwrap_or_default();
            t.args.push_str(args);
            self.any_content = true;
            let mut c = json!({"type": "tool-call-delta", "index": t.block, "id": t.id, "argumentsDelta": args});
            if let Some(n) = name {
                c["name"] = json!(n);
            }
            out.push(c);
        }
        if let Some(r) = choice["finish_reason"].as_str() {
            // Kept until the answer ends: it counts like the answer's text.
            self.budget.charge(r.len(), 0)?;
            self.finish = Some(r.to_owned());
        }
        Ok(out)
    }

    /// How many calls of a delta's `tool_calls` start a call of their own
    /// (a provider index not seen before in this answer).
    fn new_calls(&self, calls: &[Value]) -> usize {
        calls
            .iter()
            .map(|c| c["index"].as_u64().unwrap_or(0))
            .filter(|i| !self.by_index.contains_key(i))
            .collect::<HashSet<u64>>()
            .len()
    }

    /// The position in `calls` of the call a tool-call delta belongs to (by
    /// its provider index); a call seen first starts its block and settles
    /// its id: the delta's, unless that is missing, empty or another call's.
    /// The call's later deltas join it by index, whatever id they carry.
    fn call_at(&mut self, call: &Value, out: &mut Vec<Value>) -> usize {
        let provider_index = call["index"].as_u64().unwrap_or(0);
        if let Some(&at) = self.by_index.get(&provider_index) {
            return at;
        }
        self.close_open(out);
        let block = self.next_index;
        self.next_index += 1;
        let id = self.ids.assign(provider_index, &call["id"]);
        self.calls.push(Call {
            block,
            id,
            name: String::new(),
            args: String::new(),
        });
        let at = self.calls.len() - 1;
        self.by_index.insert(provider_index, at);
        out.push(json!({"type": "block-start", "index": block, "blockType": "tool-call"}));
        at
    }

    /// At `[DONE]`: close blocks, then usage, then finish.
    pub fn finish(&mut self) -> Vec<Value> {
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
            out.push(json!({"type": "block-end", "index": block, "block": {"type": "tool-call", "id": id, "name": name, "arguments": args}}));
        }
        if let Some(u) = self.usage.take() {
            out.push(json!({"type": "usage", "usage": u}));
        }
        let reason = match self.finish.as_deref() {
            Some("stop") | None if !self.any_content => {
                return vec![LlmFailure::new(
                    code::EMPTY_RESPONSE,
                    "the model returned an empty completion",
                )
                .finish_chunk(false)];
            }
            Some("stop") | None => json!({"kind": "stop"}),
            Some("tool_calls") => json!({"kind": "tool-calls"}),
            Some("length") => json!({"kind": "max-tokens"}),
            Some(other) => {
                json!({"kind": "error", "failure": LlmFailure::new(code::SERVER, format!("the model stopped: {}", quoted_reason(other)))})
            }
        };
        out.push(json!({"type": "finish", "reason": reason}));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let types: Vec<&str> = all.iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
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
        assert_eq!(all[9]["block"]["arguments"], "{\"a\":1}");
        assert_eq!(
            all[10]["usage"],
            json!({"inputTokens": 6, "outputTokens": 5, "cacheReadTokens": 4})
        );
        assert_eq!(all[11]["reason"]["kind"], "tool-calls");
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

    #[test]
    fn http_errors_keep_their_status_mapping() {
        let body = |m: &str| json!({"error": {"message": m}}).to_string();
        for (status, message, want) in [
            (401, "bad key", code::AUTH),
            (402, "pay", code::QUOTA),
            (429, "slow down", code::RATE_LIMIT),
            (
                400,
                "maximum context length is 65536",
                code::CONTEXT_WINDOW_EXCEEDED,
            ),
            (400, "bad field", code::INVALID_REQUEST),
            (503, "busy", code::SERVER),
            (418, "teapot", "HTTP_418"),
        ] {
            let f = http_failure(status, &body(message), None);
            assert_eq!((f.code.as_str(), f.status), (want, Some(status)));
            assert_eq!(f.message, format!("HTTP {status}: {message}"));
        }
        // The code alone marks an overflow too; a non-JSON body is the detail.
        let f = http_failure(
            400,
            &json!({"error": {"message": "too long", "code": "context_length_exceeded"}})
                .to_string(),
            None,
        );
        assert_eq!(f.code, code::CONTEXT_WINDOW_EXCEEDED);
        assert_eq!(
            http_failure(502, "<html>bad gateway</html>", None).message,
            "HTTP 502: <html>bad gateway</html>"
        );
    }

    /// The tool-call blocks `finish` closes an answer with.
    fn closed_calls(s: &mut StreamState) -> Vec<Value> {
        s.finish()
            .into_iter()
            .filter(|c| c["type"] == "block-end" && c["block"]["type"] == "tool-call")
            .map(|c| c["block"].clone())
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
            let ids: Vec<&Value> = deltas
                .iter()
                .filter(|c| c["type"] == "tool-call-delta")
                .map(|c| &c["id"])
                .collect();
            let id = ids[0].as_str().unwrap().to_owned();
            assert!(id.starts_with("call_") && id.len() > 5, "{id}");
            assert_eq!(ids, [&json!(id), &json!(id)], "stable within the answer");
            let calls = closed_calls(&mut s);
            assert_eq!(
                calls,
                [json!({"type": "tool-call", "id": id, "name": "read", "arguments": "{\"a\":1}"})]
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
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(calls[0]["id"], "call_0");
        assert_eq!(calls[0]["arguments"], "{}");
        let second = calls[1]["id"].as_str().unwrap();
        assert!(
            second.starts_with("call_") && second != "call_0",
            "{second}"
        );
        assert_eq!(calls[1]["arguments"], "{\"b\":2}");
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
        let ids: Vec<Value> = closed_calls(&mut s)
            .iter()
            .map(|c| c["id"].clone())
            .collect();
        assert_eq!(ids, [json!("a"), json!("b")]);
    }

    fn reasoning(text: &str) -> String {
        json!({"choices": [{"delta": {"reasoning_content": text}}]}).to_string()
    }

    #[test]
    fn an_answer_past_its_cap_fails_malformed_as_the_delta_arrives() {
        use crate::answer_cap::DELTA_COST;
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
        let usage = s
            .finish()
            .into_iter()
            .find(|c| c["type"] == "usage")
            .unwrap();
        assert_eq!(
            usage["usage"],
            json!({"inputTokens": MAX_TOKEN_COUNT, "outputTokens": MAX_TOKEN_COUNT})
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
        let finish = s.finish().pop().unwrap();
        let message = finish["reason"]["failure"]["message"].as_str().unwrap();
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
    fn a_long_error_message_is_cut_saying_so() {
        let long = "M".repeat(50_000);
        let body = json!({"error": {"message": long, "code": "x"}}).to_string();
        let f = http_failure(400, &body, None);
        assert_eq!(
            f.message,
            format!(
                "HTTP 400: {}… (cut: the message was 50000 bytes)",
                "M".repeat(MAX_MESSAGE_CHARS)
            )
        );
        let f = in_stream(json!({"error": {"message": long, "code": "x"}}));
        assert!(
            f.message.len() < MAX_MESSAGE_CHARS + 200
                && f.message.contains("(cut: the message was 50000 bytes)"),
            "{}",
            &f.message[f.message.len() - 100..]
        );
        // A short one is whole; a body read only in part says why.
        assert_eq!(
            http_failure(500, "{\"err", Some("the body broke after 5 bytes: reset")).message,
            "HTTP 500: {\"err (the body broke after 5 bytes: reset)"
        );
    }

    #[test]
    fn a_null_error_field_is_not_an_error() {
        let mut s = StreamState::default();
        assert!(s
            .on_data(r#"{"error":null,"choices":[{"delta":{"content":"hi"}}]}"#)
            .is_ok());
    }
}
