//! The default bound on a command's processes (`maxProcesses`): small
//! enough that every background job and a foreground command at their
//! bound together leave the machine half of its process ids.
//!
//! Each command's PID namespace gets `pid_max = maxProcesses`; up to
//! `maxJobs` jobs run at once per agent, besides foreground commands. With
//! `kernel.pid_max` of the harness's namespace `P` and `maxJobs` `J`, the
//! default is `min(1024, P / (J + 2) / 2)`, and at least the kernel's
//! smallest `pid_max` (301). With the kernel's usual `P = 32768` and
//! `J = 16` that is 910: 18 commands at their bound hold 16,380 ids.

use std::path::Path;

/// The kernel's smallest `pid_max`.
pub const MIN_PROCESSES: u32 = 301;

/// The default's ceiling: plenty for a build or a test suite.
pub const MAX_DEFAULT_PROCESSES: u32 = 1024;

/// The kernel's default `pid_max`, assumed when it cannot be read.
const KERNEL_DEFAULT_PID_MAX: u32 = 32768;

/// Where this namespace's `pid_max` is.
const PID_MAX: &str = "/proc/sys/kernel/pid_max";

/// The default `maxProcesses` for `max_jobs` jobs on this machine (see
/// the module doc).
pub fn default_max_processes(max_jobs: usize) -> u32 {
    default_for(pid_max(Path::new(PID_MAX)), max_jobs)
}

/// `min(1024, pid_max / (max_jobs + 2) / 2)`, at least [`MIN_PROCESSES`].
fn default_for(pid_max: u32, max_jobs: usize) -> u32 {
    let commands = u32::try_from(max_jobs.saturating_add(2)).unwrap_or(u32::MAX);
    (pid_max / commands / 2).clamp(MIN_PROCESSES, MAX_DEFAULT_PROCESSES)
}

/// The `pid_max` in `path`, or the kernel's default when it cannot be
/// read (logged).
fn pid_max(path: &Path) -> u32 {
    let read = std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|s| s.trim().parse::<u32>().map_err(|e| e.to_string()));
    match read {
        Ok(n) => n,
        Err(e) => {
            dsh_sdk::tracing::warn!(
                "cannot read {}: {e}; assuming the kernel's default {KERNEL_DEFAULT_PID_MAX} for the default maxProcesses",
                path.display()
            );
            KERNEL_DEFAULT_PID_MAX
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_leaves_half_the_ids_to_the_machine() {
        assert_eq!(default_for(32768, 16), 910);
        assert!(18 * default_for(32768, 16) <= 32768 / 2);
        // A large pid_max: the ceiling.
        assert_eq!(default_for(4_194_304, 16), MAX_DEFAULT_PROCESSES);
        // Many jobs on a small machine: the kernel's floor.
        assert_eq!(default_for(32768, 100), MIN_PROCESSES);
        assert_eq!(default_for(32768, usize::MAX), MIN_PROCESSES);
    }

    #[test]
    fn an_unreadable_pid_max_is_the_kernels_default() {
        assert_eq!(
            pid_max(Path::new("/nonexistent/pid_max")),
            KERNEL_DEFAULT_PID_MAX
        );
        assert!(default_max_processes(16) >= MIN_PROCESSES);
    }
}
