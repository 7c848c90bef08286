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

    /// The path to dlopen for `source`, and whether it is a private copy.
    pub fn prepare(&mut self, source: &Path) -> io::Result<(PathBuf, bool)> {
        let id = FileId::of(source)?;
        let key = (id.dev, id.ino);
        let path_loaded = self.paths.contains_key(source);
        let inode_loaded = self.inodes.contains_key(&key);
        let (path, copy) = if !path_loaded && !inode_loaded {
            (source.to_owned(), false)
        } else {
            self.seq += 1;
            let stem = source
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "plugin".into());
            let dest = self.dir.join(format!("{stem}-{}.so", self.seq));
            let _ = std::fs::remove_file(&dest);
            if inode_loaded || std::fs::hard_link(source, &dest).is_err() {
                std::fs::copy(source, &dest)?;
            }
            (dest, true)
        };
        let staged = FileId::of(&path)?;
        *self.paths.entry(path.clone()).or_default() += 1;
        *self.inodes.entry((staged.dev, staged.ino)).or_default() += 1;
        self.ids.insert(path.clone(), (staged.dev, staged.ino));
        Ok((path, copy))
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

    /// The generation loaded from `path` stays mapped forever: keep its
    /// path and inode reserved so nothing is loaded over them.
    pub fn quarantine(&mut self, _path: &Path) {}
}
