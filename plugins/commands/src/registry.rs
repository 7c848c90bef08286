//! The registry's state: commands by (scope, name). Scope `""` is global;
//! an agent id makes a command that agent's alone, shadowing a global one
//! of the same name for it. Each command remembers who handles it and the
//! fiber that registered it, whose departure removes it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use dsh_sdk::api::commands::{valid_name, Descriptor, RegisterParams};
use dsh_sdk::names::code;
use dsh_sdk::prelude::*;

use crate::builtin::Builtin;

/// Who runs a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handler {
    /// One of the commands this plugin ships.
    Builtin(Builtin),
    /// A service whose `run` answers (another plugin's).
    Service(String),
}

/// One registered command.
#[derive(Debug, Clone)]
pub struct Command {
    /// What `list` shows.
    pub descriptor: Descriptor,
    /// `command/run` records the arguments.
    pub record_input: bool,
    /// Who runs it.
    pub handler: Handler,
    /// The fiber that registered it (`None`: this plugin's own).
    pub owner: Option<u64>,
}

impl Command {
    /// The command `params` describe, registered by fiber `owner`: fails
    /// with `INVALID_COMMAND` on a bad name, a blank description or hint,
    /// or no service (the original's messages).
    pub fn from_registration(params: RegisterParams, owner: u64) -> Result<Command> {
        let invalid = |m: String| Error::new(code::INVALID_COMMAND, m);
        let name = &params.name;
        if !valid_name(name) {
            return Err(invalid(format!(
                "command name \"{name}\" must match /^[a-z][a-z0-9_-]*$/"
            )));
        }
        if params.description.trim().is_empty() {
            return Err(invalid(format!(
                "command \"{name}\" description must not be empty"
            )));
        }
        if params
            .input
            .as_ref()
            .is_some_and(|i| i.hint.trim().is_empty())
        {
            return Err(invalid(format!(
                "command \"{name}\" input hint must not be empty"
            )));
        }
        if params.service.is_empty() {
            return Err(invalid(format!(
                "command \"{name}\" needs a service (whose `run` handles it)"
            )));
        }
        Ok(Command {
            descriptor: params.descriptor(),
            record_input: params.record_input != Some(false),
            handler: Handler::Service(params.service),
            owner: Some(owner),
        })
    }
}

/// The registry.
#[derive(Default)]
pub struct State {
    /// Commands by (scope, name).
    pub commands: BTreeMap<(String, String), Command>,
    /// The route `/model` last selected for each agent, (provider, model).
    pub selections: BTreeMap<String, (String, String)>,
}

impl State {
    /// Adds `command` in `scope`; `DUPLICATE_COMMAND` when that scope has
    /// one of its name.
    pub fn insert(&mut self, scope: String, command: Command) -> Result<()> {
        let key = (scope, command.descriptor.name.clone());
        if self.commands.contains_key(&key) {
            let where_ = if key.0.is_empty() {
                String::new()
            } else {
                format!(" for agent \"{}\"", key.0)
            };
            return Err(Error::new(
                code::DUPLICATE_COMMAND,
                format!("command \"{}\" is already registered{where_}", key.1),
            ));
        }
        self.commands.insert(key, command);
        Ok(())
    }

    /// Removes every command fiber `owner` registered; true when one was.
    pub fn remove_owned_by(&mut self, owner: u64) -> bool {
        let before = self.commands.len();
        self.commands.retain(|_, c| c.owner != Some(owner));
        self.commands.len() != before
    }

    /// Command `name` as agent `agent` sees it: its own, else the global one.
    pub fn visible(&self, agent: &str, name: &str) -> Option<&Command> {
        let own = (!agent.is_empty())
            .then(|| self.commands.get(&(agent.to_owned(), name.to_owned())))
            .flatten();
        own.or_else(|| self.commands.get(&(String::new(), name.to_owned())))
    }

    /// What agent `agent` sees, sorted by name, its own commands shadowing
    /// the global ones.
    pub fn list(&self, agent: &str) -> Vec<Descriptor> {
        let mut view: BTreeMap<&str, &Descriptor> = BTreeMap::new();
        for ((scope, name), c) in &self.commands {
            if scope.is_empty() {
                view.entry(name).or_insert(&c.descriptor);
            } else if scope == agent {
                view.insert(name, &c.descriptor);
            }
        }
        view.into_values().cloned().collect()
    }
}

/// The registry, shared by the handlers of one fiber.
pub type Registry = Rc<RefCell<State>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(name: &str, description: &str) -> Command {
        Command::from_registration(
            RegisterParams {
                service: "s".into(),
                ..RegisterParams::new(name, description)
            },
            7,
        )
        .unwrap()
    }

    #[test]
    fn scoped_commands_shadow_global_ones_for_their_agent_only() {
        let mut s = State::default();
        s.insert(String::new(), cmd("deploy", "global")).unwrap();
        s.insert("a1".into(), cmd("deploy", "scoped")).unwrap();
        s.insert(String::new(), cmd("alpha", "a")).unwrap();
        assert_eq!(
            s.visible("a1", "deploy").unwrap().descriptor.description,
            "scoped"
        );
        assert_eq!(
            s.visible("a2", "deploy").unwrap().descriptor.description,
            "global"
        );
        let names: Vec<_> = s
            .list("a1")
            .into_iter()
            .map(|d| (d.name, d.description))
            .collect();
        assert_eq!(
            names,
            [
                ("alpha".into(), "a".into()),
                ("deploy".into(), "scoped".into())
            ]
        );
        assert_eq!(s.list("a2")[1].description, "global");
        let e = s.insert(String::new(), cmd("deploy", "again")).unwrap_err();
        assert_eq!(e.code, code::DUPLICATE_COMMAND);
        assert_eq!(e.message, "command \"deploy\" is already registered");
        assert!(s.remove_owned_by(7));
        assert!(s.list("a1").is_empty());
        assert!(!s.remove_owned_by(7));
    }

    #[test]
    fn malformed_registrations_are_refused_with_a_reason() {
        let reg = |name: &str, description: &str, hint: Option<&str>, service: &str| {
            let mut p = RegisterParams::new(name, description);
            p.input = hint.map(|h| dsh_sdk::api::commands::InputDescriptor { hint: h.into() });
            p.service = service.into();
            Command::from_registration(p, 1)
                .map(|_| ())
                .unwrap_err()
                .message
        };
        assert_eq!(
            reg("Bad", "d", None, "s"),
            "command name \"Bad\" must match /^[a-z][a-z0-9_-]*$/"
        );
        assert_eq!(
            reg("x", " ", None, "s"),
            "command \"x\" description must not be empty"
        );
        assert_eq!(
            reg("x", "d", Some(""), "s"),
            "command \"x\" input hint must not be empty"
        );
        assert_eq!(
            reg("x", "d", None, ""),
            "command \"x\" needs a service (whose `run` handles it)"
        );
    }
}
