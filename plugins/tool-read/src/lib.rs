//! `tool-read`: the `read` tool (reference dsh-product §4.1): line-numbered
//! UTF-8 text with the original's footers and caps (2000 lines, 2000 chars
//! per line, 51,200 bytes per call).

use std::path::Path;

use dsh_sdk::prelude::*;
use dsh_sdk::tool::{register_tools, resolve, text_reply};

const MAX_LINES: usize = 2000;
const MAX_LINE_CHARS: usize = 2000;
const MAX_BYTES: usize = 51_200;

/// Renders lines `offset..` of `text` in the original's format.
pub fn render(path: &str, text: &str, offset: usize, limit: usize) -> Result<String> {
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    if offset > total.max(1) {
        return Err(Error::new(
            "FS_NOT_FOUND",
            format!("offset {offset} is past the end of {path} ({total} lines)"),
        ));
    }
    let mut out = format!("<path>{path}</path>\n<type>file</type>\n<content>\n");
    let mut bytes = 0;
    let mut last = offset.saturating_sub(1);
    let mut capped = false;
    for (i, line) in lines.iter().enumerate().skip(offset - 1).take(limit) {
        let shown = if line.chars().count() > MAX_LINE_CHARS {
            let cut: String = line.chars().take(MAX_LINE_CHARS).collect();
            format!("{cut}… (line truncated to {MAX_LINE_CHARS} chars)")
        } else {
            (*line).to_owned()
        };
        let entry = format!("{}: {shown}\n", i + 1);
        if bytes + entry.len() > MAX_BYTES && last >= offset {
            capped = true;
            break;
        }
        bytes += entry.len();
        out.push_str(&entry);
        last = i + 1;
    }
    let footer = if capped {
        format!(
            "(Output capped. Showing lines {offset}-{last}. Use offset={} to continue.)",
            last + 1
        )
    } else if last < total {
        format!(
            "(Showing lines {offset}-{last} of {total}. Use offset={} to continue.)",
            last + 1
        )
    } else {
        format!("(End of file - total {total} lines)")
    };
    out.push('\n');
    out.push_str(&footer);
    out.push_str("\n</content>");
    Ok(out)
}

async fn execute(ctx: Context, req: Request) -> Result<Reply> {
    let args = &req.params["arguments"];
    let file = args["file_path"].as_str().unwrap_or_default().to_owned();
    let cwd = req.params["cwd"].as_str().unwrap_or(".").to_owned();
    let offset = args["offset"].as_u64().unwrap_or(1).max(1) as usize;
    let limit = args["limit"]
        .as_u64()
        .map_or(MAX_LINES, |l| (l as usize).clamp(1, MAX_LINES));
    let path = resolve(&cwd, &file);
    let read_path = path.clone();
    let text = tokio::task::spawn_blocking(move || std::fs::read(&read_path))
        .await
        .map_err(|e| Error::msg(e.to_string()))?
        .map_err(|e| {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                "FS_NOT_FOUND"
            } else {
                "FS_ERROR"
            };
            Error::new(code, format!("cannot read {file}: {e}"))
        })?;
    let text = String::from_utf8(text)
        .map_err(|_| Error::new("FS_NOT_TEXT", format!("{file} is not UTF-8 text")))?;
    let rendered = render(&file, &text, offset, limit)?;
    // Tell the read-before-write policy which version the agent has seen.
    if let Some(version) = version_of(&path) {
        let canonical = path.canonicalize().unwrap_or(path);
        let _ = ctx.emit(
            "fs/observed",
            json!({"agent": req.params["agent"], "path": canonical, "version": version}),
        );
    }
    text_reply(&rendered)
}

/// `"<len>:<mtime ns>"`: changes whenever the file does.
pub fn version_of(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(format!("{}:{}:{}", m.len(), m.mtime(), m.mtime_nsec()))
}

struct Read;

impl Plugin for Read {
    const NAME: &'static str = "tool-read";
    const DESCRIPTION: &'static str = "the `read` tool";
    const INJECT: &'static [&'static str] = &["tools"];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        let c = ctx.clone();
        let schema = json!({
            "name": "read",
            "description": "Read a UTF-8 text file and return line-numbered content.",
            "parameters": {
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "Path to read, resolved by the filesystem backend."},
                    "offset": {"type": "number", "description": "1-based first line to return. Defaults to 1."},
                    "limit": {"type": "number", "description": "Maximum number of lines to return. Defaults to 2000."}
                },
                "required": ["file_path"]
            },
            "parallel": true,
        });
        register_tools(&ctx, vec![schema], move |req| execute(c.clone(), req)).await
    }
}

dsh_sdk::export_plugin!(Read);
