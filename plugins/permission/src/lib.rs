//! `permission`: permission modes as a `tools/pre-execute` listener, and
//! the `permission` service: the preset in force for each agent and a
//! switch to another one (`presets`).

mod pin;
mod presets;

use std::path::{Path, PathBuf};
use std::rc::Rc;

use dsh_sdk::api::agent_loop::AgentRef;
use dsh_sdk::api::host::Host;
use dsh_sdk::api::permission::ApprovalPolicy;
use dsh_sdk::api::tools::{forward_as, on_pre_execute, Exec, PreExecuteDecision, PreExecuteKind};
use dsh_sdk::fence::{resolve, Fence, Mode, ReadPolicy, Reads, Refusal, RefusalKind};
use dsh_sdk::names::{bus, service, tool};
use dsh_sdk::prelude::*;
use dsh_sdk::Value;
use serde::Deserialize;

use pin::Pins;
use presets::Presets;

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct Config {
    /// Overrides `DSH_PERMISSION_MODE`.
    mode: Option<String>,
    /// `ask` (default; `never` under danger-full-access): a call beyond the
    /// mode asks the approval seam instead of being denied outright.
    approval: Option<String>,
    /// `allow` (default): the file tools read outside the workspace (never
    /// what the read fence refuses); `ask`: such a read asks like a write
    /// outside the workspace does.
    read: ReadPolicy,
}

/// The part of a `write`, `edit` or `read` call's arguments the policy
/// reads.
#[derive(Deserialize)]
struct FileArgs {
    file_path: String,
}

/// The part of a `grep` or `glob` call's arguments the policy reads.
#[derive(Deserialize)]
struct SearchArgs {
    path: Option<String>,
}

/// The file a `write` or `edit` call would change, as spelled (none when
/// the arguments name no file: the tool refuses them).
fn mutation_target(exec: &Exec) -> Option<String> {
    if exec.name != tool::WRITE && exec.name != tool::EDIT {
        return None;
    }
    let FileArgs { file_path } = exec.arguments_as().ok()?;
    Some(file_path)
}

/// What a `read`, `grep` or `glob` call would read, as spelled (none for
/// other tools, or when the arguments are malformed: the tool refuses
/// them).
fn read_target(exec: &Exec) -> Option<String> {
    match exec.name.as_str() {
        tool::READ => exec.arguments_as::<FileArgs>().ok().map(|a| a.file_path),
        tool::GREP | tool::GLOB => exec
            .arguments_as::<SearchArgs>()
            .ok()
            .map(|a| a.path.unwrap_or_else(|| ".".into())),
        _ => None,
    }
}

/// The decision for a refused call: asked when the refusal is approvable
/// (outside the workspace or its configuration) and the policy asks,
/// denied otherwise (the harness's own files, what is never read,
/// read-only mode). A change to the configuration is asked for every
/// time: its approval is never remembered for the session.
fn decide(refusal: Refusal, ask: bool, fence: Fence) -> PreExecuteDecision {
    let approvable = refusal.kind.is_approvable();
    if ask && approvable {
        PreExecuteDecision {
            sandbox: Some(fence),
            always_ask: refusal.kind == RefusalKind::Config,
            ..PreExecuteDecision::new(PreExecuteKind::Ask, Some(refusal.message))
        }
    } else {
        PreExecuteDecision::new(PreExecuteKind::Deny, Some(refusal.message))
    }
}

/// What a call's fence is built from, resolved once at apply: the temp
/// directory, the harness's own files, what is never read.
struct Constants {
    temp: PathBuf,
    protected: Vec<PathBuf>,
    reads: Reads,
}

/// The fence of a call of `agent` in `cwd` under `mode`, on the workspace
/// as pinned ([`Pins`]); the reason to deny the call when the workspace
/// was replaced since (in every mode but `danger-full-access`, which
/// fences nothing).
fn fence_of(
    pins: &Pins,
    constants: &Constants,
    mode: Mode,
    agent: &str,
    cwd: &str,
) -> std::result::Result<Fence, String> {
    let root = match pins.root(agent, cwd) {
        Ok(root) => root,
        Err(why) if mode != Mode::DangerFullAccess => return Err(why),
        Err(_) => resolve(Path::new("/"), Path::new(cwd)),
    };
    let fence = Fence::of_resolved(mode, root, &constants.temp, constants.protected.clone());
    Ok(fence.with_reads(constants.reads.clone()))
}

/// Forgets an agent's pinned workspaces when it is disposed.
fn forget_disposed(ctx: &Context, pins: &Pins) {
    let pins = pins.clone();
    ctx.on(bus::AGENT_DISPOSED, move |ev| {
        let pins = pins.clone();
        async move {
            let AgentRef { agent } = ev.payload_as()?;
            pins.forget(&agent);
            Ok(Value::Null)
        }
    });
}

struct Permission;

impl Plugin for Permission {
    const NAME: &'static str = "permission";
    const DESCRIPTION: &'static str = "permission modes and the workspace fence";
    const INJECT: &'static [&'static str] = &[service::TOOLS];
    const PROVIDES: &'static [&'static str] = &[service::PERMISSION];
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
        // The harness's own files, which no tool may change, and what no
        // tool may read.
        let info = Host::new(&ctx).info().await?;
        let slash = Path::new("/");
        let temp = std::env::temp_dir();
        let constants = Rc::new(Constants {
            temp: resolve(slash, &temp),
            protected: info
                .protected
                .iter()
                .map(|p| resolve(slash, Path::new(p)))
                .collect(),
            reads: Reads::discover(config.read, Path::new(&info.home), &temp),
        });
        let approval = if ask {
            ApprovalPolicy::Ask
        } else {
            ApprovalPolicy::Never
        };
        let presets = Presets::new(mode, approval);
        presets::provide(&ctx, &presets);
        let pins = Pins::default();
        forget_disposed(&ctx, &pins);
        on_pre_execute(&ctx, move |exec, ev| {
            let (mode, approval) = presets.of(exec.agent());
            let ask = approval == ApprovalPolicy::Ask;
            let fence = fence_of(&pins, &constants, mode, exec.agent(), exec.cwd_or("/"));
            async move {
                let fence = match fence {
                    Ok(fence) => fence,
                    Err(why) => {
                        return Ok(PreExecuteDecision::new(PreExecuteKind::Deny, Some(why)))
                    }
                };
                let cwd = Path::new(exec.cwd_or("/"));
                // `ask`: the approval seam decides what lies beyond the
                // workspace (and denies with this reason when no one can
                // answer); the harness's own files, what is never read and
                // read-only mode are never asked about.
                if let Some(file) = mutation_target(&exec) {
                    let (_, checked) = fence.resolve_write(&exec.name, cwd, Path::new(&file));
                    if let Err(refusal) = checked {
                        return Ok(decide(refusal, ask, fence));
                    }
                }
                if let Some(file) = read_target(&exec) {
                    if let Err(refusal) =
                        fence.resolve_read(&exec.name, cwd, Path::new(&file), false)
                    {
                        return Ok(decide(refusal, ask, fence));
                    }
                }
                let mut decision: PreExecuteDecision =
                    forward_as::<Option<_>>(&ev).await?.unwrap_or_default();
                if matches!(
                    decision.kind,
                    Some(PreExecuteKind::Allow | PreExecuteKind::Ask)
                ) {
                    decision.sandbox = Some(fence);
                }
                Ok(decision)
            }
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Permission);
