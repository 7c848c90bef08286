//! A model's context window, learned from its server when the route's
//! config does not say it: asked once per route and model, cached in
//! memory and on disk across restarts, and asked again in the background
//! when the figure may have changed.
//!
//! - **What is asked**: the endpoints of [`probe`] in order (llama.cpp's
//!   `/props`, the OpenAI-compatible `{baseUrl}/models`, Ollama's `/api/ps`
//!   and `/api/show`, LM Studio's `/api/v1/models` and `/api/v0/models`),
//!   until one states the window; all of it within the lookup's time
//!   (default [`DEFAULT_TIMEOUT_MS`]), each answer read up to
//!   [`probe::MAX_ANSWER_BYTES`]. A server that answers none of them, or
//!   garbage, states no window: the adapter's default applies, with one
//!   warning.
//! - **When**: at the first `resolveModel` of a model the config gives no
//!   window for, never while a request streams. Concurrent first asks of a
//!   route wait for one lookup.
//! - **Cache**: in memory for the life of the adapter, and in
//!   `$DSH_HOME/cache/models/` ([`store`]) so a restart asks nothing.
//! - **Revalidation**: a figure (or the server's silence) learned more
//!   than [`FRESH_FOR`] ago is still used, and asked again in the
//!   background. One the route reported a context overflow for since
//!   ([`WindowLookup::overflowed`]: a server restarted with a smaller
//!   context) is asked again at its next use, before it answers (within
//!   the lookup's time; the figure stays when the server does not
//!   answer), so the overflow's recovery (`compaction-basic` asks right
//!   away) is sized by the server's window now. A server that did not
//!   answer, or a provisional figure (an
//!   Ollama or LM Studio model not loaded yet), is asked again after
//!   [`RETRY_AFTER`], and is not written to disk.
//! - **Config**: each adapter's `defaultContextWindow`, `windowLookup` and
//!   `windowLookupTimeoutMs` ([`settings`]); a model's window in force is
//!   [`resolve`]d from what the config or catalog states
//!   ([`crate::catalog`]), else this lookup, else the adapter's default.

pub mod probe;
pub mod settings;
pub mod store;

pub use settings::{Route, Settings};

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dsh_sdk::api::host::Host;
use dsh_sdk::api::llm::ContextSource;
use dsh_sdk::vocab::LlmFailure;
use dsh_sdk::Context;

use crate::catalog::Window;
use crate::exchange;
use crate::failure::code;
use probe::{Outcome, Prober};

/// The default time one lookup may take, all endpoints included.
pub const DEFAULT_TIMEOUT_MS: u64 = 2000;

/// How long a window learned from a server (or its silence) is used
/// before the server is asked again, in the background.
pub const FRESH_FOR: Duration = Duration::from_secs(24 * 60 * 60);

/// How soon a server that did not answer, or a provisional figure, is
/// asked again (in the background).
pub const RETRY_AFTER: Duration = Duration::from_secs(60);

/// A window a server stated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerWindow {
    /// Its tokens.
    pub tokens: u64,
    /// The endpoint that stated it: its path (`/props`, `/v1/models`,
    /// `/api/ps`, `/api/show`...).
    pub endpoint: String,
}

/// What is known of one model.
#[derive(Debug, Clone)]
struct Known {
    /// The window, or none (the server stated none, or did not answer).
    window: Option<ServerWindow>,
    /// When to ask again (ms since the Unix epoch); 0: at the next use.
    ask_again_at_ms: u64,
    /// The route reported a context overflow since it was learned: the
    /// next use asks the server before answering.
    suspect: bool,
}

/// One route's lookups: what its server said of each model.
#[derive(Clone)]
pub struct WindowLookup(Rc<Inner>);

struct Inner {
    ctx: Context,
    client: reqwest::Client,
    plugin: &'static str,
    route: String,
    base_url: String,
    api_key_env: String,
    timeout: Duration,
    /// `$DSH_HOME/cache/models`, once asked of the host (`None` inside:
    /// no disk cache, the host did not say).
    dir: RefCell<Option<Option<PathBuf>>>,
    known: RefCell<HashMap<String, Known>>,
    /// Held by the lookup under way, so a concurrent first ask waits for
    /// it instead of asking again.
    asking: tokio::sync::Mutex<()>,
    /// Models being asked again in the background.
    refreshing: RefCell<HashSet<String>>,
    /// Models whose default window was warned about.
    warned: RefCell<HashSet<String>>,
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl WindowLookup {
    /// The lookups of the route `route` at `base_url` (its key in the
    /// environment variable `api_key_env`, "" for none), each within
    /// `timeout`; `plugin` names the adapter in warnings.
    pub fn new(
        ctx: &Context,
        client: reqwest::Client,
        plugin: &'static str,
        route: &str,
        base_url: &str,
        api_key_env: &str,
        timeout: Duration,
    ) -> WindowLookup {
        WindowLookup(Rc::new(Inner {
            ctx: ctx.clone(),
            client,
            plugin,
            route: route.to_owned(),
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key_env: api_key_env.to_owned(),
            timeout,
            dir: RefCell::new(None),
            known: RefCell::default(),
            asking: tokio::sync::Mutex::new(()),
            refreshing: RefCell::default(),
            warned: RefCell::default(),
        }))
    }

    /// The window the server states for `model`, or `None` when it states
    /// none (the adapter's default applies): from memory, else from the
    /// disk cache, else asked now (at most the lookup's time). A stale
    /// figure is returned at once and asked again in the background.
    pub async fn window(&self, model: &str) -> Option<ServerWindow> {
        if let Some(w) = self.remembered(model) {
            return w;
        }
        let _asking = self.0.asking.lock().await;
        if let Some(w) = self.remembered(model) {
            return w;
        }
        // After an overflow the figure in memory (and on disk) is suspect:
        // the server is asked now, and the figure kept if it does not say.
        let suspect = self.suspect(model);
        let dir = match suspect {
            Some(_) => None,
            None => self.cache_dir().await,
        };
        if let Some(cached) = dir
            .as_deref()
            .and_then(|d| store::read(d, &self.0.base_url, model))
        {
            let fresh_until = cached
                .learned_at_ms
                .saturating_add(FRESH_FOR.as_millis() as u64);
            self.remember(model, cached.window.clone(), fresh_until);
            if fresh_until <= now_ms() {
                self.refresh_in_background(model);
            }
            return cached.window;
        }
        let outcome = self.ask(model).await;
        self.settle(model, outcome, suspect).await
    }

    /// The route reported a context overflow for `model`: the server may
    /// run with another window now (restarted with a smaller context), so
    /// it is asked again at the next use, before that use is answered.
    pub fn overflowed(&self, model: &str) {
        if let Some(k) = self.0.known.borrow_mut().get_mut(model) {
            k.suspect = true;
        }
    }

    /// What memory holds for `model` when an overflow made it suspect.
    fn suspect(&self, model: &str) -> Option<Option<ServerWindow>> {
        let known = self.0.known.borrow();
        known
            .get(model)
            .filter(|k| k.suspect)
            .map(|k| k.window.clone())
    }

    /// A request to `model` ended with `failure`: an overflow makes the
    /// model's window due to be asked again ([`WindowLookup::overflowed`]).
    pub fn failed(&self, model: &str, failure: &LlmFailure) {
        if failure.code == code::CONTEXT_WINDOW_EXCEEDED {
            self.overflowed(model);
        }
    }

    /// What memory holds for `model` (asking again in the background when
    /// it is due); `None` when nothing, or only a figure an overflow made
    /// suspect.
    fn remembered(&self, model: &str) -> Option<Option<ServerWindow>> {
        let known = self.0.known.borrow().get(model).cloned()?;
        if known.suspect {
            return None;
        }
        if known.ask_again_at_ms <= now_ms() {
            self.refresh_in_background(model);
        }
        Some(known.window)
    }

    fn remember(&self, model: &str, window: Option<ServerWindow>, ask_again_at_ms: u64) {
        self.0.known.borrow_mut().insert(
            model.to_owned(),
            Known {
                window,
                ask_again_at_ms,
                suspect: false,
            },
        );
    }

    /// `$DSH_HOME/cache/models`, asked of the host once.
    async fn cache_dir(&self) -> Option<PathBuf> {
        if let Some(dir) = self.0.dir.borrow().clone() {
            return dir;
        }
        let dir = match Host::new(&self.0.ctx).info().await {
            Ok(info) => Some(PathBuf::from(info.home).join(store::DIR)),
            Err(e) => {
                dsh_sdk::tracing::debug!(
                    "{}: no $DSH_HOME from the host ({e}): the windows learned are not kept on disk",
                    self.0.plugin
                );
                None
            }
        };
        *self.0.dir.borrow_mut() = Some(dir.clone());
        dir
    }

    /// Asks the server about `model`, within the lookup's time.
    async fn ask(&self, model: &str) -> Outcome {
        // A route whose key is missing still asks: local servers take none.
        let key = exchange::api_key(&self.0.api_key_env).ok().flatten();
        Prober {
            client: &self.0.client,
            base_url: &self.0.base_url,
            key: key.as_deref(),
            model,
        }
        .ask(self.0.timeout)
        .await
    }

    /// Keeps what `outcome` says of `model` (in memory, and on disk when
    /// the server answered for good), warns once when it leaves the model
    /// without a window, and returns the window now in force. `previous`
    /// is what was known before (a revalidation keeps it when the server
    /// does not answer).
    async fn settle(
        &self,
        model: &str,
        outcome: Outcome,
        previous: Option<Option<ServerWindow>>,
    ) -> Option<ServerWindow> {
        let now = now_ms();
        let fresh = now.saturating_add(FRESH_FOR.as_millis() as u64);
        let retry = now.saturating_add(RETRY_AFTER.as_millis() as u64);
        let (window, ask_again, durable) = match outcome {
            Outcome::Stated(tokens, endpoint) => {
                (Some(ServerWindow { tokens, endpoint }), fresh, true)
            }
            Outcome::Provisional(tokens, endpoint) => {
                dsh_sdk::tracing::info!(
                    "{}: route `{}` model `{model}`: the server has not loaded the model; its window is taken as {tokens} tokens (from {endpoint}) until it is",
                    self.0.plugin,
                    self.0.route
                );
                (Some(ServerWindow { tokens, endpoint }), retry, false)
            }
            Outcome::Silent(why) => {
                self.warn_once(model, &why.join("; "));
                (None, fresh, true)
            }
            Outcome::Unreachable(why) => match previous {
                Some(kept) => (kept, retry, false),
                None => {
                    self.warn_once(model, &why);
                    (None, retry, false)
                }
            },
        };
        self.remember(model, window.clone(), ask_again);
        if durable {
            if let Some(dir) = self.cache_dir().await {
                if let Err(e) = store::write(&dir, &self.0.base_url, model, window.as_ref(), now) {
                    dsh_sdk::tracing::debug!(
                        "{}: cannot keep the window of `{model}` in {}: {e}",
                        self.0.plugin,
                        dir.display()
                    );
                }
            }
        }
        window
    }

    /// Warns, once per model, that the server stated no window for it.
    fn warn_once(&self, model: &str, why: &str) {
        if self.0.warned.borrow_mut().insert(model.to_owned()) {
            dsh_sdk::tracing::warn!(
                "{}: route `{}` model `{model}`: the server did not state its context window ({why}); the adapter's default is used. Set the model's `contextWindow` in the route's `models` to choose it.",
                self.0.plugin,
                self.0.route
            );
        }
    }

    /// Asks about `model` again on a task of its own, unless it is being
    /// asked already; what was known stays in force meanwhile.
    fn refresh_in_background(&self, model: &str) {
        if !self.0.refreshing.borrow_mut().insert(model.to_owned()) {
            return;
        }
        let (this, model) = (self.clone(), model.to_owned());
        self.0.ctx.spawn(async move {
            let previous = this.0.known.borrow().get(&model).map(|k| k.window.clone());
            let outcome = this.ask(&model).await;
            this.settle(&model, outcome, previous).await;
            this.0.refreshing.borrow_mut().remove(&model);
        });
    }
}

/// The window in force for `model`: `stated` (by the config or the
/// catalog, [`crate::catalog::Catalog::stated`]) when there is one, else
/// the one its server states (asked once through `lookup`, when the route
/// looks windows up), else the adapter's default of `default_tokens`.
pub async fn resolve(
    stated: Option<Window>,
    lookup: Option<&WindowLookup>,
    model: &str,
    default_tokens: u64,
) -> Window {
    if let Some(stated) = stated {
        return stated;
    }
    let learned = match lookup {
        Some(lookup) => lookup.window(model).await,
        None => None,
    };
    match learned {
        Some(learned) => Window {
            tokens: learned.tokens,
            source: ContextSource::Server {
                endpoint: learned.endpoint,
            },
        },
        None => Window::assumed(default_tokens),
    }
}
