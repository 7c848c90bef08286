//! `dsh-llm-http`: what every adapter that talks to a model server over
//! HTTP shares, whatever its wire format (chat completions, Anthropic
//! Messages, OpenAI Responses): the request exchange and its timeouts
//! ([`exchange`]), SSE framing with a cap ([`sse`]), an error body read
//! with bounds ([`error_body`]), a provider's error as a failure with the
//! harness's code ([`failure`]) with every common server's overflow
//! recognized ([`overflow`]), the caps on one answer ([`answer_cap`]),
//! tool-call ids the log can store ([`call_ids`]), readers for fields
//! servers send loosely ([`lenient`]) and a model's context window learned
//! from its server ([`window`]).
//!
//! It is linked into each adapter plugin (an `rlib`, not a plugin): it
//! registers nothing; its only state is [`window::WindowLookup`]'s cache of
//! the windows a route learned, which the adapter owns.

pub mod answer_cap;
pub mod call_ids;
pub mod error_body;
pub mod exchange;
pub mod failure;
pub mod lenient;
pub mod overflow;
pub mod sse;
pub mod window;

pub use dsh_sdk::names::llm_failure as code;
