//! The `dsh-host` binary: composition and `--dump-config`, bad configs,
//! `plugins check|list|soak`, `--watch` hot reload of plugins and patches,
//! and signals.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_testkit::{
    drop_in, dsh_host, home_with_profile, library, output, plugins_list, target_dir, TempDir,
};
use serde_json::Value;

/// A `$DSH_HOME` with profile `test` = bundle `base` (rows a, b: probes).
fn home_with_bundle() -> TempDir {
    let home = home_with_profile("cli-home", "test", "bundles = [\"base\"]\n");
    let p = home.path();
    std::fs::create_dir_all(p.join("profiles/bundles")).unwrap();
    std::fs::write(
        p.join("profiles/bundles/base.toml"),
        "[[row]]\nid = \"a\"\nplugin = \"dsh-fixture-probe\"\nconfig = { tag = \"a\" }\n\n\
         [[row]]\nid = \"b\"\nplugin = \"dsh-fixture-probe\"\nconfig = { tag = \"b\" }\n",
    )
    .unwrap();
    home
}

#[test]
fn dump_config_shows_layers_and_fails_on_unknown_patch_ids() {
    let home = home_with_bundle();
    std::fs::write(
        home.path().join("patch.toml"),
        "[[patch]]\nid = \"b\"\nconfig = { tag = \"b2\" }\n",
    )
    .unwrap();
    let extra = home.path().join("extra.toml");
    std::fs::write(
        &extra,
        "[[patch]]\nid = \"b\"\ndisabled = true\n[[patch]]\nid = \"nope\"\ndisabled = true\n\
         [[row]]\nid = \"c\"\nplugin = \"counter\"\n",
    )
    .unwrap();
    let (code, out, err) = output(
        dsh_host()
            .env("DSH_HOME", home.path())
            .args(["--profile", "test", "--dump-config", "--patch"])
            .arg(&extra),
    );
    // The tree is printed, but a patch that matched nothing fails the run.
    assert_eq!(code, 1, "{err}");
    let home_patch = home.path().join("patch.toml").display().to_string();
    assert!(
        out.contains("# == bundle:base\n[[row]]\nid = \"a\""),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "# == bundle:base, patched by {home_patch}, {}\n[[row]]\nid = \"b\"",
            extra.display()
        )),
        "{out}"
    );
    assert!(out.contains("disabled = true"), "{out}");
    assert!(out.contains("tag = \"b2\""), "{out}");
    assert!(
        out.contains(&format!("# == {}\n[[row]]\nid = \"c\"", extra.display())),
        "{out}"
    );
    assert!(err.contains("patch: row \"nope\" not found"), "{err}");
}

#[test]
fn malformed_toml_and_unknown_profiles_are_clear_errors() {
    let home = home_with_bundle();
    let bad = home.path().join("profiles/bundles/base.toml");
    std::fs::write(&bad, "[[row]]\nid = \"a\"\nplugin = \n").unwrap();
    let (code, _, err) = output(
        dsh_host()
            .env("DSH_HOME", home.path())
            .args(["--profile", "test"]),
    );
    assert_eq!(code, 1);
    assert!(
        err.contains(&bad.display().to_string()) && err.contains("line 3"),
        "{err}"
    );

    let (code, _, err) = output(
        dsh_host()
            .env("DSH_HOME", home.path())
            .args(["--profile", "ghost"]),
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("profile `ghost` not found; searched:"),
        "{err}"
    );
    assert!(err.contains(
        &home
            .path()
            .join("profiles/ghost/profile.toml")
            .display()
            .to_string()
    ));

    // No task and stdin not a terminal: no chat to open, a clear error.
    let (code, _, err) = output(
        dsh_host()
            .env("DSH_HOME", home.path())
            .stdin(std::process::Stdio::null()),
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("no task and no terminal: give a task (dsh-host \"run the tests\")"),
        "{err}"
    );
}

#[test]
fn plugins_check_and_list() {
    let (code, out, _) = output(
        dsh_host()
            .args(["plugins", "check"])
            .arg(library("dsh-fixture-probe")),
    );
    assert_eq!(code, 0);
    let manifest: Value = serde_json::from_str(out.split("\nunload:").next().unwrap()).unwrap();
    assert_eq!(manifest["name"], "probe");
    assert!(out.contains("unload: unmapped"), "{out}");

    let dir = TempDir::new("cli-plugins");
    std::fs::write(dir.path().join("garbage.so"), vec![7u8; 4096]).unwrap();
    let (code, _, err) = output(
        dsh_host()
            .args(["plugins", "check"])
            .arg(dir.path().join("garbage.so")),
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("refused") && err.contains("invalid ELF header"),
        "{err}"
    );

    std::fs::copy(
        library("dsh-fixture-counter-v2"),
        dir.path().join("counter.so"),
    )
    .unwrap();
    let home = TempDir::new("cli-list-home");
    let (code, out, err) = plugins_list(home.path(), dir.path(), dir.path());
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("counter") && l.contains("2.0.0") && l.contains("loadable")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains("refused") && l.contains("garbage.so")),
        "{out}"
    );
}

struct Running {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Running {
    fn start(mut c: Command) -> Running {
        let mut child = c
            .env("DSH_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn dsh-host");
        let stderr = Arc::new(Mutex::new(String::new()));
        let pipe = child.stderr.take().unwrap();
        let buf = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut b = buf.lock().unwrap();
                b.push_str(&line);
                b.push('\n');
            }
        });
        Running { child, stderr }
    }

    fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn wait_for(&self, needle: &str) {
        let start = Instant::now();
        while !self.log().contains(needle) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "timed out waiting for {needle:?}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn count(&self, needle: &str) -> usize {
        self.log().matches(needle).count()
    }

    fn signal(&self, sig: &str) {
        Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
    }

    fn exit_code(mut self) -> i32 {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "did not exit:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn watch_reconciles_patch_edits_by_id_and_keeps_the_last_good_tree() {
    let home = home_with_bundle();
    let patch = home.path().join("p.toml");
    std::fs::write(&patch, "[[patch]]\nid = \"b\"\nconfig = { tag = \"b1\" }\n").unwrap();
    let mut c = dsh_host();
    c.env("DSH_HOME", home.path())
        .args(["--profile", "test", "--watch", "--patch"])
        .arg(&patch)
        .arg("--plugins-dir")
        .arg(target_dir());
    let run = Running::start(c);
    run.wait_for("a: active (generation");
    run.wait_for("b: active (generation");
    let a_before = run.count("a: active");

    write_atomically(&patch, "[[patch]]\nid = \"b\"\nconfig = { tag = \"b2\" }\n");
    run.wait_for("b: active (generation 3)");
    assert_eq!(
        run.count("a: active"),
        a_before,
        "row a must not restart:\n{}",
        run.log()
    );

    write_atomically(&patch, "[[patch]]\nid = \"b\"\nconfig = \n");
    run.wait_for("rejected, keeping the last good tree");
    assert!(run.log().contains("line 3"), "{}", run.log());

    run.signal("-TERM");
    assert_eq!(run.exit_code(), 0);
}

#[test]
fn watch_reloads_a_replaced_plugin_and_unloads_a_removed_one_and_sigint_exits_130() {
    let home = home_with_profile(
        "cli-reload-home",
        "c",
        "[[row]]\nid = \"counter\"\nplugin = \"counter\"\n",
    );
    let plugins = TempDir::new("cli-reload-plugins");
    let target = plugins.path().join("counter.so");
    std::fs::copy(library("dsh-fixture-counter-v1"), &target).unwrap();
    let mut c = dsh_host();
    c.env("DSH_HOME", home.path())
        .args(["--profile", "c", "--watch", "--plugins-dir"])
        .arg(plugins.path());
    let run = Running::start(c);
    run.wait_for("counter: active (generation 1)");

    let tmp = plugins.path().join("counter.so.tmp");
    std::fs::copy(library("dsh-fixture-counter-v2"), &tmp).unwrap();
    std::fs::rename(&tmp, &target).unwrap();
    run.wait_for("counter: active (generation 2)");
    run.wait_for("generation 1 unmapped");
    // One line on stderr per reloaded row: id, plugin, generation, time.
    run.wait_for("dsh-host: reloaded counter (counter) generation 2 in ");

    std::fs::write(&tmp, vec![1u8; 8192]).unwrap();
    std::fs::rename(&tmp, &target).unwrap();
    run.wait_for("reload refused");
    assert!(
        run.log().contains("the running generation keeps serving"),
        "{}",
        run.log()
    );

    std::fs::remove_file(&target).unwrap();
    run.wait_for("was removed");

    run.signal("-INT");
    assert_eq!(run.exit_code(), 130);
}

fn soak(cycles: usize) -> Value {
    let home = TempDir::new("soak-home");
    let (code, out, err) = output(
        dsh_host()
            .env("DSH_HOME", home.path())
            .args([
                "plugins",
                "soak",
                "--cycles",
                &cycles.to_string(),
                "--call",
                "counter.get",
            ])
            .arg(library("dsh-fixture-counter-v1")),
    );
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    eprintln!("soak {cycles}: {report}");
    report
}

#[test]
fn two_hundred_reloads_keep_memory_and_fds_bounded() {
    let r = soak(200);
    assert_eq!(r["failed_calls"], 0);
    assert_eq!(r["last_answer"], 1);
    // The manifest check plus the 200 replaced generations.
    assert_eq!(r["stats"]["unmapped"], 201, "{r}");
    assert_eq!(r["stats"]["pinned"], 0);
    assert_eq!(r["stats"]["quarantined"], 0);
    let fds = r["fds_after"].as_i64().unwrap() - r["fds_before"].as_i64().unwrap();
    assert!(fds <= 2, "fd growth {fds}: {r}");
    let rss = r["rss_after"].as_i64().unwrap() - r["rss_before"].as_i64().unwrap();
    assert!(rss < 64 << 20, "RSS growth {rss} bytes: {r}");
    // At most the host's idle blocking-pool thread remains.
    let threads = r["threads_after"].as_i64().unwrap() - r["threads_before"].as_i64().unwrap();
    assert!(threads <= 1, "thread growth {threads}: {r}");
}

#[test]
fn eleven_hundred_reloads_do_not_exhaust_pthread_keys() {
    let r = soak(1100);
    assert_eq!(r["key_sweep"], true);
    assert_eq!(r["failed_calls"], 0);
    assert!(r["stats"]["keys_swept"].as_u64().unwrap() >= 1100, "{r}");
}

#[test]
fn a_library_dropped_into_the_home_plugins_directory_loads_and_unloads() {
    let home = home_with_profile("cli-dropin-home", "c", "");
    // Present at boot.
    drop_in(home.path(), "dsh-fixture-counter-v1", "counter.so");
    let mut c = dsh_host();
    c.env("DSH_HOME", home.path())
        .args(["--profile", "c", "--watch"]);
    let run = Running::start(c);
    run.wait_for("drop-in:counter: active (generation");
    // Dropped while running.
    let tmp = home.path().join("plugins/probe.so.tmp");
    std::fs::copy(library("dsh-fixture-probe"), &tmp).unwrap();
    std::fs::rename(&tmp, home.path().join("plugins/probe.so")).unwrap();
    run.wait_for("drop-in:probe: active (generation");
    // Removed: unloaded.
    std::fs::remove_file(home.path().join("plugins/probe.so")).unwrap();
    run.wait_for("unloaded:");
    run.signal("-TERM");
    assert_eq!(run.exit_code(), 0);
}

#[test]
fn a_generation_whose_thread_still_runs_is_quarantined_not_closed() {
    let keep =
        "[[row]]\nid = \"keep\"\nplugin = \"dsh-fixture-probe\"\nconfig = { tag = \"keep\" }\n";
    let home = home_with_profile(
        "cli-thread-home",
        "t",
        &format!("{keep}[[row]]\nid = \"det\"\nplugin = \"dsh-fixture-probe\"\nconfig = {{ tag = \"det\", thread = \"detached\" }}\n"),
    );
    let profile = home.path().join("profiles/t/profile.toml");
    let mut c = dsh_host();
    c.env("DSH_HOME", home.path())
        .args(["--profile", "t", "--watch", "--plugins-dir"])
        .arg(target_dir());
    let run = Running::start(c);
    run.wait_for("det: active (generation");
    write_atomically(&profile, keep);
    run.wait_for("thread(s) it started are still running");
    assert!(run.log().contains("quarantined"), "{}", run.log());
    run.signal("-TERM");
    assert_eq!(run.exit_code(), 0);
}

#[test]
fn a_drop_in_row_shows_in_dump_config_and_a_patch_reaches_it_by_id() {
    let home = home_with_profile("cli-dropin-dump-home", "c", "");
    drop_in(home.path(), "dsh-fixture-counter-v1", "counter.so");
    let (code, out, err) =
        output(
            dsh_host()
                .env("DSH_HOME", home.path())
                .args(["--profile", "c", "--dump-config"]),
        );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("# == drop-in\n[[row]]\nid = \"drop-in:counter\""),
        "{out}"
    );
    std::fs::write(
        home.path().join("patch.toml"),
        "[[patch]]\nid = \"drop-in:counter\"\ndisabled = true\n",
    )
    .unwrap();
    let (code, out, err) =
        output(
            dsh_host()
                .env("DSH_HOME", home.path())
                .args(["--profile", "c", "--dump-config"]),
        );
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("not found"), "{err}");
    assert!(out.contains("id = \"drop-in:counter\""), "{out}");
    assert!(out.contains("disabled = true"), "{out}");
}
