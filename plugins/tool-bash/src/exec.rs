//! Running a spawned command to its end: both pipes and the child's exit
//! are waited on with `poll` (a pidfd where the kernel has one), so the
//! call returns at its timeout or cancel even while a descendant the
//! containment could not reach still holds a pipe.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long pipes may stay open after the command itself ended.
const GRACE: Duration = Duration::from_millis(500);

/// Which stream a chunk came from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Out,
    /// Standard error.
    Err,
}

/// Set to stop a run early (its call was cancelled).
#[derive(Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// Asks the run to stop.
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// How a run ended.
pub struct Ended {
    /// The command's exit status.
    pub status: ExitStatus,
    /// Killed at its deadline.
    pub timed_out: bool,
}

/// Kills the process group `pid` leads (the whole command: it and, in a
/// PID namespace, everything in it). The command's first process starts a
/// session of its own, so its process group id is its pid.
pub fn kill_group(pid: i32) {
    if pid > 0 {
        // SAFETY: signalling our own child's process group.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
}

fn pidfd(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a fresh descriptor.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn set_nonblocking(fd: i32) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
}

struct Pipe {
    stream: Stream,
    reader: Box<dyn Read + Send>,
    fd: i32,
}

/// Reads `child`'s pipes into `sink` until the command ended and its pipes
/// closed (or a grace period passed), killing its group at `deadline` or
/// on `cancel`.
pub fn pump(
    mut child: Child,
    deadline: Option<Instant>,
    cancel: &Cancel,
    mut sink: impl FnMut(Stream, &[u8]),
) -> io::Result<Ended> {
    let pid = child.id() as i32;
    let mut pipes: Vec<Pipe> = Vec::new();
    if let Some(p) = child.stdout.take() {
        let fd = p.as_raw_fd();
        pipes.push(Pipe {
            stream: Stream::Out,
            reader: Box::new(p),
            fd,
        });
    }
    if let Some(p) = child.stderr.take() {
        let fd = p.as_raw_fd();
        pipes.push(Pipe {
            stream: Stream::Err,
            reader: Box::new(p),
            fd,
        });
    }
    for p in &pipes {
        set_nonblocking(p.fd);
    }
    let exit_fd = pidfd(pid);
    let tick = if exit_fd.is_some() { 50 } else { 5 };
    let mut buf = vec![0u8; 64 * 1024];
    let mut status: Option<ExitStatus> = None;
    let mut timed_out = false;
    let mut grace_until: Option<Instant> = None;
    loop {
        if status.is_none() {
            if let Some(st) = child.try_wait()? {
                status = Some(st);
            } else if cancel.is_set() || deadline.is_some_and(|d| Instant::now() >= d) {
                timed_out = !cancel.is_set();
                kill_group(pid);
                status = Some(child.wait()?);
            }
            if status.is_some() {
                // Anything left of the command's group goes with it.
                kill_group(pid);
                grace_until = Some(Instant::now() + GRACE);
            }
        }
        if status.is_some()
            && (pipes.is_empty() || grace_until.is_some_and(|g| Instant::now() >= g))
        {
            break;
        }
        let mut fds: Vec<libc::pollfd> = pipes
            .iter()
            .map(|p| libc::pollfd {
                fd: p.fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        if let (None, Some(fd)) = (status, &exit_fd) {
            fds.push(libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let now = Instant::now();
        let until = [deadline.filter(|_| status.is_none()), grace_until]
            .into_iter()
            .flatten()
            .min();
        let wait = until
            .map(|u| u.saturating_duration_since(now))
            .unwrap_or(Duration::MAX)
            .min(Duration::from_millis(tick));
        // SAFETY: a valid array of pollfds of the length given.
        unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                wait.as_millis() as i32,
            )
        };
        let mut closed = Vec::new();
        for (i, p) in pipes.iter_mut().enumerate() {
            if fds[i].revents == 0 {
                continue;
            }
            // A bounded number of reads per round, so a command that never
            // stops writing still meets its deadline.
            for _ in 0..16 {
                match p.reader.read(&mut buf) {
                    Ok(0) => {
                        closed.push(i);
                        break;
                    }
                    Ok(n) => sink(p.stream, &buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        closed.push(i);
                        break;
                    }
                }
            }
        }
        for i in closed.into_iter().rev() {
            pipes.remove(i);
        }
    }
    let status = status.unwrap_or_else(|| ExitStatus::from_raw(libc::SIGKILL));
    Ok(Ended { status, timed_out })
}
