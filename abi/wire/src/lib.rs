//! The typed messages that cross the dsh plugin boundary.
//!
//! [`dsh_abi::Envelope`] is the record that travels; this crate gives it a
//! meaning. [`ToHost`] is everything a plugin sends, [`ToPlugin`] everything
//! the host sends, and [`encode`](ToHost::encode)/[`decode`](ToHost::decode)
//! are the one place where variants become envelope fields and flag bits.
//! Strings are [`Cow`]s so a decoder can borrow from the envelope it was
//! handed and an encoder can move its owned text into the envelope without
//! copying.
#![deny(missing_docs)]

mod error;
pub mod host_service;
mod manifest;
pub mod mcp;
mod message;
mod model_choice;

pub use error::{codes, Error, Result};
pub use manifest::Manifest;
pub use message::{DecodeError, Mode, ReplyKind, ToHost, ToPlugin};
pub use model_choice::ModelChoice;

pub use std::borrow::Cow;
