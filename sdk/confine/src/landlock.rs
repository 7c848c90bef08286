//! Landlock: the ABI query, every access right (named once, here), and a
//! ruleset — created for the rights the running kernel knows, with path
//! rules added in the parent or, for a path given as a C string, in a
//! forked child, then applied to the calling process for good.
//!
//! A ruleset *handles* some rights: those are refused everywhere except
//! beneath the paths a rule grants them on. Rights it does not handle stay
//! as they were. The constants are the kernel's
//! (`include/uapi/linux/landlock.h`).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// Filesystem rights (`LANDLOCK_ACCESS_FS_*`), with the ABI that added
/// the later ones.
pub mod fs {
    /// Execute a file.
    pub const EXECUTE: u64 = 1 << 0;
    /// Open a file for writing.
    pub const WRITE_FILE: u64 = 1 << 1;
    /// Open a file for reading.
    pub const READ_FILE: u64 = 1 << 2;
    /// List a directory.
    pub const READ_DIR: u64 = 1 << 3;
    /// Remove (or rename away) a directory.
    pub const REMOVE_DIR: u64 = 1 << 4;
    /// Remove (or rename away) a file.
    pub const REMOVE_FILE: u64 = 1 << 5;
    /// Create a character device.
    pub const MAKE_CHAR: u64 = 1 << 6;
    /// Create a directory.
    pub const MAKE_DIR: u64 = 1 << 7;
    /// Create a regular file.
    pub const MAKE_REG: u64 = 1 << 8;
    /// Create a unix socket.
    pub const MAKE_SOCK: u64 = 1 << 9;
    /// Create a named pipe.
    pub const MAKE_FIFO: u64 = 1 << 10;
    /// Create a block device.
    pub const MAKE_BLOCK: u64 = 1 << 11;
    /// Create a symbolic link.
    pub const MAKE_SYM: u64 = 1 << 12;
    /// Link or rename a file into another directory (ABI 2).
    pub const REFER: u64 = 1 << 13;
    /// Truncate a file (ABI 3).
    pub const TRUNCATE: u64 = 1 << 14;
    /// `ioctl` on a device (ABI 5: `TIOCSTI` among them).
    pub const IOCTL_DEV: u64 = 1 << 15;

    /// Every right that changes something on disk: writing, truncating,
    /// creating, removing, linking and renaming (not reading, executing or
    /// device `ioctl`s).
    pub const CHANGES: u64 = WRITE_FILE
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_CHAR
        | MAKE_DIR
        | MAKE_REG
        | MAKE_SOCK
        | MAKE_FIFO
        | MAKE_BLOCK
        | MAKE_SYM
        | REFER
        | TRUNCATE;

    /// The rights of [`CHANGES`] a rule on a single file can grant
    /// (writing and truncating it; the rest are rights on a directory).
    pub const FILE_CHANGES: u64 = WRITE_FILE | TRUNCATE;

    /// The rights ABI `abi` knows.
    pub fn known(abi: u32) -> u64 {
        let first = EXECUTE | WRITE_FILE | READ_FILE | READ_DIR | REMOVE_DIR | REMOVE_FILE;
        let make = MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO | MAKE_BLOCK | MAKE_SYM;
        super::since(abi, 1, first | make)
            | super::since(abi, 2, REFER)
            | super::since(abi, 3, TRUNCATE)
            | super::since(abi, 5, IOCTL_DEV)
    }
}

/// Network rights (`LANDLOCK_ACCESS_NET_*`, ABI 4).
pub mod net {
    /// Bind a TCP socket to a port.
    pub const BIND_TCP: u64 = 1 << 0;
    /// Connect a TCP socket to a port.
    pub const CONNECT_TCP: u64 = 1 << 1;

    /// The rights ABI `abi` knows.
    pub fn known(abi: u32) -> u64 {
        super::since(abi, 4, BIND_TCP | CONNECT_TCP)
    }
}

/// Scopes (`LANDLOCK_SCOPE_*`, ABI 6): what is refused outside the
/// restricted process and its descendants.
pub mod scope {
    /// Connecting to an abstract unix socket made outside.
    pub const ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
    /// Sending a signal to a process outside.
    pub const SIGNAL: u64 = 1 << 1;

    /// The scopes ABI `abi` knows.
    pub fn known(abi: u32) -> u64 {
        super::since(abi, 6, ABSTRACT_UNIX_SOCKET | SIGNAL)
    }
}

/// `rights` if ABI `abi` has them (they came with ABI `added`), else none.
fn since(abi: u32, added: u32, rights: u64) -> u64 {
    if abi >= added {
        rights
    } else {
        0
    }
}

const CREATE_RULESET_VERSION: u32 = 1 << 0;
const RULE_PATH_BENEATH: libc::c_int = 1;

/// `struct landlock_ruleset_attr`; the kernel reads as many fields as the
/// size passed says (by ABI version).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// `struct landlock_path_beneath_attr`.
#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// The running kernel's Landlock ABI version, `None` without Landlock (a
/// kernel before 5.13, or Landlock not in the `lsm=` list).
pub fn abi() -> Option<u32> {
    // SAFETY: the version query takes no pointer (NULL, size 0).
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).ok().filter(|v| *v > 0)
}

/// The rights a ruleset handles.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Handled {
    /// Filesystem rights ([`fs`]).
    pub fs: u64,
    /// Network rights ([`net`]).
    pub net: u64,
    /// Scopes ([`scope`]).
    pub scoped: u64,
}

/// A Landlock ruleset (its descriptor, closed when dropped).
pub struct Ruleset {
    fd: OwnedFd,
    handled_fs: u64,
}

impl Ruleset {
    /// A ruleset handling the rights of `handled` that ABI `abi` (from
    /// [`abi`]) knows; the others are left out, so a kernel that knows
    /// fewer refuses less rather than refusing the ruleset.
    pub fn new(abi: u32, handled: Handled) -> io::Result<Ruleset> {
        let attr = RulesetAttr {
            handled_access_fs: handled.fs & fs::known(abi),
            handled_access_net: handled.net & net::known(abi),
            scoped: handled.scoped & scope::known(abi),
        };
        // Only the fields this kernel knows: a larger size with unknown
        // fields set would be refused.
        let size = match abi {
            1..=3 => 8usize,
            4 | 5 => 16,
            _ => std::mem::size_of::<RulesetAttr>(),
        };
        // SAFETY: `attr` is a valid ruleset attribute of at least `size`
        // bytes.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                size,
                0u32,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = RawFd::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
        Ok(Ruleset {
            // SAFETY: a fresh descriptor nobody else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            handled_fs: attr.handled_access_fs,
        })
    }

    /// Grants `rights` (filesystem rights, only those handled count)
    /// beneath `path`: a directory, or a single file for file rights
    /// ([`fs::FILE_CHANGES`]). A missing path is an `ENOENT` error.
    pub fn allow(&self, path: &Path, rights: u64) -> io::Result<()> {
        let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        self.raw().allow_beneath(&path, rights)
    }

    /// The filesystem rights this ruleset handles (what a rule on a
    /// directory grants to allow everything it refuses).
    pub fn handled_fs(&self) -> u64 {
        self.handled_fs
    }

    /// The copyable view a forked child uses (valid while this ruleset
    /// lives).
    pub fn raw(&self) -> RawRuleset {
        RawRuleset {
            fd: self.fd.as_raw_fd(),
            handled_fs: self.handled_fs,
        }
    }

    /// Applies the ruleset to the calling process ([`RawRuleset::restrict_self`]).
    pub fn restrict_self(&self) -> io::Result<()> {
        self.raw().restrict_self()
    }
}

/// A ruleset's descriptor and handled filesystem rights, copied into a
/// forked child; the [`Ruleset`] it came from keeps the descriptor open.
/// Its methods are raw system calls that never allocate: safe between
/// `fork` and `exec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawRuleset {
    /// The ruleset descriptor.
    pub fd: RawFd,
    /// The filesystem rights the ruleset handles.
    pub handled_fs: u64,
}

impl RawRuleset {
    /// Grants `rights` beneath `path` (a directory, or a single file for
    /// file rights). A rule holds the inode the path leads to now, so a
    /// child that mounts something fresh adds its rule after mounting.
    pub fn allow_beneath(&self, path: &CStr, rights: u64) -> io::Result<()> {
        // SAFETY: a NUL-terminated path.
        let parent = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if parent < 0 {
            return Err(io::Error::last_os_error());
        }
        let rule = PathBeneath {
            allowed_access: rights,
            parent_fd: parent,
        };
        // SAFETY: a valid rule for the call; the descriptors are integers.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                self.fd,
                RULE_PATH_BENEATH,
                &rule as *const PathBeneath,
                0u32,
            )
        };
        let err = io::Error::last_os_error();
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(parent) };
        if rc < 0 {
            return Err(err);
        }
        Ok(())
    }

    /// Sets [`crate::no_new_privs`], then applies the ruleset to the
    /// calling process and everything it starts, for good.
    pub fn restrict_self(&self) -> io::Result<()> {
        crate::no_new_privs()?;
        // SAFETY: integer arguments.
        if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, self.fd, 0u32) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::in_forked_child;
    use std::ffi::CString;

    #[test]
    fn known_rights_grow_with_the_abi() {
        assert_eq!(fs::known(1), (1 << 13) - 1);
        assert_eq!(fs::known(1) & (fs::REFER | fs::TRUNCATE | fs::IOCTL_DEV), 0);
        assert_eq!(fs::known(3) & fs::CHANGES, fs::CHANGES);
        assert_eq!(fs::known(5) & fs::IOCTL_DEV, fs::IOCTL_DEV);
        assert_eq!(net::known(3), 0);
        assert_eq!(scope::known(6), scope::ABSTRACT_UNIX_SOCKET | scope::SIGNAL);
    }

    #[test]
    fn a_child_under_the_ruleset_writes_beneath_its_rule_and_nowhere_else() {
        let Some(abi) = abi() else {
            eprintln!("no Landlock on this kernel: nothing to test");
            return;
        };
        let base = std::env::temp_dir().join(format!("dsh-confine-test-{}", std::process::id()));
        let allowed = base.join("allowed");
        let refused = base.join("refused");
        std::fs::create_dir_all(&allowed).unwrap();
        std::fs::create_dir_all(&refused).unwrap();
        let ruleset = Ruleset::new(
            abi,
            Handled {
                fs: fs::CHANGES,
                ..Handled::default()
            },
        )
        .unwrap();
        ruleset.allow(&allowed, ruleset.handled_fs()).unwrap();
        let raw = ruleset.raw();
        let inside =
            CString::new(allowed.join("new").into_os_string().into_encoded_bytes()).unwrap();
        let outside =
            CString::new(refused.join("new").into_os_string().into_encoded_bytes()).unwrap();
        let code = in_forked_child(|| {
            if raw.restrict_self().is_err() {
                return 10;
            }
            let create = |path: &CString| {
                // SAFETY: a NUL-terminated path; the descriptor is closed
                // at once.
                unsafe {
                    let fd = libc::open(
                        path.as_ptr(),
                        libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC,
                        0o600,
                    );
                    if fd >= 0 {
                        libc::close(fd);
                    }
                    (fd >= 0, io::Error::last_os_error().raw_os_error())
                }
            };
            if !create(&inside).0 {
                return 11;
            }
            match create(&outside) {
                (false, Some(libc::EACCES)) => 0,
                (true, _) => 12,
                (false, _) => 13,
            }
        });
        let wrote_outside = refused.join("new").exists();
        let wrote_inside = allowed.join("new").exists();
        std::fs::remove_dir_all(&base).unwrap();
        assert_eq!(code, 0);
        assert!(wrote_inside && !wrote_outside);
    }
}
