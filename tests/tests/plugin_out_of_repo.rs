//! `cargo xtask new-plugin --out DIR` makes a crate outside the repository
//! that builds on its own and passes its generated test: a real host loading
//! the crate's fresh build and the host's plugins from the staged tree.
//!
//! A test binary of its own, so the nested build does not run beside the
//! timing-sensitive tests.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use dsh_testkit::{output, stage, target_dir, STAGE_ENV};

/// Runs `c`, panicking with its output unless it succeeds; returns stdout
/// and stderr.
fn succeed(c: &mut Command) -> String {
    let (code, out, err) = output(c);
    assert_eq!(code, 0, "{c:?} failed:\n{out}\n{err}");
    format!("{out}{err}")
}

/// Removes what the nested build puts beside the workspace's own libraries
/// (its library, uplifted into `target/debug`), however the test ends.
struct Uplifted(Vec<PathBuf>);

impl Drop for Uplifted {
    fn drop(&mut self) {
        for f in &self.0 {
            let _ = std::fs::remove_file(f);
        }
    }
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
    // The crate is a workspace of its own wherever it lives; under the
    // target directory its path (and so its build's hash) is the same each
    // run, so runs do not pile up artifacts.
    let target: PathBuf = target_dir().parent().map(Path::to_owned).unwrap();
    let out = target.join("out-of-repo");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let started = Instant::now();
    succeed(
        Command::new(&xtask)
            .args(["new-plugin", "--out"])
            .arg(&out)
            .arg("outside"),
    );
    let krate = out.join("outside");
    let manifest = std::fs::read_to_string(krate.join("Cargo.toml")).unwrap();
    assert!(!manifest.contains("abi_stable"), "{manifest}");

    // This workspace's target directory: the registry crates the workspace
    // built are reused as they are (the same versions, from the copied
    // Cargo.lock, and the same features), so only the path crates and the
    // plugin compile. Cargo holds no lock on it while tests run.
    let lib = target_dir().join("libdsh_plugin_outside.so");
    let _cleanup = Uplifted(vec![lib.clone(), lib.with_extension("d")]);
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
    assert!(lib.is_file(), "{} was not built", lib.display());
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
