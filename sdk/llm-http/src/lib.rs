//! `dsh-llm-http`: what every adapter that talks to a model server over
//! HTTP shares, whatever its wire format (chat completions, Anthropic
//! Messages, OpenAI Responses): the request exchange and its timeouts
//! ([`exchange`]), SSE framing with a cap ([`sse`]), an error body read
//! with bounds ([`error_body`]), a provider's error as a failure with the
//! harness's code ([`failure`]), the caps on one answer ([`answer_cap`]),
//! tool-call ids the log can store ([`call_ids`]) and readers for fields
//! servers send loosely ([`lenient`]).
//!
//! It is linked into each adapter plugin (an `rlib`, not a plugin): it
//! holds no state across calls and registers nothing.

pub mod answer_cap;
pub mod call_ids;
pub mod error_body;
pub mod exchange;
pub mod failure;
pub mod lenient;
pub mod sse;

pub use dsh_sdk::names::llm_failure as code;
