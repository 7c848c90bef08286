//! What a child is started as: its program, arguments, whole environment
//! and working directory, written out (unlike `std::process::Command`,
//! whose cleared environment cannot be read back), so it can be started
//! without copying the parent (see spawn.rs).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// A child to start with [`crate::process::spawn_piped`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub(super) program: OsString,
    pub(super) args: Vec<OsString>,
    pub(super) env: BTreeMap<OsString, OsString>,
    pub(super) cwd: Option<PathBuf>,
}

impl Launch {
    /// `program` (a path, or a name looked up in the child's `PATH`) with
    /// this process's environment and directory.
    pub fn new(program: impl AsRef<OsStr>) -> Launch {
        Launch {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            env: std::env::vars_os().collect(),
            cwd: None,
        }
    }

    /// Adds an argument.
    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Launch {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut Launch
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets a variable.
    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Launch {
        self.env
            .insert(key.as_ref().to_owned(), value.as_ref().to_owned());
        self
    }

    /// Sets variables.
    pub fn envs<I, K, V>(&mut self, vars: I) -> &mut Launch
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        for (k, v) in vars {
            self.env(k, v);
        }
        self
    }

    /// Keeps only the variables whose names `keep` accepts.
    pub fn retain_env(&mut self, mut keep: impl FnMut(&OsStr) -> bool) -> &mut Launch {
        self.env.retain(|k, _| keep(k));
        self
    }

    /// Starts it in `dir`.
    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Launch {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    /// The program as given.
    pub fn program(&self) -> &OsStr {
        &self.program
    }

    /// The directory it starts in, when not this process's.
    pub fn get_current_dir(&self) -> Option<&Path> {
        self.cwd.as_deref()
    }

    /// The value `key` will have in the child.
    pub fn get_env(&self, key: impl AsRef<OsStr>) -> Option<&OsStr> {
        self.env.get(key.as_ref()).map(OsString::as_os_str)
    }
}
