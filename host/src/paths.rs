//! Where things live: `$DSH_HOME`, the installation, plugin directories.

use std::path::{Path, PathBuf};

/// `$DSH_HOME`, or `~/.dsh`. Created on first use, private (0700); an
/// existing directory keeps its mode (see [`privacy_warning`]).
pub fn dsh_home() -> std::io::Result<PathBuf> {
    let home = match explicit_home() {
        Some(h) => h,
        None => {
            let user = std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .ok_or_else(|| std::io::Error::other("neither DSH_HOME nor HOME is set"))?;
            PathBuf::from(user).join(".dsh")
        }
    };
    // Absolute from here on: the fence compares the harness's own files
    // with canonical paths, and a relative home would match none of them
    // (its files would be neither protected nor hidden from the tools).
    let home = std::path::absolute(&home)?;
    create_private_dir(&home)?;
    Ok(home)
}

fn explicit_home() -> Option<PathBuf> {
    std::env::var_os("DSH_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Creates `dir` (and missing parents) with mode 0700 (less the umask).
/// An existing directory is left as it is: its mode is its owner's choice.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// One line to print at start when `home` is open to others: when anyone
/// can write to it (they could make dsh load their plugins), or — for the
/// default `~/.dsh`, not a `$DSH_HOME` you chose — when group or others have
/// any access (sessions hold your conversations). Never changes the mode.
pub fn privacy_warning(home: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(home).ok()?.permissions().mode() & 0o777;
    let what = if mode & 0o002 != 0 {
        "writable by anyone: they can make dsh load their plugins"
    } else if mode & 0o077 != 0 && explicit_home().is_none() {
        "open to others: they can read your sessions"
    } else {
        return None;
    };
    Some(format!(
        "warning: {} is {what} (mode {mode:o}); `chmod 700 {}` makes it private",
        home.display(),
        home.display()
    ))
}

/// The installation: the staged tree (`bin/`, `plugins/`, `profiles/`)
/// containing this executable, `$DSH_INSTALL_DIR`, or — for `cargo run` —
/// the source tree this binary was built from (profiles from the repo,
/// plugins next to the executable).
#[derive(Debug, Clone)]
pub struct Install {
    /// Shipped profiles and bundles.
    pub profiles: Option<PathBuf>,
    /// Shipped plugins.
    pub plugins: Option<PathBuf>,
}

impl Install {
    /// Finds the installation of the running executable.
    pub fn locate() -> Install {
        if let Some(dir) = std::env::var_os("DSH_INSTALL_DIR").filter(|v| !v.is_empty()) {
            return Install::at(Path::new(&dir));
        }
        let exe_dir = std::env::current_exe()
            .ok()
            .and_then(|e| e.canonicalize().ok())
            .and_then(|e| e.parent().map(Path::to_owned));
        if let Some(root) = exe_dir.as_deref().and_then(Path::parent) {
            if root.join("profiles").is_dir() {
                return Install::at(root);
            }
        }
        // A development build: `target/<profile>/dsh-host`.
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        Install {
            profiles: Some(repo.join("profiles")).filter(|p| p.is_dir()),
            plugins: exe_dir,
        }
    }

    fn at(root: &Path) -> Install {
        Install {
            profiles: Some(root.join("profiles")).filter(|p| p.is_dir()),
            plugins: Some(root.join("plugins")).filter(|p| p.is_dir()),
        }
    }
}
