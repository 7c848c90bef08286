//! The error codes of `web_fetch`.

/// The URL is not an http(s) URL without credentials.
pub const INVALID_URL: &str = "WEB_INVALID_URL";
/// The host does not resolve.
pub const DNS: &str = "WEB_DNS";
/// The host resolves to a private address and `allowPrivate` is off.
pub const PRIVATE_ADDRESS: &str = "WEB_PRIVATE_ADDRESS";
/// The server answered with a status other than 2xx.
pub const HTTP: &str = "WEB_HTTP";
/// The body is (or declares itself) larger than `maxBytes`.
pub const TOO_LARGE: &str = "WEB_TOO_LARGE";
/// The body is content-encoded (compressed): refused, never inflated.
pub const ENCODING: &str = "WEB_ENCODING";
/// The call did not finish within `timeoutMs`.
pub const TIMEOUT: &str = "WEB_TIMEOUT";
/// The body is not text.
pub const BINARY: &str = "WEB_BINARY";
/// The request failed (connection, TLS, protocol).
pub const FAILED: &str = "WEB_FAILED";
/// The call was cancelled while converting.
pub const CANCELLED: &str = "WEB_CANCELLED";
