//! The error type that crosses plugin boundaries: a stable `code` and a
//! human-readable `message`, serialized as `{"code": ..., "message": ...}`.

use serde::{Deserialize, Serialize};

/// Result alias used throughout the SDK.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error returned by a service, a listener or the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Error {
    /// A stable, SCREAMING_SNAKE_CASE code (`SERVICE_UNAVAILABLE`, `PANIC`, ...).
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
}

/// Error codes the host and the SDK produce.
pub mod codes {
    /// No active provider for the service.
    pub const SERVICE_UNAVAILABLE: &str = "SERVICE_UNAVAILABLE";
    /// The provider does not know the method.
    pub const UNKNOWN_METHOD: &str = "UNKNOWN_METHOD";
    /// Plugin code panicked; the message says where.
    pub const PANIC: &str = "PANIC";
    /// The plugin (or the fiber that was asked) went away before answering.
    pub const DISPOSED: &str = "DISPOSED";
    /// A payload could not be (de)serialized.
    pub const INVALID_PAYLOAD: &str = "INVALID_PAYLOAD";
    /// The row's config did not match the plugin's config type.
    pub const INVALID_CONFIG: &str = "INVALID_CONFIG";
    /// A waterfall listener called `next` more than once.
    pub const NEXT_CALLED_TWICE: &str = "NEXT_CALLED_TWICE";
    /// The host did not accept a message (the generation is stopping).
    pub const HOST_REFUSED: &str = "HOST_REFUSED";
    /// Something took longer than its deadline.
    pub const TIMEOUT: &str = "TIMEOUT";
    /// A scope already has a parent; only its binding can move it.
    pub const SCOPE_ALREADY_BOUND: &str = "SCOPE_ALREADY_BOUND";
    /// A scope link that would make a scope its own ancestor.
    pub const SCOPE_CYCLE: &str = "SCOPE_CYCLE";
    /// Anything else.
    pub const UNKNOWN: &str = "UNKNOWN";
}

impl Error {
    /// An error with an explicit code.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Error {
            code: code.into(),
            message: message.into(),
        }
    }

    /// An error with code `UNKNOWN`.
    pub fn msg(message: impl Into<String>) -> Self {
        Error::new(codes::UNKNOWN, message)
    }

    /// Decodes an error payload; a payload that is not an error object still
    /// becomes an error carrying its text.
    pub fn from_payload(payload: &str) -> Self {
        serde_json::from_str::<Error>(payload)
            .unwrap_or_else(|_| Error::new(codes::UNKNOWN, payload.to_owned()))
    }

    /// The JSON text of this error.
    pub fn to_payload(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| {
            format!(
                r#"{{"code":"{}","message":"unprintable error"}}"#,
                codes::UNKNOWN
            )
        })
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::new(codes::INVALID_PAYLOAD, e.to_string())
    }
}
