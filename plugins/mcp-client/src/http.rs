//! Streamable HTTP: rmcp's client transport on a reqwest client built
//! here: TLS through rustls with ring and the webpki roots (no
//! process-wide crypto provider, no OpenSSL), no redirects followed (a
//! redirect would replay the session id and headers elsewhere), headers
//! and a bearer token from the row.

use std::collections::HashMap;
use std::sync::Arc;

use reqwest013 as reqwest;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;

use crate::config::Http;

/// The transport of `http`, or why it cannot be made (a header that is
/// not a header, a token variable that is unset).
pub fn transport(http: &Http) -> Result<StreamableHttpClientTransport<reqwest::Client>, String> {
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
    Ok(StreamableHttpClientTransport::with_client(
        client()?,
        config,
    ))
}

fn client() -> Result<reqwest::Client, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .redirect(reqwest::redirect::Policy::none())
        // Idle pooled connections stall about 40 ms on delayed ACKs when a
        // body was not read to its end (rmcp's own client does the same).
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| format!("HTTP client: {e}"))
}
