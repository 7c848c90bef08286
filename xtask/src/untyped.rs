//! The untyped-JSON budget `cargo xtask check` holds the code to: how
//! many `json!` invocations and string-keyed index reads (`v["key"]`) the
//! non-test code of the plugins and of the SDK has. Core events, messages
//! and payloads are serde types; what remains is genuinely open data (tool
//! arguments before a tool parses them, schemas, extension fields), each
//! site justified where it stands. The limits only go down.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// Most sites the plugins' non-test code may have.
const PLUGINS_LIMIT: usize = 120;
/// Most sites the SDK's non-test code may have.
const SDK_LIMIT: usize = 40;

/// The count per crate directory, and the total.
struct Tally {
    per_file: Vec<(PathBuf, usize)>,
}

impl Tally {
    fn total(&self) -> usize {
        self.per_file.iter().map(|(_, n)| n).sum()
    }
}

/// Counts and checks both budgets, printing the figures.
pub fn check(root: &Path) -> Result<()> {
    let plugins = tally(&root.join("plugins"))?;
    let sdk = tally(&root.join("sdk/src"))?;
    println!(
        "untyped JSON sites (json! and [\"key\"] reads, non-test code): plugins {} (limit {PLUGINS_LIMIT}), sdk {} (limit {SDK_LIMIT})",
        plugins.total(),
        sdk.total()
    );
    let mut over = Vec::new();
    for (name, tally, limit) in [
        ("plugins", &plugins, PLUGINS_LIMIT),
        ("sdk", &sdk, SDK_LIMIT),
    ] {
        if tally.total() > limit {
            let mut worst = tally.per_file.clone();
            worst.sort_by_key(|w| std::cmp::Reverse(w.1));
            let top: Vec<String> = worst
                .iter()
                .take(8)
                .map(|(p, n)| format!("  {n:4} {}", p.display()))
                .collect();
            over.push(format!(
                "{name}: {} untyped JSON sites, over the limit of {limit}; most in:\n{}",
                tally.total(),
                top.join("\n")
            ));
        }
    }
    if over.is_empty() {
        Ok(())
    } else {
        bail!("{}", over.join("\n"))
    }
}

fn tally(dir: &Path) -> Result<Tally> {
    let mut files = Vec::new();
    collect(dir, &mut files)?;
    files.sort();
    let mut per_file = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let n = count(&text);
        if n > 0 {
            per_file.push((file, n));
        }
    }
    Ok(Tally { per_file })
}

/// The `.rs` files under `dir` that are not test files (`tests.rs`,
/// `*_tests.rs`, anything under a `tests` directory).
fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "tests" && name != "target" {
                collect(&path, out)?;
            }
        } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The sites of one file's code before its inline test module
/// (`#[cfg(test)]` followed by `mod … {`), comment lines skipped. A
/// `#[cfg(test)]` item elsewhere (a `mod x;` declaration) skips only
/// itself.
fn count(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let mut n = 0;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_start();
        if line.starts_with("#[cfg(test)]") {
            let next = lines.get(i + 1).map_or("", |l| l.trim());
            if next.starts_with("mod ") && next.ends_with('{') {
                break;
            }
            i += 2;
            continue;
        }
        if !line.starts_with("//") {
            n += line.matches("json!").count() + string_index_reads(line);
        }
        i += 1;
    }
    n
}

/// `["key"]` occurrences in a line: `[`, optional spaces, a string without
/// `"` or `]`, optional spaces, `]`.
fn string_index_reads(line: &str) -> usize {
    let b = line.as_bytes();
    let mut n = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'[' {
            let mut j = i + 1;
            while j < b.len() && b[j] == b' ' {
                j += 1;
            }
            if j < b.len() && b[j] == b'"' {
                let mut k = j + 1;
                while k < b.len() && b[k] != b'"' && b[k] != b']' {
                    k += 1;
                }
                if k < b.len() && b[k] == b'"' {
                    let mut m = k + 1;
                    while m < b.len() && b[m] == b' ' {
                        m += 1;
                    }
                    if m < b.len() && b[m] == b']' {
                        n += 1;
                        i = m;
                    }
                }
            }
        }
        i += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_json_macros_and_string_index_reads_outside_tests_and_comments() {
        let text = "#[cfg(test)]\nmod fixtures;\nlet a = json!({});\nlet b = v[\"k\"][\"j\"];\n// json!(x) v[\"c\"]\nlet c = v[0];\nlet d = [\"a\", \"b\"];\n#[cfg(test)]\nmod tests {\n json!(1);\n}\n";
        assert_eq!(count(text), 3);
        assert_eq!(string_index_reads("x[ \"a\" ] y[\"b\"]"), 2);
        assert_eq!(string_index_reads("[\"a\"]"), 1);
        assert_eq!(string_index_reads("&[\"a\", \"b\"]"), 0);
    }
}
