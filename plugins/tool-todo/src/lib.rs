//! `tool-todo`: `todo_write` (reference dsh-product §3.6, §4.1).

use std::collections::HashSet;

use dsh_sdk::api::sessions::{NewEvent, Sessions};
use dsh_sdk::names::{service, tool};
use dsh_sdk::prelude::*;
use dsh_sdk::tool::{declaration, register_tools, text_reply, ToolSpec, INVALID_ARGS};
use dsh_sdk::vocab::records::TodoStatus;
use dsh_sdk::vocab::{event, records, Extra};
use schemars::JsonSchema;
use serde::Deserialize;

/// The `todo_write` tool (the original's schema, reference dsh-product §3.6).
struct TodoWrite;

impl ToolSpec for TodoWrite {
    const NAME: &'static str = tool::TODO_WRITE;
    const DESCRIPTION: &'static str =
        "Replace the session's todo list with the given items, to plan and track multi-step work.";
    type Args = TodoArgs;
}

#[derive(Deserialize, JsonSchema)]
struct TodoArgs {
    todos: Vec<TodoItem>,
}

// One item (no doc comment: it would be the model-visible description).
// The model is told no other keys exist; any it sends anyway are kept as
// they came (`rest`), so the logged list is what it wrote.
#[derive(Deserialize, JsonSchema)]
#[schemars(extend("additionalProperties" = false))]
struct TodoItem {
    content: String,
    #[schemars(with = "Status")]
    status: TodoStatus,
    #[serde(flatten)]
    #[schemars(skip)]
    rest: Extra,
}

// The schema of a status (the values of `records::TodoStatus`; no doc
// comments, which would become model-visible descriptions).
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum Status {
    Pending,
    InProgress,
    Completed,
}

impl From<TodoItem> for records::Todo {
    fn from(item: TodoItem) -> records::Todo {
        records::Todo {
            content: item.content,
            status: item.status,
            extra: item.rest,
        }
    }
}

async fn execute(ctx: Context, req: Request) -> Result<Reply> {
    let exec = dsh_sdk::tool::exec(&req)?;
    let todos = exec.arguments_for::<TodoWrite>()?.todos;
    let mut seen = HashSet::new();
    let (mut pending, mut doing, mut done) = (0, 0, 0);
    for t in &todos {
        let content = t.content.trim();
        if content.is_empty() {
            return Err(Error::new(INVALID_ARGS, "a todo needs non-empty content"));
        }
        if !seen.insert(content.to_owned()) {
            return Err(Error::new(
                INVALID_ARGS,
                format!("duplicate todo: {content}"),
            ));
        }
        match t.status {
            TodoStatus::Pending => pending += 1,
            TodoStatus::InProgress => doing += 1,
            TodoStatus::Completed => done += 1,
        }
    }
    if let Some(agent) = exec.agent.as_deref() {
        let data = records::TodoWrite {
            todos: todos.into_iter().map(records::Todo::from).collect(),
            extra: Extra::new(),
        };
        Sessions::new(&ctx)
            .append(agent, NewEvent::typed(event::TODO_WRITE, &data)?)
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
        register_tools(&ctx, vec![declaration::<TodoWrite>()], move |req| {
            execute(c.clone(), req)
        })
        .await?;
        Ok(())
    }
}

dsh_sdk::export_plugin!(Todo);
