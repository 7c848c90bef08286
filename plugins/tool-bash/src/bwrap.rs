//! The bubblewrap command line of a fenced command.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use dsh_sdk::fence::Fence;

use crate::hide::Hidden;
use crate::kernel::KernelFiles;

/// What the command line needs besides the fence.
pub struct Options<'a> {
    /// The temp directory, as a private scratch tmpfs (read-only mode).
    pub scratch: Option<&'a Path>,
    /// Read-only again under the writable roots ([`crate::protect`]).
    pub read_only: &'a [PathBuf],
    /// Not readable at all ([`crate::hide`]).
    pub hidden: &'a Hidden,
    /// The kernel's files covered on the fresh `/proc` and `/sys`
    /// ([`crate::kernel`]).
    pub kernel: &'a KernelFiles,
    /// The host's network (`network = true`); otherwise a network
    /// namespace of its own.
    pub network: bool,
    /// The descriptor bubblewrap reads the seccomp program from.
    pub seccomp_fd: Option<i32>,
    /// Whether the harness runs as root (then a user namespace too, in
    /// which no further user namespace can be made).
    pub root: bool,
}

/// `bwrap … -- bash -c command`.
pub fn command(bwrap: &Path, fence: &Fence, o: &Options<'_>, command: &str) -> Command {
    let mut cmd = Command::new(bwrap);
    cmd.args(args(fence, o));
    cmd.args(["--", "bash", "-c", command]);
    cmd
}

fn args(fence: &Fence, o: &Options<'_>) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |xs: &[&std::ffi::OsStr]| a.extend(xs.iter().map(|s| s.to_os_string()));
    let flag = |f: &'static str| std::ffi::OsStr::new(f);
    for f in ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"] {
        push(&[flag(f)]);
    }
    // Right after the fresh /proc: its sysctls and sysrq-trigger read-only
    // (uid 0 here is the host's, and they check only the uid), the
    // kernel's private files covered ([`crate::kernel`]). The sources of
    // `--ro-bind` are the host's: its /proc/sys shows the same sysctls
    // (each shows the namespaces of whoever reads it).
    for p in &o.kernel.read_only {
        push(&[flag("--ro-bind"), p.as_os_str(), p.as_os_str()]);
    }
    for d in &o.kernel.masked_dirs {
        let d = d.as_os_str();
        push(&[flag("--perms"), flag("0000"), flag("--tmpfs"), d]);
        push(&[flag("--remount-ro"), d]);
    }
    for f in &o.kernel.masked_files {
        push(&[flag("--ro-bind"), o.hidden.blank.as_os_str(), f.as_os_str()]);
    }
    for f in [
        "--unshare-pid",
        "--unshare-ipc",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
    ] {
        push(&[flag(f)]);
    }
    if o.root {
        // Root's capabilities, even regained, would hold only in here; uid
        // and gid 0 stay 0 (its files stay its files). No user namespace
        // can be made inside (`user.max_user_namespaces` of this one is
        // 0): one would hold every capability over mounts of its own.
        for f in [
            "--unshare-user",
            "--disable-userns",
            "--uid",
            "0",
            "--gid",
            "0",
        ] {
            push(&[flag(f)]);
        }
    }
    if !o.network {
        push(&[flag("--unshare-net")]);
    }
    for w in fence.writable.iter().filter(|w| w.exists()) {
        push(&[flag("--bind"), w.as_os_str(), w.as_os_str()]);
    }
    if let Some(scratch) = o.scratch {
        push(&[flag("--tmpfs"), scratch.as_os_str()]);
        // The workspace stays visible (read-only) if the scratch covers it.
        if fence.root.starts_with(scratch) {
            let r = fence.root.as_os_str();
            push(&[flag("--ro-bind"), r, r]);
        }
    }
    for p in o.read_only {
        if p.exists() && fence.root_for(p).is_some() {
            push(&[flag("--ro-bind"), p.as_os_str(), p.as_os_str()]);
        }
    }
    // Last, over everything above (a store under a writable root too).
    for d in &o.hidden.dirs {
        let d = d.as_os_str();
        push(&[flag("--perms"), flag("0000"), flag("--tmpfs"), d]);
        push(&[flag("--remount-ro"), d]);
    }
    for f in &o.hidden.files {
        push(&[flag("--ro-bind"), o.hidden.blank.as_os_str(), f.as_os_str()]);
    }
    if let Some(fd) = o.seccomp_fd {
        let fd = OsString::from(fd.to_string());
        push(&[flag("--seccomp"), &fd]);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::fence::Mode;

    /// Nothing hidden.
    fn nothing() -> Hidden {
        Hidden {
            dirs: Vec::new(),
            files: Vec::new(),
            blank: PathBuf::from("/p/blank"),
        }
    }

    /// No kernel files to cover.
    static NO_KERNEL_FILES: KernelFiles = KernelFiles {
        read_only: Vec::new(),
        masked_dirs: Vec::new(),
        masked_files: Vec::new(),
    };

    /// The network on, no seccomp program, not root, nothing read-only.
    fn plain(hidden: &Hidden) -> Options<'_> {
        Options {
            scratch: None,
            read_only: &[],
            hidden,
            kernel: &NO_KERNEL_FILES,
            network: true,
            seccomp_fd: None,
            root: false,
        }
    }

    /// The command line of a `workspace-write` fence of `/` with `o`, as
    /// one text.
    fn line(o: &Options<'_>) -> String {
        let fence = Fence::new(Mode::WorkspaceWrite, Path::new("/"), Path::new("/tmp"), &[]);
        args(&fence, o)
            .join(std::ffi::OsStr::new(" "))
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn root_without_network_gets_a_user_and_a_network_namespace_and_no_capabilities() {
        let nothing = nothing();
        let a = line(&Options {
            network: false,
            seccomp_fd: Some(7),
            root: true,
            ..plain(&nothing)
        });
        for part in [
            "--new-session",
            "--cap-drop ALL",
            "--unshare-ipc",
            "--unshare-user --disable-userns --uid 0 --gid 0",
            "--unshare-net",
            "--seccomp 7",
        ] {
            assert!(a.contains(part), "{part}: {a}");
        }
        let a = line(&plain(&nothing));
        assert!(a.contains("--cap-drop ALL"), "{a}");
        assert!(!a.contains("--unshare-net"), "{a}");
        assert!(!a.contains("--unshare-user"), "{a}");
    }

    #[test]
    fn the_kernel_files_are_covered_right_after_the_fresh_proc() {
        let hidden = nothing();
        let kernel = KernelFiles {
            read_only: vec![PathBuf::from("/proc/sys")],
            masked_dirs: vec![PathBuf::from("/proc/acpi")],
            masked_files: vec![PathBuf::from("/proc/keys")],
        };
        let a = line(&Options {
            kernel: &kernel,
            ..plain(&hidden)
        });
        assert!(
            a.contains(
                "--proc /proc --ro-bind /proc/sys /proc/sys --perms 0000 --tmpfs /proc/acpi --remount-ro /proc/acpi --ro-bind /p/blank /proc/keys --unshare-pid"
            ),
            "{a}"
        );
    }

    #[test]
    fn hidden_places_come_last_unreadable_and_read_only() {
        let hidden = Hidden {
            dirs: vec![PathBuf::from("/h/.ssh")],
            files: vec![PathBuf::from("/h/.netrc")],
            ..nothing()
        };
        let read_only = [PathBuf::from("/tmp")];
        let a = line(&Options {
            read_only: &read_only,
            ..plain(&hidden)
        });
        assert!(
            a.ends_with(
                "--ro-bind /tmp /tmp --perms 0000 --tmpfs /h/.ssh --remount-ro /h/.ssh --ro-bind /p/blank /h/.netrc"
            ),
            "{a}"
        );
    }
}
