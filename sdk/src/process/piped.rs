//! A long-lived child with pipes (an MCP server, a language server): its
//! stdin, stdout and stderr as tokio pipes, its exit awaited through a
//! pidfd (no thread parked on it, no SIGCHLD handler), its process group
//! killed when the handle is dropped, and always reaped.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::net::unix::pipe;

/// A running child and its pipes. Take the pipes out (`stdin.take()`) to
/// hand them to a protocol; close stdin to tell the child input ended.
pub struct Piped {
    /// The child's stdin.
    pub stdin: Option<pipe::Sender>,
    /// The child's stdout.
    pub stdout: Option<pipe::Receiver>,
    /// The child's stderr.
    pub stderr: Option<pipe::Receiver>,
    /// Taken only by the drop, which reaps it.
    child: Option<Child>,
    pid: u32,
    /// Readable once the child has exited (none on a kernel without
    /// pidfds: then the exit is awaited on a blocking thread).
    exited: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
}

/// Starts `command` in a process group of its own with its three standard
/// streams piped. Must be called inside the plugin's runtime, on its own
/// thread (a task, not a blocking closure): the child is killed when that
/// thread ends (`PR_SET_PDEATHSIG`), so a child that ignores its closed
/// stdin cannot outlive the plugin even when the host exits without
/// dropping the handle.
pub fn spawn_piped(mut command: Command) -> io::Result<Piped> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and makes
    // only async-signal-safe calls (prctl, getppid, _exit).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() as u32 != parent {
                // The parent died before the signal was armed.
                libc::_exit(137);
            }
            Ok(())
        })
    };
    let mut child = command.spawn()?;
    let exited = super::pidfd_open(child.id()).and_then(|fd| {
        // SAFETY: the `OwnedFd` moves into the `AsyncFd`, which owns it
        // (open, the same description, the same number) until dropped.
        unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.ok()
    });
    let stdin = child
        .stdin
        .take()
        .map(|s| pipe::Sender::from_owned_fd(s.into()));
    let stdout = child
        .stdout
        .take()
        .map(|s| pipe::Receiver::from_owned_fd(s.into()));
    let stderr = child
        .stderr
        .take()
        .map(|s| pipe::Receiver::from_owned_fd(s.into()));
    Ok(Piped {
        stdin: stdin.transpose()?,
        stdout: stdout.transpose()?,
        stderr: stderr.transpose()?,
        pid: child.id(),
        child: Some(child),
        exited,
        status: None,
    })
}

impl Piped {
    /// The child's process id (also its process group's).
    pub fn id(&self) -> u32 {
        self.pid
    }

    fn child(&mut self) -> io::Result<&mut Child> {
        self.child
            .as_mut()
            .ok_or_else(|| io::Error::other("the child was handed to its reaper"))
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
        } else {
            // No pidfd: poll, a child exiting takes no long.
            while self.child()?.try_wait()?.is_none() {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        let status = self.child()?.wait()?;
        self.status = Some(status);
        Ok(status)
    }

    /// Kills the child's process group (nothing once it was reaped: its
    /// id may belong to another process by then).
    pub fn kill(&mut self) {
        if self.status.is_some() {
            return;
        }
        if let Ok(Some(status)) = self.child().and_then(|c| c.try_wait()) {
            self.status = Some(status);
            return;
        }
        // Not reaped, so the id is still the child's (a zombie at worst).
        if let Ok(pgid) = i32::try_from(self.pid) {
            // SAFETY: kill takes a process group id and a signal.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
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
        let Some(mut child) = self.child.take() else {
            return;
        };
        let mut reap = move || {
            let _ = child.wait();
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(reap)),
            Err(_) => reap(),
        }
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

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(script);
        c
    }

    #[test]
    fn a_line_goes_through_and_the_exit_is_awaited() {
        run(async {
            let mut p = spawn_piped(Command::new("cat")).unwrap();
            let mut stdin = p.stdin.take().unwrap();
            stdin.write_all(b"hello\n").await.unwrap();
            drop(stdin);
            let mut out = String::new();
            p.stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .await
                .unwrap();
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
}
