//! The turn and step algorithm (reference dsh-core §4.4–4.6, §5.4).

use std::future::Future;
use std::rc::Rc;

use dsh_sdk::api::agent_loop::{
    AgentError, AgentRequest, InboxClaimed, PreStep, PreStepDecision, PreStepKind, RequestConfig,
    RequestError, RequestErrorDecision, RetryPolicy, StatusChanged, TurnStopping,
};
use dsh_sdk::api::agents::RunStatus;
use dsh_sdk::api::llm::{Llm, StreamRequest};
use dsh_sdk::api::sessions::{NewEvent, Sessions};
use dsh_sdk::api::system_prompt::{AssembleParams, Assembly, SystemPrompt};
use dsh_sdk::api::tools::{
    Dispatched, ErrorInfo, Exec, Outcome, ScopeParams, StageKind, ToolError, ToolMode, ToolResult,
    Tools,
};
use dsh_sdk::names::{bus, code, tools};
use dsh_sdk::new_id;
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::history;
use dsh_sdk::vocab::{event, header_equals, msg, BlockAssembler};
use dsh_sdk::CallStream;
use serde::Deserialize;
use serde_json::Map;

use crate::{Abort, Inbox, Loop, MAX_STEPS_FIELD, NEXT_STEP, NEXT_TURN, STEP_LIMIT};

/// Told when a turn has claimed its first batch.
pub(crate) type FirstClaim = tokio::sync::oneshot::Sender<()>;

/// How a step ended: `Some(kind)` ends the turn unless more input is
/// pending; `None` means tool results owe the model a response.
type StepEnd = Option<&'static str>;

/// The call config of a request, as the `agent/request` waterfall left
/// it, and the route it names.
struct Route {
    config: Value,
    provider: String,
    model: String,
}

/// What a model stream produced: its blocks so far, the seqs of the
/// chunks logged, and whether an abort cut it short.
#[derive(Default)]
struct Answer {
    assembler: BlockAssembler,
    chunk_seqs: Vec<u64>,
    interrupted: bool,
}

/// A failure that ends the turn: an abort, or an error with its reason.
enum Stop {
    Aborted,
    Failed(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Failed(e)
    }
}

impl Loop {
    fn check(&self, abort: &Abort) -> Result<(), Stop> {
        if abort.is_aborted() {
            Err(Stop::Aborted)
        } else {
            Ok(())
        }
    }

    /// Awaits `fut` unless the turn is aborted first: a cancel must not wait
    /// out a retry delay or a running tool. Dropping `fut` cancels the calls
    /// it made.
    async fn unless_aborted<T>(
        &self,
        abort: &Abort,
        fut: impl Future<Output = T>,
    ) -> Result<T, Stop> {
        let aborted = abort.notify.notified();
        tokio::pin!(aborted);
        aborted.as_mut().enable();
        self.check(abort)?;
        tokio::select! {
            biased;
            _ = aborted => Err(Stop::Aborted),
            v = fut => Ok(v),
        }
    }

    /// Runs turns until the inbox is empty (or a turn did not complete).
    /// `claimed` is told once the first turn has claimed its first batch
    /// (see `wake_opening_turn`).
    /// Tells `agent/error` listeners that the turn (at `step`, when known)
    /// failed with `error`.
    fn report_error(&self, agent: &str, turn: u64, step: Option<u64>, error: Error) {
        let error = AgentError {
            agent: agent.to_owned(),
            turn,
            step,
            error,
        };
        self.notify(agent, bus::AGENT_ERROR, error);
    }

    pub(crate) async fn drive(&self, agent: &str, mut claimed: Option<FirstClaim>) {
        while self.turn(agent, claimed.take()).await {}
        let (waiters, end, again) = {
            let mut agents = self.agents.borrow_mut();
            let Some(a) = agents.get_mut(agent) else {
                return;
            };
            a.running = false;
            a.abort = None;
            let again = a.wake_requested && a.inbox.has_pending();
            a.wake_requested = false;
            (std::mem::take(&mut a.idle), a.last_end.clone(), again)
        };
        let idle = StatusChanged {
            agent: agent.to_owned(),
            status: RunStatus::Idle,
        };
        self.notify(agent, bus::AGENT_STATUS, idle);
        for w in waiters {
            let _ = w.send(end.clone());
        }
        if again {
            self.wake(agent);
        }
    }

    /// One turn; true when another should follow.
    async fn turn(&self, agent: &str, claimed: Option<FirstClaim>) -> bool {
        // The abort `wake` installed (or the fresh one a previous turn left),
        // so a cancel that came before this task ran is not lost.
        let (abort, turn) = {
            let mut agents = self.agents.borrow_mut();
            let Some(a) = agents.get_mut(agent) else {
                return false;
            };
            let abort = a.abort.get_or_insert_with(Rc::default).clone();
            (abort, a.last_turn + 1)
        };
        if let Err(e) = self
            .append(agent, event::TURN_START, json!({"turn": turn}), false, None)
            .await
        {
            self.report_error(agent, turn, Some(0), e);
            return false;
        }
        if let Some(a) = self.agents.borrow_mut().get_mut(agent) {
            a.last_turn = turn;
        }
        let mut ends: Option<&'static str> = None;
        let outcome = self
            .turn_body(agent, turn, &abort, &mut ends, claimed)
            .await;
        let reason = match outcome {
            Ok(()) => json!({"kind": ends.unwrap_or("completed")}),
            Err(Stop::Aborted) => {
                let cause = abort
                    .cause
                    .borrow()
                    .clone()
                    .unwrap_or(json!({"kind": "user"}));
                json!({"kind": "aborted", "reason": cause})
            }
            Err(Stop::Failed(_)) if abort.is_aborted() => {
                let cause = abort
                    .cause
                    .borrow()
                    .clone()
                    .unwrap_or(json!({"kind": "user"}));
                json!({"kind": "aborted", "reason": cause})
            }
            Err(Stop::Failed(e)) => {
                let reason =
                    json!({"kind": "error", "error": {"message": e.message, "code": e.code}});
                self.report_error(agent, turn, None, e);
                reason
            }
        };
        if let Err(e) = self
            .append(
                agent,
                event::TURN_END,
                json!({"turn": turn, "reason": reason}),
                false,
                None,
            )
            .await
        {
            self.report_error(agent, turn, None, e);
        }
        let mut agents = self.agents.borrow_mut();
        let Some(a) = agents.get_mut(agent) else {
            return false;
        };
        a.last_end = reason.clone();
        let completed = matches!(reason["kind"].as_str(), Some("completed" | "max-tokens"));
        let again = completed && !abort.is_aborted() && a.inbox.has_pending();
        if again {
            a.abort = Some(Rc::default());
        }
        again
    }

    /// `deriveMessages()`, incrementally: only surface events appended since
    /// the last request are fetched; a `replace` falls back to a full derive.
    /// Messages are kept as the JSON text they were logged as, so a request
    /// copies the history instead of parsing and re-encoding it.
    async fn refresh_history(&self, agent: &str) -> Result<()> {
        let sessions = Sessions::new(&self.ctx);
        let from = self.agents.borrow().get(agent).map_or(0, |a| a.history_seq);
        let tail = sessions.surface_tail(agent, from).await?;
        let seq = tail.seq;
        let fresh = tail.replaced || from == 0;
        let messages = if fresh {
            sessions.derive_raw(agent).await?
        } else {
            history::appended_messages(tail.events)?
        };
        if let Some(a) = self.agents.borrow_mut().get_mut(agent) {
            if fresh {
                a.history = messages;
            } else {
                a.history.extend(messages);
            }
            a.history_seq = seq;
        }
        Ok(())
    }

    /// Opens the `llm.stream` request of a step: the call config, then the
    /// history (copied as logged, never re-encoded), the system prompt, the
    /// tools and the session id.
    fn open_stream(&self, agent: &str, config: &Value, assembly: &Assembly) -> Result<CallStream> {
        let mut config = config
            .as_object()
            .cloned()
            .ok_or_else(|| Error::msg(format!("the call config is not an object: {config}")))?;
        for key in StreamRequest::OWN_KEYS {
            config.shift_remove(key);
        }
        let agents = self.agents.borrow();
        let a = agents.get(agent).ok_or_else(|| Error::msg("agent gone"))?;
        let request = StreamRequest {
            config: &config,
            messages: &a.history,
            system: (!assembly.system.is_empty()).then_some(assembly.system.as_str()),
            tools: (!assembly.tools.is_empty()).then_some(assembly.tools.as_slice()),
            session_id: agent,
            signal: None,
        };
        Llm::new(&self.ctx).stream(&request)
    }

    async fn claim(&self, agent: &str, target: &str, turn: u64) -> Result<Vec<Value>> {
        let lock = self.inbox_lock(agent)?;
        let _ordered = lock.lock().await;
        let (steps, turns) = {
            let agents = self.agents.borrow();
            let a = agents.get(agent).ok_or_else(|| Error::msg("agent gone"))?;
            let take_turn = target == "next-turn" && !a.inbox.next_turn.is_empty();
            (a.inbox.next_step.len(), usize::from(take_turn))
        };
        if steps > 0 {
            self.append(
                agent,
                event::INBOX_SPLICED,
                Inbox::removal(NEXT_STEP, steps, None),
                false,
                None,
            )
            .await?;
        }
        if turns > 0 {
            self.append(
                agent,
                event::INBOX_SPLICED,
                Inbox::removal(NEXT_TURN, 1, None),
                false,
                None,
            )
            .await?;
        }
        let mut claimed = Vec::new();
        if let Some(a) = self.agents.borrow_mut().get_mut(agent) {
            claimed.extend(
                a.inbox
                    .next_step
                    .drain(..steps.min(a.inbox.next_step.len())),
            );
            if turns > 0 && !a.inbox.next_turn.is_empty() {
                claimed.push(a.inbox.next_turn.remove(0));
            }
        }
        for m in &claimed {
            let claim = InboxClaimed {
                agent: agent.to_owned(),
                message: m,
                turn,
            };
            self.notify(agent, bus::AGENT_INBOX_CLAIMED, claim);
        }
        Ok(claimed)
    }

    async fn assemble(&self, agent: &str) -> Result<Assembly> {
        // The route selected now is this step's, for the prompt and the
        // request alike: a switch from here on takes the next step.
        let (provider, model, cwd) = {
            let mut agents = self.agents.borrow_mut();
            let a = agents
                .get_mut(agent)
                .ok_or_else(|| Error::msg("agent gone"))?;
            let route = a
                .selection
                .clone()
                .unwrap_or_else(|| (a.provider.clone(), a.model.clone()));
            a.assembled = Some(route.clone());
            (route.0, route.1, a.cwd.clone())
        };
        // An unset option is a variable without a value (an error if a
        // section uses it), unless a `system-prompt/assemble` listener
        // supplies it.
        let var = |v: String| if v.is_empty() { Value::Null } else { json!(v) };
        let mut variables = Map::new();
        variables.insert("provider".to_owned(), var(provider));
        variables.insert("model".to_owned(), var(model));
        variables.insert("cwd".to_owned(), cwd.map_or(Value::Null, Value::String));
        // The schemas go on to the model as the registry gave them.
        let tools = Tools::new(&self.ctx)
            .service()
            .call_as(
                tools::SCHEMAS,
                &ScopeParams {
                    scope: Some(agent.to_owned()),
                },
            )
            .await?;
        let params = AssembleParams {
            scope: Some(agent.to_owned()),
            tools,
            variables,
            known_tools: None,
        };
        SystemPrompt::new(&self.ctx).assemble(&params).await
    }

    /// The runtime-context snapshot message this step must append, if the
    /// assembly's differs from the one the log retains.
    async fn runtime_context(&self, agent: &str, assembly: &Assembly) -> Result<Option<Value>> {
        let from = self
            .agents
            .borrow()
            .get(agent)
            .map_or(0, |a| a.runtime_context.seen);
        let events = Sessions::new(&self.ctx).events(agent, from).await?;
        let mut agents = self.agents.borrow_mut();
        let a = agents
            .get_mut(agent)
            .ok_or_else(|| Error::msg("agent gone"))?;
        if from == 0 {
            a.runtime_context.restore(&events);
        } else {
            a.runtime_context.follow(&events);
        }
        Ok(a.runtime_context
            .project(&assembly.context, &assembly.context_sections))
    }

    async fn turn_body(
        &self,
        agent: &str,
        turn: u64,
        abort: &Abort,
        ends: &mut Option<&'static str>,
        mut first_claim: Option<FirstClaim>,
    ) -> Result<(), Stop> {
        let mut target = "next-turn";
        let mut step = 0u64;
        loop {
            self.check(abort)?;
            // Checked before the claim, so pending input stays parked.
            self.check_step_limit(step)?;
            let next = step + 1;
            let claimed = self.claim(agent, target, turn).await?;
            if let Some(told) = first_claim.take() {
                let _ = told.send(());
            }
            let assembly = self.assemble(agent).await?;
            self.check(abort)?;
            // A changed runtime context joins the step's input, after the
            // claimed messages, unless a pre-step listener decides otherwise.
            let context = self.runtime_context(agent, &assembly).await?;
            let decision = self
                .pre_step(agent, (turn, next), claimed, context, abort)
                .await?;
            self.check(abort)?;
            if decision.kind == PreStepKind::Reject {
                *ends = Some("blocked");
                return Ok(());
            }
            let messages = decision.messages;
            if ends.is_some() && messages.is_empty() {
                return Ok(());
            }
            if step == 0 && messages.is_empty() {
                *ends = Some("completed");
                return Ok(());
            }
            self.append(
                agent,
                event::STEP_START,
                json!({"turn": turn, "step": next}),
                false,
                None,
            )
            .await?;
            step = next;
            let result = self
                .step_body(agent, (turn, step), &assembly, &messages, abort)
                .await;
            self.append(
                agent,
                event::STEP_END,
                json!({"turn": turn, "step": step}),
                false,
                None,
            )
            .await?;
            let end = result?;
            if *ends != Some("max-tokens") {
                *ends = end;
            }
            self.check(abort)?;
            let pending_step = || {
                self.agents
                    .borrow()
                    .get(agent)
                    .is_some_and(|a| !a.inbox.next_step.is_empty())
            };
            if ends.is_some() && !pending_step() {
                self.ctx
                    .dispatch(bus::AGENT_TURN_STOPPING)
                    .scope(agent)
                    .serial(TurnStopping {
                        agent: agent.to_owned(),
                        turn,
                    })
                    .await?;
                self.check(abort)?;
                if !pending_step() {
                    return Ok(());
                }
            }
            target = "next-step";
        }
    }

    /// The `agent/pre-step` waterfall over the claimed messages: the
    /// innermost answer enters them, followed by the changed runtime
    /// context, if any. A cancel meanwhile stops the model requests the
    /// listeners run under the payload's `signal`; the loop still waits
    /// for the listeners to answer.
    async fn pre_step(
        &self,
        agent: &str,
        (turn, step): (u64, u64),
        claimed: Vec<Value>,
        context: Option<Value>,
        abort: &Abort,
    ) -> Result<PreStepDecision> {
        let signal = format!("pre-step:{agent}:{turn}:{step}");
        let payload = PreStep {
            agent: agent.to_owned(),
            messages: claimed,
            turn,
            step,
            signal: Some(signal.clone()),
        };
        let waterfall = self
            .ctx
            .dispatch(bus::AGENT_PRE_STEP)
            .scope(agent)
            .waterfall(payload, |p| async move {
                let mut messages = p["messages"].as_array().cloned().unwrap_or_default();
                messages.extend(context);
                let enter = PreStepDecision {
                    kind: PreStepKind::Enter,
                    messages,
                };
                Ok(serde_json::to_value(enter)?)
            });
        tokio::pin!(waterfall);
        let aborted = abort.notify.notified();
        tokio::pin!(aborted);
        aborted.as_mut().enable();
        let decision = tokio::select! {
            biased;
            d = &mut waterfall => d,
            _ = aborted => {
                if let Err(e) = Llm::new(&self.ctx).cancel(&signal).await {
                    dsh_sdk::tracing::debug!("cancelling the pre-step requests of {agent}: {e}");
                }
                waterfall.await
            }
        }?;
        serde_json::from_value(decision).map_err(|e| {
            Error::new(
                codes::INVALID_PAYLOAD,
                format!(
                    "an `{}` listener answered no decision: {e}",
                    bus::AGENT_PRE_STEP
                ),
            )
        })
    }

    /// Fails the turn when `steps` already run leave no room for another:
    /// a model that calls tools forever must not run forever.
    fn check_step_limit(&self, steps: u64) -> Result<(), Stop> {
        let max = self.config.max_steps();
        if steps < max {
            return Ok(());
        }
        Err(Stop::Failed(Error::new(
            STEP_LIMIT,
            format!(
                "the turn reached the limit of {max} steps and was stopped; \
                 raise `{MAX_STEPS_FIELD}` in the agent-loop config to allow more"
            ),
        )))
    }

    /// One step: its input enters the log, then the model is asked (again
    /// while a `agent/request-error` listener decides to retry) and its
    /// answer and tool calls are committed.
    async fn step_body(
        &self,
        agent: &str,
        at: (u64, u64),
        assembly: &Assembly,
        messages: &[Value],
        abort: &Abort,
    ) -> Result<StepEnd, Stop> {
        self.log_step_input(agent, messages).await?;
        loop {
            let route = self.request_config(agent, at).await?;
            self.log_request_header(agent, &route, assembly).await?;
            self.refresh_history(agent).await?;
            // A cancel from an `agent/request` listener (or during the
            // appends above) stops the step before the model is called.
            self.check(abort)?;
            let stream = self.open_stream(agent, &route.config, assembly)?;
            let answer = self.stream_answer(agent, at, stream, abort).await?;
            if answer.interrupted || abort.is_aborted() {
                self.log_interrupted_answer(agent, at, &route, answer)
                    .await?;
                return Err(Stop::Aborted);
            }
            let kind = answer.assembler.finish_kind();
            if kind == "error" || kind == "aborted" {
                self.retry_or_fail(agent, at, &route, &answer.assembler, abort)
                    .await?;
                continue;
            }
            return self.commit_answer(agent, at, &route, answer, abort).await;
        }
    }

    /// The step's input messages enter the log (and so the history).
    async fn log_step_input(&self, agent: &str, messages: &[Value]) -> Result<()> {
        for m in messages {
            self.append(agent, event::USER_MESSAGE, m.clone(), true, None)
                .await?;
        }
        Ok(())
    }

    /// The call config of a request: the route of the step's assembly and
    /// the agent's `maxTokens`, through the `agent/request` waterfall; a
    /// route without a provider or a model fails the turn.
    async fn request_config(&self, agent: &str, (turn, step): (u64, u64)) -> Result<Route> {
        let seed = {
            let agents = self.agents.borrow();
            let a = agents.get(agent).ok_or_else(|| Error::msg("agent gone"))?;
            let (provider, model) = a
                .assembled
                .clone()
                .unwrap_or_else(|| (a.provider.clone(), a.model.clone()));
            RequestConfig {
                provider,
                model,
                max_tokens: a.max_tokens,
            }
        };
        let payload = AgentRequest {
            agent: agent.to_owned(),
            turn,
            step,
            config: seed,
        };
        let config = self
            .ctx
            .dispatch(bus::AGENT_REQUEST)
            .scope(agent)
            .waterfall(payload, |p| async move { Ok(p["config"].clone()) })
            .await?;
        let provider = config["provider"].as_str().unwrap_or_default().to_owned();
        let model = config["model"].as_str().unwrap_or_default().to_owned();
        if provider.is_empty() || model.is_empty() {
            return Err(Error::new(codes::UNKNOWN, format!(
                "agent \"{agent}\" has no provider/model: set AgentOptions.provider and AgentOptions.model or supply both via the agent/request waterfall"
            )));
        }
        Ok(Route {
            config,
            provider,
            model,
        })
    }

    /// Logs `request/header` when this is the agent's first request or
    /// the header changed, and `request/context` when the route changed.
    async fn log_request_header(
        &self,
        agent: &str,
        route: &Route,
        assembly: &Assembly,
    ) -> Result<()> {
        let mut header = json!({"config": route.config});
        if !assembly.system.is_empty() {
            header["system"] = json!(assembly.system);
        }
        if !assembly.tools.is_empty() {
            header["tools"] = json!(assembly.tools);
        }
        let (first, logged, logged_ctx) = {
            let agents = self.agents.borrow();
            let a = agents.get(agent);
            (
                a.is_none_or(|a| a.first_request),
                a.and_then(|a| a.logged_header.clone()),
                a.and_then(|a| a.logged_context.clone()),
            )
        };
        if first || !logged.as_ref().is_some_and(|l| header_equals(l, &header)) {
            let reason = if !first {
                "change"
            } else if logged.is_some() {
                "resume"
            } else {
                "initial"
            };
            self.append(
                agent,
                event::REQUEST_HEADER,
                json!({"header": header, "reason": reason}),
                false,
                None,
            )
            .await?;
        }
        let context = json!({"provider": route.provider, "model": route.model});
        if logged_ctx.as_ref() != Some(&context) {
            self.append(agent, event::REQUEST_CONTEXT, context.clone(), false, None)
                .await?;
        }
        if let Some(a) = self.agents.borrow_mut().get_mut(agent) {
            a.first_request = false;
            a.logged_header = Some(header);
            a.logged_context = Some(context);
        }
        Ok(())
    }

    /// Streams the model's answer: each batch of chunks is logged as
    /// `assistant/chunk`s and fed to the block assembler, until the stream
    /// ends or the turn is aborted.
    async fn stream_answer(
        &self,
        agent: &str,
        (turn, step): (u64, u64),
        mut stream: CallStream,
        abort: &Abort,
    ) -> Result<Answer, Stop> {
        let mut answer = Answer::default();
        loop {
            let item = tokio::select! {
                _ = abort.notify.notified() => { answer.interrupted = true; break; }
                item = stream.next() => item,
            };
            let Some(item) = item else { break };
            let first_chunk = item.map_err(Stop::Failed)?;
            let mut batch = vec![first_chunk];
            while let Some(more) = stream.try_next() {
                batch.push(more.map_err(Stop::Failed)?);
            }
            let events: Vec<NewEvent> = batch
                .iter()
                .map(|c| {
                    NewEvent::new(
                        event::ASSISTANT_CHUNK,
                        json!({"turn": turn, "step": step, "chunk": c}),
                    )
                })
                .collect();
            let seqs = Sessions::new(&self.ctx).append_many(agent, events).await?;
            answer.chunk_seqs.extend(seqs);
            for c in &batch {
                answer.assembler.push(c);
            }
            if abort.is_aborted() {
                answer.interrupted = true;
                break;
            }
        }
        Ok(answer)
    }

    /// An aborted stream keeps what the model said so far, marked
    /// interrupted.
    async fn log_interrupted_answer(
        &self,
        agent: &str,
        at: (u64, u64),
        route: &Route,
        answer: Answer,
    ) -> Result<()> {
        let blocks = answer.assembler.interrupted_blocks();
        if !blocks.is_empty() {
            let route = (route.provider.as_str(), route.model.as_str());
            let Answer {
                assembler,
                chunk_seqs,
                ..
            } = answer;
            self.append_assistant(agent, at, route, blocks, &assembler, chunk_seqs, true)
                .await?;
        }
        Ok(())
    }

    /// A failed request: the `agent/request-error` waterfall decides. Ok
    /// when it is to run again; the failure (or the abort that came while
    /// a listener waited) otherwise.
    async fn retry_or_fail(
        &self,
        agent: &str,
        (turn, step): (u64, u64),
        route: &Route,
        assembler: &BlockAssembler,
        abort: &Abort,
    ) -> Result<(), Stop> {
        let failure = assembler.failure();
        let payload = RequestError {
            agent: agent.to_owned(),
            turn,
            step,
            provider: route.provider.clone(),
            failure: failure.clone(),
            retry_policy: RetryPolicy::default(),
        };
        let decide = self
            .ctx
            .dispatch(bus::AGENT_REQUEST_ERROR)
            .scope(agent)
            .waterfall(payload, |_| async { Ok(Value::Null) });
        let action = self.unless_aborted(abort, decide).await??;
        let decision: Option<RequestErrorDecision> = serde_json::from_value(action).ok().flatten();
        if decision.is_some_and(|d| d.is_retry()) {
            return Ok(());
        }
        let code = failure["code"].as_str().unwrap_or(codes::UNKNOWN);
        let message = failure["message"]
            .as_str()
            .unwrap_or("the model request failed");
        Err(Error::new(code, message).into())
    }

    /// Logs the model's answer, then runs its tool calls: the step ends
    /// the turn when the answer hit the token limit or called no tool, or
    /// when a tool concluded it.
    async fn commit_answer(
        &self,
        agent: &str,
        (turn, step): (u64, u64),
        route: &Route,
        answer: Answer,
        abort: &Abort,
    ) -> Result<StepEnd, Stop> {
        let kind = answer.assembler.finish_kind();
        let blocks = answer.assembler.blocks();
        let calls = Call::of(&blocks);
        let Answer {
            assembler,
            chunk_seqs,
            ..
        } = answer;
        self.append_assistant(
            agent,
            (turn, step),
            (route.provider.as_str(), route.model.as_str()),
            blocks,
            &assembler,
            chunk_seqs,
            false,
        )
        .await?;
        if kind == "max-tokens" {
            return Ok(Some("max-tokens"));
        }
        if calls.is_empty() {
            return Ok(Some("completed"));
        }
        let concluded = self
            .run_tool_calls(agent, turn, step, &calls, abort)
            .await?;
        if abort.is_aborted() {
            return Err(Stop::Aborted);
        }
        // A tool that concluded the turn ends it after this step's
        // results, unless next-step input (its contexts) is pending.
        Ok(concluded.then_some("completed"))
    }

    /// Logs the assistant message of a step, citing its chunks.
    #[allow(clippy::too_many_arguments)]
    async fn append_assistant(
        &self,
        agent: &str,
        (turn, step): (u64, u64),
        (provider, model): (&str, &str),
        blocks: Vec<Value>,
        assembler: &BlockAssembler,
        chunk_seqs: Vec<u64>,
        interrupted: bool,
    ) -> Result<u64> {
        let mut data = json!({"turn": turn, "step": step, "message": msg::assistant(&new_id(), blocks, provider, model)});
        if let Some(u) = &assembler.usage {
            data["usage"] = u.clone();
        }
        if interrupted {
            data["interrupted"] = json!(true);
        }
        self.append(
            agent,
            event::ASSISTANT_MESSAGE,
            data,
            true,
            Some(chunk_seqs),
        )
        .await
    }

    /// Runs one step's tool calls in groups (parallel-safe siblings
    /// together, exclusive ones alone), committing results in model order.
    /// True when a result concluded the turn.
    async fn run_tool_calls(
        &self,
        agent: &str,
        turn: u64,
        step: u64,
        calls: &[Call],
        abort: &Abort,
    ) -> Result<bool> {
        let mut concluded = false;
        let cwd = self.agents.borrow().get(agent).and_then(|a| a.cwd.clone());
        let tools = Tools::new(&self.ctx);
        // An unknown tool, or a registry that cannot say, runs alone.
        let mode = |name: &str| {
            let tools = tools.clone();
            let name = name.to_owned();
            async move {
                tools
                    .mode(&name, Some(agent))
                    .await
                    .unwrap_or(ToolMode::Exclusive)
            }
        };
        let mut i = 0;
        while i < calls.len() {
            if abort.is_aborted() {
                for call in &calls[i..] {
                    let seq = self.log_call(agent, turn, step, call).await?;
                    let result = aborted_before_dispatch();
                    self.commit_result(agent, turn, step, call, seq, &result)
                        .await?;
                }
                return Ok(concluded);
            }
            let mut group = vec![i];
            if mode(&calls[i].name).await == ToolMode::Parallel {
                while group.len() < self.config.max_parallel_tool_calls.max(1)
                    && i + group.len() < calls.len()
                {
                    if mode(&calls[i + group.len()].name).await != ToolMode::Parallel {
                        break;
                    }
                    group.push(i + group.len());
                }
            }
            // Pre-execute (policy, approval) runs call by call in model
            // order; only the dispatches overlap; post-execute and the
            // commits follow in model order again (the original's staged
            // scheduler: prepare, dispatch, finalize).
            let mut started = Vec::new();
            for &k in &group {
                // A cancel stops the starts; the unstarted calls are
                // skipped at the top of the next round.
                if abort.is_aborted() {
                    break;
                }
                let call = &calls[k];
                let seq = self.log_call(agent, turn, step, call).await?;
                let exec = call.exec(agent, cwd.clone());
                let slot = match tools.prepare(&exec).await {
                    Err(e) => Slot::Settled(Tail::None, Box::new(transport_failure(&e))),
                    Ok(prepared) => {
                        let result = Box::new(prepared.result.unwrap_or_default());
                        match prepared.kind {
                            // Cancelled while pre-execute ran: no dispatch,
                            // but post-execute still sees the outcome.
                            StageKind::Dispatch if abort.is_aborted() => Slot::Settled(
                                Tail::Post(prepared.exec),
                                Box::new(aborted_before_dispatch()),
                            ),
                            StageKind::Dispatch => {
                                let t = tools.clone();
                                let x = prepared.exec.clone();
                                let handle =
                                    tokio::task::spawn_local(async move { t.dispatch(&x).await });
                                Slot::Running(prepared.exec, handle)
                            }
                            StageKind::PostResult => {
                                Slot::Settled(Tail::Post(prepared.exec), result)
                            }
                            StageKind::FinalResult => {
                                Slot::Settled(Tail::Finish(prepared.exec), result)
                            }
                        }
                    }
                };
                started.push((k, seq, slot));
            }
            let count = started.len();
            for (k, seq, slot) in started {
                let (tail, result) = match slot {
                    Slot::Settled(tail, result) => (tail, *result),
                    Slot::Running(exec, handle) => self.await_dispatch(abort, exec, handle).await,
                };
                let result = match tail {
                    Tail::Post(exec) => tools.finalize(&Outcome { exec, result }).await,
                    Tail::Finish(exec) => tools.finish(&Outcome { exec, result }).await,
                    Tail::None => Ok(result),
                }
                .unwrap_or_else(|e| transport_failure(&e));
                self.commit_result(agent, turn, step, &calls[k], seq, &result)
                    .await?;
                concluded |= result.concludes_turn;
                for m in result.additional_contexts.into_iter().flatten() {
                    self.queue_next_step(agent, m).await?;
                }
            }
            i += count;
        }
        Ok(concluded)
    }

    /// Waits for a dispatching call. A cancel stops the calls still
    /// running: dropping the call cancels it in the tool's plugin (bash
    /// kills its process group), and the result is the original's
    /// ABORTED. A call that finished before the cancel keeps its result.
    async fn await_dispatch(
        &self,
        abort: &Abort,
        exec: Exec,
        mut handle: Dispatching,
    ) -> (Tail, ToolResult) {
        let outcome = if handle.is_finished() {
            Some((&mut handle).await)
        } else {
            self.unless_aborted(abort, &mut handle).await.ok()
        };
        match outcome {
            None => {
                handle.abort();
                (Tail::Post(exec), aborted_in_dispatch())
            }
            Some(Ok(Ok(d))) if d.kind == StageKind::PostResult => (Tail::Post(exec), d.result),
            Some(Ok(Ok(d))) => (Tail::Finish(exec), d.result),
            Some(Ok(Err(e))) => (Tail::None, transport_failure(&e)),
            Some(Err(e)) => (
                Tail::None,
                failure(&e.to_string(), None, "Error: the tool task failed"),
            ),
        }
    }

    /// Appends a tool's additional context to the end of the `next-step`
    /// inbox (a durable splice, then the live emit), so it becomes a
    /// `user/message` at the start of the next step, after every result.
    async fn queue_next_step(&self, agent: &str, message: Value) -> Result<()> {
        self.append_inbox(agent, NEXT_STEP, message).await
    }

    async fn log_call(&self, agent: &str, turn: u64, step: u64, call: &Call) -> Result<u64> {
        self.append(
            agent,
            event::TOOL_CALL,
            json!({"turn": turn, "step": step, "callId": call.id, "name": call.name, "arguments": call.arguments}),
            false,
            None,
        )
        .await
    }

    async fn commit_result(
        &self,
        agent: &str,
        turn: u64,
        step: u64,
        call: &Call,
        call_seq: u64,
        result: &ToolResult,
    ) -> Result<u64> {
        let message =
            msg::tool_result(&new_id(), &call.id, result.content.clone(), result.is_error);
        let mut data = json!({"turn": turn, "step": step, "message": message});
        if let Some(info) = result.error.as_ref().and_then(|e| e.info.as_ref()) {
            data["error"] = json!(info);
        }
        if let Some(meta) = &result.meta {
            data["meta"] = meta.clone();
        }
        self.append(agent, event::TOOL_RESULT, data, true, Some(vec![call_seq]))
            .await
    }
}

/// One tool call of the model's answer (a `tool-call` block).
#[derive(Debug, Deserialize)]
pub(crate) struct Call {
    #[serde(default)]
    id: String,
    #[serde(default)]
    name: String,
    /// The model's arguments text, logged as it came.
    #[serde(default)]
    arguments: Value,
}

impl Call {
    /// The tool-call blocks of an answer.
    fn of(blocks: &[Value]) -> Vec<Call> {
        blocks
            .iter()
            .filter(|b| b["type"] == "tool-call")
            .filter_map(|b| Call::deserialize(b).ok())
            .collect()
    }

    /// The registry's `exec` of this call: its arguments parsed (blank is
    /// no arguments; text that is not JSON goes to the tool as a string,
    /// for the registry's schema check to refuse).
    fn exec(&self, agent: &str, cwd: Option<String>) -> Exec {
        let raw = self.arguments.as_str().unwrap_or_default();
        let arguments = if raw.trim().is_empty() {
            json!({})
        } else {
            serde_json::from_str(raw).unwrap_or_else(|_| json!(raw))
        };
        Exec {
            call_id: Some(self.id.clone()),
            agent: Some(agent.to_owned()),
            cwd,
            ..Exec::new(self.name.clone(), arguments)
        }
    }
}

/// A call dispatching on its own task.
type Dispatching = tokio::task::JoinHandle<Result<Dispatched<ToolResult>>>;

/// One started call of a group: settled (with the stage still owed), or
/// dispatching.
enum Slot {
    Settled(Tail, Box<ToolResult>),
    Running(Exec, Dispatching),
}

/// What a settled result still owes the registry: post-execute (and the
/// result emit), only the emit, or nothing (the registry itself failed).
enum Tail {
    Post(Exec),
    Finish(Exec),
    None,
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
        content: vec![msg::text(text)],
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
