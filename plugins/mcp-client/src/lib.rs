//! `mcp-client`: one row per MCP server. The row's server is connected
//! (a child over stdio, or an endpoint over Streamable HTTP), its tools
//! registered as `mcp__<server>__<tool>` and kept equal to the server's
//! list, and the connection re-made with backoff when it drops. The row
//! applies at once: a slow server joins when it is ready, and the next
//! request's tool list says so.

use std::rc::Rc;

use dsh_sdk::api::host::Host;
use dsh_sdk::api::mcp::{self as api, LoginStarted, ServerState, ServerStatus};
use dsh_sdk::names::service;
use dsh_sdk::prelude::*;
use dsh_sdk::tool::{exec, serve_tools};

mod auth;
mod bridge;
mod call;
mod changes;
mod config;
mod connect;
mod http;
mod naming;
mod result;

use bridge::{Bridge, Link};
use config::{RowConfig, Transport};

struct McpClient;

impl Plugin for McpClient {
    const NAME: &'static str = api::PLUGIN;
    const DESCRIPTION: &'static str = "one MCP server's tools, kept connected";
    const INJECT: &'static [&'static str] = &[service::TOOLS];
    type Config = RowConfig;

    async fn apply(ctx: Context, config: RowConfig) -> Result<()> {
        let server = config.check()?;
        let token = match &server.transport {
            Transport::Http(http) => {
                let home = std::path::PathBuf::from(Host::new(&ctx).info().await?.home);
                Some(auth::token_path(&home, &server.name, &http.url))
            }
            Transport::Stdio(_) => None,
        };
        let bridge: Rc<Bridge> = Rc::new_cyclic(|weak: &std::rc::Weak<Bridge>| {
            let weak = weak.clone();
            let service = serve_tools(&ctx, move |req| {
                let weak = weak.clone();
                async move {
                    let bridge = weak.upgrade().ok_or_else(|| {
                        Error::new(codes::DISPOSED, "mcp-client: the row is going")
                    })?;
                    let exec = exec(&req)?;
                    Reply::json(call::call(&bridge, &exec).await?)
                }
            });
            Bridge::new(ctx.clone(), server, service, token)
        });
        provide_status(&ctx, &bridge);
        let first = if bridge.server.fail_on_startup_error {
            Some(bridge.start().await?)
        } else {
            None
        };
        ctx.spawn(bridge.clone().run(first));
        Ok(())
    }
}

/// `mcp:<fiber>`: the bridge's state for `/mcp`, a reconnect, a login.
fn provide_status(ctx: &Context, bridge: &Rc<Bridge>) {
    let weak = Rc::downgrade(bridge);
    ctx.provide(api::service_name(ctx.fiber()), move |req| {
        let weak = weak.clone();
        async move {
            let bridge = weak
                .upgrade()
                .ok_or_else(|| Error::new(codes::DISPOSED, "mcp-client: the row is going"))?;
            match req.method.as_str() {
                api::method::STATUS => Reply::json(status(&bridge)),
                api::method::RECONNECT => {
                    bridge.reconnect();
                    Reply::json(status(&bridge))
                }
                api::method::LOGIN => Reply::json(LoginStarted {
                    url: bridge.login().await?,
                }),
                _ => Err(req.unknown_method()),
            }
        }
    });
}

fn status(bridge: &Bridge) -> ServerStatus {
    let (state, detail) = match bridge.link() {
        Link::Starting => (ServerState::Starting, None),
        Link::Up(_) => (ServerState::Connected, None),
        Link::Down { attempt, reason } => (
            ServerState::Reconnecting,
            Some(format!(
                "{reason}; attempt {attempt}/{}",
                bridge.server.reconnect.attempts
            )),
        ),
        Link::Stopped { reason } => (ServerState::Stopped, Some(reason)),
        Link::NeedsLogin { reason } => (ServerState::NeedsLogin, Some(reason)),
    };
    ServerStatus {
        server_name: bridge.server.name.clone(),
        transport: match &bridge.server.transport {
            Transport::Stdio(_) => api::transport::STDIO.to_owned(),
            Transport::Http(_) => api::transport::STREAMABLE_HTTP.to_owned(),
        },
        state,
        detail,
        tools: bridge.tool_count(),
        connections: bridge.generation(),
    }
}

dsh_sdk::export_plugin!(McpClient);
