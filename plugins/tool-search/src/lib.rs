//! `tool-search`: `glob` and `grep` (see README.md).

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use dsh_sdk::api::host::Host;
use dsh_sdk::api::tools::Exec;
use dsh_sdk::blocking::{cancellable, Cancel};
use dsh_sdk::fence::{ReadPolicy, Reads};
use dsh_sdk::names::{service, tool};
use dsh_sdk::prelude::*;
use dsh_sdk::tool::{declaration, register_tools, text_reply, ToolSpec};
use globset::{GlobBuilder, GlobMatcher};
use ignore::{DirEntry, WalkBuilder};
use schemars::JsonSchema;
use serde::Deserialize;

mod grep;
mod ignores;
mod scope;
mod stored;

use scope::{ordinary_dir, refuse_pseudo_root, Scope};
use stored::spill;

const GLOB_CAP: usize = 100;
const VCS: [&str; 6] = [".git", ".svn", ".hg", ".bzr", ".jj", ".sl"];

/// The `glob` tool.
struct GlobTool;

impl ToolSpec for GlobTool {
    const NAME: &'static str = tool::GLOB;
    const DESCRIPTION: &'static str = "Find files whose paths match a glob pattern. Returns matching file paths — never directories — including hidden and ignored files (VCS metadata directories are excluded). Up to 100 paths come back in modification-time order; a larger result returns the first 100 paths in modification-time order, says so, and reports where the complete sorted list was saved. This tool does not enumerate directory entries.";
    const PARALLEL: bool = true;
    type Args = GlobArgs;
}

#[derive(Deserialize, JsonSchema)]
struct GlobArgs {
    /// A ripgrep glob; without `/` it matches the base name at any depth.
    pattern: String,
    /// The directory to search. Defaults to the workspace.
    path: Option<String>,
}

/// The `grep` tool.
struct GrepTool;

impl ToolSpec for GrepTool {
    const NAME: &'static str = tool::GREP;
    const DESCRIPTION: &'static str = "Search file contents with a ripgrep regular expression. Returns matching lines with line numbers, grouped by file. Returns the first 250 matches inline; a capped result reports where the complete match list was saved. Use read on a matched file for surrounding context.";
    const PARALLEL: bool = true;
    type Args = GrepArgs;
}

#[derive(Deserialize, JsonSchema)]
struct GrepArgs {
    /// A ripgrep regular expression.
    pattern: String,
    /// A file or directory to search. Defaults to the workspace.
    path: Option<String>,
    /// One positive glob limiting the files searched.
    include: Option<String>,
}

/// One parsed call of either tool.
enum Call {
    Glob(GlobArgs),
    Grep(GrepArgs),
}

impl Call {
    fn parse(req: &Request, exec: &Exec) -> Result<Call> {
        match exec.name.as_str() {
            GlobTool::NAME => Ok(Call::Glob(exec.arguments_for::<GlobTool>()?)),
            GrepTool::NAME => Ok(Call::Grep(exec.arguments_for::<GrepTool>()?)),
            _ => Err(req.unknown_method()),
        }
    }
}

fn glob_matcher(pattern: &str) -> Result<GlobMatcher> {
    let p = if pattern.contains('/') {
        pattern.to_owned()
    } else {
        format!("**/{pattern}")
    };
    GlobBuilder::new(&p)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| {
            Error::new(
                "SEARCH_INVALID_PATTERN",
                format!("invalid glob `{pattern}`: {e}"),
            )
        })
}

fn relative(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// Whether a walk enters the directory `entry` (below its root): not a VCS
/// directory, not one the fence refuses, not on a pseudo filesystem.
fn enters(scope: &Scope, entry: &DirEntry) -> bool {
    let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
    if !is_dir || entry.depth() == 0 {
        return true;
    }
    !VCS.iter().any(|v| entry.file_name() == *v)
        && scope.admits(entry.path())
        && ordinary_dir(entry.path())
}

fn glob(cwd: &str, args: &GlobArgs, scope: &Scope, cancel: &Cancel) -> Result<String> {
    let matcher = glob_matcher(&args.pattern)?;
    let root = scope.root(cwd, args.path.as_deref())?;
    if !root.is_dir() {
        return Err(Error::new(
            "SEARCH_FAILED",
            format!("{} is not a directory", root.display()),
        ));
    }
    refuse_pseudo_root(GlobTool::NAME, &root)?;
    let mut found: Vec<(SystemTime, String)> = Vec::new();
    let walk_scope = scope.clone();
    let walk = WalkBuilder::new(&root)
        .hidden(false)
        .ignore(false)
        .git_ignore(false)
        .git_global(false)
        .git_exclude(false)
        .parents(false)
        .filter_entry(move |e| enters(&walk_scope, e))
        .build();
    for entry in walk.flatten() {
        if cancel.is_cancelled() {
            return Err(Error::new("SEARCH_ABORTED", "glob was cancelled"));
        }
        // Files only: FIFOs, devices, sockets and symlinks are not listed
        // (nothing here opens a file, so none can block), nor files the
        // fence refuses.
        if !entry.file_type().is_some_and(|t| t.is_file()) || !scope.admits(entry.path()) {
            continue;
        }
        let rel = relative(&root, entry.path());
        if matcher.is_match(&rel) {
            let mtime = entry
                .metadata()
                .ok()
                .and_then(|m| m.modified().ok())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((mtime, rel));
        }
    }
    found.sort();
    if found.is_empty() {
        return Ok("No files found".into());
    }
    let all: Vec<&str> = found.iter().map(|(_, p)| p.as_str()).collect();
    if all.len() <= GLOB_CAP {
        return Ok(all.join("\n"));
    }
    let stored = spill("glob.txt", &all.join("\n"));
    let mut out = all[..GLOB_CAP].join("\n");
    out.push_str(&format!(
        "\n\n(Showing {GLOB_CAP} of {} paths in modification-time order. Full sorted result stored at: {}. Use read with offset/limit, or grep this path to search within it.)",
        all.len(),
        stored.map_or_else(|| "(could not be stored)".into(), |p| p.display().to_string())
    ));
    Ok(out)
}

struct Search;

impl Plugin for Search {
    const NAME: &'static str = "tool-search";
    const DESCRIPTION: &'static str = "the `glob` and `grep` tools";
    const INJECT: &'static [&'static str] = &[service::TOOLS];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        // Over-cap results are stored in a directory of this fiber's.
        stored::open();
        ctx.effect(|| async { stored::close() });
        // What is never read, as found here: added to the fence each call
        // carries (see `Reads::union`).
        let home = Host::new(&ctx).info().await?.home;
        let own = Arc::new(Reads::discover(
            ReadPolicy::Allow,
            Path::new(&home),
            &std::env::temp_dir(),
        ));
        let schemas = vec![declaration::<GlobTool>(), declaration::<GrepTool>()];
        register_tools(&ctx, schemas, move |req| {
            let own = own.clone();
            async move {
                let exec = dsh_sdk::tool::exec(&req)?;
                let cwd = exec.cwd_or(".").to_owned();
                let call = Call::parse(&req, &exec)?;
                let out = cancellable(move |cancel| match call {
                    Call::Glob(args) => {
                        glob(&cwd, &args, &Scope::of(&exec, GlobTool::NAME, &own), cancel)
                    }
                    Call::Grep(args) => {
                        let scope = Scope::of(&exec, GrepTool::NAME, &own);
                        grep::grep(&cwd, &args, &scope, cancel)
                    }
                })
                .await??;
                text_reply(&out)
            }
        })
        .await?;
        Ok(())
    }
}

dsh_sdk::export_plugin!(Search);
