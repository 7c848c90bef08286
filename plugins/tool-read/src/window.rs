//! The `read` result: lines `offset..` of a stream in the original's format
//! (reference dsh-product §4.1), in one pass and bounded memory. Lines before
//! the window are skipped, each shown line keeps only the bytes it can show,
//! and the lines after it are only counted, for the footer's total — unless
//! the byte cap ended the window, whose footer has no total: reading stops
//! there.

use std::io::Read;

use dsh_sdk::blocking::Cancel;
use dsh_sdk::names::code;
use dsh_sdk::vocab::tokens;
use dsh_sdk::{Error, Result};

use crate::lines::{Head, Lines, Stop};

/// The most lines one call returns.
pub const MAX_LINES: usize = 2000;
/// The most characters shown of one line.
pub const MAX_LINE_CHARS: usize = 2000;
/// The most bytes of numbered lines one call returns.
pub const MAX_BYTES: usize = 51_200;
/// Bytes kept of each line: enough for `MAX_LINE_CHARS` characters of up to
/// four bytes, and to tell that a longer line is longer.
const KEEP: usize = 4 * MAX_LINE_CHARS + 2;
/// The estimated tokens of a result around its numbered lines, the path
/// aside: the `<path>`, `<type>` and `<content>` tags and the longest
/// footer.
const FRAME_TOKENS: u64 = 64;
/// The fewest tokens of numbered lines a call may be capped to.
const MIN_TOKENS: u64 = 64;
/// Tokens a shown line may take beyond its characters: its number and the
/// truncation note.
const LINE_FRAME_TOKENS: u64 = 24;

/// The caps of one call: the bytes and estimated tokens of numbered lines
/// it returns, and the characters shown of one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// The most bytes of numbered lines (the first line always shows).
    pub bytes: usize,
    /// The most estimated tokens of numbered lines
    /// (`dsh_sdk::vocab::tokens`), when the agent's window sets one.
    pub tokens: Option<u64>,
    /// The most characters shown of one line.
    pub line_chars: usize,
}

impl Caps {
    /// The original's caps: 51,200 bytes, 2,000 characters a line.
    pub const DEFAULT: Caps = Caps {
        bytes: MAX_BYTES,
        tokens: None,
        line_chars: MAX_LINE_CHARS,
    };

    /// The caps of a result of at most `max_tokens` estimated tokens in
    /// all for `path` (the call's `maxResultTokens`, from the agent's
    /// context window), within the original's: the frame and the path are
    /// taken off, and a line is cut short enough for the first one to fit
    /// too (the estimate counts at most a token a character).
    pub fn within(max_tokens: u64, path: &str) -> Caps {
        let frame = FRAME_TOKENS + 2 * tokens::of_text(path);
        let lines = max_tokens.saturating_sub(frame).max(MIN_TOKENS);
        let line_chars = usize::try_from(lines - LINE_FRAME_TOKENS.min(lines))
            .unwrap_or(usize::MAX)
            .clamp(1, MAX_LINE_CHARS);
        Caps {
            bytes: MAX_BYTES,
            // The estimate never counts more than a token a byte: a cap at
            // or over the byte cap cannot bind, and is not counted.
            tokens: (lines < MAX_BYTES as u64).then_some(lines),
            line_chars,
        }
    }
}

/// Renders lines `offset..offset + limit` of `reader` (1-based) for `path`,
/// within `caps`.
pub fn render<R: Read>(
    path: &str,
    reader: R,
    offset: usize,
    limit: usize,
    caps: Caps,
    cancel: &Cancel,
) -> Result<String> {
    let mut lines = Lines::new(reader, cancel);
    let stop = |s: Stop| stopped(path, s);
    let skipped = skip(&mut lines, offset - 1).map_err(stop)?;
    let mut out = format!("<path>{path}</path>\n<type>file</type>\n<content>\n");
    let shown = if skipped < offset - 1 {
        Shown::default()
    } else {
        window(&mut lines, &mut out, offset, limit, caps).map_err(stop)?
    };
    // A byte-capped window's footer prints no total: stop reading there.
    // Otherwise count (and check) the rest for the exact total.
    let rest = if shown.capped {
        0
    } else {
        lines.count_rest().map_err(stop)?
    };
    let total = skipped + shown.consumed + rest;
    if offset > total.max(1) {
        return Err(Error::new(
            code::FS_NOT_FOUND,
            format!("offset {offset} is past the end of {path} ({total} lines)"),
        ));
    }
    out.push('\n');
    out.push_str(&footer(
        offset,
        shown.last.unwrap_or(offset - 1),
        total,
        shown.capped,
    ));
    out.push_str("\n</content>");
    Ok(out)
}

/// What [`window`] did.
#[derive(Debug, Default)]
struct Shown {
    /// Lines read (the one that did not fit included).
    consumed: usize,
    /// The number of the last line shown.
    last: Option<usize>,
    /// Whether the byte cap stopped it.
    capped: bool,
}

/// Skips `n` lines; how many there were.
fn skip<R: Read>(lines: &mut Lines<'_, R>, n: usize) -> Result<usize, Stop> {
    for done in 0..n {
        if lines.next_line(0)?.is_none() {
            return Ok(done);
        }
    }
    Ok(n)
}

/// Appends up to `limit` numbered lines, within the byte cap (the first line
/// always shows).
fn window<R: Read>(
    lines: &mut Lines<'_, R>,
    out: &mut String,
    offset: usize,
    limit: usize,
    caps: Caps,
) -> Result<Shown, Stop> {
    let mut shown = Shown::default();
    let (mut bytes, mut estimate) = (0, 0);
    while shown.consumed < limit {
        let Some(head) = lines.next_line(KEEP)? else {
            break;
        };
        let number = offset + shown.consumed;
        let entry = format!("{number}: {}\n", display(&head, caps.line_chars)?);
        shown.consumed += 1;
        let entry_tokens = caps.tokens.map_or(0, |_| tokens::of_text(&entry));
        let over_tokens = caps.tokens.is_some_and(|max| estimate + entry_tokens > max);
        if (bytes + entry.len() > caps.bytes || over_tokens) && shown.last.is_some() {
            shown.capped = true;
            break;
        }
        bytes += entry.len();
        estimate += entry_tokens;
        out.push_str(&entry);
        shown.last = Some(number);
    }
    Ok(shown)
}

/// A line as shown: at most `max_chars` characters, marked when cut.
fn display(head: &Head<'_>, max_chars: usize) -> Result<String, Stop> {
    // The stream check has validated these bytes, except a character the
    // keep limit may have cut in two at the very end.
    let text = match std::str::from_utf8(head.bytes) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&head.bytes[..e.valid_up_to()]).map_err(|_| Stop::NotText)?,
    };
    let cut_at = text.char_indices().nth(max_chars).map(|(i, _)| i);
    Ok(match cut_at {
        Some(i) => format!("{}… (line truncated to {max_chars} chars)", &text[..i]),
        None if head.cut => format!("{text}… (line truncated to {max_chars} chars)"),
        None => text.to_owned(),
    })
}

/// The original's three footers.
pub fn footer(offset: usize, last: usize, total: usize, capped: bool) -> String {
    if capped {
        format!(
            "(Output capped. Showing lines {offset}-{last}. Use offset={} to continue.)",
            last + 1
        )
    } else if last < total {
        format!(
            "(Showing lines {offset}-{last} of {total}. Use offset={} to continue.)",
            last + 1
        )
    } else {
        format!("(End of file - total {total} lines)")
    }
}

fn stopped(path: &str, stop: Stop) -> Error {
    match stop {
        Stop::NotText => Error::new(code::FS_NOT_TEXT, format!("{path} is not UTF-8 text")),
        Stop::Cancelled => Error::new("FS_ABORTED", format!("read of {path} was cancelled")),
        Stop::Io(e) => Error::new(code::FS_ERROR, format!("cannot read {path}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, offset: usize, limit: usize) -> Result<String> {
        render(
            "f.txt",
            text.as_bytes(),
            offset,
            limit,
            Caps::DEFAULT,
            &Cancel::default(),
        )
    }

    /// The whole-text renderer this streaming one replaced: the oracle.
    fn reference(path: &str, text: &str, offset: usize, limit: usize) -> Result<String> {
        let lines: Vec<&str> = text.lines().collect();
        let total = lines.len();
        if offset > total.max(1) {
            return Err(Error::new(
                code::FS_NOT_FOUND,
                format!("offset {offset} is past the end of {path} ({total} lines)"),
            ));
        }
        let mut out = format!("<path>{path}</path>\n<type>file</type>\n<content>\n");
        let (mut bytes, mut last, mut capped) = (0, offset - 1, false);
        for (i, line) in lines.iter().enumerate().skip(offset - 1).take(limit) {
            let shown = if line.chars().count() > MAX_LINE_CHARS {
                let cut: String = line.chars().take(MAX_LINE_CHARS).collect();
                format!("{cut}… (line truncated to {MAX_LINE_CHARS} chars)")
            } else {
                (*line).to_owned()
            };
            let entry = format!("{}: {shown}\n", i + 1);
            if bytes + entry.len() > MAX_BYTES && last >= offset {
                capped = true;
                break;
            }
            bytes += entry.len();
            out.push_str(&entry);
            last = i + 1;
        }
        out.push('\n');
        out.push_str(&footer(offset, last, total, capped));
        out.push_str("\n</content>");
        Ok(out)
    }

    #[test]
    fn the_three_footers() {
        let text = "a\nb\nc\n";
        assert_eq!(
            read(text, 1, 2000).unwrap(),
            "<path>f.txt</path>\n<type>file</type>\n<content>\n1: a\n2: b\n3: c\n\n(End of file - total 3 lines)\n</content>"
        );
        assert!(read(text, 2, 1)
            .unwrap()
            .ends_with("2: b\n\n(Showing lines 2-2 of 3. Use offset=3 to continue.)\n</content>"));
        let big = "x".repeat(1000) + "\n";
        let out = read(&big.repeat(100), 1, 2000).unwrap();
        assert!(
            out.contains("(Output capped. Showing lines 1-50. Use offset=51 to continue.)"),
            "{out}"
        );
    }

    #[test]
    fn an_offset_past_the_end_is_not_found() {
        let e = read("a\nb\n", 4, 10).unwrap_err();
        assert_eq!(e.code, code::FS_NOT_FOUND);
        assert_eq!(e.message, "offset 4 is past the end of f.txt (2 lines)");
        assert_eq!(read("a\nb\n", 3, 10).unwrap_err().code, code::FS_NOT_FOUND);
        assert!(read("", 1, 10)
            .unwrap()
            .contains("(End of file - total 0 lines)"));
    }

    #[test]
    fn long_lines_are_cut_at_2000_characters() {
        for unit in ["y", "é", "漢", "🦀"] {
            let line = unit.repeat(5000);
            let out = read(&format!("{line}\nnext"), 1, 10).unwrap();
            let want = format!(
                "1: {}… (line truncated to 2000 chars)\n2: next\n",
                unit.repeat(2000)
            );
            assert!(out.contains(&want), "{unit}");
        }
        let exact = "🦀".repeat(2000);
        assert!(read(&format!("{exact}\r\n"), 1, 10)
            .unwrap()
            .contains(&format!("1: {exact}\n\n")));
    }

    #[test]
    fn invalid_utf8_past_the_window_is_still_refused() {
        let mut bytes = b"fine\n".repeat(10);
        bytes.extend_from_slice(b"\xff\n");
        let e = render("f.txt", &bytes[..], 1, 2, Caps::DEFAULT, &Cancel::default()).unwrap_err();
        assert_eq!(e.code, code::FS_NOT_TEXT);
    }

    /// Lines of text, then a read error: reading past them fails.
    struct ThenFails(std::io::Cursor<Vec<u8>>);

    impl Read for ThenFails {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match self.0.read(buf)? {
                0 => Err(std::io::Error::other("read past the window")),
                n => Ok(n),
            }
        }
    }

    #[test]
    fn a_byte_capped_window_stops_reading() {
        let text = "x".repeat(1000) + "\n";
        let reader = || ThenFails(std::io::Cursor::new(text.repeat(200).into_bytes()));
        let out = render(
            "f.txt",
            reader(),
            1,
            2000,
            Caps::DEFAULT,
            &Cancel::default(),
        )
        .unwrap();
        assert!(out.contains("(Output capped. Showing lines 1-50."), "{out}");
        // Without the byte cap the rest is read for the total, and fails.
        let e = render("f.txt", reader(), 1, 10, Caps::DEFAULT, &Cancel::default()).unwrap_err();
        assert_eq!(e.code, code::FS_ERROR);
    }

    #[test]
    fn a_window_cap_cuts_the_result_to_its_share_with_the_usual_footer() {
        let caps = Caps::within(1024, "f.txt");
        let lines = caps.tokens.unwrap();
        assert_eq!(lines, 1024 - FRAME_TOKENS - 2 * tokens::of_text("f.txt"));
        let numbers: String = (1..=20_000).map(|i| format!("{}\n", i * 7919)).collect();
        let out = render(
            "f.txt",
            numbers.as_bytes(),
            1,
            2000,
            caps,
            &Cancel::default(),
        )
        .unwrap();
        assert!(tokens::of_text(&out) <= 1024, "{}", tokens::of_text(&out));
        assert!(out.contains("(Output capped. Showing lines 1-"), "{out}");
        assert!(out.contains(" to continue.)\n</content>"));
        // Prose keeps more bytes for the same tokens than numbers do.
        let prose = "the quick brown fox jumps over the lazy dog\n".repeat(2000);
        let words = render("f.txt", prose.as_bytes(), 1, 2000, caps, &Cancel::default()).unwrap();
        assert!(tokens::of_text(&words) <= 1024);
        assert!(words.len() > 2 * out.len(), "{} {}", words.len(), out.len());
        // A line longer than the cap is cut so that the first one fits.
        let wide = "🦀".repeat(3000);
        let out = render("f.txt", wide.as_bytes(), 1, 10, caps, &Cancel::default()).unwrap();
        assert!(tokens::of_text(&out) <= 1024, "{}", tokens::of_text(&out));
        let note = format!("… (line truncated to {} chars)", caps.line_chars);
        assert!(out.contains(&note), "{out}");
        // A tiny cap still shows something; the default is unbounded.
        assert_eq!(Caps::within(10, "f.txt").tokens, Some(MIN_TOKENS));
        assert_eq!(Caps::DEFAULT.tokens, None);
        assert_eq!(Caps::within(250_000, "f.txt"), Caps::DEFAULT);
    }

    #[test]
    fn matches_the_whole_text_renderer() {
        let long = "z".repeat(2500);
        let wide = "é".repeat(2100);
        let texts = [
            String::new(),
            "\n".into(),
            "one".into(),
            "a\r\nb\r\n\r\n".into(),
            "a\rb\nc\r".into(),
            format!("{long}\n{wide}\r\nshort\n"),
            (1..=3000).map(|i| format!("line {i}\n")).collect(),
            (1..=300)
                .map(|i| format!("{i} {}\n", "w".repeat(i * 7)))
                .collect(),
        ];
        for text in &texts {
            for offset in [1, 2, 3, 50, 2999, 3001, 3002] {
                for limit in [1, 2, 10, 2000] {
                    assert_eq!(
                        read(text, offset, limit),
                        reference("f.txt", text, offset, limit),
                        "offset {offset} limit {limit} text {:?}",
                        &text[..text.len().min(40)]
                    );
                }
            }
        }
    }
}
