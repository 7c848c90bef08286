//! Output of a command in bounded memory: the last `keep` bytes stay in
//! memory (what the model is shown), and once the output outgrows them
//! everything is streamed to a spill file, itself capped.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

/// The most a spill file holds (the first bytes of the output).
pub const MAX_SPILL_BYTES: u64 = 64 * 1024 * 1024;

/// One stream's output.
pub struct Capture {
    keep: usize,
    tail: VecDeque<u8>,
    total: u64,
    spill_path: PathBuf,
    spill: Option<File>,
    spilled: u64,
    spill_failed: bool,
}

/// Where the full output went, for the truncation note.
pub enum Saved {
    /// Everything is in the file.
    Whole(PathBuf),
    /// The file holds the first `MAX_SPILL_BYTES` only.
    Head(PathBuf),
    /// The file could not be written.
    Nowhere,
}

impl Capture {
    /// Keeps the last `keep` bytes in memory; spills to `spill_path`.
    pub fn new(keep: usize, spill_path: PathBuf) -> Capture {
        Capture {
            keep,
            tail: VecDeque::with_capacity(keep.min(64 * 1024)),
            total: 0,
            spill_path,
            spill: None,
            spilled: 0,
            spill_failed: false,
        }
    }

    /// Appends what the command wrote.
    pub fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.total > self.keep as u64 && self.spill.is_none() && !self.spill_failed {
            self.open_spill();
        }
        self.write_spill(bytes);
        if bytes.len() >= self.keep {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.keep..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.keep);
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    fn open_spill(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&self.spill_path)
        {
            Ok(mut f) => {
                // What is in memory so far is all there was.
                let (a, b) = self.tail.as_slices();
                if f.write_all(a).and_then(|_| f.write_all(b)).is_ok() {
                    self.spilled = (a.len() + b.len()) as u64;
                    self.spill = Some(f);
                } else {
                    self.spill_failed = true;
                }
            }
            Err(_) => self.spill_failed = true,
        }
    }

    fn write_spill(&mut self, bytes: &[u8]) {
        let Some(f) = self.spill.as_mut() else {
            return;
        };
        let room = MAX_SPILL_BYTES.saturating_sub(self.spilled) as usize;
        let part = &bytes[..bytes.len().min(room)];
        if part.is_empty() {
            return;
        }
        if f.write_all(part).is_err() {
            self.spill = None;
            self.spill_failed = true;
            return;
        }
        self.spilled += part.len() as u64;
    }

    /// Every byte the command wrote, counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Whether the output outgrew what memory keeps.
    pub fn truncated(&self) -> bool {
        self.total > self.keep as u64
    }

    /// The bytes kept in memory (the tail of the output).
    pub fn tail(&self) -> Vec<u8> {
        let (a, b) = self.tail.as_slices();
        [a, b].concat()
    }

    /// The output from byte `offset` on, as far as memory still has it:
    /// (bytes skipped because they left memory, the bytes).
    pub fn since(&self, offset: u64) -> (u64, Vec<u8>) {
        let start = self.total - self.tail.len() as u64;
        let skipped = start.saturating_sub(offset);
        let from = offset.saturating_sub(start).min(self.tail.len() as u64) as usize;
        let (a, b) = self.tail.as_slices();
        let bytes = if from < a.len() {
            [&a[from..], b].concat()
        } else {
            b[from - a.len()..].to_vec()
        };
        (skipped, bytes)
    }

    /// Where the full output is.
    pub fn saved(&self) -> Saved {
        if self.spill_failed {
            Saved::Nowhere
        } else if self.spilled < self.total {
            Saved::Head(self.spill_path.clone())
        } else {
            Saved::Whole(self.spill_path.clone())
        }
    }

    /// The truncation note's second half: where the rest is.
    pub fn saved_note(&self, what: &str) -> String {
        match self.saved() {
            Saved::Whole(p) => format!("full {what}: {}", p.display()),
            Saved::Head(p) => format!(
                "the first {MAX_SPILL_BYTES} bytes of the {what} are in: {}",
                p.display()
            ),
            Saved::Nowhere => format!("the full {what} could not be saved"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("dsh-capture-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn keeps_the_tail_and_spills_everything_once_it_overflows() {
        let path = scratch("spill");
        let mut c = Capture::new(10, path.clone());
        c.push(b"hello ");
        assert!(!path.exists(), "nothing spilled while it fits");
        c.push(b"world, and more");
        c.push(b"!");
        assert_eq!(c.total(), 22);
        assert_eq!(c.tail(), b" and more!");
        assert_eq!(std::fs::read(&path).unwrap(), b"hello world, and more!");
        assert!(matches!(c.saved(), Saved::Whole(_)));
        let (skipped, rest) = c.since(3);
        assert_eq!((skipped, rest.as_slice()), (9, &b" and more!"[..]));
        let (skipped, rest) = c.since(20);
        assert_eq!((skipped, rest.as_slice()), (0, &b"e!"[..]));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_chunk_larger_than_the_tail_keeps_its_end() {
        let path = scratch("big");
        let mut c = Capture::new(4, path.clone());
        c.push(b"0123456789");
        assert_eq!(c.tail(), b"6789");
        assert_eq!(c.since(0), (6, b"6789".to_vec()));
        std::fs::remove_file(&path).unwrap();
    }
}
