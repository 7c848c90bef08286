//! The workspace fence: the permission mode, where changes are allowed,
//! the harness's own files, what is never read ([`read`]), the workspace's
//! configuration that changes only with approval ([`config`]), and the one
//! path resolver every filesystem tool uses.
//!
//! Resolution is lexical first (`.` dropped, `..` applied to the spelled
//! path), then the deepest existing ancestor is canonicalized (symlinks
//! resolved) and the missing rest appended. The policy check and the write
//! therefore see the same path whatever its spelling; the write itself
//! re-walks that path without following symlinks ([`crate::beneath`]), so a
//! symlink swapped in after the check is refused instead of followed. A
//! read is opened the same way and what was opened is checked again
//! ([`open_read`]).
//!
//! A tool applies the fence its call carries, or, when it carries none,
//! what it found itself is never read ([`Guard`]).

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub mod config;
pub mod found;
mod guard;
mod open;
pub mod read;

pub use found::Found;
pub use guard::Guard;
pub use open::{open_read, ReadError};
pub use read::{ReadPolicy, Reads};

/// Permission modes (reference dsh-product: sandbox modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// No changes at all (the temp directory is a private scratch space for
    /// commands).
    ReadOnly,
    /// Changes under the workspace and the temp directory only.
    WorkspaceWrite,
    /// No fence.
    DangerFullAccess,
}

impl Mode {
    /// Every mode, by name.
    pub const NAMES: [&'static str; 3] = ["read-only", "workspace-write", "danger-full-access"];

    /// The mode's name (`workspace-write`).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ReadOnly => Self::NAMES[0],
            Mode::WorkspaceWrite => Self::NAMES[1],
            Mode::DangerFullAccess => Self::NAMES[2],
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "read-only" => Ok(Mode::ReadOnly),
            "workspace-write" => Ok(Mode::WorkspaceWrite),
            "danger-full-access" => Ok(Mode::DangerFullAccess),
            other => Err(format!(
                "unknown permission mode `{other}` (use {})",
                Self::NAMES.join(", ")
            )),
        }
    }
}

/// What a policy hands a tool with each call (`exec.sandbox`, read as
/// [`crate::api::tools::Exec::sandbox`]): the mode, the
/// workspace, where changes are allowed and what is never the agent's.
/// Every path is canonical.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    /// The permission mode.
    pub mode: Mode,
    /// The workspace root.
    pub root: PathBuf,
    /// Where changes are allowed: the workspace and the temp directory in
    /// `workspace-write`, nothing in `read-only`.
    #[serde(default)]
    pub writable: Vec<PathBuf>,
    /// The harness's own files (`$DSH_HOME`, the installation's plugins and
    /// profiles): refused to changes even under a writable root.
    #[serde(default)]
    pub protected: Vec<PathBuf>,
    /// Where the workspace's configuration lives besides its `.git`, `.dsh`
    /// and `.claude` (which count wherever they are under a writable root):
    /// what those lead to when they are symbolic links, and the `gitdir:`
    /// of a `.git` file ([`config::config_dirs`]). Changes there are asked
    /// for like changes outside the workspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config: Vec<PathBuf>,
    /// What reads never see, and whether reads outside the workspace ask
    /// ([`Reads`]; set by the policy with [`Fence::with_reads`]).
    #[serde(default, skip_serializing_if = "Reads::is_empty")]
    pub reads: Reads,
}

/// Why a change was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The mode allows no changes.
    ReadOnly,
    /// The path lies outside every writable root (an approver may allow it).
    Outside,
    /// The path is in the workspace's configuration (`.git`, `.dsh`,
    /// `.claude`, [`config`]): an approver may allow the call, but never
    /// for the rest of the session (each change is asked for).
    Config,
    /// The path is one of the harness's own files (never approvable).
    Protected,
    /// The path is never read (nor changed): a process's own files, the
    /// harness's home, a secret store ([`Reads::forbidden`]; never
    /// approvable).
    Secret,
}

impl RefusalKind {
    /// Whether an approver may allow the refused call (a path outside the
    /// writable roots, or the workspace's configuration).
    pub fn is_approvable(self) -> bool {
        matches!(self, RefusalKind::Outside | RefusalKind::Config)
    }
}

/// A refused change, with a message that says how to change the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Why.
    pub kind: RefusalKind,
    /// For people (and the model).
    pub message: String,
}

impl Fence {
    /// The fence of `mode` for a workspace at `root`, with `temp` writable in
    /// `workspace-write` and `protected` never writable. Paths are
    /// canonicalized here. Reads are fenced only by their mode until
    /// [`Fence::with_reads`] adds what is never read.
    pub fn new(mode: Mode, root: &Path, temp: &Path, protected: &[PathBuf]) -> Fence {
        let slash = Path::new("/");
        let protected = protected.iter().map(|p| resolve(slash, p)).collect();
        Fence::of_resolved(mode, resolve(slash, root), &resolve(slash, temp), protected)
    }

    /// [`Fence::new`] of paths already resolved ([`resolve`]): for a policy
    /// that resolves its constant paths once (and pins each workspace) and
    /// builds a fence for every call. Only the workspace's configuration is
    /// looked up on the disk ([`config::config_dirs`]).
    pub fn of_resolved(mode: Mode, root: PathBuf, temp: &Path, protected: Vec<PathBuf>) -> Fence {
        let writable = match mode {
            Mode::ReadOnly => Vec::new(),
            Mode::WorkspaceWrite => vec![root.clone(), temp.to_owned()],
            Mode::DangerFullAccess => vec![PathBuf::from("/")],
        };
        let config = match mode {
            Mode::WorkspaceWrite => config::config_dirs(&root),
            Mode::ReadOnly | Mode::DangerFullAccess => Vec::new(),
        };
        Fence {
            mode,
            root,
            writable,
            protected,
            config,
            reads: Reads::default(),
        }
    }

    /// This fence with `reads` (what is never read, the read policy).
    pub fn with_reads(self, reads: Reads) -> Fence {
        Fence { reads, ..self }
    }

    /// This fence with the places of `own` (what the tool found itself at
    /// its start, [`Reads::discover`]) added to what it never reads.
    pub fn with_own_reads(mut self, own: &Reads) -> Fence {
        let reads = std::mem::take(&mut self.reads).union(own);
        self.with_reads(reads)
    }

    /// `file`, as a tool's argument spells it relative to `cwd`, resolved
    /// for a change, and whether tool `tool` may make it: what its spelling
    /// names is checked as a read's is ([`Reads::forbidden_read`]: a
    /// link from a store out of it is still the store), then the resolved
    /// path with [`Fence::check_write`]. The path is given with any refusal,
    /// for the caller to honour an approved one.
    pub fn resolve_write(
        &self,
        tool: &str,
        cwd: &Path,
        file: &Path,
    ) -> (PathBuf, Result<(), Refusal>) {
        let target = resolve(cwd, file);
        let checked = self.check_write(tool, &target);
        let approvable = match &checked {
            Ok(()) => true,
            Err(r) => r.kind.is_approvable(),
        };
        if approvable && self.mode == Mode::WorkspaceWrite {
            if let Some((spelled, why)) = self.reads.forbidden_read(cwd, file, &target) {
                let refusal = self.secret_refusal(tool, &spelled, &why);
                return (target, Err(refusal));
            }
        }
        (target, checked)
    }

    /// The refusal of changing `target`, which is never read (`why`).
    fn secret_refusal(&self, tool: &str, target: &Path, why: &str) -> Refusal {
        Refusal {
            kind: RefusalKind::Secret,
            message: format!(
                "{tool} of {} is refused: {why}; the agent may not read or change it in {} mode (set DSH_PERMISSION_MODE=danger-full-access to allow it)",
                target.display(),
                self.mode
            ),
        }
    }

    /// Whether tool `tool` may change `target` (a path from [`resolve`]):
    /// not in `read-only`; in `workspace-write` never the harness's own
    /// files or what is never read ([`RefusalKind::Protected`],
    /// [`RefusalKind::Secret`]), and only with approval outside the
    /// writable roots ([`RefusalKind::Outside`]) or in the workspace's
    /// configuration ([`RefusalKind::Config`]).
    pub fn check_write(&self, tool: &str, target: &Path) -> Result<(), Refusal> {
        let shown = target.display();
        match self.mode {
            Mode::DangerFullAccess => Ok(()),
            Mode::ReadOnly => Err(Refusal {
                kind: RefusalKind::ReadOnly,
                message: format!(
                    "{tool} of {shown} is not allowed in read-only mode; set DSH_PERMISSION_MODE=workspace-write (or danger-full-access) to allow file changes"
                ),
            }),
            Mode::WorkspaceWrite => {
                if let Some(p) = self.protected_by(target) {
                    return Err(Refusal {
                        kind: RefusalKind::Protected,
                        message: format!(
                            "{shown} is one of the harness's own files (under {}: its configuration, plugins and state); the agent may not change them in {} mode",
                            p.display(),
                            self.mode
                        ),
                    });
                }
                if let Some(why) = self.reads.forbidden(target) {
                    return Err(self.secret_refusal(tool, target, &why));
                }
                let root = self.root_for(target);
                if let Some((what, dir)) = config::config_of(root, &self.config, target) {
                    return Err(Refusal {
                        kind: RefusalKind::Config,
                        message: format!(
                            "{shown} is in the workspace's {what}: {}; {} mode changes it only with your approval; approve the call, or set DSH_PERMISSION_MODE=danger-full-access to allow it",
                            dir.display(),
                            self.mode
                        ),
                    });
                }
                if root.is_some() {
                    return Ok(());
                }
                let others: Vec<String> = self
                    .writable
                    .iter()
                    .filter(|w| **w != self.root)
                    .map(|w| w.display().to_string())
                    .collect();
                Err(Refusal {
                    kind: RefusalKind::Outside,
                    message: format!(
                        "{shown} is outside the workspace {} (workspace-write mode allows changes only there and in {}); set DSH_PERMISSION_MODE=danger-full-access to allow it",
                        self.root.display(),
                        others.join(", ")
                    ),
                })
            }
        }
    }

    /// The protected path `target` lies under, if any.
    pub fn protected_by(&self, target: &Path) -> Option<&Path> {
        self.protected
            .iter()
            .find(|p| target.starts_with(p))
            .map(PathBuf::as_path)
    }

    /// The deepest writable root containing `target`.
    pub fn root_for(&self, target: &Path) -> Option<&Path> {
        self.writable
            .iter()
            .filter(|w| target.starts_with(w))
            .max_by_key(|w| w.as_os_str().len())
            .map(PathBuf::as_path)
    }
}

/// `path` with `.` dropped and `..` applied, without touching the disk
/// (`..` above the root stays at the root).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Prefix(_) | Component::RootDir => out.push(c.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                let at_dotdot = out.file_name().is_none() && out.ends_with("..");
                if at_dotdot || (!out.pop() && !path.is_absolute()) {
                    out.push("..");
                }
            }
            Component::Normal(n) => out.push(n),
        }
    }
    out
}

/// `file` (absolute, or relative to `cwd`) as the fence sees it: normalized
/// lexically, then its deepest existing ancestor canonicalized and the rest
/// appended. Two spellings of one file resolve to one path.
pub fn resolve(cwd: &Path, file: &Path) -> PathBuf {
    let joined = if file.is_absolute() {
        file.to_owned()
    } else {
        cwd.join(file)
    };
    let lexical = normalize(&joined);
    let mut existing = lexical.as_path();
    let mut rest = Vec::new();
    loop {
        if existing.symlink_metadata().is_ok() {
            if let Ok(real) = existing.canonicalize() {
                let mut out = real;
                out.extend(rest.iter().rev());
                return out;
            }
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                existing = parent;
            }
            _ => return lexical,
        }
    }
}

/// The version of a file the read-before-write policy compares: size and
/// modification time.
pub fn version(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!("{}:{}:{}", meta.len(), meta.mtime(), meta.mtime_nsec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_lexically() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), Path::new("/a/c"));
        assert_eq!(normalize(Path::new("/a/../../x")), Path::new("/x"));
        assert_eq!(normalize(Path::new("/..")), Path::new("/"));
        assert_eq!(normalize(Path::new("a/../../b")), Path::new("../b"));
        assert_eq!(normalize(Path::new("../../b")), Path::new("../../b"));
    }

    #[test]
    fn a_missing_directory_then_dotdot_cannot_leave_the_workspace_unseen() {
        let ws = std::env::temp_dir().join(format!("dsh-fence-unit-{}", std::process::id()));
        std::fs::create_dir_all(&ws).unwrap();
        let r = resolve(&ws, Path::new("nope/../../outside/secret.txt"));
        let real = ws.canonicalize().unwrap();
        assert_eq!(
            r,
            real.parent().unwrap().join("outside/secret.txt"),
            "the `..` after a missing directory is applied"
        );
        let fence = Fence::new(
            Mode::WorkspaceWrite,
            &ws,
            Path::new("/nonexistent-tmp"),
            &[],
        );
        let refusal = fence.check_write("write", &r).unwrap_err();
        assert_eq!(refusal.kind, RefusalKind::Outside);
        std::fs::remove_dir_all(&ws).unwrap();
    }

    #[test]
    fn symlinks_resolve_and_protected_paths_win_over_writable_roots() {
        let ws = std::env::temp_dir().join(format!("dsh-fence-unit2-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&ws);
        std::fs::create_dir_all(ws.join("home")).unwrap();
        std::os::unix::fs::symlink("/etc", ws.join("link")).unwrap();
        assert_eq!(
            resolve(&ws, Path::new("link/x/y")),
            Path::new("/etc/x/y"),
            "{:?}",
            resolve(&ws, Path::new("link/x/y"))
        );
        let fence = Fence::new(
            Mode::WorkspaceWrite,
            &ws,
            Path::new("/nonexistent-tmp"),
            &[ws.join("home")],
        );
        let target = resolve(&ws, Path::new("./home/patch.toml"));
        assert_eq!(
            fence.check_write("write", &target).unwrap_err().kind,
            RefusalKind::Protected
        );
        assert!(fence
            .check_write("write", &resolve(&ws, Path::new("src/new.rs")))
            .is_ok());
        std::fs::remove_dir_all(&ws).unwrap();
    }

    /// A `workspace-write` fence of the workspace `/w`, writable and
    /// nothing else (no temp directory, nothing protected, no read fence);
    /// the paths need not exist.
    pub(super) fn fence_of_w() -> Fence {
        let mut fence = Fence::new(
            Mode::WorkspaceWrite,
            Path::new("/"),
            Path::new("/nonexistent-tmp"),
            &[],
        );
        fence.root = PathBuf::from("/w");
        fence.writable = vec![PathBuf::from("/w")];
        fence
    }

    #[test]
    fn configuration_is_asked_for_and_secrets_are_refused() {
        let mut fence = fence_of_w();
        fence.reads.homes = vec![PathBuf::from("/home/u")];
        fence.writable.push(PathBuf::from("/home/u"));
        for target in ["/w/.git/config", "/w/.git/hooks/pre-commit", "/w/a/.dsh/x"] {
            let refusal = fence.check_write("edit", Path::new(target)).unwrap_err();
            assert_eq!(refusal.kind, RefusalKind::Config, "{target}");
            assert!(
                refusal.message.contains("only with your approval"),
                "{}",
                refusal.message
            );
        }
        let refusal = fence
            .check_write("write", Path::new("/home/u/.ssh/authorized_keys"))
            .unwrap_err();
        assert_eq!(refusal.kind, RefusalKind::Secret);
        assert!(fence
            .check_write("write", Path::new("/w/src/git.rs"))
            .is_ok());
    }

    #[test]
    fn read_only_refuses_everything() {
        let fence = Fence::new(Mode::ReadOnly, Path::new("/"), Path::new("/tmp"), &[]);
        assert!(fence.writable.is_empty());
        assert_eq!(
            fence
                .check_write("edit", Path::new("/tmp/x"))
                .unwrap_err()
                .kind,
            RefusalKind::ReadOnly
        );
    }
}
