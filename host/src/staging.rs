//! Fresh load paths. glibc's `dlopen` returns the already-loaded object for a
//! path (or inode) it knows, so every generation after the first of a file
//! loads from a private path under `$DSH_HOME/state/<pid>/`: a hard link when
//! the inode is new, a copy when that inode is already loaded.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::loader::FileId;

/// Tracks which paths and inodes are loaded, and stages fresh copies.
pub struct Staging {
    dir: PathBuf,
    seq: u64,
    paths: HashMap<PathBuf, usize>,
    inodes: HashMap<(u64, u64), usize>,
    ids: HashMap<PathBuf, (u64, u64)>,
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks existence.
    pid > 0 && unsafe { libc::kill(pid, 0) } == 0
}

impl Staging {
    /// Uses `<state>/<pid>/`, removing copies left by dead processes.
    pub fn new(state: &Path) -> io::Result<Staging> {
        std::fs::create_dir_all(state)?;
        if let Ok(entries) = std::fs::read_dir(state) {
            for e in entries.flatten() {
                let stale = e
                    .file_name()
                    .to_str()
                    .and_then(|n| n.parse::<i32>().ok())
                    .is_some_and(|pid| !pid_alive(pid));
                if stale {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = state.join(std::process::id().to_string());
        std::fs::create_dir_all(&dir)?;
        Ok(Staging {
            dir,
            seq: 0,
            paths: HashMap::new(),
            inodes: HashMap::new(),
            ids: HashMap::new(),
        })
    }

    /// Reserves the path to dlopen for `source`. The returned plan says
    /// whether a private copy must be made ([`Staged::materialize`], cheap
    /// to run on a blocking thread).
    pub fn prepare(&mut self, source: &Path) -> io::Result<Staged> {
        let id = FileId::of(source)?;
        let key = (id.dev, id.ino);
        let path_loaded = self.paths.contains_key(source);
        let inode_loaded = self.inodes.contains_key(&key);
        let staged = if !path_loaded && !inode_loaded {
            Staged {
                path: source.to_owned(),
                copy_from: None,
                must_copy: false,
            }
        } else {
            self.seq += 1;
            let stem = source
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "plugin".into());
            Staged {
                path: self.dir.join(format!("{stem}-{}.so", self.seq)),
                copy_from: Some(source.to_owned()),
                must_copy: inode_loaded,
            }
        };
        *self.paths.entry(staged.path.clone()).or_default() += 1;
        // A copy gets an inode of its own; a hard link or the original keeps
        // the source's.
        if !staged.must_copy {
            *self.inodes.entry(key).or_default() += 1;
            self.ids.insert(staged.path.clone(), key);
        }
        Ok(staged)
    }

    /// The generation loaded from `path` is gone.
    pub fn release(&mut self, path: &Path, is_copy: bool) {
        if let Some(n) = self.paths.get_mut(path) {
            *n -= 1;
            if *n == 0 {
                self.paths.remove(path);
            }
        }
        if let Some(key) = self.ids.remove(path) {
            if let Some(n) = self.inodes.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    self.inodes.remove(&key);
                }
            }
        }
        if is_copy {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Records the inode a copy got once it exists.
    pub fn record_copy(&mut self, path: &Path) {
        if let Ok(id) = FileId::of(path) {
            *self.inodes.entry((id.dev, id.ino)).or_default() += 1;
            self.ids.insert(path.to_owned(), (id.dev, id.ino));
        }
    }

    /// The generation loaded from `path` stays mapped forever: keep its
    /// path and inode reserved so nothing is loaded over them.
    pub fn quarantine(&mut self, _path: &Path) {}
}

/// Where one generation will be loaded from.
#[derive(Debug, Clone)]
pub struct Staged {
    /// The path to dlopen.
    pub path: PathBuf,
    /// The source to link or copy to `path`, when `path` is a private copy.
    pub copy_from: Option<PathBuf>,
    /// The source's inode is loaded: copy (a link would share the inode).
    pub must_copy: bool,
}

impl Staged {
    /// Whether `path` is a private copy.
    pub fn is_copy(&self) -> bool {
        self.copy_from.is_some()
    }

    /// Creates the private copy, if any.
    pub fn materialize(&self) -> io::Result<()> {
        let Some(source) = &self.copy_from else {
            return Ok(());
        };
        let _ = std::fs::remove_file(&self.path);
        if self.must_copy || std::fs::hard_link(source, &self.path).is_err() {
            std::fs::copy(source, &self.path)?;
        }
        Ok(())
    }
}
