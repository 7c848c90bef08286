//! The shared vocabulary of the agent core, as serde types whose JSON
//! matches the original dsh exactly (field names, key order, tags): session
//! events, messages and content blocks, stream chunks, usage, failures, turn
//! end reasons, tool schemas. See reference/dsh-core.md §2–§5.

pub mod assembler;
pub mod chunk;
pub mod compaction;
pub mod history;
pub mod input;
pub mod message;
mod open;
pub mod records;
pub mod request_header;
pub mod retry_trail;
pub mod shape;
pub mod surface;
pub mod surface_op;
pub mod tokens;

pub use chunk::{Chunk, FinishReason};
pub use input::UserInput;
pub use message::{ContentBlock, Extra, Message, MessageSource, Role};
pub use surface_op::SurfaceOp;

mod closers;
mod derive;
pub mod event;
mod json;
mod llm;
mod session_event;

pub use closers::interrupted_turn_closers;
pub use derive::{derive_messages, event_message, surface_nodes};
pub use json::{lossless, MAX_SAFE_INTEGER};
pub use llm::{LlmFailure, TokenUsage, ToolSchema, RETRYABLE_CODES};
pub use session_event::{SessionEvent, SessionHeader};

#[cfg(test)]
#[path = "vocab/log_tests.rs"]
mod log_tests;

#[cfg(test)]
#[path = "vocab/test_msg.rs"]
mod msg;

#[path = "vocab/consumed_work.rs"]
mod consumed_work;
pub use consumed_work::{fold_consumed_work, ConsumedWork};

#[cfg(test)]
#[path = "vocab/core_tests.rs"]
mod core_tests;
