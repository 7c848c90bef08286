//! One server's bridge: keeps a connection up (reconnecting with backoff
//! when it drops), keeps the registered tools equal to the server's list,
//! and runs the model's calls over whichever connection is current.
//!
//! Only the bridge's own task connects and syncs, so syncs never overlap;
//! calls read the current connection and never wait for one.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

use dsh_sdk::api::tools::{RegisterParams, Tools};
use dsh_sdk::names::code;
use dsh_sdk::prelude::*;
use tokio::sync::Notify;

use crate::changes::ListChanges;

use crate::config::{Server, Transport};
use crate::connect::{connect, Connection, Failure};
use crate::naming::public_name;

/// Where the connection stands.
#[derive(Clone)]
pub enum Link {
    /// The first connection is being made.
    Starting,
    /// Connected.
    Up(Rc<Connection>),
    /// Lost or failed; attempt `attempt` of the budget comes next.
    Down { attempt: u32, reason: String },
    /// Given up (or reconnecting is off): calls fail until a reconnect.
    Stopped { reason: String },
    /// The server wants an OAuth login first: calls fail until one.
    NeedsLogin { reason: String },
}

/// One server's bridge.
pub struct Bridge {
    ctx: Context,
    /// The row.
    pub server: Server,
    /// The service the tools are registered with.
    service: String,
    /// The connection, as calls see it.
    link: RefCell<Link>,
    /// Public name → the server's name, of the tools registered now.
    tools: RefCell<BTreeMap<String, String>>,
    /// The server's `tools/list_changed`, and the syncs that covered them.
    changes: ListChanges,
    /// Signalled to reconnect now (a user's `/mcp reconnect`).
    reconnect_now: Notify,
    /// Connections made, for status.
    generation: Cell<u64>,
    /// Where an HTTP server's OAuth token is kept.
    token: Option<std::path::PathBuf>,
}

impl Bridge {
    /// A bridge for `server` whose tools are served by `service`; `token`
    /// is where an HTTP server's OAuth token is kept.
    pub fn new(
        ctx: Context,
        server: Server,
        service: String,
        token: Option<std::path::PathBuf>,
    ) -> Bridge {
        Bridge {
            ctx,
            server,
            service,
            link: RefCell::new(Link::Starting),
            tools: RefCell::new(BTreeMap::new()),
            changes: ListChanges::new(),
            reconnect_now: Notify::new(),
            generation: Cell::new(0),
            token,
        }
    }

    fn at(&self) -> String {
        format!("mcp-client({})", self.server.name)
    }

    /// The connection as calls see it.
    pub fn link(&self) -> Link {
        self.link.borrow().clone()
    }

    /// The number of tools registered now.
    pub fn tool_count(&self) -> usize {
        self.tools.borrow().len()
    }

    /// The server's name of public tool `name`.
    pub fn raw_name(&self, name: &str) -> Option<String> {
        self.tools.borrow().get(name).cloned()
    }

    /// Asks the bridge to drop its connection and connect again now, with
    /// a fresh attempt budget.
    pub fn reconnect(&self) {
        self.reconnect_now.notify_one();
    }

    /// The connection for a call of the server's tool, or why there is
    /// none.
    pub fn connection(&self) -> Result<Rc<Connection>> {
        let at = self.at();
        let why = match &*self.link.borrow() {
            Link::Up(conn) => return Ok(conn.clone()),
            Link::Starting => format!("{at}: the server is still starting"),
            Link::Down { attempt, reason } => format!(
                "{at}: the server is not connected ({reason}); reconnect attempt {attempt}/{} pending",
                self.server.reconnect.attempts
            ),
            Link::Stopped { reason } => format!("{at}: the server is not connected ({reason})"),
            Link::NeedsLogin { reason } => format!(
                "{at}: the server is not connected ({reason}); `/mcp login {}` in the chat authorizes it",
                self.server.name
            ),
        };
        Err(Error::new(code::MCP_UNAVAILABLE, why))
    }

    /// The first connection and its tools, for a row that fails when they
    /// fail (`failOnStartupError`).
    pub async fn start(&self) -> Result<Rc<Connection>> {
        self.open_synced().await.map_err(|e| {
            Error::new(
                code::MCP_UNAVAILABLE,
                format!(
                    "{}: initial connection or tool synchronization failed: {e}",
                    self.at()
                ),
            )
        })
    }

    /// A new connection with the server's tools registered.
    async fn open_synced(&self) -> std::result::Result<Rc<Connection>, Failure> {
        let conn = self.open().await?;
        self.sync(&conn).await?;
        Ok(conn)
    }

    async fn open(&self) -> std::result::Result<Rc<Connection>, Failure> {
        let notices = self.changes.notices();
        let conn = connect(&self.ctx, &self.server, notices, self.token.clone()).await?;
        self.generation.set(self.generation.get() + 1);
        Ok(Rc::new(conn))
    }

    /// Keeps the server connected until the row goes (the task is the
    /// fiber's: it ends with it). `first` is a
    /// connection [`Bridge::start`] made and synced already.
    pub async fn run(self: Rc<Self>, first: Option<Rc<Connection>>) {
        let at = self.at();
        let policy = self.server.reconnect;
        let mut failures = 0u32;
        let mut ready = first;
        loop {
            let attempt = match ready.take() {
                Some(conn) => Ok(conn),
                None => self.open_synced().await,
            };
            let reason = match attempt {
                Ok(conn) => {
                    tracing::info!("{at}: connected, {} tools", self.tool_count());
                    if failures > 0 {
                        tracing::info!(
                            "{at}: reconnected and re-synced tools (attempt {failures}/{})",
                            policy.attempts
                        );
                    }
                    *self.link.borrow_mut() = Link::Up(conn.clone());
                    let since = Instant::now();
                    let asked = self.serve(&conn).await;
                    drop(conn);
                    if asked || since.elapsed() >= policy.max {
                        failures = 0;
                    }
                    if asked {
                        *self.link.borrow_mut() = Link::Starting;
                        continue;
                    }
                    "connection lost".to_owned()
                }
                Err(Failure::NeedsLogin(reason)) => {
                    tracing::warn!(
                        "{at}: {reason}; `/mcp login {}` in the chat authorizes it",
                        self.server.name
                    );
                    *self.link.borrow_mut() = Link::NeedsLogin { reason };
                    self.reconnect_now.notified().await;
                    failures = 0;
                    continue;
                }
                // Said once, with the retry below.
                Err(Failure::Other(e)) => format!("connection attempt failed: {e}"),
            };
            if !policy.enabled {
                tracing::error!(
                    "{at}: {reason} and reconnect is disabled; its tools fail until `/mcp reconnect {}` or a reload",
                    self.server.name
                );
                *self.link.borrow_mut() = Link::Stopped { reason };
                self.reconnect_now.notified().await;
                continue;
            }
            failures += 1;
            if failures > policy.attempts {
                tracing::error!(
                    "{at}: giving up after {} consecutive failed reconnect attempts; tools unregistered; `/mcp reconnect {}` or a reload tries again",
                    policy.attempts,
                    self.server.name
                );
                self.unregister_all().await;
                *self.link.borrow_mut() = Link::Stopped {
                    reason: format!("gave up after {} attempts: {reason}", policy.attempts),
                };
                failures = 0;
                self.reconnect_now.notified().await;
                continue;
            }
            let delay = policy.delay(failures);
            tracing::warn!(
                "{at}: {reason}; reconnecting in {}ms (attempt {failures}/{})",
                delay.as_millis(),
                policy.attempts
            );
            *self.link.borrow_mut() = Link::Down {
                attempt: failures,
                reason,
            };
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.reconnect_now.notified() => failures = 0,
            }
        }
    }

    /// Serves `conn` until it closes (false) or a reconnect is asked for
    /// (true), re-syncing the tools whenever the server says they changed.
    async fn serve(&self, conn: &Connection) -> bool {
        loop {
            tokio::select! {
                () = conn.closed() => return false,
                () = self.reconnect_now.notified() => return true,
                () = self.changes.next() => {
                    tracing::info!("{}: tool list changed, re-syncing", self.at());
                    if let Err(e) = self.sync(conn).await {
                        tracing::error!("{}: tool re-sync failed: {e}", self.at());
                    }
                }
            }
        }
    }

    /// Makes the registered tools the server's list: gone ones
    /// unregistered, the rest registered (replacing the previous
    /// definition). A list that cannot be read keeps the tools as they
    /// are; a registration refused drops them all (never half a list).
    async fn sync(&self, conn: &Connection) -> std::result::Result<(), String> {
        // Every sync covers the notices seen before it started (a
        // reconnect's included), so no waiting call outlives it.
        self.changes.sync_started();
        let result = self.sync_list(conn).await;
        self.changes.sync_ended();
        result
    }

    async fn sync_list(&self, conn: &Connection) -> std::result::Result<(), String> {
        let listed = tokio::time::timeout(self.server.startup_timeout, conn.peer.list_all_tools())
            .await
            .map_err(|_| {
                format!(
                    "tools/list did not answer within {} ms",
                    self.server.startup_timeout.as_millis()
                )
            })?
            .map_err(|e| format!("tools/list failed: {e}"))?;
        let mut next: BTreeMap<String, (String, RegisterParams)> = BTreeMap::new();
        for tool in listed {
            let raw = tool.name.to_string();
            if !self.server.filter.offers(&raw) {
                continue;
            }
            let name = public_name(&self.server.name, &raw);
            let params = RegisterParams {
                name: name.clone(),
                description: tool.description.as_deref().unwrap_or("").to_owned(),
                // The server's schema, as sent: the model gets it verbatim.
                parameters: serde_json::Value::Object((*tool.input_schema).clone()),
                service: self.service.clone(),
                replace: true,
                ..RegisterParams::default()
            };
            if next.insert(name, (raw.clone(), params)).is_some() {
                return Err(format!(
                    "server listed tool {raw:?} more than once (or two names that normalize alike): invalid tool list"
                ));
            }
        }
        let registry = Tools::new(&self.ctx);
        let gone: Vec<String> = self
            .tools
            .borrow()
            .keys()
            .filter(|k| !next.contains_key(*k))
            .cloned()
            .collect();
        for name in gone {
            self.tools.borrow_mut().remove(&name);
            if let Err(e) = registry.unregister(&name).await {
                tracing::warn!("{}: unregistering {name}: {e}", self.at());
            }
        }
        for (name, (raw, params)) in next {
            if let Err(e) = registry.register(&params).await {
                tracing::error!(
                    "{}: tool registration failed, no tools registered: {e}",
                    self.at()
                );
                self.unregister_all().await;
                return Err(format!("registering {name}: {e}"));
            }
            self.tools.borrow_mut().insert(name, raw);
        }
        Ok(())
    }

    async fn unregister_all(&self) {
        let names: Vec<String> = std::mem::take(&mut *self.tools.borrow_mut())
            .into_keys()
            .collect();
        let registry = Tools::new(&self.ctx);
        for name in names {
            if let Err(e) = registry.unregister(&name).await {
                tracing::warn!("{}: unregistering {name}: {e}", self.at());
            }
        }
    }

    /// Waits until the tools are the server's latest list: a call whose
    /// server changed its list while answering returns after the re-sync,
    /// so the next request offers the new list.
    pub async fn tools_settled(&self) {
        self.changes.settled(self.server.startup_timeout).await;
    }

    /// Starts an OAuth login (an HTTP server's): answers the URL the user
    /// opens; once the browser comes back, the token is stored and the
    /// bridge connects with it.
    pub async fn login(self: &Rc<Self>) -> Result<String> {
        let at = self.at();
        let (Transport::Http(http), Some(token)) = (&self.server.transport, &self.token) else {
            return Err(Error::msg(format!(
                "{at}: only a Streamable HTTP server logs in"
            )));
        };
        if http.sends_credentials() {
            return Err(Error::msg(format!(
                "{at}: the row sends its own credentials (a bearer variable or an Authorization header); OAuth is not used"
            )));
        }
        let login = crate::auth::begin(http, token.clone())
            .await
            .map_err(|e| Error::new(code::MCP_UNAVAILABLE, format!("{at}: {e}")))?;
        let url = login.url.clone();
        let weak = Rc::downgrade(self);
        self.ctx.spawn(async move {
            match login.finish().await {
                Ok(()) => {
                    tracing::info!("{at}: authorized; connecting with the new token");
                    if let Some(bridge) = weak.upgrade() {
                        bridge.reconnect();
                    }
                }
                Err(e) => tracing::error!("{at}: login failed: {e}"),
            }
        });
        Ok(url)
    }

    /// Connections made so far.
    pub fn generation(&self) -> u64 {
        self.generation.get()
    }
}
