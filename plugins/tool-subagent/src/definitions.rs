//! Named kinds of child ("agent definitions"): Markdown files whose YAML
//! frontmatter gives `name`, `description`, `tools` and `model`, and whose
//! body is the child's persona — Claude Code's `.claude/agents/*.md`
//! format, so a user's existing definitions work as they are.
//!
//! Read from, first name wins: `<project>/.dsh/agents/`,
//! `<project>/.claude/agents/`, `$DSH_HOME/agents/`. `tools` is a list or
//! a comma-separated string; Claude Code's tool names (`Read`, `Bash`,
//! ...) are read as this harness's (`read`, `bash`). `model` is
//! `provider/model`; `inherit`, or a bare alias such as Claude Code's
//! `sonnet`, is the parent's model.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use dsh_sdk::names::tool;
use serde::Deserialize;

/// One definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    /// What `subagent_type` names it by.
    pub name: String,
    /// When to use it (offered to the model).
    pub description: String,
    /// The tools it may use; all when absent.
    pub tools: Option<Vec<String>>,
    /// `provider/model`, when it names a route.
    pub model: Option<(String, String)>,
    /// Its system prompt persona (the body).
    pub persona: String,
    /// The file it came from.
    pub path: PathBuf,
}

/// A file that could not be read as a definition, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub why: String,
}

/// The directories definitions are read from, in precedence order.
pub fn dirs(project: &Path, home: &Path) -> Vec<PathBuf> {
    vec![
        project.join(".dsh").join("agents"),
        project.join(".claude").join("agents"),
        home.join("agents"),
    ]
}

/// The `*.md` files of `dir`, sorted (none when it does not exist).
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md") && p.is_file())
        .collect();
    files.sort();
    files
}

/// A value that changes when any definition file is added, removed or
/// changed: the files' paths, sizes and modification times.
pub fn fingerprint(dirs: &[PathBuf]) -> u64 {
    let mut h = DefaultHasher::new();
    for dir in dirs {
        for file in files(dir) {
            file.hash(&mut h);
            if let Ok(meta) = std::fs::metadata(&file) {
                meta.len().hash(&mut h);
                meta.modified().ok().hash(&mut h);
            }
        }
    }
    h.finish()
}

/// The largest definition file read (a persona, not a document).
const MAX_FILE_BYTES: u64 = 256 * 1024;

/// Every definition in `dirs` (the first of a name wins), and the files
/// that could not be read as one.
pub fn load(dirs: &[PathBuf]) -> (Vec<Definition>, Vec<Problem>) {
    let (mut found, mut problems) = (Vec::<Definition>::new(), Vec::new());
    for dir in dirs {
        for path in files(dir) {
            match read(&path) {
                Ok(d) if found.iter().any(|f| f.name == d.name) => {}
                Ok(d) => found.push(d),
                Err(why) => problems.push(Problem { path, why }),
            }
        }
    }
    (found, problems)
}

fn read(path: &Path) -> Result<Definition, String> {
    let size = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    if size > MAX_FILE_BYTES {
        return Err(format!(
            "{size} bytes; a definition may have at most {MAX_FILE_BYTES}"
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    parse(&text, path)
}

/// The frontmatter keys this harness reads (others, such as Claude Code's
/// `color`, are ignored).
#[derive(Deserialize)]
struct Front {
    name: Option<String>,
    description: Option<String>,
    tools: Option<Tools>,
    model: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Tools {
    List(Vec<String>),
    Text(String),
}

/// Reads one definition file's text.
pub fn parse(text: &str, path: &Path) -> Result<Definition, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    if lines.next().map(str::trim_end) != Some("---") {
        return Err("it does not begin with a `---` frontmatter line".into());
    }
    let mut yaml = String::new();
    let mut closed = false;
    for line in lines.by_ref() {
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        yaml.push_str(line);
    }
    if !closed {
        return Err("its frontmatter has no closing `---` line".into());
    }
    let body: String = lines.collect();
    let front: Front =
        serde_yaml_ng::from_str(&yaml).map_err(|e| format!("its frontmatter is not valid: {e}"))?;
    let name = front.name.map(|n| n.trim().to_owned()).unwrap_or_default();
    if name.is_empty() {
        return Err("its frontmatter has no `name`".into());
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "its name \"{name}\" may use only letters, digits, `-` and `_`"
        ));
    }
    let description = front
        .description
        .map(|d| d.trim().to_owned())
        .unwrap_or_default();
    if description.is_empty() {
        return Err("its frontmatter has no `description`".into());
    }
    let tools = front.tools.map(|t| {
        let names: Vec<String> = match t {
            Tools::List(l) => l,
            Tools::Text(s) => s.split(',').map(str::to_owned).collect(),
        };
        let mut out: Vec<String> = Vec::new();
        for n in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
            let ours = tool_name(n);
            if !out.contains(&ours) {
                out.push(ours);
            }
        }
        out
    });
    // A bare alias (Claude Code's `sonnet`, `opus`, `haiku`) names no
    // route here: the child keeps its parent's model.
    let model = front
        .model
        .as_deref()
        .map(str::trim)
        .and_then(|m| m.split_once('/'))
        .filter(|(p, m)| !p.is_empty() && !m.is_empty())
        .map(|(p, m)| (p.to_owned(), m.to_owned()));
    Ok(Definition {
        name,
        description,
        tools,
        model,
        persona: body.trim().to_owned(),
        path: path.to_owned(),
    })
}

/// This harness's name of a tool a definition names (Claude Code's names
/// mapped; any other name as written, lowercased).
pub fn tool_name(name: &str) -> String {
    match name {
        "Read" => tool::READ.into(),
        "Write" => tool::WRITE.into(),
        "Edit" | "MultiEdit" => tool::EDIT.into(),
        "Glob" => tool::GLOB.into(),
        "Grep" => tool::GREP.into(),
        "Bash" => tool::BASH.into(),
        "BashOutput" => tool::JOB_OUTPUT.into(),
        "KillShell" | "KillBash" => tool::JOB_KILL.into(),
        "WebFetch" => tool::WEB_FETCH.into(),
        "TodoWrite" => tool::TODO_WRITE.into(),
        "Task" | "Agent" => tool::SUBAGENT.into(),
        other => other.to_lowercase(),
    }
}

/// The lines the `subagent` tool's description lists the definitions in.
pub fn listing(found: &[Definition]) -> String {
    let mut text = String::from(
        " Set `subagent_type` to start one of these kinds of subagent (each has its own instructions and tools):",
    );
    for d in found {
        text.push_str(&format!("\n- {}: {}", d.name, d.description));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Definition, String> {
        parse(text, Path::new("/a/reviewer.md"))
    }

    #[test]
    fn a_claude_code_definition_reads_with_our_tool_names() {
        let d = p("---\nname: code-reviewer\ndescription: Reviews diffs.\ntools: Read, Grep, Glob, Bash\nmodel: inherit\ncolor: red\n---\nYou review code.\n\nBe terse.\n").unwrap();
        assert_eq!(d.name, "code-reviewer");
        assert_eq!(d.description, "Reviews diffs.");
        assert_eq!(
            d.tools.as_deref().unwrap(),
            ["read", "grep", "glob", "bash"]
        );
        assert_eq!(d.model, None);
        assert_eq!(d.persona, "You review code.\n\nBe terse.");
    }

    #[test]
    fn a_list_of_tools_and_a_route_read() {
        let d = p("---\nname: t\ndescription: d\ntools: [read, edit, Edit]\nmodel: local/qwen3\n---\nbody").unwrap();
        assert_eq!(d.tools.as_deref().unwrap(), ["read", "edit"]);
        assert_eq!(d.model, Some(("local".into(), "qwen3".into())));
    }

    #[test]
    fn malformed_files_say_what_is_wrong() {
        assert!(p("no frontmatter").unwrap_err().contains("`---`"));
        assert!(p("---\nname: x\n").unwrap_err().contains("closing"));
        assert!(p("---\nname: [\n---\n").unwrap_err().contains("not valid"));
        assert!(p("---\ndescription: d\n---\n")
            .unwrap_err()
            .contains("`name`"));
        assert!(p("---\nname: a b\ndescription: d\n---\n")
            .unwrap_err()
            .contains("letters"));
        assert!(p("---\nname: a\n---\n")
            .unwrap_err()
            .contains("`description`"));
        let alias = p("---\nname: a\ndescription: d\nmodel: sonnet\n---\n").unwrap();
        assert_eq!(alias.model, None);
    }

    #[test]
    fn the_first_directory_wins_and_problems_are_kept_apart() {
        let root = std::env::temp_dir().join(format!("dsh-defs-{}", dsh_sdk::new_id()));
        let (a, b) = (root.join("a"), root.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("x.md"), "---\nname: x\ndescription: first\n---\n").unwrap();
        std::fs::write(b.join("x.md"), "---\nname: x\ndescription: second\n---\n").unwrap();
        std::fs::write(b.join("bad.md"), "nope").unwrap();
        std::fs::write(b.join("notes.txt"), "ignored").unwrap();
        let dirs = vec![a.clone(), b.clone(), root.join("missing")];
        let before = fingerprint(&dirs);
        let (found, problems) = load(&dirs);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].description, "first");
        assert_eq!(problems.len(), 1);
        assert!(problems[0].path.ends_with("bad.md"));
        std::fs::write(a.join("y.md"), "---\nname: y\ndescription: new\n---\n").unwrap();
        assert_ne!(fingerprint(&dirs), before);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
