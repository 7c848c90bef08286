//! The host with real plugin builds: services, events, effects, lifecycle,
//! hot reload and bad inputs. Every plugin here is a real cdylib loaded into
//! a real host; the probe fixture's row config selects its behavior.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use dsh_host::FiberState;
use dsh_testkit::fixtures::{probe_journal, probe_row, stage_probe};
use dsh_testkit::{eventually, library, replace_library, TestHost};
use serde_json::{json, Value};

#[tokio::test]
async fn load_call_unload_unwinds_every_effect() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let obs = probe_row(
        "obs",
        "listeners = [{ event = \"probe/lifecycle\", action = \"record\" }]",
    );
    let reg = probe_row("reg", "registry = true");
    let wb = probe_row(
        "wb",
        "provides = [\"greeter\"]\nregister_in = \"registry\"\nlisteners = [{ event = \"ping\", action = \"record\" }]",
    );
    t.apply(&format!("{obs}{reg}{wb}")).await;
    assert_eq!(t.status("wb").await.state, FiberState::Active);

    let hello = t
        .host
        .call("greeter", "hello", json!({"x": 1}))
        .await
        .unwrap();
    assert_eq!(hello["tag"], "wb");
    assert_eq!(hello["params"], json!({"x": 1}));
    assert_eq!(
        t.host.call("registry", "list", json!({})).await.unwrap(),
        json!(["wb"])
    );
    t.host.emit("ping", "", json!({"n": 7}));
    eventually("wb hears ping", || async {
        probe_journal(&t, "wb")
            .await
            .contains(&"event:ping:{\"n\":7}".to_string())
    })
    .await;

    // Unload the well-behaved row: every registration unwinds.
    t.apply(&format!("{obs}{reg}")).await;
    let err = t
        .host
        .call("greeter", "hello", json!({}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "SERVICE_UNAVAILABLE");
    eventually("registry entry dropped", || async {
        t.host.call("registry", "list", json!({})).await.unwrap() == json!([])
    })
    .await;
    let disposed = "event:probe/lifecycle:{\"tag\":\"wb\",\"what\":\"disposed\"}".to_string();
    eventually("effect ran", || async {
        probe_journal(&t, "obs").await.contains(&disposed)
    })
    .await;
    assert!(
        !t.reports_with("unmapped").is_empty(),
        "the generation should be unmapped: {:?}",
        t.host.reports()
    );
    t.shutdown().await;
}

#[tokio::test]
async fn inject_waits_and_dependents_follow_their_provider() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let obs = probe_row(
        "obs",
        "listeners = [{ event = \"probe/lifecycle\", action = \"record\" }]",
    );
    let dep = "[[row]]\nid = \"dep\"\nplugin = \"probe\"\ninject = [\"svc\"]\n[row.config]\ntag = \"dep\"\n";
    let prov = probe_row("prov", "provides = [\"svc\"]");

    t.apply(&format!("{obs}{dep}")).await;
    let s = t.status("dep").await;
    assert_eq!(s.state, FiberState::Pending);
    assert_eq!(s.waiting_for, vec!["svc"]);

    t.apply(&format!("{obs}{dep}{prov}")).await;
    assert_eq!(t.status("dep").await.state, FiberState::Active);

    // The provider leaves: the dependent is disposed first, and waits again.
    t.apply(&format!("{obs}{dep}")).await;
    assert_eq!(t.status("dep").await.state, FiberState::Pending);
    let j = probe_journal(&t, "obs").await;
    let dep_gone = j
        .iter()
        .position(|e| e.contains("\"tag\":\"dep\",\"what\":\"disposed\""));
    let prov_gone = j
        .iter()
        .position(|e| e.contains("\"tag\":\"prov\",\"what\":\"disposed\""));
    assert!(dep_gone.is_some() && dep_gone < prov_gone, "{j:?}");

    // A provider returns: the dependent restarts.
    t.apply(&format!("{obs}{dep}{prov}")).await;
    assert_eq!(t.status("dep").await.state, FiberState::Active);
    let applied = probe_journal(&t, "obs")
        .await
        .iter()
        .filter(|e| e.contains("\"tag\":\"dep\",\"what\":\"applied\""))
        .count();
    assert_eq!(applied, 2);
    t.shutdown().await;
}

#[tokio::test]
async fn cyclic_inject_is_an_error() {
    let t = TestHost::start().await;
    t.apply(
        "[[row]]\nid='a'\nplugin='dsh-fixture-cycle-a'\n[[row]]\nid='b'\nplugin='dsh-fixture-cycle-b'\n",
    )
    .await;
    for id in ["a", "b"] {
        let s = t.status(id).await;
        assert_eq!(s.state, FiberState::Failed, "{s:?}");
        assert!(s.error.unwrap_or_default().contains("cyclic inject"));
    }
    t.shutdown().await;
}

fn listeners(event: &str, action: &str, prepend: bool) -> String {
    format!("listeners = [{{ event = \"{event}\", action = \"{action}\", prepend = {prepend} }}]")
}

#[tokio::test]
async fn a_dispatcher_that_stops_waiting_cancels_the_running_listeners() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let rows = format!(
        "{}{}{}",
        probe_row("w", &listeners("slow-wf", "hang", false)),
        probe_row("s", &listeners("slow-serial", "hang", false)),
        probe_row("d", ""),
    );
    t.apply(&rows).await;
    for (mode, event, listener) in [
        ("waterfall", "slow-wf", "w"),
        ("serial", "slow-serial", "s"),
    ] {
        let out = t
            .host
            .call(
                "probe:d",
                "dispatch",
                json!({"mode": mode, "event": event, "payload": {"trace": []}, "giveUpAfterMs": 50}),
            )
            .await
            .unwrap();
        assert_eq!(out, json!("gave up"));
        eventually(&format!("the {mode} listener is cancelled"), || async {
            probe_journal(&t, listener)
                .await
                .contains(&format!("dropped:{listener}"))
        })
        .await;
    }
    t.shutdown().await;
}

#[tokio::test]
async fn waterfall_order_prepend_short_circuit_and_next_once() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let rows = format!(
        "{}{}{}",
        probe_row("l1", &listeners("wf", "append", false)),
        probe_row("l2", &listeners("wf", "append", false)),
        probe_row("l3", &listeners("wf", "append", true)),
    );
    t.apply(&rows).await;
    let inner = |v: Value| -> Result<Value, dsh_sdk::Error> {
        let mut v = v;
        v["trace"].as_array_mut().unwrap().push(json!("inner"));
        Ok(v)
    };
    let out = t
        .host
        .waterfall("wf", "", json!({"trace": []}), Box::new(inner))
        .await
        .unwrap();
    assert_eq!(out["trace"], json!(["l3", "l1", "l2", "inner"]));

    // The same chain dispatched by a plugin, whose own default runs last.
    let out = t
        .host
        .call(
            "probe:l1",
            "dispatch",
            json!({"mode": "waterfall", "event": "wf", "payload": {"trace": []}}),
        )
        .await
        .unwrap();
    assert_eq!(out["trace"], json!(["l3", "l1", "l2", "inner"]));

    // A listener that does not call next short-circuits the rest.
    let rows2 = format!(
        "{}{}{}",
        probe_row("l1", &listeners("wf", "append", false)),
        probe_row("l2", &listeners("wf", "short", false)),
        probe_row("l3", &listeners("wf", "append", true)),
    );
    t.apply(&rows2).await;
    let out = t
        .host
        .waterfall("wf", "", json!({"trace": []}), Box::new(inner))
        .await
        .unwrap();
    assert_eq!(out["trace"], json!(["l3", "l1", "l2!"]));

    // `next` at most once.
    let rows3 = probe_row("l4", &listeners("wf2", "next-twice", false));
    t.apply(&rows3).await;
    let err = t
        .host
        .waterfall("wf2", "", json!({"trace": []}), Box::new(inner))
        .await
        .unwrap_err();
    assert_eq!(err.code, "NEXT_CALLED_TWICE");
    t.shutdown().await;
}

#[tokio::test]
async fn serial_and_parallel_semantics() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let rows = format!(
        "{}{}{}",
        probe_row("a", &listeners("s", "append", false)),
        probe_row("b", &listeners("s", "answer", false)),
        probe_row("c", &listeners("s", "answer", false)),
    );
    t.apply(&rows).await;
    let out = t.host.serial("s", "", json!({"trace": []})).await.unwrap();
    assert_eq!(out, json!({"answer": "b"}));
    assert!(probe_journal(&t, "c")
        .await
        .iter()
        .all(|e| !e.starts_with("event:")));

    // A restarted row re-registers its listeners at the end: use new rows.
    let rows = format!(
        "{}{}",
        probe_row("a2", &listeners("s2", "fail", false)),
        probe_row("b2", &listeners("s2", "answer", false)),
    );
    t.apply(&rows).await;
    let err = t
        .host
        .serial("s2", "", json!({"trace": []}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "PROBE_FAILED");
    assert!(probe_journal(&t, "b2")
        .await
        .iter()
        .all(|e| !e.starts_with("event:")));

    // Parallel: every listener runs; a failure is reported after all ran.
    let rows = format!(
        "{}{}{}",
        probe_row("a3", &listeners("p", "fail", false)),
        probe_row("b3", &listeners("p", "append", false)),
        probe_row("c3", &listeners("p", "append", false)),
    );
    t.apply(&rows).await;
    let err = t
        .host
        .parallel("p", "", json!({"trace": []}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "PROBE_FAILED");
    for tag in ["a3", "b3", "c3"] {
        assert!(
            probe_journal(&t, tag)
                .await
                .iter()
                .any(|e| e.starts_with("event:p:")),
            "{tag} did not run"
        );
    }
    t.shutdown().await;
}

#[tokio::test]
async fn failing_emit_listener_is_contained_and_logged() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let rows = format!(
        "{}{}",
        probe_row("bad", &listeners("e", "fail", false)),
        probe_row("good", &listeners("e", "record", false)),
    );
    t.apply(&rows).await;
    t.host.emit("e", "", json!(1));
    eventually("good hears e", || async {
        probe_journal(&t, "good")
            .await
            .contains(&"event:e:1".to_string())
    })
    .await;
    eventually("failure logged", || async {
        !t.reports_with("listener for `e` failed").is_empty()
    })
    .await;
    t.shutdown().await;
}

#[tokio::test]
async fn scoped_listeners_hear_their_agent_and_its_descendants() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let rows = probe_row(
        "s",
        "listeners = [{ event = \"agent/x\", action = \"record\", scope = \"agent-1\" }]",
    );
    t.apply(&rows).await;
    t.host
        .call(
            "probe:s",
            "scope_parent",
            json!({"child": "agent-1.sub", "parent": "agent-1"}),
        )
        .await
        .unwrap();
    t.host.emit("agent/x", "agent-2", json!("other"));
    t.host.emit("agent/x", "", json!("unscoped"));
    t.host.emit("agent/x", "agent-1", json!("mine"));
    t.host.emit("agent/x", "agent-1.sub", json!("child"));
    // The inbox is FIFO: once the last emit is heard, nothing from the
    // earlier ones is still on its way.
    t.host.emit("agent/x", "agent-1", json!("last"));
    eventually("the last emit is heard", || async {
        probe_journal(&t, "s")
            .await
            .contains(&"event:agent/x:\"last\"".to_owned())
    })
    .await;
    let j = probe_journal(&t, "s").await;
    let events: Vec<&String> = j.iter().filter(|e| e.starts_with("event:")).collect();
    assert_eq!(
        events,
        vec![
            "event:agent/x:\"mine\"",
            "event:agent/x:\"child\"",
            "event:agent/x:\"last\""
        ]
    );
    t.shutdown().await;
}

#[tokio::test]
async fn streams_and_caller_attribution() {
    let t = TestHost::start().await;
    stage_probe(&t);
    t.apply(&format!(
        "{}{}",
        probe_row("a", ""),
        probe_row("b", "provides = [\"echo\"]")
    ))
    .await;
    let mut stream = t.host.call_stream("probe:a", "stream", json!({"n": 3}));
    let mut items = Vec::new();
    while let Some(item) = stream.next().await {
        items.push(item.unwrap());
    }
    assert_eq!(items, vec![json!(0), json!(1), json!(2)]);

    // Plugin to plugin: a stream is collected by `call`, and the provider
    // sees who called.
    let out = t
        .host
        .call(
            "probe:a",
            "call",
            json!({"service": "probe:b", "method": "stream", "params": {"n": 2}}),
        )
        .await
        .unwrap();
    assert_eq!(out, json!([0, 1]));
    let echo = t
        .host
        .call(
            "probe:a",
            "call",
            json!({"service": "echo", "method": "who", "params": {}}),
        )
        .await
        .unwrap();
    assert_eq!(echo["caller"], json!(t.status("a").await.fiber));
    t.shutdown().await;
}

#[tokio::test]
async fn failing_apply_rolls_back_and_panics_are_contained() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let rows = format!(
        "{}{}{}",
        probe_row(
            "f",
            "provides = [\"f-svc\"]\nfail_in_apply = true\nlisteners = [{ event = \"fe\", action = \"answer\" }]"
        ),
        probe_row("p", "panic_in_apply = true"),
        probe_row("ok", "provides = [\"ok-svc\"]"),
    );
    t.apply(&rows).await;
    let f = t.status("f").await;
    assert_eq!(f.state, FiberState::Failed);
    assert!(f.error.unwrap().contains("failed in apply on purpose"));
    assert_eq!(
        t.host.call("f-svc", "x", json!({})).await.unwrap_err().code,
        "SERVICE_UNAVAILABLE"
    );
    assert_eq!(
        t.host.serial("fe", "", json!({})).await.unwrap(),
        Value::Null
    );
    let p = t.status("p").await;
    assert_eq!(p.state, FiberState::Failed);
    assert!(p.error.unwrap().contains("panicked in apply on purpose"));

    // A panicking handler is an error reply; the plugin keeps serving.
    let err = t.host.call("ok-svc", "panic", json!({})).await.unwrap_err();
    assert_eq!(err.code, "PANIC");
    assert!(err.message.contains("panicked on purpose"), "{err}");
    assert_eq!(
        t.host.call("ok-svc", "x", json!({})).await.unwrap()["tag"],
        "ok"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn bad_libraries_are_refused_with_clear_errors() {
    let t = TestHost::start().await;
    std::fs::write(t.plugins.path().join("garbage.so"), vec![0x42u8; 4096]).unwrap();
    t.apply(concat!(
        "[[row]]\nid='garbage'\nplugin='garbage'\n",
        "[[row]]\nid='abi'\nplugin='dsh-fixture-bad-abi'\n",
        "[[row]]\nid='layout'\nplugin='dsh-fixture-bad-layout'\n",
        "[[row]]\nid='missing'\nplugin='no-such-plugin'\n",
    ))
    .await;
    let err = |id: &'static str| {
        let t = &t;
        async move { t.status(id).await.error.unwrap_or_default() }
    };
    assert!(err("garbage").await.contains("invalid ELF header"));
    let abi = err("abi").await;
    assert!(abi.contains("protocol v2, this host speaks v1"), "{abi}");
    let layout = err("layout").await;
    assert!(layout.contains("incompatible plugin interface"), "{layout}");
    assert!(layout.contains("dsh-fixture-bad-layout"), "{layout}");
    let missing = err("missing").await;
    assert!(
        missing.contains("plugin `no-such-plugin` not found"),
        "{missing}"
    );
    assert!(
        missing.contains(&t.plugins.path().display().to_string()),
        "{missing}"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn misbehaving_generations_are_quarantined_or_counted_never_crash() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let keep = probe_row("keep", "provides = [\"kept\"]");
    let rows = format!(
        "{keep}{}{}{}{}{}",
        probe_row("hang", "on_dispose = \"hang\""),
        probe_row("joined", "thread = \"joined\""),
        probe_row("detached", "thread = \"detached\""),
        probe_row("signal", "signal = true"),
        probe_row("blocking", "blocking_forever = true"),
    );
    t.apply(&rows).await;
    for id in ["hang", "joined", "detached", "signal", "blocking"] {
        assert_eq!(t.status(id).await.state, FiberState::Active, "{id}");
    }
    t.apply(&keep).await;
    let reports = t.host.reports();
    let about = |needle: &str| {
        reports
            .iter()
            .filter(|r| r.message.contains(needle))
            .map(|r| r.message.clone())
            .collect::<Vec<_>>()
    };
    assert!(
        !about("dispose failed (no answer within").is_empty(),
        "{reports:?}"
    );
    assert_eq!(about("quarantined").len(), 3, "{reports:?}");
    assert!(!about("signal 10 (SIGUSR1)").is_empty(), "{reports:?}");
    assert!(!about("leaked (still mapped)").is_empty(), "{reports:?}");
    // The joined thread and the rest unloaded cleanly.
    assert!(!about("unmapped").is_empty(), "{reports:?}");
    // The host is unharmed, even when the quarantined handler's signal comes.
    // SAFETY: the quarantined generation's handler is still mapped.
    unsafe { libc::raise(libc::SIGUSR1) };
    assert_eq!(
        t.host.call("kept", "x", json!({})).await.unwrap()["tag"],
        "keep"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn hot_reload_serves_from_the_new_generation_and_keeps_the_old_on_a_bad_file() {
    let t = TestHost::start().await;
    let target = t.plugins.path().join("counter.so");
    std::fs::copy(library("dsh-fixture-counter-v1"), &target).unwrap();
    t.apply("[[row]]\nid = 'counter'\nplugin = 'counter'\n")
        .await;
    assert_eq!(
        t.host.call("counter", "get", json!({})).await.unwrap(),
        json!(1)
    );

    replace_library("dsh-fixture-counter-v2", &target);
    t.host.reload(target.clone()).await;
    assert_eq!(
        t.host.call("counter", "get", json!({})).await.unwrap(),
        json!(2)
    );
    assert_eq!(t.status("counter").await.generations, 2);
    assert!(
        !t.reports_with("unmapped").is_empty(),
        "{:?}",
        t.host.reports()
    );

    // A broken replacement: the running generation keeps serving.
    let tmp = t.plugins.path().join("counter.so.tmp");
    std::fs::write(&tmp, b"\x7fELF truncated").unwrap();
    std::fs::rename(&tmp, &target).unwrap();
    t.host.reload(target.clone()).await;
    assert_eq!(
        t.host.call("counter", "get", json!({})).await.unwrap(),
        json!(2)
    );
    assert!(!t.reports_with("reload refused").is_empty());

    // A fix recovers; removing the file unloads.
    replace_library("dsh-fixture-counter-v1", &target);
    t.host.reload(target.clone()).await;
    assert_eq!(
        t.host.call("counter", "get", json!({})).await.unwrap(),
        json!(1)
    );
    std::fs::remove_file(&target).unwrap();
    t.host.remove(target.clone()).await;
    assert_eq!(
        t.host
            .call("counter", "get", json!({}))
            .await
            .unwrap_err()
            .code,
        "SERVICE_UNAVAILABLE"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_plugin_hands_its_state_to_the_next_generation_on_reload() {
    let t = TestHost::start().await;
    let target = t.plugins.path().join("counter.so");
    std::fs::copy(library("dsh-fixture-counter-v1"), &target).unwrap();
    t.apply("[[row]]\nid = 'counter'\nplugin = 'counter'\n")
        .await;
    for _ in 0..3 {
        t.host.call("tally", "add", json!({})).await.unwrap();
    }
    // A rebuilt library (another version of the same plugin) inherits the
    // count the disposed generation handed over.
    replace_library("dsh-fixture-counter-v2", &target);
    t.host.reload(target.clone()).await;
    assert_eq!(
        t.host.call("counter", "get", json!({})).await.unwrap(),
        json!(2)
    );
    assert_eq!(
        t.host.call("tally", "get", json!({})).await.unwrap(),
        json!(3)
    );
    t.host.call("tally", "add", json!({})).await.unwrap();
    replace_library("dsh-fixture-counter-v1", &target);
    t.host.reload(target.clone()).await;
    assert_eq!(
        t.host.call("counter", "get", json!({})).await.unwrap(),
        json!(1)
    );
    assert_eq!(
        t.host.call("tally", "get", json!({})).await.unwrap(),
        json!(4)
    );
    // A row removed and added again starts afresh: state goes only to the
    // successor of the same row.
    t.apply("").await;
    t.apply("[[row]]\nid = 'counter'\nplugin = 'counter'\n")
        .await;
    assert_eq!(
        t.host.call("tally", "get", json!({})).await.unwrap(),
        json!(0)
    );
    t.shutdown().await;
}
