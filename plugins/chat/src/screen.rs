//! The terminal as the chat draws it: output scrolls above, the input
//! area (prompt and the editor's text) stays below it. Every change is
//! returned as the text to print: output first erases the input area and
//! goes back to the end of the last output line, then the input is drawn
//! again under it. Model and tool text is sanitized here (by the SDK's
//! `terminal_text`): escape sequences, control characters and bidi
//! controls never reach the terminal.

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
}

impl Screen {
    /// A screen `cols` wide.
    pub fn new(cols: usize) -> Screen {
        Screen {
            cols: cols.max(1),
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
            } else {
                let w = c.width().unwrap_or(0);
                if self.out_col + w > self.cols {
                    // Too wide for what is left of the row: it wraps whole.
                    self.out_col = 0;
                }
                self.out_col += w;
                if self.out_col >= self.cols {
                    self.out_col = 0;
                }
            }
        }
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
        s.push_str(prompt.styled_prefix);
        let indent = " ".repeat(width(prompt.prefix));
        let (mut row, mut col) = (0usize, width(prompt.prefix));
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
        }
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
