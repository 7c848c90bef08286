//! `tool-fs`: `write` and `edit` (reference dsh-product §4.1) with atomic
//! writes and the read-before-write policy.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use dsh_sdk::api::host::Host;
use dsh_sdk::api::tools::{
    Exec, FsEditIntent, FsIntentDecision, FsObserved, FsWriteIntent, ToolReply,
};
use dsh_sdk::beneath::{open_parent, Dir};
use dsh_sdk::fence::{version, Guard, ReadPolicy, Reads};
use dsh_sdk::file::identity_of;
use dsh_sdk::names::{bus, code, service, tool};
use dsh_sdk::prelude::*;
use dsh_sdk::tool::{declaration, register_tools, ToolSpec};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `write` tool (the original's schema, reference dsh-product §4.1).
struct WriteTool;

impl ToolSpec for WriteTool {
    const NAME: &'static str = tool::WRITE;
    const DESCRIPTION: &'static str = "Create or fully replace a UTF-8 text file.";
    type Args = WriteArgs;
}

#[derive(Deserialize, JsonSchema)]
struct WriteArgs {
    /// Path to write, resolved by the filesystem backend.
    file_path: String,
    /// Full UTF-8 text content to write.
    content: String,
}

/// The `edit` tool (the original's schema, reference dsh-product §4.1).
struct EditTool;

impl ToolSpec for EditTool {
    const NAME: &'static str = tool::EDIT;
    const DESCRIPTION: &'static str = "Edit an existing UTF-8 text file by replacing literal text.";
    type Args = EditArgs;
}

#[derive(Deserialize, JsonSchema)]
struct EditArgs {
    /// Path to edit, resolved by the filesystem backend.
    file_path: String,
    /// Literal text to replace. Must match exactly.
    old_string: String,
    /// Literal replacement text. Use an empty string to delete the match.
    new_string: String,
    /// Replace all matches. Defaults to false; when false, old_string must appear exactly once.
    replace_all: Option<bool>,
}

/// (agent, resolved path) -> the version the agent last saw.
type Observed = Rc<RefCell<HashMap<(String, PathBuf), String>>>;

/// The largest file `edit` reads (and writes back): it holds the file and
/// its edited copy in memory, so a bigger one (a sparse file of gigabytes
/// reads as that many bytes) is refused before a byte is read. Eight times
/// the most `read` takes from a kernel file in one call, and far above any
/// source file; `bash` (`sed -i`) edits bigger ones.
pub const EDIT_MAX_BYTES: u64 = 32 * 1024 * 1024;

fn fs_error(code: &str, message: String) -> Error {
    Error::new(code, message)
}

fn io_error(verb: &str, file: &str, e: &std::io::Error) -> Error {
    let code = match e.kind() {
        std::io::ErrorKind::PermissionDenied => "FS_DENIED",
        std::io::ErrorKind::NotFound => code::FS_NOT_FOUND,
        _ => code::FS_ERROR,
    };
    fs_error(code, format!("cannot {verb} {file}: {e}"))
}

/// The file a call changes: resolved as the fence sees it, checked against
/// the fence the policy handed over (a refusal the user approved, outside
/// the workspace or in its configuration, is not made again; the harness's
/// own files and what is never read stay refused, also when the call
/// carries no fence), and its parent directory opened beneath the writable
/// root it lies in, so nothing swapped in after the check is followed.
struct Target {
    path: PathBuf,
    root: PathBuf,
    /// The open parent directory and the name in it; `None` while the
    /// parent does not exist yet (`write` creates it).
    dir: Option<(Dir, OsString)>,
    /// What the call is checked against.
    guard: Guard,
}

impl Target {
    fn open(exec: &Exec, own: &Reads, tool: &str, file: &str) -> Result<Target> {
        let guard = Guard::of(exec.sandbox.clone(), own);
        let cwd = Path::new(exec.cwd_or("."));
        let (path, checked) = guard.resolve_write(tool, cwd, Path::new(file));
        match checked {
            Err(r) if !(exec.approved && r.kind.is_approvable()) => {
                return Err(fs_error("FS_DENIED", r.message))
            }
            _ => {}
        }
        let root = guard.root_for(&path).to_owned();
        let dir = match open_parent(&root, &path, false) {
            Ok(d) => Some(d),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_error(tool, file, &e)),
        };
        Ok(Target {
            path,
            root,
            dir,
            guard,
        })
    }

    /// The file's text for `edit`: a regular file, not a secret store's
    /// file under another name (its identity, from the opened descriptor),
    /// at most [`EDIT_MAX_BYTES`] (its size, from the descriptor too), and
    /// UTF-8.
    fn read_text(&self, file: &str) -> Result<String> {
        let Some((dir, name)) = &self.dir else {
            return Err(fs_error(
                code::FS_NOT_FOUND,
                format!("{file} does not exist"),
            ));
        };
        let (opened, meta) = dir
            .open_regular(name)
            .map_err(|e| io_error("read", file, &e))?;
        self.guard
            .check_opened(tool::EDIT, &self.path, identity_of(&meta))
            .map_err(|r| fs_error("FS_DENIED", r.message))?;
        if meta.len() > EDIT_MAX_BYTES {
            return Err(too_big(file, meta.len()));
        }
        let mut bytes = Vec::new();
        opened
            .take(EDIT_MAX_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io_error("read", file, &e))?;
        if bytes.len() as u64 > EDIT_MAX_BYTES {
            return Err(too_big(file, bytes.len() as u64));
        }
        String::from_utf8(bytes)
            .map_err(|_| fs_error(code::FS_NOT_TEXT, format!("{file} is not UTF-8 text")))
    }

    /// The file's metadata (a symlink itself, never its target).
    fn stat(&self, file: &str) -> Result<Option<std::fs::Metadata>> {
        match &self.dir {
            None => Ok(None),
            Some((dir, name)) => dir.stat(name).map_err(|e| io_error("inspect", file, &e)),
        }
    }

    /// Writes `bytes` atomically (creating missing directories), then
    /// returns the file's new version.
    async fn write(self, file: &str, bytes: Vec<u8>) -> Result<Option<String>> {
        let Target {
            path, root, dir, ..
        } = self;
        tokio::task::spawn_blocking(move || {
            let (dir, name) = match dir {
                Some(d) => d,
                None => open_parent(&root, &path, true)?,
            };
            dir.write_atomic(&name, &bytes)?;
            Ok(dir.stat(&name)?.map(|m| version(&m)))
        })
        .await
        .map_err(|e| Error::msg(e.to_string()))?
        .map_err(|e: std::io::Error| io_error("write", file, &e))
    }
}

/// The refusal of editing `file`, of `size` bytes (or that many once
/// edited).
fn too_big(file: &str, size: u64) -> Error {
    fs_error(
        "FS_TOO_LARGE",
        format!(
            "cannot edit {file}: it is (or would become) {size} bytes, above the {EDIT_MAX_BYTES}-byte limit of edit (which holds the whole file in memory); change it with bash (sed -i, a script) instead"
        ),
    )
}

fn require_observed(
    observed: &Observed,
    agent: &str,
    path: &Path,
    current: Option<&std::fs::Metadata>,
    shown: &str,
) -> Result<()> {
    let seen = observed
        .borrow()
        .get(&(agent.to_owned(), path.to_owned()))
        .cloned();
    match seen {
        None => Err(fs_error(
            "FS_NOT_OBSERVED",
            format!("{shown} must be read with the read tool before it is changed"),
        )),
        Some(v) if Some(&v) != current.map(version).as_ref() => Err(fs_error(
            "FS_NOT_OBSERVED",
            format!("{shown} changed since it was last read; read it again before changing it"),
        )),
        Some(_) => Ok(()),
    }
}

/// The `fs/*-intent` waterfall `event` over `payload`: a `deny` refuses
/// the change (`FS_DENIED` with the listener's reason).
async fn intent(ctx: &Context, event: &str, agent: &str, payload: impl Serialize) -> Result<()> {
    let mut d = ctx.dispatch(event);
    if !agent.is_empty() {
        d = d.scope(agent);
    }
    let decision = d
        .waterfall(payload, |_| async {
            let allow = FsIntentDecision {
                kind: Some(FsIntentDecision::ALLOW.to_owned()),
                reason: None,
            };
            Ok(serde_json::to_value(allow)?)
        })
        .await?;
    let decision: FsIntentDecision =
        serde_json::from_value::<Option<FsIntentDecision>>(decision)?.unwrap_or_default();
    if decision.is_deny() {
        let reason = decision.reason.as_deref().unwrap_or("denied by policy");
        return Err(fs_error("FS_DENIED", reason.to_owned()));
    }
    Ok(())
}

async fn write(ctx: &Context, observed: &Observed, own: &Reads, exec: &Exec) -> Result<ToolReply> {
    let WriteArgs {
        file_path: file,
        content,
    } = exec.arguments_for::<WriteTool>()?;
    let agent = exec.agent().to_owned();
    let target = Target::open(exec, own, "write", &file)?;
    let current = target.stat(&file)?;
    if current.as_ref().is_some_and(|m| m.is_dir()) {
        return Err(fs_error(
            "FS_IS_DIRECTORY",
            format!("{file} is a directory"),
        ));
    }
    let exists = current.is_some();
    if exists {
        require_observed(observed, &agent, &target.path, current.as_ref(), &file)?;
    }
    let path = target.path.clone();
    intent(
        ctx,
        bus::FS_WRITE_INTENT,
        &agent,
        FsWriteIntent {
            agent: agent.clone(),
            path: path.clone(),
            exists,
        },
    )
    .await?;
    if let Some(v) = target.write(&file, content.into_bytes()).await? {
        observed.borrow_mut().insert((agent, path), v);
    }
    let verb = if exists {
        "Updated file"
    } else {
        "Created file"
    };
    Ok(ToolReply::text(&format!(
        "<path>{file}</path>\n<type>file</type>\n<content>\n{verb}\n</content>"
    )))
}

async fn edit(ctx: &Context, observed: &Observed, own: &Reads, exec: &Exec) -> Result<ToolReply> {
    let EditArgs {
        file_path: file,
        old_string: old,
        new_string: new,
        replace_all,
    } = exec.arguments_for::<EditTool>()?;
    let all = replace_all.unwrap_or(false);
    let agent = exec.agent().to_owned();
    let target = Target::open(exec, own, "edit", &file)?;
    let current = target.stat(&file)?;
    if !current.as_ref().is_some_and(|m| m.is_file()) {
        return Err(fs_error(
            code::FS_NOT_FOUND,
            format!("{file} does not exist"),
        ));
    }
    require_observed(observed, &agent, &target.path, current.as_ref(), &file)?;
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
    let text = target.read_text(&file)?;
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
    let grown = (new.len() as u64).saturating_sub(old.len() as u64);
    let edited = (text.len() as u64).saturating_add(grown.saturating_mul(count as u64));
    if edited > EDIT_MAX_BYTES {
        return Err(too_big(&file, edited));
    }
    let path = target.path.clone();
    intent(
        ctx,
        bus::FS_EDIT_INTENT,
        &agent,
        FsEditIntent {
            agent: agent.clone(),
            path: path.clone(),
            count,
        },
    )
    .await?;
    let updated = if all {
        text.replace(&old, &new)
    } else {
        text.replacen(&old, &new, 1)
    };
    if let Some(v) = target.write(&file, updated.into_bytes()).await? {
        observed.borrow_mut().insert((agent, path), v);
    }
    let text = if all {
        format!("The file {file} has been updated. All occurrences were successfully replaced.")
    } else {
        format!("The file {file} has been updated successfully.")
    };
    Ok(ToolReply::text(&text))
}

struct ToolFs;

impl Plugin for ToolFs {
    const NAME: &'static str = "tool-fs";
    const DESCRIPTION: &'static str = "the `write` and `edit` tools";
    const INJECT: &'static [&'static str] = &[service::TOOLS];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        let observed: Observed = Rc::default();
        let o = observed.clone();
        ctx.on(bus::FS_OBSERVED, move |ev| {
            let o = o.clone();
            async move {
                let seen: FsObserved = ev.payload_as()?;
                let agent = seen.agent.unwrap_or_default();
                o.borrow_mut().insert((agent, seen.path), seen.version);
                Ok(Value::Null)
            }
        });
        // What is never read (nor changed), as found here: added to the
        // fence each call carries (see `Reads::union`).
        let home = Host::new(&ctx).info().await?.home;
        let own = Rc::new(Reads::discover(
            ReadPolicy::Allow,
            Path::new(&home),
            &std::env::temp_dir(),
        ));
        let (c, o) = (ctx.clone(), observed.clone());
        let tools = vec![declaration::<WriteTool>(), declaration::<EditTool>()];
        register_tools(&ctx, tools, move |req| {
            let (c, o, own) = (c.clone(), o.clone(), own.clone());
            async move {
                let exec = dsh_sdk::tool::exec(&req)?;
                let out = if exec.name == WriteTool::NAME {
                    write(&c, &o, &own, &exec).await?
                } else {
                    edit(&c, &o, &own, &exec).await?
                };
                Reply::json(out)
            }
        })
        .await?;
        Ok(())
    }
}

dsh_sdk::export_plugin!(ToolFs);
