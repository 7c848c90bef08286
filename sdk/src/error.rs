//! The error type that crosses plugin boundaries: a stable `code` and a
//! human-readable `message`, serialized as `{"code": ..., "message": ...}`.
//! Defined once in the boundary layer (`dsh-wire`), which the host shares.

pub use dsh_wire::{codes, Error, Result};
