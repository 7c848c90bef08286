//! The coding tools through the real pipeline (`tools.execute`), and an end
//! to end headless run: read -> edit -> bash -> answer.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::path::Path;

use dsh_sdk::names::{code, service, sessions, tools};
use dsh_sdk::vocab::event;
use dsh_testkit::fake_llm::{text, tool_calls, FakeLlm};
use dsh_testkit::tools::{run, text_of};
use dsh_testkit::{target_dir, TempDir, TestHost};
use serde_json::{json, Value};

async fn tools_host(mode: &str) -> TestHost {
    dsh_testkit::tools::host(mode, "").await
}

#[tokio::test]
async fn schemas_are_the_originals() {
    let t = tools_host("workspace-write").await;
    let schemas = t.call(service::TOOLS, tools::SCHEMAS, json!({})).await;
    let names: Vec<&str> = schemas
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "bash",
            "edit",
            "glob",
            "grep",
            "job_kill",
            "job_list",
            "job_output",
            "read",
            "todo_write",
            "write"
        ]
    );
    let edit = schemas
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "edit")
        .unwrap();
    assert_eq!(
        edit["description"],
        "Edit an existing UTF-8 text file by replacing literal text."
    );
    assert_eq!(
        edit["parameters"]["required"],
        json!(["file_path", "old_string", "new_string"])
    );
    t.shutdown().await;
}

#[tokio::test]
async fn write_and_edit_follow_the_read_before_write_policy() {
    let t = tools_host("workspace-write").await;
    let ws = TempDir::new("tools-ws");
    let w = ws.path();
    // Creating needs no read.
    let r = run(
        &t,
        w,
        "write",
        json!({"file_path": "a.txt", "content": "one\ntwo\ntwo\n"}),
    )
    .await;
    assert_eq!(
        text_of(&r),
        "<path>a.txt</path>\n<type>file</type>\n<content>\nCreated file\n</content>"
    );
    // Editing after our own write is allowed (we know the version).
    let r = run(
        &t,
        w,
        "edit",
        json!({"file_path": "a.txt", "old_string": "one", "new_string": "uno"}),
    )
    .await;
    assert_eq!(text_of(&r), "The file a.txt has been updated successfully.");
    // An external change invalidates what we saw (given an mtime of its
    // own, so the check cannot depend on the clock's granularity).
    std::fs::write(w.join("a.txt"), "uno\ntwo\ntwo\nthree\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(w.join("a.txt"))
        .unwrap()
        .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000))
        .unwrap();
    let r = run(
        &t,
        w,
        "edit",
        json!({"file_path": "a.txt", "old_string": "three", "new_string": "3"}),
    )
    .await;
    assert_eq!(r["isError"], true);
    assert_eq!(r["error"]["info"]["code"], "FS_NOT_OBSERVED", "{r}");
    assert!(
        text_of(&r).contains("changed since it was last read"),
        "{r}"
    );
    run(&t, w, "read", json!({"file_path": "a.txt"})).await;
    // Ambiguous and missing matches are clear errors.
    let r = run(
        &t,
        w,
        "edit",
        json!({"file_path": "a.txt", "old_string": "two", "new_string": "2"}),
    )
    .await;
    assert_eq!(r["error"]["info"]["code"], "EDIT_AMBIGUOUS", "{r}");
    assert!(text_of(&r).contains("appears 2 times"), "{r}");
    let r = run(
        &t,
        w,
        "edit",
        json!({"file_path": "a.txt", "old_string": "nope", "new_string": "x"}),
    )
    .await;
    assert_eq!(r["error"]["info"]["code"], "EDIT_NO_MATCH", "{r}");
    assert!(text_of(&r).contains("was not found"), "{r}");
    let r = run(
        &t,
        w,
        "edit",
        json!({"file_path": "a.txt", "old_string": "two", "new_string": "2", "replace_all": true}),
    )
    .await;
    assert_eq!(
        text_of(&r),
        "The file a.txt has been updated. All occurrences were successfully replaced."
    );
    assert_eq!(
        std::fs::read_to_string(w.join("a.txt")).unwrap(),
        "uno\n2\n2\nthree\n"
    );
    // Overwriting an unread existing file is refused.
    std::fs::write(w.join("b.txt"), "b\n").unwrap();
    let r = run(
        &t,
        w,
        "write",
        json!({"file_path": "b.txt", "content": "new"}),
    )
    .await;
    assert!(
        text_of(&r).contains("must be read with the read tool"),
        "{r}"
    );
    assert_eq!(r["error"]["info"]["code"], "FS_NOT_OBSERVED");
    // Bad arguments are validated against the schema.
    let r = run(&t, w, "edit", json!({"file_path": "a.txt"})).await;
    assert_eq!(r["error"]["info"]["code"], code::INVALID_ARGS);
    t.shutdown().await;
}

#[tokio::test]
async fn the_workspace_fence_refuses_escapes() {
    let t = tools_host("workspace-write").await;
    let ws = TempDir::new("fence-ws");
    let w = ws.path();
    let outside = Path::new("/var/tmp").join(format!("dsh-fence-{}", std::process::id()));
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, w.join("link")).unwrap();
    for path in [
        outside.join("x.txt").display().to_string(),
        "link/x.txt".to_owned(),
        format!("../../..{}/y.txt", outside.display()),
    ] {
        let r = run(&t, w, "write", json!({"file_path": path, "content": "no"})).await;
        assert_eq!(r["isError"], true, "{path}: {r}");
        // A policy denial: no error code (reference §5.3 step 5).
        assert_eq!(r["error"].get("info"), None, "{r}");
        assert!(text_of(&r).contains("is outside the workspace"), "{r}");
        assert!(
            text_of(&r).contains("DSH_PERMISSION_MODE=danger-full-access"),
            "{r}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing was written outside"
    );
    std::fs::remove_dir_all(&outside).unwrap();
    t.shutdown().await;

    let t = tools_host("read-only").await;
    let r = run(
        &t,
        w,
        "write",
        json!({"file_path": "z.txt", "content": "no"}),
    )
    .await;
    assert_eq!(r["error"].get("info"), None, "{r}");
    assert!(text_of(&r).contains("read-only mode"), "{r}");
    t.shutdown().await;
}

#[tokio::test]
async fn bash_output_markers_timeouts_and_scrubbed_credentials() {
    let t = tools_host("danger-full-access").await;
    let ws = TempDir::new("bash-ws");
    let w = ws.path();
    let r = run(
        &t,
        w,
        "bash",
        json!({"command": "echo hi; echo err >&2; exit 3", "description": "d"}),
    )
    .await;
    assert_eq!(text_of(&r), "hi\n[stderr]\nerr\n[exit code: 3]");
    assert_eq!(r["isError"], false, "a non-zero exit is not a tool error");
    let r = run(
        &t,
        w,
        "bash",
        json!({"command": "true", "description": "d"}),
    )
    .await;
    assert_eq!(text_of(&r), "(no output)");
    let r = run(
        &t,
        w,
        "bash",
        json!({"command": "pwd", "description": "d", "workdir": "sub"}),
    )
    .await;
    assert_eq!(r["error"]["info"]["code"], "BASH_FAILED", "{r}");
    assert!(text_of(&r).contains("cannot run bash"), "{r}");
    std::fs::create_dir(w.join("sub")).unwrap();
    let r = run(
        &t,
        w,
        "bash",
        json!({"command": "pwd", "description": "d", "workdir": "sub"}),
    )
    .await;
    assert!(text_of(&r).ends_with("/sub"), "{r}");

    // A timeout kills the whole tree, background children included.
    let marker = format!("dsh-orphan-{}", std::process::id());
    let r = run(&t, w, "bash", json!({"command": format!("(exec -a {marker} sleep 30) & sleep 30"), "description": "d", "timeoutMs": 300})).await;
    assert!(text_of(&r).ends_with("[timed out after 300ms]"), "{r}");
    let left = dsh_testkit::wait_gone(&marker, std::time::Duration::from_secs(10));
    assert!(
        left.is_empty(),
        "the background child {left:?} survived the timeout"
    );

    std::env::set_var("DSH_TEST_SECRET_TOKEN", "hunter2");
    let r = run(
        &t,
        w,
        "bash",
        json!({"command": "echo ${DSH_TEST_SECRET_TOKEN:-scrubbed}", "description": "d"}),
    )
    .await;
    assert_eq!(text_of(&r), "scrubbed");

    // Long output keeps its tail and says where the rest is.
    let r = run(
        &t,
        w,
        "bash",
        json!({"command": "seq 1 30000", "description": "d"}),
    )
    .await;
    let out = text_of(&r);
    assert!(
        out.starts_with("[output truncated: showing the last 64000 of"),
        "{}",
        &out[..200]
    );
    assert!(out.ends_with("30000"));
    t.shutdown().await;
}

#[tokio::test]
async fn a_sandbox_denial_arrives_as_a_clear_result() {
    let t = tools_host("workspace-write").await;
    let ws = TempDir::new("sandbox-ws");
    let target = Path::new("/var/tmp").join(format!("dsh-sandbox-{}", std::process::id()));
    let r = run(
        &t,
        ws.path(),
        "bash",
        json!({"command": format!("echo x > {}", target.display()), "description": "d"}),
    )
    .await;
    let bwrap = std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .any(|d| Path::new(d).join("bwrap").is_file());
    if bwrap || landlock_abi() > 0 {
        assert!(
            text_of(&r).contains("[sandbox: file access denied under workspace-write mode]"),
            "{r}"
        );
        assert!(!target.exists(), "the sandbox let the write through");
        // Inside the workspace, writes work.
        let r = run(
            &t,
            ws.path(),
            "bash",
            json!({"command": "echo ok > inside.txt && cat inside.txt", "description": "d"}),
        )
        .await;
        assert_eq!(text_of(&r), "ok");
    } else {
        assert_eq!(r["error"]["info"]["code"], "SANDBOX_UNAVAILABLE", "{r}");
    }
    let _ = std::fs::remove_file(&target);
    t.shutdown().await;
}

fn landlock_abi() -> i64 {
    // SAFETY: the version query takes no pointers.
    unsafe { libc::syscall(444, std::ptr::null::<u8>(), 0usize, 1u32) }
}

#[tokio::test]
async fn todo_write_logs_and_counts() {
    let t = tools_host("workspace-write").await;
    t.call(
        service::SESSIONS,
        sessions::CREATE,
        json!({"id": "agent-1"}),
    )
    .await;
    t.call(
        service::SESSIONS,
        sessions::APPEND,
        json!({"id": "agent-1", "type": event::TURN_START, "data": {"turn": 1}}),
    )
    .await;
    let ws = TempDir::new("todo-ws");
    let todos = json!([{"content": "a", "status": "pending"}, {"content": "b", "status": "in_progress"}, {"content": "c", "status": "completed"}]);
    let r = run(&t, ws.path(), "todo_write", json!({"todos": todos})).await;
    assert_eq!(
        text_of(&r),
        "Updated todo list: 1 pending, 1 in progress, 1 completed."
    );
    let ev = t
        .call(
            service::SESSIONS,
            sessions::EVENTS,
            json!({"id": "agent-1"}),
        )
        .await;
    assert_eq!(ev[1]["type"], event::TODO_WRITE);
    assert_eq!(ev[1]["data"]["todos"], todos);
    let r = run(&t, ws.path(), "todo_write", json!({"todos": [{"content": "a", "status": "pending"}, {"content": "a", "status": "pending"}]})).await;
    assert_eq!(r["error"]["info"]["code"], code::INVALID_ARGS, "{r}");
    assert_eq!(text_of(&r), "Error: duplicate todo: a");
    t.shutdown().await;
}

#[tokio::test]
async fn headless_end_to_end_read_edit_bash_answer_changes_the_files() {
    let fake = FakeLlm::start().await;
    fake.push([
        tool_calls(&[("read", json!({"file_path": "app.conf"}))]),
        tool_calls(&[("edit", json!({"file_path": "app.conf", "old_string": "debug = false", "new_string": "debug = true"}))]),
        tool_calls(&[("bash", json!({"command": "grep debug app.conf > checked.txt && cat checked.txt", "description": "verify the flag"}))]),
        text("Debug is on."),
    ]);
    let home = TempDir::new("e2e-home");
    let work = TempDir::new("e2e-work");
    std::fs::write(work.path().join("app.conf"), "name = x\ndebug = false\n").unwrap();
    let patch = home.path().join("p.toml");
    std::fs::write(
        &patch,
        format!(
            "[[patch]]\nid = \"llm-deepseek\"\nconfig = {{ baseUrl = \"{}\", apiKeyEnv = \"\" }}\n",
            fake.base_url
        ),
    )
    .unwrap();
    let mut c = std::process::Command::new(target_dir().join("dsh-host"));
    c.current_dir(work.path())
        .env("DSH_HOME", home.path())
        .env("DSH_PERMISSION_MODE", "danger-full-access")
        .args(["--profile", "headless", "--patch"])
        .arg(&patch)
        .arg("turn debug on");
    let out = tokio::task::spawn_blocking(move || c.output().unwrap())
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Debug is on.\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(work.path().join("app.conf")).unwrap(),
        "name = x\ndebug = true\n"
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("checked.txt")).unwrap(),
        "debug = true\n"
    );
    let tool_texts = fake.tool_results_of_last_request();
    assert_eq!(
        tool_texts[1],
        "The file app.conf has been updated successfully."
    );
    assert_eq!(tool_texts[2], "debug = true");
}

#[tokio::test]
async fn glob_and_grep_formats_and_caps() {
    let t = tools_host("workspace-write").await;
    let ws = TempDir::new("search-ws");
    let w = ws.path();
    std::fs::create_dir_all(w.join("src/deep")).unwrap();
    std::fs::create_dir_all(w.join(".git")).unwrap();
    std::fs::write(w.join(".git/config"), "needle\n").unwrap();
    std::fs::write(w.join(".hidden.rs"), "x\n").unwrap();
    std::fs::write(w.join("src/a.rs"), "fn main() {}\n// needle one\n").unwrap();
    std::fs::write(w.join("src/deep/b.rs"), "needle two\nneedle three\n").unwrap();
    // Modification times that disagree with the names' order: glob lists
    // oldest first (`rg --sort=modified`), not by name.
    let epoch = std::time::UNIX_EPOCH;
    for (file, secs) in [
        ("src/deep/b.rs", 1_000_000),
        (".hidden.rs", 2_000_000),
        ("src/a.rs", 3_000_000),
    ] {
        std::fs::File::options()
            .write(true)
            .open(w.join(file))
            .unwrap()
            .set_modified(epoch + std::time::Duration::from_secs(secs))
            .unwrap();
    }
    let r = run(&t, w, "glob", json!({"pattern": "*.rs"})).await;
    assert_eq!(text_of(&r), "src/deep/b.rs\n.hidden.rs\nsrc/a.rs");
    let r = run(&t, w, "glob", json!({"pattern": "*.md"})).await;
    assert_eq!(text_of(&r), "No files found");
    let r = run(&t, w, "grep", json!({"pattern": "needle \\w+"})).await;
    assert_eq!(text_of(&r), "Found 3 matches\n\nsrc/a.rs\nLine 2: // needle one\n\nsrc/deep/b.rs\nLine 1: needle two\nLine 2: needle three");
    let r = run(
        &t,
        w,
        "grep",
        json!({"pattern": "needle", "include": "b.rs"}),
    )
    .await;
    assert!(text_of(&r).starts_with("Found 2 matches"), "{r}");
    let r = run(&t, w, "grep", json!({"pattern": "("})).await;
    assert_eq!(r["error"]["info"]["code"], "SEARCH_INVALID_PATTERN");
    // Over the cap: the first matches inline, the rest stored.
    let many: String = (0..300).map(|i| format!("hit {i}\n")).collect();
    std::fs::write(w.join("many.txt"), many).unwrap();
    let r = run(
        &t,
        w,
        "grep",
        json!({"pattern": "^hit", "path": "many.txt"}),
    )
    .await;
    let out = text_of(&r);
    assert!(
        out.starts_with("Found 250 of 300 matches"),
        "{}",
        &out[..80]
    );
    let stored = out
        .split("Full grep result stored at: ")
        .nth(1)
        .unwrap()
        .split(". Use")
        .next()
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(stored)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("Line"))
            .count(),
        300
    );
    t.shutdown().await;
}

#[tokio::test]
async fn oversized_results_are_spilled_but_reads_are_not() {
    let t = tools_host("danger-full-access").await;
    let ws = TempDir::new("spill-ws");
    let r = run(
        &t,
        ws.path(),
        "bash",
        json!({"command": "seq 1 20000", "description": "d"}),
    )
    .await;
    let out = text_of(&r);
    assert!(out.len() < 50_000, "{}", out.len());
    let path = out
        .split("Full formatted result stored at: ")
        .nth(1)
        .unwrap()
        .split(". Use")
        .next()
        .unwrap();
    assert!(std::fs::read_to_string(path).unwrap().ends_with("20000"));
    use std::os::unix::fs::PermissionsExt;
    let dir = Path::new(path).parent().unwrap();
    assert_eq!(
        std::fs::metadata(dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let big: String = (0..9000)
        .map(|i| format!("line {i} {}\n", "x".repeat(40)))
        .collect();
    std::fs::write(ws.path().join("big.txt"), big).unwrap();
    let r = run(&t, ws.path(), "read", json!({"file_path": "big.txt"})).await;
    assert!(!text_of(&r).contains("Full formatted result stored at"));
    assert!(
        text_of(&r).contains("(Output capped. Showing lines 1-"),
        "{}",
        &text_of(&r)[text_of(&r).len() - 120..]
    );
    t.shutdown().await;
}

#[tokio::test]
async fn background_jobs_run_report_and_die() {
    let t = tools_host("danger-full-access").await;
    let ws = TempDir::new("jobs-ws");
    let w = ws.path();
    // The job waits for the test's go-ahead, so it is running when listed
    // however slow the machine.
    let r = run(&t, w, "bash", json!({"command": "echo start; while [ ! -e go ]; do sleep 0.05; done; echo end", "description": "two lines", "run_in_background": true})).await;
    assert_eq!(text_of(&r), "started background job bash-1");
    let r = run(&t, w, "job_list", json!({})).await;
    assert_eq!(text_of(&r), "bash-1 [bash] running — two lines");
    std::fs::write(w.join("go"), "").unwrap();
    let r = run(
        &t,
        w,
        "job_output",
        json!({"job_id": "bash-1", "wait": true, "timeout_ms": 5000}),
    )
    .await;
    assert_eq!(text_of(&r), "start\nend\n[status: exited (code 0)]");
    let r = run(&t, w, "job_output", json!({"job_id": "bash-1"})).await;
    assert_eq!(text_of(&r), "(no new output)\n[status: exited (code 0)]");
    let r = run(
        &t,
        w,
        "bash",
        json!({"command": "sleep 30", "description": "sleeps", "run_in_background": true}),
    )
    .await;
    assert_eq!(text_of(&r), "started background job bash-2");
    let r = run(&t, w, "job_kill", json!({"job_id": "bash-2"})).await;
    assert_eq!(text_of(&r), "killed background job bash-2");
    let r = run(
        &t,
        w,
        "job_output",
        json!({"job_id": "bash-2", "wait": true, "timeout_ms": 5000}),
    )
    .await;
    assert!(text_of(&r).ends_with("[status: killed]"), "{r}");
    let r = run(&t, w, "job_output", json!({"job_id": "bash-9"})).await;
    assert_eq!(r["error"]["info"]["code"], "JOB_NOT_FOUND");
    t.shutdown().await;
}

async fn html_server() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = sock.read(&mut buf).await;
            let body = "<html><body><h1>Title</h1><p>Hello <b>web</b></p></body></html>";
            let resp = format!("HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
            let _ = sock.write_all(resp.as_bytes()).await;
        }
    });
    format!("http://127.0.0.1:{port}/page")
}

#[tokio::test]
async fn web_fetch_is_off_by_default_and_fenced() {
    let url = html_server().await;
    let ws = TempDir::new("web-ws");
    let t = TestHost::start().await;
    t.apply("[[row]]\nid='tools'\nplugin='tools'\n[[row]]\nid='web'\nplugin='tool-web'\n")
        .await;
    assert_eq!(
        t.call(service::TOOLS, tools::SCHEMAS, json!({})).await,
        json!([])
    );
    t.apply("[[row]]\nid='tools'\nplugin='tools'\n[[row]]\nid='web'\nplugin='tool-web'\nconfig = { fetch = true }\n").await;
    let r = run(&t, ws.path(), "web_fetch", json!({"url": url})).await;
    assert_eq!(r["error"]["info"]["code"], "WEB_PRIVATE_ADDRESS", "{r}");
    for bad in ["ftp://example.com/x", "http://user:pw@example.com/"] {
        let r = run(&t, ws.path(), "web_fetch", json!({"url": bad})).await;
        assert_eq!(r["error"]["info"]["code"], "WEB_INVALID_URL", "{bad}: {r}");
    }
    t.apply("[[row]]\nid='tools'\nplugin='tools'\n[[row]]\nid='web'\nplugin='tool-web'\nconfig = { fetch = true, allowPrivate = true }\n").await;
    let r = run(&t, ws.path(), "web_fetch", json!({"url": url})).await;
    assert_eq!(text_of(&r), "# Title\n\nHello **web**");
    t.shutdown().await;
}

#[tokio::test]
async fn calls_beyond_the_fence_go_through_the_approval_seam() {
    let ws = TempDir::new("approval-ws");
    let outside = Path::new("/var/tmp").join(format!("dsh-approval-{}.txt", std::process::id()));
    let rows = |outcome: &str| {
        format!(
            "[[row]]\nid='tools'\nplugin='tools'\n[[row]]\nid='permission'\nplugin='permission'\nconfig = {{ mode = 'workspace-write' }}\n\
             [[row]]\nid='fs'\nplugin='tool-fs'\n[[row]]\nid='approver'\nplugin='dsh-fixture-probe'\nconfig = {{ tag = 'approver', approval_outcome = '{outcome}' }}\n"
        )
    };
    let t = TestHost::start().await;
    t.apply(&rows("rejected")).await;
    let r = run(
        &t,
        ws.path(),
        "write",
        json!({"file_path": outside, "content": "x"}),
    )
    .await;
    assert_eq!(text_of(&r), "Error: the user rejected tool \"write\"");
    t.apply(&rows("allowed-once")).await;
    let r = run(
        &t,
        ws.path(),
        "write",
        json!({"file_path": outside, "content": "x"}),
    )
    .await;
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "x");
    std::fs::remove_file(&outside).unwrap();
    // `never`: refused without asking.
    t.apply("[[row]]\nid='tools'\nplugin='tools'\n[[row]]\nid='permission'\nplugin='permission'\nconfig = { mode = 'workspace-write', approval = 'never' }\n[[row]]\nid='fs'\nplugin='tool-fs'\n[[row]]\nid='approver'\nplugin='dsh-fixture-probe'\nconfig = { tag = 'approver', approval_outcome = 'allowed-once' }\n").await;
    let r = run(
        &t,
        ws.path(),
        "write",
        json!({"file_path": outside, "content": "x"}),
    )
    .await;
    assert!(text_of(&r).contains("is outside the workspace"), "{r}");
    assert!(!outside.exists());
    t.shutdown().await;
}

#[tokio::test]
async fn a_scoped_tool_is_visible_to_its_agent_only_and_dies_with_its_plugin() {
    let t = TestHost::start().await;
    let rows = "[[row]]\nid='tools'\nplugin='tools'\n[[row]]\nid='read'\nplugin='tool-read'\n\
                [[row]]\nid='impl'\nplugin='dsh-fixture-probe'\nconfig = { tag = 'impl', provides = ['scoped-impl'] }\n";
    t.apply(rows).await;
    // The probe registers a tool for agent a1 only (through its `call`).
    t.call(
        "probe:impl",
        "call",
        json!({"service": service::TOOLS, "method": tools::REGISTER, "params": {
            "name": "secret", "description": "a1's tool", "scope": "a1", "service": "scoped-impl",
            "parameters": {"type": "object", "properties": {}}}}),
    )
    .await;
    let names = |v: Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        names(
            t.call(service::TOOLS, tools::SCHEMAS, json!({"scope": "a1"}))
                .await
        ),
        ["read", "secret"]
    );
    assert_eq!(
        names(
            t.call(service::TOOLS, tools::SCHEMAS, json!({"scope": "a2"}))
                .await
        ),
        ["read"]
    );
    let ws = TempDir::new("scoped-ws");
    let exec = |agent: &str| json!({"callId": "c", "name": "secret", "arguments": {}, "agent": agent, "cwd": ws.path()});
    let r = t.call(service::TOOLS, tools::EXECUTE, exec("a2")).await;
    assert_eq!(r["error"]["info"]["code"], "UNKNOWN_TOOL");
    let r = t.call(service::TOOLS, tools::EXECUTE, exec("a1")).await;
    assert_eq!(r["isError"], false, "{r}");
    // Disposing the registering plugin drops the tool.
    t.apply("[[row]]\nid='tools'\nplugin='tools'\n[[row]]\nid='read'\nplugin='tool-read'\n")
        .await;
    assert_eq!(
        names(
            t.call(service::TOOLS, tools::SCHEMAS, json!({"scope": "a1"}))
                .await
        ),
        ["read"]
    );
    t.shutdown().await;
}
