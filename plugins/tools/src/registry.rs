//! The registry's state: the tools by scope and name, the restrictions and
//! guards of each agent, and the calls in flight (their deferred contexts
//! and their callers' signals). Everything here is owned by the fiber that
//! registered it and unwinds with it.

use dsh_sdk::scopes::ScopeWatch;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use dsh_sdk::api::tools::{OutputContract, RegisterParams, ToolSchema};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::UserInput;

use crate::restrictions::Restriction;
use crate::signal::CallSignal;

/// One registered tool.
pub struct Tool {
    /// What the model is offered (`schemas`).
    pub schema: ToolSchema,
    /// The service that runs it.
    pub service: String,
    /// Its calls may overlap (`mode`).
    pub parallel: bool,
    /// Its output contract, if it declares one.
    pub output: Option<OutputContract>,
    /// Its service answers `finalizeContent`.
    pub finalize_content: bool,
    /// The longest its body may run (registration `timeoutMs`); never sent
    /// to the model.
    pub timeout: Option<Duration>,
    /// The fiber that registered it.
    pub owner: u64,
}

impl Tool {
    /// The tool `params` describe, registered by fiber `owner`: fails on a
    /// missing name or service, an output contract that is not an object
    /// and a `timeoutMs` that is not a finite number greater than 0.
    pub fn from_registration(params: RegisterParams, owner: u64) -> Result<Tool> {
        let RegisterParams {
            name,
            description,
            parameters,
            service,
            parallel,
            output,
            finalize_content,
            timeout_ms,
            ..
        } = params;
        if name.is_empty() || service.is_empty() {
            return Err(Error::new(
                codes::INVALID_PAYLOAD,
                "a tool needs a name and a service",
            ));
        }
        let output = match output {
            None => None,
            Some(field) => Some(field.contract().ok_or_else(|| {
                Error::new(
                    codes::INVALID_PAYLOAD,
                    format!("tool \"{name}\": output must be {{schema, render?}}"),
                )
            })?),
        };
        let timeout = match timeout_ms {
            None => None,
            Some(ms) => Some(ms.duration().ok_or_else(|| {
                Error::new(
                    codes::INVALID_PAYLOAD,
                    format!("tool \"{name}\": timeoutMs must be a finite number greater than 0, got {ms}"),
                )
            })?),
        };
        Ok(Tool {
            schema: ToolSchema {
                name,
                description,
                parameters,
            },
            service,
            parallel,
            output,
            finalize_content,
            timeout,
            owner,
        })
    }
}

/// A monotonic check after `tools/pre-execute` (reference `tools.guard`):
/// its service's `check` answers a denial reason or null; it cannot allow.
/// Scope `""` guards every call, otherwise that agent's.
pub struct Guard {
    /// The agent it guards (`""`: every call).
    pub scope: String,
    /// The service whose `check` answers.
    pub service: String,
    /// The fiber that installed it.
    pub owner: u64,
}

/// The registry.
#[derive(Default)]
pub struct State {
    /// Tools by (scope, name); scope `""` is global, otherwise an agent id
    /// whose calls alone see the tool (and for whom it shadows a global one).
    pub tools: BTreeMap<(String, String), Tool>,
    /// The masks of the global tools, per agent.
    pub restrictions: Vec<Restriction>,
    /// The checks after pre-execute.
    pub guards: Vec<Guard>,
    /// Contexts deferred by calls dispatching now, by (agent, callId)
    /// (reference `exec.deferContext`): they lead the result's own.
    pub deferred: BTreeMap<(String, String), Vec<UserInput>>,
    /// The caller signals of the `execute` calls running now, by (agent,
    /// callId); `cancel` aborts one.
    pub signals: BTreeMap<(String, String), Rc<CallSignal>>,
    /// The agent scopes that closed: a registration into one is refused.
    pub scopes: ScopeWatch,
    /// The fibers whose registrations are dropped when they go (one
    /// cleanup each, however many they make).
    pub owners: dsh_sdk::CallerSet,
}

impl State {
    /// The tool `name` as agent `scope` sees it: its own, else a global one
    /// that every restriction of the scope admits (they intersect; the
    /// scope's own tools are exempt).
    pub fn visible(&self, scope: &str, name: &str) -> Option<&Tool> {
        if let Some(own) = self.tools.get(&(scope.to_owned(), name.to_owned())) {
            return Some(own);
        }
        self.tools
            .get(&(String::new(), name.to_owned()))
            .filter(|_| {
                self.restrictions
                    .iter()
                    .filter(|r| !scope.is_empty() && r.scope == scope)
                    .all(|r| r.admits(name))
            })
    }

    /// The schemas agent `scope` is offered: the global tools, shadowed by
    /// and joined with its own, by name.
    pub fn schemas(&self, scope: &str) -> Vec<&ToolSchema> {
        let mut names: Vec<&String> = self
            .tools
            .keys()
            .filter(|(s, _)| s.is_empty() || s == scope)
            .map(|(_, n)| n)
            .collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .filter_map(|n| self.visible(scope, n).map(|t| &t.schema))
            .collect()
    }

    /// The names of the global tools.
    pub fn global_names(&self) -> impl Iterator<Item = &str> {
        self.tools
            .keys()
            .filter(|(s, _)| s.is_empty())
            .map(|(_, n)| n.as_str())
    }

    /// Forgets what was registered for agent `scope` alone (its tools,
    /// restrictions and guards): the agent is gone, and a later agent never
    /// reuses its id. True when there was any.
    pub fn drop_scope(&mut self, scope: &str) -> bool {
        if scope.is_empty() {
            return false;
        }
        let before = self.tools.len() + self.restrictions.len() + self.guards.len();
        self.tools.retain(|(s, _), _| s != scope);
        self.restrictions.retain(|r| r.scope != scope);
        self.guards.retain(|g| g.scope != scope);
        before != self.tools.len() + self.restrictions.len() + self.guards.len()
    }

    /// The services of the guards that see a call of agent `scope`: the
    /// global ones, then its own, each in registration order.
    pub fn guards_of(&self, scope: &str) -> Vec<String> {
        let global = self.guards.iter().filter(|g| g.scope.is_empty());
        let scoped = self
            .guards
            .iter()
            .filter(|g| !scope.is_empty() && g.scope == scope);
        global.chain(scoped).map(|g| g.service.clone()).collect()
    }
}

/// The registry, shared by the handlers of one fiber.
pub type Registry = Rc<RefCell<State>>;
