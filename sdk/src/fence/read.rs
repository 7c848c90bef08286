//! The read fence: what the file tools (`read`, `grep`, `glob`, and the
//! reads of `edit`) never open in a fenced mode, whatever the spelling, and
//! the optional policy that asks before reading outside the workspace.
//!
//! Never read (in every mode but `danger-full-access`):
//!
//! - **process files**: everything under `/proc/<pid>`, `/proc/self` and
//!   `/proc/thread-self`, for every process, the harness's first. A
//!   process's directory holds its environment (the harness's holds
//!   `DEEPSEEK_API_KEY`), its memory (`mem`, `pagemap`), its open files
//!   (`fd/N`: the session logs) and its root and working directory (magic
//!   links that lead anywhere, `root` to `/`). No file there is needed by a
//!   coding agent, and telling harmless ones apart per kernel version is
//!   not sound, so the whole directory is refused; bash, which runs with a
//!   `/proc` of its own, is the way to inspect processes. `/proc/kcore` (the
//!   kernel's memory) and `/proc/kmsg` (a destructive, waiting reader of the
//!   kernel log) are refused too.
//! - **the harness's home** (`$DSH_HOME`): its sessions hold every project's
//!   conversations, its files may hold credentials (`.credentials.yaml`,
//!   `.env`), its state is private.
//! - **secret stores**: under each home directory of the user (`$HOME` and
//!   the password database's), the stores of [`HOME_STORES`] (`~/.ssh`,
//!   `~/.aws`, ...), also where a symlinked one leads; and the system's
//!   [`SYSTEM_STORES`] (`/etc/shadow`, ...) and SSH host keys
//!   (`/etc/ssh/*_key`).
//!
//! The check is made on the path as spelled (lexically), on the path as
//! [`super::resolve`] resolves it, and on the path of what was actually
//! opened ([`super::open_read`]).
//!
//! A sandboxed command (`bash`) reads through the kernel, not through this
//! check: a sandbox hides the places [`Reads::secret_places`] lists, the
//! same stores taken from the same lists.

use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{normalize, resolve, Fence, Mode, Refusal, RefusalKind};

/// Whether reads outside the workspace (and the temp directory) are asked
/// for, as writes there are: the `permission` row's `read` setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadPolicy {
    /// Read anywhere the fence allows (the default).
    #[default]
    Allow,
    /// A read outside the workspace asks the approval seam (Claude Code's
    /// behaviour); without one it is refused.
    Ask,
}

impl ReadPolicy {
    fn is_allow(&self) -> bool {
        *self == ReadPolicy::Allow
    }
}

/// Secret stores under a home directory: (path under the home, what it
/// holds). A directory covers everything in it.
pub const HOME_STORES: &[(&str, &str)] = &[
    (".ssh", "SSH keys"),
    (".aws", "AWS credentials"),
    (".gnupg", "GnuPG keys"),
    (".config/gcloud", "Google Cloud credentials"),
    (".azure", "Azure credentials"),
    (".kube", "Kubernetes credentials"),
    (".docker/config.json", "Docker registry credentials"),
    (".netrc", "login passwords"),
    (".git-credentials", "git credentials"),
    (".config/gh/hosts.yml", "GitHub CLI tokens"),
    (".cargo/credentials.toml", "the crates.io token"),
    (".cargo/credentials", "the crates.io token"),
    (".npmrc", "npm tokens"),
    (".pypirc", "PyPI tokens"),
    (".pgpass", "PostgreSQL passwords"),
    (".vault-token", "a Vault token"),
];

/// The system's secret stores: (path, what it holds). A directory covers
/// everything in it. SSH host keys (`/etc/ssh/*_key`) are matched by name.
pub const SYSTEM_STORES: &[(&str, &str)] = &[
    ("/etc/shadow", "password hashes"),
    ("/etc/shadow-", "password hashes"),
    ("/etc/gshadow", "group password hashes"),
    ("/etc/gshadow-", "group password hashes"),
    ("/etc/sudoers", "sudo rules"),
    ("/etc/sudoers.d", "sudo rules"),
    ("/etc/security/opasswd", "old password hashes"),
];

/// What the harness's home holds that not even a sandboxed command may read
/// (the file tools are refused the whole home; a command may read the
/// rest, its plugins and profiles): (path under `$DSH_HOME`, what it
/// holds).
pub const HARNESS_SECRETS: &[(&str, &str)] = &[
    ("sessions", "every project's conversations"),
    (".credentials.yaml", "stored API keys"),
    (".env", "API keys"),
];

/// Where the SSH host keys are (`*_key` in it).
const SSH_DIR: &str = "/etc/ssh";

/// What reads may never see, and whether reads outside the workspace ask
/// (part of the [`Fence`] a policy hands a tool; every path canonical).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reads {
    /// `allow` (default) or `ask`.
    #[serde(default, skip_serializing_if = "ReadPolicy::is_allow")]
    pub policy: ReadPolicy,
    /// Where reads never ask besides the workspace and the writable roots:
    /// the temp directory (results spilled to a file are read from there).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inside: Vec<PathBuf>,
    /// The harness's home (`$DSH_HOME`), as spelled and as resolved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub harness: Vec<PathBuf>,
    /// The user's home directories, whose [`HOME_STORES`] are refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub homes: Vec<PathBuf>,
    /// Where a home's secret store leads when a symbolic link is on its
    /// way (`~/.aws -> ~/dotfiles/aws`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub linked: Vec<PathBuf>,
}

impl Reads {
    /// The read fence of a harness whose home is `harness_home`, for the
    /// user running it, with reads under `temp` never asked for.
    pub fn discover(policy: ReadPolicy, harness_home: &Path, temp: &Path) -> Reads {
        let root = Path::new("/");
        let mut harness = vec![normalize(harness_home)];
        push_new(&mut harness, resolve(root, harness_home));
        let mut homes = Vec::new();
        for home in user_homes() {
            let resolved = resolve(root, &home);
            push_new(&mut homes, normalize(&home));
            push_new(&mut homes, resolved);
        }
        let mut linked = Vec::new();
        for home in &homes {
            for (store, _) in HOME_STORES {
                let spelled = home.join(store);
                let real = resolve(root, &spelled);
                if real != spelled && !homes.iter().any(|h| real.starts_with(h.join(store))) {
                    push_new(&mut linked, real);
                }
            }
        }
        Reads {
            policy,
            inside: vec![resolve(root, temp)],
            harness,
            homes,
            linked,
        }
    }

    /// Why `path` (absolute) may never be read, in words (`"it is a secret
    /// store (SSH keys, /home/u/.ssh)"`), or `None`.
    pub fn forbidden(&self, path: &Path) -> Option<String> {
        if let Some(why) = process_files(path) {
            return Some(why);
        }
        if let Some(home) = self.harness.iter().find(|h| path.starts_with(h)) {
            return Some(format!(
                "it is under the harness's home {} (its sessions hold every project's conversations, and its files may hold credentials)",
                home.display()
            ));
        }
        secret_store(path, &self.homes, &self.linked)
            .map(|(what, store)| format!("it is a secret store ({what}, {})", store.display()))
    }

    /// This read fence with `other`'s places added (the policy and
    /// [`Reads::inside`] stay this one's). A tool adds what it found itself
    /// to the fence a call carries, so a plugin on the way built with an
    /// older SDK, which drops fields it does not know, cannot open the
    /// fence.
    pub fn union(mut self, other: &Reads) -> Reads {
        for (mine, theirs) in [
            (&mut self.harness, &other.harness),
            (&mut self.homes, &other.homes),
            (&mut self.linked, &other.linked),
        ] {
            for p in theirs {
                push_new(mine, p.clone());
            }
        }
        self
    }

    /// The existing places a sandbox hides from a command so that it
    /// cannot read what this fence refuses, resolved (symbolic links
    /// followed), without duplicates: every home's [`HOME_STORES`], the
    /// stores they lead to ([`Reads::linked`]), the [`SYSTEM_STORES`], the
    /// SSH host keys, and the harness's [`HARNESS_SECRETS`]. Process files
    /// are not among them: a sandboxed command has a `/proc` of its own.
    pub fn secret_places(&self) -> Vec<PathBuf> {
        let root = Path::new("/");
        let mut places = Vec::new();
        let mut add = |place: &Path| {
            let real = resolve(root, place);
            if real.exists() {
                push_new(&mut places, real);
            }
        };
        for home in &self.homes {
            for (store, _) in HOME_STORES {
                add(&home.join(store));
            }
        }
        for store in &self.linked {
            add(store);
        }
        for (store, _) in SYSTEM_STORES {
            add(Path::new(store));
        }
        for entry in std::fs::read_dir(SSH_DIR).into_iter().flatten().flatten() {
            let path = entry.path();
            if is_host_key(&path) {
                add(&path);
            }
        }
        for home in &self.harness {
            for (secret, _) in HARNESS_SECRETS {
                add(&home.join(secret));
            }
        }
        places
    }

    /// This read fence without the harness's home (for the harness's own
    /// reads of files there, such as `$DSH_HOME/AGENTS.md`).
    pub fn without_harness(&self) -> Reads {
        Reads {
            harness: Vec::new(),
            ..self.clone()
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        *self == Reads::default()
    }
}

fn push_new(list: &mut Vec<PathBuf>, path: PathBuf) {
    if !list.contains(&path) {
        list.push(path);
    }
}

/// Why `path` names a process's own files (or the kernel's memory or log
/// reader) under `/proc`, or `None`.
pub fn process_files(path: &Path) -> Option<String> {
    let mut parts = path.components();
    if parts.next() != Some(Component::RootDir)
        || parts.next() != Some(Component::Normal(OsStr::new("proc")))
    {
        return None;
    }
    let Some(Component::Normal(first)) = parts.next() else {
        return None;
    };
    let first = first.to_str()?;
    let last = parts.next().is_none();
    match first {
        "kcore" if last => {
            return Some(
                "it is the kernel's memory (/proc/kcore: every process's secrets, the harness's included)"
                    .into(),
            )
        }
        "kmsg" if last => {
            return Some(
                "it is the kernel log's reader (/proc/kmsg: a read takes messages away from the system log and waits for more)"
                    .into(),
            )
        }
        _ => {}
    }
    let own = match first {
        "self" | "thread-self" => true,
        pid if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) => {
            pid == std::process::id().to_string() || Path::new("/proc/self/task").join(pid).exists()
        }
        _ => return None,
    };
    Some(if own {
        "it is the harness's own process (its environment holds credentials, its memory and open files its sessions)".into()
    } else {
        "it is a process's own files under /proc (a process's environment, memory and open files can hold credentials; bash has a /proc of its own to inspect processes)".into()
    })
}

/// The secret store `path` lies in: (what it holds, the store's path).
fn secret_store(
    path: &Path,
    homes: &[PathBuf],
    linked: &[PathBuf],
) -> Option<(&'static str, PathBuf)> {
    if let Some((store, what)) = SYSTEM_STORES
        .iter()
        .find(|(store, _)| path.starts_with(store))
    {
        return Some((what, PathBuf::from(store)));
    }
    if is_host_key(path) {
        return Some(("SSH host keys", path.to_owned()));
    }
    for home in homes {
        let Ok(rel) = path.strip_prefix(home) else {
            continue;
        };
        if let Some((store, what)) = HOME_STORES.iter().find(|(s, _)| rel.starts_with(s)) {
            return Some((what, home.join(store)));
        }
    }
    let store = linked.iter().find(|l| path.starts_with(l))?;
    Some((
        "a secret store of your home, through a symbolic link",
        store.clone(),
    ))
}

/// Whether `path` is an SSH host key (`/etc/ssh/*_key`).
fn is_host_key(path: &Path) -> bool {
    path.parent() == Some(Path::new(SSH_DIR))
        && path
            .file_name()
            .is_some_and(|n| n.as_bytes().ends_with(b"_key"))
}

/// The home directories of the user running the harness: `$HOME` and the
/// password database's entry for the effective user (they differ under
/// `sudo`, in containers and in tests).
pub fn user_homes() -> Vec<PathBuf> {
    let mut homes = Vec::new();
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        if home.is_absolute() {
            homes.push(home);
        }
    }
    if let Some(home) = passwd_home() {
        if home.is_absolute() && !homes.contains(&home) {
            homes.push(home);
        }
    }
    homes
}

/// The effective user's home directory in the password database.
fn passwd_home() -> Option<PathBuf> {
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: an all-zero `passwd` is a valid value of the plain C struct
    // (null pointers), filled in by getpwuid_r below.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call: `entry` and `found` are
    // writable locals, `buf` is a writable buffer of the length given.
    let rc = unsafe {
        libc::getpwuid_r(
            libc::geteuid(),
            &mut entry,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() || entry.pw_dir.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded, so `pw_dir` points to a NUL-terminated
    // string inside `buf`, which is alive here.
    let dir = unsafe { CStr::from_ptr(entry.pw_dir) };
    Some(PathBuf::from(OsStr::from_bytes(dir.to_bytes())))
}

impl Fence {
    /// Whether tool `tool` may read `target` (a path from
    /// [`super::resolve`]): never what [`Reads::forbidden`] names (outside
    /// `danger-full-access`), and with the `ask` policy only inside the
    /// workspace, a writable root or the temp directory unless the user
    /// `approved` this call.
    pub fn check_read(&self, tool: &str, target: &Path, approved: bool) -> Result<(), Refusal> {
        if self.mode == Mode::DangerFullAccess {
            return Ok(());
        }
        if let Some(why) = self.reads.forbidden(target) {
            return Err(self.read_refusal(tool, target, &why));
        }
        if self.reads.policy == ReadPolicy::Ask && !approved && !self.readable_unasked(target) {
            return Err(Refusal {
                kind: RefusalKind::Outside,
                message: format!(
                    "reading {} is outside the workspace {} (the permission row's read policy is `ask`: reads elsewhere need approval); approve the call, or set read = \"allow\" in the permission row's config",
                    target.display(),
                    self.root.display()
                ),
            });
        }
        Ok(())
    }

    /// `file`, as a tool's argument spells it relative to `cwd`, resolved
    /// for reading: refused when its spelling already names process files
    /// (`/proc/self/...`, `/proc/<pid>/root/...`), then resolved with
    /// [`super::resolve`] and checked with [`Fence::check_read`].
    pub fn resolve_read(
        &self,
        tool: &str,
        cwd: &Path,
        file: &Path,
        approved: bool,
    ) -> Result<PathBuf, Refusal> {
        if self.mode != Mode::DangerFullAccess {
            let spelled = normalize(&cwd.join(file));
            if let Some(why) = process_files(&spelled) {
                return Err(self.read_refusal(tool, &spelled, &why));
            }
        }
        let target = resolve(cwd, file);
        self.check_read(tool, &target, approved)?;
        Ok(target)
    }

    /// The refusal of reading `target`, `why` being [`Reads::forbidden`]'s
    /// words.
    pub(super) fn read_refusal(&self, tool: &str, target: &Path, why: &str) -> Refusal {
        Refusal {
            kind: RefusalKind::Secret,
            message: format!(
                "reading {} is refused: {why}; {tool} may not read it in {} mode (set DSH_PERMISSION_MODE=danger-full-access to allow it)",
                target.display(),
                self.mode
            ),
        }
    }

    /// Whether `target` lies where reads never ask: the workspace, a
    /// writable root, or [`Reads::inside`].
    fn readable_unasked(&self, target: &Path) -> bool {
        target.starts_with(&self.root)
            || self.root_for(target).is_some()
            || self.reads.inside.iter().any(|i| target.starts_with(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(home: &Path) -> Reads {
        Reads {
            policy: ReadPolicy::Allow,
            inside: vec![PathBuf::from("/tmp")],
            harness: vec![PathBuf::from("/h/.dsh")],
            homes: vec![home.to_owned()],
            linked: vec![PathBuf::from("/dotfiles/aws")],
        }
    }

    #[test]
    fn process_files_are_every_pid_self_and_thread_self() {
        let own = format!("/proc/{}/environ", std::process::id());
        for p in [
            own.as_str(),
            "/proc/self/environ",
            "/proc/thread-self/environ",
            "/proc/self",
        ] {
            let why = process_files(Path::new(p)).unwrap();
            assert!(why.contains("harness's own process"), "{p}: {why}");
        }
        let other = process_files(Path::new("/proc/1/root/etc/shadow")).unwrap();
        assert!(other.contains("a process's own files"), "{other}");
        assert!(process_files(Path::new("/proc/kmsg"))
            .unwrap()
            .contains("kernel log"));
        assert!(process_files(Path::new("/proc/kcore"))
            .unwrap()
            .contains("memory"));
        for fine in [
            "/proc/cpuinfo",
            "/proc/sys/kernel/ostype",
            "/procx/1",
            "/home/proc/1",
        ] {
            assert_eq!(process_files(Path::new(fine)), None, "{fine}");
        }
    }

    #[test]
    fn secret_stores_and_the_harness_home_are_forbidden() {
        let r = reads(Path::new("/home/u"));
        let why = |p: &str| r.forbidden(Path::new(p));
        assert!(why("/home/u/.ssh/id_rsa").unwrap().contains("SSH keys"));
        assert!(why("/home/u/.ssh").is_some());
        assert!(why("/home/u/.docker/config.json").is_some());
        assert!(why("/home/u/.config/gh/hosts.yml").is_some());
        assert!(why("/dotfiles/aws/credentials").is_some());
        assert!(why("/etc/shadow").unwrap().contains("password hashes"));
        assert!(why("/etc/ssh/ssh_host_ed25519_key")
            .unwrap()
            .contains("host keys"));
        assert!(why("/h/.dsh/sessions/x/session.jsonl")
            .unwrap()
            .contains("harness's home"));
        for fine in [
            "/home/u/.sshd",
            "/home/u/.docker/other.json",
            "/home/u/project/.ssh/README",
            "/etc/ssh/ssh_host_ed25519_key.pub",
            "/etc/ssh/sshd_config",
            "/etc/passwd",
            "/h/.dsh-other/x",
        ] {
            assert_eq!(why(fine), None, "{fine}");
        }
        assert_eq!(
            r.without_harness()
                .forbidden(Path::new("/h/.dsh/AGENTS.md")),
            None
        );
    }

    #[test]
    fn check_read_follows_the_mode_and_the_policy() {
        let mut fence = crate::fence::tests::fence_of_w();
        fence.reads = reads(Path::new("/home/u"));
        let refused = fence
            .check_read("read", Path::new("/home/u/.aws/credentials"), true)
            .unwrap_err();
        assert_eq!(refused.kind, RefusalKind::Secret);
        assert!(
            refused.message.starts_with("reading /home/u/.aws/credentials is refused: it is a secret store (AWS credentials, /home/u/.aws); read may not read it in workspace-write mode"),
            "{}",
            refused.message
        );
        assert!(fence
            .check_read("read", Path::new("/etc/hosts"), false)
            .is_ok());
        fence.reads.policy = ReadPolicy::Ask;
        let asked = fence
            .check_read("read", Path::new("/etc/hosts"), false)
            .unwrap_err();
        assert_eq!(asked.kind, RefusalKind::Outside);
        assert!(fence
            .check_read("read", Path::new("/etc/hosts"), true)
            .is_ok());
        assert!(fence
            .check_read("read", Path::new("/w/a.txt"), false)
            .is_ok());
        assert!(fence
            .check_read("read", Path::new("/tmp/spill.txt"), false)
            .is_ok());
        let spelled = fence
            .resolve_read(
                "read",
                Path::new("/w"),
                Path::new("/proc/self/cwd/../environ"),
                false,
            )
            .unwrap_err();
        assert!(
            spelled.message.contains("harness's own process"),
            "{}",
            spelled.message
        );
        fence.mode = Mode::DangerFullAccess;
        assert!(fence
            .check_read("read", Path::new("/home/u/.ssh/id_rsa"), false)
            .is_ok());
    }

    #[test]
    fn secret_places_are_the_existing_stores_resolved_once() {
        let dir = crate::tempdir::PrivateDir::new("dsh-secret-places-test-").unwrap();
        let base = dir.path().canonicalize().unwrap();
        let home = base.join("home");
        let dotfiles = base.join("dotfiles/aws");
        let harness = base.join("dsh");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(&dotfiles).unwrap();
        std::fs::create_dir_all(harness.join("sessions")).unwrap();
        std::fs::create_dir_all(harness.join("plugins")).unwrap();
        std::fs::write(home.join(".netrc"), "machine x").unwrap();
        std::os::unix::fs::symlink(&dotfiles, home.join(".aws")).unwrap();
        let r = Reads {
            policy: ReadPolicy::Allow,
            inside: Vec::new(),
            harness: vec![harness.clone()],
            homes: vec![home.clone(), home.join(".")],
            linked: vec![dotfiles.clone()],
        };
        let places = r.secret_places();
        for want in [
            home.join(".ssh"),
            home.join(".netrc"),
            dotfiles.clone(),
            harness.join("sessions"),
        ] {
            assert_eq!(
                places.iter().filter(|p| **p == want).count(),
                1,
                "{want:?}: {places:?}"
            );
            assert!(r.forbidden(&want).is_some(), "{want:?}");
        }
        for absent in [
            home.join(".gnupg"),
            harness.join("plugins"),
            home.join(".aws"),
        ] {
            assert!(!places.contains(&absent), "{absent:?}: {places:?}");
        }
    }
}
