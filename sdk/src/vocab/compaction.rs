//! The compaction records of the session log, as the original's
//! `packages/compaction` writes them (`compaction/types.ts`), so a log with
//! compactions loads on both sides. A compaction appends, in this order:
//! [`CompactionStart`], [`CompactionSummary`], then at once the checkpoint
//! `user/message` (a `replace` of the shadowed span, its source
//! [`CheckpointSource`] and its content [`checkpoint_content`]), then
//! [`CompactionEnd`]; a failed one only a `CompactionEnd` with its
//! `error`. The tool-result pruner appends a [`CompactionPrune`] before each
//! replacing `tool/result` (and a compaction engine before a message it
//! cuts to fit the window, [`cut`]). Field order is the original's append
//! order.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::message::{ContentBlock, Extra, Message, MessageSource, PluginSource};
use super::TokenUsage;

pub mod cut;

/// `compaction/start`.
pub const START: &str = "compaction/start";
/// `compaction/summary`.
pub const SUMMARY: &str = "compaction/summary";
/// `compaction/end`.
pub const END: &str = "compaction/end";
/// `compaction/prune`.
pub const PRUNE: &str = "compaction/prune";

/// Opens a compaction (log-only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionStart {
    /// Pairs the records of one compaction.
    pub compaction_id: String,
    /// The `/compact` command that asked for it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_command_id: Option<String>,
    /// The open turn (automatic compaction), or null between turns.
    pub turn: Option<u64>,
}

/// The first and last shadowed surface nodes (positions in the surface:
/// after an earlier replace, `start` may be numerically above `end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShadowedRange {
    /// The first shadowed node's seq.
    pub start: u64,
    /// The last shadowed node's seq.
    pub end: u64,
}

/// The summary of a compaction (log-only); the checkpoint that replaces
/// the span follows it at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionSummary {
    /// As in [`CompactionStart`].
    pub compaction_id: String,
    /// As in [`CompactionStart`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_command_id: Option<String>,
    /// The summary: text blocks only.
    pub summary: Vec<ContentBlock>,
    /// The model's whole output (reasoning and tool calls included), with
    /// `llmStreamCall`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<Vec<ContentBlock>>,
    /// The summary came from one `llm.stream` call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_stream_call: Option<bool>,
    /// The span it replaces.
    pub shadowed_range: ShadowedRange,
    /// Every shadowed node, in surface order (the authoritative set).
    pub shadowed_seqs: Vec<u64>,
    /// The estimated tokens of the shadowed nodes.
    pub shadowed_token_count: u64,
    /// The summarizing route.
    pub provider: String,
    /// The summarizing model.
    pub model: String,
    /// The output cap of the summary request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The summary request's usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
}

/// Closes a compaction (log-only): without `error` it replaced its span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionEnd {
    /// As in [`CompactionStart`].
    pub compaction_id: String,
    /// As in [`CompactionStart`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_command_id: Option<String>,
    /// As in [`CompactionStart`].
    pub turn: Option<u64>,
    /// Why it failed (the surface is unchanged then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One tool result pruned (log-only), written just before its
/// replacement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionPrune {
    /// The pruned result, as a range of one.
    pub shadowed_range: ShadowedRange,
    /// Its seq, alone.
    pub shadowed_seqs: Vec<u64>,
    /// Its estimated tokens before pruning.
    pub shadowed_token_count: u64,
}

/// The `source` of a checkpoint message: how readers recognise one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointSource {
    /// Always `plugin`.
    pub kind: String,
    /// Always `compact`.
    pub plugin: String,
    /// The compaction it closes.
    pub compaction_id: String,
    /// As in [`CompactionStart`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_command_id: Option<String>,
}

impl CheckpointSource {
    /// The source of compaction `id`'s checkpoint.
    pub fn new(id: &str, source_command_id: Option<String>) -> CheckpointSource {
        CheckpointSource {
            kind: "plugin".to_owned(),
            plugin: "compact".to_owned(),
            compaction_id: id.to_owned(),
            source_command_id,
        }
    }

    /// The source as a message's [`MessageSource`]: a `plugin` source of
    /// `compact` carrying `compactionId` (and `sourceCommandId`), written in
    /// the same order as this struct.
    pub fn to_source(&self) -> MessageSource {
        let mut extra = Extra::new();
        extra.insert(
            "compactionId".to_owned(),
            Value::String(self.compaction_id.clone()),
        );
        if let Some(command) = &self.source_command_id {
            extra.insert("sourceCommandId".to_owned(), Value::String(command.clone()));
        }
        MessageSource::Plugin(PluginSource {
            plugin: self.plugin.clone(),
            form: None,
            extra,
        })
    }
}

/// True when `message` is a compaction checkpoint (its source is the
/// `compact` plugin).
pub fn is_checkpoint(message: &Message) -> bool {
    matches!(&message.source, MessageSource::Plugin(p) if p.plugin == "compact")
}

/// The opening text of a checkpoint, before the summary (the original's
/// `CHECKPOINT_PREAMBLE`, byte for byte).
pub const PREAMBLE: &str = "This is an automatically generated checkpoint condensing an earlier span of the conversation to free up context. Treat the captured context as established background and build on it without restating it. Continue the task directly from the messages that follow, without acknowledging this checkpoint.";

/// The tag that opens the summary inside a checkpoint.
pub const SUMMARY_OPEN_TAG: &str = "<compacted-summary>";
/// The tag that closes it.
pub const SUMMARY_CLOSE_TAG: &str = "</compacted-summary>";

/// The content of a checkpoint: the preamble, the summary inside
/// `<compacted-summary>`, as the original frames it.
pub fn checkpoint_content(summary: &[ContentBlock]) -> Vec<ContentBlock> {
    let mut content = vec![ContentBlock::text(format!(
        "{PREAMBLE}\n\n{SUMMARY_OPEN_TAG}"
    ))];
    content.extend(summary.iter().cloned());
    content.push(ContentBlock::text(SUMMARY_CLOSE_TAG));
    content
}

/// The checkpoint message `id` that closes compaction `source`: a `user`
/// message of [`checkpoint_content`] from [`CheckpointSource::to_source`].
pub fn checkpoint_message(
    id: impl Into<String>,
    source: &CheckpointSource,
    summary: &[ContentBlock],
) -> Message {
    Message::user(id, checkpoint_content(summary), source.to_source())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_keep_the_originals_fields_and_order() {
        let start = CompactionStart {
            compaction_id: "c1".into(),
            source_command_id: None,
            turn: Some(3),
        };
        assert_eq!(
            serde_json::to_string(&start).unwrap(),
            r#"{"compactionId":"c1","turn":3}"#
        );
        let manual: CompactionStart = serde_json::from_value(
            json!({"compactionId": "c2", "sourceCommandId": "k", "turn": null}),
        )
        .unwrap();
        assert_eq!(
            (manual.turn, manual.source_command_id.as_deref()),
            (None, Some("k"))
        );
        let summary = CompactionSummary {
            compaction_id: "c1".into(),
            source_command_id: None,
            summary: vec![ContentBlock::text("s")],
            raw_output: Some(vec![ContentBlock::text("s")]),
            llm_stream_call: Some(true),
            shadowed_range: ShadowedRange { start: 2, end: 9 },
            shadowed_seqs: vec![2, 5, 9],
            shadowed_token_count: 1200,
            provider: "deepseek-official".into(),
            model: "deepseek-v4-flash".into(),
            max_tokens: Some(8192),
            usage: None,
        };
        let text = r#"{"compactionId":"c1","summary":[{"type":"text","text":"s"}],"rawOutput":[{"type":"text","text":"s"}],"llmStreamCall":true,"shadowedRange":{"start":2,"end":9},"shadowedSeqs":[2,5,9],"shadowedTokenCount":1200,"provider":"deepseek-official","model":"deepseek-v4-flash","maxTokens":8192}"#;
        assert_eq!(serde_json::to_string(&summary).unwrap(), text);
        // A summary with usage, reasoning and an unknown block reads back
        // byte for byte.
        let full = r#"{"compactionId":"c1","sourceCommandId":"k","summary":[{"type":"text","text":"s"}],"rawOutput":[{"type":"reasoning","text":"r"},{"type":"text","text":"s"},{"type":"later","x":1}],"llmStreamCall":true,"shadowedRange":{"start":2,"end":9},"shadowedSeqs":[2,5,9],"shadowedTokenCount":1200,"provider":"p","model":"m","maxTokens":8192,"usage":{"inputTokens":10,"outputTokens":3,"cacheReadTokens":4}}"#;
        let read: CompactionSummary = serde_json::from_str(full).unwrap();
        assert_eq!(read.usage.as_ref().map(|u| u.input_tokens), Some(10));
        assert_eq!(serde_json::to_string(&read).unwrap(), full);
        let failed: CompactionEnd = serde_json::from_value(
            json!({"compactionId": "c1", "turn": 3, "error": "summarization produced no text summary content"}),
        )
        .unwrap();
        assert!(failed.error.is_some());
        let prune = CompactionPrune {
            shadowed_range: ShadowedRange { start: 7, end: 7 },
            shadowed_seqs: vec![7],
            shadowed_token_count: 4000,
        };
        assert_eq!(
            serde_json::to_string(&prune).unwrap(),
            r#"{"shadowedRange":{"start":7,"end":7},"shadowedSeqs":[7],"shadowedTokenCount":4000}"#
        );
    }

    #[test]
    fn a_checkpoint_is_framed_and_recognised() {
        let content = checkpoint_content(&[ContentBlock::text("## Primary Request")]);
        assert_eq!(content.len(), 3);
        assert!(content[0]
            .as_text()
            .unwrap()
            .ends_with("without acknowledging this checkpoint.\n\n<compacted-summary>"));
        assert_eq!(content[2].as_text(), Some("</compacted-summary>"));
        let source = CheckpointSource::new("c1", None);
        let message = checkpoint_message("m0", &source, &[]);
        assert!(is_checkpoint(&message));
        assert_eq!(
            serde_json::to_value(&message.source).unwrap(),
            json!({"kind": "plugin", "plugin": "compact", "compactionId": "c1"})
        );
        assert!(!is_checkpoint(&Message::user_text("u", "x")));
        // The typed message writes the same source, in the same order.
        let source = CheckpointSource::new("c1", Some("cmd".into()));
        let typed = checkpoint_message("m", &source, &[ContentBlock::text("s")]);
        assert_eq!(
            serde_json::to_string(&typed.source).unwrap(),
            serde_json::to_string(&source).unwrap()
        );
        assert_eq!(
            serde_json::to_value(&typed).unwrap(),
            json!({"id": "m", "role": "user", "content": checkpoint_content(&[ContentBlock::text("s")]), "source": source})
        );
    }

    #[test]
    fn the_event_types_are_the_originals_known_ones() {
        for t in [START, SUMMARY, END, PRUNE] {
            assert!(crate::vocab::event::is_known(t), "{t}");
        }
    }
}
