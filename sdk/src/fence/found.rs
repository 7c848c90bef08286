//! What the read fence finds on the disk at discovery besides the stores'
//! own paths ([`Found`]): the homes of the other users (as root), the
//! users' runtime directories, where the links inside a store lead (a GNU
//! stow layout: `~/.ssh/id_rsa -> ../dotfiles/ssh/.ssh/id_rsa`), and the
//! identity (device, inode) of every file in a store, so that a store's
//! file is refused under any other name: the target of a link, a hard
//! link, a bind mount.
//!
//! The survey is bounded: at most [`WALK_DEPTH`] levels and
//! [`WALK_ENTRIES`] entries per store, [`MAX_FOUND`] places and identities
//! in all, [`MAX_USERS`] users. It runs once, when a plugin applies.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use super::resolve;
use crate::file::{identity_of, open_readable, Follow, Identity};

/// How deep a store's walk goes (`~/.ssh` is level 0, its files level 1).
pub const WALK_DEPTH: usize = 3;
/// The most entries one store's walk looks at.
pub const WALK_ENTRIES: usize = 512;
/// The most link targets, and the most identities, kept in all.
pub const MAX_FOUND: usize = 16_384;
/// The most users (password database entries, `/run/user` directories)
/// looked at.
pub const MAX_USERS: usize = 256;
/// The most bytes of `/etc/passwd` read.
const PASSWD_MAX: u64 = 1 << 20;

/// What discovery found besides the stores' own paths. Not sent with a
/// fence: every plugin that fences reads finds it itself when it applies,
/// and a fence shares it (an `Arc`), never copies it per call.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// The home directories of the other users of the password database,
    /// looked at when the harness runs as root (it can read them all), as
    /// spelled and as resolved: their stores are refused too.
    pub homes: Vec<PathBuf>,
    /// The users' runtime directories (`$XDG_RUNTIME_DIR`, and as root every
    /// `/run/user/<uid>`), as spelled and as resolved.
    pub runtime: Vec<PathBuf>,
    /// Where the symbolic links inside a store lead, resolved: refused like
    /// the store.
    pub targets: HashSet<PathBuf>,
    /// The identity of every file found in a store, and the file's path in
    /// the store.
    pub files: HashMap<Identity, PathBuf>,
}

impl Found {
    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.homes.is_empty()
            && self.runtime.is_empty()
            && self.targets.is_empty()
            && self.files.is_empty()
    }

    /// `self` with `other`'s places added.
    pub fn merged(&self, other: &Found) -> Found {
        let mut out = Found {
            homes: self.homes.clone(),
            runtime: self.runtime.clone(),
            targets: self.targets.clone(),
            files: self.files.clone(),
        };
        for (mine, theirs) in [
            (&mut out.homes, &other.homes),
            (&mut out.runtime, &other.runtime),
        ] {
            for p in theirs {
                if !mine.contains(p) {
                    mine.push(p.clone());
                }
            }
        }
        out.targets.extend(other.targets.iter().cloned());
        for (id, path) in &other.files {
            out.files.entry(*id).or_insert_with(|| path.clone());
        }
        out
    }

    /// Looks at the store `store`: its identity when it is a file; when it
    /// is a directory, walks it (bounded) for the identities of its files
    /// and the places its links lead to. `covered` tells whether a place is
    /// a store already (then it is not added as a link target). A link to a
    /// place that holds a home, or to `/` or a directory right under it
    /// (`/tmp`), is left alone: refusing all of it would refuse every read.
    pub fn survey(&mut self, store: &Path, covered: &dyn Fn(&Path) -> bool) {
        let Ok(meta) = std::fs::metadata(store) else {
            return;
        };
        if meta.is_file() {
            self.add_file(&meta, store);
        } else if meta.is_dir() {
            let mut budget = WALK_ENTRIES;
            self.walk(store, 0, &mut budget, covered);
        }
    }

    fn walk(
        &mut self,
        dir: &Path,
        depth: usize,
        budget: &mut usize,
        covered: &dyn Fn(&Path) -> bool,
    ) {
        if depth >= WALK_DEPTH {
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if *budget == 0 {
                return;
            }
            *budget -= 1;
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_symlink() {
                let target = resolve(Path::new("/"), &path);
                if self.too_broad(&target) {
                    continue;
                }
                if !covered(&target) && self.targets.len() < MAX_FOUND {
                    self.targets.insert(target.clone());
                }
                match std::fs::metadata(&target) {
                    Ok(m) if m.is_file() => self.add_file(&m, &path),
                    Ok(m) if m.is_dir() => self.walk(&target, depth + 1, budget, covered),
                    _ => {}
                }
            } else if kind.is_file() {
                if let Ok(m) = entry.metadata() {
                    self.add_file(&m, &path);
                }
            } else if kind.is_dir() {
                self.walk(&path, depth + 1, budget, covered);
            }
        }
    }

    /// Whether refusing `target` (where a store's link leads) would refuse
    /// far more than a store: `/`, a directory right under it, or one that
    /// holds a home.
    pub(super) fn too_broad(&self, target: &Path) -> bool {
        target.components().count() <= 2 || self.homes.iter().any(|h| h.starts_with(target))
    }

    fn add_file(&mut self, meta: &std::fs::Metadata, path: &Path) {
        if self.files.len() < MAX_FOUND {
            self.files
                .entry(identity_of(meta))
                .or_insert_with(|| path.to_owned());
        }
    }
}

/// Whether the harness runs as root (it may then read every user's files).
pub fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The home directories of the password database's users (`/etc/passwd`,
/// at most [`MAX_USERS`]) that exist, but `/` (no home at all).
pub fn passwd_homes() -> Vec<PathBuf> {
    let Ok(file) = open_readable(Path::new("/etc/passwd"), Follow::Always) else {
        return Vec::new();
    };
    let mut text = String::new();
    if file.take(PASSWD_MAX).read_to_string(&mut text).is_err() {
        return Vec::new();
    }
    let mut homes: Vec<PathBuf> = Vec::new();
    for line in text.lines().take(MAX_USERS) {
        let Some(home) = line.split(':').nth(5).map(PathBuf::from) else {
            continue;
        };
        if home.is_absolute() && home != Path::new("/") && home.is_dir() && !homes.contains(&home) {
            homes.push(home);
        }
    }
    homes
}

/// The users' runtime directories: `$XDG_RUNTIME_DIR`, and as root every
/// directory of `/run/user` (at most [`MAX_USERS`]).
pub fn runtime_dirs(as_root: bool) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
        .into_iter()
        .collect();
    if as_root {
        let entries = std::fs::read_dir("/run/user").into_iter().flatten();
        for entry in entries.flatten().take(MAX_USERS) {
            let dir = entry.path();
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_walk_finds_link_targets_and_identities() {
        let dir = crate::tempdir::PrivateDir::new("dsh-found-test-").unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (ssh, dotfiles) = (base.join("home/.ssh"), base.join("dotfiles/ssh"));
        std::fs::create_dir_all(&ssh).unwrap();
        std::fs::create_dir_all(&dotfiles).unwrap();
        std::fs::write(dotfiles.join("id_rsa"), "KEY").unwrap();
        std::fs::write(ssh.join("config"), "Host x").unwrap();
        std::os::unix::fs::symlink("../../dotfiles/ssh/id_rsa", ssh.join("id_rsa")).unwrap();
        let mut found = Found::default();
        found.survey(&ssh, &|p| p.starts_with(&ssh));
        assert!(
            found.targets.contains(&dotfiles.join("id_rsa")),
            "{found:?}"
        );
        let key = std::fs::metadata(dotfiles.join("id_rsa")).unwrap();
        assert_eq!(
            found.files.get(&identity_of(&key)),
            Some(&ssh.join("id_rsa"))
        );
        assert_eq!(found.files.len(), 2, "{found:?}");
        // A link to a place that holds a home (or to /tmp) is left alone.
        std::os::unix::fs::symlink(&base, ssh.join("up")).unwrap();
        std::os::unix::fs::symlink("/tmp", ssh.join("tmp")).unwrap();
        let mut broad = Found {
            homes: vec![base.join("home")],
            ..Found::default()
        };
        broad.survey(&ssh, &|p| p.starts_with(&ssh));
        assert!(!broad.targets.contains(&base), "{broad:?}");
        assert!(!broad.targets.contains(Path::new("/tmp")), "{broad:?}");
        assert!(broad.targets.contains(&dotfiles.join("id_rsa")));
        // A missing store finds nothing.
        let mut none = Found::default();
        none.survey(&base.join("home/.aws"), &|_| false);
        assert!(none.is_empty());
    }

    #[test]
    fn the_walk_is_bounded() {
        let dir = crate::tempdir::PrivateDir::new("dsh-found-bound-").unwrap();
        let store = dir.path().join("store");
        let mut deep = store.clone();
        for level in 0..6 {
            deep.push(format!("d{level}"));
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("too-deep"), "x").unwrap();
        for i in 0..(WALK_ENTRIES + 50) {
            std::fs::write(store.join(format!("f{i}")), "x").unwrap();
        }
        let mut found = Found::default();
        found.survey(&store, &|_| false);
        assert!(found.files.len() <= WALK_ENTRIES, "{}", found.files.len());
        let deepest = std::fs::metadata(deep.join("too-deep")).unwrap();
        assert!(!found.files.contains_key(&identity_of(&deepest)));
    }
}
