//! `spill`: oversized tool results become a preview plus a file path.

use dsh_sdk::prelude::*;
use dsh_sdk::vocab::msg;
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

struct Spill;

impl Plugin for Spill {
    const NAME: &'static str = "spill";
    const DESCRIPTION: &'static str = "spills oversized tool results";
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let max = config.max_inline_bytes.max(1000);
        ctx.on("tools/post-execute", move |ev| async move {
            let mut decision = ev.next(ev.payload.clone()).await?;
            let exec = &ev.payload["exec"];
            if exec["name"] == "read" || decision["kind"] != "accept" {
                return Ok(decision);
            }
            let content = decision
                .get("content")
                .cloned()
                .unwrap_or_else(|| ev.payload["result"]["content"].clone());
            let text: String = content
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n");
            if text.len() <= max {
                return Ok(decision);
            }
            use std::os::unix::fs::DirBuilderExt;
            let dir = std::env::temp_dir().join(format!("dsh-spill-{}", std::process::id()));
            let _ = std::fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(&dir);
            let name = exec["name"].as_str().unwrap_or("tool");
            let path = dir.join(format!("{}-{name}.txt", dsh_sdk::new_id()));
            if std::fs::write(&path, &text).is_err() {
                return Ok(decision);
            }
            decision["content"] =
                json!([msg::text(&preview(&text, &path.display().to_string(), max))]);
            Ok(decision)
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Spill);
