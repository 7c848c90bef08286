//! Output of a command in bounded memory: the last `keep` bytes stay in
//! memory (what the model is shown), and once the output outgrows them
//! everything is streamed to a spill file, itself capped.
//!
//! The spill file is created in the plugin's private directory through the
//! directory's descriptor ([`DirHandle`]), never by path: the command
//! itself may write the temp dir, so it may rename the directory and plant
//! a symlink in its place before it prints.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use dsh_sdk::tempdir::DirHandle;

/// The most a spill file holds (the first bytes of the output).
pub const MAX_SPILL_BYTES: u64 = 64 * 1024 * 1024;

/// One stream's output.
pub struct Capture {
    keep: usize,
    tail: VecDeque<u8>,
    total: u64,
    /// The private directory the spill file goes in, and its name there.
    dir: DirHandle,
    name: String,
    spill: Option<File>,
    spilled: u64,
    /// Why the spill file could not be made or written.
    spill_failed: Option<String>,
}

/// Where the full output went, for the truncation note.
pub enum Saved {
    /// Everything is in the file.
    Whole(PathBuf),
    /// The file holds the first `MAX_SPILL_BYTES` only.
    Head(PathBuf),
    /// The file could not be written (why).
    Nowhere(String),
}

impl Capture {
    /// Keeps the last `keep` bytes in memory; spills to the new file
    /// `name` (a plain file name) in `dir`.
    pub fn new(keep: usize, dir: DirHandle, name: String) -> Capture {
        Capture {
            keep,
            tail: VecDeque::with_capacity(keep.min(64 * 1024)),
            total: 0,
            dir,
            name,
            spill: None,
            spilled: 0,
            spill_failed: None,
        }
    }

    /// Where the spill file is (or would be).
    fn spill_path(&self) -> PathBuf {
        self.dir.path().join(&self.name)
    }

    /// Appends what the command wrote.
    pub fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.total > self.keep as u64 && self.spill.is_none() && self.spill_failed.is_none() {
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
        // Through the directory's descriptor (O_EXCL | O_NOFOLLOW, mode
        // 0600); refused when the directory was moved or replaced.
        match self.dir.create(&self.name) {
            Ok(mut f) => {
                // What is in memory so far is all there was.
                let (a, b) = self.tail.as_slices();
                match f.write_all(a).and_then(|_| f.write_all(b)) {
                    Ok(()) => {
                        self.spilled = (a.len() + b.len()) as u64;
                        self.spill = Some(f);
                    }
                    Err(e) => self.spill_failed = Some(e.to_string()),
                }
            }
            Err(e) => self.spill_failed = Some(e.to_string()),
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
        if let Err(e) = f.write_all(part) {
            self.spill = None;
            self.spill_failed = Some(e.to_string());
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
        if let Some(why) = &self.spill_failed {
            Saved::Nowhere(why.clone())
        } else if self.spilled < self.total {
            Saved::Head(self.spill_path())
        } else {
            Saved::Whole(self.spill_path())
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
            Saved::Nowhere(why) => format!("the full {what} could not be saved: {why}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::tempdir::PrivateDir;

    fn dir() -> PrivateDir {
        PrivateDir::new("dsh-capture-test-").unwrap()
    }

    #[test]
    fn keeps_the_tail_and_spills_everything_once_it_overflows() {
        let dir = dir();
        let path = dir.path().join("spill");
        let mut c = Capture::new(10, dir.handle(), "spill".into());
        c.push(b"hello ");
        assert!(!path.exists(), "nothing spilled while it fits");
        c.push(b"world, and more");
        c.push(b"!");
        assert_eq!(c.total(), 22);
        assert_eq!(c.tail(), b" and more!");
        assert_eq!(std::fs::read(&path).unwrap(), b"hello world, and more!");
        assert!(matches!(c.saved(), Saved::Whole(p) if p == path));
        let (skipped, rest) = c.since(3);
        assert_eq!((skipped, rest.as_slice()), (9, &b" and more!"[..]));
        let (skipped, rest) = c.since(20);
        assert_eq!((skipped, rest.as_slice()), (0, &b"e!"[..]));
    }

    #[test]
    fn a_chunk_larger_than_the_tail_keeps_its_end() {
        let dir = dir();
        let mut c = Capture::new(4, dir.handle(), "big".into());
        c.push(b"0123456789");
        assert_eq!(c.tail(), b"6789");
        assert_eq!(c.since(0), (6, b"6789".to_vec()));
    }

    /// The command renames the directory and plants a symlink in its
    /// place before it prints: nothing is written through the link, and
    /// the note says why the output was not saved.
    #[test]
    fn a_swapped_directory_gets_no_spill_file_and_the_note_says_why() {
        let dir = dir();
        let outside = PrivateDir::new("dsh-capture-test-outside-").unwrap();
        let moved = dir.path().with_extension("moved");
        std::fs::rename(dir.path(), &moved).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path()).unwrap();
        let mut c = Capture::new(4, dir.handle(), "out.stdout".into());
        c.push(b"0123456789");
        assert_eq!(c.tail(), b"6789");
        assert_eq!(
            std::fs::read_dir(outside.path()).unwrap().count(),
            1,
            "the owner record only"
        );
        let note = c.saved_note("output");
        assert!(
            note.starts_with("the full output could not be saved: ")
                && note.contains("moved or replaced"),
            "{note}"
        );
        std::fs::remove_file(dir.path()).unwrap();
        drop(dir);
        std::fs::remove_dir(&moved).unwrap();
    }
}
