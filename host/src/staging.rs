//! Fresh load paths. glibc's `dlopen` returns the already-loaded object for a
//! path (or inode) it knows, so every generation after the first of a file
//! loads from a private path under `$DSH_HOME/state/<pid>/`: a hard link when
//! the inode is new, a copy when that inode is already loaded.
//!
//! `state/` and `state/<pid>/` are 0700. `state/<pid>/` is removed when the
//! [`Staging`] is dropped (the supervisor's end: a clean exit, SIGINT or
//! SIGTERM); directories of processes that are gone are removed when the
//! next host starts ([`dsh_tempdir::sweep`], which also tells a reused
//! pid from its first owner).

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use dsh_tempdir::PrivateDir;

use crate::loader::FileId;

/// Tracks which paths and inodes are loaded, and stages fresh copies.
pub struct Staging {
    dir: PrivateDir,
    seq: u64,
    paths: HashMap<PathBuf, usize>,
    inodes: HashMap<(u64, u64), usize>,
    ids: HashMap<PathBuf, (u64, u64)>,
}

impl Staging {
    /// Uses `<state>/<pid>/`, removing the directories of dead processes.
    /// A second host in this process gets `<state>/<pid>-<tag>/`.
    pub fn new(state: &Path) -> io::Result<Staging> {
        crate::paths::create_private_dir(state)?;
        let dir = match PrivateDir::for_process_in(state, "") {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => PrivateDir::new_in(state, "")?,
            other => other?,
        };
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
                path: self.dir.path().join(format!("{stem}-{}.so", self.seq)),
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
