//! `dsh-host --profile headless`: exit codes, both output modes, `sessions
//! list`, `kill -9` then `--resume`, and a log in the original's format.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::process::{Command, Stdio};
use std::time::Duration;

use dsh_sdk::vocab::event;
use dsh_testkit::fake_llm::{text, tool_calls, Answer, FakeLlm};
use dsh_testkit::headless::{assert_seqs_contiguous, lines, lines_so_far, Headless, KEY};
use dsh_testkit::{out, target_dir};
use serde_json::{json, Value};

/// A home and workspace whose adapter gives up on a stream idle for 20 s.
fn env(fake: &FakeLlm) -> Headless {
    Headless::with_stream_idle(fake, 20_000, "")
}

#[tokio::test]
async fn prints_the_last_answer_and_exits_0_with_an_empty_stderr() {
    let fake = FakeLlm::start().await;
    fake.push([
        tool_calls(&[("read", json!({"file_path": "notes.md"}))]),
        text("The notes say hi."),
    ]);
    let e = env(&fake);
    std::fs::write(e.work.path().join("notes.md"), "hi\n").unwrap();
    std::fs::create_dir(e.work.path().join(".git")).unwrap();
    std::fs::write(e.work.path().join("AGENTS.md"), "Always be brief.\n").unwrap();
    let (code, stdout, stderr) = out(&e.run(&["summarize", "notes.md"]).await);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (0, "The notes say hi.\n", "")
    );
    // AGENTS.md of the project enters the first step as one user message.
    let first = &fake.requests()[0]["messages"];
    let reminder = first[1]["content"].as_str().unwrap();
    assert!(
        reminder.starts_with("<system-reminder>") && reminder.contains("Always be brief."),
        "{reminder}"
    );
    assert_eq!(
        first[2],
        json!({"role": "user", "content": "summarize notes.md"})
    );
    let files = e.session_files();
    assert_eq!(files.len(), 1);
    let log = lines_so_far(&files[0]);
    assert_eq!(log[0]["type"], "session");
    let cwd = e.work.path().canonicalize().unwrap().display().to_string();
    assert_eq!(log[0]["cwd"], json!(cwd));
    assert_eq!(log.last().unwrap()["type"], event::TURN_END);

    // `sessions list` shows it.
    let mut c = Command::new(target_dir().join("dsh-host"));
    c.current_dir(e.work.path())
        .env("DSH_HOME", e.home.path())
        .args(["sessions", "list", "--patch"])
        .arg(&e.patch);
    let (code, stdout, stderr) = out(&c.output().unwrap());
    assert_eq!(code, 0, "{stderr}");
    let id = log[0]["id"].as_str().unwrap();
    assert!(
        stdout.contains(id) && stdout.contains("summarize notes.md"),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_failed_turn_exits_1_with_the_code_on_stderr() {
    let fake = FakeLlm::start().await;
    fake.push([Answer::Status(
        401,
        vec![],
        "{\"error\":{\"message\":\"invalid key\"}}".into(),
    )]);
    let e = env(&fake);
    let (code, stdout, stderr) = out(&e.run(&["hello"]).await);
    assert_eq!(code, 1);
    assert_eq!(stdout, "");
    assert!(
        stderr.starts_with("dsh: AUTH: HTTP 401: invalid key"),
        "{stderr}"
    );

    let mut c = e.command(&["hello"]);
    c.env_remove(KEY);
    let (code, _, stderr) = out(&c.output().unwrap());
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with(&format!(
            "dsh: MISSING_CREDENTIAL: no API key: set the environment variable {KEY} (route \
             deepseek-official/deepseek-v4-flash, chosen by the `agent-default-model` row's config"
        )) && stderr.ends_with(")\n")
            && stderr.lines().count() == 1,
        "{stderr}"
    );

    let (code, _, stderr) = out(&e.run(&[]).await);
    assert_eq!(code, 1);
    assert_eq!(
        stderr,
        "dsh: a task is required, for example: dsh-host --profile headless \"run the tests\"\n"
    );
}

#[tokio::test]
async fn jsonl_output_streams_every_session_event_and_a_result() {
    let fake = FakeLlm::start().await;
    fake.push([text("Fine.")]);
    let e = env(&fake);
    let (code, stdout, stderr) = out(&e.run(&["--output", "jsonl", "how", "are", "you"]).await);
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = rows.last().unwrap();
    assert_eq!(last["type"], "result");
    assert_eq!(last["output"], "Fine.");
    // The step's usage whole: the cache reads the model reported too.
    assert_eq!(
        last["usage"],
        json!({"inputTokens": 12, "outputTokens": 5, "cacheReadTokens": 8})
    );
    let events: Vec<&Value> = rows
        .iter()
        .filter(|r| r["type"] == "session_event")
        .map(|r| &r["event"])
        .collect();
    assert_eq!(events.first().unwrap()["type"], event::INBOX_SPLICED);
    assert_eq!(events.last().unwrap()["type"], event::TURN_END);
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
}

#[tokio::test]
async fn kill_9_mid_turn_then_resume_repairs_the_tail_and_continues() {
    let fake = FakeLlm::start().await;
    fake.push([Answer::Stall(vec![
        json!({"choices": [{"delta": {"content": "Working on"}}]}).to_string(),
    ])]);
    let e = env(&fake);
    let mut child = e
        .command(&["long", "task"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait (with a generous deadline) until the chunk is durable (the batch
    // window writes it).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let file = loop {
        let found = e.session_files().into_iter().find(|f| {
            lines_so_far(f)
                .iter()
                .any(|l| l["type"] == event::ASSISTANT_CHUNK)
        });
        if let Some(f) = found {
            break f;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the chunk was never persisted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    child.kill().unwrap(); // SIGKILL
    let _ = child.wait();
    let id = lines_so_far(&file)[0]["id"].as_str().unwrap().to_owned();

    fake.push([text("Resumed and done.")]);
    let (code, stdout, stderr) = out(&e.run(&["--resume", &id, "continue"]).await);
    assert_eq!(
        (code, stdout.as_str()),
        (0, "Resumed and done.\n"),
        "{stderr}"
    );
    let log = lines_so_far(&file);
    let kinds: Vec<&str> = log
        .iter()
        .skip(1)
        .map(|l| l["type"].as_str().unwrap())
        .collect();
    let ends: Vec<&Value> = log
        .iter()
        .filter(|l| l["type"] == event::TURN_END)
        .collect();
    assert_eq!(
        ends[0]["data"]["reason"],
        json!({"kind": "interrupted"}),
        "{kinds:?}"
    );
    assert_eq!(
        ends[1]["data"],
        json!({"turn": 2, "reason": {"kind": "completed"}})
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == event::SESSION_END_SEED)
            .count(),
        1
    );
    assert_seqs_contiguous(&log[1..]);
    // The resumed request carries the first prompt.
    let requests = fake.requests();
    let msgs = requests.last().unwrap()["messages"].as_array().unwrap();
    assert!(
        msgs.contains(&json!({"role": "user", "content": "long task"})),
        "{msgs:?}"
    );
}

#[tokio::test]
async fn an_old_flat_log_loads_and_resumes_in_the_session_directory_layout() {
    let fake = FakeLlm::start().await;
    fake.push([text("Continuing.")]);
    let e = env(&fake);
    let cwd = e.work.path().canonicalize().unwrap().display().to_string();
    let key: String = {
        // The original's projectKey: separators become '-', leading '-' dropped.
        let k: String = cwd.replace(['/', '\\', ':'], "-");
        k.trim_start_matches('-').to_owned()
    };
    let dir = e.home.path().join("sessions").join(format!("--{key}--"));
    std::fs::create_dir_all(&dir).unwrap();
    let user = json!({"id": "m1", "role": "user", "content": [{"type": "text", "text": "earlier question"}], "source": {"kind": "user"}});
    let answer = json!({"id": "m2", "role": "assistant", "content": [{"type": "text", "text": "earlier answer"}], "source": {"kind": "model", "provider": "deepseek-official", "model": "deepseek-v4-flash"}});
    let log = [
        json!({"type": "session", "version": 0, "id": "orig-1", "createdAt": 1_700_000_000_000u64, "cwd": cwd, "delegationDepth": 0}),
        json!({"type": event::TURN_START, "seq": 0, "time": 1, "data": {"turn": 1}}),
        json!({"type": event::STEP_START, "seq": 1, "time": 1, "data": {"turn": 1, "step": 1}}),
        json!({"type": event::USER_MESSAGE, "seq": 2, "time": 1, "data": user, "surfaceOp": "append"}),
        json!({"type": "text-chunks", "seq0": 3, "time0": 2, "data": {"turn": 1, "step": 1, "index": 0, "dt": [1, 1], "texts": ["earlier ", "ans", "wer"]}}),
        json!({"type": event::ASSISTANT_MESSAGE, "seq": 6, "time": 4, "data": {"turn": 1, "step": 1, "message": answer}, "sourceEventSeqs": [3, 4, 5], "surfaceOp": "append"}),
        json!({"type": event::STEP_END, "seq": 7, "time": 4, "data": {"turn": 1, "step": 1}}),
        json!({"type": event::TURN_END, "seq": 8, "time": 4, "data": {"turn": 1, "reason": {"kind": "completed"}}}),
    ];
    let flat: String = log.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("orig-1.jsonl"), &flat).unwrap();
    let (code, stdout, stderr) = out(&e.run(&["--resume", "orig-1", "and", "now?"]).await);
    assert_eq!((code, stdout.as_str()), (0, "Continuing.\n"), "{stderr}");
    let msgs = fake.requests()[0]["messages"].clone();
    let contents: Vec<&str> = msgs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(
        &contents[1..],
        ["earlier question", "earlier answer", "and now?"]
    );
    // The old flat log is read, never written: the resumed session goes on
    // in the session directory layout, its whole history copied first.
    assert_eq!(
        std::fs::read_to_string(dir.join("orig-1.jsonl")).unwrap(),
        flat,
        "the flat log is left as it was"
    );
    let moved = dir.join("orig-1").join("session.jsonl.zstd");
    let stored = lines(&moved);
    assert_eq!(stored[0]["id"], "orig-1");
    assert_eq!(stored[4]["type"], "text-chunks");
    assert_eq!(stored[8]["type"], event::SESSION_END_SEED);
    assert_eq!(stored[8]["seq"], 9);
    let turn2 = stored
        .iter()
        .find(|l| l["type"] == event::TURN_START && l["data"]["turn"] == 2);
    assert!(turn2.is_some(), "{stored:?}");
    // It resumes from the new log from now on.
    fake.push([text("Once more.")]);
    let (code, stdout, stderr) = out(&e.run(&["--resume", "orig-1", "again"]).await);
    assert_eq!((code, stdout.as_str()), (0, "Once more.\n"), "{stderr}");
    let turns = lines(&moved)
        .iter()
        .filter(|l| l["type"] == event::TURN_START)
        .count();
    assert_eq!(turns, 3);
    assert_eq!(
        std::fs::read_to_string(dir.join("orig-1.jsonl")).unwrap(),
        flat
    );
}

#[tokio::test]
async fn a_zstd_log_in_the_originals_layout_resumes_and_stays_readable() {
    let fake = FakeLlm::start().await;
    fake.push([text("From zstd.")]);
    let e = env(&fake);
    let cwd = e.work.path().canonicalize().unwrap().display().to_string();
    let key = cwd
        .replace(['/', '\\', ':'], "-")
        .trim_start_matches('-')
        .to_owned();
    let dir = e
        .home
        .path()
        .join("sessions")
        .join(format!("--{key}--"))
        .join("zs-1");
    std::fs::create_dir_all(&dir).unwrap();
    let header = json!({"type": "session", "version": 0, "id": "zs-1", "createdAt": 1, "cwd": cwd, "delegationDepth": 0});
    let user = json!({"id": "m1", "role": "user", "content": [{"type": "text", "text": "zipped question"}], "source": {"kind": "user"}});
    let events = [
        json!({"type": event::TURN_START, "seq": 0, "time": 1, "data": {"turn": 1}}),
        json!({"type": event::STEP_START, "seq": 1, "time": 1, "data": {"turn": 1, "step": 1}}),
        json!({"type": event::USER_MESSAGE, "seq": 2, "time": 1, "data": user, "surfaceOp": "append"}),
        json!({"type": event::STEP_END, "seq": 3, "time": 1, "data": {"turn": 1, "step": 1}}),
        json!({"type": event::TURN_END, "seq": 4, "time": 1, "data": {"turn": 1, "reason": {"kind": "completed"}}}),
    ];
    let mut file = zstd::stream::encode_all(format!("{header}\n").as_bytes(), 3).unwrap();
    let batch: String = events.iter().map(|e| format!("{e}\n")).collect();
    file.extend(zstd::stream::encode_all(batch.as_bytes(), 3).unwrap());
    let path = dir.join("session.jsonl.zstd");
    std::fs::write(&path, file).unwrap();
    let (code, stdout, stderr) = out(&e.run(&["--resume", "zs-1", "next"]).await);
    assert_eq!((code, stdout.as_str()), (0, "From zstd.\n"), "{stderr}");
    let sent = fake.requests()[0]["messages"].clone();
    assert!(
        sent.as_array()
            .unwrap()
            .contains(&json!({"role": "user", "content": "zipped question"})),
        "{sent}"
    );
    let text = zstd::stream::decode_all(std::fs::read(&path).unwrap().as_slice()).unwrap();
    let lines: Vec<Value> = String::from_utf8(text)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.last().unwrap()["type"], event::TURN_END);
    assert_eq!(lines.last().unwrap()["data"]["turn"], 2);
}

#[tokio::test]
async fn headless_waits_for_a_background_subagent_and_answers_after_its_notice() {
    let fake = FakeLlm::start().await;
    fake.push_for(
        "HL-KID",
        [dsh_testkit::fake_llm::slow_text("KID-RESULT: 7 files", 50)],
    );
    fake.push_for(
        "HL-PARENT",
        [
            tool_calls(&[(
                "subagent",
                json!({"description": "count files", "prompt": "HL-KID count the files"}),
            )]),
            text("Started a helper."),
            text("The helper counted 7 files."),
        ],
    );
    let e = env(&fake);
    let (code, stdout, stderr) = out(&e.run(&["HL-PARENT", "count", "files"]).await);
    assert_eq!(code, 0, "{stderr}");
    // The answer is the one given after the child's notice woke the agent.
    assert_eq!(stdout, "The helper counted 7 files.\n");
    assert_eq!(stderr, "dsh: waiting for 1 background subagent\n");
    let last = fake
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.to_string().contains("HL-PARENT"))
        .unwrap();
    assert!(last.to_string().contains("KID-RESULT: 7 files"));
    // `sessions list` shows the child under its parent; `--continue`
    // would pick the parent, not the child.
    let listed = e.sessions(&["list"]).output().unwrap();
    let text = String::from_utf8_lossy(&listed.stdout).to_string();
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(
        rows[0].starts_with("session-") && rows[1].starts_with("  session-"),
        "{text}"
    );
}

/// A malformed agent definition is skipped and said once on stderr,
/// naming its file, however many steps look at the definitions; the good
/// ones are still offered.
#[tokio::test]
async fn a_malformed_agent_definition_is_said_once_and_skipped() {
    let fake = FakeLlm::start().await;
    let e = env(&fake);
    let agents = e.work.path().join(".dsh/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(agents.join("bad.md"), "no frontmatter at all\n").unwrap();
    std::fs::write(
        agents.join("good.md"),
        "---\nname: good\ndescription: Does good work.\n---\nBe good.\n",
    )
    .unwrap();
    // A definition added during the first step, which takes well over a
    // second (the definitions are looked at at most once a second, as a
    // step starts, after its prompt was assembled): the second step reads
    // them again, and the third step's request describes it.
    let slow_call = match tool_calls(&[("list_agents", json!({}))]) {
        Answer::Sse(events) => Answer::Slow(events.into_iter().flatten().collect(), 800),
        other => other,
    };
    let again = tool_calls(&[("list_agents", json!({}))]);
    fake.push([slow_call, again, text("done")]);
    let added = agents.join("good2.md");
    let adder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        std::fs::write(
            added,
            "---\nname: good2\ndescription: Also good.\n---\nBe good.\n",
        )
        .unwrap();
    });
    let (code, stdout, stderr) = out(&e.run(&["look", "around"]).await);
    assert_eq!((code, stdout.as_str()), (0, "done\n"), "{stderr}");
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("agent definition") && l.contains("bad.md"))
        .collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(said[0].contains("is skipped"), "{stderr}");
    adder.join().unwrap();
    let requests = fake.requests();
    let first = requests[0]["tools"].to_string();
    assert!(first.contains("- good: Does good work."), "{first}");
    assert!(!first.contains("bad"), "{first}");
    // Read again (the new one offered), the bad one not said again.
    let third = requests[2]["tools"].to_string();
    assert!(third.contains("- good2: Also good."), "{third}");
}
