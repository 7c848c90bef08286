//! How much of a stored log is ever decoded. A zstd log is small on disk
//! but may claim any size once inflated: 99 KB of run-length blocks hold
//! 3 GB of zeros. So decoded text grows only through [`Text::push`], which
//! checks it against three caps as it streams in and stops at the first
//! byte past one. Nothing is allocated from a size a frame declares.
//!
//! - The header line (the first zstd frame, or a plain log's first line):
//!   [`HEADER_MAX`]. A header holds a few short fields, so this is fixed.
//! - One line (one stored record): [`Limits::line`], config `maxLineBytes`.
//!   This is the cap that stops garbage early. A frame of zeros, or one
//!   record with a huge string, is refused after one line's worth of text.
//! - The whole log: [`Limits::log`], config `maxLogBytes`. It bounds what a
//!   log of many valid-looking lines can cost. It is also the cap of one
//!   frame, because a fork or a resumed flat log writes a whole history as
//!   one batch, and so as one frame.
//!
//! A log over a cap is refused as `SESSION_CORRUPT`, and the file is left
//! as it is. The defaults are far above what this store writes: a line is
//! one event (one model answer at most), and a log is one session. A
//! genuine log over a cap loads again once the cap is raised.

use std::fmt;

/// The most the header line may decode to: 1 MiB.
pub const HEADER_MAX: usize = 1 << 20;

/// The default of [`Limits::line`] (config `maxLineBytes`): 64 MiB.
pub const DEFAULT_MAX_LINE: usize = 64 << 20;

/// The default of [`Limits::log`] (config `maxLogBytes`): 1 GiB.
pub const DEFAULT_MAX_LOG: usize = 1 << 30;

/// The caps a log is decoded under (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest line, in decoded bytes (newline included).
    pub line: usize,
    /// The whole decoded log, in bytes.
    pub log: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            line: DEFAULT_MAX_LINE,
            log: DEFAULT_MAX_LOG,
        }
    }
}

impl Limits {
    /// The caps of the header line alone.
    pub fn header() -> Limits {
        Limits {
            line: HEADER_MAX,
            log: HEADER_MAX,
        }
    }
}

/// The cap a log ran into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cap {
    /// [`HEADER_MAX`].
    Header,
    /// [`Limits::line`].
    Line(usize),
    /// [`Limits::log`].
    Log(usize),
}

impl fmt::Display for Cap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cap::Header => write!(
                f,
                "inflates past {}, the cap of the header line",
                size(HEADER_MAX)
            ),
            Cap::Line(n) => write!(
                f,
                "inflates to a line longer than {}, the cap of one line (`maxLineBytes` in session-jsonl's config: raise it if the log is genuine)",
                size(*n)
            ),
            Cap::Log(n) => write!(
                f,
                "takes the log past {}, the cap of a whole log (`maxLogBytes` in session-jsonl's config: raise it if the log is genuine)",
                size(*n)
            ),
        }
    }
}

/// `n` bytes for a person: whole KiB, MiB or GiB when exact, else bytes.
pub fn size(n: usize) -> String {
    for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} bytes")
}

/// How much decoded text one read asks for.
const CHUNK: usize = 64 * 1024;

/// Why [`Text::fill`] stopped before its reader ended.
#[derive(Debug)]
pub enum FillError {
    /// The reader failed (for a zstd frame: bad data, a failed checksum, or
    /// input that ends inside the frame).
    Read(std::io::Error),
    /// The text would have grown past a cap; nothing past it was kept.
    Over(Cap),
}

/// Decoded text that never grows past its caps.
pub struct Text {
    bytes: Vec<u8>,
    limits: Limits,
    /// Whether these are the header's caps (for the error).
    header: bool,
    /// Bytes since the last newline.
    line: usize,
    /// The buffer [`Text::fill`] reads into, kept from one fill (one
    /// frame) to the next.
    scratch: Vec<u8>,
}

impl Text {
    /// Empty text under `limits`.
    pub fn new(limits: Limits) -> Text {
        Text {
            bytes: Vec::new(),
            limits,
            header: false,
            line: 0,
            scratch: Vec::new(),
        }
    }

    /// Empty text under the header's caps ([`HEADER_MAX`]).
    pub fn header() -> Text {
        Text {
            header: true,
            ..Text::new(Limits::header())
        }
    }

    /// Goes on under `limits` (after the header, the log's caps).
    pub fn widen(mut self, limits: Limits) -> Text {
        self.limits = limits;
        self.header = false;
        self
    }

    /// The text so far.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The text, ending the checks.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Appends everything `reader` yields, a chunk at a time through
    /// [`Text::push`], until it ends, fails or a chunk would pass a cap.
    pub fn fill(&mut self, mut reader: impl std::io::Read) -> Result<(), FillError> {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.resize(CHUNK, 0);
        let filled = loop {
            match reader.read(&mut buf) {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    if let Err(cap) = self.push(&buf[..n]) {
                        break Err(FillError::Over(cap));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Err(FillError::Read(e)),
            }
        };
        self.scratch = buf;
        filled
    }

    /// Appends `chunk`, or refuses it (appending nothing) when it would take
    /// the text past a cap.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), Cap> {
        let line = match chunk.iter().rposition(|b| *b == b'\n') {
            None => self.line + chunk.len(),
            Some(last) => {
                // The lines this chunk ends are measured only when one of
                // them could be over the cap (they span `line + last + 1`
                // bytes in all).
                if self.line + last + 1 > self.limits.line
                    && self.longest(&chunk[..=last]) > self.limits.line
                {
                    return Err(self.over_line());
                }
                chunk.len() - last - 1
            }
        };
        if line > self.limits.line {
            return Err(self.over_line());
        }
        if self.bytes.len() + chunk.len() > self.limits.log {
            return Err(if self.header {
                Cap::Header
            } else {
                Cap::Log(self.limits.log)
            });
        }
        self.bytes.extend_from_slice(chunk);
        self.line = line;
        Ok(())
    }

    /// The longest of the lines `ended` ends (it ends in a newline), the
    /// open line before it included.
    fn longest(&self, ended: &[u8]) -> usize {
        let mut carry = self.line;
        let mut longest = 0;
        for l in ended.split_inclusive(|b| *b == b'\n') {
            longest = longest.max(carry + l.len());
            carry = 0;
        }
        longest
    }

    fn over_line(&self) -> Cap {
        if self.header {
            Cap::Header
        } else {
            Cap::Line(self.limits.line)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(line: usize, log: usize) -> Text {
        Text::new(Limits { line, log })
    }

    #[test]
    fn a_line_over_its_cap_is_refused_whether_it_is_ended_or_not() {
        let mut t = text(4, 100);
        t.push(b"abc").unwrap();
        assert_eq!(t.push(b"de"), Err(Cap::Line(4)), "still open: 5 bytes");
        t.push(b"\n").unwrap();
        assert_eq!(t.bytes(), b"abc\n");
        assert_eq!(t.push(b"1234\n"), Err(Cap::Line(4)), "ended: 5 bytes");
        assert_eq!(t.push(b"1\n12345\n1\n"), Err(Cap::Line(4)), "inside");
        t.push(b"12\n123\n1").unwrap();
        assert_eq!(t.bytes(), b"abc\n12\n123\n1");
        assert_eq!(t.push(b"2345"), Err(Cap::Line(4)), "across pushes");
    }

    #[test]
    fn the_whole_text_is_capped_and_a_refused_push_appends_nothing() {
        let mut t = text(100, 6);
        t.push(b"ab\ncd").unwrap();
        assert_eq!(t.push(b"\nef"), Err(Cap::Log(6)));
        assert_eq!(t.len(), 5);
        let mut h = Text::header();
        assert_eq!(h.push(&vec![b'x'; HEADER_MAX + 1]), Err(Cap::Header));
        let h = h.widen(Limits { line: 1, log: 1 });
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn sizes_read_as_a_person_would_write_them() {
        assert_eq!(size(1 << 30), "1 GiB");
        assert_eq!(size(64 << 20), "64 MiB");
        assert_eq!(size(1 << 20), "1 MiB");
        assert_eq!(size(1500), "1500 bytes");
        assert!(Cap::Line(64 << 20).to_string().contains("64 MiB"));
        assert!(Cap::Log(1 << 30).to_string().contains("maxLogBytes"));
    }
}
