//! `cargo xtask <task>`: the project's tasks.
//!
//! - `build [--release]`: build everything and stage a runnable tree at
//!   `target/dsh/` (`bin/dsh-host`, `plugins/`, `profiles/`).
//! - `demo`: build, stage, and run the offline demo profile in a temporary
//!   workspace.
//! - `test`: build everything (tests load real plugin builds), check the
//!   plugin rules, run every test.
//! - `check`: the plugin rules that `cargo tree` can see (a deny list of
//!   crates and tokio features), and the untyped-JSON budget of the
//!   plugins and the SDK (`untyped.rs`).
//! - `new-plugin NAME`: scaffold `plugins/NAME` with a passing test.
//! - `new-plugin --out DIR NAME`: the same plugin as a crate of its own at
//!   `DIR/NAME`, outside this repository, depending on this checkout's SDK
//!   and test kit by path.
//! - `bench`: release build, then print the performance figures.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

mod untyped;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_owned)
        .unwrap_or_default()
}

/// Cargo's target directory: `$CARGO_TARGET_DIR` when set (relative to the
/// workspace root), else `target/` in the workspace.
fn target_root() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root().join(dir),
        _ => root().join("target"),
    }
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

fn run(mut cmd: Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    match args.first().map(String::as_str) {
        Some("build") => build(rest.contains(&"--release")).map(|_| ()),
        Some("demo") => demo(),
        Some("test") => test(),
        Some("check") => check(),
        Some("new-plugin") => match rest.as_slice() {
            [name] if !name.starts_with('-') => new_plugin(name, None),
            ["--out", dir, name] | [name, "--out", dir] => new_plugin(name, Some(Path::new(dir))),
            _ => bail!("usage: cargo xtask new-plugin [--out DIR] NAME"),
        },
        Some("bench") => bench(),
        _ => {
            eprintln!("usage: cargo xtask build [--release] | demo | test | check | new-plugin [--out DIR] NAME | bench");
            std::process::exit(2);
        }
    }
}

/// Plugin crates under `plugins/`: (directory name, library file name).
fn plugin_crates() -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let dir = root().join("plugins");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(out);
    };
    for e in entries.flatten() {
        let manifest = e.path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let package = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("name = \""))
            .and_then(|l| l.strip_suffix('"'))
            .with_context(|| format!("no package name in {}", manifest.display()))?;
        let dir_name = e.file_name().to_string_lossy().into_owned();
        out.push((dir_name, format!("lib{}.so", package.replace('-', "_"))));
    }
    out.sort();
    Ok(out)
}

/// Builds the workspace and stages `target/dsh`. Returns the staged root.
fn build(release: bool) -> Result<PathBuf> {
    let mut c = cargo();
    c.args(["build", "--workspace"]);
    if release {
        c.arg("--release");
    }
    run(c)?;
    let profile = if release { "release" } else { "debug" };
    let target = target_root().join(profile);
    let stage = target_root().join("dsh");
    let _ = std::fs::remove_dir_all(&stage);
    for d in ["bin", "plugins", "profiles"] {
        std::fs::create_dir_all(stage.join(d))?;
    }
    std::fs::copy(target.join("dsh-host"), stage.join("bin").join("dsh-host"))
        .context("staging dsh-host")?;
    for (name, lib) in plugin_crates()? {
        let from = target.join(&lib);
        std::fs::copy(&from, stage.join("plugins").join(format!("{name}.so")))
            .with_context(|| format!("staging {}", from.display()))?;
    }
    copy_tree(&root().join("profiles"), &stage.join("profiles"))?;
    println!("staged {} ({profile})", stage.display());
    Ok(stage)
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_tree(&e.path(), &dest)?;
        } else {
            std::fs::copy(e.path(), dest)?;
        }
    }
    Ok(())
}

fn demo() -> Result<()> {
    let stage = build(false)?;
    let work = std::env::temp_dir().join(format!("dsh-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    copy_tree(
        &root().join("profiles").join("demo").join("workspace"),
        &work,
    )?;
    let home = work.join(".dsh-home");
    println!("demo workspace: {}", work.display());
    let mut c = Command::new(stage.join("bin").join("dsh-host"));
    c.current_dir(&work).env("DSH_HOME", &home).args([
        "--profile",
        "demo",
        "Mark the coding tools milestone in notes.md as done.",
    ]);
    let result = run(c);
    let _ = std::fs::remove_dir_all(&work);
    result
}

/// Debian packages the suite needs: bubblewrap (the sandbox tests run
/// under it and under the Landlock fallback), attr (`setfattr`, used to
/// attack the fence with xattrs), python3 (the sandbox tests' sockets,
/// ptys, forks and `TIOCSTI`) and git (the `.git` attacks).
const TEST_PACKAGES: &[(&str, &str)] = &[
    ("bwrap", "bubblewrap"),
    ("setfattr", "attr"),
    ("python3", "python3"),
    ("git", "git"),
];

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Installs the missing test packages with apt (as root), or says how.
fn ensure_test_packages() -> Result<()> {
    let missing: Vec<&str> = TEST_PACKAGES
        .iter()
        .filter(|(program, _)| !on_path(program))
        .map(|(_, package)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !on_path("apt-get") {
        bail!(
            "the test suite needs the Debian packages {}; install them (apt-get install {}) and run again",
            missing.join(", "),
            missing.join(" ")
        );
    }
    println!("installing {} for the sandbox tests", missing.join(", "));
    let mut update = Command::new("apt-get");
    update.args(["update", "-qq"]);
    run(update)?;
    let mut install = Command::new("apt-get");
    install.args(["install", "-y", "-qq"]).args(&missing);
    install.env("DEBIAN_FRONTEND", "noninteractive");
    run(install)
}

fn test() -> Result<()> {
    ensure_test_packages()?;
    // Staged too: the out-of-repo plugin test loads the staged plugins.
    build(false)?;
    check()?;
    let mut c = cargo();
    // The user's own codex configuration must not reach the hosts the tests
    // start (its MCP servers would be imported): a codex home that is not
    // there. Tests of the import set their own.
    c.env("CODEX_HOME", root().join("target").join("no-codex-home"));
    // Every test binary runs, so one failure does not hide the others.
    c.args([
        "test",
        "--workspace",
        "--no-fail-fast",
        "--",
        "--test-threads=2",
    ]);
    run(c)
}

/// Crates a plugin must never link (see ARCHITECTURE.md, plugin rules).
const DENIED_CRATES: &[(&str, &str)] = &[
    (
        "rayon",
        "its global pool outlives the generation and pins the library",
    ),
    (
        "rayon-core",
        "its global pool outlives the generation and pins the library",
    ),
    (
        "signal-hook",
        "installs signal handlers that crash the host after unload",
    ),
    (
        "signal-hook-registry",
        "installs signal handlers that crash the host after unload",
    ),
    (
        "ctrlc",
        "installs signal handlers that crash the host after unload",
    ),
    ("native-tls", "use rustls with ring"),
    ("openssl", "use rustls with ring"),
    ("openssl-sys", "use rustls with ring"),
    ("aws-lc-rs", "an extra pthread key per generation; use ring"),
    (
        "aws-lc-sys",
        "an extra pthread key per generation; use ring",
    ),
    (
        "tracing-subscriber",
        "plugins log through the SDK's scoped dispatcher",
    ),
    ("env_logger", "a process-global logger"),
];

/// tokio features a plugin must not enable.
const DENIED_TOKIO: &[(&str, &str)] = &[
    ("signal", "signal handlers outlive the generation"),
    (
        "process",
        "SIGCHLD handling and leaked fds; use dsh_sdk::process",
    ),
    (
        "rt-multi-thread",
        "worker threads run plugin code outside the generation thread",
    ),
];

fn check() -> Result<()> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for base in ["plugins", "tests/fixtures"] {
        if let Ok(entries) = std::fs::read_dir(root().join(base)) {
            dirs.extend(
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.join("Cargo.toml").is_file()),
            );
        }
    }
    dirs.sort();
    let mut problems = Vec::new();
    for dir in &dirs {
        let out = cargo()
            .args([
                "tree",
                "--edges",
                "normal",
                "--prefix",
                "none",
                "--format",
                "{p}|{f}",
                "--manifest-path",
            ])
            .arg(dir.join("Cargo.toml"))
            .output()
            .context("running cargo tree")?;
        if !out.status.success() {
            bail!(
                "cargo tree failed for {}: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines() {
            let (pkg, features) = line.split_once('|').unwrap_or((line, ""));
            let name = pkg.split_whitespace().next().unwrap_or_default();
            for (denied, why) in DENIED_CRATES {
                if name == *denied {
                    problems.push(format!("{}: links `{name}`: {why}", dir.display()));
                }
            }
            if name == "tokio" {
                for f in features.split(',') {
                    for (denied, why) in DENIED_TOKIO {
                        if f == *denied {
                            problems.push(format!("{}: tokio feature `{f}`: {why}", dir.display()));
                        }
                    }
                }
            }
        }
    }
    problems.sort();
    problems.dedup();
    if let Err(e) = untyped::check(&root()) {
        problems.push(e.to_string());
    }
    if problems.is_empty() {
        println!(
            "plugin rules: {} crates checked, no denied crate or tokio feature",
            dirs.len()
        );
        Ok(())
    } else {
        for p in &problems {
            eprintln!("{p}");
        }
        bail!("{} plugin rule violations", problems.len())
    }
}

/// Scaffolds plugin `name`: under `plugins/`, or with `out`, as a crate
/// of its own at `out/name` that depends on this checkout by path.
fn new_plugin(name: &str, out: Option<&Path>) -> Result<()> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && name.starts_with(|c: char| c.is_ascii_lowercase());
    if !valid {
        bail!("plugin names are lowercase letters, digits and dashes, starting with a letter: `{name}`");
    }
    let dir = match out {
        Some(out) => std::path::absolute(out)
            .with_context(|| format!("cannot resolve {}", out.display()))?
            .join(name),
        None => root().join("plugins").join(name),
    };
    if dir.exists() {
        bail!("{} already exists", dir.display());
    }
    let krate = format!("dsh-plugin-{name}");
    let ty: String = name
        .split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect();
    std::fs::create_dir_all(dir.join("src"))
        .with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::create_dir_all(dir.join("tests"))?;
    let snake = name.replace('-', "_");
    let checkout = root().canonicalize().unwrap_or_else(|_| root());
    let manifest = match out {
        Some(_) => out_of_repo_manifest(name, &krate, &checkout)?,
        None => in_repo_manifest(name, &krate),
    };
    std::fs::write(dir.join("Cargo.toml"), manifest)?;
    std::fs::write(dir.join("src/lib.rs"), plugin_source(name, &ty, &snake))?;
    std::fs::write(
        dir.join("tests").join(format!("{snake}.rs")),
        plugin_test(name, &snake),
    )?;
    if out.is_none() {
        std::fs::write(
            dir.join("README.md"),
            format!(
                "# {krate}\n\nThe `{name}` plugin. Owns the `{name}` service; touches nothing else.\n"
            ),
        )?;
        // Laid out as `cargo fmt` would, so the new crate starts clean.
        let _ = cargo().args(["fmt", "-p", &krate]).status();
        println!(
            "created {} (build it with `cargo build -p {krate}`, test with `cargo test -p {krate}`)",
            dir.display()
        );
        return Ok(());
    }
    std::fs::write(
        dir.join("README.md"),
        out_of_repo_readme(name, &krate, &checkout),
    )?;
    std::fs::write(dir.join(".gitignore"), "/target\n")?;
    // The lint settings of this workspace (tests may unwrap), so `cargo
    // clippy --all-targets` there passes as it does here.
    std::fs::copy(root().join("clippy.toml"), dir.join("clippy.toml"))
        .context("copying clippy.toml")?;
    // The versions this checkout builds and tests with, so the plugin and
    // the host it is tested against agree, and nothing is fetched.
    std::fs::copy(root().join("Cargo.lock"), dir.join("Cargo.lock"))
        .context("copying Cargo.lock")?;
    let _ = cargo()
        .arg("fmt")
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .status();
    println!(
        "created {} (in it: `cargo build`, `cargo test`; see its README.md)",
        dir.display()
    );
    Ok(())
}

/// `Cargo.toml` of a plugin under `plugins/`: a workspace member.
fn in_repo_manifest(name: &str, krate: &str) -> String {
    format!(
        r#"[package]
name = "{krate}"
description = "The `{name}` dsh plugin."
version.workspace = true
edition.workspace = true
license.workspace = true

[lib]
crate-type = ["cdylib"]

[dependencies]
dsh-sdk.workspace = true
serde.workspace = true
schemars.workspace = true

[dev-dependencies]
dsh-testkit.workspace = true
tokio.workspace = true
serde_json.workspace = true

[lints]
workspace = true
"#
    )
}

/// `Cargo.toml` of a plugin outside the repository: a workspace of its own
/// that takes the SDK and the test kit from `checkout` by path, with the
/// versions and the build settings of this workspace.
fn out_of_repo_manifest(name: &str, krate: &str, checkout: &Path) -> Result<String> {
    let path = |rel: &str| {
        serde_json::to_string(&checkout.join(rel).display().to_string())
            .context("quoting a path for Cargo.toml")
    };
    let (sdk, testkit) = (path("sdk")?, path("sdk/testkit")?);
    Ok(format!(
        r#"[package]
name = "{krate}"
description = "The `{name}` dsh plugin."
version = "0.1.0"
edition = "2021"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
# `export_plugin!` needs nothing else: the SDK re-exports what it expands to.
dsh-sdk = {{ path = {sdk} }}
serde = {{ version = "1", features = ["derive"] }}
schemars = {{ version = "1", default-features = false, features = ["derive", "std"] }}

[dev-dependencies]
# A real host inside the test: it loads this crate's fresh build, and the
# host's plugins from the checkout's staged tree (`cargo xtask build` there)
# or from $DSH_STAGE.
dsh-testkit = {{ path = {testkit} }}
tokio = {{ version = "1", default-features = false, features = ["rt", "macros"] }}
serde_json = "1"

# A workspace of its own, built as the dsh workspace builds.
[workspace]

[profile.dev]
debug = "line-tables-only"

[profile.dev.package."*"]
debug = false

[lints.clippy]
unwrap_used = "deny"
expect_used = "deny"
"#
    ))
}

/// `README.md` of a plugin outside the repository: how to build, test and
/// run it.
fn out_of_repo_readme(name: &str, krate: &str, checkout: &Path) -> String {
    let host = checkout.join("target/dsh/bin/dsh-host");
    let host = host.display();
    let checkout = checkout.display();
    format!(
        r#"# {krate}

The `{name}` dsh plugin: the `{name}` service, a typed tool and a listener.
It depends on the SDK and the test kit of the dsh checkout at `{checkout}`
by path.

```sh
cargo build    # target/debug/lib{lib}.so
cargo test     # a real host loads that build and the host's staged plugins
{host} --profile headless --plugins-dir target/debug --plugin {name} --dump-config
```

The test host finds the host's plugins in the checkout's staged tree
(`cargo xtask build` in the checkout makes `target/dsh`), or in the staged
tree named by `$DSH_STAGE`. `--plugin {name}` gives the plugin a row `{name}`
of its own; a patch changes its config by that id.

The first `cargo build` compiles the SDK and every dependency into this
crate's `target`. To reuse what the checkout compiled instead, the checkout
needs a debug build first (`cargo build` in `{checkout}`; a `--release` build
is not reused), then `CARGO_TARGET_DIR={checkout}/target cargo build` here
reuses the registry crates and compiles only this crate and the checkout's
crates it links by path (the SDK and the boundary layer), and its library is
`{checkout}/target/debug/lib{lib}.so` (give that directory to `--plugins-dir`).

What a tool's `execute` receives (`Exec`: arguments, cwd, agent, fence), how
it returns an error result, the `tools/post-execute` listener and forwarding,
`handoff` / `inherited` and where the error codes live:
`{checkout}/sdk/README.md`, section "Writing a plugin: what you receive and
return".
"#,
        lib = krate.replace('-', "_"),
    )
}

/// `src/lib.rs` of a new plugin: a typed tool, a service and a listener.
fn plugin_source(name: &str, ty: &str, snake: &str) -> String {
    format!(
        r#"//! The `{name}` plugin: the `{name}` service (`greet`, `changes`), the
//! `{snake}_greet` tool, and a listener counting `tools/change`.

use std::cell::Cell;
use std::rc::Rc;

use dsh_sdk::names::{{bus, service}};
use dsh_sdk::prelude::*;
use dsh_sdk::tool::{{arguments, declaration, register_tools, text_reply, ToolSpec}};
use schemars::JsonSchema;
use serde::Deserialize;

/// Row config.
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct Config {{
    greeting: Option<String>,
}}

/// Parameters of `{name}.greet`.
#[derive(Deserialize)]
struct GreetParams {{
    name: Option<String>,
}}

/// The `{snake}_greet` tool: its schema and its parsing come from
/// [`GreetArgs`].
struct Greet;

impl ToolSpec for Greet {{
    const NAME: &'static str = "{snake}_greet";
    const DESCRIPTION: &'static str = "Greet someone by name.";
    type Args = GreetArgs;
}}

#[derive(Deserialize, JsonSchema)]
struct GreetArgs {{
    /// Who to greet.
    name: String,
}}

struct {ty};

impl Plugin for {ty} {{
    const NAME: &'static str = "{name}";
    const DESCRIPTION: &'static str = "says hello";
    const PROVIDES: &'static [&'static str] = &["{name}"];
    const INJECT: &'static [&'static str] = &[service::TOOLS];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {{
        let greeting: Rc<str> = config.greeting.unwrap_or_else(|| "hello".into()).into();
        // A listener: counts changes of the tool set.
        let changes = Rc::new(Cell::new(0u64));
        let seen = changes.clone();
        ctx.on(bus::TOOLS_CHANGE, move |_event| {{
            seen.set(seen.get() + 1);
            // A listener's answer: null leaves the dispatch as it was.
            async {{ Ok(dsh_sdk::Value::Null) }}
        }});
        // A service, with typed parameters.
        let g = greeting.clone();
        ctx.provide("{name}", move |req| {{
            let (g, changes) = (g.clone(), changes.clone());
            async move {{
                match req.method.as_str() {{
                    "greet" => {{
                        let p: GreetParams = req.params_as()?;
                        Reply::json(format!("{{g}}, {{}}", p.name.as_deref().unwrap_or("world")))
                    }}
                    "changes" => Reply::json(changes.get()),
                    _ => Err(req.unknown_method()),
                }}
            }}
        }});
        // A typed tool: a wrong argument type is an INVALID_ARGS result.
        register_tools(&ctx, vec![declaration::<Greet>()], move |req| {{
            let g = greeting.clone();
            async move {{
                let args = arguments::<Greet>(&req)?;
                text_reply(&format!("{{g}}, {{}}", args.name))
            }}
        }})
        .await
    }}
}}

dsh_sdk::export_plugin!({ty});
"#
    )
}

/// The test of a new plugin: its real library in a real host.
fn plugin_test(name: &str, snake: &str) -> String {
    format!(
        r#"//! Loads the real `{name}` library into a real host.

use dsh_testkit::{{eventually, TestHost}};
use serde_json::{{json, Value}};

const ROWS: &str = "[[row]]\nid = 'tools'\nplugin = 'tools'\n\
                    [[row]]\nid = '{name}'\nplugin = '{name}'\n[row.config]\ngreeting = 'hi'\n";

#[tokio::test]
async fn greets_through_its_service_and_its_tool() {{
    let t = TestHost::start().await;
    t.apply(ROWS).await;
    t.assert_all_active().await;
    assert_eq!(t.call("{name}", "greet", json!({{"name": "dsh"}})).await, json!("hi, dsh"));

    let exec = |args: Value| json!({{"callId": "c", "name": "{snake}_greet", "arguments": args, "agent": "a", "cwd": "/"}});
    let ok = t.call("tools", "execute", exec(json!({{"name": "dsh"}}))).await;
    assert_eq!(ok["content"][0]["text"], json!("hi, dsh"), "{{ok}}");
    let bad = t.call("tools", "execute", exec(json!({{"name": 7}}))).await;
    assert_eq!(bad["isError"], json!(true), "{{bad}}");

    // The listener heard its own tool's registration.
    eventually("a tools/change", || async {{
        t.call("{name}", "changes", json!({{}})).await.as_u64() >= Some(1)
    }})
    .await;
    t.shutdown().await;
}}
"#
    )
}

/// `rg` for the grep comparison: on the PATH, or installed into
/// `target/tools` from crates.io on first use.
fn ripgrep() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("rg"))
            .find(|p| p.is_file())
    });
    if on_path.is_some() {
        return on_path;
    }
    let local = root().join("target/tools/bin/rg");
    if !local.is_file() {
        println!("installing ripgrep into target/tools for the grep comparison (once)");
        let mut c = cargo();
        c.args(["install", "ripgrep", "--locked", "--quiet", "--root"])
            .arg(root().join("target/tools"));
        if run(c).is_err() {
            return None;
        }
    }
    Some(local).filter(|p| p.is_file())
}

fn bench() -> Result<()> {
    let rg = ripgrep();
    let stage = build(true)?;
    let mut c = cargo();
    c.args([
        "build",
        "--release",
        "-p",
        "dsh-tests",
        "--bin",
        "dsh-bench",
    ]);
    run(c)?;
    let mut c = Command::new(root().join("target/release/dsh-bench"));
    c.env("DSH_BENCH_STAGE", &stage)
        .env("DSH_BENCH_LIBS", root().join("target/release"))
        .env("DSH_BENCH_REPO", root());
    if let Some(rg) = rg {
        c.env("DSH_BENCH_RG", rg);
    }
    run(c)
}
