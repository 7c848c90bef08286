//! The `host` service: the one service the host itself provides to every
//! plugin (no plugin row provides it). Its name and methods live here, in
//! the boundary layer, so the host and the SDK spell them once.

/// The service name.
pub const NAME: &str = "host";
/// The process arguments after the host's own (`Vec<String>`).
pub const ARGS: &str = "args";
/// Ends the process with `{code}` once the generation has stopped.
pub const EXIT: &str = "exit";
/// `{home, protected, cwd, version, pid}` of this host.
pub const INFO: &str = "info";
/// Router statistics (messages, calls, listeners).
pub const STATS: &str = "stats";
/// Writes `{text}` to stdout.
pub const PRINT: &str = "print";
/// Writes `{text}` to stderr.
pub const EPRINT: &str = "eprint";

/// Every method of the service.
pub const METHODS: [&str; 6] = [ARGS, EXIT, INFO, STATS, PRINT, EPRINT];

#[cfg(test)]
mod tests {
    #[test]
    fn host_methods_are_unique() {
        let mut seen = super::METHODS.to_vec();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), super::METHODS.len());
    }
}
