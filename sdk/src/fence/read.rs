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
//!   kernel log) are refused too, and so are the harness's descriptors
//!   under `/dev` (`/dev/fd/N`, `/dev/stdin`, `/dev/stdout`,
//!   `/dev/stderr`) whatever they resolve to, and any path whose
//!   resolution passes through a magic link of procfs.
//! - **the harness's home** (`$DSH_HOME`): its sessions hold every project's
//!   conversations, its files may hold credentials (`.credentials.yaml`,
//!   `.env`), its state is private.
//! - **secret stores**: under each home directory of the user (`$HOME` and
//!   the password database's; as root, every user's), the stores of
//!   [`HOME_STORES`] (`~/.ssh`, `~/.aws`, shell histories, ...), also where
//!   a symlinked one leads; under each runtime directory, the
//!   [`RUNTIME_STORES`]; the system's [`SYSTEM_STORES`] (`/etc/shadow`,
//!   ...) and SSH host keys (`/etc/ssh/*_key`); and what discovery found
//!   inside the stores ([`super::found`]): where their links lead (GNU
//!   stow), and the identity of each of their files.
//!
//! The check is made on the path as spelled (lexically), on the path as
//! [`super::resolve`] resolves it, and on the path and identity of what
//! was actually opened ([`super::open_read`]).
//!
//! A sandboxed command (`bash`) reads through the kernel, not through this
//! check: a sandbox hides the places [`Reads::secret_places`] lists, the
//! same stores taken from the same lists.

use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::found::{passwd_homes, running_as_root, runtime_dirs, Found};
use super::{normalize, resolve, Fence, Mode, Refusal, RefusalKind};
use crate::file::{crosses_magic_link, Identity};

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
    (
        ".bash_history",
        "shell history (commands typed with their secrets)",
    ),
    (
        ".zsh_history",
        "shell history (commands typed with their secrets)",
    ),
    (
        ".local/share/fish/fish_history",
        "shell history (commands typed with their secrets)",
    ),
    (".python_history", "Python history"),
    (".psql_history", "PostgreSQL history"),
    (".mysql_history", "MySQL history"),
    (".node_repl_history", "Node.js history"),
    (".claude/.credentials.json", "Claude Code credentials"),
    (".codex/auth.json", "Codex credentials"),
    (".config/git/credentials", "git credentials"),
    (
        ".config/containers/auth.json",
        "container registry credentials",
    ),
    (".m2/settings.xml", "Maven repository passwords"),
    (".gradle/gradle.properties", "Gradle repository credentials"),
    (
        ".terraform.d/credentials.tfrc.json",
        "Terraform Cloud tokens",
    ),
    (".config/rclone", "rclone remotes' credentials"),
    (".s3cfg", "S3 credentials"),
    (".password-store", "pass passwords"),
    (".local/share/keyrings", "desktop keyrings"),
];

/// Secret stores under a user's runtime directory (`$XDG_RUNTIME_DIR`,
/// and as root every `/run/user/<uid>`): (path under it, what it holds).
pub const RUNTIME_STORES: &[(&str, &str)] =
    &[("containers/auth.json", "container registry credentials")];

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
    ("/etc/ssl/private", "TLS private keys"),
    ("/etc/pki/tls/private", "TLS private keys"),
    ("/etc/letsencrypt", "Let's Encrypt keys"),
    ("/etc/krb5.keytab", "Kerberos keys"),
    ("/etc/kubernetes", "Kubernetes credentials"),
    (
        "/etc/NetworkManager/system-connections",
        "network passwords",
    ),
    ("/run/secrets", "mounted secrets"),
    ("/var/run/secrets", "mounted secrets"),
];

/// What the harness's home holds that not even a sandboxed command may read
/// (the file tools are refused the whole home; a command may read the
/// rest, its plugins and profiles): (path under `$DSH_HOME`, what it
/// holds).
pub const HARNESS_SECRETS: &[(&str, &str)] = &[
    ("sessions", "every project's conversations"),
    (".credentials.yaml", "stored API keys"),
    (".env", "API keys"),
    (crate::api::mcp::AUTH_DIR, "MCP servers' OAuth tokens"),
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
    /// What discovery found besides (other users' homes as root, runtime
    /// directories, where the links inside stores lead, the identity of
    /// every store file): never sent with a fence, shared, not copied.
    #[serde(skip)]
    pub found: Arc<Found>,
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
                // Nothing there (one `lstat`): nothing to lead anywhere.
                if spelled.symlink_metadata().is_err() {
                    continue;
                }
                let real = resolve(root, &spelled);
                if real != spelled && !homes.iter().any(|h| real.starts_with(h.join(store))) {
                    push_new(&mut linked, real);
                }
            }
        }
        let as_root = running_as_root();
        let mut found = Found::default();
        let others = if as_root { passwd_homes() } else { Vec::new() };
        for home in others {
            let resolved = resolve(root, &home);
            for home in [normalize(&home), resolved] {
                if !homes.contains(&home) {
                    push_new(&mut found.homes, home);
                }
            }
        }
        for dir in runtime_dirs(as_root) {
            push_new(&mut found.runtime, normalize(&dir));
            push_new(&mut found.runtime, resolve(root, &dir));
        }
        let mut reads = Reads {
            policy,
            inside: vec![resolve(root, temp)],
            harness,
            homes,
            linked,
            found: Arc::new(found),
        };
        reads.survey();
        reads
    }

    /// Walks every existing store (bounded, [`Found::survey`]) for where
    /// the links inside lead and the identities of its files, and records
    /// the places that a store links to out of the stores.
    fn survey(&mut self) {
        // Every home, for the survey to tell a link to one (too broad to
        // refuse); taken out again below.
        let mut found = Found {
            homes: self
                .homes
                .iter()
                .chain(&self.found.homes)
                .cloned()
                .collect(),
            ..Found::default()
        };
        let covered = |p: &Path| self.forbidden(p).is_some();
        for place in self.store_places() {
            found.survey(&place, &covered);
        }
        // As root, a store of another user that is a link leads somewhere
        // the path checks must know too.
        for home in &self.found.homes {
            for (store, _) in HOME_STORES {
                let spelled = home.join(store);
                if spelled.symlink_metadata().is_err() {
                    continue;
                }
                let real = resolve(Path::new("/"), &spelled);
                if real != spelled && !covered(&real) && !found.too_broad(&real) {
                    found.targets.insert(real);
                }
            }
        }
        found.homes.clear();
        self.found = Arc::new(self.found.merged(&found));
    }

    /// Every place a store may be, spelled: each home's [`HOME_STORES`],
    /// each runtime directory's [`RUNTIME_STORES`], the linked stores, the
    /// [`SYSTEM_STORES`], the SSH host keys and the harness's
    /// [`HARNESS_SECRETS`].
    fn store_places(&self) -> Vec<PathBuf> {
        let mut places = Vec::new();
        for home in self.homes.iter().chain(&self.found.homes) {
            places.extend(HOME_STORES.iter().map(|(s, _)| home.join(s)));
        }
        for dir in &self.found.runtime {
            places.extend(RUNTIME_STORES.iter().map(|(s, _)| dir.join(s)));
        }
        places.extend(self.linked.iter().cloned());
        places.extend(SYSTEM_STORES.iter().map(|(s, _)| PathBuf::from(s)));
        for entry in std::fs::read_dir(SSH_DIR).into_iter().flatten().flatten() {
            if is_host_key(&entry.path()) {
                places.push(entry.path());
            }
        }
        for home in &self.harness {
            places.extend(HARNESS_SECRETS.iter().map(|(s, _)| home.join(s)));
        }
        places
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
        self.secret_store(path)
            .map(|(what, store)| format!("it is a secret store ({what}, {})", store.display()))
    }

    /// Why the file of identity `id` (an opened file's) may never be read:
    /// it is a file found in a secret store at discovery, here under
    /// another name (a hard link, the target of a link, a bind mount).
    pub fn forbidden_file(&self, id: Identity) -> Option<String> {
        self.found.files.get(&id).map(|store| {
            format!(
                "it is the secret store file {} under another name (a hard link, or where a link leads)",
                store.display()
            )
        })
    }

    /// Why `file`, spelled relative to `cwd` and resolved to `resolved`
    /// ([`super::resolve`]), may never be read, in this order: its
    /// spelling (normalized) names what is never read (a store reached
    /// through a link, `/dev/fd/N`, `/proc/self/...`), its resolved path
    /// does, or its resolution passes through a magic link of a process
    /// (whose resolved path says nothing of what is read). The path the
    /// words are about, and the words.
    pub fn forbidden_read(
        &self,
        cwd: &Path,
        file: &Path,
        resolved: &Path,
    ) -> Option<(PathBuf, String)> {
        let spelled = normalize(&cwd.join(file));
        if let Some(why) = self.forbidden(&spelled) {
            return Some((spelled, why));
        }
        if spelled == resolved {
            return None;
        }
        if let Some(why) = self.forbidden(resolved) {
            return Some((resolved.to_owned(), why));
        }
        // Without a link on the way the resolved path is the spelled one
        // (a magic link always leads elsewhere than itself).
        if crosses_magic_link(&spelled) {
            let why = "it passes through a magic link of a process (/proc/<pid>/fd/N, cwd, root or exe, and /dev/fd/N, /dev/stdin, ... that lead to them): such a link leads to a process's open file or directory whatever path it shows".to_owned();
            return Some((spelled, why));
        }
        None
    }

    /// The secret store `path` lies in: (what it holds, the store's path).
    fn secret_store(&self, path: &Path) -> Option<(&'static str, PathBuf)> {
        let bytes = path.as_os_str().as_bytes();
        if let Some((store, what)) = SYSTEM_STORES
            .iter()
            .find(|(store, _)| under(bytes, store.as_bytes()))
        {
            return Some((what, PathBuf::from(store)));
        }
        if is_host_key(path) {
            return Some(("SSH host keys", path.to_owned()));
        }
        let in_dirs = |dirs: &[PathBuf], stores: &'static [(&'static str, &'static str)]| {
            dirs.iter().find_map(|dir| {
                let rel = strip(bytes, dir.as_os_str().as_bytes())?;
                let (store, what) = stores.iter().find(|(s, _)| under(rel, s.as_bytes()))?;
                Some((*what, dir.join(store)))
            })
        };
        let found = &self.found;
        if let Some(hit) = in_dirs(&self.homes, HOME_STORES)
            .or_else(|| in_dirs(&found.homes, HOME_STORES))
            .or_else(|| in_dirs(&found.runtime, RUNTIME_STORES))
        {
            return Some(hit);
        }
        if let Some(store) = self.linked.iter().find(|l| path.starts_with(l)) {
            return Some((
                "a secret store of your home, through a symbolic link",
                store.clone(),
            ));
        }
        if found.targets.is_empty() {
            return None;
        }
        let target = path.ancestors().find(|a| found.targets.contains(*a))?;
        Some((
            "where a link inside a secret store leads",
            target.to_owned(),
        ))
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
            if mine == theirs {
                continue;
            }
            for p in theirs {
                push_new(mine, p.clone());
            }
        }
        if self.found.is_empty() || Arc::ptr_eq(&self.found, &other.found) {
            self.found = other.found.clone();
        } else if !other.found.is_empty() {
            self.found = Arc::new(self.found.merged(&other.found));
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
        for place in self.store_places() {
            let real = resolve(root, &place);
            if real.exists() {
                push_new(&mut places, real);
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

/// The names of the harness's own descriptors under `/dev`: `/dev/fd`
/// (and everything in it), `/dev/stdin`, `/dev/stdout`, `/dev/stderr`.
const DEV_DESCRIPTORS: [&str; 4] = ["/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr"];

/// Why `path` names a process's own files (or the kernel's memory or log
/// reader) under `/proc`, or the harness's own descriptors under `/dev`,
/// or `None`.
pub fn process_files(path: &Path) -> Option<String> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.starts_with(b"/dev/") && DEV_DESCRIPTORS.iter().any(|d| under(bytes, d.as_bytes())) {
        return Some(
            "it is one of the harness's own open files (/dev/fd/N, /dev/stdin, /dev/stdout and /dev/stderr are its descriptors: its event stream, its logs), whatever path it resolves to".into(),
        );
    }
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

/// Whether the path `path` is `prefix` or lies under it (both normalized,
/// as bytes: what `Path::starts_with` says of them, without splitting
/// components).
fn under(path: &[u8], prefix: &[u8]) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest[0] == b'/' || prefix.ends_with(b"/"),
        None => false,
    }
}

/// `path` relative to `dir` (without the separator), when under it.
fn strip<'p>(path: &'p [u8], dir: &[u8]) -> Option<&'p [u8]> {
    let rest = path.strip_prefix(dir)?;
    if dir.ends_with(b"/") {
        return Some(rest);
    }
    match rest.split_first() {
        Some((b'/', rel)) => Some(rel),
        _ => None,
    }
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
        self.check_read_policy(target, approved)
    }

    /// With the `ask` policy, whether `target` may be read unasked (or the
    /// user `approved` this call).
    fn check_read_policy(&self, target: &Path, approved: bool) -> Result<(), Refusal> {
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
    /// for reading ([`super::resolve`]): refused when its spelling or its
    /// resolved path names what is never read (`/proc/self/...`,
    /// `/dev/fd/N`, `~/.ssh/id_rsa` that links out of the store) or it
    /// passes through a magic link ([`Reads::forbidden_read`]), then
    /// checked against the read policy as [`Fence::check_read`] does.
    pub fn resolve_read(
        &self,
        tool: &str,
        cwd: &Path,
        file: &Path,
        approved: bool,
    ) -> Result<PathBuf, Refusal> {
        let target = resolve(cwd, file);
        if self.mode == Mode::DangerFullAccess {
            return Ok(target);
        }
        if let Some((shown, why)) = self.reads.forbidden_read(cwd, file, &target) {
            return Err(self.read_refusal(tool, &shown, &why));
        }
        self.check_read_policy(&target, approved)?;
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
            found: Arc::default(),
        }
    }

    #[test]
    fn a_stow_layout_is_refused_under_every_name() {
        let dir = crate::tempdir::PrivateDir::new("dsh-stow-test-").unwrap();
        let base = dir.path().canonicalize().unwrap();
        let home = base.join("home");
        let stowed = base.join("dotfiles/ssh/.ssh");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(home.join(".kube")).unwrap();
        std::fs::create_dir_all(home.join("clusters")).unwrap();
        std::fs::create_dir_all(&stowed).unwrap();
        std::fs::write(stowed.join("id_rsa"), "KEY").unwrap();
        std::fs::write(home.join("clusters/prod.yaml"), "token: x").unwrap();
        std::os::unix::fs::symlink("../../dotfiles/ssh/.ssh/id_rsa", home.join(".ssh/id_rsa"))
            .unwrap();
        std::os::unix::fs::symlink(home.join("clusters/prod.yaml"), home.join(".kube/config"))
            .unwrap();
        let mut r = Reads {
            homes: vec![home.clone()],
            ..Reads::default()
        };
        // Before the survey only the store's own path is known.
        assert!(r.forbidden(&stowed.join("id_rsa")).is_none());
        r.survey();
        for p in [
            home.join(".ssh/id_rsa"),
            stowed.join("id_rsa"),
            home.join("clusters/prod.yaml"),
        ] {
            assert!(r.forbidden(&p).is_some(), "{p:?}: {:?}", r.found);
        }
        assert!(r.forbidden(&home.join("clusters/dev.yaml")).is_none());
        // The spelled path through the link is refused as spelled.
        let (spelled, _) = r
            .forbidden_read(
                &home,
                Path::new(".ssh/../.ssh/id_rsa"),
                &stowed.join("id_rsa"),
            )
            .unwrap();
        assert_eq!(spelled, home.join(".ssh/id_rsa"));
        // A hard link elsewhere has the key's identity.
        std::fs::hard_link(stowed.join("id_rsa"), base.join("innocent.txt")).unwrap();
        let meta = std::fs::metadata(base.join("innocent.txt")).unwrap();
        let why = r.forbidden_file(crate::file::identity_of(&meta)).unwrap();
        assert!(why.contains("under another name"), "{why}");
        // A fence carrying no `found` (from the wire) gets the tool's.
        let wire: Reads = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert!(wire.found.is_empty());
        assert!(wire.union(&r).forbidden(&stowed.join("id_rsa")).is_some());
    }

    #[test]
    fn the_new_stores_and_the_descriptors_are_refused() {
        let mut r = reads(Path::new("/home/u"));
        r.found = Arc::new(Found {
            runtime: vec![PathBuf::from("/run/user/1000")],
            homes: vec![PathBuf::from("/home/alice")],
            ..Found::default()
        });
        for p in [
            "/home/u/.bash_history",
            "/home/u/.local/share/fish/fish_history",
            "/home/u/.claude/.credentials.json",
            "/home/u/.config/rclone/rclone.conf",
            "/home/u/.password-store/x.gpg",
            "/home/alice/.ssh/id_ed25519",
            "/run/user/1000/containers/auth.json",
            "/etc/ssl/private/server.key",
            "/run/secrets/db",
            "/var/run/secrets/kubernetes.io/serviceaccount/token",
            "/etc/NetworkManager/system-connections/home.nmconnection",
            "/dev/fd/1",
            "/dev/fd",
            "/dev/stdin",
            "/dev/stdout",
            "/dev/stderr",
        ] {
            assert!(r.forbidden(Path::new(p)).is_some(), "{p}");
        }
        for fine in [
            "/home/u/.bashrc",
            "/home/u/.claude/settings.json",
            "/home/alice/src/main.rs",
            "/run/user/1000/bus",
            "/dev/null",
            "/dev/fdx",
            "/etc/ssl/certs/ca.pem",
        ] {
            assert_eq!(r.forbidden(Path::new(fine)), None, "{fine}");
        }
        assert!(process_files(Path::new("/dev/fd/3"))
            .unwrap()
            .contains("harness's own open files"));
    }

    #[test]
    fn a_link_to_a_descriptor_is_refused_whatever_it_resolves_to() {
        let dir = crate::tempdir::PrivateDir::new("dsh-magic-test-").unwrap();
        let base = dir.path().canonicalize().unwrap();
        std::fs::write(base.join("events.jsonl"), "the event stream").unwrap();
        let held = std::fs::File::open(base.join("events.jsonl")).unwrap();
        let fd = {
            use std::os::fd::AsRawFd;
            held.as_raw_fd()
        };
        std::os::unix::fs::symlink(format!("/dev/fd/{fd}"), base.join("out")).unwrap();
        let r = Reads::default();
        let resolved = resolve(&base, Path::new("out"));
        assert_eq!(
            resolved,
            base.join("events.jsonl"),
            "the link resolves to the file"
        );
        let (_, why) = r
            .forbidden_read(&base, Path::new("out"), &resolved)
            .unwrap();
        assert!(why.contains("magic link"), "{why}");
        let (_, why) = r
            .forbidden_read(&base, Path::new(&format!("/dev/fd/{fd}")), &resolved)
            .unwrap();
        assert!(why.contains("own open files"), "{why}");
        assert!(r
            .forbidden_read(&base, Path::new("events.jsonl"), &resolved)
            .is_none());
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
            found: Arc::default(),
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
