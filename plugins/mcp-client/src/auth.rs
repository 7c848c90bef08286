//! OAuth 2.1 with PKCE for a Streamable HTTP server that asks for it,
//! through rmcp's auth support: discovery from the server's 401
//! (protected resource, then authorization server metadata), dynamic
//! client registration, the authorization code flow with an S256
//! challenge, the code received on a loopback redirect, and tokens
//! refreshed by rmcp as they expire.
//!
//! Tokens live in `$DSH_HOME/mcp-auth/<server>-<hash of its URL>.json`,
//! mode 0600, written beside and renamed over: a server whose URL changed
//! never gets another's token. Every OAuth request goes through this
//! crate's HTTP client (rustls on ring, no process-wide provider).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use reqwest013 as reqwest;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationRequest, CredentialRefreshGuard, CredentialStore,
    OAuthHttpClient, OAuthHttpClientError, OAuthHttpClientFuture, OAuthHttpRedirectPolicy,
    OAuthHttpRequest, OAuthState, StoredCredentials,
};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::Http;

use dsh_sdk::api::mcp::AUTH_DIR;
/// The largest OAuth response read (rmcp's own bound).
const BODY_MAX: usize = 1 << 20;
/// The longest the user may take to authorize in the browser.
pub const LOGIN_WINDOW: Duration = Duration::from_secs(600);
/// The largest request the loopback redirect reads.
const CALLBACK_MAX: usize = 16 * 1024;
/// The longest a refresh waits for another process's refresh.
const REFRESH_LOCK_WAIT: Duration = Duration::from_secs(30);
/// The client name registered with the authorization server.
const CLIENT_NAME: &str = "dsh";

/// The token file of server `name` at `url`.
pub fn token_path(home: &Path, name: &str, url: &str) -> PathBuf {
    let hash: String = Sha256::digest(url.as_bytes())
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect();
    home.join(AUTH_DIR).join(format!("{name}-{hash}.json"))
}

/// Credentials in one file (see the module's doc).
pub struct FileStore {
    path: PathBuf,
}

impl FileStore {
    /// The store at `path`.
    pub fn new(path: PathBuf) -> FileStore {
        FileStore { path }
    }

    fn error(&self, e: impl std::fmt::Display) -> AuthError {
        AuthError::CredentialStoreError(format!("{}: {e}", self.path.display()))
    }

    /// Creates the token's directory (0700) if it is missing.
    fn make_dir(&self) -> std::io::Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }

    fn write(&self, bytes: &[u8]) -> std::io::Result<()> {
        self.make_dir()?;
        // A name of this write alone: two processes refreshing at once
        // never unlink or rename each other's half-written file.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = self
            .path
            .with_extension(format!("json.{}.{n}.tmp", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        let written = file.write_all(bytes).and_then(|()| file.sync_all());
        let renamed = written.and_then(|()| std::fs::rename(&tmp, &self.path));
        if renamed.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        renamed
    }
}

#[async_trait::async_trait]
impl CredentialStore for FileStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        match std::fs::read(&self.path) {
            // The error names where, never what (a token may be quoted).
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                self.error(format!(
                    "not a token file ({:?} at line {} column {})",
                    e.classify(),
                    e.line(),
                    e.column()
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.error(e)),
        }
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let bytes = serde_json::to_vec(&credentials).map_err(|e| self.error(e))?;
        self.write(&bytes).map_err(|e| self.error(e))
    }

    async fn clear(&self) -> Result<(), AuthError> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.error(e)),
        }
    }

    /// An exclusive `flock` of `<token>.lock`, held across a refresh and
    /// its save: two dsh processes on one server never both spend a
    /// rotating refresh token (the loser would have to log in again).
    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        use std::os::fd::AsRawFd;
        let lock = self.path.with_extension("lock");
        self.make_dir().map_err(|e| self.error(e))?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock)
            .map_err(|e| self.error(e))?;
        let deadline = std::time::Instant::now() + REFRESH_LOCK_WAIT;
        loop {
            // SAFETY: flock on a descriptor this function owns.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                // Unlocked when the guard (the open file) is dropped.
                return Ok(Some(CredentialRefreshGuard::new(file)));
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock || std::time::Instant::now() > deadline {
                return Err(self.error(format!("cannot lock {}: {e}", lock.display())));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// rmcp's OAuth requests on this crate's clients: one that follows a
/// few redirects (discovery), one that follows none (token requests).
struct OAuthHttp {
    follow: reqwest::Client,
    stop: reqwest::Client,
}

impl OAuthHttpClient for OAuthHttp {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let client = match request.redirect_policy {
                OAuthHttpRedirectPolicy::Stop => &self.stop,
                _ => &self.follow,
            };
            let mut sent = reqwest::Request::try_from(request.request)?;
            if let Some(timeout) = request.timeout {
                *sent.timeout_mut() = Some(timeout);
            }
            let mut response = client.execute(sent).await?;
            let mut answer = http::Response::builder()
                .status(response.status())
                .version(response.version());
            for (name, value) in response.headers() {
                answer = answer.header(name, value);
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                if body.len() + chunk.len() > BODY_MAX {
                    return Err(OAuthHttpClientError::from(format!(
                        "an OAuth response larger than {BODY_MAX} bytes"
                    )));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(answer.body(body)?)
        })
    }
}

/// An authorization manager for `http` whose tokens are in `store`.
async fn manager(http: &Http, store: PathBuf) -> Result<AuthorizationManager, String> {
    let client = OAuthHttp {
        follow: crate::http::client(reqwest::redirect::Policy::limited(10))?,
        stop: crate::http::client(reqwest::redirect::Policy::none())?,
    };
    let mut manager =
        AuthorizationManager::new_with_oauth_http_client(http.url.as_str(), Arc::new(client))
            .await
            .map_err(|e| format!("OAuth: {e}"))?;
    manager.set_credential_store(FileStore::new(store));
    Ok(manager)
}

/// The manager of a server with a stored token, ready to authorize
/// requests (refreshing the token when it expires); `None` when no token
/// is stored.
pub async fn stored(http: &Http, store: PathBuf) -> Result<Option<AuthorizationManager>, String> {
    if !store.is_file() {
        return Ok(None);
    }
    let mut manager = manager(http, store).await?;
    match manager.initialize_from_store().await {
        Ok(true) => Ok(Some(manager)),
        Ok(false) => Ok(None),
        Err(e) => Err(format!("stored OAuth token: {e}")),
    }
}

/// A login under way: the URL the user opens, and the wait for the
/// browser's redirect.
pub struct Login {
    /// Where the user authorizes.
    pub url: String,
    state: OAuthState,
    listener: tokio::net::TcpListener,
}

/// Starts a login to `http`: a loopback listener for the redirect,
/// discovery, registration, and the authorization URL with its PKCE
/// challenge.
pub async fn begin(http: &Http, store: PathBuf) -> Result<Login, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot listen for the OAuth redirect: {e}"))?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("cannot listen for the OAuth redirect: {e}"))?
        .port();
    let redirect = format!("http://127.0.0.1:{port}/callback");
    let mut state = OAuthState::Unauthorized(manager(http, store).await?);
    state
        .start_authorization(AuthorizationRequest::new(redirect).with_client_name(CLIENT_NAME))
        .await
        .map_err(|e| format!("OAuth: {e}"))?;
    let url = state
        .get_authorization_url()
        .await
        .map_err(|e| format!("OAuth: {e}"))?;
    Ok(Login {
        url,
        state,
        listener,
    })
}

impl Login {
    /// Waits (at most [`LOGIN_WINDOW`]) for the browser to come back with
    /// the code, exchanges it (with the PKCE verifier) and stores the
    /// token.
    pub async fn finish(mut self) -> Result<(), String> {
        let state = query_value(&self.url, "state")
            .ok_or_else(|| "OAuth: the authorization URL carries no state".to_owned())?;
        let callback = tokio::time::timeout(LOGIN_WINDOW, callback(&self.listener, &state))
            .await
            .map_err(|_| {
                format!(
                    "no authorization within {} minutes",
                    LOGIN_WINDOW.as_secs() / 60
                )
            })??;
        self.state
            .handle_callback_url(&callback)
            .await
            .map_err(|e| format!("OAuth: {e}"))?;
        Ok(())
    }
}

/// The value of `key` in `url`'s query.
fn query_value(url: &str, key: &str) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    let value = url
        .query_pairs()
        .find_map(|(k, v)| (k == key).then(|| v.into_owned()));
    value
}

/// The first redirect to `/callback` carrying `state` the listener gets,
/// as an absolute URL. Anything else on the port (a browser's favicon,
/// another local process guessing) is answered 404 or 400 and the wait
/// goes on: only the browser that was sent to authorize can end it.
async fn callback(listener: &tokio::net::TcpListener, state: &str) -> Result<String, String> {
    let port = listener
        .local_addr()
        .map_err(|e| format!("OAuth redirect: {e}"))?
        .port();
    // Each connection answered on its own, so one that sends nothing
    // (a browser's preconnect, a local process) never holds up the
    // redirect; those still open end with the login.
    let mut answering = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = accepted.map_err(|e| format!("OAuth redirect: {e}"))?;
                answering.spawn(answer(stream, port, state.to_owned()));
            }
            Some(done) = answering.join_next() => {
                if let Ok(Some(url)) = done {
                    return Ok(url);
                }
            }
        }
    }
}

/// Reads one request (at most [`CALLBACK_MAX`] bytes, within 10 s) and
/// answers it: the redirect carrying `state` gets a page and is returned
/// as an absolute URL; one with another state 400, anything else 404.
async fn answer(mut stream: tokio::net::TcpStream, port: u16, state: String) -> Option<String> {
    let mut request = Vec::new();
    let mut buf = [0u8; 2048];
    let read = async {
        while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < CALLBACK_MAX {
            match stream.read(&mut buf).await {
                Ok(n) if n > 0 => request.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
    let line = String::from_utf8_lossy(&request);
    let target = line
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("GET "))
        .and_then(|l| l.split(' ').next())
        .unwrap_or("");
    let url = format!("http://127.0.0.1:{port}{target}");
    let reply: std::borrow::Cow<'static, [u8]> = if !target.starts_with("/callback?") {
        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"[..].into()
    } else if query_value(&url, "state").as_deref() != Some(state.as_str()) {
        b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"[..].into()
    } else {
        let page = "<!doctype html><title>dsh</title><p>Authorized. You can close this tab.";
        let _ = stream
            .write_all(
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
                    page.len()
                )
                .as_bytes(),
            )
            .await;
        return Some(url);
    };
    let _ = stream.write_all(&reply).await;
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tokens_are_kept_private_and_per_url() {
        let home = std::env::temp_dir().join(format!("dsh-mcp-auth-{}", std::process::id()));
        let a = token_path(&home, "web", "https://a/mcp");
        assert_ne!(a, token_path(&home, "web", "https://b/mcp"));
        let store = FileStore::new(a.clone());
        assert!(store.load().await.unwrap().is_none());
        store
            .save(StoredCredentials::new(
                "client-1".into(),
                None,
                vec![],
                None,
            ))
            .await
            .unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&a).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir = std::fs::metadata(a.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir & 0o777, 0o700);
        assert_eq!(store.load().await.unwrap().unwrap().client_id, "client-1");
        store.clear().await.unwrap();
        assert!(store.load().await.unwrap().is_none());
        std::fs::remove_dir_all(&home).unwrap();
    }

    #[tokio::test]
    async fn one_refresh_at_a_time_across_stores_of_one_token() {
        let home = std::env::temp_dir().join(format!("dsh-mcp-lock-{}", std::process::id()));
        let path = token_path(&home, "web", "https://a/mcp");
        let first = FileStore::new(path.clone());
        let second = FileStore::new(path);
        let held = first.acquire_refresh_guard().await.unwrap();
        let waiting = second.acquire_refresh_guard();
        tokio::pin!(waiting);
        let early = tokio::time::timeout(Duration::from_millis(200), &mut waiting).await;
        assert!(early.is_err(), "the second refresh waits for the first");
        drop(held);
        let got = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert!(got.unwrap().unwrap().is_some());
        std::fs::remove_dir_all(&home).unwrap();
    }
}
