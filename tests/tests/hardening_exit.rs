//! Through the real `dsh-host` binary: nothing a command started outlives
//! the harness (clean exit or `kill -9`), and endless output under a memory
//! cap neither aborts the harness nor fills memory or disk.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::os::unix::process::CommandExt;
use std::time::Duration;

use dsh_testkit::fake_llm::{text, tool_calls, FakeLlm};
use dsh_testkit::headless::Headless;
use dsh_testkit::measure::run_measured;
use dsh_testkit::{processes_named, wait_for, wait_gone};
use serde_json::json;

fn marker(label: &str) -> String {
    format!("dsh-exit-{label}-{}", std::process::id())
}

fn bash(command: &str) -> (&'static str, serde_json::Value) {
    ("bash", json!({"command": command, "description": "d"}))
}

#[tokio::test]
async fn nothing_a_command_started_outlives_a_clean_exit() {
    let fake = FakeLlm::start().await;
    let (quiet, job) = (marker("quiet"), marker("job"));
    fake.push([
        tool_calls(&[bash(&format!(
            "(setsid bash -c 'touch up; exec -a {quiet} sleep 41' >/dev/null 2>&1 </dev/null &); while [ ! -e up ]; do sleep 0.01; done; echo started"
        ))]),
        tool_calls(&[(
            "bash",
            json!({"command": format!("exec -a {job} sleep 100"), "description": "d", "run_in_background": true}),
        )]),
        text("done"),
    ]);
    let h = Headless::new(&fake, "");
    h.run_ok(&["go"]).await;
    for m in [&quiet, &job] {
        let left = wait_gone(m, Duration::from_secs(10));
        assert!(left.is_empty(), "{m}: {left:?} outlived the harness");
    }
}

#[tokio::test]
async fn nothing_a_command_started_outlives_kill_9_of_the_harness() {
    let fake = FakeLlm::start().await;
    let (job, fg) = (marker("kjob"), marker("kfg"));
    fake.push([
        tool_calls(&[(
            "bash",
            json!({"command": format!("exec -a {job} sleep 100"), "description": "d", "run_in_background": true}),
        )]),
        tool_calls(&[(
            "bash",
            json!({"command": format!("(setsid bash -c 'exec -a {fg}-detached sleep 100' &); exec -a {fg} sleep 100"), "description": "d", "timeoutMs": 600000}),
        )]),
        text("never reached"),
    ]);
    let h = Headless::new(&fake, "");
    let host = h.spawn(&["go"]);
    // Both commands run (the processes themselves, not the shells or
    // sandboxes whose arguments name them).
    let detached = format!("{fg}-detached");
    wait_for("the commands to start", || {
        [&job, &fg, &detached]
            .iter()
            .all(|m| !processes_named(m).is_empty())
    })
    .await;
    host.kill();
    for m in [&job, &fg] {
        let left = wait_gone(m, Duration::from_secs(10));
        assert!(
            left.is_empty(),
            "{m}: {left:?} outlived kill -9 of the harness"
        );
    }
}

#[tokio::test]
async fn endless_output_under_a_memory_cap_neither_aborts_nor_fills_memory() {
    let fake = FakeLlm::start().await;
    fake.push([
        tool_calls(&[(
            "bash",
            json!({"command": "yes", "description": "d", "timeoutMs": 3000}),
        )]),
        tool_calls(&[bash("head -c 1000000000 /dev/zero")]),
        text("survived"),
    ]);
    let h = Headless::new(&fake, "");
    let mut c = h.command(&["go"]);
    // SAFETY: setrlimit only, between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let cap = 3u64 << 30;
            let limit = libc::rlimit {
                rlim_cur: cap,
                rlim_max: cap,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let run = run_measured(c).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.peak_kib < 256 * 1024,
        "peak RSS {} KiB: output was held in memory",
        run.peak_kib
    );
    // The model saw the truncation notes.
    let results = fake.tool_results_of_last_request();
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        results[0].contains("[timed out after 3000ms]"),
        "{}",
        &results[0][..200]
    );
    assert!(
        results[1].starts_with("[output truncated: showing the last 64000 of 1000000000 bytes; the first 67108864 bytes of the output are in: "),
        "{}",
        &results[1][..300]
    );
}
