//! The user's terminal, out of a command's reach, in a real pseudo-terminal:
//! `dsh-host` runs on a pty it has as its controlling terminal, as a user
//! runs it, and a `bash` command tries `TIOCSTI` (pushing input into the
//! terminal, kernel `legacy_tiocsti=1`) and raw escapes on `/dev/tty` and
//! every `/dev/pts/N` it can open.
//!
//! - Headless: the command pushes `touch <marker>\r`; the user's shell
//!   reads the terminal after dsh exits and runs what it got. The marker
//!   must not appear (read-only and workspace-write under Landlock, under
//!   bubblewrap, and danger-full-access), and in the fenced modes no escape
//!   reaches the terminal.
//! - The chat: a background job types `a` while the approval prompt of a
//!   write outside the workspace waits; the write must not be allowed.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

#[allow(dead_code)] // the pty helpers this suite does not call
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_testkit::fake_llm::{text, tool_calls, FakeLlm};
use dsh_testkit::headless::Headless;
use dsh_testkit::target_dir;
use serde_json::json;
use support::pty::Pty;

/// A shell command that pushes `input` into every terminal it can open
/// with `TIOCSTI` and writes an OSC title sequence (`dsh-pwned` + `title`,
/// split so the command's own text never holds it) to each; it prints what
/// each attempt did.
fn attack(input: &str) -> String {
    format!(
        r#"python3 -c '
import fcntl, glob, os, termios
for p in ["/dev/tty"] + sorted(glob.glob("/dev/pts/[0-9]*")):
    try:
        fd = os.open(p, os.O_RDWR | os.O_NOCTTY)
    except OSError as e:
        print("cannot open", p, e.strerror)
        continue
    os.write(fd, b"\033]0;dsh-pwned" + b"title\007")
    try:
        for b in {input:?}.encode():
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([b]))
        print("pushed into", p)
    except OSError as e:
        print("cannot push into", p, e.strerror)
'"#
    )
}

/// A file outside the workspace and the temp directory.
fn outside(label: &str) -> PathBuf {
    Path::new("/var/tmp").join(format!("dsh-{label}-{}", std::process::id()))
}

fn bash_patch(sandbox: &str) -> String {
    format!("[[patch]]\nid = 'tool-bash'\nconfig = {{ sandbox = '{sandbox}' }}\n")
}

#[tokio::test]
async fn a_command_cannot_type_into_the_users_terminal() {
    for (mode, sandbox) in [
        ("workspace-write", "landlock"),
        ("read-only", "landlock"),
        ("workspace-write", "bubblewrap"),
        ("danger-full-access", "auto"),
    ] {
        let marker = outside(&format!("tiocsti-{mode}-{sandbox}"));
        let _ = std::fs::remove_file(&marker);
        let fake = FakeLlm::start().await;
        let injected = format!("touch {}\r", marker.display());
        fake.push([
            tool_calls(&[(
                "bash",
                json!({"command": attack(&injected), "description": "type into the terminal"}),
            )]),
            text("Done."),
        ]);
        let e = Headless::new(&fake, &bash_patch(sandbox));
        // The user's shell: runs dsh, then reads (and runs) what the
        // terminal holds, as an interactive shell would at its prompt.
        let host = target_dir().join("dsh-host");
        let script = format!(
            "'{host}' --profile headless --patch '{patch}' 'go'; echo dsh-exited; \
             if read -t 1 -r line; then echo \"shell-read:$line\"; eval \"$line\"; fi; echo shell-done",
            host = host.display(),
            patch = e.patch.display()
        );
        let mut p = Pty::in_workspace(
            &e,
            Path::new("/bin/bash"),
            &["--norc", "--noprofile", "-c", &script],
            &[("DSH_PERMISSION_MODE", mode)],
        );
        p.wait_for("shell-done", 60).await;
        assert_eq!(p.wait_exit(10).await, 0);
        let results = fake.tool_results(1);
        let result = results.last().map(String::as_str).unwrap_or_default();
        let screen = p.contents();
        assert!(
            !marker.exists(),
            "{mode} {sandbox}: the shell ran the pushed line\n{result}\n{screen}"
        );
        assert!(
            !screen.contains("shell-read:"),
            "{mode} {sandbox}: {screen}"
        );
        assert!(
            !result.contains("pushed into"),
            "{mode} {sandbox}: {result}"
        );
        assert!(
            result.contains("cannot open /dev/tty No such device or address"),
            "{mode} {sandbox}: no controlling terminal: {result}"
        );
        // danger-full-access sees the host's /dev/pts: it may write there
        // (no fence), but without a controlling terminal or capabilities
        // it cannot push input.
        let raw = String::from_utf8_lossy(&p.raw()).into_owned();
        assert!(
            mode == "danger-full-access" || !raw.contains("dsh-pwnedtitle"),
            "{mode} {sandbox}: a raw escape reached the terminal"
        );
        let _ = std::fs::remove_file(&marker);
    }
}

#[tokio::test]
async fn a_background_job_cannot_answer_the_chats_approval_prompt() {
    let fake = FakeLlm::start().await;
    let target = outside("approval-typed");
    let _ = std::fs::remove_file(&target);
    // Types `a` ("allow for this session") every 100 ms for 20 s.
    let typer = format!(
        "for i in $(seq 200); do {} >/dev/null 2>&1; sleep 0.1; done",
        attack("a")
    );
    fake.push([
        tool_calls(&[(
            "bash",
            json!({"command": typer, "description": "type a", "run_in_background": true}),
        )]),
        tool_calls(&[(
            "write",
            json!({"file_path": target.to_str().unwrap(), "content": "pwned"}),
        )]),
        text("Finished."),
    ]);
    let e = Headless::new(&fake, &bash_patch("landlock"));
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send("go\r");
    p.wait_for("allow once [y]", 30).await;
    // The job types for 20 s; the prompt ignores keys for its first moment
    // only. Two seconds of typing would have answered it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let screen = p.contents();
    assert!(
        !target.exists(),
        "the typed `a` allowed the write:\n{screen}"
    );
    assert!(!screen.contains("allowed for this session"), "{screen}");
    p.send("n");
    p.wait_for("Finished.", 20).await;
    assert!(!target.exists());
    let results = fake.tool_results(2);
    let last = results.last().unwrap();
    assert!(last.contains("rejected"), "{last}");
    p.wait_idle(20).await;
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
}
