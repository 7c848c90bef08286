//! `dsh-host`: loads plugin `cdylib`s, routes their messages, hot-reloads
//! and really unloads them. It owns no product behavior.
//!
//! Modules by concern: [`loader`] (one thread per generation, checks,
//! unload), [`router`] (services, events, replies), [`supervisor`] (fiber
//! lifecycle), [`config`] and [`boot`] (composition), [`watch`] (hot
//! reload), [`host`] (the handle the CLI and tests use).
#![deny(missing_docs)]

pub mod boot;
pub mod config;
pub mod host;
pub mod inbox;
pub mod inspect;
pub mod keys;
pub mod loader;
pub mod paths;
pub mod preflight;
pub mod procfs;
pub mod report;
pub mod router;
pub mod staging;
pub mod supervisor;
pub mod threads;
pub mod watch;

#[doc(hidden)]
pub use libc as __libc;

pub use host::{Host, HostConfig};
