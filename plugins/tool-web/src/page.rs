//! A fetched body as the text `web_fetch` returns: decoded, converted to
//! Markdown when it is HTML, with a note for everything that was left out or
//! changed on the way, all of it within `maxChars` characters.

use std::time::Instant;

use dsh_sdk::blocking::Cancel;
use dsh_sdk::prelude::*;

use crate::codes;
use crate::config::Config;
use crate::convert::{self, Limits, MAX_DEPTH};
use crate::decode::decode;
use crate::fetch::Fetched;

/// The tool's text for `page`; stops when `cancel` is set or at `deadline`.
pub fn render(
    page: Fetched,
    config: &Config,
    deadline: Instant,
    cancel: &Cancel,
) -> Result<String> {
    let decoded = decode(&page.url, page.content_type.as_deref(), page.body)?;
    let mut notes: Vec<String> = decoded.note.into_iter().collect();
    let is_html = page
        .content_type
        .as_deref()
        .is_some_and(|t| t.contains("html"))
        || decoded.text.trim_start().starts_with('<');
    let text = if is_html {
        let limits = Limits {
            max_depth: MAX_DEPTH,
            max_chars: config.max_chars,
            deadline,
        };
        let converted =
            convert::html_to_markdown(&decoded.text, &limits, cancel).ok_or_else(|| {
                Error::new(
                    codes::CANCELLED,
                    format!("converting {} was cancelled", page.url),
                )
            })?;
        if converted.flattened {
            notes.push(format!(
                "[page nesting deeper than {MAX_DEPTH} levels was flattened]"
            ));
        }
        if converted.timed_out {
            notes.push(format!(
                "[converting stopped at the time limit ({} ms, timeoutMs); the rest of the page is left out]",
                config.timeout_ms
            ));
        }
        converted.text
    } else {
        decoded.text
    };
    Ok(bounded(text, &notes, config.max_chars))
}

/// What marks a text cut to fit.
const TRUNCATED: &str = "(truncated)";

/// Joins paragraphs with a blank line.
const SEPARATOR: &str = "\n\n";

/// `a` and `b` as paragraphs; an empty one left out.
fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_owned(),
        (_, true) => a.to_owned(),
        _ => format!("{a}{SEPARATOR}{b}"),
    }
}

/// The first `n` characters of `s`.
fn first_chars(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// `text`, then `notes`, in at most `max_chars` characters: the text is cut
/// (and [`TRUNCATED`] follows it) to leave the notes their room; notes that
/// do not fit by themselves are cut as well.
fn bounded(text: String, notes: &[String], max_chars: usize) -> String {
    let notes = notes.join(SEPARATOR);
    let whole = join(&text, &notes);
    if text.is_empty() || whole.chars().count() <= max_chars {
        return first_chars(&whole, max_chars);
    }
    let tail = join(TRUNCATED, &notes);
    let room = max_chars.saturating_sub(tail.chars().count() + SEPARATOR.len());
    let out = join(&first_chars(&text, room), &tail);
    first_chars(&out, max_chars)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn page(ctype: &str, body: &str) -> Fetched {
        Fetched {
            url: "http://x/".into(),
            content_type: Some(ctype.into()),
            body: body.as_bytes().to_vec(),
        }
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn html_is_converted_and_notes_follow_the_cut() {
        let note = format!("[page nesting deeper than {MAX_DEPTH} levels was flattened]");
        let config = Config {
            // Three characters of text, the mark and the note.
            max_chars: note.len() + 18,
            ..Config::default()
        };
        let html = format!(
            "{}abcdefghijklmnopqrstuvwxyz",
            "<div>".repeat(MAX_DEPTH + 1)
        );
        let out = render(
            page("text/html", &html),
            &config,
            later(),
            &Cancel::default(),
        );
        assert_eq!(out.ok(), Some(format!("abc\n\n(truncated)\n\n{note}")));
    }

    #[test]
    fn notes_count_against_max_chars() {
        let note = format!("[{}]", "n".repeat(200));
        // The text makes room for the notes.
        let out = bounded("t".repeat(100), std::slice::from_ref(&note), 250);
        assert_eq!(out, format!("{}\n\n(truncated)\n\n{note}", "t".repeat(33)));
        // Notes longer than the bound are cut too.
        let out = bounded("t".repeat(100), std::slice::from_ref(&note), 100);
        assert_eq!(out.chars().count(), 100);
        assert!(out.starts_with("(truncated)\n\n[nnn"), "{out}");
        let out = bounded(String::new(), &[note], 10);
        assert_eq!(out, "[nnnnnnnnn");
        // What fits is left as it is.
        assert_eq!(bounded("t".into(), &["[n]".into()], 6), "t\n\n[n]");
    }

    #[test]
    fn plain_text_stays_as_it_is() {
        let out = render(
            page("text/plain", "a *b*"),
            &Config::default(),
            later(),
            &Cancel::default(),
        );
        assert_eq!(out.ok().as_deref(), Some("a *b*"));
    }

    #[test]
    fn a_conversion_past_its_deadline_says_so() {
        let out = render(
            page("text/html", "<p>x</p>"),
            &Config::default(),
            Instant::now(),
            &Cancel::default(),
        );
        assert_eq!(
            out.ok().as_deref(),
            Some("[converting stopped at the time limit (30000 ms, timeoutMs); the rest of the page is left out]")
        );
    }
}
