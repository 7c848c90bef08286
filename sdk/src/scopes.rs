//! Agent scopes as a registry sees them: a registry that takes
//! registrations scoped to an agent (tools, prompt sections) drops them
//! when the agent's scope closes, and refuses new ones into a closed scope
//! with `INACTIVE_EFFECT`, so a registration racing an agent's disposal
//! (or its rolled-back creation) never outlives it.
//!
//! The agent loop dispatches [`bus::AGENT_SCOPE_OPENED`] before a
//! creator's setup and [`bus::AGENT_SCOPE_CLOSED`] after the agent drained
//! (or its creation was rolled back), both awaited; [`ScopeWatch::follow`]
//! listens to both.

use std::cell::RefCell;
use std::collections::{HashSet, VecDeque};
use std::rc::Rc;

use crate::api::agent_loop::AgentRef;
use crate::names::{bus, code};
use crate::{Context, Error, Result};

/// How many closed scopes are remembered: an id older than that is
/// accepted again (ids are session ids, practically never reused).
const REMEMBERED: usize = 4096;

#[derive(Default)]
struct Closed {
    ids: HashSet<String>,
    order: VecDeque<String>,
}

/// The closed agent scopes of one registry.
#[derive(Clone, Default)]
pub struct ScopeWatch(Rc<RefCell<Closed>>);

impl ScopeWatch {
    /// Follows the agent loop's scope events on `ctx`: `on_close(agent)`
    /// drops what the registry holds for that agent's scope.
    pub fn follow(&self, ctx: &Context, on_close: impl Fn(&str) -> Result<()> + 'static) {
        let opened = self.clone();
        ctx.on(bus::AGENT_SCOPE_OPENED, move |ev| {
            let opened = opened.clone();
            async move {
                let AgentRef { agent } = ev.payload_as()?;
                opened.reopen(&agent);
                Ok(serde_json::Value::Null)
            }
        });
        let closed = self.clone();
        let on_close = Rc::new(on_close);
        ctx.on(bus::AGENT_SCOPE_CLOSED, move |ev| {
            let (closed, on_close) = (closed.clone(), on_close.clone());
            async move {
                let AgentRef { agent } = ev.payload_as()?;
                closed.close(&agent);
                on_close(&agent)?;
                Ok(serde_json::Value::Null)
            }
        });
    }

    /// Refuses a registration into `scope` when that scope has closed
    /// (`None` or empty: global, always open).
    pub fn check(&self, scope: Option<&str>) -> Result<()> {
        match scope {
            Some(s) if !s.is_empty() && self.0.borrow().ids.contains(s) => Err(Error::new(
                code::INACTIVE_EFFECT,
                format!("cannot register into the scope of agent \"{s}\": it has closed (the agent was disposed or its creation rolled back)"),
            )),
            _ => Ok(()),
        }
    }

    fn close(&self, agent: &str) {
        let mut c = self.0.borrow_mut();
        if c.ids.insert(agent.to_owned()) {
            c.order.push_back(agent.to_owned());
        }
        while c.order.len() > REMEMBERED {
            if let Some(old) = c.order.pop_front() {
                c.ids.remove(&old);
            }
        }
    }

    fn reopen(&self, agent: &str) {
        let mut c = self.0.borrow_mut();
        if c.ids.remove(agent) {
            c.order.retain(|id| id != agent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_scope_refuses_until_it_reopens() {
        let w = ScopeWatch::default();
        assert!(w.check(Some("a")).is_ok());
        w.close("a");
        let e = w.check(Some("a")).unwrap_err();
        assert_eq!(e.code, code::INACTIVE_EFFECT);
        assert!(w.check(None).is_ok() && w.check(Some("")).is_ok());
        assert!(w.check(Some("b")).is_ok());
        w.reopen("a");
        assert!(w.check(Some("a")).is_ok());
    }

    #[test]
    fn only_the_latest_closed_scopes_are_remembered() {
        let w = ScopeWatch::default();
        for i in 0..=REMEMBERED {
            w.close(&i.to_string());
        }
        assert!(w.check(Some("0")).is_ok(), "the oldest is forgotten");
        assert!(w.check(Some("1")).is_err());
        assert_eq!(w.0.borrow().order.len(), REMEMBERED);
    }
}
