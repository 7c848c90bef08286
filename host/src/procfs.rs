//! Reading `/proc/self`: mappings of a library, resident memory, open fds.

use std::path::Path;

/// One mapping of a file, from `/proc/self/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Start address.
    pub start: usize,
    /// End address (exclusive).
    pub end: usize,
    /// Permissions, e.g. `r-xp`.
    pub perms: String,
}

impl Mapping {
    /// True for an executable mapping (the library's code).
    pub fn is_exec(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }
}

/// Every mapping of the file with inode `ino` at `path` (also matching the
/// ` (deleted)` form the kernel shows after the file was replaced).
pub fn mappings_of(path: &Path, ino: u64) -> Vec<Mapping> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let wanted = path.to_string_lossy();
    maps.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(6, ' ');
            let range = parts.next()?;
            let perms = parts.next()?;
            let _offset = parts.next()?;
            let _dev = parts.next()?;
            let inode: u64 = parts.next()?.parse().ok()?;
            let name = parts.next()?.trim_start();
            let name = name.strip_suffix(" (deleted)").unwrap_or(name);
            if inode != ino || name != wanted {
                return None;
            }
            let (s, e) = range.split_once('-')?;
            Some(Mapping {
                start: usize::from_str_radix(s, 16).ok()?,
                end: usize::from_str_radix(e, 16).ok()?,
                perms: perms.to_owned(),
            })
        })
        .collect()
}

/// Resident set size of this process in bytes.
pub fn rss_bytes() -> u64 {
    status_kib("VmRSS:") * 1024
}

/// Peak resident set size of this process in bytes.
pub fn peak_rss_bytes() -> u64 {
    status_kib("VmHWM:") * 1024
}

fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// Number of open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Number of threads of this process.
pub fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}
