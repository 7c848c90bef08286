//! Runs one assistant step's tool calls through the `tools` registry's
//! stages, in the order [`Schedule`] decides (the rules are there, tested
//! without a host): `tools.prepare` (pre-execute, approval, guards) as each
//! call starts, `tools.dispatch` on a task of its own, then `tools.finalize`
//! (post-execute and the `tools/result` emit) and the `tool/result` commit
//! in model order.

use std::collections::HashMap;

use dsh_sdk::api::sessions::NewEvent;
use dsh_sdk::api::tools::{
    Dispatched, ErrorInfo, Exec, Outcome, StageKind, ToolError, ToolMode, ToolResult, Tools,
};
use dsh_sdk::names::code;
use dsh_sdk::new_id;
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::message::ToolCallBlock;
use dsh_sdk::vocab::records::{self, ToolErrorRef};
use dsh_sdk::vocab::{event, ContentBlock, Extra, Message, SurfaceOp, UserInput};
use serde_json::{Map, Value};
use tokio::task::{Id, JoinError, JoinSet};

use crate::schedule::{Action, Schedule};
use crate::{Abort, Loop, NEXT_STEP};

/// One tool call of the model's answer (a `tool-call` block).
#[derive(Debug)]
pub(crate) struct Call {
    id: String,
    name: String,
    /// The model's arguments text, logged as it came.
    arguments: String,
}

impl Call {
    /// The tool-call blocks of an answer, in model order.
    pub(crate) fn of(blocks: &[ContentBlock]) -> Vec<Call> {
        blocks
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolCall(ToolCallBlock {
                    id,
                    name,
                    arguments,
                    ..
                }) => Some(Call {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: arguments.clone(),
                }),
                _ => None,
            })
            .collect()
    }

    /// The registry's `exec` of this call, with its arguments parsed
    /// ([`tool_arguments`]).
    fn exec(&self, agent: &str, cwd: Option<String>) -> Exec {
        Exec {
            call_id: Some(self.id.clone()),
            agent: Some(agent.to_owned()),
            cwd,
            ..Exec::new(self.name.clone(), tool_arguments(&self.arguments))
        }
    }
}

/// A call's arguments as its tool gets them: the model's text parsed as
/// JSON; blank text is no arguments, `{}`; text that is not JSON goes to
/// the tool as the string itself, for the registry's schema check to refuse
/// with a message the model can act on. A `Value`: what the model wrote is
/// open until the tool parses it into its own arguments type.
pub(crate) fn tool_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Map::new());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// Where a started call's result stands.
enum Slot {
    /// Dispatching on a task of [`Run::tasks`]; the `exec` post-execute
    /// gets if the call is stopped.
    Running(Exec),
    /// Known, with the stage still owed.
    Settled(Tail, Box<ToolResult>),
}

/// What a settled result still owes the registry: post-execute (and the
/// result emit), only the emit, or nothing (the registry itself failed).
enum Tail {
    Post(Exec),
    Finish(Exec),
    None,
}

/// A started call: the seq of its `tool/call`, and its result.
struct Started {
    call_seq: u64,
    slot: Slot,
}

/// One step's calls on their way.
struct Run<'a> {
    agent: &'a str,
    turn: u64,
    step: u64,
    calls: &'a [Call],
    cwd: Option<String>,
    tools: Tools,
    /// Per call, once started.
    started: Vec<Option<Started>>,
    /// The dispatches running. Dropping the set stops them (a dropped call
    /// is cancelled in its tool's plugin).
    tasks: JoinSet<Result<Dispatched<ToolResult>>>,
    /// The call each task dispatches.
    task_calls: HashMap<Id, usize>,
    /// A committed result concluded the turn.
    concluded: bool,
}

impl Run<'_> {
    /// The registry's execution mode for call `k`. An unknown tool, or a
    /// registry that cannot say, runs alone: the safe answer.
    async fn mode(&self, k: usize) -> ToolMode {
        self.tools
            .mode(&self.calls[k].name, Some(self.agent))
            .await
            .unwrap_or(ToolMode::Exclusive)
    }
}

/// The scheduler and the runner disagree about call `k` (a bug of this
/// plugin): the step fails with this rather than guessing a result.
fn out_of_step(k: usize, what: &str) -> Error {
    Error::new(
        codes::UNKNOWN,
        format!("agent-loop's tool-call scheduler lost track of call {k}: {what}"),
    )
}

impl Loop {
    /// Runs one step's tool calls (see [`Schedule`] for the order); true
    /// when a result concluded the turn. An internal failure (the session
    /// refused an append, say) stops new starts, waits for the calls still
    /// running (a cancel stops them), and is returned: the calls not
    /// committed get no result.
    pub(crate) async fn run_tool_calls(
        &self,
        agent: &str,
        (turn, step): (u64, u64),
        calls: &[Call],
        abort: &Abort,
    ) -> Result<bool> {
        let mut run = Run {
            agent,
            turn,
            step,
            calls,
            cwd: self.agents.borrow().get(agent).and_then(|a| a.cwd.clone()),
            tools: Tools::new(&self.ctx),
            started: calls.iter().map(|_| None).collect(),
            tasks: JoinSet::new(),
            task_calls: HashMap::new(),
            concluded: false,
        };
        let mut schedule = Schedule::new(calls.len(), self.config.max_parallel_tool_calls);
        if let Err(e) = self.follow(&mut schedule, &mut run, abort).await {
            schedule.fail();
            while schedule.next_action() == Action::Wait {
                match self.wait_any(&mut run, abort).await {
                    Ok(k) => schedule.settled(k),
                    Err(_) => break,
                }
            }
            return Err(e);
        }
        Ok(run.concluded)
    }

    /// Takes the schedule's actions until it is done.
    async fn follow(
        &self,
        schedule: &mut Schedule,
        run: &mut Run<'_>,
        abort: &Abort,
    ) -> Result<()> {
        loop {
            if abort.is_aborted() {
                schedule.abort();
            }
            match schedule.next_action() {
                Action::Classify(k) => schedule.classified(k, run.mode(k).await),
                Action::Start(k) => {
                    if self.start(run, k, abort).await? {
                        schedule.settled(k);
                    }
                }
                Action::Wait => schedule.settled(self.wait_any(run, abort).await?),
                Action::Commit(k) => self.commit(run, k).await?,
                Action::Skip(k) => self.skip(run, k).await?,
                Action::Done => return Ok(()),
            }
        }
    }

    /// Starts call `k`: logs its `tool/call`, runs `tools.prepare`, and
    /// dispatches it on a task of its own unless the stage settled it
    /// (denied, say). True when its result is known already.
    async fn start(&self, run: &mut Run<'_>, k: usize, abort: &Abort) -> Result<bool> {
        let call = &run.calls[k];
        let call_seq = self.log_call(run, call).await?;
        let exec = call.exec(run.agent, run.cwd.clone());
        let slot = match run.tools.prepare(&exec).await {
            Err(e) => Slot::Settled(Tail::None, Box::new(transport_failure(&e))),
            // Cancelled while pre-execute ran: no dispatch, but
            // post-execute still sees the outcome.
            Ok(prepared) if prepared.kind == StageKind::Dispatch && abort.is_aborted() => {
                Slot::Settled(
                    Tail::Post(prepared.exec),
                    Box::new(aborted_before_dispatch()),
                )
            }
            Ok(prepared) => match (prepared.kind, prepared.result) {
                (StageKind::Dispatch, _) => {
                    let tools = run.tools.clone();
                    let exec = prepared.exec.clone();
                    let task = run
                        .tasks
                        .spawn_local(async move { tools.dispatch(&exec).await });
                    run.task_calls.insert(task.id(), k);
                    Slot::Running(prepared.exec)
                }
                (StageKind::PostResult, Some(result)) => {
                    Slot::Settled(Tail::Post(prepared.exec), Box::new(result))
                }
                (StageKind::FinalResult, Some(result)) => {
                    Slot::Settled(Tail::Finish(prepared.exec), Box::new(result))
                }
                (kind, None) => Slot::Settled(Tail::None, Box::new(no_stage_result(kind))),
            },
        };
        let settled = matches!(slot, Slot::Settled(..));
        run.started[k] = Some(Started { call_seq, slot });
        Ok(settled)
    }

    /// Waits for one running dispatch to end; its call. A cancel stops the
    /// calls still running: aborting a task drops its call, which cancels it
    /// in the tool's plugin (bash kills its process group), and the result
    /// is the original's `ABORTED`. A call that finished before the cancel
    /// keeps its result.
    async fn wait_any(&self, run: &mut Run<'_>, abort: &Abort) -> Result<usize> {
        let joined = match self
            .unless_aborted(abort, run.tasks.join_next_with_id())
            .await
        {
            Ok(joined) => joined,
            Err(_) => {
                run.tasks.abort_all();
                run.tasks.join_next_with_id().await
            }
        };
        let Some(joined) = joined else {
            return Err(out_of_step(run.calls.len(), "no call is running"));
        };
        let id = match &joined {
            Ok((id, _)) => *id,
            Err(e) => e.id(),
        };
        let Some(k) = run.task_calls.remove(&id) else {
            return Err(out_of_step(run.calls.len(), "a task of no call ended"));
        };
        let Some(Started {
            call_seq,
            slot: Slot::Running(exec),
        }) = run.started[k].take()
        else {
            return Err(out_of_step(k, "it ended without running"));
        };
        let (tail, result) = dispatched(exec, joined.map(|(_, outcome)| outcome));
        let slot = Slot::Settled(tail, Box::new(result));
        run.started[k] = Some(Started { call_seq, slot });
        Ok(k)
    }

    /// Commits call `k`: post-execute (or only the result emit), the
    /// `tool/result` citing its `tool/call`, then its additional contexts,
    /// queued for the next step.
    async fn commit(&self, run: &mut Run<'_>, k: usize) -> Result<()> {
        let Some(Started {
            call_seq,
            slot: Slot::Settled(tail, result),
        }) = run.started[k].take()
        else {
            return Err(out_of_step(k, "it was committed before it settled"));
        };
        let result = match tail {
            Tail::Post(exec) => {
                run.tools
                    .finalize(&Outcome {
                        exec,
                        result: *result,
                    })
                    .await
            }
            Tail::Finish(exec) => {
                run.tools
                    .finish(&Outcome {
                        exec,
                        result: *result,
                    })
                    .await
            }
            Tail::None => Ok(*result),
        }
        .unwrap_or_else(|e| transport_failure(&e));
        self.commit_result(run, k, call_seq, &result).await?;
        run.concluded |= result.concludes_turn;
        for context in result.additional_contexts.into_iter().flatten() {
            self.queue_next_step(run.agent, context).await?;
        }
        Ok(())
    }

    /// Answers call `k`, which a cancel kept from starting: its `tool/call`
    /// and an `ABORTED_BEFORE_DISPATCH` result, without entering the
    /// registry.
    async fn skip(&self, run: &Run<'_>, k: usize) -> Result<()> {
        let call_seq = self.log_call(run, &run.calls[k]).await?;
        self.commit_result(run, k, call_seq, &aborted_before_dispatch())
            .await
    }

    /// Appends a tool's additional context (the inbox's input form, a
    /// message or `{text}`) to the end of the `next-step` inbox (a durable
    /// splice, then the live emit), so it becomes a `user/message` at the
    /// start of the next step, after every result. Its form was checked
    /// where the registry read it: a malformed one failed its call there.
    async fn queue_next_step(&self, agent: &str, context: UserInput) -> Result<()> {
        self.append_inbox(agent, NEXT_STEP, context.into_message())
            .await
    }

    async fn log_call(&self, run: &Run<'_>, call: &Call) -> Result<u64> {
        let record = records::ToolCall {
            turn: run.turn,
            step: run.step,
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            extra: Extra::new(),
        };
        self.append(run.agent, NewEvent::typed(event::TOOL_CALL, &record)?)
            .await
    }

    async fn commit_result(
        &self,
        run: &Run<'_>,
        k: usize,
        call_seq: u64,
        result: &ToolResult,
    ) -> Result<()> {
        let call = &run.calls[k];
        let record = records::ToolResult {
            turn: run.turn,
            step: run.step,
            message: Message::tool_result(
                new_id(),
                call.id.as_str(),
                result.content.clone(),
                result.is_error,
            ),
            error: error_ref(result),
            meta: result.meta.clone(),
            extra: Extra::new(),
        };
        let event = NewEvent::surface(
            event::TOOL_RESULT,
            &record,
            SurfaceOp::Append,
            Some(vec![call_seq]),
        )?;
        self.append(run.agent, event).await.map(drop)
    }
}

/// The `error` a `tool/result` records for `result`: its error's info
/// whole (`result.error.info`, as the original writes it): class, code when
/// it has one (a hook's info may not), and any other field of whoever made
/// it. None when the result carries no info.
fn error_ref(result: &ToolResult) -> Option<ToolErrorRef> {
    let info = result.error.as_ref()?.info.as_ref()?;
    Some(ToolErrorRef {
        name: info.name.clone(),
        code: info.code.clone(),
        extra: info.extra.clone(),
    })
}

/// The result of a dispatch task, and the stage it still owes.
fn dispatched(
    exec: Exec,
    joined: std::result::Result<Result<Dispatched<ToolResult>>, JoinError>,
) -> (Tail, ToolResult) {
    match joined {
        Err(e) if e.is_cancelled() => (Tail::Post(exec), aborted_in_dispatch()),
        Err(e) => (
            Tail::None,
            failure(&e.to_string(), None, "Error: the tool task failed"),
        ),
        Ok(Ok(d)) if d.kind == StageKind::PostResult => (Tail::Post(exec), d.result),
        Ok(Ok(d)) => (Tail::Finish(exec), d.result),
        Ok(Err(e)) => (Tail::None, transport_failure(&e)),
    }
}

/// A failed result: `message`, the error's class and code when known, and
/// the `text` the model sees.
fn failure(message: &str, info: Option<&str>, text: &str) -> ToolResult {
    ToolResult {
        is_error: true,
        error: Some(ToolError {
            message: message.to_owned(),
            info: info.map(|code| ErrorInfo {
                name: "AbortError".to_owned(),
                code: Some(code.to_owned()),
                ..ErrorInfo::default()
            }),
        }),
        content: vec![ContentBlock::text(text)],
        ..ToolResult::default()
    }
}

/// The original's result for a call that never reached its tool.
fn aborted_before_dispatch() -> ToolResult {
    failure(
        "tool call aborted before dispatch",
        Some(code::ABORTED_BEFORE_DISPATCH),
        "Error: tool call aborted before dispatch",
    )
}

/// The original's result for a call cancelled while its tool ran.
fn aborted_in_dispatch() -> ToolResult {
    failure(
        "tool call aborted",
        Some(code::ABORTED),
        "Error: tool call aborted",
    )
}

/// The registry itself failed to answer for a call.
fn transport_failure(e: &Error) -> ToolResult {
    failure(&e.message, None, &format!("Error: {}", e.message))
}

/// The registry's `prepare` settled a call (`kind`) without its result.
fn no_stage_result(kind: StageKind) -> ToolResult {
    let message = format!("tools.prepare answered {kind:?} without the call's result");
    failure(&message, None, &format!("Error: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_are_parsed_and_blank_is_an_empty_object() {
        assert_eq!(tool_arguments(r#"{"a":1}"#), json!({"a": 1}));
        assert_eq!(tool_arguments("[1,2]"), json!([1, 2]));
        for blank in ["", "  \n"] {
            assert_eq!(tool_arguments(blank), json!({}), "{blank:?}");
        }
    }

    #[test]
    fn arguments_that_are_not_json_pass_as_the_raw_string() {
        assert_eq!(tool_arguments("{oops"), json!("{oops"));
        assert_eq!(tool_arguments("ls -la"), json!("ls -la"));
    }

    #[test]
    fn a_tool_result_records_its_errors_info_whole() {
        let coded = ToolResult::failure("no", Some(ErrorInfo::new("AbortError", "ABORTED")));
        assert_eq!(
            error_ref(&coded),
            Some(ToolErrorRef::new("AbortError", "ABORTED"))
        );
        // A hook's info: no code, fields of its own; written as it was.
        let mut extra = Map::new();
        extra.insert("rule".into(), Value::from("r7"));
        let uncoded = ToolResult::failure(
            "no",
            Some(ErrorInfo {
                name: "HookError".into(),
                code: None,
                extra,
            }),
        );
        let written = serde_json::to_string(&error_ref(&uncoded)).unwrap();
        assert_eq!(written, r#"{"name":"HookError","rule":"r7"}"#);
        assert_eq!(error_ref(&ToolResult::failure("no", None)), None);
        assert_eq!(error_ref(&ToolResult::default()), None);
    }

    #[test]
    fn tool_call_blocks_become_calls_in_model_order() {
        let blocks = [
            ContentBlock::text("hi"),
            ContentBlock::tool_call("c0", "read", "{}"),
            ContentBlock::reasoning("hm"),
            ContentBlock::tool_call("c1", "bash", ""),
        ];
        let calls = Call::of(&blocks);
        let ids: Vec<(&str, &str)> = calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str()))
            .collect();
        assert_eq!(ids, [("c0", "read"), ("c1", "bash")]);
        let exec = calls[1].exec("a", Some("/w".into()));
        assert_eq!(exec.call_id.as_deref(), Some("c1"));
        assert_eq!(exec.cwd.as_deref(), Some("/w"));
    }
}
