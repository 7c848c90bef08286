//! The chat-completions wire format: request bodies from the harness's
//! messages, and stream chunks from the provider's deltas.

use dsh_sdk::vocab::{msg, LlmFailure};
use serde_json::{json, Value};

use crate::Config;

fn texts(blocks: &[Value], kind: &str) -> String {
    blocks
        .iter()
        .filter(|b| b["type"] == kind)
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("")
}

/// One harness message as chat-completions messages.
fn messages_of(m: &Value) -> Vec<Value> {
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

/// The request body for one generate call.
pub fn request_body(config: &Config, req: &Value) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = req["system"].as_str().filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    for m in req["messages"].as_array().into_iter().flatten() {
        messages.extend(messages_of(m));
    }
    let model = req["model"]
        .as_str()
        .filter(|m| !m.is_empty())
        .unwrap_or(&config.model);
    let mut body = json!({
        "model": model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if config.reasoning {
        let effort = req["reasoningEffort"]
            .as_str()
            .unwrap_or(&config.reasoning_effort);
        if effort == "off" {
            body["thinking"] = json!({"type": "disabled"});
        } else {
            body["thinking"] = json!({"type": "enabled"});
            body["reasoning_effort"] = json!(effort);
        }
    }
    if let Some(tools) = req["tools"].as_array().filter(|t| !t.is_empty()) {
        body["tools"] = json!(tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]}}))
            .collect::<Vec<_>>());
    }
    if let Some(mt) = req["maxTokens"].as_u64().or(config.max_tokens) {
        body["max_tokens"] = json!(mt);
    }
    for (from, to) in [("temperature", "temperature"), ("stop", "stop")] {
        if let Some(v) = req.get(from).filter(|v| !v.is_null()) {
            body[to] = v.clone();
        }
    }
    body
}

/// Maps an HTTP error response to a failure.
pub fn http_failure(status: u16, body: &str) -> LlmFailure {
    let detail: String = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.chars().take(500).collect());
    let lower = detail.to_ascii_lowercase();
    let code = match status {
        401 | 403 => "AUTH".to_owned(),
        402 => "QUOTA".to_owned(),
        429 => "RATE_LIMIT".to_owned(),
        400 if lower.contains("context")
            && (lower.contains("length")
                || lower.contains("window")
                || lower.contains("maximum")) =>
        {
            "CONTEXT_WINDOW_EXCEEDED".to_owned()
        }
        400 | 413 | 422 => "INVALID_REQUEST".to_owned(),
        500..=599 => "SERVER".to_owned(),
        s => format!("HTTP_{s}"),
    };
    let mut f = LlmFailure::new(&code, format!("HTTP {status}: {detail}"));
    f.status = Some(status);
    f
}

#[derive(Clone, Copy, PartialEq)]
enum Open {
    Reasoning(u64),
    Text(u64),
}

/// Turns provider deltas into the harness's chunk grammar.
#[derive(Default)]
pub struct StreamState {
    next_index: u64,
    open: Option<Open>,
    text: String,
    reasoning: String,
    /// provider tool index -> (block index, id, name, args)
    tools: Vec<(u64, u64, String, String, String)>,
    finish: Option<String>,
    usage: Option<Value>,
    any_content: bool,
}

impl StreamState {
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

    /// One `data:` payload.
    pub fn on_data(&mut self, data: &str) -> Result<Vec<Value>, LlmFailure> {
        let v: Value = serde_json::from_str(data).map_err(|e| {
            LlmFailure::new(
                "MALFORMED_RESPONSE",
                format!("the provider sent malformed JSON: {e}"),
            )
        })?;
        let mut out = Vec::new();
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            let prompt = u["prompt_tokens"].as_u64().unwrap_or(0);
            let hit = u["prompt_cache_hit_tokens"]
                .as_u64()
                .or_else(|| u["prompt_tokens_details"]["cached_tokens"].as_u64());
            let mut usage = json!({"inputTokens": prompt.saturating_sub(hit.unwrap_or(0)),
                                   "outputTokens": u["completion_tokens"].as_u64().unwrap_or(0)});
            if let Some(h) = hit {
                usage["cacheReadTokens"] = json!(h);
            }
            if let Some(r) = u["completion_tokens_details"]["reasoning_tokens"].as_u64() {
                usage["reasoningTokens"] = json!(r);
            }
            self.usage = Some(usage);
        }
        let Some(choice) = v["choices"].get(0) else {
            return Ok(out);
        };
        let delta = &choice["delta"];
        if let Some(r) = delta["reasoning_content"]
            .as_str()
            .filter(|s| !s.is_empty())
        {
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
        if let Some(t) = delta["content"].as_str().filter(|s| !s.is_empty()) {
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
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let provider_index = call["index"].as_u64().unwrap_or(0);
            if !self.tools.iter().any(|t| t.0 == provider_index) {
                self.close_open(&mut out);
                let i = self.next_index;
                self.next_index += 1;
                self.tools.push((
                    provider_index,
                    i,
                    String::new(),
                    String::new(),
                    String::new(),
                ));
                out.push(json!({"type": "block-start", "index": i, "blockType": "tool-call"}));
            }
            let Some(t) = self.tools.iter_mut().find(|t| t.0 == provider_index) else {
                continue;
            };
            if let Some(id) = call["id"].as_str().filter(|s| !s.is_empty()) {
                t.2 = id.to_owned();
            }
            let name = call["function"]["name"].as_str().filter(|s| !s.is_empty());
            if let (Some(n), true) = (name, t.3.is_empty()) {
                t.3 = n.to_owned();
            }
            let args = call["function"]["arguments"].as_str().unwrap_or_default();
            t.4.push_str(args);
            self.any_content = true;
            let mut c =
                json!({"type": "tool-call-delta", "index": t.1, "id": t.2, "argumentsDelta": args});
            if let Some(n) = name {
                c["name"] = json!(n);
            }
            out.push(c);
        }
        if let Some(r) = choice["finish_reason"].as_str() {
            self.finish = Some(r.to_owned());
        }
        Ok(out)
    }

    /// At `[DONE]`: close blocks, then usage, then finish.
    pub fn finish(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        self.close_open(&mut out);
        for (_, i, id, name, args) in std::mem::take(&mut self.tools) {
            out.push(json!({"type": "block-end", "index": i, "block": {"type": "tool-call", "id": id, "name": name, "arguments": args}}));
        }
        if let Some(u) = self.usage.take() {
            out.push(json!({"type": "usage", "usage": u}));
        }
        let reason = match self.finish.as_deref() {
            Some("stop") | None if !self.any_content => {
                return vec![LlmFailure::new(
                    "EMPTY_RESPONSE",
                    "the model returned an empty completion",
                )
                .finish_chunk(false)];
            }
            Some("stop") | None => json!({"kind": "stop"}),
            Some("tool_calls") => json!({"kind": "tool-calls"}),
            Some("length") => json!({"kind": "max-tokens"}),
            Some(other) => {
                json!({"kind": "error", "failure": LlmFailure::new("SERVER", format!("the model stopped: {other}"))})
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
}
