//! The input history, one JSON string per line in a file under
//! `$DSH_HOME` (multi-line inputs stay one entry), kept private and
//! bounded.

use std::io::Write;
use std::path::Path;

/// Entries kept.
pub const KEEP: usize = 1000;

/// Longer entries (a big paste) are not kept.
const MAX_ENTRY: usize = 64 * 1024;

/// The entries of `path`, oldest first (none when it is missing;
/// unreadable lines are skipped).
pub fn load(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut entries: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let skip = entries.len().saturating_sub(KEEP);
    entries.drain(..skip);
    // Twice as long as kept: rewrite it with what is kept.
    if skip > KEEP {
        if let Err(e) = rewrite(path, &entries) {
            dsh_sdk::tracing::warn!("chat: cannot compact {}: {e}", path.display());
        }
    }
    entries
}

fn rewrite(path: &Path, entries: &[String]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    for e in entries {
        writeln!(f, "{}", serde_json::to_string(e)?)?;
    }
    f.sync_all()?;
    std::fs::rename(tmp, path)
}

/// Appends `entry` (blank entries are not kept); a failure is logged, the
/// chat goes on.
pub fn save(path: &Path, entry: &str) {
    if entry.trim().is_empty() || entry.len() > MAX_ENTRY {
        return;
    }
    if let Err(e) = append(path, entry) {
        dsh_sdk::tracing::warn!(
            "chat: cannot save the input history to {}: {e}",
            path.display()
        );
    }
}

fn append(path: &Path, entry: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let line = serde_json::to_string(entry)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    writeln!(f, "{line}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_with_their_newlines() {
        let dir = dsh_sdk::tempdir::PrivateDir::new("chat-history").unwrap();
        let path = dir.path().join("history");
        save(&path, "one");
        save(&path, "  ");
        save(&path, "two\nlines");
        assert_eq!(load(&path), ["one", "two\nlines"]);
        save(&path, &"x".repeat(MAX_ENTRY + 1));
        assert_eq!(load(&path).len(), 2);
    }

    #[test]
    fn a_long_history_is_compacted_to_what_is_kept() {
        let dir = dsh_sdk::tempdir::PrivateDir::new("chat-history").unwrap();
        let path = dir.path().join("history");
        for i in 0..(KEEP * 2 + 5) {
            save(&path, &format!("entry {i}"));
        }
        let kept = load(&path);
        assert_eq!(kept.len(), KEEP);
        assert_eq!(kept.last().unwrap(), &format!("entry {}", KEEP * 2 + 4));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap().lines().count(),
            KEEP
        );
    }
}
