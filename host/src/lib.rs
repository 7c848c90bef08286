//! `dsh-host`: loads plugin `cdylib`s, routes their messages, hot-reloads
//! and really unloads them. It owns no product behavior.
//!
//! Modules by concern (private; what the CLI, the test kit and the bench
//! use is re-exported below): `loader` (one thread per generation, checks,
//! unload), `router` (services, events, replies), `supervisor` (fiber
//! lifecycle), `config` and `boot` (composition), `watch` (hot reload),
//! `host` (the handle the CLI and tests use).
#![deny(missing_docs)]

mod boot;
mod config;
mod confine;
mod copies;
pub mod fds;
mod host;
mod host_service;
mod imports;
mod inbox;
pub mod inspect;
pub mod isolate;
#[doc(hidden)]
pub mod keys;
mod landlock;
mod limits;
mod loader;
mod paths;
mod preflight;
pub mod procfs;
mod report;
mod router;
mod sealed;
mod seccomp;
mod staging;
mod supervisor;
mod terminal;
#[doc(hidden)]
pub mod threads;
pub mod trust;
mod watch;

#[doc(hidden)]
pub use libc as __libc;

pub use boot::{drop_in_rows, BootOptions, Composition};
pub use config::{compose, dump, parse_layer, Tree};
pub use host::{Host, HostConfig, HostStream, TrustOffer};
pub use imports::Untrusted;
pub use paths::{create_private_dir, dsh_home, privacy_warning, Install};
pub use report::Report;
pub use supervisor::{resolve_plugin, FiberState, FiberStatus, SupervisorError, Timeouts};
pub use terminal::{restore_terminal, say};
pub use watch::{watch, Change};
