//! Composing what a `--profile` run loads: layers, and plugin directories.

use std::path::{Path, PathBuf};

use crate::config::{
    compose, compose_knowing, read_layer_file, ComposedRow, ConfigError, Elsewhere, Layer, Patch,
    ProfileRoots, Row, Tree,
};
use crate::imports::{expand, Imported, Sources};
use crate::paths::Install;

/// What the user asked for on the command line.
#[derive(Debug, Clone)]
pub struct BootOptions {
    /// The profile name.
    pub profile: String,
    /// `--patch` files, in order.
    pub patches: Vec<PathBuf>,
    /// `--plugins-dir` directories, in order.
    pub plugin_dirs: Vec<PathBuf>,
    /// `--plugin` names, in order: each becomes the row `NAME` applying
    /// plugin `NAME` (or enables the profile's disabled row `NAME` of it).
    pub plugins: Vec<String>,
    /// `$DSH_HOME`.
    pub home: PathBuf,
    /// The installation.
    pub install: Install,
}

/// The composed tree and everything it was made from.
#[derive(Debug, Clone)]
pub struct Composition {
    /// The tree.
    pub tree: Tree,
    /// Every layer file read (watched with `--watch`).
    pub files: Vec<PathBuf>,
    /// Plugin directories, most specific first.
    pub plugin_dirs: Vec<PathBuf>,
    /// A project whose servers were not started for want of trust.
    pub untrusted: Option<crate::imports::Untrusted>,
}

impl BootOptions {
    fn roots(&self) -> ProfileRoots {
        let mut roots = vec![self.home.join("profiles")];
        roots.extend(self.install.profiles.clone());
        ProfileRoots(roots)
    }

    /// Plugin directories: each `--plugins-dir`, the profile's, the home's
    /// drop-in directory, then the installation's.
    pub fn plugin_dirs(&self, profile_dir: Option<&Path>) -> Vec<PathBuf> {
        let mut dirs = self.plugin_dirs.clone();
        if let Some(p) = profile_dir {
            dirs.push(p.join("plugins"));
        }
        dirs.push(self.home.join("plugins"));
        dirs.extend(self.install.plugins.clone());
        dirs
    }

    /// The harness's own files besides `$DSH_HOME`, which no tool may
    /// change: the installation's plugins and profiles, every layer file
    /// read, and every plugin directory not given with `--plugins-dir` (that
    /// one is the user's explicit choice).
    pub fn protected(&self, composition: &Composition) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self.install.plugins.iter().cloned().collect();
        out.extend(self.install.profiles.clone());
        out.extend(composition.files.iter().cloned());
        out.extend(
            composition
                .plugin_dirs
                .iter()
                .filter(|d| !self.plugin_dirs.contains(d))
                .cloned(),
        );
        out
    }

    /// The home patch file.
    pub fn home_patch(&self) -> PathBuf {
        self.home.join("patch.toml")
    }

    /// Reads every layer and composes the tree.
    pub fn compose(&self) -> Result<Composition, ConfigError> {
        let roots = self.roots();
        let profile_dir = roots.profile_dir(&self.profile)?;
        // Configs may name files next to their profile.
        std::env::set_var("DSH_PROFILE_DIR", &profile_dir);
        let (layers, mut files) = roots.profile_layers(&self.profile)?;
        let (mut layers, imported) =
            splice_imports(layers, &Sources::of_process(self.home.clone()))?;
        files.extend(imported.files);
        let plugin_dirs = self.plugin_dirs(Some(&profile_dir));
        // `--plugin NAME` rows, and libraries dropped into $DSH_HOME/plugins,
        // extend the profile as layers of their own, so the home patch and
        // `--patch` files can patch them by id (`NAME`, `drop-in:<name>`).
        // A drop-in that a `--plugin` row uses is not a row a second time.
        let named = self.named_plugins(&compose(&layers)?, &plugin_dirs)?;
        let (drop_ins, refused) = {
            let mut with_named = layers.clone();
            with_named.push(named.clone());
            drop_in_rows(&self.drop_in_dir(), &compose(&with_named)?, &plugin_dirs)
        };
        layers.push(Layer {
            origin: "drop-in".into(),
            rows: drop_ins.into_iter().map(|r| r.row).collect(),
            patches: Vec::new(),
            imports: Vec::new(),
        });
        layers.push(named);
        let home_patch = self.home_patch();
        if home_patch.is_file() {
            layers.push(read_layer_file(&home_patch)?.0);
        }
        files.push(home_patch);
        for p in &self.patches {
            let abs = std::path::absolute(p).unwrap_or_else(|_| p.clone());
            let (layer, bundles) = read_layer_file(&abs)?;
            if !bundles.is_empty() {
                return Err(ConfigError::Invalid(format!(
                    "{}: a patch file cannot list bundles",
                    abs.display()
                )));
            }
            layers.push(layer);
            files.push(abs);
        }
        let shipped = Elsewhere::shipped(self.install.profiles.iter().cloned().collect());
        let mut tree = compose_knowing(&layers, &shipped)?;
        // Approval is decided on the composed tree: no later patch (one
        // enabling group `mcp`, say) turns on a server the user did not
        // approve.
        if let Some(untrusted) = &imported.untrusted {
            for c in &mut tree.rows {
                if untrusted.rows.contains(&c.row.id) {
                    c.row.disabled = true;
                }
            }
        }
        tree.warnings.extend(imported.warnings);
        tree.warnings.extend(refused);
        tree.notices.extend(imported.notices.iter().cloned());
        if let Some(e) = crate::limits::too_many_rows(&tree) {
            return Err(ConfigError::Invalid(e));
        }
        Ok(Composition {
            tree,
            files,
            plugin_dirs,
            untrusted: imported.untrusted,
        })
    }

    /// The layer of the `--plugin` names, applied after the profile (and
    /// before the patches, which may change its rows by id). `--plugin
    /// NAME` adds the row `NAME` applying plugin `NAME` (found in the plugin
    /// directories, `--plugins-dir` first) with its default config; when
    /// the profile already has a row `NAME` of that plugin, it enables that
    /// row instead. A name no plugin directory holds, a path, or a row
    /// `NAME` of another plugin is an error.
    fn named_plugins(&self, tree: &Tree, plugin_dirs: &[PathBuf]) -> Result<Layer, ConfigError> {
        let mut layer = Layer {
            origin: NAMED_ORIGIN.into(),
            rows: Vec::new(),
            patches: Vec::new(),
            imports: Vec::new(),
        };
        for name in &self.plugins {
            if name.trim().is_empty() || name.contains('/') {
                return Err(ConfigError::Invalid(format!(
                    "--plugin `{name}`: give a plugin's name (it is looked up in the plugin directories); a library path goes in a row"
                )));
            }
            if layer.rows.iter().any(|r| &r.id == name)
                || layer.patches.iter().any(|p| p.id.as_ref() == Some(name))
            {
                continue;
            }
            match tree.rows.iter().find(|r| &r.row.id == name) {
                Some(ComposedRow { row, .. }) if &row.plugin == name => {
                    if row.disabled {
                        layer.patches.push(Patch {
                            id: Some(name.clone()),
                            disabled: Some(false),
                            ..Patch::default()
                        });
                    }
                }
                Some(r) => {
                    return Err(ConfigError::Invalid(format!(
                        "--plugin {name}: row `{name}` (from {}) applies plugin `{}`; patch that row instead",
                        r.origin, r.row.plugin
                    )))
                }
                None => {
                    crate::supervisor::resolve_plugin(name, plugin_dirs)
                        .map_err(|e| ConfigError::Invalid(format!("--plugin {name}: {e}")))?;
                    layer.rows.push(Row {
                        id: name.clone(),
                        plugin: name.clone(),
                        config: serde_json::Value::Null,
                        disabled: false,
                        inject: Vec::new(),
                        group: None,
                    });
                }
            }
        }
        Ok(layer)
    }

    /// `$DSH_HOME/plugins`, where a dropped library becomes a row.
    pub fn drop_in_dir(&self) -> PathBuf {
        let dir = self.home.join("plugins");
        dir.canonicalize().unwrap_or(dir)
    }
}

/// The origin of the rows `--plugin` adds (as `--dump-config` prints it).
const NAMED_ORIGIN: &str = "--plugin";

/// `layers` followed by the layers their imports make, in the order the
/// imports are named: after the profile's own layers, so after its app's
/// row (rows apply in order, and an imported server never holds up the
/// app's start), before the drop-ins and patches (which may change them).
fn splice_imports(
    mut layers: Vec<Layer>,
    sources: &Sources,
) -> Result<(Vec<Layer>, Imported), ConfigError> {
    let mut all = Imported::default();
    let named: Vec<(String, String)> = layers
        .iter()
        .flat_map(|l| l.imports.iter().map(|k| (k.clone(), l.origin.clone())))
        .collect();
    for (kind, origin) in named {
        let imported = expand(&kind, &origin, sources)?;
        layers.extend(imported.layers);
        all.files.extend(imported.files);
        all.warnings.extend(imported.warnings);
        all.notices.extend(imported.notices);
        all.untrusted = all.untrusted.or(imported.untrusted);
    }
    Ok((layers, all))
}

/// Rows for libraries dropped into `dir` (`$DSH_HOME/plugins`) that no row
/// of `tree` uses: each becomes a row `drop-in:<name>` applying the plugin
/// with its default config. Libraries that are refused are reported. The
/// name comes from the manifest, read by [`crate::inspect::examine`]: in a
/// confined child process, so composing (`--dump-config`, `plugins list`)
/// runs none of a drop-in's code here; applying its row does.
pub fn drop_in_rows(
    dir: &Path,
    tree: &crate::config::Tree,
    plugin_dirs: &[PathBuf],
) -> (Vec<crate::config::ComposedRow>, Vec<String>) {
    let used: Vec<PathBuf> = tree
        .rows
        .iter()
        .filter_map(|r| crate::supervisor::resolve_plugin(&r.row.plugin, plugin_dirs).ok())
        .collect();
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    let unused: Vec<PathBuf> = crate::inspect::libraries(&[dir.to_owned()])
        .into_iter()
        .filter(|lib| !used.contains(lib))
        .collect();
    let inspected = crate::inspect::examine_all(&unused);
    for (lib, result) in unused.iter().zip(inspected) {
        match result {
            Ok(crate::inspect::Inspected { manifest, .. }) => {
                rows.push(crate::config::ComposedRow {
                    row: crate::config::Row {
                        id: format!("drop-in:{}", manifest.name),
                        plugin: lib.display().to_string(),
                        config: serde_json::Value::Null,
                        disabled: false,
                        inject: Vec::new(),
                        group: None,
                    },
                    origin: "drop-in".into(),
                    patched_by: Vec::new(),
                })
            }
            // `e` names the file.
            Err(e) => problems.push(format!("drop-in refused: {e}")),
        }
    }
    (rows, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile `p` of one row, in `root`.
    fn profile(root: &Path, name: &str, row: &str) {
        std::fs::create_dir_all(root.join(name)).unwrap();
        std::fs::write(
            root.join(name).join("profile.toml"),
            format!("[[row]]\nid = \"{row}\"\nplugin = \"{row}\"\n"),
        )
        .unwrap();
    }

    /// A patch naming a row only a user's own profile (under
    /// `$DSH_HOME/profiles`) has is a typo as any other: warned about; one
    /// naming a row of a shipped profile is skipped.
    #[test]
    fn only_the_shipped_profiles_silence_a_patch_of_a_missing_row() {
        let home = dsh_tempdir::PrivateDir::new("boot-home").unwrap();
        let install = dsh_tempdir::PrivateDir::new("boot-install").unwrap();
        let shipped = install.path().join("profiles");
        profile(&shipped, "run", "app");
        profile(&shipped, "other", "shipped-row");
        profile(&home.path().join("profiles"), "mine", "experiment");
        std::fs::write(
            home.path().join("patch.toml"),
            "[[patch]]\nid = \"experiment\"\ndisabled = true\n\
             [[patch]]\nid = \"shipped-row\"\ndisabled = true\n",
        )
        .unwrap();
        let opts = BootOptions {
            profile: "run".into(),
            patches: Vec::new(),
            plugin_dirs: Vec::new(),
            plugins: Vec::new(),
            home: home.path().to_owned(),
            install: Install {
                profiles: Some(shipped),
                plugins: None,
            },
        };
        let tree = opts.compose().unwrap().tree;
        assert_eq!(tree.warnings.len(), 1, "{:?}", tree.warnings);
        assert!(
            tree.warnings[0].ends_with("patch: row \"experiment\" not found"),
            "{:?}",
            tree.warnings
        );
        assert_eq!(tree.skipped.len(), 1, "{:?}", tree.skipped);
        assert!(tree.skipped[0].contains("row \"shipped-row\""));
    }
}
