//! What a session event's data must be: lossless JSON.

use serde_json::Value;

/// The largest integer JavaScript represents exactly (`2^53 - 1`): the
/// bound of every seq, count and time the original reads as a number.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Checks that `value` is lossless JSON for a session event (no `-0`, no
/// non-finite numbers; serde_json already rejects the rest).
pub fn lossless(value: &Value) -> bool {
    match value {
        Value::Number(n) => n
            .as_f64()
            .is_none_or(|f| f.is_finite() && !(f == 0.0 && f.is_sign_negative())),
        Value::Array(a) => a.iter().all(lossless),
        Value::Object(o) => o.values().all(lossless),
        _ => true,
    }
}
