//! `tool-result-pruner`: the `toolResultPruner` service (see the README).

mod prune;

use dsh_sdk::api::compaction::{PruneParams, PruneResult, PrunedEntry};
use dsh_sdk::api::sessions::{NewEvent, Sessions};
use dsh_sdk::names::{service, tool_result_pruner};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::compaction::{CompactionPrune, ShadowedRange, PRUNE};
use dsh_sdk::vocab::{event, surface_nodes, tokens};

use prune::{prune_content, text_chars, Config};

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

/// Prunes the oversized results before `keepFrom`, each as a
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
        let message = &node.data["message"];
        let content = message["content"][0]["content"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        let Some(pruned) = prune_content(config, content) else {
            continue;
        };
        let record = CompactionPrune {
            shadowed_range: ShadowedRange {
                start: node.seq,
                end: node.seq,
            },
            shadowed_seqs: vec![node.seq],
            shadowed_token_count: tokens::of_message(message),
        };
        let mut data = node.data.value().clone();
        data["message"]["content"][0]["content"] = Value::Array(pruned.clone());
        events.push(NewEvent::new(PRUNE, serde_json::to_value(record)?));
        events.push(NewEvent {
            surface_op: Some(json!({"op": "replace", "start": node.seq, "end": node.seq})),
            source_event_seqs: Some(vec![node.seq]),
            ..NewEvent::new(event::TOOL_RESULT, data)
        });
        let call_id = message["source"]["callId"]
            .as_str()
            .or_else(|| message["content"][0]["toolCallId"].as_str())
            .unwrap_or_default();
        entries.push(PrunedEntry {
            original_seq: node.seq,
            replacement_seq: 0,
            call_id: call_id.to_owned(),
            chars_before: text_chars(content) as u64,
            chars_after: text_chars(&pruned) as u64,
        });
    }
    if events.is_empty() {
        return Ok(PruneResult::default());
    }
    let seqs = sessions.append_many(&p.agent, events).await?;
    for (entry, pair) in entries.iter_mut().zip(seqs.chunks(2)) {
        entry.replacement_seq = pair.get(1).copied().unwrap_or_default();
    }
    let chars_removed = entries.iter().map(|e| e.chars_before - e.chars_after).sum();
    Ok(PruneResult {
        pruned: entries,
        chars_removed,
    })
}

dsh_sdk::export_plugin!(Pruner);
