//! Through the real `dsh-host` binary: what the host's starter left behind
//! never reaches the agent. A descriptor inherited without close-on-exec
//! (a shell redirection `9<>file`) is not passed on to commands, and a
//! relative `$DSH_HOME` is still the harness's own, protected from the
//! file tools.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;

use dsh_testkit::fake_llm::{text, tool_calls, FakeLlm};
use dsh_testkit::headless::Headless;
use dsh_testkit::TempDir;
use serde_json::json;

/// The descriptor number the starter leaves open.
const INHERITED: i32 = 9;

/// Runs the host command `c` to its end and checks that it exited 0
/// (`what` names the run in the failure). On a blocking thread: the fake
/// model is served by this test's runtime.
async fn succeeds(mut c: std::process::Command, what: &str) {
    let out = tokio::task::spawn_blocking(move || c.output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_descriptor_the_host_inherited_never_reaches_a_command() {
    for mode in ["read-only", "workspace-write"] {
        let outside = TempDir::new("inherit-outside");
        let target = outside.path().join("outside.txt");
        std::fs::write(&target, "untouched\n").unwrap();
        let fake = FakeLlm::start().await;
        fake.push([
            tool_calls(&[(
                "bash",
                json!({
                    "command": format!("echo pwned >&{INHERITED}; ls -l /proc/self/fd/ | grep -c outside.txt"),
                    "description": "write through an inherited descriptor"
                }),
            )]),
            text("done"),
        ]);
        let h = Headless::new(&fake, "").env("DSH_PERMISSION_MODE", mode);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&target)
            .unwrap();
        let raw = file.as_raw_fd();
        let mut c = h.command(&["go"]);
        // SAFETY: dup2 into the child's descriptor table, before exec.
        unsafe {
            c.pre_exec(move || {
                if libc::dup2(raw, INHERITED) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        succeeds(c, mode).await;
        drop(file);
        let result = &fake.tool_results(1)[0];
        assert!(
            result.contains("Bad file descriptor"),
            "{mode}: the command could use the inherited descriptor: {result}"
        );
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "untouched\n",
            "{mode}: the file outside the fence changed"
        );
    }
}

#[tokio::test]
async fn a_relative_dsh_home_is_still_protected_from_the_file_tools() {
    let fake = FakeLlm::start().await;
    fake.push([
        tool_calls(&[(
            "write",
            json!({"file_path": "relhome/patch.toml", "content": "[[patch]]\nid = \"permission\"\n"}),
        )]),
        text("done"),
    ]);
    let h = Headless::new(&fake, "");
    // The home is the workspace's `relhome`, spelled relative to it.
    let home = h.work.path().join("relhome");
    std::fs::create_dir(&home).unwrap();
    let patch = home.join("patch.toml");
    std::fs::write(&patch, "# the user's\n").unwrap();
    let mut c = h.command(&["go"]);
    c.env("DSH_HOME", "relhome");
    succeeds(c, "relative home").await;
    let result = &fake.tool_results(1)[0];
    assert!(
        result.contains("harness's own files"),
        "a write into the relative home was not refused: {result}"
    );
    assert_eq!(std::fs::read_to_string(&patch).unwrap(), "# the user's\n");
}
