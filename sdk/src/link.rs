//! The plugin's view of the host handle, and the owned form of an envelope.

use abi_stable::std_types::{RStr, RString};
use dsh_abi::{Envelope, HostHandle};

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

/// An envelope whose strings are owned by the plugin.
#[derive(Debug, Default, Clone)]
pub(crate) struct Msg {
    pub kind: u32,
    pub flags: u32,
    pub id: u64,
    pub ref_id: u64,
    pub fiber: u64,
    pub target: String,
    pub method: String,
    pub payload: String,
}

impl Msg {
    pub fn new(kind: u32) -> Self {
        Msg {
            kind,
            ..Msg::default()
        }
    }
}

impl HostLink {
    pub fn new(handle: HostHandle) -> Self {
        HostLink(handle)
    }

    pub fn wake_fd(&self) -> i32 {
        self.0.wake_fd
    }

    /// Sends a message; false when the host refused it.
    pub fn send(&self, msg: Msg) -> bool {
        self.send_code(msg) == 0
    }

    /// Sends a message; the host's answer (0: accepted).
    pub fn send_code(&self, msg: Msg) -> i32 {
        let env = Envelope {
            kind: msg.kind,
            flags: msg.flags,
            id: msg.id,
            ref_id: msg.ref_id,
            fiber: msg.fiber,
            target: RString::from(msg.target),
            method: RString::from(msg.method),
            payload: RString::from(msg.payload),
        };
        (self.0.send)(self.0.ctx, &env)
    }

    pub fn try_recv(&self) -> Option<Msg> {
        let env = (self.0.try_recv)(self.0.ctx).into_option()?;
        Some(Msg {
            kind: env.kind,
            flags: env.flags,
            id: env.id,
            ref_id: env.ref_id,
            fiber: env.fiber,
            target: env.target.into_string(),
            method: env.method.into_string(),
            payload: env.payload.into_string(),
        })
    }

    pub fn log(&self, level: u8, target: &str, message: &str) {
        (self.0.log)(self.0.ctx, level, RStr::from(target), RStr::from(message));
    }
}
