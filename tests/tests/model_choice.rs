//! One model choice for every app (issue 20, item 4): the README's
//! local-server recipe as written, under the headless profile and in the
//! chat (a real pseudo-terminal); `dsh-host --model` reaching both; `/model`
//! in the chat saved to `$DSH_HOME/settings.yaml` (every other byte kept)
//! and picked up by the next session; a malformed settings file refused
//! and left alone; a resumed session keeping its logged route; and the
//! host's configuration warnings said once, a patch of another profile's
//! row not warned about at all. Then the review's failures: a saved
//! section over the recipe said and named in the failure, the demo pinned,
//! a `--model` after the task refused, the saved reasoning effort applied
//! and kept, each layer blamed for its own part, a failed `/resume` not
//! leaving the session locked, and a broken settings file not stopping the
//! runs that do not need it.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

#[allow(dead_code)] // the pty helpers this suite does not call
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;

use dsh_testkit::fake_llm::{text, FakeLlm};
use dsh_testkit::headless::Headless;
use dsh_testkit::{out, replace_library, target_dir, TempDir};
use support::pty::Pty;

/// The README's route row for a local OpenAI-compatible server, its
/// `baseUrl` pointed at the fake model server.
fn local_route(fake: &FakeLlm) -> String {
    format!(
        "[[row]]\nid = \"llm-local\"\nplugin = \"llm-deepseek\"\n\
         config = {{ provider = \"local\", baseUrl = \"{}\", apiKeyEnv = \"\", reasoning = false, \
         model = \"qwen3\", models = [{{ id = \"qwen3\", contextWindow = 32768 }}] }}\n",
        fake.base_url
    )
}

/// The README's recipe as written: the route row and the one patch of
/// the model choice (plus no retries, so a failure shows at once).
fn recipe(fake: &FakeLlm) -> String {
    format!(
        "{}\n[[patch]]\nid = \"agent-default-model\"\nconfig = {{ provider = \"local\", model = \"qwen3\" }}\n\
         \n[[patch]]\nid = \"llm-retry\"\nconfig = {{ maxRetries = 0 }}\n",
        local_route(fake)
    )
}

/// A home and workspace whose patch is `patch` alone: the profile's
/// DeepSeek row is left as shipped (no key, the real endpoint), so an app
/// that started on it would fail.
fn pristine(fake: &FakeLlm, patch: &str) -> Headless {
    let e = Headless::new(fake, "");
    std::fs::write(&e.patch, patch).unwrap();
    e
}

/// The models the fake server was asked for, in order.
fn models_asked(fake: &FakeLlm) -> Vec<String> {
    fake.requests()
        .iter()
        .map(|r| r["model"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn settings(e: &Headless) -> std::path::PathBuf {
    e.home.path().join("settings.yaml")
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn the_readme_recipe_works_in_headless_and_in_the_chat() {
    let fake = FakeLlm::start().await;
    fake.push([text("Headless on qwen3."), text("Chat on qwen3.")]);
    let e = pristine(&fake, &recipe(&fake));
    let (code, stdout, stderr) = out(&e.run(&["hi"]).await);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (0, "Headless on qwen3.\n", "")
    );
    // The chat: the same patch, no profile named.
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat · qwen3 · local", 20).await;
    p.send("hello\r");
    p.wait_for("Chat on qwen3.", 20).await;
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
    assert!(!p.contents().contains("not found"), "{}", p.contents());
    assert_eq!(models_asked(&fake), ["qwen3", "qwen3"]);
    // Nothing was saved: the recipe is configuration, not a user choice.
    assert!(!settings(&e).exists());
}

#[tokio::test]
async fn model_flag_reaches_headless_and_the_chat_alike_and_is_not_saved() {
    let fake = FakeLlm::start().await;
    fake.push([text("One."), text("Two."), text("Three.")]);
    // The kit's patch points the default DeepSeek route at the fake too.
    let e = Headless::new(&fake, &local_route(&fake));
    let (code, stdout, stderr) = out(&e.run(&["--model", "local/qwen3", "hi"]).await);
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, "One.\n", ""));
    // A model alone is one of the default route.
    let (code, _, stderr) = out(&e.run(&["--model", "deepseek-v4-pro", "hi"]).await);
    assert_eq!(code, 0, "{stderr}");
    let mut p = Pty::dsh_host(&e, &["--model", "local/qwen3"], &[]);
    p.wait_for("dsh chat · qwen3 · local", 20).await;
    p.send("hello\r");
    p.wait_for("Three.", 20).await;
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
    assert_eq!(models_asked(&fake), ["qwen3", "deepseek-v4-pro", "qwen3"]);
    assert!(!settings(&e).exists());
}

#[tokio::test]
async fn a_model_flag_naming_no_route_is_a_clear_error_listing_the_routes() {
    let fake = FakeLlm::start().await;
    let e = Headless::new(&fake, &local_route(&fake));
    let (code, stdout, stderr) = out(&e.run(&["--model", "lcoal/qwen3", "hi"]).await);
    assert_eq!((code, stdout.as_str()), (1, ""), "{stderr}");
    assert!(stderr.starts_with("dsh: NO_ADAPTER: "), "{stderr}");
    assert!(
        stderr.contains(
            "no adapter serves the route \"lcoal\" (lcoal/qwen3, chosen by --model); the \
             routes served are: "
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("deepseek-official") && stderr.contains("local"),
        "{stderr}"
    );
    // Nothing reached a model; no session was stored.
    assert!(fake.requests().is_empty());
    assert!(e.session_files().is_empty(), "{:?}", e.session_files());
    // The chat says the same before it opens.
    let mut p = Pty::dsh_host(&e, &["--model", "lcoal/qwen3"], &[]);
    assert_eq!(p.wait_exit(20).await, 1);
    let screen = p.contents();
    assert!(
        screen.contains("NO_ADAPTER") && screen.contains("lcoal"),
        "{screen}"
    );
    // A flag of the wrong shape is refused by the command line.
    let (code, _, stderr) = out(&e.run(&["--model", "local/", "hi"]).await);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("provider/model"), "{stderr}");
}

#[tokio::test]
async fn model_in_the_chat_is_saved_keeping_the_rest_and_the_next_session_starts_on_it() {
    let fake = FakeLlm::start().await;
    fake.push([text("First."), text("Next session.")]);
    let e = Headless::new(&fake, &local_route(&fake));
    let others = "# My settings (hand-written).\nui:\n  theme: dark   # keep this comment\n\
                  \n# the model, before any /model\nagent-default-model:\n  model: deepseek-v4-flash\n  reasoningEffort: high\n\
                  \n# end of file\nkeys:\n- a # first\n- b\n";
    std::fs::write(settings(&e), others).unwrap();
    std::fs::set_permissions(settings(&e), std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat · deepseek-v4-flash · deepseek-official", 20)
        .await;
    p.send("hi\r");
    p.wait_for("First.", 20).await;
    p.wait_idle(20).await;
    p.send("/model local qwen3\r");
    p.wait_for("from the next step; saved as the default", 20)
        .await;
    // A new session of this chat starts on it.
    p.send("/new\r");
    p.wait_for("dsh chat · qwen3 · local", 20).await;
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
    let saved = std::fs::read_to_string(settings(&e)).unwrap();
    assert_eq!(
        saved,
        "# My settings (hand-written).\nui:\n  theme: dark   # keep this comment\n\
         \n# the model, before any /model\nagent-default-model:\n  provider: local\n  model: qwen3\n\
         \n# end of file\nkeys:\n- a # first\n- b\n"
    );
    assert_eq!(mode(&settings(&e)), 0o600);
    let leftovers: Vec<_> = std::fs::read_dir(e.home.path())
        .unwrap()
        .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("settings.yaml") && n != "settings.yaml")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // Another app's next session starts on the saved choice.
    let (code, stdout, stderr) = out(&e.run(&["again"]).await);
    assert_eq!((code, stdout.as_str()), (0, "Next session.\n"), "{stderr}");
    assert_eq!(models_asked(&fake), ["deepseek-v4-flash", "qwen3"]);
}

#[tokio::test]
async fn a_malformed_settings_file_is_a_clear_error_and_is_never_overwritten() {
    let fake = FakeLlm::start().await;
    fake.push([text("Fine.")]);
    let e = Headless::new(&fake, &local_route(&fake));
    let broken = "ui:\n  theme: [dark\nagent-default-model:\n  model: m\n";
    std::fs::write(settings(&e), broken).unwrap();
    let (code, stdout, stderr) = out(&e.run(&["hi"]).await);
    assert_eq!((code, stdout.as_str()), (1, ""), "{stderr}");
    let file = settings(&e).display().to_string();
    assert!(stderr.starts_with("dsh: INVALID_SETTINGS: "), "{stderr}");
    assert!(
        stderr.contains(&file) && stderr.contains("line"),
        "{stderr}"
    );
    assert!(fake.requests().is_empty());
    assert_eq!(std::fs::read_to_string(settings(&e)).unwrap(), broken);
    // `/model` in a chat that started before the file broke: the live
    // agent switches, the file is left as it is and the chat says why.
    std::fs::remove_file(settings(&e)).unwrap();
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    std::fs::write(settings(&e), broken).unwrap();
    p.send("/model local qwen3\r");
    p.wait_for("not saved as the default: INVALID_SETTINGS", 20)
        .await;
    p.send("hi\r");
    p.wait_for("Fine.", 20).await;
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
    assert_eq!(std::fs::read_to_string(settings(&e)).unwrap(), broken);
    assert_eq!(models_asked(&fake), ["qwen3"]);
}

#[tokio::test]
async fn a_resumed_session_keeps_its_logged_route_unless_the_run_has_a_model_flag() {
    let fake = FakeLlm::start().await;
    fake.push([text("a"), text("b"), text("c")]);
    let e = Headless::new(&fake, &local_route(&fake));
    e.run_ok(&["first"]).await;
    // The default moves on (as /model in a chat would save it).
    std::fs::write(
        settings(&e),
        "agent-default-model:\n  provider: local\n  model: qwen3\n",
    )
    .unwrap();
    e.run_ok(&["--continue", "second"]).await;
    e.run_ok(&["--continue", "--model", "local/qwen3", "third"])
        .await;
    assert_eq!(
        models_asked(&fake),
        ["deepseek-v4-flash", "deepseek-v4-flash", "qwen3"]
    );
}

#[tokio::test]
async fn an_app_row_naming_a_route_says_where_the_choice_moved() {
    let fake = FakeLlm::start().await;
    let e = Headless::new(
        &fake,
        "[[patch]]\nid = \"headless\"\nconfig = { provider = \"local\", model = \"qwen3\" }\n",
    );
    let (code, _, stderr) = out(&e.run(&["hi"]).await);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("no longer takes `provider` or `model`")
            && stderr.contains("id = \"agent-default-model\""),
        "{stderr}"
    );
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn a_config_warning_is_said_once_and_another_profiles_row_is_not_warned_about() {
    let fake = FakeLlm::start().await;
    fake.push([text("ok")]);
    let e = Headless::new(
        &fake,
        "[[patch]]\nid = \"nope\"\ndisabled = true\n\
         [[patch]]\nid = \"chat\"\nconfig = { maxTokens = 100 }\n",
    );
    let (code, stdout, stderr) = out(&e.run(&["hi"]).await);
    assert_eq!((code, stdout.as_str()), (0, "ok\n"), "{stderr}");
    assert_eq!(
        stderr.matches("patch: row \"nope\" not found").count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("\"chat\""), "{stderr}");
    // --dump-config shows the skipped patch as a note; only the typo fails it.
    let mut c = e.command(&["--dump-config"]);
    let (code, dump, stderr) = out(&c.output().unwrap());
    assert_eq!(code, 1, "{stderr}");
    assert!(
        dump.contains(
            "patch: row \"chat\" is not in this profile (another profile has it); skipped"
        ),
        "{dump}"
    );
    assert_eq!(stderr.matches("not found").count(), 1, "{stderr}");
}

/// The screen with its rows joined (a long line wraps at the terminal's
/// width).
fn flat(p: &Pty) -> String {
    p.contents().replace('\n', "")
}

/// The session id of the one stored session.
fn only_session(e: &Headless) -> String {
    let log = e.log_file();
    let dir = log.parent().unwrap().file_name().unwrap();
    dir.to_string_lossy().into_owned()
}

/// The saved choice of a user who ran `/model` once (the shipped route).
const SAVED_DEEPSEEK: &str =
    "agent-default-model:\n  provider: deepseek-official\n  model: deepseek-v4-flash\n";

#[tokio::test]
async fn a_saved_model_over_the_recipe_is_said_and_its_failure_names_the_settings_file() {
    let fake = FakeLlm::start().await;
    let e = pristine(&fake, &recipe(&fake)).env("DEEPSEEK_API_KEY", "");
    std::fs::write(settings(&e), SAVED_DEEPSEEK).unwrap();
    let file = settings(&e).display().to_string();
    let (code, stdout, stderr) = out(&e.run(&["hi"]).await);
    assert_eq!((code, stdout.as_str()), (1, ""), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    // One line says the settings win over the recipe, and how to change it.
    let note = lines[0];
    for part in [
        "dsh: note: the model is deepseek-official/deepseek-v4-flash",
        &file,
        "not local/qwen3",
        "`/model local qwen3` in the chat",
        "edit or remove that section",
        "`--model local/qwen3` for one run",
    ] {
        assert!(note.contains(part), "{part:?} in {note}");
    }
    // The failure names where the route was chosen.
    let failure = lines[1];
    assert!(
        failure.starts_with("dsh: MISSING_CREDENTIAL: "),
        "{failure}"
    );
    assert!(
        failure.contains(&format!(
            "route deepseek-official/deepseek-v4-flash, chosen by the `agent-default-model` \
             section of {file}; to change it, edit or remove"
        )),
        "{failure}"
    );
    assert!(fake.requests().is_empty());
    // The chat says the same, once, dimmed above its prompt.
    let mut p = Pty::dsh_host(&e, &[], &[("DEEPSEEK_API_KEY", "")]);
    p.wait_for("dsh chat · deepseek-v4-flash · deepseek-official", 20)
        .await;
    p.wait_for("not local/qwen3", 20).await;
    p.send("hello\r");
    p.wait_for("MISSING_CREDENTIAL", 20).await;
    p.wait_for("switches this session", 20).await;
    let screen = flat(&p);
    assert!(
        screen.contains(&format!(
            "(route deepseek-official/deepseek-v4-flash, chosen by the `agent-default-model` \
             section of {file}; `/model <route> <model>` switches"
        )),
        "{screen}"
    );
    assert_eq!(screen.matches("not local/qwen3").count(), 1, "{screen}");
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
    assert_eq!(
        std::fs::read_to_string(settings(&e)).unwrap(),
        SAVED_DEEPSEEK
    );
}

#[tokio::test]
async fn the_demo_profile_is_pinned_against_a_saved_model() {
    let home = TempDir::new("demo-home");
    let work = TempDir::new("demo-work");
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../profiles/demo/workspace");
    for entry in std::fs::read_dir(demo).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), work.path().join(entry.file_name())).unwrap();
    }
    std::fs::write(home.path().join("settings.yaml"), SAVED_DEEPSEEK).unwrap();
    let output = std::process::Command::new(target_dir().join("dsh-host"))
        .current_dir(work.path())
        .env("DSH_HOME", home.path())
        .env_remove("DSH_LOG")
        .env_remove("DSH_PERMISSION_MODE")
        .env("DEEPSEEK_API_KEY", "")
        .args(["--profile", "demo", "update notes.md"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (code, stdout, stderr) = out(&output);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("notes.md now records"), "{stdout}");
    assert!(!stderr.contains("note:"), "{stderr}");
}

#[tokio::test]
async fn a_host_option_after_the_task_is_refused_and_never_reaches_a_model() {
    let fake = FakeLlm::start().await;
    fake.push([text("One."), text("Two.")]);
    let e = Headless::new(&fake, &local_route(&fake));
    let (code, stdout, stderr) = out(&e.run(&["review src/", "--model", "local/qwen3"]).await);
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    assert!(
        stderr.contains("`--model` is a dsh-host option: put it before the task"),
        "{stderr}"
    );
    // Another option after the task is refused by the app.
    let (code, _, stderr) = out(&e.run(&["review", "--verbose"]).await);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("unknown option `--verbose`"), "{stderr}");
    assert!(fake.requests().is_empty());
    assert!(e.session_files().is_empty(), "{:?}", e.session_files());
    // An app option after the task works as before; after a literal `--`
    // a host option's name is a word of the task.
    let (code, stdout, stderr) = out(&e.run(&["hi", "--output", "jsonl"]).await);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout
            .lines()
            .last()
            .unwrap()
            .contains("\"type\":\"result\""),
        "{stdout}"
    );
    e.run_ok(&["explain", "--", "--model", "flag"]).await;
    let last = fake.requests().last().unwrap().clone();
    let said = last["messages"].to_string();
    assert!(said.contains("explain --model flag"), "{said}");
    assert_eq!(
        models_asked(&fake),
        ["deepseek-v4-flash", "deepseek-v4-flash"]
    );
}

#[tokio::test]
async fn the_saved_reasoning_effort_reaches_the_model_is_checked_and_survives_model() {
    let fake = FakeLlm::start().await;
    fake.push([text("Thought hard."), text("Again.")]);
    let e = Headless::new(&fake, &local_route(&fake));
    let saved = "agent-default-model:\n  model: deepseek-v4-flash\n  reasoningEffort: max\n";
    std::fs::write(settings(&e), saved).unwrap();
    e.run_ok(&["hi"]).await;
    assert_eq!(fake.requests()[0]["reasoning_effort"], "max");
    // An effort the model does not offer fails at start, naming the file.
    let unsupported =
        "agent-default-model:\n  provider: local\n  model: qwen3\n  reasoningEffort: high\n";
    std::fs::write(settings(&e), unsupported).unwrap();
    let (code, _, stderr) = out(&e.run(&["hi"]).await);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.starts_with(
            "dsh: UNSUPPORTED_REASONING_EFFORT: provider \"local\" model \"qwen3\" does not \
             support reasoning effort \"high\""
        ) && stderr.contains(&settings(&e).display().to_string()),
        "{stderr}"
    );
    assert_eq!(fake.requests().len(), 1);
    // `/model` of the saved route keeps its effort; of a model the route
    // does not know, it refuses and saves nothing.
    std::fs::write(settings(&e), saved).unwrap();
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat · deepseek-v4-flash", 20).await;
    p.send("/model local qwen4\r");
    p.wait_for("does not know the model", 20).await;
    assert_eq!(std::fs::read_to_string(settings(&e)).unwrap(), saved);
    p.send("/model deepseek-official deepseek-v4-flash\r");
    p.wait_for("saved as the default", 20).await;
    p.send("hello\r");
    p.wait_for("Again.", 20).await;
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
    assert_eq!(
        std::fs::read_to_string(settings(&e)).unwrap(),
        "agent-default-model:\n  provider: deepseek-official\n  model: deepseek-v4-flash\n  reasoningEffort: max\n"
    );
    assert_eq!(fake.requests()[1]["reasoning_effort"], "max");
}

#[tokio::test]
async fn a_route_missing_is_blamed_on_the_layer_that_chose_it() {
    let fake = FakeLlm::start().await;
    let e = Headless::new(&fake, &local_route(&fake));
    std::fs::write(
        settings(&e),
        "agent-default-model:\n  provider: nowhere\n  model: m\n",
    )
    .unwrap();
    let file = settings(&e).display().to_string();
    let (code, _, stderr) = out(&e.run(&["--model", "qwen3", "hi"]).await);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.starts_with("dsh: NO_ADAPTER: "), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "(nowhere/qwen3, its route chosen by the `agent-default-model` section of {file}, \
             its model by --model); the routes served are: deepseek-official, local; to change \
             it, edit or remove the `agent-default-model` section of {file}, or run once with \
             `--model <route>/<model>` and save it with `/model <route> <model>` in the chat"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("chosen by --model"), "{stderr}");
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn a_resume_refused_in_the_chat_leaves_the_session_free_for_another_host() {
    let fake = FakeLlm::start().await;
    fake.push([text("first"), text("second")]);
    let e = Headless::new(&fake, &local_route(&fake));
    e.run_ok(&["--model", "local/qwen3", "first"]).await;
    let id = only_session(&e);
    // The chat runs without the local route: the session's logged route
    // is not served.
    let with_local = std::fs::read_to_string(&e.patch).unwrap();
    std::fs::write(&e.patch, with_local.replace(&local_route(&fake), "")).unwrap();
    let mut p = Pty::dsh_host(&e, &[], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send(&format!("/resume {id}\r"));
    p.wait_for("no adapter serves the route \"local\"", 20)
        .await;
    p.wait_idle(20).await;
    let screen = flat(&p);
    assert!(
        screen.contains(&format!("dsh-host --resume {id} --model <route>/<model>")),
        "{screen}"
    );
    // The chat still runs, and another host can take the session on.
    std::fs::write(&e.patch, &with_local).unwrap();
    let (code, stdout, stderr) = out(&e.run(&["--resume", &id, "second"]).await);
    assert_eq!((code, stdout.as_str()), (0, "second\n"), "{stderr}");
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
    assert_eq!(models_asked(&fake), ["qwen3", "qwen3"]);
}

#[tokio::test]
async fn a_broken_settings_file_stops_only_the_runs_that_need_it() {
    let fake = FakeLlm::start().await;
    fake.push([text("a"), text("b"), text("c"), text("d")]);
    let e = Headless::new(&fake, &local_route(&fake));
    e.run_ok(&["first"]).await;
    let broken = "ui:\n  theme: [dark\n";
    std::fs::write(settings(&e), broken).unwrap();
    // A --model naming the route and the model needs nothing of the file.
    let (code, _, stderr) = out(&e.run(&["--model", "local/qwen3", "hi"]).await);
    assert_eq!((code, stderr.as_str()), (0, ""));
    // A resumed session goes on with its logged route, with a warning.
    let (code, stdout, stderr) = out(&e.run(&["--continue", "next"]).await);
    assert_eq!((code, stdout.as_str()), (0, "c\n"), "{stderr}");
    assert!(
        stderr.starts_with("dsh: warning: INVALID_SETTINGS: ")
            && stderr.contains("the route its log names, local/qwen3"),
        "{stderr}"
    );
    // A new session without a flag needs the file: the error.
    let (code, _, stderr) = out(&e.run(&["new"]).await);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.starts_with("dsh: INVALID_SETTINGS: "), "{stderr}");
    assert_eq!(std::fs::read_to_string(settings(&e)).unwrap(), broken);
    assert_eq!(models_asked(&fake), ["deepseek-v4-flash", "qwen3", "qwen3"]);
}

#[tokio::test]
async fn a_reload_of_the_chat_with_a_broken_settings_file_keeps_the_chat() {
    let fake = FakeLlm::start().await;
    fake.push([text("Before."), text("After.")]);
    let e = Headless::new(&fake, "");
    let plugins = TempDir::new("adm-chat-plugins");
    let lib = plugins.path().join("libdsh_plugin_chat.so");
    replace_library("dsh-plugin-chat", &lib);
    let dir = plugins.path().to_str().unwrap().to_owned();
    let mut p = Pty::dsh_host(&e, &["--watch", "--plugins-dir", &dir], &[]);
    p.wait_for("dsh chat", 20).await;
    p.send("first\r");
    p.wait_for("Before.", 20).await;
    p.wait_idle(20).await;
    std::fs::write(settings(&e), "agent-default-model: [\n").unwrap();
    replace_library("dsh-plugin-chat", &lib);
    p.wait_for("reloaded chat (chat) generation 2", 20).await;
    p.wait_for("goes on with its route", 20).await;
    p.send("second\r");
    p.wait_for("After.", 20).await;
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
    assert_eq!(
        models_asked(&fake),
        ["deepseek-v4-flash", "deepseek-v4-flash"]
    );
}
