//! Inspecting a library without running any of its code in this process.
//!
//! `dlopen` runs a library's constructors, and a library's manifest is a
//! function: there is no reading it without running code. So `plugins
//! check`, `plugins list` and the drop-ins found in `$DSH_HOME/plugins`
//! (named by their manifest before they are rows) are looked at in a
//! confined child process:
//!
//! 1. The parent copies the file into a sealed memory file
//!    (`sealed.rs`: nobody can change it afterwards) and runs the
//!    preflight on that copy: a file that is not a plugin never reaches a
//!    child.
//! 2. It starts this executable again as `dsh-host __inspect` with the copy
//!    as its stdin, an empty environment, `/` as working directory, and,
//!    between `fork` and `exec`, a session of its own and the parent-death
//!    signal. The child confines itself (`confine.rs`) before it
//!    touches the library, then loads `/proc/self/fd/0`, reads the
//!    manifest, unloads it and writes one JSON answer on stdout.
//! 3. The parent reads at most [`ANSWER_CAP`] bytes of answer (and a little
//!    of stderr, for the message when the child dies), waits at most
//!    [`TIMEOUT`], kills the child otherwise, and parses the answer.
//!
//! Rows of a profile are not inspected this way: loading them is running
//! them, which is what the user asked for, and `host start` spawns no
//! process per library.
//!
//! The child is this very executable (`/proc/self/exe`): a program that
//! embeds the host and calls [`inspect`] must hand `__inspect` to
//! [`child_main`] before anything else, as `dsh-host`'s `main` does.

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_wire::Manifest;
use serde::{Deserialize, Serialize};

use crate::loader::{Generation, LoadError, LoadSpec, NullSink};

/// The hidden subcommand that runs [`child_main`].
pub const SUBCOMMAND: &str = "__inspect";

/// The most answer (stdout) read from the child.
pub const ANSWER_CAP: usize = 1 << 20;

/// The most of the child's stderr kept (for the message when it dies).
const STDERR_CAP: usize = 4096;

/// How long the child may take, start to exit.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Where the child finds its copy of the library (its stdin).
const CHILD_LIBRARY: &str = "/proc/self/fd/0";

/// What the child answers on stdout: one JSON object.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum Answer {
    /// Loaded, checked and unloaded.
    Loaded {
        /// The manifest it declared.
        manifest: Manifest,
        /// How the unload went (the [`crate::loader::Unloaded`] text).
        unload: String,
    },
    /// Refused: why, without a path (the parent knows the file).
    Refused {
        /// Which kind of refusal.
        kind: Refusal,
        /// The reason, as the loader gave it.
        reason: String,
    },
}

/// The kinds of refusal the child reports, after [`LoadError`]'s variants.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Refusal {
    Preflight,
    Open,
    NotAPlugin,
    Incompatible,
    Manifest,
    Thread,
    Inspection,
    Limit,
    /// The child could not confine itself: nothing was loaded.
    Confinement,
}

/// What a confined inspection found.
#[derive(Debug, Clone)]
pub struct Inspected {
    /// The manifest the library declared.
    pub manifest: Manifest,
    /// How unloading it went in the child.
    pub unload: String,
}

/// Inspects `path` in a confined child process; see the module doc. None
/// of the library's code runs in this process.
pub fn inspect(path: &Path) -> Result<Inspected, LoadError> {
    let open_error = |e: io::Error| LoadError::Open {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    let copy = crate::sealed::copy_of(path).map_err(open_error)?;
    crate::preflight::inspect_file(&copy).map_err(|reason| LoadError::Refused {
        path: path.to_owned(),
        reason,
    })?;
    let inspection = |reason: String| LoadError::Inspection {
        path: path.to_owned(),
        reason,
    };
    let child = spawn(copy).map_err(|e| {
        inspection(format!(
            "cannot start the confined process that inspects it: {e}"
        ))
    })?;
    let finished = collect(child).map_err(|e| inspection(e.to_string()))?;
    decide(path, finished)
}

/// Starts `dsh-host __inspect` with `library` as its stdin.
fn spawn(library: std::fs::File) -> io::Result<Child> {
    let parent = std::process::id();
    let mut command = Command::new("/proc/self/exe");
    command
        .arg0("dsh-host-inspect")
        .arg(SUBCOMMAND)
        .arg(parent.to_string())
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::from(library))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: between fork and exec only async-signal-safe system calls
    // run (setsid, prctl, getppid); nothing allocates.
    unsafe {
        command.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have ended before the signal was armed.
            if libc::getppid() as u32 != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    command.spawn()
}

/// The child's end: how it exited, what it wrote.
struct Finished {
    status: std::process::ExitStatus,
    answer: Vec<u8>,
    stderr: Vec<u8>,
}

/// Why the child's answer could not be collected.
#[derive(Debug, thiserror::Error)]
enum CollectError {
    #[error(
        "its code did not finish within {} s in the confined process that inspected it (killed)",
        TIMEOUT.as_secs()
    )]
    Timeout,
    #[error(
        "the confined process that inspected it answered more than {ANSWER_CAP} bytes (killed)"
    )]
    TooLong,
    #[error("reading the confined process that inspected it failed: {0}")]
    Io(#[from] io::Error),
}

/// Reads the child's stdout (bounded) and stderr (the first bytes kept)
/// until both end, then waits for it; kills it at [`TIMEOUT`] or when it
/// says too much.
fn collect(mut child: Child) -> Result<Finished, CollectError> {
    let deadline = Instant::now() + TIMEOUT;
    let outcome = read_both(&mut child, deadline).and_then(|(answer, stderr)| {
        wait_until(&mut child, deadline).map(|status| Finished {
            status,
            answer,
            stderr,
        })
    });
    if outcome.is_err() {
        let _ = child.kill();
        let _ = child.wait();
    }
    outcome
}

fn read_both(child: &mut Child, deadline: Instant) -> Result<(Vec<u8>, Vec<u8>), CollectError> {
    let (Some(mut out), Some(mut err)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(io::Error::other("the child's pipes are missing").into());
    };
    let mut answer = Vec::new();
    let mut stderr = Vec::new();
    let (mut out_open, mut err_open) = (true, true);
    let mut buf = [0u8; 16 * 1024];
    while out_open || err_open {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(CollectError::Timeout);
        }
        let mut fds = [
            libc::pollfd {
                fd: if out_open { out.as_raw_fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if err_open { err.as_raw_fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: two valid pollfd entries (a negative fd is ignored).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e.into());
        }
        if out_open && fds[0].revents != 0 {
            let got = out.read(&mut buf)?;
            if got == 0 {
                out_open = false;
            } else if answer.len() + got > ANSWER_CAP {
                return Err(CollectError::TooLong);
            } else {
                answer.extend_from_slice(&buf[..got]);
            }
        }
        if err_open && fds[1].revents != 0 {
            let got = err.read(&mut buf)?;
            if got == 0 {
                err_open = false;
            } else {
                // Keep the first bytes; drain the rest so the child never
                // blocks on a full pipe.
                let room = STDERR_CAP.saturating_sub(stderr.len());
                stderr.extend_from_slice(&buf[..got.min(room)]);
            }
        }
    }
    Ok((answer, stderr))
}

fn wait_until(
    child: &mut Child,
    deadline: Instant,
) -> Result<std::process::ExitStatus, CollectError> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            return Err(CollectError::Timeout);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Turns the child's answer into the result for `path`.
fn decide(path: &Path, finished: Finished) -> Result<Inspected, LoadError> {
    let inspection = |reason: String| LoadError::Inspection {
        path: path.to_owned(),
        reason,
    };
    match serde_json::from_slice::<Answer>(&finished.answer) {
        Ok(Answer::Loaded { manifest, unload }) => Ok(Inspected { manifest, unload }),
        Ok(Answer::Refused { kind, reason }) => Err(refusal(path.to_owned(), kind, reason)),
        Err(parse) => Err(inspection(match finished.status.signal() {
            Some(sig) => format!(
                "its code crashed the confined process that inspected it ({}){}",
                signal_name(sig),
                said(&finished.stderr)
            ),
            None if finished.answer.is_empty() => format!(
                "the confined process that inspected it ended ({}) without an answer{}",
                finished.status,
                said(&finished.stderr)
            ),
            None => format!(
                "the confined process that inspected it gave an answer that is not one ({parse}){}",
                said(&finished.stderr)
            ),
        })),
    }
}

/// The first line of what the child wrote on stderr, printable characters
/// only (it may come from the library), as `: <line>`.
fn said(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let line = printable(
        text.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or_default(),
        300,
    );
    if line.is_empty() {
        String::new()
    } else {
        format!(": {line}")
    }
}

/// At most `max` characters of `text` without control or bidi characters:
/// what a library says of itself (its manifest, its stderr) is shown on a
/// terminal, and must not drive it (an OSC 52 clipboard write, a title).
pub fn printable(text: &str, max: usize) -> String {
    text.chars()
        .filter(|c| !c.is_control() && !is_bidi_control(*c))
        .take(max)
        .collect()
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGABRT => "SIGABRT",
        libc::SIGILL => "SIGILL",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSYS => "SIGSYS",
        libc::SIGXCPU => "SIGXCPU, its CPU time limit",
        libc::SIGFPE => "SIGFPE",
        _ => return format!("signal {sig}"),
    };
    format!("signal {sig}, {name}")
}

fn refusal(path: PathBuf, kind: Refusal, reason: String) -> LoadError {
    match kind {
        Refusal::Open => LoadError::Open { path, reason },
        Refusal::NotAPlugin => LoadError::NotAPlugin { path, reason },
        Refusal::Incompatible => LoadError::Incompatible { path, reason },
        Refusal::Manifest => LoadError::Manifest { path, reason },
        Refusal::Thread => LoadError::Thread { path, reason },
        Refusal::Limit => LoadError::Limit { path, reason },
        Refusal::Preflight | Refusal::Inspection => LoadError::Inspection { path, reason },
        Refusal::Confinement => LoadError::Inspection {
            path,
            reason: format!(
                "not inspected: the process that would inspect it cannot be confined on this system ({reason}); nothing of it ran"
            ),
        },
    }
}

/// The child's refusal for a loader error (its path is the child's copy).
fn answer_for(error: LoadError) -> Answer {
    let (kind, reason) = match error {
        LoadError::Refused { reason, .. } => (Refusal::Preflight, reason.to_string()),
        LoadError::Open { reason, .. } => (Refusal::Open, reason),
        LoadError::NotAPlugin { reason, .. } => (Refusal::NotAPlugin, reason),
        LoadError::Incompatible { reason, .. } => (Refusal::Incompatible, reason),
        LoadError::Manifest { reason, .. } => (Refusal::Manifest, reason),
        LoadError::Thread { reason, .. } => (Refusal::Thread, reason),
        LoadError::Inspection { reason, .. } => (Refusal::Inspection, reason),
        LoadError::Limit { reason, .. } => (Refusal::Limit, reason),
    };
    Answer::Refused { kind, reason }
}

/// The child: `dsh-host __inspect <parent pid>`, the library on stdin.
/// Confines itself, loads the library, answers on stdout. Exit code 0 when
/// it answered (a refusal is an answer), 2 when it could not.
pub fn child_main() -> ExitCode {
    let answer = match std::env::args().nth(2).map(|p| p.parse::<u32>()) {
        Some(Ok(parent)) => confine_and_load(parent),
        _ => Answer::Refused {
            kind: Refusal::Confinement,
            reason: format!("usage: dsh-host {SUBCOMMAND} <parent pid>, the library on stdin"),
        },
    };
    let Ok(json) = serde_json::to_string(&answer) else {
        return ExitCode::from(2);
    };
    use std::io::Write;
    let mut out = io::stdout().lock();
    match writeln!(out, "{json}").and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(2),
    }
}

/// Confines this process, then loads the library on stdin, reads its
/// manifest and unloads it.
fn confine_and_load(parent: u32) -> Answer {
    if let Err(e) = crate::confine::confine_self(parent) {
        return Answer::Refused {
            kind: Refusal::Confinement,
            reason: e.to_string(),
        };
    }
    match Generation::load(LoadSpec {
        load_path: Path::new(CHILD_LIBRARY),
        source: None,
        fiber: 0,
        name_hint: "inspect",
        sink: Arc::new(NullSink),
    }) {
        Ok(generation) => {
            let manifest = generation.manifest.clone();
            let unload = generation.abort().to_string();
            Answer::Loaded { manifest, unload }
        }
        Err(e) => answer_for(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_keeps_its_kind_and_gets_the_real_path_back() {
        let json = serde_json::to_string(&answer_for(LoadError::NotAPlugin {
            path: PathBuf::from(CHILD_LIBRARY),
            reason: "it exports no abi_stable root module".into(),
        }))
        .unwrap();
        assert!(!json.contains(CHILD_LIBRARY), "{json}");
        let Answer::Refused { kind, reason } = serde_json::from_str(&json).unwrap() else {
            panic!("{json}");
        };
        let e = refusal(PathBuf::from("/p/libx.so"), kind, reason);
        assert_eq!(
            e.to_string(),
            "/p/libx.so is not a dsh plugin: it exports no abi_stable root module"
        );
    }

    #[test]
    fn what_the_child_said_is_one_printable_line() {
        assert_eq!(
            said(b"\n  \x1b]52;c;ZXZpbA==\x07boom \xe2\x80\xae here\nmore"),
            ": ]52;c;ZXZpbA==boom  here"
        );
        assert_eq!(said(b""), "");
    }
}
