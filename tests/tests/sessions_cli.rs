//! Sessions on disk and from the command line (issue 10, items 7 and 8):
//! session-jsonl writes the original's layout and encoding, and what it
//! writes passes the original's reader rules (checked here by a small
//! reader written from them, reference dsh-core §8.3); `compression =
//! "none"` writes `session.jsonl`; `dsh-host sessions list | show | fork |
//! rm`, `--continue` and `--resume` end to end against the real host, the
//! real plugins and the fake model server; a folder key two directories
//! share never yields one's session to the other (issue 18).
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::path::{Path, PathBuf};

use dsh_sdk::names::{service, session_persistence, sessions};
use dsh_sdk::vocab::event;
use dsh_testkit::fake_llm::{text, tool_calls, FakeLlm};
use dsh_testkit::headless::{lines, zstd_frames, Headless};
use dsh_testkit::{out, output, wait_for, TestHost};
use serde_json::{json, Value};

const CWD: &str = "/work/my project:x";

/// The original's `projectKey` for [`CWD`].
const CWD_KEY: &str = "--work-my~0020project-x--";

/// A host with `session` and `session-jsonl` under `$HOME/sessions`, with
/// `extra` config for the backend; batches wait for a flush.
async fn store(extra: &str) -> (TestHost, PathBuf) {
    let t = TestHost::start().await;
    let root = t.home.path().join("sessions");
    t.apply(&format!(
        "[[row]]\nid='session'\nplugin='session'\n[[row]]\nid='jsonl'\nplugin='session-jsonl'\nconfig = {{ root = '{}', writeBatchMaxDelayMs = 3600000{extra} }}\n",
        root.display()
    ))
    .await;
    (t, root)
}

async fn append(t: &TestHost, id: &str, kind: &str, data: Value) {
    t.call(
        service::SESSIONS,
        sessions::APPEND,
        json!({"id": id, "type": kind, "data": data}),
    )
    .await;
}

/// The event types of stored session `id`, as `load` reads them back.
async fn stored_kinds(t: &TestHost, id: &str) -> Vec<String> {
    let stored = t
        .call(
            service::SESSION_PERSISTENCE,
            session_persistence::LOAD,
            json!({ "id": id }),
        )
        .await;
    stored["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["type"].as_str().map(str::to_owned))
        .collect()
}

async fn flush(t: &TestHost, id: &str) {
    t.call(service::SESSIONS, sessions::FLUSH, json!({"id": id}))
        .await;
}

/// Creates session `id` of [`CWD`] and flushes two batches (and a third,
/// empty flush): one turn start, then the turn's end.
async fn two_batches(t: &TestHost, id: &str) {
    t.call(
        service::SESSIONS,
        sessions::CREATE,
        json!({"id": id, "meta": {"cwd": CWD}}),
    )
    .await;
    append(t, id, event::TURN_START, json!({"turn": 1})).await;
    append(t, id, event::STEP_START, json!({"turn": 1, "step": 1})).await;
    flush(t, id).await;
    append(t, id, event::STEP_END, json!({"turn": 1, "step": 1})).await;
    append(
        t,
        id,
        event::TURN_END,
        json!({"turn": 1, "reason": {"kind": "completed"}}),
    )
    .await;
    flush(t, id).await;
    flush(t, id).await;
}

/// What the original's reader checks of a root before it lists anything:
/// every project directory holds only session directories (a flat
/// `<id>.jsonl*` is refused), and no session directory holds the other
/// encoding's transcript. The transcripts found.
fn originals_root_check(root: &Path, name: &str, other: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for project in std::fs::read_dir(root).unwrap().flatten() {
        for entry in std::fs::read_dir(project.path()).unwrap().flatten() {
            let path = entry.path();
            assert!(
                path.is_dir(),
                "the original refuses a flat artifact: {}",
                path.display()
            );
            assert!(
                !path.join(other).exists(),
                "the original refuses a mixed root: {}",
                path.display()
            );
            found.push(path.join(name));
        }
    }
    found
}

/// The original's zstd rules for one transcript: every frame checksummed
/// and decodable, the first exactly one header line, every other frame
/// whole lines, seqs contiguous. The frames' texts.
fn originals_zstd_frames(path: &Path) -> Vec<String> {
    let raw = std::fs::read(path).unwrap();
    let frames = zstd_frames(&raw);
    let total: usize = frames.iter().map(|f| f.len()).sum();
    assert_eq!(total, raw.len(), "no torn or stray bytes");
    let texts: Vec<String> = frames
        .iter()
        .map(|f| {
            assert_eq!(f[4] & 0x04, 0x04, "each frame has a content checksum");
            String::from_utf8(zstd::stream::decode_all(*f).unwrap()).unwrap()
        })
        .collect();
    assert_eq!(
        texts[0].matches('\n').count(),
        1,
        "the header frame is one line: {}",
        texts[0]
    );
    assert!(texts[0].ends_with('\n'));
    let mut seq = 0;
    for t in &texts[1..] {
        assert!(t.ends_with('\n'), "a frame holds whole lines: {t}");
        for line in t.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["seq"], seq, "{line}");
            seq += 1;
        }
    }
    texts
}

#[tokio::test]
async fn a_new_session_is_the_originals_zstd_transcript_one_frame_per_flush() {
    let (t, root) = store("").await;
    two_batches(&t, "s/1").await;
    let found = originals_root_check(&root, "session.jsonl.zstd", "session.jsonl");
    let expected = root
        .join(CWD_KEY)
        .join("s~002F1")
        .join("session.jsonl.zstd");
    assert_eq!(
        found,
        std::slice::from_ref(&expected),
        "<key> from the cwd, id encoded"
    );
    let frames = originals_zstd_frames(&expected);
    assert_eq!(
        frames.len(),
        3,
        "header, then one frame per non-empty flush"
    );
    let header: Value = serde_json::from_str(frames[0].trim_end()).unwrap();
    assert_eq!(
        (
            header["type"].clone(),
            header["id"].clone(),
            header["cwd"].clone()
        ),
        (json!("session"), json!("s/1"), json!(CWD))
    );
    assert_eq!(frames[1].lines().count(), 2);
    assert_eq!(frames[2].lines().count(), 2);
    let located = t
        .call(
            service::SESSION_PERSISTENCE,
            session_persistence::LOCATE,
            json!({"id": "s/1"}),
        )
        .await;
    assert_eq!(located["path"], json!(expected));
    // Closed, it is read back identically, and appends are frames.
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": "s/1"}))
        .await;
    let t2 = t;
    let kinds = stored_kinds(&t2, "s/1").await;
    assert_eq!(
        kinds,
        [
            event::TURN_START,
            event::STEP_START,
            event::STEP_END,
            event::TURN_END
        ]
    );
    t2.call(service::SESSIONS, sessions::RESUME, json!({"id": "s/1"}))
        .await;
    append(&t2, "s/1", event::TURN_START, json!({"turn": 2})).await;
    flush(&t2, "s/1").await;
    let frames = originals_zstd_frames(&expected);
    assert_eq!(frames.len(), 4, "the resume's batch is one more frame");
    t2.shutdown().await;
}

#[tokio::test]
async fn a_torn_final_frame_is_repaired_and_a_bad_checksum_is_corruption() {
    let (t, root) = store("").await;
    two_batches(&t, "crash").await;
    two_batches(&t, "flip").await;
    for id in ["crash", "flip"] {
        t.call(service::SESSIONS, sessions::CLOSE, json!({"id": id}))
            .await;
    }
    let path = |id: &str| root.join(CWD_KEY).join(id).join("session.jsonl.zstd");

    // A crash mid-append: the last frame lacks its last bytes. It is cut
    // off, the turn it ended is closed again, and the log is whole.
    let raw = std::fs::read(path("crash")).unwrap();
    std::fs::write(path("crash"), &raw[..raw.len() - 3]).unwrap();
    let kinds = stored_kinds(&t, "crash").await;
    assert_eq!(kinds[..2], [event::TURN_START, event::STEP_START]);
    assert_eq!(
        kinds.last().map(String::as_str),
        Some(event::TURN_END),
        "{kinds:?}"
    );
    let frames = originals_zstd_frames(&path("crash"));
    assert_eq!(frames.len(), 3, "the repair is one frame");

    // A flipped byte in a complete frame fails its checksum: corruption,
    // and the file is left as it was.
    let mut raw = std::fs::read(path("flip")).unwrap();
    let last = raw.len() - 1;
    raw[last] ^= 0xff;
    std::fs::write(path("flip"), &raw).unwrap();
    let refused = t
        .host
        .call(
            service::SESSION_PERSISTENCE,
            session_persistence::LOAD,
            json!({"id": "flip"}),
        )
        .await
        .err()
        .map(|e| (e.code.clone(), e.message.clone()));
    let (code, message) = refused.expect("refused");
    assert_eq!(code, "SESSION_CORRUPT", "{message}");
    assert!(message.contains("checksum"), "{message}");
    assert_eq!(std::fs::read(path("flip")).unwrap(), raw);
    t.shutdown().await;
}

#[tokio::test]
async fn compression_none_writes_session_jsonl_in_the_session_directory() {
    let (t, root) = store(", compression = 'none'").await;
    two_batches(&t, "plain-1").await;
    let found = originals_root_check(&root, "session.jsonl", "session.jsonl.zstd");
    let expected = root.join(CWD_KEY).join("plain-1").join("session.jsonl");
    assert_eq!(found, std::slice::from_ref(&expected));
    let log = lines(&expected);
    assert_eq!(log[0]["type"], "session");
    assert_eq!(log.len(), 5, "header + 4 events, plain text");
    t.shutdown().await;
}

#[tokio::test]
async fn an_unknown_compression_is_refused_naming_the_value() {
    let t = TestHost::start().await;
    let root = t.home.path().join("sessions");
    t.apply(&format!(
        "[[row]]\nid='jsonl'\nplugin='session-jsonl'\nconfig = {{ root = '{}', compression = 'gzip' }}\n",
        root.display()
    ))
    .await;
    assert_eq!(format!("{:?}", t.status("jsonl").await.state), "Failed");
    assert_eq!(
        t.reports_with("INVALID_CONFIG").len(),
        1,
        "{:?}",
        t.host.reports()
    );
    assert!(!t.reports_with("gzip").is_empty(), "{:?}", t.host.reports());
    t.shutdown().await;
}

#[tokio::test]
async fn a_session_another_host_is_writing_cannot_be_removed() {
    let (t, root) = store("").await;
    two_batches(&t, "held").await;
    // This host holds the live session's lock: a second host's remove is
    // refused, and so is this host's own while the session is open.
    let other = TestHost::start().await;
    other
        .apply(&format!(
            "[[row]]\nid='jsonl'\nplugin='session-jsonl'\nconfig = {{ root = '{}' }}\n",
            root.display()
        ))
        .await;
    let refused = other
        .host
        .call(
            service::SESSION_PERSISTENCE,
            session_persistence::REMOVE,
            json!({"id": "held"}),
        )
        .await
        .err()
        .map(|e| (e.code.clone(), e.message.clone()));
    let (code, message) = refused.expect("refused");
    assert_eq!(code, "SESSION_LOCKED", "{message}");
    assert!(message.contains("held"), "{message}");
    let own = t
        .host
        .call(
            service::SESSION_PERSISTENCE,
            session_persistence::REMOVE,
            json!({"id": "held"}),
        )
        .await
        .err()
        .map(|e| e.code);
    assert_eq!(own.as_deref(), Some("SESSION_LOCKED"));
    let dir = root.join(CWD_KEY).join("held");
    assert!(dir.join("session.jsonl.zstd").is_file(), "nothing removed");
    // Once closed it goes, directory and all; then it is not found.
    t.call(service::SESSIONS, sessions::CLOSE, json!({"id": "held"}))
        .await;
    other
        .call(
            service::SESSION_PERSISTENCE,
            session_persistence::REMOVE,
            json!({"id": "held"}),
        )
        .await;
    assert!(!dir.exists());
    let gone = other
        .host
        .call(
            service::SESSION_PERSISTENCE,
            session_persistence::REMOVE,
            json!({"id": "held"}),
        )
        .await
        .err()
        .map(|e| e.code);
    assert_eq!(gone.as_deref(), Some("SESSION_NOT_FOUND"));
    other.shutdown().await;
    t.shutdown().await;
}

/// A home and workspace; tools in danger-full-access.
fn env(fake: &FakeLlm) -> Headless {
    Headless::with_stream_idle(fake, 600_000, "").env("DSH_PERMISSION_MODE", "danger-full-access")
}

/// `dsh-host sessions <args> --patch <patch>` in the workspace.
fn sessions_cmd(e: &Headless, args: &[&str]) -> (i32, String, String) {
    sessions_cmd_in(e, e.work.path(), args)
}

/// `dsh-host sessions <args> --patch <patch>` in directory `dir`.
fn sessions_cmd_in(e: &Headless, dir: &Path, args: &[&str]) -> (i32, String, String) {
    output(e.sessions(args).current_dir(dir))
}

/// The stored session ids of the workspace, from `sessions list`.
fn listed(e: &Headless) -> Vec<String> {
    let (code, stdout, stderr) = sessions_cmd(e, &["list"]);
    assert_eq!(code, 0, "{stderr}");
    stdout
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn sessions_list_show_fork_and_rm_from_the_command_line() {
    let fake = FakeLlm::start().await;
    fake.push([
        tool_calls(&[("read", json!({"file_path": "notes.md"}))]),
        text("The notes say hi."),
    ]);
    let e = env(&fake);
    std::fs::write(e.work.path().join("notes.md"), "hi\n").unwrap();
    let (code, stdout, stderr) = out(&e.run(&["summarize", "notes.md"]).await);
    assert_eq!(
        (code, stdout.as_str()),
        (0, "The notes say hi.\n"),
        "{stderr}"
    );
    let ids = listed(&e);
    assert_eq!(ids.len(), 1);
    let id = ids[0].clone();

    let (code, shown, stderr) = sessions_cmd(&e, &["show", &id]);
    assert_eq!(code, 0, "{stderr}");
    assert!(shown.starts_with(&format!("session {id}\n")), "{shown}");
    let cwd = e.work.path().canonicalize().unwrap().display().to_string();
    assert!(shown.contains(&format!("cwd     {cwd}\n")), "{shown}");
    let conversation: Vec<&str> = shown
        .lines()
        .skip_while(|l| !l.is_empty())
        .skip(1)
        .collect();
    assert_eq!(conversation[0], "user: summarize notes.md", "{shown}");
    assert!(
        conversation[1].starts_with("tool call: read ") && conversation[1].contains("notes.md"),
        "{shown}"
    );
    assert!(conversation[2].starts_with("tool result: "), "{shown}");
    assert_eq!(conversation[3], "assistant: The notes say hi.", "{shown}");

    let source_log = e.log_file();
    let before = std::fs::read(&source_log).unwrap();
    let (code, forked, stderr) = sessions_cmd(&e, &["fork", &id]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        std::fs::read(&source_log).unwrap(),
        before,
        "forking leaves the source as it was"
    );
    let child = forked.trim().to_owned();
    assert!(!child.is_empty() && child != id, "{forked}");
    let mut both = listed(&e);
    both.sort();
    let mut want = vec![id.clone(), child.clone()];
    want.sort();
    assert_eq!(both, want);
    let (code, child_shown, stderr) = sessions_cmd(&e, &["show", &child]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        child_shown.contains(&format!("forked  from {id}\n")),
        "{child_shown}"
    );
    assert!(
        child_shown.contains("user: summarize notes.md"),
        "{child_shown}"
    );

    let (code, removed, stderr) = sessions_cmd(&e, &["rm", &child]);
    assert_eq!(
        (code, removed.as_str()),
        (0, format!("removed {child}\n").as_str()),
        "{stderr}"
    );
    assert_eq!(listed(&e), std::slice::from_ref(&id));

    for args in [["rm", &child], ["show", "nope"], ["fork", "nope"]] {
        let (code, stdout, stderr) = sessions_cmd(&e, &args);
        assert_eq!(code, 1, "{args:?}: {stdout}");
        assert!(stderr.contains("SESSION_NOT_FOUND"), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn continue_resumes_the_latest_session_of_the_directory() {
    let fake = FakeLlm::start().await;
    let e = env(&fake);
    let (code, _, stderr) = out(&e.run(&["--continue", "next"]).await);
    assert_eq!(code, 1);
    assert!(stderr.contains("no stored session of"), "{stderr}");

    fake.push([text("First.")]);
    let (code, _, stderr) = out(&e.run(&["first", "task"]).await);
    assert_eq!(code, 0, "{stderr}");
    fake.push([text("Second.")]);
    let (code, _, stderr) = out(&e.run(&["second", "task"]).await);
    assert_eq!(code, 0, "{stderr}");
    let ids = listed(&e);
    assert_eq!(ids.len(), 2);
    // The latest is the one written last: resuming the first makes it so.
    let first = ids
        .iter()
        .find(|id| {
            let (_, shown, _) = sessions_cmd(&e, &["show", id]);
            shown.contains("user: first task")
        })
        .unwrap()
        .clone();
    fake.push([text("Resumed.")]);
    let (code, stdout, stderr) = out(&e.run(&["--resume", &first, "third", "task"]).await);
    assert_eq!((code, stdout.as_str()), (0, "Resumed.\n"), "{stderr}");
    fake.push([text("Continued.")]);
    let (code, stdout, stderr) = out(&e.run(&["--continue", "fourth", "task"]).await);
    assert_eq!((code, stdout.as_str()), (0, "Continued.\n"), "{stderr}");
    let sent = &fake.requests()[3]["messages"];
    let users: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .filter(|c| c.ends_with("task"))
        .collect();
    assert_eq!(users, ["first task", "third task", "fourth task"], "{sent}");
    assert_eq!(listed(&e).len(), 2, "no new session");

    let (code, _, stderr) = out(&e.run(&["--continue", "--resume", &first, "x"]).await);
    assert_eq!(code, 1);
    assert!(stderr.contains("cannot be combined"), "{stderr}");
}

#[tokio::test]
async fn a_session_being_written_cannot_be_removed_from_the_command_line() {
    let fake = FakeLlm::start().await;
    let e = env(&fake);
    fake.push([text("Created.")]);
    let (code, _, stderr) = out(&e.run(&["first", "task"]).await);
    assert_eq!(code, 0, "{stderr}");
    let id = listed(&e).remove(0);
    let file = e.log_file();
    fake.push([
        tool_calls(&[(
            "bash",
            json!({"command": "touch started; while [ ! -e go ]; do sleep 0.05; done", "description": "wait for the test"}),
        )]),
        text("Done."),
    ]);
    let writer = e.spawn(&["--resume", &id, "wait"]);
    let started = e.work.path().join("started");
    wait_for("the writer's tool to start", || started.exists()).await;
    let (code, stdout, stderr) = sessions_cmd(&e, &["rm", &id]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stderr.contains("SESSION_LOCKED"), "{stderr}");
    assert!(
        stderr.contains(&format!("pid {}", writer.pid())),
        "{stderr}"
    );
    assert!(file.is_file(), "nothing removed");
    std::fs::write(e.work.path().join("go"), "").unwrap();
    let (code, _, stderr) = out(&writer.output().await);
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = sessions_cmd(&e, &["rm", &id]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!file.exists() && listed(&e).is_empty());
}

/// `dsh-host --profile headless <args>` in directory `dir`.
async fn run_in(e: &Headless, dir: &Path, args: &[&str]) -> (i32, String, String) {
    let mut c = e.command(args);
    c.current_dir(dir);
    let o = tokio::task::spawn_blocking(move || c.output().unwrap())
        .await
        .unwrap();
    out(&o)
}

#[tokio::test]
async fn a_colliding_folder_key_never_yields_another_directorys_session() {
    let fake = FakeLlm::start().await;
    let e = env(&fake);
    let (xy, x_y, id, file) = colliding_directories(&e, &fake).await;
    let folder = file.parent().and_then(Path::parent).unwrap();
    assert!(
        folder.to_string_lossy().ends_with("-a-x-y--"),
        "one folder key for both directories: {}",
        folder.display()
    );
    let before = std::fs::read(&file).unwrap();

    // From x-y: not listed, nothing to continue, and no resume by id.
    nothing_to_continue_in(&e, &x_y).await;
    let (code, _, stderr) = run_in(&e, &x_y, &["--resume", &id, "next"]).await;
    assert_eq!(code, 1);
    for needle in [
        "SESSION_OTHER_DIRECTORY",
        &id,
        &xy.display().to_string(),
        &x_y.display().to_string(),
    ] {
        assert!(stderr.contains(needle), "{needle} in {stderr}");
    }
    assert_eq!(std::fs::read(&file).unwrap(), before, "x/y's log unchanged");
    assert_eq!(e.session_files().len(), 1, "nothing new was written");
    assert_eq!(fake.requests().len(), 1, "nothing reached the model");

    // From x/y it is there, and continues.
    let (code, listed, stderr) = sessions_cmd_in(&e, &xy, &["list"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        listed.lines().nth(1).is_some_and(|l| l.starts_with(&id)),
        "{listed}"
    );
    fake.push([text("Continued.")]);
    let (code, stdout, stderr) = run_in(&e, &xy, &["--continue", "next"]).await;
    assert_eq!((code, stdout.as_str()), (0, "Continued.\n"), "{stderr}");
}

/// x/y and x-y share one folder key; one session is created in x/y.
/// Returns the two directories, x/y's session id and its log.
async fn colliding_directories(
    e: &Headless,
    fake: &FakeLlm,
) -> (PathBuf, PathBuf, String, PathBuf) {
    let base = e.work.path().canonicalize().unwrap().join("a");
    let (xy, x_y) = (base.join("x").join("y"), base.join("x-y"));
    std::fs::create_dir_all(&xy).unwrap();
    std::fs::create_dir_all(&x_y).unwrap();
    let (id, file) = first_task_in(e, fake, &xy, "x/y").await;
    (xy, x_y, id, file)
}

/// From `dir`, `sessions list` shows no session (its header line only)
/// and `--continue` finds none.
async fn nothing_to_continue_in(e: &Headless, dir: &Path) {
    let (code, listed, stderr) = sessions_cmd_in(e, dir, &["list"]);
    assert_eq!((code, listed.lines().count()), (0, 1), "{listed}{stderr}");
    let (code, _, stderr) = run_in(e, dir, &["--continue", "next"]).await;
    assert_eq!(code, 1);
    let none = format!("no stored session of {} to continue", dir.display());
    assert!(stderr.contains(&none), "{stderr}");
}

/// Runs a first task in `dir` (`task of <name>`, answered `In <name>.`);
/// returns its session's id and log.
async fn first_task_in(e: &Headless, fake: &FakeLlm, dir: &Path, name: &str) -> (String, PathBuf) {
    let answer = format!("In {name}.");
    fake.push([text(&answer)]);
    let (code, stdout, stderr) = run_in(e, dir, &["task", "of", name]).await;
    assert_eq!((code, stdout), (0, format!("{answer}\n")), "{stderr}");
    let file = e.log_file();
    let id = lines(&file)[0]["id"].as_str().unwrap().to_owned();
    (id, file)
}

#[tokio::test]
async fn a_planted_header_with_another_directorys_session_id_is_never_continued() {
    let fake = FakeLlm::start().await;
    let e = env(&fake);
    let (_, x_y, id, file) = colliding_directories(&e, &fake).await;
    let folder = file.parent().and_then(Path::parent).unwrap().to_owned();
    let before = std::fs::read(&file).unwrap();
    // x/y's header, claiming x-y: a header-only plain log.
    let mut header = lines(&file)[0].clone();
    header["cwd"] = json!(x_y.display().to_string());
    let planted_text = format!("{header}\n");

    // Under a name that is not the id's: skipped, so nothing to continue.
    let planted = folder.join("planted.jsonl");
    std::fs::write(&planted, &planted_text).unwrap();
    nothing_to_continue_in(&e, &x_y).await;
    std::fs::remove_file(&planted).unwrap();

    // Under the id's own old flat name: listed in x-y, but the log a
    // resume loads is x/y's, whose header `--continue` checks.
    let flat = folder.join(format!("{id}.jsonl"));
    std::fs::write(&flat, &planted_text).unwrap();
    let (code, _, stderr) = run_in(&e, &x_y, &["--continue", "next"]).await;
    assert_eq!(code, 1);
    for needle in ["SESSION_OTHER_DIRECTORY", &id, &x_y.display().to_string()] {
        assert!(stderr.contains(needle), "{needle} in {stderr}");
    }
    assert_eq!(std::fs::read(&file).unwrap(), before, "x/y's log unchanged");
    assert_eq!(std::fs::read(&flat).unwrap(), planted_text.as_bytes());
    assert_eq!(fake.requests().len(), 1, "nothing reached the model");
}

#[tokio::test]
async fn directories_whose_names_are_not_utf8_never_share_a_session() {
    use std::os::unix::ffi::OsStrExt;
    let fake = FakeLlm::start().await;
    let e = env(&fake);
    let base = e.work.path().canonicalize().unwrap();
    let ff = base.join(std::ffi::OsStr::from_bytes(b"a\xff"));
    let fe = base.join(std::ffi::OsStr::from_bytes(b"a\xfe"));
    std::fs::create_dir(&ff).unwrap();
    std::fs::create_dir(&fe).unwrap();
    let (id, file) = first_task_in(&e, &fake, &ff, "a-ff").await;
    let before = std::fs::read(&file).unwrap();

    let (code, _, stderr) = run_in(&e, &fe, &["--continue", "next"]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("not valid UTF-8"), "{stderr}");
    let (code, _, stderr) = run_in(&e, &fe, &["--resume", &id, "next"]).await;
    assert_eq!(code, 1);
    for needle in ["SESSION_OTHER_DIRECTORY", "not valid UTF-8", id.as_str()] {
        assert!(stderr.contains(needle), "{needle} in {stderr}");
    }
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "a-ff's log unchanged"
    );
    assert_eq!(e.session_files().len(), 1, "nothing new was written");
    assert_eq!(fake.requests().len(), 1, "nothing reached the model");
}
