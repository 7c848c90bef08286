//! The windows learned, kept across restarts: one small JSON file per
//! route and model under `$DSH_HOME/cache/models/`, named by a hash of the
//! route's `baseUrl` and the model (both written inside, and checked when
//! read), private to the user (directory 0700, file 0600) and replaced
//! atomically (written beside, then renamed).
//!
//! The files are a cache: one that is missing, unreadable or not of this
//! shape is ignored (the server is asked again), and a write that fails
//! only costs the next start a lookup.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ServerWindow;

/// The directory under `$DSH_HOME`.
pub const DIR: &str = "cache/models";

/// The most bytes of a cache file read (one is about 200 bytes).
const MAX_FILE_BYTES: u64 = 16 * 1024;

/// One cache file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Entry {
    /// The route's `baseUrl`.
    base_url: String,
    /// The model.
    model: String,
    /// The window the server stated; `null` when it stated none (the
    /// adapter's default applies, and the server is not asked again
    /// before the entry is stale).
    window: Option<u64>,
    /// The endpoint that stated it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    endpoint: Option<String>,
    /// When it was learned, in ms since the Unix epoch.
    learned_at_ms: u64,
}

/// What the cache holds for one route and model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    /// The window, or none (the server stated none).
    pub window: Option<ServerWindow>,
    /// When it was learned, in ms since the Unix epoch.
    pub learned_at_ms: u64,
}

/// FNV-1a, 64 bits: a stable name for a route and model (not a secret;
/// the file holds both in full and is checked when read).
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The file of `model` on the route at `base_url`, in `dir`.
pub fn file_of(dir: &Path, base_url: &str, model: &str) -> PathBuf {
    let key = base_url
        .bytes()
        .chain(std::iter::once(b'\n'))
        .chain(model.bytes());
    dir.join(format!("{:016x}.json", fnv1a(key)))
}

/// What `dir` holds for `model` at `base_url`, if anything readable.
pub fn read(dir: &Path, base_url: &str, model: &str) -> Option<Cached> {
    let file = dsh_sdk::file::open_regular(&file_of(dir, base_url, model)).ok()?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES).read_to_string(&mut text).ok()?;
    let entry: Entry = serde_json::from_str(&text).ok()?;
    if entry.base_url != base_url || entry.model != model || entry.window == Some(0) {
        return None;
    }
    Some(Cached {
        window: entry.window.map(|tokens| ServerWindow {
            tokens,
            endpoint: entry.endpoint.unwrap_or_default(),
        }),
        learned_at_ms: entry.learned_at_ms,
    })
}

/// Writes what was learned of `model` at `base_url` into `dir` (made,
/// 0700, when missing): a file 0600, written beside and renamed over the
/// old one.
pub fn write(
    dir: &Path,
    base_url: &str,
    model: &str,
    window: Option<&ServerWindow>,
    learned_at_ms: u64,
) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let entry = Entry {
        base_url: base_url.to_owned(),
        model: model.to_owned(),
        window: window.map(|w| w.tokens),
        endpoint: window.map(|w| w.endpoint.clone()),
        learned_at_ms,
    };
    let text = serde_json::to_string_pretty(&entry).map_err(std::io::Error::other)?;
    let path = file_of(dir, base_url, model);
    let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.write_all(b"\n")?;
        std::fs::rename(&tmp, &path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(label: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("dsh-llm-http-store-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_written_window_reads_back_private_and_checked() {
        let dir = scratch("round-trip").join("cache/models");
        let w = ServerWindow {
            tokens: 4096,
            endpoint: "/props".into(),
        };
        write(&dir, "http://h/v1", "m", Some(&w), 7).unwrap();
        assert_eq!(
            read(&dir, "http://h/v1", "m"),
            Some(Cached {
                window: Some(w),
                learned_at_ms: 7
            })
        );
        let file = file_of(&dir, "http://h/v1", "m");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&dir), mode(&file)), (0o700, 0o600));
        // Another route or model is another file; a file naming another
        // route (a hash collision, an edit) is not believed.
        assert_eq!(read(&dir, "http://h/v1", "other"), None);
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(&file, text.replace("http://h/v1", "http://x/v1")).unwrap();
        assert_eq!(read(&dir, "http://h/v1", "m"), None);
        // Garbage is ignored; "none stated" is kept.
        std::fs::write(&file, "{not json").unwrap();
        assert_eq!(read(&dir, "http://h/v1", "m"), None);
        write(&dir, "http://h/v1", "m", None, 9).unwrap();
        assert_eq!(
            read(&dir, "http://h/v1", "m"),
            Some(Cached {
                window: None,
                learned_at_ms: 9
            })
        );
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        let _ = std::fs::remove_dir_all(scratch("round-trip"));
    }
}
