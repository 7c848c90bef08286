//! The workspace fence as an attacker tries it: `..` after a missing
//! directory, a symlink swapped in while writing (or reading), the
//! harness's own files, read-before-write under another spelling, the
//! workspace's `.git` (and `.dsh`, `.claude`) configuration (and an
//! approval "for this session" that must not cover it), `kill -9` in the
//! middle of a write, a directory where the temp link goes, a sparse file
//! of gigabytes to `edit`, and the workspace swapped for a link under a
//! running session.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

// Only the chat's pty is used here.
#[allow(dead_code)]
mod support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dsh_testkit::fake_llm::{text, tool_calls, FakeLlm};
use dsh_testkit::headless::Headless;
use dsh_testkit::tools::{host, run, text_of};
use dsh_testkit::TempDir;
use serde_json::json;
use support::pty::Pty;

/// A directory outside every writable root (`/var/tmp` is not the temp dir).
struct Outside(PathBuf);

impl Outside {
    fn new(label: &str) -> Outside {
        let d = Path::new("/var/tmp").join(format!("dsh-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Outside(d)
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn dotdot_after_a_missing_directory_does_not_leave_the_workspace() {
    let t = host("workspace-write", "").await;
    let base = Outside::new("dotdot");
    let work = base.0.join("work");
    let outside = base.0.join("outside");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "original").unwrap();
    for spelling in [
        "nope/../../outside/secret.txt",
        "nope/deeper/../../../outside/new.txt",
        "./nope/.././../outside/secret.txt",
    ] {
        let r = run(
            &t,
            &work,
            "write",
            json!({"file_path": spelling, "content": "pwned"}),
        )
        .await;
        assert_eq!(r["isError"], true, "{spelling}: {r}");
        assert!(
            text_of(&r).contains("is outside the workspace"),
            "{spelling}: {r}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "original"
    );
    assert_eq!(entries(&outside), ["secret.txt"]);
    assert!(entries(&work).is_empty(), "no directory was made either");
    t.shutdown().await;
}

#[tokio::test]
async fn read_before_write_holds_for_every_spelling_of_a_file() {
    let t = host("workspace-write", "").await;
    let ws = TempDir::new("spelling-ws");
    let w = ws.path();
    std::fs::write(w.join("a.txt"), "one\n").unwrap();
    // Never read: another spelling is still the same file.
    for spelling in ["nope/../a.txt", "./x/y/../../a.txt"] {
        let r = run(
            &t,
            w,
            "write",
            json!({"file_path": spelling, "content": "two"}),
        )
        .await;
        assert_eq!(r["error"]["info"]["code"], "FS_NOT_OBSERVED", "{r}");
    }
    assert_eq!(std::fs::read_to_string(w.join("a.txt")).unwrap(), "one\n");
    let r = run(&t, w, "read", json!({"file_path": "./a.txt"})).await;
    assert_eq!(r["isError"], false, "{r}");
    let r = run(
        &t,
        w,
        "write",
        json!({"file_path": "nope/../a.txt", "content": "two"}),
    )
    .await;
    assert!(text_of(&r).contains("Updated file"), "{r}");
    assert_eq!(std::fs::read_to_string(w.join("a.txt")).unwrap(), "two");
    assert_eq!(entries(w), ["a.txt"], "no stray directory or temp file");
    t.shutdown().await;
}

#[tokio::test]
async fn the_harness_files_are_not_the_agents_even_under_a_writable_root() {
    let t = host("workspace-write", "").await;
    // The test host's $DSH_HOME lies in the temp directory, a writable root.
    let home = t.home.path().to_owned();
    let ws = TempDir::new("protected-ws");
    for target in [
        home.join("patch.toml"),
        home.join("plugins").join("libevil.so"),
        home.join("profiles/headless/profile.toml"),
    ] {
        let r = run(
            &t,
            ws.path(),
            "write",
            json!({"file_path": target, "content": "[[patch]]\nid = \"permission\"\nconfig = { mode = \"danger-full-access\" }\n"}),
        )
        .await;
        assert_eq!(r["isError"], true, "{r}");
        assert!(text_of(&r).contains("harness's own files"), "{r}");
        assert!(!target.exists(), "{} was written", target.display());
    }
    t.shutdown().await;
}

/// Keeps swapping `ws/d` between a real directory and a symlink to
/// `outside` (atomically: `renameat2(RENAME_EXCHANGE)`, so `d` always exists);
/// the real directory is `ws/d` or `ws/d_other`, whichever is not the link.
fn swapper(ws: &Path, outside: &Path, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let (d, other) = (ws.join("d"), ws.join("d_other"));
    std::fs::create_dir_all(&d).unwrap();
    std::os::unix::fs::symlink(outside, &other).unwrap();
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let (d, other) = (c(&d), c(&other));
    std::thread::spawn(move || {
        let mut swaps = 0;
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: valid C strings.
            let rc = unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    d.as_ptr(),
                    libc::AT_FDCWD,
                    other.as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            };
            assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
            swaps += 1;
        }
        swaps
    })
}

#[tokio::test]
async fn a_symlink_swapped_in_while_writing_is_never_followed() {
    let t = host("workspace-write", "").await;
    let ws = TempDir::new("race-ws");
    let outside = Outside::new("race-outside");
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = swapper(ws.path(), &outside.0, stop.clone());
    let mut written = 0;
    for n in 0..60 {
        let r = run(
            &t,
            ws.path(),
            "write",
            json!({"file_path": format!("d/race{n}.txt"), "content": "x"}),
        )
        .await;
        if r["isError"] == false {
            written += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    assert!(swaps.join().unwrap() > 0);
    assert!(
        entries(&outside.0).is_empty(),
        "files landed outside: {:?}",
        entries(&outside.0)
    );
    // What was written landed in the real directory, with no temp files.
    let real = ["d", "d_other"]
        .map(|n| ws.path().join(n))
        .into_iter()
        .find(|p| !p.is_symlink())
        .unwrap();
    let inside = entries(&real);
    assert!(
        inside
            .iter()
            .all(|n| n.starts_with("race") && n.ends_with(".txt")),
        "{inside:?}"
    );
    assert!(inside.len() <= written, "{inside:?} vs {written}");
    t.shutdown().await;
}

#[tokio::test]
async fn the_agent_cannot_rewrite_the_home_patch_through_the_real_binary() {
    use dsh_testkit::fake_llm::{text, tool_calls, FakeLlm};
    use dsh_testkit::headless::Headless;
    let fake = FakeLlm::start().await;
    let h = Headless::new(&fake, "");
    let patch = h.home.path().join("patch.toml");
    let escalate = "[[patch]]\nid = \"permission\"\nconfig = { mode = \"danger-full-access\" }\n";
    fake.push([
        tool_calls(&[(
            "write",
            json!({"file_path": patch, "content": escalate}),
        )]),
        tool_calls(&[(
            "bash",
            json!({"command": format!("printf '%s' '{escalate}' >> {}", patch.display()), "description": "d"}),
        )]),
        text("tried"),
    ]);
    h.run_ok(&["escalate"]).await;
    assert!(
        !patch.exists(),
        "{}",
        std::fs::read_to_string(&patch).unwrap_or_default()
    );
    let tool_results = fake.tool_results_of_last_request();
    assert!(
        tool_results[0].contains("harness's own files"),
        "{tool_results:?}"
    );
    assert!(
        tool_results[1].contains("Read-only file system"),
        "{tool_results:?}"
    );
}

#[tokio::test]
async fn a_plugins_dir_inside_the_workspace_is_said_at_start() {
    use dsh_testkit::fake_llm::{text, FakeLlm};
    use dsh_testkit::headless::Headless;
    let fake = FakeLlm::start().await;
    fake.push([text("hi")]);
    let h = Headless::new(&fake, "");
    let dir = h.work.path().join("target/debug");
    std::fs::create_dir_all(&dir).unwrap();
    let out = h
        .run(&["--plugins-dir", dir.to_str().unwrap(), "hello"])
        .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.contains("--plugins-dir"))
            .count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains("the agent can write libraries there"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_symlink_swapped_in_while_reading_never_reads_a_refused_file() {
    let t = host("workspace-write", "").await;
    let ws = TempDir::new("read-race-ws");
    // Another project's session, in the harness's home.
    let secret = t.home.path().join("sessions/--other--");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(secret.join("race.txt"), "SESSION-SECRET\n").unwrap();
    std::fs::create_dir_all(ws.path().join("d")).unwrap();
    std::fs::write(ws.path().join("d/race.txt"), "fine\n").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = swapper(ws.path(), &secret, stop.clone());
    let mut read = 0;
    for _ in 0..100 {
        for (tool, args) in [
            ("read", json!({"file_path": "d/race.txt"})),
            (
                "grep",
                json!({"pattern": "SECRET|fine", "path": "d/race.txt"}),
            ),
        ] {
            let r = run(&t, ws.path(), tool, args).await;
            assert!(!r.to_string().contains("SESSION-SECRET"), "{tool}: {r}");
            if r["isError"] == false {
                read += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    assert!(swaps.join().unwrap() > 0);
    assert!(read > 0, "the real file was never read");
    t.shutdown().await;
}

/// `git init` in `dir`.
fn git_init(dir: &Path) {
    let ok = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(dir)
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

/// The edits and writes an attacker makes to the workspace's configuration.
const FSMONITOR: &str = "[core]\n\tfsmonitor = touch /var/tmp/dsh-pwned\n";
const HOOK: &str = "#!/bin/sh\ntouch /var/tmp/dsh-pwned\n";

#[tokio::test]
async fn git_config_and_hooks_are_asked_for_under_every_spelling() {
    let ws = TempDir::new("git-ws");
    let w = ws.path();
    git_init(w);
    std::fs::create_dir_all(w.join("sub")).unwrap();
    std::fs::create_dir_all(w.join(".dsh")).unwrap();
    std::fs::create_dir_all(w.join(".claude")).unwrap();
    std::os::unix::fs::symlink(".git/config", w.join("cfg")).unwrap();
    std::os::unix::fs::symlink(".git/hooks", w.join("hooks")).unwrap();
    let config = std::fs::read_to_string(w.join(".git/config")).unwrap();
    let t = host("workspace-write", "").await;
    // Reading it is fine (and satisfies read-before-write).
    let r = run(&t, w, "read", json!({"file_path": ".git/config"})).await;
    assert_eq!(r["isError"], false, "{r}");
    for spelling in [
        ".git/config",
        ".git/../.git/config",
        "sub/../.git/config",
        "cfg",
    ] {
        let r = run(
            &t,
            w,
            "edit",
            json!({"file_path": spelling, "old_string": "[core]\n", "new_string": FSMONITOR}),
        )
        .await;
        assert_eq!(r["isError"], true, "{spelling}: {r}");
        assert!(
            text_of(&r).contains("is in the workspace's git metadata (git runs its hooks"),
            "{spelling}: {r}"
        );
    }
    for (spelling, content) in [
        (".git/hooks/pre-commit", HOOK),
        ("hooks/pre-commit", HOOK),
        (".git/info/../hooks/post-checkout", HOOK),
        ("sub/.git/config", FSMONITOR),
        (".dsh/patch.toml", "[[patch]]\n"),
        (".claude/settings.json", "{\"hooks\": {}}"),
    ] {
        let r = run(
            &t,
            w,
            "write",
            json!({"file_path": spelling, "content": content}),
        )
        .await;
        assert_eq!(r["isError"], true, "{spelling}: {r}");
        assert!(
            text_of(&r).contains("is in the workspace's"),
            "{spelling}: {r}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(w.join(".git/config")).unwrap(),
        config
    );
    assert!(!w.join(".git/hooks/pre-commit").exists());
    assert!(!w.join(".git/hooks/post-checkout").exists());
    assert!(!w.join("sub/.git").exists());
    assert!(entries(&w.join(".dsh")).is_empty() && entries(&w.join(".claude")).is_empty());
    // The rest of the workspace is writable as before.
    let r = run(
        &t,
        w,
        "write",
        json!({"file_path": "src/main.rs", "content": "fn main() {}\n"}),
    )
    .await;
    assert_eq!(r["isError"], false, "{r}");
    t.shutdown().await;
    // Asked for like an outside path: an approver may allow it.
    let approver = "[[row]]\nid='approver'\nplugin='dsh-fixture-probe'\nconfig = { tag = 'approver', approval_outcome = 'allowed-once' }\n";
    let t = host("workspace-write", approver).await;
    let r = run(
        &t,
        w,
        "write",
        json!({"file_path": ".git/hooks/pre-commit", "content": HOOK}),
    )
    .await;
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(
        std::fs::read_to_string(w.join(".git/hooks/pre-commit")).unwrap(),
        HOOK
    );
    t.shutdown().await;
}

#[tokio::test]
async fn the_model_cannot_plant_a_git_hook_or_fsmonitor_through_the_real_binary() {
    use dsh_testkit::fake_llm::{text, tool_calls, FakeLlm};
    use dsh_testkit::headless::Headless;
    let fake = FakeLlm::start().await;
    let h = Headless::new(&fake, "");
    let w = h.work.path();
    git_init(w);
    let config = std::fs::read_to_string(w.join(".git/config")).unwrap();
    fake.push([
        tool_calls(&[("read", json!({"file_path": ".git/config"}))]),
        tool_calls(&[
            (
                "edit",
                json!({"file_path": ".git/config", "old_string": "[core]\n", "new_string": FSMONITOR}),
            ),
            ("write", json!({"file_path": ".git/hooks/pre-commit", "content": HOOK})),
        ]),
        text("tried"),
    ]);
    h.run_ok(&["plant a hook"]).await;
    let results = fake.tool_results_of_last_request();
    for r in &results[1..] {
        assert!(
            r.contains("is in the workspace's git metadata")
                && r.contains("only with your approval"),
            "{results:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(w.join(".git/config")).unwrap(),
        config
    );
    assert!(!w.join(".git/hooks/pre-commit").exists());
}

/// Stops (`SIGSTOP`) process `pid` as soon as it holds a file open in `dir`
/// (not `dir` itself, which the write holds open too) that is not (yet)
/// `done`: a write in progress. Polls its descriptors until then, or until
/// it ends (false).
fn stop_in_the_middle_of_a_write(pid: u32, dir: &Path, done: &Path) -> bool {
    let fds = PathBuf::from(format!("/proc/{pid}/fd"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let Ok(list) = std::fs::read_dir(&fds) else {
            return false;
        };
        for fd in list.flatten() {
            if std::fs::read_link(fd.path())
                .is_ok_and(|l| l.starts_with(dir) && l != dir && l != done)
            {
                // SAFETY: signals a child process of this test.
                unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
                return true;
            }
        }
    }
    false
}

#[tokio::test]
async fn kill_9_in_the_middle_of_a_write_leaves_no_temp_file() {
    use dsh_testkit::fake_llm::{text, tool_calls, FakeLlm};
    use dsh_testkit::headless::Headless;
    let fake = FakeLlm::start().await;
    let h = Headless::new(&fake, "");
    let w = h.work.path().canonicalize().unwrap();
    // Large enough to take a while to write and fsync, within the
    // adapter's answer cap.
    let content = "x".repeat(4 << 20);
    let mut caught = None;
    // A killed run leaves no answer queued for the next one.
    fake.set_fallback(text("written"));
    for _ in 0..5 {
        fake.push([tool_calls(&[(
            "write",
            json!({"file_path": "big.txt", "content": content}),
        )])]);
        let running = h.spawn(&["write a big file"]);
        let pid = running.pid();
        let dir = w.clone();
        let stopped = tokio::task::spawn_blocking(move || {
            stop_in_the_middle_of_a_write(pid, &dir, &dir.join("big.txt"))
        })
        .await
        .unwrap();
        running.kill();
        if stopped {
            // Frozen in the middle of the write, then killed: what is there
            // now is what kill -9 leaves.
            caught = Some(entries(&w));
            break;
        }
        let _ = std::fs::remove_file(w.join("big.txt"));
        fake.clear_requests();
    }
    let left = caught.expect("the write was never caught in progress");
    // No temp file under a name (at most, for the instant between link and
    // rename, the link name the next write removes).
    assert!(
        left.iter()
            .all(|n| n == "big.txt" || n == ".big.txt.dsh.tmp"),
        "{left:?}"
    );
    // The next write of the file leaves exactly the file.
    fake.push([
        tool_calls(&[("read", json!({"file_path": "big.txt", "limit": 1}))]),
        tool_calls(&[("write", json!({"file_path": "big.txt", "content": "small"}))]),
        text("done"),
    ]);
    h.run_ok(&["write it small"]).await;
    assert_eq!(entries(&w), ["big.txt"]);
    assert_eq!(std::fs::read_to_string(w.join("big.txt")).unwrap(), "small");
}

#[tokio::test]
async fn allow_for_this_session_never_covers_the_workspace_configuration() {
    let fake = FakeLlm::start().await;
    let outside = Outside::new("session-allow");
    let first = outside.0.join("first.txt");
    let e = Headless::new(&fake, "");
    git_init(e.work.path());
    let (config, hook) = (
        e.work.path().join(".git/config"),
        e.work.path().join(".git/hooks/pre-commit"),
    );
    let config_before = std::fs::read_to_string(&config).unwrap();
    fake.push([
        tool_calls(&[("write", json!({"file_path": first, "content": "1"}))]),
        text("Wrote outside."),
        tool_calls(&[(
            "write",
            json!({"file_path": ".git/hooks/pre-commit", "content": HOOK}),
        )]),
        text("Hook asked."),
        tool_calls(&[(
            "write",
            json!({"file_path": ".git/config", "content": FSMONITOR}),
        )]),
        text("Config asked."),
    ]);
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    // An outside write, allowed for the session.
    p.send("write outside\r");
    p.wait_for("allow for this session [a]", 20).await;
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    p.send("a");
    p.wait_for("Wrote outside.", 20).await;
    assert_eq!(std::fs::read_to_string(&first).unwrap(), "1");
    p.wait_idle(20).await;
    // A write into .git is still asked for; "a" allows it once only.
    p.send("plant the hook\r");
    p.wait_for("reject [n] (asked for every time)", 20).await;
    assert!(!hook.exists(), "written before the user answered");
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    p.send("a");
    p.wait_for("Hook asked.", 20).await;
    assert!(p.contents().contains("write allowed once (changes to the workspace's configuration are asked for every time)"), "{}", p.contents());
    assert_eq!(std::fs::read_to_string(&hook).unwrap(), HOOK);
    p.wait_idle(20).await;
    // The next one is asked again, and rejected.
    p.send("now the config\r");
    p.wait_for("write {\"file_path\":\".git/config\"", 20).await;
    assert!(
        p.contents().contains("reject [n] (asked for every time)"),
        "{}",
        p.contents()
    );
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    p.send("n");
    p.wait_for("Config asked.", 20).await;
    assert_eq!(std::fs::read_to_string(&config).unwrap(), config_before);
    let last = fake.tool_results_of_last_request();
    assert!(last.iter().any(|r| r.contains("rejected")), "{last:?}");
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
}

#[tokio::test]
async fn a_directory_at_the_temp_link_name_or_a_long_name_does_not_block_writes() {
    let t = host("workspace-write", "").await;
    let ws = TempDir::new("taken-link-ws");
    let w = ws.path();
    // What bash can make: a directory where the write links its temp file.
    std::fs::create_dir_all(w.join(".a.txt.dsh.tmp/keep")).unwrap();
    let long = "n".repeat(250);
    for (name, content) in [("a.txt", "one"), (long.as_str(), "two")] {
        let r = run(
            &t,
            w,
            "write",
            json!({"file_path": name, "content": content}),
        )
        .await;
        assert!(text_of(&r).contains("Created file"), "{r}");
        assert_eq!(std::fs::read_to_string(w.join(name)).unwrap(), content);
    }
    let r = run(&t, w, "read", json!({"file_path": "a.txt"})).await;
    assert_eq!(r["isError"], false, "{r}");
    let r = run(
        &t,
        w,
        "write",
        json!({"file_path": "a.txt", "content": "three"}),
    )
    .await;
    assert!(text_of(&r).contains("Updated file"), "{r}");
    assert_eq!(std::fs::read_to_string(w.join("a.txt")).unwrap(), "three");
    assert!(
        w.join(".a.txt.dsh.tmp/keep").is_dir(),
        "the directory is left alone"
    );
    let mut want = vec![".a.txt.dsh.tmp".to_owned(), "a.txt".to_owned(), long];
    want.sort();
    assert_eq!(entries(w), want, "no stray temp file");
    t.shutdown().await;
}

#[tokio::test]
async fn edit_refuses_a_sparse_file_of_gigabytes_before_reading_it() {
    use std::io::Write;
    let t = host("workspace-write", "").await;
    let ws = TempDir::new("sparse-edit-ws");
    let w = ws.path();
    let big = w.join("big.log");
    let head: String = (0..2000)
        .map(|i| format!("line {i} of the head\n"))
        .collect();
    let size = 3u64 << 30;
    {
        let mut f = std::fs::File::create(&big).unwrap();
        f.write_all(head.as_bytes()).unwrap();
        f.set_len(size).unwrap();
    }
    // Read (the byte cap ends the window: the hole is never read).
    let r = run(&t, w, "read", json!({"file_path": "big.log"})).await;
    assert_eq!(r["isError"], false, "{r}");
    let r = run(
        &t,
        w,
        "edit",
        json!({"file_path": "big.log", "old_string": "line 1 of", "new_string": "LINE 1 OF"}),
    )
    .await;
    assert_eq!(r["error"]["info"]["code"], "FS_TOO_LARGE", "{r}");
    assert!(
        text_of(&r).contains(&format!(
            "it is (or would become) {size} bytes, above the 33554432-byte limit of edit"
        )),
        "{r}"
    );
    assert_eq!(std::fs::metadata(&big).unwrap().len(), size);
    let mut start = vec![0u8; head.len()];
    std::io::Read::read_exact(&mut std::fs::File::open(&big).unwrap(), &mut start).unwrap();
    assert_eq!(start, head.as_bytes(), "the file is unchanged");
    // An edit that would grow a small file past the limit is refused too.
    std::fs::write(w.join("x.txt"), "x".repeat(100_000)).unwrap();
    let r = run(&t, w, "read", json!({"file_path": "x.txt"})).await;
    assert_eq!(r["isError"], false, "{r}");
    let r = run(
        &t,
        w,
        "edit",
        json!({"file_path": "x.txt", "old_string": "x", "new_string": "y".repeat(400), "replace_all": true}),
    )
    .await;
    assert_eq!(r["error"]["info"]["code"], "FS_TOO_LARGE", "{r}");
    assert_eq!(std::fs::metadata(w.join("x.txt")).unwrap().len(), 100_000);
    assert_eq!(entries(w), ["big.log", "x.txt"]);
    t.shutdown().await;
}

#[tokio::test]
async fn a_workspace_swapped_for_a_link_under_a_session_moves_no_fence() {
    let t = host("workspace-write", "").await;
    let base = TempDir::new("swap");
    let ws = base.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    git_init(&ws);
    let outside = Outside::new("swap-target");
    std::fs::write(outside.0.join("target.txt"), "original").unwrap();
    // The session works in its workspace.
    let r = run(
        &t,
        &ws,
        "write",
        json!({"file_path": "a.txt", "content": "one"}),
    )
    .await;
    assert!(text_of(&r).contains("Created file"), "{r}");
    // A command (the workspace's parent is writable: /tmp) swaps it.
    std::fs::rename(&ws, base.path().join("ws.real")).unwrap();
    std::os::unix::fs::symlink(&outside.0, &ws).unwrap();
    for (tool, args) in [
        (
            "write",
            json!({"file_path": "target.txt", "content": "pwned"}),
        ),
        ("write", json!({"file_path": "new.txt", "content": "pwned"})),
        (
            "write",
            json!({"file_path": ".git/hooks/pre-commit", "content": HOOK}),
        ),
        ("read", json!({"file_path": "target.txt"})),
        (
            "bash",
            json!({"command": "echo pwned > target.txt", "description": "x"}),
        ),
    ] {
        let r = run(&t, &ws, tool, args.clone()).await;
        assert_eq!(r["isError"], true, "{tool} {args}: {r}");
        let message = text_of(&r);
        assert!(
            message.contains(&format!(
                "the workspace {} was replaced since this session started (it now resolves to {}",
                ws.display(),
                outside.0.canonicalize().unwrap().display()
            )) && message.contains("refusing tool calls there: start a new session"),
            "{tool} {args}: {message}"
        );
    }
    assert_eq!(entries(&outside.0), ["target.txt"]);
    assert_eq!(
        std::fs::read_to_string(outside.0.join("target.txt")).unwrap(),
        "original"
    );
    // Put it back for the clean-up.
    std::fs::remove_file(&ws).unwrap();
    std::fs::rename(base.path().join("ws.real"), &ws).unwrap();
    t.shutdown().await;
}
