//! `cargo xtask new-plugin --out DIR` makes a crate outside the repository
//! that builds on its own and passes its generated test: a real host loading
//! the crate's fresh build and the host's plugins from the staged tree.
//!
//! A test binary of its own, so the nested build (minutes the first time,
//! seconds after) does not run beside the timing-sensitive tests.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use dsh_testkit::{output, stage, target_dir, TempDir, STAGE_ENV};

/// Runs `c`, panicking with its output unless it succeeds; returns stdout
/// and stderr.
fn succeed(c: &mut Command) -> String {
    let (code, out, err) = output(c);
    assert_eq!(code, 0, "{c:?} failed:\n{out}\n{err}");
    format!("{out}{err}")
}

#[test]
fn a_plugin_scaffolded_outside_the_repository_builds_and_passes_its_test_against_the_staged_host() {
    let stage = stage().unwrap_or_else(|| {
        panic!("no staged tree: run `cargo xtask build` first (`cargo xtask test` does)")
    });
    let xtask = target_dir().join("xtask");
    assert!(
        xtask.is_file(),
        "{} is not built (`cargo build --workspace`)",
        xtask.display()
    );
    let out = TempDir::new("out-of-repo");
    let started = Instant::now();
    succeed(
        Command::new(&xtask)
            .args(["new-plugin", "--out"])
            .arg(out.path())
            .arg("outside"),
    );
    let krate = out.path().join("outside");
    let manifest = std::fs::read_to_string(krate.join("Cargo.toml")).unwrap();
    assert!(!manifest.contains("abi_stable"), "{manifest}");

    // Its own target directory inside this one (a nested cargo cannot share
    // the outer build's lock), kept between runs so only the plugin crate
    // compiles once the SDK and the host are built there.
    let target: PathBuf = target_dir()
        .parent()
        .map(|t| t.join("out-of-repo"))
        .unwrap();
    let cargo = |args: &[&str]| {
        let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        c.current_dir(&krate)
            .args(args)
            .arg("--offline")
            .env("CARGO_TARGET_DIR", &target)
            .env(STAGE_ENV, &stage)
            .env_remove("CARGO_MANIFEST_DIR");
        c
    };
    succeed(&mut cargo(&["build"]));
    assert!(target.join("debug/libdsh_plugin_outside.so").is_file());
    let log = succeed(&mut cargo(&["test"]));
    assert!(
        log.contains("test greets_through_its_service_and_its_tool ... ok"),
        "{log}"
    );
    eprintln!(
        "out-of-repo plugin: scaffolded, built and tested in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
