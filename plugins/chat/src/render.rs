//! Session events as the chat shows them: assistant text as it streams
//! (fenced code set apart), reasoning dimmed or folded, each tool call as
//! one line and its result as its first and last meaningful lines, errors
//! marked. Colors only when the terminal takes them (not with `NO_COLOR`
//! or when stdout is not a terminal).

use anstyle::{AnsiColor, Effects, Style};
use dsh_sdk::vocab::{compaction, event, SessionEvent};
use dsh_sdk::Value;
use serde::{Deserialize, Serialize};

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
    /// Appends `text` (already sanitized) in `tone`.
    pub fn push(&self, out: &mut Out, tone: Tone, text: &str) {
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

    /// The display of one logged event (empty for events not shown).
    pub fn event(&mut self, e: &SessionEvent) -> Out {
        match e.kind.as_str() {
            event::ASSISTANT_CHUNK => self.chunk(&e.data["chunk"]),
            event::ASSISTANT_MESSAGE => self.finish_block(),
            event::TOOL_CALL => {
                let mut out = self.finish_block();
                let name = e.data["name"].as_str().unwrap_or("?");
                let args = short_args(
                    &e.data["arguments"],
                    self.cols.saturating_sub(name.len() + 6),
                );
                self.theme
                    .push(&mut out, Tone::Tool, &format!("• {}", sanitize(name)));
                self.theme.push(&mut out, Tone::Dim, &format!(" {args}\n"));
                out
            }
            event::TOOL_RESULT => self.tool_result(&e.data),
            event::LLM_RETRY => {
                let mut out = self.finish_block();
                let text = format!(
                    "  retrying the model request (attempt {}) in {} ms: {}\n",
                    e.data["attempt"],
                    e.data["delayMs"].as_u64().unwrap_or(0),
                    sanitize(e.data["code"].as_str().unwrap_or("error"))
                );
                self.theme.push(&mut out, Tone::Dim, &text);
                out
            }
            compaction::SUMMARY => {
                let mut out = self.finish_block();
                let text = format!(
                    "  context compacted: {} messages (~{} tokens) summarized\n",
                    e.data["shadowedSeqs"].as_array().map_or(0, Vec::len),
                    e.data["shadowedTokenCount"].as_u64().unwrap_or(0)
                );
                self.theme.push(&mut out, Tone::Dim, &text);
                out
            }
            compaction::END => match e.data["error"].as_str() {
                Some(error) => {
                    let mut out = self.finish_block();
                    let text = format!(
                        "✗ compaction failed (history unchanged): {}\n",
                        sanitize(error)
                    );
                    self.theme.push(&mut out, Tone::Error, &text);
                    out
                }
                None => Out::default(),
            },
            _ => Out::default(),
        }
    }

    /// The end of a turn: an error or an interruption is said.
    pub fn turn_end(&mut self, reason: &Value) -> Out {
        let mut out = self.finish_block();
        match reason["kind"].as_str() {
            Some("completed") | None => {}
            Some("error") => {
                let code = reason["error"]["code"].as_str().unwrap_or("ERROR");
                let message = reason["error"]["message"].as_str().unwrap_or_default();
                self.theme.push(
                    &mut out,
                    Tone::Error,
                    &format!("✗ {}: {}\n", sanitize(code), sanitize(message)),
                );
            }
            Some("aborted") => self.theme.push(&mut out, Tone::Dim, "(turn cancelled)\n"),
            Some(other) => self.theme.push(
                &mut out,
                Tone::Dim,
                &format!("(turn ended: {})\n", sanitize(other)),
            ),
        }
        out
    }

    fn chunk(&mut self, chunk: &Value) -> Out {
        let kind = match chunk["type"].as_str() {
            Some("text-delta") => "text",
            Some("reasoning-delta") => "reasoning",
            _ => return Out::default(),
        };
        // A delta of another kind ends the block (and its sanitizer's
        // state) before this one is read.
        let mut out = self.switch_delta(kind);
        let text = expand_tabs(self.stream.push(chunk["text"].as_str().unwrap_or_default()));
        if kind == "text" {
            self.text(&mut out, &text);
        } else if self.show_reasoning {
            self.theme.push(&mut out, Tone::Dim, &text);
            self.mid_line = !text.ends_with('\n') && (self.mid_line || !text.is_empty());
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
        if kind == "reasoning" && !self.show_reasoning {
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

    fn tool_result(&mut self, data: &Value) -> Out {
        let mut out = self.finish_block();
        let block = &data["message"]["content"][0];
        let is_error = block["isError"] == Value::Bool(true);
        let joined = dsh_sdk::vocab::msg::joined_lines(&block["content"]);
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
        out
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

/// The short form of a tool call's arguments: its main argument when it
/// has one of the usual names, else its compact JSON.
fn short_args(arguments: &Value, width: usize) -> String {
    let parsed: Value = match arguments {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
        other => other.clone(),
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
        .find_map(|k| parsed[k].as_str().map(str::to_owned))
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
    use dsh_sdk::json;

    fn ev(kind: &str, data: Value) -> SessionEvent {
        SessionEvent::new(kind, 0, data)
    }

    #[test]
    fn compactions_are_said_and_a_failed_one_is_an_error() {
        let mut r = Renderer::new(Theme { color: false }, 80);
        let done = r.event(&ev(
            compaction::SUMMARY,
            json!({"shadowedSeqs": [1, 2, 3], "shadowedTokenCount": 1200}),
        ));
        assert_eq!(
            done.plain,
            "  context compacted: 3 messages (~1200 tokens) summarized\n"
        );
        assert!(r
            .event(&ev(compaction::END, json!({"compactionId": "c"})))
            .plain
            .is_empty());
        let failed = r.event(&ev(
            compaction::END,
            json!({"compactionId": "c", "error": "summary is not smaller\u{1b}[2J"}),
        ));
        assert!(failed
            .plain
            .starts_with("✗ compaction failed (history unchanged): summary is not smaller"));
        assert!(!failed.plain.contains('\u{1b}'));
    }

    fn text(r: &mut Renderer, t: &str) -> String {
        r.event(&ev(
            event::ASSISTANT_CHUNK,
            json!({"chunk": {"type": "text-delta", "text": t}}),
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
        let out = plain.event(&ev(
            event::ASSISTANT_CHUNK,
            json!({"chunk": {"type": "text-delta", "text": "```\ncode\n```\n"}}),
        ));
        assert_eq!(out.styled, out.plain);
        let mut colored = Renderer::new(Theme { color: true }, 80);
        let out = colored.event(&ev(
            event::ASSISTANT_CHUNK,
            json!({"chunk": {"type": "text-delta", "text": "```\ncode\n```\n"}}),
        ));
        assert!(out.styled.contains("\x1b["), "{:?}", out.styled);
    }

    #[test]
    fn a_tool_call_is_one_line_and_its_result_first_and_last_lines() {
        let mut r = Renderer::new(Theme::default(), 80);
        let call = r.event(&ev(
            event::TOOL_CALL,
            json!({"name": "bash", "arguments": "{\"command\":\"ls -la\"}"}),
        ));
        assert_eq!(call.plain, "• bash ls -la\n");
        let result = r.event(&ev(event::TOOL_RESULT, json!({"message": {"content": [
            {"type": "tool-result", "isError": false, "content": [{"type": "text", "text": "a\n\nb\nc\n"}]}]}})));
        assert_eq!(result.plain, "  └ a\n    … 1 more lines\n    c\n");
        let failed = r.event(&ev(event::TOOL_RESULT, json!({"message": {"content": [
            {"type": "tool-result", "isError": true, "content": [{"type": "text", "text": "Error: no"}]}]}})));
        assert_eq!(failed.plain, "  ✗ Error: no\n");
    }

    #[test]
    fn reasoning_folds_to_one_line_unless_shown() {
        let mut r = Renderer::new(Theme::default(), 80);
        let chunk = |t: &str| {
            ev(
                event::ASSISTANT_CHUNK,
                json!({"chunk": {"type": "reasoning-delta", "text": t}}),
            )
        };
        assert!(r.event(&chunk("hmm")).plain.starts_with("∴ thinking"));
        assert_eq!(r.event(&chunk("more")).plain, "");
        r.finish_block();
        r.show_reasoning = true;
        assert_eq!(r.event(&chunk("deep")).plain, "deep");
    }

    #[test]
    fn errors_are_marked_and_model_escapes_are_dropped() {
        let mut r = Renderer::new(Theme::default(), 80);
        let out =
            r.turn_end(&json!({"kind": "error", "error": {"code": "AUTH", "message": "bad key"}}));
        assert_eq!(out.plain, "✗ AUTH: bad key\n");
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
}
