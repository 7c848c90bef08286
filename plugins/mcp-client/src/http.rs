//! Streamable HTTP: rmcp's client transport on a reqwest client built
//! here: TLS through rustls with ring and the webpki roots (no
//! process-wide crypto provider, no OpenSSL), no redirects followed (a
//! redirect would replay the session id and headers elsewhere), headers
//! and a bearer token from the row, or the OAuth token stored for the
//! server (see auth.rs).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use reqwest013 as reqwest;
use rmcp::transport::auth::AuthClient;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;

use crate::config::Http;

/// A server's transport: plain, or with the OAuth token stored for it.
pub enum Transport {
    /// Headers and a bearer token from the row, if any.
    Plain(StreamableHttpClientTransport<reqwest::Client>),
    /// The stored OAuth token on every request (refreshed as it expires).
    Authorized(StreamableHttpClientTransport<AuthClient<reqwest::Client>>),
}

/// The transport of `http`, or why it cannot be made (a header that is
/// not a header, a token variable that is unset, a stored token that
/// cannot be read). `token` is where the server's OAuth token would be;
/// a row that names a bearer variable never uses it.
pub async fn transport(http: &Http, token: Option<PathBuf>) -> Result<Transport, String> {
    let mut headers = HashMap::new();
    let mut from_env = Vec::new();
    for (name, var) in &http.env_headers {
        let value = std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("the variable {var} of header {name} is not set"))?;
        from_env.push((name, value));
    }
    let fixed = http.headers.iter().map(|(n, v)| (n, v.clone()));
    for (name, value) in fixed.chain(from_env) {
        let name = reqwest::header::HeaderName::try_from(name.as_str())
            .map_err(|e| format!("header {name:?}: {e}"))?;
        // The error never shows the value: it may be a secret.
        let value = reqwest::header::HeaderValue::try_from(value.as_str())
            .map_err(|_| format!("header {name}: not a valid header value"))?;
        headers.insert(name, value);
    }
    let mut config =
        StreamableHttpClientTransportConfig::with_uri(http.url.as_str()).custom_headers(headers);
    if let Some(var) = &http.bearer_token_env_var {
        let token = std::env::var(var)
            .ok()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| format!("the bearer token variable {var} is not set"))?;
        config = config.auth_header(token);
    }
    let client = client(reqwest::redirect::Policy::none())?;
    let stored = match token {
        Some(path) if !http.sends_credentials() => crate::auth::stored(http, path).await?,
        _ => None,
    };
    Ok(match stored {
        Some(manager) => Transport::Authorized(StreamableHttpClientTransport::with_client(
            AuthClient::new(client, manager),
            config,
        )),
        None => Transport::Plain(StreamableHttpClientTransport::with_client(client, config)),
    })
}

/// This crate's HTTP client, following redirects as `redirect` says.
pub fn client(redirect: reqwest::redirect::Policy) -> Result<reqwest::Client, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .redirect(redirect)
        // Idle pooled connections stall about 40 ms on delayed ACKs when a
        // body was not read to its end (rmcp's own client does the same).
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| format!("HTTP client: {e}"))
}
