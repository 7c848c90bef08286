//! Fetching a page: the URL vetted (http(s), no credentials, no private
//! address unless allowed, the vetted address pinned for the connection),
//! then a body bounded in size and time. Bodies are never decompressed: a
//! content-encoded answer is refused before its body is read.

use std::net::SocketAddr;
use std::time::Instant;

use dsh_sdk::prelude::*;
use reqwest::header::{CONTENT_ENCODING, CONTENT_TYPE, LOCATION};

use crate::address::is_private;
use crate::codes;
use crate::config::Config;

/// A fetched body and what describes it.
pub struct Fetched {
    /// The URL asked for.
    pub url: String,
    /// The `content-type` header, lowercased.
    pub content_type: Option<String>,
    /// The body, at most `maxBytes`.
    pub body: Vec<u8>,
}

/// Fetches `url` under `config`'s caps; gives up at `deadline`.
pub async fn fetch(config: &Config, url: &str, deadline: Instant) -> Result<Fetched> {
    match tokio::time::timeout_at(deadline.into(), fetch_unbounded(config, url)).await {
        Ok(result) => result,
        Err(_) => Err(Error::new(
            codes::TIMEOUT,
            format!(
                "{url} did not answer within {} ms (timeoutMs); try again later, or raise timeoutMs in the tool-web row",
                config.timeout_ms
            ),
        )),
    }
}

/// `e` and its causes, for a person: reqwest's own message alone says
/// "error sending request" and hides why.
fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

fn failed(url: &str, e: &reqwest::Error) -> Error {
    Error::new(
        codes::FAILED,
        format!("fetching {url} failed: {}", describe(e)),
    )
}

/// The URL parsed and vetted, with the address to connect to.
struct Target {
    url: reqwest::Url,
    /// The host as the URL names it, without IPv6 brackets.
    host: String,
    addr: SocketAddr,
}

async fn vet(config: &Config, url: &str) -> Result<Target> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| Error::new(codes::INVALID_URL, format!("invalid URL {url}: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Error::new(
            codes::INVALID_URL,
            format!(
                "only http and https URLs can be fetched, not {}",
                parsed.scheme()
            ),
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Error::new(
            codes::INVALID_URL,
            "URLs with credentials are refused",
        ));
    }
    let shown = parsed
        .host_str()
        .ok_or_else(|| Error::new(codes::INVALID_URL, "the URL has no host"))?
        .to_owned();
    let port = parsed
        .port_or_known_default()
        .ok_or_else(|| Error::new(codes::INVALID_URL, format!("{url} has no port")))?;
    let host = shown
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| Error::new(codes::DNS, format!("cannot resolve {shown}: {e}")))?
        .collect();
    let addr = *addrs
        .first()
        .ok_or_else(|| Error::new(codes::DNS, format!("{shown} has no address")))?;
    if !config.allow_private {
        if let Some(private) = addrs.iter().find(|a| is_private(a.ip())) {
            return Err(Error::new(
                codes::PRIVATE_ADDRESS,
                format!(
                    "{shown} resolves to a private or loopback address ({}); set allowPrivate = true in the tool-web row to allow it",
                    private.ip()
                ),
            ));
        }
    }
    Ok(Target {
        url: parsed,
        host,
        addr,
    })
}

fn client(target: &Target) -> Result<reqwest::Client> {
    let origin = target.url.origin();
    reqwest::Client::builder()
        // The vetted address, so DNS cannot be re-pointed in between.
        .resolve(&target.host, target.addr)
        // Never a proxy from the environment (`HTTP_PROXY`, `ALL_PROXY`, ...,
        // which reqwest honours by default): it would connect somewhere else
        // than the vetted address, and a proxy resolves the host itself.
        .no_proxy()
        .redirect(reqwest::redirect::Policy::custom(move |a| {
            if a.url().origin() == origin && a.previous().len() < 5 {
                a.follow()
            } else {
                a.stop()
            }
        }))
        // Never inflate a body, even if another crate of the build enables
        // reqwest's decompression features (cargo unifies features).
        .no_gzip()
        .no_brotli()
        .no_deflate()
        .no_zstd()
        .build()
        .map_err(|e| {
            Error::new(
                codes::FAILED,
                format!("cannot build the HTTP client: {}", describe(&e)),
            )
        })
}

async fn fetch_unbounded(config: &Config, url: &str) -> Result<Fetched> {
    let target = vet(config, url).await?;
    let mut resp = client(&target)?
        .get(target.url.clone())
        .header("User-Agent", concat!("dsh/", env!("CARGO_PKG_VERSION")))
        .send()
        .await
        .map_err(|e| failed(url, &e))?;
    let status = resp.status();
    if status.is_redirection() {
        let to = resp
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("(no location)");
        return Err(Error::new(
            codes::HTTP,
            format!(
                "{url} answered HTTP {} redirecting to {to}: only up to 5 redirects within the same origin are followed; fetch that URL itself if it is the page you want",
                status.as_u16()
            ),
        ));
    }
    if !status.is_success() {
        return Err(Error::new(
            codes::HTTP,
            format!("{url} answered HTTP {}", status.as_u16()),
        ));
    }
    if let Some(encoding) = resp.headers().get(CONTENT_ENCODING) {
        let encoding = String::from_utf8_lossy(encoding.as_bytes())
            .trim()
            .to_owned();
        if !encoding.eq_ignore_ascii_case("identity") {
            return Err(Error::new(
                codes::ENCODING,
                format!(
                    "{url} sent its body compressed with {encoding} (content-encoding), which web_fetch refuses: bodies are not decompressed, so a small download cannot inflate into a huge one"
                ),
            ));
        }
    }
    let max = config.max_bytes;
    if let Some(declared) = resp.content_length().filter(|n| *n > max as u64) {
        return Err(Error::new(
            codes::TOO_LARGE,
            format!(
                "{url} declares {declared} bytes, more than {max} (maxBytes); raise maxBytes in the tool-web row to fetch it"
            ),
        ));
    }
    let content_type = resp
        .headers()
        .get(CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase());
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| failed(url, &e))? {
        if body.len() + chunk.len() > max {
            return Err(Error::new(
                codes::TOO_LARGE,
                format!(
                    "{url} is more than {max} bytes (maxBytes); raise maxBytes in the tool-web row to fetch it"
                ),
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Fetched {
        url: url.to_owned(),
        content_type,
        body,
    })
}
