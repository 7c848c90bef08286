//! What one `glob` or `grep` call may read: the read fence the policy
//! handed over (none: still never what this plugin found is never read,
//! [`Guard`]) and whether the user approved the call, as
//! the root, the directories the walk enters, the files it lists and the
//! files it opens see it. The walks never enter a pseudo filesystem
//! (`/proc`, `/sys`, ...: their files are made as they are read, some never
//! end, some wait for data, and `/proc` alone lists every process's files);
//! a root there is refused, one file there is read bounded
//! ([`dsh_sdk::file::open_readable`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_sdk::api::tools::Exec;
use dsh_sdk::fence::{Guard, ReadError, Reads};
use dsh_sdk::file::{file_system_at, FileSystem, Readable};
use dsh_sdk::prelude::*;

/// The code of a read the fence refuses.
pub const FS_DENIED: &str = "FS_DENIED";

/// The read fence of one call.
#[derive(Clone)]
pub struct Scope {
    /// `glob` or `grep`.
    tool: &'static str,
    guard: Arc<Guard>,
    approved: bool,
}

impl Scope {
    /// The scope of `exec`, a call of `tool`, with `own` (what is never
    /// read, as found by this plugin) added to the fence it carries.
    pub fn of(exec: &Exec, tool: &'static str, own: &Reads) -> Scope {
        Scope {
            tool,
            guard: Arc::new(Guard::of(exec.sandbox.clone(), own)),
            approved: exec.approved,
        }
    }

    /// The call's `path` (the working directory when absent), resolved and
    /// checked by the fence.
    pub fn root(&self, cwd: &str, path: Option<&str>) -> Result<PathBuf> {
        let file = path.unwrap_or(".");
        self.guard
            .resolve_read(self.tool, Path::new(cwd), Path::new(file), self.approved)
            .map_err(|r| Error::new(FS_DENIED, r.message))
    }

    /// Whether the fence lets the walk see `path` (enter it, list it).
    pub fn admits(&self, path: &Path) -> bool {
        self.guard
            .check_read(self.tool, path, self.approved)
            .is_ok()
    }

    /// Opens the walked or named file `path` under the fence.
    pub fn open(&self, path: &Path) -> std::result::Result<Readable, ReadError> {
        self.guard.open_read(self.tool, path, self.approved)
    }
}

/// Whether the walk may enter the directory `dir`: not on a pseudo
/// filesystem (a directory that cannot be looked at is left to the walker,
/// which skips what it cannot read).
pub fn ordinary_dir(dir: &Path) -> bool {
    matches!(file_system_at(dir), Ok(FileSystem::Ordinary) | Err(_))
}

/// Refuses a walk rooted at `root` on a pseudo filesystem, saying why.
pub fn refuse_pseudo_root(tool: &str, root: &Path) -> Result<()> {
    let name = match file_system_at(root) {
        Ok(FileSystem::Pseudo(p)) => p.name(),
        Ok(FileSystem::Refused(_)) => "a kernel debugging filesystem",
        Ok(FileSystem::Ordinary) | Err(_) => return Ok(()),
    };
    Err(Error::new(
        "SEARCH_FAILED",
        format!(
            "{tool} does not walk {} ({name}: the kernel makes its files as they are read, and some never end or wait for data); name one file there instead",
            root.display()
        ),
    ))
}
