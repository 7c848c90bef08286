//! What a file tool enforces for one call ([`Guard`]): the fence the
//! policy handed over, with what the tool found itself is never read added
//! ([`Fence::with_own_reads`]); or, when the call carries no fence (no
//! `permission` row, or another `tools/pre-execute` listener answered
//! before it), still what the tool found is never read: process files,
//! `/dev/fd/N`, the harness's home and the secret stores stay refused to
//! reads and changes alike, and nothing else is fenced. Only a fence of
//! `danger-full-access` lets a tool read them.

use std::path::{Path, PathBuf};

use super::{resolve, Fence, Mode, ReadError, Reads, Refusal, RefusalKind};
use crate::file::{Identity, Readable};

/// The fence of one call of a file tool.
#[derive(Debug, Clone)]
pub enum Guard {
    /// The fence the call carries, with the tool's own places added.
    Fenced(Fence),
    /// No fence came with the call: only what the tool found is never read
    /// (its own [`Reads::discover`]) is refused.
    Unfenced(Reads),
}

/// What a read is checked against: a fence (not `danger-full-access`), or
/// only the places never read.
#[derive(Debug, Clone, Copy)]
pub(super) enum Checker<'a> {
    Fence(&'a Fence),
    Unfenced(&'a Reads),
}

impl Guard {
    /// The guard of a call carrying `sandbox` (the policy's fence, if any),
    /// for a tool that found `own` itself at its start.
    pub fn of(sandbox: Option<Fence>, own: &Reads) -> Guard {
        match sandbox {
            Some(fence) => Guard::Fenced(fence.with_own_reads(own)),
            None => Guard::Unfenced(own.clone()),
        }
    }

    /// The fence the call carries, if it carries one.
    pub fn fence(&self) -> Option<&Fence> {
        match self {
            Guard::Fenced(fence) => Some(fence),
            Guard::Unfenced(_) => None,
        }
    }

    /// What reads are checked against; `None` in `danger-full-access`.
    pub(super) fn checker(&self) -> Option<Checker<'_>> {
        match self {
            Guard::Fenced(f) if f.mode == Mode::DangerFullAccess => None,
            Guard::Fenced(f) => Some(Checker::Fence(f)),
            Guard::Unfenced(reads) => Some(Checker::Unfenced(reads)),
        }
    }

    /// `file`, spelled relative to `cwd`, resolved for tool `tool` to read
    /// ([`Fence::resolve_read`]; without a fence, its spelling and its
    /// resolved path are checked against what is never read).
    pub fn resolve_read(
        &self,
        tool: &str,
        cwd: &Path,
        file: &Path,
        approved: bool,
    ) -> Result<PathBuf, Refusal> {
        match self {
            Guard::Fenced(f) => f.resolve_read(tool, cwd, file, approved),
            Guard::Unfenced(reads) => {
                let target = resolve(cwd, file);
                if let Some((shown, why)) = reads.forbidden_read(cwd, file, &target) {
                    return Err(unfenced_refusal("reading", tool, &shown, &why));
                }
                Ok(target)
            }
        }
    }

    /// Whether tool `tool` may read `target` (resolved): see
    /// [`Fence::check_read`].
    pub fn check_read(&self, tool: &str, target: &Path, approved: bool) -> Result<(), Refusal> {
        match self.checker() {
            Some(c) => c.check_read(tool, target, approved),
            None => Ok(()),
        }
    }

    /// Opens `target` (resolved) for tool `tool` to read: see
    /// [`super::open_read`].
    pub fn open_read(
        &self,
        tool: &str,
        target: &Path,
        approved: bool,
    ) -> Result<Readable, ReadError> {
        super::open::open_checked(self.checker(), tool, target, approved)
    }

    /// Whether the opened file of identity `id` (from its descriptor) may
    /// be read: not a file of a secret store under another name.
    pub fn check_opened(&self, tool: &str, target: &Path, id: Identity) -> Result<(), Refusal> {
        match self.checker() {
            Some(c) => c.check_opened(tool, target, id),
            None => Ok(()),
        }
    }

    /// `file`, spelled relative to `cwd`, resolved for tool `tool` to
    /// change, and whether it may ([`Fence::resolve_write`]; without a
    /// fence, only what is never read is refused).
    pub fn resolve_write(
        &self,
        tool: &str,
        cwd: &Path,
        file: &Path,
    ) -> (PathBuf, Result<(), Refusal>) {
        match self {
            Guard::Fenced(f) => f.resolve_write(tool, cwd, file),
            Guard::Unfenced(reads) => {
                let target = resolve(cwd, file);
                let checked = match reads.forbidden_read(cwd, file, &target) {
                    Some((shown, why)) => Err(unfenced_refusal("", tool, &shown, &why)),
                    None => Ok(()),
                };
                (target, checked)
            }
        }
    }

    /// The writable root `target` lies under: the fence's deepest, or `/`
    /// without a fence (or outside every root, for an approved change).
    pub fn root_for(&self, target: &Path) -> &Path {
        self.fence()
            .and_then(|f| f.root_for(target))
            .unwrap_or(Path::new("/"))
    }
}

impl Checker<'_> {
    pub(super) fn check_read(
        self,
        tool: &str,
        target: &Path,
        approved: bool,
    ) -> Result<(), Refusal> {
        match self {
            Checker::Fence(f) => f.check_read(tool, target, approved),
            Checker::Unfenced(reads) => match reads.forbidden(target) {
                Some(why) => Err(unfenced_refusal("reading", tool, target, &why)),
                None => Ok(()),
            },
        }
    }

    /// The refusal of reading `target`, `why` being the reason.
    pub(super) fn refusal(self, tool: &str, target: &Path, why: &str) -> Refusal {
        match self {
            Checker::Fence(f) => f.read_refusal(tool, target, why),
            Checker::Unfenced(_) => unfenced_refusal("reading", tool, target, why),
        }
    }

    pub(super) fn check_opened(
        self,
        tool: &str,
        target: &Path,
        id: Identity,
    ) -> Result<(), Refusal> {
        let reads = match self {
            Checker::Fence(f) => &f.reads,
            Checker::Unfenced(reads) => reads,
        };
        match reads.forbidden_file(id) {
            Some(why) => Err(self.refusal(tool, target, &why)),
            None => Ok(()),
        }
    }
}

/// The refusal, for a call without a fence, of `verb` (`reading`) or (no
/// verb) of tool `tool`'s change of `target`, which `why` says is never
/// read.
fn unfenced_refusal(verb: &str, tool: &str, target: &Path, why: &str) -> Refusal {
    let what = if verb.is_empty() {
        format!("{tool} of {}", target.display())
    } else {
        format!("{verb} {}", target.display())
    };
    let tool = if verb.is_empty() { "the agent" } else { tool };
    Refusal {
        kind: RefusalKind::Secret,
        message: format!(
            "{what} is refused: {why}; {tool} never reads or changes it unless the permission mode is danger-full-access (this call carries no fence: no permission policy ran for it, and the tool applies what it never reads itself)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_fence_only_what_is_never_read_is_refused() {
        let own = Reads {
            homes: vec![PathBuf::from("/home/u")],
            ..Reads::default()
        };
        let g = Guard::of(None, &own);
        let r = g
            .resolve_read(
                "read",
                Path::new("/w"),
                Path::new("/proc/self/environ"),
                false,
            )
            .unwrap_err();
        assert_eq!(r.kind, RefusalKind::Secret);
        assert!(r.message.contains("carries no fence"), "{}", r.message);
        assert!(g
            .check_read("read", Path::new("/home/u/.ssh/id_rsa"), false)
            .is_err());
        assert!(g.check_read("read", Path::new("/etc/hosts"), false).is_ok());
        let (_, checked) = g.resolve_write("write", Path::new("/w"), Path::new("/home/u/.aws/x"));
        assert!(checked
            .unwrap_err()
            .message
            .starts_with("write of /home/u/.aws/x is refused"));
        let (target, checked) = g.resolve_write("write", Path::new("/w"), Path::new(".git/config"));
        assert!(checked.is_ok());
        assert_eq!(g.root_for(&target), Path::new("/"));
        // danger-full-access reads everything.
        let mut fence = crate::fence::tests::fence_of_w();
        fence.mode = Mode::DangerFullAccess;
        let g = Guard::of(Some(fence), &own);
        assert!(g
            .check_read("read", Path::new("/home/u/.ssh/id_rsa"), false)
            .is_ok());
    }
}
