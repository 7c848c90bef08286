//! The kernel's own files a fenced command may not change or read, root
//! included.
//!
//! As root, the command is uid 0 of a user namespace whose uid 0 is the
//! host's (so root's files stay root's). Some kernel files check only that
//! uid, not a capability: the sysctls under `/proc/sys` (a write to
//! `kernel.core_pattern` names a program the kernel then runs as the
//! host's root at the next crash), `/proc/sysrq-trigger` (a write reboots
//! the machine). A fresh `/proc` has them writable, so they are covered:
//! [`READ_ONLY`] by a read-only bind, [`MASKED`] (kernel memory, keys,
//! timers and scheduler state of other processes, firmware tables, energy
//! counters, debugfs and tracefs) by an empty read-only cover nobody may
//! read. Docker covers the same paths. `/sys` is read-only as part of the
//! read-only tree.
//!
//! The covers cannot be undone from inside: the command has no
//! capabilities, and it cannot make a user namespace of its own in which
//! it would have some (its namespace allows none:
//! `user.max_user_namespaces = 0`, bubblewrap's `--disable-userns`).

use std::path::PathBuf;

/// Read-only again on the command's fresh `/proc`: a write there acts on
/// the whole machine.
pub const READ_ONLY: [&str; 5] = [
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/irq",
    "/proc/bus",
    "/proc/fs",
];

/// Covered by an empty read-only directory or file of mode 000.
pub const MASKED: [&str; 18] = [
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/kmsg",
    "/proc/kpagecgroup",
    "/proc/kpagecount",
    "/proc/kpageflags",
    "/proc/latency_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
    "/sys/kernel/debug",
    "/sys/kernel/tracing",
    // The host's POSIX message queues (the Landlock path shows the host's
    // `/dev`; its IPC namespace is its own, this mount is not).
    "/dev/mqueue",
];

/// The entries of [`READ_ONLY`] and [`MASKED`] this kernel has.
pub struct KernelFiles {
    /// Bound read-only over themselves.
    pub read_only: Vec<PathBuf>,
    /// Each covered by an empty read-only tmpfs of mode 000.
    pub masked_dirs: Vec<PathBuf>,
    /// Each covered by a read-only bind of an empty file of mode 000.
    pub masked_files: Vec<PathBuf>,
}

impl KernelFiles {
    /// Those that exist in this process's `/proc`, `/sys` and `/dev` (the
    /// command's fresh `/proc` is of the same kernel; a cover needs
    /// something to cover).
    pub fn here() -> KernelFiles {
        let existing = |paths: &[&str]| -> Vec<PathBuf> {
            paths
                .iter()
                .map(PathBuf::from)
                .filter(|p| p.symlink_metadata().is_ok())
                .collect()
        };
        let (masked_dirs, masked_files) = existing(&MASKED).into_iter().partition(|p| p.is_dir());
        KernelFiles {
            read_only: existing(&READ_ONLY),
            masked_dirs,
            masked_files,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sysctls_are_always_covered_and_only_existing_entries_are_listed() {
        let k = KernelFiles::here();
        assert!(k.read_only.contains(&PathBuf::from("/proc/sys")));
        for p in k
            .read_only
            .iter()
            .chain(&k.masked_dirs)
            .chain(&k.masked_files)
        {
            assert!(p.exists(), "{}", p.display());
        }
        assert!(k.masked_dirs.iter().all(|d| d.is_dir()));
        assert!(k.masked_files.iter().all(|f| !f.is_dir()));
    }
}
