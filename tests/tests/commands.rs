//! The commands seam (issue 10 item 5): the `commands` plugin in a real host
//! with the agent core, a fixture plugin (`commands-kit`) registering
//! commands through `dsh_sdk::api::commands::serve`, and a probe recording
//! `commands/change`. Checks registration, listing, execution and its
//! `command/run` / `command/done` pair in the session log, unwinding when
//! the fixture unloads, refusals, and the shipped `/help`, `/model`,
//! `/permission` and `/status`; with `compaction-basic` and
//! `command-compact` loaded too, `/compact` and the context line of
//! `/status`.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_sdk::api::commands::event as command_event;
use dsh_sdk::names::{agents, bus, code, commands, permission, service};
use dsh_sdk::vocab::{compaction, event};
use dsh_testkit::agent::{
    core_host_staged, create, events, idle, logged, new_agent, of_type, send, turn,
};
use dsh_testkit::fake_llm::{text, text_payloads, tool_calls, Answer, FakeLlm, Gate};
use dsh_testkit::fixtures::{probe_journal, probe_row, PROBE};
use dsh_testkit::{eventually, TestHost};
use serde_json::{json, Value};

const KIT: (&str, &str) = ("dsh-fixture-commands-kit", "commands-kit.so");
/// The agent the kit registers a scoped `/echo` for.
const SCOPED: &str = "agent-with-own-echo";

fn commands_row() -> String {
    "[[row]]\nid = \"commands\"\nplugin = \"commands\"\n".to_owned()
}

fn kit_row() -> String {
    format!(
        "[[row]]\nid = \"kit\"\nplugin = \"commands-kit\"\nconfig = {{ scope = \"{SCOPED}\" }}\n"
    )
}

fn observer_row() -> String {
    probe_row(
        "obs",
        &format!(
            "listeners = [{{ event = \"{}\", action = \"record\" }}]",
            bus::COMMANDS_CHANGE
        ),
    )
}

/// The core rows plus `commands`, the observer and (with `kit`) the kit.
fn rows(core: String, kit: bool) -> String {
    let kit = if kit { kit_row() } else { String::new() };
    format!("{core}{}{}{kit}", commands_row(), observer_row())
}

async fn setup() -> (TestHost, FakeLlm, String) {
    let mut core = String::new();
    let (t, fake) = core_host_staged(&[KIT, PROBE], |r| {
        core = r.clone();
        rows(r, true)
    })
    .await;
    (t, fake, core)
}

/// The rows of `compaction-basic` and `command-compact` (ids = plugin
/// names).
fn compaction_rows() -> String {
    "[[row]]\nid = \"compaction-basic\"\nplugin = \"compaction-basic\"\n\
     [[row]]\nid = \"command-compact\"\nplugin = \"command-compact\"\n"
        .to_owned()
}

/// [`setup`] with a compaction engine and `/compact` loaded too.
async fn setup_with_compaction() -> (TestHost, FakeLlm) {
    core_host_staged(&[KIT, PROBE], |r| {
        format!("{}{}", rows(r, true), compaction_rows())
    })
    .await
}

async fn execute(t: &TestHost, agent: &str, line: &str) -> Value {
    t.call(
        service::COMMANDS,
        commands::EXECUTE,
        json!({"agent": agent, "line": line}),
    )
    .await
}

async fn list(t: &TestHost, agent: &str) -> Vec<Value> {
    let v = t
        .call(service::COMMANDS, commands::LIST, json!({"agent": agent}))
        .await;
    serde_json::from_value(v).unwrap()
}

fn names(list: &[Value]) -> Vec<String> {
    list.iter()
        .map(|d| d["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The result text of `line`, which must run.
async fn text_of(t: &TestHost, agent: &str, line: &str) -> (String, String) {
    let r = execute(t, agent, line).await;
    (
        r["result"]["kind"]
            .as_str()
            .unwrap_or_else(|| panic!("{line}: {r}"))
            .to_owned(),
        r["result"]["text"].as_str().unwrap_or_default().to_owned(),
    )
}

async fn changes(t: &TestHost) -> usize {
    probe_journal(t, "obs")
        .await
        .iter()
        .filter(|e| e.starts_with(&format!("event:{}", bus::COMMANDS_CHANGE)))
        .count()
}

#[tokio::test]
async fn a_plugins_commands_are_listed_executed_logged_and_unwound_with_it() {
    let (t, _fake, core) = setup().await;
    let agent = new_agent(&t, "/tmp").await;

    let listed = list(&t, &agent).await;
    assert_eq!(
        names(&listed),
        [
            "boom",
            "echo",
            "fail",
            "help",
            "model",
            "panic",
            "permission",
            "quiet",
            "status"
        ]
    );
    let echo = listed.iter().find(|d| d["name"] == "echo").unwrap();
    assert_eq!(
        echo,
        &json!({"name": "echo", "description": "Echo the input", "input": {"hint": "<text>"}})
    );
    assert_eq!(
        listed.iter().find(|d| d["name"] == "help").unwrap(),
        &json!({"name": "help", "description": "List the commands you can run here"})
    );

    // One execution: the reply pairs the id with the result, and the log
    // has command/run then command/done with the same id.
    let before = events(&t, &agent).await.len();
    let r = execute(&t, &agent, "/echo  hi there").await;
    let id = r["commandId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("cmd-"), "{r}");
    assert_eq!(
        r["result"],
        json!({"kind": "success", "text": "  hi there"})
    );
    let log = events(&t, &agent).await;
    assert_eq!(log.len(), before + 2);
    assert_eq!(log[before]["type"], command_event::COMMAND_RUN);
    assert_eq!(
        log[before]["data"],
        json!({"commandId": id, "name": "echo", "args": "  hi there", "source": {"kind": "user"}})
    );
    assert_eq!(log[before + 1]["type"], command_event::COMMAND_DONE);
    assert_eq!(
        log[before + 1]["data"],
        json!({"commandId": id, "kind": "success", "text": "  hi there"})
    );
    // Ids are fresh per execution; a bare name has empty args.
    let again = execute(&t, &agent, "/echo").await;
    assert_ne!(again["commandId"], r["commandId"]);
    assert_eq!(again["result"], json!({"kind": "success", "text": ""}));

    // Failures settle as errors with their message, logged as such.
    assert_eq!(
        text_of(&t, &agent, "/fail").await,
        ("error".into(), "it failed on purpose".into())
    );
    assert_eq!(
        text_of(&t, &agent, "/boom x").await,
        ("error".into(), "the handler blew up".into())
    );
    let (kind, panicked) = text_of(&t, &agent, "/panic").await;
    assert_eq!(kind, "error");
    assert!(panicked.contains("the kit panicked"), "{panicked}");
    let done = events(&t, &agent).await;
    let last = done.last().unwrap();
    assert_eq!(last["type"], command_event::COMMAND_DONE);
    assert_eq!(last["data"]["kind"], "error");
    assert_eq!(last["data"]["text"], panicked.as_str());

    // recordInput: false keeps the args out of command/run.
    execute(&t, &agent, "/quiet secret").await;
    let log = events(&t, &agent).await;
    let runs = of_type(&log, command_event::COMMAND_RUN);
    assert_eq!(
        runs.last().unwrap()["data"],
        json!({"commandId": runs.last().unwrap()["data"]["commandId"], "name": "quiet",
               "source": {"kind": "user"}})
    );

    // Unloading the kit removes its commands and says so.
    let heard = changes(&t).await;
    assert!(heard >= 6, "one commands/change per registration: {heard}");
    t.apply(&rows(core, false)).await;
    eventually("commands/change on unload", || async {
        changes(&t).await > heard
    })
    .await;
    assert_eq!(
        names(&list(&t, &agent).await),
        ["help", "model", "permission", "status"]
    );
    let before = events(&t, &agent).await.len();
    assert_eq!(execute(&t, &agent, "/echo hi").await, Value::Null);
    assert_eq!(events(&t, &agent).await.len(), before);
    t.shutdown().await;
}

#[tokio::test]
async fn lines_that_are_not_commands_log_nothing_and_duplicates_are_refused() {
    let (t, _fake, _core) = setup().await;
    let agent = new_agent(&t, "/tmp").await;
    let before = events(&t, &agent).await.len();
    for line in [
        "/nope", "hello", " /echo", "/Echo", "/echo!", "/", "", "/echo:x",
    ] {
        assert_eq!(execute(&t, &agent, line).await, Value::Null, "{line:?}");
    }
    assert_eq!(events(&t, &agent).await.len(), before, "nothing was logged");

    let register = |params: Value| {
        let t = &t;
        async move {
            t.host
                .call(service::COMMANDS, commands::REGISTER, params)
                .await
        }
    };
    for taken in ["echo", "help"] {
        let e = register(json!({"name": taken, "description": "again", "service": "x"}))
            .await
            .unwrap_err();
        assert_eq!(e.code, code::DUPLICATE_COMMAND);
        assert_eq!(
            e.message,
            format!("command \"{taken}\" is already registered")
        );
    }
    let e = register(json!({"name": "Bad", "description": "d", "service": "x"}))
        .await
        .unwrap_err();
    assert_eq!(e.code, code::INVALID_COMMAND);
    let e = register(json!({"name": "x", "description": "d"}))
        .await
        .unwrap_err();
    assert_eq!(e.code, code::INVALID_COMMAND);
    t.shutdown().await;
}

#[tokio::test]
async fn a_scoped_command_shadows_the_global_one_for_its_agent() {
    let (t, _fake, _core) = setup().await;
    let own = create(
        &t,
        json!({"sessionId": SCOPED, "agentOptions": {"provider": "fake", "model": "m1"},
               "meta": {"cwd": "/tmp"}}),
    )
    .await;
    let other = new_agent(&t, "/tmp").await;
    assert_eq!(text_of(&t, &own, "/echo x").await.1, "scoped: x");
    assert_eq!(text_of(&t, &other, "/echo x").await.1, " x");
    let echo = |l: Vec<Value>| l.into_iter().find(|d| d["name"] == "echo").unwrap();
    assert_eq!(
        echo(list(&t, &own).await)["description"],
        "Echo, for one agent"
    );
    assert_eq!(
        echo(list(&t, &other).await)["description"],
        "Echo the input"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn help_lists_every_command_including_other_plugins() {
    let (t, _fake, _core) = setup().await;
    let agent = new_agent(&t, "/tmp").await;
    let (kind, help) = text_of(&t, &agent, "/help").await;
    assert_eq!(kind, "success");
    let lines: Vec<&str> = help.lines().collect();
    assert_eq!(lines.len(), 9, "{help}");
    assert_eq!(lines[1], "/echo <text> — Echo the input");
    assert_eq!(lines[3], "/help — List the commands you can run here");
    assert!(
        lines[4].starts_with("/model [<provider>] <model> — "),
        "{help}"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn model_shows_and_switches_the_agents_route() {
    let (t, fake, _core) = setup().await;
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(
        text_of(&t, &agent, "/model").await,
        (
            "success".into(),
            "no model has answered in this session yet".into()
        )
    );
    fake.push([text("one"), text("two")]);
    turn(&t, &agent, "hi").await;
    assert_eq!(text_of(&t, &agent, "/model").await.1, "model fake/m1");
    assert_eq!(
        text_of(&t, &agent, "/model deepseek-v4-pro").await,
        (
            "success".into(),
            "model fake/deepseek-v4-pro from the next step".into()
        )
    );
    assert_eq!(
        text_of(&t, &agent, "/model").await.1,
        "model fake/deepseek-v4-pro"
    );
    // A model the route's catalog does not list, whose window nothing
    // states, is a typo: refused, nothing switched.
    let (kind, text) = text_of(&t, &agent, "/model deepseek-v4-prp").await;
    assert_eq!(kind, "error");
    assert!(
        text.starts_with("the route \"fake\" does not know the model \"deepseek-v4-prp\""),
        "{text}"
    );
    turn(&t, &agent, "again").await;
    assert_eq!(fake.requests().last().unwrap()["model"], "deepseek-v4-pro");
    let (kind, text) = text_of(&t, &agent, "/model nope m").await;
    assert_eq!(kind, "error");
    assert!(
        text.starts_with("unknown provider \"nope\" (available: "),
        "{text}"
    );
    assert_eq!(
        text_of(&t, &agent, "/model a b c").await,
        ("error".into(), "usage: /model [<provider>] <model>".into())
    );
    t.shutdown().await;
}

#[tokio::test]
async fn permission_shows_and_switches_the_agents_preset() {
    let (t, _fake, _core) = setup().await;
    let agent = new_agent(&t, "/tmp").await;
    let other = new_agent(&t, "/tmp").await;
    let available = "(available: read-only, workspace-write, danger-full-access)";
    assert_eq!(
        text_of(&t, &agent, "/permission").await.1,
        format!("current preset danger-full-access {available}")
    );
    assert_eq!(
        text_of(&t, &agent, "/permission  read-only ").await,
        ("success".into(), "preset read-only".into())
    );
    let now = t
        .call(
            service::PERMISSION,
            permission::PRESET,
            json!({"agent": agent}),
        )
        .await;
    assert_eq!(
        (&now["preset"], &now["mode"], &now["approval"]),
        (&json!("read-only"), &json!("read-only"), &json!("ask"))
    );
    // Another agent keeps the configured preset.
    let untouched = t
        .call(
            service::PERMISSION,
            permission::PRESET,
            json!({"agent": other}),
        )
        .await;
    assert_eq!(untouched["preset"], "danger-full-access");
    assert_eq!(
        text_of(&t, &agent, "/permission yolo").await,
        (
            "error".into(),
            format!("unknown preset \"yolo\" {available}")
        )
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_read_only_preset_fences_the_agents_tools() {
    let (t, fake, _core) = setup().await;
    let fenced = new_agent(&t, "/tmp").await;
    let free = new_agent(&t, "/tmp").await;
    execute(&t, &fenced, "/permission read-only").await;
    let dir = t.home.path().join("touched");
    std::fs::create_dir_all(&dir).unwrap();
    let touch = |name: &str| {
        tool_calls(&[(
            "bash",
            json!({"command": format!("touch {}", dir.join(name).display()),
                   "description": "touch a file"}),
        )])
    };
    fake.push([
        touch("by-fenced"),
        text("done"),
        touch("by-free"),
        text("done"),
    ]);
    turn(&t, &fenced, "touch it").await;
    turn(&t, &free, "touch it").await;
    assert!(
        !dir.join("by-fenced").exists(),
        "read-only keeps the agent's bash from writing"
    );
    assert!(
        dir.join("by-free").exists(),
        "the other agent keeps danger-full-access"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn status_sums_the_sessions_usage_and_prices_known_models() {
    let (t, fake, _core) = setup().await;
    let unpriced = new_agent(&t, "/tmp").await;
    fake.push([text("one"), text("two")]);
    turn(&t, &unpriced, "hi").await;
    turn(&t, &unpriced, "again").await;
    // The fake reports 20 prompt tokens, 8 of them cached, and 5 out.
    assert_eq!(
        text_of(&t, &unpriced, "/status").await,
        (
            "success".into(),
            "tokens: 40 in (16 cache hit, 24 cache miss), 10 out, over 2 model answers\n\
             cost unknown (no price for model \"m1\")"
                .into()
        )
    );
    let priced = create(
        &t,
        json!({"agentOptions": {"provider": "fake", "model": "deepseek-chat"},
               "meta": {"cwd": "/tmp"}}),
    )
    .await;
    fake.push([text("three")]);
    turn(&t, &priced, "hi").await;
    // 12 × $0.28 + 8 × $0.028 + 5 × $0.42 per million.
    assert_eq!(
        text_of(&t, &priced, "/status").await.1,
        "tokens: 20 in (8 cache hit, 12 cache miss), 5 out, over 1 model answer\ncost: $0.000006"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_command_runs_while_a_turn_streams_and_stays_out_of_the_history() {
    let (t, fake, _core) = setup().await;
    let gate = Gate::new();
    let mut payloads = text_payloads("a streamed answer");
    let rest = payloads.split_off(1);
    fake.push([Answer::Gated(payloads, gate.clone(), rest), text("next")]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "start").await;
    logged(&t, &agent, event::ASSISTANT_CHUNK).await;
    assert_eq!(text_of(&t, &agent, "/echo mid-turn").await.1, " mid-turn");
    gate.open();
    assert_eq!(idle(&t, &agent).await, json!({"kind": "completed"}));
    // The next request's history has the user's prompts and the answer,
    // never the command.
    turn(&t, &agent, "more").await;
    let request = fake.requests().last().unwrap().to_string();
    assert!(!request.contains("mid-turn"), "{request}");
    let log = events(&t, &agent).await;
    assert_eq!(of_type(&log, command_event::COMMAND_DONE).len(), 1);
    t.shutdown().await;
}

#[tokio::test]
async fn compact_replaces_the_older_turns_with_a_summary_tied_to_the_command() {
    let (t, fake) = setup_with_compaction().await;
    let agent = new_agent(&t, "/tmp").await;
    // Long prompts, so the summary is smaller than what it replaces.
    fake.push([text("one"), text("two")]);
    turn(&t, &agent, &"a".repeat(4000)).await;
    turn(&t, &agent, &"b".repeat(4000)).await;
    fake.push([text("## Primary Request and Intent\n- s")]);
    let before = events(&t, &agent).await.len();

    let r = execute(&t, &agent, "/compact  keep the API notes ").await;
    let id = r["commandId"].as_str().unwrap().to_owned();
    assert_eq!(r["result"]["kind"], "success", "{r}");
    let log = events(&t, &agent).await;
    let summaries = of_type(&log, compaction::SUMMARY);
    assert_eq!(summaries.len(), 1, "{log:?}");
    let summary = &summaries[0]["data"];
    assert_eq!(
        r["result"]["text"],
        format!(
            "Compacted {} history items (~{} tokens).",
            summary["shadowedSeqs"].as_array().unwrap().len(),
            summary["shadowedTokenCount"]
        )
    );
    assert_eq!(r["result"]["sourceEventSeq"], summaries[0]["seq"]);
    assert_eq!(summary["sourceCommandId"], id.as_str());

    // command/run, then the compaction's records, then command/done.
    let kinds: Vec<&str> = log[before..]
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            command_event::COMMAND_RUN,
            compaction::START,
            compaction::SUMMARY,
            event::USER_MESSAGE,
            compaction::END,
            command_event::COMMAND_DONE
        ]
    );
    assert_eq!(log[before + 1]["data"]["sourceCommandId"], id.as_str());
    assert_eq!(
        log[before + 3]["surfaceOp"]["op"],
        "replace",
        "{}",
        log[before + 3]
    );
    let end = &log[before + 4]["data"];
    assert_eq!(end["sourceCommandId"], id.as_str());
    assert!(end.get("error").is_none(), "{end}");

    // The summary request is marked as a compaction and carries the
    // instructions, trimmed, in its last message.
    let head = fake.headers().last().unwrap().to_ascii_lowercase();
    assert!(head.contains("x-deepseek-harness-compact: 1"), "{head}");
    let request = fake.requests().last().unwrap().clone();
    let last = request["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string();
    assert!(last.contains("keep the API notes"), "{last}");
    assert!(!last.contains("keep the API notes "), "{last}");

    // The next turn sees the checkpoint in place of the older prompts.
    fake.push([text("three")]);
    turn(&t, &agent, "after").await;
    let next = fake.requests().last().unwrap().to_string();
    assert!(
        !next.contains(&"a".repeat(4000)),
        "the first prompt was replaced"
    );
    assert!(next.contains("Primary Request and Intent"), "{next}");
    t.shutdown().await;
}

#[tokio::test]
async fn compact_on_a_fresh_agent_has_nothing_to_do() {
    let (t, _fake) = setup_with_compaction().await;
    let agent = new_agent(&t, "/tmp").await;
    assert_eq!(
        text_of(&t, &agent, "/compact").await,
        ("success".into(), "No compactable history yet.".into())
    );
    let log = events(&t, &agent).await;
    assert!(of_type(&log, compaction::START).is_empty(), "{log:?}");
    let help = text_of(&t, &agent, "/help").await.1;
    assert!(help.contains("/compact [instructions] — "), "{help}");
    t.shutdown().await;
}

#[tokio::test]
async fn status_shows_the_context_when_a_compaction_engine_measures_it() {
    let (t, fake) = setup_with_compaction().await;
    let agent = new_agent(&t, "/tmp").await;
    fake.push([text("one")]);
    turn(&t, &agent, "hi").await;
    let (kind, status) = text_of(&t, &agent, "/status").await;
    assert_eq!(kind, "success");
    let lines: Vec<&str> = status.lines().collect();
    assert_eq!(lines.len(), 3, "{status}");
    assert!(lines[0].starts_with("tokens: 20 in "), "{status}");
    // The fake route's window is the adapter's default, 1,000,000 (the
    // fake server states none); the threshold is 0.8 of it.
    let context = lines[2];
    assert!(context.starts_with("context: ~"), "{context}");
    assert!(
        context.ends_with(
            " tokens of 1000000 (0%), compaction at 800000 \
             (window: the adapter's default, stated by neither the config nor the server)"
        ),
        "{context}"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn compact_while_a_turn_runs_says_the_agent_is_busy() {
    let (t, fake) = setup_with_compaction().await;
    let gate = Gate::new();
    let mut payloads = text_payloads("a streamed answer");
    let rest = payloads.split_off(1);
    fake.push([Answer::Gated(payloads, gate.clone(), rest)]);
    let agent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &agent, "start").await;
    logged(&t, &agent, event::ASSISTANT_CHUNK).await;
    let (kind, text) = text_of(&t, &agent, "/compact").await;
    assert_eq!(kind, "error");
    assert!(text.contains("the agent is busy"), "{text}");
    gate.open();
    assert_eq!(idle(&t, &agent).await, json!({"kind": "completed"}));
    let log = events(&t, &agent).await;
    assert!(of_type(&log, compaction::START).is_empty(), "{log:?}");
    t.shutdown().await;
}
