//! Configuration composition: rows, bundles, profiles and patches in TOML.
//!
//! A *layer* file may hold `[[row]]` entries (rows it inserts, in order) and
//! `[[patch]]` entries (edits to rows by `id` or `group`, or `insert`s),
//! applied in that order. A *profile* is a layer with `bundles = [...]`.
//! Layers apply to an empty tree: each bundle, the profile itself,
//! `$DSH_HOME/patch.toml`, then each `--patch FILE`.

use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One plugin application: the unit of configuration and of reconciliation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Row {
    /// Stable id; reconciliation and patches key on it.
    pub id: String,
    /// The plugin name (or a path to a library).
    pub plugin: String,
    /// The plugin's config (any TOML table).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
    /// A disabled row is not loaded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    /// Extra services to wait for, beyond the plugin's manifest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inject: Vec<String>,
    /// A group label; a patch may target every row of a group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// An edit of the tree.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Patch {
    /// The row to edit (or, with `insert`, the group to insert into).
    pub id: Option<String>,
    /// Edit every row of this group.
    pub group: Option<String>,
    /// Replace the plugin.
    pub plugin: Option<String>,
    /// Replace the whole config (no merge).
    pub config: Option<Value>,
    /// Replace `disabled`.
    pub disabled: Option<bool>,
    /// Replace `inject`.
    pub inject: Option<Vec<String>>,
    /// Rows to insert (at the end, or after the last row of group `id`).
    pub insert: Option<Vec<Row>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LayerFile {
    #[serde(default)]
    bundles: Vec<String>,
    #[serde(default)]
    row: Vec<Row>,
    #[serde(default)]
    patch: Vec<Patch>,
    /// Rows made from other products' files, spliced in after this layer
    /// (`"mcp-servers"`: see `crate::imports`).
    #[serde(default)]
    imports: Vec<String>,
}

/// A layer ready to apply, labelled with where it came from.
#[derive(Debug, Clone)]
pub struct Layer {
    /// `bundle:<name>` or a file path.
    pub origin: String,
    /// Rows inserted by this layer.
    pub rows: Vec<Row>,
    /// Edits applied after the rows.
    pub patches: Vec<Patch>,
    /// Imports to splice in after this layer (see `crate::imports`).
    pub imports: Vec<String>,
}

/// A row of the composed tree with its provenance.
#[derive(Debug, Clone, PartialEq)]
pub struct ComposedRow {
    /// The row.
    pub row: Row,
    /// The layer that inserted it.
    pub origin: String,
    /// Layers that patched it, in order.
    pub patched_by: Vec<String>,
}

/// The composed tree.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tree {
    /// Rows in order.
    pub rows: Vec<ComposedRow>,
    /// Non-fatal problems (unknown patch ids, ...).
    pub warnings: Vec<String>,
    /// Patches skipped on purpose: they name a row (or group) that another
    /// shipped bundle or profile has and this profile does not load (see
    /// [`Elsewhere`]). `--dump-config` prints them as comments.
    pub skipped: Vec<String>,
    /// What the user should know once, not problems of the configuration
    /// (the servers of an untrusted project, not started). Said at start;
    /// `--dump-config` prints them as comments.
    pub notices: Vec<String>,
}

/// The largest bundle or profile file [`Elsewhere`] reads (a layer is a few
/// kilobytes).
const SHIPPED_LAYER_MAX: u64 = 1 << 20;

/// The row ids and groups the installation's shipped bundles and profiles
/// declare (`bundles/*.toml`, `*/profile.toml` under its profiles
/// directory). A patch naming one of them that the composed profile does
/// not load is skipped with a note, not warned about: one
/// `$DSH_HOME/patch.toml` (or a recipe's `--patch`) serves every shipped
/// profile, so it patches the chat's rows and the headless app's alike. A
/// name no shipped bundle or profile has is a typo: a warning (a user's own
/// profiles under `$DSH_HOME/profiles` do not count: an experiment there
/// must not silence a real typo).
///
/// The files are read only when a patch names a target the tree does not
/// have (most starts read none), each only if it is a regular file (a FIFO
/// is never opened for a blocking read) of at most [`SHIPPED_LAYER_MAX`]
/// bytes; one that cannot be read or parsed adds nothing (it fails when its
/// own profile runs).
#[derive(Debug, Clone, Default)]
pub struct Elsewhere {
    /// The shipped profiles directories.
    roots: Vec<PathBuf>,
    /// What they declare, once read.
    declared: OnceCell<Declared>,
}

/// Row ids and groups.
#[derive(Debug, Clone, Default)]
struct Declared {
    rows: HashSet<String>,
    groups: HashSet<String>,
}

impl Declared {
    /// Adds the rows (and rows a patch inserts) and groups of `layer`.
    fn add(&mut self, layer: &Layer) {
        let inserted = layer.patches.iter().flat_map(|p| p.insert.iter().flatten());
        for row in layer.rows.iter().chain(inserted) {
            self.rows.insert(row.id.clone());
            if let Some(g) = &row.group {
                self.groups.insert(g.clone());
            }
        }
    }
}

impl Elsewhere {
    /// What the bundles and profiles of the shipped profiles directories
    /// `roots` declare, read when first needed.
    pub fn shipped(roots: Vec<PathBuf>) -> Elsewhere {
        Elsewhere {
            roots,
            declared: OnceCell::new(),
        }
    }

    /// Whether the files were read (a test's question).
    #[cfg(test)]
    fn was_read(&self) -> bool {
        self.declared.get().is_some()
    }

    fn declared(&self) -> &Declared {
        self.declared.get_or_init(|| {
            let mut found = Declared::default();
            for file in self.roots.iter().flat_map(|r| layer_files(r)) {
                let Some(text) = read_small_regular(&file, SHIPPED_LAYER_MAX) else {
                    continue;
                };
                if let Ok((layer, _)) = parse_layer(&text, &file) {
                    found.add(&layer);
                }
            }
            found
        })
    }

    /// Whether some shipped bundle or profile declares the patch's target.
    fn declares(&self, patch: &Patch) -> bool {
        match (&patch.id, &patch.group) {
            (Some(id), _) => self.declared().rows.contains(id),
            (None, Some(g)) => self.declared().groups.contains(g),
            (None, None) => false,
        }
    }
}

/// `root`'s bundle files (`bundles/*.toml`) and profile files
/// (`*/profile.toml`), by name: what they are is checked as they are read.
fn layer_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Ok(entries) = std::fs::read_dir(root.join("bundles")) {
        files.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "toml")),
        );
    }
    if let Ok(entries) = std::fs::read_dir(root) {
        files.extend(entries.flatten().map(|e| e.path().join("profile.toml")));
    }
    files
}

/// The text of `path` if it is a regular file of at most `max` bytes, read
/// without ever blocking on anything else (opened non-blocking, then
/// checked: a FIFO, a device or a directory is passed over).
fn read_small_regular(path: &Path, max: u64) -> Option<String> {
    read_optional_regular(path, max).ok().flatten()
}

/// [`read_small_regular`] telling apart a missing file (`Ok(None)`) from
/// one that is there and cannot be used (an error saying why: not a
/// regular file, over `max` bytes, not UTF-8, unreadable).
pub(crate) fn read_optional_regular(path: &Path, max: u64) -> std::io::Result<Option<String>> {
    use std::io::{Error, ErrorKind};
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Err(Error::other("not a regular file"));
    }
    let mut text = String::new();
    file.take(max + 1).read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(Error::other(format!("larger than {max} bytes")));
    }
    Ok(Some(text))
}

/// Writes `bytes` to `path` whole or not at all: a private (0600) file
/// beside it, synced, then renamed over it.
pub(crate) fn write_private_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("no file name"))?
        .to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Why a configuration could not be composed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is not valid TOML, or not a valid layer.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// toml's message (it names the line and column).
        message: String,
    },
    /// A profile or bundle was not found.
    #[error("{what} `{name}` not found; searched: {searched}")]
    NotFound {
        /// "profile" or "bundle".
        what: &'static str,
        /// Its name.
        name: String,
        /// The paths tried.
        searched: String,
    },
    /// The composed tree is inconsistent.
    #[error("{0}")]
    Invalid(String),
}

/// Where profiles and bundles are looked up, in order.
#[derive(Debug, Clone)]
pub struct ProfileRoots(pub Vec<PathBuf>);

/// Reads one layer file.
pub fn read_layer_file(path: &Path) -> Result<(Layer, Vec<String>), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_layer(&text, path)
}

/// Parses layer text; `path` labels errors and the layer's origin.
pub fn parse_layer(text: &str, path: &Path) -> Result<(Layer, Vec<String>), ConfigError> {
    let file: LayerFile = toml::from_str(text).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        message: e.to_string().trim_end().to_owned(),
    })?;
    let layer = Layer {
        origin: path.display().to_string(),
        rows: file.row,
        patches: file.patch,
        imports: file.imports,
    };
    Ok((layer, file.bundles))
}

impl ProfileRoots {
    fn find(&self, what: &'static str, name: &str, rel: &Path) -> Result<PathBuf, ConfigError> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(ConfigError::Invalid(format!(
                "invalid {what} name `{name}`"
            )));
        }
        let candidates: Vec<PathBuf> = self.0.iter().map(|r| r.join(rel)).collect();
        candidates
            .iter()
            .find(|p| p.is_file())
            .cloned()
            .ok_or_else(|| ConfigError::NotFound {
                what,
                name: name.to_owned(),
                searched: candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The directory of profile `name` (where its `profile.toml` lives).
    pub fn profile_dir(&self, name: &str) -> Result<PathBuf, ConfigError> {
        let file = self.find("profile", name, &Path::new(name).join("profile.toml"))?;
        Ok(file.parent().map(Path::to_owned).unwrap_or_default())
    }

    /// Reads profile `name` and its bundles into layers, bundles first.
    pub fn profile_layers(&self, name: &str) -> Result<(Vec<Layer>, Vec<PathBuf>), ConfigError> {
        let dir = self.profile_dir(name)?;
        let profile_file = dir.join("profile.toml");
        let (profile, bundles) = read_layer_file(&profile_file)?;
        let mut layers = Vec::new();
        let mut files = Vec::new();
        for bundle in bundles {
            let path = self.find(
                "bundle",
                &bundle,
                &Path::new("bundles").join(format!("{bundle}.toml")),
            )?;
            let (mut layer, nested) = read_layer_file(&path)?;
            if !nested.is_empty() {
                return Err(ConfigError::Invalid(format!(
                    "{}: a bundle cannot list bundles",
                    path.display()
                )));
            }
            layer.origin = format!("bundle:{bundle}");
            layers.push(layer);
            files.push(path);
        }
        layers.push(profile);
        files.push(profile_file);
        Ok((layers, files))
    }
}

/// Applies `layers` to an empty tree.
pub fn compose(layers: &[Layer]) -> Result<Tree, ConfigError> {
    compose_knowing(layers, &Elsewhere::default())
}

/// Applies `layers` to an empty tree; a patch whose target is missing but
/// declared `elsewhere` is skipped with a note instead of a warning.
pub fn compose_knowing(layers: &[Layer], elsewhere: &Elsewhere) -> Result<Tree, ConfigError> {
    let mut tree = Tree::default();
    for layer in layers {
        for row in &layer.rows {
            insert_row(&mut tree, row.clone(), &layer.origin, None)?;
        }
        for patch in &layer.patches {
            apply_patch(&mut tree, patch, &layer.origin, elsewhere)?;
        }
    }
    for r in &tree.rows {
        if r.row.plugin.trim().is_empty() {
            return Err(ConfigError::Invalid(format!(
                "row `{}` (from {}) names no plugin",
                r.row.id, r.origin
            )));
        }
    }
    Ok(tree)
}

fn insert_row(
    tree: &mut Tree,
    row: Row,
    origin: &str,
    group: Option<&str>,
) -> Result<(), ConfigError> {
    if row.id.trim().is_empty() {
        return Err(ConfigError::Invalid(format!(
            "{origin}: a row has an empty id"
        )));
    }
    if tree.rows.iter().any(|r| r.row.id == row.id) {
        return Err(ConfigError::Invalid(format!(
            "{origin}: row id `{}` is already used",
            row.id
        )));
    }
    let mut row = row;
    let at = match group {
        Some(g) => {
            row.group = Some(g.to_owned());
            tree.rows
                .iter()
                .rposition(|r| r.row.group.as_deref() == Some(g))
                .map_or(tree.rows.len(), |i| i + 1)
        }
        None => tree.rows.len(),
    };
    tree.rows.insert(
        at,
        ComposedRow {
            row,
            origin: origin.to_owned(),
            patched_by: Vec::new(),
        },
    );
    Ok(())
}

fn apply_patch(
    tree: &mut Tree,
    patch: &Patch,
    origin: &str,
    elsewhere: &Elsewhere,
) -> Result<(), ConfigError> {
    if let Some(rows) = &patch.insert {
        for row in rows {
            insert_row(tree, row.clone(), origin, patch.id.as_deref())?;
        }
        return Ok(());
    }
    let targets: Vec<usize> = match (&patch.id, &patch.group) {
        (Some(id), _) => tree
            .rows
            .iter()
            .position(|r| &r.row.id == id)
            .into_iter()
            .collect(),
        (None, Some(g)) => tree
            .rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.row.group.as_deref() == Some(g.as_str()))
            .map(|(i, _)| i)
            .collect(),
        (None, None) => {
            tree.warnings.push(format!(
                "[{origin}] patch: a patch names no id, group or insert; ignored"
            ));
            return Ok(());
        }
    };
    if targets.is_empty() {
        let what = match (&patch.id, &patch.group) {
            (Some(id), _) => format!("row \"{id}\""),
            (_, Some(g)) => format!("group \"{g}\""),
            _ => String::new(),
        };
        if elsewhere.declares(patch) {
            tree.skipped.push(format!(
                "[{origin}] patch: {what} is not in this profile (another profile has it); skipped"
            ));
        } else {
            tree.warnings
                .push(format!("[{origin}] patch: {what} not found"));
        }
        return Ok(());
    }
    for i in targets {
        let r = &mut tree.rows[i];
        if let Some(p) = &patch.plugin {
            r.row.plugin = p.clone();
        }
        if let Some(c) = &patch.config {
            r.row.config = c.clone();
        }
        if let Some(d) = patch.disabled {
            r.row.disabled = d;
        }
        if let Some(inj) = &patch.inject {
            r.row.inject = inj.clone();
        }
        if !r.patched_by.iter().any(|o| o == origin) {
            r.patched_by.push(origin.to_owned());
        }
    }
    Ok(())
}

/// Replaces `${env:VAR}` and `${env:VAR:-default}` in every string of `v`.
pub fn interpolate_env(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(interpolate_str(s)),
        Value::Array(a) => Value::Array(a.iter().map(interpolate_env).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), interpolate_env(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn interpolate_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${env:") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 6..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let expr = &after[..end];
        let (name, default) = match expr.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (expr, None),
        };
        match std::env::var(name) {
            Ok(val) if !val.is_empty() || default.is_none() => out.push_str(&val),
            _ => out.push_str(default.unwrap_or("")),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Prints the tree as TOML: each row preceded by a comment naming its
/// origin and the layers that patched it. The output is itself a layer.
pub fn dump(tree: &Tree) -> String {
    #[derive(Serialize)]
    struct One<'a> {
        row: [&'a Row; 1],
    }
    let mut out = String::new();
    for note in tree.notices.iter().chain(&tree.skipped) {
        out.push_str("# ");
        out.push_str(note);
        out.push('\n');
    }
    if !tree.skipped.is_empty() || !tree.notices.is_empty() {
        out.push('\n');
    }
    let mut last: Option<(&str, &[String])> = None;
    for r in &tree.rows {
        // One comment per run of rows sharing origin and patch layers.
        let key = (r.origin.as_str(), r.patched_by.as_slice());
        if last != Some(key) {
            out.push_str("# == ");
            out.push_str(&r.origin);
            if !r.patched_by.is_empty() {
                out.push_str(", patched by ");
                out.push_str(&r.patched_by.join(", "));
            }
            out.push('\n');
            last = Some(key);
        }
        let row = strip_nulls(&r.row);
        match toml::to_string(&One { row: [&row] }) {
            Ok(text) => out.push_str(&text),
            Err(e) => out.push_str(&format!("# (row `{}` cannot be printed: {e})\n", r.row.id)),
        }
        out.push('\n');
    }
    out
}

fn strip_nulls(row: &Row) -> Row {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(o) => Value::Object(
                o.iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().filter(|v| !v.is_null()).map(strip).collect()),
            other => other.clone(),
        }
    }
    let mut row = row.clone();
    row.config = strip(&row.config);
    row
}

/// Rows whose injects form a cycle through the providers' manifests:
/// returns a readable description per offending row.
pub fn inject_cycles(
    rows: &[(String, Vec<String>, Vec<String>)], // (row id, provides, injects)
) -> HashMap<String, String> {
    let mut provider: HashMap<&str, &str> = HashMap::new();
    for (id, provides, _) in rows {
        for s in provides {
            provider.insert(s.as_str(), id.as_str());
        }
    }
    let deps: HashMap<&str, Vec<(&str, &str)>> = rows
        .iter()
        .map(|(id, _, inject)| {
            let d = inject
                .iter()
                .filter_map(|s| provider.get(s.as_str()).map(|p| (*p, s.as_str())))
                .collect();
            (id.as_str(), d)
        })
        .collect();
    let mut found = HashMap::new();
    for (id, _, _) in rows {
        // Depth-first search for a path back to `id`.
        let mut stack: Vec<(&str, Vec<String>)> = vec![(id.as_str(), vec![id.clone()])];
        let mut seen: HashSet<&str> = HashSet::new();
        while let Some((node, path)) = stack.pop() {
            for (next, service) in deps.get(node).into_iter().flatten() {
                let mut p = path.clone();
                p.push(format!("({service}) {next}"));
                if *next == id.as_str() {
                    found
                        .entry(id.clone())
                        .or_insert_with(|| format!("cyclic inject: {}", p.join(" -> ")));
                } else if seen.insert(next) {
                    stack.push((next, p));
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(text: &str, origin: &str) -> Layer {
        let (mut l, _) = parse_layer(text, Path::new(origin)).unwrap();
        l.origin = origin.into();
        l
    }

    #[test]
    fn patches_replace_config_wholesale_and_record_provenance() {
        let base = layer(
            "[[row]]\nid='a'\nplugin='pa'\nconfig={x=1,y=2}\n[[row]]\nid='b'\nplugin='pb'\ngroup='g'\n",
            "bundle:base",
        );
        let user = layer(
            "[[patch]]\nid='a'\nconfig={x=3}\n[[patch]]\ngroup='g'\ndisabled=true\n[[patch]]\nid='nope'\ndisabled=true\n",
            "/u/patch.toml",
        );
        let tree = compose(&[base, user]).unwrap();
        assert_eq!(tree.rows[0].row.config, serde_json::json!({"x": 3}));
        assert_eq!(tree.rows[0].patched_by, vec!["/u/patch.toml"]);
        assert!(tree.rows[1].row.disabled);
        assert_eq!(
            tree.warnings,
            vec!["[/u/patch.toml] patch: row \"nope\" not found"]
        );
        let dumped = dump(&tree);
        assert!(dumped.contains("# == bundle:base, patched by /u/patch.toml\n[[row]]\nid = \"a\""));
        let again = compose(&[layer(&dumped, "dump")]).unwrap();
        assert_eq!(again.rows[0].row, tree.rows[0].row);
    }

    /// A shipped profiles directory whose `bundles/chat.toml` declares the
    /// row `chat` of group `apps`, beside a FIFO named like a bundle.
    fn shipped_root() -> dsh_tempdir::PrivateDir {
        let root = dsh_tempdir::PrivateDir::new("config-shipped").unwrap();
        let bundles = root.path().join("bundles");
        std::fs::create_dir(&bundles).unwrap();
        std::fs::write(
            bundles.join("chat.toml"),
            "[[row]]\nid='chat'\nplugin='chat'\ngroup='apps'\n",
        )
        .unwrap();
        let fifo = std::ffi::CString::new(bundles.join("pipe.toml").to_str().unwrap()).unwrap();
        // SAFETY: `fifo` is a valid NUL-terminated path for the call's duration.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::fs::create_dir(root.path().join("pipe")).unwrap();
        let fifo = std::ffi::CString::new(root.path().join("pipe/profile.toml").to_str().unwrap())
            .unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        root
    }

    #[test]
    fn the_shipped_layers_are_read_only_for_a_missing_target_and_never_block() {
        let root = shipped_root();
        let base = layer("[[row]]\nid='a'\nplugin='pa'\n", "bundle:base");
        let found = layer("[[patch]]\nid='a'\ndisabled=true\n", "/u/p.toml");
        let elsewhere = Elsewhere::shipped(vec![root.path().to_owned()]);
        let tree = compose_knowing(&[base.clone(), found], &elsewhere).unwrap();
        assert!(tree.warnings.is_empty() && tree.skipped.is_empty());
        assert!(!elsewhere.was_read());
        // A missing target reads them; the FIFOs are passed over.
        let missing = layer("[[patch]]\nid='chat'\ndisabled=true\n", "/u/p.toml");
        let tree = compose_knowing(&[base, missing], &elsewhere).unwrap();
        assert!(elsewhere.was_read());
        assert_eq!(tree.skipped.len(), 1, "{tree:?}");
        assert!(tree.warnings.is_empty(), "{:?}", tree.warnings);
    }

    #[test]
    fn a_shipped_layer_over_the_size_cap_adds_nothing() {
        let root = dsh_tempdir::PrivateDir::new("config-shipped").unwrap();
        std::fs::create_dir(root.path().join("bundles")).unwrap();
        let big = format!(
            "[[row]]\nid='chat'\nplugin='chat'\n#{}\n",
            "x".repeat(SHIPPED_LAYER_MAX as usize)
        );
        std::fs::write(root.path().join("bundles/big.toml"), big).unwrap();
        let elsewhere = Elsewhere::shipped(vec![root.path().to_owned()]);
        let base = layer("[[row]]\nid='a'\nplugin='pa'\n", "bundle:base");
        let missing = layer("[[patch]]\nid='chat'\ndisabled=true\n", "/u/p.toml");
        let tree = compose_knowing(&[base, missing], &elsewhere).unwrap();
        assert_eq!(tree.warnings.len(), 1, "{tree:?}");
    }

    #[test]
    fn a_patch_of_a_row_another_profile_has_is_skipped_not_warned() {
        let base = layer("[[row]]\nid='a'\nplugin='pa'\n", "bundle:base");
        let root = shipped_root();
        let elsewhere = Elsewhere::shipped(vec![root.path().to_owned()]);
        let user = layer(
            "[[patch]]\nid='chat'\nconfig={x=1}\n[[patch]]\ngroup='apps'\ndisabled=true\n[[patch]]\nid='caht'\ndisabled=true\n",
            "/u/p.toml",
        );
        let tree = compose_knowing(&[base.clone(), user.clone()], &elsewhere).unwrap();
        assert_eq!(
            tree.warnings,
            vec!["[/u/p.toml] patch: row \"caht\" not found"]
        );
        assert_eq!(tree.skipped.len(), 2, "{:?}", tree.skipped);
        assert!(tree.skipped[0].contains("row \"chat\" is not in this profile"));
        assert!(dump(&tree).starts_with("# [/u/p.toml] patch: row \"chat\" is not in this profile"));
        // Without the other profile's rows, all three are warnings.
        assert_eq!(compose(&[base, user]).unwrap().warnings.len(), 3);
    }

    #[test]
    fn invalid_toml_names_file_and_line() {
        let err =
            parse_layer("[[row]]\nid = 'a'\nplugin = \n", Path::new("/p/bad.toml")).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("/p/bad.toml: "), "{text}");
        assert!(text.contains("line 3"), "{text}");
    }

    #[test]
    fn env_interpolation_uses_default_when_unset() {
        let v = serde_json::json!({"u": "${env:DSH_TEST_SURELY_UNSET:-https://x}/v1", "n": 1});
        assert_eq!(
            interpolate_env(&v),
            serde_json::json!({"u": "https://x/v1", "n": 1})
        );
    }

    #[test]
    fn cycles_are_described() {
        let rows = vec![
            (
                "a".to_string(),
                vec!["x".to_string()],
                vec!["y".to_string()],
            ),
            (
                "b".to_string(),
                vec!["y".to_string()],
                vec!["x".to_string()],
            ),
            ("c".to_string(), vec![], vec!["x".to_string()]),
        ];
        let c = inject_cycles(&rows);
        assert_eq!(c.len(), 2);
        assert_eq!(c["a"], "cyclic inject: a -> (y) b -> (x) a");
    }
}
