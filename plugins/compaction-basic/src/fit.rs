//! Fitting the summary request into its route's context window. It is
//! priced with the meter's estimate (`vocab::tokens`: the larger of the
//! original's quarter token a character and a dense count that takes a
//! digit for a token), with a tenth of the room spare: the estimate runs
//! up to a tenth low on code and numbers, and a chat template adds tokens
//! around every message.
//!
//! The conversation's tools stay when everything fits (the provider's
//! prefix cache is reused), and are left out when it does not (only a stub
//! of each tool the messages call stays, its name alone: some APIs refuse
//! a history with tool calls and no tools declared); then every
//! message estimated over an item's share of the window is cut to its
//! first and last parts; then the oldest messages are left out (a prior
//! checkpoint first in line is kept), with a note saying so, until the
//! request fits.

use dsh_sdk::names::code;
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::compaction::cut::{cut_message, Keep};
use dsh_sdk::vocab::compaction::is_checkpoint;
use dsh_sdk::vocab::{tokens, ContentBlock, Message, MessageSource, ToolSchema};

/// Put where a message was cut to fit a summary request.
pub const CUT_MARKER: &str = "\n\n[... cut to fit the model's context window ...]\n\n";

/// The tokens set aside for the note that says messages were left out.
const NOTE_TOKENS: u64 = 96;

/// What a summary request is made of, before fitting.
pub struct SummaryParts<'a> {
    /// The conversation's system prompt.
    pub system: Option<&'a str>,
    /// The conversation's tools.
    pub tools: &'a [ToolSchema],
    /// The shadowed messages, oldest first.
    pub messages: Vec<Message>,
    /// The final user message that asks for the summary.
    pub ask: &'a Message,
}

/// The room a summary request has.
#[derive(Debug, Clone, Copy)]
pub struct Room {
    /// The route's window, in tokens.
    pub window: u64,
    /// The tokens its input may take (the window less the output cap); a
    /// tenth of it is kept spare.
    pub input: u64,
    /// The estimated tokens one message may keep when it is cut.
    pub item_tokens: u64,
}

impl Room {
    /// The input's tokens less the tenth kept spare.
    fn usable(&self) -> u64 {
        self.input - self.input / 10
    }
}

/// A summary request that fits.
#[derive(Debug)]
pub struct Fitted {
    /// The tools it declares.
    pub tools: Declared,
    /// The messages to summarize (cut, and with a note first when some
    /// were left out).
    pub messages: Vec<Message>,
    /// How many messages were cut.
    pub cut: usize,
    /// How many were left out.
    pub dropped: usize,
    /// The request's estimate.
    pub tokens: u64,
}

/// The tools a summary request declares.
#[derive(Debug, Clone, PartialEq)]
pub enum Declared {
    /// The conversation's own.
    All,
    /// A stub (its name, no description, any object for arguments) of each
    /// tool the messages call, in the order first called; none when they
    /// call none.
    Called(Vec<ToolSchema>),
}

/// A stub of each tool `messages` call.
fn called(messages: &[Message]) -> Vec<ToolSchema> {
    let mut out: Vec<ToolSchema> = Vec::new();
    for call in messages.iter().flat_map(Message::tool_calls) {
        if !out.iter().any(|t| t.name == call.name) {
            out.push(ToolSchema {
                name: call.name.clone(),
                description: String::new(),
                parameters: serde_json::json!({"type": "object"}),
            });
        }
    }
    out
}

impl Fitted {
    /// `messages` whole, with the tools (a window that is not known).
    pub fn whole(messages: Vec<Message>) -> Fitted {
        Fitted {
            tools: Declared::All,
            tokens: messages.iter().map(tokens::of_typed_message).sum(),
            messages,
            cut: 0,
            dropped: 0,
        }
    }
}

/// Fits `parts` into `room` (see the module's doc); an error when even the
/// system prompt, the instruction and one message cannot fit.
pub fn fit_summary(parts: SummaryParts<'_>, room: Room) -> Result<Fitted> {
    let SummaryParts {
        system,
        tools,
        mut messages,
        ask,
    } = parts;
    let fixed = tokens::of_system(system) + tokens::of_typed_message(ask);
    let tools_price = tokens::of_tool_schemas(tools);
    let mut prices: Vec<u64> = messages.iter().map(tokens::of_typed_message).collect();
    let sum = |p: &[u64]| p.iter().sum::<u64>();
    if fixed + tools_price + sum(&prices) <= room.usable() {
        return Ok(Fitted {
            tools: Declared::All,
            tokens: fixed + tools_price + sum(&prices),
            messages,
            cut: 0,
            dropped: 0,
        });
    }
    // The stubs of every tool called are priced up front: leaving messages
    // out can only make them fewer.
    let fixed = fixed + tokens::of_tool_schemas(&called(&messages));
    let mut cut = 0;
    if fixed + sum(&prices) > room.usable() {
        cut = cut_oversized(&mut messages, &mut prices, room.item_tokens);
    }
    let dropped = drop_oldest(&mut messages, &mut prices, fixed, room)?;
    Ok(Fitted {
        tools: Declared::Called(called(&messages)),
        tokens: fixed + sum(&prices),
        messages,
        cut,
        dropped,
    })
}

/// Cuts every message estimated over `item_tokens` down to them; how many
/// were cut.
fn cut_oversized(messages: &mut [Message], prices: &mut [u64], item_tokens: u64) -> usize {
    let whole = Keep::chars(usize::MAX, usize::MAX);
    let mut cut = 0;
    for (message, p) in messages.iter_mut().zip(prices.iter_mut()) {
        if *p <= item_tokens {
            continue;
        }
        if let Some(shorter) = cut_message(message, whole, Some(item_tokens), CUT_MARKER) {
            *p = tokens::of_typed_message(&shorter);
            *message = shorter;
            cut += 1;
        }
    }
    cut
}

/// Leaves out the oldest messages (a checkpoint first in line stays; a
/// result never stays without its call) until the request fits, putting a
/// note in their place; how many were left out.
fn drop_oldest(
    messages: &mut Vec<Message>,
    prices: &mut Vec<u64>,
    fixed: u64,
    room: Room,
) -> Result<usize> {
    let keep = usize::from(messages.first().is_some_and(is_checkpoint));
    let total = |p: &[u64], dropped: usize| {
        fixed + p.iter().sum::<u64>() + if dropped > 0 { NOTE_TOKENS } else { 0 }
    };
    let (mut dropped, mut dropped_tokens) = (0, 0);
    while total(prices, dropped) > room.usable() && messages.len() > keep + 1 {
        messages.remove(keep);
        dropped_tokens += prices.remove(keep);
        dropped += 1;
        // The results of a call left out go with it.
        while messages.len() > keep + 1 && messages[keep].tool_result_block().is_some() {
            messages.remove(keep);
            dropped_tokens += prices.remove(keep);
            dropped += 1;
        }
    }
    if total(prices, dropped) > room.usable() {
        return Err(Error::new(
            code::COMPACTION_FAILED,
            format!(
                "the summary request cannot fit the model's context window of {} tokens: the system prompt, the instruction and the newest message are estimated at {} tokens, more than the {} its input may use",
                room.window,
                total(prices, dropped),
                room.usable()
            ),
        ));
    }
    if dropped > 0 {
        let note = format!(
            "[{dropped} earlier messages of this conversation (about {dropped_tokens} tokens) were left out here: they did not fit the model's context window of {} tokens.]",
            room.window
        );
        let note = Message::user(
            dsh_sdk::new_id(),
            vec![ContentBlock::text(note)],
            MessageSource::plugin(crate::summarizer::ASKER),
        );
        prices.insert(keep, tokens::of_typed_message(&note));
        messages.insert(keep, note);
    }
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::vocab::compaction::{checkpoint_message, CheckpointSource};
    use serde_json::json;

    fn user(text: &str) -> Message {
        Message::user_text(dsh_sdk::new_id(), text)
    }

    fn schema(description: &str) -> ToolSchema {
        ToolSchema {
            name: "bash".into(),
            description: description.into(),
            parameters: json!({"type": "object"}),
        }
    }

    fn room(window: u64, input: u64) -> Room {
        Room {
            window,
            input,
            item_tokens: window / 4,
        }
    }

    #[test]
    fn tools_stay_when_everything_fits_and_go_first_when_not() {
        let ask = user("summarize");
        let tools = [schema(&"d".repeat(2000))];
        let parts = |m: Vec<Message>| SummaryParts {
            system: Some("sys"),
            tools: &tools,
            messages: m,
            ask: &ask,
        };
        let fitted = fit_summary(parts(vec![user("a"), user("b")]), room(4096, 3072)).unwrap();
        assert_eq!(fitted.tools, Declared::All);
        assert_eq!(
            (fitted.messages.len(), fitted.cut, fitted.dropped),
            (2, 0, 0)
        );
        // About 1,500 tokens of messages and 500 of tools do not fit the
        // 1,980 usable of 2,200 together; the messages alone do.
        let big = vec![user(&"x".repeat(3000)), user(&"y".repeat(3000))];
        let fitted = fit_summary(parts(big), room(4096, 2200)).unwrap();
        assert_eq!(fitted.tools, Declared::Called(vec![]));
        assert_eq!(
            (fitted.messages.len(), fitted.cut, fitted.dropped),
            (2, 0, 0)
        );
        assert!(fitted.tokens <= 1980, "{}", fitted.tokens);
    }

    #[test]
    fn left_out_tools_leave_a_stub_of_each_tool_called() {
        let ask = user("summarize");
        let tools = [schema(&"d".repeat(4000))];
        let call = |id: &str| {
            Message::assistant(
                id,
                vec![ContentBlock::tool_call(id, "bash", "{}")],
                "p",
                "m",
            )
        };
        let result = |id: &str| {
            Message::tool_result(format!("r{id}"), id, vec![ContentBlock::text("ok")], false)
        };
        let parts = SummaryParts {
            system: None,
            tools: &tools,
            messages: vec![call("c1"), result("c1"), call("c2"), result("c2")],
            ask: &ask,
        };
        let fitted = fit_summary(parts, room(4096, 600)).unwrap();
        let Declared::Called(stubs) = fitted.tools else {
            panic!("the tools did not fit: {:?}", fitted.tools)
        };
        assert_eq!(stubs.len(), 1);
        assert_eq!(
            (stubs[0].name.as_str(), stubs[0].description.as_str()),
            ("bash", "")
        );
        assert_eq!(fitted.messages.len(), 4);
    }

    #[test]
    fn oversized_messages_are_cut_then_the_oldest_left_out_with_a_note() {
        let ask = user("summarize");
        let checkpoint = checkpoint_message("c", &CheckpointSource::new("k", None), &[]);
        let messages = vec![
            checkpoint,
            user(&"o".repeat(2000)),
            user(&"p".repeat(2000)),
            user(&"n".repeat(40_000)),
        ];
        let parts = SummaryParts {
            system: None,
            tools: &[],
            messages,
            ask: &ask,
        };
        let fitted = fit_summary(parts, room(4096, 2000)).unwrap();
        assert!(fitted.tokens <= 1800, "{}", fitted.tokens);
        assert_eq!(fitted.cut, 1);
        // The checkpoint stays first, then the note, then the newest, cut.
        assert!(is_checkpoint(&fitted.messages[0]));
        let note = fitted.messages[1].text();
        assert!(note.contains("were left out here"), "{note}");
        assert!(note.contains("window of 4096 tokens"), "{note}");
        let newest = fitted.messages.last().unwrap();
        assert!(newest.text().contains(CUT_MARKER.trim()));
        assert!(tokens::of_typed_message(newest) <= 1024);
        assert!(fitted.dropped >= 1);
    }

    #[test]
    fn a_result_is_never_kept_without_its_call() {
        let ask = user("summarize");
        let call = Message::assistant(
            "a",
            vec![ContentBlock::tool_call("c1", "read", "{}")],
            "p",
            "m",
        );
        let result: Message = serde_json::from_value(json!({"id": "r", "role": "user",
            "content": [{"type": "tool-result", "toolCallId": "c1", "content": [{"type": "text", "text": "z".repeat(1500)}]}],
            "source": {"kind": "tool", "callId": "c1"}}))
        .unwrap();
        let parts = SummaryParts {
            system: None,
            tools: &[],
            messages: vec![user(&"q".repeat(1500)), call, result, user("last")],
            ask: &ask,
        };
        let fitted = fit_summary(parts, room(4096, 400)).unwrap();
        assert!(fitted
            .messages
            .iter()
            .all(|m| m.tool_result_block().is_none()));
        assert_eq!(fitted.messages.last().unwrap().text(), "last");
        // No call is left, so no tool is declared.
        assert_eq!(fitted.tools, Declared::Called(vec![]));
        // Nothing fits at all: a clear error naming the window.
        let parts = SummaryParts {
            system: Some(&"s".repeat(10_000)),
            tools: &[],
            messages: vec![user("only")],
            ask: &ask,
        };
        let e = fit_summary(parts, room(4096, 400)).unwrap_err();
        assert!(e.message.contains("window of 4096 tokens"), "{e}");
    }
}
