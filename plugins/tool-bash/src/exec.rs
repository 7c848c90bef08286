//! Running a spawned command to its end: both pipes and the child's exit
//! are waited on with `poll` (a pidfd where the kernel has one), so the
//! call returns at its timeout or cancel even while a descendant the
//! containment could not reach still holds a pipe.

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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

/// The process group a command leads (its first process starts a session
/// of its own, so the group's id is its pid): the whole command, and in a
/// PID namespace everything in it.
///
/// It is signalled only while its leader is unreaped. Until then the
/// leader (running or a zombie) holds its pid, so no other process can get
/// that id as its process group; once it is reaped and the rest of its
/// group is gone, the id may be reused by an unrelated process group, which
/// a `kill(-pgid)` from a harness running as root would kill. Reaping
/// happens under the same lock as signalling ([`Group::reap_if_exited`]),
/// so `job_kill` or the unload racing with the command's end never signals
/// a reaped id.
pub struct Group {
    pgid: i32,
    /// Whether the leader is still unreaped.
    live: Mutex<bool>,
}

impl Group {
    /// The group `pid` (a child of this process, not yet reaped) leads.
    pub fn new(pid: i32) -> Group {
        Group {
            pgid: pid,
            live: Mutex::new(pid > 0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, bool> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// SIGKILL to the whole group while its leader is unreaped; nothing
    /// once it was reaped.
    pub fn kill(&self) {
        let live = self.lock();
        if *live {
            // SAFETY: signalling the group our unreaped child leads.
            unsafe { libc::kill(-self.pgid, libc::SIGKILL) };
        }
    }

    /// Whether the leader is still unreaped (the group may be signalled).
    #[cfg(test)]
    pub fn is_live(&self) -> bool {
        *self.lock()
    }

    /// When the leader has exited: kills what is left of its group (while
    /// the zombie still holds the id), then reaps it, both under the lock.
    /// `None` while it runs.
    fn reap_if_exited(&self, child: &mut Child) -> io::Result<Option<ExitStatus>> {
        if !exited(self.pgid)? {
            return Ok(None);
        }
        let mut live = self.lock();
        if *live {
            // SAFETY: the leader is a zombie: the id is still ours.
            unsafe { libc::kill(-self.pgid, libc::SIGKILL) };
        }
        // A zombie is reaped at once.
        let status = child.try_wait()?;
        if status.is_some() {
            *live = false;
        }
        Ok(status)
    }
}

/// Whether child `pid` has exited, without reaping it (`WNOWAIT`).
fn exited(pid: i32) -> io::Result<bool> {
    // SAFETY: a zeroed siginfo_t is a valid value for waitid to fill.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid on our own child with a valid siginfo_t.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::Interrupted => Ok(false),
            _ => Err(e),
        };
    }
    // SAFETY: waitid filled `info` (si_pid is 0 when nothing exited).
    Ok(unsafe { info.si_pid() } != 0)
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
/// closed (or a grace period passed), killing its group (`group`, which
/// `child` leads) at `deadline` or on `cancel`, and what is left of it
/// when the command ends.
pub fn pump(
    mut child: Child,
    group: &Group,
    deadline: Option<Instant>,
    cancel: &Cancel,
    mut sink: impl FnMut(Stream, &[u8]),
) -> io::Result<Ended> {
    let pid = child.id() as i32;
    debug_assert_eq!(pid, group.pgid);
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
    let exit_fd = u32::try_from(pid)
        .ok()
        .and_then(dsh_sdk::process::pidfd_open);
    let tick = if exit_fd.is_some() { 50 } else { 5 };
    let mut buf = vec![0u8; 64 * 1024];
    let mut status: Option<ExitStatus> = None;
    let mut timed_out = false;
    let mut killed = false;
    let mut grace_until: Option<Instant> = None;
    loop {
        if status.is_none() {
            if let Some(st) = group.reap_if_exited(&mut child)? {
                // Anything left of the command's group went with it.
                status = Some(st);
                grace_until = Some(Instant::now() + GRACE);
            } else if !killed && (cancel.is_set() || deadline.is_some_and(|d| Instant::now() >= d))
            {
                timed_out = !cancel.is_set();
                group.kill();
                // Reaped on a later round, once it is gone.
                killed = true;
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
        let until = [
            deadline.filter(|_| status.is_none() && !killed),
            grace_until,
        ]
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    /// `sh -c script` leading a process group of its own, as a command does.
    fn spawn(script: &str) -> (Child, Group) {
        let child = Command::new("sh")
            .args(["-c", script])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let group = Group::new(child.id() as i32);
        (child, group)
    }

    #[test]
    fn a_reaped_group_is_no_longer_signalled() {
        let (child, group) = spawn("echo hi");
        assert!(group.is_live());
        let mut out = Vec::new();
        let ended = pump(child, &group, None, &Cancel::default(), |_, b| {
            out.extend_from_slice(b)
        })
        .unwrap();
        assert_eq!(
            (ended.status.code(), out.as_slice()),
            (Some(0), &b"hi\n"[..])
        );
        // Reaped: its id may belong to another group by now, so `kill`
        // (job_kill, the unload) sends nothing.
        assert!(!group.is_live());
        group.kill();
    }

    #[test]
    fn a_cancel_kills_the_whole_group_then_reaps_it() {
        // A background child holds the pipes: it dies with the group.
        let (child, group) = spawn("sleep 30 & echo up; sleep 30");
        let cancel = Cancel::default();
        let mut seen = false;
        let ended = pump(child, &group, None, &cancel.clone(), |_, b| {
            seen |= b.starts_with(b"up");
            cancel.set();
        })
        .unwrap();
        assert!(seen);
        assert_eq!(ended.status.signal(), Some(libc::SIGKILL));
        assert!(!ended.timed_out);
        assert!(!group.is_live());
    }
}
