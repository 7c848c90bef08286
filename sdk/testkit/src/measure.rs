//! A child process's peak memory, for tests that bound it: the child runs
//! to its end and is reaped with `wait4`, whose resource usage holds the
//! largest resident set it ever had (`ru_maxrss`, counted by the kernel, so
//! no sampling can miss a short peak).

use std::io::Read;
use std::process::{Command, Stdio};
use std::thread::JoinHandle;

/// A finished child: how it ended, what it wrote and its peak memory.
#[derive(Debug)]
pub struct Measured {
    /// Its exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    /// Its standard output, decoded lossily.
    pub stdout: String,
    /// Its standard error, decoded lossily.
    pub stderr: String,
    /// Its peak resident set size in KiB (its own, and that of any of its
    /// children it waited for, whichever was larger).
    pub peak_kib: u64,
}

impl Measured {
    /// [`Measured::peak_kib`] in bytes.
    pub fn peak_bytes(&self) -> u64 {
        self.peak_kib * 1024
    }
}

/// Runs `c` to its end on a blocking thread, stdout and stderr piped and
/// read whole (stdin as `c` sets it), and measures it.
pub async fn run_measured(c: Command) -> Measured {
    tokio::task::spawn_blocking(move || measure(c))
        .await
        .unwrap_or_else(|e| panic!("the measured run panicked: {e}"))
}

/// Reads `pipe` to its end on a thread of its own (so neither pipe of the
/// child can fill up and stall it while the other is read).
fn drain(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            pipe.read_to_end(&mut bytes)
                .unwrap_or_else(|e| panic!("cannot read the child's output: {e}"));
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

// The child is reaped with `wait4` (for its resource usage), which clippy
// cannot see: std's `Child` is never waited for.
#[allow(clippy::zombie_processes)]
fn measure(mut c: Command) -> Measured {
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"));
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let pid = libc::pid_t::try_from(child.id())
        .unwrap_or_else(|_| panic!("pid {} is out of range", child.id()));
    let mut status = 0;
    // SAFETY: `rusage` is plain integers, so all zeroes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is this process's own child, not yet reaped (std's
    // `Child` never waited for it); both pointers are valid for the call.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(
        reaped,
        pid,
        "wait4 {pid}: {}",
        std::io::Error::last_os_error()
    );
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let peak_kib = u64::try_from(usage.ru_maxrss)
        .unwrap_or_else(|_| panic!("a negative peak: {}", usage.ru_maxrss));
    Measured {
        code,
        stdout: stdout
            .join()
            .unwrap_or_else(|_| panic!("the stdout reader panicked")),
        stderr: stderr
            .join()
            .unwrap_or_else(|_| panic!("the stderr reader panicked")),
        peak_kib,
    }
}
