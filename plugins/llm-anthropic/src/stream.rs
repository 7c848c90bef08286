//! The Messages stream's events as the harness's chunks: each content
//! block opens (`block-start`), grows by deltas of its type and closes
//! whole (`block-end`); then the usage, then one `finish`.
//!
//! Blocks are numbered in the order they start (blocks of types this
//! adapter does not read take no number), so the harness's indexes are
//! dense whatever the server's are. A `thinking` block is a reasoning
//! block, its signature kept in the answer's replay state; a
//! `redacted_thinking` block is a reasoning block without text, its data
//! kept the same way ([`crate::replay`]). A `tool_use` block is a tool
//! call: its id is settled when it starts ([`CallIds`]), its input
//! streams as the call's arguments (`{}` when none streamed).
//!
//! The order of the events is checked where a part of the answer would
//! otherwise land in the wrong place: a block started twice, a delta or
//! a stop for a block that never started, a delta after its block's stop,
//! or a delta of the wrong kind (text into a tool call) fails the stream
//! with `MALFORMED_RESPONSE`.

use std::collections::{HashMap, HashSet};

use dsh_llm_http::answer_cap::{AnswerBudget, DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_TOOL_CALLS};
use dsh_llm_http::call_ids::{CallIds, SentId};
use dsh_llm_http::failure::{
    code, cut_chars, event_error, quoted_reason, stream_failure, unreadable, REASON_CHARS, REFUSAL,
};
use dsh_sdk::vocab::message::block_type;
use dsh_sdk::vocab::{Chunk, ContentBlock, FinishReason, LlmFailure, TokenUsage};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::replay::{ReplayBlock, ReplayState};
use crate::response::{
    block, delta, event, stop_reason, BlockDelta, BlockStart, BlockStop, InputJsonDelta,
    MessageDelta, MessageStart, RedactedStart, SignatureDelta, TextDelta, TextStart, ThinkingDelta,
    ThinkingStart, ToolUseStart, Typed, Usage,
};

/// What a block of the answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Thinking,
    RedactedThinking,
    ToolUse,
}

impl Kind {
    /// Its name on the wire, for failures.
    fn wire(self) -> &'static str {
        match self {
            Kind::Text => block::TEXT,
            Kind::Thinking => block::THINKING,
            Kind::RedactedThinking => block::REDACTED_THINKING,
            Kind::ToolUse => block::TOOL_USE,
        }
    }
}

/// One open block.
struct Block {
    kind: Kind,
    /// Its index in the chunk grammar.
    index: u64,
    /// Its text, thinking, or the tool call's input so far.
    text: String,
    /// A thinking block's signature; a redacted block's data.
    sealed: Option<String>,
    /// A tool call's id and name.
    id: String,
    name: String,
    /// A tool call whose input came whole with its start: deltas of its
    /// input that follow are not added to it (some servers send both).
    whole_input: bool,
}

/// Turns the Messages events into the harness's chunk grammar.
pub struct StreamState {
    /// The open blocks, by the server's index.
    open: HashMap<u64, Block>,
    /// The server's indexes of the open blocks, in the order they started.
    order: Vec<u64>,
    /// The server's indexes of the blocks closed.
    closed: HashSet<u64>,
    /// The server's indexes of the blocks of types this adapter skips.
    skipped: HashSet<u64>,
    next_index: u64,
    /// One replay entry per block, by the harness's index.
    replay: Vec<Option<ReplayBlock>>,
    ids: CallIds,
    budget: AnswerBudget,
    stop: Option<String>,
    usage: Usage,
    any_content: bool,
    stopped: bool,
}

impl Default for StreamState {
    fn default() -> Self {
        StreamState::new(DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_TOOL_CALLS)
    }
}

/// A failure for what the server sent out of order.
fn malformed(message: String) -> LlmFailure {
    LlmFailure::new(
        code::MALFORMED_RESPONSE,
        format!("the provider sent {message}"),
    )
}

/// `text` read as `T`, or the failure saying why it cannot be.
fn read<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, LlmFailure> {
    serde_json::from_str(text).map_err(|e| unreadable(&e))
}

/// Whether a sent `input` is an object without keys (`{}`).
fn is_empty_object(input: &RawValue) -> bool {
    input
        .get()
        .chars()
        .filter(|c| !c.is_whitespace())
        .eq("{}".chars())
}

impl StreamState {
    /// A stream whose answer may hold `max_answer_bytes` and
    /// `max_tool_calls` tool calls (see [`dsh_llm_http::answer_cap`]).
    pub fn new(max_answer_bytes: usize, max_tool_calls: usize) -> Self {
        StreamState {
            open: HashMap::new(),
            order: Vec::new(),
            closed: HashSet::new(),
            skipped: HashSet::new(),
            next_index: 0,
            replay: Vec::new(),
            ids: CallIds::new(crate::PLUGIN),
            budget: AnswerBudget::new(crate::PLUGIN, max_answer_bytes, max_tool_calls),
            stop: None,
            usage: Usage::default(),
            any_content: false,
            stopped: false,
        }
    }

    /// Whether `message_stop` arrived: the answer is complete.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// One event's `data`. An `error` event is the failure; an event of a
    /// type this adapter does not read is skipped.
    pub fn on_data(&mut self, data: &str) -> Result<Vec<Chunk>, LlmFailure> {
        let typed: Typed<'_> = match serde_json::from_str(data) {
            Ok(t) => t,
            Err(e) => {
                return Err(match event_error(data) {
                    Some(error) => stream_failure(error),
                    None => unreadable(&e),
                })
            }
        };
        let mut out = Vec::new();
        match typed.kind.as_ref() {
            event::MESSAGE_START => {
                let start: MessageStart = read(data)?;
                if let Some(u) = start.message.0.and_then(|m| m.usage.0) {
                    self.usage.update(&u);
                }
            }
            event::CONTENT_BLOCK_START => {
                let start: BlockStart<'_> = read(data)?;
                self.start(start.index, start.content_block, &mut out)?;
            }
            event::CONTENT_BLOCK_DELTA => {
                let d: BlockDelta<'_> = read(data)?;
                self.delta(d.index, d.delta, &mut out)?;
            }
            event::CONTENT_BLOCK_STOP => {
                let stop: BlockStop = read(data)?;
                self.stop_block(stop.index, &mut out)?;
            }
            event::MESSAGE_DELTA => {
                let d: MessageDelta = read(data)?;
                if let Some(reason) = d.delta.0.and_then(|d| d.stop_reason.0) {
                    // Kept until the answer ends: it counts like its text.
                    self.budget.charge(reason.len(), 0)?;
                    self.stop = Some(reason);
                }
                if let Some(u) = &d.usage.0 {
                    self.usage.update(u);
                }
            }
            event::MESSAGE_STOP => self.stopped = true,
            event::ERROR => {
                return Err(match event_error(data) {
                    Some(error) => stream_failure(error),
                    None => LlmFailure::new(
                        code::SERVER,
                        "the provider reported an error mid-stream without saying what",
                    ),
                })
            }
            // `ping`, and event types added after this adapter.
            _ => {}
        }
        Ok(out)
    }

    /// Opens a block of `kind` for the server's `index`: its number, its
    /// `block-start`. Each block counts against the answer's cap as a
    /// delta does, before it is kept, so a flood of empty blocks ends
    /// there.
    fn open_block(
        &mut self,
        index: u64,
        kind: Kind,
        out: &mut Vec<Chunk>,
    ) -> Result<u64, LlmFailure> {
        self.budget.charge(0, 1)?;
        let number = self.next_index;
        self.next_index += 1;
        self.replay.push(None);
        let block_type = match kind {
            Kind::Text => block_type::TEXT,
            Kind::Thinking | Kind::RedactedThinking => block_type::REASONING,
            Kind::ToolUse => block_type::TOOL_CALL,
        };
        out.push(Chunk::BlockStart {
            index: number,
            block_type: block_type.to_owned(),
        });
        self.open.insert(
            index,
            Block {
                kind,
                index: number,
                text: String::new(),
                sealed: None,
                id: String::new(),
                name: String::new(),
                whole_input: false,
            },
        );
        self.order.push(index);
        Ok(number)
    }

    /// `content_block_start`.
    fn start(
        &mut self,
        index: u64,
        content: &RawValue,
        out: &mut Vec<Chunk>,
    ) -> Result<(), LlmFailure> {
        if self.open.contains_key(&index)
            || self.closed.contains(&index)
            || self.skipped.contains(&index)
        {
            return Err(malformed(format!("content block {index} twice")));
        }
        let typed: Typed<'_> = read(content.get())?;
        match typed.kind.as_ref() {
            block::TEXT => {
                let start: TextStart = read(content.get())?;
                self.open_block(index, Kind::Text, out)?;
                self.grow(index, &start.text, out)?;
            }
            block::THINKING => {
                let start: ThinkingStart = read(content.get())?;
                self.open_block(index, Kind::Thinking, out)?;
                self.grow(index, &start.thinking, out)?;
                if let Some(signature) = start.signature.filter(|s| !s.is_empty()) {
                    self.seal(index, signature)?;
                }
            }
            block::REDACTED_THINKING => {
                let start: RedactedStart = read(content.get())?;
                self.budget.charge(start.data.len(), 0)?;
                self.open_block(index, Kind::RedactedThinking, out)?;
                if let Some(b) = self.open.get_mut(&index) {
                    b.sealed = Some(start.data);
                }
                self.any_content = true;
            }
            block::TOOL_USE => {
                let start: ToolUseStart<'_> = read(content.get())?;
                self.start_call(index, start, out)?;
            }
            other => {
                // Kept (its index, to skip its deltas): counted as a block.
                self.budget.charge(0, 1)?;
                if self.skipped.is_empty() {
                    dsh_sdk::tracing::warn!(
                        "{}: skipped content block {index} of type {:?}, which this adapter \
                         does not read (and any more such blocks of this answer)",
                        crate::PLUGIN,
                        cut_chars(other, REASON_CHARS).unwrap_or(other)
                    );
                }
                self.skipped.insert(index);
            }
        }
        Ok(())
    }

    /// A `tool_use` block starts: a call of the answer, counted against its
    /// cap, with its id settled and its name (and an input sent whole) in
    /// its first delta.
    fn start_call(
        &mut self,
        index: u64,
        start: ToolUseStart<'_>,
        out: &mut Vec<Chunk>,
    ) -> Result<(), LlmFailure> {
        let input = match start.input {
            None => "",
            Some(i) if i.get() == "null" || is_empty_object(i) => "",
            Some(i) if i.get().starts_with('{') => i.get(),
            Some(_) => {
                return Err(malformed(format!(
                    "a tool_use block {index} whose input is not an object"
                )))
            }
        };
        let sent_id = match &start.id {
            Some(SentId::Text(id)) => id.len(),
            Some(SentId::Other(_)) | None => 0,
        };
        self.budget.start_calls(1)?;
        self.budget
            .charge(sent_id + start.name.len() + input.len(), 0)?;
        let number = self.open_block(index, Kind::ToolUse, out)?;
        let id = self.ids.assign(index, start.id.as_ref());
        if let Some(b) = self.open.get_mut(&index) {
            b.id = id.clone();
            b.name = start.name.clone();
            b.text.push_str(input);
            b.whole_input = !input.is_empty();
        }
        self.any_content = true;
        out.push(Chunk::ToolCallDelta {
            index: number,
            id,
            name: Some(start.name),
            arguments_delta: input.to_owned(),
        });
        Ok(())
    }

    /// Adds `text` to the text or thinking block at `index` (nothing when
    /// it is empty).
    fn grow(&mut self, index: u64, text: &str, out: &mut Vec<Chunk>) -> Result<(), LlmFailure> {
        if text.is_empty() {
            return Ok(());
        }
        self.budget.charge(text.len(), 1)?;
        let Some(b) = self.open.get_mut(&index) else {
            return Ok(());
        };
        b.text.push_str(text);
        self.any_content = true;
        out.push(match b.kind {
            Kind::Thinking => Chunk::ReasoningDelta {
                index: b.index,
                text: text.to_owned(),
            },
            _ => Chunk::text(b.index, text),
        });
        Ok(())
    }

    /// Sets the signature of the thinking block at `index`.
    fn seal(&mut self, index: u64, signature: String) -> Result<(), LlmFailure> {
        self.budget.charge(signature.len(), 1)?;
        if let Some(b) = self.open.get_mut(&index) {
            b.sealed = Some(signature);
        }
        Ok(())
    }

    /// `content_block_delta`.
    fn delta(
        &mut self,
        index: u64,
        raw: &RawValue,
        out: &mut Vec<Chunk>,
    ) -> Result<(), LlmFailure> {
        if self.skipped.contains(&index) {
            return Ok(());
        }
        let typed: Typed<'_> = read(raw.get())?;
        let kind = match self.open.get(&index) {
            Some(b) => b.kind,
            None if self.closed.contains(&index) => {
                return Err(malformed(format!(
                    "a {} for content block {index} after its content_block_stop",
                    typed.kind
                )))
            }
            None => {
                return Err(malformed(format!(
                    "a {} for content block {index}, which never started",
                    typed.kind
                )))
            }
        };
        let fits = match typed.kind.as_ref() {
            delta::TEXT => kind == Kind::Text,
            delta::THINKING | delta::SIGNATURE => kind == Kind::Thinking,
            delta::INPUT_JSON => kind == Kind::ToolUse,
            // Delta types this adapter does not read (citations, ...).
            _ => return Ok(()),
        };
        if !fits {
            return Err(malformed(format!(
                "a {} for content block {index}, a {} block",
                typed.kind,
                kind.wire()
            )));
        }
        match typed.kind.as_ref() {
            delta::TEXT => {
                let d: TextDelta = read(raw.get())?;
                self.grow(index, &d.text, out)
            }
            delta::THINKING => {
                let d: ThinkingDelta = read(raw.get())?;
                self.grow(index, &d.thinking, out)
            }
            delta::SIGNATURE => {
                let d: SignatureDelta = read(raw.get())?;
                self.seal(index, d.signature)
            }
            _ => {
                let d: InputJsonDelta = read(raw.get())?;
                self.input(index, d.partial_json, out)
            }
        }
    }

    /// More of the input of the tool call at `index`; nothing when the
    /// input came whole with the call's start (a server that sends it
    /// whole and then streams it again would double it).
    fn input(&mut self, index: u64, json: String, out: &mut Vec<Chunk>) -> Result<(), LlmFailure> {
        if json.is_empty() || self.open.get(&index).is_some_and(|b| b.whole_input) {
            return Ok(());
        }
        self.budget.charge(json.len(), 1)?;
        if let Some(b) = self.open.get_mut(&index) {
            b.text.push_str(&json);
            out.push(Chunk::ToolCallDelta {
                index: b.index,
                id: b.id.clone(),
                name: None,
                arguments_delta: json,
            });
        }
        Ok(())
    }

    /// `content_block_stop`: the block, whole. A second stop of a closed
    /// block is ignored.
    fn stop_block(&mut self, index: u64, out: &mut Vec<Chunk>) -> Result<(), LlmFailure> {
        if self.skipped.contains(&index) || self.closed.contains(&index) {
            return Ok(());
        }
        let Some(b) = self.open.remove(&index) else {
            return Err(malformed(format!(
                "a content_block_stop for content block {index}, which never started"
            )));
        };
        self.order.retain(|i| *i != index);
        self.closed.insert(index);
        out.push(self.close(b));
        Ok(())
    }

    /// A block's `block-end`; a thinking block's signature or a redacted
    /// block's data goes to its replay entry.
    fn close(&mut self, b: Block) -> Chunk {
        let (block, entry) = match b.kind {
            Kind::Text => (ContentBlock::text(b.text), None),
            Kind::Thinking => (
                ContentBlock::reasoning(b.text),
                b.sealed
                    .map(|signature| ReplayBlock::Thinking { signature }),
            ),
            Kind::RedactedThinking => (
                ContentBlock::reasoning(String::new()),
                b.sealed.map(|data| ReplayBlock::RedactedThinking { data }),
            ),
            Kind::ToolUse => {
                let arguments = if b.text.is_empty() {
                    "{}".to_owned()
                } else {
                    b.text
                };
                (ContentBlock::tool_call(b.id, b.name, arguments), None)
            }
        };
        if let Some(slot) = usize::try_from(b.index)
            .ok()
            .and_then(|at| self.replay.get_mut(at))
        {
            *slot = entry;
        }
        Chunk::BlockEnd {
            index: b.index,
            block,
        }
    }

    /// At `message_stop`: the blocks still open close, then the usage,
    /// then the finish. An answer with no content that stopped is one
    /// `EMPTY_RESPONSE` finish.
    pub fn finish(&mut self) -> Vec<Chunk> {
        let mut out = Vec::new();
        for index in std::mem::take(&mut self.order) {
            if let Some(b) = self.open.remove(&index) {
                out.push(self.close(b));
            }
        }
        if self.usage.reported() {
            out.push(Chunk::Usage {
                usage: TokenUsage {
                    input_tokens: self.usage.input.unwrap_or(0),
                    output_tokens: self.usage.output.unwrap_or(0),
                    cache_read_tokens: self.usage.cache_read,
                    cache_write_tokens: self.usage.cache_write,
                    reasoning_tokens: None,
                },
            });
        }
        let reason = match self.stop.as_deref() {
            Some(stop_reason::END_TURN | stop_reason::STOP_SEQUENCE | stop_reason::PAUSE_TURN)
            | None
                if !self.any_content =>
            {
                // The usage stands: the empty answer was billed.
                out.push(
                    LlmFailure::new(code::EMPTY_RESPONSE, "the model returned an empty answer")
                        .finish(false),
                );
                return out;
            }
            Some(stop_reason::END_TURN | stop_reason::STOP_SEQUENCE | stop_reason::PAUSE_TURN)
            | None => FinishReason::Stop,
            Some(stop_reason::TOOL_USE) => FinishReason::ToolCalls,
            Some(stop_reason::MAX_TOKENS | stop_reason::CONTEXT_WINDOW_EXCEEDED) => {
                FinishReason::MaxTokens
            }
            Some(stop_reason::REFUSAL) => FinishReason::Error {
                failure: LlmFailure::new(
                    REFUSAL,
                    "the model declined to answer (stop_reason: refusal); rephrase the \
                     request or start a new session",
                ),
            },
            Some(other) => FinishReason::Error {
                failure: LlmFailure::new(
                    code::SERVER,
                    format!("the model stopped: {}", quoted_reason(other)),
                ),
            },
        };
        let replay_state = match reason {
            FinishReason::Stop | FinishReason::ToolCalls | FinishReason::MaxTokens => {
                ReplayState::value(&self.replay)
            }
            _ => None,
        };
        out.push(Chunk::Finish {
            reason,
            replay_state,
        });
        out
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
