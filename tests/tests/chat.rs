//! The interactive chat (`dsh-host` with no task), driven through a real
//! pseudo-terminal against the fake model server: streamed turns, tool
//! calls, Ctrl-C, approvals, resuming, colors, and a reload of the chat
//! plugin in the middle of a conversation.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

mod support;

use std::path::Path;

use dsh_sdk::vocab::event;
use dsh_testkit::fake_llm::{slow_text, stall_after, text, tool_calls, FakeLlm};
use dsh_testkit::headless::{lines_so_far, Headless};
use dsh_testkit::{replace_library, target_dir, TempDir};
use serde_json::{json, Value};
use support::pty::Pty;

/// The messages of the `n`th request the model got.
fn messages(fake: &FakeLlm, n: usize) -> Vec<Value> {
    fake.requests()[n]["messages"].as_array().unwrap().clone()
}

fn user_texts(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .filter(|t| !t.starts_with("<system-reminder>"))
        .collect()
}

#[tokio::test]
async fn a_two_turn_conversation_streams_and_ctrl_d_exits_with_the_session_flushed() {
    let fake = FakeLlm::start().await;
    fake.push([text("Hello from the model."), text("Second answer here.")]);
    let e = Headless::new(&fake, "");
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send("hi there\r");
    p.wait_for("Hello from the model.", 20).await;
    p.send("and again\r");
    p.wait_for("Second answer here.", 20).await;
    // The second request carries the first exchange.
    let second = messages(&fake, 1);
    assert_eq!(user_texts(&second), ["hi there", "and again"]);
    assert!(second
        .iter()
        .any(|m| m["role"] == "assistant" && m["content"] == "Hello from the model."));
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
    let files = e.session_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let log = lines_so_far(&files[0]);
    let ends = log.iter().filter(|l| l["type"] == event::TURN_END).count();
    assert_eq!(ends, 2);
}

#[tokio::test]
async fn a_large_multi_line_paste_is_sent_whole_and_shown_folded() {
    let fake = FakeLlm::start().await;
    fake.push([text("Got the paste.")]);
    let e = Headless::new(&fake, "");
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    let pasted: String = (0..3000)
        .map(|i| format!("line {i} of the paste\n"))
        .collect();
    p.send("look at this:");
    p.send("\n");
    p.send(&format!("\x1b[200~{pasted}\x1b[201~"));
    p.wait_for("characters in all", 20).await;
    p.send("\r");
    p.wait_for("Got the paste.", 30).await;
    let sent = user_texts(&messages(&fake, 0));
    assert_eq!(sent.len(), 1);
    assert!(sent[0].starts_with("look at this:"), "{}", &sent[0][..40]);
    assert!(sent[0].ends_with("line 2999 of the paste\n"));
    assert_eq!(sent[0].lines().count(), 3001);
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
}

#[tokio::test]
async fn a_tool_call_and_its_result_are_one_line_each() {
    let fake = FakeLlm::start().await;
    fake.push([
        tool_calls(&[("read", json!({"file_path": "notes.md"}))]),
        text("The notes say hello."),
    ]);
    let e = Headless::new(&fake, "");
    std::fs::write(
        e.work.path().join("notes.md"),
        "first line\nmiddle\nlast line\n",
    )
    .unwrap();
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send("read the notes\r");
    p.wait_for("The notes say hello.", 20).await;
    let screen = p.contents();
    assert!(screen.contains("• read notes.md"), "{screen}");
    assert!(screen.contains("first line"), "{screen}");
    assert!(screen.contains("last line"), "{screen}");
    assert!(!screen.contains("middle"), "{screen}");
    assert!(screen.contains("… 1 more lines"), "{screen}");
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
}

#[tokio::test]
async fn ctrl_c_cancels_the_running_turn_and_the_next_prompt_works() {
    let fake = FakeLlm::start().await;
    fake.push([stall_after("Thinking hard"), text("Back again.")]);
    let e = Headless::new(&fake, "");
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send("never ending\r");
    p.wait_for("Thinking hard", 20).await;
    p.send("\x03");
    p.wait_for("(turn cancelled)", 20).await;
    p.send("next\r");
    p.wait_for("Back again.", 20).await;
    p.wait_idle(20).await;
    // Ctrl-C twice at an empty prompt exits.
    p.send("\x03");
    p.wait_for("Ctrl-C again", 20).await;
    p.send("\x03");
    assert_eq!(p.wait_exit(20).await, 0);
}

#[tokio::test]
async fn typing_during_a_turn_steers_it() {
    let fake = FakeLlm::start().await;
    fake.push([
        tool_calls(&[(
            "bash",
            json!({"command": "sleep 1; echo done", "description": "wait"}),
        )]),
        text("Steered."),
    ]);
    let e = Headless::new(&fake, "").env("DSH_PERMISSION_MODE", "danger-full-access");
    let mut p = Pty::dsh_host(&e, &[], &[("DSH_PERMISSION_MODE", "danger-full-access")]);
    p.wait_for("dsh chat", 20).await;
    p.send("run it\r");
    p.wait_for("• bash", 20).await;
    p.send("also check the logs\r");
    p.wait_for("Steered.", 30).await;
    let second = messages(&fake, 1);
    assert!(
        user_texts(&second)
            .iter()
            .any(|t| t == "also check the logs"),
        "{second:?}"
    );
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
}

#[tokio::test]
async fn an_approval_is_asked_and_answered_allow_then_reject() {
    let fake = FakeLlm::start().await;
    let outside = outside_the_fence();
    let allowed = outside.path().join("allowed.txt");
    let refused = outside.path().join("refused.txt");
    let session_a = outside.path().join("session-a.txt");
    let session_b = outside.path().join("session-b.txt");
    fake.push([
        tool_calls(&[(
            "write",
            json!({"file_path": allowed.to_str().unwrap(), "content": "yes"}),
        )]),
        text("Wrote it."),
        tool_calls(&[(
            "write",
            json!({"file_path": refused.to_str().unwrap(), "content": "no"}),
        )]),
        text("Could not write."),
        tool_calls(&[
            (
                "write",
                json!({"file_path": session_a.to_str().unwrap(), "content": "1"}),
            ),
            (
                "write",
                json!({"file_path": session_b.to_str().unwrap(), "content": "2"}),
            ),
        ]),
        text("Both written."),
    ]);
    let e = Headless::new(&fake, "");
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send("write outside\r");
    p.wait_for("allow once [y]", 20).await;
    assert!(p.contents().contains("allowed.txt"), "{}", p.contents());
    // Keys right after the prompt shows, and Enter, answer nothing.
    p.send("y");
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    p.send("\r");
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(!allowed.exists());
    p.send("y");
    p.wait_for("Wrote it.", 20).await;
    assert_eq!(std::fs::read_to_string(&allowed).unwrap(), "yes");
    p.wait_idle(20).await;
    p.send("again\r");
    p.wait_for("refused.txt", 20).await;
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    p.send("n");
    p.wait_for("Could not write.", 20).await;
    assert!(!refused.exists());
    let results = fake.tool_results(3);
    let last = results.last().unwrap();
    assert!(last.contains("rejected"), "{last}");
    // Allowed for the session: the next write of the same tool is not asked.
    p.wait_idle(20).await;
    p.send("two more\r");
    p.wait_for("session-a.txt", 20).await;
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    p.send("a");
    p.wait_for("Both written.", 20).await;
    assert_eq!(std::fs::read_to_string(&session_b).unwrap(), "2");
    assert_eq!(
        p.contents()
            .matches("write allowed for this session")
            .count(),
        1,
        "{}",
        p.contents()
    );
    assert_eq!(std::fs::read_to_string(&session_a).unwrap(), "1");
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
}

#[tokio::test]
async fn continue_and_resume_see_the_earlier_history() {
    let fake = FakeLlm::start().await;
    fake.push([
        text("First session answer."),
        text("Continued answer."),
        text("Resumed answer."),
    ]);
    let e = Headless::new(&fake, "");
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send("remember the word apple\r");
    p.wait_for("First session answer.", 20).await;
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
    let id = session_id(&e.session_files()[0]);

    let mut p = Pty::dsh_host(&e, &["--continue"], &[]);
    p.wait_for(&format!("resumed session {id}"), 20).await;
    p.wait_for("First session answer.", 20).await;
    p.send("what was the word?\r");
    p.wait_for("Continued answer.", 20).await;
    assert_eq!(
        user_texts(&messages(&fake, 1)),
        ["remember the word apple", "what was the word?"]
    );
    // /new, then /resume <id> back into it.
    p.wait_idle(20).await;
    p.send("/new\r");
    p.wait_for("dsh chat", 20).await;
    p.send(&format!("/resume {id}\r"));
    p.wait_for_count(&format!("resumed session {id}"), 2, 20)
        .await;
    p.send("once more\r");
    p.wait_for("Resumed answer.", 20).await;
    assert_eq!(
        user_texts(&messages(&fake, 2)),
        ["remember the word apple", "what was the word?", "once more"]
    );
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
}

#[tokio::test]
async fn no_color_output_has_no_style_sequences_and_colors_are_on_otherwise() {
    let fake = FakeLlm::start().await;
    fake.push([
        text("Plain:\n```\ncode\n```\ntext."),
        text("Colored:\n```\ncode\n```\ntext."),
    ]);
    let e = Headless::new(&fake, "");
    let mut p = Pty::dsh_host(&e, &[], &[("NO_COLOR", "1")]);
    p.wait_for("dsh chat", 20).await;
    p.send("go\r");
    p.wait_for("text.", 20).await;
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
    assert!(
        !has_sgr(&p.raw()),
        "{:?}",
        String::from_utf8_lossy(&p.raw())
    );

    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send("go\r");
    p.wait_for("Colored", 20).await;
    p.wait_for("text.", 20).await;
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
    // The code block in the theme's code color.
    let raw = String::from_utf8_lossy(&p.raw()).into_owned();
    assert!(raw.contains("\x1b[36mc"), "{raw:?}");
}

#[tokio::test]
async fn the_chat_plugin_reloaded_mid_session_keeps_the_conversation() {
    let fake = FakeLlm::start().await;
    fake.push([
        text("Before the reload."),
        slow_text("After the reload.", 5),
        slow_text("A turn that runs across a reload of the chat.", 150),
    ]);
    let e = Headless::new(&fake, "");
    let plugins = TempDir::new("chat-plugins");
    let lib = plugins.path().join("libdsh_plugin_chat.so");
    replace_library("dsh-plugin-chat", &lib);
    let dir = plugins.path().to_str().unwrap().to_owned();
    let mut p = Pty::dsh_host(&e, &["--watch", "--plugins-dir", &dir], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send("first\r");
    p.wait_for("Before the reload.", 20).await;
    // Typed before the reload, finished after it.
    p.send("sec");
    replace_library("dsh-plugin-chat", &lib);
    p.wait_for("reloaded chat (chat) generation 2", 20).await;
    // The host's line is shown by the chat above its input, whole, and the
    // half-typed input is drawn again under it.
    p.wait_last_line("› sec", 20).await;
    let screen = p.contents();
    assert!(
        screen.lines().any(|l| {
            let l = l.trim();
            l.starts_with("dsh-host: reloaded chat (chat) generation 2 in ") && l.ends_with(" ms")
        }),
        "{screen}"
    );
    p.send("ond\r");
    p.wait_for("After the reload.", 20).await;
    assert_eq!(user_texts(&messages(&fake, 1)), ["first", "second"]);
    assert!(p.contents().contains("Before the reload."));
    // A reload in the middle of a turn: the agent is handed over, and the
    // turn goes on to its end.
    p.wait_idle(20).await;
    p.send("third\r");
    p.wait_for("A turn", 20).await;
    replace_library("dsh-plugin-chat", &lib);
    p.wait_for("reloaded chat (chat) generation 3", 20).await;
    p.wait_for("across a reload of the chat.", 20).await;
    p.wait_idle(20).await;
    assert!(
        !p.contents().contains("the reload ended"),
        "{}",
        p.contents()
    );
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
    assert_eq!(e.session_files().len(), 1);
    let log = lines_so_far(&e.session_files()[0]);
    let completed = log
        .iter()
        .filter(|l| l["type"] == event::TURN_END && l["data"]["reason"]["kind"] == "completed")
        .count();
    assert_eq!(completed, 3, "every turn ran to its end");
}

#[tokio::test]
async fn slash_commands_go_through_the_registry_and_are_logged() {
    let fake = FakeLlm::start().await;
    fake.push([text("Counted.")]);
    let e = Headless::new(&fake, "");
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send("hello\r");
    p.wait_for("Counted.", 20).await;
    p.wait_idle(20).await;
    // /help: the registry's commands, the chat's own among them, and the keys.
    p.send("/help\r");
    p.wait_for("keys: Enter sends", 20).await;
    let screen = p.contents();
    for name in [
        "/status",
        "/model",
        "/permission",
        "/new",
        "/resume <id>",
        "/plugins",
        "/exit",
    ] {
        assert!(screen.contains(name), "{name} missing:\n{screen}");
    }
    p.send("/plugins\r");
    p.wait_for("agent-loop", 20).await;
    assert!(p.contents().contains("active"), "{}", p.contents());
    p.send("/status\r");
    p.wait_for("tokens", 20).await;
    p.send("/nope\r");
    p.wait_for("unknown command /nope (try /help)", 20).await;
    p.send("/exit\r");
    assert_eq!(p.wait_exit(20).await, 0);
    let log = lines_so_far(&e.session_files()[0]);
    let runs: Vec<&str> = log
        .iter()
        .filter(|l| l["type"] == "command/run")
        .filter_map(|l| l["data"]["name"].as_str())
        .collect();
    assert_eq!(runs, ["help", "plugins", "status", "exit"]);
    let done = log.iter().filter(|l| l["type"] == "command/done").count();
    assert_eq!(done, 4);
}

#[tokio::test]
async fn a_chat_without_a_terminal_is_a_clear_error() {
    let fake = FakeLlm::start().await;
    let e = Headless::new(&fake, "");
    let out = std::process::Command::new(target_dir().join("dsh-host"))
        .args(["--profile", "chat", "--patch"])
        .arg(&e.patch)
        .current_dir(e.work.path())
        .env("DSH_HOME", e.home.path())
        .env_remove("DSH_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("chat needs a terminal on stdin"), "{err}");
}

/// A fresh directory outside the workspace and the temp directory (both
/// writable under the default mode), so a write there asks for approval.
fn outside_the_fence() -> TempDir {
    let temp = std::env::temp_dir().canonicalize().unwrap();
    let candidates = [
        std::env::var_os("HOME").map(std::path::PathBuf::from),
        Some("/var/tmp".into()),
    ];
    let base = candidates
        .into_iter()
        .flatten()
        .filter_map(|d| d.canonicalize().ok())
        .find(|d| !d.starts_with(&temp) && !temp.starts_with(d) && d.is_dir())
        .expect("a writable directory outside the temp directory ($HOME or /var/tmp)");
    TempDir::new_in(&base, "chat-outside")
}

/// The session id in a log's header line.
fn session_id(file: &Path) -> String {
    lines_so_far(file)[0]["id"].as_str().unwrap().to_owned()
}

/// True when `raw` holds an SGR (style) sequence: `ESC [ params m`.
fn has_sgr(raw: &[u8]) -> bool {
    let s = String::from_utf8_lossy(raw);
    s.match_indices("\x1b[").any(|(i, _)| {
        s[i + 2..]
            .chars()
            .find(|c| !(c.is_ascii_digit() || *c == ';'))
            == Some('m')
    })
}

#[tokio::test]
async fn a_running_subagent_is_a_live_line_and_agents_lists_it() {
    let fake = FakeLlm::start().await;
    let gate = dsh_testkit::fake_llm::Gate::new();
    fake.push_for(
        "PTY-KID",
        [dsh_testkit::fake_llm::gated_text("kid finished", &gate)],
    );
    fake.push_for(
        "PTY-PARENT",
        [
            tool_calls(&[(
                "subagent",
                json!({"description": "watch the build", "prompt": "PTY-KID watch it"}),
            )]),
            text("Started the watcher."),
            text("The watcher is done."),
        ],
    );
    let e = Headless::new(&fake, "");
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send("PTY-PARENT go\r");
    p.wait_for("Started the watcher.", 20).await;
    p.wait_for("↳ watch the build · step 1", 20).await;
    p.send("/agents\r");
    p.wait_for("[running] depth=1 — watch the build", 20).await;
    gate.open();
    // The child's notice wakes the agent, which answers it.
    p.wait_for("The watcher is done.", 20).await;
    p.wait_idle(20).await;
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
}
