//! `checkpoint-policy`: makes the log durable at the points the original
//! does (reference dsh-core §8.4): before each step (`agent/pre-step`),
//! before each model request (`llm/stream`), before each tool body
//! (`tools/execute`).

use dsh_sdk::names::{bus, service, sessions};
use dsh_sdk::prelude::*;

async fn flush(ctx: &Context, session: Option<&str>) {
    if let Some(id) = session.filter(|s| !s.is_empty()) {
        if let Err(e) = ctx
            .service(service::SESSIONS)
            .call(sessions::FLUSH, json!({"id": id}))
            .await
        {
            dsh_sdk::tracing::warn!("checkpoint flush of {id} failed: {e}");
        }
    }
}

struct Checkpoint;

impl Plugin for Checkpoint {
    const NAME: &'static str = "checkpoint-policy";
    const DESCRIPTION: &'static str = "flush before each model request and tool call";
    const INJECT: &'static [&'static str] = &[service::SESSIONS];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        for (event, key) in [
            (bus::AGENT_PRE_STEP, "/agent"),
            (bus::LLM_STREAM, "/sessionId"),
            (bus::TOOLS_EXECUTE, "/exec/agent"),
        ] {
            let c = ctx.clone();
            ctx.on(event, move |ev| {
                let c = c.clone();
                async move {
                    flush(&c, ev.payload.pointer(key).and_then(Value::as_str)).await;
                    ev.forward().await
                }
            });
        }
        Ok(())
    }
}

dsh_sdk::export_plugin!(Checkpoint);
