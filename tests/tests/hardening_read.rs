//! `read`, `glob` and `grep` against files that are not regular (a FIFO would
//! block the reading thread forever, a device never ends) and against a huge
//! file (1 GiB, sparse: no disk cost), through the real pipeline
//! (`tools.execute`) with the real plugin builds.
//!
//! Every test takes `SERIAL`: the memory test measures this process's peak
//! RSS, which another test's host loading its plugins would disturb.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::ffi::CString;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use dsh_sdk::names::code;
use dsh_testkit::tools::{run, text_of};
use dsh_testkit::{TempDir, TestHost};
use serde_json::{json, Value};
use tokio::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::const_new(());

/// A generous bound on a call that must not block; not a timing assertion.
const DEADLINE: Duration = Duration::from_secs(10);
/// Peak RSS growth a call may cause; reading 1 GiB whole would break it.
const RSS_BOUND_KIB: u64 = 256 * 1024;
const GIB: u64 = 1 << 30;

async fn tools_host() -> TestHost {
    dsh_testkit::tools::host("danger-full-access", "").await
}

/// `run` within `DEADLINE`; past it, `unblock` runs (so a regression fails
/// the test instead of hanging it) and the test fails.
async fn run_bounded(
    t: &TestHost,
    ws: &Path,
    name: &str,
    args: Value,
    unblock: impl FnOnce(),
) -> Value {
    match tokio::time::timeout(DEADLINE, run(t, ws, name, args.clone())).await {
        Ok(r) => r,
        Err(_) => {
            unblock();
            panic!("{name} {args} did not answer within {DEADLINE:?}");
        }
    }
}

fn code_of(result: &Value) -> &Value {
    &result["error"]["info"]["code"]
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo {}", path.display());
}

/// Lets a reader blocked on the FIFO `path` go: a writer opens and closes it.
fn release_fifo(path: &Path) {
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path);
}

#[tokio::test]
async fn read_of_a_fifo_is_refused_promptly_and_the_plugin_stays_healthy() {
    let _serial = SERIAL.lock().await;
    let t = tools_host().await;
    let ws = TempDir::new("harden-fifo");
    let fifo = ws.path().join("pipe");
    mkfifo(&fifo);
    let r = run_bounded(&t, ws.path(), "read", json!({"file_path": "pipe"}), || {
        release_fifo(&fifo)
    })
    .await;
    assert_eq!(code_of(&r), "FS_NOT_REGULAR_FILE", "{r}");
    assert!(text_of(&r).contains("is a FIFO (named pipe)"), "{r}");
    // The plugin still works, and unloads: no thread of it is stuck.
    std::fs::write(ws.path().join("a.txt"), "hello\n").unwrap();
    let r = run(&t, ws.path(), "read", json!({"file_path": "a.txt"})).await;
    assert!(
        text_of(&r).contains("1: hello\n\n(End of file - total 1 lines)"),
        "{r}"
    );
    assert_eq!(format!("{:?}", t.status("read").await.state), "Active");
    t.apply("[[row]]\nid='session'\nplugin='session'\n[[row]]\nid='tools'\nplugin='tools'\n")
        .await;
    // A thread stuck in the FIFO would keep the runtime from stopping, and
    // the generation would be quarantined.
    t.assert_unloaded_cleanly("tool-read");
    t.shutdown().await;
}

#[tokio::test]
async fn read_of_a_character_device_is_refused() {
    let _serial = SERIAL.lock().await;
    let t = tools_host().await;
    let ws = TempDir::new("harden-dev");
    let r = run_bounded(
        &t,
        ws.path(),
        "read",
        json!({"file_path": "/dev/zero", "limit": 1}),
        || {},
    )
    .await;
    assert_eq!(code_of(&r), "FS_NOT_REGULAR_FILE", "{r}");
    assert!(text_of(&r).contains("is a character device"), "{r}");
    let r = run(&t, ws.path(), "read", json!({"file_path": "/"})).await;
    assert_eq!(code_of(&r), "FS_NOT_REGULAR_FILE", "{r}");
    let r = run(&t, ws.path(), "read", json!({"file_path": "missing.txt"})).await;
    assert_eq!(code_of(&r), code::FS_NOT_FOUND, "{r}");
    t.shutdown().await;
}

#[tokio::test]
async fn grep_and_glob_skip_a_fifo_and_refuse_one_named_directly() {
    let _serial = SERIAL.lock().await;
    let t = tools_host().await;
    let ws = TempDir::new("harden-search");
    std::fs::write(ws.path().join("a.txt"), "needle\n").unwrap();
    let fifo = ws.path().join("pipe.txt");
    mkfifo(&fifo);
    let release = || release_fifo(&fifo);
    let grep = json!({"pattern": "needle"});
    let r = run_bounded(&t, ws.path(), "grep", grep, release).await;
    assert_eq!(
        text_of(&r),
        "Found 1 matches\n\na.txt\nLine 1: needle",
        "{r}"
    );
    let glob = json!({"pattern": "*.txt"});
    let r = run_bounded(&t, ws.path(), "glob", glob, release).await;
    assert_eq!(text_of(&r), "a.txt", "{r}");
    let named = json!({"pattern": "needle", "path": "pipe.txt"});
    let r = run_bounded(&t, ws.path(), "grep", named, release).await;
    assert_eq!(code_of(&r), "SEARCH_FAILED", "{r}");
    assert!(text_of(&r).contains("is a FIFO (named pipe)"), "{r}");
    t.shutdown().await;
}

#[tokio::test]
async fn grep_never_opens_an_ignore_file_that_is_a_fifo() {
    let _serial = SERIAL.lock().await;
    let t = tools_host().await;
    let ws = TempDir::new("harden-ignore");
    let sub = ws.path().join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(ws.path().join("a.txt"), "needle\n").unwrap();
    std::fs::write(sub.join("b.txt"), "needle\n").unwrap();
    // The walker reads `.ignore` files itself: a directory whose one is a
    // FIFO is skipped, unentered.
    let fifo = sub.join(".ignore");
    mkfifo(&fifo);
    let grep = json!({"pattern": "needle"});
    let r = run_bounded(&t, ws.path(), "grep", grep, || release_fifo(&fifo)).await;
    assert_eq!(
        text_of(&r),
        "Found 1 matches\n\na.txt\nLine 1: needle",
        "{r}"
    );
    // At the root it is read before the walk: the search fails, naming it.
    let at_root = json!({"pattern": "needle", "path": "sub"});
    let r = run_bounded(&t, ws.path(), "grep", at_root, || release_fifo(&fifo)).await;
    assert_eq!(code_of(&r), "SEARCH_FAILED", "{r}");
    assert!(
        text_of(&r).contains(".ignore is a FIFO (named pipe)"),
        "{r}"
    );
    t.shutdown().await;
}

/// A 1 GiB file that costs no disk: three lines, a hole, a last line.
fn sparse_file(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(b"head one\nhead two\nhead three\n").unwrap();
    f.set_len(GIB).unwrap();
    f.seek(SeekFrom::End(0)).unwrap();
    f.write_all(b"tail line\n").unwrap();
}

/// The peak resident set of this process so far, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in /proc/self/status"))
}

/// Resets the peak to the current resident set (Linux ≥ 4.0).
fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

/// How much `call` raised the peak RSS, in KiB, and its result.
async fn peak_growth<F: std::future::Future<Output = Value>>(call: F) -> (u64, Value) {
    reset_peak_rss();
    let before = peak_rss_kib();
    let r = call.await;
    (peak_rss_kib().saturating_sub(before), r)
}

#[tokio::test]
async fn a_huge_file_is_read_and_grepped_in_bounded_memory() {
    let _serial = SERIAL.lock().await;
    let t = tools_host().await;
    let ws = TempDir::new("harden-huge");
    let huge = ws.path().join("huge.log");
    sparse_file(&huge);
    // Warm both tools up, so first-call allocations are not counted.
    std::fs::write(ws.path().join("small.txt"), "head x\n").unwrap();
    run(&t, ws.path(), "read", json!({"file_path": "small.txt"})).await;
    run(
        &t,
        ws.path(),
        "grep",
        json!({"pattern": "head", "path": "small.txt"}),
    )
    .await;

    let read = json!({"file_path": "huge.log", "limit": 2});
    let (grown, r) = peak_growth(run(&t, ws.path(), "read", read)).await;
    assert!(
        text_of(&r).contains(
            "1: head one\n2: head two\n\n(Showing lines 1-2 of 4. Use offset=3 to continue.)"
        ),
        "{r}"
    );
    assert!(
        grown < RSS_BOUND_KIB,
        "read raised the peak RSS by {grown} KiB"
    );

    // Line 4 is the 1 GiB hole followed by the tail: shown cut to 2000 chars.
    let last = json!({"file_path": "huge.log", "offset": 4});
    let (grown, r) = peak_growth(run(&t, ws.path(), "read", last)).await;
    assert!(
        text_of(&r).contains("(line truncated to 2000 chars)\n\n(End of file - total 4 lines)"),
        "{r}"
    );
    assert!(
        grown < RSS_BOUND_KIB,
        "read raised the peak RSS by {grown} KiB"
    );

    // A file with a NUL byte is searched only up to the buffer holding it, as
    // ripgrep does for the files it walks: this one is skipped as binary
    // instead of its 1 GiB line being buffered.
    for args in [
        json!({"pattern": "head two|tail line"}),
        json!({"pattern": "tail line", "path": "huge.log"}),
    ] {
        let (grown, r) = peak_growth(run(&t, ws.path(), "grep", args.clone())).await;
        assert_eq!(text_of(&r), "No matches found", "{args}: {r}");
        assert!(
            grown < RSS_BOUND_KIB,
            "grep {args} raised the peak RSS by {grown} KiB"
        );
    }
    t.shutdown().await;
}
