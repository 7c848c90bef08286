//! Landlock for the confined inspector (see [`crate::confine`]): no file may
//! be created, written, truncated, renamed, linked or removed anywhere, no
//! device may be `ioctl`ed (ABI 5: no `TIOCSTI`), no TCP port bound or
//! connected (ABI 4), and no signal sent or abstract socket reached
//! outside the process (ABI 6). Reading stays allowed: `dlopen` needs the
//! library's dependencies. Applies to the calling process and everything
//! it starts; it cannot be undone. The mechanism is `dsh_confine::landlock`;
//! a kernel that knows fewer rights refuses what it knows.

use std::io;

use dsh_confine::landlock::{self, fs, net, scope, Handled, Ruleset};

/// Everything the inspector is refused (no rule allows any of it back).
const REFUSED: Handled = Handled {
    fs: fs::CHANGES | fs::IOCTL_DEV,
    net: net::BIND_TCP | net::CONNECT_TCP,
    scoped: scope::ABSTRACT_UNIX_SOCKET | scope::SIGNAL,
};

/// Restricts this process as the module doc says, with every right the
/// running kernel's ABI knows. Sets `no_new_privs`. Returns the ABI
/// version used.
pub fn forbid_changes() -> io::Result<u32> {
    let abi = landlock::abi().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            "Landlock is not available (a kernel before 5.13, or Landlock not in the lsm= list)",
        )
    })?;
    // No rules: every handled right is refused everywhere.
    Ruleset::new(abi, REFUSED)?.restrict_self()?;
    Ok(abi)
}
