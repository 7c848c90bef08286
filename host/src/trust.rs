//! Which projects the user trusted, and exactly what of theirs they
//! approved: `$DSH_HOME/trust.toml`, one record for everything a
//! project's own files would run outside the sandbox.
//!
//! Trusting a directory is not enough on its own: an agent working in a
//! trusted project may write its `.mcp.json` (create it when missing, add
//! a server), and a server is a command the host runs unconfined. So the
//! record pins each approved server by a digest of its entry as the user
//! saw it; a server that is new or whose entry changed stays off until
//! the user approves it again (`dsh-host trust [DIR]` or the chat's
//! question). Read at every composition, so trusting a project under
//! `--watch` starts its servers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The file's name in `$DSH_HOME`.
pub const TRUST_FILE: &str = "trust.toml";

/// The largest trust file read (a few hundred projects is a few KiB).
const TRUST_MAX: u64 = 1 << 20;

/// Approved servers of one project: name → [`pin`] of its entry.
pub type Pins = BTreeMap<String, String>;

/// `trust.toml`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustFile {
    /// Trusted projects.
    #[serde(default, rename = "project")]
    pub projects: Vec<TrustedProject>,
    /// The first record's list of directories, which pinned nothing: read
    /// so such a file still parses, never written; its projects' servers
    /// must be approved again.
    #[serde(default, skip_serializing)]
    pub trusted: Vec<PathBuf>,
}

/// One trusted project.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustedProject {
    /// Its directory, canonical.
    pub dir: PathBuf,
    /// Its `.mcp.json` servers approved.
    #[serde(default)]
    pub mcp: Pins,
}

/// Why the trust record cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// Reading, parsing or writing failed.
    #[error("{path}: {message}")]
    File {
        /// The trust file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

fn file_error(path: &Path, message: impl ToString) -> TrustError {
    TrustError::File {
        path: path.to_owned(),
        message: message.to_string(),
    }
}

/// The pin of an entry: sha256 of its bytes, in hex.
pub fn pin(entry: &[u8]) -> String {
    Sha256::digest(entry)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The trust file of `home`.
pub fn trust_path(home: &Path) -> PathBuf {
    home.join(TRUST_FILE)
}

/// Reads the record; a missing file trusts nothing. A file that cannot be
/// read or parsed is an error (never "trust everything", never silently
/// "trust nothing" either: the user should know their record is broken).
pub fn read(home: &Path) -> Result<TrustFile, TrustError> {
    let path = trust_path(home);
    let text = match crate::config::read_optional_regular(&path, TRUST_MAX) {
        Ok(Some(text)) => text,
        Ok(None) => return Ok(TrustFile::default()),
        Err(e) => return Err(file_error(&path, e)),
    };
    toml::from_str(&text).map_err(|e| file_error(&path, e.to_string().trim_end()))
}

impl TrustFile {
    /// The record of `dir` (canonical), if trusted.
    pub fn project(&self, dir: &Path) -> Option<&TrustedProject> {
        self.projects.iter().find(|p| p.dir == dir)
    }
}

/// Trusts `dir` with exactly `pins` approved (replacing what it had), and
/// writes the record atomically (beside it, then renamed over it, mode
/// 0600); answers the canonical directory trusted.
pub fn trust(home: &Path, dir: &Path, pins: Pins) -> Result<PathBuf, TrustError> {
    let dir = dir
        .canonicalize()
        .map_err(|e| file_error(dir, format!("cannot trust it: {e}")))?;
    if !dir.is_dir() {
        return Err(file_error(&dir, "not a directory"));
    }
    let mut record = read(home)?;
    record.projects.retain(|p| p.dir != dir);
    record.projects.push(TrustedProject {
        dir: dir.clone(),
        mcp: pins,
    });
    let path = trust_path(home);
    let text = toml::to_string(&record).map_err(|e| file_error(&path, e))?;
    let text = format!(
        "# Projects whose own configuration dsh runs, and the servers approved in each\n\
         # (name = digest of its .mcp.json entry; a new or changed entry asks again).\n\
         # Written by `dsh-host trust [DIR]`; remove a project to distrust it.\n{text}"
    );
    crate::config::write_private_atomically(&path, text.as_bytes())
        .map_err(|e| file_error(&path, e))?;
    Ok(dir)
}

/// What `dsh-host trust [DIR]` would record: the project of `dir` (the
/// directory of the `.mcp.json` nearest it, else `dir`), its servers
/// pinned as they are now, and a line per server saying what it runs (or
/// why it was skipped), to show before the user confirms.
pub fn proposal(dir: &Path) -> (PathBuf, Pins, Vec<String>) {
    crate::imports::project_to_trust(dir)
}

/// [`proposal`] recorded at once (tests, and `dsh-host trust --yes`).
pub fn trust_now(home: &Path, dir: &Path) -> Result<(PathBuf, Vec<String>), TrustError> {
    let (project, pins, lines) = proposal(dir);
    Ok((trust(home, &project, pins)?, lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trusting_pins_servers_and_replaces_the_previous_pins() {
        let home = dsh_tempdir::PrivateDir::new("trust-home").unwrap();
        let project = dsh_tempdir::PrivateDir::new("trust-project").unwrap();
        let dir = project.path().canonicalize().unwrap();
        assert!(read(home.path()).unwrap().project(&dir).is_none());
        let first = Pins::from([("a".into(), pin(b"a")), ("b".into(), pin(b"b"))]);
        assert_eq!(trust(home.path(), project.path(), first).unwrap(), dir);
        let second = Pins::from([("a".into(), pin(b"a2"))]);
        trust(home.path(), project.path(), second.clone()).unwrap();
        let record = read(home.path()).unwrap();
        assert_eq!(record.projects.len(), 1);
        assert_eq!(record.project(&dir).unwrap().mcp, second);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(trust_path(home.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_broken_record_is_an_error_not_a_guess() {
        let home = dsh_tempdir::PrivateDir::new("trust-broken").unwrap();
        std::fs::write(trust_path(home.path()), "trusted = 7").unwrap();
        assert!(read(home.path()).is_err());
    }

    #[test]
    fn the_first_records_directories_parse_but_approve_nothing() {
        let home = dsh_tempdir::PrivateDir::new("trust-legacy").unwrap();
        std::fs::write(trust_path(home.path()), "trusted = [\"/p\"]\n").unwrap();
        let record = read(home.path()).unwrap();
        assert!(record.project(Path::new("/p")).is_none());
    }
}
