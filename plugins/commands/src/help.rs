//! `/help`: every command the agent sees, sorted by name, one a line:
//! `/name <hint> — description` (other plugins' commands included while
//! their plugin is loaded).

use dsh_sdk::api::commands::{CommandResult, Descriptor};

use crate::registry::State;

/// The help text for `agent`.
pub fn run(state: &State, agent: &str) -> CommandResult {
    let lines: Vec<String> = state.list(agent).iter().map(line).collect();
    CommandResult::success(lines.join("\n"))
}

/// One command's line.
fn line(d: &Descriptor) -> String {
    match &d.input {
        Some(input) => format!("/{} {} — {}", d.name, input.hint, d.description),
        None => format!("/{} — {}", d.name, d.description),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::Builtin;

    #[test]
    fn help_lists_every_command_sorted_with_its_hint() {
        let mut s = State::default();
        for b in Builtin::ALL {
            s.insert(String::new(), b.command()).unwrap();
        }
        let text = run(&s, "a").text.unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0], "/help — List the commands you can run here");
        assert!(
            lines[1].starts_with("/model [<provider>] <model> — "),
            "{text}"
        );
        assert!(lines[2].starts_with("/permission [<preset>] — "), "{text}");
        assert!(lines[3].starts_with("/status — "), "{text}");
    }
}
