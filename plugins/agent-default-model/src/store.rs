//! The settings file on disk: read without ever blocking on something
//! that is not a regular file, and written as the original's
//! `dsh-atomic-write` writes it, so the two harnesses can share one home:
//! writers take `<file>.lock` (created exclusively, holding the writer's
//! pid, removed when done; a writer waits up to 2 s for it, never removes
//! another's), read the file again under it, and replace it by renaming a
//! fresh `0600` sibling over it. Readers take no lock: the rename is
//! atomic, so they see the old or the new text, whole.
//!
//! A settings file that is a symbolic link (kept in a dotfiles checkout) is
//! written where the link leads: the lock, the new file and the rename are
//! beside the real file, so the link stays a link. A link that leads
//! nowhere is refused, never replaced by a file.
//!
//! Every function here blocks (waits for the lock, fsyncs): callers run
//! them on the blocking pool.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dsh_sdk::api::agent_default_model::ModelSelection;
use dsh_sdk::names::code;
use dsh_sdk::{Error, Result};

use crate::document::Document;

/// The largest settings file read (it holds a few sections of settings).
pub const MAX_BYTES: u64 = 1 << 20;

/// How long a writer waits for another's lock (the original's
/// `DEFAULT_LOCK_WAIT_MS`).
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// The first and the longest pause between two tries for the lock.
const RETRY_FIRST: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_millis(200);

/// The most bytes read of a lock file (a pid and a newline).
const LOCK_READ_MAX: u64 = 32;

/// `INVALID_SETTINGS` about `path`, for a read that failed.
fn read_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::new(
        code::INVALID_SETTINGS,
        format!("cannot read the settings file {}: {e}", path.display()),
    )
}

/// `SETTINGS_UNWRITABLE`: `what` failed in `dir`, where the settings file
/// lives.
fn unwritable(dir: &Path, what: &str, e: std::io::Error) -> Error {
    Error::new(
        code::SETTINGS_UNWRITABLE,
        format!(
            "cannot {what} in the directory {} ({e}); nothing was saved and the settings file \
             is as it was. Make that directory writable (it must be on the file's own \
             filesystem), or edit the file by hand",
            dir.display()
        ),
    )
}

/// The directory of `path` (`.` for a bare name).
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The text of `path`; empty when it does not exist (or is a link that
/// leads nowhere). Refuses what is not a regular file (a FIFO would block)
/// and a file over [`MAX_BYTES`].
pub fn read(path: &Path) -> Result<String> {
    let mut file = match dsh_sdk::file::open_regular(path) {
        Ok(f) => f,
        Err(dsh_sdk::file::OpenError::Io(e)) if e.kind() == ErrorKind::NotFound => {
            return Ok(String::new())
        }
        Err(e) => return Err(read_error(path, e)),
    };
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| read_error(path, e))?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(Error::new(
            code::INVALID_SETTINGS,
            format!(
                "the settings file {} is over {MAX_BYTES} bytes; it was not read",
                path.display()
            ),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        Error::new(
            code::INVALID_SETTINGS,
            format!(
                "the settings file {} is not UTF-8 text (byte {}); it was not changed",
                path.display(),
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// Reads and parses `path`.
pub fn load(path: &Path) -> Result<Document> {
    Document::parse(path, read(path)?)
}

/// Makes `choose(document)` the section of `path`: under the writer lock,
/// reads the file again, parses it (a document that does not parse is
/// never overwritten), replaces the section's text and renames the result
/// over the file, `0600`. A symbolic link is written through (see the
/// module's doc).
pub fn save(path: &Path, choose: impl FnOnce(&Document) -> ModelSelection) -> Result<()> {
    save_waiting(path, LOCK_WAIT, choose)
}

/// [`save`], waiting up to `wait` for another writer's lock.
fn save_waiting(
    path: &Path,
    wait: Duration,
    choose: impl FnOnce(&Document) -> ModelSelection,
) -> Result<()> {
    let target = real_file(path)?;
    let _lock = Lock::take(&target, wait)?;
    let document = load(&target)?;
    let selection = choose(&document);
    let text = document.with_selection(path, &selection)?;
    if text == document.text {
        // Already so; a rename would only churn the inode.
        return ensure_private(&target);
    }
    write_atomic(&target, text.as_bytes())
}

/// The file a write of `path` replaces: `path` itself, or, when it is a
/// symbolic link, the file it leads to (every link followed). A link that
/// leads nowhere is refused.
fn real_file(path: &Path) -> Result<PathBuf> {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link {
        return Ok(path.to_owned());
    }
    std::fs::canonicalize(path).map_err(|e| {
        let to = std::fs::read_link(path)
            .map(|t| t.display().to_string())
            .unwrap_or_else(|_| "?".to_owned());
        let why = if e.kind() == ErrorKind::NotFound {
            "which does not exist".to_owned()
        } else {
            format!("which cannot be followed ({e})")
        };
        Error::new(
            code::INVALID_SETTINGS,
            format!(
                "the settings file {} is a symbolic link to {to}, {why}; nothing was saved and \
                 the link is as it was. Create the file it names, or remove the link",
                path.display()
            ),
        )
    })
}

/// Makes an existing `path` `0600` (the document may hold personal
/// values).
fn ensure_private(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o777 != 0o600 => {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| unwritable(dir_of(path), "make the settings file private", e))
        }
        _ => Ok(()),
    }
}

/// `path` + `suffix`, beside it.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Writes `bytes` to a fresh sibling (exclusive create, no link followed,
/// mode `0600`), fsyncs it and renames it over `path`, then fsyncs the
/// directory. On failure the sibling is removed and `path` is untouched;
/// the error (`SETTINGS_UNWRITABLE`) names the directory and the step.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = dir_of(path);
    let temp = sibling(path, &format!(".{}.tmp", dsh_sdk::new_id()));
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&temp)
        .map_err(|e| unwritable(dir, "create the new settings file", e))?;
    let written = (|| -> std::io::Result<()> {
        // Exactly 0600, whatever the umask left.
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        f.write_all(bytes)?;
        f.sync_all()
    })()
    .map_err(|e| unwritable(dir, "write the new settings file", e))
    .and_then(|()| {
        std::fs::rename(&temp, path)
            .map_err(|e| unwritable(dir, "rename the new settings file over the old", e))
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    // The rename is done: a directory that cannot be synced loses nothing
    // but durability across a crash.
    let _ = File::open(dir).and_then(|d| d.sync_all());
    Ok(())
}

/// The writer lock of a file: `<file>.lock`, held while this lives.
struct Lock(PathBuf);

impl Lock {
    /// Takes the lock of `path`, waiting up to `wait` for another writer's
    /// to go.
    fn take(path: &Path, wait: Duration) -> Result<Lock> {
        let lock = sibling(path, ".lock");
        let deadline = Instant::now() + wait;
        let mut pause = RETRY_FIRST;
        loop {
            let created = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&lock);
            match created {
                Ok(mut f) => {
                    let held = Lock(lock);
                    // The pid is for a person looking at a stale lock.
                    let _ = writeln!(f, "{}", std::process::id());
                    return Ok(held);
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(unwritable(
                        dir_of(path),
                        &format!("create the writer lock {}", lock.display()),
                        e,
                    ))
                }
            }
            if Instant::now() >= deadline {
                let holder = holder(&lock).map_or_else(String::new, |pid| format!(" (pid {pid})"));
                return Err(Error::new(
                    code::SETTINGS_LOCKED,
                    format!(
                        "another writer holds {}{holder}; nothing was saved. If no dsh is \
                         running, remove that file and try again",
                        lock.display()
                    ),
                ));
            }
            std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
            pause = (pause * 2).min(RETRY_MAX);
        }
    }
}

/// The pid a lock file holds, for the message: read from a regular file
/// opened without following a link (nor blocking on a FIFO), at most
/// [`LOCK_READ_MAX`] bytes.
fn holder(lock: &Path) -> Option<u32> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(lock)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(LOCK_READ_MAX).read_to_end(&mut bytes).ok()?;
    std::str::from_utf8(&bytes).ok()?.trim().parse().ok()
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A private directory, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn scratch() -> Scratch {
        let dir = std::env::temp_dir().join(format!("adm-store-{}", dsh_sdk::new_id()));
        std::fs::create_dir(&dir).unwrap();
        Scratch(dir)
    }

    #[test]
    fn save_keeps_the_rest_byte_for_byte_and_makes_the_file_private() {
        let dir = scratch();
        let path = dir.path().join("settings.yaml");
        let before = "# my settings\nui:\n  theme: dark # keep me\n\nagent-default-model:\n  model: old\n\n# end\n";
        std::fs::write(&path, before).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        save(&path, |_| ModelSelection::new("local", "qwen3")).unwrap();
        let after = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            after,
            "# my settings\nui:\n  theme: dark # keep me\n\nagent-default-model:\n  provider: local\n  model: qwen3\n\n# end\n"
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // No lock or temp file is left.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["settings.yaml"]);
    }

    #[test]
    fn a_malformed_file_is_never_overwritten() {
        let dir = scratch();
        let path = dir.path().join("settings.yaml");
        let before = "ui:\n  theme: [dark\nagent-default-model:\n  model: m\n";
        std::fs::write(&path, before).unwrap();
        let e = save(&path, |_| ModelSelection::new("p", "m")).unwrap_err();
        assert_eq!(e.code, code::INVALID_SETTINGS);
        assert!(e.message.contains(&path.display().to_string()), "{e}");
        assert!(e.message.contains("line"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
    }

    #[test]
    fn a_held_lock_is_waited_for_then_refused_and_never_removed() {
        let dir = scratch();
        let path = dir.path().join("settings.yaml");
        let lock = sibling(&path, ".lock");
        std::fs::write(&lock, "4242\n").unwrap();
        let wait = Duration::from_millis(50);
        let e = save_waiting(&path, wait, |_| ModelSelection::new("p", "m")).unwrap_err();
        assert_eq!(e.code, code::SETTINGS_LOCKED);
        assert!(e.message.contains("pid 4242"), "{e}");
        assert!(lock.exists());
        assert!(!path.exists());
    }

    #[test]
    fn a_lock_that_is_a_link_or_a_fifo_is_not_read_through() {
        let dir = scratch();
        let path = dir.path().join("settings.yaml");
        let lock = sibling(&path, ".lock");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "4242\n").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &lock).unwrap();
        let wait = Duration::from_millis(10);
        let e = save_waiting(&path, wait, |_| ModelSelection::new("p", "m")).unwrap_err();
        assert_eq!(e.code, code::SETTINGS_LOCKED);
        assert!(!e.message.contains("4242"), "{e}");
        std::fs::remove_file(&lock).unwrap();
        let c = std::ffi::CString::new(lock.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path for the call's duration.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = save_waiting(&path, wait, |_| ModelSelection::new("p", "m")).unwrap_err();
        assert_eq!(e.code, code::SETTINGS_LOCKED);
        assert!(!e.message.contains("pid"), "{e}");
        // A long file is read no further than a pid's length.
        std::fs::remove_file(&lock).unwrap();
        std::fs::write(&lock, format!("4242{}\n", " ".repeat(100))).unwrap();
        assert_eq!(holder(&lock), Some(4242));
        std::fs::write(&lock, format!("{}4242\n", " ".repeat(40))).unwrap();
        assert_eq!(holder(&lock), None);
    }

    #[test]
    fn a_symlinked_file_is_written_where_it_leads_and_stays_a_link() {
        let dir = scratch();
        let dotfiles = dir.path().join("dotfiles");
        std::fs::create_dir(&dotfiles).unwrap();
        let real = dotfiles.join("dsh.yaml");
        std::fs::write(&real, "ui: 1\n").unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let path = home.join("settings.yaml");
        std::os::unix::fs::symlink("../dotfiles/dsh.yaml", &path).unwrap();
        save(&path, |_| ModelSelection::new("local", "qwen3")).unwrap();
        assert!(std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            std::fs::read_to_string(&real).unwrap(),
            "ui: 1\nagent-default-model:\n  provider: local\n  model: qwen3\n"
        );
        let names = |d: &Path| -> Vec<String> {
            let mut n: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            n.sort();
            n
        };
        assert_eq!(names(&home), ["settings.yaml"]);
        assert_eq!(names(&dotfiles), ["dsh.yaml"]);
    }

    #[test]
    fn a_dangling_link_is_refused_not_replaced() {
        let dir = scratch();
        let path = dir.path().join("settings.yaml");
        let gone = dir.path().join("gone.yaml");
        std::os::unix::fs::symlink(&gone, &path).unwrap();
        let e = save(&path, |_| ModelSelection::new("p", "m")).unwrap_err();
        assert_eq!(e.code, code::INVALID_SETTINGS);
        assert!(
            e.message.contains("symbolic link") && e.message.contains("does not exist"),
            "{e}"
        );
        assert!(std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(!gone.exists());
        // Reading it is no layer, as a missing file.
        assert_eq!(read(&path).unwrap(), "");
    }

    #[test]
    fn a_lock_that_cannot_be_made_is_unwritable_naming_the_directory() {
        let dir = scratch();
        let missing = dir.path().join("no-such-home");
        let path = missing.join("settings.yaml");
        let e = save(&path, |_| ModelSelection::new("p", "m")).unwrap_err();
        assert_eq!(e.code, code::SETTINGS_UNWRITABLE);
        assert!(
            e.message
                .contains(&format!("directory {}", missing.display()))
                && e.message.contains("writer lock"),
            "{e}"
        );
        // What a read-only filesystem or a rename across filesystems says.
        for errno in [libc::EROFS, libc::EACCES, libc::EXDEV, libc::EBUSY] {
            let e = unwritable(
                dir.path(),
                "rename",
                std::io::Error::from_raw_os_error(errno),
            );
            assert_eq!(e.code, code::SETTINGS_UNWRITABLE);
            assert!(e.message.contains(&dir.path().display().to_string()), "{e}");
        }
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = scratch();
        let path = dir.path().join("settings.yaml");
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path for the call's duration.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read(&path).unwrap_err();
        assert_eq!(e.code, code::INVALID_SETTINGS);
    }
}
