//! The input history, one JSON string per line in a file under
//! `$DSH_HOME` (multi-line inputs stay one entry), kept private and
//! bounded.

use std::io::Write;
use std::path::Path;

/// Entries kept.
const KEEP: usize = 1000;

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
    entries
}

/// Appends `entry` (blank entries are not kept); a failure is logged, the
/// chat goes on.
pub fn save(path: &Path, entry: &str) {
    if entry.trim().is_empty() {
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
    }
}
