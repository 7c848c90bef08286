//! The compaction seam: the `compaction` service, which an engine plugin
//! (`compaction-basic` in-tree) provides, and the `toolResultPruner`
//! service it may use (plugin `tool-result-pruner`), after the original's
//! `packages/compaction/compaction` (`CompactionEngine`).
//!
//! An engine decides when to compact and replaces a span of the surface
//! with one checkpoint `user/message` (a `replace` surface op): the log
//! keeps every original event, `deriveMessages()` yields the summary in
//! their place. The records it logs are [`crate::vocab::compaction`].

use serde::{Deserialize, Serialize};

use crate::names::{compaction as method, service, tool_result_pruner};
use crate::vocab::compaction::ShadowedRange;
use crate::vocab::message::ContentBlock;
use crate::{Context, Result, Service};

/// Params of `measure`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentParams {
    /// The agent (its session id).
    pub agent: String,
}

/// Where a measurement's baseline comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Baseline {
    /// The provider's usage of the last answer, plus estimates since.
    Usage,
    /// Estimates only (no answer reported usage yet).
    Estimated,
    /// Nothing to measure yet.
    None,
}

/// Reply of `measure`: the context the agent's next request would use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Measurement {
    /// The estimated tokens of the next request (system, tools, history).
    pub total_tokens: u64,
    /// The estimated tokens of the history alone.
    pub surface_tokens: u64,
    /// What `total_tokens` is built on.
    pub baseline: Baseline,
    /// The number of history nodes.
    pub nodes: u64,
    /// The routed model's context window, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// The automatic compaction threshold, when the window is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_tokens: Option<u64>,
}

/// Params of `compactNow` (and of its idle part, `compactIdle`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactNowParams {
    /// The agent; it must be idle.
    pub agent: String,
    /// The `/compact` command that asked, logged on the records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_command_id: Option<String>,
    /// What the summary should focus on, added to the instruction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

/// A compaction that replaced its span (the original's
/// `CompactionResult`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionResult {
    /// Pairs its records.
    pub compaction_id: String,
    /// The command that asked for it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_command_id: Option<String>,
    /// The seq of its `compaction/start`.
    pub start_seq: u64,
    /// The seq of its `compaction/summary`.
    pub summary_seq: u64,
    /// The seq of its `compaction/end`.
    pub end_seq: u64,
    /// The summary's text blocks.
    pub summary: Vec<ContentBlock>,
    /// The first and last shadowed nodes.
    pub shadowed_range: ShadowedRange,
    /// Every shadowed node, in surface order.
    pub shadowed_seqs: Vec<u64>,
    /// Their estimated tokens.
    pub shadowed_token_count: u64,
}

/// Params of `toolResultPruner.pruneSession`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PruneParams {
    /// The agent (its session id).
    pub agent: String,
    /// The seq of the first surface node to leave alone (it and every
    /// node after it are recent); every node when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_from: Option<u64>,
    /// Also prune every result estimated over this many tokens
    /// (`vocab::tokens`), down to it: its share of the model's context
    /// window, as the engine reckons it. Absent: the pruner's own
    /// thresholds alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// One pruned tool result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrunedEntry {
    /// The seq of the result it replaced.
    pub original_seq: u64,
    /// The seq of the replacing `tool/result`.
    pub replacement_seq: u64,
    /// The call it answers.
    pub call_id: String,
    /// Its text's length before (code points).
    pub chars_before: u64,
    /// Its text's length after.
    pub chars_after: u64,
}

/// Reply of `pruneSession`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PruneResult {
    /// The results pruned, in surface order.
    pub pruned: Vec<PrunedEntry>,
    /// Code points removed in all.
    pub chars_removed: u64,
}

/// A typed client of the `compaction` service.
#[derive(Clone)]
pub struct Compaction(Service);

impl Compaction {
    /// The `compaction` service of `ctx`.
    pub fn new(ctx: &Context) -> Compaction {
        Compaction(ctx.service(service::COMPACTION))
    }

    /// `measure`: the context `agent` uses.
    pub async fn measure(&self, agent: &str) -> Result<Measurement> {
        let params = AgentParams {
            agent: agent.to_owned(),
        };
        self.0.call_as(method::MEASURE, &params).await
    }

    /// `compactNow`: compacts the idle `agent`; `None` when nothing can be.
    pub async fn compact_now(&self, params: &CompactNowParams) -> Result<Option<CompactionResult>> {
        self.0.call_as(method::COMPACT_NOW, params).await
    }
}

/// A typed client of the `toolResultPruner` service.
#[derive(Clone)]
pub struct ToolResultPruner(Service);

impl ToolResultPruner {
    /// The `toolResultPruner` service of `ctx`.
    pub fn new(ctx: &Context) -> ToolResultPruner {
        ToolResultPruner(ctx.service(service::TOOL_RESULT_PRUNER))
    }

    /// `pruneSession`: prunes `params.agent`'s old oversized results.
    pub async fn prune_session(&self, params: &PruneParams) -> Result<PruneResult> {
        self.0
            .call_as(tool_result_pruner::PRUNE_SESSION, params)
            .await
    }
}
