//! The `dsh-host` command line.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use dsh_host::{
    dsh_home, inspect, privacy_warning, say, watch, BootOptions, Change, FiberState, Host,
    HostConfig, Install, Timeouts, TrustOffer,
};
use tokio::sync::mpsc;

dsh_host::interpose_pthread_keys!();

/// dsh-host: runs a dsh profile — a composition of plugin libraries.
#[derive(Parser, Debug)]
#[command(name = "dsh-host", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args, Debug, Default)]
struct RunArgs {
    /// The profile to run (from $DSH_HOME/profiles or the installation).
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// An extra patch layer, applied after the others (repeatable).
    #[arg(long = "patch", value_name = "FILE")]
    patches: Vec<PathBuf>,
    /// An extra plugin directory, searched first (repeatable).
    #[arg(long = "plugins-dir", value_name = "DIR")]
    plugin_dirs: Vec<PathBuf>,
    /// Load plugin NAME (from the plugin directories) as a row `NAME` of its
    /// own, default config; patches change it by that id (repeatable).
    #[arg(long = "plugin", value_name = "NAME")]
    plugins: Vec<String>,
    /// Reload plugins and configuration when their files change.
    #[arg(long)]
    watch: bool,
    /// Print the composed configuration and exit.
    #[arg(long)]
    dump_config: bool,
    /// Continue the latest session of this directory (chat or headless).
    #[arg(long = "continue")]
    continue_latest: bool,
    /// Continue stored session ID (chat or headless).
    #[arg(long, value_name = "ID")]
    resume: Option<String>,
    /// The model for this run, in every app: `provider/model` (a route and
    /// one of its models; the first `/` splits them) or `model` (on the
    /// default route). Not saved: `/model` in the chat, or the
    /// `agent-default-model` row, sets the default.
    #[arg(long, value_name = "PROVIDER/MODEL", value_parser = model_choice)]
    model: Option<String>,
    /// Arguments for the profile's app.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "APP ARGS"
    )]
    args: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Inspect plugin libraries.
    #[command(subcommand)]
    Plugins(PluginsCmd),
    /// Stored sessions (through the profile's persistence plugin).
    #[command(subcommand)]
    Sessions(SessionsCmd),
    /// Trust a project (default: this directory) and approve the servers
    /// of its .mcp.json as they are now: they run from then on, in a
    /// running `--watch` session too; one added or changed later needs
    /// approving again. Recorded in $DSH_HOME/trust.toml.
    Trust {
        /// The project directory.
        dir: Option<PathBuf>,
        /// Approve without asking (what is approved is printed first).
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Subcommand, Debug)]
enum SessionsCmd {
    /// List the sessions stored for the current directory.
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Print a stored session: its header, then its conversation.
    Show {
        /// The session id.
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Store a new session holding a copy of ID's history; prints its id.
    Fork {
        /// The session id.
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Delete a stored session (refused while another host writes it).
    Rm {
        /// The session id.
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

impl SessionsCmd {
    /// The app arguments the profile's app (`headless`) takes for this
    /// command, and the profile that reads the store.
    fn app_args(self) -> (Vec<String>, StoreArgs) {
        let (flag, id, store) = match self {
            SessionsCmd::List { store } => ("--list-sessions", None, store),
            SessionsCmd::Show { id, store } => ("--show-session", Some(id), store),
            SessionsCmd::Fork { id, store } => ("--fork-session", Some(id), store),
            SessionsCmd::Rm { id, store } => ("--remove-session", Some(id), store),
        };
        let args = std::iter::once(flag.to_owned()).chain(id).collect();
        (args, store)
    }
}

/// Which profile and plugins read the session store.
#[derive(Args, Debug)]
struct StoreArgs {
    /// The profile whose plugins read the store.
    #[arg(long, value_name = "NAME", default_value = "headless")]
    profile: String,
    /// An extra plugin directory (repeatable).
    #[arg(long = "plugins-dir", value_name = "DIR")]
    plugin_dirs: Vec<PathBuf>,
    /// An extra patch layer (repeatable).
    #[arg(long = "patch", value_name = "FILE")]
    patches: Vec<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum PluginsCmd {
    /// List the plugins found in the plugin directories.
    List {
        /// Also show how the profile uses each plugin.
        #[arg(long, value_name = "NAME")]
        profile: Option<String>,
        /// An extra plugin directory (repeatable).
        #[arg(long = "plugins-dir", value_name = "DIR")]
        plugin_dirs: Vec<PathBuf>,
        /// A plugin the profile gets a row for, as with `--profile ... --plugin`
        /// (repeatable).
        #[arg(long = "plugin", value_name = "NAME", requires = "profile")]
        plugins: Vec<String>,
    },
    /// Print one library's manifest, or why it was refused. The library is
    /// loaded in a confined child process, never in this one.
    Check {
        /// The library.
        path: PathBuf,
    },
    /// Reload a plugin many times and print memory, fd and unload figures.
    Soak {
        /// The library.
        path: PathBuf,
        /// Reload cycles.
        #[arg(long, default_value_t = 200)]
        cycles: usize,
        /// A `service.method` to call after each reload.
        #[arg(long)]
        call: Option<String>,
    },
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DSH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| SayWriter(Vec::new()))
        .without_time()
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .try_init();
}

/// One log line, said through [`say`] when it is complete (so a warning
/// during the chat is shown above its input, not written under it).
struct SayWriter(Vec<u8>);

impl std::io::Write for SayWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for SayWriter {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        let line = text.trim_end_matches('\n');
        if !line.is_empty() {
            say(line);
        }
    }
}

fn main() -> ExitCode {
    // First of all: nothing the host starts (a command, the confined
    // inspector) may inherit a descriptor its starter left open.
    if let Err(e) = dsh_host::fds::close_inherited_on_exec() {
        eprintln!("dsh-host: cannot mark inherited descriptors close-on-exec: {e}");
        return ExitCode::from(1);
    }
    // The confined child that inspects a library (see dsh_host::isolate):
    // before anything else of the host starts.
    if std::env::args_os().nth(1).as_deref() == Some(dsh_host::isolate::SUBCOMMAND.as_ref()) {
        return dsh_host::isolate::child_main();
    }
    init_logging();
    // A panic must not leave the user's terminal in raw mode.
    let default_hook = std::panic::take_hook();
    // (Plugin threads' panics are caught and survived: only the main
    // thread's end the process.)
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() == Some("main") {
            dsh_host::restore_terminal();
        }
        default_hook(info);
    }));
    let mut cli = Cli::parse();
    if cli.command.is_none() {
        let raw = std::env::args_os().skip(1);
        keep_escape(
            &mut cli.run.args,
            raw.map(|a| a.to_string_lossy().into_owned()),
        );
    }
    let result = match cli.command {
        Some(Cmd::Plugins(cmd)) => plugins(cmd),
        Some(Cmd::Trust { dir, yes }) => trust(dir, yes),
        // The product behavior (reading the store) lives in the app plugin.
        Some(Cmd::Sessions(cmd)) => {
            let (args, store) = cmd.app_args();
            run(RunArgs {
                profile: Some(store.profile),
                patches: store.patches,
                plugin_dirs: store.plugin_dirs,
                args,
                ..RunArgs::default()
            })
        }
        None => run(cli.run),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("dsh-host: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// `$DSH_HOME`, created private; says once when it is open to others.
fn home() -> anyhow::Result<PathBuf> {
    let home = dsh_home().context("cannot use $DSH_HOME")?;
    if let Some(w) = privacy_warning(&home) {
        eprintln!("dsh-host: {w}");
    }
    Ok(home)
}

fn boot_options(
    profile: String,
    patches: Vec<PathBuf>,
    plugin_dirs: Vec<PathBuf>,
    plugins: Vec<String>,
) -> anyhow::Result<BootOptions> {
    Ok(BootOptions {
        profile,
        patches,
        plugin_dirs,
        plugins,
        home: home()?,
        install: Install::locate(),
    })
}

fn trust(dir: Option<PathBuf>, yes: bool) -> anyhow::Result<u8> {
    use std::io::{BufRead, IsTerminal, Write};
    let home = home()?;
    let dir = match dir {
        Some(d) => d,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    // What is shown is what is recorded, whatever the file says by the
    // time the user answers.
    let (project, pins, lines) = dsh_host::trust::proposal(&dir);
    println!("trusting {}", project.display());
    if lines.is_empty() {
        println!("  (no .mcp.json servers to approve)");
    }
    for line in &lines {
        println!("  {line}");
    }
    if !yes {
        if !std::io::stdin().is_terminal() {
            eprintln!(
                "dsh-host: not a terminal to ask in: `dsh-host trust --yes` approves the above"
            );
            return Ok(2);
        }
        print!("these run outside the sandbox, with the project's files; approve? [y/N] ");
        std::io::stdout().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            println!("nothing approved");
            return Ok(1);
        }
    }
    let trusted = dsh_host::trust::trust(&home, &project, pins)?;
    println!(
        "trusted {}: these start from the next run (at once under --watch); \
         a server added or changed later needs approving again",
        trusted.display()
    );
    Ok(0)
}

fn plugins(cmd: PluginsCmd) -> anyhow::Result<u8> {
    match cmd {
        PluginsCmd::Check { path } => match inspect::examine(&path) {
            Ok(inspect::Inspected { manifest, unload }) => {
                println!("{}", serde_json::to_string_pretty(&manifest)?);
                println!("unload: {unload}");
                Ok(0)
            }
            Err(e) => {
                eprintln!("dsh-host: refused: {e}");
                Ok(1)
            }
        },
        PluginsCmd::List {
            profile,
            plugin_dirs,
            plugins,
        } => {
            let opts = boot_options(
                profile.clone().unwrap_or_default(),
                Vec::new(),
                plugin_dirs,
                plugins,
            )?;
            let (dirs, tree) = match &profile {
                Some(_) => {
                    let c = opts.compose()?;
                    (c.plugin_dirs, Some(c.tree))
                }
                None => (opts.plugin_dirs(None), None),
            };
            println!(
                "{:<20} {:<10} {:<4} {:<30} PATH",
                "NAME", "VERSION", "ABI", "STATE"
            );
            let libraries = inspect::libraries(&dirs);
            let inspected = inspect::examine_all(&libraries);
            for (lib, result) in libraries.iter().zip(inspected) {
                match result {
                    Ok(inspect::Inspected { manifest: m, .. }) => {
                        let state = match &tree {
                            None => "loadable".to_owned(),
                            Some(t) => match t.rows.iter().find(|r| {
                                dsh_host::resolve_plugin(&r.row.plugin, &dirs)
                                    .ok()
                                    .as_deref()
                                    == Some(lib.as_path())
                            }) {
                                Some(r) if r.row.disabled => format!("disabled ({})", r.row.id),
                                Some(r) => format!("enabled ({})", r.row.id),
                                None => "unused".to_owned(),
                            },
                        };
                        let shown = |t: &str| dsh_host::isolate::printable(t, 64);
                        println!(
                            "{:<20} {:<10} {:<4} {:<30} {}",
                            shown(&m.name),
                            shown(&m.version),
                            m.abi_version,
                            state,
                            lib.display()
                        );
                    }
                    Err(e) => {
                        let first = e.to_string().lines().next().unwrap_or_default().to_owned();
                        println!(
                            "{:<20} {:<10} {:<4} {:<30} {} ({first})",
                            "?",
                            "?",
                            "?",
                            "refused",
                            lib.display()
                        );
                    }
                }
            }
            Ok(0)
        }
        PluginsCmd::Soak { path, cycles, call } => {
            let home = home()?;
            let report =
                runtime()?.block_on(inspect::soak(&path, cycles, call.as_deref(), &home))?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(0)
        }
    }
}

/// Why the host stops.
enum Stop {
    Signal(u8),
    App(i32),
}

fn signals(tx: mpsc::UnboundedSender<Stop>) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new()
        .name("dsh-signals".into())
        .spawn(move || {
            let mut seen = false;
            for sig in signals.forever() {
                let code = if sig == SIGINT { 130 } else { 0 };
                if seen {
                    // Second signal: leave at once.
                    dsh_host::restore_terminal();
                    std::process::exit(code);
                }
                seen = true;
                let _ = tx.send(Stop::Signal(code as u8));
            }
        })?;
    Ok(())
}

/// A `--plugins-dir` inside the workspace or the temp directory stays
/// writable for the agent (a plugin author's `target/debug`): say so once.
fn say_writable_plugin_dirs(dirs: &[PathBuf]) {
    let real = |p: PathBuf| p.canonicalize().unwrap_or(p);
    let roots = [
        real(std::env::current_dir().unwrap_or_default()),
        real(std::env::temp_dir()),
    ];
    for d in dirs {
        let real = real(std::path::absolute(d).unwrap_or_else(|_| d.clone()));
        if roots.iter().any(|r| real.starts_with(r)) {
            eprintln!(
                "dsh-host: note: --plugins-dir {} is inside the workspace or temp directory: the agent can write libraries there that this host loads",
                real.display()
            );
        }
    }
}

/// The profile to run: the one named, else the one-shot `headless` app for
/// a task and the `chat` for none (which needs a terminal).
fn pick_profile(args: &RunArgs) -> anyhow::Result<String> {
    if let Some(profile) = &args.profile {
        if profile.is_empty() {
            anyhow::bail!("--profile needs a name");
        }
        return Ok(profile.clone());
    }
    if !args.args.is_empty() {
        return Ok("headless".to_owned());
    }
    if args.dump_config || std::io::stdin().is_terminal() {
        return Ok("chat".to_owned());
    }
    anyhow::bail!(
        "no task and no terminal: give a task (dsh-host \"run the tests\"), run in a terminal for the chat, or pick a profile with --profile <NAME>"
    )
}

/// `--model`'s text, if [`dsh_wire::ModelChoice::parse`] (the parser
/// plugin `agent-default-model` reads it with) takes it; whether the route
/// is served is checked when an app starts on it.
fn model_choice(text: &str) -> Result<String, String> {
    dsh_wire::ModelChoice::parse(text).map(|_| text.trim().to_owned())
}

/// Puts back the literal `--` the command line parser took as its own end
/// of options (`dsh-host -- --fix it` leaves `--fix it` in the app's
/// arguments without it): the app, and [`host_option_after_task`], must
/// still see that what follows is the task's. `raw` is the whole command
/// line after the program's name.
fn keep_escape(args: &mut Vec<String>, raw: impl Iterator<Item = String>) {
    let literal = raw.filter(|a| a == "--").count();
    let kept = args.iter().filter(|a| *a == "--").count();
    if !args.is_empty() && literal > kept {
        args.insert(0, "--".to_owned());
    }
}

/// The first of the app's arguments, before a literal `--`, that is one of
/// dsh-host's own options: after the task it would be taken as words of
/// the task (`dsh-host "review src/" --model local/qwen3` would run on the
/// default route), so it is refused. `--continue` and `--resume` are the
/// apps' options too (passed on to them), so they may come anywhere.
fn host_option_after_task(args: &[String]) -> Option<String> {
    let command = <Cli as clap::CommandFactory>::command();
    let own: Vec<&str> = command
        .get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|long| !matches!(*long, "continue" | "resume"))
        .collect();
    args.iter()
        .take_while(|a| a.as_str() != "--")
        .filter_map(|a| a.strip_prefix("--"))
        .map(|a| a.split_once('=').map_or(a, |(name, _)| name))
        .find(|name| own.contains(name))
        .map(|name| format!("--{name}"))
}

/// Says each warning and notice of a composition, once (the supervisor
/// records them without saying them again).
fn say_warnings(tree: &dsh_host::Tree) {
    for w in tree.warnings.iter().chain(&tree.notices) {
        say(&format!("dsh-host: {w}"));
    }
}

/// The app's arguments: `--continue` or `--resume ID`, then the task.
fn app_args(args: &RunArgs) -> Vec<String> {
    let mut out = Vec::new();
    if args.continue_latest {
        out.push("--continue".to_owned());
    }
    if let Some(id) = &args.resume {
        out.extend(["--resume".to_owned(), id.clone()]);
    }
    out.extend(args.args.iter().cloned());
    out
}

fn run(args: RunArgs) -> anyhow::Result<u8> {
    if let Some(option) = host_option_after_task(&args.args) {
        let message = format!(
            "`{option}` is a dsh-host option: put it before the task (dsh-host {option} ... \"the \
             task\"); after the task it would be read as words of the task. Words after a \
             literal `--` are the task's"
        );
        <Cli as clap::CommandFactory>::command()
            .error(clap::error::ErrorKind::ArgumentConflict, message)
            .exit();
    }
    let profile = pick_profile(&args)?;
    let opts = boot_options(
        profile,
        args.patches.clone(),
        args.plugin_dirs.clone(),
        args.plugins.clone(),
    )?;
    let composition = opts.compose()?;
    say_warnings(&composition.tree);
    if args.dump_config {
        if !args.args.is_empty() {
            anyhow::bail!("--dump-config takes no app arguments, got {:?}", args.args);
        }
        print!(
            "# dsh-host --profile {} --dump-config\n\n{}",
            opts.profile,
            dsh_host::dump(&composition.tree)
        );
        // A patch that matched nothing, a refused drop-in: the tree printed
        // is not what was asked for.
        return Ok(u8::from(!composition.tree.warnings.is_empty()));
    }
    let rt = runtime()?;
    rt.block_on(serve(opts, composition, args))
}

async fn serve(
    opts: BootOptions,
    composition: dsh_host::Composition,
    args: RunArgs,
) -> anyhow::Result<u8> {
    let (stop_tx, mut stop_rx) = mpsc::unbounded_channel();
    signals(stop_tx.clone())?;
    let drop_in_dir = opts.home.join("plugins");
    dsh_host::create_private_dir(&drop_in_dir)
        .with_context(|| format!("cannot create {}", drop_in_dir.display()))?;
    // There before any command runs, so the sandbox hides it from the
    // first (it hides only what exists).
    let auth_dir = opts.home.join(dsh_wire::mcp::AUTH_DIR);
    dsh_host::create_private_dir(&auth_dir)
        .with_context(|| format!("cannot create {}", auth_dir.display()))?;
    let drop_in_dir = opts.drop_in_dir();
    say_writable_plugin_dirs(&opts.plugin_dirs);
    // Changes to recompose on: the watcher's, and a front end trusting
    // the project (with or without --watch).
    let (change_tx, mut change_rx) = mpsc::unbounded_channel();
    let trust = trust_offer(&composition, &change_tx);
    let host = Host::start(HostConfig {
        home: opts.home.clone(),
        plugin_dirs: composition.plugin_dirs.clone(),
        timeouts: Timeouts::default(),
        args: app_args(&args),
        protected: opts.protected(&composition),
        model: args.model.clone(),
        trust,
    })?;
    let _watcher = if args.watch {
        Some(watch(
            &composition.plugin_dirs,
            &composition.files,
            Duration::from_millis(50),
            change_tx.clone(),
        )?)
    } else {
        None
    };
    host.apply(composition.tree.clone()).await;
    let broken: Vec<String> = host
        .status()
        .await
        .into_iter()
        .filter(|s| matches!(s.state, FiberState::Failed | FiberState::Pending))
        .map(|s| match (&s.error, s.waiting_for.is_empty()) {
            (Some(e), _) => format!("row `{}`: {e}", s.id),
            (None, false) => format!(
                "row `{}` ({}) waits for services that never became active: {}",
                s.id,
                s.plugin,
                s.waiting_for.join(", ")
            ),
            (None, true) => format!("row `{}` ({}) did not start", s.id, s.plugin),
        })
        .collect();
    for b in &broken {
        say(&format!("dsh-host: {b}"));
    }
    if !broken.is_empty() && !args.watch {
        host.shutdown().await;
        return Ok(1);
    }
    let host2 = host.clone();
    let app_stop = stop_tx.clone();
    tokio::spawn(async move {
        let code = host2.exit_requested().await;
        let _ = app_stop.send(Stop::App(code));
    });
    let mut last_good = composition.tree;
    loop {
        tokio::select! {
            stop = stop_rx.recv() => {
                host.shutdown().await;
                return Ok(match stop {
                    Some(Stop::Signal(code)) => code,
                    Some(Stop::App(code)) => u8::try_from(code).unwrap_or(1),
                    None => 0,
                });
            }
            Some(change) = change_rx.recv() => match change {
                Change::Plugin(path) if path.parent() == Some(drop_in_dir.as_path()) => {
                    // A new drop-in becomes a row; a replaced one reloads.
                    recompose(&host, &opts, &mut last_good, &change_tx).await;
                    reload(&host, path).await;
                }
                Change::Plugin(path) => reload(&host, path).await,
                Change::PluginRemoved(path) if path.parent() == Some(drop_in_dir.as_path()) => {
                    host.remove(path).await;
                    recompose(&host, &opts, &mut last_good, &change_tx).await;
                }
                Change::PluginRemoved(path) => host.remove(path).await,
                Change::Config(path) => match opts.compose() {
                    Ok(c) => {
                        host.offer_trust(trust_offer(&c, &change_tx));
                        if c.tree != last_good {
                            say_warnings(&c.tree);
                            host.apply(c.tree.clone()).await;
                            last_good = c.tree;
                        }
                    }
                    Err(e) => say(&format!(
                        "dsh-host: configuration change in {} rejected, keeping the last good tree: {e}",
                        path.display()
                    )),
                },
            },
        }
    }
}

/// What `composition` offers front ends to trust, if anything; trusting
/// it sends `recompose` a change.
fn trust_offer(
    composition: &dsh_host::Composition,
    recompose: &mpsc::UnboundedSender<Change>,
) -> Option<TrustOffer> {
    composition.untrusted.clone().map(|u| TrustOffer {
        project: u.project,
        pins: u.pins,
        recompose: recompose.clone(),
    })
}

/// Composes again (a drop-in came or went) and applies what changed.
async fn recompose(
    host: &Host,
    opts: &BootOptions,
    last_good: &mut dsh_host::Tree,
    change_tx: &mpsc::UnboundedSender<Change>,
) {
    match opts.compose() {
        Ok(c) => {
            host.offer_trust(trust_offer(&c, change_tx));
            say_warnings(&c.tree);
            host.apply(c.tree.clone()).await;
            *last_good = c.tree;
        }
        Err(e) => say(&format!(
            "dsh-host: recomposing after a drop-in change failed: {e}"
        )),
    }
}

/// Reloads the rows served from `path` and says so ([`say`]), one line per
/// row that got a new generation: its id, plugin, generation and the time
/// the reload took.
async fn reload(host: &Host, path: PathBuf) {
    let before: std::collections::HashMap<String, u64> = host
        .status()
        .await
        .into_iter()
        .map(|s| (s.id, s.generations))
        .collect();
    let started = std::time::Instant::now();
    host.reload(path).await;
    let took = started.elapsed().as_millis();
    for s in host.status().await {
        if before.get(&s.id).is_none_or(|g| *g < s.generations) {
            say(&format!(
                "dsh-host: reloaded {} ({}) generation {} in {took} ms",
                s.id, s.plugin, s.generations
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> RunArgs {
        let argv = std::iter::once("dsh-host").chain(words.iter().copied());
        let mut run = Cli::try_parse_from(argv).unwrap().run;
        keep_escape(&mut run.args, words.iter().map(|w| w.to_string()));
        run
    }

    #[test]
    fn a_host_option_after_the_task_is_found_and_an_app_option_is_not() {
        let a = parse(&["review src/", "--model", "local/qwen3"]);
        assert_eq!(host_option_after_task(&a.args).as_deref(), Some("--model"));
        let a = parse(&["review", "--patch=p.toml"]);
        assert_eq!(host_option_after_task(&a.args).as_deref(), Some("--patch"));
        // Before the task, the host takes it.
        let a = parse(&["--model", "local/qwen3", "review src/"]);
        assert_eq!(a.model.as_deref(), Some("local/qwen3"));
        assert_eq!(host_option_after_task(&a.args), None);
        // The apps' own options, and anything after a literal `--`.
        let a = parse(&["review", "--output", "jsonl", "--continue"]);
        assert_eq!(host_option_after_task(&a.args), None);
        assert_eq!(a.args, ["review", "--output", "jsonl", "--continue"]);
        let a = parse(&["review", "--", "--model", "x"]);
        assert_eq!(host_option_after_task(&a.args), None);
        assert_eq!(a.args, ["review", "--", "--model", "x"]);
        // An escape before the task is kept for the app, and honoured.
        let a = parse(&["--", "--model", "x"]);
        assert_eq!(a.args, ["--", "--model", "x"]);
        assert_eq!(host_option_after_task(&a.args), None);
        let a = parse(&["--model", "m", "--", "a", "--", "b"]);
        assert_eq!(a.args, ["--", "a", "--", "b"]);
        assert_eq!(parse(&["--model", "m", "task"]).args, ["task"]);
    }

    #[test]
    fn the_model_flag_is_read_by_the_one_parser() {
        assert_eq!(model_choice(" local/qwen3 "), Ok("local/qwen3".to_owned()));
        assert!(model_choice("local/").is_err());
        assert!(model_choice("local/qwen 3").is_err());
        assert!(model_choice("local/\u{1b}[2J").is_err());
    }
}
