//! A store of private copies that outlives one host process:
//! `$DSH_HOME/cache/libraries/`, so a host that starts again does not copy
//! every library again (a start used to load the libraries in place; a
//! copy each costs about a millisecond per megabyte).
//!
//! An entry is this user's own read-only copy of one version of a source
//! file: named after the source's identity — device, inode, size, mtime and
//! ctime (which no user can set: any change of the file moves it) — and a
//! slot number. A generation gets a hard link to an entry in its
//! `state/<pid>/` directory. The link is to the *copy*, never to the
//! source: `cp` over the source rewrites the source's inode, not this one.
//! glibc's `dlopen` takes one inode for one object, so two generations of
//! one process never share an entry: the staging reserves a slot per
//! generation (slot 0 for the first row of a library, 1 for the second...).
//!
//! An entry is made by copying to a temporary name, checking the copy
//! against the source (whose identity must not move meanwhile), making it
//! read-only, linking it into `state/<pid>/`, then renaming it into place:
//! no reader ever sees a half-made entry, and two hosts making the same
//! entry at once each keep their own. An entry is used only if it is a
//! regular file of this user, read-only, of the source's size; anything
//! else is ignored and a fresh copy made. The preflight then reads what is
//! loaded, as for any copy.
//!
//! Entries not linked anywhere (link count 1) are removed when superseded:
//! right after a newer version of the same library is stored by this
//! process (a reload), and when a host ends ([`sweep`]: for each file
//! name and slot, only the entry linked last stays — linking updates the
//! ctime this is read from); and after [`UNUSED_FOR`] without use.
//! Temporary files go after an hour. The store holds about one copy of
//! each library a host runs (a debug build's are large: ~200 MB for the
//! `headless` profile).

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::loader::FileId;

/// How long an entry nobody links stays.
pub const UNUSED_FOR: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long a temporary file (from a process that died making an entry)
/// stays.
const TEMP_FOR: Duration = Duration::from_secs(3600);

/// The identity of one version of a source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl SourceKey {
    /// The identity of `path` now.
    pub fn of(path: &Path) -> io::Result<SourceKey> {
        let m = std::fs::metadata(path)?;
        Ok(SourceKey {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        })
    }

    /// The size of that version.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The loader's identity of that version.
    pub fn file_id(&self) -> FileId {
        FileId {
            dev: self.dev,
            ino: self.ino,
            size: self.size,
            mtime_ns: self.mtime_ns,
        }
    }

    /// The entry name for `stem` in `slot`.
    pub fn entry_name(&self, stem: &str, slot: usize) -> String {
        format!(
            "{stem}~{:x}-{:x}-{:x}-{:x}-{:x}~{slot}.so",
            self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns
        )
    }
}

/// The stem an entry name was made for (the source's file stem).
fn stem_of(entry: &str) -> Option<&str> {
    entry.split_once('~').map(|(stem, _)| stem)
}

/// One reserved entry: where it is, and which version of which file.
#[derive(Debug, Clone)]
pub struct Slot {
    /// `$DSH_HOME/cache/libraries`.
    pub dir: PathBuf,
    /// The entry's file name.
    pub name: String,
    /// The version the entry holds.
    pub key: SourceKey,
    /// Entries of earlier versions of the same file name that this process
    /// stored and no generation of it uses: removed once this one is
    /// stored, unless linked elsewhere.
    pub superseded: Vec<String>,
}

impl Slot {
    /// Links this slot's entry to `dest`, making the entry from `source`
    /// first when there is no usable one. `Ok(false)` when the source is no
    /// longer the version reserved, or changed while it was copied: the
    /// caller copies without the store.
    pub fn link(&self, source: &Path, dest: &Path) -> io::Result<bool> {
        if SourceKey::of(source)? != self.key {
            return Ok(false);
        }
        let entry = self.dir.join(&self.name);
        if self.usable(&entry) && std::fs::hard_link(&entry, dest).is_ok() {
            // Its mtime says when it was linked last (the sweep keeps the
            // newest); a failure only makes it look older.
            if let Ok(f) = std::fs::File::open(&entry) {
                let _ = f.set_modified(SystemTime::now());
            }
            return Ok(true);
        }
        self.fill(source, dest)
    }

    /// A regular file of this user, read-only, of the version's size.
    fn usable(&self, entry: &Path) -> bool {
        let Ok(m) = std::fs::symlink_metadata(entry) else {
            return false;
        };
        // SAFETY: a plain query.
        let me = unsafe { libc::geteuid() };
        m.file_type().is_file()
            && m.uid() == me
            && m.mode() & 0o222 == 0
            && m.size() == self.key.size()
    }

    /// Copies `source` into a new entry, links it to `dest`, publishes it.
    fn fill(&self, source: &Path, dest: &Path) -> io::Result<bool> {
        let tmp = self
            .dir
            .join(format!(".{}.{}.tmp", self.name, std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let copied = std::fs::copy(source, &tmp);
        let settled = copied.as_ref().is_ok_and(|n| *n == self.key.size())
            && SourceKey::of(source).ok() == Some(self.key)
            && std::fs::metadata(&tmp).is_ok_and(|m| m.size() == self.key.size());
        if !settled {
            let _ = std::fs::remove_file(&tmp);
            return copied.map(|_| false);
        }
        let published = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o400))
            .and_then(|()| std::fs::hard_link(&tmp, dest))
            .and_then(|()| std::fs::rename(&tmp, self.dir.join(&self.name)));
        if let Err(e) = published {
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_file(dest);
            return Err(e);
        }
        for old in &self.superseded {
            remove_unlinked(&self.dir.join(old));
        }
        Ok(true)
    }
}

/// Removes `entry` unless another name links it (a generation of some
/// host); a link made meanwhile keeps its inode alive anyway.
fn remove_unlinked(entry: &Path) {
    if std::fs::symlink_metadata(entry).is_ok_and(|m| m.file_type().is_file() && m.nlink() == 1) {
        let _ = std::fs::remove_file(entry);
    }
}

/// The age of a timestamp (seconds since the epoch) now.
fn age(now: SystemTime, secs: i64) -> Duration {
    // A time before the epoch counts as very old.
    let then = u64::try_from(secs).map_or(SystemTime::UNIX_EPOCH, |s| {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    });
    now.duration_since(then).unwrap_or_default()
}

/// Cleans the store: for each file name and slot only the entry linked
/// last stays, entries unused for [`UNUSED_FOR`] go, temporary files older
/// than an hour go; an entry some host links is always kept.
pub fn sweep(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    // (stem, slot) -> the newest (mtime, name) seen. The mtime is when an
    // entry was made or linked last; not the ctime, which every unlink of
    // a generation's link moves too (and two within one clock tick tie).
    let mut newest: std::collections::HashMap<(String, String), (i128, String)> =
        std::collections::HashMap::new();
    let mut unlinked = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(m) = e.path().symlink_metadata() else {
            continue;
        };
        if !m.file_type().is_file() {
            continue;
        }
        if name.ends_with(".tmp") {
            if age(now, m.mtime()) > TEMP_FOR {
                let _ = std::fs::remove_file(e.path());
            }
            continue;
        }
        let (Some(stem), Some(slot)) = (stem_of(&name), name.rsplit('~').next()) else {
            continue;
        };
        let mtime = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
        let group = (stem.to_owned(), slot.to_owned());
        match newest.get(&group) {
            Some((t, _)) if *t >= mtime => {}
            _ => {
                newest.insert(group, (mtime, name.clone()));
            }
        }
        if m.nlink() == 1 {
            unlinked.push((name, age(now, m.ctime())));
        }
    }
    let kept: std::collections::HashSet<&String> = newest.values().map(|(_, n)| n).collect();
    for (name, unused) in &unlinked {
        if !kept.contains(name) || *unused > UNUSED_FOR {
            remove_unlinked(&dir.join(name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(dir: &Path, source: &Path, n: usize) -> Slot {
        let key = SourceKey::of(source).unwrap();
        Slot {
            dir: dir.to_owned(),
            name: key.entry_name("libx", n),
            key,
            superseded: Vec::new(),
        }
    }

    #[test]
    fn an_entry_is_made_once_then_linked_and_never_shares_the_sources_inode() {
        let base = dsh_tempdir::PrivateDir::new("dsh-copies-test-").unwrap();
        let cache = base.path().join("cache");
        std::fs::create_dir(&cache).unwrap();
        let source = base.path().join("libx.so");
        std::fs::write(&source, b"build one").unwrap();

        let one = base.path().join("one.so");
        assert!(slot(&cache, &source, 0).link(&source, &one).unwrap());
        let made = std::fs::metadata(&one).unwrap();
        assert_ne!(made.ino(), std::fs::metadata(&source).unwrap().ino());
        assert_eq!(made.mode() & 0o777, 0o400);
        assert_eq!(made.nlink(), 2, "linked from the store");

        // Another host process: the same entry, linked, not copied again.
        let two = base.path().join("two.so");
        assert!(slot(&cache, &source, 0).link(&source, &two).unwrap());
        assert_eq!(std::fs::metadata(&two).unwrap().ino(), made.ino());

        // `cp` over the source: the entry keeps the old bytes; the new
        // version gets an entry of its own and supersedes the unused one.
        let old = slot(&cache, &source, 0);
        std::fs::write(&source, b"build two!").unwrap();
        assert!(!old.link(&source, &base.path().join("x.so")).unwrap());
        assert_eq!(std::fs::read(&one).unwrap(), b"build one");
        std::fs::remove_file(&one).unwrap();
        std::fs::remove_file(&two).unwrap();
        let three = base.path().join("three.so");
        let mut new = slot(&cache, &source, 0);
        new.superseded.push(old.name.clone());
        assert!(new.link(&source, &three).unwrap());
        assert_eq!(std::fs::read(&three).unwrap(), b"build two!");
        let names: Vec<String> = std::fs::read_dir(&cache)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            vec![SourceKey::of(&source).unwrap().entry_name("libx", 0)]
        );
    }

    #[test]
    fn the_sweep_keeps_the_entry_linked_last_and_every_linked_one() {
        let base = dsh_tempdir::PrivateDir::new("dsh-copies-test-").unwrap();
        let cache = base.path().join("cache");
        std::fs::create_dir(&cache).unwrap();
        let source = base.path().join("libx.so");
        let mut names = Vec::new();
        for (i, bytes) in [&b"v1"[..], b"v22", b"v333"].iter().enumerate() {
            std::fs::write(&source, bytes).unwrap();
            let s = slot(&cache, &source, 0);
            let link = base.path().join(format!("gen{i}.so"));
            assert!(s.link(&source, &link).unwrap());
            names.push(s.name);
            std::thread::sleep(Duration::from_millis(20));
        }
        // v1 still linked by a (quarantined, say) generation; v22 unused.
        std::fs::remove_file(base.path().join("gen1.so")).unwrap();
        std::fs::remove_file(base.path().join("gen2.so")).unwrap();
        std::fs::write(cache.join(".old.tmp"), b"x").unwrap();
        sweep(&cache);
        let left: std::collections::HashSet<String> = std::fs::read_dir(&cache)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(left.contains(&names[0]), "a linked entry went: {left:?}");
        assert!(
            !left.contains(&names[1]),
            "a superseded entry stayed: {left:?}"
        );
        assert!(
            left.contains(&names[2]),
            "the entry linked last went: {left:?}"
        );
        assert!(left.contains(".old.tmp"), "a fresh temporary file went");
    }

    #[test]
    fn an_entry_someone_could_write_is_not_used() {
        let base = dsh_tempdir::PrivateDir::new("dsh-copies-test-").unwrap();
        let cache = base.path().join("cache");
        std::fs::create_dir(&cache).unwrap();
        let source = base.path().join("libx.so");
        std::fs::write(&source, b"the real build").unwrap();
        let s = slot(&cache, &source, 0);
        // Planted: same name and size, writable, other bytes.
        let planted = cache.join(&s.name);
        std::fs::write(&planted, b"planted bytes!").unwrap();
        let dest = base.path().join("gen.so");
        assert!(s.link(&source, &dest).unwrap());
        assert_eq!(std::fs::read(&dest).unwrap(), b"the real build");
    }
}
