//! The terminal as the chat draws it: output scrolls above, the input
//! area (prompt and the editor's text) stays below it. Every change is
//! returned as the text to print: output first erases the input area and
//! goes back to the end of the last output line, then the input is drawn
//! again under it. Model and tool text is sanitized here (by the SDK's
//! `terminal_text`): escape sequences, control characters and bidi
//! controls never reach the terminal.
//!
//! A line of our own (a command's output, the echo of a line typed while
//! an answer streams) never lands inside an unfinished output line:
//! [`Screen::interject`] clears the unfinished line, prints the notice in
//! its place and prints the line again below it, where the stream goes on.

use std::borrow::Cow;

use unicode_width::UnicodeWidthChar;

/// What the input area shows.
pub struct Prompt<'a> {
    /// The prompt before the first line (`› `).
    pub prefix: &'a str,
    /// Its styled form (the same width).
    pub styled_prefix: &'a str,
    /// The input.
    pub text: &'a str,
    /// The cursor, in characters.
    pub cursor: usize,
    /// Lines drawn above the prompt (the running subagents), each
    /// `(styled, plain)` and narrower than the screen.
    pub status: &'a [(String, String)],
}

/// Where the screen is.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Screen {
    /// Terminal columns (at least 1).
    pub cols: usize,
    /// The column after the last output character (0: at a line start).
    out_col: usize,
    /// Rows from the input area's first row to the cursor (while drawn).
    drawn_above_cursor: Option<usize>,
    /// Terminal rows (0: unknown).
    #[serde(default)]
    pub rows: usize,
    /// The unfinished output line (since the last line break) as printed,
    /// to print it again below a notice; `None` once it is longer than
    /// [`LINE_KEPT`] (then a notice ends the line instead).
    #[serde(default)]
    line: Option<Line>,
    /// Rows the unfinished line wrapped onto below its first.
    #[serde(default)]
    line_rows: usize,
    /// The last output filled its row to the end: the terminal holds the
    /// cursor on that row until the next character (a pending wrap).
    #[serde(default)]
    pending_wrap: bool,
}

/// The unfinished output line.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Line {
    /// As printed (styled; it starts unstyled, see `render`).
    styled: String,
    /// Without escape sequences.
    plain: String,
}

/// The longest unfinished line kept to print again, in bytes of its
/// styled text.
const LINE_KEPT: usize = 64 * 1024;

/// Rows assumed when the terminal did not say.
const DEFAULT_ROWS: usize = 24;

impl Screen {
    /// A screen `cols` wide.
    pub fn new(cols: usize) -> Screen {
        Screen {
            cols: cols.max(1),
            line: Some(Line::default()),
            ..Screen::default()
        }
    }

    /// The text that erases the input area, leaving the cursor where the
    /// output left off.
    pub fn erase_input(&mut self) -> String {
        let Some(above) = self.drawn_above_cursor.take() else {
            return String::new();
        };
        let mut s = String::from("\r");
        if above > 0 {
            s.push_str(&format!("\x1b[{above}A"));
        }
        s.push_str("\x1b[J");
        if self.out_col > 0 {
            // Back to the end of the unfinished output line above.
            s.push_str(&format!("\x1b[1A\x1b[{}G", self.out_col + 1));
        }
        s
    }

    /// Output: `styled` is printed as it is (its escape sequences are
    /// ours), `plain` is the same text without them, for the column count.
    pub fn output(&mut self, styled: &str, plain: &str) -> String {
        let mut s = self.erase_input();
        s.push_str(styled);
        for c in plain.chars() {
            if c == '\n' {
                self.out_col = 0;
                self.line_rows = 0;
                self.pending_wrap = false;
            } else {
                let w = c.width().unwrap_or(0);
                if self.out_col + w > self.cols {
                    // Too wide for what is left of the row: it wraps whole.
                    self.out_col = 0;
                    self.line_rows += 1;
                }
                self.out_col += w;
                self.pending_wrap = false;
                if self.out_col >= self.cols {
                    self.out_col = 0;
                    self.line_rows += 1;
                    self.pending_wrap = true;
                }
            }
        }
        self.keep_line(styled, plain);
        s
    }

    /// Keeps what `styled` adds to the unfinished line.
    fn keep_line(&mut self, styled: &str, plain: &str) {
        match (styled.rfind('\n'), plain.rfind('\n')) {
            (Some(s), Some(p)) => {
                self.line = Some(Line {
                    styled: styled[s + 1..].to_owned(),
                    plain: plain[p + 1..].to_owned(),
                });
            }
            _ => {
                if let Some(line) = &mut self.line {
                    line.styled.push_str(styled);
                    line.plain.push_str(plain);
                }
            }
        }
        if self
            .line
            .as_ref()
            .is_some_and(|l| l.styled.len() > LINE_KEPT)
        {
            self.line = None;
        }
    }

    /// Prints `styled` (whole lines: a notice, a command's output) above
    /// the unfinished output line, which is printed again below it so the
    /// stream goes on where it was: the output never mixes with ours. A
    /// line too long to print again (more rows than the terminal has, or
    /// past [`LINE_KEPT`]) is ended first instead.
    pub fn interject(&mut self, styled: &str, plain: &str) -> String {
        let unfinished = self.line.as_ref().is_none_or(|l| !l.plain.is_empty());
        if self.out_col == 0 && !self.pending_wrap && !unfinished {
            return self.output(styled, plain);
        }
        // Rows from the line's first row up to the cursor's row once the
        // input area is erased (a pending wrap leaves it on the full row).
        let up = self
            .line_rows
            .saturating_sub(usize::from(self.pending_wrap));
        let rows = if self.rows > 0 {
            self.rows
        } else {
            DEFAULT_ROWS
        };
        // The line and the input area under it must both be on the screen
        // (a row scrolled off cannot be cleared).
        let input_rows = self.drawn_above_cursor.map_or(0, |above| above + 1);
        let line = match self.line.take() {
            Some(line) if up + 1 + input_rows < rows => line,
            kept => {
                self.line = kept;
                let mut s = self.end_line();
                s.push_str(&self.output(styled, plain));
                return s;
            }
        };
        let mut s = self.erase_input();
        s.push('\r');
        if up > 0 {
            s.push_str(&format!("\x1b[{up}A"));
        }
        s.push_str("\x1b[J");
        self.out_col = 0;
        self.line_rows = 0;
        self.pending_wrap = false;
        self.line = Some(Line::default());
        s.push_str(&self.output(styled, plain));
        if self.out_col > 0 {
            s.push_str(&self.output("\n", "\n"));
        }
        s.push_str(&self.output(&line.styled, &line.plain));
        s
    }

    /// Ends the output line if it is unfinished.
    pub fn end_line(&mut self) -> String {
        if self.out_col == 0 {
            return self.erase_input();
        }
        self.output("\n", "\n")
    }

    /// Draws the input area (erasing the old one first).
    pub fn draw_input(&mut self, prompt: &Prompt<'_>) -> String {
        let mut s = self.erase_input();
        if self.out_col > 0 {
            s.push_str("\r\n");
        }
        // The prompt's first character takes a pending wrap.
        self.pending_wrap = false;
        for (styled, _) in prompt.status {
            s.push_str(styled);
            s.push_str("\r\n");
        }
        s.push_str(prompt.styled_prefix);
        let indent = " ".repeat(width(prompt.prefix));
        let (mut row, mut col) = (prompt.status.len(), width(prompt.prefix));
        let (mut cur_row, mut cur_col) = (row, col);
        for (i, c) in prompt.text.chars().enumerate() {
            if c == '\n' {
                if i == prompt.cursor {
                    (cur_row, cur_col) = (row, col);
                }
                s.push_str("\r\n");
                s.push_str(&indent);
                row += 1;
                col = indent.len();
                continue;
            }
            let (text, w) = match c {
                '\t' => ("    ".to_owned(), 4),
                c => (c.to_string(), c.width().unwrap_or(0)),
            };
            if col + w > self.cols {
                row += 1;
                col = 0;
            }
            if i == prompt.cursor {
                (cur_row, cur_col) = (row, col);
            }
            s.push_str(&text);
            col += w;
        }
        if prompt.cursor >= prompt.text.chars().count() {
            (cur_row, cur_col) = (row, col);
        }
        // A full last row leaves the terminal waiting to wrap: wrap now so
        // the cursor position is known.
        if col >= self.cols {
            s.push_str("\r\n");
            row += 1;
            col = 0;
            if cur_col >= self.cols {
                (cur_row, cur_col) = (row, col);
            }
        }
        if row > cur_row {
            s.push_str(&format!("\x1b[{}A", row - cur_row));
        }
        s.push_str(&format!("\r\x1b[{}G", cur_col + 1));
        self.drawn_above_cursor = Some(cur_row);
        s
    }

    /// Forgets the drawn input area (after a screen clear).
    pub fn forget_input(&mut self) {
        self.drawn_above_cursor = None;
        self.out_col = 0;
        self.line_rows = 0;
        self.pending_wrap = false;
        self.line = Some(Line::default());
    }
}

/// The display width of `s`.
pub fn width(s: &str) -> usize {
    s.chars().map(|c| c.width().unwrap_or(0)).sum()
}

/// Model or tool text as the chat shows it: the SDK's one sanitizer
/// ([`dsh_sdk::terminal_text::sanitize`]: no escape sequences, no controls
/// but newlines and tabs, no bidi controls), then tabs as four spaces (the
/// chat counts columns). Borrowed when there is nothing to change.
pub fn sanitize(text: &str) -> Cow<'_, str> {
    expand_tabs(dsh_sdk::terminal_text::sanitize(text))
}

/// Sanitized text with its tabs as four spaces.
pub fn expand_tabs(text: Cow<'_, str>) -> Cow<'_, str> {
    if text.contains('\t') {
        Cow::Owned(text.replace('\t', "    "))
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt<'a>(text: &'a str, cursor: usize) -> Prompt<'a> {
        Prompt {
            prefix: "> ",
            styled_prefix: "> ",
            text,
            cursor,
            status: &[],
        }
    }

    #[test]
    fn status_lines_go_above_the_prompt_and_are_erased_with_it() {
        let mut s = Screen::new(40);
        let status = [("kid · step 2".to_owned(), "kid · step 2".to_owned())];
        let p = Prompt {
            status: &status,
            ..prompt("hi", 2)
        };
        assert_eq!(s.draw_input(&p), "kid · step 2\r\n> hi\r\x1b[5G");
        // The cursor is on the prompt's row, one below the status line:
        // erasing goes up one row first.
        assert_eq!(s.erase_input(), "\r\x1b[1A\x1b[J");
    }

    #[test]
    fn output_erases_the_input_and_returns_to_the_unfinished_line() {
        let mut s = Screen::new(80);
        assert_eq!(s.output("Hel", "Hel"), "Hel");
        let drawn = s.draw_input(&prompt("ab", 2));
        assert!(drawn.starts_with("\r\n> ab"), "{drawn:?}");
        let more = s.output("lo", "lo");
        assert_eq!(more, "\r\x1b[J\x1b[1A\x1b[4Glo");
    }

    #[test]
    fn the_cursor_is_placed_inside_a_multi_line_input() {
        let mut s = Screen::new(80);
        let drawn = s.draw_input(&prompt("ab\ncd", 1));
        assert!(drawn.ends_with("\x1b[1A\r\x1b[4G"), "{drawn:?}");
        assert_eq!(s.erase_input(), "\r\x1b[J");
    }

    #[test]
    fn a_full_row_wraps_before_the_cursor_is_placed() {
        let mut s = Screen::new(4);
        let drawn = s.draw_input(&prompt("ab", 2));
        assert!(drawn.ends_with("> ab\r\n\r\x1b[1G"), "{drawn:?}");
        assert_eq!(s.erase_input(), "\r\x1b[1A\x1b[J");
    }

    #[test]
    fn a_notice_goes_above_the_unfinished_line_which_is_printed_again() {
        let mut s = Screen::new(80);
        // At a line start it is plain output.
        assert_eq!(s.interject("note\n", "note\n"), "note\n");
        assert_eq!(s.output("\x1b[36mHel\x1b[0m", "Hel"), "\x1b[36mHel\x1b[0m");
        let drawn = s.draw_input(&prompt("ab", 2));
        assert!(drawn.starts_with("\r\n> ab"), "{drawn:?}");
        // Back to the line, cleared, the notice, the line again.
        assert_eq!(
            s.interject("status\n", "status\n"),
            "\r\x1b[J\x1b[1A\x1b[4G\r\x1b[Jstatus\n\x1b[36mHel\x1b[0m"
        );
        // The stream goes on where it was.
        assert_eq!(s.output("lo", "lo"), "lo");
        assert_eq!(s.out_col, 5);
        assert_eq!(s.output(" world\nnext", " world\nnext"), " world\nnext");
        assert_eq!(s.interject("x\n", "x\n"), "\r\x1b[Jx\nnext");
    }

    #[test]
    fn a_wrapped_unfinished_line_is_cleared_from_its_first_row() {
        let mut s = Screen::new(4);
        s.output("abcdef", "abcdef");
        assert_eq!(s.interject("n\n", "n\n"), "\r\x1b[1A\x1b[Jn\nabcdef");
        // A line that fills its row exactly leaves the cursor on that row
        // (a pending wrap) until something is printed.
        let mut s = Screen::new(4);
        s.output("x\nabcd", "x\nabcd");
        assert_eq!(s.interject("n\n", "n\n"), "\r\x1b[Jn\nabcd");
        // Once the input area was drawn below it, the cursor is a row down.
        s.draw_input(&prompt("", 0));
        let again = s.interject("m\n", "m\n");
        assert!(again.ends_with("\r\x1b[1A\x1b[Jm\nabcd"), "{again:?}");
    }

    #[test]
    fn a_line_taller_than_the_terminal_is_ended_instead() {
        let mut s = Screen::new(4);
        s.rows = 3;
        s.output("abcdefghijklm", "abcdefghijklm");
        assert_eq!(s.interject("n\n", "n\n"), "\nn\n");
        assert_eq!(s.out_col, 0);
    }

    #[test]
    fn sanitize_drops_escape_sequences_and_controls() {
        assert_eq!(sanitize("a\x1b[31mred\x1b[0m\x07\tb\r\n"), "ared    b\n");
        // OSC with ST, 8-bit CSI and OSC, C1 controls, bidi controls.
        assert_eq!(
            sanitize("a\x1b]0;t\x1b\\b\u{9b}2Jc\u{9d}52;c;eA==\u{9c}d\u{85}e\u{202e}f\u{2066}g"),
            "abcdefg"
        );
        assert!(matches!(sanitize("clean — text"), Cow::Borrowed(_)));
    }
}
