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
//! adapter answers with an error. Config `models` describes models
//! (`resolveModel`: window, default output cap, reasoning efforts; see
//! `models.rs`).

mod models;

use std::cell::Cell;
use std::rc::Rc;

use dsh_sdk::api::llm::{Llm, ModelInfoParams, RegisterAdapterParams};
use dsh_sdk::names::{llm_adapter, llm_failure, service};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::message::block_type;
use dsh_sdk::vocab::{Chunk, ContentBlock, FinishReason, LlmFailure, TokenUsage};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct Config {
    /// The script file (relative paths resolve against the working directory).
    script: String,
    /// The provider route this adapter serves.
    provider: Option<String>,
    /// Milliseconds between chunks (to show streaming).
    delay_ms: u64,
    /// The models the adapter describes (`resolveModel`).
    models: Vec<models::ScriptedModel>,
}

/// A script file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptFile {
    /// One response per model request, in order.
    responses: Vec<Response>,
}

/// One scripted response: raw chunks, else an error, else an answer made
/// of reasoning, text and tool calls (in that order).
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct Response {
    /// The stream itself, played as written (it may break the grammar on
    /// purpose; each must still be a chunk).
    chunks: Option<Vec<Chunk>>,
    /// A failed request.
    error: Option<ScriptedError>,
    /// The model's reasoning.
    reasoning: Option<String>,
    /// The model's text.
    text: Option<String>,
    /// The tool calls.
    tool_calls: Vec<ScriptedCall>,
}

/// A scripted failure (`{code?, message?}`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedError {
    #[serde(default = "ScriptedError::default_code")]
    code: String,
    #[serde(default = "ScriptedError::default_message")]
    message: String,
}

impl ScriptedError {
    fn default_code() -> String {
        llm_failure::SERVER.to_owned()
    }

    fn default_message() -> String {
        "scripted failure".to_owned()
    }
}

/// A scripted tool call.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedCall {
    /// Its id (default `call_<n>`, n its position in the response).
    #[serde(default)]
    id: Option<String>,
    /// The tool.
    name: String,
    /// The arguments: a JSON text as the model would write it, or any
    /// JSON value (written compact). Open: the tool parses them.
    arguments: Value,
}

impl ScriptedCall {
    /// The arguments as the model would stream them.
    fn arguments(&self) -> String {
        match &self.arguments {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
}

/// The failure code of a request past the script's last response.
const SCRIPT_EXHAUSTED: &str = "SCRIPT_EXHAUSTED";

/// Words per streamed delta.
const WORDS_PER_DELTA: usize = 3;

/// The usage every scripted answer reports.
fn scripted_usage() -> TokenUsage {
    TokenUsage {
        input_tokens: 10,
        output_tokens: 5,
        ..TokenUsage::default()
    }
}

/// A block of `text` at `index`, streamed a few words per delta.
fn text_block(index: u64, kind: &str, text: &str, out: &mut Vec<Chunk>) {
    out.push(Chunk::BlockStart {
        index,
        block_type: kind.to_owned(),
    });
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    for piece in words.chunks(WORDS_PER_DELTA) {
        let text = piece.concat();
        out.push(if kind == block_type::REASONING {
            Chunk::ReasoningDelta { index, text }
        } else {
            Chunk::TextDelta { index, text }
        });
    }
    let block = if kind == block_type::REASONING {
        ContentBlock::reasoning(text)
    } else {
        ContentBlock::text(text)
    };
    out.push(Chunk::BlockEnd { index, block });
}

/// The chunks that play `response`.
fn chunks_of(response: &Response) -> Vec<Chunk> {
    if let Some(raw) = &response.chunks {
        return raw.clone();
    }
    if let Some(err) = &response.error {
        return vec![LlmFailure::new(&err.code, err.message.clone()).finish(false)];
    }
    let mut out = Vec::new();
    let mut index = 0;
    for (kind, text) in [
        (block_type::REASONING, &response.reasoning),
        (block_type::TEXT, &response.text),
    ] {
        if let Some(text) = text {
            text_block(index, kind, text, &mut out);
            index += 1;
        }
    }
    for (n, call) in response.tool_calls.iter().enumerate() {
        let id = call.id.clone().unwrap_or_else(|| format!("call_{n}"));
        let args = call.arguments();
        out.push(Chunk::BlockStart {
            index,
            block_type: block_type::TOOL_CALL.to_owned(),
        });
        out.push(Chunk::ToolCallDelta {
            index,
            id: id.clone(),
            name: Some(call.name.clone()),
            arguments_delta: args.clone(),
        });
        out.push(Chunk::BlockEnd {
            index,
            block: ContentBlock::tool_call(id, call.name.clone(), args),
        });
        index += 1;
    }
    out.push(Chunk::Usage {
        usage: scripted_usage(),
    });
    out.push(Chunk::finish(if response.tool_calls.is_empty() {
        FinishReason::Stop
    } else {
        FinishReason::ToolCalls
    }));
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
        let script: ScriptFile = serde_json::from_str(&text).map_err(|e| {
            Error::new(
                codes::INVALID_CONFIG,
                format!(
                    "script {} is not a script (`{{\"responses\": [...]}}`, see the \
                     llm-script README): {e}",
                    config.script
                ),
            )
        })?;
        let responses = Rc::new(script.responses);
        let next = Rc::new(Cell::new(0usize));
        let delay = config.delay_ms;
        let provider = config.provider.unwrap_or_else(|| "script".into());
        let catalog = Rc::new(config.models);
        let service = format!("llm:{}:{}", ctx.plugin_name(), ctx.fiber());
        let ctx2 = ctx.clone();
        ctx.provide(service.clone(), move |req| {
            let (responses, next) = (responses.clone(), next.clone());
            let (ctx, catalog) = (ctx2.clone(), catalog.clone());
            async move {
                match req.method.as_str() {
                    llm_adapter::STREAM => {}
                    llm_adapter::RESOLVE_MODEL => {
                        let params: ModelInfoParams = req.params_as()?;
                        return Reply::json(models::resolve(&ctx, &catalog, &params).await);
                    }
                    _ => return Err(req.unknown_method()),
                }
                let i = next.get();
                next.set(i + 1);
                let chunks = match responses.get(i) {
                    Some(r) => chunks_of(r),
                    None => vec![LlmFailure::new(
                        SCRIPT_EXHAUSTED,
                        format!("the script has only {} responses", responses.len()),
                    )
                    .finish(false)],
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
        });
        Llm::new(&ctx)
            .register_adapter(&RegisterAdapterParams {
                providers: vec![provider],
                service,
            })
            .await
    }
}

dsh_sdk::export_plugin!(Script);

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::vocab::assembler::BlockAssembler;

    fn script(text: &str) -> serde_json::Result<ScriptFile> {
        serde_json::from_str(text)
    }

    fn played(response: &str) -> Vec<Chunk> {
        let s = script(&format!(r#"{{"responses": [{response}]}}"#)).unwrap();
        chunks_of(&s.responses[0])
    }

    #[test]
    fn the_demo_script_plays_whole_answers() {
        let text = include_str!("../../../profiles/demo/script.json");
        let s = script(text).unwrap();
        assert_eq!(s.responses.len(), 4);
        let mut assembler = BlockAssembler::default();
        for c in chunks_of(&s.responses[0]) {
            assembler.push(&c);
        }
        let blocks = assembler.blocks().unwrap();
        assert_eq!(
            blocks
                .iter()
                .map(ContentBlock::block_type)
                .collect::<Vec<_>>(),
            [
                block_type::REASONING,
                block_type::TEXT,
                block_type::TOOL_CALL
            ]
        );
        // Arguments given as JSON are written compact, as a model does.
        assert_eq!(
            blocks[2],
            ContentBlock::tool_call("call_0", "read", r#"{"file_path":"notes.md"}"#)
        );
        assert_eq!(assembler.finish(), FinishReason::ToolCalls);
        assert_eq!(assembler.usage(), Some(&scripted_usage()));
    }

    #[test]
    fn text_streams_a_few_words_per_delta() {
        let chunks = played(r#"{"text": "one two three four"}"#);
        let deltas: Vec<&str> = chunks
            .iter()
            .filter_map(|c| match c {
                Chunk::TextDelta { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, ["one two three ", "four"]);
        assert_eq!(chunks.last(), Some(&Chunk::finish(FinishReason::Stop)));
    }

    #[test]
    fn an_error_response_is_one_error_finish_with_defaults() {
        let failure = |response: &str| match played(response).as_slice() {
            [Chunk::Finish {
                reason: FinishReason::Error { failure },
                ..
            }] => failure.clone(),
            other => panic!("{other:?}"),
        };
        let f = failure(r#"{"error": {"code": "RATE_LIMIT", "message": "slow down"}}"#);
        assert_eq!(
            (f.code.as_str(), f.message.as_str()),
            ("RATE_LIMIT", "slow down")
        );
        let f = failure(r#"{"error": {}}"#);
        assert_eq!(
            (f.code.as_str(), f.message.as_str()),
            (llm_failure::SERVER, "scripted failure")
        );
    }

    #[test]
    fn raw_chunks_play_as_written_even_out_of_grammar() {
        let chunks = played(
            r#"{"chunks": [{"type": "finish", "reason": {"kind": "stop"}},
                          {"type": "usage", "usage": {"inputTokens": 1, "outputTokens": 1}}]}"#,
        );
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0], Chunk::finish(FinishReason::Stop));
    }

    #[test]
    fn a_script_that_is_not_one_is_refused_naming_the_fault() {
        for (text, fault) in [
            (r#"{"answers": []}"#, "unknown field `answers`"),
            (r#"{"responses": [{"txt": "hi"}]}"#, "unknown field `txt`"),
            (
                r#"{"responses": [{"chunks": [{"type": "thinking"}]}]}"#,
                "unknown variant `thinking`",
            ),
            (
                r#"{"responses": [{"toolCalls": [{"arguments": {}}]}]}"#,
                "missing field `name`",
            ),
        ] {
            let e = script(text).err().unwrap().to_string();
            assert!(e.contains(fault), "{text}: {e}");
        }
    }
}
