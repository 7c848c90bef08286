//! Session events as the chat shows them: assistant text as it streams
//! (fenced code set apart), reasoning dimmed or folded, each tool call as
//! one line and its result as its first and last meaningful lines, errors
//! marked. Colors only when the terminal takes them (not with `NO_COLOR`
//! or when stdout is not a terminal).
//!
//! A line break is always pushed unstyled, so the styled text after the
//! last line break stands alone: the screen can print an unfinished line
//! again below a notice (see `Screen::interject`).

use anstyle::{AnsiColor, Effects, Style};
use dsh_sdk::names::code;
use dsh_sdk::vocab::compaction::{self, CompactionEnd, CompactionSummary};
use dsh_sdk::vocab::message::joined_text;
use dsh_sdk::vocab::records::{AssistantChunk, LlmRetry, ToolCall, ToolResult, TurnEndReason};
use dsh_sdk::vocab::retry_trail::{self, RetryTrail};
use dsh_sdk::vocab::{event, Chunk, ContentBlock, Message, SessionEvent};
use dsh_sdk::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use dsh_sdk::terminal_text::Sanitizer;

use crate::screen::{expand_tabs, sanitize};

/// Styled text and the same text plain (for column counting and for a
/// terminal without colors).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Out {
    /// What to print.
    pub styled: String,
    /// The same without escape sequences.
    pub plain: String,
    /// The tone of the last piece (a run of one tone is styled once).
    last: Option<Tone>,
}

/// Which styles a piece of text gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Plain,
    Dim,
    Code,
    Fence,
    Tool,
    Error,
    Ok,
    Bold,
}

impl Tone {
    fn style(self) -> Style {
        match self {
            Tone::Plain => Style::new(),
            Tone::Dim => Style::new().effects(Effects::DIMMED),
            Tone::Code => Style::new().fg_color(Some(AnsiColor::Cyan.into())),
            Tone::Fence => Style::new().effects(Effects::DIMMED),
            Tone::Tool => Style::new().fg_color(Some(AnsiColor::Magenta.into())),
            Tone::Error => Style::new()
                .fg_color(Some(AnsiColor::Red.into()))
                .effects(Effects::BOLD),
            Tone::Ok => Style::new().fg_color(Some(AnsiColor::Green.into())),
            Tone::Bold => Style::new().effects(Effects::BOLD),
        }
    }
}

/// Builds [`Out`]s in one theme.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Theme {
    /// Escape sequences allowed.
    pub color: bool,
}

impl Theme {
    /// Appends `text` (already sanitized) in `tone`, its line breaks
    /// unstyled.
    pub fn push(&self, out: &mut Out, tone: Tone, text: &str) {
        if tone == Tone::Plain || !text.contains('\n') {
            return self.push_run(out, tone, text);
        }
        for piece in text.split_inclusive('\n') {
            match piece.strip_suffix('\n') {
                Some(line) => {
                    self.push_run(out, tone, line);
                    self.push_run(out, Tone::Plain, "\n");
                }
                None => self.push_run(out, tone, piece),
            }
        }
    }

    /// Appends `text` (without a line break, or plain) in `tone`.
    fn push_run(&self, out: &mut Out, tone: Tone, text: &str) {
        if text.is_empty() {
            return;
        }
        out.plain.push_str(text);
        let style = tone.style();
        if self.color && tone != Tone::Plain {
            let reset = style.render_reset().to_string();
            if out.last == Some(tone) && out.styled.ends_with(&reset) {
                out.styled.truncate(out.styled.len() - reset.len());
                out.styled.push_str(text);
                out.styled.push_str(&reset);
            } else {
                out.styled
                    .push_str(&format!("{}{text}{reset}", style.render()));
            }
        } else {
            out.styled.push_str(text);
        }
        out.last = Some(tone);
    }

    /// One piece of text in one tone.
    pub fn one(&self, tone: Tone, text: &str) -> Out {
        let mut out = Out::default();
        self.push(&mut out, tone, text);
        out
    }
}

/// The renderer's `last_delta` after a text delta (handed over as text).
const DELTA_TEXT: &str = "text";
/// The renderer's `last_delta` after a reasoning delta.
const DELTA_REASONING: &str = "reasoning";

/// Where the streamed text is: inside a fenced code block, at a line
/// start, holding back backticks that may open a fence, inside a
/// reasoning block.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Renderer {
    pub theme: Theme,
    /// Reasoning printed (dimmed) instead of folded to one line.
    pub show_reasoning: bool,
    /// Terminal columns (for shortening lines).
    pub cols: usize,
    in_code: bool,
    in_fence_line: bool,
    mid_line: bool,
    held: String,
    /// The kind of the last streamed delta (`text`/`reasoning`).
    last_delta: String,
    /// The streamed block's sanitizer: an escape sequence split between two
    /// deltas is dropped whole. Reset when the block ends.
    #[serde(default)]
    stream: Sanitizer,
    /// The retries of the request running now (a turn that fails after
    /// retries says the first cause too).
    #[serde(default)]
    retries: RetryTrail,
    /// Part of an answer was shown for the request running now (a retry
    /// discards it, and says so).
    #[serde(default)]
    partial_shown: bool,
}

impl Renderer {
    /// A renderer in `theme`, `cols` wide.
    pub fn new(theme: Theme, cols: usize) -> Renderer {
        Renderer {
            theme,
            cols: cols.max(20),
            ..Renderer::default()
        }
    }

    /// The display of one logged event (empty for events not shown: an
    /// event type this renderer does not show, a chunk that is not a text
    /// or reasoning delta). A known event whose data does not have its
    /// record's shape is shown as an error line naming the event and the
    /// field, never as a silent default.
    pub fn event(&mut self, e: &SessionEvent) -> Out {
        if e.kind != event::LLM_RETRY {
            self.retries.saw(&e.kind);
        }
        let shown = match e.kind.as_str() {
            event::ASSISTANT_CHUNK => e.data_as::<AssistantChunk>().map(|c| self.chunk(&c.chunk)),
            event::ASSISTANT_MESSAGE => {
                // The answer shown is the one kept.
                self.partial_shown = false;
                Ok(self.finish_block())
            }
            event::TOOL_CALL => e.data_as::<ToolCall>().map(|c| self.tool_call(&c)),
            event::TOOL_RESULT => e
                .data_as::<ToolResult>()
                .and_then(|r| self.tool_result(e, &r.message)),
            event::LLM_RETRY => e.data_as::<LlmRetry>().map(|r| self.retry(&r)),
            compaction::SUMMARY => e.data_as::<CompactionSummary>().map(|s| self.compacted(&s)),
            compaction::END => e
                .data_as::<CompactionEnd>()
                .map(|end| self.compaction_end(&end)),
            _ => Ok(Out::default()),
        };
        shown.unwrap_or_else(|err| self.unreadable(&err))
    }

    /// A known event that cannot be shown: what is wrong with it, as an
    /// error line (the error names the event's seq, type and field).
    fn unreadable(&mut self, err: &Error) -> Out {
        let mut out = self.finish_block();
        let text = format!("✗ {}: {}\n", err.code, sanitize(&err.message));
        self.theme.push(&mut out, Tone::Error, &text);
        out
    }

    /// A tool call: its name and its main argument, on one line.
    fn tool_call(&mut self, call: &ToolCall) -> Out {
        let mut out = self.finish_block();
        let args = short_args(
            &call.arguments,
            self.cols.saturating_sub(call.name.len() + 6),
        );
        self.theme
            .push(&mut out, Tone::Tool, &format!("• {}", sanitize(&call.name)));
        self.theme.push(&mut out, Tone::Dim, &format!(" {args}\n"));
        out
    }

    /// A failed model request about to be retried: which retry, after how
    /// long, and the failure (its code and message). Part of an answer
    /// already shown for the request is marked as discarded first: the
    /// retry's answer replaces it.
    fn retry(&mut self, retry: &LlmRetry) -> Out {
        self.retries.retried(retry);
        let mut out = self.finish_block();
        if std::mem::take(&mut self.partial_shown) {
            let text = format!(
                "  (discarded: retrying after {})\n",
                sanitize(&retry.failure.code)
            );
            self.theme.push(&mut out, Tone::Dim, &text);
        }
        let notice = sanitize(&retry_trail::notice(retry)).replace('\n', " ");
        let text = format!("  {}\n", shorten(&notice, self.cols.saturating_sub(3)));
        self.theme.push(&mut out, Tone::Dim, &text);
        out
    }

    /// A compaction summarized part of the history.
    fn compacted(&mut self, summary: &CompactionSummary) -> Out {
        let mut out = self.finish_block();
        let text = format!(
            "  context compacted: {} messages (~{} tokens) summarized\n",
            summary.shadowed_seqs.len(),
            summary.shadowed_token_count
        );
        self.theme.push(&mut out, Tone::Dim, &text);
        out
    }

    /// A compaction ended: nothing to say unless it failed.
    fn compaction_end(&mut self, end: &CompactionEnd) -> Out {
        let Some(error) = &end.error else {
            return Out::default();
        };
        let mut out = self.finish_block();
        let text = format!(
            "✗ compaction failed (history unchanged): {}\n",
            sanitize(error)
        );
        self.theme.push(&mut out, Tone::Error, &text);
        out
    }

    /// The end of a turn (`None` before any turn): an error or an
    /// interruption is said, a failure after retries with how many and the
    /// first cause.
    pub fn turn_end(&mut self, reason: Option<&TurnEndReason>) -> Out {
        let mut out = self.finish_block();
        let retries = std::mem::take(&mut self.retries);
        self.partial_shown = false;
        match reason {
            None | Some(TurnEndReason::Completed) => {}
            Some(TurnEndReason::Error { error }) => self.theme.push(
                &mut out,
                Tone::Error,
                &format!("✗ {}\n", sanitize(&retries.describe(error))),
            ),
            Some(TurnEndReason::Aborted { .. }) => {
                self.theme.push(&mut out, Tone::Dim, "(turn cancelled)\n")
            }
            Some(other) => self.theme.push(
                &mut out,
                Tone::Dim,
                &format!("(turn ended: {})\n", sanitize(other.kind())),
            ),
        }
        out
    }

    /// A streamed chunk: text and reasoning deltas are shown, the other
    /// chunks (block framing, usage, finish) are not.
    fn chunk(&mut self, chunk: &Chunk) -> Out {
        let (kind, text) = match chunk {
            Chunk::TextDelta { text, .. } => (DELTA_TEXT, text),
            Chunk::ReasoningDelta { text, .. } => (DELTA_REASONING, text),
            _ => return Out::default(),
        };
        // A delta of another kind ends the block (and its sanitizer's
        // state) before this one is read.
        let mut out = self.switch_delta(kind);
        let text = expand_tabs(self.stream.push(text));
        if kind == DELTA_TEXT {
            self.text(&mut out, &text);
        } else if self.show_reasoning {
            self.theme.push(&mut out, Tone::Dim, &text);
            self.mid_line = !text.ends_with('\n') && (self.mid_line || !text.is_empty());
        }
        if !out.plain.is_empty() {
            self.partial_shown = true;
        }
        out
    }

    /// Starting a delta of another kind ends the line of the last one; a
    /// folded reasoning block is one dim line.
    fn switch_delta(&mut self, kind: &str) -> Out {
        if self.last_delta == kind {
            return Out::default();
        }
        let mut out = self.finish_block();
        self.last_delta = kind.to_owned();
        if kind == DELTA_REASONING && !self.show_reasoning {
            self.theme.push(
                &mut out,
                Tone::Dim,
                "∴ thinking… (Ctrl-T shows reasoning)\n",
            );
        }
        out
    }

    /// Ends the streamed block (its line, a held fence prefix, an escape
    /// sequence left open).
    pub fn finish_block(&mut self) -> Out {
        let mut out = Out::default();
        let held = std::mem::take(&mut self.held);
        let tone = if self.in_code {
            Tone::Code
        } else {
            Tone::Plain
        };
        self.theme.push(&mut out, tone, &held);
        if self.mid_line || !held.is_empty() {
            self.theme.push(&mut out, Tone::Plain, "\n");
        }
        self.mid_line = false;
        self.in_fence_line = false;
        self.in_code = false;
        self.last_delta.clear();
        self.stream.end();
        out
    }

    /// Assistant text, with fenced code blocks set apart.
    fn text(&mut self, out: &mut Out, text: &str) {
        for c in text.chars() {
            if self.in_fence_line {
                self.theme
                    .push(out, Tone::Fence, c.encode_utf8(&mut [0; 4]));
                if c == '\n' {
                    self.in_fence_line = false;
                    self.mid_line = false;
                }
                continue;
            }
            if !self.mid_line && (c == '`' || !self.held.is_empty()) && self.held.len() < 3 {
                if c == '`' {
                    self.held.push(c);
                    if self.held.len() == 3 {
                        self.held.clear();
                        self.in_code = !self.in_code;
                        self.in_fence_line = true;
                        self.mid_line = true;
                        self.theme.push(out, Tone::Fence, "```");
                    }
                    continue;
                }
                let held = std::mem::take(&mut self.held);
                let tone = if self.in_code {
                    Tone::Code
                } else {
                    Tone::Plain
                };
                self.theme.push(out, tone, &held);
                self.mid_line = true;
            }
            let tone = if self.in_code {
                Tone::Code
            } else {
                Tone::Plain
            };
            self.theme.push(out, tone, c.encode_utf8(&mut [0; 4]));
            self.mid_line = c != '\n';
        }
    }

    /// A tool's result: its first and last meaningful lines, marked when
    /// it failed. A result message whose first block is not a
    /// `tool-result` is an error naming the event.
    fn tool_result(&mut self, e: &SessionEvent, message: &Message) -> Result<Out> {
        let Some(ContentBlock::ToolResult(block)) = message.content.first() else {
            return Err(Error::new(
                code::SESSION_CORRUPT,
                format!(
                    "session event {} ({}) has no `tool-result` block first in its message",
                    e.seq, e.kind
                ),
            ));
        };
        let mut out = self.finish_block();
        let is_error = block.is_error == Some(true);
        let joined = joined_text(&block.content, "\n");
        let text = sanitize(&joined);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim_end)
            .filter(|l| !l.trim().is_empty() && !is_markup(l))
            .collect();
        let width = self.cols.saturating_sub(6);
        let (mark, tone) = if is_error {
            ("  ✗ ", Tone::Error)
        } else {
            ("  └ ", Tone::Dim)
        };
        match lines.as_slice() {
            [] => self
                .theme
                .push(&mut out, tone, &format!("{mark}(no output)\n")),
            [one] => self
                .theme
                .push(&mut out, tone, &format!("{mark}{}\n", shorten(one, width))),
            [first, .., last] => {
                self.theme.push(
                    &mut out,
                    tone,
                    &format!("{mark}{}\n", shorten(first, width)),
                );
                if lines.len() > 2 {
                    self.theme.push(
                        &mut out,
                        Tone::Dim,
                        &format!("    … {} more lines\n", lines.len() - 2),
                    );
                }
                self.theme
                    .push(&mut out, tone, &format!("    {}\n", shorten(last, width)));
            }
        }
        Ok(out)
    }
}

/// A line of a tool's markup (`<content>`, `</content>`) or its footer
/// (`(End of file - total 3 lines)`): not meaningful.
fn is_markup(line: &str) -> bool {
    let t = line.trim();
    (t.starts_with('<') && t.ends_with('>') && !t.contains(' '))
        || (t.starts_with('(') && t.ends_with(')'))
}

/// `text` cut to `width` characters with an ellipsis.
fn shorten(text: &str, width: usize) -> String {
    let width = width.max(10);
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(width - 1).collect();
    s.push('…');
    s
}

/// The short form of a tool call's arguments (the raw JSON text the
/// model wrote): its main argument when it has one of the usual names,
/// else its compact JSON, else the text as written.
fn short_args(arguments: &str, width: usize) -> String {
    // Tool arguments are open JSON until the tool parses them: any object
    // (or anything else the model wrote) is shown.
    let parsed: Value = match serde_json::from_str(arguments) {
        Ok(parsed) => parsed,
        Err(_) => Value::String(arguments.to_owned()),
    };
    const MAIN: [&str; 8] = [
        "command",
        "path",
        "file_path",
        "pattern",
        "url",
        "query",
        "glob",
        "name",
    ];
    let text = MAIN
        .iter()
        .find_map(|k| parsed.get(k).and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| match &parsed {
            Value::Object(m) if m.is_empty() => String::new(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    shorten(&sanitize(&text).replace('\n', " "), width)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::vocab::LlmFailure;
    use serde_json::json;

    fn ev(kind: &str, data: Value) -> SessionEvent {
        SessionEvent::new(kind, 0, data)
    }

    /// A `compaction/summary` of `seqs` (the original's record, whole).
    fn summary(seqs: &[u64], tokens: u64) -> Value {
        json!({"compactionId": "c", "summary": [{"type": "text", "text": "s"}],
            "shadowedRange": {"start": seqs[0], "end": seqs[seqs.len() - 1]},
            "shadowedSeqs": seqs, "shadowedTokenCount": tokens,
            "provider": "p", "model": "m"})
    }

    /// A `tool/result` whose one block says `text`.
    fn result_data(text: &str, is_error: bool) -> Value {
        json!({"turn": 1, "step": 1, "message": {"id": "r", "role": "user", "content": [
            {"type": "tool-result", "toolCallId": "c", "isError": is_error,
             "content": [{"type": "text", "text": text}]}],
            "source": {"kind": "tool", "callId": "c"}}})
    }

    /// An `assistant/chunk` of `chunk`.
    fn chunk_event(chunk: Value) -> SessionEvent {
        ev(
            event::ASSISTANT_CHUNK,
            json!({"turn": 1, "step": 1, "chunk": chunk}),
        )
    }

    #[test]
    fn compactions_are_said_and_a_failed_one_is_an_error() {
        let mut r = Renderer::new(Theme { color: false }, 80);
        let done = r.event(&ev(compaction::SUMMARY, summary(&[1, 2, 3], 1200)));
        assert_eq!(
            done.plain,
            "  context compacted: 3 messages (~1200 tokens) summarized\n"
        );
        assert!(r
            .event(&ev(
                compaction::END,
                json!({"compactionId": "c", "turn": null})
            ))
            .plain
            .is_empty());
        let failed = r.event(&ev(
            compaction::END,
            json!({"compactionId": "c", "turn": 2, "error": "summary is not smaller\u{1b}[2J"}),
        ));
        assert!(failed
            .plain
            .starts_with("✗ compaction failed (history unchanged): summary is not smaller"));
        assert!(!failed.plain.contains('\u{1b}'));
    }

    fn text(r: &mut Renderer, t: &str) -> String {
        r.event(&chunk_event(
            json!({"type": "text-delta", "index": 0, "text": t}),
        ))
        .plain
    }

    #[test]
    fn streamed_text_with_a_fence_split_across_deltas() {
        let mut r = Renderer::new(Theme { color: true }, 80);
        let mut all = String::new();
        for t in ["Look:\n`", "``rs\nfn x", "() {}\n```\nok"] {
            all.push_str(&text(&mut r, t));
        }
        assert_eq!(all, "Look:\n```rs\nfn x() {}\n```\nok");
        assert!(!r.in_code);
        assert_eq!(
            r.event(&ev(event::ASSISTANT_MESSAGE, json!({}))).plain,
            "\n"
        );
    }

    #[test]
    fn a_run_of_one_tone_is_styled_once() {
        let theme = Theme { color: true };
        let mut out = Out::default();
        theme.push(&mut out, Tone::Code, "a");
        theme.push(&mut out, Tone::Code, "b");
        assert_eq!(out.styled.matches("\x1b[").count(), 2, "{:?}", out.styled);
        assert_eq!(out.plain, "ab");
    }

    #[test]
    fn code_is_colored_only_with_colors_on() {
        let mut plain = Renderer::new(Theme { color: false }, 80);
        let code = json!({"type": "text-delta", "index": 0, "text": "```\ncode\n```\n"});
        let out = plain.event(&chunk_event(code.clone()));
        assert_eq!(out.styled, out.plain);
        let mut colored = Renderer::new(Theme { color: true }, 80);
        let out = colored.event(&chunk_event(code));
        assert!(out.styled.contains("\x1b["), "{:?}", out.styled);
    }

    #[test]
    fn a_tool_call_is_one_line_and_its_result_first_and_last_lines() {
        let mut r = Renderer::new(Theme::default(), 80);
        let call = r.event(&ev(
            event::TOOL_CALL,
            json!({"turn": 1, "step": 1, "callId": "c", "name": "bash",
                "arguments": "{\"command\":\"ls -la\"}"}),
        ));
        assert_eq!(call.plain, "• bash ls -la\n");
        let result = r.event(&ev(event::TOOL_RESULT, result_data("a\n\nb\nc\n", false)));
        assert_eq!(result.plain, "  └ a\n    … 1 more lines\n    c\n");
        let failed = r.event(&ev(event::TOOL_RESULT, result_data("Error: no", true)));
        assert_eq!(failed.plain, "  ✗ Error: no\n");
    }

    #[test]
    fn reasoning_folds_to_one_line_unless_shown() {
        let mut r = Renderer::new(Theme::default(), 80);
        let chunk =
            |t: &str| chunk_event(json!({"type": "reasoning-delta", "index": 0, "text": t}));
        assert!(r.event(&chunk("hmm")).plain.starts_with("∴ thinking"));
        assert_eq!(r.event(&chunk("more")).plain, "");
        r.finish_block();
        r.show_reasoning = true;
        assert_eq!(r.event(&chunk("deep")).plain, "deep");
    }

    #[test]
    fn errors_are_marked_and_model_escapes_are_dropped() {
        let mut r = Renderer::new(Theme::default(), 80);
        let error = TurnEndReason::Error {
            error: LlmFailure::new("AUTH", "bad key"),
        };
        assert_eq!(r.turn_end(Some(&error)).plain, "✗ AUTH: bad key\n");
        assert_eq!(text(&mut r, "\x1b[2Jhi"), "hi");
    }

    #[test]
    fn an_escape_split_across_deltas_is_dropped_whole_and_bidi_controls_go() {
        let mut r = Renderer::new(Theme { color: true }, 80);
        let mut all = String::new();
        for t in [
            "copy \x1b]52;c;",
            "aGVsbG8=",
            "\x07done \x1b]0;ti",
            "tle\x1b\\ \u{202e}evil\u{2066}\ttab",
        ] {
            let out = text(&mut r, t);
            all.push_str(&out);
        }
        assert_eq!(all, "copy done  evil    tab");
        // A sequence left open ends with its block.
        assert_eq!(text(&mut r, "x\x1b]0;"), "x");
        r.event(&ev(event::ASSISTANT_MESSAGE, json!({})));
        assert_eq!(text(&mut r, "next"), "next");
    }

    #[test]
    fn a_retry_line_names_the_retry_and_the_failures_code() {
        // The original's `llm/retry` record: the code is the failure's.
        let retry = json!({"retryId": "r", "turn": 1, "step": 1, "provider": "deepseek",
            "mode": "normal", "retry": 1, "maxRetries": 2, "delayMs": 500,
            "failure": {"message": "slow down", "code": "RATE_LIMIT", "status": 429}});
        let mut r = Renderer::new(Theme::default(), 80);
        assert_eq!(
            r.event(&ev(event::LLM_RETRY, retry)).plain,
            "  retrying the model request (retry 1 of 2) in 500 ms: RATE_LIMIT: slow down\n"
        );
    }

    fn retry_event(n: u32, code: &str, message: &str) -> SessionEvent {
        ev(
            event::LLM_RETRY,
            json!({"retryId": "r", "turn": 1, "step": 1, "provider": "p",
                "mode": "normal", "retry": n, "maxRetries": 2, "delayMs": 1,
                "failure": {"message": message, "code": code}}),
        )
    }

    #[test]
    fn a_partial_answer_a_retry_throws_away_is_marked_discarded() {
        let mut r = Renderer::new(Theme::default(), 80);
        assert_eq!(text(&mut r, "The answer is"), "The answer is");
        assert_eq!(
            r.event(&retry_event(1, "SERVER", "HTTP 503: busy")).plain,
            "\n  (discarded: retrying after SERVER)\n  retrying the model request (retry 1 of 2) in 1 ms: SERVER: HTTP 503: busy\n"
        );
        // A retry before anything was shown has nothing to mark.
        assert!(!r
            .event(&retry_event(2, "SERVER", "HTTP 503: busy"))
            .plain
            .contains("discarded"));
        // An answer kept is never marked.
        text(&mut r, "Kept.");
        r.event(&ev(event::ASSISTANT_MESSAGE, json!({})));
        assert!(!r
            .event(&retry_event(1, "SERVER", "again"))
            .plain
            .contains("discarded"));
    }

    #[test]
    fn a_failure_after_retries_names_the_first_cause() {
        let mut r = Renderer::new(Theme::default(), 80);
        r.event(&retry_event(1, "SERVER", "HTTP 503: Loading model"));
        r.event(&retry_event(2, "TIMEOUT", "no answer"));
        let error = TurnEndReason::Error {
            error: LlmFailure::new("CONTEXT_WINDOW_EXCEEDED", "prompt too long"),
        };
        assert_eq!(
            r.turn_end(Some(&error)).plain,
            "✗ CONTEXT_WINDOW_EXCEEDED: prompt too long (after 2 retries; first: SERVER: HTTP 503: Loading model)\n"
        );
        // The next turn's failure stands alone.
        assert_eq!(
            r.turn_end(Some(&error)).plain,
            "✗ CONTEXT_WINDOW_EXCEEDED: prompt too long\n"
        );
    }

    #[test]
    fn a_line_break_is_never_styled() {
        let mut r = Renderer::new(Theme { color: true }, 80);
        let out = r.event(&chunk_event(
            json!({"type": "text-delta", "index": 0, "text": "```\nlet a;\nlet b;"}),
        ));
        // After each line break the styled text starts afresh.
        let last = &out.styled[out.styled.rfind('\n').unwrap() + 1..];
        assert!(last.starts_with("\x1b["), "{:?}", out.styled);
        assert!(out.styled.contains("\x1b[0m\n"), "{:?}", out.styled);
    }

    #[test]
    fn a_malformed_known_event_is_an_error_line_and_an_unknown_one_is_skipped() {
        let mut r = Renderer::new(Theme::default(), 80);
        // The pre-fix reading: a flat `code` and no `failure`.
        let flat = json!({"attempt": 1, "delayMs": 5, "code": "SERVER"});
        let out = r.event(&SessionEvent::new(event::LLM_RETRY, 7, flat));
        assert!(
            out.plain
                .starts_with("✗ SESSION_CORRUPT: session event 7 (llm/retry)"),
            "{:?}",
            out.plain
        );
        let no_block = json!({"turn": 1, "step": 1, "message": {"id": "r", "role": "user",
            "content": [], "source": {"kind": "tool", "callId": "c"}}});
        let out = r.event(&ev(event::TOOL_RESULT, no_block));
        assert!(
            out.plain.contains("no `tool-result` block"),
            "{:?}",
            out.plain
        );
        assert_eq!(
            r.event(&ev("plan/mode", json!({"active": true}))),
            Out::default()
        );
        let framing = chunk_event(json!({"type": "block-start", "index": 0, "blockType": "text"}));
        assert_eq!(r.event(&framing), Out::default());
    }

    #[test]
    fn a_turn_end_says_a_cancel_and_an_unknown_kind() {
        let mut r = Renderer::new(Theme::default(), 80);
        assert_eq!(r.turn_end(None).plain, "");
        assert_eq!(r.turn_end(Some(&TurnEndReason::Completed)).plain, "");
        let aborted = TurnEndReason::Aborted {
            reason: dsh_sdk::vocab::records::CancelCause::User,
        };
        assert_eq!(r.turn_end(Some(&aborted)).plain, "(turn cancelled)\n");
        assert_eq!(
            r.turn_end(Some(&TurnEndReason::MaxTokens)).plain,
            "(turn ended: max-tokens)\n"
        );
    }
}
