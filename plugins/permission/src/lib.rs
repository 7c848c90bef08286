//! `permission`: permission modes as a `tools/pre-execute` listener.

use std::path::{Component, Path, PathBuf};

use dsh_sdk::prelude::*;
use serde::Deserialize;

const MODES: [&str; 3] = ["read-only", "workspace-write", "danger-full-access"];

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct Config {
    /// Overrides `DSH_PERMISSION_MODE`.
    mode: Option<String>,
    /// `ask` (default; `never` under danger-full-access): a call beyond the
    /// mode asks the approval seam instead of being denied outright.
    approval: Option<String>,
}

/// The canonical form of `p`, even when it does not exist yet: the longest
/// existing ancestor is canonicalized (resolving symlinks), the rest is
/// appended lexically with `..` and `.` applied.
fn canonical(p: &Path) -> PathBuf {
    let mut existing = p.to_owned();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    while !existing.exists() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_owned());
                existing = parent.to_owned();
            }
            _ => break,
        }
    }
    let mut out = existing.canonicalize().unwrap_or(existing);
    for part in rest.iter().rev() {
        match Path::new(part).components().next() {
            Some(Component::ParentDir) => {
                out.pop();
            }
            Some(Component::CurDir) | None => {}
            _ => out.push(part),
        }
    }
    out
}

fn mutation_target(exec: &Value) -> Option<PathBuf> {
    let name = exec["name"].as_str()?;
    if name != "write" && name != "edit" {
        return None;
    }
    let file = exec["arguments"]["file_path"].as_str()?;
    let cwd = exec["cwd"].as_str().unwrap_or("/");
    let p = Path::new(file);
    let joined = if p.is_absolute() {
        p.to_owned()
    } else {
        Path::new(cwd).join(p)
    };
    Some(canonical(&joined))
}

fn deny(reason: String) -> Value {
    json!({"kind": "deny", "reason": reason})
}

struct Permission;

impl Plugin for Permission {
    const NAME: &'static str = "permission";
    const DESCRIPTION: &'static str = "permission modes and the workspace fence";
    const INJECT: &'static [&'static str] = &["tools"];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let mode = config
            .mode
            .filter(|m| !m.is_empty())
            .or_else(|| {
                std::env::var("DSH_PERMISSION_MODE")
                    .ok()
                    .filter(|m| !m.is_empty())
            })
            .unwrap_or_else(|| "workspace-write".into());
        if !MODES.contains(&mode.as_str()) {
            return Err(Error::new(
                codes::INVALID_CONFIG,
                format!(
                    "unknown permission mode `{mode}` (use {})",
                    MODES.join(", ")
                ),
            ));
        }
        let approval = config.approval.unwrap_or_else(|| {
            if mode == "danger-full-access" {
                "never"
            } else {
                "ask"
            }
            .into()
        });
        if approval != "ask" && approval != "never" {
            return Err(Error::new(
                codes::INVALID_CONFIG,
                format!("unknown approval policy `{approval}` (use ask or never)"),
            ));
        }
        let temp = canonical(&std::env::temp_dir());
        ctx.on("tools/pre-execute", move |ev| {
            let (mode, temp, approval) = (mode.clone(), temp.clone(), approval.clone());
            async move {
                let exec = &ev.payload["exec"];
                let root = canonical(Path::new(exec["cwd"].as_str().unwrap_or("/")));
                if let Some(target) = mutation_target(exec) {
                    let name = exec["name"].as_str().unwrap_or_default();
                    match mode.as_str() {
                        "read-only" => {
                            return Ok(deny(format!(
                                "{name} of {} is not allowed in read-only mode; set DSH_PERMISSION_MODE=workspace-write (or danger-full-access) to allow file changes",
                                target.display()
                            )))
                        }
                        "workspace-write" if !target.starts_with(&root) && !target.starts_with(&temp) => {
                            let reason = format!(
                                "{} is outside the workspace {} (workspace-write mode allows changes only there and in {}); set DSH_PERMISSION_MODE=danger-full-access to allow it",
                                target.display(),
                                root.display(),
                                temp.display()
                            );
                            // `ask`: the approval seam decides (and denies
                            // with this reason when no one can answer).
                            return Ok(if approval == "ask" {
                                json!({"kind": "ask", "reason": reason, "sandbox": {"mode": mode, "root": root}})
                            } else {
                                deny(reason)
                            });
                        }
                        _ => {}
                    }
                }
                let mut decision = ev.next(ev.payload.clone()).await?;
                if decision["kind"] == "allow" || decision["kind"] == "ask" {
                    decision["sandbox"] = json!({"mode": mode, "root": root});
                }
                Ok(decision)
            }
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Permission);
