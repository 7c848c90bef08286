//! Private copies: every generation of a library, the first included, is
//! loaded from a copy of its own under `$DSH_HOME/state/<pid>/`, never from
//! the file the user (or cargo) writes.
//!
//! Why a copy and not the file: a loaded library's pages are mapped from its
//! inode. `cp new.so plugin.so` truncates and rewrites that same inode, so
//! the code under a running generation would change (the host crashed with
//! SIGSEGV). A hard link shares the inode and would not help; a real copy
//! has an inode nobody else writes. It also gives every load a fresh path
//! and inode, which glibc's `dlopen` needs to load a new generation at all
//! (it returns the loaded object for a path or inode it already knows).
//!
//! What is loaded is what was checked: the copy is made, then compared with
//! its source (size, and the source's identity before and after: a build
//! still writing the file is caught and retried), and the loader's
//! preflight reads the copy, not the original.
//!
//! Cost: a copy is `std::fs::copy` (`copy_file_range`: a reflink on
//! btrfs and XFS, an in-kernel copy elsewhere, about 0.5 to 1 ms per MB on
//! ext4 here), made concurrently for the rows of one apply. So that a host
//! started again does not pay it again, copies are kept in
//! `$DSH_HOME/cache/libraries/` ([`crate::copies`]) and a generation's path
//! is a hard link to one of them: still a copy nobody else writes, never
//! the source's inode. Without a usable store (another filesystem, a
//! directory not private to this user) each generation gets a plain copy.
//!
//! `state/` and `state/<pid>/` are 0700. `state/<pid>/` is removed when the
//! [`Staging`] is dropped (the supervisor's end: a clean exit, SIGINT or
//! SIGTERM); directories of processes that are gone are removed when the
//! next host starts ([`dsh_tempdir::sweep`], which also tells a reused
//! pid from its first owner).

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_tempdir::PrivateDir;

use crate::copies::{Slot, SourceKey};
use crate::loader::FileId;

/// How many times a copy is attempted while its source keeps changing.
const COPY_ATTEMPTS: u32 = 3;

/// The pause between two attempts (a build finishing its write).
const COPY_RETRY_PAUSE: Duration = Duration::from_millis(30);

/// Names the private copies of one host process.
pub struct Staging {
    dir: PrivateDir,
    /// `$DSH_HOME/cache/libraries`, when private to this user.
    store: Option<PathBuf>,
    seq: u64,
    /// The store entry each live generation's path links to: one entry is
    /// never linked to two generations of this process.
    reserved: HashMap<PathBuf, String>,
    /// The store entries this process used, by file stem (the earlier ones
    /// are superseded when a newer version is stored).
    used: HashMap<String, HashSet<String>>,
}

impl Staging {
    /// Uses `<state>/<pid>/`, removing the directories of dead processes,
    /// and the store `cache/libraries/` beside `<state>`. A second host in
    /// this process gets `<state>/<pid>-<tag>/`.
    pub fn new(state: &Path) -> io::Result<Staging> {
        crate::paths::create_private_dir(state)?;
        let dir = match PrivateDir::for_process_in(state, "") {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => PrivateDir::new_in(state, "")?,
            other => other?,
        };
        let store = state
            .parent()
            .map(|home| home.join("cache").join("libraries"))
            .filter(|d| private_dir(d));
        Ok(Staging {
            dir,
            store,
            seq: 0,
            reserved: HashMap::new(),
            used: HashMap::new(),
        })
    }

    /// Reserves a fresh path for the next generation of `source` (and a
    /// slot in the store); the copy is made by [`Staged::materialize`] (on a
    /// blocking thread).
    pub fn prepare(&mut self, source: &Path) -> Staged {
        self.seq += 1;
        let stem = source
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin".into());
        let path = self.dir.path().join(format!("{stem}-{}.so", self.seq));
        let slot = self.store.as_ref().and_then(|dir| {
            let key = SourceKey::of(source).ok()?;
            let taken: HashSet<&String> = self.reserved.values().collect();
            let name = (0..)
                .map(|n| key.entry_name(&stem, n))
                .find(|n| !taken.contains(n))?;
            let superseded = self
                .used
                .get(&stem)
                .into_iter()
                .flatten()
                .filter(|n| **n != name && !taken.contains(n))
                .cloned()
                .collect();
            Some(Slot {
                dir: dir.clone(),
                name,
                key,
                superseded,
            })
        });
        if let Some(slot) = &slot {
            self.reserved.insert(path.clone(), slot.name.clone());
            self.used.entry(stem).or_default().insert(slot.name.clone());
        }
        Staged {
            path,
            source: source.to_owned(),
            slot,
        }
    }

    /// The generation loaded from the copy at `path` is unloaded (or was
    /// never loaded): the copy (or link) goes, its store slot is free.
    pub fn release(&mut self, path: &Path) {
        if path.starts_with(self.dir.path()) {
            let _ = std::fs::remove_file(path);
        }
        self.reserved.remove(path);
    }
}

impl Drop for Staging {
    /// Cleans the store as the host ends (see [`crate::copies::sweep`]);
    /// `state/<pid>/` goes with its [`PrivateDir`].
    fn drop(&mut self) {
        if let Some(store) = &self.store {
            crate::copies::sweep(store);
        }
    }
}

/// `dir` (created if missing) is a directory of this user that nobody else
/// can enter.
fn private_dir(dir: &Path) -> bool {
    if crate::paths::create_private_dir(dir).is_err() {
        return false;
    }
    let Ok(m) = std::fs::symlink_metadata(dir) else {
        return false;
    };
    // SAFETY: a plain query.
    let me = unsafe { libc::geteuid() };
    m.file_type().is_dir() && m.uid() == me && m.mode() & 0o077 == 0
}

/// Where one generation will be loaded from.
#[derive(Debug, Clone)]
pub struct Staged {
    /// The private path to dlopen.
    pub path: PathBuf,
    /// The file it is copied from.
    pub source: PathBuf,
    /// The store slot reserved for it, if any.
    slot: Option<Slot>,
}

/// Why a private copy could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// Reading the source or writing the copy failed.
    #[error("cannot make a private copy of it: {0}")]
    Io(#[from] io::Error),
    /// The source changed on every attempt (a build still writing it).
    #[error(
        "it changed while it was being copied ({COPY_ATTEMPTS} attempts): a build may still be writing it; it is loaded once it settles"
    )]
    Unsettled,
}

impl Staged {
    /// Makes the private copy — a link to the store's copy of this version
    /// of the source, or a plain copy — checked against the source. Returns
    /// the source's identity as copied (a reload of an unchanged source can
    /// then be skipped).
    pub fn materialize(&self) -> Result<FileId, CopyError> {
        if let Some(slot) = &self.slot {
            match slot.link(&self.source, &self.path) {
                Ok(true) => return Ok(slot.key.file_id()),
                // Changed since it was reserved, or no store here: copy.
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!("{}: no stored copy ({e}); copying", self.source.display())
                }
            }
        }
        for attempt in 1..=COPY_ATTEMPTS {
            if attempt > 1 {
                std::thread::sleep(COPY_RETRY_PAUSE);
            }
            if let Some(id) = self.copy_once()? {
                return Ok(id);
            }
        }
        let _ = std::fs::remove_file(&self.path);
        Err(CopyError::Unsettled)
    }

    /// One plain copy: `None` when the source changed during the copy.
    fn copy_once(&self) -> io::Result<Option<FileId>> {
        let before = FileId::of(&self.source)?;
        let _ = std::fs::remove_file(&self.path);
        // A real copy (copy_file_range), never a hard link to the source:
        // that would share the inode that `cp` rewrites in place.
        let copied = std::fs::copy(&self.source, &self.path)?;
        let after = FileId::of(&self.source)?;
        let copy = FileId::of(&self.path)?;
        let settled = before == after && copied == before.size && copy.size == before.size;
        Ok(settled.then_some(before))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_generation_gets_a_real_copy_with_an_inode_of_its_own() {
        let base = PrivateDir::new("dsh-staging-test-").unwrap();
        let source = base.path().join("libx.so");
        std::fs::write(&source, b"first build").unwrap();
        let mut staging = Staging::new(&base.path().join("state")).unwrap();

        let one = staging.prepare(&source);
        let two = staging.prepare(&source);
        assert_ne!(one.path, two.path);
        let id = one.materialize().unwrap();
        two.materialize().unwrap();
        assert_eq!(id, FileId::of(&source).unwrap());
        let (a, b) = (
            FileId::of(&one.path).unwrap(),
            FileId::of(&two.path).unwrap(),
        );
        assert_ne!(
            a.ino, id.ino,
            "the first generation shares the source's inode"
        );
        assert_ne!(a.ino, b.ino);

        // Rewriting the source in place (what `cp` does) leaves the copy.
        std::fs::write(&source, b"second build, longer").unwrap();
        assert_eq!(std::fs::read(&one.path).unwrap(), b"first build");

        staging.release(&one.path);
        assert!(!one.path.exists());
        // Only its own copies are removed.
        staging.release(&source);
        assert!(source.exists());
    }

    #[test]
    fn a_host_started_again_links_the_stored_copy_instead_of_copying() {
        let base = PrivateDir::new("dsh-staging-test-").unwrap();
        let source = base.path().join("libx.so");
        std::fs::write(&source, b"a build").unwrap();
        let state = base.path().join("state");
        let first = {
            let mut staging = Staging::new(&state).unwrap();
            let plan = staging.prepare(&source);
            plan.materialize().unwrap();
            FileId::of(&plan.path).unwrap().ino
        };
        let mut staging = Staging::new(&state).unwrap();
        let plan = staging.prepare(&source);
        plan.materialize().unwrap();
        assert_eq!(FileId::of(&plan.path).unwrap().ino, first);
        assert_ne!(first, FileId::of(&source).unwrap().ino);
        // A second generation of the same version in this process needs
        // an inode of its own (glibc loads one object per inode).
        let again = staging.prepare(&source);
        again.materialize().unwrap();
        assert_ne!(FileId::of(&again.path).unwrap().ino, first);
    }

    #[test]
    fn a_missing_source_is_an_error_that_names_the_cause() {
        let base = PrivateDir::new("dsh-staging-test-").unwrap();
        let mut staging = Staging::new(&base.path().join("state")).unwrap();
        let plan = staging.prepare(&base.path().join("missing.so"));
        let e = plan.materialize().unwrap_err();
        assert!(e.to_string().contains("No such file"), "{e}");
    }
}
