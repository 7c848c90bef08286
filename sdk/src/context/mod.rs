//! The plugin `Context`: services, events, effects and tasks of one fiber.
//!
//! Everything here runs on the plugin's own thread inside a current-thread
//! runtime, so the handles are `!Send` and use `Rc`/`RefCell` freely.
//!
//! Two sides, one file per idea:
//!
//! - the runtime (`runtime/`), the actor's side: the state one plugin
//!   generation shares between all its handles (`Shared`: registries, ids,
//!   fiber, lifecycle), what the actor hands it from the host (`incoming`:
//!   calls, listener invocations, inner defaults, cancels), the calls this
//!   plugin waits on (`outgoing`), and unwinding a fiber (`dispose`);
//! - the public handles a plugin holds: `Context` (`handle.rs`), `Service`
//!   (`service.rs`), `CallStream` (`call_stream.rs`), `Request`
//!   (`request.rs`), `Reply` and `ReplySender` (`reply.rs`), `Event`
//!   (`event.rs`), `Listener` and `ListenerBuilder` (`listener.rs`),
//!   `Dispatch` (`dispatch.rs`) and `ScopeBinding` (`scope.rs`).
//!
//! A handle reaches the host only through `Shared`, which sends through the
//! generation's `HostLink`. The unit tests put an in-memory host behind that
//! link (`test_host.rs`) and play the router themselves, so every handle is
//! tested without loading a library.

mod call_stream;
mod dispatch;
mod event;
mod handle;
mod listener;
mod reply;
mod request;
mod runtime;
mod scope;
mod service;
#[cfg(test)]
pub(crate) mod test_host;
mod text;

pub use call_stream::CallStream;
pub use dispatch::{AboutDispatch, Dispatch, Subject};
pub use event::Event;
pub use handle::Context;
pub use listener::{Listener, ListenerBuilder};
pub use reply::{Reply, ReplySender};
pub use request::{CallerCleanup, CallerSet, Request};
pub(crate) use runtime::{EventMsg, Shared};
pub use scope::ScopeBinding;
pub use service::Service;

/// Identifies a fiber (one application of a plugin) across the whole host.
pub type FiberId = u64;
