//! `tool-read`: the `read` tool (reference dsh-product §4.1): line-numbered
//! UTF-8 text with the original's footers and caps (2000 lines, 2000 chars
//! per line, 51,200 bytes per call, and the call's `maxResultTokens` from
//! the agent's context window when it has one), streamed in bounded
//! memory from a file that must be regular, under the read fence (see
//! README.md).

use std::path::Path;
use std::rc::Rc;

use dsh_sdk::api::host::Host;
use dsh_sdk::api::tools::FsObserved;
use dsh_sdk::blocking::cancellable;
use dsh_sdk::fence::{Guard, ReadError, ReadPolicy, Reads, Refusal};
use dsh_sdk::file::OpenError;
use dsh_sdk::names::{bus, code, service, tool};
use dsh_sdk::prelude::*;
use dsh_sdk::tool::{declaration, register_tools, text_reply, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;

mod lines;
mod window;

pub use window::{render, Caps, MAX_BYTES, MAX_LINES, MAX_LINE_CHARS};

/// The `read` tool (the original's schema, reference dsh-product §4.1).
struct ReadTool;

impl ToolSpec for ReadTool {
    const NAME: &'static str = tool::READ;
    const DESCRIPTION: &'static str = "Read a UTF-8 text file and return line-numbered content.";
    const PARALLEL: bool = true;
    type Args = ReadArgs;
}

#[derive(Deserialize, JsonSchema)]
struct ReadArgs {
    /// Path to read, resolved by the filesystem backend.
    file_path: String,
    /// 1-based first line to return. Defaults to 1.
    #[schemars(with = "Option<dsh_sdk::tool::Number>")]
    offset: Option<u64>,
    /// Maximum number of lines to return. Defaults to 2000.
    #[schemars(with = "Option<dsh_sdk::tool::Number>")]
    limit: Option<u64>,
}

async fn execute(ctx: Context, own: Rc<Reads>, req: Request) -> Result<Reply> {
    let exec = dsh_sdk::tool::exec(&req)?;
    let args = exec.arguments_for::<ReadTool>()?;
    let file = args.file_path;
    let cwd = exec.cwd_or(".");
    let offset = args.offset.unwrap_or(1).max(1) as usize;
    let limit = args
        .limit
        .map_or(MAX_LINES, |l| (l as usize).clamp(1, MAX_LINES));
    // The fence the policy handed over, or without one what this plugin
    // found is never read (only danger-full-access reads everything); the
    // user's approval of a read outside the workspace is not asked again.
    // The agent's context window may cap the result below the original's
    // caps (`exec.maxResultTokens`, from `compaction-basic`).
    let caps = exec
        .max_result_tokens
        .map_or(Caps::DEFAULT, |max| Caps::within(max, &file));
    let guard = Guard::of(exec.sandbox.clone(), &own);
    let approved = exec.approved;
    let path = guard
        .resolve_read(tool::READ, Path::new(cwd), Path::new(&file), approved)
        .map_err(denied)?;
    let read_path = path.clone();
    let shown = file.clone();
    let rendered = cancellable(move |cancel| {
        let opened = guard
            .open_read(tool::READ, &read_path, approved)
            .map_err(|e| refused(&shown, e))?;
        render(&shown, opened, offset, limit, caps, cancel)
    })
    .await??;
    // Tell the read-before-write policy which version the agent has seen
    // (`path` is already resolved as the fence resolves it).
    if let Some(version) = version_of(&path) {
        let seen = FsObserved {
            agent: exec.agent,
            path,
            version,
        };
        let _ = ctx.emit(bus::FS_OBSERVED, seen);
    }
    text_reply(&rendered)
}

/// The error for a read the fence refuses (`FS_DENIED`, its message).
fn denied(refusal: Refusal) -> Error {
    Error::new(FS_DENIED, refusal.message)
}

/// The code of a read the fence refuses.
const FS_DENIED: &str = "FS_DENIED";

/// The error for a file `read` cannot open: refused by the fence, missing,
/// not a regular file (a FIFO would block, a device never ends), a kernel
/// file whose reads may wait forever, a link swapped in since the check, or
/// an I/O failure.
fn refused(file: &str, e: ReadError) -> Error {
    let e = match e {
        ReadError::Refused(r) => return denied(r),
        ReadError::Open(e) => e,
    };
    match e {
        OpenError::NotRegular(kind) => Error::new(
            "FS_NOT_REGULAR_FILE",
            format!("cannot read {file}: it is {kind}; read only reads regular files"),
        ),
        OpenError::Kernel(kind) => Error::new(
            "FS_NOT_REGULAR_FILE",
            format!("cannot read {file}: it is {kind}"),
        ),
        OpenError::Symlink(_) => Error::new(FS_DENIED, format!("cannot read {file}: {e}")),
        OpenError::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Error::new(code::FS_NOT_FOUND, format!("cannot read {file}: {e}"))
        }
        OpenError::Io(e) => Error::new(code::FS_ERROR, format!("cannot read {file}: {e}")),
    }
}

/// The version the read-before-write policy compares (the fence's).
pub fn version_of(path: &Path) -> Option<String> {
    std::fs::metadata(path)
        .ok()
        .map(|m| dsh_sdk::fence::version(&m))
}

struct Read;

impl Plugin for Read {
    const NAME: &'static str = "tool-read";
    const DESCRIPTION: &'static str = "the `read` tool";
    const INJECT: &'static [&'static str] = &[service::TOOLS];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        // What is never read, as found here: added to the fence each call
        // carries (see `Reads::union`).
        let home = Host::new(&ctx).info().await?.home;
        let own = Rc::new(Reads::discover(
            ReadPolicy::Allow,
            Path::new(&home),
            &std::env::temp_dir(),
        ));
        let c = ctx.clone();
        register_tools(&ctx, vec![declaration::<ReadTool>()], move |req| {
            execute(c.clone(), own.clone(), req)
        })
        .await
    }
}

dsh_sdk::export_plugin!(Read);
