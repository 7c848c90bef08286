//! The paths a fenced command sees read-only even under a writable root:
//! the harness's own files (the fence's `protected`) and the project
//! configuration that trust depends on — `.git` (its hooks and
//! `core.fsmonitor`/`core.hooksPath` run at the user's next `git status`
//! or commit, outside every sandbox), `.dsh` and `.claude`.

use std::path::{Path, PathBuf};

use dsh_sdk::fence::Fence;

/// The project directories kept read-only in `workspace-write`.
pub const TRUSTED_DIRS: [&str; 3] = [".git", ".dsh", ".claude"];

/// The fence's protected paths and every existing [`TRUSTED_DIRS`] entry of
/// the workspace and of its ancestors that lie under a writable root (a
/// workspace inside a repository whose `.git` is writable too).
pub fn read_only(fence: &Fence) -> Vec<PathBuf> {
    let mut out = fence.protected.clone();
    let mut dir: Option<&Path> = Some(&fence.root);
    while let Some(d) = dir.filter(|d| fence.root_for(d).is_some()) {
        for name in TRUSTED_DIRS {
            let p = d.join(name);
            // A symlink is followed: its target is what git and dsh use.
            if let Ok(real) = p.canonicalize() {
                if !out.contains(&real) {
                    out.push(real);
                }
            }
        }
        dir = d.parent();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::fence::Mode;

    #[test]
    fn existing_trust_dirs_of_the_workspace_and_its_writable_ancestors() {
        let base = std::env::temp_dir()
            .canonicalize()
            .unwrap()
            .join(format!("dsh-protect-{}", std::process::id()));
        let ws = base.join("repo/sub");
        std::fs::create_dir_all(ws.join(".claude")).unwrap();
        std::fs::create_dir_all(base.join("repo/.git")).unwrap();
        let fence = Fence::new(Mode::WorkspaceWrite, &ws, &base, &[]);
        let ro = read_only(&fence);
        assert!(ro.contains(&ws.join(".claude")), "{ro:?}");
        assert!(ro.contains(&base.join("repo/.git")), "{ro:?}");
        assert!(!ro.iter().any(|p| p.ends_with(".dsh")), "{ro:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
