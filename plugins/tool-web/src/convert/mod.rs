//! HTML to Markdown with bounded work, for pages nobody vetted.
//!
//! One pass, no tree and no recursion: the tokenizer ([`tokens`]) yields
//! tokens, the open-element [`stack`] turns them into properly nested opens
//! and closes of at most [`MAX_DEPTH`] elements (deeper start tags are
//! flattened into the deepest one), and the [`markdown`] writer renders them.
//! Each token costs amortized O(1) (a text token O(its length)), so a 5 MB
//! page converts in one linear pass whatever its shape; the loop also stops
//! when the caller cancels, at the deadline, and once the output is longer
//! than what will be returned. Closing an element can write out what it
//! captured (a heading, a code span, a cell): everything held at once,
//! captures included, stays within the output bound, a code fence never
//! grows past [`sink::MAX_FENCE`], and the [`budget`] is checked before each
//! element is closed, so an end tag or the end of the page that closes 256
//! captures within captures stops at the deadline too.
//!
//! The converter replaces `htmd`, which builds an html5ever DOM and walks it
//! recursively: 3,000 nested `<div>`s overflowed the plugin thread's stack
//! (an abort of the whole process), 400,000 took minutes in html5ever's tree
//! builder (its scope checks walk the open-element stack), and neither could
//! be cancelled.

mod budget;
mod elements;
mod markdown;
mod sink;
mod stack;
mod tokens;

use std::time::Instant;

use dsh_sdk::blocking::Cancel;

use budget::{Budget, Stop};
use markdown::Markdown;
use stack::Stack;
use tokens::{tokens, Token};

/// How many elements may be open at once; deeper start tags are flattened.
/// Browsers bound the tree depth the same way (Blink at 512); Markdown has
/// nothing to show for even a tenth of this.
pub const MAX_DEPTH: usize = 256;

/// The bounds of one conversion.
pub struct Limits {
    /// Elements open at once ([`MAX_DEPTH`]).
    pub max_depth: usize,
    /// Output characters after which converting stops (the caller truncates).
    pub max_chars: usize,
    /// When converting stops, finished or not.
    pub deadline: Instant,
}

/// A finished (possibly partial) conversion.
#[derive(Debug, PartialEq, Eq)]
pub struct Converted {
    /// The Markdown.
    pub text: String,
    /// Start tags beyond the depth bound were flattened.
    pub flattened: bool,
    /// The deadline came first: the end of the page is missing.
    pub timed_out: bool,
}

/// Converts `html` to Markdown within `limits`; `None` once `cancel` is set.
pub fn html_to_markdown(html: &str, limits: &Limits, cancel: &Cancel) -> Option<Converted> {
    let mut stack = Stack::new(limits.max_depth);
    let mut md = Markdown::new(limits.max_chars, Budget::new(limits.deadline, cancel));
    for token in tokens(html) {
        if md.spent() {
            break;
        }
        match token {
            Token::Start {
                name,
                attrs,
                self_closing,
            } => stack.start(&name, &attrs, self_closing, &mut md),
            Token::End { name } => stack.end(&name, &mut md),
            Token::Text(text) => stack.text(&text, &mut md),
            Token::Other => {}
        }
        if md.chars() > limits.max_chars {
            break;
        }
    }
    stack.finish(&mut md);
    let stopped = md.stopped();
    if stopped == Some(Stop::Cancelled) || cancel.is_cancelled() {
        return None;
    }
    Some(Converted {
        text: md.finish(),
        flattened: stack.was_flattened(),
        timed_out: stopped == Some(Stop::TimedOut),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits() -> Limits {
        Limits {
            max_depth: MAX_DEPTH,
            max_chars: 100_000,
            deadline: Instant::now() + Duration::from_secs(60),
        }
    }

    fn md(html: &str) -> String {
        let c = html_to_markdown(html, &limits(), &Cancel::default());
        c.map(|c| c.text).unwrap_or_else(|| panic!("cancelled"))
    }

    #[test]
    fn the_original_pages_markdown() {
        assert_eq!(
            md("<html><body><h1>Title</h1><p>Hello <b>web</b></p></body></html>"),
            "# Title\n\nHello **web**"
        );
    }

    #[test]
    fn a_page_with_the_usual_elements() {
        let html = r#"<!doctype html><html><head><title>T</title><style>p{}</style>
            <script>var x = "<p>";</script></head><body>
            <nav><a href="/">Home</a> | <a href="/docs x">Docs</a></nav>
            <h2>Intro <em>now</em></h2>
            <p>Text with <code>a_b</code>, <i>it</i> and <strong>bold
            </strong>words.<br>Next line.</p>
            <ul><li>one<li>two<ol start="3"><li>three<li>four</ol></ul>
            <blockquote><p>quoted</p><p>twice</p></blockquote>
            <pre><code class="language-rust">fn main() {
    println!("*");
}
</code></pre>
            <table><thead><tr><th>k<th>v</thead><tr><td>a|b<td>1</table>
            <hr><img src="/i.png" alt="an [image]">
            <svg><text>no</text></svg><p>end</p></body></html>"#;
        assert_eq!(
            md(html),
            "[Home](/) | [Docs](/docs%20x)\n\n\
             ## Intro *now*\n\n\
             Text with `a_b`, *it* and **bold** words.  \nNext line.\n\n\
             * one\n* two\n  3. three\n  4. four\n\n\
             > quoted\n>\n> twice\n\n\
             ```rust\nfn main() {\n    println!(\"*\");\n}\n```\n\n\
             | k | v |\n| --- | --- |\n| a\\|b | 1 |\n\n\
             * * *\n\n\
             ![an \\[image\\]](/i.png)\n\nend"
        );
    }

    #[test]
    fn a_layout_table_flows_as_text() {
        assert_eq!(
            md("<table><tr><td>1.</td><td><a href=x>story</a></td></tr><tr><td>2.</td><td>next</td></tr></table>"),
            "1\\. [story](x)\n2\\. next"
        );
    }

    #[test]
    fn deep_nesting_is_flattened_without_recursion() {
        let html = format!(
            "{}deep{}",
            "<div>".repeat(400_000),
            "</div>".repeat(400_000)
        );
        let c = html_to_markdown(&html, &limits(), &Cancel::default());
        assert_eq!(
            c,
            Some(Converted {
                text: "deep".into(),
                flattened: true,
                timed_out: false
            })
        );
        // Nested quotes and lists stay readable at the bound.
        let html = format!("{}q", "<blockquote>".repeat(1_000));
        let text = md(&html);
        assert_eq!(text, format!("{}q", "> ".repeat(MAX_DEPTH)));
    }

    #[test]
    fn a_cancelled_conversion_stops() {
        let cancel = Cancel::default();
        cancel.cancel();
        let html = "<p>x</p>".repeat(1_000);
        assert_eq!(html_to_markdown(&html, &limits(), &cancel), None);
    }

    #[test]
    fn the_deadline_ends_a_conversion_with_what_it_has() {
        let past = Limits {
            deadline: Instant::now(),
            ..limits()
        };
        let c = html_to_markdown("<p>x</p>", &past, &Cancel::default());
        assert_eq!(
            c,
            Some(Converted {
                text: String::new(),
                flattened: false,
                timed_out: true
            })
        );
    }

    /// Feeds `html` to `stack` and `md` without looking at the budget.
    fn feed(html: &str, stack: &mut Stack, md: &mut Markdown) {
        for token in tokens(html) {
            match token {
                Token::Start {
                    name,
                    attrs,
                    self_closing,
                } => stack.start(&name, &attrs, self_closing, md),
                Token::End { name } => stack.end(&name, md),
                Token::Text(text) => stack.text(&text, md),
                Token::Other => {}
            }
        }
    }

    /// The reviewer's page: code spans in headings 128 deep around `n`
    /// backticks.
    fn fenced_headings(n: usize) -> String {
        format!("{}{}", "<h1><code>".repeat(128), "`".repeat(n))
    }

    #[test]
    fn captures_within_captures_stay_within_the_bound() {
        // Each code span needed a fence one longer than the run inside, so
        // the text grew by twice the run at each of 128 levels (2 MB: 96 s
        // and 514 MB); captures were not bounded at all.
        let small = Limits {
            max_chars: 1_000,
            ..limits()
        };
        let c = html_to_markdown(&fenced_headings(5_000), &small, &Cancel::default());
        let text = c.map(|c| c.text).unwrap_or_default();
        assert!(text.chars().count() <= 1_001, "{}", text.len());
        assert!(text.starts_with("# `"), "{}", &text[..40]);
        assert!(!text.contains(&"`".repeat(sink::MAX_FENCE + 1)));
    }

    #[test]
    fn closing_at_the_end_of_the_page_stops_when_cancelled_or_late() {
        let cancel = Cancel::default();
        let mut stack = Stack::new(MAX_DEPTH);
        let mut md = Markdown::new(1_000, Budget::new(limits().deadline, &cancel));
        feed(&fenced_headings(3), &mut stack, &mut md);
        cancel.cancel();
        stack.finish(&mut md);
        assert_eq!(md.stopped(), Some(Stop::Cancelled));
        // Nothing was closed: the captures follow as they are.
        assert_eq!(md.finish(), "```");

        let cancel = Cancel::default();
        let mut stack = Stack::new(MAX_DEPTH);
        let mut md = Markdown::new(1_000, Budget::new(Instant::now(), &cancel));
        feed(&format!("{}</h1>", fenced_headings(3)), &mut stack, &mut md);
        assert_eq!(md.stopped(), Some(Stop::TimedOut));
        assert_eq!(md.finish(), "```");
    }

    #[test]
    fn converting_stops_once_the_output_is_long_enough() {
        let small = Limits {
            max_chars: 1_000,
            ..limits()
        };
        let html = "<p>word</p>".repeat(100_000);
        let c = html_to_markdown(&html, &small, &Cancel::default());
        let text = c.map(|c| c.text).unwrap_or_default();
        assert!(
            (1_000..1_100).contains(&text.chars().count()),
            "{}",
            text.len()
        );
    }
}
