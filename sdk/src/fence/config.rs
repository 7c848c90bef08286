//! The workspace's configuration that trust depends on, read-only to the
//! agent's file changes in `workspace-write` (asked for like a path outside
//! the workspace, never refused outright):
//!
//! - `.git`: git runs its hooks (`hooks/pre-commit`) and the commands its
//!   config names (`core.fsmonitor`, `core.hooksPath`, aliases) as the user
//!   and outside any sandbox, at the user's next `git status` or commit;
//! - `.dsh` and `.claude`: the project's harness and agent configuration,
//!   which decides what is trusted and loaded.
//!
//! A directory of one of these names anywhere under a writable root counts
//! (nested repositories and submodules too; ASCII case is ignored, for
//! case-insensitive file systems), and so do the places `root/.git`,
//! `root/.dsh` and `root/.claude` lead when they are symbolic links, and the
//! `gitdir:` a `.git` file names (worktrees, `--separate-git-dir`).

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use super::resolve;
use crate::file::{open_readable, Follow};

/// The configuration directories: (name, what it is and why it matters).
pub const CONFIG_DIRS: [(&str, &str); 3] = [
    (
        ".git",
        "git metadata (git runs its hooks, and the commands its config names such as core.fsmonitor, as you and outside any sandbox)",
    ),
    (
        ".dsh",
        "dsh configuration (it decides what the harness trusts and loads)",
    ),
    (
        ".claude",
        "agent configuration (it decides what agents trust and run)",
    ),
];

/// What a place of [`config_dirs`] is.
const LINKED: &str = "configuration (where the workspace's .git, .dsh or .claude leads: git runs its hooks and config from there as you, outside any sandbox)";

/// The most bytes read of a `.git` file (`gitdir: <path>`).
const GITDIR_FILE_MAX: u64 = 4096;

/// Where the configuration of the workspace at `root` (canonical) lives
/// besides its own `.git`, `.dsh` and `.claude`: what those lead to when
/// they are symbolic links, and the `gitdir:` of a `.git` file.
pub fn config_dirs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (name, _) in CONFIG_DIRS {
        let spelled = root.join(name);
        let Ok(meta) = std::fs::symlink_metadata(&spelled) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            out.push(resolve(root, Path::new(name)));
        } else if meta.is_file() && name == ".git" {
            out.extend(gitdir(root, &spelled));
        }
    }
    out
}

/// The directory a `.git` file's `gitdir:` line names, resolved.
fn gitdir(root: &Path, file: &Path) -> Option<PathBuf> {
    let opened = open_readable(file, Follow::Never).ok()?;
    let mut text = String::new();
    opened
        .take(GITDIR_FILE_MAX)
        .read_to_string(&mut text)
        .ok()?;
    let dir = text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim();
    (!dir.is_empty()).then(|| resolve(root, Path::new(dir)))
}

/// What `target` is part of when it is configuration: the words of
/// [`CONFIG_DIRS`] and the configuration directory. `root` is the writable
/// root `target` lies under (names are looked for below it); `extra` are the
/// places of [`config_dirs`].
pub fn config_of(
    root: Option<&Path>,
    extra: &[PathBuf],
    target: &Path,
) -> Option<(&'static str, PathBuf)> {
    if let Some(dir) = extra.iter().find(|d| target.starts_with(d)) {
        return Some((LINKED, dir.clone()));
    }
    let root = root?;
    let rel = target.strip_prefix(root).ok()?;
    let mut dir = root.to_owned();
    for part in rel.components() {
        let Component::Normal(name) = part else {
            continue;
        };
        dir.push(name);
        let found = CONFIG_DIRS
            .iter()
            .find(|(n, _)| name.as_encoded_bytes().eq_ignore_ascii_case(n.as_bytes()));
        if let Some((_, what)) = found {
            return Some((what, dir));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_name_anywhere_below_the_root_counts() {
        let root = Path::new("/w");
        let of = |p: &str| config_of(Some(root), &[], Path::new(p)).map(|(_, d)| d);
        assert_eq!(of("/w/.git/config"), Some(PathBuf::from("/w/.git")));
        assert_eq!(
            of("/w/.GIT/hooks/pre-commit"),
            Some(PathBuf::from("/w/.GIT"))
        );
        assert_eq!(
            of("/w/vendor/x/.git/config"),
            Some(PathBuf::from("/w/vendor/x/.git"))
        );
        assert_eq!(
            of("/w/.claude/settings.json"),
            Some(PathBuf::from("/w/.claude"))
        );
        assert_eq!(of("/w/.dsh"), Some(PathBuf::from("/w/.dsh")));
        assert_eq!(of("/w/src/git.rs"), None);
        assert_eq!(of("/w/.gitignore"), None);
        assert_eq!(of("/w/.github/workflows/ci.yml"), None);
        assert_eq!(config_of(None, &[], Path::new("/w/.git/config")), None);
        let extra = [PathBuf::from("/elsewhere/repo.git")];
        assert!(config_of(None, &extra, Path::new("/elsewhere/repo.git/hooks/x")).is_some());
    }

    #[test]
    fn symlinked_and_gitdir_configuration_is_found() {
        let ws = std::env::temp_dir().join(format!("dsh-fence-config-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&ws);
        std::fs::create_dir_all(ws.join("real-git")).unwrap();
        std::fs::create_dir_all(ws.join("sub/gitdir")).unwrap();
        let ws = ws.canonicalize().unwrap();
        std::os::unix::fs::symlink("real-git", ws.join(".git")).unwrap();
        assert_eq!(config_dirs(&ws), [ws.join("real-git")]);
        std::fs::remove_file(ws.join(".git")).unwrap();
        std::fs::write(ws.join(".git"), "gitdir: sub/gitdir\n").unwrap();
        assert_eq!(config_dirs(&ws), [ws.join("sub/gitdir")]);
        std::fs::remove_dir_all(&ws).unwrap();
    }
}
