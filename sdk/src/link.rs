//! The plugin's view of the host handle: typed messages in, typed messages out.

use abi_stable::std_types::RStr;
use dsh_abi::HostHandle;
use dsh_wire::{DecodeError, ToHost, ToPlugin};

/// A copyable wrapper around the host handle of this generation.
#[derive(Clone, Copy)]
pub(crate) struct HostLink(HostHandle);

/// Log levels as the host understands them.
pub(crate) mod level {
    pub const ERROR: u8 = 1;
    pub const WARN: u8 = 2;
    pub const INFO: u8 = 3;
    pub const DEBUG: u8 = 4;
    pub const TRACE: u8 = 5;
}

impl HostLink {
    pub fn new(handle: HostHandle) -> Self {
        HostLink(handle)
    }

    pub fn wake_fd(&self) -> i32 {
        self.0.wake_fd
    }

    /// Sends a message; false when the host refused it.
    pub fn send(&self, message: ToHost<'_>) -> bool {
        self.send_code(message) == 0
    }

    /// Sends a message; the host's answer (0: accepted).
    pub fn send_code(&self, message: ToHost<'_>) -> i32 {
        let env = message.encode();
        (self.0.send)(self.0.ctx, &env)
    }

    /// The next message from the host, if one is waiting; an envelope that
    /// is not a host message is an error.
    pub fn try_recv(&self) -> Option<Result<ToPlugin<'static>, DecodeError>> {
        let env = (self.0.try_recv)(self.0.ctx).into_option()?;
        Some(ToPlugin::decode(&env).map(ToPlugin::into_owned))
    }

    pub fn log(&self, level: u8, target: &str, message: &str) {
        (self.0.log)(self.0.ctx, level, RStr::from(target), RStr::from(message));
    }
}
