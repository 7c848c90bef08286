//! The Responses stream's events as the harness's chunks: each output item
//! becomes one block (a message its text, a reasoning item its summary, a
//! function call its tool call), opened at its first delta (a function
//! call when it is added), grown by deltas and closed whole when the item
//! is done; then usage, then one `finish`, whose replay state carries the
//! reasoning items to send back ([`crate::replay`]). A server that sends
//! no item events, only the terminal event with its `output`, has that
//! output read as the answer.

use std::collections::HashMap;

use dsh_llm_http::answer_cap::{AnswerBudget, DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_TOOL_CALLS};
use dsh_llm_http::call_ids::{CallIds, SentId};
use dsh_llm_http::failure::{
    code, event_error, quoted_reason, stream_failure, unreadable, REFUSAL,
};
use dsh_sdk::vocab::message::block_type;
use dsh_sdk::vocab::{Chunk, ContentBlock, FinishReason, LlmFailure};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::replay::{ReasoningItem, ReasoningPart, ReplayItem, ReplayState, SummaryPart};
use crate::response::{
    event_type, item_type, ArgumentsDone, ErrorEvent, Item, ItemEvent, ItemKind, Kind,
    TerminalEvent, TextDelta, CONTENT_FILTER, MAX_OUTPUT_TOKENS, PART_BREAK, STATUS_INCOMPLETE,
};

/// What a block holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum BlockKind {
    Text,
    Reasoning,
    Call,
}

impl BlockKind {
    fn block_type(self) -> &'static str {
        match self {
            BlockKind::Text => block_type::TEXT,
            BlockKind::Reasoning => block_type::REASONING,
            BlockKind::Call => block_type::TOOL_CALL,
        }
    }

    /// What an output item of this kind is called in a failure.
    fn noun(self) -> &'static str {
        match self {
            BlockKind::Text => "a message",
            BlockKind::Reasoning => "a reasoning item",
            BlockKind::Call => "a function call",
        }
    }
}

/// One block of the answer: one output item.
struct Block {
    kind: BlockKind,
    /// Its text, reasoning or arguments so far.
    text: String,
    /// A call's id, settled when it starts ([`CallIds::assign`]).
    id: String,
    /// A call's tool.
    name: String,
    /// The summary or content part the last delta belonged to.
    part: Option<u64>,
    /// What the block is sent back with (a reasoning item).
    replay: Option<ReplayItem>,
    /// A reasoning block whose text came as the reasoning itself
    /// (`reasoning_text`), not a summary: kept to be sent back.
    clear: bool,
    /// Closed: its `block-end` went out.
    closed: bool,
}

/// Turns Responses events into the harness's chunk grammar.
pub struct StreamState {
    /// The blocks, at their block index.
    blocks: Vec<Block>,
    /// Output item index -> position in `blocks`.
    by_output: HashMap<u64, usize>,
    ids: CallIds,
    budget: AnswerBudget,
    /// Some text, reasoning or tool call arrived.
    any_content: bool,
    /// A terminal event arrived: nothing more is read.
    done: bool,
}

impl Default for StreamState {
    fn default() -> Self {
        StreamState::new(DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_TOOL_CALLS)
    }
}

/// An event of a known type whose order makes no sense (a delta for an
/// item of another kind, or after the item was done).
fn out_of_order(message: String) -> LlmFailure {
    LlmFailure::new(
        code::MALFORMED_RESPONSE,
        format!("the provider sent a stream this adapter cannot follow: {message}"),
    )
}

/// Reads an event of a known type from `data`. One that does not read
/// but carries an `error` is that error (a rate limit stays retryable).
fn read<'a, T: Deserialize<'a>>(data: &'a str) -> Result<T, LlmFailure> {
    serde_json::from_str(data).map_err(|e| match event_error(data) {
        Some(error) => stream_failure(error),
        None => unreadable(&e),
    })
}

impl StreamState {
    /// A stream whose answer may hold `max_answer_bytes` and
    /// `max_tool_calls` tool calls (see [`dsh_llm_http::answer_cap`]).
    pub fn new(max_answer_bytes: usize, max_tool_calls: usize) -> Self {
        StreamState {
            blocks: Vec::new(),
            by_output: HashMap::new(),
            ids: CallIds::new(crate::PLUGIN),
            budget: AnswerBudget::new(crate::PLUGIN, max_answer_bytes, max_tool_calls),
            any_content: false,
            done: false,
        }
    }

    /// Whether a terminal event (`response.completed`, `.incomplete`)
    /// arrived: the answer is whole.
    pub fn done(&self) -> bool {
        self.done
    }

    /// One `data:` payload. A delta that takes the answer past its cap is
    /// refused before anything of it is kept; a `response.failed` or
    /// `error` event is the failure that ends the stream.
    pub fn on_data(&mut self, data: &str) -> Result<Vec<Chunk>, LlmFailure> {
        let Kind { kind } = serde_json::from_str(data).map_err(|e| unreadable(&e))?;
        let mut out = Vec::new();
        let Some(kind) = kind else {
            // No type: an error sent the chat-completions way, or nothing
            // this adapter reads.
            return match event_error(data) {
                Some(error) => Err(stream_failure(error)),
                None => Ok(out),
            };
        };
        match kind.as_ref() {
            event_type::OUTPUT_ITEM_ADDED => self.on_item(read(data)?, false, &mut out)?,
            event_type::OUTPUT_ITEM_DONE => self.on_item(read(data)?, true, &mut out)?,
            event_type::OUTPUT_TEXT_DELTA | event_type::REFUSAL_DELTA => {
                self.on_text(read(data)?, BlockKind::Text, &mut out)?;
            }
            event_type::REASONING_SUMMARY_TEXT_DELTA => {
                self.on_text(read(data)?, BlockKind::Reasoning, &mut out)?;
            }
            event_type::REASONING_TEXT_DELTA => {
                let delta: TextDelta = read(data)?;
                let output = delta.output_index;
                self.on_text(delta, BlockKind::Reasoning, &mut out)?;
                if let Some(&at) = self.by_output.get(&output) {
                    self.blocks[at].clear = true;
                }
            }
            event_type::FUNCTION_CALL_ARGUMENTS_DELTA => {
                let delta: TextDelta = read(data)?;
                self.on_arguments(delta.output_index, &delta.delta, false, &mut out)?;
            }
            event_type::FUNCTION_CALL_ARGUMENTS_DONE => {
                let done: ArgumentsDone = read(data)?;
                self.on_arguments(done.output_index, &done.arguments, true, &mut out)?;
            }
            event_type::COMPLETED | event_type::INCOMPLETE => {
                let incomplete = kind == event_type::INCOMPLETE;
                let event: TerminalEvent<'_> = read(data)?;
                if self.blocks.is_empty() {
                    self.on_output(&event, &mut out)?;
                }
                self.finish(incomplete, event, &mut out);
            }
            event_type::FAILED => {
                let event: TerminalEvent<'_> = read(data)?;
                return Err(match event.response.and_then(|r| r.error) {
                    Some(error) => stream_failure(error),
                    None => LlmFailure::new(
                        code::SERVER,
                        "the provider reported the response failed, without an error",
                    ),
                });
            }
            event_type::ERROR => {
                let event: ErrorEvent<'_> = read(data)?;
                let error = event.error().map_err(|e| unreadable(&e))?;
                return Err(stream_failure(&error));
            }
            _ => {}
        }
        Ok(out)
    }

    /// The answer from the terminal event's `output`, for a server that
    /// sent no item events: each item as if it had arrived whole.
    fn on_output(
        &mut self,
        event: &TerminalEvent<'_>,
        out: &mut Vec<Chunk>,
    ) -> Result<(), LlmFailure> {
        let Some(output) = event.response.as_ref().and_then(|r| r.output) else {
            return Ok(());
        };
        let items: Vec<&RawValue> =
            serde_json::from_str(output.get()).map_err(|e| unreadable(&e))?;
        for (at, item) in items.into_iter().enumerate() {
            let output_index = u64::try_from(at).unwrap_or(u64::MAX);
            self.on_item(ItemEvent { output_index, item }, true, out)?;
        }
        Ok(())
    }

    /// Opens a block of `kind` for output item `output`: its position.
    fn open(&mut self, output: u64, kind: BlockKind, out: &mut Vec<Chunk>) -> usize {
        let at = self.blocks.len();
        self.blocks.push(Block {
            kind,
            text: String::new(),
            id: String::new(),
            name: String::new(),
            part: None,
            replay: None,
            clear: false,
            closed: false,
        });
        self.by_output.insert(output, at);
        out.push(Chunk::BlockStart {
            index: at as u64,
            block_type: kind.block_type().to_owned(),
        });
        at
    }

    /// The open block of output item `output`, which must be of `kind`;
    /// `None` when the item has none yet.
    fn block_of(&self, output: u64, kind: BlockKind) -> Result<Option<usize>, LlmFailure> {
        let Some(&at) = self.by_output.get(&output) else {
            return Ok(None);
        };
        let block = &self.blocks[at];
        if block.kind != kind {
            return Err(out_of_order(format!(
                "output item {output} is {}, and the stream sent it the content of {}",
                block.kind.noun(),
                kind.noun()
            )));
        }
        if block.closed {
            return Err(out_of_order(format!(
                "output item {output} ({}) grew after it was done",
                block.kind.noun()
            )));
        }
        Ok(Some(at))
    }

    /// More text for output item `output`, a block of `kind` (`part`: the
    /// summary or content part it belongs to; a new part starts after a
    /// blank line). Opens the block at the first text.
    fn grow(
        &mut self,
        output: u64,
        kind: BlockKind,
        part: Option<u64>,
        text: &str,
        out: &mut Vec<Chunk>,
    ) -> Result<(), LlmFailure> {
        if text.is_empty() {
            return Ok(());
        }
        let existing = self.block_of(output, kind)?;
        let new_part = existing.is_some_and(|at| {
            let b = &self.blocks[at];
            !b.text.is_empty() && part.is_some() && b.part != part
        });
        let text = if new_part {
            format!("{PART_BREAK}{text}")
        } else {
            text.to_owned()
        };
        self.budget.charge(text.len(), 1)?;
        let at = match existing {
            Some(at) => at,
            None => self.open(output, kind, out),
        };
        let block = &mut self.blocks[at];
        block.text.push_str(&text);
        block.part = part.or(block.part);
        self.any_content = true;
        let index = at as u64;
        out.push(match kind {
            BlockKind::Reasoning => Chunk::ReasoningDelta { index, text },
            _ => Chunk::TextDelta { index, text },
        });
        Ok(())
    }

    /// A text, refusal or reasoning delta.
    fn on_text(
        &mut self,
        delta: TextDelta,
        kind: BlockKind,
        out: &mut Vec<Chunk>,
    ) -> Result<(), LlmFailure> {
        let part = match kind {
            BlockKind::Reasoning => delta.summary_index.or(delta.content_index),
            _ => delta.content_index,
        };
        self.grow(delta.output_index, kind, part, &delta.delta, out)
    }

    /// A function call's arguments: a delta (`whole` false), or the whole
    /// arguments at `.done`, taken only when no delta brought any.
    fn on_arguments(
        &mut self,
        output: u64,
        arguments: &str,
        whole: bool,
        out: &mut Vec<Chunk>,
    ) -> Result<(), LlmFailure> {
        if whole
            && self
                .by_output
                .get(&output)
                .is_some_and(|&at| self.blocks[at].closed)
        {
            // The whole arguments after the call was done: it has them.
            return Ok(());
        }
        let Some(at) = self.block_of(output, BlockKind::Call)? else {
            if whole {
                // The item's `.done` starts the call with them.
                return Ok(());
            }
            return Err(out_of_order(format!(
                "arguments for output item {output}, which no function call started"
            )));
        };
        if arguments.is_empty() || (whole && !self.blocks[at].text.is_empty()) {
            return Ok(());
        }
        self.budget.charge(arguments.len(), 1)?;
        let block = &mut self.blocks[at];
        block.text.push_str(arguments);
        self.any_content = true;
        out.push(Chunk::ToolCallDelta {
            index: at as u64,
            id: block.id.clone(),
            name: None,
            arguments_delta: arguments.to_owned(),
        });
        Ok(())
    }

    /// A function call starts at output item `output`: its block opens
    /// with its id, name and the arguments it came with.
    fn start_call(
        &mut self,
        output: u64,
        item: &Item,
        out: &mut Vec<Chunk>,
    ) -> Result<usize, LlmFailure> {
        let name = item.name.as_deref().unwrap_or("");
        let arguments = item.arguments.as_deref().unwrap_or("");
        let id_bytes = match &item.call_id {
            Some(SentId::Text(id)) => id.len(),
            Some(SentId::Other(_)) | None => 0,
        };
        self.budget.start_calls(1)?;
        self.budget
            .charge(id_bytes + name.len() + arguments.len(), 1)?;
        let at = self.open(output, BlockKind::Call, out);
        let id = self.ids.assign(output, item.call_id.as_ref());
        let block = &mut self.blocks[at];
        block.id.clone_from(&id);
        block.name = name.to_owned();
        block.text = arguments.to_owned();
        self.any_content = true;
        out.push(Chunk::ToolCallDelta {
            index: at as u64,
            id,
            name: (!name.is_empty()).then(|| name.to_owned()),
            arguments_delta: arguments.to_owned(),
        });
        Ok(at)
    }

    /// `response.output_item.added` (`done` false) or `.done`.
    fn on_item(
        &mut self,
        event: ItemEvent<'_>,
        done: bool,
        out: &mut Vec<Chunk>,
    ) -> Result<(), LlmFailure> {
        let text = event.item.get();
        let ItemKind { kind } = serde_json::from_str(text).map_err(|e| unreadable(&e))?;
        let kind = match kind.as_ref() {
            item_type::MESSAGE => BlockKind::Text,
            item_type::REASONING => BlockKind::Reasoning,
            item_type::FUNCTION_CALL => BlockKind::Call,
            // A built-in tool's item, or a type newer than this adapter:
            // not part of an answer it asked for.
            _ => return Ok(()),
        };
        let item: Item = serde_json::from_str(text).map_err(|e| unreadable(&e))?;
        match (kind, done) {
            (BlockKind::Call, _) => self.on_call_item(event.output_index, &item, done, out),
            // A message or reasoning item opens at its first text.
            (_, false) => Ok(()),
            (_, true) => self.on_item_done(event.output_index, kind, item, out),
        }
    }

    /// A function call item added (its block opens) or done (its
    /// arguments whole when no delta brought any; its block closes).
    fn on_call_item(
        &mut self,
        output: u64,
        item: &Item,
        done: bool,
        out: &mut Vec<Chunk>,
    ) -> Result<(), LlmFailure> {
        let at = match self.by_output.get(&output) {
            Some(_) => self.block_of(output, BlockKind::Call)?,
            None => Some(self.start_call(output, item, out)?),
        };
        if let (true, Some(at)) = (done, at) {
            let arguments = item.arguments.as_deref().unwrap_or("");
            self.on_arguments(output, arguments, true, out)?;
            self.close(at, out);
        }
        Ok(())
    }

    /// A message or reasoning item done: the text of one that arrived
    /// whole (no deltas), the reasoning item kept for replay, and its
    /// block closed. A reasoning item with encrypted content has a block
    /// even without text, to carry it.
    fn on_item_done(
        &mut self,
        output: u64,
        kind: BlockKind,
        mut item: Item,
        out: &mut Vec<Chunk>,
    ) -> Result<(), LlmFailure> {
        let streamed_clear = self
            .by_output
            .get(&output)
            .filter(|&&at| self.blocks[at].clear)
            .map(|&at| self.blocks[at].text.clone());
        let replay = match kind {
            BlockKind::Reasoning => self.replay_of(&mut item, streamed_clear)?,
            _ => None,
        };
        let whole = self
            .block_of(output, kind)?
            .is_none_or(|at| self.blocks[at].text.is_empty());
        if whole {
            self.grow(output, kind, None, &item.whole_text(), out)?;
        }
        let at = match self.by_output.get(&output) {
            Some(&at) => Some(at),
            None if replay.is_some() => Some(self.open(output, kind, out)),
            None => None,
        };
        if let Some(at) = at {
            self.blocks[at].replay = replay;
            self.close(at, out);
        }
        Ok(())
    }

    /// The reasoning item to send back for a done reasoning `item`: its
    /// id, summary and encrypted content, or (from a server that streams
    /// reasoning in the clear) its reasoning text: the item's
    /// `reasoning_text` parts, else `streamed` (the text its
    /// `reasoning_text` deltas brought). Counted against the answer's cap
    /// (it is kept with the answer); none with neither.
    fn replay_of(
        &mut self,
        item: &mut Item,
        streamed: Option<String>,
    ) -> Result<Option<ReplayItem>, LlmFailure> {
        let summary = item.summary_parts();
        let summary_bytes = summary
            .iter()
            .map(|SummaryPart::SummaryText { text }| text.len())
            .sum::<usize>();
        if let Some(encrypted) = item.encrypted_content.take().filter(|e| !e.is_empty()) {
            self.budget.charge(summary_bytes + encrypted.len(), 0)?;
            return Ok(Some(ReplayItem::Reasoning(ReasoningItem {
                id: item.id.take(),
                summary,
                content: None,
                encrypted_content: Some(encrypted),
            })));
        }
        let sent: Vec<String> = item
            .content
            .iter()
            .flatten()
            .filter_map(|p| p.text.clone())
            .filter(|t| !t.is_empty())
            .collect();
        let texts = if sent.is_empty() {
            streamed.filter(|t| !t.is_empty()).into_iter().collect()
        } else {
            sent
        };
        let Some(id) = item.id.take().filter(|_| !texts.is_empty()) else {
            // Without an id a server in the clear cannot take it back.
            return Ok(None);
        };
        self.budget
            .charge(texts.iter().map(String::len).sum::<usize>() + id.len(), 0)?;
        Ok(Some(ReplayItem::Reasoning(ReasoningItem {
            id: Some(id),
            summary: Vec::new(),
            content: Some(
                texts
                    .into_iter()
                    .map(|text| ReasoningPart::ReasoningText { text })
                    .collect(),
            ),
            encrypted_content: None,
        })))
    }

    /// Closes block `at` with its content, whole.
    fn close(&mut self, at: usize, out: &mut Vec<Chunk>) {
        let block = &mut self.blocks[at];
        if block.closed {
            return;
        }
        block.closed = true;
        let text = std::mem::take(&mut block.text);
        let content = match block.kind {
            BlockKind::Text => ContentBlock::text(text),
            BlockKind::Reasoning => ContentBlock::reasoning(text),
            BlockKind::Call => ContentBlock::tool_call(
                std::mem::take(&mut block.id),
                std::mem::take(&mut block.name),
                text,
            ),
        };
        out.push(Chunk::BlockEnd {
            index: at as u64,
            block: content,
        });
    }

    /// `response.completed` or `.incomplete`: the open blocks close, then
    /// usage, then the finish. A complete answer with nothing in it is one
    /// `EMPTY_RESPONSE` finish.
    fn finish(&mut self, incomplete: bool, event: TerminalEvent<'_>, out: &mut Vec<Chunk>) {
        self.done = true;
        for at in 0..self.blocks.len() {
            self.close(at, out);
        }
        let response = event.response;
        if let Some(usage) = response.as_ref().and_then(|r| r.usage.0.as_ref()) {
            out.push(Chunk::Usage {
                usage: usage.usage(),
            });
        }
        let status_incomplete = response
            .as_ref()
            .is_some_and(|r| r.status.0.as_deref() == Some(STATUS_INCOMPLETE));
        let reason = if incomplete || status_incomplete {
            let why = response
                .as_ref()
                .and_then(|r| r.incomplete_details.0.as_ref())
                .and_then(|d| d.reason.0.clone());
            match why.as_deref() {
                Some(MAX_OUTPUT_TOKENS) => FinishReason::MaxTokens,
                // The server's filter stopped it: the same prompt is
                // stopped again, so it is not retried.
                Some(CONTENT_FILTER) => FinishReason::Error {
                    failure: LlmFailure::new(
                        REFUSAL,
                        "the model's answer was stopped by the provider's content filter \
                         (incomplete: content_filter); rephrase the request or start a new \
                         session",
                    ),
                },
                other => FinishReason::Error {
                    failure: LlmFailure::new(
                        code::SERVER,
                        format!(
                            "the model stopped: the response is incomplete ({})",
                            other.map_or_else(|| "no reason given".to_owned(), quoted_reason)
                        ),
                    ),
                },
            }
        } else if self.blocks.iter().any(|b| b.kind == BlockKind::Call) {
            FinishReason::ToolCalls
        } else if self.any_content {
            FinishReason::Stop
        } else {
            out.push(
                LlmFailure::new(code::EMPTY_RESPONSE, "the model returned an empty response")
                    .finish(false),
            );
            return;
        };
        let replay_state = match reason {
            FinishReason::Error { .. } => None,
            _ => ReplayState {
                blocks: self.blocks.iter_mut().map(|b| b.replay.take()).collect(),
            }
            .into_value(),
        };
        out.push(Chunk::Finish {
            reason,
            replay_state,
        });
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
