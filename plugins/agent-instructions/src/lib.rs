//! `agent-instructions`: AGENTS.md files as one durable user message on the
//! first step of a session, never followed out of the project (see
//! `load.rs`).

mod load;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_sdk::api::agent_loop::PreStep;
use dsh_sdk::api::host::Host;
use dsh_sdk::api::sessions::Sessions;
use dsh_sdk::blocking::cancellable;
use dsh_sdk::fence::{resolve, ReadPolicy, Reads};
use dsh_sdk::names::{bus, service};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::message::PluginSource;
use dsh_sdk::vocab::{ContentBlock, Extra, Message, MessageSource};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    max_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config { max_bytes: 65_536 }
    }
}

/// An instruction file read, with what it is.
type Loaded = (PathBuf, &'static str, String);

/// Reads the user's `$DSH_HOME/AGENTS.md` and the project chain of `cwd`:
/// the files sent, and a warning for each one that is not.
fn load_all(home: &Path, cwd: &Path, reads: &Reads, max: usize) -> (Vec<Loaded>, Vec<String>) {
    let (mut files, mut warnings) = (Vec::new(), Vec::new());
    let mut keep = |path: PathBuf, what, read: Result<Option<String>, String>| match read {
        Ok(Some(text)) => files.push((path, what, text)),
        Ok(None) => {}
        Err(w) => warnings.push(w),
    };
    // The user's own file: it may lead anywhere but to what is never read
    // (its own home, where it lives, excepted).
    let user = home.join("AGENTS.md");
    if user.symlink_metadata().is_ok() {
        let read = load::read(&user, None, &reads.without_harness(), max);
        keep(user, "user's global instructions", read);
    }
    let (root, chain) = load::chain(cwd);
    let root = resolve(Path::new("/"), &root);
    for f in chain {
        let read = load::read(&f, Some(&root), reads, max);
        keep(f, "project instructions", read);
    }
    (files, warnings)
}

fn render(files: &[Loaded], budget: usize) -> Option<String> {
    let mut body = String::new();
    let mut seen: Vec<&str> = Vec::new();
    for (path, what, text) in files {
        if text.trim().is_empty() || seen.contains(&text.as_str()) {
            continue;
        }
        seen.push(text);
        body.push_str(&format!(
            "Contents of {} ({what}):\n\n{}\n\n",
            path.display(),
            text.trim_end()
        ));
    }
    if body.is_empty() {
        return None;
    }
    let mut text = format!("<system-reminder>\nAs you answer the user's questions, you can use the following context:\n\n{body}</system-reminder>");
    if text.len() > budget {
        let mut cut = budget.saturating_sub(100);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n(instructions truncated to the budget)\n</system-reminder>");
    }
    Some(text)
}

/// The plugin the instructions message is from.
const SOURCE_PLUGIN: &str = "agent-instructions";
/// The form of context it is (`instructions`).
const SOURCE_FORM: &str = "instructions";

/// The user message that carries the rendered instructions.
fn instructions_message(text: String) -> Message {
    let source = MessageSource::Plugin(PluginSource {
        plugin: SOURCE_PLUGIN.to_owned(),
        form: Some(SOURCE_FORM.to_owned()),
        extra: Extra::new(),
    });
    Message::user(dsh_sdk::new_id(), vec![ContentBlock::text(text)], source)
}

struct Instructions;

impl Plugin for Instructions {
    const NAME: &'static str = "agent-instructions";
    const DESCRIPTION: &'static str = "AGENTS.md instructions";
    const INJECT: &'static [&'static str] = &[service::SESSIONS];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let home = PathBuf::from(Host::new(&ctx).info().await?.home);
        // What instruction files may never lead to: process files, the
        // harness's home, secret stores.
        let reads = Arc::new(Reads::discover(
            ReadPolicy::Allow,
            &home,
            &std::env::temp_dir(),
        ));
        let c = ctx.clone();
        ctx.on(bus::AGENT_PRE_STEP, move |ev| {
            let (c, home, reads) = (c.clone(), home.clone(), reads.clone());
            async move {
                let mut p: PreStep = ev.payload_as()?;
                if p.turn != 1 || p.step != 1 {
                    return ev.forward().await;
                }
                let header = Sessions::new(&c).header(&p.agent).await?;
                let cwd = PathBuf::from(header.header.cwd.as_deref().unwrap_or("/"));
                let max = config.max_bytes;
                let (files, warnings) =
                    cancellable(move |_| load_all(&home, &cwd, &reads, max)).await?;
                for w in warnings {
                    dsh_sdk::tracing::warn!("agent-instructions: {w}");
                }
                let Some(text) = render(&files, config.max_bytes) else {
                    return ev.forward().await;
                };
                p.messages
                    .insert(0, serde_json::to_value(instructions_message(text))?);
                ev.next(&p).await
            }
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Instructions);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_message_has_the_logged_shape() {
        let mut m = serde_json::to_value(instructions_message("do".into())).unwrap();
        assert!(m["id"].as_str().is_some_and(|id| !id.is_empty()));
        m["id"] = json!("x");
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"id":"x","role":"user","content":[{"type":"text","text":"do"}],"source":{"kind":"plugin","plugin":"agent-instructions","form":"instructions"}}"#
        );
    }
}
