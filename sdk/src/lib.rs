//! `dsh-sdk`: what a dsh plugin links.
//!
//! A plugin is a `cdylib` that implements [`Plugin`] and exports it with
//! [`export_plugin!`]. The host runs it as an actor on a thread of its own;
//! the plugin talks to the rest of the system only through its [`Context`]:
//! services ([`Context::provide`], [`Context::service`]), events
//! ([`Context::on`], [`Context::emit`], [`Context::serial`],
//! [`Context::parallel`], [`Context::waterfall`]), effects
//! ([`Context::effect`]) and fiber-bound tasks ([`Context::spawn`]).
//!
//! ```ignore
//! use dsh_sdk::prelude::*;
//!
//! struct Counter;
//!
//! impl Plugin for Counter {
//!     const NAME: &'static str = "counter";
//!     const PROVIDES: &'static [&'static str] = &["counter"];
//!     type Config = ();
//!
//!     async fn apply(ctx: Context, _config: ()) -> Result<()> {
//!         ctx.provide("counter", |_req| async { Ok(json!(1).into()) });
//!         Ok(())
//!     }
//! }
//!
//! dsh_sdk::export_plugin!(Counter);
//! ```
//!
//! The plugin rules of ARCHITECTURE.md hold because the SDK owns the entry
//! point: panics are caught at every entry, the runtime is current-thread and
//! dropped before `run` returns, tracing goes through a scoped dispatcher,
//! and the panic hook never symbolizes a backtrace. `cargo xtask check`
//! enforces the rest (no rayon, no tokio `signal`/`process`, no OpenSSL).
#![deny(missing_docs)]

mod actor;
pub mod api;
pub mod beneath;
pub mod blocking;
mod context;
mod error;
pub mod fence;
pub mod file;
mod link;
mod logging;
pub mod names;
pub mod payload;
pub mod process;
pub mod tool;
mod unwind;
pub mod vocab;

use std::future::Future;

use serde::de::DeserializeOwned;

pub use context::{
    CallStream, Context, Dispatch, Event, FiberId, Listener, ListenerBuilder, Reply, ReplySender,
    Request, ScopeBinding, Service,
};
pub use dsh_tempdir as tempdir;
pub use dsh_wire::Manifest;
pub use error::{codes, Error, Result};
pub use payload::{Payload, RawObject};
pub use serde_json::{json, Value};
pub use tracing;

/// A fresh random id (UUID v4), for messages and sessions.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Everything a plugin usually needs.
pub mod prelude {
    pub use crate::{
        codes, json, Context, Error, Event, Payload, Plugin, Reply, ReplySender, Request, Result,
        Service, Value,
    };
}

/// A plugin. Implement it on a unit struct and export it with
/// [`export_plugin!`].
pub trait Plugin: 'static {
    /// The name rows use to refer to this plugin.
    const NAME: &'static str;
    /// One line about what it does.
    const DESCRIPTION: &'static str = "";
    /// Services this plugin provides (used to order startup and to detect
    /// inject cycles before anything runs).
    const PROVIDES: &'static [&'static str] = &[];
    /// Services that must be active before `apply` runs.
    const INJECT: &'static [&'static str] = &[];
    /// The row's `config`, deserialized. Use `()` for none.
    type Config: DeserializeOwned + 'static;

    /// Applies the plugin: registers services, listeners and effects. An
    /// error (or a panic) rolls back everything registered so far and leaves
    /// the fiber failed with the error visible.
    fn apply(ctx: Context, config: Self::Config) -> impl Future<Output = Result<()>>;

    /// JSON Schema of the config, if the plugin publishes one.
    fn config_schema() -> Option<serde_json::Value> {
        None
    }
}

#[doc(hidden)]
pub mod __private {
    pub use abi_stable::prefix_type::WithMetadata;
    pub use abi_stable::std_types::RString;
    pub use dsh_abi::{HostHandle, PluginMod, PluginModRef, ABI_VERSION};

    use crate::{Manifest, Plugin};

    /// The manifest of `P` as JSON.
    pub fn manifest<P: Plugin>(version: &str) -> RString {
        let manifest = Manifest {
            name: P::NAME.to_owned(),
            version: version.to_owned(),
            abi_version: ABI_VERSION,
            description: P::DESCRIPTION.to_owned(),
            provides: P::PROVIDES.iter().map(|s| (*s).to_owned()).collect(),
            inject: P::INJECT.iter().map(|s| (*s).to_owned()).collect(),
            config_schema: std::panic::catch_unwind(P::config_schema).ok().flatten(),
        };
        RString::from(serde_json::to_string(&manifest).unwrap_or_default())
    }

    /// The body of the exported `run`.
    pub fn run<P: Plugin>(handle: HostHandle) -> i32 {
        crate::actor::run::<P>(handle)
    }
}

/// Exports a [`Plugin`] as this library's root module. The plugin crate must
/// also depend on `abi_stable` (its export attribute names it directly).
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        extern "C" fn __dsh_plugin_manifest() -> $crate::__private::RString {
            $crate::__private::manifest::<$plugin>(env!("CARGO_PKG_VERSION"))
        }

        extern "C" fn __dsh_plugin_run(handle: $crate::__private::HostHandle) -> i32 {
            $crate::__private::run::<$plugin>(handle)
        }

        #[::abi_stable::export_root_module]
        pub fn __dsh_plugin_root_module() -> $crate::__private::PluginModRef {
            const MODULE: &$crate::__private::WithMetadata<$crate::__private::PluginMod> =
                &$crate::__private::WithMetadata::new($crate::__private::PluginMod {
                    abi_version: $crate::__private::ABI_VERSION,
                    manifest: __dsh_plugin_manifest,
                    run: __dsh_plugin_run,
                });
            $crate::__private::PluginModRef(MODULE.static_as_prefix())
        }
    };
}
