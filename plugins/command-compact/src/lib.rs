//! `command-compact`: the human `/compact [instructions]` command (the
//! original's `packages/compaction/command-compact`). It registers one
//! global command with `commands` (through
//! [`dsh_sdk::api::commands::serve`]) and runs `compaction.compactNow` for
//! the agent that received it, the run's `commandId` as the compaction's
//! `sourceCommandId` and the arguments, trimmed, as extra instructions for
//! the summary. It injects both services, so it applies only when a command
//! registry and a compaction engine are loaded.

use dsh_sdk::api::commands::{serve, CommandResult, RegisterParams, RunParams};
use dsh_sdk::api::compaction::{CompactNowParams, Compaction, CompactionResult};
use dsh_sdk::names::{code, service};
use dsh_sdk::prelude::*;

/// The command's name.
const NAME: &str = "compact";

/// The answer when the agent has nothing to compact.
const NOTHING: &str = "No compactable history yet.";

/// The answer when the agent, or its session, is busy.
const BUSY: &str = "Compaction is unavailable: the agent is busy (a turn is running, \
                    or another compaction of this session is under way). Try again when it is idle.";

/// The success text of `result`.
fn compacted(result: &CompactionResult) -> CommandResult {
    CommandResult {
        source_event_seq: Some(result.summary_seq),
        ..CommandResult::success(format!(
            "Compacted {} history items (~{} tokens).",
            result.shadowed_seqs.len(),
            result.shadowed_token_count
        ))
    }
}

/// The error text of a failed `compactNow`.
fn failure(e: &Error) -> CommandResult {
    match e.code.as_str() {
        code::COMPACTION_BUSY => CommandResult::error(BUSY),
        code::COMPACTION_FAILED => CommandResult::error(format!(
            "Compaction failed: {}. The conversation is unchanged; the attempt is recorded in the session log.",
            e.message
        )),
        _ => CommandResult::error(format!("Compaction failed: {}", e.message)),
    }
}

/// The `compactNow` params of one execution.
fn params(run: &RunParams) -> CompactNowParams {
    let instructions = run.args.trim();
    CompactNowParams {
        agent: run.agent.clone(),
        source_command_id: Some(run.command_id.clone()),
        instructions: (!instructions.is_empty()).then(|| instructions.to_owned()),
    }
}

/// Runs `/compact` for `run`.
async fn run(ctx: &Context, run: RunParams) -> CommandResult {
    match Compaction::new(ctx).compact_now(&params(&run)).await {
        Ok(Some(result)) => compacted(&result),
        Ok(None) => CommandResult::success(NOTHING),
        Err(e) => failure(&e),
    }
}

struct CommandCompact;

impl Plugin for CommandCompact {
    const NAME: &'static str = "command-compact";
    const DESCRIPTION: &'static str = "the /compact command over the compaction service";
    const INJECT: &'static [&'static str] = &[service::COMMANDS, service::COMPACTION];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        let command = RegisterParams::new(
            NAME,
            "Compact older conversation history into a summary, optionally focused on the instructions",
        )
        .with_hint("[instructions]");
        let c = ctx.clone();
        serve(&ctx, vec![command], move |inv| {
            let c = c.clone();
            async move { Ok(run(&c, inv).await) }
        })
        .await
    }
}

dsh_sdk::export_plugin!(CommandCompact);

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(args: &str) -> RunParams {
        RunParams {
            command_id: "cmd-1".into(),
            agent: "a".into(),
            name: NAME.into(),
            args: args.into(),
        }
    }

    #[test]
    fn the_args_trimmed_are_the_instructions_and_blank_is_none() {
        let p = params(&inv("  keep the API notes \n"));
        assert_eq!(p.instructions.as_deref(), Some("keep the API notes"));
        assert_eq!(p.source_command_id.as_deref(), Some("cmd-1"));
        assert_eq!(params(&inv(" \t")).instructions, None);
        assert_eq!(params(&inv("")).instructions, None);
    }

    #[test]
    fn failures_say_what_happened() {
        let busy = failure(&Error::new(code::COMPACTION_BUSY, "x"));
        assert!(busy.text.unwrap().contains("the agent is busy"));
        let other = failure(&Error::new("SOMETHING", "the model is gone"));
        assert_eq!(
            other.text.as_deref(),
            Some("Compaction failed: the model is gone")
        );
    }
}
