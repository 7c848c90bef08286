//! The harness's spill directories as a sandboxed command attacks them.
//!
//! The temp directory is a writable root in workspace-write and a command
//! runs as the harness's uid, so the sticky bit on `/tmp` does not stop it
//! renaming the harness's private directories (`dsh-bash-<pid>-<tag>` of
//! tool-bash, `dsh-spill-<pid>-<tag>` of the spill plugin, the directory of
//! tool-search's stored results) and planting a symlink in their place. Each
//! test does exactly that from `bash`, under both sandboxes, then makes the
//! harness spill, and checks that nothing was created in the symlink's
//! target (a directory outside every writable root) and that the call still
//! succeeds. The harness creates its files through a descriptor of the
//! directory it made (`dsh_tempdir::PrivateDir`), never by path.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::path::{Path, PathBuf};

use dsh_testkit::tools::{bash_host, run, sh, text_of, SANDBOXES};
use dsh_testkit::TempDir;
use serde_json::json;

/// The prefixes of the harness's spill directories in the temp dir (the
/// last is tool-search's, before it held a descriptor: one fixed name per
/// process).
const PREFIXES: [&str; 3] = ["dsh-bash-", "dsh-spill-", "dsh-search-"];

/// One attack at a time: the attack renames every spill directory of this
/// process, so two hosts of this suite must not run at once.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A directory outside every writable root (`/var/tmp` is not the temp
/// dir), where the attack points its symlinks.
struct Target(PathBuf);

impl Target {
    fn new(label: &str) -> Target {
        let p = Path::new("/var/tmp").join(format!("dsh-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir(&p).unwrap();
        Target(p)
    }

    /// What the harness created in it.
    fn entries(&self) -> Vec<String> {
        std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The shell that renames every spill directory of this process
/// (`<prefix><pid>` and `<prefix><pid>-<8 characters>`) to `<name>.moved`
/// and plants a symlink to `target` in its place, then runs `then`.
fn swap_attack(target: &Path, then: &str) -> String {
    let tmp = std::env::temp_dir();
    let pid = std::process::id();
    let names: Vec<String> = PREFIXES
        .iter()
        .flat_map(|p| {
            [
                format!("'{}'/{p}{pid}", tmp.display()),
                format!("'{}'/{p}{pid}-????????", tmp.display()),
            ]
        })
        .collect();
    format!(
        "for d in {}; do if [ -d \"$d\" ] && [ ! -L \"$d\" ]; then mv \"$d\" \"$d.moved\" && ln -s '{}' \"$d\"; fi; done; {then}",
        names.join(" "),
        target.display()
    )
}

/// The entries of the temp dir that the attack left: (the symlinks
/// planted in place of the directories, the directories moved away).
fn attack_leftovers() -> (Vec<PathBuf>, Vec<PathBuf>) {
    let pid = std::process::id();
    let mut links = Vec::new();
    let mut moved = Vec::new();
    for entry in std::fs::read_dir(std::env::temp_dir()).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !PREFIXES
            .iter()
            .any(|p| name.starts_with(&format!("{p}{pid}")))
        {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = path.symlink_metadata() else {
            continue;
        };
        if meta.file_type().is_symlink() {
            links.push(path);
        } else if name.ends_with(".moved") {
            moved.push(path);
        }
    }
    (links, moved)
}

/// Removes what the attack left in the temp dir.
fn clean_up() {
    let (links, moved) = attack_leftovers();
    for l in links {
        let _ = std::fs::remove_file(l);
    }
    for m in moved {
        let _ = std::fs::remove_dir_all(m);
    }
}

/// Cleans up what the attack left, also when a test fails.
struct CleanUp;

impl CleanUp {
    fn now() -> CleanUp {
        clean_up();
        CleanUp
    }
}

impl Drop for CleanUp {
    fn drop(&mut self) {
        clean_up();
    }
}

/// The path after `marker` in `text`, up to `end`.
fn path_after(text: &str, marker: &str, end: &str) -> Option<PathBuf> {
    let rest = text.split(marker).nth(1)?;
    Some(PathBuf::from(rest.split(end).next()?))
}

/// The files left in the directories the attack moved away.
fn files_in_moved() -> Vec<PathBuf> {
    attack_leftovers()
        .1
        .iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap().flatten().map(|e| e.path()))
        .collect()
}

#[tokio::test]
async fn bash_output_spill_dir_cannot_be_swapped_for_a_symlink() {
    let _one = ONE_AT_A_TIME.lock().await;
    for sandbox in SANDBOXES {
        let _clean = CleanUp::now();
        let target = Target::new(&format!("bash-spill-target-{sandbox}"));
        let t = bash_host("workspace-write", sandbox, "").await;
        let ws = TempDir::new("spill-bash-ws");
        // Over 64,000 bytes: the harness spills the full output.
        let r = sh(
            &t,
            ws.path(),
            &swap_attack(
                &target.0,
                "head -c 100000 /dev/zero | tr '\\0' x; echo; echo end",
            ),
        )
        .await;
        // bash's own directory is read-only inside the sandbox (a mount
        // point: it cannot be renamed either), so the swap fails; the
        // descriptor the harness holds would redirect nothing anyway
        // (dsh-tempdir's unit tests).
        let (links, _) = attack_leftovers();
        assert!(
            !links.iter().any(|l| l
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("dsh-bash-"))),
            "{sandbox}: the command swapped bash's own directory: {links:?} ({r})"
        );
        assert!(r["error"].is_null(), "{sandbox}: {r}");
        let text = text_of(&r);
        assert!(
            text.starts_with("[output truncated: showing the last 64000 of 100005 bytes;"),
            "{sandbox}: {}",
            &text[..text.len().min(300)]
        );
        assert!(text.contains("\nend"), "{sandbox}");
        let saved = path_after(&text, "full output: ", "]");
        assert!(
            saved.as_ref().is_some_and(|p| p.is_file()),
            "{sandbox}: the full output was not saved where it says: {}",
            text.lines().next().unwrap_or_default()
        );
        t.shutdown().await;
        assert_eq!(
            target.entries(),
            Vec::<String>::new(),
            "{sandbox}: the harness wrote through a planted symlink"
        );
    }
}

#[tokio::test]
async fn the_blank_file_over_hidden_secrets_cannot_be_swapped_for_a_link() {
    let _one = ONE_AT_A_TIME.lock().await;
    for sandbox in SANDBOXES {
        let _clean = CleanUp::now();
        let t = bash_host("workspace-write", sandbox, "").await;
        let ws = TempDir::new("spill-blank-ws");
        let pid = std::process::id();
        let tmp = std::env::temp_dir();
        // The attack a reviewer ran: replace the empty file bound over
        // hidden files with a link to /etc/shadow, then read the shadow
        // file through the next command's bind.
        let swap = format!(
            "for d in '{}'/dsh-bash-{pid}-*; do rm -f \"$d/hidden-file\" && ln -s /etc/shadow \"$d/hidden-file\" && echo swapped; done; true",
            tmp.display()
        );
        let r = sh(&t, ws.path(), &swap).await;
        let text = text_of(&r);
        assert!(!text.contains("swapped"), "{sandbox}: {text}");
        let r = sh(&t, ws.path(), "head -c 200 /etc/shadow; echo; echo end").await;
        let text = text_of(&r);
        assert!(
            !text.contains("root:"),
            "{sandbox}: /etc/shadow was read through the hidden file: {text}"
        );
        t.shutdown().await;
    }
}

#[tokio::test]
async fn result_spill_dir_swapped_for_a_symlink_writes_nothing_outside() {
    let _one = ONE_AT_A_TIME.lock().await;
    for sandbox in SANDBOXES {
        let _clean = CleanUp::now();
        let target = Target::new(&format!("result-spill-target-{sandbox}"));
        let t = bash_host("workspace-write", sandbox, "").await;
        let ws = TempDir::new("spill-result-ws");
        // A first oversized result: the spill plugin makes its directory.
        let r = sh(&t, ws.path(), "seq 1 20000").await;
        let first = path_after(&text_of(&r), "Full formatted result stored at: ", ". Use")
            .unwrap_or_else(|| panic!("{sandbox}: not spilled: {r}"));
        assert!(first.exists(), "{sandbox}: {}", first.display());
        // The command swaps it, then prints another oversized result.
        let r = sh(&t, ws.path(), &swap_attack(&target.0, "seq 1 20000")).await;
        let (links, _) = attack_leftovers();
        let swapped = first.parent().unwrap();
        assert!(
            links.iter().any(|l| l == swapped),
            "{sandbox}: the attack did not swap {}: {links:?}",
            swapped.display()
        );
        assert!(r["error"].is_null(), "{sandbox}: {r}");
        assert_eq!(
            target.entries(),
            Vec::<String>::new(),
            "{sandbox}: the spill plugin wrote through the planted symlink"
        );
        // The result is stored in a fresh directory the model can read.
        let second = path_after(&text_of(&r), "Full formatted result stored at: ", ". Use")
            .unwrap_or_else(|| panic!("{sandbox}: not spilled: {}", &text_of(&r)[..200]));
        assert_ne!(second.parent(), Some(swapped), "{sandbox}");
        assert!(
            // (bash's own directory refuses the move: its complaint
            // follows the numbers.)
            std::fs::read_to_string(&second)
                .unwrap()
                .contains("\n19999\n20000"),
            "{sandbox}"
        );
        t.shutdown().await;
        assert_eq!(target.entries(), Vec::<String>::new(), "{sandbox}");
        assert!(
            !second.exists(),
            "{sandbox}: the fresh directory is removed"
        );
        assert_eq!(files_in_moved(), Vec::<PathBuf>::new(), "{sandbox}");
    }
}

#[tokio::test]
async fn search_spill_dir_swapped_for_a_symlink_writes_nothing_outside() {
    let _one = ONE_AT_A_TIME.lock().await;
    for sandbox in SANDBOXES {
        let _clean = CleanUp::now();
        let target = Target::new(&format!("search-spill-target-{sandbox}"));
        let t = bash_host("workspace-write", sandbox, "").await;
        let ws = TempDir::new("spill-search-ws");
        let many: String = (0..300).map(|i| format!("hit {i}\n")).collect();
        std::fs::write(ws.path().join("many.txt"), many).unwrap();
        let grep = json!({"pattern": "^hit", "path": "many.txt"});
        // Over grep's 250 matches: the full list is stored.
        let r = run(&t, ws.path(), "grep", grep.clone()).await;
        let first = path_after(&text_of(&r), "Full grep result stored at: ", ". Use")
            .unwrap_or_else(|| panic!("{sandbox}: not stored: {r}"));
        assert!(first.exists(), "{sandbox}: {}", first.display());
        // A command swaps the directory for a symlink to the target.
        let r = sh(&t, ws.path(), &swap_attack(&target.0, "true")).await;
        assert!(r["error"].is_null(), "{sandbox}: {r}");
        let swapped = first.parent().unwrap();
        assert!(
            attack_leftovers().0.iter().any(|l| l == swapped),
            "{sandbox}: the attack did not swap {}",
            swapped.display()
        );
        // The next oversized grep.
        let r = run(&t, ws.path(), "grep", grep).await;
        assert!(r["error"].is_null(), "{sandbox}: {r}");
        assert_eq!(
            target.entries(),
            Vec::<String>::new(),
            "{sandbox}: grep wrote through the planted symlink"
        );
        let second = path_after(&text_of(&r), "Full grep result stored at: ", ". Use")
            .unwrap_or_else(|| panic!("{sandbox}: not stored: {r}"));
        assert_ne!(second.parent(), Some(swapped), "{sandbox}");
        let lines = std::fs::read_to_string(&second)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("Line"))
            .count();
        assert_eq!(lines, 300, "{sandbox}");
        t.shutdown().await;
        assert_eq!(target.entries(), Vec::<String>::new(), "{sandbox}");
        assert_eq!(files_in_moved(), Vec::<PathBuf>::new(), "{sandbox}");
    }
}
