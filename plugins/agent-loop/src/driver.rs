//! The turn and step algorithm (reference dsh-core §4.4–4.6, §5.4).

use std::future::Future;
use std::rc::Rc;

use dsh_sdk::names::{bus, code, llm, service, sessions, system_prompt, tools};
use dsh_sdk::new_id;
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::history::{self, SurfaceTail};
use dsh_sdk::vocab::{event, header_equals, msg, BlockAssembler};
use dsh_sdk::Payload;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Map;

use crate::{Abort, Loop, MAX_STEPS_FIELD, NEXT_STEP, STEP_LIMIT};

/// Told when a turn has claimed its first batch.
pub(crate) type FirstClaim = tokio::sync::oneshot::Sender<()>;

/// How a step ended: `Some(kind)` ends the turn unless more input is
/// pending; `None` means tool results owe the model a response.
type StepEnd = Option<&'static str>;

/// The `llm.stream` request (reference dsh-core §3.2 `LlmRequest`), keys in
/// the order the loop has always sent them.
#[derive(Serialize)]
struct StreamRequest<'a> {
    #[serde(flatten)]
    config: &'a Map<String, Value>,
    messages: &'a [Box<RawValue>],
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a Value>,
    #[serde(rename = "sessionId")]
    session_id: &'a str,
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
        self.notify(
            agent,
            bus::AGENT_STATUS,
            json!({"agent": agent, "status": "idle"}),
        );
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
            self.notify(
                agent,
                bus::AGENT_ERROR,
                json!({"agent": agent, "turn": turn, "step": 0, "error": e}),
            );
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
                self.notify(
                    agent,
                    bus::AGENT_ERROR,
                    json!({"agent": agent, "turn": turn, "error": e}),
                );
                json!({"kind": "error", "error": {"message": e.message, "code": e.code}})
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
            self.notify(
                agent,
                bus::AGENT_ERROR,
                json!({"agent": agent, "turn": turn, "error": e}),
            );
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
        let sessions = self.ctx.service(service::SESSIONS);
        let from = self.agents.borrow().get(agent).map_or(0, |a| a.history_seq);
        let tail: SurfaceTail = sessions
            .call_as(sessions::SURFACE, json!({"id": agent, "from": from}))
            .await?;
        let seq = tail.seq;
        let fresh = tail.replaced || from == 0;
        let messages: Vec<Box<RawValue>> = if fresh {
            sessions
                .call_as(sessions::DERIVE, json!({"id": agent}))
                .await?
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

    /// The `llm.stream` request of a step, as JSON text: the call config,
    /// then the history (copied as logged), the system prompt, the tools
    /// and the session id.
    fn stream_request(
        &self,
        agent: &str,
        config: &Value,
        system: &str,
        tools: &Value,
    ) -> Result<Payload> {
        let mut config = config
            .as_object()
            .cloned()
            .ok_or_else(|| Error::msg(format!("the call config is not an object: {config}")))?;
        for key in ["messages", "system", "tools", "sessionId"] {
            config.shift_remove(key);
        }
        let agents = self.agents.borrow();
        let a = agents.get(agent).ok_or_else(|| Error::msg("agent gone"))?;
        let request = StreamRequest {
            config: &config,
            messages: &a.history,
            system: (!system.is_empty()).then_some(system),
            tools: tools
                .as_array()
                .is_some_and(|t| !t.is_empty())
                .then_some(tools),
            session_id: agent,
        };
        Ok(Payload::json(&request)?)
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
                json!({"target": "next-step", "start": 0, "removedCount": steps, "inserted": []}),
                false,
                None,
            )
            .await?;
        }
        if turns > 0 {
            self.append(
                agent,
                event::INBOX_SPLICED,
                json!({"target": "next-turn", "start": 0, "removedCount": 1, "inserted": []}),
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
            self.notify(
                agent,
                bus::AGENT_INBOX_CLAIMED,
                json!({"agent": agent, "message": m, "turn": turn}),
            );
        }
        Ok(claimed)
    }

    async fn assemble(&self, agent: &str) -> Result<Value> {
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
        let (provider, model) = (var(provider), var(model));
        let tools = self
            .ctx
            .service(service::TOOLS)
            .call(tools::SCHEMAS, json!({"scope": agent}))
            .await?;
        self.ctx
            .service(service::SYSTEM_PROMPT)
            .call(
                system_prompt::ASSEMBLE,
                json!({"scope": agent, "tools": tools,
                       "variables": {"provider": provider, "model": model, "cwd": cwd}}),
            )
            .await
    }

    /// The runtime-context snapshot message this step must append, if the
    /// assembly's differs from the one the log retains.
    async fn runtime_context(&self, agent: &str, assembly: &Value) -> Result<Option<Value>> {
        let from = self
            .agents
            .borrow()
            .get(agent)
            .map_or(0, |a| a.runtime_context.seen);
        let events: Vec<dsh_sdk::vocab::SessionEvent> = serde_json::from_value(
            self.ctx
                .service(service::SESSIONS)
                .call(sessions::EVENTS, json!({"id": agent, "from": from}))
                .await?,
        )?;
        let mut agents = self.agents.borrow_mut();
        let a = agents
            .get_mut(agent)
            .ok_or_else(|| Error::msg("agent gone"))?;
        if from == 0 {
            a.runtime_context.restore(&events);
        } else {
            a.runtime_context.follow(&events);
        }
        let current = assembly["context"].as_str().unwrap_or_default();
        Ok(a.runtime_context
            .project(current, &assembly["contextSections"]))
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
                .ctx
                .dispatch(bus::AGENT_PRE_STEP)
                .scope(agent)
                .waterfall(
                    json!({"agent": agent, "messages": claimed, "turn": turn, "step": next}),
                    |p| async move {
                        let mut messages = p["messages"].as_array().cloned().unwrap_or_default();
                        messages.extend(context);
                        Ok(json!({"kind": "enter", "messages": messages}))
                    },
                )
                .await?;
            self.check(abort)?;
            if decision["kind"] == "reject" {
                *ends = Some("blocked");
                return Ok(());
            }
            let messages = decision["messages"].as_array().cloned().unwrap_or_default();
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
                .step_body(agent, turn, step, &assembly, &messages, abort)
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
                    .serial(json!({"agent": agent, "turn": turn}))
                    .await?;
                self.check(abort)?;
                if !pending_step() {
                    return Ok(());
                }
            }
            target = "next-step";
        }
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

    async fn step_body(
        &self,
        agent: &str,
        turn: u64,
        step: u64,
        assembly: &Value,
        messages: &[Value],
        abort: &Abort,
    ) -> Result<StepEnd, Stop> {
        for m in messages {
            self.append(agent, event::USER_MESSAGE, m.clone(), true, None)
                .await?;
        }
        let system = assembly["system"].as_str().unwrap_or_default().to_owned();
        let tools = assembly["tools"].clone();
        loop {
            let (seed, first) = {
                let agents = self.agents.borrow();
                let a = agents.get(agent).ok_or_else(|| Error::msg("agent gone"))?;
                let (provider, model) = a
                    .assembled
                    .clone()
                    .unwrap_or_else(|| (a.provider.clone(), a.model.clone()));
                let mut seed = json!({"provider": provider, "model": model});
                if let Some(mt) = a.max_tokens {
                    seed["maxTokens"] = json!(mt);
                }
                (seed, a.first_request)
            };
            let config = self
                .ctx
                .dispatch(bus::AGENT_REQUEST)
                .scope(agent)
                .waterfall(
                    json!({"agent": agent, "turn": turn, "step": step, "config": seed}),
                    |p| async move { Ok(p["config"].clone()) },
                )
                .await?;
            let provider = config["provider"].as_str().unwrap_or_default().to_owned();
            let model = config["model"].as_str().unwrap_or_default().to_owned();
            if provider.is_empty() || model.is_empty() {
                return Err(Error::new(codes::UNKNOWN, format!(
                    "agent \"{agent}\" has no provider/model: set AgentOptions.provider and AgentOptions.model or supply both via the agent/request waterfall"
                )).into());
            }
            let mut header = json!({"config": config});
            if !system.is_empty() {
                header["system"] = json!(system);
            }
            if tools.as_array().is_some_and(|t| !t.is_empty()) {
                header["tools"] = tools.clone();
            }
            let logged = self
                .agents
                .borrow()
                .get(agent)
                .and_then(|a| a.logged_header.clone());
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
            let context = json!({"provider": provider, "model": model});
            let logged_ctx = self
                .agents
                .borrow()
                .get(agent)
                .and_then(|a| a.logged_context.clone());
            if logged_ctx.as_ref() != Some(&context) {
                self.append(agent, event::REQUEST_CONTEXT, context.clone(), false, None)
                    .await?;
            }
            if let Some(a) = self.agents.borrow_mut().get_mut(agent) {
                a.first_request = false;
                a.logged_header = Some(header.clone());
                a.logged_context = Some(context);
            }
            self.refresh_history(agent).await?;
            let request = self.stream_request(agent, &config, &system, &tools)?;

            // A cancel from an `agent/request` listener (or during the
            // appends above) stops the step before the model is called.
            self.check(abort)?;
            let mut assembler = BlockAssembler::default();
            let mut chunk_seqs: Vec<u64> = Vec::new();
            let mut stream = self
                .ctx
                .service(service::LLM)
                .stream_payload(llm::STREAM, request);
            let mut interrupted = false;
            loop {
                let item = tokio::select! {
                    _ = abort.notify.notified() => { interrupted = true; break; }
                    item = stream.next() => item,
                };
                let Some(item) = item else { break };
                let first_chunk = item.map_err(Stop::Failed)?;
                let mut batch = vec![first_chunk];
                while let Some(more) = stream.try_next() {
                    batch.push(more.map_err(Stop::Failed)?);
                }
                let events: Vec<Value> = batch
                    .iter()
                    .map(|c| json!({"type": event::ASSISTANT_CHUNK, "data": {"turn": turn, "step": step, "chunk": c}}))
                    .collect();
                let seqs = self
                    .ctx
                    .service(service::SESSIONS)
                    .call(
                        sessions::APPEND_MANY,
                        json!({"id": agent, "events": events}),
                    )
                    .await?;
                chunk_seqs.extend(
                    seqs.as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_u64),
                );
                for c in &batch {
                    assembler.push(c);
                }
                if abort.is_aborted() {
                    interrupted = true;
                    break;
                }
            }
            drop(stream);
            if interrupted || abort.is_aborted() {
                let blocks = assembler.interrupted_blocks();
                if !blocks.is_empty() {
                    let route = (provider.as_str(), model.as_str());
                    let at = (turn, step);
                    self.append_assistant(agent, at, route, blocks, &assembler, chunk_seqs, true)
                        .await?;
                }
                return Err(Stop::Aborted);
            }
            let kind = assembler.finish_kind();
            if kind == "error" || kind == "aborted" {
                let failure = assembler
                    .finish
                    .as_ref()
                    .map(|f| f["failure"].clone())
                    .unwrap_or(Value::Null);
                let decide = self
                    .ctx
                    .dispatch(bus::AGENT_REQUEST_ERROR)
                    .scope(agent)
                    .waterfall(
                        json!({"agent": agent, "turn": turn, "step": step, "provider": provider, "failure": failure,
                               "retryPolicy": {"mode": "normal", "maxRetries": 5, "initialDelayMs": 500, "maxDelayMs": 10000, "jitterRatio": 0.1}}),
                        |_| async { Ok(Value::Null) },
                    );
                let action = self.unless_aborted(abort, decide).await??;
                if action["kind"] == "retry" {
                    continue;
                }
                let code = failure["code"].as_str().unwrap_or(codes::UNKNOWN);
                let message = failure["message"]
                    .as_str()
                    .unwrap_or("the model request failed");
                return Err(Error::new(code, message).into());
            }
            let blocks = assembler.blocks();
            let calls: Vec<Value> = blocks
                .iter()
                .filter(|b| b["type"] == "tool-call")
                .cloned()
                .collect();
            let route = (provider.as_str(), model.as_str());
            self.append_assistant(
                agent,
                (turn, step),
                route,
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
            return Ok(concluded.then_some("completed"));
        }
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
        calls: &[Value],
        abort: &Abort,
    ) -> Result<bool> {
        let mut concluded = false;
        let cwd = self
            .agents
            .borrow()
            .get(agent)
            .map(|a| a.cwd.clone())
            .unwrap_or_default();
        let tools = self.ctx.service(service::TOOLS);
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
            let mode = tools
                .call(
                    tools::MODE,
                    json!({"name": calls[i]["name"], "scope": agent}),
                )
                .await
                .unwrap_or(json!("exclusive"));
            let mut group = vec![i];
            if mode == "parallel" {
                while group.len() < self.config.max_parallel_tool_calls.max(1)
                    && i + group.len() < calls.len()
                {
                    let next = &calls[i + group.len()];
                    let m = tools
                        .call(tools::MODE, json!({"name": next["name"], "scope": agent}))
                        .await
                        .unwrap_or(json!("exclusive"));
                    if m != "parallel" {
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
                let raw = call["arguments"].as_str().unwrap_or_default();
                let arguments = if raw.trim().is_empty() {
                    json!({})
                } else {
                    serde_json::from_str(raw).unwrap_or_else(|_| json!(raw))
                };
                let exec = json!({"callId": call["id"], "name": call["name"], "arguments": arguments, "agent": agent, "cwd": cwd});
                let slot = match tools.call(tools::PREPARE, exec).await {
                    Err(e) => Slot::Settled(Tail::None, transport_failure(&e)),
                    Ok(prepared) => {
                        let exec = prepared["exec"].clone();
                        let result = prepared["result"].clone();
                        match prepared["kind"].as_str() {
                            // Cancelled while pre-execute ran: no dispatch,
                            // but post-execute still sees the outcome.
                            Some("dispatch") if abort.is_aborted() => {
                                Slot::Settled(Tail::Post(exec), aborted_before_dispatch())
                            }
                            Some("dispatch") => {
                                let t = tools.clone();
                                let x = exec.clone();
                                let handle = tokio::task::spawn_local(async move {
                                    t.call(tools::DISPATCH, x).await
                                });
                                Slot::Running(exec, handle)
                            }
                            Some("post-result") => Slot::Settled(Tail::Post(exec), result),
                            _ => Slot::Settled(Tail::Finish(exec), result),
                        }
                    }
                };
                started.push((k, seq, slot));
            }
            let count = started.len();
            for (k, seq, slot) in started {
                let (tail, result) = match slot {
                    Slot::Settled(tail, result) => (tail, result),
                    Slot::Running(exec, mut handle) => {
                        // A cancel stops the calls still running: dropping
                        // the call cancels it in the tool's plugin (bash
                        // kills its process group), and the result is the
                        // original's ABORTED. A call that finished before
                        // the cancel keeps its result.
                        let outcome = if handle.is_finished() {
                            Some((&mut handle).await)
                        } else {
                            self.unless_aborted(abort, &mut handle).await.ok()
                        };
                        match outcome {
                            None => {
                                handle.abort();
                                let aborted = json!({"isError": true, "error": {"message": "tool call aborted", "info": {"name": "AbortError", "code": code::ABORTED}},
                                                     "content": [msg::text("Error: tool call aborted")]});
                                (Tail::Post(exec), aborted)
                            }
                            Some(Ok(Ok(d))) if d["kind"] == "post-result" => {
                                (Tail::Post(exec), d["result"].clone())
                            }
                            Some(Ok(Ok(d))) => (Tail::Finish(exec), d["result"].clone()),
                            Some(Ok(Err(e))) => (Tail::None, transport_failure(&e)),
                            Some(Err(e)) => {
                                let failed = json!({"isError": true, "error": {"message": e.to_string()}, "content": [msg::text("Error: the tool task failed")]});
                                (Tail::None, failed)
                            }
                        }
                    }
                };
                let result = match tail {
                    Tail::Post(exec) => tools
                        .call(tools::FINALIZE, json!({"exec": exec, "result": result}))
                        .await
                        .unwrap_or_else(|e| transport_failure(&e)),
                    Tail::Finish(exec) => tools
                        .call(tools::FINISH, json!({"exec": exec, "result": result}))
                        .await
                        .unwrap_or_else(|e| transport_failure(&e)),
                    Tail::None => result,
                };
                self.commit_result(agent, turn, step, &calls[k], seq, &result)
                    .await?;
                concluded |= result["concludesTurn"] == json!(true);
                if let Some(contexts) = result["additionalContexts"].as_array() {
                    for m in contexts {
                        self.queue_next_step(agent, m.clone()).await?;
                    }
                }
            }
            i += count;
        }
        Ok(concluded)
    }

    /// Appends a tool's additional context to the end of the `next-step`
    /// inbox (a durable splice, then the live emit), so it becomes a
    /// `user/message` at the start of the next step, after every result.
    async fn queue_next_step(&self, agent: &str, message: Value) -> Result<()> {
        self.append_inbox(agent, NEXT_STEP, message).await
    }

    async fn log_call(&self, agent: &str, turn: u64, step: u64, call: &Value) -> Result<u64> {
        self.append(
            agent,
            event::TOOL_CALL,
            json!({"turn": turn, "step": step, "callId": call["id"], "name": call["name"], "arguments": call["arguments"]}),
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
        call: &Value,
        call_seq: u64,
        result: &Value,
    ) -> Result<u64> {
        let is_error = result["isError"] == json!(true);
        let content = result["content"].as_array().cloned().unwrap_or_default();
        let call_id = call["id"].as_str().unwrap_or_default();
        let message = msg::tool_result(&new_id(), call_id, content, is_error);
        let mut data = json!({"turn": turn, "step": step, "message": message});
        if let Some(info) = result["error"].get("info") {
            data["error"] = info.clone();
        }
        if let Some(meta) = result.get("meta") {
            data["meta"] = meta.clone();
        }
        self.append(agent, event::TOOL_RESULT, data, true, Some(vec![call_seq]))
            .await
    }
}

/// One started call of a group: settled (with the stage still owed), or
/// dispatching.
enum Slot {
    Settled(Tail, Value),
    Running(
        Value,
        tokio::task::JoinHandle<std::result::Result<Value, Error>>,
    ),
}

/// What a settled result still owes the registry: post-execute (and the
/// result emit), only the emit, or nothing (the registry itself failed).
enum Tail {
    Post(Value),
    Finish(Value),
    None,
}

/// The original's result for a call that never reached its tool.
fn aborted_before_dispatch() -> Value {
    json!({"isError": true, "error": {"message": "tool call aborted before dispatch", "info": {"name": "AbortError", "code": code::ABORTED_BEFORE_DISPATCH}},
           "content": [msg::text("Error: tool call aborted before dispatch")]})
}

/// The registry itself failed to answer for a call.
fn transport_failure(e: &Error) -> Value {
    json!({"isError": true, "error": {"message": e.message}, "content": [msg::text(&format!("Error: {}", e.message))]})
}
