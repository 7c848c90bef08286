//! The token meter: a fold over one session's surface events that keeps
//! each surface node's estimated tokens and the provider's usage of the
//! last answer, so the context in use is known in O(1) per step (the last
//! request's usage plus the estimate of what was appended since), as the
//! original's `token-meter` measures it. The request's system prompt and
//! tools are priced from the last `request/header`: usage stands for the
//! context only while the header it was measured under is still the one
//! in force, and is trusted only when it is no lower than the estimate.

use dsh_sdk::api::compaction::Baseline;
use dsh_sdk::api::sessions::HeaderAt;
use dsh_sdk::vocab::history::{RawSurfaceEvent, SurfaceTail};
use dsh_sdk::vocab::records::RequestHeader;
use dsh_sdk::vocab::surface::replace_range;
use dsh_sdk::vocab::tokens;
use dsh_sdk::vocab::{event, MessageSource};
use serde::Deserialize;

use crate::surfaced::Surfaced;

/// One surface node: a message the model sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its event's seq.
    pub seq: u64,
    /// Its estimated tokens.
    pub tokens: u64,
    /// Tool calls it opens (an answer) minus the one it closes (a result).
    delta: i64,
    /// An assistant answer.
    answer: bool,
    /// A tool result.
    result: bool,
}

/// The measure at the last answer: the provider's usage (or the estimate
/// when it reported none or less), the surface it covered and the header
/// in force then.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    tokens: u64,
    surface_tokens: u64,
    usage: bool,
    header_epoch: u64,
}

/// One session's fold.
#[derive(Debug, Default)]
pub struct Meter {
    /// The log length folded so far.
    pub consumed: u64,
    nodes: Vec<Node>,
    surface_tokens: u64,
    anchor: Option<Anchor>,
    /// The `request/header` in force (canonical, as the SDK compares
    /// headers), and its estimate.
    header: Option<(RequestHeader, u64)>,
    /// Bumped when a header of other content comes into force (a header
    /// logged again unchanged, as on resume, keeps the usage good).
    header_epoch: u64,
    /// The provider and model of the last answer.
    pub route: Option<(String, String)>,
    /// Replaces folded so far.
    pub replace_generation: u64,
}

impl Meter {
    /// Folds the surface events of `tail` not folded yet; an event that
    /// does not fit (a replace of nodes this fold lacks) is an error, and
    /// the caller folds afresh.
    pub fn fold(&mut self, tail: SurfaceTail) -> Result<(), String> {
        let mut header = tail.request_header.filter(|h| h.seq >= self.consumed);
        for e in tail.events {
            if e.seq < self.consumed {
                continue;
            }
            // The header logged before this event is in force for it.
            if let Some(h) = header.take_if(|h| h.seq < e.seq) {
                self.take_header(&h)?;
            }
            self.fold_event(e)?;
        }
        if let Some(h) = header {
            self.take_header(&h)?;
        }
        self.consumed = self.consumed.max(tail.seq);
        Ok(())
    }

    /// A `request/header`: its system prompt and tools priced.
    fn take_header(&mut self, h: &HeaderAt) -> Result<(), String> {
        let header = RequestHeader::deserialize(&h.header)
            .map_err(|e| format!("the request/header at seq {} is malformed: {e}", h.seq))?
            .canonical();
        if self
            .header
            .as_ref()
            .is_some_and(|(old, _)| old.same_as(&header))
        {
            return Ok(());
        }
        let system = tokens::of_system(header.system.as_deref());
        let tools = header.tools.as_deref().map_or(0, tokens::of_tool_schemas);
        self.header = Some((header, system + tools));
        self.header_epoch += 1;
        Ok(())
    }

    /// The estimate of the header in force (its system prompt and tools).
    pub fn header_tokens(&self) -> u64 {
        self.header.as_ref().map_or(0, |(_, t)| *t)
    }

    fn fold_event(&mut self, e: RawSurfaceEvent) -> Result<(), String> {
        let surfaced = Surfaced::read(&e).map_err(|err| err.message)?;
        let message = &surfaced.message;
        let node = Node {
            seq: e.seq,
            tokens: tokens::of_typed_message(message),
            delta: match e.kind.as_str() {
                event::ASSISTANT_MESSAGE => message.tool_calls().count() as i64,
                event::TOOL_RESULT => -1,
                _ => 0,
            },
            answer: surfaced.answer,
            result: e.kind == event::TOOL_RESULT,
        };
        match e.surface_op.as_ref().and_then(replace_range) {
            Some((start, end)) => self.replace(start, end, node)?,
            None => {
                self.surface_tokens += node.tokens;
                self.nodes.push(node);
            }
        }
        if surfaced.answer {
            if let MessageSource::Model(source) = &message.source {
                self.route = Some((source.provider.clone(), source.model.clone()));
            }
            let estimate = self.header_tokens() + self.surface_tokens;
            let reported = surfaced.usage.as_ref().map(tokens::of_token_usage);
            let header_epoch = self.header_epoch;
            self.anchor = Some(match reported {
                Some(u) if u >= estimate => Anchor {
                    tokens: u,
                    surface_tokens: self.surface_tokens,
                    usage: true,
                    header_epoch,
                },
                _ => Anchor {
                    tokens: estimate,
                    surface_tokens: self.surface_tokens,
                    usage: false,
                    header_epoch,
                },
            });
        }
        Ok(())
    }

    fn replace(&mut self, start: u64, end: u64, node: Node) -> Result<(), String> {
        let at = |seq: u64| {
            self.nodes
                .iter()
                .rposition(|n| n.seq == seq)
                .ok_or_else(|| format!("replace of seq {seq}, which is not on the metered surface"))
        };
        let (si, ei) = (at(start)?, at(end)?);
        if si > ei {
            return Err(format!("replace of {start}..{end} runs backwards"));
        }
        let removed: u64 = self.nodes[si..=ei].iter().map(|n| n.tokens).sum();
        self.surface_tokens = self.surface_tokens - removed + node.tokens;
        self.nodes.splice(si..=ei, [node]);
        self.replace_generation += 1;
        Ok(())
    }

    /// The context the next request uses, and what the figure rests on.
    pub fn total(&self) -> (u64, Baseline) {
        match self.anchor {
            Some(a) if a.header_epoch == self.header_epoch => {
                let now = a.tokens as i128 + self.surface_tokens as i128 - a.surface_tokens as i128;
                let baseline = if a.usage {
                    Baseline::Usage
                } else {
                    Baseline::Estimated
                };
                (now.max(0) as u64, baseline)
            }
            // No answer yet, or one under another header: all estimated.
            _ if self.surface_tokens == 0 && self.header.is_none() => (0, Baseline::None),
            _ => (
                self.header_tokens() + self.surface_tokens,
                Baseline::Estimated,
            ),
        }
    }

    /// The route requests go to: the one of the request header in force
    /// (the last request's, which may have failed: a first request, or the
    /// first after a switch to another model), else the last answer's.
    pub fn current_route(&self) -> Option<(String, String)> {
        let header = self.header.as_ref().and_then(|(header, _)| {
            let c = &header.config;
            (!c.provider.is_empty() && !c.model.is_empty())
                .then(|| (c.provider.clone(), c.model.clone()))
        });
        header.or_else(|| self.route.clone())
    }

    /// The estimated tokens of the history alone.
    pub fn surface_tokens(&self) -> u64 {
        self.surface_tokens
    }

    /// The surface nodes, in order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The first node the model has not answered yet (after the last
    /// answer): what pruning leaves alone, so no result is cut before the
    /// model has read it. `None` when every node was answered.
    pub fn unanswered_from(&self) -> Option<u64> {
        let last_answer = self.nodes.iter().rposition(|n| n.answer)?;
        self.nodes.get(last_answer + 1).map(|n| n.seq)
    }

    /// How many tool calls the last answer made (at least 1): the batch
    /// whose results come next share what one result may take.
    pub fn last_batch(&self) -> u64 {
        self.nodes
            .iter()
            .rev()
            .find(|n| n.answer)
            .map_or(1, |n| n.delta.max(1).unsigned_abs())
    }

    /// What each of the results after the last answer (the newest batch,
    /// which no summary shrinks: it is never parted from its call) may
    /// keep so that together they take at most `budget` estimated tokens.
    /// `None` when they already do, or there are fewer than two.
    pub fn batch_share(&self, budget: u64) -> Option<u64> {
        let from = self.nodes.iter().rposition(|n| n.answer)? + 1;
        let results = self.nodes[from..].iter().filter(|n| n.result);
        let (count, total) = results.fold((0u64, 0u64), |(c, t), n| {
            (c + 1, t.saturating_add(n.tokens))
        });
        (count > 1 && total > budget).then(|| (budget / count).max(1))
    }

    /// The first node of the most recent `retain` tokens (the whole
    /// surface's length when there is nothing to keep).
    pub fn retained_from(&self, retain: u64) -> usize {
        let mut kept = 0;
        for (i, n) in self.nodes.iter().enumerate().rev() {
            kept += n.tokens;
            if kept >= retain {
                return i;
            }
        }
        0
    }

    /// How many leading nodes to compact so that the most recent `retain`
    /// tokens stay verbatim and no tool call is parted from its result:
    /// the cut moves back to the nearest position with no call open
    /// before it. `None` when no such cut leaves anything to compact.
    pub fn select(&self, retain: u64) -> Option<usize> {
        if self.nodes.is_empty() {
            return None;
        }
        let mut keep = self.retained_from(retain);
        let mut open = 0i64;
        let balanced: Vec<bool> = std::iter::once(true)
            .chain(self.nodes.iter().map(|n| {
                open += n.delta;
                open == 0
            }))
            .collect();
        while keep > 0 && !balanced[keep] {
            keep -= 1;
        }
        (keep > 0).then_some(keep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::Value;
    use serde_json::json;

    fn ev(kind: &str, seq: u64, data: Value, op: Value) -> Value {
        json!({"type": kind, "seq": seq, "surfaceOp": op, "data": data})
    }

    fn tail(events: Vec<Value>, seq: u64) -> SurfaceTail {
        serde_json::from_value(json!({"events": events, "replaced": false, "seq": seq})).unwrap()
    }

    fn user(seq: u64, text: &str) -> Value {
        ev(
            event::USER_MESSAGE,
            seq,
            json!({"id": format!("u{seq}"), "role": "user", "content": [{"type": "text", "text": text}],
                   "source": {"kind": "user"}}),
            json!("append"),
        )
    }

    fn answer(seq: u64, calls: &[&str], usage: Option<Value>) -> Value {
        let content: Vec<Value> = calls
            .iter()
            .map(|id| json!({"type": "tool-call", "id": id, "name": "read", "arguments": "{}"}))
            .collect();
        let mut data = json!({"turn": 1, "step": 1, "message": {"id": format!("a{seq}"),
            "role": "assistant", "content": content,
            "source": {"kind": "model", "provider": "p", "model": "m"}}});
        if let Some(u) = usage {
            data["usage"] = u;
        }
        ev(event::ASSISTANT_MESSAGE, seq, data, json!("append"))
    }

    fn result(seq: u64, id: &str) -> Value {
        ev(
            event::TOOL_RESULT,
            seq,
            json!({"turn": 1, "step": 1, "message": {"id": format!("r{seq}"), "role": "user",
            "content": [{"type": "tool-result", "toolCallId": id,
                         "content": [{"type": "text", "text": "x".repeat(400)}]}],
            "source": {"kind": "tool", "callId": id}}}),
            json!("append"),
        )
    }

    fn with_header(mut t: SurfaceTail, seq: u64, system: &str) -> SurfaceTail {
        t.request_header = Some(HeaderAt {
            seq,
            header: json!({"config": {"provider": "p", "model": "m"}, "system": system}),
        });
        t
    }

    #[test]
    fn the_header_is_priced_and_usage_holds_only_under_its_header() {
        let mut m = Meter::default();
        // The system prompt (400 chars: 100 + 4) counts before any usage.
        m.fold(with_header(
            tail(vec![user(0, &"a".repeat(40))], 2),
            1,
            &"s".repeat(400),
        ))
        .unwrap();
        assert_eq!(m.total(), (104 + 18, Baseline::Estimated));
        // Usage lower than the estimate is not trusted.
        let low = Some(json!({"inputTokens": 50, "outputTokens": 10}));
        m.fold(tail(vec![answer(3, &[], low)], 4)).unwrap();
        assert_eq!(m.total().1, Baseline::Estimated);
        let ok = Some(json!({"inputTokens": 900, "outputTokens": 100}));
        m.fold(tail(vec![answer(5, &[], ok)], 6)).unwrap();
        assert_eq!(m.total(), (1000, Baseline::Usage));
        // A new header after the answer: the usage was measured under the
        // old one, so everything is estimated again (with the new prompt).
        m.fold(with_header(tail(vec![], 8), 7, &"s".repeat(4000)))
            .unwrap();
        let (total, baseline) = m.total();
        assert_eq!(baseline, Baseline::Estimated);
        assert_eq!(total, 1004 + m.surface_tokens());
        // A header logged before an answer in the same tail is the one
        // that answer was measured under.
        let ok = Some(json!({"inputTokens": 5000, "outputTokens": 100}));
        m.fold(with_header(tail(vec![answer(10, &[], ok)], 11), 9, "short"))
            .unwrap();
        assert_eq!(m.total(), (5100, Baseline::Usage));
        // The same header logged again (a resume) keeps the usage good.
        m.fold(with_header(tail(vec![], 13), 12, "short")).unwrap();
        assert_eq!(m.total(), (5100, Baseline::Usage));
        // Requests go to the header's route: the last request's, which may
        // not have been answered yet (another model).
        let route = |p: &str, m: &str| Some((p.to_owned(), m.to_owned()));
        assert_eq!(m.current_route(), route("p", "m"));
        let mut t = tail(vec![], 15);
        t.request_header = Some(HeaderAt {
            seq: 14,
            header: json!({"config": {"provider": "p", "model": "m2"}, "system": "short"}),
        });
        m.fold(t).unwrap();
        assert_eq!(m.current_route(), route("p", "m2"));
        assert_eq!(m.route, route("p", "m"));
        assert_eq!(Meter::default().current_route(), None);
    }

    #[test]
    fn usage_anchors_the_measure_and_appends_add_their_estimate() {
        let mut m = Meter::default();
        assert_eq!(m.total(), (0, Baseline::None));
        m.fold(tail(vec![user(0, &"a".repeat(40))], 1)).unwrap();
        assert_eq!(m.total(), (18, Baseline::Estimated));
        m.fold(tail(
            vec![answer(
                2,
                &[],
                Some(json!({"inputTokens": 900, "outputTokens": 100})),
            )],
            3,
        ))
        .unwrap();
        assert_eq!(m.total(), (1000, Baseline::Usage));
        assert_eq!(m.route, Some(("p".into(), "m".into())));
        m.fold(tail(vec![user(3, &"b".repeat(40))], 4)).unwrap();
        assert_eq!(m.total(), (1018, Baseline::Usage));
        // Already folded events are skipped.
        m.fold(tail(vec![user(3, &"b".repeat(40))], 4)).unwrap();
        assert_eq!(m.total().0, 1018);
    }

    #[test]
    fn a_replace_splices_the_span_and_lowers_the_measure() {
        let mut m = Meter::default();
        m.fold(tail(
            vec![
                user(0, "q"),
                answer(
                    1,
                    &["c1"],
                    Some(json!({"inputTokens": 500, "outputTokens": 5})),
                ),
                result(2, "c1"),
                user(3, "next"),
            ],
            4,
        ))
        .unwrap();
        let before = m.total().0;
        let checkpoint = ev(
            event::USER_MESSAGE,
            5,
            json!({"id": "c", "role": "user", "content": [{"type": "text", "text": "sum"}],
                   "source": {"kind": "plugin", "plugin": "compact"}}),
            json!({"op": "replace", "start": 0, "end": 2}),
        );
        m.fold(tail(vec![checkpoint], 6)).unwrap();
        assert_eq!(m.nodes().iter().map(|n| n.seq).collect::<Vec<_>>(), [5, 3]);
        assert!(m.total().0 < before);
        assert_eq!(m.replace_generation, 1);
        let bad = ev(
            event::USER_MESSAGE,
            7,
            json!({"id": "b", "role": "user", "content": [], "source": {"kind": "user"}}),
            json!({"op": "replace", "start": 0, "end": 0}),
        );
        assert!(m.fold(tail(vec![bad], 8)).is_err());
    }

    #[test]
    fn a_malformed_surface_event_is_an_error_naming_it() {
        let mut m = Meter::default();
        let bad = ev(
            event::ASSISTANT_MESSAGE,
            4,
            json!({"turn": 1, "step": 1, "message": {"id": "a", "role": "assistant",
                "content": [{"type": "text", "text": 7}],
                "source": {"kind": "model", "provider": "p", "model": "m"}}}),
            json!("append"),
        );
        let err = m.fold(tail(vec![bad], 5)).unwrap_err();
        assert!(err.contains("session event 4 (assistant/message)"), "{err}");
        assert!(m.nodes().is_empty());
    }

    #[test]
    fn the_newest_batch_shares_one_results_budget() {
        let mut m = Meter::default();
        assert_eq!(m.last_batch(), 1);
        m.fold(tail(
            vec![
                user(0, "q"),
                answer(1, &["c1", "c2", "c3"], None),
                result(2, "c1"),
                result(3, "c2"),
            ],
            4,
        ))
        .unwrap();
        // Three calls: each of their results gets a third.
        assert_eq!(m.last_batch(), 3);
        // Two results so far, `each` tokens: together within twice that,
        // over one less (each may then keep half of it).
        let each = m.nodes()[2].tokens;
        assert_eq!(m.batch_share(2 * each), None);
        assert_eq!(m.batch_share(2 * each - 1), Some((2 * each - 1) / 2));
        assert_eq!(m.batch_share(1), Some(1));
        // A lone result is never shared out.
        m.fold(tail(vec![answer(4, &["c4"], None), result(5, "c4")], 6))
            .unwrap();
        assert_eq!(m.last_batch(), 1);
        assert_eq!(m.batch_share(1), None);
        // An answer without calls: a batch of one, and no results after it.
        m.fold(tail(vec![answer(6, &[], None)], 7)).unwrap();
        assert_eq!((m.last_batch(), m.batch_share(1)), (1, None));
    }

    #[test]
    fn the_cut_keeps_the_recent_tail_and_never_parts_a_call_from_its_result() {
        let mut m = Meter::default();
        m.fold(tail(
            vec![
                user(0, "q"),
                answer(1, &["c1", "c2"], None),
                result(2, "c1"),
                result(3, "c2"),
                user(4, "next"),
                answer(5, &["c3"], None),
                result(6, "c3"),
            ],
            7,
        ))
        .unwrap();
        // Keeping only the last node would cut between c3 and its result:
        // the cut moves back before the answer that opened it.
        assert_eq!(m.select(1), Some(5));
        // Keeping the last three nodes cuts before `next`.
        let tail_tokens: u64 = m.nodes()[4..].iter().map(|n| n.tokens).sum();
        assert_eq!(m.select(tail_tokens), Some(4));
        // Between c1 and c2 is never a cut.
        let from_c2: u64 = m.nodes()[3..].iter().map(|n| n.tokens).sum();
        assert_eq!(m.select(from_c2), Some(1));
        // The last answer's result is what the model has not read yet.
        assert_eq!(m.unanswered_from(), Some(6));
        // Keeping everything leaves nothing to compact.
        assert_eq!(m.select(u64::MAX), None);
        assert_eq!(Meter::default().select(0), None);
    }
}
