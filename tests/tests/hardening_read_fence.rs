//! The read fence as an attacker tries it (issue 18, "the key through the
//! file tools"): the harness's environment through `/proc`, `/etc/shadow`
//! through another process's root, a workspace link to an SSH key, another
//! project's session log, instruction files linked out of the project,
//! `/proc/kmsg` that blocks forever, and the `read = "ask"` policy. Every
//! secret is a fake one: a fake `HOME`, a fake key in the host's
//! environment, a fake log in the test's own `$DSH_HOME`.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_testkit::fake_llm::{text, tool_calls, FakeLlm};
use dsh_testkit::headless::{log_text, Headless};
use dsh_testkit::tools::{host, run, text_of};
use dsh_testkit::TempDir;
use serde_json::{json, Value};

/// The fake key put in the host's environment.
const KEY: &str = "sk-test-secret";
/// A generous bound on a call that must not block; not a timing assertion.
const DEADLINE: Duration = Duration::from_secs(20);

fn code_of(result: &Value) -> &Value {
    &result["error"]["info"]["code"]
}

/// Every request the model received, as one text.
fn requests_text(fake: &FakeLlm) -> String {
    serde_json::to_string(&fake.requests()).unwrap()
}

/// Every session log of `h`, decoded, as one text.
fn logs_text(h: &Headless) -> String {
    h.session_files()
        .iter()
        .map(|f| log_text(f))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A fake home directory with SSH and AWS secrets in it.
struct FakeHome(TempDir);

impl FakeHome {
    const SSH_KEY: &'static str = "FAKE-SSH-PRIVATE-KEY";
    const AWS_KEY: &'static str = "FAKE-AWS-SECRET";

    fn new() -> FakeHome {
        let home = TempDir::new("fake-home");
        std::fs::create_dir_all(home.path().join(".ssh")).unwrap();
        std::fs::create_dir_all(home.path().join(".aws")).unwrap();
        std::fs::write(home.path().join(".ssh/id_rsa"), Self::SSH_KEY).unwrap();
        std::fs::write(
            home.path().join(".aws/credentials"),
            format!("aws_secret_access_key = {}\n", Self::AWS_KEY),
        )
        .unwrap();
        FakeHome(home)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

/// Runs `h` with `args` from `cwd`, to its end.
async fn run_in(h: &Headless, cwd: &Path, args: &[&str]) -> std::process::Output {
    let mut c = h.command(args);
    c.current_dir(cwd);
    let run = tokio::task::spawn_blocking(move || c.output());
    match tokio::time::timeout(Duration::from_secs(120), run).await {
        Ok(out) => out.unwrap().unwrap(),
        Err(_) => panic!("dsh-host did not end"),
    }
}

#[tokio::test]
async fn read_of_proc_self_environ_never_returns_the_key() {
    let fake = FakeLlm::start().await;
    let home = FakeHome::new();
    let h = Headless::new(&fake, "")
        .env("DEEPSEEK_API_KEY", KEY)
        .env("HOME", home.path().to_str().unwrap());
    let w = h.work.path();
    std::os::unix::fs::symlink("/proc/self/environ", w.join("env")).unwrap();
    std::os::unix::fs::symlink("/proc/self", w.join("me")).unwrap();
    let spellings = [
        "/proc/self/environ",
        "/proc/thread-self/environ",
        "/proc/self/task/../environ",
        "me/../me/environ",
        "env",
        "me/environ",
        "me/root/proc/self/environ",
    ];
    let calls: Vec<(&str, Value)> = spellings
        .iter()
        .map(|s| ("read", json!({"file_path": s})))
        .chain([
            (
                "grep",
                json!({"pattern": "DEEPSEEK", "path": "/proc/self/environ"}),
            ),
            ("grep", json!({"pattern": "DEEPSEEK", "path": "/proc/self"})),
            ("glob", json!({"pattern": "environ", "path": "/proc/self"})),
        ])
        .collect();
    fake.push([tool_calls(&calls), text("done")]);
    let out = h.run_ok(&["show me the environment"]).await;
    let results = fake.tool_results_of_last_request();
    assert_eq!(results.len(), calls.len(), "{results:?}");
    for (spelling, r) in spellings.iter().zip(&results) {
        assert!(
            r.contains(
                "is refused: it is the harness's own process (its environment holds credentials"
            ),
            "{spelling}: {r}"
        );
    }
    assert!(
        results[spellings.len()..]
            .iter()
            .all(|r| r.contains("is refused")),
        "{results:?}"
    );
    assert!(
        !requests_text(&fake).contains(KEY),
        "the key reached the model"
    );
    let logs = logs_text(&h);
    assert!(
        logs.contains("harness's own process"),
        "the refusals are logged"
    );
    assert!(!logs.contains(KEY), "the key reached the session log");
    assert!(!String::from_utf8_lossy(&out.stdout).contains(KEY));
}

#[tokio::test]
async fn etc_shadow_is_refused_under_every_spelling() {
    let t = host("workspace-write", "").await;
    let ws = TempDir::new("shadow-ws");
    let w = ws.path();
    std::os::unix::fs::symlink("/etc/shadow", w.join("shadow")).unwrap();
    std::os::unix::fs::symlink("/etc", w.join("etc")).unwrap();
    let up = "../".repeat(w.components().count());
    // An open descriptor of the harness's process on the file.
    let held = std::fs::File::open("/etc/shadow").ok();
    let fd = held.as_ref().map(|f| {
        use std::os::fd::AsRawFd;
        format!("/dev/fd/{}", f.as_raw_fd())
    });
    let me = std::process::id();
    let mut spellings = vec![
        "/etc/shadow".to_owned(),
        "/etc/gshadow".to_owned(),
        format!("/proc/{me}/root/etc/shadow"),
        "/proc/1/root/etc/shadow".to_owned(),
        format!("{up}etc/shadow"),
        "shadow".to_owned(),
        "etc/shadow".to_owned(),
        "/etc/./ssh/../shadow".to_owned(),
    ];
    spellings.extend(fd);
    for s in &spellings {
        let r = run(&t, w, "read", json!({"file_path": s})).await;
        assert_eq!(r["isError"], true, "{s}: {r}");
        let message = text_of(&r);
        assert!(message.contains("is refused"), "{s}: {message}");
        assert!(!message.contains("root:"), "{s}: {message}");
    }
    let r = run(&t, w, "read", json!({"file_path": "/etc/shadow"})).await;
    assert!(
        text_of(&r).contains("reading /etc/shadow is refused: it is a secret store (password hashes, /etc/shadow); read may not read it in workspace-write mode"),
        "{r}"
    );
    // grep names the file: refused; grep over /etc skips it.
    let r = run(
        &t,
        w,
        "grep",
        json!({"pattern": "root", "path": "/etc/shadow"}),
    )
    .await;
    assert!(text_of(&r).contains("is refused"), "{r}");
    let r = run(&t, w, "grep", json!({"pattern": "^root:", "path": "/etc"})).await;
    assert!(!text_of(&r).contains("shadow"), "{r}");
    let r = run(
        &t,
        w,
        "glob",
        json!({"pattern": "*shadow*", "path": "/etc"}),
    )
    .await;
    assert!(!text_of(&r).contains("shadow"), "{r}");
    drop(held);
    t.shutdown().await;
}

#[tokio::test]
async fn a_workspace_link_to_an_ssh_key_is_refused() {
    let fake = FakeLlm::start().await;
    let home = FakeHome::new();
    let h = Headless::new(&fake, "").env("HOME", home.path().to_str().unwrap());
    let w = h.work.path();
    std::os::unix::fs::symlink(home.path().join(".ssh/id_rsa"), w.join("key.txt")).unwrap();
    std::os::unix::fs::symlink(home.path().join(".ssh"), w.join("keys")).unwrap();
    let aws = home.path().join(".aws/credentials");
    fake.push([
        tool_calls(&[
            ("read", json!({"file_path": "key.txt"})),
            ("read", json!({"file_path": "keys/id_rsa"})),
            ("read", json!({"file_path": aws})),
            ("grep", json!({"pattern": "FAKE", "path": home.path()})),
            ("grep", json!({"pattern": "FAKE", "path": "keys/id_rsa"})),
            ("grep", json!({"pattern": "FAKE"})),
            ("glob", json!({"pattern": "**/*", "path": home.path()})),
        ]),
        text("done"),
    ]);
    h.run_ok(&["read my keys"]).await;
    let results = fake.tool_results_of_last_request();
    for r in &results[..3] {
        assert!(r.contains("is refused: it is a secret store"), "{r}");
    }
    assert!(results[0].contains("SSH keys"), "{}", results[0]);
    assert!(results[2].contains("AWS credentials"), "{}", results[2]);
    assert!(results[4].contains("is refused"), "{}", results[4]);
    assert!(!results[6].contains("id_rsa"), "{}", results[6]);
    let seen = requests_text(&fake) + &logs_text(&h);
    for secret in [FakeHome::SSH_KEY, FakeHome::AWS_KEY] {
        assert!(!seen.contains(secret), "{secret} leaked");
    }
}

#[tokio::test]
async fn another_projects_session_log_is_refused() {
    let t = host("workspace-write", "").await;
    let ws = TempDir::new("sessions-ws");
    // Another project's log, in the harness's home.
    let other = t
        .home
        .path()
        .join("sessions/--tmp-other-project--/0193-abc");
    std::fs::create_dir_all(&other).unwrap();
    let marker = "OTHER-PROJECT-CONVERSATION";
    std::fs::write(
        other.join("session.jsonl"),
        format!("{{\"type\":\"header\"}}\n{{\"text\":\"{marker}\"}}\n"),
    )
    .unwrap();
    let sessions = t.home.path().join("sessions");
    for (tool, args) in [
        ("read", json!({"file_path": other.join("session.jsonl")})),
        ("grep", json!({"pattern": marker, "path": sessions})),
        ("grep", json!({"pattern": marker, "path": t.home.path()})),
        ("glob", json!({"pattern": "**/*.jsonl", "path": sessions})),
    ] {
        let r = run(&t, ws.path(), tool, args.clone()).await;
        let message = text_of(&r);
        assert_eq!(r["isError"], true, "{tool} {args}: {r}");
        assert!(
            message.contains("is refused: it is under the harness's home"),
            "{tool} {args}: {message}"
        );
        assert!(!message.contains(marker));
    }
    t.shutdown().await;
}

#[tokio::test]
async fn instruction_files_linked_out_of_the_project_never_reach_the_model() {
    let fake = FakeLlm::start().await;
    let home = FakeHome::new();
    let h = Headless::new(&fake, "")
        .env("DEEPSEEK_API_KEY", KEY)
        .env("HOME", home.path().to_str().unwrap());
    let proj = h.work.path().join("proj");
    std::fs::create_dir_all(proj.join(".git")).unwrap();
    let id_rsa = "FAKE-ID-RSA-BESIDE-THE-PROJECT";
    std::fs::write(h.work.path().join("id_rsa"), id_rsa).unwrap();
    std::os::unix::fs::symlink("/proc/self/environ", proj.join("AGENTS.md")).unwrap();
    std::os::unix::fs::symlink("../id_rsa", proj.join("CLAUDE.md")).unwrap();
    std::os::unix::fs::symlink(
        home.path().join(".ssh/id_rsa"),
        proj.join("AGENTS.local.md"),
    )
    .unwrap();
    // Linked to a file that would block the reading thread forever.
    std::os::unix::fs::symlink("/proc/kmsg", proj.join("CLAUDE.local.md")).unwrap();
    // A good file in a subdirectory of the chain still comes through.
    let sub = proj.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join("AGENTS.md"), "Always answer politely.").unwrap();
    fake.push([text("hello")]);
    let out = run_in(&h, &sub, &["hi"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let first = serde_json::to_string(&fake.requests()[0]).unwrap();
    assert!(first.contains("Always answer politely."), "{first}");
    let logs = logs_text(&h);
    assert!(
        logs.contains("Always answer politely."),
        "the instructions are logged"
    );
    for secret in [KEY, id_rsa, FakeHome::SSH_KEY] {
        assert!(!first.contains(secret), "{secret} reached the model");
        assert!(!logs.contains(secret), "{secret} reached the log");
    }
    for name in [
        "AGENTS.md",
        "CLAUDE.md",
        "AGENTS.local.md",
        "CLAUDE.local.md",
    ] {
        let warned = stderr
            .lines()
            .any(|l| l.contains(&format!("proj/{name} is not sent with the instructions")));
        assert!(warned, "{name}: {stderr}");
    }
    assert!(stderr.contains("leads out of the project"), "{stderr}");
    assert!(stderr.contains("harness's own process"), "{stderr}");
}

#[tokio::test]
async fn proc_kmsg_is_refused_promptly_and_the_host_stays_healthy() {
    let t = host("workspace-write", "").await;
    let ws = TempDir::new("kmsg-ws");
    let w = ws.path();
    std::os::unix::fs::symlink("/proc/kmsg", w.join("log")).unwrap();
    for file in ["/proc/kmsg", "log"] {
        let call = run(&t, w, "read", json!({"file_path": file}));
        let r = tokio::time::timeout(DEADLINE, call)
            .await
            .unwrap_or_else(|_| panic!("read {file} blocked"));
        assert_eq!(r["isError"], true, "{file}: {r}");
        assert!(
            text_of(&r).contains("reading /proc/kmsg is refused: it is the kernel log's reader"),
            "{r}"
        );
    }
    // grep under /proc finishes: it does not walk there.
    for path in ["/proc", "/sys/kernel"] {
        let call = run(&t, w, "grep", json!({"pattern": "x", "path": path}));
        let r = tokio::time::timeout(DEADLINE, call)
            .await
            .unwrap_or_else(|_| panic!("grep {path} did not finish"));
        assert_eq!(code_of(&r), "SEARCH_FAILED", "{path}: {r}");
        assert!(text_of(&r).contains("does not walk"), "{r}");
    }
    // An ignore file linked to /proc/kmsg is never opened by the walker.
    let sub = w.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(w.join("a.txt"), "needle\n").unwrap();
    std::fs::write(sub.join("b.txt"), "needle\n").unwrap();
    std::os::unix::fs::symlink("/proc/kmsg", sub.join(".ignore")).unwrap();
    let call = run(&t, w, "grep", json!({"pattern": "needle"}));
    let r = tokio::time::timeout(DEADLINE, call)
        .await
        .expect("grep blocked");
    assert_eq!(
        text_of(&r),
        "Found 1 matches\n\na.txt\nLine 1: needle",
        "{r}"
    );
    // A bounded kernel file is still read, and the plugin is healthy.
    let r = run(
        &t,
        w,
        "read",
        json!({"file_path": "/proc/version", "limit": 1}),
    )
    .await;
    assert!(text_of(&r).contains("1: Linux version"), "{r}");
    assert_eq!(format!("{:?}", t.status("read").await.state), "Active");
    t.apply("[[row]]\nid='session'\nplugin='session'\n[[row]]\nid='tools'\nplugin='tools'\n")
        .await;
    t.assert_unloaded_cleanly("tool-read");
    t.shutdown().await;
}

/// A patch of the permission row of [`host`] with `config`.
fn permission(config: &str) -> String {
    format!("[[patch]]\nid='permission'\nconfig = {{ {config} }}\n")
}

#[tokio::test]
async fn read_ask_asks_before_reading_outside_the_workspace() {
    let outside = PathBuf::from("/etc/hostname");
    let ws = TempDir::new("ask-ws");
    std::fs::write(ws.path().join("in.txt"), "inside\n").unwrap();
    // Allowed by default.
    let t = host("workspace-write", "").await;
    let r = run(&t, ws.path(), "read", json!({"file_path": outside})).await;
    assert_eq!(r["isError"], false, "{r}");
    t.shutdown().await;
    // `read = "ask"` without anyone to answer: refused, saying how.
    let t = host(
        "workspace-write",
        &permission("mode = 'workspace-write', read = 'ask'"),
    )
    .await;
    for (tool, args) in [
        ("read", json!({"file_path": outside})),
        ("grep", json!({"pattern": "x", "path": "/etc/hostname"})),
        ("glob", json!({"pattern": "hostname", "path": "/etc"})),
    ] {
        let r = run(&t, ws.path(), tool, args).await;
        assert_eq!(r["isError"], true, "{tool}: {r}");
        assert!(
            text_of(&r).contains("is outside the workspace")
                && text_of(&r).contains("read policy is `ask`"),
            "{tool}: {r}"
        );
    }
    let r = run(&t, ws.path(), "read", json!({"file_path": "in.txt"})).await;
    assert!(text_of(&r).contains("1: inside"), "{r}");
    t.shutdown().await;
    // With an approver: rejected, then allowed once.
    for (outcome, allowed) in [("rejected", false), ("allowed-once", true)] {
        let approver = format!(
            "{}[[row]]\nid='approver'\nplugin='dsh-fixture-probe'\nconfig = {{ tag = 'approver', approval_outcome = '{outcome}' }}\n",
            permission("mode = 'workspace-write', read = 'ask'")
        );
        let t = host("workspace-write", &approver).await;
        let r = run(&t, ws.path(), "read", json!({"file_path": outside})).await;
        assert_eq!(r["isError"], !allowed, "{outcome}: {r}");
        // What is never read stays refused, approver or not.
        let r = run(&t, ws.path(), "read", json!({"file_path": "/etc/shadow"})).await;
        assert!(
            text_of(&r).contains("is refused: it is a secret store"),
            "{r}"
        );
        t.shutdown().await;
    }
}

#[tokio::test]
async fn danger_full_access_still_reads_everything() {
    let t = host("danger-full-access", "").await;
    let ws = TempDir::new("danger-ws");
    let log = t.home.path().join("sessions/--p--/s/session.jsonl");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    std::fs::write(&log, "a line of another project\n").unwrap();
    let r = run(&t, ws.path(), "read", json!({"file_path": log})).await;
    assert!(text_of(&r).contains("1: a line of another project"), "{r}");
    let r = run(
        &t,
        ws.path(),
        "read",
        json!({"file_path": "/proc/self/status"}),
    )
    .await;
    assert!(text_of(&r).contains("Pid:"), "{r}");
    let r = run(
        &t,
        ws.path(),
        "read",
        json!({"file_path": "/etc/shadow", "limit": 1}),
    )
    .await;
    assert_eq!(r["isError"], false, "{r}");
    t.shutdown().await;
}

/// A fake home laid out by GNU stow: the stores hold links into
/// `~/dotfiles` (and `~/clusters`), where the secrets really are.
struct StowHome(TempDir);

impl StowHome {
    const SSH_KEY: &'static str = "FAKE-STOWED-SSH-KEY";
    const AWS_KEY: &'static str = "FAKE-STOWED-AWS-SECRET";
    const KUBE_TOKEN: &'static str = "FAKE-STOWED-KUBE-TOKEN";

    fn new() -> StowHome {
        let home = TempDir::new("stow-home");
        let h = home.path();
        for dir in [
            ".ssh",
            ".aws",
            ".kube",
            "clusters",
            "dotfiles/ssh/.ssh",
            "dotfiles/aws/.aws",
        ] {
            std::fs::create_dir_all(h.join(dir)).unwrap();
        }
        std::fs::write(h.join("dotfiles/ssh/.ssh/id_rsa"), Self::SSH_KEY).unwrap();
        std::fs::write(
            h.join("dotfiles/aws/.aws/credentials"),
            format!("aws_secret_access_key = {}\n", Self::AWS_KEY),
        )
        .unwrap();
        std::fs::write(
            h.join("clusters/prod.yaml"),
            format!("token: {}\n", Self::KUBE_TOKEN),
        )
        .unwrap();
        let link = |target: &str, name: &str| std::os::unix::fs::symlink(target, h.join(name));
        link("../dotfiles/ssh/.ssh/id_rsa", ".ssh/id_rsa").unwrap();
        link("../dotfiles/aws/.aws/credentials", ".aws/credentials").unwrap();
        std::os::unix::fs::symlink(h.join("clusters/prod.yaml"), h.join(".kube/config")).unwrap();
        StowHome(home)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

#[tokio::test]
async fn secret_stores_linked_per_file_gnu_stow_are_refused_under_every_name() {
    let fake = FakeLlm::start().await;
    let home = StowHome::new();
    let h = Headless::new(&fake, "").env("HOME", home.path().to_str().unwrap());
    let (w, hp) = (h.work.path(), home.path());
    // A hard link of the key in the workspace (one file system: /tmp).
    std::fs::hard_link(hp.join("dotfiles/ssh/.ssh/id_rsa"), w.join("notes.txt")).unwrap();
    let reads = [
        hp.join(".ssh/id_rsa"),
        hp.join(".ssh/../.ssh/id_rsa"),
        hp.join("dotfiles/ssh/.ssh/id_rsa"),
        hp.join(".aws/credentials"),
        hp.join("dotfiles/aws/.aws/credentials"),
        hp.join(".kube/config"),
        hp.join("clusters/prod.yaml"),
        w.join("notes.txt"),
    ];
    let calls: Vec<(&str, Value)> = reads
        .iter()
        .map(|p| ("read", json!({"file_path": p})))
        .chain([
            (
                "grep",
                json!({"pattern": "FAKE", "path": hp.join("dotfiles")}),
            ),
            (
                "grep",
                json!({"pattern": "FAKE", "path": hp.join("clusters")}),
            ),
            ("grep", json!({"pattern": "FAKE"})),
        ])
        .collect();
    fake.push([tool_calls(&calls), text("done")]);
    h.run_ok(&["read my stowed keys"]).await;
    let results = fake.tool_results_of_last_request();
    assert_eq!(results.len(), calls.len(), "{results:?}");
    for (p, r) in reads.iter().zip(&results) {
        assert!(r.contains("is refused"), "{}: {r}", p.display());
    }
    assert!(results[0].contains("SSH keys"), "{}", results[0]);
    assert!(results[7].contains("under another name"), "{}", results[7]);
    let seen = requests_text(&fake) + &logs_text(&h);
    for secret in [StowHome::SSH_KEY, StowHome::AWS_KEY, StowHome::KUBE_TOKEN] {
        assert!(!seen.contains(secret), "{secret} leaked");
    }
}

#[tokio::test]
async fn histories_agent_credentials_and_system_secrets_are_refused() {
    let fake = FakeLlm::start().await;
    let home = FakeHome::new();
    let runtime = TempDir::new("runtime-dir");
    let h = Headless::new(&fake, "")
        .env("HOME", home.path().to_str().unwrap())
        .env("XDG_RUNTIME_DIR", runtime.path().to_str().unwrap());
    let secret = "FAKE-TOKEN-IN-A-NEW-STORE";
    let hp = home.path();
    let stores = [
        hp.join(".bash_history"),
        hp.join(".zsh_history"),
        hp.join(".python_history"),
        hp.join(".local/share/fish/fish_history"),
        hp.join(".claude/.credentials.json"),
        hp.join(".codex/auth.json"),
        hp.join(".config/git/credentials"),
        hp.join(".config/containers/auth.json"),
        hp.join(".m2/settings.xml"),
        hp.join(".gradle/gradle.properties"),
        hp.join(".terraform.d/credentials.tfrc.json"),
        hp.join(".config/rclone/rclone.conf"),
        hp.join(".s3cfg"),
        hp.join(".password-store/bank.gpg"),
        hp.join(".local/share/keyrings/login.keyring"),
        runtime.path().join("containers/auth.json"),
    ];
    for store in &stores {
        std::fs::create_dir_all(store.parent().unwrap()).unwrap();
        std::fs::write(store, format!("export TOKEN={secret}\n")).unwrap();
    }
    let system = ["/etc/ssl/private/server.key", "/run/secrets/db_password"];
    let calls: Vec<(&str, Value)> = stores
        .iter()
        .map(|p| p.to_str().unwrap())
        .chain(system)
        .map(|p| ("read", json!({"file_path": p})))
        .chain([("grep", json!({"pattern": "TOKEN", "path": hp}))])
        .collect();
    fake.push([tool_calls(&calls), text("done")]);
    h.run_ok(&["read the histories"]).await;
    let results = fake.tool_results_of_last_request();
    assert_eq!(results.len(), calls.len(), "{results:?}");
    for ((_, args), r) in calls.iter().zip(&results) {
        if args.get("file_path").is_some() {
            assert!(
                r.contains("is refused: it is a secret store"),
                "{args}: {r}"
            );
        }
    }
    assert!(!results.last().unwrap().contains(secret), "{results:?}");
    let seen = requests_text(&fake) + &logs_text(&h);
    assert!(!seen.contains(secret), "a store's content leaked");
}

#[tokio::test]
async fn dev_fd_and_dev_stdout_never_reach_the_harness_descriptors() {
    let fake = FakeLlm::start().await;
    let h = Headless::new(&fake, "");
    let w = h.work.path();
    // The event stream goes to a file, as `dsh ... --output jsonl > f`.
    let stream = TempDir::new("event-stream");
    let out = stream.path().join("events.jsonl");
    std::os::unix::fs::symlink("/dev/fd/1", w.join("out")).unwrap();
    std::os::unix::fs::symlink("/dev/stdout", w.join("out2")).unwrap();
    let spellings = [
        "/dev/fd/1",
        "/dev/stdout",
        "/dev/stderr",
        "/dev/stdin",
        "/dev/fd/../fd/1",
        "out",
        "out2",
    ];
    let calls: Vec<(&str, Value)> = spellings
        .iter()
        .map(|s| ("read", json!({"file_path": s})))
        .chain([("grep", json!({"pattern": "type", "path": "/dev/fd/1"}))])
        .collect();
    fake.push([tool_calls(&calls), text("done")]);
    let mut c = h.command(&["--output", "jsonl", "show me the stream"]);
    c.stdout(std::fs::File::create(&out).unwrap());
    let status = tokio::task::spawn_blocking(move || c.status())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let results = fake.tool_results_of_last_request();
    assert_eq!(results.len(), calls.len(), "{results:?}");
    for ((_, args), r) in calls.iter().zip(&results) {
        assert!(r.contains("is refused"), "{args}: {r}");
        assert!(
            r.contains("harness's own open files") || r.contains("magic link"),
            "{args}: {r}"
        );
        assert!(
            !r.contains("\"type\""),
            "{args}: the event stream came back: {r}"
        );
    }
    assert!(std::fs::read_to_string(&out).unwrap().contains("\"type\""));
}

#[tokio::test]
async fn grep_returns_when_a_git_file_leads_to_a_fifo_commondir() {
    let t = host("workspace-write", "").await;
    let ws = TempDir::new("commondir-ws");
    let w = ws.path();
    std::fs::create_dir_all(w.join("d")).unwrap();
    std::fs::create_dir_all(w.join("gd")).unwrap();
    std::fs::write(w.join("a.txt"), "needle\n").unwrap();
    std::fs::write(w.join("d/b.txt"), "needle\n").unwrap();
    std::fs::write(
        w.join("d/.git"),
        format!("gitdir: {}\n", w.join("gd").display()),
    )
    .unwrap();
    // A worktree's `.git` file leads to `gd`, whose `commondir` is a FIFO:
    // a blocking open of it never returns.
    let fifo = w.join("gd/commondir");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let release = || {
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo);
    };
    for path in [None, Some("d")] {
        let args = match path {
            Some(p) => json!({"pattern": "needle", "path": p}),
            None => json!({"pattern": "needle"}),
        };
        let r = match tokio::time::timeout(DEADLINE, run(&t, w, "grep", args.clone())).await {
            Ok(r) => r,
            Err(_) => {
                release();
                panic!("grep {args} blocked on the FIFO commondir");
            }
        };
        assert_eq!(r["isError"], false, "{args}: {r}");
        assert!(text_of(&r).contains("b.txt\nLine 1: needle"), "{args}: {r}");
    }
    // A `.gitignore` that is a FIFO is never opened blocking either: its
    // directory is left out, the rest is searched.
    let gi = w.join("d/.gitignore");
    let c = std::ffi::CString::new(gi.to_str().unwrap()).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let call = run(&t, w, "grep", json!({"pattern": "needle"}));
    let r = tokio::time::timeout(DEADLINE, call)
        .await
        .expect("grep blocked on a FIFO .gitignore");
    assert_eq!(
        text_of(&r),
        "Found 1 matches\n\na.txt\nLine 1: needle",
        "{r}"
    );
    assert_eq!(format!("{:?}", t.status("search").await.state), "Active");
    t.shutdown().await;
}

/// The tool rows of [`host`] without the `permission` row: no policy
/// fences the calls.
const NO_POLICY: &str =
    "[[row]]\nid='session'\nplugin='session'\n[[row]]\nid='tools'\nplugin='tools'\n\
     [[row]]\nid='read'\nplugin='tool-read'\n[[row]]\nid='fs'\nplugin='tool-fs'\n\
     [[row]]\nid='search'\nplugin='tool-search'\n";

#[tokio::test]
async fn without_a_permission_row_the_tools_still_never_read_the_harness_environment() {
    let t = dsh_testkit::TestHost::start().await;
    t.apply(NO_POLICY).await;
    t.assert_all_active().await;
    let ws = TempDir::new("no-policy-ws");
    let w = ws.path();
    std::os::unix::fs::symlink("/proc/self/environ", w.join("env")).unwrap();
    std::fs::write(w.join("a.txt"), "one\n").unwrap();
    for (tool, args) in [
        ("read", json!({"file_path": "/proc/self/environ"})),
        ("read", json!({"file_path": "env"})),
        ("read", json!({"file_path": "/dev/fd/0"})),
        (
            "grep",
            json!({"pattern": "PATH", "path": "/proc/self/environ"}),
        ),
        ("glob", json!({"pattern": "environ", "path": "/proc/self"})),
        (
            "write",
            json!({"file_path": "/proc/self/environ", "content": "x"}),
        ),
        (
            "edit",
            json!({"file_path": "/proc/self/environ", "old_string": "PATH", "new_string": "X"}),
        ),
    ] {
        let r = run(&t, w, tool, args.clone()).await;
        let message = text_of(&r);
        assert_eq!(r["isError"], true, "{tool} {args}: {r}");
        assert!(message.contains("is refused"), "{tool} {args}: {message}");
        assert!(
            message.contains("carries no fence"),
            "{tool} {args}: {message}"
        );
        assert!(!message.contains("PATH="), "{tool} {args}: {message}");
    }
    // Everything else stays unfenced, as before.
    let r = run(&t, w, "read", json!({"file_path": "a.txt"})).await;
    assert!(text_of(&r).contains("1: one"), "{r}");
    let r = run(&t, w, "read", json!({"file_path": "/proc/version"})).await;
    assert!(text_of(&r).contains("Linux version"), "{r}");
    t.shutdown().await;
}
