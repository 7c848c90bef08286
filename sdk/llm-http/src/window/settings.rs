//! How a route's config governs its windows, the same in every adapter:
//! `defaultContextWindow` (the window of a model its `models` gives none
//! for), `windowLookup` (ask the server for the others) and
//! `windowLookupTimeoutMs` (the most one lookup may take).
//!
//! Like [`crate::limits`], each adapter's config keeps these fields itself
//! (it refuses unknown keys, which serde cannot combine with a flattened
//! part) and hands them to [`Settings`] (its `window_settings()`).

use std::time::Duration;

use dsh_sdk::{codes, Context, Error, Result};

use super::{WindowLookup, DEFAULT_TIMEOUT_MS};

/// The config field of the default window, as users write it.
pub const DEFAULT_WINDOW_FIELD: &str = "defaultContextWindow";

/// The config field that switches the lookups.
pub const LOOKUP_FIELD: &str = "windowLookup";

/// The config field of the lookup's time.
pub const LOOKUP_TIMEOUT_FIELD: &str = "windowLookupTimeoutMs";

/// A route's window settings, as its config states them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// The window of a model the config's `models` gives none for
    /// (positive). When unset, the window is asked of the server (when
    /// `window_lookup` allows), else the adapter's default applies.
    pub default_context_window: Option<u64>,
    /// Ask the server for the window of a model the config gives none
    /// for. Unset: on, except at the hosts whose catalog the adapter
    /// keeps (see [`Settings::looks_up`]).
    pub window_lookup: Option<bool>,
    /// The most one lookup may take, all endpoints included, in ms
    /// (positive; default [`DEFAULT_TIMEOUT_MS`]).
    pub window_lookup_timeout_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            default_context_window: None,
            window_lookup: None,
            window_lookup_timeout_ms: DEFAULT_TIMEOUT_MS,
        }
    }
}

impl Settings {
    /// The refusal of settings whose numbers cannot work, naming the field.
    pub fn check(&self) -> Result<()> {
        if self.default_context_window == Some(0) {
            return Err(Error::new(
                codes::INVALID_CONFIG,
                format!(
                    "{DEFAULT_WINDOW_FIELD} must be a positive integer (or left out: the server is asked)"
                ),
            ));
        }
        if self.window_lookup_timeout_ms == 0 {
            return Err(Error::new(
                codes::INVALID_CONFIG,
                format!("{LOOKUP_TIMEOUT_FIELD} must be a positive integer"),
            ));
        }
        Ok(())
    }

    /// Whether windows the config does not state are asked of the server
    /// at `base_url`: `windowLookup`, by default on except when its host
    /// is one of `catalog_hosts` (a provider's own API, whose models the
    /// adapter's catalog describes and which has no such endpoint).
    pub fn looks_up(&self, base_url: &str, catalog_hosts: &[&str]) -> bool {
        self.window_lookup.unwrap_or_else(|| {
            reqwest::Url::parse(base_url)
                .ok()
                .and_then(|u| u.host_str().map(|h| !catalog_hosts.contains(&h)))
                .unwrap_or(true)
        })
    }

    /// The lookups of `route` when it [looks windows
    /// up](Settings::looks_up) (`catalog_hosts` as there); `None` when it
    /// does not.
    pub fn lookup(
        &self,
        ctx: &Context,
        client: &reqwest::Client,
        route: Route<'_>,
        catalog_hosts: &[&str],
    ) -> Option<WindowLookup> {
        self.looks_up(route.models_base, catalog_hosts).then(|| {
            WindowLookup::new(
                ctx,
                client.clone(),
                route.plugin,
                route.name,
                route.models_base,
                route.api_key_env,
                Duration::from_millis(self.window_lookup_timeout_ms),
            )
        })
    }
}

/// A route whose windows may be looked up.
#[derive(Debug, Clone, Copy)]
pub struct Route<'a> {
    /// The adapter, as warnings name it.
    pub plugin: &'static str,
    /// The route (its `provider`).
    pub name: &'a str,
    /// The server's OpenAI-compatible root: `{models_base}/models` lists
    /// its models, and its own endpoints (`/props`, `/api/show`...) are at
    /// it without a trailing `/v1`.
    pub models_base: &'a str,
    /// The environment variable of its key ("" for none).
    pub api_key_env: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTS: [&str; 1] = ["api.example.com"];

    fn settings(window_lookup: Option<bool>) -> Settings {
        Settings {
            window_lookup,
            ..Settings::default()
        }
    }

    #[test]
    fn windows_are_asked_except_of_a_catalog_host_unless_the_config_says() {
        let asks = |lookup, url: &str| settings(lookup).looks_up(url, &HOSTS);
        assert!(!asks(None, "https://api.example.com"));
        assert!(!asks(None, "https://api.example.com/v1"));
        assert!(asks(None, "http://127.0.0.1:8080/v1"));
        assert!(asks(None, "not a url"));
        assert!(!asks(Some(false), "http://127.0.0.1:8080/v1"));
        assert!(asks(Some(true), "https://api.example.com"));
    }

    #[test]
    fn zeros_are_refused_naming_the_field() {
        let e = Settings {
            default_context_window: Some(0),
            ..Settings::default()
        }
        .check()
        .unwrap_err();
        assert!(e.message.contains(DEFAULT_WINDOW_FIELD), "{e}");
        let e = Settings {
            window_lookup_timeout_ms: 0,
            ..Settings::default()
        }
        .check()
        .unwrap_err();
        assert!(e.message.contains(LOOKUP_TIMEOUT_FIELD), "{e}");
        assert!(Settings::default().check().is_ok());
    }
}
