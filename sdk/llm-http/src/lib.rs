//! `dsh-llm-http`: what every adapter that talks to a model server over
//! HTTP shares, whatever its wire format (chat completions, Anthropic
//! Messages, OpenAI Responses): the request exchange and its timeouts
//! ([`exchange`]), SSE framing with a cap ([`sse`]), an error body read
//! with bounds ([`error_body`]), a provider's error as a failure with the
//! harness's code ([`failure`]) with every common server's overflow
//! recognized ([`overflow`]), the caps on one answer ([`answer_cap`]) and
//! the config fields that set them ([`limits`]), tool-call ids the log can
//! store ([`call_ids`]), readers for fields servers send loosely
//! ([`lenient`]) and their token counts as usage ([`usage`]), the harness
//! request as every adapter reads it ([`stream_request`]), the history
//! converted once per session ([`conversion`]), the route's model catalog
//! ([`catalog`]) and a model's context window learned from its server
//! ([`window`]).
//!
//! It is linked into each adapter plugin (an `rlib`, not a plugin): it
//! registers nothing; its only state is [`window::WindowLookup`]'s cache of
//! the windows a route learned and [`conversion::Converter`]'s
//! conversions, which the adapter owns. With the `testing` feature it has
//! helpers for the adapters' unit tests ([`testing`]).

pub mod answer_cap;
pub mod call_ids;
pub mod catalog;
pub mod conversion;
pub mod error_body;
pub mod exchange;
pub mod failure;
pub mod lenient;
pub mod limits;
pub mod overflow;
pub mod sse;
pub mod stream_request;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod usage;
pub mod window;

pub use dsh_sdk::names::llm_failure as code;
