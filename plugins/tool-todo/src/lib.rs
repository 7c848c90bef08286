//! `tool-todo`: `todo_write` (reference dsh-product §3.6, §4.1).

use std::collections::HashSet;

use dsh_sdk::names::{code, service, sessions};
use dsh_sdk::prelude::*;
use dsh_sdk::tool::{register_tools, text_reply};
use dsh_sdk::vocab::event;

async fn execute(ctx: Context, req: Request) -> Result<Reply> {
    let todos = req.params["arguments"]["todos"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut seen = HashSet::new();
    let (mut pending, mut doing, mut done) = (0, 0, 0);
    for t in &todos {
        let content = t["content"].as_str().unwrap_or_default().trim();
        if content.is_empty() {
            return Err(Error::new(
                code::INVALID_ARGS,
                "a todo needs non-empty content",
            ));
        }
        if !seen.insert(content.to_owned()) {
            return Err(Error::new(
                code::INVALID_ARGS,
                format!("duplicate todo: {content}"),
            ));
        }
        match t["status"].as_str() {
            Some("pending") => pending += 1,
            Some("in_progress") => doing += 1,
            Some("completed") => done += 1,
            other => {
                return Err(Error::new(
                    code::INVALID_ARGS,
                    format!("unknown todo status {other:?}"),
                ))
            }
        }
    }
    if let Some(agent) = req.params["agent"].as_str() {
        ctx.service(service::SESSIONS)
            .call(
                sessions::APPEND,
                json!({"id": agent, "type": event::TODO_WRITE, "data": {"todos": todos}}),
            )
            .await?;
    }
    let text =
        format!("Updated todo list: {pending} pending, {doing} in progress, {done} completed.");
    text_reply(&text)
}

struct Todo;

impl Plugin for Todo {
    const NAME: &'static str = "tool-todo";
    const DESCRIPTION: &'static str = "the `todo_write` tool";
    const INJECT: &'static [&'static str] = &[service::TOOLS, service::SESSIONS];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        let c = ctx.clone();
        let schema = json!({
            "name": "todo_write",
            "description": "Replace the session's todo list with the given items, to plan and track multi-step work.",
            "parameters": {"type": "object", "properties": {"todos": {"type": "array", "items": {
                "type": "object", "additionalProperties": false,
                "properties": {
                    "content": {"type": "string"},
                    "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}},
                "required": ["content", "status"]}}},
                "required": ["todos"]},
        });
        register_tools(&ctx, vec![schema], move |req| execute(c.clone(), req)).await?;
        Ok(())
    }
}

dsh_sdk::export_plugin!(Todo);
