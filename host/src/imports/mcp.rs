//! MCP servers the user configured for other products, as `mcp-client`
//! rows: codex's `[mcp_servers.<name>]` tables (the user's own file,
//! trusted) and Claude Code's project `.mcp.json` (`mcpServers`; its
//! servers start only once the user trusted the project). A server that
//! cannot be read is skipped with a warning naming it; the others still
//! load. Secrets stay out of the rows: Claude Code's `${VAR}` becomes the
//! host's `${env:VAR}`, resolved when the row applies, and codex's token
//! and header variables are passed by name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dsh_wire::host_service::UntrustedProject;
use dsh_wire::mcp::{transport, valid_server_name as valid_name, PLUGIN};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Imported, Sources, Untrusted};
use crate::config::{read_optional_regular, Layer, Patch, Row};
use crate::trust;

/// The group of imported rows (`[[patch]] group = "mcp"` edits them all).
const GROUP: &str = "mcp";
/// The project file, Claude Code's name.
const MCP_JSON: &str = ".mcp.json";
/// The largest imported file read.
const FILE_MAX: u64 = 1 << 20;

/// The row id of server `name`.
fn row_id(name: &str) -> String {
    format!("mcp:{name}")
}

/// The config of an `mcp-client` row (its keys are the plugin's; see
/// plugins/mcp-client/README.md).
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct ServerRow {
    transport: &'static str,
    server_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    env: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    env_vars: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cwd: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    env_headers: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bearer_token_env_var: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    startup_timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    enabled_tools: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disabled_tools: Option<Vec<String>>,
}

const STDIO: &str = transport::STDIO;
const HTTP: &str = transport::STREAMABLE_HTTP;

/// Both sources, codex's first: a project server of the same name
/// replaces the user's (a patch of its row).
pub fn import(sources: &Sources) -> Imported {
    let mut out = Imported::default();
    let mut known = Vec::new();
    if let Some(codex_home) = &sources.codex_home {
        let path = codex_home.join("config.toml");
        out.files.push(path.clone());
        if let Some(layer) = codex_layer(&path, &mut out.warnings) {
            known.extend(layer.rows.iter().map(|r| r.id.clone()));
            out.layers.push(layer);
        }
    }
    let (path, project) = find_mcp_json(&sources.cwd, sources.user_home.as_deref());
    out.files.push(path.clone());
    if let Some(project) = project {
        out.files.push(trust::trust_path(&sources.home));
        if let Some(layer) = project_layer(&path, &project, sources, &known, &mut out) {
            out.layers.push(layer);
        }
    }
    out
}

/// The project's `.mcp.json`: the nearest in the directory or its
/// ancestors up to the repository's root (the first with `.git`), never
/// above the user's home when the directory is in it, and only a file
/// the user owns (one another user put in `/tmp` is no project of
/// theirs); and that project's directory. Else the directory's own path
/// for it (to watch for its creation).
fn find_mcp_json(cwd: &Path, user_home: Option<&Path>) -> (PathBuf, Option<PathBuf>) {
    use std::os::unix::fs::MetadataExt;
    // Canonical, so a project has one name (its trust record's).
    let cwd = cwd.canonicalize().unwrap_or_else(|_| cwd.to_owned());
    let home = user_home
        .and_then(|h| h.canonicalize().ok())
        .filter(|h| cwd.starts_with(h));
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    for dir in cwd.ancestors() {
        let file = dir.join(MCP_JSON);
        if std::fs::metadata(&file).is_ok_and(|m| m.is_file() && m.uid() == me) {
            return (file, Some(dir.to_owned()));
        }
        if dir.join(".git").exists() || home.as_deref() == Some(dir) {
            break;
        }
    }
    (cwd.join(MCP_JSON), None)
}

fn read(path: &Path, warnings: &mut Vec<String>) -> Option<String> {
    match read_optional_regular(path, FILE_MAX) {
        Ok(text) => text,
        Err(e) => {
            warnings.push(format!("{}: not read: {e}", path.display()));
            None
        }
    }
}

// ---- codex ------------------------------------------------------------------

/// The part of codex's config.toml read here (the rest is codex's).
#[derive(Deserialize)]
struct CodexConfig {
    #[serde(default)]
    mcp_servers: BTreeMap<String, toml::Value>,
}

/// One `[mcp_servers.<name>]` table (codex's keys).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CodexServer {
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    env_vars: Option<Vec<String>>,
    cwd: Option<String>,
    url: Option<String>,
    bearer_token_env_var: Option<String>,
    http_headers: Option<BTreeMap<String, String>>,
    env_http_headers: Option<BTreeMap<String, String>>,
    startup_timeout_sec: Option<f64>,
    startup_timeout_ms: Option<u64>,
    tool_timeout_sec: Option<f64>,
    enabled: Option<bool>,
    enabled_tools: Option<Vec<String>>,
    disabled_tools: Option<Vec<String>>,
}

fn seconds_to_ms(s: f64) -> Option<u64> {
    (s.is_finite() && s > 0.0).then(|| (s * 1000.0).round() as u64)
}

fn codex_layer(path: &Path, warnings: &mut Vec<String>) -> Option<Layer> {
    let text = read(path, warnings)?;
    let config: CodexConfig = match toml::from_str(&text) {
        Ok(c) => c,
        Err(e) => {
            warnings.push(format!(
                "{}: its [mcp_servers] were not read: {}",
                path.display(),
                e.to_string().trim_end()
            ));
            return None;
        }
    };
    let mut layer = Layer {
        origin: path.display().to_string(),
        rows: Vec::new(),
        patches: Vec::new(),
        imports: Vec::new(),
    };
    for (name, table) in config.mcp_servers {
        let skip = |why: String| format!("{}: MCP server `{name}` skipped: {why}", path.display());
        if !valid_name(&name) {
            warnings.push(skip("its name must match [A-Za-z0-9_-]{1,32}".into()));
            continue;
        }
        let server: CodexServer = match table.try_into() {
            Ok(s) => s,
            Err(e) => {
                warnings.push(skip(e.to_string().trim_end().to_owned()));
                continue;
            }
        };
        let transport = match (&server.command, &server.url) {
            (Some(_), None) => STDIO,
            (None, Some(_)) => HTTP,
            _ => {
                warnings.push(skip("it needs exactly one of `command` and `url`".into()));
                continue;
            }
        };
        let config = ServerRow {
            transport,
            server_name: name.clone(),
            command: server.command,
            args: server.args,
            env: server.env,
            env_vars: server.env_vars,
            cwd: server.cwd,
            url: server.url,
            headers: server.http_headers,
            env_headers: server.env_http_headers,
            bearer_token_env_var: server.bearer_token_env_var,
            tool_call_timeout_ms: server.tool_timeout_sec.and_then(seconds_to_ms),
            startup_timeout_ms: server
                .startup_timeout_ms
                .or_else(|| server.startup_timeout_sec.and_then(seconds_to_ms)),
            enabled_tools: server.enabled_tools,
            disabled_tools: server.disabled_tools,
        };
        match row(&name, &config, server.enabled == Some(false)) {
            Ok(r) => layer.rows.push(r),
            Err(e) => warnings.push(skip(e)),
        }
    }
    Some(layer)
}

fn row(name: &str, config: &ServerRow, disabled: bool) -> Result<Row, String> {
    Ok(Row {
        id: row_id(name),
        plugin: PLUGIN.into(),
        config: serde_json::to_value(config).map_err(|e| e.to_string())?,
        disabled,
        inject: Vec::new(),
        group: Some(GROUP.into()),
    })
}

// ---- .mcp.json ----------------------------------------------------------------

/// Claude Code's `.mcp.json`. Each server is read on its own, so one
/// malformed entry skips only itself (open JSON until then).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct McpJson {
    #[serde(default)]
    mcp_servers: BTreeMap<String, Value>,
}

/// One server of `mcpServers` (Claude Code's keys; others are ignored, as
/// Claude Code ignores them).
#[derive(Deserialize)]
struct ClaudeServer {
    #[serde(rename = "type")]
    kind: Option<String>,
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    url: Option<String>,
    headers: Option<BTreeMap<String, String>>,
}

/// Claude Code's `${VAR}` and `${VAR:-default}` as the host's
/// `${env:VAR}` (resolved when the row applies, so `--dump-config` never
/// prints a secret).
fn env_refs(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at + 2]);
        rest = &rest[at + 2..];
        if !rest.starts_with("env:") {
            out.push_str("env:");
        }
    }
    out.push_str(rest);
    out
}

fn env_refs_map(m: Option<BTreeMap<String, String>>) -> Option<BTreeMap<String, String>> {
    m.map(|m| m.into_iter().map(|(k, v)| (k, env_refs(&v))).collect())
}

fn claude_row(name: &str, server: ClaudeServer, project: &Path) -> Result<ServerRow, String> {
    let transport = match (server.kind.as_deref(), &server.command, &server.url) {
        (None | Some("stdio"), Some(_), None) => STDIO,
        (None | Some("http" | "streamable-http"), None, Some(_)) => HTTP,
        (Some("sse"), _, _) => {
            return Err("the legacy SSE transport is not supported (use `type: http`)".into())
        }
        (Some(other), _, _) if !matches!(other, "stdio" | "http" | "streamable-http") => {
            return Err(format!("unknown type {other:?}"))
        }
        _ => return Err("it needs `command` (stdio) or `url` (http)".into()),
    };
    Ok(ServerRow {
        transport,
        server_name: name.to_owned(),
        command: server.command.as_deref().map(env_refs),
        args: server.args.map(|a| a.iter().map(|s| env_refs(s)).collect()),
        env: env_refs_map(server.env),
        // Claude Code starts a project's servers in the project.
        cwd: (transport == STDIO).then(|| project.display().to_string()),
        url: server.url.as_deref().map(env_refs),
        headers: env_refs_map(server.headers),
        ..ServerRow::default()
    })
}

/// The valid servers of a project's `.mcp.json`, each with its row's
/// config; `None` when the file cannot be read (said in `warnings`).
fn project_servers(
    path: &Path,
    project: &Path,
    warnings: &mut Vec<String>,
) -> Option<Vec<(String, ServerRow)>> {
    let text = read(path, warnings)?;
    let file: McpJson = match serde_json::from_str(&text) {
        Ok(f) => f,
        Err(e) => {
            warnings.push(format!("{}: not read: {e}", path.display()));
            return None;
        }
    };
    let mut servers = Vec::new();
    for (name, entry) in file.mcp_servers {
        let skip = |why: String| format!("{}: MCP server `{name}` skipped: {why}", path.display());
        if !valid_name(&name) {
            warnings.push(skip("its name must match [A-Za-z0-9_-]{1,32}".into()));
            continue;
        }
        let config = serde_json::from_value::<ClaudeServer>(entry)
            .map_err(|e| e.to_string())
            .and_then(|s| claude_row(&name, s, project));
        match config {
            Ok(c) => servers.push((name, c)),
            Err(e) => warnings.push(skip(e)),
        }
    }
    Some(servers)
}

/// The pin of a server: the digest of its row's config, which holds
/// everything the host would run (command, arguments, environment,
/// directory, URL, headers).
fn server_pin(config: &ServerRow) -> Result<String, String> {
    serde_json::to_vec(config)
        .map(|bytes| trust::pin(&bytes))
        .map_err(|e| e.to_string())
}

/// One line saying what server `name` runs, every string quoted and
/// escaped (`{:?}`), so a file an agent wrote cannot forge the line.
fn describe(name: &str, config: &ServerRow) -> String {
    let mut line = format!("{name}:");
    if let Some(command) = &config.command {
        line.push_str(&format!(" {command:?}"));
    }
    for arg in config.args.iter().flatten() {
        line.push_str(&format!(" {arg:?}"));
    }
    if let Some(url) = &config.url {
        line.push_str(&format!(" {url:?}"));
    }
    for (k, v) in config.env.iter().flatten() {
        line.push_str(&format!(" env {k:?}={v:?}"));
    }
    for (k, v) in config.headers.iter().flatten() {
        line.push_str(&format!(" header {k:?}={v:?}"));
    }
    line
}

/// The id of an offer: a digest of the pins it would record.
fn offer_id(pins: &trust::Pins) -> String {
    let text = pins
        .iter()
        .map(|(name, pin)| format!("{name}={pin}\n"))
        .collect::<String>();
    trust::pin(text.as_bytes())
}

/// What `dsh-host trust DIR` approves: the project holding the `.mcp.json`
/// nearest `dir` (else `dir` itself), its servers pinned as they are now,
/// and a line per server saying what it runs.
pub fn project_to_trust(dir: &Path) -> (PathBuf, trust::Pins, Vec<String>) {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
    let (path, project) = find_mcp_json(&dir, super::user_home().as_deref());
    let Some(project) = project else {
        return (dir, trust::Pins::new(), Vec::new());
    };
    let mut pins = trust::Pins::new();
    let mut lines = Vec::new();
    let mut warnings = Vec::new();
    let servers = project_servers(&path, &project, &mut warnings);
    for (name, config) in servers.into_iter().flatten() {
        if let Ok(pin) = server_pin(&config) {
            lines.push(describe(&name, &config));
            pins.insert(name, pin);
        }
    }
    lines.extend(warnings);
    (project, pins, lines)
}

fn project_layer(
    path: &Path,
    project: &Path,
    sources: &Sources,
    known: &[String],
    out: &mut Imported,
) -> Option<Layer> {
    let servers = project_servers(path, project, &mut out.warnings)?;
    let approved = match trust::read(&sources.home) {
        Ok(record) => record.project(project).map(|p| p.mcp.clone()),
        Err(e) => {
            out.warnings.push(format!("{e}: no project is trusted"));
            None
        }
    };
    let mut layer = Layer {
        origin: path.display().to_string(),
        rows: Vec::new(),
        patches: Vec::new(),
        imports: Vec::new(),
    };
    let mut pins = trust::Pins::new();
    let mut skipped = Vec::new();
    let mut runs = Vec::new();
    for (name, config) in servers {
        let skip = |why: String| format!("{}: MCP server `{name}` skipped: {why}", path.display());
        let pin = match server_pin(&config) {
            Ok(p) => p,
            Err(e) => {
                out.warnings.push(skip(e));
                continue;
            }
        };
        let on = approved
            .as_ref()
            .is_some_and(|a| a.get(&name) == Some(&pin));
        pins.insert(name.clone(), pin);
        if !on {
            skipped.push(name.clone());
            runs.push(describe(&name, &config));
        }
        let id = row_id(&name);
        if known.contains(&id) {
            let value = match serde_json::to_value(&config) {
                Ok(v) => v,
                Err(e) => {
                    out.warnings.push(skip(e.to_string()));
                    continue;
                }
            };
            layer.patches.push(Patch {
                id: Some(id),
                config: Some(value),
                disabled: Some(!on),
                ..Patch::default()
            });
        } else {
            match row(&name, &config, !on) {
                Ok(r) => layer.rows.push(r),
                Err(e) => out.warnings.push(skip(e)),
            }
        }
    }
    if !skipped.is_empty() {
        let why = if approved.is_some() {
            "they are new or changed since the project was trusted"
        } else {
            "the project is not trusted"
        };
        out.notices.push(format!(
            "the MCP servers of {} ({}) were not started: {why}; `dsh-host trust {}` approves \
             them",
            path.display(),
            skipped.join(", "),
            project.display()
        ));
        out.untrusted = Some(Untrusted {
            rows: skipped.iter().map(|s| row_id(s)).collect(),
            project: UntrustedProject {
                dir: project.display().to_string(),
                file: path.display().to_string(),
                servers: skipped,
                runs,
                offer: offer_id(&pins),
            },
            pins,
        });
    }
    Some(layer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(cwd: &Path, home: &Path, codex: Option<&Path>) -> Sources {
        Sources {
            cwd: cwd.to_owned(),
            home: home.to_owned(),
            codex_home: codex.map(Path::to_owned),
            user_home: None,
        }
    }

    #[test]
    fn the_search_stops_at_the_users_home() {
        let home = dsh_tempdir::PrivateDir::new("mcpjson-userhome").unwrap();
        let user = home.path().join("user");
        let project = user.join("notes");
        std::fs::create_dir_all(&project).unwrap();
        // Above the home (no repository anywhere): not the user's project.
        std::fs::write(home.path().join(MCP_JSON), "{}").unwrap();
        assert_eq!(find_mcp_json(&project, Some(&user)).1, None);
        // Without a home to stop at, it would have been found.
        assert!(find_mcp_json(&project, None).1.is_some());
        // In the home itself: found.
        std::fs::write(user.join(MCP_JSON), "{}").unwrap();
        assert_eq!(
            find_mcp_json(&project, Some(&user)).1,
            Some(user.canonicalize().unwrap())
        );
    }

    fn config(layer: &Layer, id: &str) -> Value {
        layer
            .rows
            .iter()
            .find(|r| r.id == id)
            .unwrap()
            .config
            .clone()
    }

    #[test]
    fn codex_servers_become_rows_with_their_keys_mapped() {
        let codex = dsh_tempdir::PrivateDir::new("codex-home").unwrap();
        let work = dsh_tempdir::PrivateDir::new("codex-work").unwrap();
        std::fs::write(
            codex.path().join("config.toml"),
            r#"model = "o3"
[mcp_servers.docs]
command = "docs-server"
args = ["--port", "4000"]
env = { MODE = "x" }
env_vars = ["DOCS_TOKEN"]
tool_timeout_sec = 1.5
enabled_tools = ["search"]
[mcp_servers.figma]
url = "https://mcp.figma.com/mcp"
bearer_token_env_var = "FIGMA_OAUTH_TOKEN"
env_http_headers = { "X-Org" = "FIGMA_ORG" }
enabled = false
[mcp_servers."bad.name"]
command = "x"
[mcp_servers.both]
command = "x"
url = "http://h"
[mcp_servers.typo]
comand = "x"
"#,
        )
        .unwrap();
        let out = import(&sources(work.path(), work.path(), Some(codex.path())));
        let layer = &out.layers[0];
        assert!(layer.origin.ends_with("config.toml"));
        let ids: Vec<&str> = layer.rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["mcp:docs", "mcp:figma"]);
        assert_eq!(
            config(layer, "mcp:docs"),
            serde_json::json!({"transport": "stdio", "serverName": "docs", "command": "docs-server",
                "args": ["--port", "4000"], "env": {"MODE": "x"}, "envVars": ["DOCS_TOKEN"],
                "toolCallTimeoutMs": 1500, "enabledTools": ["search"]})
        );
        let figma = layer.rows.iter().find(|r| r.id == "mcp:figma").unwrap();
        assert!(figma.disabled);
        assert_eq!(
            figma.config["envHeaders"],
            serde_json::json!({"X-Org": "FIGMA_ORG"})
        );
        assert_eq!(out.warnings.len(), 3, "{:?}", out.warnings);
        assert!(out
            .warnings
            .iter()
            .any(|w| w.contains("`typo` skipped") && w.contains("comand")));
    }

    #[test]
    fn a_project_file_is_read_up_to_the_repository_root_and_gated_by_trust() {
        let home = dsh_tempdir::PrivateDir::new("mcpjson-home").unwrap();
        let repo = dsh_tempdir::PrivateDir::new("mcpjson-repo").unwrap();
        std::fs::create_dir(repo.path().join(".git")).unwrap();
        let sub = repo.path().join("src");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(
            repo.path().join(MCP_JSON),
            r#"{"mcpServers": {
                "gh": {"command": "gh-mcp", "args": ["${GH_ARG:-x}"], "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}},
                "web": {"type": "http", "url": "https://h/mcp", "headers": {"Authorization": "Bearer ${API_KEY}"}},
                "old": {"type": "sse", "url": "https://h/sse"}
            }}"#,
        )
        .unwrap();
        let out = import(&sources(&sub, home.path(), None));
        let layer = &out.layers[0];
        assert!(
            layer.rows.iter().all(|r| r.disabled),
            "untrusted rows start disabled"
        );
        assert_eq!(out.notices.len(), 1);
        assert!(
            out.notices[0].contains("(gh, web) were not started"),
            "{:?}",
            out.notices
        );
        assert!(out.warnings[0].contains("`old` skipped: the legacy SSE transport"));
        let gh = config(layer, "mcp:gh");
        assert_eq!(gh["env"]["GITHUB_TOKEN"], "${env:GITHUB_TOKEN}");
        assert_eq!(gh["args"][0], "${env:GH_ARG:-x}");
        assert_eq!(gh["cwd"], repo.path().display().to_string());
        assert_eq!(
            config(layer, "mcp:web")["headers"]["Authorization"],
            "Bearer ${env:API_KEY}"
        );
        // Trusted: the same rows, enabled, nothing to say.
        let (project, approved) = trust::trust_now(home.path(), &sub).unwrap();
        assert_eq!(project, repo.path().canonicalize().unwrap());
        assert_eq!(
            approved,
            [
                r#"gh: "gh-mcp" "${env:GH_ARG:-x}" env "GITHUB_TOKEN"="${env:GITHUB_TOKEN}""#,
                r#"web: "https://h/mcp" header "Authorization"="Bearer ${env:API_KEY}""#,
                &out.warnings[0]
            ]
        );
        let out = import(&sources(&sub, home.path(), None));
        assert!(out.layers[0].rows.iter().all(|r| !r.disabled));
        assert!(out.notices.is_empty());
        // Outside the repository, nothing is found; its own path is watched.
        let elsewhere = dsh_tempdir::PrivateDir::new("mcpjson-none").unwrap();
        std::fs::create_dir(elsewhere.path().join(".git")).unwrap();
        let out = import(&sources(elsewhere.path(), home.path(), None));
        assert!(out.layers.is_empty());
        assert_eq!(out.files, [elsewhere.path().join(MCP_JSON)]);
    }

    #[test]
    fn a_project_server_named_like_a_codex_one_replaces_it() {
        let codex = dsh_tempdir::PrivateDir::new("both-codex").unwrap();
        let work = dsh_tempdir::PrivateDir::new("both-work").unwrap();
        std::fs::create_dir(work.path().join(".git")).unwrap();
        std::fs::write(
            codex.path().join("config.toml"),
            "[mcp_servers.gh]\ncommand = \"old\"\n",
        )
        .unwrap();
        std::fs::write(
            work.path().join(MCP_JSON),
            r#"{"mcpServers": {"gh": {"command": "new"}}}"#,
        )
        .unwrap();
        trust::trust_now(work.path(), work.path()).unwrap();
        let out = import(&sources(work.path(), work.path(), Some(codex.path())));
        assert_eq!(out.layers.len(), 2);
        let patch = &out.layers[1].patches[0];
        assert_eq!(patch.id.as_deref(), Some("mcp:gh"));
        assert_eq!(patch.config.as_ref().unwrap()["command"], "new");
        assert_eq!(patch.disabled, Some(false));
    }

    /// The hole this closes: in a trusted project an agent may write
    /// `.mcp.json` (create it, add a server, change a command); none of
    /// that runs until the user approves it.
    #[test]
    fn a_server_added_or_changed_after_trust_stays_off_until_approved() {
        let home = dsh_tempdir::PrivateDir::new("pin-home").unwrap();
        let work = dsh_tempdir::PrivateDir::new("pin-work").unwrap();
        std::fs::create_dir(work.path().join(".git")).unwrap();
        let file = work.path().join(MCP_JSON);
        // Trusted while it had no .mcp.json at all.
        trust::trust_now(home.path(), work.path()).unwrap();
        std::fs::write(&file, r#"{"mcpServers": {"a": {"command": "ok"}}}"#).unwrap();
        let out = import(&sources(work.path(), home.path(), None));
        assert!(
            out.layers[0].rows[0].disabled,
            "a created file runs nothing"
        );
        assert!(out.notices[0].contains("new or changed since the project was trusted"));
        // What the offer approves is what was shown, whatever the file
        // says by the time the user answers.
        let offered = out.untrusted.unwrap();
        assert_eq!(offered.rows, ["mcp:a"]);
        assert_eq!(offered.project.runs, [r#"a: "ok""#]);
        std::fs::write(&file, r#"{"mcpServers": {"a": {"command": "evil"}}}"#).unwrap();
        let swapped = import(&sources(work.path(), home.path(), None));
        assert_ne!(
            swapped.untrusted.unwrap().project.offer,
            offered.project.offer,
            "another offer: a yes to the first approves nothing"
        );
        trust::trust(home.path(), work.path(), offered.pins).unwrap();
        let out = import(&sources(work.path(), home.path(), None));
        assert!(
            out.layers[0].rows[0].disabled,
            "the swapped entry is not approved"
        );
        std::fs::write(&file, r#"{"mcpServers": {"a": {"command": "ok"}}}"#).unwrap();
        let out = import(&sources(work.path(), home.path(), None));
        assert!(!out.layers[0].rows[0].disabled, "the approved entry runs");
        // A second server, or a changed argument, asks again; the
        // approved one keeps running.
        std::fs::write(
            &file,
            r#"{"mcpServers": {"a": {"command": "ok"}, "b": {"command": "ok", "args": ["x"]}}}"#,
        )
        .unwrap();
        let out = import(&sources(work.path(), home.path(), None));
        let off: Vec<bool> = out.layers[0].rows.iter().map(|r| r.disabled).collect();
        assert_eq!(off, [false, true]);
        assert_eq!(out.untrusted.unwrap().project.servers, ["b"]);
    }
}
