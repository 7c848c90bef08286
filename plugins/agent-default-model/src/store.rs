//! The settings file on disk: read without ever blocking on something
//! that is not a regular file, and written as the original's
//! `dsh-atomic-write` writes it, so the two harnesses can share one home:
//! writers take `<file>.lock` (created exclusively, holding the writer's
//! pid, removed when done; a writer waits up to 2 s for it, never removes
//! another's), read the file again under it, and replace it by renaming a
//! fresh `0600` sibling over it. Readers take no lock: the rename is
//! atomic, so they see the old or the new text, whole.
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

/// `INVALID_SETTINGS` about `path`, for an I/O failure.
fn io_error(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::new(
        code::INVALID_SETTINGS,
        format!("cannot {what} the settings file {}: {e}", path.display()),
    )
}

/// The text of `path`; empty when it does not exist. Refuses what is not a
/// regular file (a FIFO would block) and a file over [`MAX_BYTES`].
pub fn read(path: &Path) -> Result<String> {
    let mut file = match dsh_sdk::file::open_regular(path) {
        Ok(f) => f,
        Err(dsh_sdk::file::OpenError::Io(e)) if e.kind() == ErrorKind::NotFound => {
            return Ok(String::new())
        }
        Err(e) => {
            return Err(Error::new(
                code::INVALID_SETTINGS,
                format!("cannot read the settings file {}: {e}", path.display()),
            ))
        }
    };
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, "read", e))?;
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

/// Makes `selection` the section of `path`: under the writer lock, reads
/// the file again, parses it (a document that does not parse is never
/// overwritten), replaces the section's text and renames the result over
/// the file, `0600`.
pub fn save(path: &Path, selection: &ModelSelection) -> Result<()> {
    let _lock = Lock::take(path)?;
    let document = load(path)?;
    let text = document.with_selection(path, selection)?;
    if text == document.text {
        // Already so; a rename would only churn the inode.
        return ensure_private(path);
    }
    write_atomic(path, text.as_bytes())
}

/// Makes an existing `path` `0600` (the document may hold personal
/// values).
fn ensure_private(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o777 != 0o600 => {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| io_error(path, "restrict", e))
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
/// directory. On failure the sibling is removed and `path` is untouched.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let temp = sibling(path, &format!(".{}.tmp", dsh_sdk::new_id()));
    let written = (|| -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)?;
        // Exactly 0600, whatever the umask left.
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&temp, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        io_error(path, "write", e)
    })
}

/// The writer lock of a file: `<file>.lock`, held while this lives.
struct Lock(PathBuf);

impl Lock {
    /// Takes the lock of `path`, waiting up to [`LOCK_WAIT`] for another
    /// writer's to go.
    fn take(path: &Path) -> Result<Lock> {
        let lock = sibling(path, ".lock");
        let deadline = Instant::now() + LOCK_WAIT;
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
                Err(e) => return Err(io_error(&lock, "create the lock of", e)),
            }
            if Instant::now() >= deadline {
                let holder = std::fs::read_to_string(&lock)
                    .ok()
                    .and_then(|t| t.trim().parse::<u32>().ok())
                    .map_or_else(String::new, |pid| format!(" (pid {pid})"));
                return Err(Error::new(
                    code::SETTINGS_LOCKED,
                    format!(
                        "another writer holds {}{holder}; nothing was saved. If no dsh is \
                         running, remove that file and try again",
                        lock.display()
                    ),
                ));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(RETRY_MAX);
        }
    }
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
        save(&path, &ModelSelection::new("local", "qwen3")).unwrap();
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
        let e = save(&path, &ModelSelection::new("p", "m")).unwrap_err();
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
        let e = save(&path, &ModelSelection::new("p", "m")).unwrap_err();
        assert_eq!(e.code, code::SETTINGS_LOCKED);
        assert!(e.message.contains("pid 4242"), "{e}");
        assert!(lock.exists());
        assert!(!path.exists());
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
