//! The paths a fenced command sees read-only even under a writable root:
//! the harness's own files (the fence's `protected`) and the project
//! configuration that trust depends on — `.git` (its hooks and
//! `core.fsmonitor`/`core.hooksPath` run at the user's next `git status`
//! or commit, outside every sandbox), `.dsh` and `.claude`.
//!
//! Found, each where it exists (a mount needs something to cover):
//!
//! - the fence's `config`: where the workspace's `.git`, `.dsh` or
//!   `.claude` leads when it is a symbolic link, and the separate git
//!   directory a `.git` file names (`gitdir: …`);
//! - those of the workspace and of its ancestors under a writable root (a
//!   workspace inside a repository);
//! - those below the workspace, by a bounded walk ([`WALK_DEPTH`],
//!   [`WALK_ENTRIES`], not entering [`WALK_SKIP`]): nested repositories,
//!   vendored ones, submodules' `.git` files and where they lead;
//! - the `core.hooksPath` of each git directory found, from a bounded read
//!   of its `config`.
//!
//! A configuration directory that does not exist yet can still be created
//! (as by `git init`): there is nothing to mount over, and making the mount
//! point would leave an empty `.git` in the user's tree.

use std::collections::VecDeque;
use std::io::Read;
use std::path::{Path, PathBuf};

use dsh_sdk::fence::{config, Fence};
use dsh_sdk::file::{open_readable, Follow};

/// The project directories kept read-only in `workspace-write`: the file
/// tools' configuration directories ([`config::CONFIG_DIRS`]), one list.
fn trusted_dirs() -> impl Iterator<Item = &'static str> {
    config::CONFIG_DIRS.iter().map(|(name, _)| *name)
}

/// How deep below the workspace the walk lists directories: `a/b/c/d/.git`
/// is found, `a/b/c/d/e/.git` is not.
pub const WALK_DEPTH: usize = 4;

/// The most directory entries the walk reads (shallowest first).
pub const WALK_ENTRIES: usize = 2000;

/// Directories the walk does not enter: dependencies, environments, caches
/// and build output, which are big and hold no project configuration.
pub const WALK_SKIP: [&str; 14] = [
    "node_modules",
    "target",
    "build",
    "dist",
    ".venv",
    "venv",
    "__pycache__",
    ".tox",
    ".mypy_cache",
    ".pytest_cache",
    ".cache",
    ".gradle",
    ".next",
    ".terraform",
];

/// The most bytes read of a git `config`.
const GIT_CONFIG_MAX: u64 = 64 * 1024;

/// The fence's protected paths and the project configuration described in
/// the module doc, canonical, each once. Callers keep those under a
/// writable root that exist.
pub fn read_only(fence: &Fence) -> Vec<PathBuf> {
    let mut found = Found {
        paths: fence.protected.clone(),
        git_dirs: Vec::new(),
    };
    if fence.root_for(&fence.root).is_none() {
        // Nothing of the workspace is writable (read-only mode).
        return found.paths;
    }
    for dir in &fence.config {
        found.add(dir, Some(&fence.root));
    }
    let mut dir: Option<&Path> = Some(&fence.root);
    while let Some(d) = dir.filter(|d| fence.root_for(d).is_some()) {
        for name in trusted_dirs() {
            found.config_entry(d, name.as_ref());
        }
        dir = d.parent();
    }
    if walk(&fence.root, |dir, name| found.config_entry(dir, name)) == WALK_ENTRIES {
        dsh_sdk::tracing::debug!(
            "the search for nested .git, .dsh and .claude below {} stopped after {WALK_ENTRIES} entries",
            fence.root.display()
        );
    }
    for (git_dir, worktree) in std::mem::take(&mut found.git_dirs) {
        if let Some(hooks) = hooks_path(&git_dir, &worktree) {
            found.add(&hooks, None);
        }
    }
    found.paths
}

/// What [`read_only`] has found so far.
struct Found {
    paths: Vec<PathBuf>,
    /// Git directories and the work tree each belongs to, for their
    /// `core.hooksPath`.
    git_dirs: Vec<(PathBuf, PathBuf)>,
}

impl Found {
    /// Adds `path` (followed to where it leads) if it exists; `worktree`
    /// when it is a git directory whose hooks path to look up.
    fn add(&mut self, path: &Path, worktree: Option<&Path>) {
        let Ok(real) = path.canonicalize() else {
            return;
        };
        if let Some(w) = worktree.filter(|_| real.is_dir()) {
            self.git_dirs.push((real.clone(), w.to_owned()));
        }
        if !self.paths.contains(&real) {
            self.paths.push(real);
        }
    }

    /// `dir/name`, a configuration name: itself (or where it leads), and
    /// for `.git` the directory a `.git` file names.
    fn config_entry(&mut self, dir: &Path, name: &std::ffi::OsStr) {
        let Some(kind) =
            trusted_dirs().find(|t| name.as_encoded_bytes().eq_ignore_ascii_case(t.as_bytes()))
        else {
            return;
        };
        let is_git = kind == ".git";
        self.add(&dir.join(name), is_git.then_some(dir));
        if is_git {
            // A `.git` file's `gitdir:` (a worktree, a submodule,
            // `--separate-git-dir`); links are followed by `add`.
            for gitdir in config::config_dirs(dir) {
                self.add(&gitdir, Some(dir));
            }
        }
    }
}

/// Calls `visit(dir, name)` for each configuration name ([`trusted_dirs`],
/// ASCII case ignored) in `root` and in the directories below it, breadth
/// first, within [`WALK_DEPTH`] and [`WALK_ENTRIES`], not entering
/// [`WALK_SKIP`], configuration directories, or symbolic links. Returns
/// how many entries it read.
fn walk(root: &Path, mut visit: impl FnMut(&Path, &std::ffi::OsStr)) -> usize {
    let mut queue = VecDeque::from([(root.to_owned(), 0usize)]);
    let mut read = 0;
    while let Some((dir, depth)) = queue.pop_front() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if read == WALK_ENTRIES {
                return read;
            }
            read += 1;
            let name = entry.file_name();
            let bytes = name.as_encoded_bytes();
            if trusted_dirs().any(|t| bytes.eq_ignore_ascii_case(t.as_bytes())) {
                visit(&dir, &name);
                continue;
            }
            let skipped = WALK_SKIP.iter().any(|s| bytes == s.as_bytes());
            // The entry's type from the directory itself: a link is not a
            // directory here, and is not entered.
            if depth < WALK_DEPTH && !skipped && entry.file_type().is_ok_and(|t| t.is_dir()) {
                queue.push_back((entry.path(), depth + 1));
            }
        }
    }
    read
}

/// `core.hooksPath` of the git directory `git_dir` (from its `config`, the
/// first [`GIT_CONFIG_MAX`] bytes), resolved: relative to `worktree`, `~/`
/// to `$HOME`.
fn hooks_path(git_dir: &Path, worktree: &Path) -> Option<PathBuf> {
    let mut text = Vec::new();
    open_readable(&git_dir.join("config"), Follow::Never)
        .ok()?
        .take(GIT_CONFIG_MAX)
        .read_to_end(&mut text)
        .ok()?;
    let value = core_hooks_path(&String::from_utf8_lossy(&text))?;
    let path = match value.strip_prefix("~/") {
        Some(rest) => Path::new(&std::env::var_os("HOME")?).join(rest),
        None => worktree.join(value),
    };
    Some(path)
}

/// The value of `hooksPath` in the `[core]` section of git config `text`
/// (names ignore case; the last one counts, as in git).
fn core_hooks_path(text: &str) -> Option<String> {
    let mut in_core = false;
    let mut value = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(section) = line.strip_prefix('[') {
            let name = section.split([']', ' ', '"']).next().unwrap_or("");
            in_core = name.eq_ignore_ascii_case("core");
            continue;
        }
        let Some((key, v)) = line.split_once('=') else {
            continue;
        };
        if in_core && key.trim().eq_ignore_ascii_case("hooksPath") {
            let v = v.split([';', '#']).next().unwrap_or("").trim();
            value = Some(v.trim_matches('"').to_owned());
        }
    }
    value.filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::fence::Mode;

    fn base(label: &str) -> PathBuf {
        let base = std::env::temp_dir()
            .canonicalize()
            .unwrap()
            .join(format!("dsh-protect-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        base
    }

    #[test]
    fn existing_trust_dirs_of_the_workspace_and_its_writable_ancestors() {
        let base = base("ancestors");
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

    #[test]
    fn nested_repositories_separate_git_dirs_and_hooks_paths_are_found() {
        let base = base("nested");
        let ws = base.join("ws");
        // A nested repository, a case variant, and one too deep.
        std::fs::create_dir_all(ws.join("vendor/lib/.git/hooks")).unwrap();
        std::fs::create_dir_all(ws.join("a/.CLAUDE")).unwrap();
        std::fs::create_dir_all(ws.join("1/2/3/4/5/.git")).unwrap();
        // Not entered.
        std::fs::create_dir_all(ws.join("node_modules/x/.git")).unwrap();
        // The workspace's .git is a file naming a separate git directory,
        // whose config names a hooks directory in the workspace.
        std::fs::create_dir_all(ws.join(".gd")).unwrap();
        std::fs::create_dir_all(ws.join("myhooks")).unwrap();
        std::fs::write(
            ws.join(".git"),
            format!("gitdir: {}\n", ws.join(".gd").display()),
        )
        .unwrap();
        std::fs::write(
            ws.join(".gd/config"),
            "[core]\n\tbare = false\n[remote \"o\"]\n\thooksPath = wrong\n[core]\n\thooksPath = myhooks\n",
        )
        .unwrap();
        let fence = Fence::new(Mode::WorkspaceWrite, &ws, &base, &[]);
        let ro = read_only(&fence);
        for p in [
            ws.join("vendor/lib/.git"),
            ws.join("a/.CLAUDE"),
            ws.join(".git"),
            ws.join(".gd"),
            ws.join("myhooks"),
        ] {
            assert!(ro.contains(&p), "{}: {ro:?}", p.display());
        }
        assert!(
            !ro.iter().any(|p| p.starts_with(ws.join("node_modules"))),
            "{ro:?}"
        );
        assert!(!ro.iter().any(|p| p.starts_with(ws.join("1"))), "{ro:?}");
        assert!(!ro.contains(&ws.join("wrong")), "{ro:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_walk_stops_at_its_entry_budget() {
        let base = base("budget");
        let ws = base.join("ws");
        for i in 0..WALK_ENTRIES / 2 + 10 {
            std::fs::create_dir_all(ws.join(format!("d{i:05}/e"))).unwrap();
        }
        let mut seen = 0;
        let read = walk(&ws, |_, _| seen += 1);
        // Every `dNNNNN` and then `e`s until the budget is spent.
        assert_eq!((read, seen), (WALK_ENTRIES, 0));
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn hooks_path_is_read_from_the_core_section() {
        assert_eq!(
            core_hooks_path("[core]\n  HooksPath = \"/x/h\" ; note\n"),
            Some("/x/h".to_owned())
        );
        assert_eq!(core_hooks_path("[alias]\n hooksPath = a\n"), None);
        assert_eq!(core_hooks_path(""), None);
    }
}
