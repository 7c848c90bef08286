//! One writer per session log: an exclusive `flock(2)` (`LOCK_EX|LOCK_NB`,
//! through `File::try_lock`) on the log file itself, held by an open file
//! for as long as this host may append. The kernel drops it when the file
//! is closed or the process dies, so a killed host never leaves a stale
//! lock behind. `flock` tells nobody who holds a lock; on Linux the holder's
//! pid is looked up in `/proc/locks` (best effort, for the error message).

use std::fs::{File, TryLockError};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// An exclusive lock on one session log, released when this is dropped.
#[derive(Debug)]
pub struct LogLock {
    file: File,
}

impl LogLock {
    /// The locked file (writing through it keeps the lock).
    pub fn file(&self) -> &File {
        &self.file
    }
}

/// Why a lock was not taken.
#[derive(Debug)]
pub enum Refused {
    /// Another open file (another process, as a rule) holds the lock.
    Busy {
        /// The holder's pid, when `/proc/locks` names it.
        pid: Option<u32>,
    },
    /// The log could not be opened or locked at all.
    Io(io::Error),
}

/// Locks the existing log at `path`.
pub fn lock_path(path: &Path) -> Result<LogLock, Refused> {
    // `flock` needs no write access, so a read-only descriptor will do;
    // only a regular file, never through a link (see `reader::open_log`).
    let file = crate::reader::open_log_read(path).map_err(Refused::Io)?;
    lock_file(file)
}

/// How long a lock that this process holds is waited for before it is
/// refused. A child being spawned (a tool's process, between its fork and
/// its exec) shares every open file of the process for a moment, a log
/// just closed among them, so its lock outlives the close by that moment.
/// Another process's lock is refused at once.
const OWN_PROCESS_WAIT: Duration = Duration::from_millis(250);

/// Locks an already open file (the temp file a new log is published from:
/// the lock then covers the log from the moment it appears).
pub fn lock_file(file: File) -> Result<LogLock, Refused> {
    let deadline = Instant::now() + OWN_PROCESS_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(LogLock { file }),
            Err(TryLockError::WouldBlock) => {
                let pid = holder_pid(&file);
                if pid == Some(std::process::id()) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                return Err(Refused::Busy { pid });
            }
            Err(TryLockError::Error(e)) => return Err(Refused::Io(e)),
        }
    }
}

/// The pid holding a `flock` on `file`, from `/proc/locks`.
fn holder_pid(file: &File) -> Option<u32> {
    let meta = file.metadata().ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let (major, minor) = dev_parts(meta.dev());
    flock_holder(&locks, major, minor, meta.ino())
}

/// Splits a Linux `st_dev` into (major, minor), as glibc's `major`/`minor`.
fn dev_parts(dev: u64) -> (u64, u64) {
    let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0000_0fff);
    let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0x0000_00ff);
    (major, minor)
}

/// Finds the holder of a `FLOCK` on inode `ino` in `/proc/locks` text
/// (`1: FLOCK  ADVISORY  WRITE 4242 fe:00:5398614 0 EOF`; major and minor
/// in hex). An entry on the same device wins; failing that (stacked file
/// systems report another device to `stat`), the only pid locking that
/// inode number. Waiters (`->` lines) and unknown pids (0, -1) are skipped.
pub fn flock_holder(locks: &str, major: u64, minor: u64, ino: u64) -> Option<u32> {
    let mut same_inode = Vec::new();
    for line in locks.lines().filter(|l| !l.contains("->")) {
        let Some((pid, (maj, min, i))) = parse_flock_line(line) else {
            continue;
        };
        if i != ino {
            continue;
        }
        if (maj, min) == (major, minor) {
            return Some(pid);
        }
        same_inode.push(pid);
    }
    same_inode.sort_unstable();
    same_inode.dedup();
    match same_inode.as_slice() {
        [only] => Some(*only),
        _ => None,
    }
}

/// `(pid, (major, minor, inode))` of one `FLOCK` line of `/proc/locks`.
fn parse_flock_line(line: &str) -> Option<(u32, (u64, u64, u64))> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.get(1) != Some(&"FLOCK") {
        return None;
    }
    let pid = fields.get(4)?.parse::<u32>().ok().filter(|p| *p > 0)?;
    let mut id = fields.get(5)?.split(':');
    let major = u64::from_str_radix(id.next()?, 16).ok()?;
    let minor = u64::from_str_radix(id.next()?, 16).ok()?;
    let ino = id.next()?.parse().ok()?;
    Some((pid, (major, minor, ino)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_of_this_process_let_go_a_moment_later_is_taken() {
        let dir = dsh_sdk::tempdir::PrivateDir::new("dsh-lock").unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "x").unwrap();
        let held = lock_path(&path).unwrap();
        // A spawned child's copy of the file, closed at its exec.
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
        });
        let started = Instant::now();
        assert!(lock_path(&path).is_ok(), "taken once let go");
        assert!(started.elapsed() < OWN_PROCESS_WAIT);
        closer.join().unwrap();
        // Held for good: refused once the wait is over, naming this process.
        let _held = lock_path(&path).unwrap();
        match lock_path(&path) {
            Err(Refused::Busy { pid }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("{other:?}"),
        }
    }

    const LOCKS: &str = "\
1: FLOCK  ADVISORY  WRITE 23167 fe:00:5398614 0 EOF
2: POSIX  ADVISORY  WRITE 999 fe:00:777 0 EOF
3: FLOCK  ADVISORY  WRITE 4242 fe:00:777 0 EOF
3: -> FLOCK  ADVISORY  WRITE 5151 fe:00:777 0 EOF
4: FLOCK  ADVISORY  WRITE 31 00:2a:888 0 EOF
5: OFDLCK ADVISORY  WRITE -1 fe:00:999 0 EOF
";

    #[test]
    fn the_flock_holder_of_an_inode_is_found() {
        assert_eq!(flock_holder(LOCKS, 0xfe, 0, 777), Some(4242));
        assert_eq!(flock_holder(LOCKS, 0xfe, 0, 5_398_614), Some(23167));
    }

    #[test]
    fn another_device_falls_back_to_the_only_holder_of_the_inode() {
        assert_eq!(flock_holder(LOCKS, 0, 0x2b, 888), Some(31));
    }

    #[test]
    fn no_holder_is_named_when_unknown_or_ambiguous() {
        assert_eq!(
            flock_holder(LOCKS, 0xfe, 0, 999),
            None,
            "OFD locks are not flock"
        );
        assert_eq!(flock_holder(LOCKS, 0xfe, 0, 1), None);
        let two =
            "1: FLOCK ADVISORY WRITE 10 08:01:5 0 EOF\n2: FLOCK ADVISORY WRITE 11 08:02:5 0 EOF\n";
        assert_eq!(flock_holder(two, 0xfe, 0, 5), None);
        assert_eq!(flock_holder("garbage\n\n1: FLOCK", 0, 0, 5), None);
    }

    #[test]
    fn dev_numbers_split_like_glibc() {
        assert_eq!(dev_parts(0xfe00), (0xfe, 0));
        assert_eq!(dev_parts(0x0803), (8, 3));
        // A large minor spills into the high bits.
        assert_eq!(dev_parts(0x0010_0103), (1, 0x100 | 3));
    }

    fn temp_log(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("dsh-lock-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.jsonl");
        std::fs::write(&path, "{}\n").unwrap();
        path
    }

    #[test]
    fn a_second_lock_is_refused_until_the_first_is_dropped() {
        let path = temp_log("second");
        let first = lock_path(&path).unwrap();
        // flock locks belong to open files: a second open conflicts even
        // inside one process, and /proc/locks names this process.
        match lock_path(&path) {
            Err(Refused::Busy { pid }) => {
                if std::path::Path::new("/proc/locks").exists() {
                    assert_eq!(pid, Some(std::process::id()));
                }
            }
            other => panic!("expected Busy, got {other:?}"),
        }
        drop(first);
        assert!(lock_path(&path).is_ok());
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_missing_log_is_an_io_refusal() {
        let missing = std::env::temp_dir().join("dsh-lock-missing/none.jsonl");
        assert!(matches!(lock_path(&missing), Err(Refused::Io(_))));
    }
}
