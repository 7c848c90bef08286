//! `tool-fs`: `write` and `edit` (reference dsh-product §4.1) with atomic
//! writes and the read-before-write policy.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use dsh_sdk::prelude::*;
use dsh_sdk::tool::{register_tools, resolve as join_cwd};
use dsh_sdk::vocab::msg;

/// (agent, canonical path) -> the version the agent last saw.
type Observed = Rc<RefCell<HashMap<(String, PathBuf), String>>>;

fn version_of(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(format!("{}:{}:{}", m.len(), m.mtime(), m.mtime_nsec()))
}

fn resolve(cwd: &str, file: &str) -> PathBuf {
    let p = join_cwd(cwd, file);
    p.canonicalize().unwrap_or(p)
}

fn fs_error(code: &str, message: String) -> Error {
    Error::new(code, message)
}

/// Writes `text` to `path` atomically: a temp file in the same directory,
/// fsynced, then renamed over the target (keeping its permissions).
fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.dsh-{}.tmp", std::process::id()));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        if let Ok(m) = std::fs::metadata(path) {
            let _ = std::fs::set_permissions(&tmp, m.permissions());
        }
    }
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

fn require_observed(observed: &Observed, agent: &str, path: &Path, shown: &str) -> Result<()> {
    let seen = observed
        .borrow()
        .get(&(agent.to_owned(), path.to_owned()))
        .cloned();
    match seen {
        None => Err(fs_error(
            "FS_NOT_OBSERVED",
            format!("{shown} must be read with the read tool before it is changed"),
        )),
        Some(v) if Some(v.as_str()) != version_of(path).as_deref() => Err(fs_error(
            "FS_NOT_OBSERVED",
            format!("{shown} changed since it was last read; read it again before changing it"),
        )),
        Some(_) => Ok(()),
    }
}

async fn intent(ctx: &Context, event: &str, agent: &str, payload: Value) -> Result<()> {
    let mut d = ctx.dispatch(event);
    if !agent.is_empty() {
        d = d.scope(agent);
    }
    let decision = d
        .waterfall(payload, |_| async { Ok(json!({"kind": "allow"})) })
        .await?;
    if decision["kind"] == "deny" {
        let reason = decision["reason"].as_str().unwrap_or("denied by policy");
        return Err(fs_error("FS_DENIED", reason.to_owned()));
    }
    Ok(())
}

async fn write(ctx: &Context, observed: &Observed, req: &Request) -> Result<Value> {
    let args = &req.params["arguments"];
    let agent = req.params["agent"].as_str().unwrap_or_default().to_owned();
    let file = args["file_path"].as_str().unwrap_or_default().to_owned();
    let content = args["content"].as_str().unwrap_or_default().to_owned();
    let path = resolve(req.params["cwd"].as_str().unwrap_or("."), &file);
    let exists = path.exists();
    if path.is_dir() {
        return Err(fs_error(
            "FS_IS_DIRECTORY",
            format!("{file} is a directory"),
        ));
    }
    if exists {
        require_observed(observed, &agent, &path, &file)?;
    }
    intent(
        ctx,
        "fs/write-intent",
        &agent,
        json!({"agent": agent, "path": path, "exists": exists}),
    )
    .await?;
    let p2 = path.clone();
    tokio::task::spawn_blocking(move || write_atomic(&p2, &content))
        .await
        .map_err(|e| Error::msg(e.to_string()))?
        .map_err(|e| fs_error("FS_ERROR", format!("cannot write {file}: {e}")))?;
    if let Some(v) = version_of(&path) {
        observed.borrow_mut().insert((agent, path), v);
    }
    let verb = if exists {
        "Updated file"
    } else {
        "Created file"
    };
    Ok(
        json!({"content": [msg::text(&format!("<path>{file}</path>\n<type>file</type>\n<content>\n{verb}\n</content>"))]}),
    )
}

async fn edit(ctx: &Context, observed: &Observed, req: &Request) -> Result<Value> {
    let args = &req.params["arguments"];
    let agent = req.params["agent"].as_str().unwrap_or_default().to_owned();
    let file = args["file_path"].as_str().unwrap_or_default().to_owned();
    let old = args["old_string"].as_str().unwrap_or_default().to_owned();
    let new = args["new_string"].as_str().unwrap_or_default().to_owned();
    let all = args["replace_all"] == json!(true);
    let path = resolve(req.params["cwd"].as_str().unwrap_or("."), &file);
    if !path.is_file() {
        return Err(fs_error("FS_NOT_FOUND", format!("{file} does not exist")));
    }
    require_observed(observed, &agent, &path, &file)?;
    if old.is_empty() {
        return Err(fs_error(
            "EDIT_EMPTY_MATCH",
            "old_string must not be empty".into(),
        ));
    }
    if old == new {
        return Err(fs_error(
            "EDIT_NO_CHANGE",
            "old_string and new_string are identical".into(),
        ));
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| fs_error("FS_ERROR", format!("cannot read {file}: {e}")))?;
    let count = text.matches(&old).count();
    if count == 0 {
        return Err(fs_error(
            "EDIT_NO_MATCH",
            format!("old_string was not found in {file}"),
        ));
    }
    if count > 1 && !all {
        return Err(fs_error(
            "EDIT_AMBIGUOUS",
            format!(
                "old_string appears {count} times in {file}; make it unique or set replace_all"
            ),
        ));
    }
    intent(
        ctx,
        "fs/edit-intent",
        &agent,
        json!({"agent": agent, "path": path, "count": count}),
    )
    .await?;
    let updated = if all {
        text.replace(&old, &new)
    } else {
        text.replacen(&old, &new, 1)
    };
    let p2 = path.clone();
    tokio::task::spawn_blocking(move || write_atomic(&p2, &updated))
        .await
        .map_err(|e| Error::msg(e.to_string()))?
        .map_err(|e| fs_error("FS_ERROR", format!("cannot write {file}: {e}")))?;
    if let Some(v) = version_of(&path) {
        observed.borrow_mut().insert((agent, path), v);
    }
    let text = if all {
        format!("The file {file} has been updated. All occurrences were successfully replaced.")
    } else {
        format!("The file {file} has been updated successfully.")
    };
    Ok(json!({"content": [msg::text(&text)]}))
}

struct ToolFs;

impl Plugin for ToolFs {
    const NAME: &'static str = "tool-fs";
    const DESCRIPTION: &'static str = "the `write` and `edit` tools";
    const INJECT: &'static [&'static str] = &["tools"];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        let observed: Observed = Rc::default();
        let o = observed.clone();
        ctx.on("fs/observed", move |ev| {
            let o = o.clone();
            async move {
                let agent = ev.payload["agent"].as_str().unwrap_or_default().to_owned();
                let path = PathBuf::from(ev.payload["path"].as_str().unwrap_or_default());
                let version = ev.payload["version"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                o.borrow_mut().insert((agent, path), version);
                Ok(Value::Null)
            }
        });
        let write_schema = json!({
            "name": "write",
            "description": "Create or fully replace a UTF-8 text file.",
            "parameters": {"type": "object", "properties": {
                "file_path": {"type": "string", "description": "Path to write, resolved by the filesystem backend."},
                "content": {"type": "string", "description": "Full UTF-8 text content to write."}},
                "required": ["file_path", "content"]},
        });
        let edit_schema = json!({
            "name": "edit",
            "description": "Edit an existing UTF-8 text file by replacing literal text.",
            "parameters": {"type": "object", "properties": {
                "file_path": {"type": "string", "description": "Path to edit, resolved by the filesystem backend."},
                "old_string": {"type": "string", "description": "Literal text to replace. Must match exactly."},
                "new_string": {"type": "string", "description": "Literal replacement text. Use an empty string to delete the match."},
                "replace_all": {"type": "boolean", "description": "Replace all matches. Defaults to false; when false, old_string must appear exactly once."}},
                "required": ["file_path", "old_string", "new_string"]},
        });
        let (c, o) = (ctx.clone(), observed.clone());
        register_tools(&ctx, vec![write_schema, edit_schema], move |req| {
            let (c, o) = (c.clone(), o.clone());
            async move {
                let out = if req.params["name"] == "write" {
                    write(&c, &o, &req).await?
                } else {
                    edit(&c, &o, &req).await?
                };
                Ok(out.into())
            }
        })
        .await?;
        Ok(())
    }
}

dsh_sdk::export_plugin!(ToolFs);
