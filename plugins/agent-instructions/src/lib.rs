//! `agent-instructions`: AGENTS.md files as one durable user message on the
//! first step of a session.

use std::path::{Path, PathBuf};

use dsh_sdk::api::agent_loop::PreStep;
use dsh_sdk::api::host::Host;
use dsh_sdk::api::sessions::Sessions;
use dsh_sdk::names::{bus, service};
use dsh_sdk::prelude::*;
use serde::Deserialize;

const NAMES: [&str; 4] = [
    "AGENTS.md",
    "CLAUDE.md",
    "AGENTS.local.md",
    "CLAUDE.local.md",
];

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

/// The project chain: from the nearest `.git` root (or `cwd`) down to `cwd`.
fn chain(cwd: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = cwd.ancestors().map(Path::to_owned).collect();
    if let Some(root) = dirs.iter().position(|d| d.join(".git").exists()) {
        dirs.truncate(root + 1);
    } else {
        dirs.truncate(1);
    }
    dirs.reverse();
    let mut files = Vec::new();
    for d in dirs {
        for n in NAMES {
            let f = d.join(n);
            if f.is_file() {
                files.push(f);
            }
        }
    }
    files
}

fn render(files: &[(PathBuf, &str, String)], budget: usize) -> Option<String> {
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

struct Instructions;

impl Plugin for Instructions {
    const NAME: &'static str = "agent-instructions";
    const DESCRIPTION: &'static str = "AGENTS.md instructions";
    const INJECT: &'static [&'static str] = &[service::SESSIONS];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let home = PathBuf::from(Host::new(&ctx).info().await?.home);
        let c = ctx.clone();
        ctx.on(bus::AGENT_PRE_STEP, move |ev| {
            let (c, home) = (c.clone(), home.clone());
            async move {
                let mut p: PreStep = ev.payload_as()?;
                if p.turn != 1 || p.step != 1 {
                    return ev.forward().await;
                }
                let header = Sessions::new(&c).header(&p.agent).await?;
                let cwd = PathBuf::from(header.header.cwd.as_deref().unwrap_or("/"));
                let mut files: Vec<(PathBuf, &str, String)> = Vec::new();
                let user = home.join("AGENTS.md");
                if let Ok(t) = std::fs::read_to_string(&user) {
                    files.push((user, "user's global instructions", t));
                }
                for f in chain(&cwd) {
                    if let Ok(t) = std::fs::read_to_string(&f) {
                        files.push((f, "project instructions", t));
                    }
                }
                let Some(text) = render(&files, config.max_bytes) else {
                    return ev.forward().await;
                };
                let message = json!({"id": dsh_sdk::new_id(), "role": "user",
                    "content": [{"type": "text", "text": text}],
                    "source": {"kind": "plugin", "plugin": "agent-instructions", "form": "instructions"}});
                p.messages.insert(0, message);
                ev.next(&p).await
            }
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Instructions);
