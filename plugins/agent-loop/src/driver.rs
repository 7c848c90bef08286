//! The turn and step algorithm (reference dsh-core §4.4–4.6); a step's
//! tool calls run in `tool_calls.rs`, in the order `schedule.rs` decides.

use std::future::Future;
use std::rc::Rc;

use dsh_sdk::api::agent_loop::{
    AgentError, AgentRequest, InboxClaimed, PreStep, PreStepDecision, PreStepKind, RequestError,
    RequestErrorDecision, RetryPolicy, StatusChanged, TurnStopping,
};
use dsh_sdk::api::agents::RunStatus;
use dsh_sdk::api::llm::{Llm, StreamRequest};
use dsh_sdk::api::sessions::{NewEvent, Sessions};
use dsh_sdk::api::system_prompt::{AssembleParams, Assembly, SystemPrompt};
use dsh_sdk::api::tools::{ScopeParams, Tools};
use dsh_sdk::names::{bus, code, tools};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::assembler::{AssembleError, BlockAssembler};
use dsh_sdk::vocab::history;
use dsh_sdk::vocab::message::{ContentBlock, MessageSource};
use dsh_sdk::vocab::records::{
    AdapterDefaults, AssistantChunk, AssistantMessage, CallConfig, CancelCause, HeaderReason,
    RequestContext, RequestHeader, RequestHeaderRecord, SpliceTarget, StepBoundary, TurnEnd,
    TurnEndReason, TurnStart,
};
use dsh_sdk::vocab::{
    event, Chunk, Extra, FinishReason, LlmFailure, Message, SurfaceOp, ToolSchema,
};
use dsh_sdk::{new_id, CallStream, Payload};
use serde::Deserialize;
// `Value` stays where data is open: the call config an `agent/request`
// listener may extend (sent on to the adapter as it is), the variables of
// the prompt assembly, and the waterfall payloads before they are read.
use serde_json::{Map, Value};

use crate::tool_calls::Call;
use crate::{Abort, Inbox, Loop, MAX_STEPS_FIELD, NEXT_STEP, NEXT_TURN, STEP_LIMIT};

/// Told when a turn has claimed its first batch.
pub(crate) type FirstClaim = tokio::sync::oneshot::Sender<()>;

/// How a step ended: `Some(reason)` ends the turn unless more input is
/// pending; `None` means tool results owe the model a response.
type StepEnd = Option<TurnEndReason>;

/// The call config of a request, as the `agent/request` waterfall left
/// it: whole, for the adapter (listeners may add fields of their own), and
/// read as a call config, for the logged header and the route; then with
/// the model's defaults filled in (`Loop::resolve_call`).
struct Route {
    config: Map<String, Value>,
    call: CallConfig,
    /// Which of the config's fields are the model's defaults, not asked
    /// for (the header's `adapterDefaults`).
    adapter_defaults: AdapterDefaults,
    /// The model's context window, when its adapter knows it.
    context_window: Option<u64>,
}

/// The route fields of a call config, read before the rest: a config
/// without a route fails with the original's message.
#[derive(Deserialize)]
struct Named {
    #[serde(default)]
    provider: Option<String>,
    #[serde(default)]
    model: Option<String>,
}

/// The `config` of an `agent/request` payload, as the last listener passed
/// it on.
#[derive(Deserialize)]
struct PassedConfig {
    config: Value,
}

/// The `messages` of an `agent/pre-step` payload, as the last listener
/// passed it on.
#[derive(Deserialize)]
struct PassedMessages {
    messages: Vec<Message>,
}

/// What a model stream produced: its blocks so far, the seqs of the
/// chunks logged, and whether an abort cut it short.
#[derive(Default)]
struct Answer {
    assembler: BlockAssembler,
    chunk_seqs: Vec<u64>,
    interrupted: bool,
}

/// A stream item read as a chunk. The set of chunks is closed (the
/// original's consumers end in `assertNever`): an item that is not one
/// fails the step before it is logged.
fn chunk_of(item: Result<Payload>) -> Result<Chunk, Stop> {
    item?.parse::<Chunk>().map_err(|e| {
        Stop::Failed(Error::new(
            codes::INVALID_PAYLOAD,
            format!("the model stream sent an item that is not a stream chunk: {e}"),
        ))
    })
}

/// A stream whose blocks cannot be assembled fails the turn, as the
/// original's assembler throws.
fn unassembled(e: AssembleError) -> Stop {
    Stop::Failed(Error::new(codes::UNKNOWN, e.to_string()))
}

/// The reason of a turn the abort ended (its first cause; an abort always
/// has one, `user` only stands in for the impossible).
fn aborted(abort: &Abort) -> TurnEndReason {
    let reason = abort.cause.borrow().clone().unwrap_or(CancelCause::User);
    TurnEndReason::Aborted { reason }
}

/// A failure that ends the turn: an abort, an error, or the model's
/// failure, logged whole in the `turn/end` (status, retry-after and request
/// id included, as the original logs `e.failure`).
pub(crate) enum Stop {
    Aborted,
    Failed(Error),
    Model(LlmFailure),
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
    pub(crate) async fn unless_aborted<T>(
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
        self.notify(bus::AGENT_ERROR, &error);
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
        self.notify(bus::AGENT_STATUS, &idle);
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
            .append_record(agent, event::TURN_START, &TurnStart::new(turn))
            .await
        {
            self.report_error(agent, turn, Some(0), e);
            return false;
        }
        if let Some(a) = self.agents.borrow_mut().get_mut(agent) {
            a.last_turn = turn;
        }
        let mut ends: StepEnd = None;
        let outcome = self
            .turn_body(agent, turn, &abort, &mut ends, claimed)
            .await;
        let reason = match outcome {
            Ok(()) => ends.unwrap_or(TurnEndReason::Completed),
            Err(Stop::Aborted) => aborted(&abort),
            Err(Stop::Failed(_) | Stop::Model(_)) if abort.is_aborted() => aborted(&abort),
            Err(Stop::Failed(e)) => {
                let error = LlmFailure::new(&e.code, e.message.clone());
                self.report_error(agent, turn, None, e);
                TurnEndReason::Error { error }
            }
            Err(Stop::Model(error)) => {
                let e = Error::new(&error.code, error.message.clone());
                self.report_error(agent, turn, None, e);
                TurnEndReason::Error { error }
            }
        };
        let end = TurnEnd::new(turn, reason.clone());
        if let Err(e) = self.append_record(agent, event::TURN_END, &end).await {
            self.report_error(agent, turn, None, e);
        }
        let mut agents = self.agents.borrow_mut();
        let Some(a) = agents.get_mut(agent) else {
            return false;
        };
        let completed = matches!(reason, TurnEndReason::Completed | TurnEndReason::MaxTokens);
        a.last_end = Some(reason);
        let again = completed && !abort.is_aborted() && a.inbox.has_pending();
        if again {
            a.abort = Some(Rc::default());
        }
        again
    }

    /// `deriveMessages()`, incrementally: only surface events appended since
    /// the last request are fetched; a `replace` falls back to a full derive.
    /// Messages are kept as the JSON text they were logged as, so a request
    /// copies the history instead of parsing and re-encoding it: the one
    /// place the loop keeps messages untyped, on purpose, for speed (a
    /// long session's history is most of every request).
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
    fn open_stream(
        &self,
        agent: &str,
        config: &Map<String, Value>,
        assembly: &Assembly,
    ) -> Result<CallStream> {
        let mut config = config.clone();
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

    async fn claim(&self, agent: &str, target: SpliceTarget, turn: u64) -> Result<Vec<Message>> {
        let lock = self.inbox_lock(agent)?;
        let _ordered = lock.lock().await;
        let (steps, turns) = {
            let agents = self.agents.borrow();
            let a = agents.get(agent).ok_or_else(|| Error::msg("agent gone"))?;
            let take_turn = target == NEXT_TURN && !a.inbox.next_turn.is_empty();
            (a.inbox.next_step.len(), usize::from(take_turn))
        };
        if steps > 0 {
            let splice = Inbox::removal(NEXT_STEP, steps, None);
            self.append_record(agent, event::INBOX_SPLICED, &splice)
                .await?;
        }
        if turns > 0 {
            let splice = Inbox::removal(NEXT_TURN, 1, None);
            self.append_record(agent, event::INBOX_SPLICED, &splice)
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
            self.notify(bus::AGENT_INBOX_CLAIMED, &claim);
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
        // supplies it. (Variables are open: listeners add their own.)
        let var = |v: String| {
            if v.is_empty() {
                Value::Null
            } else {
                Value::String(v)
            }
        };
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
    async fn runtime_context(&self, agent: &str, assembly: &Assembly) -> Result<Option<Message>> {
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
            a.runtime_context.restore(&events)?;
        } else {
            a.runtime_context.follow(&events)?;
        }
        a.runtime_context
            .project(&assembly.context, &assembly.context_sections)
    }

    async fn turn_body(
        &self,
        agent: &str,
        turn: u64,
        abort: &Abort,
        ends: &mut StepEnd,
        mut first_claim: Option<FirstClaim>,
    ) -> Result<(), Stop> {
        let mut target = NEXT_TURN;
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
                *ends = Some(TurnEndReason::Blocked);
                return Ok(());
            }
            let messages = decision.messages;
            if ends.is_some() && messages.is_empty() {
                return Ok(());
            }
            if step == 0 && messages.is_empty() {
                *ends = Some(TurnEndReason::Completed);
                return Ok(());
            }
            self.append_record(agent, event::STEP_START, &StepBoundary::new(turn, next))
                .await?;
            step = next;
            let result = self
                .step_body(agent, (turn, step), &assembly, &messages, abort)
                .await;
            self.append_record(agent, event::STEP_END, &StepBoundary::new(turn, step))
                .await?;
            let end = result?;
            // `max-tokens` is sticky within a turn.
            if !matches!(ends, Some(TurnEndReason::MaxTokens)) {
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
                let stopping = TurnStopping {
                    agent: agent.to_owned(),
                    turn,
                };
                self.ctx
                    .dispatch_about(bus::AGENT_TURN_STOPPING, &stopping)
                    .serial()
                    .await?;
                self.check(abort)?;
                if !pending_step() {
                    return Ok(());
                }
            }
            target = NEXT_STEP;
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
        claimed: Vec<Message>,
        context: Option<Message>,
        abort: &Abort,
    ) -> Result<PreStepDecision<Message>> {
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
            .dispatch_about(bus::AGENT_PRE_STEP, &payload)
            .waterfall(|p| async move {
                let PassedMessages { mut messages } =
                    PassedMessages::deserialize(p).map_err(|e| {
                        Error::new(
                            codes::INVALID_PAYLOAD,
                            format!(
                                "an `{}` listener passed on messages that are not messages: {e}",
                                bus::AGENT_PRE_STEP
                            ),
                        )
                    })?;
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
        messages: &[Message],
        abort: &Abort,
    ) -> Result<StepEnd, Stop> {
        self.log_step_input(agent, messages).await?;
        loop {
            let route = self.request_config(agent, at).await?;
            let route = self.resolve_call(route, abort).await?;
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
            if let Some(failure) = answer.assembler.failure() {
                self.retry_or_fail(agent, at, &route, failure, abort)
                    .await?;
                continue;
            }
            return self.commit_answer(agent, at, &route, answer, abort).await;
        }
    }

    /// The step's input messages enter the log (and so the history).
    async fn log_step_input(&self, agent: &str, messages: &[Message]) -> Result<()> {
        for m in messages {
            let event = NewEvent::surface(event::USER_MESSAGE, m, SurfaceOp::Append, None)?;
            self.append(agent, event).await?;
        }
        Ok(())
    }

    /// The call config of a request: the route of the step's assembly, the
    /// agent's `maxTokens`, and the reasoning effort its last logged header
    /// chose, else its options' (`seed_effort`), through the
    /// `agent/request` waterfall; a route without a provider or a model
    /// fails the turn.
    async fn request_config(&self, agent: &str, (turn, step): (u64, u64)) -> Result<Route> {
        let seed = {
            let agents = self.agents.borrow();
            let a = agents.get(agent).ok_or_else(|| Error::msg("agent gone"))?;
            let (provider, model) = a
                .assembled
                .clone()
                .unwrap_or_else(|| (a.provider.clone(), a.model.clone()));
            let options = (a.provider.as_str(), a.model.as_str());
            let reasoning_effort = seed_effort(
                a.logged_header.as_ref(),
                options,
                a.reasoning_effort.as_deref(),
                (&provider, &model),
            );
            CallConfig {
                provider,
                model,
                reasoning_effort,
                temperature: None,
                max_tokens: a.max_tokens,
                stop: None,
                extra: Extra::new(),
            }
        };
        let payload = AgentRequest::<CallConfig> {
            agent: agent.to_owned(),
            turn,
            step,
            config: seed,
        };
        let config = self
            .ctx
            .dispatch_about(bus::AGENT_REQUEST, &payload)
            .waterfall(|p| async move {
                let PassedConfig { config } = PassedConfig::deserialize(p)?;
                Ok(config)
            })
            .await?;
        let refused = |why: String| {
            Error::new(
                codes::INVALID_PAYLOAD,
                format!(
                    "the `{}` waterfall answered a call config {why}",
                    bus::AGENT_REQUEST
                ),
            )
        };
        if !config.is_object() {
            return Err(refused(format!("that is not an object: {config}")));
        }
        let named = Named::deserialize(&config)
            .map_err(|e| refused(format!("whose route is not text: {e}")))?;
        let routed = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
        if !routed(&named.provider) || !routed(&named.model) {
            return Err(Error::new(codes::UNKNOWN, format!(
                "agent \"{agent}\" has no provider/model: set AgentOptions.provider and AgentOptions.model or supply both via the agent/request waterfall"
            )));
        }
        let call = CallConfig::deserialize(&config)
            .map_err(|e| refused(format!("that is not a call config: {e}")))?;
        let Value::Object(config) = config else {
            return Err(refused(format!("that is not an object: {config}")));
        };
        Ok(Route {
            config,
            call,
            adapter_defaults: AdapterDefaults::default(),
            context_window: None,
        })
    }

    /// `route` checked against its model's metadata (`llm.resolveCallConfig`,
    /// the original's `prepareCall`): the model's default `maxTokens` and
    /// `reasoningEffort` filled in where the config set none (and marked as
    /// adapter defaults), and its context window. A route no adapter serves
    /// goes on as proposed (an `llm/stream` listener may serve it); any
    /// other refusal (`UNSUPPORTED_REASONING_EFFORT`, metadata an adapter
    /// got wrong) fails the turn. A cancel or the agent's disposal drops the
    /// lookup, however long the adapter takes.
    async fn resolve_call(&self, mut route: Route, abort: &Abort) -> Result<Route, Stop> {
        let llm = Llm::new(&self.ctx);
        let resolved = match self
            .unless_aborted(abort, llm.resolve_call_config(&route.call))
            .await?
        {
            Ok(resolved) => resolved,
            Err(e) if e.code == code::NO_ADAPTER => return Ok(route),
            Err(e) => return Err(Stop::Failed(e)),
        };
        let marked = resolved.adapter_defaults;
        if marked.max_tokens == Some(true) {
            if let Some(cap) = resolved.config.max_tokens {
                route.call.max_tokens = Some(cap);
                route
                    .config
                    .insert("maxTokens".to_owned(), Value::from(cap));
            }
        }
        if marked.reasoning_effort == Some(true) {
            if let Some(effort) = resolved.config.reasoning_effort {
                route
                    .config
                    .insert("reasoningEffort".to_owned(), Value::from(effort.as_str()));
                route.call.reasoning_effort = Some(effort);
            }
        }
        route.adapter_defaults = marked;
        route.context_window = resolved.context.map(|c| c.context_window);
        Ok(route)
    }

    /// Logs `request/header` when this is the agent's first request or
    /// the header changed, and `request/context` when the route changed.
    async fn log_request_header(
        &self,
        agent: &str,
        route: &Route,
        assembly: &Assembly,
    ) -> Result<()> {
        let tools = assembly
            .tools
            .iter()
            .map(ToolSchema::deserialize)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                Error::new(
                    codes::INVALID_PAYLOAD,
                    format!("the prompt assembly offers a tool that is not a tool schema: {e}"),
                )
            })?;
        let header = RequestHeader {
            config: route.call.clone(),
            adapter_defaults: Some(route.adapter_defaults.clone()),
            system: Some(assembly.system.clone()),
            tools: Some(tools),
            extra: Extra::new(),
        }
        .canonical();
        let (first, resumed, logged, logged_ctx) = {
            let agents = self.agents.borrow();
            let a = agents.get(agent);
            (
                a.is_none_or(|a| a.first_request),
                a.is_some_and(|a| a.resumed_header),
                a.and_then(|a| a.logged_header.clone()),
                a.and_then(|a| a.logged_context.clone()),
            )
        };
        if first || !logged.as_ref().is_some_and(|l| l.same_as(&header)) {
            let reason = if !first {
                HeaderReason::Change
            } else if resumed {
                HeaderReason::Resume
            } else {
                HeaderReason::Initial
            };
            let record = RequestHeaderRecord {
                header: header.clone(),
                reason,
                extra: Extra::new(),
            };
            self.append_record(agent, event::REQUEST_HEADER, &record)
                .await?;
        }
        // Absent capacity is recorded too: it clears an older window.
        let context = RequestContext {
            provider: route.call.provider.clone(),
            model: route.call.model.clone(),
            context_window: route.context_window,
            extra: Extra::new(),
        };
        if logged_ctx.as_ref() != Some(&context) {
            self.append_record(agent, event::REQUEST_CONTEXT, &context)
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
                item = stream.next_payload() => item,
            };
            let Some(item) = item else { break };
            let mut batch = vec![chunk_of(item)?];
            while let Some(more) = stream.try_next_payload() {
                batch.push(chunk_of(more)?);
            }
            // Fed first, then moved into their records (the assembler is
            // dropped if the append fails).
            for chunk in &batch {
                answer.assembler.push(chunk);
            }
            let events = batch
                .into_iter()
                .map(|chunk| {
                    let record = AssistantChunk {
                        turn,
                        step,
                        chunk,
                        extra: Extra::new(),
                    };
                    NewEvent::typed(event::ASSISTANT_CHUNK, &record)
                })
                .collect::<Result<Vec<_>>>()?;
            let seqs = Sessions::new(&self.ctx).append_many(agent, events).await?;
            answer.chunk_seqs.extend(seqs);
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
            let message = assistant_message(route, blocks, None);
            self.append_assistant(agent, at, message, answer, true)
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
        failure: &LlmFailure,
        abort: &Abort,
    ) -> Result<(), Stop> {
        let payload = RequestError::<&LlmFailure> {
            agent: agent.to_owned(),
            turn,
            step,
            provider: route.call.provider.clone(),
            failure,
            retry_policy: RetryPolicy::default(),
        };
        let decide = self
            .ctx
            .dispatch_about(bus::AGENT_REQUEST_ERROR, &payload)
            .waterfall(|_| async { Ok(Value::Null) });
        let action = self.unless_aborted(abort, decide).await??;
        let decision = Option::<RequestErrorDecision>::deserialize(action).map_err(|e| {
            Error::new(
                codes::INVALID_PAYLOAD,
                format!(
                    "an `{}` listener answered no decision: {e}",
                    bus::AGENT_REQUEST_ERROR
                ),
            )
        })?;
        if decision.is_some_and(|d| d.is_retry()) {
            return Ok(());
        }
        Err(Stop::Model(failure.clone()))
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
        let max_tokens = answer.assembler.finish() == FinishReason::MaxTokens;
        // The replay state is kept with the message, as the original does,
        // for the adapter to replay this answer (pruned with the tool calls
        // a cut dropped).
        let (blocks, replay_state) = answer.assembler.assemble().map_err(unassembled)?;
        let calls = Call::of(&blocks);
        let message = assistant_message(route, blocks, replay_state);
        self.append_assistant(agent, (turn, step), message, answer, false)
            .await?;
        if max_tokens {
            return Ok(Some(TurnEndReason::MaxTokens));
        }
        if calls.is_empty() {
            return Ok(Some(TurnEndReason::Completed));
        }
        let concluded = self
            .run_tool_calls(agent, (turn, step), &calls, abort)
            .await?;
        if abort.is_aborted() {
            return Err(Stop::Aborted);
        }
        // A tool that concluded the turn ends it after this step's
        // results, unless next-step input (its contexts) is pending.
        Ok(concluded.then_some(TurnEndReason::Completed))
    }

    /// Logs the assistant message of a step with the answer's usage,
    /// citing its chunks.
    async fn append_assistant(
        &self,
        agent: &str,
        (turn, step): (u64, u64),
        message: Message,
        answer: Answer,
        interrupted: bool,
    ) -> Result<u64> {
        let record = AssistantMessage {
            turn,
            step,
            message,
            usage: answer.assembler.usage().cloned(),
            interrupted: interrupted.then_some(true),
            extra: Extra::new(),
        };
        let event = NewEvent::surface(
            event::ASSISTANT_MESSAGE,
            &record,
            SurfaceOp::Append,
            Some(answer.chunk_seqs),
        )?;
        self.append(agent, event).await
    }
}

/// The reasoning effort a request on `provider`/`model` starts from: the
/// one `logged` (the agent's last request header, or on its first request
/// the session's) chose, when it was for the same provider and model and
/// was asked for, not the model's default (the original's rule: a default
/// is resolved afresh, and another model's effort may not be its).
fn restored_effort(logged: Option<&RequestHeader>, provider: &str, model: &str) -> Option<String> {
    let logged = logged?;
    let defaulted = logged
        .adapter_defaults
        .as_ref()
        .is_some_and(|d| d.reasoning_effort == Some(true));
    if defaulted || logged.config.provider != provider || logged.config.model != model {
        return None;
    }
    logged.config.reasoning_effort.clone()
}

/// The reasoning effort a request on `route` (provider, model) starts
/// from: the one the agent's log restores (`restored_effort`), else the
/// effort of the agent's options when `route` is the options' route
/// (`options`): an effort chosen for one model is never sent to another,
/// so `agents.selectModel` to another route drops it.
fn seed_effort(
    logged: Option<&RequestHeader>,
    options: (&str, &str),
    options_effort: Option<&str>,
    route: (&str, &str),
) -> Option<String> {
    restored_effort(logged, route.0, route.1)
        .or_else(|| (options == route).then(|| options_effort.map(str::to_owned))?)
}

/// The assistant message of `blocks` from the request's route, with the
/// adapter's replay state when it left one.
fn assistant_message(
    route: &Route,
    blocks: Vec<ContentBlock>,
    replay_state: Option<Value>,
) -> Message {
    let mut message = Message::assistant(
        new_id(),
        blocks,
        route.call.provider.as_str(),
        route.call.model.as_str(),
    );
    if let MessageSource::Model(source) = &mut message.source {
        source.replay_state = replay_state;
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::vocab::records::AdapterDefaults;

    fn header(model: &str, effort: Option<&str>, defaulted: bool) -> RequestHeader {
        RequestHeader {
            config: CallConfig {
                provider: "p".into(),
                model: model.into(),
                reasoning_effort: effort.map(str::to_owned),
                temperature: None,
                max_tokens: None,
                stop: None,
                extra: Extra::new(),
            },
            adapter_defaults: Some(AdapterDefaults {
                reasoning_effort: defaulted.then_some(true),
                max_tokens: None,
            }),
            system: None,
            tools: None,
            extra: Extra::new(),
        }
    }

    /// The original's seed rule: a chosen effort of the same provider and
    /// model is restored; a default, or another route's, is not.
    #[test]
    fn only_a_chosen_effort_of_the_same_route_is_restored() {
        let chosen = header("m", Some("max"), false);
        assert_eq!(
            restored_effort(Some(&chosen), "p", "m").as_deref(),
            Some("max")
        );
        assert_eq!(restored_effort(Some(&chosen), "p", "other"), None);
        assert_eq!(restored_effort(Some(&chosen), "q", "m"), None);
        let defaulted = header("m", Some("high"), true);
        assert_eq!(restored_effort(Some(&defaulted), "p", "m"), None);
        assert_eq!(
            restored_effort(Some(&header("m", None, false)), "p", "m"),
            None
        );
        assert_eq!(restored_effort(None, "p", "m"), None);
    }

    /// The options' effort seeds a request on the options' route alone,
    /// under an effort the log restores.
    #[test]
    fn the_options_effort_seeds_its_own_route_only() {
        let route = ("p", "m");
        assert_eq!(
            seed_effort(None, route, Some("high"), route).as_deref(),
            Some("high")
        );
        assert_eq!(seed_effort(None, route, Some("high"), ("p", "other")), None);
        assert_eq!(seed_effort(None, route, None, route), None);
        let chosen = header("m", Some("max"), false);
        assert_eq!(
            seed_effort(Some(&chosen), route, Some("high"), route).as_deref(),
            Some("max")
        );
        let defaulted = header("m", Some("low"), true);
        assert_eq!(
            seed_effort(Some(&defaulted), route, Some("high"), route).as_deref(),
            Some("high")
        );
    }
}
