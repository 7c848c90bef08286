//! What a plugin author does with the real binary: `dsh-host --plugin NAME`
//! gives a plugin of a `--plugins-dir` a row without writing one, shown by
//! `--dump-config` and `plugins list`, patched by its id, reloaded under
//! `--watch`. (`plugin_out_of_repo.rs` tests the out-of-repo scaffold.)
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_testkit::{dsh_host, home_with_profile, library, output, replace_library, TempDir};

/// A `--plugins-dir` as a plugin author has one: the library under the
/// name its crate builds it to.
fn plugins_dir() -> TempDir {
    let dir = TempDir::new("author-plugins");
    std::fs::copy(
        library("dsh-fixture-counter-v1"),
        dir.path().join("libdsh_plugin_counter.so"),
    )
    .unwrap();
    dir
}

/// `dsh-host` with `$DSH_HOME` at `home` and `args`, to its end.
fn host(home: &Path, args: &[&str]) -> (i32, String, String) {
    output(dsh_host().env("DSH_HOME", home).args(args))
}

#[test]
fn a_plugin_named_with_plugin_gets_its_own_row_in_dump_config_and_plugins_list() {
    let home = home_with_profile("author-home", "c", "");
    let dir = plugins_dir();
    let pd = dir.path().to_str().unwrap();

    let (code, out, err) = host(
        home.path(),
        &[
            "--profile",
            "c",
            "--plugins-dir",
            pd,
            "--plugin",
            "counter",
            "--dump-config",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("# == --plugin\n[[row]]\nid = \"counter\"\nplugin = \"counter\"\n"),
        "{out}"
    );

    // A patch reaches the row by its id.
    let patch = home.path().join("off.toml");
    std::fs::write(&patch, "[[patch]]\nid = \"counter\"\ndisabled = true\n").unwrap();
    let (code, out, err) = host(
        home.path(),
        &[
            "--profile",
            "c",
            "--plugins-dir",
            pd,
            "--plugin",
            "counter",
            "--patch",
            patch.to_str().unwrap(),
            "--dump-config",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "# == --plugin, patched by {}\n[[row]]\nid = \"counter\"",
            patch.display()
        )),
        "{out}"
    );
    assert!(out.contains("disabled = true"), "{out}");

    // `plugins list` says which row uses the library.
    let (code, out, err) = host(
        home.path(),
        &[
            "plugins",
            "list",
            "--profile",
            "c",
            "--plugins-dir",
            pd,
            "--plugin",
            "counter",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let lib = dir.path().join("libdsh_plugin_counter.so");
    assert!(
        out.lines().any(|l| l.starts_with("counter")
            && l.contains("enabled (counter)")
            && l.ends_with(&lib.display().to_string())),
        "{out}"
    );

    // A name no plugin directory holds fails before anything loads, and
    // says where it looked.
    let (code, _, err) = host(
        home.path(),
        &["--profile", "c", "--plugins-dir", pd, "--plugin", "ghost"],
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("--plugin ghost: plugin `ghost` not found") && err.contains(pd),
        "{err}"
    );
}

#[test]
fn plugin_enables_the_profiles_own_row_of_that_plugin_and_refuses_a_row_of_another() {
    let home = home_with_profile(
        "author-row-home",
        "c",
        "[[row]]\nid = \"counter\"\nplugin = \"counter\"\ndisabled = true\n",
    );
    let dir = plugins_dir();
    let pd = dir.path().to_str().unwrap();
    let args = [
        "--profile",
        "c",
        "--plugins-dir",
        pd,
        "--plugin",
        "counter",
        "--dump-config",
    ];
    let (code, out, err) = host(home.path(), &args);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(", patched by --plugin\n[[row]]\nid = \"counter\""),
        "{out}"
    );
    assert!(!out.contains("disabled"), "{out}");

    let profile = home.path().join("profiles/c/profile.toml");
    std::fs::write(&profile, "[[row]]\nid = \"counter\"\nplugin = \"probe\"\n").unwrap();
    let (code, _, err) = host(home.path(), &args);
    assert_eq!(code, 1);
    assert!(
        err.contains("--plugin counter: row `counter`") && err.contains("applies plugin `probe`"),
        "{err}"
    );
}

/// `dsh-host` running in the background, its stderr collected.
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
            .unwrap();
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

    fn wait_for(&self, needle: &str) {
        let start = Instant::now();
        loop {
            let log = self.stderr.lock().unwrap().clone();
            if log.contains(needle) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "timed out waiting for {needle:?}; log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn terminate(mut self) -> i32 {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(start.elapsed() < Duration::from_secs(20), "did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn a_plugin_named_with_plugin_loads_and_reloads_when_rebuilt_under_watch() {
    let home = home_with_profile("author-watch-home", "c", "");
    let dir = plugins_dir();
    let mut c = dsh_host();
    c.env("DSH_HOME", home.path())
        .args([
            "--profile",
            "c",
            "--watch",
            "--plugin",
            "counter",
            "--plugins-dir",
        ])
        .arg(dir.path());
    let run = Running::start(c);
    run.wait_for("counter: active (generation");
    // A rebuild lands in the --plugins-dir: the row reloads in place.
    replace_library(
        "dsh-fixture-counter-v2",
        &dir.path().join("libdsh_plugin_counter.so"),
    );
    run.wait_for("dsh-host: reloaded counter (counter) generation 2 in ");
    assert_eq!(run.terminate(), 0);
}
