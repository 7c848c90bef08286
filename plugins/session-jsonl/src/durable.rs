//! Durable writes (reference dsh-core §8.3): a new log is published whole
//! ([`publish_new`]: header and first batch in a locked temp file, fsynced,
//! then hard-linked into place, never over an existing log), later batches
//! are appended and fsynced ([`append`]: one zstd frame per batch in a zstd
//! log; a failed write is cut back to the prior length), and a torn tail is
//! cut and closed ([`repair`]). Logs are created 0600 in 0700 directories.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use dsh_sdk::vocab::{SessionEvent, SessionHeader};

use crate::frames::Framer;
use crate::header::header_line;
use crate::lock::{self, LogLock};
use crate::paths::is_zstd;
use crate::reader::{open_log, Log};

/// Session logs hold whole conversations: only their owner may read them.
pub const LOG_MODE: u32 = 0o600;
/// Directories of session logs (created at the first write), owner only.
pub const DIR_MODE: u32 = 0o700;

/// Makes the directory entry of `path` durable (best effort: a directory
/// that cannot be opened or synced leaves the file itself durable).
fn fsync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

/// Creates `dir` and any missing parents with [`DIR_MODE`] (an existing
/// directory keeps its mode).
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Opens a fresh file with [`LOG_MODE`], whatever the umask allows more.
fn create_private_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(LOG_MODE)
        .open(path)
}

/// The bytes of a new log: header and first batch, as separate frames in a
/// zstd log (the original lists a session from its header frame alone).
fn first_bytes(
    path: &Path,
    header: &SessionHeader,
    events: &str,
    framer: &mut Framer,
) -> std::io::Result<Vec<u8>> {
    let head = header_line(header).map_err(std::io::Error::other)?;
    if !is_zstd(path) {
        return Ok([head.as_bytes(), events.as_bytes()].concat());
    }
    let mut bytes = framer.frame(head.as_bytes())?;
    bytes.extend(framer.frame(events.as_bytes())?);
    Ok(bytes)
}

/// First write: header + batch into a temp file (locked, so the log is
/// locked from the moment it appears), fsync, then published without
/// overwriting (hard link) and the directory fsynced. A log that already
/// exists fails with `AlreadyExists` and is left as it was. A `.zstd` path
/// gets the original's frames.
pub fn publish_new(
    path: &Path,
    header: &SessionHeader,
    events: &str,
    framer: &mut Framer,
) -> std::io::Result<LogLock> {
    if let Some(dir) = path.parent() {
        create_private_dir(dir)?;
    }
    let bytes = first_bytes(path, header, events, framer)?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!("{name}.tmp-{}", std::process::id()));
    let written = create_private_file(&tmp).and_then(|f| {
        let lock = lock::lock_file(f)
            .map_err(|r| std::io::Error::other(format!("cannot lock {}: {r:?}", tmp.display())))?;
        let mut f = lock.file();
        f.write_all(&bytes)?;
        f.sync_all()?;
        Ok(lock)
    });
    let linked = written.and_then(|lock| std::fs::hard_link(&tmp, path).map(|()| lock));
    let _ = std::fs::remove_file(&tmp);
    let lock = linked?;
    fsync_dir(path);
    Ok(lock)
}

/// Appends a batch and fsyncs (as one new frame in a zstd log); a failed
/// write is truncated back.
pub fn append(path: &Path, events: &str, framer: &mut Framer) -> std::io::Result<()> {
    let bytes = if is_zstd(path) {
        framer.frame(events.as_bytes())?
    } else {
        events.as_bytes().to_vec()
    };
    let mut f = open_log(path, OpenOptions::new().append(true))?;
    write_or_roll_back(&mut f, &bytes)
}

/// A log file as [`append`] writes it, so that the rollback can be checked
/// against a file that fails part way through a write.
trait LogFile: Write {
    fn size(&self) -> std::io::Result<u64>;
    fn sync(&mut self) -> std::io::Result<()>;
    fn truncate(&mut self, len: u64) -> std::io::Result<()>;
}

impl LogFile for File {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.sync_all()
    }
    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        self.set_len(len)
    }
}

/// Writes `bytes` durably, or cuts the file back to its length before the
/// write: a failed append never leaves half a line for the next one to
/// follow (the original's append rollback).
fn write_or_roll_back(f: &mut impl LogFile, bytes: &[u8]) -> std::io::Result<()> {
    let before = f.size()?;
    if let Err(e) = f.write_all(bytes).and_then(|_| f.sync()) {
        let _ = f.truncate(before);
        return Err(e);
    }
    Ok(())
}

/// Truncates a torn tail (`torn_at` is a text offset from `tail::scan`) and
/// appends the closers, durably. In a zstd log the cut falls on the start of
/// the torn final frame, and the complete lines that decoded from it are
/// written again (with the closers, as one frame; see [`Log::repair_cut`]).
pub fn repair(
    path: &Path,
    log: &Log,
    torn_at: Option<usize>,
    closers: &[SessionEvent],
    framer: &mut Framer,
) -> std::io::Result<()> {
    let (cut, mut text) = log.repair_cut(torn_at);
    if let Some(at) = cut {
        let f = open_log(path, OpenOptions::new().write(true))?;
        f.set_len(at)?;
        f.sync_all()?;
    }
    for c in closers {
        text.push_str(&serde_json::to_string(c).map_err(std::io::Error::other)?);
        text.push('\n');
    }
    if !text.is_empty() {
        append(path, &text, framer)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expand::Expansion;
    use crate::limits::{Limits, Text};
    use crate::paths::Compression;
    use crate::test_logs::{frame, line, zstd_file, HEAD};
    use crate::{frames, reader, tail};
    use dsh_sdk::vocab::event;

    /// A log that takes `room` more bytes, then fails every write; its
    /// sync can be made to fail too.
    struct FailingLog {
        data: Vec<u8>,
        room: usize,
        sync_fails: bool,
    }

    impl Write for FailingLog {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::Error::other("no space left"));
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            self.data.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl LogFile for FailingLog {
        fn size(&self) -> std::io::Result<u64> {
            Ok(self.data.len() as u64)
        }
        fn sync(&mut self) -> std::io::Result<()> {
            if self.sync_fails {
                return Err(std::io::Error::other("sync failed"));
            }
            Ok(())
        }
        fn truncate(&mut self, len: u64) -> std::io::Result<()> {
            self.data.truncate(len as usize);
            Ok(())
        }
    }

    #[test]
    fn a_failed_append_is_truncated_back_to_the_prior_length() {
        let prior = b"{\"type\":\"turn/start\"}\n".to_vec();
        let line = b"{\"type\":\"turn/end\"}\n";
        // The write fails part way through the line.
        let mut log = FailingLog {
            data: prior.clone(),
            room: 5,
            sync_fails: false,
        };
        let failed = write_or_roll_back(&mut log, line);
        assert_eq!(
            failed.map_err(|e| e.to_string()),
            Err("no space left".into())
        );
        assert_eq!(log.data, prior);
        // The whole line was written but could not be made durable.
        let mut log = FailingLog {
            data: prior.clone(),
            room: usize::MAX,
            sync_fails: true,
        };
        assert!(write_or_roll_back(&mut log, line).is_err());
        assert_eq!(log.data, prior);
        // A good write keeps both.
        let mut log = FailingLog {
            data: prior.clone(),
            room: usize::MAX,
            sync_fails: false,
        };
        write_or_roll_back(&mut log, line).unwrap();
        assert_eq!(log.data, [prior.as_slice(), line].concat());
    }

    #[test]
    fn a_torn_zstd_frame_is_cut_off_and_its_complete_lines_written_again() {
        let mut framer = Framer::new().unwrap();
        let second = line(event::STEP_START, 1);
        let mut raw = [
            frame(HEAD),
            frame(&line(event::TURN_START, 0)),
            frame(&second),
        ]
        .concat();
        let whole = raw.len();
        // A frame that decodes to one whole line and part of the next.
        // Noise over several 128 KiB blocks, so the blocks before the cut
        // decode.
        let mut x: u64 = 1;
        let noise: String = (0..400_000)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                char::from(b'a' + (x >> 59) as u8)
            })
            .collect();
        let big = format!("{}{noise}", line(event::STEP_END, 2));
        let third = framer.frame(big.as_bytes()).unwrap();
        raw.extend_from_slice(&third[..third.len() - 10]);
        let path = zstd_file("torn", &raw);
        let log = reader::read(&path, Limits::default()).unwrap();
        assert!(log.is_torn());
        let s = tail::scan(&log.text, Expansion::default()).unwrap();
        assert_eq!(s.events.len(), 3, "the torn frame's whole line is kept");
        log.check_defect(s.torn_at).unwrap();
        repair(&path, &log, s.torn_at, &[], &mut framer).unwrap();
        let again = reader::read(&path, Limits::default()).unwrap();
        assert!(!again.is_torn());
        assert!(std::fs::metadata(&path).unwrap().len() > whole as u64);
        let expected = format!(
            "{HEAD}{}{second}{}",
            line(event::TURN_START, 0),
            line(event::STEP_END, 2)
        );
        assert_eq!(String::from_utf8(again.text).unwrap(), expected);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_new_zstd_log_is_a_header_frame_then_one_frame_per_batch() {
        let root = std::env::temp_dir().join(format!("dsh-frames-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let path = root.join("s").join(Compression::Zstd.file_name());
        let header = SessionHeader {
            id: "s".into(),
            created_at: 1,
            ..SessionHeader::default()
        };
        let mut framer = Framer::new().unwrap();
        let lock = publish_new(&path, &header, &line(event::TURN_START, 0), &mut framer).unwrap();
        append(&path, &line(event::TURN_END, 1), &mut framer).unwrap();
        let raw = std::fs::read(&path).unwrap();
        let found = frames::scan(&raw).unwrap();
        assert_eq!(found.frames.len(), 3);
        let texts: Vec<Vec<u8>> = found
            .frames
            .iter()
            .map(|(a, b)| {
                let mut text = Text::new(Limits::default());
                frames::decode(&raw[*a..*b], &mut text).unwrap();
                text.into_bytes()
            })
            .collect();
        assert_eq!(texts[0], header_line(&header).unwrap().into_bytes());
        assert_eq!(texts[2], line(event::TURN_END, 1).into_bytes());
        drop(lock);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_new_log_is_private_locked_from_the_start_and_never_overwritten() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("dsh-publish-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let path = root.join("project").join("s").join("session.jsonl");
        let header = SessionHeader {
            id: "s".into(),
            created_at: 1,
            ..SessionHeader::default()
        };
        let mut framer = Framer::new().unwrap();
        let held = publish_new(&path, &header, &line(event::TURN_START, 0), &mut framer).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), LOG_MODE);
        assert_eq!(mode(&root.join("project").join("s")), DIR_MODE);
        assert_eq!(mode(&root.join("project")), DIR_MODE);
        assert_eq!(mode(&root), DIR_MODE, "missing parents too");
        assert!(matches!(
            lock::lock_path(&path),
            Err(lock::Refused::Busy { .. })
        ));
        let before = std::fs::read(&path).unwrap();
        let again = publish_new(&path, &header, "other\n", &mut framer)
            .err()
            .map(|e| e.kind());
        assert_eq!(again, Some(std::io::ErrorKind::AlreadyExists));
        assert_eq!(std::fs::read(&path).unwrap(), before);
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temp file is left behind");
        drop(held);
        assert!(lock::lock_path(&path).is_ok());
        let _ = std::fs::remove_dir_all(&root);
    }
}
