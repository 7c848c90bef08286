//! `tools.restrict`: a mask of the global tools one agent sees, checked
//! loud (no global or empty filter, no name that is not a global tool).

use std::collections::BTreeSet;

use dsh_sdk::api::tools::RestrictParams;
use dsh_sdk::prelude::*;
use dsh_sdk::Value;

use crate::registry::State;

/// A mask of the global tools one agent sees (reference `tools.restrict`):
/// `allow` keeps only those names, `deny` removes those.
pub struct Restriction {
    /// The agent.
    pub scope: String,
    /// Only these.
    pub allow: Option<BTreeSet<String>>,
    /// Not these.
    pub deny: Option<BTreeSet<String>>,
    /// The fiber that made it.
    pub owner: u64,
}

impl Restriction {
    /// Whether the mask lets tool `name` through.
    pub fn admits(&self, name: &str) -> bool {
        self.allow.as_ref().is_none_or(|a| a.contains(name))
            && self.deny.as_ref().is_none_or(|d| !d.contains(name))
    }
}

fn invalid(message: String) -> Error {
    Error::new("INVALID_RESTRICTION", message)
}

fn unscoped() -> Error {
    invalid("tools.restrict() requires a scope (an agent id): a global restriction would mask every agent — deny the tool for the intended agent instead".to_owned())
}

/// The params of a `restrict` call. When they do not parse, the first
/// field at fault is named as the registry always named it: the scope
/// first, then `allow`, then `deny`.
pub fn params(req: &Request) -> Result<RestrictParams> {
    req.params_as().map_err(|e| {
        // The params did not parse as their type: only the raw JSON can say
        // which field is at fault.
        let raw = &req.params;
        if raw["scope"].as_str().is_none_or(str::is_empty) {
            return unscoped();
        }
        let lists_names =
            |v: &Value| v.is_null() || v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
        match ["allow", "deny"]
            .into_iter()
            .find(|k| !lists_names(&raw[*k]))
        {
            Some(key) => invalid(format!("tools.restrict() {key} must list tool names")),
            None => e,
        }
    })
}

/// `tools.restrict {scope, allow?, deny?}` by fiber `owner`: fails loud on
/// a global (no scope) or empty filter and on names that are not global
/// tools.
pub fn restriction(state: &State, params: RestrictParams, owner: u64) -> Result<Restriction> {
    let scope = params
        .scope
        .filter(|s| !s.is_empty())
        .ok_or_else(unscoped)?;
    let set = |names: Option<Vec<String>>| names.map(|n| n.into_iter().collect::<BTreeSet<_>>());
    let (allow, deny) = (set(params.allow), set(params.deny));
    if allow.is_none() && deny.is_none() {
        return Err(invalid("tools.restrict({}) is a no-op: pass `allow` and/or `deny` (an empty filter is almost always a materialized-empty-config bug)".to_owned()));
    }
    let known: BTreeSet<&str> = state.global_names().collect();
    let unknown: Vec<String> = allow
        .iter()
        .chain(deny.iter())
        .flatten()
        .filter(|n| !known.contains(n.as_str()))
        .map(|n| format!("\"{n}\""))
        .collect();
    if !unknown.is_empty() {
        let listed: Vec<&str> = known.into_iter().collect();
        return Err(Error::new(
            "UNKNOWN_TOOL",
            format!(
                "tools.restrict() names unknown global tool{} {}; known global tools: {}",
                if unknown.len() > 1 { "s" } else { "" },
                unknown.join(", "),
                if listed.is_empty() {
                    "(none)".to_owned()
                } else {
                    listed.join(", ")
                }
            ),
        ));
    }
    Ok(Restriction {
        scope,
        allow,
        deny,
        owner,
    })
}
