//! Server-sent events framing: `data:` lines joined per event, comments
//! (keep-alives) ignored. Tolerates `\r\n` and events split across reads.
//!
//! Memory is bounded: one line, and the joined `data` of one event, may hold
//! at most `cap` bytes. Past that the parser stops buffering and reports
//! [`Overflow`]; the stream is then unusable and must be dropped.

use std::fmt;

/// The default cap on one SSE line and on the `data` of one event.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// What exceeded the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// One line (without its `\n`) grew past the cap.
    Line { cap: usize },
    /// The `data` lines of one event, joined, grew past the cap.
    Event { cap: usize },
}

impl fmt::Display for Overflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, cap) = match self {
            Overflow::Line { cap } => ("an SSE line", cap),
            Overflow::Event { cap } => ("the data of one SSE event", cap),
        };
        write!(f, "{what} exceeded the cap of {}", human_bytes(*cap))
    }
}

/// `16 MiB (16777216 bytes)`, or just the bytes when not whole MiB.
pub fn human_bytes(n: usize) -> String {
    const MIB: usize = 1024 * 1024;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB ({n} bytes)", n / MIB)
    } else {
        format!("{n} bytes")
    }
}

pub struct Parser {
    cap: usize,
    line: Vec<u8>,
    /// The joined `data` of the event being read (`None`: no `data:` yet).
    data: Option<String>,
}

impl Default for Parser {
    fn default() -> Self {
        Parser::new(MAX_LINE_BYTES)
    }
}

impl Parser {
    /// A parser holding at most `cap` bytes per line and per event.
    pub fn new(cap: usize) -> Self {
        Parser {
            cap,
            line: Vec::new(),
            data: None,
        }
    }

    /// Feeds bytes; returns the `data` of every event completed by them, or
    /// the overflow that stopped the stream.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<Vec<String>, Overflow> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let end = bytes.iter().position(|&b| b == b'\n');
            let part = &bytes[..end.unwrap_or(bytes.len())];
            // A trailing `\r` may be the first half of a `\r\n` ending.
            let last = part.last().or_else(|| self.line.last());
            let slack = usize::from(last == Some(&b'\r'));
            if self.line.len() + part.len() > self.cap + slack {
                return Err(self.fail(Overflow::Line { cap: self.cap }));
            }
            self.line.extend_from_slice(part);
            let Some(end) = end else { break };
            bytes = &bytes[end + 1..];
            if let Some(event) = self.end_line()? {
                out.push(event);
            }
        }
        Ok(out)
    }

    /// Handles the complete line in `self.line`; an empty line dispatches.
    fn end_line(&mut self) -> Result<Option<String>, Overflow> {
        if self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        if self.line.is_empty() {
            return Ok(self.data.take());
        }
        let line = std::mem::take(&mut self.line);
        // `:` comments, `event:`, `id:` and `retry:` lines carry nothing we use.
        if let Some(rest) = line.strip_prefix(b"data:") {
            let rest = rest.strip_prefix(b" ").unwrap_or(rest);
            self.push_data(&String::from_utf8_lossy(rest))?;
        }
        Ok(None)
    }

    fn push_data(&mut self, text: &str) -> Result<(), Overflow> {
        let held = self.data.as_ref().map_or(0, |d| d.len() + 1);
        if held + text.len() > self.cap {
            return Err(self.fail(Overflow::Event { cap: self.cap }));
        }
        match &mut self.data {
            Some(d) => {
                d.push('\n');
                d.push_str(text);
            }
            None => self.data = Some(text.to_owned()),
        }
        Ok(())
    }

    /// Frees what was buffered and returns `overflow`.
    fn fail(&mut self, overflow: Overflow) -> Overflow {
        self.line = Vec::new();
        self.data = None;
        overflow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_events_across_reads_and_skips_comments() {
        let mut p = Parser::default();
        assert!(p.feed(b": keep-alive\n\ndata: {\"a\"").unwrap().is_empty());
        assert_eq!(
            p.feed(b":1}\r\n\r\ndata: [DONE]\n\n").unwrap(),
            vec!["{\"a\":1}", "[DONE]"]
        );
    }

    #[test]
    fn joins_multi_line_data_and_ignores_other_fields() {
        let mut p = Parser::default();
        assert_eq!(
            p.feed(b"event: x\nid: 1\ndata: a\ndata:b\nretry: 5\n\n")
                .unwrap(),
            vec!["a\nb"]
        );
    }

    #[test]
    fn a_line_at_the_cap_passes() {
        let mut p = Parser::new(10);
        assert_eq!(p.feed(b"data: 1234\n\n").unwrap(), vec!["1234"]);
        // Ten bytes split across reads, then a CRLF ending split too.
        assert!(p.feed(b"data:").unwrap().is_empty());
        assert!(p.feed(b"12345\r").unwrap().is_empty());
        assert_eq!(p.feed(b"\n\r\n").unwrap(), vec!["12345"]);
        // A `\r` that turns out not to end the line counts.
        assert!(p.feed(b"data:12345\r").unwrap().is_empty());
        assert_eq!(p.feed(b"x"), Err(Overflow::Line { cap: 10 }));
    }

    #[test]
    fn a_line_past_the_cap_fails_before_its_end_arrives() {
        let mut p = Parser::new(10);
        assert!(p.feed(b"data: 12").unwrap().is_empty());
        // The eleventh byte of the line fails at once: no newline needed.
        assert_eq!(p.feed(b"345"), Err(Overflow::Line { cap: 10 }));
        assert!(p.line.capacity() == 0, "the buffer is released");
    }

    #[test]
    fn an_overlong_comment_line_fails_too() {
        let mut p = Parser::new(8);
        assert_eq!(
            p.feed(b": keep-alive-padding\n"),
            Err(Overflow::Line { cap: 8 })
        );
    }

    #[test]
    fn the_joined_data_of_one_event_is_capped() {
        let mut p = Parser::new(10);
        // Lines of 5 + 1 (join) + 4 bytes fit; one more byte does not.
        assert_eq!(
            p.feed(b"data:12345\ndata:6789\n\n").unwrap(),
            vec!["12345\n6789"]
        );
        assert_eq!(
            p.feed(b"data:12345\ndata:67890\n"),
            Err(Overflow::Event { cap: 10 })
        );
    }

    #[test]
    fn the_overflow_names_the_cap() {
        assert_eq!(
            Overflow::Line {
                cap: MAX_LINE_BYTES
            }
            .to_string(),
            "an SSE line exceeded the cap of 16 MiB (16777216 bytes)"
        );
        assert_eq!(
            Overflow::Event { cap: 10 }.to_string(),
            "the data of one SSE event exceeded the cap of 10 bytes"
        );
    }
}
