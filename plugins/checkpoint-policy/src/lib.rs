//! `checkpoint-policy`: makes the log durable at the points the original
//! does (reference dsh-core §8.4): before each step (`agent/pre-step`),
//! before each model request (`llm/stream`), before each tool body
//! (`tools/execute`).

use dsh_sdk::api::agent_loop::PreStep;
use dsh_sdk::api::sessions::Sessions;
use dsh_sdk::api::tools::ExecParams;
use dsh_sdk::names::{bus, service};
use dsh_sdk::prelude::*;

/// Makes `session`'s log durable through `sessions.flush`; a failure is
/// warned about (the step goes on, as in the original).
async fn flush(ctx: &Context, session: Option<&str>) {
    if let Some(id) = session.filter(|s| !s.is_empty()) {
        if let Err(e) = Sessions::new(ctx).flush(id).await {
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
        // The session each checkpoint makes durable, read from the event's
        // typed payload; the payload itself is passed on unparsed.
        let checkpoints: [(&str, SessionOf); 3] = [
            (bus::AGENT_PRE_STEP, |ev| {
                Ok(Some(ev.payload_as::<PreStep>()?.agent))
            }),
            (bus::LLM_STREAM, |ev| {
                Ok(ev.payload_as::<LoopRequest>()?.session_id)
            }),
            (bus::TOOLS_EXECUTE, |ev| {
                Ok(ev.payload_as::<ExecParams>()?.exec.agent)
            }),
        ];
        for (event, session_of) in checkpoints {
            let c = ctx.clone();
            ctx.on(event, move |ev| {
                let c = c.clone();
                async move {
                    // A payload that does not say its session is not this
                    // plugin's to refuse: the chain goes on unflushed.
                    match session_of(&ev) {
                        Ok(session) => flush(&c, session.as_deref()).await,
                        Err(e) => {
                            dsh_sdk::tracing::warn!("checkpoint at `{}` skipped: {e}", ev.name)
                        }
                    }
                    ev.forward().await
                }
            });
        }
        Ok(())
    }
}

/// Reads the session a checkpoint is for from an event.
type SessionOf = fn(&Event) -> Result<Option<String>>;

/// The part of an `llm/stream` payload this plugin reads: loop requests
/// carry their session.
#[derive(serde::Deserialize)]
struct LoopRequest {
    #[serde(rename = "sessionId", default)]
    session_id: Option<String>,
}

dsh_sdk::export_plugin!(Checkpoint);
