//! A fetched body as the text `web_fetch` returns: decoded, converted to
//! Markdown when it is HTML, cut at `maxChars`, with a note for everything
//! that was left out or changed on the way.

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
    let mut out = if text.chars().count() > config.max_chars {
        text.chars().take(config.max_chars).collect::<String>() + "\n\n(truncated)"
    } else {
        text
    };
    for note in notes {
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(&note);
    }
    Ok(out)
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
        let config = Config {
            max_chars: 5,
            ..Config::default()
        };
        let html = format!("{}abcdefgh", "<div>".repeat(MAX_DEPTH + 1));
        let out = render(
            page("text/html", &html),
            &config,
            later(),
            &Cancel::default(),
        );
        assert_eq!(
            out.ok(),
            Some(format!(
                "abcde\n\n(truncated)\n\n[page nesting deeper than {MAX_DEPTH} levels was flattened]"
            ))
        );
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
