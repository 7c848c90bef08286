//! The body of an HTTP error response, read with bounds.
//!
//! A server that fails a request sends a short JSON `error` object. A
//! hostile or broken one may send gigabytes, or declare a length and then
//! stall. The body is read chunk by chunk: at most [`MAX_ERROR_BODY_BYTES`]
//! of it, and all of it within one `streamIdleTimeoutMs`; what is past
//! either bound is not read (the connection is dropped). The failure keeps
//! the status in any case, which is what classifies it.

use std::time::Duration;

use crate::sse::human_bytes;

/// The most bytes of an error body read: far more than any server's error
/// object, far less than would matter to memory.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// What was read of an error body.
pub struct ErrorBody {
    /// The bytes read, as text (invalid UTF-8 replaced).
    pub text: String,
    /// Why the reading stopped before the end of the body, when it did.
    pub cut: Option<String>,
}

/// Reads at most `cap` bytes of `response`'s body within `time` (the
/// whole body, not each chunk).
pub async fn read(mut response: reqwest::Response, time: Duration, cap: usize) -> ErrorBody {
    let deadline = tokio::time::Instant::now() + time;
    let mut bytes: Vec<u8> = Vec::new();
    let cut = loop {
        match tokio::time::timeout_at(deadline, response.chunk()).await {
            Err(_) => {
                break Some(format!(
                    "the body was not complete after {} ms ({} bytes read)",
                    time.as_millis(),
                    bytes.len()
                ))
            }
            Ok(Err(e)) => break Some(format!("the body broke after {} bytes: {e}", bytes.len())),
            Ok(Ok(None)) => break None,
            Ok(Ok(Some(chunk))) => {
                let room = cap - bytes.len();
                if chunk.len() > room {
                    bytes.extend_from_slice(&chunk[..room]);
                    break Some(format!(
                        "the body was longer than {}; the rest was not read",
                        human_bytes(cap)
                    ));
                }
                bytes.extend_from_slice(&chunk);
            }
        }
    };
    ErrorBody {
        text: String::from_utf8_lossy(&bytes).into_owned(),
        cut,
    }
}
