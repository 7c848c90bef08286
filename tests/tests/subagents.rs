//! Delegation end to end: the `subagent`, `subagent-in-process` and
//! `tool-subagent` plugins in the real host with the agent core, against
//! the fake model server. Each conversation's answers are routed by a
//! marker in its own prompt (`FakeLlm::push_for`): a parent and its
//! children ask the one server at once, in no fixed order.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::time::Duration;

use dsh_sdk::names::{agent_loop, agents, code, service, subagents};
use dsh_sdk::vocab::event;
use dsh_testkit::agent::{core_host, events, idle, new_agent, of_type, send, turn, wait_log};
use dsh_testkit::fake_llm::{
    calls, gated_text, held_text, text, tool_calls, Answer, FakeLlm, Gate,
};
use dsh_testkit::TestHost;
use serde_json::{json, Value};

/// The delegation rows, `tool-subagent` with `config` (an inline table).
fn delegation_rows(config: &str) -> String {
    format!(
        r#"
[[row]]
id = "subagent"
plugin = "subagent"
[[row]]
id = "subagent-in-process"
plugin = "subagent-in-process"
[[row]]
id = "tool-subagent"
plugin = "tool-subagent"
config = {config}
"#
    )
}

async fn host() -> (TestHost, FakeLlm) {
    core_host(|rows| rows + &delegation_rows("{}")).await
}

/// The row of the `spawn` and `fork` providers, as `delegation_rows` has it.
const PROVIDERS_ROW: &str =
    "[[row]]\nid = \"subagent-in-process\"\nplugin = \"subagent-in-process\"\n";

/// A host with the hooks fixture staged and `extra` rows: `(host, fake,
/// its tree)`.
async fn host_with_tree(extra: &str) -> (TestHost, FakeLlm, String) {
    use dsh_testkit::fixtures::HOOKS;
    let mut tree = String::new();
    let (t, fake) = dsh_testkit::agent::core_host_staged(&[HOOKS], |rows| {
        tree = rows + &delegation_rows("{}") + extra;
        tree.clone()
    })
    .await;
    (t, fake, tree)
}

/// `tree` without the providers' row.
fn without_providers(tree: &str) -> String {
    assert!(tree.contains(PROVIDERS_ROW));
    tree.replace(PROVIDERS_ROW, "")
}

/// Waits until `agent` is idle and no child of it runs (a child's notice
/// wakes it: then again), as headless does.
async fn settle(t: &TestHost, agent: &str) {
    loop {
        idle(t, agent).await;
        let settled = t
            .call(
                service::SUBAGENTS,
                subagents::WHEN_SETTLED,
                json!({"agent": agent}),
            )
            .await;
        if settled["waited"] == 0 {
            return;
        }
    }
}

/// A parent (its prompts begin `parent_marker`) that started one
/// background child (its prompt begins `kid_marker`; it answers `kid`),
/// both settled: `(parent, child)`. Unscripted requests answer "noted".
async fn settled_child(
    t: &TestHost,
    fake: &FakeLlm,
    parent_marker: &str,
    kid_marker: &str,
    kid: impl IntoIterator<Item = Answer>,
) -> (String, String) {
    fake.push_for(kid_marker, kid);
    let prompt = format!("{kid_marker} go");
    fake.push_for(
        parent_marker,
        [tool_calls(&[(
            "subagent",
            json!({"description": "d", "prompt": prompt}),
        )])],
    );
    fake.set_fallback(text("noted"));
    let parent = new_agent(t, "/tmp").await;
    send(
        t,
        agents::FOLLOWUP,
        &parent,
        &format!("{parent_marker} start"),
    )
    .await;
    settle(t, &parent).await;
    let child = started_child(&events(t, &parent).await);
    (parent, child)
}

/// One answer starting two background children, each `(description,
/// prompt)`.
fn two_spawns(a: (&str, &str), b: (&str, &str)) -> Answer {
    calls(&[
        ("c1", "subagent", json!({"description": a.0, "prompt": a.1})),
        ("c2", "subagent", json!({"description": b.0, "prompt": b.1})),
    ])
}

/// The user messages of `agent`'s log whose source is `kind`.
fn from_source<'a>(ev: &'a [Value], kind: &str) -> Vec<&'a Value> {
    of_type(ev, event::USER_MESSAGE)
        .into_iter()
        .filter(|e| e["data"]["source"]["kind"] == kind)
        .collect()
}

/// The text blocks of a logged message, joined.
fn text_of(e: &Value) -> String {
    e["data"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("")
}

/// The id in a `started subagent <id>` tool result of `agent`'s log.
fn started_child(ev: &[Value]) -> String {
    of_type(ev, event::TOOL_RESULT)
        .iter()
        .find_map(|e| {
            let t = e["data"]["message"]["content"][0]["content"][0]["text"].as_str()?;
            t.strip_prefix("started subagent ").map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("no child was started: {ev:?}"))
}

/// The text of every tool result of `agent`'s log.
fn tool_result_texts(ev: &[Value]) -> Vec<String> {
    of_type(ev, event::TOOL_RESULT)
        .iter()
        .map(|e| {
            e["data"]["message"]["content"][0]["content"]
                .as_array()
                .map(|c| c.iter().filter_map(|b| b["text"].as_str()).collect())
                .unwrap_or_default()
        })
        .collect()
}

/// Every turn of the log is closed and every step too.
fn assert_balanced(ev: &[Value]) {
    let count = |k: &str| of_type(ev, k).len();
    assert_eq!(count(event::TURN_START), count(event::TURN_END), "{ev:?}");
    assert_eq!(count(event::STEP_START), count(event::STEP_END), "{ev:?}");
}

/// The requests whose user messages hold `marker`.
fn requests_with(fake: &FakeLlm, marker: &str) -> Vec<Value> {
    fake.requests()
        .into_iter()
        .filter(|r| {
            r["messages"].as_array().is_some_and(|m| {
                m.iter()
                    .any(|m| m["role"] == "user" && m["content"].to_string().contains(marker))
            })
        })
        .collect()
}

#[tokio::test]
async fn a_background_child_reads_reports_and_settles_into_its_parents_next_request() {
    let (t, fake) = host().await;
    let dir = dsh_testkit::TempDir::new("subagent-ws");
    std::fs::write(dir.path().join("notes.md"), "the answer is 42\n").unwrap();
    fake.push_for(
        "KID-A",
        [
            tool_calls(&[("read", json!({"file_path": "notes.md"}))]),
            tool_calls(&[("report", json!({"output": "REPORTED: the answer is 42"}))]),
            text("CLOSING: done reading"),
        ],
    );
    fake.push_for(
        "PARENT-1",
        [tool_calls(&[(
            "subagent",
            json!({"description": "read the notes", "prompt": "KID-A read notes.md and report"}),
        )])],
    );
    fake.set_fallback(text("noted"));
    let parent = new_agent(&t, dir.path().to_str().unwrap()).await;
    send(&t, agents::FOLLOWUP, &parent, "PARENT-1 delegate").await;
    settle(&t, &parent).await;

    let ev = events(&t, &parent).await;
    let child = started_child(&ev);
    // The report and the settlement notice reached the parent's log ...
    let reports = from_source(&ev, "subagent-report");
    assert_eq!(reports.len(), 1, "{ev:?}");
    assert_eq!(
        text_of(reports[0]),
        format!("Background subagent {child} reported:REPORTED: the answer is 42")
    );
    let notices = from_source(&ev, "subagent-settled");
    assert_eq!(notices.len(), 1, "{ev:?}");
    assert_eq!(
        text_of(notices[0]),
        format!("Background subagent {child} finished and will do no further work unless you send it more.Its closing message:CLOSING: done reading")
    );
    assert_eq!(notices[0]["data"]["source"]["senderSessionId"], child);
    // ... and the parent's next request holds them.
    let last = fake
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.to_string().contains("PARENT-1"))
        .unwrap();
    assert!(last.to_string().contains("REPORTED: the answer is 42"));
    assert!(last.to_string().contains("CLOSING: done reading"));

    // The child read the file in the parent's directory, in a session of
    // its own whose header names its lineage, and its log is balanced.
    let kid = events(&t, &child).await;
    assert!(tool_result_texts(&kid)
        .iter()
        .any(|r| r.contains("the answer is 42")));
    let descriptor = of_type(&kid, event::SUBAGENT_DESCRIPTOR);
    assert_eq!(descriptor.len(), 1);
    assert_eq!(
        descriptor[0]["data"],
        json!({"version": 2, "mode": "continuable", "provider": "spawn", "label": "read the notes"})
    );
    assert_balanced(&kid);
    assert_balanced(&ev);
    let stored = t
        .call(
            service::SESSION_PERSISTENCE,
            dsh_sdk::names::session_persistence::INSPECT,
            json!({"id": child}),
        )
        .await;
    let header = &stored["header"];
    assert_eq!(header["parentSession"], parent);
    assert_eq!(header["origin"], "subagent");
    assert_eq!(header["delegationDepth"], 1);
    assert_eq!(header["cwd"], dir.path().to_str().unwrap());
    // The child saw the delegation notice and had `report`; the parent
    // has no `report`.
    let kid_request = &requests_with(&fake, "KID-A")[0];
    assert!(kid_request
        .to_string()
        .contains("You are a delegated subagent"));
    let tools = |r: &Value| -> Vec<String> {
        r["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(tools(kid_request).contains(&"report".to_owned()));
    assert!(!tools(&requests_with(&fake, "PARENT-1")[0]).contains(&"report".to_owned()));
}

#[tokio::test]
async fn a_fork_child_starts_from_the_parents_completed_turns() {
    let (t, fake) = host().await;
    fake.push_for("FORKKID", [text("FORK-RESULT: reviewed")]);
    fake.push_for(
        "PARENT-F",
        [
            text("FIRST-ANSWER"),
            tool_calls(&[(
                "subagent_fork",
                json!({"description": "review it", "prompt": "FORKKID review the first answer", "run_in_background": false}),
            )]),
            text("final"),
        ],
    );
    let parent = new_agent(&t, "/tmp").await;
    turn(&t, &parent, "PARENT-F first").await;
    turn(&t, &parent, "PARENT-F second").await;

    let kid = &requests_with(&fake, "FORKKID")[0];
    let body = kid.to_string();
    assert!(
        body.contains("PARENT-F first") && body.contains("FIRST-ANSWER"),
        "{body}"
    );
    // Not the turn in flight: it calls the tool that made the child.
    assert!(!body.contains("PARENT-F second"), "{body}");
    // The foreground call answered the child's final text.
    let ev = events(&t, &parent).await;
    assert_eq!(tool_result_texts(&ev), ["FORK-RESULT: reviewed"]);
}

#[tokio::test]
async fn two_background_children_run_at_once_and_both_notices_wake_the_idle_parent() {
    let (t, fake) = host().await;
    let (g1, g2) = (Gate::new(), Gate::new());
    fake.push_for("KID-ONE", [gated_text("R-ONE", &g1)]);
    fake.push_for("KID-TWO", [gated_text("R-TWO", &g2)]);
    fake.push_for(
        "PARENT-2",
        [
            two_spawns(("one", "KID-ONE go"), ("two", "KID-TWO go")),
            text("WAITING"),
        ],
    );
    fake.set_fallback(text("noted"));
    let parent = new_agent(&t, "/tmp").await;
    turn(&t, &parent, "PARENT-2 split the work").await;
    // Both children asked the model before either answered: at once.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while requests_with(&fake, "KID-ONE").is_empty() || requests_with(&fake, "KID-TWO").is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the children never both asked"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let listed = t
        .call(
            service::SUBAGENTS,
            subagents::LIST_CHILDREN,
            json!({"agent": parent}),
        )
        .await;
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["status"] == "running"),
        "{listed}"
    );
    g1.open();
    g2.open();
    settle(&t, &parent).await;
    let ev = events(&t, &parent).await;
    let notices: Vec<String> = from_source(&ev, "subagent-settled")
        .into_iter()
        .map(text_of)
        .collect();
    assert_eq!(notices.len(), 2, "{notices:?}");
    assert!(
        notices.iter().any(|n| n.ends_with("R-ONE"))
            && notices.iter().any(|n| n.ends_with("R-TWO"))
    );
    // The parent was idle after its first turn and woke for them.
    assert!(of_type(&ev, event::TURN_START).len() >= 2);
    assert_balanced(&ev);
    // Settled children are listed as stored (ready).
    let listed = t
        .call(
            service::SUBAGENTS,
            subagents::LIST_CHILDREN,
            json!({"agent": parent}),
        )
        .await;
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["status"] == "ready"),
        "{listed}"
    );
}

#[tokio::test]
async fn the_depth_cap_refuses_the_fourth_level() {
    let (t, fake) = host().await;
    let down = |prompt: &str| {
        tool_calls(&[(
            "subagent",
            json!({"description": "go deeper", "prompt": prompt, "run_in_background": false}),
        )])
    };
    fake.push_for("LEVEL-THREE", [down("LEVEL-FOUR"), text("capped at three")]);
    fake.push_for("LEVEL-TWO", [down("LEVEL-THREE task"), text("two done")]);
    fake.push_for("LEVEL-ONE", [down("LEVEL-TWO task"), text("one done")]);
    fake.push_for("ROOT-D", [down("LEVEL-ONE task"), text("root done")]);
    let parent = new_agent(&t, "/tmp").await;
    turn(&t, &parent, "ROOT-D start").await;
    let third = requests_with(&fake, "LEVEL-THREE");
    let refused = third.last().unwrap().to_string();
    assert!(
        refused.contains("subagent depth 4 exceeds maxDepth 3"),
        "{refused}"
    );
    assert!(requests_with(&fake, "LEVEL-FOUR")
        .iter()
        .all(|r| !r["messages"][0].to_string().contains("LEVEL-FOUR")));
    let ev = events(&t, &parent).await;
    assert_eq!(tool_result_texts(&ev), ["one done"]);
}

#[tokio::test]
async fn cancelling_the_parent_stops_its_running_child_and_every_log_stays_balanced() {
    let (t, fake) = host().await;
    let (kid_gate, parent_gate) = (Gate::new(), Gate::new());
    fake.push_for("KID-C", [held_text("working late", &kid_gate)]);
    fake.push_for(
        "PARENT-C",
        [
            tool_calls(&[(
                "subagent",
                json!({"description": "slow", "prompt": "KID-C go"}),
            )]),
            held_text("thinking late", &parent_gate),
        ],
    );
    let parent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &parent, "PARENT-C delegate").await;
    wait_log(&t, &parent, "the child started", |ev| {
        tool_result_texts(ev)
            .iter()
            .any(|r| r.starts_with("started subagent"))
    })
    .await;
    let child = started_child(&events(&t, &parent).await);
    wait_log(&t, &child, "the child's answer streaming", |ev| {
        !of_type(ev, event::ASSISTANT_CHUNK).is_empty()
    })
    .await;
    t.call(service::AGENTS, agents::CANCEL, json!({"agent": parent}))
        .await;
    settle(&t, &parent).await;
    kid_gate.open();
    parent_gate.open();

    let kid = events(&t, &child).await;
    let end = of_type(&kid, event::TURN_END);
    assert_eq!(
        end.last().unwrap()["data"]["reason"],
        json!({"kind": "aborted", "reason": {"kind": "parent"}})
    );
    assert_balanced(&kid);
    let ev = events(&t, &parent).await;
    assert_balanced(&ev);
    // The notice is there, but did not wake the parent the user stopped.
    let notices = from_source(&ev, "subagent-settled");
    assert!(
        notices.is_empty() || of_type(&ev, event::TURN_START).len() == 1,
        "{ev:?}"
    );
    assert_eq!(
        t.call(service::AGENTS, agents::STATUS, json!({"agent": parent}))
            .await["status"],
        "idle"
    );
}

#[tokio::test]
async fn a_settled_child_resumes_on_its_own_and_through_send_message() {
    let (t, fake) = host().await;
    let (parent, child) = settled_child(
        &t,
        &fake,
        "PARENT-R",
        "KID-R",
        [text("FIRST-RUN"), text("SECOND-RUN")],
    )
    .await;

    // The parent sends the settled child more work: it is resumed from
    // its stored log, answers, and settles again.
    fake.push_for(
        "PARENT-R",
        [tool_calls(&[(
            "send_message",
            json!({"subagent_id": child, "message": "and now?"}),
        )])],
    );
    send(&t, agents::FOLLOWUP, &parent, "PARENT-R ask again").await;
    settle(&t, &parent).await;
    let ev = events(&t, &parent).await;
    assert!(tool_result_texts(&ev).contains(&format!(
        "message queued as the next turn for subagent {child}"
    )));
    let notices: Vec<String> = from_source(&ev, "subagent-settled")
        .into_iter()
        .map(text_of)
        .collect();
    assert_eq!(notices.len(), 2, "{notices:?}");
    assert!(notices[1].ends_with("SECOND-RUN"), "{notices:?}");
    let kid = events(&t, &child).await;
    let relayed = from_source(&kid, "coordinator");
    assert_eq!(relayed.len(), 1);
    assert_eq!(relayed[0]["data"]["source"]["senderSessionId"], parent);
    // Its second request held its first run.
    let second = requests_with(&fake, "KID-R").pop().unwrap().to_string();
    assert!(second.contains("FIRST-RUN") && second.contains("and now?"));

    // The child's log resumes on its own, as any session does.
    fake.push([text("ON-ITS-OWN")]);
    let resumed = t
        .call(
            service::AGENT_LOOP,
            agent_loop::RESUME,
            json!({"sessionId": child, "agentOptions": {"provider": "fake", "model": "m1"}}),
        )
        .await;
    assert_eq!(resumed["agent"], child);
    let reason = turn(&t, &child, "KID-R alone now").await;
    assert_eq!(reason["kind"], "completed");
    assert_balanced(&events(&t, &child).await);
}

#[tokio::test]
async fn a_definition_files_tools_and_persona_reach_the_child_and_an_edit_applies_next_time() {
    // The definitions exist when the host starts (an edit is read at the
    // next start of one, and offered from the next step on).
    let fake = FakeLlm::start().await;
    let t = TestHost::start().await;
    let agents_dir = t.home.path().join("agents");
    std::fs::create_dir_all(&agents_dir).unwrap();
    let file = agents_dir.join("reviewer.md");
    std::fs::write(
        &file,
        "---\nname: reviewer\ndescription: Reviews changes.\ntools: Read\n---\nPERSONA-ONE: you review.\n",
    )
    .unwrap();
    std::fs::write(agents_dir.join("broken.md"), "no frontmatter").unwrap();
    let rows = dsh_testkit::core_rows(&fake.base_url, &t.home.path().join("sessions"));
    t.apply(&(rows + &delegation_rows("{}"))).await;
    t.assert_all_active().await;
    let spawn = |prompt: &str| {
        tool_calls(&[(
            "subagent",
            json!({"description": "review", "prompt": prompt, "subagent_type": "reviewer", "run_in_background": false}),
        )])
    };
    fake.push_for("DEF-KID-1", [text("reviewed once")]);
    fake.push_for("DEF-KID-2", [text("reviewed twice")]);
    fake.push_for("PARENT-DEF", [spawn("DEF-KID-1 look"), text("ok")]);
    let parent = new_agent(&t, "/tmp").await;
    turn(&t, &parent, "PARENT-DEF review").await;

    let tools = |r: &Value| -> Vec<String> {
        let mut v: Vec<String> = r["tools"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    // The parent is offered the definition in the tool's description.
    let offered = requests_with(&fake, "PARENT-DEF")[0]["tools"].to_string();
    assert!(
        offered.contains("- reviewer: Reviews changes."),
        "{offered}"
    );
    let first = &requests_with(&fake, "DEF-KID-1")[0];
    assert!(first.to_string().contains("PERSONA-ONE"));
    assert_eq!(tools(first), ["read"]);

    std::fs::write(
        &file,
        "---\nname: reviewer\ndescription: Reviews changes.\ntools: Read, Bash, NoSuchTool\n---\nPERSONA-TWO: you review.\n",
    )
    .unwrap();
    fake.push_for("PARENT-DEF", [spawn("DEF-KID-2 look"), text("ok")]);
    turn(&t, &parent, "PARENT-DEF again").await;
    let second = &requests_with(&fake, "DEF-KID-2")[0];
    assert!(
        second.to_string().contains("PERSONA-TWO") && !second.to_string().contains("PERSONA-ONE")
    );
    // (A tool this host lacks is left out, never a child refused.)
    assert_eq!(tools(second), ["bash", "read"]);
    assert_eq!(
        tool_result_texts(&events(&t, &parent).await),
        ["reviewed once", "reviewed twice"]
    );
    // (The malformed file beside it was skipped.)

    // A kind no file defines is a clear error naming those that exist;
    // no child is made, and the parent's turn goes on.
    let before = fake.requests().len();
    fake.push_for(
        "PARENT-DEF",
        [
            tool_calls(&[(
                "subagent",
                json!({"description": "x", "prompt": "DEF-KID-3", "subagent_type": "nope"}),
            )]),
            text("ok"),
        ],
    );
    let reason = turn(&t, &parent, "PARENT-DEF unknown kind").await;
    assert_eq!(reason["kind"], "completed");
    let results = tool_result_texts(&events(&t, &parent).await);
    assert_eq!(
        results.last().unwrap(),
        "Error: unknown subagent_type \"nope\"; available: reviewer"
    );
    assert_eq!(
        fake.requests().len(),
        before + 2,
        "no child asked the model"
    );
}

#[tokio::test]
async fn a_child_whose_model_keeps_failing_is_a_clear_error_result() {
    let (t, fake) = host().await;
    let failing = || Answer::Status(500, vec![], "{\"error\":{\"message\":\"boom\"}}".into());
    fake.push_for("KID-X", (0..12).map(|_| failing()));
    fake.push_for(
        "PARENT-X",
        [
            tool_calls(&[(
                "subagent",
                json!({"description": "doomed", "prompt": "KID-X try", "run_in_background": false}),
            )]),
            text("handled"),
        ],
    );
    let parent = new_agent(&t, "/tmp").await;
    let reason = tokio::time::timeout(Duration::from_secs(120), turn(&t, &parent, "PARENT-X go"))
        .await
        .expect("the parent's turn ends");
    assert_eq!(reason["kind"], "completed");
    let ev = events(&t, &parent).await;
    let results = of_type(&ev, event::TOOL_RESULT);
    assert_eq!(results.len(), 1);
    let text = results[0]["data"]["message"].to_string();
    assert!(
        text.contains("subagent run failed") && text.contains("Diagnostic:"),
        "{text}"
    );
    assert_eq!(results[0]["data"]["message"]["content"][0]["isError"], true);
}

#[tokio::test]
async fn the_subagent_plugin_reloaded_with_no_child_running_keeps_the_parents_session() {
    let (t, fake) = host().await;
    fake.push_for("KID-L", [text("before reload"), text("after reload")]);
    let fg = |prompt: &str| {
        tool_calls(&[(
            "subagent",
            json!({"description": "d", "prompt": prompt, "run_in_background": false}),
        )])
    };
    fake.push_for("PARENT-L", [fg("KID-L one"), text("ok")]);
    let parent = new_agent(&t, "/tmp").await;
    turn(&t, &parent, "PARENT-L first").await;
    // The registry unloaded (its dependents with it), then loaded again.
    let core = dsh_testkit::core_rows(&fake.base_url, &t.home.path().join("sessions"));
    let without =
        delegation_rows("{}").replace("[[row]]\nid = \"subagent\"\nplugin = \"subagent\"\n", "");
    assert_ne!(without, delegation_rows("{}"));
    t.apply(&(core.clone() + &without)).await;
    t.assert_unloaded_cleanly("subagent");
    t.apply(&(core + &delegation_rows("{}"))).await;
    t.assert_all_active().await;
    fake.push_for("PARENT-L", [fg("KID-L two"), text("ok")]);
    let reason = turn(&t, &parent, "PARENT-L second").await;
    assert_eq!(reason["kind"], "completed");
    assert_eq!(
        tool_result_texts(&events(&t, &parent).await),
        ["before reload", "after reload"]
    );
}

#[tokio::test]
async fn an_agents_own_registrations_die_with_it() {
    use dsh_sdk::names::{system_prompt, tools};
    let (t, _fake) = host().await;
    let a = new_agent(&t, "/tmp").await;
    let tool = json!({"name": "mine", "description": "d", "parameters": {"type": "object"}, "service": "nowhere", "scope": a});
    let section = json!({"scope": a, "name": "mine", "order": 1, "text": "MINE"});
    let filter = json!({"scope": a, "deny": ["read"]});
    t.call(service::TOOLS, tools::REGISTER, tool.clone()).await;
    t.call(service::TOOLS, tools::RESTRICT, filter).await;
    t.call(
        service::SYSTEM_PROMPT,
        system_prompt::SECTION,
        section.clone(),
    )
    .await;
    let names = |v: Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let seen = names(
        t.call(service::TOOLS, tools::SCHEMAS, json!({"scope": a}))
            .await,
    );
    assert!(seen.contains(&"mine".to_owned()) && !seen.contains(&"read".to_owned()));
    // Twice is refused while the agent lives ...
    let again = t
        .host
        .call(service::TOOLS, tools::REGISTER, tool.clone())
        .await;
    assert_eq!(again.unwrap_err().code, "DUPLICATE_TOOL");
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": a}))
        .await;
    // ... and what was its own left with it.
    let seen = names(
        t.call(service::TOOLS, tools::SCHEMAS, json!({"scope": a}))
            .await,
    );
    assert!(!seen.contains(&"mine".to_owned()) && seen.contains(&"read".to_owned()));
    // Its scope has closed: a registration racing its disposal is refused
    // (INACTIVE_EFFECT), never left behind.
    for (svc, method, params) in [
        (service::TOOLS, tools::REGISTER, tool),
        (service::SYSTEM_PROMPT, system_prompt::SECTION, section),
        (
            service::TOOLS,
            tools::RESTRICT,
            json!({"scope": a, "deny": ["read"]}),
        ),
    ] {
        let refused = t.host.call(svc, method, params).await.unwrap_err();
        assert_eq!(
            refused.code,
            code::INACTIVE_EFFECT,
            "{svc}.{method}: {refused}"
        );
    }
}

#[tokio::test]
async fn send_message_to_an_agent_that_is_not_ones_child_touches_nothing() {
    let (t, fake) = host().await;
    let gate = Gate::new();
    let parent = new_agent(&t, "/tmp").await;
    // The child tries to send its parent (the user's session) a message,
    // and the parent tries itself: both refused, nobody disposed.
    fake.push_for(
        "KID-H1",
        [
            calls(&[(
                "h1",
                "send_message",
                json!({"subagent_id": parent, "message": "hi"}),
            )]),
            gated_text("kid done", &gate),
        ],
    );
    fake.push_for(
        "PARENT-H1",
        [
            calls(&[
                (
                    "p1",
                    "subagent",
                    json!({"description": "d", "prompt": "KID-H1 go"}),
                ),
                (
                    "p2",
                    "send_message",
                    json!({"subagent_id": parent, "message": "me?"}),
                ),
            ]),
            text("parent waits"),
        ],
    );
    fake.set_fallback(text("noted"));
    turn(&t, &parent, "PARENT-H1 start").await;
    let ev = events(&t, &parent).await;
    let results = tool_result_texts(&ev);
    assert!(
        results[1].contains(&format!(
            "subagent \"{parent}\" belongs to another parent session"
        )),
        "{results:?}"
    );
    let child = started_child(&ev);
    wait_log(&t, &child, "the child's refused send", |ev| {
        !of_type(ev, event::TOOL_RESULT).is_empty()
    })
    .await;
    let kid = events(&t, &child).await;
    assert!(
        tool_result_texts(&kid)[0].contains("belongs to another parent session"),
        "{kid:?}"
    );
    // The parent is alive and well.
    assert_eq!(
        t.call(service::AGENTS, agents::STATUS, json!({"agent": parent}))
            .await["status"],
        "idle"
    );
    gate.open();
    settle(&t, &parent).await;
    assert_balanced(&events(&t, &parent).await);
}

#[tokio::test]
async fn two_messages_to_a_settled_child_in_one_step_both_run() {
    let (t, fake) = host().await;
    let (parent, child) = settled_child(
        &t,
        &fake,
        "PARENT-H3",
        "KID-H3",
        [text("first"), text("second"), text("third")],
    )
    .await;
    fake.push_for(
        "PARENT-H3",
        [calls(&[
            (
                "m1",
                "send_message",
                json!({"subagent_id": child, "message": "one"}),
            ),
            (
                "m2",
                "send_message",
                json!({"subagent_id": child, "message": "two"}),
            ),
        ])],
    );
    send(&t, agents::FOLLOWUP, &parent, "PARENT-H3 twice").await;
    settle(&t, &parent).await;
    let ev = events(&t, &parent).await;
    let queued = tool_result_texts(&ev)
        .iter()
        .filter(|r| r.starts_with("message queued"))
        .count();
    assert_eq!(queued, 2, "{:?}", tool_result_texts(&ev));
    let kid = events(&t, &child).await;
    // (The calls ran in parallel: either may have arrived first.)
    let mut relayed: Vec<String> = from_source(&kid, "coordinator")
        .into_iter()
        .map(text_of)
        .collect();
    relayed.sort();
    assert_eq!(relayed, ["one", "two"]);
    assert_balanced(&kid);
    // Every run of the child ended with a notice, the last after both.
    let notices = from_source(&ev, "subagent-settled");
    assert!(
        text_of(notices.last().unwrap()).ends_with("third"),
        "{notices:?}"
    );
}

#[tokio::test]
async fn a_foreground_child_answers_after_its_own_background_child() {
    let (t, fake) = host().await;
    fake.push_for("GRANDKID", [slow_text_answer("GRAND-RESULT")]);
    fake.push_for(
        "FG-KID",
        [
            tool_calls(&[(
                "subagent",
                json!({"description": "g", "prompt": "GRANDKID dig"}),
            )]),
            text("started a helper"),
            text("FG-FINAL with GRAND-RESULT"),
        ],
    );
    fake.push_for(
        "PARENT-H6",
        [
            tool_calls(&[(
                "subagent",
                json!({"description": "d", "prompt": "FG-KID work", "run_in_background": false}),
            )]),
            text("parent done"),
        ],
    );
    let parent = new_agent(&t, "/tmp").await;
    turn(&t, &parent, "PARENT-H6 go").await;
    assert_eq!(
        tool_result_texts(&events(&t, &parent).await),
        ["FG-FINAL with GRAND-RESULT"]
    );
}

/// A text answer streamed slowly enough that its parent finishes first.
fn slow_text_answer(text: &str) -> Answer {
    dsh_testkit::fake_llm::slow_text(text, 30)
}

#[tokio::test]
async fn a_child_works_in_its_parents_mode_and_nobody_is_asked_for_it() {
    use dsh_sdk::names::permission;
    let (t, fake) = host().await;
    let gate = Gate::new();
    fake.push_for("KID-H5", [gated_text("done", &gate)]);
    fake.push_for(
        "PARENT-H5",
        [tool_calls(&[(
            "subagent",
            json!({"description": "d", "prompt": "KID-H5 go"}),
        )])],
    );
    fake.set_fallback(text("noted"));
    let parent = new_agent(&t, "/tmp").await;
    t.call(
        service::PERMISSION,
        permission::SET_PRESET,
        json!({"agent": parent, "preset": "read-only"}),
    )
    .await;
    turn(&t, &parent, "PARENT-H5 go").await;
    let child = started_child(&events(&t, &parent).await);
    let of_child = t
        .call(
            service::PERMISSION,
            permission::PRESET,
            json!({"agent": child}),
        )
        .await;
    assert_eq!(
        (&of_child["mode"], &of_child["approval"]),
        (&json!("read-only"), &json!("never"))
    );
    gate.open();
    settle(&t, &parent).await;
}

#[tokio::test]
async fn a_failing_background_child_is_a_notice_and_interrupt_and_list_agents_work() {
    let (t, fake) = host().await;
    let failing = || Answer::Status(500, vec![], "{\"error\":{\"message\":\"boom\"}}".into());
    fake.push_for("KID-FAIL", (0..12).map(|_| failing()));
    let gate = Gate::new();
    fake.push_for("KID-SLOW", [held_text("partial late", &gate)]);
    fake.push_for(
        "PARENT-M9",
        [
            two_spawns(("doomed", "KID-FAIL try"), ("slow one", "KID-SLOW wait")),
            text("both started"),
        ],
    );
    fake.set_fallback(text("noted"));
    let parent = new_agent(&t, "/tmp").await;
    turn(&t, &parent, "PARENT-M9 go").await;
    let ev = events(&t, &parent).await;
    let ids: Vec<String> = tool_result_texts(&ev)
        .iter()
        .filter_map(|r| r.strip_prefix("started subagent ").map(str::to_owned))
        .collect();
    assert_eq!(ids.len(), 2);
    let slow = ids[1].clone();
    wait_log(&t, &slow, "the slow child's answer", |ev| {
        !of_type(ev, event::ASSISTANT_CHUNK).is_empty()
    })
    .await;
    fake.push_for(
        "PARENT-M9",
        [
            calls(&[("l", "list_agents", json!({"scope": "descendants"}))]),
            calls(&[("i", "interrupt_agent", json!({"agent_id": slow}))]),
            text("stopped it"),
        ],
    );
    send(&t, agents::FOLLOWUP, &parent, "PARENT-M9 stop the slow one").await;
    settle(&t, &parent).await;
    gate.open();
    let ev = events(&t, &parent).await;
    let results = tool_result_texts(&ev);
    let listing = results.iter().find(|r| r.contains("slow one")).unwrap();
    assert!(
        listing.contains(&format!(
            "{slow} [running] parent={parent} depth=1 — slow one"
        )),
        "{listing}"
    );
    assert!(
        results.contains(&format!("interrupt requested for agent {slow}")),
        "{results:?}"
    );
    let notices: Vec<String> = from_source(&ev, "subagent-settled")
        .into_iter()
        .map(text_of)
        .collect();
    assert!(
        notices
            .iter()
            .any(|n| n.contains("failed before it finished")),
        "{notices:?}"
    );
    assert!(
        notices
            .iter()
            .any(|n| n.contains(&format!("{slow} was stopped before it finished"))),
        "{notices:?}"
    );
    assert_balanced(&events(&t, &slow).await);
}

#[tokio::test]
async fn stored_children_are_listed_after_the_registry_restarts_and_an_unreadable_one_is_a_diagnostic(
) {
    let (t, fake) = host().await;
    let (parent, child) = settled_child(&t, &fake, "PARENT-LS", "KID-LS", [text("done")]).await;
    // A session that claims to be the parent's child but has no record.
    let odd = dsh_testkit::agent::create(
        &t,
        json!({"agentOptions": {"provider": "fake", "model": "m1"},
               "meta": {"cwd": "/tmp", "parentSession": parent, "origin": "subagent", "delegationDepth": 1}}),
    )
    .await;
    turn(&t, &odd, "ODD-ONE hello").await;
    t.call(service::AGENTS, agents::DISPOSE, json!({"agent": odd}))
        .await;
    // A new generation of the registry knows nothing of either.
    let core = dsh_testkit::core_rows(&fake.base_url, &t.home.path().join("sessions"));
    let without =
        delegation_rows("{}").replace("[[row]]\nid = \"subagent\"\nplugin = \"subagent\"\n", "");
    t.apply(&(core.clone() + &without)).await;
    t.apply(&(core + &delegation_rows("{}"))).await;
    t.assert_all_active().await;
    let listed = t
        .call(
            service::SUBAGENTS,
            subagents::LIST_DESCENDANTS,
            json!({"agent": parent}),
        )
        .await;
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    let find = |id: &str| listed.iter().find(|e| e["id"] == id).unwrap().clone();
    assert_eq!(
        find(&child),
        json!({"id": child, "label": "d", "status": "ready", "parent": parent, "depth": 1})
    );
    assert_eq!(find(&odd)["diagnostic"], "corrupt");
    // And the stored child takes more work.
    fake.push_for("KID-LS", [text("again")]);
    fake.push_for(
        "PARENT-LS",
        [tool_calls(&[(
            "send_message",
            json!({"subagent_id": child, "message": "more"}),
        )])],
    );
    send(&t, agents::FOLLOWUP, &parent, "PARENT-LS more").await;
    settle(&t, &parent).await;
    let ev = events(&t, &parent).await;
    let notices = from_source(&ev, "subagent-settled");
    assert!(text_of(notices.last().unwrap()).ends_with("again"));
}

/// The provider is checked again once the child is set up: unloaded
/// meanwhile, the creation is rolled back (the child never announced, its
/// session never written) and the call fails clearly.
#[tokio::test]
async fn a_provider_unloaded_during_the_childs_setup_rolls_the_child_back() {
    use dsh_sdk::names::{bus, session_persistence, sessions};
    use dsh_testkit::fake_llm::stall_after;
    use dsh_testkit::fixtures::{hooks_journal, hooks_row};
    // `block` holds the child's setup (at `subagent/child-ready`) until the
    // agent `blocker` is idle; `seen` says the setup got there.
    let ready = |tag: &str, calls: Value| {
        hooks_row(
            tag,
            json!({"listeners": [{"event": bus::SUBAGENT_CHILD_READY, "calls": calls}]}),
        )
    };
    let wait = json!([{"service": service::AGENTS, "method": agents::WHEN_IDLE, "params": {"agent": "blocker"}}]);
    let hooks = ready("block", wait) + &ready("seen", json!([]));
    let (t, fake, tree) = host_with_tree(&hooks).await;
    fake.push_for("BLOCKER", [stall_after("Half")]);
    fake.push_for(
        "PARENT-P",
        [
            tool_calls(&[(
                "subagent",
                json!({"description": "look", "prompt": "KID-P look", "run_in_background": false}),
            )]),
            text("after"),
        ],
    );
    let blocker = json!({"sessionId": "blocker", "agentOptions": {"provider": "fake", "model": "m1"}, "meta": {"cwd": "/tmp"}});
    t.call(service::AGENT_LOOP, agent_loop::CREATE, blocker)
        .await;
    send(&t, agents::FOLLOWUP, "blocker", "BLOCKER hold").await;
    let parent = new_agent(&t, "/tmp").await;
    send(&t, agents::FOLLOWUP, &parent, "PARENT-P go").await;
    dsh_testkit::eventually("the child's setup", || async {
        !hooks_journal(&t, "seen").await.is_empty()
    })
    .await;
    let child = hooks_journal(&t, "seen").await[0]["payload"]["child"]
        .as_str()
        .unwrap()
        .to_owned();

    // The provider goes while the setup is held; then the setup goes on.
    t.apply(&without_providers(&tree)).await;
    t.call(service::AGENTS, agents::CANCEL, json!({"agent": "blocker"}))
        .await;
    idle(&t, &parent).await;
    let result = of_type(&events(&t, &parent).await, event::TOOL_RESULT)[0].to_string();
    assert!(
        result.contains("no subagent provider registered for \\\"spawn\\\""),
        "{result}"
    );
    assert!(
        requests_with(&fake, "KID-P").is_empty(),
        "the child never ran"
    );
    let live: Vec<String> =
        serde_json::from_value(t.call(service::SESSIONS, sessions::LIST, json!({})).await).unwrap();
    assert!(!live.contains(&child), "{live:?}");
    let stored = t
        .host
        .call(
            service::SESSION_PERSISTENCE,
            session_persistence::INSPECT,
            json!({"id": child}),
        )
        .await;
    assert!(
        stored.is_err(),
        "nothing of the child was written: {stored:?}"
    );
}

/// `subagent` and `subagent_fork` are offered only while their providers
/// are registered, their prompt sections with them.
#[tokio::test]
async fn the_delegation_tools_come_and_go_with_their_providers() {
    use dsh_sdk::names::{system_prompt, tools};
    let (t, _fake, tree) = host_with_tree("").await;
    async fn offered(t: &TestHost) -> (bool, bool, bool, bool) {
        {
            let schemas = t.call(service::TOOLS, tools::SCHEMAS, json!({})).await;
            let names: Vec<String> = schemas
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["name"].as_str().unwrap().to_owned())
                .collect();
            let assembly = t
                .call(
                    service::SYSTEM_PROMPT,
                    system_prompt::ASSEMBLE,
                    json!({"tools": schemas, "variables": {"cwd": "/tmp", "model": "m1", "provider": "fake"}}),
                )
                .await;
            let sections = assembly["sections"].to_string();
            let has = |n: &str| names.contains(&n.to_owned());
            (
                has("subagent"),
                has("subagent_fork"),
                has("send_message"),
                sections.contains("Use subagent in the background"),
            )
        }
    }
    assert_eq!(offered(&t).await, (true, true, true, true));
    t.apply(&without_providers(&tree)).await;
    dsh_testkit::eventually("the tools withdrawn", || async {
        offered(&t).await == (false, false, true, false)
    })
    .await;
    t.apply(&tree).await;
    dsh_testkit::eventually("the tools back", || async {
        offered(&t).await == (true, true, true, true)
    })
    .await;
}

/// A provider removed while its child runs: the registry, which owns the
/// child, disposes it; its turn ends aborted (its log balanced) and the
/// parent is told.
#[tokio::test]
async fn a_provider_removed_ends_its_running_children_cleanly() {
    use dsh_testkit::fake_llm::stall_after;
    let (t, fake, tree) = host_with_tree("").await;
    fake.push_for("KID-U", [stall_after("Half")]);
    fake.push_for(
        "PARENT-U",
        [
            tool_calls(&[(
                "subagent",
                json!({"description": "work", "prompt": "KID-U work"}),
            )]),
            text("started it"),
            text("heard it"),
        ],
    );
    let parent = new_agent(&t, "/tmp").await;
    turn(&t, &parent, "PARENT-U go").await;
    let started = of_type(&events(&t, &parent).await, event::TOOL_RESULT)[0].to_string();
    let child = started
        .split("started subagent ")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    dsh_testkit::eventually("the child's stalled request", || async {
        requests_with(&fake, "KID-U").len() == 1
    })
    .await;

    t.apply(&without_providers(&tree)).await;
    dsh_testkit::eventually("the child disposed", || async {
        let live = t
            .call(service::AGENT_LOOP, agent_loop::LIST, json!({}))
            .await;
        !live.to_string().contains(&child)
    })
    .await;
    let log = events(&t, &child).await;
    let end = of_type(&log, event::TURN_END);
    assert_eq!(end.len(), 1, "{log:?}");
    assert_eq!(end[0]["data"]["reason"]["kind"], "aborted", "{end:?}");
    // The parent is told how its child ended (quietly: its inbox holds the
    // notice; a provider going is no reason to start it a turn).
    dsh_testkit::eventually("the parent's notice", || async {
        let log = serde_json::to_string(&events(&t, &parent).await).unwrap();
        log.contains(&format!("{child} was stopped before it finished"))
    })
    .await;
}

/// A child goes on its parent's route with its parent's `maxTokens`.
#[tokio::test]
async fn a_child_inherits_its_parents_output_limit() {
    let (t, fake) = host().await;
    fake.push_for("KID-M", [text("done")]);
    fake.push_for(
        "PARENT-M",
        [
            tool_calls(&[(
                "subagent",
                json!({"description": "d", "prompt": "KID-M go", "run_in_background": false}),
            )]),
            text("ok"),
        ],
    );
    let parent = dsh_testkit::agent::create(
        &t,
        json!({"agentOptions": {"provider": "fake", "model": "m1", "maxTokens": 321}, "meta": {"cwd": "/tmp"}}),
    )
    .await;
    turn(&t, &parent, "PARENT-M go").await;
    let kid = &requests_with(&fake, "KID-M")[0];
    assert_eq!(kid["max_tokens"], 321, "{kid}");
    assert_eq!(kid["model"], "m1");
}
