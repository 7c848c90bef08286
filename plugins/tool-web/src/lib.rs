//! `tool-web`: `web_fetch` (see README.md).
//!
//! A call is fetched ([`fetch`]) on the plugin's runtime, then decoded and
//! converted ([`page`], [`convert`]) on a blocking thread that stops as soon
//! as the call is cancelled or the plugin stops (`dsh_sdk::blocking`), so
//! the plugin thread never runs page-dependent work and every thread it
//! starts ends with the call.

mod address;
mod codes;
mod config;
mod convert;
mod decode;
mod fetch;
mod page;

use std::time::{Duration, Instant};

use dsh_sdk::names::{service, tool};
use dsh_sdk::prelude::*;
use dsh_sdk::tool::{declaration, register_tools, text_reply, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;

use config::Config;

/// The `web_fetch` tool.
struct WebFetch;

impl ToolSpec for WebFetch {
    const NAME: &'static str = tool::WEB_FETCH;
    const DESCRIPTION: &'static str = "Fetch a web page (http or https) and return it as Markdown.";
    const PARALLEL: bool = true;
    type Args = WebFetchArgs;
}

#[derive(Deserialize, JsonSchema)]
struct WebFetchArgs {
    /// The URL to fetch.
    url: String,
}

/// One `web_fetch` call, bounded by `timeoutMs` from start to end.
async fn web_fetch(config: Config, url: String) -> Result<String> {
    let deadline = Instant::now() + Duration::from_millis(config.timeout_ms);
    let page = fetch::fetch(&config, &url, deadline).await?;
    dsh_sdk::blocking::cancellable(move |cancel| page::render(page, &config, deadline, cancel))
        .await?
}

struct Web;

impl Plugin for Web {
    const NAME: &'static str = "tool-web";
    const DESCRIPTION: &'static str = "the `web_fetch` tool";
    const INJECT: &'static [&'static str] = &[service::TOOLS];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        if !config.fetch {
            return Ok(());
        }
        register_tools(&ctx, vec![declaration::<WebFetch>()], move |req| {
            let config = config.clone();
            async move {
                let url = dsh_sdk::tool::exec(&req)?.arguments_for::<WebFetch>()?.url;
                text_reply(&web_fetch(config, url).await?)
            }
        })
        .await?;
        Ok(())
    }
}

dsh_sdk::export_plugin!(Web);
