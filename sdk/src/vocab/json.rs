//! What a session event's data must be: lossless JSON.

use serde::de::Error;
use serde::{Deserialize, Deserializer};
use serde_json::{Number, Value};

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

/// How [`whole_number`] reads a number that is not an integer.
#[derive(Clone, Copy)]
pub(crate) enum Fraction {
    /// Refused: only an integral float (`10.0`) reads, as its integer.
    Refused,
    /// Rounded up (a duration the original computes without rounding).
    RoundedUp,
}

/// An optional non-negative integer field written as any JSON number (the
/// original's numbers are JavaScript's): an integer as it is, a float as
/// `fraction` says; `what` names the field's unit in the error.
pub(crate) fn whole_number<'de, D: Deserializer<'de>>(
    d: D,
    fraction: Fraction,
    what: &str,
) -> Result<Option<u64>, D::Error> {
    let Some(n) = Option::<Number>::deserialize(d)? else {
        return Ok(None);
    };
    if let Some(n) = n.as_u64() {
        return Ok(Some(n));
    }
    let read = n
        .as_f64()
        .filter(|f| f.is_finite() && *f >= 0.0 && *f <= u64::MAX as f64);
    match (read, fraction) {
        (Some(f), Fraction::Refused) if f.fract() == 0.0 => Ok(Some(f as u64)),
        (Some(f), Fraction::RoundedUp) => Ok(Some(f.ceil() as u64)),
        _ => Err(D::Error::custom(format_args!(
            "expected a non-negative {what}, got {n}"
        ))),
    }
}
