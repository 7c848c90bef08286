//! A request that cannot fit the window after recovery did what it could:
//! what keeps it from fitting, said in the turn's error, and cut for the
//! requests after it so the session is not wedged.
//!
//! The culprit is the largest item on the surface (by the meter's
//! estimate, `vocab::tokens`). A user message or a tool result over its
//! share of the window (`resultShare`) is cut to its first and last parts
//! within that share, as a
//! `compaction/prune` record and the replacing event (the log keeps the
//! original; the model sees the cut from the next request on), and the
//! error names it, its size and the window. Otherwise the error names the
//! window, the request's size and its largest item: the system prompt and
//! tools when they alone leave no room, or a window the server may have
//! smaller than the route says, else the next prompt compacts what came
//! before it. The server's own message follows, whole.

use dsh_sdk::api::sessions::NewEvent;
use dsh_sdk::names::llm_failure;
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::compaction::cut::{cut_message, text_bytes, Keep};
use dsh_sdk::vocab::compaction::{is_checkpoint, CompactionPrune, ShadowedRange, PRUNE};
use dsh_sdk::vocab::records::{RequestHeader, ToolResult};
use dsh_sdk::vocab::{event, tokens, Message, SessionEvent, SurfaceOp};

use crate::surfaced::Surfaced;

/// Put where an item was cut because the request could not fit.
pub const MARKER: &str = "\n\n[... the middle of this message was cut: it does not fit the model's context window; the session log keeps it whole ...]\n\n";

/// The window a request must fit, for the messages.
#[derive(Debug, Clone, Copy)]
pub struct Window<'a> {
    /// The route, `provider/model`.
    pub route: (&'a str, &'a str),
    /// Its size in tokens.
    pub tokens: u64,
    /// The tokens one item may take (an item over them is cut to them).
    pub item_tokens: u64,
}

impl Window<'_> {
    /// [`leaves_no_room`] in this window.
    pub fn leaves_no_room(&self, header: u64) -> bool {
        leaves_no_room(self.tokens, self.item_tokens, header)
    }
}

/// Whether a request header of `header` estimated tokens (the system
/// prompt and the tool descriptions) leaves the conversation no room in a
/// window of `window` tokens: it takes all of it but one item's share
/// (`item_tokens`).
pub fn leaves_no_room(window: u64, item_tokens: u64, header: u64) -> bool {
    header >= window.saturating_sub(item_tokens)
}

/// One surface item, priced.
#[derive(Debug, Clone)]
pub struct Item {
    /// Its event's seq.
    pub seq: u64,
    /// Its event's type.
    pub kind: String,
    /// Its message.
    pub message: Message,
    /// Its estimate.
    pub tokens: u64,
}

impl Item {
    /// How a person finds it: "the user message at seq 4", "the result of
    /// tool call c1 at seq 9".
    pub fn describe(&self) -> String {
        match (self.kind.as_str(), self.message.call_id()) {
            (event::TOOL_RESULT, Some(call)) => {
                format!("the result of tool call {call} at seq {}", self.seq)
            }
            (event::ASSISTANT_MESSAGE, _) => format!("the model's answer at seq {}", self.seq),
            _ => format!("the user message at seq {}", self.seq),
        }
    }

    /// Whether it may be cut: a user message (not a checkpoint) or a tool
    /// result.
    fn cuttable(&self) -> bool {
        match self.kind.as_str() {
            event::USER_MESSAGE => !is_checkpoint(&self.message),
            event::TOOL_RESULT => true,
            _ => false,
        }
    }
}

/// The surface items `seqs` of `log`, priced.
pub fn items(log: &[SessionEvent], seqs: &[u64]) -> Result<Vec<Item>> {
    let mut out = Vec::with_capacity(seqs.len());
    for &seq in seqs {
        let Some(e) = log.get(seq as usize).filter(|e| e.seq == seq) else {
            continue;
        };
        let Some(message) = Surfaced::read(e)?.into_history() else {
            continue;
        };
        out.push(Item {
            seq,
            kind: e.kind.clone(),
            tokens: tokens::of_typed_message(&message),
            message,
        });
    }
    Ok(out)
}

/// The estimate of a request header's system prompt and tools.
pub fn header_tokens(header: Option<&RequestHeader>) -> u64 {
    header.map_or(0, |h| {
        tokens::of_system(h.system.as_deref())
            + h.tools.as_deref().map_or(0, tokens::of_tool_schemas)
    })
}

/// The events that cut `item` to `max_tokens`: its `compaction/prune`
/// record and the replacing event (a `replace` of that one node, differing
/// only in the message's text). `None` when it is not to be cut or nothing
/// would be.
pub fn cut(log: &[SessionEvent], item: &Item, max_tokens: u64) -> Result<Option<Vec<NewEvent>>> {
    if !item.cuttable() {
        return Ok(None);
    }
    let whole = Keep::chars(usize::MAX, usize::MAX);
    let Some(shorter) = cut_message(&item.message, whole, Some(max_tokens), MARKER) else {
        return Ok(None);
    };
    let seq = item.seq;
    let record = CompactionPrune {
        shadowed_range: ShadowedRange {
            start: seq,
            end: seq,
        },
        shadowed_seqs: vec![seq],
        shadowed_token_count: tokens::of_typed_message(&item.message),
    };
    let replace = SurfaceOp::Replace {
        start: seq,
        end: seq,
    };
    let replacement = if item.kind == event::TOOL_RESULT {
        let Some(original) = log.get(seq as usize) else {
            return Ok(None);
        };
        let mut result: ToolResult = original.data_as()?;
        result.message = shorter;
        NewEvent::surface(event::TOOL_RESULT, &result, replace, Some(vec![seq]))?
    } else {
        NewEvent::surface(event::USER_MESSAGE, &shorter, replace, Some(vec![seq]))?
    };
    Ok(Some(vec![NewEvent::typed(PRUNE, &record)?, replacement]))
}

/// The bytes of an item's visible text (a result's content, or its own).
fn bytes_of(message: &Message) -> usize {
    match message.tool_result_block() {
        Some(r) => text_bytes(&r.content),
        None => text_bytes(&message.content),
    }
}

/// The turn's error for `item`, cut to `window.item_tokens` for the
/// requests after this one; what the server said comes after.
pub fn cut_error(window: Window<'_>, item: &Item, server: &str) -> Error {
    turn_error(
        format!(
            "the request does not fit the context window of {}/{} ({} tokens): {} is about {} tokens on its own ({} bytes; one item may take about {} tokens). It was cut to its first and last parts, about {} tokens, for the requests after this one (the session log keeps it whole), so the next prompt works; for the model to see all of it, send it in smaller parts, or save it to a file and ask for the file to be read.",
            window.route.0,
            window.route.1,
            window.tokens,
            item.describe(),
            item.tokens,
            bytes_of(&item.message),
            window.item_tokens,
            window.item_tokens,
        ),
        server,
    )
}

/// The turn's error: `message`, then what the server said.
fn turn_error(message: String, server: &str) -> Error {
    let message = match server.trim() {
        "" => message,
        said => format!("{message} (The server said: {said})"),
    };
    Error::new(llm_failure::CONTEXT_WINDOW_EXCEEDED, message)
}

/// The turn's error when no one item is over its share: the system prompt
/// and tools when they alone leave no room for the conversation; a request
/// estimated within the window (the server's window may be smaller than
/// the route says); else the request's size and its largest item
/// (compacted by the next prompt). What the server said comes after.
pub fn plain_error(
    window: Window<'_>,
    header: u64,
    total: u64,
    largest: Option<&Item>,
    server: &str,
) -> Error {
    let (route, tokens) = (window.route, window.tokens);
    let message = if window.leaves_no_room(header) {
        format!(
            "the request does not fit the context window of {}/{} ({tokens} tokens): the system prompt and the tool descriptions alone are about {header} tokens, leaving no room for the conversation. Use a model with a larger window (if the server's window is larger than {tokens}, set `contextWindow` in the route's `models`), or load fewer tools.",
            route.0, route.1
        )
    } else if total < tokens {
        format!(
            "the request does not fit the context window of {}/{} ({tokens} tokens) even after compaction, though it is estimated at about {total} tokens: the server's window may be smaller than {tokens} (set `contextWindow` in the route's `models` to the server's). The next prompt compacts what came before it.",
            route.0, route.1
        )
    } else {
        let largest = largest.map_or(String::new(), |i| {
            format!(
                "; its largest item is {} (about {} tokens)",
                i.describe(),
                i.tokens
            )
        });
        format!(
            "the request does not fit the context window of {}/{} ({tokens} tokens) even after compaction: it is about {total} tokens{largest}. The next prompt compacts what came before it.",
            route.0, route.1
        )
    };
    turn_error(message, server)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn log_of(events: Vec<serde_json::Value>) -> Vec<SessionEvent> {
        serde_json::from_value(json!(events)).unwrap()
    }

    fn window() -> Window<'static> {
        Window {
            route: ("fake", "m1"),
            tokens: 4096,
            item_tokens: 1024,
        }
    }

    #[test]
    fn an_oversized_user_message_is_cut_and_named() {
        let text = "9".repeat(30_000);
        let log = log_of(vec![json!({"type": "user/message", "seq": 0, "time": 1,
            "surfaceOp": "append",
            "data": {"id": "u", "role": "user", "content": [{"type": "text", "text": text}],
                     "source": {"kind": "user"}}})]);
        let items = items(&log, &[0]).unwrap();
        assert_eq!(items.len(), 1);
        assert!(items[0].tokens >= 30_000);
        let events = cut(&log, &items[0], 1024).unwrap().unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].kind, PRUNE);
        let shorter: Message = serde_json::from_value(events[1].data.clone()).unwrap();
        assert_eq!(shorter.id, "u");
        assert!(tokens::of_typed_message(&shorter) <= 1024);
        assert!(shorter
            .text()
            .contains("does not fit the model's context window"));
        let e = cut_error(window(), &items[0], "");
        assert_eq!(e.code, llm_failure::CONTEXT_WINDOW_EXCEEDED);
        for part in [
            "fake/m1 (4096 tokens)",
            "the user message at seq 0 is about 30",
            "30000 bytes",
            "about 1024 tokens, for the requests after",
        ] {
            assert!(e.message.contains(part), "{part}: {}", e.message);
        }
    }

    #[test]
    fn a_checkpoint_or_an_answer_is_named_not_cut() {
        let log = log_of(vec![
            json!({"type": "assistant/message", "seq": 0, "time": 1,
            "surfaceOp": "append",
            "data": {"turn": 1, "step": 1, "message": {"id": "a", "role": "assistant",
                "content": [{"type": "text", "text": "x".repeat(9000)}],
                "source": {"kind": "model", "provider": "p", "model": "m"}}}}),
        ]);
        let items = items(&log, &[0]).unwrap();
        assert!(cut(&log, &items[0], 1024).unwrap().is_none());
        let e = plain_error(window(), 100, 5000, items.first(), "");
        assert!(e.message.contains("the model's answer at seq 0"), "{e}");
        assert!(e.message.contains("next prompt compacts"), "{e}");
        let e = plain_error(window(), 100, 3000, items.first(), "too long");
        assert!(e.message.contains("may be smaller than 4096"), "{e}");
        assert!(e.message.ends_with("(The server said: too long)"), "{e}");
        assert!(window().leaves_no_room(3072) && !window().leaves_no_room(3071));
        // A window of 1 token leaves none to anything; a huge one does not
        // overflow.
        assert!(leaves_no_room(1, 1, 0));
        assert!(!leaves_no_room(u64::MAX, u64::MAX / 4, u64::MAX / 2));
        let e = plain_error(window(), 3500, 5000, None, "");
        assert!(
            e.message.contains(
                "the system prompt and the tool descriptions alone are about 3500 tokens"
            ),
            "{e}"
        );
    }
}
