//! Lines of a byte stream in bounded memory: each line keeps at most a given
//! number of its bytes, however long it is, and every byte read is checked to
//! be UTF-8 on the way (a sequence split across reads is carried over).
//!
//! Lines split like `str::lines`: at `\n`, with a `\r` right before the `\n`
//! removed; a final line without `\n` still counts, an empty tail does not.

use std::io::{self, BufRead, BufReader, Read};

use dsh_sdk::blocking::Cancel;

/// How many bytes one read asks for.
const CHUNK: usize = 64 * 1024;

/// Why reading lines stopped early.
#[derive(Debug)]
pub enum Stop {
    /// The bytes are not UTF-8.
    NotText,
    /// The caller went away.
    Cancelled,
    /// The reader failed.
    Io(io::Error),
}

/// The start of one line.
#[derive(Debug, PartialEq, Eq)]
pub struct Head<'a> {
    /// Its first bytes (at most what was asked for), without the line break.
    pub bytes: &'a [u8],
    /// Whether the line went on past `bytes` (a `\r` before its `\n`
    /// included).
    pub cut: bool,
}

/// A line reader over `R`.
pub struct Lines<'c, R> {
    reader: BufReader<R>,
    utf8: Utf8Check,
    kept: Vec<u8>,
    cancel: &'c Cancel,
}

impl<'c, R: Read> Lines<'c, R> {
    /// Lines of `reader`, stopping when `cancel` is set.
    pub fn new(reader: R, cancel: &'c Cancel) -> Self {
        Lines {
            reader: BufReader::with_capacity(CHUNK, reader),
            utf8: Utf8Check::default(),
            kept: Vec::new(),
            cancel,
        }
    }

    /// The next line, keeping at most `keep` of its bytes; `None` at the end.
    pub fn next_line(&mut self, keep: usize) -> Result<Option<Head<'_>>, Stop> {
        self.kept.clear();
        let mut seen = 0usize;
        let mut ended = false;
        loop {
            let chunk = fill(&mut self.reader, self.cancel)?;
            if chunk.is_empty() {
                break;
            }
            let (piece, used) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (&chunk[..i], i + 1),
                None => (chunk, chunk.len()),
            };
            if !self.utf8.feed(&chunk[..used]) {
                return Err(Stop::NotText);
            }
            let room = keep.saturating_sub(self.kept.len()).min(piece.len());
            self.kept.extend_from_slice(&piece[..room]);
            seen += piece.len();
            ended = used > piece.len();
            self.reader.consume(used);
            if ended {
                break;
            }
        }
        if !ended {
            self.finish()?;
            if seen == 0 {
                return Ok(None);
            }
        }
        Ok(Some(self.head(seen, ended)))
    }

    /// How many lines are left, reading the rest in bounded memory.
    pub fn count_rest(&mut self) -> Result<usize, Stop> {
        let mut lines = 0usize;
        let mut open = false;
        loop {
            let chunk = fill(&mut self.reader, self.cancel)?;
            if chunk.is_empty() {
                break;
            }
            if !self.utf8.feed(chunk) {
                return Err(Stop::NotText);
            }
            lines += memchr::memchr_iter(b'\n', chunk).count();
            open = chunk.last() != Some(&b'\n');
            let used = chunk.len();
            self.reader.consume(used);
        }
        self.finish()?;
        Ok(lines + usize::from(open))
    }

    fn head(&self, seen: usize, ended: bool) -> Head<'_> {
        let mut bytes = &self.kept[..];
        let whole = bytes.len() == seen;
        if whole && ended {
            bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        }
        Head { bytes, cut: !whole }
    }

    fn finish(&self) -> Result<(), Stop> {
        if self.utf8.is_complete() {
            Ok(())
        } else {
            Err(Stop::NotText)
        }
    }
}

/// The reader's next bytes (empty at the end), unless the caller went away.
fn fill<'r, R: Read>(reader: &'r mut BufReader<R>, cancel: &Cancel) -> Result<&'r [u8], Stop> {
    if cancel.is_cancelled() {
        return Err(Stop::Cancelled);
    }
    loop {
        match reader.fill_buf() {
            // Re-borrowed to end the loop's borrow (a known borrowck limit).
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Stop::Io(e)),
        }
    }
    reader.fill_buf().map_err(Stop::Io)
}

/// UTF-8 validation of a stream fed in pieces.
#[derive(Debug, Default)]
struct Utf8Check {
    /// The start of a sequence the last piece ended in the middle of.
    pending: [u8; 4],
    len: usize,
}

impl Utf8Check {
    /// Checks the next piece; false once the stream is not UTF-8.
    fn feed(&mut self, mut bytes: &[u8]) -> bool {
        if self.len > 0 {
            let need = sequence_len(self.pending[0]).saturating_sub(self.len);
            let take = need.min(bytes.len());
            self.pending[self.len..self.len + take].copy_from_slice(&bytes[..take]);
            self.len += take;
            bytes = &bytes[take..];
            if take < need {
                return std::str::from_utf8(&self.pending[..self.len])
                    .err()
                    .is_some_and(|e| e.error_len().is_none());
            }
            if std::str::from_utf8(&self.pending[..self.len]).is_err() {
                return false;
            }
            self.len = 0;
        }
        match std::str::from_utf8(bytes) {
            Ok(_) => true,
            Err(e) if e.error_len().is_none() => {
                let rest = &bytes[e.valid_up_to()..];
                self.pending[..rest.len()].copy_from_slice(rest);
                self.len = rest.len();
                true
            }
            Err(_) => false,
        }
    }

    /// Whether the stream did not end inside a sequence.
    fn is_complete(&self) -> bool {
        self.len == 0
    }
}

/// The length of the sequence a valid lead byte starts.
fn sequence_len(lead: u8) -> usize {
    match lead {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        _ => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that returns at most `n` bytes per read, to split sequences.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn all(bytes: &[u8], keep: usize, step: usize) -> Result<Vec<(String, bool)>, Stop> {
        let cancel = Cancel::default();
        let mut lines = Lines::new(Trickle(bytes, step), &cancel);
        let mut out = Vec::new();
        while let Some(h) = lines.next_line(keep)? {
            out.push((String::from_utf8_lossy(h.bytes).into_owned(), h.cut));
        }
        Ok(out)
    }

    fn texts(bytes: &[u8]) -> Vec<String> {
        all(bytes, usize::MAX, 3)
            .unwrap()
            .into_iter()
            .map(|(t, _)| t)
            .collect()
    }

    #[test]
    fn splits_like_str_lines() {
        for text in [
            "",
            "a",
            "a\n",
            "a\r\nb",
            "a\rb\r\n\n",
            "\n\n",
            "x\r",
            "é\n漢字\r\n🦀",
        ] {
            assert_eq!(
                texts(text.as_bytes()),
                text.lines().collect::<Vec<_>>(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_long_line_keeps_only_its_head() {
        let line = "y".repeat(200_000) + "\nnext\n";
        let got = all(line.as_bytes(), 10, 7000).unwrap();
        assert_eq!(got, [("yyyyyyyyyy".into(), true), ("next".into(), false)]);
    }

    #[test]
    fn a_kept_line_of_exactly_keep_bytes_is_not_cut() {
        let got = all(b"abc\r\nabcd", 4, 1).unwrap();
        assert_eq!(got, [("abc".into(), false), ("abcd".into(), false)]);
    }

    #[test]
    fn invalid_utf8_anywhere_stops_reading() {
        assert!(matches!(all(b"ok\n\xff\n", 100, 1), Err(Stop::NotText)));
        assert!(matches!(
            all(&"ok\né".as_bytes()[..4], 100, 1),
            Err(Stop::NotText)
        ));
        // A sequence split across every read is still valid.
        assert_eq!(texts("🦀é\n".as_bytes()), ["🦀é"]);
    }

    #[test]
    fn count_rest_counts_an_unterminated_tail_and_validates() {
        let cancel = Cancel::default();
        let mut lines = Lines::new(Trickle(b"a\nb\nc\nd", 2), &cancel);
        lines.next_line(0).unwrap();
        assert_eq!(lines.count_rest().unwrap(), 3);
        let mut lines = Lines::new(&b"a\nb\n"[..], &cancel);
        assert_eq!(lines.count_rest().unwrap(), 2);
        let mut lines = Lines::new(&b"a\n\xc3"[..], &cancel);
        assert!(matches!(lines.count_rest(), Err(Stop::NotText)));
    }

    #[test]
    fn a_set_cancel_stops_at_the_next_read() {
        let cancel = Cancel::default();
        let mut lines = Lines::new(&b"a\nb\n"[..], &cancel);
        assert!(lines.next_line(10).unwrap().is_some());
        cancel.cancel();
        assert!(matches!(lines.next_line(10), Err(Stop::Cancelled)));
    }
}
