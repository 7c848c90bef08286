//! Linking a scope (an agent id) under a parent scope, so listeners scoped
//! to the parent hear dispatches for the child.

use std::rc::Weak;

use dsh_wire::{Cow, ToHost};

use super::runtime::{host_refused, Shared};
use crate::error::{codes, Error, Result};

/// The link of one scope to its parent, from
/// [`Context::scope_parent`](super::Context::scope_parent).
pub struct ScopeBinding {
    child: String,
    shared: Weak<Shared>,
}

impl ScopeBinding {
    /// Links `child` under `parent` and answers the binding that alone may
    /// move the link.
    pub(in crate::context) fn link(
        shared: &std::rc::Rc<Shared>,
        child: String,
        parent: &str,
    ) -> Result<ScopeBinding> {
        link_scope(shared, &child, parent, false)?;
        Ok(ScopeBinding {
            child,
            shared: std::rc::Rc::downgrade(shared),
        })
    }

    /// The linked scope.
    pub fn child(&self) -> &str {
        &self.child
    }

    /// Moves the scope under `parent` (refused with `SCOPE_CYCLE` when
    /// `parent` descends from it).
    pub fn rebind(&self, parent: impl Into<String>) -> Result<()> {
        let shared = self.shared.upgrade().ok_or_else(host_refused)?;
        link_scope(&shared, &self.child, &parent.into(), true)
    }
}

/// Links scope `child` under `parent` (or moves the link: `rebind`); the
/// host's refusal becomes an error that says why.
fn link_scope(shared: &Shared, child: &str, parent: &str, rebind: bool) -> Result<()> {
    let link = ToHost::ScopeParent {
        child: Cow::Borrowed(child),
        parent: Cow::Borrowed(parent),
        rebind,
    };
    match shared.send_code(link) {
        0 => Ok(()),
        dsh_abi::SCOPE_ALREADY_BOUND => Err(Error::new(
            codes::SCOPE_ALREADY_BOUND,
            format!("scope \"{child}\" already has a parent; only its binding can rebind it"),
        )),
        dsh_abi::SCOPE_CYCLE => Err(Error::new(
            codes::SCOPE_CYCLE,
            format!("scope \"{child}\" cannot descend from \"{parent}\": that would be a cycle"),
        )),
        _ => Err(host_refused()),
    }
}

#[cfg(test)]
mod tests {
    use dsh_wire::{Cow, ToHost};

    use crate::context::test_host::{run, Harness};
    use crate::error::codes;

    fn link(child: &str, parent: &str, rebind: bool) -> ToHost<'static> {
        ToHost::ScopeParent {
            child: Cow::Owned(child.to_owned()),
            parent: Cow::Owned(parent.to_owned()),
            rebind,
        }
    }

    #[test]
    fn a_link_the_host_takes_is_a_binding_that_can_rebind() {
        run(async {
            let h = Harness::new();
            let binding = h.ctx.scope_parent("child", "parent").unwrap();
            assert_eq!(binding.child(), "child");
            binding.rebind("other").unwrap();
            assert_eq!(
                h.take(),
                [link("child", "parent", false), link("child", "other", true)]
            );
        });
    }

    #[test]
    fn a_cycle_the_host_refuses_is_scope_cycle_naming_both_scopes() {
        run(async {
            let h = Harness::new();
            h.answer(dsh_abi::SCOPE_CYCLE);
            let e = h.ctx.scope_parent("a", "b").err().unwrap();
            assert_eq!(e.code, codes::SCOPE_CYCLE);
            assert!(
                e.message.contains("\"a\"") && e.message.contains("\"b\""),
                "{e}"
            );
        });
    }

    #[test]
    fn a_scope_with_a_parent_already_is_scope_already_bound() {
        run(async {
            let h = Harness::new();
            let binding = h.ctx.scope_parent("a", "b").unwrap();
            h.answer(dsh_abi::SCOPE_ALREADY_BOUND);
            let e = h.ctx.scope_parent("a", "c").err().unwrap();
            assert_eq!(e.code, codes::SCOPE_ALREADY_BOUND);
            assert!(e.message.contains("\"a\""), "{e}");
            h.answer(-1);
            let e = binding.rebind("d").unwrap_err();
            assert_eq!(e.code, codes::HOST_REFUSED);
        });
    }
}
