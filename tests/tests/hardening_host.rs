//! Hardening of the host: files are looked at before `dlopen` (a library
//! that is not a dsh plugin never runs a constructor), a plugin library is
//! inspected only in a confined child process (`plugins check`, `plugins
//! list`, drop-ins), every generation runs from a private copy (so `cp`
//! over a loaded library is safe), private copies are removed at exit and
//! after a crash, a configuration with too many rows is refused before it
//! exhausts pthread keys, `$DSH_HOME` is private, and the spill plugin
//! removes its directory when disposed.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use dsh_sdk::names::bus;
use dsh_testkit::{
    drop_in, dsh_host, home_with_profile, library, output, plugins_list, target_dir, TempDir,
    TestHost,
};
use serde_json::{json, Value};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// A pid no process has: a child that was waited for.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// Compiles the C `source` (saved as `dir/<name>` with the extension `.c`)
/// with `cc <flags> -o dir/<name>`; the output's path.
fn compile_c(dir: &Path, name: &str, flags: &[&str], source: &str) -> PathBuf {
    let out = dir.join(name);
    let src = out.with_extension("c");
    std::fs::write(&src, source).unwrap();
    let status = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("cc is needed to build the test library");
    assert!(status.success(), "cc failed on {}", src.display());
    out
}

/// Compiles a shared library (not a dsh plugin) whose constructor creates
/// `marker`, into `dir/<name>`.
fn library_with_constructor(dir: &Path, name: &str, marker: &Path) -> PathBuf {
    let source = format!(
        "#include <fcntl.h>\n#include <unistd.h>\n\
         __attribute__((constructor)) static void mark(void) {{\n\
           int fd = open(\"{}\", O_CREAT | O_WRONLY, 0600);\n\
           if (fd >= 0) close(fd);\n\
         }}\n\
         int not_a_plugin(void) {{ return 42; }}\n",
        marker.display()
    );
    compile_c(dir, name, &["-shared", "-fPIC"], &source)
}

/// dlopens `path` in this test process: the control that shows a
/// constructor does run when a library is really loaded.
fn dlopen_here(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: the library only creates a file from its constructor.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "control dlopen failed");
    // SAFETY: the handle came from dlopen above.
    unsafe { libc::dlclose(h) };
}

#[test]
fn plugins_check_and_list_refuse_a_foreign_library_without_running_its_constructor() {
    let dir = TempDir::new("hard-ctor");
    let marker = dir.path().join("constructor-ran");
    let lib = library_with_constructor(dir.path(), "libforeign.so", &marker);

    // The control: loading it for real runs the constructor.
    let control_marker = dir.path().join("control-ran");
    let control = library_with_constructor(dir.path(), "libcontrol.so", &control_marker);
    dlopen_here(&control);
    assert!(
        control_marker.exists(),
        "the control constructor did not run"
    );

    let (code, _, err) = output(dsh_host().args(["plugins", "check"]).arg(&lib));
    assert!(
        !marker.exists(),
        "plugins check ran the library's constructor"
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("refused")
            && err.contains("libforeign.so")
            && err.contains("not a dsh plugin: no abi_stable root module"),
        "{err}"
    );

    let home = TempDir::new("hard-ctor-home");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(&lib, plugins.join("libforeign.so")).unwrap();
    let (code, out, err) = plugins_list(home.path(), dir.path(), &plugins);
    assert!(
        !marker.exists(),
        "plugins list ran the library's constructor"
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines().any(|l| l.contains("refused")
            && l.contains("libforeign.so")
            && l.contains("no abi_stable root module")),
        "{out}"
    );
}

/// A running `dsh-host` whose stderr is read line by line.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Running {
    fn start(mut c: Command) -> Running {
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn dsh-host");
        let pipe = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Blocks until a stderr line contains every needle (the bound only
    /// turns a hang into a failure).
    fn wait_for(&mut self, needles: &[&str]) -> String {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if needles.iter().all(|n| line.contains(n)) {
                        return line;
                    }
                }
                Err(e) => panic!(
                    "no line with {needles:?} ({e}); stderr so far:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: sends a signal to our own child.
        let rc = unsafe { libc::kill(self.pid() as libc::pid_t, sig) };
        assert_eq!(rc, 0);
    }

    fn exit_code(mut self) -> i32 {
        let status = self.child.wait().unwrap();
        status.code().unwrap_or(-1)
    }
}

#[test]
fn a_foreign_library_dropped_into_home_plugins_is_refused_and_never_runs() {
    let home = home_with_profile("hard-dropin-home", "p", "");
    let build = TempDir::new("hard-dropin-build");
    let marker = build.path().join("constructor-ran");
    let lib = library_with_constructor(build.path(), "libforeign.so", &marker);
    std::fs::create_dir_all(home.path().join("plugins")).unwrap();
    std::fs::copy(&lib, home.path().join("plugins/libforeign.so")).unwrap();
    // A well-formed drop-in next to it still loads.
    drop_in(home.path(), "dsh-fixture-counter-v1", "counter.so");

    let mut c = dsh_host();
    c.env("DSH_HOME", home.path())
        .env("DSH_LOG", "info")
        .args(["--profile", "p"]);
    let mut run = Running::start(c);
    let line = run.wait_for(&["drop-in", "refused", "libforeign.so"]);
    assert!(!marker.exists(), "the host ran the drop-in's constructor");
    assert!(
        line.contains("not a dsh plugin: no abi_stable root module"),
        "{line}"
    );
    run.wait_for(&["drop-in:counter: active (generation"]);
    run.signal(libc::SIGTERM);
    assert_eq!(run.exit_code(), 0);
    assert!(!marker.exists(), "the host ran the drop-in's constructor");
}

/// Copies a real plugin with two header bytes changed at `offset`.
fn patched_plugin(dir: &Path, name: &str, offset: usize, value: u16) -> PathBuf {
    let mut bytes = std::fs::read(library("dsh-fixture-probe")).unwrap();
    bytes[offset..offset + 2].copy_from_slice(&value.to_le_bytes());
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn executables_text_files_object_files_and_foreign_machines_are_refused_by_name() {
    let dir = TempDir::new("hard-kinds");
    let text = dir.path().join("notes.so");
    std::fs::write(&text, "these are notes, not a library\n").unwrap();
    let object = compile_c(
        dir.path(),
        "obj.o",
        &["-c", "-fPIC"],
        "int f(void) { return 1; }\n",
    );
    // e_machine (offset 18) of another architecture than this host's.
    let (machine, arch) = if cfg!(target_arch = "aarch64") {
        (62, "x86_64")
    } else {
        (183, "aarch64")
    };
    let foreign = patched_plugin(dir.path(), "libforeign_arch.so", 18, machine);
    // e_type (offset 16) = ET_EXEC.
    let exec = patched_plugin(dir.path(), "libexec.so", 16, 2);

    let cases: [(&Path, &str); 6] = [
        (Path::new("/bin/true"), "an executable"),
        (&exec, "an executable, not a shared library"),
        (&text, "not an ELF file"),
        (&object, "an object file (.o), not a shared library"),
        (&foreign, &format!("built for {arch}; this host runs")),
        (&dir.path().join("missing.so"), "No such file"),
    ];
    for (path, expected) in cases {
        let (code, out, err) = output(dsh_host().args(["plugins", "check"]).arg(path));
        assert_eq!(code, 1, "{}: {out}{err}", path.display());
        assert!(
            err.starts_with("dsh-host: refused: ") && err.contains(expected),
            "{}: expected {expected:?} in {err}",
            path.display()
        );
    }
}

fn state_entries(home: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(home.join("state"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Two rows of one library: each is loaded from a private copy in
/// `state/<pid>`.
const TWO_PROBES: &str = "[[row]]\nid = \"a\"\nplugin = \"dsh-fixture-probe\"\nconfig = { tag = \"a\" }\n\
                          [[row]]\nid = \"b\"\nplugin = \"dsh-fixture-probe\"\nconfig = { tag = \"b\" }\n";

#[test]
fn the_state_dir_of_a_host_is_removed_at_sigterm_and_sigint_and_stale_ones_at_start() {
    let home = home_with_profile("hard-state-home", "p", TWO_PROBES);
    for (sig, code) in [(libc::SIGTERM, 0), (libc::SIGINT, 130)] {
        // Left by a host that was killed.
        let stale = home.path().join(format!("state/{}", dead_pid()));
        std::fs::create_dir_all(&stale).unwrap();
        std::fs::write(stale.join("libold-1.so"), "old copy").unwrap();

        let mut c = dsh_host();
        c.env("DSH_HOME", home.path())
            .env("DSH_LOG", "info")
            .args(["--profile", "p", "--plugins-dir"])
            .arg(target_dir());
        let mut run = Running::start(c);
        run.wait_for(&["a: active (generation"]);
        run.wait_for(&["b: active (generation"]);
        let mine = home.path().join(format!("state/{}", run.pid()));
        assert!(!stale.exists(), "a stale state dir survived the start");
        assert_eq!(mode(&mine), 0o700);
        assert!(
            std::fs::read_dir(&mine)
                .unwrap()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(".so")),
            "the rows were not loaded from private copies"
        );
        run.signal(sig);
        assert_eq!(run.exit_code(), code);
        assert_eq!(state_entries(home.path()), Vec::<String>::new());
    }
}

#[test]
fn the_state_dir_is_removed_when_the_app_ends_the_run() {
    let home = TempDir::new("hard-state-normal");
    // `sessions list` runs the headless app, which asks the host to exit.
    let (code, out, err) = output(
        dsh_host()
            .env("DSH_HOME", home.path())
            .current_dir(home.path())
            .args(["sessions", "list"]),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("ID"), "{out}");
    assert_eq!(mode(&home.path().join("state")), 0o700);
    assert_eq!(state_entries(home.path()), Vec::<String>::new());
}

#[test]
fn dsh_home_is_created_private_and_an_existing_one_keeps_its_mode() {
    let base = TempDir::new("hard-home");
    let home = base.path().join("new").join("home");
    let (code, _, err) = output(
        dsh_host()
            .env("DSH_HOME", &home)
            .env("DSH_INSTALL_DIR", base.path())
            .args(["plugins", "list"]),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(mode(&home), 0o700);
    assert!(!err.contains("warning"), "{err}");

    // A directory the user made is not chmodded; open to anyone, it is
    // worth one line.
    let open = base.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, _, err) = output(
        dsh_host()
            .env("DSH_HOME", &open)
            .env("DSH_INSTALL_DIR", base.path())
            .args(["plugins", "list"]),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(mode(&open), 0o777);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("writable by anyone") && warnings[0].contains("chmod 700"),
        "{err}"
    );
}

/// Runs `tools/post-execute` with a result of `bytes` bytes through the
/// host; returns the spilled file's path.
async fn spill_once(t: &TestHost, bytes: usize) -> PathBuf {
    let big = "x".repeat(bytes);
    let decision = json!({"kind": "accept", "content": [{"type": "text", "text": big}]});
    let out: Value = t
        .host
        .waterfall(
            bus::TOOLS_POST_EXECUTE,
            "",
            json!({"exec": {"name": "bash"}, "result": {"content": []}}),
            Box::new(move |_| Ok(decision)),
        )
        .await
        .unwrap();
    let text = out["content"][0]["text"].as_str().unwrap_or_default();
    let path = text
        .split("Full formatted result stored at: ")
        .nth(1)
        .and_then(|r| r.split(". Use").next())
        .unwrap_or_else(|| panic!("not spilled: {out}"));
    PathBuf::from(path)
}

#[tokio::test]
async fn spill_removes_its_directory_when_disposed_and_sweeps_dead_hosts_dirs() {
    let tmp = std::env::temp_dir();
    let legacy = tmp.join(format!("dsh-spill-{}", dead_pid()));
    let tagged = tmp.join(format!("dsh-spill-{}-0123abcd", dead_pid()));
    for d in [&legacy, &tagged] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("old-bash.txt"), "old").unwrap();
    }

    let t = TestHost::start().await;
    t.apply("[[row]]\nid = 'spill'\nplugin = 'spill'\n").await;
    assert_eq!(
        format!("{:?}", t.status("spill").await.state),
        "Active",
        "{:?}",
        t.status("spill").await
    );
    assert!(!legacy.exists() && !tagged.exists(), "stale dirs were kept");

    let file = spill_once(&t, 60_000).await;
    assert_eq!(std::fs::read_to_string(&file).unwrap().len(), 60_000);
    let dir = file.parent().unwrap().to_owned();
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("dsh-spill-{}-", std::process::id())),
        "{name}"
    );
    assert_eq!(mode(&dir), 0o700);
    // A second spill goes to the same directory.
    assert_eq!(spill_once(&t, 70_000).await.parent(), Some(dir.as_path()));

    // Disposed: the directory and every spilled file are gone.
    t.apply("").await;
    assert!(!dir.exists(), "{} survived the disposal", dir.display());
    t.shutdown().await;
}

/// The record the ctor-canary fixture's constructor made, from the
/// manifest `plugins check` printed.
fn canary_record(stdout: &str) -> Value {
    let manifest: Value = serde_json::from_str(stdout.split("\nunload:").next().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(manifest["name"], "ctor-canary", "{stdout}");
    serde_json::from_str(manifest["description"].as_str().unwrap()).unwrap()
}

/// The canary's constructor, where it runs, tries to create
/// `ctor-canary-ran` in its working directory and in `$DSH_CANARY_DIR`.
fn assert_no_marker(dirs: &[&Path], what: &str) {
    for d in dirs {
        assert!(
            !d.join("ctor-canary-ran").exists(),
            "{what} ran the library's constructor with the host's directory and environment ({})",
            d.display()
        );
    }
}

#[test]
fn plugins_check_of_a_crafted_library_runs_its_constructor_only_in_a_confined_child() {
    // Exports the root module (so the preflight lets it through) and runs
    // code from an ELF constructor, as the crafted library did.
    let lib = library("dsh-fixture-ctor-canary");
    let cwd = TempDir::new("hard-canary-cwd");
    let env_dir = TempDir::new("hard-canary-env");
    let child = dsh_host()
        .current_dir(cwd.path())
        .env("DSH_CANARY_DIR", env_dir.path())
        .env("DSH_CANARY_SECRET", "sk-not-for-plugins")
        .args(["plugins", "check"])
        .arg(&lib)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let host_pid = child.id();
    let (code, out, err) = dsh_testkit::out(&child.wait_with_output().unwrap());
    assert_eq!(code, 0, "{err}");
    assert_no_marker(&[cwd.path(), env_dir.path()], "plugins check");
    let seen = canary_record(&out);
    // It ran in another process, confined: no capabilities (as root),
    // a session of its own, nothing written, no network, no processes, no
    // signal out, no environment.
    assert_ne!(seen["pid"], json!(host_pid), "{seen}");
    assert_eq!(seen["cap_eff"], "0000000000000000", "{seen}");
    assert_eq!(seen["session_leader"], true, "{seen}");
    assert_eq!(seen["secret_visible"], false, "{seen}");
    for key in [
        "marker_cwd",
        "tmpfile",
        "tty",
        "inet_socket",
        "unix_socket",
        "fork",
        "signal_parent",
    ] {
        let v = seen[key].as_str().unwrap_or_default();
        assert!(v.starts_with("denied"), "{key}: {seen}");
    }
    assert!(out.contains("unload: unmapped"), "{out}");
}

#[test]
fn plugins_list_and_drop_in_composition_never_run_a_crafted_librarys_constructor_in_the_host() {
    let home = home_with_profile("hard-canary-home", "p", "");
    drop_in(home.path(), "dsh-fixture-ctor-canary", "libcanary.so");
    let plugins = TempDir::new("hard-canary-plugins");
    std::fs::copy(
        library("dsh-fixture-ctor-canary"),
        plugins.path().join("libcanary.so"),
    )
    .unwrap();
    let cwd = TempDir::new("hard-canary-list-cwd");
    let env_dir = TempDir::new("hard-canary-list-env");
    let run = |args: &[&str]| {
        output(
            dsh_host()
                .current_dir(cwd.path())
                .env("DSH_HOME", home.path())
                .env("DSH_INSTALL_DIR", plugins.path())
                .env("DSH_CANARY_DIR", env_dir.path())
                .args(args),
        )
    };
    let dir = plugins.path().to_str().unwrap();

    // An arbitrary directory.
    let (code, out, err) = run(&["plugins", "list", "--plugins-dir", dir]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("ctor-canary") && l.contains("loadable")),
        "{out}"
    );
    assert_no_marker(&[cwd.path(), env_dir.path()], "plugins list");

    // The drop-in, named by its manifest while the profile is composed.
    let (code, out, err) = run(&["plugins", "list", "--profile", "p"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines()
            .any(|l| l.contains("enabled (drop-in:ctor-canary)") && l.contains("libcanary.so")),
        "{out}"
    );
    let (code, out, err) = run(&["--profile", "p", "--dump-config"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("id = \"drop-in:ctor-canary\""), "{out}");
    assert_no_marker(&[cwd.path(), env_dir.path()], "composing the drop-ins");
}

/// abi_stable's root-module symbol (`ROOT_MODULE_LOADER_NAME`, what the
/// SDK's `export_plugin!` exports and the preflight looks for).
const ROOT_SYMBOL: &str = "_1as_0lib_1header_0root_bmodule_bloader";

/// Compiles a C library that exports the root-module symbol (so the
/// preflight lets it through) and runs `constructor` (C statements) when
/// loaded: the crafted library, at its simplest.
fn crafted_c_library(dir: &Path, name: &str, constructor: &str) -> PathBuf {
    let source = format!(
        "#include <fcntl.h>\n#include <signal.h>\n#include <unistd.h>\n\
         __attribute__((constructor)) static void crafted(void) {{ {constructor} }}\n\
         const void *{ROOT_SYMBOL} = 0;\n"
    );
    compile_c(dir, name, &["-shared", "-fPIC"], &source)
}

#[test]
fn a_crafted_library_exporting_the_root_module_never_runs_in_the_host_and_cannot_write() {
    let dir = TempDir::new("hard-crafted");
    // An absolute path the host could write: the constructor is confined
    // wherever it runs, so the file must never appear.
    let marker = dir.path().join("constructor-ran");
    let writer = crafted_c_library(
        dir.path(),
        "libwriter.so",
        &format!(
            "int fd = open(\"{}\", O_CREAT | O_WRONLY, 0600); if (fd >= 0) close(fd);",
            marker.display()
        ),
    );
    let crasher = crafted_c_library(dir.path(), "libcrasher.so", "*(volatile int *)0 = 0;");

    let (code, out, err) = output(dsh_host().args(["plugins", "check"]).arg(&writer));
    assert!(
        !marker.exists(),
        "the crafted library's constructor wrote outside"
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.starts_with("dsh-host: refused: ") && err.contains("libwriter.so"),
        "{err}"
    );

    // A constructor that crashes takes the confined child down, not the
    // host (which used to die with SIGSEGV, rc 139).
    let (code, out, err) = output(dsh_host().args(["plugins", "check"]).arg(&crasher));
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("libcrasher.so")
            && err.contains("its code crashed the confined process that inspected it")
            && err.contains("SIGSEGV"),
        "{err}"
    );

    let home = TempDir::new("hard-crafted-home");
    let (code, out, err) = plugins_list(home.path(), dir.path(), dir.path());
    assert_eq!(code, 0, "{err}");
    assert!(!marker.exists(), "plugins list let the constructor write");
    for name in ["libwriter.so", "libcrasher.so"] {
        assert!(
            out.lines()
                .any(|l| l.contains("refused") && l.contains(name)),
            "{out}"
        );
    }
}

/// The single `.so` in `state/<pid>` of a running host.
fn only_copy(home: &Path, pid: u32) -> PathBuf {
    let dir = home.join(format!("state/{pid}"));
    let copies: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "so"))
        .collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    copies.into_iter().next().unwrap()
}

#[test]
fn cp_over_a_loaded_drop_in_reloads_it_from_a_fresh_copy_instead_of_crashing_the_host() {
    use std::os::unix::fs::MetadataExt;
    let home = home_with_profile("hard-cp-home", "p", "");
    drop_in(home.path(), "dsh-fixture-counter-v1", "counter.so");
    let target = home.path().join("plugins/counter.so");
    let inode = std::fs::metadata(&target).unwrap().ino();
    let mut c = dsh_host();
    c.env("DSH_HOME", home.path())
        .env("DSH_LOG", "info")
        .args(["--profile", "p", "--watch"]);
    let mut run = Running::start(c);
    run.wait_for(&["drop-in:counter: active (generation"]);
    // Even the first generation runs from a private copy.
    let first = only_copy(home.path(), run.pid());
    assert_ne!(std::fs::metadata(&first).unwrap().ino(), inode);
    assert_eq!(
        std::fs::read(&first).unwrap(),
        std::fs::read(&target).unwrap()
    );

    let builds = [
        "dsh-fixture-counter-v2",
        "dsh-fixture-counter-v1",
        "dsh-fixture-counter-v2",
    ];
    for (n, build) in builds.iter().enumerate() {
        // `cp` truncates and rewrites the loaded file in place.
        let status = Command::new("cp")
            .arg(library(build))
            .arg(&target)
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(std::fs::metadata(&target).unwrap().ino(), inode);
        let generation = format!("generation {} in", n + 2);
        run.wait_for(&["dsh-host: reloaded drop-in:counter", &generation]);
        let copy = only_copy(home.path(), run.pid());
        assert_eq!(
            std::fs::read(&copy).unwrap(),
            std::fs::read(library(build)).unwrap(),
            "generation {} does not run the build just copied",
            n + 2
        );
    }
    run.signal(libc::SIGTERM);
    // A crash would be 139 (SIGSEGV) or 135 (SIGBUS) here, or earlier.
    assert_eq!(run.exit_code(), 0);
}

/// `n` rows of the counter plugin, as a patch layer.
fn rows(n: usize) -> String {
    (0..n)
        .map(|i| format!("[[row]]\nid = \"c{i}\"\nplugin = \"counter\"\n"))
        .collect()
}

#[test]
fn a_ten_thousand_row_patch_is_refused_with_a_clear_error_before_anything_loads() {
    let home = home_with_profile("hard-rows-home", "p", "");
    let patch = home.path().join("rows.toml");
    std::fs::write(&patch, rows(10_000)).unwrap();
    let plugins = TempDir::new("hard-rows-plugins");
    std::fs::copy(
        library("dsh-fixture-counter-v1"),
        plugins.path().join("counter.so"),
    )
    .unwrap();
    let (code, _, err) = output(
        dsh_host()
            .env("DSH_HOME", home.path())
            .args(["--profile", "p", "--plugins-dir"])
            .arg(plugins.path())
            .arg("--patch")
            .arg(&patch),
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("the configuration enables 10000 rows; one host runs at most 256")
            && err.contains("pthread keys"),
        "{err}"
    );
    assert!(!err.contains("TLS"), "{err}");
    // Nothing was loaded: no private copy was ever made.
    assert_eq!(state_entries(home.path()), Vec::<String>::new());
}

#[tokio::test]
async fn a_tree_over_the_row_cap_is_refused_whole_and_the_running_rows_keep_serving() {
    let t = TestHost::start().await;
    t.stage("dsh-fixture-counter-v1", "counter.so");
    t.apply("[[row]]\nid = 'counter'\nplugin = 'counter'\n")
        .await;
    assert_eq!(t.call("counter", "get", json!({})).await, json!(1));

    t.apply(&format!(
        "[[row]]\nid = 'counter'\nplugin = 'counter'\n{}",
        rows(10_000)
    ))
    .await;
    let refused = t.reports_with("configuration refused, nothing changed");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0]
            .message
            .contains("the configuration enables 10001 rows; one host runs at most 256"),
        "{refused:?}"
    );
    let status = t.host.status().await;
    assert_eq!(status.len(), 1, "rows were added: {}", status.len());
    assert_eq!(t.status("counter").await.generations, 1);
    assert_eq!(t.call("counter", "get", json!({})).await, json!(1));
    t.shutdown().await;
}
