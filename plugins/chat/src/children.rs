//! The subagents the chat's agent started, as live lines above the
//! prompt: each running child's label, its step count and the tool it
//! runs now. A child is added when the registry makes it ready
//! (`subagent/child-ready`), follows its own session's events, and goes
//! when it is disposed (the registry disposes a child once it settled).

use dsh_sdk::vocab::records::ToolCall;
use dsh_sdk::vocab::{event, SessionEvent};
use serde::{Deserialize, Serialize};

use crate::render::{Theme, Tone};
use crate::screen::width;

/// One running child.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Child {
    /// What it was asked.
    pub label: String,
    /// Steps it began.
    pub steps: u64,
    /// The tool it calls now, if any.
    pub tool: Option<String>,
}

/// The running children, by id, in the order they started.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Children(Vec<(String, Child)>);

impl Children {
    /// A child started.
    pub fn add(&mut self, id: &str, label: &str) {
        if !self.has(id) {
            self.0.push((
                id.to_owned(),
                Child {
                    label: label.to_owned(),
                    ..Child::default()
                },
            ));
        }
    }

    /// Whether `id` is one of them.
    pub fn has(&self, id: &str) -> bool {
        self.0.iter().any(|(c, _)| c == id)
    }

    /// A child went away; true when it was one of them.
    pub fn remove(&mut self, id: &str) -> bool {
        let before = self.0.len();
        self.0.retain(|(c, _)| c != id);
        before != self.0.len()
    }

    /// Follows child `id`'s log; true when its line changed.
    pub fn event(&mut self, id: &str, e: &SessionEvent) -> bool {
        let Some((_, child)) = self.0.iter_mut().find(|(c, _)| c == id) else {
            return false;
        };
        match e.kind.as_str() {
            event::STEP_START => {
                child.steps += 1;
                child.tool = None;
            }
            event::TOOL_CALL => match e.data_as::<ToolCall>() {
                Ok(call) => child.tool = Some(call.name),
                Err(_) => return false,
            },
            event::TOOL_RESULT => child.tool = None,
            _ => return false,
        }
        true
    }

    /// One line per child, `(styled, plain)`, each narrower than `cols`.
    pub fn lines(&self, theme: Theme, cols: usize) -> Vec<(String, String)> {
        let keep = cols.saturating_sub(1).max(1);
        self.0
            .iter()
            .map(|(_, c)| {
                let mut text = format!("  ↳ {} · step {}", one_line(&c.label), c.steps);
                if let Some(tool) = &c.tool {
                    text.push_str(&format!(" · {tool}"));
                }
                let plain = fit(&text, keep);
                let out = theme.one(Tone::Dim, &plain);
                (out.styled, out.plain)
            })
            .collect()
    }
}

/// `text` on one line, its controls dropped.
fn one_line(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    crate::screen::sanitize(&flat).into_owned()
}

/// `text` cut to `cols` display columns, `…` marking a cut.
fn fit(text: &str, cols: usize) -> String {
    if width(text) <= cols {
        return text.to_owned();
    }
    let mut out = String::new();
    for c in text.chars() {
        if width(&out) + width(&c.to_string()) + 1 > cols {
            break;
        }
        out.push(c);
    }
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_child_line_follows_its_steps_and_tools() {
        let mut c = Children::default();
        c.add("k", "read\nthe notes");
        assert!(c.event(
            "k",
            &SessionEvent::new(event::STEP_START, 3, json!({"turn": 1, "step": 1}))
        ));
        let call = json!({"turn": 1, "step": 1, "callId": "c", "name": "read", "arguments": "{}"});
        assert!(c.event("k", &SessionEvent::new(event::TOOL_CALL, 4, call)));
        let theme = Theme::default();
        assert_eq!(
            c.lines(theme, 80)[0].1,
            "  ↳ read the notes · step 1 · read"
        );
        assert!(!c.event("other", &SessionEvent::new(event::STEP_START, 1, json!({}))));
        let narrow = c.lines(theme, 12);
        assert_eq!(narrow[0].1, "  ↳ read t…");
        assert!(c.remove("k") && c.lines(theme, 80).is_empty());
    }
}
