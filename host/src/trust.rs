//! Which projects the user trusted: `$DSH_HOME/trust.toml`, one record for
//! everything a project's own files would run (its `.mcp.json` servers;
//! its hooks). Written by `dsh-host trust [DIR]`; read at every
//! composition, so trusting a project under `--watch` starts its servers.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file's name in `$DSH_HOME`.
pub const TRUST_FILE: &str = "trust.toml";

/// The largest trust file read (a few hundred projects is a few KiB).
const TRUST_MAX: u64 = 1 << 20;

/// `trust.toml`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustFile {
    /// Trusted project directories, canonical.
    #[serde(default)]
    pub trusted: Vec<PathBuf>,
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

/// Whether `dir` (canonical) is trusted.
pub fn is_trusted(record: &TrustFile, dir: &Path) -> bool {
    record.trusted.iter().any(|t| t == dir)
}

/// Adds `dir` to the record (atomically: written beside it, then renamed
/// over it, mode 0600); answers the canonical directory trusted.
pub fn trust(home: &Path, dir: &Path) -> Result<PathBuf, TrustError> {
    let dir = dir
        .canonicalize()
        .map_err(|e| file_error(dir, format!("cannot trust it: {e}")))?;
    if !dir.is_dir() {
        return Err(file_error(&dir, "not a directory"));
    }
    let mut record = read(home)?;
    if !is_trusted(&record, &dir) {
        record.trusted.push(dir.clone());
    }
    let path = trust_path(home);
    let text = toml::to_string(&record).map_err(|e| file_error(&path, e))?;
    let text = format!(
        "# Projects whose own configuration dsh runs (.mcp.json servers, hooks).\n\
         # Written by `dsh-host trust [DIR]`; remove a line to distrust.\n{text}"
    );
    crate::config::write_private_atomically(&path, text.as_bytes())
        .map_err(|e| file_error(&path, e))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trusting_is_recorded_once_and_read_back() {
        let home = dsh_tempdir::PrivateDir::new("trust-home").unwrap();
        let project = dsh_tempdir::PrivateDir::new("trust-project").unwrap();
        let record = read(home.path()).unwrap();
        let dir = project.path().canonicalize().unwrap();
        assert!(!is_trusted(&record, &dir));
        assert_eq!(trust(home.path(), project.path()).unwrap(), dir);
        trust(home.path(), project.path()).unwrap();
        let record = read(home.path()).unwrap();
        assert_eq!(record.trusted, std::slice::from_ref(&dir));
        assert!(is_trusted(&record, &dir));
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
}
