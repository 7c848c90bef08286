//! Hardening of the host: files are looked at before `dlopen` (a library
//! that is not a dsh plugin never runs a constructor), private copies of
//! libraries are removed at exit and after a crash, `$DSH_HOME` is private,
//! and the spill plugin removes its directory when disposed.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use dsh_sdk::names::bus;
use dsh_testkit::{
    drop_in, dsh_host, home_with_profile, library, output, target_dir, TempDir, TestHost,
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

/// Compiles a shared library (not a dsh plugin) whose constructor creates
/// `marker`, into `dir/<name>`.
fn library_with_constructor(dir: &Path, name: &str, marker: &Path) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(
        &src,
        format!(
            "#include <fcntl.h>\n#include <unistd.h>\n\
             __attribute__((constructor)) static void mark(void) {{\n\
               int fd = open(\"{}\", O_CREAT | O_WRONLY, 0600);\n\
               if (fd >= 0) close(fd);\n\
             }}\n\
             int not_a_plugin(void) {{ return 42; }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let out = dir.join(name);
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("cc is needed to build the test library");
    assert!(status.success(), "cc failed");
    out
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
    let (code, out, err) = output(
        dsh_host()
            .env("DSH_HOME", home.path())
            .env("DSH_INSTALL_DIR", dir.path())
            .args(["plugins", "list", "--plugins-dir"])
            .arg(&plugins),
    );
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
    let src = dir.path().join("obj.c");
    std::fs::write(&src, "int f(void) { return 1; }\n").unwrap();
    let object = dir.path().join("obj.o");
    assert!(Command::new("cc")
        .args(["-c", "-fPIC", "-o"])
        .arg(&object)
        .arg(&src)
        .status()
        .unwrap()
        .success());
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

/// Two rows of one library: the second is loaded from a private copy in
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
            "the second row was not loaded from a private copy"
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
