//! `listChildren` and `listDescendants`: the continuable children this
//! registry drives (its table), and those that are only stored — a
//! previous process's, or an earlier generation's of this registry —
//! found by their session headers (`parentSession`, `origin`) in the
//! agent's directory and read back from their delegation records. A
//! stored child that cannot be read is listed as a diagnostic, never left
//! out. One-shot children are not listed; the walk goes on below them.

use std::collections::HashMap;

use dsh_sdk::api::agents::{Agents, RunStatus};
use dsh_sdk::api::session_persistence::SessionPersistence;
use dsh_sdk::api::sessions::Sessions;
use dsh_sdk::api::subagents::{ChildEntry, ChildStatus, Diagnostic};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::event;
use dsh_sdk::vocab::records::{SubagentDescriptor, SubagentMode};

use crate::table::{self, Shared, State};

/// The stored subagent sessions of `agent`'s directory, by parent, oldest
/// first (none when the directory or the store cannot be read).
async fn stored_by_parent(ctx: &Context, agent: &str) -> HashMap<String, Vec<String>> {
    let mut by_parent: HashMap<String, Vec<String>> = HashMap::new();
    let cwd = match Sessions::new(ctx).header(agent).await {
        Ok(h) => h.header.cwd,
        Err(_) => None,
    };
    let Some(cwd) = cwd else {
        return by_parent;
    };
    match SessionPersistence::new(ctx).list(Some(&cwd)).await {
        Ok(listed) => {
            for s in listed.into_iter().filter(|s| s.is_delegated()) {
                if let Some(parent) = s.parent_session {
                    by_parent.entry(parent).or_default().push(s.id);
                }
            }
        }
        Err(e) => dsh_sdk::tracing::debug!("listing the stored subagents of {agent}: {e}"),
    }
    by_parent
}

/// A stored child's delegation record, or why it cannot be read.
async fn stored_record(ctx: &Context, id: &str) -> Result<SubagentDescriptor, Diagnostic> {
    let stored = SessionPersistence::new(ctx)
        .inspect(id)
        .await
        .map_err(|_| Diagnostic::Unavailable)?;
    let from = stored.header.seed_length.unwrap_or(0);
    let record = stored
        .events
        .iter()
        .filter(|e| e.seq >= from)
        .find(|e| e.kind == event::SUBAGENT_DESCRIPTOR)
        .ok_or(Diagnostic::Corrupt)?
        .data_as::<SubagentDescriptor>()
        .map_err(|_| Diagnostic::Corrupt)?;
    if record.version != SubagentDescriptor::VERSION {
        return Err(Diagnostic::Unsupported);
    }
    Ok(record)
}

/// The children of `agent` (with `walk`, every one below it, pre-order,
/// each with its direct parent and depth).
pub async fn list(ctx: &Context, table: &Shared, agent: &str, walk: bool) -> Vec<ChildEntry> {
    let stored = stored_by_parent(ctx, agent).await;
    let children_of = |parent: &str| -> Vec<String> {
        let mut ids: Vec<String> = table
            .children_of(parent)
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        for id in stored.get(parent).into_iter().flatten() {
            if !ids.contains(id) {
                ids.push(id.clone());
            }
        }
        ids
    };
    let agents = Agents::new(ctx);
    let mut out = Vec::new();
    let mut stack: Vec<(String, u64)> = children_of(agent)
        .into_iter()
        .rev()
        .map(|id| (id, 1))
        .collect();
    while let Some((id, depth)) = stack.pop() {
        if walk {
            stack.extend(children_of(&id).into_iter().rev().map(|c| (c, depth + 1)));
        }
        let at = walk.then_some(depth);
        if let Some(child) = table.get(&id) {
            if child.descriptor.mode != SubagentMode::Continuable {
                continue;
            }
            let live = match child.state {
                State::Ready => None,
                _ => agents
                    .status(&id)
                    .await
                    .ok()
                    .map(|s| s.status == RunStatus::Running),
            };
            out.push(table::entry(&id, &child, at, live));
            continue;
        }
        let parent = stored
            .iter()
            .find(|(_, ids)| ids.contains(&id))
            .map(|(p, _)| p.clone());
        let entry = |label: String, diagnostic: Option<Diagnostic>| ChildEntry {
            id: id.clone(),
            label,
            status: ChildStatus::Ready,
            parent: at.and(parent.clone()),
            depth: at,
            diagnostic,
        };
        match stored_record(ctx, &id).await {
            Ok(record) if record.mode == SubagentMode::Continuable => {
                out.push(entry(record.label.unwrap_or_default(), None));
            }
            Ok(_) => {}
            Err(d) => out.push(entry(String::new(), Some(d))),
        }
    }
    out
}
