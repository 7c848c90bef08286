//! The summary request: one `llm.stream` call that replays the
//! conversation's own system prompt, tools and the shadowed messages, then
//! asks for the checkpoint in a final user message, so the provider's
//! prefix cache is reused (the original's `summarizer.ts`).

use dsh_sdk::api::llm::{purpose, Llm, StreamRequest};
use dsh_sdk::names::code;
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::assembler::BlockAssembler;
use dsh_sdk::vocab::compaction::SUMMARY_OPEN_TAG;
use dsh_sdk::vocab::records::CallConfig;
use dsh_sdk::vocab::{
    Chunk, ContentBlock, Extra, FinishReason, Message, MessageSource, TokenUsage, ToolSchema,
};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The plugin the summary request's final user message is from.
pub(crate) const ASKER: &str = "dsh-compaction-basic";

/// The instruction, byte for byte the original's `COMPACTION_INSTRUCTION`.
pub fn instruction() -> String {
    [
        "You are now acting as a compaction engine for this AI coding assistant. Condense the conversation ABOVE into a structured checkpoint that lets another model resume the work with no loss of essential context.",
        "",
        "Output EXACTLY the Markdown structure below: keep every section, in order. Use terse bullets, not prose paragraphs. Write \"(none)\" for an empty section — never drop a section.",
        "",
        "## Primary Request and Intent",
        "- [the user's original and evolving goals; quote verbatim where the exact wording matters]",
        "",
        "## Key Technical Concepts",
        "- [technologies, frameworks, patterns, and conventions in play]",
        "",
        "## Files and Code",
        "- [exact path: why it matters, key changes or snippets]",
        "",
        "## Errors and Fixes",
        "- [error: how it was resolved, plus any related user feedback]",
        "",
        "## Pending Jobs",
        "- [explicitly requested work not yet completed]",
        "",
        "## Current Work",
        "- [precisely what was in progress at this checkpoint]",
        "",
        "## Next Step",
        "- [the single next action, directly in line with the most recent request, or \"(none)\"]",
        "",
        "## Critical Context",
        "- [decisions and their rationale, constraints, user preferences, open questions, data needed to continue]",
        "",
        "Rules:",
        "- Write concise English engineering prose. Preserve exact file paths, commands, error strings, identifiers, numeric values, function signatures, and syntax fragments.",
        "- Capture user feedback and explicit instructions faithfully, especially corrections.",
        "- Do NOT mention this summarization request or that the context was compacted.",
        "- Output only the checkpoint text: do not call any tool or take any other action.",
        &format!("- If the conversation already contains a {SUMMARY_OPEN_TAG} block, it is a PRIOR checkpoint. Do not copy it forward verbatim: preserve still-true facts, drop stale ones, and merge newer information into a single consolidated summary under the same structure."),
    ]
    .join("\n")
}

/// What the summary is made from.
pub struct Input<'a> {
    /// The route that writes it.
    pub provider: &'a str,
    /// Its model.
    pub model: &'a str,
    /// The output cap.
    pub max_tokens: u64,
    /// The conversation's system prompt.
    pub system: Option<&'a str>,
    /// The conversation's tools (none when they did not fit the window).
    pub tools: &'a [ToolSchema],
    /// The shadowed messages, fitted to the window ([`crate::fit`]).
    pub messages: Vec<Message>,
    /// The final user message ([`ask`]).
    pub ask: Message,
    /// The session.
    pub session_id: &'a str,
    /// The name `llm.cancel` stops the request by (a pre-step's signal).
    pub signal: Option<&'a str>,
}

/// A summary and the call's output.
pub struct Summary {
    /// Its text blocks.
    pub summary: Vec<ContentBlock>,
    /// The model's whole output.
    pub raw_output: Vec<ContentBlock>,
    /// The call's usage, if reported.
    pub usage: Option<TokenUsage>,
    /// The answer stopped at its output cap (the summary ends with
    /// [`truncated_note`]).
    pub truncated: bool,
}

/// The final user message: the instruction, and the user's focus (what
/// `/compact …` asked for).
pub fn ask(instructions: Option<&str>) -> Message {
    let mut text = instruction();
    if let Some(extra) = instructions.filter(|s| !s.trim().is_empty()) {
        text.push_str("\n\nAdditional instructions from the user for this checkpoint:\n");
        text.push_str(extra.trim());
    }
    Message::user(
        dsh_sdk::new_id(),
        vec![ContentBlock::text(text)],
        MessageSource::plugin(ASKER),
    )
}

/// The call config of the summary request: the route, the output cap and
/// `purpose: compaction`, in that key order.
fn call_config(input: &Input<'_>) -> Result<Map<String, Value>> {
    let mut extra = Extra::new();
    extra.insert("purpose".to_owned(), Value::from(purpose::COMPACTION));
    let config = CallConfig {
        provider: input.provider.to_owned(),
        model: input.model.to_owned(),
        reasoning_effort: None,
        temperature: None,
        max_tokens: Some(input.max_tokens),
        stop: None,
        extra,
    };
    // `StreamRequest` takes the config as the open map an `agent/request`
    // listener may extend.
    match serde_json::to_value(config)? {
        Value::Object(map) => Ok(map),
        other => Err(Error::msg(format!(
            "the summary request's call config serialized to {other}, not an object"
        ))),
    }
}

/// Runs the summary request; a failed or empty answer is an error with the
/// model's code and message. An answer cut at its output cap is kept, with
/// [`truncated_note`] after it.
pub async fn summarize(ctx: &Context, input: Input<'_>) -> Result<Summary> {
    let config = call_config(&input)?;
    // `StreamRequest` carries tool schemas as the open JSON adapters read.
    let tools = input
        .tools
        .iter()
        .map(serde_json::to_value)
        .collect::<serde_json::Result<Vec<Value>>>()?;
    let mut messages = input
        .messages
        .iter()
        .map(serde_json::value::to_raw_value)
        .collect::<serde_json::Result<Vec<Box<RawValue>>>>()?;
    messages.push(serde_json::value::to_raw_value(&input.ask)?);
    let request = StreamRequest {
        config: &config,
        messages: &messages,
        system: input.system.filter(|s| !s.is_empty()),
        tools: (!tools.is_empty()).then_some(tools.as_slice()),
        session_id: input.session_id,
        signal: input.signal,
    };
    let mut stream = Llm::new(ctx).stream(&request)?;
    let mut assembler = BlockAssembler::default();
    while let Some(payload) = stream.next_payload().await {
        let chunk: Chunk = payload?.parse().map_err(|e| {
            Error::new(
                codes::INVALID_PAYLOAD,
                format!("the summary request streamed a malformed chunk: {e}"),
            )
        })?;
        assembler.push(&chunk);
    }
    match assembler.finish() {
        FinishReason::Error { failure } | FinishReason::Aborted { failure } => {
            return Err(Error::new(
                failure.code,
                format!("the summary request failed: {}", failure.message),
            ));
        }
        FinishReason::MaxTokens | FinishReason::Stop | FinishReason::ToolCalls => {}
    }
    let truncated = assembler.finish() == FinishReason::MaxTokens;
    let raw_output = assembler
        .blocks()
        .map_err(|e| Error::msg(format!("the summary answer cannot be assembled: {e}")))?;
    let mut summary: Vec<ContentBlock> = raw_output
        .iter()
        .filter(|b| matches!(b, ContentBlock::Text(_)))
        .cloned()
        .collect();
    let said = summary
        .iter()
        .filter_map(ContentBlock::as_text)
        .any(|t| !t.trim().is_empty());
    match (said, truncated) {
        (false, true) => {
            return Err(Error::new(
                code::MAX_TOKENS,
                format!(
                    "summarization reached its output cap of {} tokens before writing any text",
                    input.max_tokens
                ),
            ))
        }
        (false, false) => return Err(Error::msg("summarization produced no text summary content")),
        (true, true) => summary.push(ContentBlock::text(truncated_note(input.max_tokens))),
        (true, false) => {}
    }
    Ok(Summary {
        summary,
        raw_output,
        usage: assembler.usage().cloned(),
        truncated,
    })
}

/// Put after a summary cut at its output cap: the checkpoint is kept (a
/// session whose every summary runs over its cap would otherwise never be
/// compacted), and the model learns that its last sections may be missing.
pub fn truncated_note(max_tokens: u64) -> String {
    format!(
        "\n\n[... this checkpoint was cut at its output cap of {max_tokens} tokens: its last sections may be missing ...]"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instruction_is_the_originals() {
        let i = instruction();
        assert!(i.starts_with(
            "You are now acting as a compaction engine for this AI coding assistant."
        ));
        assert!(i.ends_with("under the same structure."));
        // The original's 34 lines and 1,804 bytes (its `.join('\n')`).
        assert_eq!((i.split('\n').count(), i.len()), (34, 1804));
        assert!(i.contains("contains a <compacted-summary> block, it is a PRIOR checkpoint"));
    }
}
