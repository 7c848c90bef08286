//! `bash` as an attacker runs it, under both sandboxes (bubblewrap, and the
//! Landlock fallback with its own namespaces): metadata changes outside the
//! fence, the harness's own files, the harness's credentials through
//! `/proc`, commands that outlive their call, and output that never ends.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_testkit::tools::{host, run, text_of};
use dsh_testkit::{wait_gone, TempDir, TestHost};
use serde_json::{json, Value};

const SANDBOXES: [&str; 2] = ["bubblewrap", "landlock"];

async fn bash_host(mode: &str, sandbox: &str) -> TestHost {
    assert!(
        sandbox != "bubblewrap" || Path::new("/usr/bin/bwrap").exists(),
        "these tests need bubblewrap (`cargo xtask test` installs the Debian package `bubblewrap`)"
    );
    host(
        mode,
        &format!("[[patch]]\nid='bash'\nconfig = {{ sandbox = '{sandbox}' }}\n"),
    )
    .await
}

async fn sh(t: &TestHost, ws: &Path, command: &str) -> Value {
    run(
        t,
        ws,
        "bash",
        json!({"command": command, "description": "attack"}),
    )
    .await
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
        let t = bash_host("workspace-write", sandbox).await;
        let ws = TempDir::new("meta-ws");
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
        let t = bash_host("read-only", sandbox).await;
        let ws = TempDir::new("ro-ws");
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
        let t = bash_host("workspace-write", sandbox).await;
        let ws = TempDir::new("proc-ws");
        let r = sh(
            &t,
            ws.path(),
            &format!(
                "cat /proc/$PPID/environ /proc/{me}/environ /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c sk-proc-secret; \
                 head -c 100 /proc/{me}/mem 2>/dev/null | wc -c; ls /proc | grep -c '^[0-9]'"
            ),
        )
        .await;
        let text = text_of(&r);
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
        let t = bash_host("workspace-write", sandbox).await;
        let ws = TempDir::new("setsid-ws");
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
        let t = bash_host("workspace-write", sandbox).await;
        let ws = TempDir::new("dfork-ws");
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
        let t = bash_host("workspace-write", sandbox).await;
        let ws = TempDir::new("big-ws");
        let r = sh(
            &t,
            ws.path(),
            "head -c 300000000 /dev/zero | tr '\\0' 'y'; echo; echo last line",
        )
        .await;
        let text = text_of(&r);
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
