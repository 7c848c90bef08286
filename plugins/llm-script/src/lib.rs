//! `llm-script`: an offline adapter that plays a script, so the harness runs
//! end to end with no network. The script (JSON) is a list of responses, one
//! per model request:
//!
//! ```json
//! {"responses": [
//!   {"reasoning": "...", "text": "...", "toolCalls": [{"name": "read", "arguments": {"file_path": "x"}}]},
//!   {"error": {"code": "RATE_LIMIT", "message": "slow down"}},
//!   {"chunks": [ ...raw stream chunks... ]}
//! ]}
//! ```
//! Text is streamed a few words per chunk. When the script runs out, the
//! adapter answers with an error.

use std::cell::Cell;
use std::rc::Rc;

use dsh_sdk::names::{llm_failure, service};
use dsh_sdk::prelude::*;
use dsh_sdk::tool::register_adapter;
use dsh_sdk::vocab::LlmFailure;
use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct Config {
    /// The script file (relative paths resolve against the working directory).
    script: String,
    /// The provider route this adapter serves.
    provider: Option<String>,
    /// Milliseconds between chunks (to show streaming).
    delay_ms: u64,
}

fn chunks_of(response: &Value) -> Vec<Value> {
    if let Some(raw) = response["chunks"].as_array() {
        return raw.clone();
    }
    if let Some(err) = response.get("error") {
        let code = err["code"].as_str().unwrap_or(llm_failure::SERVER);
        let message = err["message"].as_str().unwrap_or("scripted failure");
        return vec![LlmFailure::new(code, message).finish_chunk(false)];
    }
    let mut out = Vec::new();
    let mut index = 0;
    for (kind, field) in [("reasoning", "reasoning"), ("text", "text")] {
        let Some(text) = response[field].as_str() else {
            continue;
        };
        out.push(json!({"type": "block-start", "index": index, "blockType": kind}));
        let words: Vec<&str> = text.split_inclusive(' ').collect();
        for piece in words.chunks(3) {
            out.push(
                json!({"type": format!("{kind}-delta"), "index": index, "text": piece.concat()}),
            );
        }
        out.push(
            json!({"type": "block-end", "index": index, "block": {"type": kind, "text": text}}),
        );
        index += 1;
    }
    let calls = response["toolCalls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (n, call) in calls.iter().enumerate() {
        let id = call["id"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("call_{n}"));
        let args = match &call["arguments"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push(json!({"type": "block-start", "index": index, "blockType": "tool-call"}));
        out.push(json!({"type": "tool-call-delta", "index": index, "id": id, "name": call["name"], "argumentsDelta": args}));
        out.push(json!({"type": "block-end", "index": index, "block": {"type": "tool-call", "id": id, "name": call["name"], "arguments": args}}));
        index += 1;
    }
    out.push(json!({"type": "usage", "usage": {"inputTokens": 10, "outputTokens": 5}}));
    let kind = if calls.is_empty() {
        "stop"
    } else {
        "tool-calls"
    };
    out.push(json!({"type": "finish", "reason": {"kind": kind}}));
    out
}

struct Script;

impl Plugin for Script {
    const NAME: &'static str = "llm-script";
    const DESCRIPTION: &'static str = "offline scripted model adapter";
    const INJECT: &'static [&'static str] = &[service::LLM];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let text = std::fs::read_to_string(&config.script).map_err(|e| {
            Error::new(
                codes::INVALID_CONFIG,
                format!("cannot read script {}: {e}", config.script),
            )
        })?;
        let script: Value = serde_json::from_str(&text).map_err(|e| {
            Error::new(
                codes::INVALID_CONFIG,
                format!("script {} is not JSON: {e}", config.script),
            )
        })?;
        let responses = Rc::new(script["responses"].as_array().cloned().unwrap_or_default());
        let next = Rc::new(Cell::new(0usize));
        let delay = config.delay_ms;
        let provider = config.provider.unwrap_or_else(|| "script".into());
        register_adapter(&ctx, vec![provider], move |_req| {
            let (responses, next) = (responses.clone(), next.clone());
            async move {
                let i = next.get();
                next.set(i + 1);
                let chunks = match responses.get(i) {
                    Some(r) => chunks_of(r),
                    None => vec![LlmFailure::new(
                        "SCRIPT_EXHAUSTED",
                        format!("the script has only {} responses", responses.len()),
                    )
                    .finish_chunk(false)],
                };
                let (tx, reply) = Reply::stream();
                tokio::task::spawn_local(async move {
                    for c in chunks {
                        if delay > 0 {
                            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                        }
                        if !tx.send(c) {
                            return;
                        }
                    }
                });
                Ok(reply)
            }
        })
        .await
    }
}

dsh_sdk::export_plugin!(Script);
