//! Logs the unit tests of the format's rooms build: a header line, event
//! lines, zstd frames and zstd files.

use dsh_sdk::vocab::event;

use crate::frames::Framer;

/// A v0 header line of session `s`.
pub const HEAD: &str =
    "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0}\n";

/// The line of a turn-1 event of `kind` at `seq` (a `turn/end` completes
/// the turn).
pub fn line(kind: &str, seq: u64) -> String {
    let data = if kind == event::TURN_END {
        "{\"turn\":1,\"reason\":{\"kind\":\"completed\"}}"
    } else {
        "{\"turn\":1}"
    };
    format!("{{\"type\":\"{kind}\",\"seq\":{seq},\"time\":1,\"data\":{data}}}\n")
}

/// `text` as one checksummed zstd frame.
pub fn frame(text: &str) -> Vec<u8> {
    Framer::new().unwrap().frame(text.as_bytes()).unwrap()
}

/// A zstd log in a fresh temp file, from raw frame bytes.
pub fn zstd_file(name: &str, raw: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("dsh-zstd-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("session.jsonl.zstd");
    std::fs::write(&path, raw).unwrap();
    path
}
