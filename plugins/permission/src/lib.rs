//! `permission`: permission modes as a `tools/pre-execute` listener.

use std::path::{Path, PathBuf};

use dsh_sdk::fence::{resolve, Fence, Mode, RefusalKind};
use dsh_sdk::names::{bus, host, service};
use dsh_sdk::prelude::*;
use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct Config {
    /// Overrides `DSH_PERMISSION_MODE`.
    mode: Option<String>,
    /// `ask` (default; `never` under danger-full-access): a call beyond the
    /// mode asks the approval seam instead of being denied outright.
    approval: Option<String>,
}

/// The file a `write` or `edit` call would change, resolved as the fence
/// sees it.
fn mutation_target(exec: &Value) -> Option<PathBuf> {
    let name = exec["name"].as_str()?;
    if name != "write" && name != "edit" {
        return None;
    }
    let file = exec["arguments"]["file_path"].as_str()?;
    let cwd = exec["cwd"].as_str().unwrap_or("/");
    Some(resolve(Path::new(cwd), Path::new(file)))
}

fn deny(reason: String) -> Value {
    json!({"kind": "deny", "reason": reason})
}

struct Permission;

impl Plugin for Permission {
    const NAME: &'static str = "permission";
    const DESCRIPTION: &'static str = "permission modes and the workspace fence";
    const INJECT: &'static [&'static str] = &[service::TOOLS];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let mode: Mode = config
            .mode
            .filter(|m| !m.is_empty())
            .or_else(|| {
                std::env::var("DSH_PERMISSION_MODE")
                    .ok()
                    .filter(|m| !m.is_empty())
            })
            .unwrap_or_else(|| Mode::WorkspaceWrite.as_str().into())
            .parse()
            .map_err(|e: String| Error::new(codes::INVALID_CONFIG, e))?;
        let ask = match config.approval.as_deref() {
            None => mode != Mode::DangerFullAccess,
            Some("ask") => true,
            Some("never") => false,
            Some(other) => {
                return Err(Error::new(
                    codes::INVALID_CONFIG,
                    format!("unknown approval policy `{other}` (use ask or never)"),
                ))
            }
        };
        // The harness's own files, which no tool may change.
        let info = ctx
            .service(service::HOST)
            .call(host::INFO, json!({}))
            .await?;
        let protected: Vec<PathBuf> =
            serde_json::from_value(info["protected"].clone()).unwrap_or_default();
        let temp = std::env::temp_dir();
        ctx.on(bus::TOOLS_PRE_EXECUTE, move |ev| {
            let (temp, protected) = (temp.clone(), protected.clone());
            async move {
                let exec = &ev.payload["exec"];
                let cwd = Path::new(exec["cwd"].as_str().unwrap_or("/"));
                let fence = Fence::new(mode, cwd, &temp, &protected);
                let sandbox = serde_json::to_value(&fence)?;
                if let Some(target) = mutation_target(exec) {
                    let name = exec["name"].as_str().unwrap_or_default();
                    if let Err(refusal) = fence.check_write(name, &target) {
                        // `ask`: the approval seam decides what lies beyond
                        // the workspace (and denies with this reason when no
                        // one can answer); the harness's own files and
                        // read-only mode are never asked about.
                        return Ok(if ask && refusal.kind == RefusalKind::Outside {
                            json!({"kind": "ask", "reason": refusal.message, "sandbox": sandbox})
                        } else {
                            deny(refusal.message)
                        });
                    }
                }
                let mut decision = ev.forward().await?;
                if decision["kind"] == "allow" || decision["kind"] == "ask" {
                    decision["sandbox"] = sandbox;
                }
                Ok(decision)
            }
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Permission);
