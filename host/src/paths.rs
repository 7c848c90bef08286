//! Where things live: `$DSH_HOME`, the installation, plugin directories.

use std::path::{Path, PathBuf};

/// `$DSH_HOME`, or `~/.dsh`. Created on first use.
pub fn dsh_home() -> std::io::Result<PathBuf> {
    let home = match std::env::var_os("DSH_HOME").filter(|v| !v.is_empty()) {
        Some(h) => PathBuf::from(h),
        None => {
            let user = std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .ok_or_else(|| std::io::Error::other("neither DSH_HOME nor HOME is set"))?;
            PathBuf::from(user).join(".dsh")
        }
    };
    std::fs::create_dir_all(&home)?;
    Ok(home)
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
