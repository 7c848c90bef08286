//! The children this registry started, live or settled, and what each is
//! doing. One table per plugin instance; a child started by an earlier
//! instance (or an earlier process) is not here until a `followup`
//! resumes it from its stored session.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use dsh_sdk::api::subagents::{ChildEntry, ChildStatus};
use dsh_sdk::vocab::records::{SubagentDescriptor, ToolFilter};
use tokio::sync::Notify;

/// What a child is doing, as the registry drives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Its turn runs, or it waits on children of its own.
    Running,
    /// Its run just ended: the notice is being made, then it is disposed.
    /// A `followup` waits for it.
    Settling,
    /// Disposed; its session is stored. A `followup` resumes it.
    Ready,
}

/// One child.
#[derive(Debug, Clone)]
pub struct Child {
    /// The delegating agent.
    pub parent: String,
    /// How it was started (mode, provider, label, persona, filter).
    pub descriptor: SubagentDescriptor,
    /// The persona that replaces the deployment's.
    pub persona: Option<String>,
    /// The tools it may use.
    pub tool_filter: Option<ToolFilter>,
    /// What it is doing.
    pub state: State,
    /// Its run was stopped because its parent's was: the notice must not
    /// wake the parent the user just stopped. New work clears it.
    pub stopped_with_parent: bool,
    /// Messages for it being delivered now: it is not settled while one
    /// is on its way (the inbox has not taken it yet).
    pub pending: u32,
    /// Start order, for stable listings.
    order: u64,
}

impl Child {
    /// A running child of `parent`.
    pub fn new(parent: &str, descriptor: SubagentDescriptor) -> Child {
        Child {
            parent: parent.to_owned(),
            descriptor,
            persona: None,
            tool_filter: None,
            state: State::Running,
            stopped_with_parent: false,
            pending: 0,
            order: 0,
        }
    }
}

/// The children, and a signal rung at every change of state.
#[derive(Default)]
pub struct Table {
    children: RefCell<HashMap<String, Child>>,
    next_order: Cell<u64>,
    /// Children being resumed now (a second `followup` waits for the
    /// first to finish resuming).
    resuming: RefCell<HashSet<String>>,
    /// Rung (`notify_waiters`) whenever a child changes state.
    pub changed: Notify,
}

/// The table as the plugin's tasks share it.
pub type Shared = Rc<Table>;

impl Table {
    /// Adds `child` under `id` (replacing a settled record of it).
    /// A child met again (resumed) keeps its place in the listings.
    pub fn insert(&self, id: &str, mut child: Child) {
        let kept = self.children.borrow().get(id).map(|c| c.order);
        child.order = kept.unwrap_or_else(|| {
            let next = self.next_order.get();
            self.next_order.set(next + 1);
            next
        });
        self.children.borrow_mut().insert(id.to_owned(), child);
        self.changed.notify_waiters();
    }

    /// A message for child `id` is on its way (see [`Child::pending`]);
    /// new work also ends a stop along with its parent.
    pub fn admit(&self, id: &str) {
        if let Some(c) = self.children.borrow_mut().get_mut(id) {
            c.pending += 1;
            c.stopped_with_parent = false;
        }
    }

    /// The message for child `id` arrived (or failed to).
    pub fn admitted(&self, id: &str) {
        if let Some(c) = self.children.borrow_mut().get_mut(id) {
            c.pending = c.pending.saturating_sub(1);
        }
        self.changed.notify_waiters();
    }

    /// Messages for child `id` on their way.
    pub fn pending(&self, id: &str) -> u32 {
        self.children.borrow().get(id).map_or(0, |c| c.pending)
    }

    /// Starts resuming child `id`; false when it is being resumed already.
    pub fn begin_resume(&self, id: &str) -> bool {
        self.resuming.borrow_mut().insert(id.to_owned())
    }

    /// Child `id` is resumed (or could not be).
    pub fn end_resume(&self, id: &str) {
        self.resuming.borrow_mut().remove(id);
        self.changed.notify_waiters();
    }

    /// A copy of child `id`.
    pub fn get(&self, id: &str) -> Option<Child> {
        self.children.borrow().get(id).cloned()
    }

    /// Sets child `id`'s state and rings the change.
    pub fn set_state(&self, id: &str, state: State) {
        if let Some(c) = self.children.borrow_mut().get_mut(id) {
            c.state = state;
        }
        self.changed.notify_waiters();
    }

    /// Marks child `id` as stopped along with its parent.
    pub fn mark_stopped_with_parent(&self, id: &str) {
        if let Some(c) = self.children.borrow_mut().get_mut(id) {
            c.stopped_with_parent = true;
        }
    }

    /// Forgets child `id` (a one-shot child once its outcome is out).
    pub fn remove(&self, id: &str) {
        self.children.borrow_mut().remove(id);
        self.changed.notify_waiters();
    }

    /// The children provider `provider` made.
    pub fn made_by(&self, provider: &str) -> Vec<String> {
        let children = self.children.borrow();
        let made = children
            .iter()
            .filter(|(_, c)| c.descriptor.provider == provider);
        made.map(|(id, _)| id.clone()).collect()
    }

    /// The direct children of `parent`, in start order.
    pub fn children_of(&self, parent: &str) -> Vec<(String, Child)> {
        let mut v: Vec<(String, Child)> = self
            .children
            .borrow()
            .iter()
            .filter(|(_, c)| c.parent == parent)
            .map(|(id, c)| (id.clone(), c.clone()))
            .collect();
        v.sort_by_key(|(_, c)| c.order);
        v
    }

    /// The descendants of `root`, pre-order, each with its depth below
    /// `root` (1 for a direct child).
    pub fn descendants_of(&self, root: &str) -> Vec<(String, Child, u64)> {
        let children = self.children.borrow();
        // One pass to index the tree, so the walk is linear in the table.
        let mut below: HashMap<&str, Vec<(&String, &Child)>> = HashMap::new();
        for (id, c) in children.iter() {
            below.entry(c.parent.as_str()).or_default().push((id, c));
        }
        for kids in below.values_mut() {
            kids.sort_by_key(|(_, c)| c.order);
        }
        let kids_of = |id: &str, depth: u64| {
            let kids = below.get(id).map(Vec::as_slice).unwrap_or_default();
            kids.iter().rev().map(move |(k, c)| (*k, *c, depth))
        };
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut stack: Vec<(&String, &Child, u64)> = kids_of(root, 1).collect();
        while let Some((id, child, depth)) = stack.pop() {
            // A cycle (a corrupt record naming a descendant as parent) is
            // walked once.
            if !seen.insert(id.as_str()) {
                continue;
            }
            out.push((id.clone(), child.clone(), depth));
            stack.extend(kids_of(id, depth + 1));
        }
        out
    }

    /// Whether any descendant of `root` is running or settling.
    pub fn any_running_below(&self, root: &str) -> bool {
        self.running_below(root) > 0
    }

    /// How many descendants of `root` are running or settling.
    pub fn running_below(&self, root: &str) -> usize {
        self.descendants_of(root)
            .iter()
            .filter(|(_, c, _)| c.state != State::Ready)
            .count()
    }
}

/// The listing entry of a continuable child; `parent` and `depth` only
/// for a walk of descendants. `live` says whether its agent is running a
/// turn (`Some(true)`), idle (`Some(false)`) or not live.
pub fn entry(id: &str, child: &Child, at: Option<u64>, live: Option<bool>) -> ChildEntry {
    let status = match live {
        Some(true) => ChildStatus::Running,
        Some(false) => ChildStatus::Idle,
        None => ChildStatus::Ready,
    };
    ChildEntry {
        id: id.to_owned(),
        label: child.descriptor.label.clone().unwrap_or_default(),
        status,
        parent: at.map(|_| child.parent.clone()),
        depth: at,
        diagnostic: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::vocab::records::SubagentMode;

    fn child(parent: &str) -> Child {
        let d = SubagentDescriptor {
            version: SubagentDescriptor::VERSION,
            mode: SubagentMode::Continuable,
            provider: "spawn".into(),
            label: Some(format!("under {parent}")),
            agent_provider: None,
            agent_model: None,
            persona: None,
            tool_filter: None,
        };
        Child::new(parent, d)
    }

    #[test]
    fn descendants_walk_pre_order_with_depths() {
        let t = Table::default();
        t.insert("a", child("root"));
        t.insert("b", child("root"));
        t.insert("a1", child("a"));
        t.insert("a1x", child("a1"));
        let walk: Vec<(String, u64)> = t
            .descendants_of("root")
            .into_iter()
            .map(|(id, _, d)| (id, d))
            .collect();
        assert_eq!(
            walk,
            [
                ("a".to_owned(), 1),
                ("a1".to_owned(), 2),
                ("a1x".to_owned(), 3),
                ("b".to_owned(), 1)
            ]
        );
        assert_eq!(t.running_below("root"), 4);
        t.set_state("a1x", State::Ready);
        assert_eq!(t.running_below("a1"), 0);
        assert!(t.any_running_below("a"));
    }

    #[test]
    fn a_cycle_of_records_is_walked_once_and_made_by_names_the_provider() {
        let t = Table::default();
        t.insert("x", child("y"));
        t.insert("y", child("x"));
        let walk: Vec<String> = t
            .descendants_of("x")
            .into_iter()
            .map(|(id, _, _)| id)
            .collect();
        assert_eq!(walk, ["y", "x"]);
        let mut made = t.made_by("spawn");
        made.sort();
        assert_eq!(made, ["x", "y"]);
        assert!(t.made_by("fork").is_empty());
    }
}
