//! Hardening of session logs: one writer per session (a second `dsh-host`
//! resuming or creating the same session gets `SESSION_LOCKED` and writes
//! nothing; a killed holder never blocks), logs private to their owner, and
//! bounded decoding (issue 18: a 99 KB log that inflates to 3 GB is refused
//! at a cap, in bounded memory, and left alone; a 1 KB log of one packed
//! row of millions of empty members neither stalls the listing nor
//! expands; a FIFO or a link to `/dev/zero` named like a log is skipped).
//!
//! Every wait here is on an event (a file the winner's tool creates, a
//! request the fake model server received), bounded by a generous deadline.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dsh_sdk::names::{service, session_persistence, sessions};
use dsh_sdk::vocab::event;
use dsh_testkit::fake_llm::{text, tool_calls, Answer, FakeLlm};
use dsh_testkit::headless::{assert_seqs_contiguous, lines, log_text, zstd_frames, Headless};
use dsh_testkit::measure::run_measured;
use dsh_testkit::{out, wait_for, TempDir, TestHost};
use serde_json::{json, Value};

/// A `$DSH_HOME` and a workspace, tools in danger-full-access. The model
/// stream never idles out and batched writes wait for a flush (a
/// checkpoint), so a host paused inside a tool call writes nothing until
/// the tool returns.
fn env(fake: &FakeLlm) -> Headless {
    Headless::with_stream_idle(
        fake,
        600_000,
        "[[patch]]\nid = \"session-jsonl\"\nconfig = { writeBatchMaxDelayMs = 3600000 }\n",
    )
    .env("DSH_PERMISSION_MODE", "danger-full-access")
}

/// Runs a first task to completion; returns the new session's id and log.
async fn create_session(e: &Headless, fake: &FakeLlm) -> (String, PathBuf) {
    fake.push([text("Created.")]);
    let (code, stdout, stderr) = out(&e.run(&["first", "task"]).await);
    assert_eq!((code, stdout.as_str()), (0, "Created.\n"), "{stderr}");
    let file = e.log_file();
    let id = lines(&file)[0]["id"].as_str().unwrap().to_owned();
    (id, file)
}

/// The log is whole: contiguous seqs from 0, a header first.
fn assert_contiguous(log: &[Value]) {
    assert_eq!(log[0]["type"], "session");
    assert_seqs_contiguous(&log[1..]);
}

fn assert_locked(stderr: &str, id: &str, pid: u32) {
    assert!(stderr.contains("SESSION_LOCKED"), "{stderr}");
    assert!(stderr.contains(id), "names the session: {stderr}");
    assert!(
        stderr.contains(&format!("pid {pid}")),
        "names the holder: {stderr}"
    );
}

#[tokio::test]
async fn of_two_concurrent_resumes_one_wins_and_the_other_is_locked_out_writing_nothing() {
    let fake = FakeLlm::start().await;
    let e = env(&fake);
    let (id, file) = create_session(&e, &fake).await;

    // The winner's turn stays open inside a tool call until `go` exists.
    fake.push([
        tool_calls(&[(
            "bash",
            json!({"command": "touch started; while [ ! -e go ]; do sleep 0.05; done", "description": "wait for the test"}),
        )]),
        text("Winner done."),
    ]);
    let winner = e.spawn(&["--resume", &id, "winner task"]);
    let started = e.work.path().join("started");
    wait_for("the winner's tool to start", || started.exists()).await;
    let before = std::fs::read(&file).unwrap();

    let (code, stdout, stderr) = out(&e.run(&["--resume", &id, "loser task"]).await);
    assert_ne!(code, 0, "the loser fails: {stdout}");
    assert_locked(&stderr, &id, winner.pid());
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "the loser wrote nothing"
    );
    assert_eq!(fake.requests().len(), 2, "the loser never asked the model");

    std::fs::write(e.work.path().join("go"), "").unwrap();
    let (code, stdout, stderr) = out(&winner.output().await);
    assert_eq!((code, stdout.as_str()), (0, "Winner done.\n"), "{stderr}");

    // The log loads cleanly: it resumes again, and every line is the
    // creator's, the winner's or this last resume's.
    fake.push([text("Third.")]);
    let (code, stdout, stderr) = out(&e.run(&["--resume", &id, "third", "task"]).await);
    assert_eq!((code, stdout.as_str()), (0, "Third.\n"), "{stderr}");
    let log = lines(&file);
    assert_contiguous(&log);
    assert!(!log_text(&file).contains("loser task"));
    let seeds = log.iter().filter(|l| l["type"] == event::SESSION_END_SEED);
    assert_eq!(seeds.count(), 2, "one per successful resume");
    let ends: Vec<&Value> = log
        .iter()
        .filter(|l| l["type"] == event::TURN_END)
        .collect();
    assert_eq!(ends.len(), 3);
    for (n, end) in ends.iter().enumerate() {
        assert_eq!(
            end["data"],
            json!({"turn": n + 1, "reason": {"kind": "completed"}})
        );
    }
}

#[tokio::test]
async fn a_lock_held_by_a_process_killed_with_sigkill_does_not_block_the_next_resume() {
    let fake = FakeLlm::start().await;
    let e = env(&fake);
    let (id, file) = create_session(&e, &fake).await;

    fake.push([Answer::Stall(vec![
        json!({"choices": [{"delta": {"content": "Working on"}}]}).to_string(),
    ])]);
    let holder = e.spawn(&["--resume", &id, "held task"]);
    // Its request reached the model: it resumed, so it holds the session.
    wait_for("the holder's model request", || fake.requests().len() == 2).await;
    let (code, _, stderr) = out(&e.run(&["--resume", &id, "refused"]).await);
    assert_ne!(code, 0);
    assert_locked(&stderr, &id, holder.pid());

    holder.kill(); // SIGKILL: no disposal, no unlock of its own
    fake.push([text("After the kill.")]);
    let (code, stdout, stderr) = out(&e.run(&["--resume", &id, "after", "kill"]).await);
    assert_eq!(
        (code, stdout.as_str()),
        (0, "After the kill.\n"),
        "{stderr}"
    );
    let log = lines(&file);
    assert_contiguous(&log);
    let ends: Vec<&Value> = log
        .iter()
        .filter(|l| l["type"] == event::TURN_END)
        .collect();
    assert_eq!(
        ends[1]["data"],
        json!({"turn": 2, "reason": {"kind": "interrupted"}})
    );
    assert_eq!(
        ends[2]["data"],
        json!({"turn": 3, "reason": {"kind": "completed"}})
    );
}

#[tokio::test]
async fn a_new_log_is_0600_in_a_0700_directory_whatever_the_umask() {
    let fake = FakeLlm::start().await;
    fake.push([text("Private.")]);
    let e = env(&fake);
    let mut c = e.command(&["secret", "task"]);
    // SAFETY: the closure runs in the forked child before exec and only
    // calls umask(2), which is async-signal-safe and cannot fail.
    unsafe {
        c.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let o = tokio::task::spawn_blocking(move || c.output().unwrap())
        .await
        .unwrap();
    let (code, stdout, stderr) = out(&o);
    assert_eq!((code, stdout.as_str()), (0, "Private.\n"), "{stderr}");
    let file = e.log_file();
    let mode = |p: &Path| {
        format!(
            "{:o}",
            std::fs::metadata(p).unwrap().permissions().mode() & 0o777
        )
    };
    assert_eq!(mode(&file), "600", "{}", file.display());
    let dir = file.parent().unwrap();
    assert_eq!(mode(dir), "700", "{}", dir.display());
}

/// Rows of a host that persists into `root` (shared by two hosts).
fn store_rows(root: &Path) -> String {
    format!(
        "[[row]]\nid='session'\nplugin='session'\n[[row]]\nid='jsonl'\nplugin='session-jsonl'\nconfig = {{ root = '{}' }}\n",
        root.display()
    )
}

async fn open_turn(t: &TestHost, id: &str) {
    let a = json!({"id": id, "type": event::TURN_START, "data": {"turn": 1}});
    t.call(service::SESSIONS, sessions::APPEND, a).await;
}

#[tokio::test]
async fn a_second_host_creating_the_same_id_is_refused_until_the_first_lets_go() {
    let shared = TempDir::new("hardening-root");
    let root = shared.path().join("sessions");
    let meta = json!({"id": "dup", "meta": {"cwd": "/hardening/work"}});
    let first = TestHost::start().await;
    first.apply(&store_rows(&root)).await;
    first
        .call(service::SESSIONS, sessions::CREATE, meta.clone())
        .await;
    open_turn(&first, "dup").await;
    first
        .call(service::SESSIONS, sessions::FLUSH, json!({"id": "dup"}))
        .await;
    let file = first
        .call(
            service::SESSION_PERSISTENCE,
            session_persistence::LOCATE,
            json!({"id": "dup"}),
        )
        .await["path"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = std::fs::read(&file).unwrap();

    let second = TestHost::start().await;
    second.apply(&store_rows(&root)).await;
    second
        .call(service::SESSIONS, sessions::CREATE, meta.clone())
        .await;
    open_turn(&second, "dup").await;
    let flushed = second
        .host
        .call(service::SESSIONS, sessions::FLUSH, json!({"id": "dup"}))
        .await;
    let e = flushed.expect_err("the second writer's flush is refused");
    assert_eq!(e.code, "SESSION_LOCKED", "{e}");
    assert!(e.message.contains("\"dup\""), "{e}");
    assert!(
        e.message.contains(&format!("pid {}", std::process::id())),
        "{e}"
    );
    let load = second
        .host
        .call(
            service::SESSION_PERSISTENCE,
            session_persistence::LOAD,
            json!({"id": "dup"}),
        )
        .await;
    assert_eq!(
        load.map_err(|e| e.code).err().as_deref(),
        Some("SESSION_LOCKED")
    );
    assert_eq!(std::fs::read(&file).unwrap(), before, "nothing was written");

    // Closing the session lets go of its log; another writer may load it.
    first
        .call(service::SESSIONS, sessions::CLOSE, json!({"id": "dup"}))
        .await;
    let third = TestHost::start().await;
    third.apply(&store_rows(&root)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let loaded = loop {
        match third
            .host
            .call(
                service::SESSION_PERSISTENCE,
                session_persistence::LOAD,
                json!({"id": "dup"}),
            )
            .await
        {
            Ok(v) => break v,
            Err(e) if e.code == "SESSION_LOCKED" && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("load after close: {e}"),
        }
    };
    assert_eq!(loaded["events"][0]["type"], event::TURN_START);
    // Unloading the plugin releases the log `load` locked.
    third.shutdown().await;
    let again = second
        .host
        .call(
            service::SESSION_PERSISTENCE,
            session_persistence::LOAD,
            json!({"id": "dup"}),
        )
        .await;
    assert!(again.is_ok(), "{again:?}");
    second.shutdown().await;
    first.shutdown().await;
}

/// A checksummed zstd frame of `gib` GiB of zeros, compressed as it
/// streams: about 32 KB a GiB (issue 18's "99 KB log that inflates to
/// 3 GB"), built in a second or so a GiB.
fn zeros_frame(gib: u64) -> Vec<u8> {
    use std::io::Write;
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    enc.include_checksum(true).unwrap();
    let block = vec![0u8; 1 << 20];
    for _ in 0..gib << 10 {
        enc.write_all(&block).unwrap();
    }
    enc.finish().unwrap()
}

/// `sessions show <id>`, and `--continue` picking it as the latest session,
/// both fail (exit 1) naming each of `needles` on stderr, each peaking
/// under `bound` bytes of resident memory.
async fn show_and_continue_are_refused(e: &Headless, id: &str, needles: &[&str], bound: u64) {
    let show = e.sessions(&["show", id]);
    let cont = e.command(&["--continue", "next", "task"]);
    for (what, c) in [("show", show), ("--continue", cont)] {
        let run = run_measured(c).await;
        let (stdout, stderr, peak) = (&run.stdout, &run.stderr, run.peak_bytes());
        assert_eq!(run.code, Some(1), "{what}: {stdout}");
        for needle in needles {
            assert!(stderr.contains(needle), "{what}: {needle} in {stderr}");
        }
        eprintln!("{what}: peak resident memory {} MiB", peak >> 20);
        assert!(peak < bound, "{what} peaked at {} MiB", peak >> 20);
    }
}

/// Well under the 3 GiB the bomb inflates to: the host, its plugins and
/// one line's worth of text (the 64 MiB default cap) fit several times.
const PEAK_BOUND: u64 = 512 << 20;

#[tokio::test]
async fn a_log_that_inflates_to_gigabytes_is_refused_at_a_cap_in_bounded_memory_and_left_alone() {
    let fake = FakeLlm::start().await;
    let e = env(&fake);
    let (id, file) = create_session(&e, &fake).await;
    // The session's own header frame, then 3 GiB of zeros in one frame.
    let raw = std::fs::read(&file).unwrap();
    let header = zstd_frames(&raw)[0].to_vec();
    let zeros = zeros_frame(3);
    let bomb = [header.as_slice(), &zeros].concat();
    assert!(bomb.len() < 128 << 10, "a small file: {} bytes", bomb.len());
    std::fs::write(&file, &bomb).unwrap();
    // A second log of this project whose header frame is the bomb.
    let headless = file.parent().unwrap().with_file_name("bomb-head");
    std::fs::create_dir(&headless).unwrap();
    let headless = headless.join("session.jsonl.zstd");
    std::fs::write(&headless, &zeros).unwrap();

    // The listing reads header frames, and only so much of the rest.
    let list = run_measured(e.sessions(&["list"])).await;
    let (stdout, stderr, peak) = (&list.stdout, &list.stderr, list.peak_bytes());
    assert_eq!(list.code, Some(0), "{stdout}{stderr}");
    let row = stdout.lines().find(|l| l.starts_with(&id));
    let row = row.unwrap_or_else(|| panic!("listed: {stdout}"));
    // Past the listing's read budget (32 MiB of text): listed without its
    // turns and last prompt.
    assert!(
        row.contains("cannot be read: TOO_LONG_TO_SUMMARIZE"),
        "{row}"
    );
    assert_eq!(
        stdout.lines().count(),
        2,
        "the header-less log is skipped: {stdout}"
    );
    assert!(
        stderr.contains("skipped") && stderr.contains(&headless.display().to_string()),
        "with a note: {stderr}"
    );
    eprintln!("sessions list: peak resident memory {} MiB", peak >> 20);
    assert!(peak < PEAK_BOUND, "list peaked at {} MiB", peak >> 20);

    // Reading it, or resuming it as the latest session, is refused clearly.
    let needles = [
        "SESSION_CORRUPT",
        &format!("\"{id}\""),
        "frame 2",
        "64 MiB",
        "maxLineBytes",
        &file.display().to_string(),
    ];
    show_and_continue_are_refused(&e, &id, &needles, PEAK_BOUND).await;
    let run = run_measured(e.sessions(&["show", "bomb-head"])).await;
    let stderr = &run.stderr;
    assert_eq!(run.code, Some(1));
    assert!(
        stderr.contains("SESSION_CORRUPT")
            && stderr.contains("frame 1")
            && stderr.contains("header"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&file).unwrap(),
        bomb,
        "the file is left alone"
    );
    assert_eq!(std::fs::read(&headless).unwrap(), zeros);
    assert_eq!(fake.requests().len(), 1, "nothing reached the model");
}

/// A checksummed zstd frame of `text`, compressed hard (level 19).
fn frame(text: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 19).unwrap();
    enc.include_checksum(true).unwrap();
    enc.write_all(text).unwrap();
    enc.finish().unwrap()
}

/// The reviewer's `mkbomb.py <home> <cwd> <id> packed <n>`: a header frame,
/// then one frame of one packed row of `n` empty members (3 bytes each in
/// the text, a whole event each once expanded).
fn packed_bomb(id: &str, cwd: &str, n: usize) -> Vec<u8> {
    let header = json!({"type": "session", "version": 0, "id": id, "createdAt": 1796294016359u64, "cwd": cwd, "delegationDepth": 0});
    let mut row = String::from(
        r#"{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"texts":["#,
    );
    row.push_str(&"\"\",".repeat(n - 1));
    row.push_str("\"\"],\"dt\":[]}}\n");
    [
        frame(format!("{header}\n").as_bytes()),
        frame(row.as_bytes()),
    ]
    .concat()
}

/// Far below the 3 GB the packed bomb took to list: the host and its
/// plugins, and the listing's read budget.
const LIST_PEAK_BOUND: u64 = 256 << 20;

#[tokio::test]
async fn a_one_kilobyte_packed_row_bomb_neither_stalls_the_listing_nor_expands() {
    let fake = FakeLlm::start().await;
    let e = env(&fake);
    let (id, file) = create_session(&e, &fake).await;
    let before = std::fs::read(&file).unwrap();
    let cwd = lines(&file)[0]["cwd"].as_str().unwrap().to_owned();
    // Beside the real session, written after it: the latest of the
    // directory, so `--continue` picks it.
    let bomb = file.parent().unwrap().with_file_name("session-bomb");
    std::fs::create_dir(&bomb).unwrap();
    let bomb = bomb.join("session.jsonl.zstd");
    let bytes = packed_bomb("session-bomb", &cwd, 4_000_000);
    assert!(bytes.len() < 2048, "a small file: {} bytes", bytes.len());
    std::fs::write(&bomb, &bytes).unwrap();

    let list = run_measured(e.sessions(&["list"])).await;
    let (stdout, stderr, peak) = (&list.stdout, &list.stderr, list.peak_bytes());
    assert_eq!(list.code, Some(0), "{stdout}{stderr}");
    assert!(stdout.lines().any(|l| l.starts_with(&id)), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("session-bomb")),
        "{stdout}"
    );
    eprintln!("sessions list: peak resident memory {} MiB", peak >> 20);
    assert!(peak < LIST_PEAK_BOUND, "list peaked at {} MiB", peak >> 20);

    let needles = [
        "SESSION_CORRUPT",
        "\"session-bomb\"",
        "4000000 entries",
        "more than 131072",
        "maxRowMembers",
        &bomb.display().to_string(),
    ];
    show_and_continue_are_refused(&e, "session-bomb", &needles, LIST_PEAK_BOUND).await;
    assert_eq!(
        std::fs::read(&bomb).unwrap(),
        bytes,
        "the bomb is left alone"
    );
    assert_eq!(std::fs::read(&file).unwrap(), before, "the session too");
    assert_eq!(fake.requests().len(), 1, "nothing reached the model");
}

/// Runs `c` to its end, or kills it after a generous deadline (a command
/// that blocks forever fails the test instead of hanging it).
async fn finishes(mut c: std::process::Command) -> (Option<i32>, String, String) {
    use std::process::Stdio;
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("still running after a minute: it blocked on a log");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let o = child.wait_with_output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (o.status.code(), text(&o.stdout), text(&o.stderr))
}

#[tokio::test]
async fn a_fifo_or_a_link_to_dev_zero_named_like_a_log_is_skipped_never_read() {
    let fake = FakeLlm::start().await;
    let e = env(&fake);
    let (id, file) = create_session(&e, &fake).await;
    let folder = file.parent().unwrap().parent().unwrap().to_owned();
    let mkfifo = |p: &Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    };
    let fifo = folder.join("fifo.jsonl");
    mkfifo(&fifo);
    std::os::unix::fs::symlink("/dev/zero", folder.join("zero.jsonl")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", folder.join("zero.jsonl.zstd")).unwrap();
    std::fs::create_dir(folder.join("piped")).unwrap();
    mkfifo(&folder.join("piped").join("session.jsonl"));
    std::fs::create_dir(folder.join("linked")).unwrap();
    // A link to a real log is not followed either.
    std::os::unix::fs::symlink(&file, folder.join("linked").join("session.jsonl.zstd")).unwrap();

    let (code, stdout, stderr) = finishes(e.sessions(&["list"])).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_eq!(stdout.lines().count(), 2, "only the real session: {stdout}");
    assert!(
        stdout.lines().nth(1).is_some_and(|l| l.starts_with(&id)),
        "{stdout}"
    );
    let (code, _, stderr) = finishes(e.sessions(&["show", "linked"])).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("symbolic link"), "{stderr}");

    fake.push([text("Continued.")]);
    let (code, stdout, stderr) = finishes(e.command(&["--continue", "next"])).await;
    assert_eq!(
        (code, stdout.as_str()),
        (Some(0), "Continued.\n"),
        "{stderr}"
    );
    let kinds = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(
        std::os::unix::fs::FileTypeExt::is_fifo(&kinds),
        "the FIFO is left alone"
    );
}
