//! The Markdown writer: what each element becomes, as the [`Stack`] opens
//! and closes it (`super::stack::Stack`). It keeps one frame per open element
//! (at most the stack's depth bound) and writes into [`Sink`]s; nothing here
//! recurses or looks back over the page.
//!
//! The style follows htmd and turndown's defaults where they have one: ATX
//! headings, `**strong**`, `*emphasis*`, inline links, fenced code blocks,
//! `* * *` rules, a two-space hard break, pipe tables for tables with header
//! cells (a layout table's cells flow as text). List markers are `* ` and
//! `1. `.

use super::budget::{Budget, Stop};
use super::elements::{is_block, Kind};
use super::sink::{Sink, Style};
use super::stack::Render;
use super::tokens::Attrs;

/// What to do when an element closes.
enum Frame {
    /// Nothing.
    Plain,
    /// End a block.
    Block,
    /// Write the captured heading.
    Heading(u8),
    /// Restore the line prefix.
    Quote(Option<usize>),
    /// Write the captured code block.
    Pre,
    /// Write the captured code span.
    Code,
    /// End a list.
    List,
    /// End a list item (restore the prefix).
    Item(Option<usize>),
    Table,
    TableHead,
    Row,
    Cell {
        /// A cell of a pipe table (captured), or of a layout table.
        grid: bool,
    },
    /// Close `**` or `*` (if opened: nested emphasis is not doubled).
    Marked {
        kind: Kind,
        at: Option<usize>,
        closer: &'static str,
    },
    /// Close a link to `dest`.
    Link {
        at: usize,
        dest: String,
    },
}

struct List {
    ordered: bool,
    next: u64,
}

struct Table {
    /// A pipe table (decided at its first cell: a header cell), or a layout
    /// table; `None` before the first cell.
    grid: Option<bool>,
    /// Inside `<thead>`.
    head: bool,
    /// Inside a one-line sink (a cell or a heading): never a pipe table.
    inline: bool,
    /// The cells of the row being read.
    row: Vec<String>,
    /// Their characters.
    row_chars: usize,
    /// Rows written.
    rows: usize,
}

/// Markdown of the elements it is told about.
///
/// Only the innermost sink (the last capture, else the document) is written
/// to; the characters held elsewhere (outer sinks, table cells waiting for
/// their row) are counted in `held`, and each capture may take only what is
/// left of `max_chars`, so everything held at once stays within about
/// `max_chars` however deep captures nest.
pub struct Markdown<'a> {
    doc: Sink,
    /// The open captures, innermost last.
    captures: Vec<Sink>,
    /// Characters held outside the innermost sink.
    held: usize,
    max_chars: usize,
    budget: Budget<'a>,
    frames: Vec<Frame>,
    lists: Vec<List>,
    tables: Vec<Table>,
    /// Languages of the open code blocks.
    pre_langs: Vec<Option<String>>,
    items: usize,
    strong: usize,
    emphasis: usize,
}

/// The `language-*` (or `lang-*`) class, if any, made safe for a fence.
fn language(attrs: &Attrs) -> Option<String> {
    let class = attrs.class.as_deref()?;
    let lang = class.split_ascii_whitespace().find_map(|c| {
        c.strip_prefix("language-")
            .or_else(|| c.strip_prefix("lang-"))
    })?;
    let lang: String = lang
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "+#._-".contains(*c))
        .take(32)
        .collect();
    (!lang.is_empty()).then_some(lang)
}

/// A link or image target that cannot end the Markdown around it early.
fn destination(url: &str) -> String {
    let url = url.trim();
    if let Some(data) = url.strip_prefix("data:") {
        // The payload of a data URI is of no use to a reader.
        let media: String = data
            .chars()
            .take_while(|c| !matches!(c, ',' | ';'))
            .take(64)
            .collect();
        return format!("data:{media},...");
    }
    let mut out = String::with_capacity(url.len());
    for c in url.chars() {
        match c {
            ' ' => out.push_str("%20"),
            '(' => out.push_str("%28"),
            ')' => out.push_str("%29"),
            '<' => out.push_str("%3C"),
            '>' => out.push_str("%3E"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// Alt text on one line, brackets escaped.
fn alt_text(alt: &str) -> String {
    let mut out = String::with_capacity(alt.len());
    for word in alt.split_ascii_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        for c in word.chars() {
            if matches!(c, '[' | ']' | '\\') {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out
}

/// An ordered list's first number (`start`), 1 when absent or unreadable
/// (as browsers do).
fn first_number(attrs: &Attrs) -> u64 {
    attrs
        .start
        .as_deref()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1)
}

impl<'a> Markdown<'a> {
    /// A writer that holds at most about `max_chars` characters, and stops
    /// closing elements once `budget` is spent.
    pub fn new(max_chars: usize, budget: Budget<'a>) -> Self {
        Markdown {
            doc: Sink::document(max_chars),
            captures: Vec::new(),
            held: 0,
            max_chars,
            budget,
            frames: Vec::new(),
            lists: Vec::new(),
            tables: Vec::new(),
            pre_langs: Vec::new(),
            items: 0,
            strong: 0,
            emphasis: 0,
        }
    }

    /// Characters held so far: the document, open captures and table cells
    /// waiting for their row.
    pub fn chars(&self) -> usize {
        self.held + self.current().chars()
    }

    /// Between tokens: whether to stop converting (see [`Budget::spent`]).
    pub fn spent(&mut self) -> bool {
        self.budget.spent()
    }

    /// Why converting stopped early, if it did.
    pub fn stopped(&self) -> Option<Stop> {
        self.budget.stopped()
    }

    /// The document. Call after the stack has closed every element; what
    /// captures are still open (converting stopped before their elements
    /// closed) follows as it is, in page order.
    pub fn finish(mut self) -> String {
        for capture in std::mem::take(&mut self.captures) {
            let text = capture.into_text();
            self.doc.content();
            self.doc.push(&text);
        }
        self.doc.into_text()
    }

    /// Where text goes now: the innermost capture, else the document.
    fn sink(&mut self) -> &mut Sink {
        self.captures.last_mut().unwrap_or(&mut self.doc)
    }

    fn current(&self) -> &Sink {
        self.captures.last().unwrap_or(&self.doc)
    }

    /// Starts a capture, which may take what is left of `max_chars`.
    fn capture(&mut self, style: Style) {
        let room = self.max_chars.saturating_sub(self.chars());
        self.held += self.current().chars();
        self.captures.push(Sink::capture(style, room));
    }

    /// Ends the innermost capture and returns its text (its characters no
    /// longer held until the caller writes them).
    fn release(&mut self) -> String {
        let text = self
            .captures
            .pop()
            .map_or_else(String::new, Sink::into_text);
        self.held = self.held.saturating_sub(self.current().chars());
        text
    }

    fn marked(&mut self, kind: Kind, marker: &'static str) -> Frame {
        let depth = if kind == Kind::Strong {
            &mut self.strong
        } else {
            &mut self.emphasis
        };
        *depth += 1;
        let outer = *depth == 1;
        let sink = self.sink();
        let at = (outer && sink.markup()).then(|| sink.open(marker));
        Frame::Marked {
            kind,
            at,
            closer: marker,
        }
    }

    /// Writes the row being read of the innermost pipe table; returns
    /// whether that table is a pipe table.
    fn flush_row(&mut self) -> bool {
        let Some(table) = self.tables.last_mut() else {
            return false;
        };
        if table.grid != Some(true) {
            return false;
        }
        if table.row.is_empty() {
            return true;
        }
        let cells = std::mem::take(&mut table.row);
        let row_chars = std::mem::take(&mut table.row_chars);
        let first = table.rows == 0;
        table.rows += 1;
        self.held = self.held.saturating_sub(row_chars);
        let sink = self.sink();
        sink.block(1);
        sink.content();
        sink.push("| ");
        sink.push(&cells.join(" | "));
        sink.push(" |");
        if first {
            sink.new_line(false);
            sink.push("|");
            for _ in &cells {
                sink.push(" --- |");
            }
        }
        sink.block(1);
        true
    }

    fn open_frame(&mut self, kind: Kind, attrs: &Attrs) -> Frame {
        match kind {
            Kind::Block => {
                self.sink().block(2);
                Frame::Block
            }
            Kind::Heading(level) => {
                self.sink().block(2);
                self.capture(Style::Inline);
                Frame::Heading(level)
            }
            Kind::Quote => {
                let sink = self.sink();
                sink.block(2);
                Frame::Quote(sink.push_prefix("> "))
            }
            Kind::Pre => {
                self.sink().block(2);
                self.pre_langs.push(language(attrs));
                self.capture(Style::Pre);
                Frame::Pre
            }
            Kind::Code => match self.sink().style() {
                Style::Pre => {
                    if let Some(lang @ None) = self.pre_langs.last_mut() {
                        *lang = language(attrs);
                    }
                    Frame::Plain
                }
                Style::Code => Frame::Plain,
                Style::Document | Style::Inline => {
                    self.capture(Style::Code);
                    Frame::Code
                }
            },
            Kind::List { ordered } => {
                let lines = if self.items > 0 { 1 } else { 2 };
                self.sink().block(lines);
                self.lists.push(List {
                    ordered,
                    next: first_number(attrs),
                });
                Frame::List
            }
            Kind::Item => {
                let marker = match self.lists.last_mut() {
                    Some(list) if list.ordered => {
                        let m = format!("{}. ", list.next);
                        list.next = list.next.saturating_add(1);
                        m
                    }
                    _ => "* ".to_owned(),
                };
                self.items += 1;
                let sink = self.sink();
                sink.block(1);
                Frame::Item(sink.push_marker(marker))
            }
            Kind::Table => {
                let sink = self.sink();
                sink.block(2);
                let inline = sink.style() != Style::Document;
                self.tables.push(Table {
                    grid: None,
                    head: false,
                    inline,
                    row: Vec::new(),
                    row_chars: 0,
                    rows: 0,
                });
                Frame::Table
            }
            Kind::TableHead => {
                if let Some(t) = self.tables.last_mut() {
                    t.head = true;
                }
                Frame::TableHead
            }
            Kind::Row => {
                if !self.flush_row() {
                    self.sink().block(1);
                }
                Frame::Row
            }
            Kind::Cell { header } => {
                let grid = match self.tables.last_mut() {
                    Some(t) if !t.inline => *t.grid.get_or_insert(header || t.head),
                    _ => false,
                };
                if grid {
                    self.capture(Style::Inline);
                } else {
                    self.sink().soft_space();
                }
                Frame::Cell { grid }
            }
            Kind::Strong => self.marked(kind, "**"),
            Kind::Emphasis => self.marked(kind, "*"),
            Kind::Link => {
                let sink = self.sink();
                match attrs.href.as_deref() {
                    Some(href) if !href.trim().is_empty() && sink.markup() => Frame::Link {
                        at: sink.open("["),
                        dest: destination(href),
                    },
                    _ => Frame::Plain,
                }
            }
            Kind::TableBody
            | Kind::Skip
            | Kind::Inline
            | Kind::Break
            | Kind::Rule
            | Kind::Image
            | Kind::Void => Frame::Plain,
        }
    }

    fn close_frame(&mut self, frame: Frame) {
        match frame {
            Frame::Plain => {}
            Frame::Block => self.sink().block(2),
            Frame::Heading(level) => {
                let text = self.release();
                if !text.is_empty() {
                    let sink = self.sink();
                    sink.block(2);
                    sink.content();
                    sink.push(&"#".repeat(usize::from(level)));
                    sink.push(" ");
                    sink.push(&text);
                    sink.block(2);
                }
            }
            Frame::Quote(at) => {
                let sink = self.sink();
                sink.pop_prefix(at);
                sink.block(2);
            }
            Frame::Pre => {
                let code = self.release();
                let lang = self.pre_langs.pop().flatten();
                self.sink().code_block(&code, lang.as_deref());
            }
            Frame::Code => {
                let code = self.release();
                self.sink().code_span(&code);
            }
            Frame::List => {
                self.lists.pop();
                let lines = if self.items > 0 { 1 } else { 2 };
                self.sink().block(lines);
            }
            Frame::Item(at) => {
                self.items = self.items.saturating_sub(1);
                let sink = self.sink();
                sink.pop_prefix(at);
                sink.block(1);
            }
            Frame::Table => {
                self.flush_row();
                self.tables.pop();
                self.sink().block(2);
            }
            Frame::TableHead => {
                if let Some(t) = self.tables.last_mut() {
                    t.head = false;
                }
            }
            Frame::Row => {
                if !self.flush_row() {
                    self.sink().block(1);
                }
            }
            Frame::Cell { grid } => {
                if grid {
                    let text = self.release().replace('|', "\\|");
                    if let Some(t) = self.tables.last_mut() {
                        let chars = text.chars().count();
                        t.row.push(text);
                        t.row_chars += chars;
                        self.held += chars;
                    }
                } else {
                    self.sink().soft_space();
                }
            }
            Frame::Marked { kind, at, closer } => {
                let depth = if kind == Kind::Strong {
                    &mut self.strong
                } else {
                    &mut self.emphasis
                };
                *depth = depth.saturating_sub(1);
                if let Some(at) = at {
                    self.sink().close(at, closer);
                }
            }
            Frame::Link { at, dest } => {
                let sink = self.sink();
                if sink.close_link(at) {
                    sink.push(&format!("]({dest})"));
                }
            }
        }
    }
}

impl Render for Markdown<'_> {
    fn open(&mut self, kind: Kind, attrs: &Attrs) {
        let frame = self.open_frame(kind, attrs);
        self.frames.push(frame);
    }

    fn close(&mut self, _kind: Kind) {
        if let Some(frame) = self.frames.pop() {
            self.close_frame(frame);
        }
    }

    fn void(&mut self, kind: Kind, attrs: &Attrs) {
        let sink = self.sink();
        match kind {
            Kind::Break => sink.hard_break(),
            Kind::Rule => {
                sink.block(2);
                sink.content();
                sink.push("* * *");
                sink.block(2);
            }
            Kind::Image => {
                let Some(src) = attrs.src.as_deref().filter(|s| !s.trim().is_empty()) else {
                    return;
                };
                if !sink.markup() {
                    return;
                }
                let alt = alt_text(attrs.alt.as_deref().unwrap_or(""));
                sink.content();
                sink.push(&format!("![{alt}]({})", destination(src)));
            }
            _ => {}
        }
    }

    fn flattened(&mut self, kind: Kind) {
        if is_block(kind) {
            self.sink().block(1);
        }
    }

    fn text(&mut self, text: &str) {
        self.sink().text(text);
    }

    fn halted(&mut self) -> bool {
        self.budget.spent_now()
    }
}
