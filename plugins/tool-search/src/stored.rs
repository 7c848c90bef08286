//! Where `glob` and `grep` store a complete result over their cap: one
//! private directory per generation, `$TMPDIR/dsh-search-<pid>-<tag>`
//! (0700, a `dsh_sdk::tempdir::PrivateDir`), made at the first stored
//! result and removed with every stored file when the fiber is disposed.
//!
//! A sandboxed command may write the temp dir, so it may rename the
//! directory and plant a symlink in its place: files are created through
//! the descriptor the directory's `PrivateDir` holds, never by path, and a
//! directory found moved or replaced is given up for a fresh one. The
//! calls run on blocking threads, hence one directory behind a mutex.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use dsh_sdk::tempdir::PrivateDir;

/// The prefix of the directories in the temp dir.
const PREFIX: &str = "dsh-search-";

/// This generation's directory.
enum State {
    /// None yet: made at the first stored result.
    Unused,
    Open(PrivateDir),
    /// The fiber was disposed: nothing is stored any more.
    Closed,
}

static DIR: Mutex<State> = Mutex::new(State::Unused);

fn lock() -> MutexGuard<'static, State> {
    DIR.lock().unwrap_or_else(|e| e.into_inner())
}

/// The fiber is applied: results may be stored (again).
pub fn open() {
    let old = std::mem::replace(&mut *lock(), State::Unused);
    drop(old);
}

/// The fiber is disposed: removes the directory and every stored file;
/// nothing is stored after this.
pub fn close() {
    let old = std::mem::replace(&mut *lock(), State::Closed);
    if let State::Open(dir) = old {
        let path = dir.path().to_owned();
        if let Err(e) = dir.remove() {
            dsh_sdk::tracing::warn!("cannot remove {}: {e}", path.display());
        }
    }
}

/// Stores `text` in a new file `<id>-<name>` (`name` a plain file name);
/// its path, or `None` (logged) when it could not be stored.
pub fn spill(name: &str, text: &str) -> Option<PathBuf> {
    match store(name, text) {
        Ok(path) => Some(path),
        Err(e) => {
            dsh_sdk::tracing::warn!("cannot store the complete {name}: {e}");
            None
        }
    }
}

fn store(name: &str, text: &str) -> std::io::Result<PathBuf> {
    let dir = {
        let mut state = lock();
        if let State::Open(dir) = &*state {
            if !dir.in_place() {
                dsh_sdk::tracing::warn!(
                    "the directory of stored results {} was moved or replaced; using a fresh one",
                    dir.path().display()
                );
                // Dropping it empties it through its descriptor.
                *state = State::Unused;
            }
        }
        if matches!(*state, State::Unused) {
            *state = State::Open(PrivateDir::new(PREFIX)?);
        }
        match &*state {
            State::Open(dir) => dir.handle(),
            _ => return Err(std::io::Error::other("tool-search is disposed")),
        }
    };
    let file = format!("{}-{name}", dsh_sdk::new_id());
    dir.create(&file)?.write_all(text.as_bytes())?;
    Ok(dir.path().join(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The only test touching the generation's directory (a static).
    #[test]
    fn a_swapped_directory_gets_nothing_and_a_fresh_one_takes_over() {
        open();
        let first = spill("grep.txt", "one").unwrap();
        assert_eq!(std::fs::read_to_string(&first).unwrap(), "one");
        let dir = first.parent().unwrap().to_owned();
        // A command renames it and plants a symlink to another directory.
        let target = PrivateDir::new("dsh-search-test-target-").unwrap();
        let moved = dir.with_extension("moved");
        std::fs::rename(&dir, &moved).unwrap();
        std::os::unix::fs::symlink(target.path(), &dir).unwrap();
        let second = spill("grep.txt", "two").unwrap();
        assert_ne!(second.parent(), Some(dir.as_path()));
        assert_eq!(std::fs::read_to_string(&second).unwrap(), "two");
        // The target holds its own owner record only.
        assert_eq!(std::fs::read_dir(target.path()).unwrap().count(), 1);
        // The moved one was emptied through its descriptor.
        assert_eq!(std::fs::read_dir(&moved).unwrap().count(), 0);
        close();
        assert!(!second.exists() && !second.parent().unwrap().exists());
        assert_eq!(spill("grep.txt", "three"), None, "closed");
        std::fs::remove_file(&dir).unwrap();
        std::fs::remove_dir(&moved).unwrap();
    }
}
