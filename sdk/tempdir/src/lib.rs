//! Private per-process directories, and sweeping the ones that dead
//! processes left behind.
//!
//! A [`PrivateDir`] is a directory only its user can enter (mode 0700),
//! named after the process that made it — `<prefix><pid>-<tag>`, or exactly
//! `<prefix><pid>` for [`PrivateDir::for_process_in`] — and removed with
//! everything in it when it is dropped (or [`PrivateDir::remove`]d). Putting
//! it in a fiber's effect removes it when the fiber is disposed:
//!
//! ```ignore
//! let dir = std::rc::Rc::new(dsh_sdk::tempdir::PrivateDir::new("dsh-mine-")?);
//! let owned = dir.clone();
//! ctx.effect(move || async move { drop(owned) });
//! ```
//!
//! A process that is killed (or `exit`s without unwinding) cannot remove its
//! directory, so creating one first [`sweep`]s its siblings: a directory
//! named `<prefix><pid>` or `<prefix><pid>-…`, owned by this user, whose
//! process is gone. "Gone" is read from `/proc/<pid>`; because pids are
//! reused, each directory also records its owner (`.owner`: the pid, the
//! process start time from `/proc/<pid>/stat` and the kernel's boot id), and
//! a directory whose recorded owner is not the process now holding that pid
//! is stale too. A directory without a record (made by an older version, or
//! by a process killed between `mkdir` and writing the record) is kept while
//! a process with its pid exists: the residual risk is a leak, never the
//! removal of a live process's files.
//!
//! The directory sits in a shared place (the temp dir) that a sandboxed
//! command of the same user may be allowed to write, so after it is made
//! it is never reached by its path again: a [`PrivateDir`] holds a
//! descriptor of it (opened `O_DIRECTORY | O_NOFOLLOW` right after the
//! `mkdir`, checked to be this user's and mode 0700), files are created
//! through that descriptor only ([`PrivateDir::create`], [`DirHandle`]:
//! `openat(.., O_CREAT | O_EXCL | O_NOFOLLOW)`, a plain name), and removal
//! unlinks through descriptors too. A command that renames the directory
//! and plants a symlink under its name redirects nothing: creating a file
//! is refused once the path no longer leads to the directory (so no one is
//! told a path that leads elsewhere), and removal empties the directory
//! wherever it was moved and removes the name only while it still leads
//! there. Writers on other threads share the descriptor through a
//! [`DirHandle`].

mod held;

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use held::{Held, PRIVATE_MODE};

/// The owner record inside every [`PrivateDir`].
const OWNER_FILE: &str = ".owner";

/// Who made a directory: enough to tell a pid's new process from the old.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// The process id.
    pub pid: u32,
    /// Start time in clock ticks since boot (`/proc/<pid>/stat`, field 22).
    pub start_ticks: u64,
    /// `/proc/sys/kernel/random/boot_id` (empty when unreadable).
    pub boot_id: String,
}

impl ProcessIdentity {
    /// The identity of the process now holding `pid`; `None` when no such
    /// process exists (or `/proc` cannot tell).
    pub fn of(pid: u32) -> Option<ProcessIdentity> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ...`: comm may hold spaces and parentheses, so
        // count fields from the last `)`. Field 22 is the 20th after it.
        let rest = &stat[stat.rfind(')')? + 1..];
        let start_ticks = rest.split_whitespace().nth(19)?.parse().ok()?;
        Some(ProcessIdentity {
            pid,
            start_ticks,
            boot_id: boot_id(),
        })
    }

    /// The identity of this process.
    pub fn current() -> Option<ProcessIdentity> {
        ProcessIdentity::of(std::process::id())
    }

    fn record(&self) -> String {
        format!(
            "pid {}\nstart {}\nboot {}\n",
            self.pid, self.start_ticks, self.boot_id
        )
    }

    fn parse(text: &str) -> Option<ProcessIdentity> {
        let mut pid = None;
        let mut start = None;
        let mut boot = None;
        for line in text.lines() {
            match line.split_once(' ') {
                Some(("pid", v)) => pid = v.parse().ok(),
                Some(("start", v)) => start = v.parse().ok(),
                Some(("boot", v)) => boot = Some(v.to_owned()),
                _ => {}
            }
        }
        Some(ProcessIdentity {
            pid: pid?,
            start_ticks: start?,
            boot_id: boot?,
        })
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Whether the process that made `dir` (named for `pid`) is gone: no
/// process has `pid`, or the one that has it is not the one recorded in the
/// directory. Without a record, a live `pid` counts as the owner.
pub fn owner_is_gone(dir: &Path, pid: u32) -> bool {
    if !Path::new("/proc/self").exists() {
        return !pid_exists(pid);
    }
    if !Path::new(&format!("/proc/{pid}")).exists() {
        return true;
    }
    match (read_record(dir), ProcessIdentity::of(pid)) {
        (Some(recorded), Some(now)) => recorded != now,
        // No record, or a process /proc cannot describe: keep.
        _ => false,
    }
}

/// The largest owner record read: a record is three short lines.
const MAX_RECORD_BYTES: u64 = 4096;

/// The owner record in `dir`: a regular file, opened without following a
/// symlink or waiting on a FIFO (a directory of this name prefix may have
/// been made by anyone who can write the temp dir), read bounded.
fn read_record(dir: &Path) -> Option<ProcessIdentity> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(dir.join(OWNER_FILE))
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_RECORD_BYTES).read_to_string(&mut text).ok()?;
    ProcessIdentity::parse(&text)
}

/// Fallback when `/proc` is not mounted: signal 0 checks existence.
fn pid_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 sends nothing; it only checks the pid exists.
    pid > 0
        && (unsafe { libc::kill(pid, 0) } == 0
            || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// The pid in a directory name `<prefix><pid>` or `<prefix><pid>-…`.
fn pid_in_name(name: &str, prefix: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    let digits = rest.split_once('-').map_or(rest, |(d, _)| d);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Removes the directories in `base` named `<prefix><pid>` or
/// `<prefix><pid>-…` that belong to this user and whose process is gone
/// (see [`owner_is_gone`]); symlinks and other users' directories are left
/// alone. Returns the directories removed. Errors reading `base` are
/// ignored: a sweep is best-effort.
pub fn sweep(base: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(base) else {
        return removed;
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| pid_in_name(n, prefix))
        else {
            continue;
        };
        let path = entry.path();
        // symlink_metadata: never follow a link planted in a shared dir.
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != me {
            continue;
        }
        if owner_is_gone(&path, pid) && remove_tree(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

/// Removes the directory `path` of this user and everything in it,
/// through descriptors (see the module doc): a symlink in its place is
/// refused, never followed.
fn remove_tree(path: &Path) -> io::Result<()> {
    Held::open(path)?.remove()
}

/// A private (0700) directory of this process, removed on drop. Files are
/// created in it through the descriptor it holds ([`PrivateDir::create`]);
/// see the module doc.
#[derive(Debug)]
pub struct PrivateDir {
    dir: DirHandle,
    removed: bool,
}

/// A shared handle on a [`PrivateDir`]'s directory, for writers on other
/// threads: creates files through the directory's descriptor, never by
/// path. Cheap to clone; it never removes anything, and once its
/// [`PrivateDir`] is removed creating a file fails.
#[derive(Debug, Clone)]
pub struct DirHandle(Arc<Held>);

impl DirHandle {
    /// The directory's path, as made (what to tell whoever reads the files).
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Creates the new file `name` (a plain name: no `/`, not `.` or `..`),
    /// mode 0600, open for writing: `openat` on the directory's
    /// descriptor with `O_CREAT | O_EXCL | O_NOFOLLOW`, so neither a
    /// symlink put under the directory's name nor one at `name` is ever
    /// followed. Refused (an error saying so) when the directory is no
    /// longer at [`DirHandle::path`]: moved away, or replaced.
    pub fn create(&self, name: &str) -> io::Result<File> {
        self.0.create(name, 0o600)
    }

    /// Like [`DirHandle::create`], with the file mode `mode` (less the
    /// umask).
    pub fn create_with_mode(&self, name: &str, mode: u32) -> io::Result<File> {
        self.0.create(name, mode)
    }

    /// Whether [`DirHandle::path`] still leads to this very directory (it
    /// was not moved away, replaced by a symlink or another directory, or
    /// removed).
    pub fn in_place(&self) -> bool {
        self.0.in_place()
    }
}

impl PrivateDir {
    /// Sweeps stale `<prefix><pid>…` directories in the temp dir
    /// (`$TMPDIR`, else `/tmp`) and creates `<prefix><pid>-<tag>` there,
    /// with a random tag, so that several owners in one process (two
    /// fibers, or two generations during a reload) never share one.
    pub fn new(prefix: &str) -> io::Result<PrivateDir> {
        PrivateDir::new_in(&std::env::temp_dir(), prefix)
    }

    /// Like [`PrivateDir::new`], in `base` (which must exist).
    pub fn new_in(base: &Path, prefix: &str) -> io::Result<PrivateDir> {
        sweep(base, prefix);
        let pid = std::process::id();
        let mut last = None;
        for _ in 0..8 {
            let tag = &uuid::Uuid::new_v4().to_string()[..8];
            let path = base.join(format!("{prefix}{pid}-{tag}"));
            match PrivateDir::make(path) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                other => return other,
            }
        }
        Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)))
    }

    /// Sweeps stale `<prefix><pid>…` directories in `base` and creates
    /// exactly `<prefix><pid>`: one per process. A stale one of that name
    /// (left by an earlier process with this pid) is replaced; one that
    /// belongs to this very process is an `AlreadyExists` error.
    pub fn for_process_in(base: &Path, prefix: &str) -> io::Result<PrivateDir> {
        sweep(base, prefix);
        let path = base.join(format!("{prefix}{}", std::process::id()));
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() && !is_ours(&path) => remove_tree(&path)?,
            _ => {}
        }
        PrivateDir::make(path)
    }

    /// Makes the directory `path` (mode 0700), opens it without following
    /// a symlink, checks it (this user's, mode exactly 0700) and writes the
    /// owner record through the descriptor.
    fn make(path: PathBuf) -> io::Result<PrivateDir> {
        // Not recursive: fails on anything already there, link or not.
        std::fs::DirBuilder::new()
            .mode(PRIVATE_MODE)
            .create(&path)?;
        let dir = PrivateDir {
            dir: DirHandle(Arc::new(Held::made(&path)?)),
            removed: false,
        };
        if let Some(me) = ProcessIdentity::current() {
            dir.create(OWNER_FILE)?.write_all(me.record().as_bytes())?;
        }
        Ok(dir)
    }

    /// The directory's path, as made.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A handle creating files in this directory from other threads (see
    /// [`DirHandle`]).
    pub fn handle(&self) -> DirHandle {
        self.dir.clone()
    }

    /// Creates the new file `name` in the directory, mode 0600, through its
    /// descriptor (see [`DirHandle::create`]).
    pub fn create(&self, name: &str) -> io::Result<File> {
        self.dir.create(name)
    }

    /// Whether [`PrivateDir::path`] still leads to this very directory
    /// (see [`DirHandle::in_place`]).
    pub fn in_place(&self) -> bool {
        self.dir.in_place()
    }

    /// Removes the directory and everything in it now, reporting failure
    /// (dropping does the same silently). Everything in it is removed
    /// through descriptors; the directory itself by its path only while
    /// that still leads to it: one moved away is emptied and left where it
    /// is, which is an error saying so.
    pub fn remove(mut self) -> io::Result<()> {
        self.removed = true;
        self.dir.0.remove()
    }
}

/// Whether `dir`'s owner record names this very process.
fn is_ours(dir: &Path) -> bool {
    let recorded = read_record(dir);
    recorded.is_some() && recorded == ProcessIdentity::current()
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        if !self.removed {
            let _ = self.dir.0.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn base(label: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("dsh-sdk-tempdir-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A record no live process matches (no process starts at tick
    /// u64::MAX).
    const STALE_RECORD: &str = "pid 1\nstart 18446744073709551615\nboot x\n";

    /// A pid that no process has: a child that was waited for.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn names_carry_the_pid() {
        assert_eq!(pid_in_name("dsh-spill-42", "dsh-spill-"), Some(42));
        assert_eq!(pid_in_name("dsh-spill-42-ab12", "dsh-spill-"), Some(42));
        assert_eq!(pid_in_name("42", ""), Some(42));
        assert_eq!(pid_in_name("dsh-spill-", "dsh-spill-"), None);
        assert_eq!(pid_in_name("dsh-spill-x1", "dsh-spill-"), None);
        assert_eq!(pid_in_name("dsh-bash-42", "dsh-spill-"), None);
    }

    #[test]
    fn a_private_dir_is_0700_recorded_and_removed_on_drop() {
        let b = base("drop");
        let dir = PrivateDir::new_in(&b, "t-").unwrap();
        let path = dir.path().to_owned();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(
            name.starts_with(&format!("t-{}-", std::process::id())),
            "{name}"
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(!owner_is_gone(&path, std::process::id()));
        let other = PrivateDir::new_in(&b, "t-").unwrap();
        assert_ne!(
            other.path(),
            path,
            "two owners in one process share nothing"
        );
        std::fs::write(path.join("f"), "x").unwrap();
        drop(dir);
        assert!(!path.exists());
        other.remove().unwrap();
        std::fs::remove_dir_all(&b).unwrap();
    }

    /// The attack on a spill directory, as a sandboxed command of the same
    /// user runs it: rename the directory and plant a symlink to another
    /// directory under its name, then let the owner write.
    #[test]
    fn a_swapped_directory_redirects_no_write_and_no_removal() {
        let b = base("swap");
        let dir = PrivateDir::new_in(&b, "t-").unwrap();
        let handle = dir.handle();
        // A writer on another thread, before the swap.
        std::thread::spawn(move || handle.create("before").unwrap().write_all(b"x"))
            .join()
            .unwrap()
            .unwrap();
        assert_eq!(std::fs::read(dir.path().join("before")).unwrap(), b"x");
        let target = b.join("target");
        std::fs::create_dir(&target).unwrap();
        let moved = b.join("moved");
        std::fs::rename(dir.path(), &moved).unwrap();
        std::os::unix::fs::symlink(&target, dir.path()).unwrap();
        assert!(!dir.in_place());
        let handle = dir.handle();
        let e = std::thread::spawn(move || handle.create("after").map(drop))
            .join()
            .unwrap()
            .unwrap_err();
        assert!(e.to_string().contains("moved or replaced"), "{e}");
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
        // Removal empties the moved directory through the descriptor and
        // leaves the link and its target alone.
        let link = dir.path().to_owned();
        drop(dir);
        assert_eq!(std::fs::read_dir(&moved).unwrap().count(), 0);
        assert!(link.is_symlink() && target.is_dir());
        std::fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn a_handle_outliving_its_directory_creates_nothing() {
        let b = base("outlive");
        let dir = PrivateDir::new_in(&b, "t-").unwrap();
        let handle = dir.handle();
        dir.remove().unwrap();
        assert!(handle.create("late").is_err());
        assert!(!handle.path().exists());
        std::fs::remove_dir_all(&b).unwrap();
    }

    /// Anyone who can write the temp dir can make a directory named like a
    /// live process's, with a FIFO for its record: the sweep neither waits
    /// on it nor removes the directory.
    #[test]
    fn a_fifo_for_an_owner_record_does_not_block_the_sweep() {
        let b = base("fifo");
        let planted = b.join("t-1-fifo");
        std::fs::create_dir(&planted).unwrap();
        let fifo = std::ffi::CString::new(
            planted
                .join(OWNER_FILE)
                .into_os_string()
                .into_encoded_bytes(),
        )
        .unwrap();
        // SAFETY: a NUL-terminated path alive for the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert_eq!(sweep(&b, "t-"), Vec::<PathBuf>::new());
        assert!(planted.exists());
        std::fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn a_sweep_removes_dead_and_reused_pids_and_keeps_live_ones() {
        let b = base("sweep");
        let dead = b.join(format!("t-{}", dead_pid()));
        let dead_tagged = b.join(format!("t-{}-abc", dead_pid()));
        // pid 1 is alive; this record says its process started at another
        // time: the pid was reused.
        let reused = b.join("t-1-old");
        // Alive, without a record (an older version's): kept.
        let live = b.join("t-1");
        let unrelated = b.join("other-1");
        for d in [&dead, &dead_tagged, &reused, &live, &unrelated] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(reused.join(OWNER_FILE), STALE_RECORD).unwrap();
        // A link to a dead pid's name is never followed or removed.
        let target = b.join("target");
        std::fs::create_dir(&target).unwrap();
        let link = b.join(format!("t-{}-link", dead_pid()));
        std::os::unix::fs::symlink(&target, &link).unwrap();

        let mut removed = sweep(&b, "t-");
        removed.sort();
        let mut expected = vec![dead.clone(), dead_tagged.clone(), reused.clone()];
        expected.sort();
        assert_eq!(removed, expected);
        assert!(live.exists() && unrelated.exists() && target.exists());
        assert!(std::fs::symlink_metadata(&link).is_ok());
        std::fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn one_dir_per_process_replaces_a_stale_one_and_refuses_a_second() {
        let b = base("exact");
        let path = b.join(std::process::id().to_string());
        // Left by an earlier process that had this pid.
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join(OWNER_FILE), STALE_RECORD).unwrap();
        std::fs::write(path.join("old.so"), "x").unwrap();
        let dir = PrivateDir::for_process_in(&b, "").unwrap();
        assert_eq!(dir.path(), path);
        assert!(!path.join("old.so").exists());
        let again = PrivateDir::for_process_in(&b, "").unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        drop(dir);
        assert!(!path.exists());
        std::fs::remove_dir_all(&b).unwrap();
    }
}
