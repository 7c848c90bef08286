//! What each HTML element is to the converter: its Markdown role ([`Kind`])
//! and the tag sets of the HTML parsing rules the open-element stack follows
//! (void elements, "special" elements, scope boundaries, what closes an open
//! `<p>`). Names are the tokenizer's: ASCII-lowercased.

/// The Markdown role of an element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A paragraph-like block: blank lines around it.
    Block,
    /// `<h1>`..`<h6>`: an ATX heading of that level.
    Heading(u8),
    /// `<blockquote>`: lines prefixed with `> `.
    Quote,
    /// `<pre>` (and `<xmp>`, `<listing>`, `<plaintext>`): a fenced code block.
    Pre,
    /// `<ul>`, `<ol>`, `<menu>`, `<dir>`.
    List {
        /// `<ol>`: numbered items.
        ordered: bool,
    },
    /// `<li>`.
    Item,
    /// `<table>`.
    Table,
    /// `<thead>`: its rows are header rows.
    TableHead,
    /// `<tbody>`, `<tfoot>`.
    TableBody,
    /// `<tr>`.
    Row,
    /// `<td>`, `<th>`.
    Cell {
        /// `<th>`.
        header: bool,
    },
    /// `<b>`, `<strong>`: `**...**`.
    Strong,
    /// `<i>`, `<em>`: `*...*`.
    Emphasis,
    /// `<code>` (outside `<pre>`: a code span).
    Code,
    /// `<a>`: `[...](href)` when it has an `href`.
    Link,
    /// Content that is not shown: scripts, styles, templates, SVG, MathML,
    /// frames, form text areas, the document title. (The fallback content of
    /// `<object>` and `<canvas>` is shown: an unclosed one must not hide the
    /// rest of the page.)
    Skip,
    /// Anything else: its content flows inline.
    Inline,
    /// `<br>`: a hard line break (void).
    Break,
    /// `<hr>`: a thematic break (void).
    Rule,
    /// `<img>`: `![alt](src)` (void).
    Image,
    /// Another void element: nothing to show.
    Void,
}

/// The role of element `name`.
pub fn kind(name: &str) -> Kind {
    match name {
        "h1" => Kind::Heading(1),
        "h2" => Kind::Heading(2),
        "h3" => Kind::Heading(3),
        "h4" => Kind::Heading(4),
        "h5" => Kind::Heading(5),
        "h6" => Kind::Heading(6),
        "blockquote" => Kind::Quote,
        "pre" | "xmp" | "listing" | "plaintext" => Kind::Pre,
        "ul" | "menu" | "dir" => Kind::List { ordered: false },
        "ol" => Kind::List { ordered: true },
        "li" => Kind::Item,
        "table" => Kind::Table,
        "thead" => Kind::TableHead,
        "tbody" | "tfoot" => Kind::TableBody,
        "tr" => Kind::Row,
        "td" => Kind::Cell { header: false },
        "th" => Kind::Cell { header: true },
        "b" | "strong" => Kind::Strong,
        "i" | "em" => Kind::Emphasis,
        "code" | "kbd" | "samp" | "tt" => Kind::Code,
        "a" => Kind::Link,
        "script" | "style" | "template" | "svg" | "math" | "iframe" | "frame" | "noembed"
        | "noframes" | "noscript" | "textarea" | "title" => Kind::Skip,
        "br" => Kind::Break,
        "hr" => Kind::Rule,
        "img" => Kind::Image,
        "address" | "article" | "aside" | "body" | "caption" | "center" | "dd" | "details"
        | "dialog" | "div" | "dl" | "dt" | "fieldset" | "figcaption" | "figure" | "footer"
        | "form" | "header" | "hgroup" | "html" | "legend" | "main" | "nav" | "p" | "search"
        | "section" | "summary" | "frameset" | "optgroup" | "option" | "select" => Kind::Block,
        _ if is_void(name) => Kind::Void,
        _ => Kind::Inline,
    }
}

/// Whether `kind` separates what comes before and after it into blocks.
pub fn is_block(kind: Kind) -> bool {
    !matches!(
        kind,
        Kind::Strong
            | Kind::Emphasis
            | Kind::Code
            | Kind::Link
            | Kind::Inline
            | Kind::Skip
            | Kind::Break
            | Kind::Image
            | Kind::Void
    )
}

/// Void elements: never have content or an end tag.
pub fn is_void(name: &str) -> bool {
    matches!(
        name,
        "area"
            | "base"
            | "basefont"
            | "bgsound"
            | "br"
            | "col"
            | "embed"
            | "frame"
            | "hr"
            | "img"
            | "input"
            | "keygen"
            | "link"
            | "meta"
            | "param"
            | "source"
            | "track"
            | "wbr"
    )
}

/// The HTML standard's "special" elements (the parsing rules for `<li>`,
/// `<dd>` and `<dt>` stop looking for an open item at one of them).
pub fn is_special(name: &str) -> bool {
    matches!(
        name,
        "address"
            | "applet"
            | "area"
            | "article"
            | "aside"
            | "base"
            | "basefont"
            | "bgsound"
            | "blockquote"
            | "body"
            | "br"
            | "button"
            | "caption"
            | "center"
            | "col"
            | "colgroup"
            | "dd"
            | "details"
            | "dir"
            | "div"
            | "dl"
            | "dt"
            | "embed"
            | "fieldset"
            | "figcaption"
            | "figure"
            | "footer"
            | "form"
            | "frame"
            | "frameset"
            | "h1"
            | "h2"
            | "h3"
            | "h4"
            | "h5"
            | "h6"
            | "head"
            | "header"
            | "hgroup"
            | "hr"
            | "html"
            | "iframe"
            | "img"
            | "input"
            | "keygen"
            | "li"
            | "link"
            | "listing"
            | "main"
            | "marquee"
            | "menu"
            | "meta"
            | "nav"
            | "noembed"
            | "noframes"
            | "noscript"
            | "object"
            | "ol"
            | "p"
            | "param"
            | "plaintext"
            | "pre"
            | "script"
            | "search"
            | "section"
            | "select"
            | "source"
            | "style"
            | "summary"
            | "table"
            | "tbody"
            | "td"
            | "template"
            | "textarea"
            | "tfoot"
            | "th"
            | "thead"
            | "title"
            | "tr"
            | "track"
            | "ul"
            | "wbr"
            | "xmp"
            | "svg"
            | "math"
    )
}

/// Elements that end "has an element in scope" searches (plus the foreign
/// roots, whose content is skipped anyway).
pub fn is_scope_boundary(name: &str) -> bool {
    matches!(
        name,
        "applet"
            | "caption"
            | "html"
            | "table"
            | "td"
            | "th"
            | "marquee"
            | "object"
            | "template"
            | "svg"
            | "math"
    )
}

/// Start tags that close an open `<p>` in button scope.
pub fn closes_p(name: &str) -> bool {
    matches!(
        name,
        "address"
            | "article"
            | "aside"
            | "blockquote"
            | "center"
            | "details"
            | "dialog"
            | "dir"
            | "div"
            | "dl"
            | "dd"
            | "dt"
            | "fieldset"
            | "figcaption"
            | "figure"
            | "footer"
            | "form"
            | "h1"
            | "h2"
            | "h3"
            | "h4"
            | "h5"
            | "h6"
            | "header"
            | "hgroup"
            | "hr"
            | "li"
            | "listing"
            | "main"
            | "menu"
            | "nav"
            | "ol"
            | "p"
            | "plaintext"
            | "pre"
            | "search"
            | "section"
            | "summary"
            | "table"
            | "ul"
            | "xmp"
    )
}

/// HTML start tags that end SVG or MathML content (the parser "breaks out"
/// of foreign content on them).
pub fn breaks_out_of_foreign(name: &str) -> bool {
    matches!(
        name,
        "b" | "big"
            | "blockquote"
            | "body"
            | "br"
            | "center"
            | "code"
            | "dd"
            | "div"
            | "dl"
            | "dt"
            | "em"
            | "embed"
            | "h1"
            | "h2"
            | "h3"
            | "h4"
            | "h5"
            | "h6"
            | "head"
            | "hr"
            | "i"
            | "img"
            | "li"
            | "listing"
            | "menu"
            | "meta"
            | "nobr"
            | "ol"
            | "p"
            | "pre"
            | "ruby"
            | "s"
            | "small"
            | "span"
            | "strong"
            | "strike"
            | "sub"
            | "sup"
            | "table"
            | "tt"
            | "u"
            | "ul"
            | "var"
    )
}

/// Elements that may stay inside `<head>`; any other start tag ends it.
pub fn is_head_content(name: &str) -> bool {
    matches!(
        name,
        "base"
            | "basefont"
            | "bgsound"
            | "link"
            | "meta"
            | "title"
            | "noscript"
            | "noframes"
            | "style"
            | "script"
            | "template"
            | "head"
    )
}

/// Elements that appear once: a second start tag is merged into the first
/// by browsers, so it is ignored here.
pub fn is_singleton(name: &str) -> bool {
    matches!(name, "html" | "head" | "body")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles() {
        assert_eq!(kind("h3"), Kind::Heading(3));
        assert_eq!(kind("ol"), Kind::List { ordered: true });
        assert_eq!(kind("th"), Kind::Cell { header: true });
        assert_eq!(kind("meta"), Kind::Void);
        assert_eq!(kind("my-widget"), Kind::Inline);
        assert!(is_block(kind("div")) && !is_block(kind("span")));
    }
}
