//! `tool-result-pruner`: the `toolResultPruner` service (see the README).

mod prune;
mod record;

use dsh_sdk::api::compaction::{PruneParams, PruneResult};
use dsh_sdk::api::sessions::{NewEvent, Sessions};
use dsh_sdk::names::{service, tool_result_pruner};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::compaction::PRUNE;
use dsh_sdk::vocab::records::ToolResult;
use dsh_sdk::vocab::{event, surface_nodes, SurfaceOp};

use prune::Config;
use record::{prune_result, Pruned};

struct Pruner;

impl Plugin for Pruner {
    const NAME: &'static str = "tool-result-pruner";
    const DESCRIPTION: &'static str = "prunes the middle of old oversized tool results";
    const INJECT: &'static [&'static str] = &[service::SESSIONS];
    const PROVIDES: &'static [&'static str] = &[service::TOOL_RESULT_PRUNER];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let config = config.checked()?;
        let c = ctx.clone();
        ctx.provide(service::TOOL_RESULT_PRUNER, move |req| {
            let c = c.clone();
            async move {
                if req.method != tool_result_pruner::PRUNE_SESSION {
                    return Err(req.unknown_method());
                }
                Reply::json(prune_session(&c, &config, req.params_as()?).await?)
            }
        });
        Ok(())
    }
}

/// Prunes the oversized results before `keepFrom` (over `thresholdChars`,
/// or estimated over `maxTokens` when the engine gives one), each as a
/// `compaction/prune` record and its replacement, in one `appendMany`.
async fn prune_session(ctx: &Context, config: &Config, p: PruneParams) -> Result<PruneResult> {
    let sessions = Sessions::new(ctx);
    let reply = sessions.surface(&p.agent, 0).await?;
    let nodes = surface_nodes(&reply.events);
    let end = match p.keep_from {
        None => nodes.len(),
        Some(seq) => nodes.iter().position(|n| n.seq == seq).ok_or_else(|| {
            Error::new(
                codes::INVALID_PAYLOAD,
                format!("keepFrom {seq} is not a node of the surface of {}", p.agent),
            )
        })?,
    };
    let mut events = Vec::new();
    let mut entries = Vec::new();
    for node in nodes[..end].iter().filter(|n| n.kind == event::TOOL_RESULT) {
        let original: ToolResult = node.data_as()?;
        let Some(Pruned {
            record,
            replacement,
            entry,
        }) = prune_result(config, node.seq, original, p.max_tokens)
        else {
            continue;
        };
        events.push(NewEvent::typed(PRUNE, &record)?);
        events.push(NewEvent::surface(
            event::TOOL_RESULT,
            &replacement,
            SurfaceOp::Replace {
                start: node.seq,
                end: node.seq,
            },
            Some(vec![node.seq]),
        )?);
        entries.push(entry);
    }
    if events.is_empty() {
        return Ok(PruneResult::default());
    }
    let seqs = sessions.append_many(&p.agent, events).await?;
    if seqs.len() != 2 * entries.len() {
        return Err(Error::new(
            codes::INVALID_PAYLOAD,
            format!(
                "sessions.appendMany answered {} seqs for the {} events of {} prunes",
                seqs.len(),
                2 * entries.len(),
                entries.len()
            ),
        ));
    }
    for (entry, pair) in entries.iter_mut().zip(seqs.chunks_exact(2)) {
        if let [_, replacement] = pair {
            entry.replacement_seq = *replacement;
        }
    }
    let chars_removed = entries.iter().map(|e| e.chars_before - e.chars_after).sum();
    Ok(PruneResult {
        pruned: entries,
        chars_removed,
    })
}

dsh_sdk::export_plugin!(Pruner);
