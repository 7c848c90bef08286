//! The engine: one meter per session, the pressure and overflow policies,
//! and the compaction transaction that replaces a span of the surface with
//! one checkpoint.
//!
//! A compaction is logged in one atomic `appendMany` at a known position
//! (`compaction/start`, `compaction/summary`, the checkpoint
//! `user/message` replacing the span, `compaction/end`), so the records
//! stay adjacent and cite each other's seqs, and a compaction abandoned
//! mid-way (its turn cancelled) leaves no trace. A failed one logs only
//! `compaction/start` and `compaction/end` with the error; the surface is
//! untouched.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use dsh_sdk::api::compaction::{
    CompactNowParams, CompactionResult, Measurement, PruneParams, ToolResultPruner,
};
use dsh_sdk::api::llm::Llm;
use dsh_sdk::api::sessions::{NewEvent, Sessions};
use dsh_sdk::names::code;
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::compaction::{
    checkpoint_message, CheckpointSource, CompactionEnd, CompactionStart, CompactionSummary,
    ShadowedRange, END, START, SUMMARY,
};
use dsh_sdk::vocab::records::{RequestHeader, RequestHeaderRecord, TurnEnd, TurnStart};
use dsh_sdk::vocab::{event, tokens, ContentBlock, Message, SessionEvent, SurfaceOp};

use crate::config::Config;
use crate::fit::{self, Declared, Room, SummaryParts};
use crate::meter::Meter;
use crate::oversized::{self, Window};
use crate::summarizer::{self, Input};
use crate::surfaced::Surfaced;

/// Who a compaction belongs to: the open turn (automatic), or none
/// (`/compact` between turns).
pub type Owner = Option<u64>;

/// The plugin's state.
pub struct Engine {
    ctx: Context,
    pub config: Config,
    meters: RefCell<HashMap<String, Meter>>,
    busy: RefCell<HashSet<String>>,
    windows: RefCell<HashMap<(String, String), Option<u64>>>,
    /// Overflow retries of each agent's current (turn, step).
    overflow: RefCell<HashMap<String, Attempts>>,
    /// The turn in which each agent's pressure compaction last failed: it
    /// is not tried again before the next turn (each try is a model call).
    failed_turn: RefCell<HashMap<String, u64>>,
}

/// The overflow retries spent at a (turn, step).
type Attempts = ((u64, u64), u32);

/// What overflow recovery decided.
#[derive(Debug)]
pub enum Recovery {
    /// The surface changed: run the step again.
    Retry,
    /// Nothing more to do; the request's own failure stands (the window
    /// is unknown).
    GiveUp,
    /// The request cannot fit: the turn ends with this error, which names
    /// the window and what does not fit.
    Fail(Error),
}

/// Holds a session's compaction lock until dropped.
struct Lock<'a>(&'a Engine, String);

impl Drop for Lock<'_> {
    fn drop(&mut self) {
        self.0.busy.borrow_mut().remove(&self.1);
    }
}

fn failed(message: impl Into<String>) -> Error {
    Error::new(code::COMPACTION_FAILED, message)
}

impl Engine {
    /// An engine with `config`.
    pub fn new(ctx: Context, config: Config) -> Rc<Engine> {
        Rc::new(Engine {
            ctx,
            config,
            meters: RefCell::default(),
            busy: RefCell::default(),
            windows: RefCell::default(),
            overflow: RefCell::default(),
            failed_turn: RefCell::default(),
        })
    }

    /// Forgets a closed session.
    pub fn forget(&self, agent: &str) {
        self.meters.borrow_mut().remove(agent);
        self.overflow.borrow_mut().remove(agent);
        self.failed_turn.borrow_mut().remove(agent);
    }

    /// Brings `agent`'s meter up to the log's end: the surface events
    /// appended since the last look (all of them the first time).
    async fn sync(&self, agent: &str) -> Result<()> {
        let from = self.meters.borrow().get(agent).map_or(0, |m| m.consumed);
        let tail = Sessions::new(&self.ctx).surface_tail(agent, from).await?;
        let folded = self
            .meters
            .borrow_mut()
            .entry(agent.to_owned())
            .or_default()
            .fold(tail);
        if let Err(why) = folded {
            dsh_sdk::tracing::warn!("compaction: the meter of {agent} is refolded: {why}");
            let tail = Sessions::new(&self.ctx).surface_tail(agent, 0).await?;
            let mut fresh = Meter::default();
            fresh.fold(tail).map_err(failed)?;
            self.meters.borrow_mut().insert(agent.to_owned(), fresh);
        }
        Ok(())
    }

    fn with_meter<T>(&self, agent: &str, f: impl FnOnce(&Meter) -> T) -> T {
        let meters = self.meters.borrow();
        match meters.get(agent) {
            Some(m) => f(m),
            None => f(&Meter::default()),
        }
    }

    /// The context window of a route, asked once per route until the
    /// adapters change or the route overflows ([`Engine::relearn_window`]);
    /// a route that cannot say is warned about once and left alone (no
    /// automatic compaction for it).
    async fn window(&self, route: &(String, String)) -> Result<Option<u64>> {
        if let Some(w) = self.windows.borrow().get(route) {
            return Ok(*w);
        }
        let window = match self.ask_window(route).await {
            Ok(window) => window,
            Err(e) => {
                dsh_sdk::tracing::warn!(
                    "compaction: no context window for {}/{}: {e}; it is not compacted automatically",
                    route.0,
                    route.1
                );
                None
            }
        };
        self.windows.borrow_mut().insert(route.clone(), window);
        Ok(window)
    }

    /// The window `llm.resolveModelInfo` states for `route` now.
    async fn ask_window(&self, route: &(String, String)) -> Result<Option<u64>> {
        let info = Llm::new(&self.ctx)
            .resolve_model_info(&route.0, &route.1)
            .await?;
        Ok(info.context.map(|c| c.context_window))
    }

    /// After `CONTEXT_WINDOW_EXCEEDED` on `route`: its window is asked
    /// again, once, since the server may run with another one now (a
    /// llama.cpp restarted with a smaller `-c`, an Ollama model loaded with
    /// another `num_ctx`), and the adapter learns it again. A route that
    /// cannot say now keeps the figure known.
    async fn relearn_window(&self, route: &(String, String)) {
        let known = self.windows.borrow().get(route).copied().flatten();
        let window = match self.ask_window(route).await {
            Ok(Some(w)) => Some(w),
            Ok(None) => known,
            Err(e) => {
                dsh_sdk::tracing::warn!(
                    "compaction: the window of {}/{} was not asked again after an overflow: {e}",
                    route.0,
                    route.1
                );
                known
            }
        };
        if window != known {
            dsh_sdk::tracing::info!(
                "compaction: the context window of {}/{} is now {} tokens (was {})",
                route.0,
                route.1,
                window.map_or("unknown".to_owned(), |w| w.to_string()),
                known.map_or("unknown".to_owned(), |w| w.to_string()),
            );
        }
        self.windows.borrow_mut().insert(route.clone(), window);
    }

    /// Forgets the windows asked so far (the adapters changed).
    pub fn forget_windows(&self) {
        self.windows.borrow_mut().clear();
    }

    /// The window of the route `agent`'s requests go to (`None` before
    /// any request, or when the route cannot say).
    async fn agent_window(&self, agent: &str) -> Result<Option<((String, String), u64)>> {
        let Some(route) = self.with_meter(agent, Meter::current_route) else {
            return Ok(None);
        };
        Ok(self.window(&route).await?.map(|w| (route, w)))
    }

    /// The most estimated tokens of one tool result `agent`'s model should
    /// be shown, once its window is known: `resultShare` of the window for
    /// the whole batch of calls the last answer made, split evenly among
    /// them (the results of one answer all go into the next request, and
    /// no summary shrinks them).
    pub async fn result_budget(&self, agent: &str) -> Result<Option<u64>> {
        self.sync(agent).await?;
        let window = self.agent_window(agent).await?;
        let batch = self.with_meter(agent, Meter::last_batch);
        Ok(window.map(|(_, w)| (self.config.item_tokens(w) / batch).max(1)))
    }

    /// `measure`.
    pub async fn measure(&self, agent: &str) -> Result<Measurement> {
        self.sync(agent).await?;
        let (total, baseline, nodes, surface, route) = self.with_meter(agent, |m| {
            let (t, b) = m.total();
            (
                t,
                b,
                m.nodes().len() as u64,
                m.surface_tokens(),
                m.route.clone(),
            )
        });
        let window = match route {
            Some(r) => self.window(&r).await?,
            None => None,
        };
        Ok(Measurement {
            total_tokens: total,
            surface_tokens: surface,
            baseline,
            nodes,
            context_window: window,
            threshold_tokens: window.map(|w| self.config.threshold(w)),
        })
    }

    /// Before a step of turn `turn`: compacts when the context reached the
    /// threshold (pruning first), until it is below it or the attempts run
    /// out. `None` when nothing was summarized. After a failure, the rest of
    /// the turn is left alone.
    pub async fn on_pressure(
        &self,
        agent: &str,
        turn: u64,
        signal: Option<&str>,
    ) -> Result<Option<CompactionResult>> {
        if self.failed_turn.borrow().get(agent) == Some(&turn) {
            return Ok(None);
        }
        let outcome = self.relieve(agent, turn, signal).await;
        if outcome.is_err() {
            self.failed_turn.borrow_mut().insert(agent.to_owned(), turn);
        }
        outcome
    }

    async fn relieve(
        &self,
        agent: &str,
        turn: u64,
        signal: Option<&str>,
    ) -> Result<Option<CompactionResult>> {
        self.sync(agent).await?;
        let Some(route) = self.with_meter(agent, |m| m.route.clone()) else {
            return Ok(None);
        };
        let Some(window) = self.window(&route).await? else {
            return Ok(None);
        };
        let threshold = self.config.threshold(window);
        let retain = self.config.retain(window);
        let over = |e: &Engine| e.with_meter(agent, |m| m.total().0 >= threshold);
        if !over(self) {
            return Ok(None);
        }
        let item = self.config.item_tokens(window);
        // A system prompt and tools that alone leave no room: no summary
        // fits, and pruning would only shred results; the request's
        // overflow says why ([`Engine::give_up`]).
        let header = self.with_meter(agent, Meter::header_tokens);
        if oversized::leaves_no_room(window, item, header) {
            return Ok(None);
        }
        // Old results first (over the pruner's threshold or their share of
        // the window), then the newest ones the model has not read yet, when
        // over their share: before anything is summarized.
        let keep_from = self.with_meter(agent, Meter::unanswered_from);
        self.prune(agent, keep_from, Some(item)).await?;
        if !over(self) {
            return Ok(None);
        }
        if keep_from.is_some() {
            self.prune(agent, None, Some(item)).await?;
            if !over(self) {
                return Ok(None);
            }
        }
        // The newest batch no summary shrinks: together within one
        // item's share.
        if self.prune_batch(agent, item).await? && !over(self) {
            return Ok(None);
        }
        let mut result = None;
        for _ in 0..=self.config.compaction_retries {
            let Some(cut) = self.with_meter(agent, |m| m.select(retain)) else {
                return Ok(result);
            };
            let at = Some(turn);
            result = Some(self.compact(agent, cut, at, None, None, signal).await?);
            self.sync(agent).await?;
            if !over(self) {
                return Ok(result);
            }
        }
        let total = self.with_meter(agent, |m| m.total().0);
        Err(failed(format!(
            "compaction still above threshold after {} compaction attempts ({total} estimated tokens >= threshold {threshold})",
            self.config.compaction_retries + 1
        )))
    }

    /// After `CONTEXT_WINDOW_EXCEEDED` in (turn, step): prunes every
    /// oversized result (the newest included, to its share of the window),
    /// then compacts all but the newest balanced unit; [`Recovery::Retry`]
    /// when the surface changed. When nothing changed, or the step's
    /// retries are spent, what does not fit is found and said
    /// ([`Engine::give_up`]).
    pub async fn on_overflow(
        &self,
        agent: &str,
        (turn, step): (u64, u64),
        server: &str,
    ) -> Result<Recovery> {
        let spent = {
            let mut overflow = self.overflow.borrow_mut();
            let entry = overflow
                .entry(agent.to_owned())
                .or_insert(((turn, step), 0));
            if entry.0 != (turn, step) {
                *entry = ((turn, step), 0);
            }
            let spent = entry.1 >= self.config.max_overflow_retries;
            if !spent {
                entry.1 += 1;
            }
            spent
        };
        self.sync(agent).await?;
        // The server may run with another window than the one known: it is
        // asked again before recovery sizes anything by it.
        if let Some(route) = self.with_meter(agent, Meter::current_route) {
            self.relearn_window(&route).await;
        }
        let window = self.agent_window(agent).await?.map(|(_, w)| w);
        let item = window.map(|w| self.config.item_tokens(w));
        // A system prompt and tools that alone leave no room: neither
        // pruning nor a summary can help (nor be sent).
        let header = self.with_meter(agent, Meter::header_tokens);
        let no_room = window
            .zip(item)
            .is_some_and(|(w, i)| oversized::leaves_no_room(w, i, header));
        if spent || no_room {
            return self.give_up(agent, server).await;
        }
        let generation = self.with_meter(agent, |m| m.replace_generation);
        let outcome = async {
            // A prune that changed anything has synced the meter.
            self.prune(agent, None, item).await?;
            if let Some(item) = item {
                self.prune_batch(agent, item).await?;
            }
            if let Some(cut) = self.with_meter(agent, |m| m.select(0)) {
                self.compact(agent, cut, Some(turn), None, None, None)
                    .await?;
            }
            Ok::<_, Error>(())
        }
        .await;
        self.sync(agent).await?;
        let changed = self.with_meter(agent, |m| m.replace_generation) > generation;
        match outcome {
            Err(e) if !changed => {
                dsh_sdk::tracing::warn!("context-overflow compaction of {agent} failed: {e}");
                self.give_up(agent, server).await
            }
            Err(e) => {
                dsh_sdk::tracing::warn!(
                    "context-overflow compaction failed after pruning: {e}; retrying from the pruned surface"
                );
                Ok(Recovery::Retry)
            }
            Ok(()) if changed => Ok(Recovery::Retry),
            Ok(()) => self.give_up(agent, server).await,
        }
    }

    /// Recovery can do no more: what keeps the request from fitting, as
    /// the turn's error, the server's message (`server`) after it. An item
    /// over its share of the window is cut first, so the next request fits
    /// ([`oversized`]). [`Recovery::GiveUp`] when the window is unknown.
    async fn give_up(&self, agent: &str, server: &str) -> Result<Recovery> {
        let Some((route, window)) = self.agent_window(agent).await? else {
            return Ok(Recovery::GiveUp);
        };
        let log = Sessions::new(&self.ctx).events(agent, 0).await?;
        let header = oversized::header_tokens(last_header(&log)?.as_ref());
        let seqs: Vec<u64> = self.with_meter(agent, |m| m.nodes().iter().map(|n| n.seq).collect());
        let items = oversized::items(&log, &seqs)?;
        let total = header + items.iter().map(|i| i.tokens).sum::<u64>();
        let largest = items.iter().max_by_key(|i| i.tokens);
        let window = Window {
            route: (&route.0, &route.1),
            tokens: window,
            item_tokens: self.config.item_tokens(window),
        };
        // When the system prompt and tools alone leave no room, that is
        // the error: cutting a message would not make the next request
        // fit, and the message is kept whole for a larger window.
        let over_share = largest.filter(|i| i.tokens > window.item_tokens);
        if let Some(item) = over_share.filter(|_| !window.leaves_no_room(header)) {
            if let Some(events) = oversized::cut(&log, item, window.item_tokens)? {
                Sessions::new(&self.ctx).append_many(agent, events).await?;
                self.sync(agent).await?;
                dsh_sdk::tracing::info!(
                    "compaction: {} of {agent} does not fit the window; cut for the next requests",
                    item.describe()
                );
                return Ok(Recovery::Fail(oversized::cut_error(window, item, server)));
            }
        }
        Ok(Recovery::Fail(oversized::plain_error(
            window, header, total, largest, server,
        )))
    }

    /// `compactIdle`: the idle agent's history, all but its newest
    /// balanced unit, into one checkpoint; then a flush.
    pub async fn compact_idle(&self, p: CompactNowParams) -> Result<Option<CompactionResult>> {
        self.sync(&p.agent).await?;
        let Some(cut) = self.with_meter(&p.agent, |m| m.select(0)) else {
            return Ok(None);
        };
        let result = self
            .compact(
                &p.agent,
                cut,
                None,
                p.source_command_id.clone(),
                p.instructions.as_deref(),
                None,
            )
            .await?;
        Sessions::new(&self.ctx).flush(&p.agent).await?;
        Ok(Some(result))
    }

    /// Prunes the results of the newest batch (after the last answer) when
    /// together they are over `budget`, each to an even part of it
    /// ([`Meter::batch_share`]); true when it pruned. The pruner's pass
    /// applies the part to every result: the older ones are no more
    /// precious than the newest.
    async fn prune_batch(&self, agent: &str, budget: u64) -> Result<bool> {
        let Some(share) = self.with_meter(agent, |m| m.batch_share(budget)) else {
            return Ok(false);
        };
        let generation = self.with_meter(agent, |m| m.replace_generation);
        self.prune(agent, None, Some(share)).await?;
        Ok(self.with_meter(agent, |m| m.replace_generation) > generation)
    }

    /// The pruner's pass, when one is loaded: the results before
    /// `keep_from` (all when `None`) over its threshold, or estimated over
    /// `max_tokens`.
    async fn prune(
        &self,
        agent: &str,
        keep_from: Option<u64>,
        max_tokens: Option<u64>,
    ) -> Result<()> {
        let params = PruneParams {
            agent: agent.to_owned(),
            keep_from,
            max_tokens,
        };
        match ToolResultPruner::new(&self.ctx)
            .prune_session(&params)
            .await
        {
            Ok(r) if !r.pruned.is_empty() => {
                dsh_sdk::tracing::info!(
                    "compaction: pruned {} tool results of {agent} ({} characters)",
                    r.pruned.len(),
                    r.chars_removed
                );
                self.sync(agent).await
            }
            Ok(_) => Ok(()),
            Err(e) if e.code == codes::SERVICE_UNAVAILABLE => Ok(()),
            Err(e) => {
                dsh_sdk::tracing::warn!("compaction: pruning {agent} failed: {e}");
                Ok(())
            }
        }
    }

    /// Replaces the first `cut` surface nodes of `agent` with a summary.
    async fn compact(
        &self,
        agent: &str,
        cut: usize,
        owner: Owner,
        source_command_id: Option<String>,
        instructions: Option<&str>,
        signal: Option<&str>,
    ) -> Result<CompactionResult> {
        if !self.busy.borrow_mut().insert(agent.to_owned()) {
            return Err(Error::new(
                code::COMPACTION_BUSY,
                format!("a compaction of {agent} is already under way"),
            ));
        }
        let _lock = Lock(self, agent.to_owned());
        let (shadowed, shadowed_tokens, route) = self.with_meter(agent, |m| {
            let nodes = &m.nodes()[..cut.min(m.nodes().len())];
            (
                nodes.iter().map(|n| n.seq).collect::<Vec<u64>>(),
                nodes.iter().map(|n| n.tokens).sum::<u64>(),
                m.route.clone(),
            )
        });
        let id = uuid::Uuid::new_v4().to_string();
        let txn = Txn {
            id: &id,
            owner,
            source_command_id,
            shadowed: &shadowed,
            shadowed_tokens,
        };
        // A span no bigger than an empty checkpoint cannot shrink: no
        // summary is asked for.
        let floor = tokens::of_typed_message(&txn.checkpoint(&[]));
        if shadowed_tokens <= floor {
            return Err(failed(format!(
                "the span to compact (~{shadowed_tokens} tokens) is no bigger than an empty checkpoint (~{floor}); nothing was summarized"
            )));
        }
        let sessions = Sessions::new(&self.ctx);
        let log = sessions.events(agent, 0).await?;
        check_entry(agent, &log, owner)?;
        let header = last_header(&log)?;
        let route = self
            .config
            .summarization_route()
            .or(route)
            .or_else(|| header.as_ref().and_then(header_route))
            .ok_or_else(|| failed("no provider/model for the summary: no request was routed yet and compaction-basic names no summarizationProvider/summarizationModel"))?;
        let messages = shadowed_messages(&log, &shadowed)?;
        let request = SummaryRequest {
            agent,
            route: &route,
            header: header.as_ref(),
            instructions,
            signal,
        };
        let (max_tokens, summarized) = self.summarize(request, messages).await?;
        let outcome = match summarized {
            Ok(s) => {
                if s.truncated {
                    dsh_sdk::tracing::warn!(
                        "compaction of {agent}: the summary reached its output cap of {max_tokens} tokens; it is kept, marked as cut"
                    );
                }
                let checkpoint = txn.checkpoint(&s.summary);
                let framed = tokens::of_typed_message(&checkpoint);
                if framed >= shadowed_tokens {
                    Err(failed(format!("summary is not smaller than the shadowed content ({framed} estimated framed tokens >= {shadowed_tokens})")))
                } else {
                    Ok((s, checkpoint))
                }
            }
            Err(e) => Err(failed(format!("{} ({})", e.message, e.code))),
        };
        let since = log.len() as u64;
        match outcome {
            Ok((summary, checkpoint)) => {
                let summary = CompactionSummary {
                    compaction_id: id.clone(),
                    source_command_id: txn.source_command_id.clone(),
                    summary: summary.summary,
                    raw_output: Some(summary.raw_output),
                    llm_stream_call: Some(true),
                    shadowed_range: txn.range(),
                    shadowed_seqs: shadowed.clone(),
                    shadowed_token_count: shadowed_tokens,
                    provider: route.0.clone(),
                    model: route.1.clone(),
                    max_tokens: Some(max_tokens),
                    usage: summary.usage,
                };
                self.commit(agent, since, &txn, summary, checkpoint).await
            }
            Err(e) => {
                self.record_failure(agent, since, &txn, &e).await;
                Err(e)
            }
        }
    }

    /// The summary of `messages`: the request fitted to the summary
    /// route's window ([`fit`]), its output cap a share of it. The cap,
    /// and the summary or why there is none (a failure to log).
    async fn summarize(
        &self,
        request: SummaryRequest<'_>,
        messages: Vec<Message>,
    ) -> Result<(u64, Result<summarizer::Summary>)> {
        let SummaryRequest {
            agent,
            route,
            header,
            instructions,
            signal,
        } = request;
        let window = self.window(route).await?;
        let max_tokens = self.config.summary_cap(window);
        let system = header.and_then(|h| h.system.as_deref());
        let tools = header.and_then(|h| h.tools.as_deref()).unwrap_or(&[]);
        let ask = summarizer::ask(instructions);
        let parts = SummaryParts {
            system,
            tools,
            messages,
            ask: &ask,
        };
        let fitted = match window {
            Some(w) => fit::fit_summary(
                parts,
                Room {
                    window: w,
                    input: w.saturating_sub(max_tokens),
                    item_tokens: self.config.item_tokens(w),
                },
            ),
            None => Ok(fit::Fitted::whole(parts.messages)),
        };
        let fitted = match fitted {
            Ok(fitted) => fitted,
            Err(e) => return Ok((max_tokens, Err(e))),
        };
        let declared = match &fitted.tools {
            Declared::All => tools,
            Declared::Called(stubs) => stubs.as_slice(),
        };
        if fitted.cut + fitted.dropped > 0 || fitted.tools != Declared::All {
            dsh_sdk::tracing::info!(
                "compaction of {agent}: the summary request (about {} tokens) fits a window of {} tokens with {} messages cut, {} left out, {} of {} tools declared",
                fitted.tokens,
                window.unwrap_or_default(),
                fitted.cut,
                fitted.dropped,
                declared.len(),
                tools.len()
            );
        }
        let input = Input {
            provider: &route.0,
            model: &route.1,
            max_tokens,
            system,
            tools: declared,
            messages: fitted.messages,
            ask,
            session_id: agent,
            signal,
        };
        Ok((max_tokens, summarizer::summarize(&self.ctx, input).await))
    }

    /// Logs a successful compaction at the log's end, unless the turn it
    /// belongs to ended or the span changed meanwhile.
    async fn commit(
        &self,
        agent: &str,
        since: u64,
        txn: &Txn<'_>,
        summary: CompactionSummary,
        checkpoint: Message,
    ) -> Result<CompactionResult> {
        let sessions = Sessions::new(&self.ctx);
        let later = sessions.events(agent, since).await?;
        txn.still_valid(&later)?;
        let at = since + later.len() as u64;
        let range = txn.range();
        let mut sources = vec![at, at + 1];
        sources.extend_from_slice(txn.shadowed);
        let replace = SurfaceOp::Replace {
            start: range.start,
            end: range.end,
        };
        let events = vec![
            NewEvent::typed(START, &txn.start())?,
            NewEvent::typed(SUMMARY, &summary)?,
            NewEvent::surface(event::USER_MESSAGE, &checkpoint, replace, Some(sources))?,
            NewEvent::typed(END, &txn.end(None))?,
        ];
        let seqs = sessions.append_many_at(agent, at, events).await?;
        dsh_sdk::tracing::info!(
            "compaction of {agent}: shadowed {} surface nodes (seqs {}-{}, ~{} tokens)",
            txn.shadowed.len(),
            range.start,
            range.end,
            txn.shadowed_tokens
        );
        Ok(CompactionResult {
            compaction_id: txn.id.to_owned(),
            source_command_id: txn.source_command_id.clone(),
            start_seq: seqs[0],
            summary_seq: seqs[1],
            end_seq: seqs[3],
            summary: summary.summary,
            shadowed_range: range,
            shadowed_seqs: txn.shadowed.to_vec(),
            shadowed_token_count: txn.shadowed_tokens,
        })
    }

    /// Logs a failed attempt (`compaction/start`, then `compaction/end`
    /// with the error) while its turn is still open; never fails itself.
    async fn record_failure(&self, agent: &str, since: u64, txn: &Txn<'_>, e: &Error) {
        let sessions = Sessions::new(&self.ctx);
        let logged = async {
            let later = sessions.events(agent, since).await?;
            if txn.turn_ended(&later)? {
                return Ok(());
            }
            let events = vec![
                NewEvent::typed(START, &txn.start())?,
                NewEvent::typed(END, &txn.end(Some(e.message.clone())))?,
            ];
            sessions.append_many(agent, events).await.map(drop)
        };
        if let Err(err) = logged.await {
            dsh_sdk::tracing::warn!("compaction: the failure of {agent} was not logged: {err}");
        }
    }
}

/// What a summary request is asked for, besides the messages.
struct SummaryRequest<'a> {
    /// The session.
    agent: &'a str,
    /// The route that writes it.
    route: &'a (String, String),
    /// The conversation's request header (its system prompt and tools).
    header: Option<&'a RequestHeader>,
    /// What `/compact` asked the summary to focus on.
    instructions: Option<&'a str>,
    /// The name a cancel stops the request by.
    signal: Option<&'a str>,
}

/// One compaction's identity and span.
struct Txn<'a> {
    id: &'a str,
    owner: Owner,
    source_command_id: Option<String>,
    shadowed: &'a [u64],
    shadowed_tokens: u64,
}

impl Txn<'_> {
    fn range(&self) -> ShadowedRange {
        ShadowedRange {
            start: self.shadowed.first().copied().unwrap_or_default(),
            end: self.shadowed.last().copied().unwrap_or_default(),
        }
    }

    fn start(&self) -> CompactionStart {
        CompactionStart {
            compaction_id: self.id.to_owned(),
            source_command_id: self.source_command_id.clone(),
            turn: self.owner,
        }
    }

    fn end(&self, error: Option<String>) -> CompactionEnd {
        CompactionEnd {
            compaction_id: self.id.to_owned(),
            source_command_id: self.source_command_id.clone(),
            turn: self.owner,
            error,
        }
    }

    /// The checkpoint message that replaces the span.
    fn checkpoint(&self, summary: &[ContentBlock]) -> Message {
        let source = CheckpointSource::new(self.id, self.source_command_id.clone());
        checkpoint_message(dsh_sdk::new_id(), &source, summary)
    }

    /// True when the owning turn ended in `later` (or, for a manual one,
    /// a turn started).
    fn turn_ended(&self, later: &[SessionEvent]) -> Result<bool> {
        for e in later {
            let ended = match self.owner {
                Some(t) => e.kind == event::TURN_END && e.data_as::<TurnEnd>()?.turn == t,
                None => e.kind == event::TURN_START,
            };
            if ended {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Refuses to commit after the turn ended or the surface was rewritten.
    fn still_valid(&self, later: &[SessionEvent]) -> Result<()> {
        if self.turn_ended(later)? {
            return Err(Error::new(
                code::ABORTED,
                "the turn ended while its compaction ran; nothing was replaced",
            ));
        }
        let rewritten = later
            .iter()
            .any(|e| e.surface_op.is_some() && !SurfaceOp::is_append(e.surface_op.as_ref()));
        if rewritten {
            return Err(failed(
                "the session surface changed during summarization; nothing was replaced",
            ));
        }
        Ok(())
    }
}

/// The request header in force at the end of `log`, if one was logged.
fn last_header(log: &[SessionEvent]) -> Result<Option<RequestHeader>> {
    log.iter()
        .rev()
        .find(|e| e.kind == event::REQUEST_HEADER)
        .map(|e| Ok(e.data_as::<RequestHeaderRecord>()?.header))
        .transpose()
}

/// The route of a request header's config (both parts non-empty).
fn header_route(header: &RequestHeader) -> Option<(String, String)> {
    let c = &header.config;
    (!c.provider.is_empty() && !c.model.is_empty()).then(|| (c.provider.clone(), c.model.clone()))
}

/// Refuses a compaction while another one is open in the log, a manual
/// one inside a turn, and an automatic one outside its turn.
fn check_entry(agent: &str, log: &[SessionEvent], owner: Owner) -> Result<()> {
    let busy = |why: String| Err(Error::new(code::COMPACTION_BUSY, why));
    let last_compaction = log.iter().rev().find(|e| e.kind == START || e.kind == END);
    if let Some(start) = last_compaction.filter(|e| e.kind == START) {
        let seeded_after = log[start.seq as usize..]
            .iter()
            .any(|e| e.kind == event::SESSION_END_SEED);
        if !seeded_after {
            return busy(format!(
                "{agent}: compaction already in progress (compaction/start at seq {} has no end)",
                start.seq
            ));
        }
    }
    let open_turn = log
        .iter()
        .rev()
        .find(|e| e.kind == event::TURN_START || e.kind == event::TURN_END)
        .filter(|e| e.kind == event::TURN_START)
        .map(|e| e.data_as::<TurnStart>().map(|s| s.turn))
        .transpose()?;
    match (owner, open_turn) {
        (None, Some(t)) => busy(format!(
            "manual compaction of {agent}: turn {t} is still open"
        )),
        (Some(t), open) if open != Some(t) => Err(failed(format!(
            "automatic compaction of {agent} belongs to turn {t}, which is not open"
        ))),
        _ => Ok(()),
    }
}

/// The model messages of the shadowed nodes, as the history derives them.
fn shadowed_messages(log: &[SessionEvent], shadowed: &[u64]) -> Result<Vec<Message>> {
    let mut out = Vec::with_capacity(shadowed.len());
    for seq in shadowed {
        let e = log
            .get(*seq as usize)
            .filter(|e| e.seq == *seq)
            .ok_or_else(|| failed(format!("surface seq {seq} is not in the log")))?;
        if let Some(message) = Surfaced::read(e)?.into_history() {
            out.push(message);
        }
    }
    Ok(out)
}
