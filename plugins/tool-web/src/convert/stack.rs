//! The open elements of the page, bounded in depth.
//!
//! A browser's tree builder turns tag soup into a tree; this stack does the
//! part of that work the converter needs, iteratively and in linear time:
//!
//! - **Implied ends.** A new `<p>`, `<li>`, `<dd>`, `<tr>`, `<td>`, ... closes
//!   the open one it replaces, as the HTML parsing rules say, so pages that
//!   never write `</p>` or `</li>` do not nest deeper with every paragraph.
//!   Each entry carries, per rule ([`Group`]), the index of the nearest open
//!   element the rule would close (or none, past a boundary of that rule), so
//!   the check is O(1) instead of a walk down the stack; a walk down to close
//!   elements pops them, so its cost is paid by the pushes.
//! - **End tags** close the nearest open element of their name and everything
//!   above it; an end tag for nothing open is ignored (a count per name makes
//!   that O(1)).
//! - **The depth bound.** At [`Stack::max_depth`] open elements a new start
//!   tag is *flattened*: not opened, its content flows into the deepest open
//!   element, and its end tag is swallowed by name. A page of 400,000 nested
//!   `<div>`s is therefore a stack of at most that many entries, and nothing
//!   downstream recurses or walks that deep.
//!
//! The stack tells a [`Render`] what opens and closes, always properly nested.

use std::collections::HashMap;

use super::elements::{self, Kind};
use super::tokens::Attrs;

/// What the stack tells the Markdown writer. Opens and closes nest properly;
/// content inside a skipped element (script, style, SVG, ...) never arrives.
pub trait Render {
    /// Element `kind` opened.
    fn open(&mut self, kind: Kind, attrs: &Attrs);
    /// The last opened element closed.
    fn close(&mut self, kind: Kind);
    /// A void element (`<br>`, `<hr>`, `<img>`, ...).
    fn void(&mut self, kind: Kind, attrs: &Attrs);
    /// A start or end tag of `kind` beyond the depth bound: not opened.
    fn flattened(&mut self, kind: Kind);
    /// Character data.
    fn text(&mut self, text: &str);
    /// Asked before each element is closed (closing one may write out all
    /// it captured): whether converting has stopped (cancelled, or past its
    /// deadline). Then nothing more is closed: the caller ends.
    fn halted(&mut self) -> bool {
        false
    }
}

/// A rule of implied ends: which open element (`member`) a start tag
/// (`closed_by`) ends, unless one of `boundary` is open above it.
struct Rule {
    member: fn(&str) -> bool,
    boundary: fn(&str) -> bool,
    closed_by: fn(&str) -> bool,
}

fn table_boundary(n: &str) -> bool {
    matches!(n, "table" | "template" | "html")
}

fn list_boundary(n: &str) -> bool {
    elements::is_special(n) && !matches!(n, "address" | "div" | "p")
}

/// The rules, in the order they are applied to a start tag.
const RULES: [Rule; 10] = [
    // SVG and MathML end at an HTML start tag that cannot be inside them.
    Rule {
        member: |n| matches!(n, "svg" | "math"),
        boundary: |_| false,
        closed_by: elements::breaks_out_of_foreign,
    },
    // `<head>` ends at anything that is not head content.
    Rule {
        member: |n| n == "head",
        boundary: |_| false,
        closed_by: |n| !elements::is_head_content(n),
    },
    // `<p>` in button scope.
    Rule {
        member: |n| n == "p",
        boundary: |n| elements::is_scope_boundary(n) || n == "button",
        closed_by: elements::closes_p,
    },
    Rule {
        member: |n| n == "li",
        boundary: list_boundary,
        closed_by: |n| n == "li",
    },
    Rule {
        member: |n| matches!(n, "dd" | "dt"),
        boundary: list_boundary,
        closed_by: |n| matches!(n, "dd" | "dt"),
    },
    Rule {
        member: |n| n == "option",
        boundary: |n| matches!(n, "select" | "datalist" | "html" | "table" | "template"),
        closed_by: |n| matches!(n, "option" | "optgroup"),
    },
    // A link inside a link ends the outer one.
    Rule {
        member: |n| n == "a",
        boundary: elements::is_scope_boundary,
        closed_by: |n| n == "a",
    },
    Rule {
        member: |n| matches!(n, "tbody" | "thead" | "tfoot"),
        boundary: table_boundary,
        closed_by: |n| matches!(n, "tbody" | "thead" | "tfoot"),
    },
    Rule {
        member: |n| n == "tr",
        boundary: table_boundary,
        closed_by: |n| matches!(n, "tr" | "tbody" | "thead" | "tfoot"),
    },
    Rule {
        member: |n| matches!(n, "td" | "th"),
        boundary: table_boundary,
        closed_by: |n| matches!(n, "td" | "th" | "tr" | "tbody" | "thead" | "tfoot"),
    },
];

/// Index of the foreign-content rule in [`RULES`].
const FOREIGN: usize = 0;

/// Per rule, the index of the nearest open element it would close.
type Scope = [Option<u32>; RULES.len()];

struct Open {
    name: String,
    kind: Kind,
    /// Whether the renderer was told of it (not inside skipped content).
    rendered: bool,
    scope: Scope,
}

/// The open elements.
pub struct Stack {
    open: Vec<Open>,
    /// How many elements of each name are open.
    counts: HashMap<String, u32>,
    /// Flattened start tags whose end tag has not come, by name. They are all
    /// descendants of the deepest entry: emptied when it closes.
    flattened: HashMap<String, u32>,
    /// How many of those are skipped elements (their content is hidden too).
    flattened_skips: u32,
    /// How many open entries are skipped elements.
    open_skips: u32,
    max_depth: usize,
    /// Whether any start tag was flattened.
    was_flattened: bool,
}

impl Stack {
    /// An empty stack that opens at most `max_depth` elements (at least 1).
    pub fn new(max_depth: usize) -> Stack {
        Stack {
            open: Vec::new(),
            counts: HashMap::new(),
            flattened: HashMap::new(),
            flattened_skips: 0,
            open_skips: 0,
            max_depth: max_depth.max(1),
            was_flattened: false,
        }
    }

    /// Whether any start tag was flattened.
    pub fn was_flattened(&self) -> bool {
        self.was_flattened
    }

    fn skipping(&self) -> bool {
        self.open_skips + self.flattened_skips > 0
    }

    fn count(&self, name: &str) -> u32 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    fn top_scope(&self, rule: usize) -> Option<usize> {
        self.open
            .last()
            .and_then(|e| e.scope[rule])
            .map(|i| i as usize)
    }

    /// A start tag.
    pub fn start(&mut self, name: &str, attrs: &Attrs, self_closing: bool, r: &mut impl Render) {
        if elements::is_singleton(name) && self.count(name) > 0 {
            return;
        }
        let in_foreign = self.top_scope(FOREIGN).is_some();
        for (i, rule) in RULES.iter().enumerate() {
            if (rule.closed_by)(name) {
                if let Some(at) = self.top_scope(i) {
                    self.pop_to(at, r);
                }
            }
        }
        let kind = elements::kind(name);
        if let (Kind::Heading(_), Some(top)) = (kind, self.open.last()) {
            if matches!(top.kind, Kind::Heading(_)) {
                self.pop_to(self.open.len() - 1, r);
            }
        }
        let in_foreign = in_foreign && self.top_scope(FOREIGN).is_some();
        if elements::is_void(name) || (in_foreign && self_closing) {
            if !self.skipping() {
                r.void(kind, attrs);
            }
            return;
        }
        if self.open.len() >= self.max_depth {
            self.was_flattened = true;
            *self.flattened.entry(name.to_owned()).or_insert(0) += 1;
            if kind == Kind::Skip {
                self.flattened_skips += 1;
            } else if !self.skipping() {
                r.flattened(kind);
            }
            return;
        }
        self.push(name, kind, attrs, r);
    }

    fn push(&mut self, name: &str, kind: Kind, attrs: &Attrs, r: &mut impl Render) {
        let index = self.open.len() as u32;
        let mut scope: Scope = self.open.last().map_or([None; RULES.len()], |e| e.scope);
        for (i, rule) in RULES.iter().enumerate() {
            if (rule.member)(name) {
                scope[i] = Some(index);
            } else if (rule.boundary)(name) {
                scope[i] = None;
            }
        }
        let rendered = !self.skipping() && kind != Kind::Skip;
        if kind == Kind::Skip {
            self.open_skips += 1;
        }
        *self.counts.entry(name.to_owned()).or_insert(0) += 1;
        self.open.push(Open {
            name: name.to_owned(),
            kind,
            rendered,
            scope,
        });
        if rendered {
            r.open(kind, attrs);
        }
    }

    /// An end tag.
    pub fn end(&mut self, name: &str, r: &mut impl Render) {
        if let Some(n) = self.flattened.get_mut(name) {
            *n -= 1;
            if *n == 0 {
                self.flattened.remove(name);
            }
            let kind = elements::kind(name);
            if kind == Kind::Skip {
                self.flattened_skips = self.flattened_skips.saturating_sub(1);
            } else if !self.skipping() {
                r.flattened(kind);
            }
            return;
        }
        if name == "br" {
            // `</br>` is a `<br>` to browsers.
            if !self.skipping() {
                r.void(Kind::Break, &Attrs::default());
            }
            return;
        }
        if self.count(name) == 0 {
            return;
        }
        if let Some(at) = self.open.iter().rposition(|e| e.name == name) {
            self.pop_to(at, r);
        }
    }

    /// Character data.
    pub fn text(&mut self, text: &str, r: &mut impl Render) {
        if !self.skipping() {
            r.text(text);
        }
    }

    /// Closes everything still open (the end of the page), unless the
    /// renderer halts.
    pub fn finish(&mut self, r: &mut impl Render) {
        self.pop_to(0, r);
    }

    /// Closes the entries at `at` and above, deepest first; stops early when
    /// the renderer halts ([`Render::halted`]).
    fn pop_to(&mut self, at: usize, r: &mut impl Render) {
        while self.open.len() > at {
            if r.halted() {
                return;
            }
            let Some(e) = self.open.pop() else {
                return;
            };
            if self.open.len() + 1 == self.max_depth {
                // The deepest entry closes, and with it what was flattened.
                self.flattened.clear();
                self.flattened_skips = 0;
            }
            if let Some(n) = self.counts.get_mut(&e.name) {
                *n -= 1;
                if *n == 0 {
                    self.counts.remove(&e.name);
                }
            }
            if e.kind == Kind::Skip {
                self.open_skips -= 1;
            }
            if e.rendered {
                r.close(e.kind);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::tokens::{tokens, Token};

    /// Renders the structure as a bracketed outline.
    #[derive(Default)]
    struct Outline(String);

    impl Render for Outline {
        fn open(&mut self, kind: Kind, _: &Attrs) {
            self.0.push_str(&format!("{kind:?}["));
        }
        fn close(&mut self, _: Kind) {
            self.0.push(']');
        }
        fn void(&mut self, kind: Kind, _: &Attrs) {
            self.0.push_str(&format!("{kind:?};"));
        }
        fn flattened(&mut self, _: Kind) {
            self.0.push('~');
        }
        fn text(&mut self, text: &str) {
            self.0.push_str(text);
        }
    }

    fn outline(html: &str, depth: usize) -> (String, Stack) {
        let mut stack = Stack::new(depth);
        let mut out = Outline::default();
        for t in tokens(html) {
            match t {
                Token::Start {
                    name,
                    attrs,
                    self_closing,
                } => stack.start(&name, &attrs, self_closing, &mut out),
                Token::End { name } => stack.end(&name, &mut out),
                Token::Text(s) => stack.text(&s, &mut out),
                Token::Other => {}
            }
        }
        stack.finish(&mut out);
        (out.0, stack)
    }

    #[test]
    fn unclosed_paragraphs_and_items_do_not_nest() {
        let (o, s) = outline("<p>a<p>b<ul><li>c<li>d<ul><li>e</ul></ul>", 8);
        assert_eq!(
            o,
            "Block[a]Block[b]List { ordered: false }[Item[c]Item[dList { ordered: false }[Item[e]]]]"
        );
        assert!(!s.was_flattened());
    }

    #[test]
    fn table_cells_and_rows_end_each_other() {
        let (o, _) = outline("<table><tr><td>a<td>b<tr><td>c</table>", 8);
        assert_eq!(
            o,
            "Table[Row[Cell { header: false }[a]Cell { header: false }[b]]Row[Cell { header: false }[c]]]"
        );
    }

    #[test]
    fn stray_end_tags_are_ignored_and_end_tags_close_what_is_above() {
        let (o, _) = outline("<div></span>a<b>b</div>c", 8);
        assert_eq!(o, "Block[aStrong[b]]c");
    }

    #[test]
    fn depth_is_bounded_and_the_rest_is_flattened() {
        let html = format!("{}x{}y", "<div>".repeat(5), "</div>".repeat(5));
        let (o, s) = outline(&html, 3);
        assert_eq!(o, "Block[Block[Block[~~x~~]]]y");
        assert!(s.was_flattened());
    }

    #[test]
    fn skipped_content_stays_hidden_beyond_the_bound_too() {
        let (o, _) = outline("<div><script>hidden()</script>shown</div>", 1);
        assert_eq!(o, "Block[shown]");
        let (o, _) = outline("<svg><text>hidden</text></svg><p>shown", 8);
        assert_eq!(o, "Block[shown]");
        // An unclosed SVG ends at the first HTML block.
        let (o, _) = outline("<svg><g>hidden<div>shown", 8);
        assert_eq!(o, "Block[shown]");
    }

    #[test]
    fn a_second_body_is_ignored_and_head_ends_at_content() {
        let (o, _) = outline("<html><head><title>t</title><p>a<body><body>b", 8);
        assert_eq!(o, "Block[Inline[]Block[aBlock[b]]]");
    }
}
