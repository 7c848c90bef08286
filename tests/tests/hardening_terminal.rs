//! Text that reaches a terminal (issue 18, item 8): model and tool text
//! carrying OSC 52 (a clipboard write), OSC 0 (the window title) and a
//! bidi override reaches none of `sessions show`, `sessions list`, the
//! headless answer on a terminal and the chat, while the visible text is
//! kept; a pipe still gets the headless answer byte for byte.
//!
//! Every run is the real `dsh-host` with the real plugins against the fake
//! model server; "on a terminal" runs in a real pseudo-terminal.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

#[allow(dead_code)] // the pty helpers this suite does not call
mod support;

use dsh_testkit::fake_llm::{text, tool_calls, FakeLlm};
use dsh_testkit::headless::Headless;
use dsh_testkit::out;
use serde_json::json;
use support::pty::Pty;

/// Writes "hello" to the clipboard (ended by BEL).
const OSC52: &str = "\u{1b}]52;c;aGVsbG8=\u{07}";
/// Its base64 payload.
const CLIPBOARD: &str = "aGVsbG8=";
/// Sets the window title (ended by ST); the fake server streams a text
/// answer word by word, so in an answer it is split across two chunks.
const OSC0: &str = "\u{1b}]0;pwned title\u{1b}\\";
/// RIGHT-TO-LEFT OVERRIDE: `exe.txt` would read `txt.exe`.
const RLO: char = '\u{202e}';

/// The model's answer: both escapes and the override around visible text.
fn answer() -> String {
    format!("Copied{OSC52} the file{OSC0} {RLO}exe.txt done.")
}

/// What the answer shows once sanitized.
const SHOWN: &str = "Copied the file exe.txt done.";

/// The file the model reads: the tool result carries them too.
fn file_text() -> String {
    format!("first{OSC52} copied\nthen{OSC0} titled {RLO}gnp.exe\n")
}

/// The task: a prompt pasted from somewhere, escapes included (it is what
/// `sessions list` shows).
fn task() -> String {
    format!("summarize{OSC0} notes.txt {RLO}now")
}

/// A workspace with the file, and the model's two answers queued: read it,
/// then the answer.
fn setup(fake: &FakeLlm, extra: &str) -> Headless {
    fake.push([
        tool_calls(&[("read", json!({"file_path": "notes.txt"}))]),
        text(&answer()),
    ]);
    let e = Headless::with_stream_idle(fake, 600_000, extra);
    std::fs::write(e.work.path().join("notes.txt"), file_text()).unwrap();
    e
}

fn find(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// None of the escapes' bytes: no OSC introducer, no BEL, no override
/// (`any_esc`: no ESC byte at all, for output without styling of its own).
fn assert_no_controls(what: &str, bytes: &[u8], any_esc: bool) {
    let shown = String::from_utf8_lossy(bytes);
    assert!(
        !find(bytes, b"\x1b]"),
        "{what}: an OSC introducer: {shown:?}"
    );
    assert!(!any_esc || !bytes.contains(&0x1b), "{what}: ESC: {shown:?}");
    assert!(!bytes.contains(&0x07), "{what}: BEL: {shown:?}");
    let rlo = RLO.to_string();
    assert!(!find(bytes, rlo.as_bytes()), "{what}: U+202E: {shown:?}");
}

/// [`assert_no_controls`], and what the escapes held is not shown as text
/// either: neither the clipboard payload nor the title (the OSC 0 of the
/// answer is split across two streamed chunks).
fn assert_no_escapes(what: &str, bytes: &[u8], any_esc: bool) {
    assert_no_controls(what, bytes, any_esc);
    let shown = String::from_utf8_lossy(bytes);
    assert!(
        !find(bytes, CLIPBOARD.as_bytes()),
        "{what}: the clipboard payload: {shown:?}"
    );
    assert!(!find(bytes, b"pwned"), "{what}: the title: {shown:?}");
}

/// `dsh-host sessions <args>` in the workspace, stdout a pipe: (code,
/// stdout bytes, stderr).
fn sessions(e: &Headless, args: &[&str]) -> (i32, Vec<u8>, String) {
    let o = e.sessions(args).output().unwrap();
    let (code, _, stderr) = out(&o);
    (code, o.stdout, stderr)
}

/// `dsh-host --profile headless <args>` on a fresh pseudo-terminal.
fn on_a_terminal(e: &Headless, args: &[&str]) -> Pty {
    let mut all = vec!["--profile", "headless"];
    all.extend_from_slice(args);
    Pty::dsh_host(e, &all, &[])
}

#[tokio::test]
async fn sessions_show_and_list_print_none_of_the_escapes_of_the_model_and_the_tool() {
    let fake = FakeLlm::start().await;
    let e = setup(&fake, "");
    let task = task();
    // On a pipe the answer is every byte the model gave: the escapes did
    // reach the session, so it is the sanitizer that takes them out below.
    let o = e.run(&[&task]).await;
    let (code, _, stderr) = out(&o);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(o.stdout, format!("{}\n", answer()).as_bytes());
    let log = std::fs::read(e.log_file()).unwrap();

    let (code, listed, stderr) = sessions(&e, &["list"]);
    assert_eq!(code, 0, "{stderr}");
    assert_no_escapes("sessions list", &listed, true);
    let listed = String::from_utf8(listed).unwrap();
    assert!(listed.contains("summarize notes.txt now"), "{listed}");
    let id = listed
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();

    let (code, shown, stderr) = sessions(&e, &["show", id]);
    assert_eq!(code, 0, "{stderr}");
    assert_no_escapes("sessions show", &shown, true);
    let shown = String::from_utf8(shown).unwrap();
    let line = |prefix: &str| {
        shown
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in {shown}"))
            .to_owned()
    };
    assert_eq!(line("user: "), "user: summarize notes.txt now");
    assert_eq!(line("assistant: "), format!("assistant: {SHOWN}"));
    let result = line("tool result: ");
    assert!(
        result.contains("first copied") && result.contains("then titled gnp.exe"),
        "{result}"
    );
    // Reading changed nothing stored.
    assert_eq!(std::fs::read(e.log_file()).unwrap(), log);
}

/// The headless answer to the [`task`] on a terminal (the workspace of
/// [`setup`] with `extra`): it exits 0 with none of the escapes (`what`
/// names the run); the screen.
async fn headless_on_a_terminal(extra: &str, what: &str) -> String {
    let fake = FakeLlm::start().await;
    let e = setup(&fake, extra);
    let task = task();
    let mut p = on_a_terminal(&e, &[&task]);
    p.wait_for("done.", 30).await;
    assert_eq!(p.wait_exit(30).await, 0, "{}", p.contents());
    assert_no_escapes(what, &p.raw(), true);
    p.contents()
}

#[tokio::test]
async fn the_headless_answer_on_a_terminal_has_none_of_the_escapes() {
    let screen = headless_on_a_terminal("", "headless on a terminal").await;
    assert!(screen.contains(SHOWN), "{screen}");
}

#[tokio::test]
async fn the_streamed_headless_answer_on_a_terminal_drops_an_escape_split_across_chunks() {
    let screen = headless_on_a_terminal(
        "[[patch]]\nid = \"headless\"\nconfig = { stream = true }\n",
        "headless --stream on a terminal",
    )
    .await;
    // The tool call line is shown too, through the same sanitizer.
    assert!(screen.contains(SHOWN), "{screen}");
    assert!(
        screen.contains("[read {\"file_path\":\"notes.txt\"}]"),
        "{screen}"
    );
}

#[tokio::test]
async fn jsonl_on_a_terminal_keeps_its_values_with_the_override_escaped() {
    let fake = FakeLlm::start().await;
    let e = setup(&fake, "");
    let task = task();
    let mut p = on_a_terminal(&e, &["--output", "jsonl", &task]);
    p.wait_for("\"type\":\"result\"", 30).await;
    assert_eq!(p.wait_exit(30).await, 0, "{}", p.contents());
    let raw = p.raw();
    assert_no_controls("jsonl on a terminal", &raw, true);
    // The JSON says what the model said: the ESC and BEL as JSON escapes,
    // the override as `\u202e`.
    assert!(find(&raw, b"\\u001b]52;c;aGVs"), "{}", p.contents());
    assert!(find(&raw, b"\\u202eexe.txt"), "{}", p.contents());
}

#[tokio::test]
async fn the_chat_shows_neither_the_escapes_nor_the_override() {
    let fake = FakeLlm::start().await;
    let e = setup(&fake, "");
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send("read notes.txt\r");
    p.wait_for("done.", 30).await;
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
    // The chat styles its own text (ESC [), never an OSC of the model's.
    assert_no_escapes("the chat", &p.raw(), false);
    let screen = p.contents();
    assert!(screen.contains(SHOWN), "{screen}");
    assert!(screen.contains("first copied"), "{screen}");
    assert!(screen.contains("then titled gnp.exe"), "{screen}");
}
