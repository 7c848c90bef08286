//! `BlockAssembler`: the one way stream chunks become content blocks (the
//! original's `packages/llm/llm/src/assembler.ts`).
//!
//! Partials are keyed by `index` and kept in order of first sighting (a
//! `block-start` or a first delta: delta-only streams are fine). A repeated
//! `block-start` is ignored; once a `block-end` closed an index, later
//! deltas and closes for it are ignored (the first close wins). Text and
//! reasoning accumulate; a tool call keeps its last id, its last
//! non-empty name and the concatenated arguments. On `max-tokens` every
//! tool call is dropped (its arguments are cut), and the replay state's
//! `blocks` are pruned in step; a replay state whose `blocks` do not match
//! the blocks seen is dropped.

use serde_json::Value;

use super::chunk::{Chunk, FinishReason};
use super::message::{block_type, ContentBlock, Extra, TextBlock, ToolCallBlock};
use super::{LlmFailure, TokenUsage};

/// Why a stream could not be assembled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssembleError {
    /// A block of a type the assembler cannot build from deltas was left
    /// open (only `text`, `reasoning` and `tool-call` grow by deltas).
    #[error("cannot assemble incomplete block of type \"{0}\"")]
    Incomplete(String),
}

/// Folds a stream's chunks into content blocks, usage, finish reason and
/// replay state.
#[derive(Debug, Default, Clone)]
pub struct BlockAssembler {
    partials: Vec<Partial>,
    usage: Option<TokenUsage>,
    finish: Option<FinishReason>,
    replay_state: Option<Value>,
}

#[derive(Debug, Clone)]
struct Partial {
    index: u64,
    block_type: String,
    text: String,
    id: Option<String>,
    name: Option<String>,
    arguments: String,
    closed: Option<ContentBlock>,
}

impl BlockAssembler {
    fn partial(&mut self, index: u64, block_type: &str) -> &mut Partial {
        let pos = match self.partials.iter().position(|p| p.index == index) {
            Some(p) => p,
            None => {
                self.partials.push(Partial {
                    index,
                    block_type: block_type.to_owned(),
                    text: String::new(),
                    id: None,
                    name: None,
                    arguments: String::new(),
                    closed: None,
                });
                self.partials.len() - 1
            }
        };
        &mut self.partials[pos]
    }

    /// Feeds one chunk.
    pub fn push(&mut self, chunk: &Chunk) {
        match chunk {
            Chunk::BlockStart { index, block_type } => {
                self.partial(*index, block_type);
            }
            Chunk::TextDelta { index, text } | Chunk::ReasoningDelta { index, text } => {
                let kind = match chunk {
                    Chunk::TextDelta { .. } => block_type::TEXT,
                    _ => block_type::REASONING,
                };
                let p = self.partial(*index, kind);
                if p.closed.is_none() {
                    p.text.push_str(text);
                }
            }
            Chunk::ToolCallDelta {
                index,
                id,
                name,
                arguments_delta,
            } => {
                let p = self.partial(*index, block_type::TOOL_CALL);
                if p.closed.is_none() {
                    if !id.is_empty() {
                        p.id = Some(id.clone());
                    }
                    if let Some(n) = name.as_ref().filter(|n| !n.is_empty()) {
                        p.name = Some(n.clone());
                    }
                    p.arguments.push_str(arguments_delta);
                }
            }
            Chunk::BlockEnd { index, block } => {
                let p = self.partial(*index, block.block_type());
                if p.closed.is_none() {
                    p.closed = Some(block.clone());
                }
            }
            Chunk::Usage { usage } => self.usage = Some(usage.clone()),
            Chunk::Finish {
                reason,
                replay_state,
            } => {
                self.finish = Some(reason.clone());
                self.replay_state = replay_state.clone();
            }
        }
    }

    fn block_of(p: &Partial) -> Result<ContentBlock, AssembleError> {
        if let Some(b) = &p.closed {
            return Ok(b.clone());
        }
        Ok(match p.block_type.as_str() {
            block_type::TEXT => ContentBlock::Text(TextBlock::new(p.text.clone())),
            block_type::REASONING => ContentBlock::Reasoning(TextBlock::new(p.text.clone())),
            block_type::TOOL_CALL => ContentBlock::ToolCall(ToolCallBlock {
                id: p.id.clone().unwrap_or_else(|| format!("call-{}", p.index)),
                name: p.name.clone().unwrap_or_default(),
                arguments: p.arguments.clone(),
                extra: Extra::new(),
            }),
            other => return Err(AssembleError::Incomplete(other.to_owned())),
        })
    }

    /// The finish reason (`stop` until a finish chunk arrives).
    pub fn finish(&self) -> FinishReason {
        self.finish.clone().unwrap_or(FinishReason::Stop)
    }

    /// Whether a finish chunk arrived.
    pub fn finished(&self) -> bool {
        self.finish.is_some()
    }

    /// The failure the finish chunk reported, if any.
    pub fn failure(&self) -> Option<&LlmFailure> {
        self.finish.as_ref().and_then(FinishReason::failure)
    }

    /// The last usage chunk's usage.
    pub fn usage(&self) -> Option<&TokenUsage> {
        self.usage.as_ref()
    }

    /// The assembled blocks and the replay state to keep with them, in
    /// one pass: what a message is made of. On `max-tokens` every tool call
    /// is dropped, and the replay state's `blocks` with them; a replay
    /// state whose `blocks` do not line up with the blocks seen is dropped.
    pub fn assemble(&self) -> Result<(Vec<ContentBlock>, Option<Value>), AssembleError> {
        let all = self
            .partials
            .iter()
            .map(Self::block_of)
            .collect::<Result<Vec<_>, _>>()?;
        let seen = all.len();
        let max_tokens = matches!(self.finish, Some(FinishReason::MaxTokens));
        let kept: Vec<bool> = all
            .iter()
            .map(|b| !(max_tokens && matches!(b, ContentBlock::ToolCall(_))))
            .collect();
        let blocks: Vec<ContentBlock> = all
            .into_iter()
            .zip(&kept)
            .filter_map(|(b, k)| k.then_some(b))
            .collect();
        let replay = match &self.replay_state {
            Some(Value::Object(envelope)) => match envelope.get("blocks") {
                None => self.replay_state.clone(),
                Some(Value::Array(replayed)) if replayed.len() == seen => {
                    let mut envelope = envelope.clone();
                    let pruned: Vec<Value> = replayed
                        .iter()
                        .zip(&kept)
                        .filter(|(_, k)| **k)
                        .map(|(b, _)| b.clone())
                        .collect();
                    envelope.insert("blocks".to_owned(), Value::Array(pruned));
                    Some(Value::Object(envelope))
                }
                Some(_) => None,
            },
            other => other.clone(),
        };
        Ok((blocks, replay))
    }

    /// The assembled blocks; on `max-tokens` every tool call is dropped.
    pub fn blocks(&self) -> Result<Vec<ContentBlock>, AssembleError> {
        Ok(self.assemble()?.0)
    }

    /// Text and reasoning with visible content, for an interrupted stream
    /// (tool calls and blocks of other types are dropped).
    pub fn interrupted_blocks(&self) -> Vec<ContentBlock> {
        self.partials
            .iter()
            .filter_map(|p| Self::block_of(p).ok())
            .filter(|b| b.any_text().is_some_and(|t| !t.trim().is_empty()))
            .collect()
    }
}

#[cfg(test)]
#[path = "assembler_tests.rs"]
mod tests;
