//! The FFI boundary between `dsh-host` and its plugins.
//!
//! This crate is deliberately tiny. A plugin library exports one root module
//! ([`PluginModRef`]) with two functions: [`PluginMod::manifest`] and
//! [`PluginMod::run`]. The host calls `run` on a thread it created for that
//! plugin generation and hands it a [`HostHandle`]; from then on the two sides
//! only exchange [`Envelope`]s: small `StableAbi` records carrying a JSON payload.
//! Everything domain-specific (session events, tool schemas, stream chunks)
//! lives in the JSON payload, so adding a field never changes this ABI.
//!
//! Ownership rule: every string that crosses the boundary is copied by the
//! receiving side or freed through the allocator of the side that created it.
//! `send` borrows the plugin's envelope and copies it; `try_recv` returns an
//! envelope allocated by the host, which the plugin drops (running host code,
//! which is always mapped).
#![deny(missing_docs)]

use std::ffi::c_void;

use abi_stable::{
    declare_root_module_statics,
    library::RootModule,
    package_version_strings,
    sabi_types::VersionStrings,
    std_types::{ROption, RStr, RString},
    StableAbi,
};

/// Version of the message protocol spoken over this ABI.
///
/// The host refuses a plugin whose [`PluginMod::abi_version`] differs, with a
/// message naming both numbers. Bump it when the meaning of a message kind or
/// flag changes; abi_stable's layout check covers changes to the types.
pub const ABI_VERSION: u32 = 1;

/// [`HostHandle::send`] of a [`kind::SCOPE_PARENT`]: the scope already has
/// a parent (or the rebind came from a fiber that did not make the link).
pub const SCOPE_ALREADY_BOUND: i32 = -4;
/// [`HostHandle::send`] of a [`kind::SCOPE_PARENT`]: the link would make the
/// scope its own ancestor.
pub const SCOPE_CYCLE: i32 = -5;

/// The root module every plugin library exports (through the SDK's
/// `export_plugin!`).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
#[sabi(missing_field(panic))]
pub struct PluginMod {
    /// The [`ABI_VERSION`] the plugin was built against.
    pub abi_version: u32,
    /// Returns the plugin's manifest as JSON (name, version, provides, inject,
    /// config schema). Called on a plugin-owned thread, never on a host thread.
    pub manifest: extern "C" fn() -> RString,
    /// Runs the plugin actor until it receives [`kind::STOP`]. Returns 0 on a
    /// clean stop and a non-zero code when the actor failed (a panic is caught
    /// inside the plugin and reported as a non-zero code).
    #[sabi(last_prefix_field)]
    pub run: extern "C" fn(HostHandle) -> i32,
}

impl RootModule for PluginModRef {
    declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "dsh_plugin";
    const NAME: &'static str = "dsh_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// The host side of one plugin generation, passed by value to
/// [`PluginMod::run`]. All functions are host code and never unwind.
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct HostHandle {
    /// Opaque host context; pass it back to every function.
    pub ctx: *const c_void,
    /// An eventfd owned by the host. It becomes readable when messages are
    /// waiting in the inbox. The plugin may poll it but must never close it.
    pub wake_fd: i32,
    /// Hands one message to the host, which copies it. Returns 0 on success
    /// and a negative number when the host refused it (the generation is
    /// shutting down, or the envelope was malformed).
    pub send: extern "C" fn(ctx: *const c_void, message: &Envelope) -> i32,
    /// Takes the next message from the inbox, if any.
    pub try_recv: extern "C" fn(ctx: *const c_void) -> ROption<Envelope>,
    /// Writes a log record through the host's subscriber, tagged with the
    /// plugin's name. `level`: 1 error, 2 warn, 3 info, 4 debug, 5 trace.
    pub log: extern "C" fn(ctx: *const c_void, level: u8, target: RStr<'_>, message: RStr<'_>),
}

// SAFETY: the context pointer refers to a host object that is `Send + Sync`
// and outlives the generation thread; the functions are thread-safe.
unsafe impl Send for HostHandle {}
// SAFETY: as above.
unsafe impl Sync for HostHandle {}

/// One message across the boundary. The meaning of each field depends on
/// [`Envelope::kind`]; see the [`kind`] module.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq, Default)]
pub struct Envelope {
    /// One of the constants in [`kind`].
    pub kind: u32,
    /// Bit set of [`flags`].
    pub flags: u32,
    /// Correlation id chosen by the sender (a call id, a listener id, ...).
    pub id: u64,
    /// The id this message refers to (a waterfall invocation for `NEXT`, ...).
    pub ref_id: u64,
    /// A fiber id: the caller of a call, or the fiber a notice is about.
    pub fiber: u64,
    /// A service or event name.
    pub target: RString,
    /// A method name, listener scope or dispatch mode.
    pub method: RString,
    /// JSON text.
    pub payload: RString,
}

/// Message kinds. Direction is given as plugin→host or host→plugin.
pub mod kind {
    /// plugin→host: the actor is running and ready for messages.
    pub const READY: u32 = 1;
    /// host→plugin: apply the fiber. `id` = request id, `payload` = config
    /// JSON, `method` = the state the row's previous generation handed over
    /// (JSON; empty: none).
    pub const APPLY: u32 = 2;
    /// host→plugin: run every effect in reverse and forget all handlers.
    /// The final reply's payload is the state handed to the row's next
    /// generation (`null`: none).
    pub const DISPOSE: u32 = 3;
    /// host→plugin: leave `run` (after dropping the runtime).
    pub const STOP: u32 = 4;
    /// plugin→host: provide service `target`.
    pub const PROVIDE: u32 = 5;
    /// plugin→host: stop providing service `target`.
    pub const WITHDRAW: u32 = 6;
    /// plugin→host: add listener `id` for event `target`; `method` = scope
    /// key (empty: unscoped); flag [`super::flags::PREPEND`].
    pub const ON: u32 = 7;
    /// plugin→host: remove listener `id`.
    pub const OFF: u32 = 8;
    /// both ways: a service call. plugin→host: `id` = local call id,
    /// `target` = service, `method`, `payload` = params. host→plugin: `id`
    /// = host call id, `fiber` = calling fiber.
    pub const CALL: u32 = 9;
    /// both ways: a reply to `id`. Flags: [`super::flags::ERROR`],
    /// [`super::flags::STREAM`] (an item; more follow) or final.
    pub const REPLY: u32 = 10;
    /// plugin→host: cancel outgoing call or dispatch `id` (a dispatch's
    /// running listener invocations are cancelled). host→plugin: the caller
    /// of call or invocation `id` is gone; stop working on it.
    pub const CANCEL: u32 = 11;
    /// plugin→host: dispatch event `target`; `method` = scope key; flags
    /// carry the mode; `id` = local id for the final reply (unused by emit).
    pub const DISPATCH: u32 = 12;
    /// host→plugin: invoke listener `ref_id` for event `target`; `id` =
    /// invocation id to reply to (0 for emit); `method` = dispatch scope.
    pub const EVENT: u32 = 13;
    /// plugin→host: a waterfall listener calls `next`; `id` = local call id,
    /// `ref_id` = the invocation id it was given, `payload` = value.
    pub const NEXT: u32 = 14;
    /// host→plugin: run the innermost default of the waterfall whose
    /// dispatch had local id `ref_id`; `id` = invocation id to reply to.
    pub const INNER: u32 = 15;
    /// host→plugin: fiber `fiber` was disposed; drop what it registered.
    pub const FIBER_GONE: u32 = 16;
    /// plugin→host: record that scope `target` is a child of scope `method`.
    /// A scope is linked once; a link that would close a cycle is refused;
    /// flag [`super::flags::REBIND`] moves a link its own fiber made.
    /// `send` returns [`crate::SCOPE_ALREADY_BOUND`] or
    /// [`crate::SCOPE_CYCLE`] when refused.
    pub const SCOPE_PARENT: u32 = 17;
}

/// Envelope flags.
pub mod flags {
    /// REPLY: the payload is an error object `{code, message}`.
    pub const ERROR: u32 = 1;
    /// REPLY: a stream item; the call stays open until a final reply.
    pub const STREAM: u32 = 2;
    /// ON: put the listener before ordinary ones.
    pub const PREPEND: u32 = 4;
    /// SCOPE_PARENT: move the scope's existing link (made by this fiber).
    pub const REBIND: u32 = 8;
    /// DISPATCH mode: fire and forget.
    pub const MODE_EMIT: u32 = 0;
    /// DISPATCH mode: listeners awaited one by one; first non-null wins.
    pub const MODE_SERIAL: u32 = 1 << 8;
    /// DISPATCH mode: listeners run concurrently; all awaited.
    pub const MODE_PARALLEL: u32 = 2 << 8;
    /// DISPATCH mode: around-middleware with `next`.
    pub const MODE_WATERFALL: u32 = 3 << 8;
    /// Mask selecting the dispatch mode bits.
    pub const MODE_MASK: u32 = 3 << 8;
}
