//! `bash` as an attacker runs it, under both sandboxes (bubblewrap, and the
//! Landlock fallback with its own namespaces): metadata changes outside the
//! fence, the harness's own files, the harness's credentials through
//! `/proc`, commands that outlive their call, output that never ends,
//! capabilities (remount and unmount as root), the terminal, the disks,
//! `.git`, the network, credentials in the environment, job and process
//! limits, and the secrets the read fence refuses (`cat ~/.ssh/id_rsa`,
//! another project's session log, `/etc/shadow`); then the second review's
//! holes: the kernel's sysctls written as the host's uid 0, a `SOCK_RAW`
//! socket pair, the host's SysV shared memory, nested and separate git
//! directories, and the default process bound.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_testkit::tools::{self, run, sh, text_of, SANDBOXES};
use dsh_testkit::{wait_gone, TempDir, TestHost};
use serde_json::json;

async fn bash_host(mode: &str, sandbox: &str) -> TestHost {
    tools::bash_host(mode, sandbox, "").await
}

/// A [`bash_host`] and a fresh workspace (`TempDir` labelled `label`).
async fn host_and_ws(mode: &str, sandbox: &str, label: &str) -> (TestHost, TempDir) {
    (bash_host(mode, sandbox).await, TempDir::new(label))
}

/// The text of what `command` printed, run by [`sh`].
async fn sh_text(t: &TestHost, ws: &Path, command: &str) -> String {
    text_of(&sh(t, ws, command).await)
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| m.uid()).ok() == Some(0)
}

/// A file outside every writable root (`/var/tmp` is not the temp dir).
struct Outside(PathBuf);

impl Outside {
    fn new(label: &str) -> Outside {
        let p = Path::new("/var/tmp").join(format!("dsh-{label}-{}", std::process::id()));
        std::fs::write(&p, "outside\n").unwrap();
        Outside(p)
    }

    fn meta(&self) -> (u32, u32, i64, String) {
        let m = std::fs::metadata(&self.0).unwrap();
        let xattr = std::process::Command::new("getfattr")
            .arg("-d")
            .arg(&self.0)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        (m.mode(), m.uid(), m.mtime(), xattr)
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn metadata_attack(target: &Path) -> String {
    let t = target.display();
    format!(
        "chmod 777 {t}; chown 1234:1234 {t}; touch -d '2001-01-01' {t}; setfattr -n user.dsh -v pwned {t}; echo done"
    )
}

#[tokio::test]
async fn metadata_outside_the_fence_cannot_change() {
    for sandbox in SANDBOXES {
        let (t, ws) = host_and_ws("workspace-write", sandbox, "meta-ws").await;
        let outside = Outside::new(&format!("meta-{sandbox}"));
        let before = outside.meta();
        let r = sh(&t, ws.path(), &metadata_attack(&outside.0)).await;
        assert!(text_of(&r).contains("done"), "{sandbox}: {r}");
        assert_eq!(outside.meta(), before, "{sandbox}: {r}");
        // Inside the workspace, the same changes work.
        std::fs::write(ws.path().join("mine"), "x").unwrap();
        let r = sh(
            &t,
            ws.path(),
            "chmod 600 mine && touch -d 2001-01-01 mine && echo ok",
        )
        .await;
        assert_eq!(text_of(&r), "ok", "{sandbox}: {r}");
        assert_eq!(
            std::fs::metadata(ws.path().join("mine")).unwrap().mode() & 0o777,
            0o600
        );
        t.shutdown().await;
    }
}

#[tokio::test]
async fn read_only_mode_changes_nothing_not_even_metadata() {
    for sandbox in SANDBOXES {
        let (t, ws) = host_and_ws("read-only", sandbox, "ro-ws").await;
        let file = ws.path().join("f.txt");
        std::fs::write(&file, "x").unwrap();
        let before = std::fs::metadata(&file).unwrap();
        let scratch =
            std::env::temp_dir().join(format!("dsh-scratch-{sandbox}-{}", std::process::id()));
        let r = sh(
            &t,
            ws.path(),
            &format!("chmod 777 f.txt; touch -d 2001-01-01 f.txt; echo y >> f.txt; rm -f f.txt; echo scratch > {s} && cat {s}", s = scratch.display()),
        )
        .await;
        let after = std::fs::metadata(&file).unwrap();
        assert_eq!(
            (after.mode(), after.mtime(), after.len()),
            (before.mode(), before.mtime(), before.len()),
            "{sandbox}: {r}"
        );
        assert!(
            text_of(&r).contains("scratch"),
            "temp is a private scratch: {r}"
        );
        assert!(
            !scratch.exists(),
            "{sandbox}: the scratch leaked into the real temp directory"
        );
        t.shutdown().await;
    }
}

#[tokio::test]
async fn the_harness_files_are_read_only_inside_the_sandbox() {
    for sandbox in SANDBOXES {
        let t = bash_host("workspace-write", sandbox).await;
        // The test host's $DSH_HOME lies in the temp directory, a writable root.
        let home = t.home.path().to_owned();
        std::fs::write(home.join("patch.toml"), "# mine\n").unwrap();
        std::fs::create_dir_all(home.join("plugins")).unwrap();
        let ws = TempDir::new("home-ws");
        let r = sh(
            &t,
            ws.path(),
            &format!(
                "echo '[[patch]]' >> {h}/patch.toml; cp /bin/true {h}/plugins/libevil.so; mkdir {h}/profiles; echo done",
                h = home.display()
            ),
        )
        .await;
        assert!(text_of(&r).contains("done"), "{sandbox}: {r}");
        assert_eq!(
            std::fs::read_to_string(home.join("patch.toml")).unwrap(),
            "# mine\n",
            "{sandbox}: {r}"
        );
        assert!(!home.join("plugins/libevil.so").exists(), "{sandbox}: {r}");
        assert!(!home.join("profiles").exists(), "{sandbox}: {r}");
        // The rest of the temp directory stays writable.
        let r = sh(
            &t,
            ws.path(),
            &format!("echo ok > {}/x && cat {0}/x", ws.path().display()),
        )
        .await;
        assert_eq!(text_of(&r), "ok", "{sandbox}: {r}");
        t.shutdown().await;
    }
}

#[tokio::test]
async fn the_harness_credentials_are_not_readable_through_proc() {
    // The harness here is this test process (the test host runs in it).
    std::env::set_var("DSH_TEST_PROC_API_KEY", "sk-proc-secret-value");
    let me = std::process::id();
    for sandbox in SANDBOXES {
        let (t, ws) = host_and_ws("workspace-write", sandbox, "proc-ws").await;
        let text = sh_text(
            &t,
            ws.path(),
            &format!(
                "cat /proc/$PPID/environ /proc/{me}/environ /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c sk-proc-secret; \
                 head -c 100 /proc/{me}/mem 2>/dev/null | wc -c; ls /proc | grep -c '^[0-9]'"
            ),
        )
        .await;
        assert!(!text.contains("sk-proc-secret-value"), "{sandbox}: {text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines.first(),
            Some(&"0"),
            "{sandbox}: no environ shows the key: {text}"
        );
        assert_eq!(
            lines.get(1),
            Some(&"0"),
            "{sandbox}: no memory is readable: {text}"
        );
        let visible: usize = lines
            .get(2)
            .and_then(|n| n.parse().ok())
            .unwrap_or(usize::MAX);
        assert!(
            visible < 10,
            "{sandbox}: /proc shows the command's own processes only: {text}"
        );
        t.shutdown().await;
    }
}

#[tokio::test]
async fn a_detached_child_neither_holds_the_call_nor_outlives_it() {
    for sandbox in SANDBOXES {
        let (t, ws) = host_and_ws("workspace-write", sandbox, "setsid-ws").await;
        let marker = format!("dsh-setsid-{sandbox}-{}", std::process::id());
        // Holding the pipe: the call must not wait for it (60 s).
        let call = run(
            &t,
            ws.path(),
            "bash",
            json!({"command": format!("(setsid bash -c 'touch up1; exec -a {marker} sleep 60' &); while [ ! -e up1 ]; do sleep 0.01; done; echo started"), "description": "d", "timeoutMs": 20000}),
        );
        let r = tokio::time::timeout(Duration::from_secs(40), call)
            .await
            .unwrap_or_else(|_| panic!("{sandbox}: the call waited for the detached child"));
        assert!(text_of(&r).starts_with("started"), "{sandbox}: {r}");
        // Fully detached (no pipe at all): gone with its command too.
        let r = sh(
            &t,
            ws.path(),
            &format!("(setsid bash -c 'touch up2; exec -a {marker}-quiet sleep 41' >/dev/null 2>&1 </dev/null &); while [ ! -e up2 ]; do sleep 0.01; done; echo started"),
        )
        .await;
        assert!(text_of(&r).starts_with("started"), "{sandbox}: {r}");
        let left = wait_gone(&marker, Duration::from_secs(10));
        assert!(left.is_empty(), "{sandbox}: {left:?} outlived the command");
        t.shutdown().await;
    }
}

#[tokio::test]
async fn a_timeout_kills_a_double_forked_setsid_child() {
    for sandbox in SANDBOXES {
        let (t, ws) = host_and_ws("workspace-write", sandbox, "dfork-ws").await;
        let marker = format!("dsh-dfork-{sandbox}-{}", std::process::id());
        let r = run(
            &t,
            ws.path(),
            "bash",
            json!({"command": format!("( (setsid bash -c 'touch up; exec -a {marker} sleep 60' >/dev/null 2>&1 &) & ); while [ ! -e up ]; do sleep 0.01; done; echo up; sleep 60"), "description": "d", "timeoutMs": 5000}),
        )
        .await;
        // The child was up (and so had to be killed) before the timeout.
        assert!(
            text_of(&r).starts_with("up\n"),
            "{sandbox}: the child did not start within the timeout: {r}"
        );
        assert!(
            text_of(&r).ends_with("[timed out after 5000ms]"),
            "{sandbox}: {r}"
        );
        let left = wait_gone(&marker, Duration::from_secs(10));
        assert!(left.is_empty(), "{sandbox}: {left:?} survived the timeout");
        t.shutdown().await;
    }
}

#[tokio::test]
async fn endless_output_stays_in_bounded_memory_and_a_capped_spill_file() {
    for sandbox in SANDBOXES {
        let (t, ws) = host_and_ws("workspace-write", sandbox, "big-ws").await;
        let text = sh_text(
            &t,
            ws.path(),
            "head -c 300000000 /dev/zero | tr '\\0' 'y'; echo; echo last line",
        )
        .await;
        assert!(
            text.starts_with("[output truncated: showing the last 64000 of 300000011 bytes; the first 67108864 bytes of the output are in: "),
            "{sandbox}: {}",
            &text[..text.len().min(300)]
        );
        assert!(text.ends_with("last line"), "{sandbox}");
        let spill: String = text
            .lines()
            .next()
            .and_then(|l| l.split("are in: ").nth(1))
            .map(|p| p.trim_end_matches(']').to_owned())
            .unwrap();
        assert_eq!(
            std::fs::metadata(&spill).unwrap().len(),
            64 * 1024 * 1024,
            "{sandbox}"
        );
        t.shutdown().await;
    }
}

/// The modes with a fence.
const FENCED: [&str; 2] = ["workspace-write", "read-only"];

/// Every sandbox under every mode with a fence.
fn fenced_runs() -> impl Iterator<Item = (&'static str, &'static str)> {
    SANDBOXES
        .into_iter()
        .flat_map(|sandbox| FENCED.map(|mode| (sandbox, mode)))
}

const NO_CAPABILITIES: &str = "CapEff:\t0000000000000000";

#[tokio::test]
async fn root_has_no_capabilities_so_the_remount_attack_changes_nothing_outside() {
    assert!(is_root(), "the capability attacks are run as root");
    for (sandbox, mode) in fenced_runs() {
        let (t, ws) = host_and_ws(mode, sandbox, "caps-ws").await;
        let outside = Outside::new(&format!("remount-{sandbox}-{mode}"));
        let r = sh(&t, ws.path(), "grep CapEff /proc/self/status").await;
        assert_eq!(text_of(&r), NO_CAPABILITIES, "{sandbox} {mode}: {r}");
        let text = sh_text(
            &t,
            ws.path(),
            &format!(
                "mount -o remount,bind,rw / && echo remounted; echo pwned > {o}; chmod 777 {o}; echo done",
                o = outside.0.display()
            ),
        )
        .await;
        assert!(!text.contains("remounted"), "{sandbox} {mode}: {text}");
        assert!(text.contains("done"), "{sandbox} {mode}: {text}");
        assert_eq!(std::fs::read_to_string(&outside.0).unwrap(), "outside\n");
        assert_eq!(
            std::fs::metadata(&outside.0).unwrap().mode() & 0o777,
            0o644,
            "{sandbox} {mode}: {text}"
        );
        t.shutdown().await;
    }
}

#[tokio::test]
async fn unmounting_proc_does_not_reveal_the_harness_environment() {
    assert!(is_root(), "the capability attacks are run as root");
    // The harness here is this test process (the test host runs in it).
    // `/proc/<pid>/environ` shows the environment it started with (where
    // the API key would be), not what `set_var` adds later.
    let me = std::process::id();
    let environ = std::fs::read("/proc/self/environ").unwrap();
    assert!(
        !environ.is_empty(),
        "the harness has an environment to steal"
    );
    for (sandbox, mode) in fenced_runs() {
        let (t, ws) = host_and_ws(mode, sandbox, "umount-proc-ws").await;
        let text = sh_text(
            &t,
            ws.path(),
            &format!(
                "umount -l /proc && echo unmounted; cat /proc/{me}/environ 2>/dev/null | wc -c"
            ),
        )
        .await;
        assert!(!text.contains("unmounted"), "{sandbox} {mode}: {text}");
        assert!(
            text.starts_with("0\n"),
            "{sandbox} {mode}: the harness's environ was read: {text}"
        );
        t.shutdown().await;
    }
}

#[tokio::test]
async fn unmounting_the_home_does_not_make_the_harness_files_writable() {
    assert!(is_root(), "the capability attacks are run as root");
    for (sandbox, mode) in fenced_runs() {
        let t = bash_host(mode, sandbox).await;
        // The test host's $DSH_HOME lies in the temp directory, a
        // writable root in workspace-write, protected read-only again.
        let home = t.home.path().to_owned();
        std::fs::write(home.join("patch.toml"), "# mine\n").unwrap();
        let ws = TempDir::new("umount-home-ws");
        let text = sh_text(
            &t,
            ws.path(),
            &format!(
                "umount -R {h} && echo unmounted; umount -l {h} && echo unmounted; echo '[[patch]]' >> {h}/patch.toml; echo done",
                h = home.display()
            ),
        )
        .await;
        assert!(!text.contains("unmounted"), "{sandbox} {mode}: {text}");
        assert!(text.contains("done"), "{sandbox} {mode}: {text}");
        assert_eq!(
            std::fs::read_to_string(home.join("patch.toml")).unwrap(),
            "# mine\n",
            "{sandbox} {mode}: {text}"
        );
        t.shutdown().await;
    }
}

#[tokio::test]
async fn danger_full_access_drops_capabilities_unless_configured_to_keep_them() {
    assert!(is_root(), "the capability attacks are run as root");
    let ws = TempDir::new("danger-caps-ws");
    let t = bash_host("danger-full-access", "auto").await;
    let r = sh(&t, ws.path(), "grep CapEff /proc/self/status").await;
    assert_eq!(text_of(&r), NO_CAPABILITIES, "{r}");
    t.shutdown().await;
    let t = tools::bash_host("danger-full-access", "auto", ", keepCapabilities = true").await;
    let r = sh(&t, ws.path(), "grep CapEff /proc/self/status").await;
    let text = text_of(&r);
    assert!(
        text.starts_with("CapEff:") && text != NO_CAPABILITIES,
        "{r}"
    );
    t.shutdown().await;
}

/// A block device of this machine (its disk), if it has one.
fn a_disk() -> Option<PathBuf> {
    std::fs::read_dir("/dev")
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.file_type().is_block_device())
                && !p.to_string_lossy().contains("loop")
        })
}

#[tokio::test]
async fn no_terminal_no_host_ptys_and_no_disk_inside_bash() {
    assert!(is_root(), "the device attacks are run as root");
    for (sandbox, mode) in fenced_runs() {
        let (t, ws) = host_and_ws(mode, sandbox, "tty-ws").await;
        let text = sh_text(
            &t,
            ws.path(),
            "exec 3<>/dev/tty && echo tty-opened; ls /dev/pts | tr '\\n' ' '; echo; echo ok > /dev/null && echo null-ok; head -c 4 /dev/urandom | wc -c",
        )
        .await;
        assert!(!text.contains("tty-opened"), "{sandbox} {mode}: {text}");
        // A fresh devpts: only its ptmx, none of the user's terminals.
        assert!(
            text.starts_with("ptmx \nnull-ok\n4"),
            "{sandbox} {mode}: {text}"
        );
        // A pty of its own still works.
        let r = sh(
            &t,
            ws.path(),
            "python3 -c 'import os, pty; m, s = pty.openpty(); os.write(s, b\"hi\\n\"); print(os.read(m, 10))'",
        )
        .await;
        assert!(text_of(&r).contains("hi"), "{sandbox} {mode}: {r}");
        if let Some(disk) = a_disk() {
            let text = sh_text(
                &t,
                ws.path(),
                &format!(
                    "test -b {d} && exec 3<>{d} && echo disk-opened; echo done",
                    d = disk.display()
                ),
            )
            .await;
            assert!(!text.contains("disk-opened"), "{sandbox} {mode}: {text}");
            assert!(text.contains("done"), "{sandbox} {mode}: {text}");
        }
        t.shutdown().await;
    }
}

#[tokio::test]
async fn git_hooks_and_git_config_are_read_only_in_workspace_write() {
    for sandbox in SANDBOXES {
        let (t, ws) = host_and_ws("workspace-write", sandbox, "git-ws").await;
        let w = ws.path();
        let git = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(w)
            .status()
            .unwrap();
        assert!(git.success());
        std::fs::create_dir_all(w.join(".dsh")).unwrap();
        std::fs::create_dir_all(w.join(".claude")).unwrap();
        std::fs::write(w.join(".claude/settings.json"), "{}\n").unwrap();
        let config = std::fs::read_to_string(w.join(".git/config")).unwrap();
        let marker = Path::new("/var/tmp").join(format!("dsh-fsmonitor-{}", std::process::id()));
        let text = sh_text(
            &t,
            w,
            &format!(
                "echo 'touch {m}' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
                 git config core.fsmonitor 'touch {m}'; git config core.hooksPath /tmp; \
                 echo x > .dsh/patch.toml; echo '{{\"hooks\":1}}' > .claude/settings.json; \
                 mv .git .git-old; rm -rf .git; echo done",
                m = marker.display()
            ),
        )
        .await;
        assert!(text.contains("done"), "{sandbox}: {text}");
        assert!(text.contains("Read-only file system"), "{sandbox}: {text}");
        assert!(
            !w.join(".git/hooks/pre-commit").exists(),
            "{sandbox}: {text}"
        );
        assert_eq!(
            std::fs::read_to_string(w.join(".git/config")).unwrap(),
            config,
            "{sandbox}: {text}"
        );
        assert!(!w.join(".dsh/patch.toml").exists(), "{sandbox}: {text}");
        assert_eq!(
            std::fs::read_to_string(w.join(".claude/settings.json")).unwrap(),
            "{}\n"
        );
        assert!(!w.join(".git-old").exists(), "{sandbox}: {text}");
        // The rest of the workspace stays writable, and git still reads.
        let r = sh(&t, w, "echo ok > file && git status --short").await;
        assert!(text_of(&r).contains("file"), "{sandbox}: {r}");
        assert!(!marker.exists());
        t.shutdown().await;
    }
}

/// A TCP listener and a unix socket of the harness (outside any sandbox),
/// counting what connects.
struct HostServices {
    port: u16,
    socket: PathBuf,
    _tcp: std::net::TcpListener,
    _unix: std::os::unix::net::UnixListener,
}

impl HostServices {
    fn new(label: &str) -> HostServices {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let socket = Path::new("/var/tmp").join(format!("dsh-{label}-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let unix = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        HostServices {
            port: tcp.local_addr().unwrap().port(),
            socket,
            _tcp: tcp,
            _unix: unix,
        }
    }

    /// A command printing `tcp-connected` and `unix-connected` for what it
    /// reaches, and `own-loopback` when a server of its own on 127.0.0.1
    /// answers it.
    fn probe(&self) -> String {
        format!(
            "(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo tcp-connected; \
             python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{sock}\"); print(\"unix-connected\")' 2>/dev/null; \
             python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(); c = socket.create_connection(s.getsockname()); print(\"own-loopback\")'; echo done",
            port = self.port,
            sock = self.socket.display()
        )
    }
}

impl Drop for HostServices {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

#[tokio::test]
async fn no_network_by_default_and_network_true_turns_it_on() {
    let host_side = HostServices::new("net");
    for sandbox in SANDBOXES {
        for mode in FENCED {
            let (t, ws) = host_and_ws(mode, sandbox, "net-ws").await;
            let r = sh(&t, ws.path(), &host_side.probe()).await;
            assert_eq!(
                text_of(&r),
                "own-loopback\ndone",
                "{sandbox} {mode}: the harness's loopback and unix sockets are out of reach, its own loopback works"
            );
            t.shutdown().await;
        }
        let t = tools::bash_host("workspace-write", sandbox, ", network = true").await;
        let ws = TempDir::new("net-on-ws");
        let r = sh(&t, ws.path(), &host_side.probe()).await;
        assert_eq!(
            text_of(&r),
            "tcp-connected\nunix-connected\nown-loopback\ndone",
            "{sandbox}: network = true"
        );
        t.shutdown().await;
    }
}

#[tokio::test]
async fn credentials_by_name_and_by_value_do_not_reach_bash() {
    std::env::set_var(
        "GITHUB_PAT",
        "github_pat_11AAAAAAA0123456789_abcdefghijklmnop",
    );
    std::env::set_var("DATABASE_URL", "postgres://u:p@h/db");
    std::env::set_var("CI_JOB_JWT", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln");
    std::env::set_var(
        "DSH_TEST_INNOCENT_NAME",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    );
    std::env::set_var("DSH_TEST_PLAIN_VALUE", "plain");
    std::env::set_var("MYSQL_PWD", "hunter2");
    std::env::set_var("DSH_TEST_STRIPE", "sk_test_abcdefghijklmnopqrstuvwxyz");
    // Not credentials: commit authorship needs them.
    std::env::set_var("GIT_AUTHOR_NAME", "Ada Lovelace");
    std::env::set_var("GIT_AUTHOR_EMAIL", "ada@example.com");
    let t = bash_host("workspace-write", "auto").await;
    let ws = TempDir::new("env-ws");
    let r = sh(&t, ws.path(), "env | cut -d= -f1 | sort | tr '\\n' ' '").await;
    let names: Vec<String> = text_of(&r).split_whitespace().map(str::to_owned).collect();
    for gone in [
        "GITHUB_PAT",
        "DATABASE_URL",
        "CI_JOB_JWT",
        "DSH_TEST_INNOCENT_NAME",
        "MYSQL_PWD",
        "DSH_TEST_STRIPE",
    ] {
        assert!(
            !names.iter().any(|n| n == gone),
            "{gone} reached bash: {names:?}"
        );
    }
    for kept in [
        "PATH",
        "HOME",
        "DSH_TEST_PLAIN_VALUE",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
    ] {
        assert!(
            names.iter().any(|n| n == kept),
            "{kept} is missing: {names:?}"
        );
    }
    t.shutdown().await;
}

#[tokio::test]
async fn background_jobs_are_capped_per_agent_and_job_kill_makes_room() {
    let t = tools::bash_host("workspace-write", "auto", ", maxJobs = 2").await;
    let ws = TempDir::new("jobs-ws");
    let w = ws.path();
    let start = || {
        run(
            &t,
            w,
            "bash",
            json!({"command": "sleep 60", "description": "wait", "run_in_background": true}),
        )
    };
    assert_eq!(text_of(&start().await), "started background job bash-1");
    assert_eq!(text_of(&start().await), "started background job bash-2");
    let r = start().await;
    assert_eq!(r["error"]["info"]["code"], "TOO_MANY_JOBS", "{r}");
    let text = text_of(&r);
    assert!(
        text.contains("at most 2") && text.contains("job_kill"),
        "{text}"
    );
    let r = run(&t, w, "job_kill", json!({"job_id": "bash-1"})).await;
    assert_eq!(text_of(&r), "killed background job bash-1");
    run(
        &t,
        w,
        "job_output",
        json!({"job_id": "bash-1", "wait": true, "timeout_ms": 5000}),
    )
    .await;
    assert_eq!(text_of(&start().await), "started background job bash-3");
    t.shutdown().await;
}

/// Forks sleeping children until the kernel refuses; prints how many.
const FORK_BOMB: &str = "python3 -c '\nimport os, time\nn = 0\ntry:\n    while n < 3000:\n        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n        n += 1\n    print(\"unbounded\", n)\nexcept OSError as e:\n    print(\"refused after\", n, e.errno)\n'";

#[tokio::test]
async fn a_fork_bomb_stops_at_the_process_bound() {
    assert!(
        is_root(),
        "the bound is tested as root (RLIMIT_NPROC would not hold)"
    );
    for (mode, sandbox) in [
        ("workspace-write", "bubblewrap"),
        ("workspace-write", "landlock"),
        ("danger-full-access", "auto"),
    ] {
        let t = tools::bash_host(mode, sandbox, ", maxProcesses = 400").await;
        let ws = TempDir::new("bomb-ws");
        let text = sh_text(&t, ws.path(), FORK_BOMB).await;
        let n: usize = text
            .strip_prefix("refused after ")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{mode}: {text}"));
        assert!(n < 400, "{mode}: {text}");
        assert!(text.ends_with(" 11"), "{mode}: EAGAIN: {text}");
        t.shutdown().await;
    }
}

/// Sets `HOME` for the hosts started while it lives (the read fence learns
/// the user's home from it, and from the password database), and puts the
/// old value back when dropped, failed assertions included.
struct HomeVar(Option<std::ffi::OsString>);

impl HomeVar {
    fn set(home: &Path) -> HomeVar {
        let old = std::env::var_os("HOME");
        std::env::set_var("HOME", home);
        HomeVar(old)
    }
}

impl Drop for HomeVar {
    fn drop(&mut self) {
        match self.0.take() {
            Some(old) => std::env::set_var("HOME", old),
            None => std::env::remove_var("HOME"),
        }
    }
}

#[tokio::test]
async fn secrets_the_read_fence_refuses_are_hidden_from_bash() {
    assert!(is_root(), "/etc/shadow is readable by root without the fix");
    // A fake home outside the temp directory (read-only mode's scratch
    // would hide it anyway), with an SSH key, AWS credentials and a
    // password file, and a file that is no secret.
    let home = TempDir::new_in(Path::new("/var/tmp"), "bash-fake-home");
    let h = home.path();
    std::fs::create_dir_all(h.join(".ssh")).unwrap();
    std::fs::create_dir_all(h.join(".aws")).unwrap();
    let secrets = [
        (h.join(".ssh/id_rsa"), "FAKE-SSH-PRIVATE-KEY"),
        (h.join(".aws/credentials"), "FAKE-AWS-SECRET"),
        (h.join(".netrc"), "FAKE-NETRC-PASSWORD"),
    ];
    for (file, secret) in &secrets {
        std::fs::write(file, format!("{secret}\n")).unwrap();
    }
    std::fs::write(h.join("notes.txt"), "not a secret\n").unwrap();
    let _home = HomeVar::set(h);
    let session = "OTHER-PROJECT-CONVERSATION";
    for (sandbox, mode) in fenced_runs() {
        let t = bash_host(mode, sandbox).await;
        let dsh_home = t.home.path().to_owned();
        // Another project's log in the harness's home, and a file of
        // the home that stays readable.
        let other = dsh_home.join("sessions/--tmp-other-project--/0193-abc");
        std::fs::create_dir_all(&other).unwrap();
        let log = other.join("session.jsonl");
        std::fs::write(&log, format!("{{\"text\":\"{session}\"}}\n")).unwrap();
        std::fs::write(dsh_home.join("patch.toml"), "# still readable\n").unwrap();
        let ws = TempDir::new("hide-ws");
        let shadow = PathBuf::from("/etc/shadow");
        let targets = secrets.iter().map(|(f, _)| f).chain([&log, &shadow]);
        for target in targets {
            let text = sh_text(&t, ws.path(), &format!("cat {}", target.display())).await;
            let what = format!("{sandbox} {mode} {}", target.display());
            assert!(text.contains("[exit code: 1]"), "{what}: {text}");
            for secret in secrets.iter().map(|(_, s)| *s).chain([session, "root:"]) {
                assert!(!text.contains(secret), "{what}: {text}");
            }
            if !target.starts_with(&dsh_home) {
                // Outside the temp directory: there in both modes,
                // and hidden.
                assert!(text.contains("Permission denied"), "{what}: {text}");
            }
        }
        // Nor through a listing or a search.
        let text = sh_text(
            &t,
            ws.path(),
            &format!(
                "ls -a {h}/.ssh {h}/.aws; grep -rs FAKE {h}; grep -rs {session} {s}; cat {h}/notes.txt",
                h = h.display(),
                s = dsh_home.join("sessions").display()
            ),
        )
        .await;
        for secret in secrets.iter().map(|(_, s)| *s).chain([session, "id_rsa"]) {
            assert!(!text.contains(secret), "{sandbox} {mode}: {text}");
        }
        assert!(text.contains("not a secret"), "{sandbox} {mode}: {text}");
        if mode == "workspace-write" {
            // The rest of the harness's home stays readable.
            let r = sh(
                &t,
                ws.path(),
                &format!("cat {}/patch.toml", dsh_home.display()),
            )
            .await;
            assert_eq!(text_of(&r), "# still readable", "{sandbox}: {r}");
        }
        t.shutdown().await;
    }
}

/// The mount options (`ro` or `rw`) of every mount at `path` in the
/// command's `/proc/self/mountinfo`, on one line (`path: ro ro`), or
/// `path: none`.
fn mount_options(path: &str) -> String {
    format!(
        "awk -v p={path} 'BEGIN {{ s = p \":\" }} $5 == p {{ split($6, o, \",\"); s = s \" \" o[1] }} END {{ if (s == p \":\") s = s \" none\"; print s }}' /proc/self/mountinfo"
    )
}

#[tokio::test]
async fn the_kernel_sysctls_cannot_be_written_and_its_private_files_are_covered() {
    assert!(
        is_root(),
        "as root the command is the host's uid 0, which sysctls check"
    );
    // Never written with another value: the same value, read first.
    let core_pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap();
    let sysrq = Path::new("/proc/sysrq-trigger").exists();
    let timer_list = Path::new("/proc/timer_list").exists();
    for (sandbox, mode) in fenced_runs() {
        let (t, ws) = host_and_ws(mode, sandbox, "sysctl-ws").await;
        let what = format!("{sandbox} {mode}");
        let text = sh_text(
            &t,
            ws.path(),
            "cat /proc/sys/kernel/core_pattern > /proc/sys/kernel/core_pattern && echo wrote-core-pattern; \
             cat /proc/sys/kernel/core_pattern; echo done",
        )
        .await;
        assert!(!text.contains("wrote-core-pattern"), "{what}: {text}");
        assert!(text.contains("Read-only file system"), "{what}: {text}");
        // Still readable.
        assert!(text.contains(core_pattern.trim()), "{what}: {text}");
        assert_eq!(
            std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap(),
            core_pattern
        );
        // Read-only mounts: the sysctls, sysrq-trigger (never written
        // here: a write acts on the host), and /sys.
        let mut script = vec![mount_options("/proc/sys"), mount_options("/sys")];
        if sysrq {
            script.push(mount_options("/proc/sysrq-trigger"));
        }
        let text = sh_text(&t, ws.path(), &script.join("; ")).await;
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), script.len(), "{what}: {text}");
        for line in lines {
            let (_, options) = line.split_once(':').unwrap();
            let options: Vec<&str> = options.split_whitespace().collect();
            assert!(
                !options.is_empty() && options.iter().all(|o| *o == "ro"),
                "{what}: every mount there is read-only: {text}"
            );
        }
        // The kernel's private files are covered, and no user
        // namespace (where capabilities come back) can be made.
        let text = sh_text(
            &t,
            ws.path(),
            "head -c 1 /proc/timer_list >/dev/null && echo read-timer-list; \
                 ls -A /proc/acpi 2>/dev/null | head -1; \
                 unshare --user true && echo nested-userns; echo done",
        )
        .await;
        if timer_list {
            assert!(!text.contains("read-timer-list"), "{what}: {text}");
        }
        assert!(!text.contains("nested-userns"), "{what}: {text}");
        assert!(text.starts_with("done"), "{what}: {text}");
        t.shutdown().await;
    }
}

#[tokio::test]
async fn a_raw_socket_pair_is_refused_without_network() {
    for sandbox in SANDBOXES {
        let (t, ws) = host_and_ws("workspace-write", sandbox, "sockpair-ws").await;
        let text = sh_text(
            &t,
            ws.path(),
            "python3 -c 'import socket; socket.socketpair(socket.AF_UNIX, socket.SOCK_RAW); print(\"raw-pair\")'; \
             python3 -c 'import socket; socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM); print(\"stream-pair\")'; \
             python3 -c 'import socket; socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET); print(\"seqpacket-pair\")'",
        )
        .await;
        assert!(!text.contains("raw-pair"), "{sandbox}: {text}");
        assert!(text.contains("PermissionError"), "{sandbox}: {text}");
        assert!(
            text.starts_with("stream-pair\nseqpacket-pair"),
            "{sandbox}: {text}"
        );
        t.shutdown().await;
    }
}

/// A SysV shared memory segment of the harness's machine (root's, 0600),
/// removed when dropped.
struct HostSegment(String);

impl HostSegment {
    fn new() -> HostSegment {
        let out = std::process::Command::new("ipcmk")
            .args(["-M", "64", "-p", "0600"])
            .output()
            .expect("ipcmk (util-linux) makes the host's segment");
        let text = String::from_utf8_lossy(&out.stdout);
        let id = text
            .rsplit(':')
            .next()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()))
            .unwrap_or_else(|| panic!("ipcmk: {text}"));
        HostSegment(id)
    }
}

impl Drop for HostSegment {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ipcrm")
            .args(["-m", &self.0])
            .status();
    }
}

#[tokio::test]
async fn the_hosts_shared_memory_is_not_there() {
    let segment = HostSegment::new();
    let id = &segment.0;
    for (sandbox, mode) in fenced_runs() {
        let (t, ws) = host_and_ws(mode, sandbox, "ipc-ws").await;
        let text = sh_text(
            &t,
            ws.path(),
            &format!(
                "ipcs -m -i {id} 2>/dev/null | grep -q shmid= && echo sees-host-segment; \
                     ipcs -m | awk 'NR > 3 && NF' | wc -l"
            ),
        )
        .await;
        assert_eq!(text, "0", "{sandbox} {mode}: {text}");
        t.shutdown().await;
    }
    // Still the host's, untouched (`ipcs -i` exits 0 either way).
    let seen = std::process::Command::new("ipcs")
        .args(["-m", "-i", id])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&seen.stdout).contains(&format!("shmid={id}")));
}

fn git(dir: &Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

#[tokio::test]
async fn nested_repositories_and_separate_git_dirs_are_read_only_in_workspace_write() {
    for sandbox in SANDBOXES {
        let (t, ws) = host_and_ws("workspace-write", sandbox, "git-nested-ws").await;
        let w = ws.path();
        // The workspace's `.git` is a file naming `.gd`, whose config names
        // a hooks directory of the workspace; a vendored repository below.
        git(
            w,
            &[
                "init",
                "-q",
                "--separate-git-dir",
                &w.join(".gd").to_string_lossy(),
            ],
        );
        std::fs::create_dir_all(w.join("myhooks")).unwrap();
        git(w, &["config", "core.hooksPath", "myhooks"]);
        std::fs::create_dir_all(w.join("vendor/lib")).unwrap();
        git(&w.join("vendor/lib"), &["init", "-q"]);
        assert!(std::fs::read_to_string(w.join(".git"))
            .unwrap()
            .starts_with("gitdir: "));
        let configs = [w.join(".gd/config"), w.join("vendor/lib/.git/config")];
        let before: Vec<String> = configs
            .iter()
            .map(|c| std::fs::read_to_string(c).unwrap())
            .collect();
        let marker = Path::new("/var/tmp").join(format!("dsh-nested-hook-{}", std::process::id()));
        let text = sh_text(
            &t,
            w,
            &format!(
                "for h in vendor/lib/.git/hooks .gd/hooks myhooks; do echo 'touch {m}' > $h/pre-commit; done; \
                 git -C vendor/lib config core.fsmonitor 'touch {m}'; git config core.fsmonitor 'touch {m}'; \
                 echo 'gitdir: /tmp' > .git; echo done",
                m = marker.display()
            ),
        )
        .await;
        assert!(text.contains("done"), "{sandbox}: {text}");
        assert!(text.contains("Read-only file system"), "{sandbox}: {text}");
        for hooks in ["vendor/lib/.git/hooks", ".gd/hooks", "myhooks"] {
            assert!(
                !w.join(hooks).join("pre-commit").exists(),
                "{sandbox}: {hooks}: {text}"
            );
        }
        for (c, b) in configs.iter().zip(&before) {
            assert_eq!(&std::fs::read_to_string(c).unwrap(), b, "{sandbox}: {text}");
        }
        assert!(std::fs::read_to_string(w.join(".git"))
            .unwrap()
            .contains(".gd"));
        // The rest stays writable.
        let r = sh(&t, w, "echo ok > vendor/lib/file && cat vendor/lib/file").await;
        assert_eq!(text_of(&r), "ok", "{sandbox}: {r}");
        assert!(!marker.exists());
        t.shutdown().await;
    }
}

#[tokio::test]
async fn a_fork_bomb_stops_at_the_default_bound() {
    assert!(
        is_root(),
        "the bound is tested as root (RLIMIT_NPROC would not hold)"
    );
    // The default: min(1024, pid_max / (maxJobs + 2) / 2), at most 1024.
    for (mode, sandbox) in [
        ("workspace-write", "bubblewrap"),
        ("workspace-write", "landlock"),
        ("danger-full-access", "auto"),
    ] {
        let (t, ws) = host_and_ws(mode, sandbox, "bomb-default-ws").await;
        let text = sh_text(&t, ws.path(), FORK_BOMB).await;
        let n: usize = text
            .strip_prefix("refused after ")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{mode} {sandbox}: {text}"));
        assert!(n < 1024, "{mode} {sandbox}: {text}");
        assert!(text.ends_with(" 11"), "{mode} {sandbox}: EAGAIN: {text}");
        t.shutdown().await;
    }
}
