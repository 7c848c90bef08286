//! What a fenced command may not read: the places the read fence refuses
//! to the file tools (`Reads::secret_places`: the secret stores of the
//! user's homes and of the system, and the sessions and credentials in the
//! harness's home), hidden inside the sandbox. A directory is covered by an
//! empty read-only tmpfs nobody may enter (mode 000), a file by a read-only
//! bind of an empty file nobody may read ([`blank`], mode 000), so `cat
//! ~/.ssh/id_rsa` fails with "Permission denied" and nothing of the store
//! shows, not even its names. Without capabilities neither can be
//! unmounted, and uid 0 does not bypass the mode.

use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use dsh_sdk::fence::Fence;

/// The name of the empty file bound over hidden files, in the plugin's
/// private directory.
const BLANK: &str = "hidden-file";

/// The places a fenced command does not see.
pub struct Hidden {
    /// Each covered by an empty read-only tmpfs of mode 000.
    pub dirs: Vec<PathBuf>,
    /// Each covered by a read-only bind of [`Hidden::blank`].
    pub files: Vec<PathBuf>,
    /// The empty file of mode 000 bound over `files`.
    pub blank: PathBuf,
}

impl Hidden {
    /// What `fence` hides, with `private` (the plugin's own 0700
    /// directory) holding the blank file. Left out: a place inside another
    /// hidden directory (hidden with it), and a place under the read-only
    /// mode's private scratch `scratch` outside the workspace shown again
    /// on it (the scratch covers it already).
    pub fn of(fence: &Fence, scratch: Option<&Path>, private: &Path) -> io::Result<Hidden> {
        let places: Vec<PathBuf> = fence
            .reads
            .secret_places()
            .into_iter()
            .filter(|p| !scratch.is_some_and(|s| p.starts_with(s) && !p.starts_with(&fence.root)))
            .collect();
        let (dirs, files): (Vec<PathBuf>, Vec<PathBuf>) =
            places.into_iter().partition(|p| p.is_dir());
        let inside_another = |p: &PathBuf| dirs.iter().any(|d| d != p && p.starts_with(d));
        let files = files
            .iter()
            .filter(|f| !inside_another(f))
            .cloned()
            .collect();
        let dirs = dirs
            .iter()
            .filter(|d| !inside_another(d))
            .cloned()
            .collect();
        Ok(Hidden {
            dirs,
            files,
            blank: blank(private)?,
        })
    }
}

/// `<private>/hidden-file`: empty, mode 000 (made if missing). An entry
/// of that name that is anything else (a link, a file with content or
/// another mode: the directory is read-only to commands, so only a bug or
/// another process of this user could have put it there) is refused
/// rather than bound over a secret.
pub fn blank(private: &Path) -> io::Result<PathBuf> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let path = private.join(BLANK);
    match path.symlink_metadata() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .mode(0o000)
                .open(&path)?;
        }
        Err(e) => return Err(e),
        Ok(m) => {
            // SAFETY: geteuid has no preconditions.
            let me = unsafe { libc::geteuid() };
            let blank = m.file_type().is_file()
                && m.len() == 0
                && m.permissions().mode() & 0o7777 == 0
                && m.uid() == me;
            if !blank {
                return Err(io::Error::other(format!(
                    "{} is not the empty mode-000 file this plugin made; refusing to bind it over hidden files",
                    path.display()
                )));
            }
        }
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::fence::{Mode, Reads};
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn stores_split_into_dirs_and_files_and_nested_or_scratch_ones_are_left_out() {
        let dir = dsh_sdk::tempdir::PrivateDir::new("dsh-hide-test-").unwrap();
        let base = dir.path().canonicalize().unwrap();
        let home = base.join("home");
        std::fs::create_dir_all(home.join(".ssh/inner")).unwrap();
        std::fs::write(home.join(".netrc"), "machine x").unwrap();
        std::fs::create_dir_all(base.join("private")).unwrap();
        let mut fence = Fence::new(Mode::WorkspaceWrite, &base, &base, &[]);
        fence.reads = Reads {
            homes: vec![home.clone()],
            // A linked store inside a hidden directory.
            linked: vec![home.join(".ssh/inner")],
            ..Reads::default()
        };
        let h = Hidden::of(&fence, None, &base.join("private")).unwrap();
        assert!(h.dirs.contains(&home.join(".ssh")), "{:?}", h.dirs);
        assert_eq!(h.dirs.iter().filter(|d| d.starts_with(&home)).count(), 1);
        let home_files: Vec<&PathBuf> = h.files.iter().filter(|f| f.starts_with(&home)).collect();
        assert_eq!(home_files, vec![&home.join(".netrc")]);
        let shadow = PathBuf::from("/etc/shadow");
        assert!(
            !shadow.exists() || h.files.contains(&shadow),
            "{:?}",
            h.files
        );
        let meta = std::fs::metadata(&h.blank).unwrap();
        assert_eq!((meta.len(), meta.permissions().mode() & 0o777), (0, 0));
        // Under the scratch (read-only mode), outside the workspace: left out.
        let ws = base.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let mut ro = Fence::new(Mode::ReadOnly, &ws, &base, &[]);
        ro.reads = fence.reads.clone();
        let h = Hidden::of(&ro, Some(&base), &base.join("private")).unwrap();
        assert!(!h.dirs.iter().chain(&h.files).any(|p| p.starts_with(&base)));
    }
}
