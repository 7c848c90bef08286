//! Where Markdown text goes: the document, or a capture (a heading, a table
//! cell, a code span, a code block) that is written out when its element
//! closes. A sink collapses whitespace, escapes Markdown syntax in page text,
//! and writes block breaks, line prefixes (`> `, list indentation and
//! markers) and inline openers (`**`, `*`, `[`) lazily, at the next content,
//! so empty elements leave nothing behind.

/// How a sink treats what is written to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// The document: blocks, line prefixes, escaping.
    Document,
    /// One line (headings, table cells): blocks become spaces.
    Inline,
    /// A code span: one line, nothing escaped.
    Code,
    /// A code block: verbatim.
    Pre,
}

/// A list marker waiting for the item's first line.
struct Marker {
    /// Where in the prefix the item's indentation starts.
    at: usize,
    /// The marker (`* `, `12. `), as wide as that indentation.
    text: String,
}

/// A Markdown buffer.
pub struct Sink {
    buf: String,
    chars: usize,
    /// The most characters this sink takes: it keeps at most one more (which
    /// tells the writer it is full) and drops the rest, so nothing a page
    /// nests (a capture written into a capture, 256 deep) adds up past it.
    limit: usize,
    style: Style,
    /// The prefix of every line (`> ` and list indentation).
    prefix: String,
    /// Markers replacing parts of the prefix on the next line.
    markers: Vec<Marker>,
    /// The buffer ends a line whose prefix is not written yet.
    line_start: bool,
    /// Collapsed whitespace waiting for the next content.
    space: bool,
    /// Newlines wanted before the next content (2: a blank line).
    breaks: u8,
    /// The prefix length blank lines use (the shortest since the break).
    blank_len: usize,
    /// Inline openers waiting for content.
    openers: Vec<&'static str>,
    /// The closer just written and where the buffer ended after it: the same
    /// opener right after it continues the span instead (`*a**b*` is `*ab*`).
    closed: Option<(usize, &'static str)>,
}

/// The longest fence written: code with a run of this many backticks is
/// written as escaped text (a span) or an indented block (a block) instead,
/// so a span captured in a span captured in a span (256 deep) cannot need a
/// fence one longer at every level.
pub const MAX_FENCE: usize = 16;

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0c')
}

impl Sink {
    /// An empty capture without a limit (tests).
    #[cfg(test)]
    pub fn new(style: Style) -> Sink {
        Sink::with_limit(style, usize::MAX)
    }

    /// An empty document that keeps at most `limit` characters (and one
    /// more to say it is full).
    pub fn document(limit: usize) -> Sink {
        Sink::with_limit(Style::Document, limit)
    }

    /// An empty capture in `style` that keeps at most `limit` characters
    /// (and one more to say it is full).
    pub fn capture(style: Style, limit: usize) -> Sink {
        Sink::with_limit(style, limit)
    }

    fn with_limit(style: Style, limit: usize) -> Sink {
        Sink {
            buf: String::new(),
            chars: 0,
            limit,
            style,
            prefix: String::new(),
            markers: Vec::new(),
            line_start: true,
            space: false,
            breaks: 0,
            blank_len: 0,
            openers: Vec::new(),
            closed: None,
        }
    }

    /// How this sink treats text.
    pub fn style(&self) -> Style {
        self.style
    }

    /// Characters written so far.
    pub fn chars(&self) -> usize {
        self.chars
    }

    /// Whether the sink holds more than its limit: what comes next is
    /// dropped.
    pub fn full(&self) -> bool {
        self.chars > self.limit
    }

    /// How many more characters the sink takes.
    fn room(&self) -> usize {
        self.limit.saturating_add(1).saturating_sub(self.chars)
    }

    /// Whether Markdown markup (emphasis, links, images) is written here.
    pub fn markup(&self) -> bool {
        matches!(self.style, Style::Document | Style::Inline)
    }

    /// The text written, trailing whitespace removed.
    pub fn into_text(self) -> String {
        let mut buf = self.buf;
        buf.truncate(buf.trim_end().len());
        buf
    }

    /// Writes `s` as is, as much of it as the sink takes.
    pub fn push(&mut self, s: &str) {
        // One walk: how many characters fit (at most `room`) and where
        // they end.
        let room = self.room();
        let (mut taken, mut end) = (0, s.len());
        for (i, _) in s.char_indices() {
            if taken == room {
                end = i;
                break;
            }
            taken += 1;
        }
        self.buf.push_str(&s[..end]);
        self.chars += taken;
    }

    fn push_char(&mut self, c: char) {
        if self.room() > 0 {
            self.buf.push(c);
            self.chars += 1;
        }
    }

    /// Asks for `n` newlines (2: a blank line) before the next content.
    pub fn block(&mut self, n: u8) {
        match self.style {
            Style::Document => {
                if !self.buf.is_empty() {
                    if self.breaks == 0 {
                        self.blank_len = self.prefix.len();
                    }
                    self.breaks = self.breaks.max(n);
                }
                self.space = false;
            }
            Style::Inline | Style::Code => self.soft_space(),
            Style::Pre => {
                if !self.buf.is_empty() && !self.buf.ends_with('\n') {
                    self.push_char('\n');
                }
            }
        }
    }

    /// Asks for a space before the next content.
    pub fn soft_space(&mut self) {
        if !self.buf.is_empty() {
            self.space = true;
        }
    }

    /// A `<br>`.
    pub fn hard_break(&mut self) {
        match self.style {
            Style::Document => {
                if self.buf.is_empty() || self.breaks > 0 {
                    return;
                }
                if self.line_start {
                    let blank = self.prefix.trim_end().to_owned();
                    self.push(&blank);
                } else {
                    self.push("  ");
                }
                self.push_char('\n');
                self.line_start = true;
                self.space = false;
            }
            Style::Inline | Style::Code => self.soft_space(),
            Style::Pre => self.push_char('\n'),
        }
    }

    /// Writes what waits before content: breaks, the line prefix (with list
    /// markers) or a space, and inline openers. Returns whether a line was
    /// started.
    pub fn content(&mut self) -> bool {
        if self.style == Style::Pre {
            return false;
        }
        if self.breaks > 0 {
            if !self.buf.is_empty() {
                if !self.line_start {
                    self.push_char('\n');
                    self.line_start = true;
                }
                let blank_len = self.blank_len.min(self.prefix.len());
                let blank = self.prefix[..blank_len].trim_end().to_owned();
                for _ in 1..self.breaks {
                    self.push(&blank);
                    self.push_char('\n');
                }
            }
            self.breaks = 0;
        }
        let started = self.line_start;
        if self.line_start {
            if self.style == Style::Document {
                let prefix = self.line_prefix();
                self.push(&prefix);
            }
            self.line_start = false;
        } else if self.space {
            self.push_char(' ');
        }
        self.space = false;
        for opener in std::mem::take(&mut self.openers) {
            self.push(opener);
        }
        started && self.style == Style::Document
    }

    /// The prefix of a line, pending list markers in place.
    fn line_prefix(&mut self) -> String {
        let mut prefix = self.prefix.clone();
        for m in self.markers.drain(..) {
            let end = m.at + m.text.len();
            if end <= prefix.len() {
                prefix.replace_range(m.at..end, &m.text);
            }
        }
        prefix
    }

    /// Starts a new line inside a block (a code block's next line).
    pub fn new_line(&mut self, blank: bool) {
        self.push_char('\n');
        let prefix = if blank {
            self.prefix.trim_end().to_owned()
        } else {
            self.prefix.clone()
        };
        self.push(&prefix);
    }

    /// Adds `p` to every following line; returns what to restore.
    pub fn push_prefix(&mut self, p: &str) -> Option<usize> {
        if self.style != Style::Document {
            return None;
        }
        let at = self.prefix.len();
        self.prefix.push_str(p);
        Some(at)
    }

    /// Ends a [`Sink::push_prefix`] or [`Sink::push_marker`].
    pub fn pop_prefix(&mut self, at: Option<usize>) {
        if let Some(at) = at {
            self.markers.retain(|m| m.at < at);
            self.prefix.truncate(at);
            self.blank_len = self.blank_len.min(at);
        }
    }

    /// Starts a list item: `marker` on its first line, its width of
    /// indentation on the others.
    pub fn push_marker(&mut self, marker: String) -> Option<usize> {
        if self.style != Style::Document {
            self.soft_space();
            return None;
        }
        let at = self.push_prefix(&" ".repeat(marker.len()));
        if let Some(at) = at {
            self.markers.push(Marker { at, text: marker });
        }
        at
    }

    /// Queues an inline opener; returns its place for [`Sink::close`].
    pub fn open(&mut self, opener: &'static str) -> usize {
        if let Some((end, closer)) = self.closed.take() {
            if end == self.buf.len() && closer == opener && self.breaks == 0 && !self.line_start {
                // Reopen the span that just closed: take its closer back.
                self.buf.truncate(end - closer.len());
                self.chars -= closer.chars().count();
                return self.openers.len();
            }
        }
        self.openers.push(opener);
        self.openers.len() - 1
    }

    /// Closes the opener queued at `at`: writes `closer` if the opener was
    /// written (something came in between), else drops it.
    pub fn close(&mut self, at: usize, closer: &'static str) {
        if self.openers.len() > at {
            self.openers.truncate(at);
        } else {
            let before = self.buf.len();
            self.push(closer);
            // Only a closer written whole can be taken back.
            if self.buf.len() - before == closer.len() {
                self.closed = Some((self.buf.len(), closer));
            }
        }
    }

    /// Closes a link's `[` queued at `at`; returns whether it was written
    /// (then the caller writes `](destination)`).
    pub fn close_link(&mut self, at: usize) -> bool {
        if self.openers.len() > at {
            self.openers.truncate(at);
            false
        } else {
            true
        }
    }

    /// Page text: whitespace collapsed (but in code blocks), Markdown syntax
    /// escaped (but in code).
    pub fn text(&mut self, s: &str) {
        match self.style {
            Style::Pre => self.push(s),
            Style::Code => {
                for c in s.chars() {
                    if self.full() {
                        return;
                    }
                    if is_space(c) {
                        self.soft_space();
                    } else {
                        self.content();
                        self.push_char(c);
                    }
                }
            }
            Style::Document | Style::Inline => self.escaped(s),
        }
    }

    fn escaped(&mut self, s: &str) {
        let mut i = 0;
        while let Some(c) = s[i..].chars().next() {
            if self.full() {
                return;
            }
            let rest = &s[i..];
            i += c.len_utf8();
            if is_space(c) {
                self.soft_space();
                continue;
            }
            let line_start = self.content();
            let next = s[i..].chars().next();
            match c {
                '\\' | '*' | '_' | '`' | '[' | ']' => {
                    self.push_char('\\');
                    self.push_char(c);
                }
                '<' if next.is_some_and(|n| n.is_ascii_alphabetic() || "/!?".contains(n)) => {
                    self.push("\\<");
                }
                '>' | '=' if line_start => {
                    self.push_char('\\');
                    self.push_char(c);
                }
                '#' | '-' | '+' | '~' if line_start && next.is_none_or(|n| n == ' ' || n == c) => {
                    self.push_char('\\');
                    self.push_char(c);
                }
                '0'..='9' if line_start => {
                    // `12. ` or `12) ` would start an ordered list.
                    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
                    let after = &rest[digits..];
                    let mut tail = after.chars();
                    match (tail.next(), tail.next()) {
                        (Some(p @ ('.' | ')')), n) if n.is_none_or(|n| n == ' ') => {
                            self.push(&rest[..digits]);
                            self.push_char('\\');
                            self.push_char(p);
                            i += digits;
                        }
                        _ => self.push_char(c),
                    }
                }
                _ => self.push_char(c),
            }
        }
    }

    /// Writes `code` as a code span; as escaped text if it has a run of
    /// [`MAX_FENCE`] backticks or more.
    pub fn code_span(&mut self, code: &str) {
        let code = code.trim();
        if code.is_empty() {
            return;
        }
        if longest_run(code, '`') >= MAX_FENCE {
            self.escaped(code);
            return;
        }
        let fence = "`".repeat(longest_run(code, '`') + 1);
        let pad = if code.starts_with('`') || code.ends_with('`') {
            " "
        } else {
            ""
        };
        self.content();
        for part in [fence.as_str(), pad, code, pad, fence.as_str()] {
            self.push(part);
        }
    }

    /// Writes `code` as an indented code block (no fence to outgrow), after
    /// [`Sink::content`] started its first line.
    fn indented_block(&mut self, code: &str) {
        for (n, line) in code.split('\n').enumerate() {
            if self.chars > self.limit {
                break;
            }
            if n > 0 {
                self.new_line(line.is_empty());
            }
            if !line.is_empty() {
                self.push("    ");
                self.push(line);
            }
        }
        self.block(2);
    }

    /// Writes `code` as a fenced code block in `lang`.
    pub fn code_block(&mut self, code: &str, lang: Option<&str>) {
        // A newline right after `<pre>` is not content.
        let code = code
            .strip_prefix('\n')
            .unwrap_or(code)
            .trim_end_matches('\n');
        if code.trim().is_empty() {
            return;
        }
        match self.style {
            Style::Document => {
                self.block(2);
                self.content();
                let run = longest_run(code, '`');
                if run >= MAX_FENCE {
                    self.indented_block(code);
                    return;
                }
                let fence = "`".repeat(run.max(2) + 1);
                self.push(&fence);
                self.push(lang.unwrap_or(""));
                for line in code.split('\n') {
                    if self.chars > self.limit {
                        break;
                    }
                    self.new_line(line.is_empty());
                    self.push(line);
                }
                self.new_line(false);
                self.push(&fence);
                self.block(2);
            }
            Style::Inline => {
                let flat: Vec<&str> = code.split(is_space).filter(|w| !w.is_empty()).collect();
                self.code_span(&flat.join(" "));
            }
            Style::Code | Style::Pre => self.text(code),
        }
    }
}

/// The longest run of `c` in `s`.
fn longest_run(s: &str, c: char) -> usize {
    let mut best = 0;
    let mut run = 0;
    for x in s.chars() {
        run = if x == c { run + 1 } else { 0 };
        best = best.max(run);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_collapses_and_breaks_are_lazy() {
        let mut s = Sink::new(Style::Document);
        s.block(2);
        s.text("  one \n two ");
        s.block(2);
        s.block(1);
        s.text("three");
        s.block(2);
        assert_eq!(s.into_text(), "one two\n\nthree");
    }

    #[test]
    fn markdown_syntax_in_text_is_escaped() {
        let mut s = Sink::new(Style::Document);
        s.text("# not a heading, a_b *c* [d] <div> 1 < 2");
        s.block(2);
        s.text("1. not a list - nor - this");
        s.block(2);
        s.text("- x");
        assert_eq!(
            s.into_text(),
            "\\# not a heading, a\\_b \\*c\\* \\[d\\] \\<div> 1 < 2\n\n1\\. not a list - nor - this\n\n\\- x"
        );
    }

    #[test]
    fn openers_are_written_only_around_content() {
        let mut s = Sink::new(Style::Document);
        let b = s.open("**");
        s.text(" web ");
        s.close(b, "**");
        let e = s.open("*");
        s.close(e, "*");
        s.text("x");
        assert_eq!(s.into_text(), "**web** x");
    }

    #[test]
    fn adjacent_spans_of_one_kind_are_one_span() {
        let mut s = Sink::new(Style::Document);
        for word in ["a", "b", " c"] {
            let i = s.open("*");
            s.text(word);
            s.close(i, "*");
        }
        s.block(2);
        let i = s.open("*");
        s.text("d");
        s.close(i, "*");
        assert_eq!(s.into_text(), "*ab c*\n\n*d*");
    }

    #[test]
    fn list_markers_and_quote_prefixes() {
        let mut s = Sink::new(Style::Document);
        let item = s.push_marker("* ".into());
        s.text("a");
        s.block(2);
        let quote = s.push_prefix("> ");
        s.text("b");
        s.block(2);
        s.text("c");
        s.pop_prefix(quote);
        s.pop_prefix(item);
        s.block(2);
        s.text("d");
        assert_eq!(s.into_text(), "* a\n\n  > b\n  >\n  > c\n\nd");
    }

    #[test]
    fn a_long_code_block_deep_in_quotes_stops_at_the_limit() {
        let mut s = Sink::document(1_000);
        for _ in 0..100 {
            s.push_prefix("> ");
        }
        s.code_block(&"\n".repeat(100_000), None);
        s.code_block(&"x\n".repeat(100_000), None);
        assert!(s.chars() < 1_500, "{}", s.chars());
    }

    #[test]
    fn a_long_backtick_run_is_not_fenced() {
        let mut s = Sink::new(Style::Document);
        let run = "`".repeat(MAX_FENCE);
        s.code_span(&format!("a{run}"));
        s.code_block(&format!("x\n\n{run}"), Some("sh"));
        assert_eq!(
            s.into_text(),
            format!("a{}\n\n    x\n\n    {run}", "\\`".repeat(MAX_FENCE))
        );
    }

    #[test]
    fn a_sink_keeps_one_character_past_its_limit() {
        let mut s = Sink::capture(Style::Inline, 3);
        s.text("abcdef");
        assert!(s.full());
        s.push("gh");
        assert_eq!(s.into_text(), "abcd");
    }

    #[test]
    fn code_keeps_its_text() {
        let mut s = Sink::new(Style::Document);
        s.text("run ");
        s.code_span("a_b `c`");
        s.code_block("\nfn main() {\n\n}\n", Some("rust"));
        assert_eq!(
            s.into_text(),
            "run `` a_b `c` ``\n\n```rust\nfn main() {\n\n}\n```"
        );
    }
}
