//! `tool-web`: `web_fetch` (see README.md).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use dsh_sdk::names::{service, tool};
use dsh_sdk::prelude::*;
use dsh_sdk::tool::{declaration, register_tools, text_reply, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, Clone)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    fetch: bool,
    allow_private: bool,
    max_bytes: usize,
    max_chars: usize,
    timeout_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            fetch: false,
            allow_private: false,
            max_bytes: 5_000_000,
            max_chars: 100_000,
            timeout_ms: 30_000,
        }
    }
}

fn private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v) => {
            v.is_private()
                || v.is_loopback()
                || v.is_link_local()
                || v.is_unspecified()
                || v.is_broadcast()
                || v.octets()[0] == 100 && (64..128).contains(&v.octets()[1])
        }
        IpAddr::V6(v) => {
            v.is_loopback()
                || v.is_unspecified()
                || (v.segments()[0] & 0xfe00) == 0xfc00
                || (v.segments()[0] & 0xffc0) == 0xfe80
                || v.to_ipv4_mapped().is_some_and(|m| private(IpAddr::V4(m)))
        }
    }
}

fn err(code: &str, m: String) -> Error {
    Error::new(code, m)
}

async fn fetch(config: &Config, url: &str) -> Result<String> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| err("WEB_INVALID_URL", format!("invalid URL {url}: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(err(
            "WEB_INVALID_URL",
            format!(
                "only http and https URLs can be fetched, not {}",
                parsed.scheme()
            ),
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(err(
            "WEB_INVALID_URL",
            "URLs with credentials are refused".into(),
        ));
    }
    let host = parsed
        .host_str()
        .ok_or_else(|| err("WEB_INVALID_URL", "the URL has no host".into()))?
        .to_owned();
    let port = parsed.port_or_known_default().unwrap_or(80);
    let lookup = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((lookup.as_str(), port))
        .await
        .map_err(|e| err("WEB_DNS", format!("cannot resolve {host}: {e}")))?
        .collect();
    let addr = *addrs
        .first()
        .ok_or_else(|| err("WEB_DNS", format!("{host} has no address")))?;
    if !config.allow_private && addrs.iter().any(|a| private(a.ip())) {
        return Err(err(
            "WEB_PRIVATE_ADDRESS",
            format!("{host} resolves to a private or loopback address ({}); set allowPrivate = true in the tool-web row to allow it", addr.ip()),
        ));
    }
    let origin = parsed.origin();
    let client = reqwest::Client::builder()
        .resolve(&lookup, addr)
        .timeout(Duration::from_millis(config.timeout_ms))
        .redirect(reqwest::redirect::Policy::custom(move |a| {
            if a.url().origin() == origin && a.previous().len() < 5 {
                a.follow()
            } else {
                a.stop()
            }
        }))
        .build()
        .map_err(|e| err("WEB_FAILED", e.to_string()))?;
    let mut resp = client
        .get(parsed)
        .header("User-Agent", concat!("dsh/", env!("CARGO_PKG_VERSION")))
        .send()
        .await
        .map_err(|e| err("WEB_FAILED", format!("fetching {url} failed: {e}")))?;
    if !resp.status().is_success() {
        return Err(err(
            "WEB_HTTP",
            format!("{url} answered HTTP {}", resp.status().as_u16()),
        ));
    }
    let ctype = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| err("WEB_FAILED", e.to_string()))?
    {
        body.extend_from_slice(&chunk);
        if body.len() > config.max_bytes {
            return Err(err(
                "WEB_TOO_LARGE",
                format!("{url} is larger than {} bytes", config.max_bytes),
            ));
        }
    }
    let text =
        String::from_utf8(body).map_err(|_| err("WEB_BINARY", format!("{url} is not text")))?;
    let mut out = if ctype.contains("html") || text.trim_start().starts_with('<') {
        htmd::convert(&text).map_err(|e| err("WEB_FAILED", format!("cannot convert HTML: {e}")))?
    } else {
        text
    };
    if out.chars().count() > config.max_chars {
        out = out.chars().take(config.max_chars).collect::<String>() + "\n\n(truncated)";
    }
    Ok(out)
}

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
            let c = config.clone();
            async move {
                let url = dsh_sdk::tool::exec(&req)?.arguments_for::<WebFetch>()?.url;
                text_reply(&fetch(&c, &url).await?)
            }
        })
        .await?;
        Ok(())
    }
}

dsh_sdk::export_plugin!(Web);
