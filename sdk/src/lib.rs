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
//!         ctx.provide("counter", |_req| async { Reply::json(1) });
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
pub mod lazy_json;
mod link;
mod logging;
pub mod names;
pub mod payload;
pub mod process;
pub mod scopes;
pub mod terminal_text;
pub mod tool;
mod unwind;
pub mod vocab;

use std::future::Future;

use serde::de::DeserializeOwned;

pub use context::{
    AboutDispatch, CallStream, CallerCleanup, CallerSet, Context, Dispatch, Event, FiberId,
    Listener, ListenerBuilder, Reply, ReplySender, Request, ScopeBinding, Service, Subject,
};
pub use dsh_tempdir as tempdir;
pub use dsh_wire::Manifest;
pub use error::{codes, Error, Result};
pub use lazy_json::LazyJson;
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

/// Everything a plugin usually needs. Typed data goes through
/// `dsh_sdk::vocab` and `dsh_sdk::api`; a plugin that builds open JSON
/// itself names `serde_json` (or `dsh_sdk::Value`) explicitly, so untyped
/// code is never the easy path.
pub mod prelude {
    pub use crate::{
        codes, Context, Error, Event, Payload, Plugin, Reply, ReplySender, Request, Result, Service,
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
    //! What [`export_plugin!`](crate::export_plugin) expands to refers only
    //! to this module, so a plugin crate depends on `dsh-sdk` alone: no
    //! `abi_stable` to add or pin by hand. The expansion is one marker type
    //! implementing [`Export`] and one `static` holding [`lib_header`]; the
    //! rest is generic code here.

    use std::marker::PhantomData;

    pub use abi_stable::library::LibHeader;
    use abi_stable::library::{CheckTypeLayout, RootModuleResult};
    use abi_stable::prefix_type::WithMetadata;
    use abi_stable::std_types::RString;
    use dsh_abi::{HostHandle, PluginMod, PluginModRef, ABI_VERSION};

    use crate::{Manifest, Plugin};

    /// The symbol under which abi_stable's loader (and the host's
    /// preflight) looks for the library header. The macro spells it as an
    /// identifier, which cannot come from a constant; a test keeps the two
    /// equal.
    pub const ROOT_SYMBOL: &str = "_1as_0lib_1header_0root_bmodule_bloader";

    /// What `export_plugin!(P)` knows that generic code cannot: the plugin
    /// type and the version of the crate that invoked the macro.
    pub trait Export: 'static {
        /// The exported plugin.
        type Plugin: Plugin;
        /// `CARGO_PKG_VERSION` of the plugin crate.
        const VERSION: &'static str;
    }

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

    extern "C" fn manifest_of<E: Export>() -> RString {
        manifest::<E::Plugin>(E::VERSION)
    }

    extern "C" fn run_of<E: Export>(handle: HostHandle) -> i32 {
        run::<E::Plugin>(handle)
    }

    /// The root module of one exported plugin, a constant per `E`.
    struct Module<E>(PhantomData<E>);

    impl<E: Export> Module<E> {
        const MODULE: &'static WithMetadata<PluginMod> = &WithMetadata::new(PluginMod {
            abi_version: ABI_VERSION,
            manifest: manifest_of::<E>,
            run: run_of::<E>,
        });
    }

    fn root_module<E: Export>() -> PluginModRef {
        PluginModRef(Module::<E>::MODULE.static_as_prefix())
    }

    /// What abi_stable's loader calls first: builds the root module of `E`
    /// (catching a panic) and erases its type.
    extern "C" fn load_root_module<E: Export>() -> RootModuleResult {
        abi_stable::library::__call_root_module_loader(root_module::<E>)
    }

    /// The library header of `E`, with abi_stable's layout check of
    /// [`PluginMod`] on: the same value `#[export_root_module]` builds.
    pub const fn lib_header<E: Export>() -> LibHeader {
        // SAFETY: the contract of `from_constructor::<M>` is that the
        // constructor's erased prefix was made from a `PrefixRef` of `M`'s
        // prefix. `load_root_module::<E>` returns what
        // `__call_root_module_loader` made of `root_module::<E>()`, a
        // `PluginModRef`, which is `M` here.
        unsafe {
            LibHeader::from_constructor::<PluginModRef>(load_root_module::<E>, CheckTypeLayout::Yes)
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn the_root_symbol_is_the_one_abi_stable_loads() {
            assert_eq!(
                super::ROOT_SYMBOL,
                abi_stable::library::ROOT_MODULE_LOADER_NAME
            );
            // The identifier the macro declares.
            assert_eq!(
                stringify!(_1as_0lib_1header_0root_bmodule_bloader),
                super::ROOT_SYMBOL
            );
        }
    }
}

/// Exports a [`Plugin`] as this library's root module. The plugin crate
/// needs no other dependency for it: the expansion names only
/// `$crate::__private` items (the `abi_stable` types included).
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        struct __DshExport;

        impl $crate::__private::Export for __DshExport {
            type Plugin = $plugin;
            const VERSION: &'static str = ::core::env!("CARGO_PKG_VERSION");
        }

        /// The library header abi_stable's loader looks up (the name is
        /// `dsh_sdk::__private::ROOT_SYMBOL`).
        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        #[unsafe(no_mangle)]
        pub static _1as_0lib_1header_0root_bmodule_bloader: $crate::__private::LibHeader =
            $crate::__private::lib_header::<__DshExport>();
    };
}
