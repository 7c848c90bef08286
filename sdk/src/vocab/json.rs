//! What a session event's data must be: lossless JSON.

use serde_json::Value;

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
