//! Typed request and reply types of the core services, with thin clients
//! built from the same definitions, so a caller and the provider cannot
//! drift apart: the provider parses its params into the type the client
//! serializes, and the client parses the reply into the type the provider
//! serializes. The JSON on the wire is exactly what the untyped callers
//! send and receive (field names, camelCase, key order).
//!
//! One module per service; a module holds the params and reply of each
//! method, the payloads of the bus events the provider dispatches, and a
//! client struct with one async method per service method.

pub mod agent_default_model;
pub mod agent_loop;
pub mod agents;
pub mod approval;
pub mod commands;
pub mod compaction;
pub mod host;
pub mod llm;
pub mod mcp;
pub mod permission;
pub mod session_persistence;
pub mod sessions;
pub mod subagents;
pub mod system_prompt;
pub mod tools;
