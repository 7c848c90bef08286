//! `spill`: oversized tool results become a preview plus a file path.
//! Oversized is over `maxInlineBytes`, or estimated over the call's
//! `maxResultTokens` (its share of the agent's context window).
//!
//! The files live in one private directory per fiber
//! (`$TMPDIR/dsh-spill-<pid>-<tag>`, 0700), made at the first spill and
//! removed when the fiber is disposed. Applying the plugin sweeps the
//! directories of host processes that are gone.
//!
//! A sandboxed command may write the temp dir, so it may rename the
//! directory and plant a symlink in its place: files are created through
//! the descriptor the [`PrivateDir`] holds, never by path, and a directory
//! found moved or replaced is given up for a fresh one.

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use dsh_sdk::api::tools::{forward_as, on_post_execute, PostExecuteDecision, PostExecuteKind};
use dsh_sdk::names::tool;
use dsh_sdk::prelude::*;
use dsh_sdk::tempdir::{self, PrivateDir};
use dsh_sdk::vocab::message::joined_text;
use dsh_sdk::vocab::{tokens, ContentBlock};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    max_inline_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_inline_bytes: 50_000,
        }
    }
}

fn cut(s: &str, mut at: usize) -> usize {
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// The preview of `text` (head, tail, and where the rest is).
fn preview(text: &str, path: &str, max: usize) -> String {
    let head = cut(text, max * 3 / 5);
    let tail = cut(text, text.len() - max / 5);
    let omitted = tail - head;
    format!(
        "{}\n\n(Omitted {omitted} bytes. Full formatted result stored at: {path}. Use read with offset/limit, or grep this path to search within it.)\n\n{}",
        &text[..head],
        &text[tail..]
    )
}

/// The smallest `maxInlineBytes`: enough for a head, a tail and the note
/// with the file's path.
const MIN_INLINE_BYTES: usize = 1000;

/// The fewest bytes a window's cap leaves inline.
const MIN_WINDOW_BYTES: usize = 256;

/// The bytes of `text` that fit `max_tokens` estimated tokens (the call's
/// `maxResultTokens`): all of it when its estimate (`vocab::tokens`) is
/// within them, else its bytes in proportion, less a tenth (the preview's
/// head and tail may be denser than the whole), at least
/// [`MIN_WINDOW_BYTES`]. `None` without a cap.
fn window_cap(text: &str, max_tokens: Option<u64>) -> Option<usize> {
    let max = max_tokens?;
    // The estimate never counts more than a token a byte.
    if max >= text.len() as u64 {
        return Some(text.len());
    }
    let estimate = tokens::of_text(text);
    if estimate <= max {
        return Some(text.len());
    }
    let allowed = text.len() as u128 * u128::from(max) * 9 / 10 / u128::from(estimate);
    Some(
        usize::try_from(allowed)
            .unwrap_or(usize::MAX)
            .max(MIN_WINDOW_BYTES),
    )
}

/// The prefix of spill directories in the temp dir.
const PREFIX: &str = "dsh-spill-";

/// This fiber's directory: made at the first spill, removed at disposal
/// (or when the last listener holding it is dropped).
#[derive(Default)]
struct SpillDir(RefCell<DirState>);

#[derive(Default)]
enum DirState {
    #[default]
    Unused,
    Open(PrivateDir),
    /// The fiber was disposed: nothing is spilled any more.
    Removed,
}

impl SpillDir {
    /// Writes `text` to a new file in the directory; returns its path.
    fn write(&self, tool: &str, text: &str) -> std::io::Result<std::path::PathBuf> {
        let mut state = self.0.borrow_mut();
        if let DirState::Open(dir) = &*state {
            if !dir.in_place() {
                // Moved away or replaced (a command can write the temp
                // dir): its path leads elsewhere now. Dropping it empties
                // it through its descriptor; the next spill makes a fresh one.
                dsh_sdk::tracing::warn!(
                    "the spill directory {} was moved or replaced; using a fresh one",
                    dir.path().display()
                );
                *state = DirState::Unused;
            }
        }
        if matches!(*state, DirState::Unused) {
            *state = DirState::Open(PrivateDir::new(PREFIX)?);
        }
        let DirState::Open(dir) = &*state else {
            return Err(std::io::Error::other("the spill fiber is disposed"));
        };
        // A tool name is not a path: keep it from naming another directory.
        let tool: String = tool
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let name = format!("{}-{tool}.txt", dsh_sdk::new_id());
        // Through the directory's descriptor: never through a symlink
        // planted under the directory's name.
        dir.create(&name)?.write_all(text.as_bytes())?;
        Ok(dir.path().join(name))
    }

    /// Removes the directory and every spilled file.
    fn remove(&self) {
        let state = std::mem::replace(&mut *self.0.borrow_mut(), DirState::Removed);
        if let DirState::Open(dir) = state {
            let path = dir.path().to_owned();
            if let Err(e) = dir.remove() {
                dsh_sdk::tracing::warn!("cannot remove {}: {e}", path.display());
            }
        }
    }
}

struct Spill;

impl Plugin for Spill {
    const NAME: &'static str = "spill";
    const DESCRIPTION: &'static str = "spills oversized tool results";
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let max = config.max_inline_bytes.max(MIN_INLINE_BYTES);
        // Directories of earlier hosts that did not get to remove theirs.
        tempdir::sweep(&std::env::temp_dir(), PREFIX);
        let dir = Rc::new(SpillDir::default());
        let owned = dir.clone();
        ctx.effect(move || async move { owned.remove() });
        on_post_execute(&ctx, move |outcome, ev| {
            let dir = dir.clone();
            async move {
                let mut decision: PostExecuteDecision =
                    forward_as::<Option<_>>(&ev).await?.unwrap_or_default();
                let name = outcome.exec.name.as_str();
                if name == tool::READ || decision.kind != Some(PostExecuteKind::Accept) {
                    return Ok(decision);
                }
                // What the model will see: an earlier listener's content when
                // it gave a list (a `null` replaces nothing), else the tool's
                // own.
                let content = match &decision.content {
                    Some(Some(content)) => content.clone(),
                    _ => outcome.result.content,
                };
                let text = joined_text(&content, "\n");
                // The agent's context window may ask for less
                // (`exec.maxResultTokens`, from `compaction-basic`).
                let max =
                    window_cap(&text, outcome.exec.max_result_tokens).map_or(max, |w| w.min(max));
                if text.len() <= max {
                    return Ok(decision);
                }
                let name = if name.is_empty() { "tool" } else { name };
                let path = match dir.write(name, &text) {
                    Ok(path) => path,
                    Err(e) => {
                        // The result goes on whole rather than lost.
                        dsh_sdk::tracing::warn!("cannot spill the {name} result: {e}");
                        return Ok(decision);
                    }
                };
                let preview = preview(&text, &path.display().to_string(), max);
                decision.content = Some(Some(vec![ContentBlock::text(preview)]));
                Ok(decision)
            }
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Spill);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_cap_keeps_the_bytes_its_tokens_allow() {
        let digits: String = (0..20_000).map(|i| format!("{i:05}\n")).collect();
        assert_eq!(window_cap(&digits, None), None);
        assert_eq!(window_cap("short", Some(100)), Some(5));
        let cap = window_cap(&digits, Some(1024)).unwrap();
        assert!((800..=1000).contains(&cap), "{cap}");
        // The preview of that many bytes stays within the tokens, with its
        // note and a path.
        let path = "/tmp/dsh-spill-1-x/0192e4c3-2f2b-7c3d-9a8e-1b2c3d4e5f60-bash.txt";
        let shown = preview(&digits, path, cap);
        assert!(
            tokens::of_text(&shown) <= 1024,
            "{}",
            tokens::of_text(&shown)
        );
        let prose = "the quick brown fox jumps over the lazy dog ".repeat(3000);
        assert!(window_cap(&prose, Some(1024)).unwrap() > 3 * cap);
    }
}
