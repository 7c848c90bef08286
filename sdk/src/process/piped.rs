//! A long-lived child with pipes (an MCP server, a language server): its
//! stdin, stdout and stderr as tokio pipes, its exit awaited through a
//! pidfd (no thread parked on it, no SIGCHLD handler), its process group
//! killed when the handle is dropped, and always reaped. Started without
//! copying the host (spawn.rs).

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::net::unix::pipe;

use super::launch::Launch;
use super::spawn::{pipe, spawn, ChildFds};

/// A running child and its pipes. Take the pipes out (`stdin.take()`) to
/// hand them to a protocol; close stdin to tell the child input ended.
pub struct Piped {
    /// The child's stdin.
    pub stdin: Option<pipe::Sender>,
    /// The child's stdout.
    pub stdout: Option<pipe::Receiver>,
    /// The child's stderr.
    pub stderr: Option<pipe::Receiver>,
    pid: libc::pid_t,
    /// Readable once the child has exited (none on a kernel without
    /// pidfds: then the exit is polled).
    exited: Option<AsyncFd<OwnedFd>>,
    /// Set once reaped: from then on the pid may be another process's.
    status: Option<ExitStatus>,
}

/// Starts `launch` in a process group of its own with its three standard
/// streams piped. Must be called inside the plugin's runtime, on its own
/// thread (a task, not a blocking closure): the child is killed when that
/// thread ends (`PR_SET_PDEATHSIG`), so a child that ignores its closed
/// stdin cannot outlive the plugin even when the host exits without
/// dropping the handle. A program that cannot be found or run is an
/// error here.
pub fn spawn_piped(launch: Launch) -> io::Result<Piped> {
    let (stdin_read, stdin_write) = pipe()?;
    let (stdout_read, stdout_write) = pipe()?;
    let (stderr_read, stderr_write) = pipe()?;
    let child_ends = ChildFds {
        stdin: stdin_read,
        stdout: stdout_write,
        stderr: stderr_write,
    };
    let pid = spawn(&launch, &child_ends)?;
    drop(child_ends);
    // From here on a failure (or a panic) drops it: killed and reaped.
    let mut piped = Piped {
        stdin: None,
        stdout: None,
        stderr: None,
        pid,
        exited: None,
        status: None,
    };
    piped.exited = u32::try_from(pid)
        .ok()
        .and_then(super::pidfd_open)
        .and_then(|fd| {
            // SAFETY: the `OwnedFd` moves into the `AsyncFd`, which owns it
            // (open, the same description, the same number) until dropped.
            unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.ok()
        });
    piped.stdin = Some(pipe::Sender::from_owned_fd(stdin_write)?);
    piped.stdout = Some(pipe::Receiver::from_owned_fd(stdout_read)?);
    piped.stderr = Some(pipe::Receiver::from_owned_fd(stderr_read)?);
    Ok(piped)
}

/// `waitpid` of `pid`; `None` while it runs (with `WNOHANG`).
fn reap(pid: libc::pid_t, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes the status of our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, flags) };
        match r {
            0 => return Ok(None),
            r if r == pid => return Ok(Some(ExitStatus::from_raw(status))),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

impl Piped {
    /// The child's process id (also its process group's).
    pub fn id(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = reap(self.pid, libc::WNOHANG)?;
        }
        Ok(self.status)
    }

    /// Waits for the child to exit and reaps it.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        if let Some(exited) = &self.exited {
            // A pidfd turns readable when its process exits.
            let mut ready = exited.readable().await?;
            ready.retain_ready();
        }
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(status);
            }
            // No pidfd: poll, a child exiting takes no long.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Kills the child and its process group, a group whose leader has
    /// exited included (nothing once the child was reaped: its id may
    /// belong to another process by then).
    pub fn kill(&mut self) {
        if self.status.is_some() {
            return;
        }
        // Not reaped, so the id is still the child's (a zombie at worst),
        // and no other group can take it.
        // SAFETY: kill takes a process (group) id and a signal.
        unsafe {
            libc::kill(-self.pid, libc::SIGKILL);
            libc::kill(self.pid, libc::SIGKILL);
        }
    }
}

impl Drop for Piped {
    /// Kills the group and reaps the child (on the blocking pool, so a
    /// drop never waits).
    fn drop(&mut self) {
        self.kill();
        if self.status.is_some() {
            return;
        }
        // Reaped on the blocking pool, which the plugin's runtime joins
        // before the library can go (a thread of our own could outlive it
        // and run unmapped code); outside a runtime, here and now (the
        // group was just sent SIGKILL).
        // A task dropped unrun (the runtime shutting down) still reaps:
        // the guard's own drop does it.
        let reaper = Reaper(self.pid);
        let reap_now = move || drop(reaper);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(reap_now)),
            Err(_) => reap_now(),
        }
    }
}

/// Reaps a killed child when dropped.
struct Reaper(libc::pid_t);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = reap(self.0, 0);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// Everything the child writes to stdout.
    async fn stdout_of(p: &mut Piped) -> String {
        let mut out = String::new();
        p.stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .await
            .unwrap();
        out
    }

    fn sh(script: &str) -> Launch {
        let mut c = Launch::new("sh");
        c.arg("-c").arg(script);
        c
    }

    #[test]
    fn a_line_goes_through_and_the_exit_is_awaited() {
        run(async {
            let mut p = spawn_piped(Launch::new("cat")).unwrap();
            let mut stdin = p.stdin.take().unwrap();
            stdin.write_all(b"hello\n").await.unwrap();
            drop(stdin);
            let out = stdout_of(&mut p).await;
            assert_eq!(out, "hello\n");
            assert!(p.wait().await.unwrap().success());
            assert!(p.wait().await.unwrap().success(), "answered again");
        });
    }

    #[test]
    fn stderr_and_the_exit_code_come_back() {
        run(async {
            let mut p = spawn_piped(sh("echo oops >&2; exit 3")).unwrap();
            let mut err = String::new();
            p.stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .await
                .unwrap();
            assert_eq!(err, "oops\n");
            assert_eq!(p.wait().await.unwrap().code(), Some(3));
        });
    }

    /// Whether process `pid` still runs (a zombie has stopped).
    fn running(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().to_owned())
            })
            .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
    }

    #[test]
    fn a_dropped_child_takes_its_group_with_it() {
        run(async {
            // A grandchild that ignores SIGTERM and outlives its shell.
            let mut p = spawn_piped(sh("trap '' TERM; sleep 1000 & echo $!; wait")).unwrap();
            let mut stdout = p.stdout.take().unwrap();
            let mut line = Vec::new();
            let mut byte = [0u8; 1];
            while stdout.read_exact(&mut byte).await.is_ok() && byte[0] != b'\n' {
                line.push(byte[0]);
            }
            let grandchild: i32 = String::from_utf8(line).unwrap().trim().parse().unwrap();
            let shell = i32::try_from(p.id()).unwrap();
            assert!(running(grandchild) && running(shell));
            drop(p);
            let deadline = Instant::now() + Duration::from_secs(10);
            while (running(grandchild) || running(shell)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(!running(grandchild) && !running(shell));
        });
    }

    #[test]
    fn a_killed_child_is_awaited() {
        run(async {
            let mut p = spawn_piped(sh("sleep 1000")).unwrap();
            p.kill();
            let status = p.wait().await.unwrap();
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(9)
            );
            p.kill(); // reaped: nothing to kill
        });
    }

    #[test]
    fn a_missing_program_is_an_error_of_the_spawn() {
        run(async {
            let e = spawn_piped(Launch::new("dsh-no-such-program"))
                .err()
                .unwrap();
            assert_eq!(e.kind(), io::ErrorKind::NotFound);
            let e = spawn_piped(Launch::new("/nonexistent/prog")).err().unwrap();
            assert_eq!(e.kind(), io::ErrorKind::NotFound);
            let mut bad_dir = Launch::new("true");
            bad_dir.current_dir("/nonexistent");
            assert!(spawn_piped(bad_dir).is_err());
        });
    }

    #[test]
    fn the_child_gets_exactly_its_environment_directory_and_default_signals() {
        run(async {
            let mut l = Launch::new("sh");
            l.retain_env(|k| k == "PATH")
                .env("ONLY", "this")
                .current_dir("/tmp")
                .arg("-c")
                .arg("env | sort | grep -v '^PWD=' | grep -v '^SHLVL=' | grep -v '^_='; pwd; cat /proc/self/status | grep ^SigIgn");
            let mut p = spawn_piped(l).unwrap();
            let out = stdout_of(&mut p).await;
            let lines: Vec<&str> = out.lines().collect();
            assert!(
                lines[0] == "ONLY=this" && lines[1].starts_with("PATH="),
                "{out}"
            );
            assert_eq!(lines[2], "/tmp");
            // cat's dispositions: SIGPIPE back to its default, although
            // this process (a Rust program) ignores it.
            let ignored =
                u64::from_str_radix(lines[3].trim_start_matches("SigIgn:").trim(), 16).unwrap();
            assert_eq!(ignored & (1 << (libc::SIGPIPE - 1)), 0, "{out}");
            assert!(p.wait().await.unwrap().success());
        });
    }

    #[test]
    fn the_child_dies_with_the_thread_that_started_it() {
        let pid = std::thread::spawn(|| {
            run(async {
                let p = spawn_piped(Launch::new("sleep").arg("1000").clone()).unwrap();
                let pid = i32::try_from(p.id()).unwrap();
                // Never dropped: only the thread's end can stop it.
                std::mem::forget(p);
                pid
            })
        })
        .join()
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while running(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!running(pid));
        let mut status = 0;
        // SAFETY: reaps our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert_eq!(libc::WTERMSIG(status), libc::SIGKILL);
    }
}
