//! Each workspace's identity, pinned the first time an agent's call names
//! it: the working directory as resolved then (symbolic links followed)
//! and the (device, inode) of that directory. A fence is built from the
//! pinned root on every call, so a workspace renamed away and replaced
//! (`mv /tmp/ws /tmp/ws.real && ln -s /etc /tmp/ws`: `/tmp` is writable to
//! a command) cannot move the fence: once the working directory no longer
//! resolves to the same path and the same directory, every call of that
//! agent there is refused. A pin lasts as long as its agent.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use dsh_sdk::fence::resolve;
use dsh_sdk::file::{identity_of, Identity};

/// A pinned workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pin {
    /// The working directory, resolved when first seen.
    root: PathBuf,
    /// Its identity then (`None`: it did not exist).
    identity: Option<Identity>,
}

impl Pin {
    /// `cwd` as it resolves now.
    fn of(cwd: &str) -> Pin {
        let root = resolve(Path::new("/"), Path::new(cwd));
        let identity = std::fs::metadata(&root).ok().map(|m| identity_of(&m));
        Pin { root, identity }
    }
}

/// The pinned workspaces, by (agent, working directory as spelled).
#[derive(Clone, Default)]
pub struct Pins {
    pins: Rc<RefCell<HashMap<(String, String), Pin>>>,
}

impl Pins {
    /// The workspace `cwd` of `agent`, resolved: pinned when first seen,
    /// then the pinned root while `cwd` still leads to the same directory;
    /// a message saying what changed when it does not.
    pub fn root(&self, agent: &str, cwd: &str) -> Result<PathBuf, String> {
        let now = Pin::of(cwd);
        let key = (agent.to_owned(), cwd.to_owned());
        let mut pins = self.pins.borrow_mut();
        let Some(pinned) = pins.get(&key) else {
            let root = now.root.clone();
            pins.insert(key, now);
            return Ok(root);
        };
        if *pinned == now {
            return Ok(now.root);
        }
        let became = if now.root != pinned.root {
            format!("it now resolves to {}", now.root.display())
        } else if now.identity.is_none() {
            "it no longer exists".to_owned()
        } else {
            "another directory took its place".to_owned()
        };
        Err(format!(
            "the workspace {cwd} was replaced since this session started ({became}; it was {}); refusing tool calls there: start a new session",
            pinned.root.display()
        ))
    }

    /// Forgets the pins of `agent` (disposed).
    pub fn forget(&self, agent: &str) {
        self.pins.borrow_mut().retain(|(a, _), _| a != agent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_replaced_by_a_link_is_refused() {
        let base = std::env::temp_dir().join(format!("dsh-pin-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let ws = base.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(base.join("elsewhere")).unwrap();
        let cwd = ws.to_str().unwrap();
        let pins = Pins::default();
        let root = pins.root("a1", cwd).unwrap();
        assert_eq!(pins.root("a1", cwd).unwrap(), root);
        std::fs::rename(&ws, base.join("ws.real")).unwrap();
        std::os::unix::fs::symlink(base.join("elsewhere"), &ws).unwrap();
        let refused = pins.root("a1", cwd).unwrap_err();
        assert!(
            refused.contains("was replaced since this session started (it now resolves to")
                && refused.ends_with("start a new session"),
            "{refused}"
        );
        // Another directory under the same name is refused too.
        std::fs::remove_file(&ws).unwrap();
        std::fs::create_dir(&ws).unwrap();
        let refused = pins.root("a1", cwd).unwrap_err();
        assert!(
            refused.contains("another directory took its place"),
            "{refused}"
        );
        // A new agent pins what is there now; a disposed one is forgotten.
        assert!(pins.root("a2", cwd).is_ok());
        pins.forget("a1");
        assert!(pins.root("a1", cwd).is_ok());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
