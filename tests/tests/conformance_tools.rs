//! Conformance with reference dsh-core §10.4 (tools), §10.5 (system prompt)
//! and §10.6 (scope): real plugin builds in a real host, one test per
//! behavior of the original's test files (see
//! `tests/conformance/10.4-10.6-tools-prompt-scope.md`).

use std::time::{Duration, Instant};

use dsh_sdk::codes;
use dsh_testkit::tools::{run, text_of};
use dsh_testkit::{library, TempDir, TestHost};
use serde_json::{json, Value};

// ---------------------------------------------------------------- helpers

fn probe_row(id: &str, extra: &str) -> String {
    format!("[[row]]\nid = \"{id}\"\nplugin = \"probe\"\n[row.config]\ntag = \"{id}\"\n{extra}\n")
}

fn stage_probe(t: &TestHost) {
    std::fs::copy(
        library("dsh-fixture-probe"),
        t.plugins.path().join("probe.so"),
    )
    .unwrap();
}

async fn journal(t: &TestHost, tag: &str) -> Vec<String> {
    let v = t.call(&format!("probe:{tag}"), "journal", json!({})).await;
    serde_json::from_value(v).unwrap()
}

/// The events probe `tag` heard, in order.
async fn heard(t: &TestHost, tag: &str) -> Vec<String> {
    journal(t, tag)
        .await
        .into_iter()
        .filter(|e| e.starts_with("event:"))
        .collect()
}

/// Polls `check` until it holds, failing after a generous deadline.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}

async fn link(t: &TestHost, tag: &str, child: &str, parent: &str) -> Result<Value, dsh_sdk::Error> {
    t.host
        .call(
            &format!("probe:{tag}"),
            "scope_parent",
            json!({"child": child, "parent": parent}),
        )
        .await
}

async fn rebind(
    t: &TestHost,
    tag: &str,
    child: &str,
    parent: &str,
) -> Result<Value, dsh_sdk::Error> {
    t.host
        .call(
            &format!("probe:{tag}"),
            "scope_rebind",
            json!({"child": child, "parent": parent}),
        )
        .await
}

/// Emits `agent/x` for each scope, then a uniquely named marker for
/// `marker_scope` that the probe `tag` hears; returns what it heard from
/// these emits before the marker (the inbox is FIFO, so nothing it was
/// going to hear from them can arrive after the marker).
async fn deliveries(t: &TestHost, tag: &str, scopes: &[&str], marker_scope: &str) -> Vec<String> {
    let before = heard(t, tag).await.len();
    for s in scopes {
        t.host.emit("agent/x", s, json!(s));
    }
    let marker = format!("marker-{before}");
    t.host.emit("agent/x", marker_scope, json!(marker));
    let marker = format!("event:agent/x:\"{marker}\"");
    eventually("the marker is heard", || async {
        heard(t, tag).await.contains(&marker)
    })
    .await;
    let all = heard(t, tag).await;
    let at = all.iter().position(|e| *e == marker).unwrap();
    all[before..at].to_vec()
}

// ------------------------------------------------------------- §10.6 scope

#[tokio::test]
async fn scope_parent_chain_links_once_rejects_cycles_and_rebinds_only_via_its_binding() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let rows = format!(
        "{}{}",
        probe_row(
            "a",
            "listeners = [{ event = \"agent/x\", action = \"record\", scope = \"p1\" }]"
        ),
        probe_row("b", ""),
    );
    t.apply(&rows).await;
    link(&t, "a", "c", "p1").await.unwrap();
    // Links once: a second link of `c`, from anyone, is refused.
    let e = link(&t, "a", "c", "p2").await.unwrap_err();
    assert_eq!(e.code, codes::SCOPE_ALREADY_BOUND, "{e}");
    let e = link(&t, "b", "c", "p2").await.unwrap_err();
    assert_eq!(e.code, codes::SCOPE_ALREADY_BOUND, "{e}");
    // Cycles are refused: itself, its parent, and a longer loop.
    let e = link(&t, "a", "x", "x").await.unwrap_err();
    assert_eq!(e.code, codes::SCOPE_CYCLE, "{e}");
    let e = link(&t, "a", "p1", "c").await.unwrap_err();
    assert_eq!(e.code, codes::SCOPE_CYCLE, "{e}");
    link(&t, "a", "g", "c").await.unwrap();
    let e = link(&t, "a", "p1", "g").await.unwrap_err();
    assert_eq!(e.code, codes::SCOPE_CYCLE, "{e}");
    // The refused links changed nothing: `c` and `g` still descend from p1.
    assert_eq!(
        deliveries(&t, "a", &["c", "g", "p2"], "p1").await,
        ["event:agent/x:\"c\"", "event:agent/x:\"g\""]
    );
    // Rebinding goes through the binding only, and not into a cycle.
    let e = rebind(&t, "a", "c", "g").await.unwrap_err();
    assert_eq!(e.code, codes::SCOPE_CYCLE, "{e}");
    rebind(&t, "a", "c", "p2").await.unwrap();
    assert_eq!(
        deliveries(&t, "a", &["c"], "p1").await,
        Vec::<String>::new()
    );
    t.shutdown().await;
}

#[tokio::test]
async fn ancestor_listeners_hear_descendants_never_the_reverse() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let rows = format!(
        "{}{}{}",
        probe_row(
            "root",
            "listeners = [{ event = \"agent/x\", action = \"record\", scope = \"r\" }]"
        ),
        probe_row(
            "leaf",
            "listeners = [{ event = \"agent/x\", action = \"record\", scope = \"r.k.l\" }]"
        ),
        probe_row(
            "all",
            "listeners = [{ event = \"agent/x\", action = \"record\" }]"
        ),
    );
    t.apply(&rows).await;
    link(&t, "root", "r.k", "r").await.unwrap();
    link(&t, "root", "r.k.l", "r.k").await.unwrap();
    // The root hears itself and every descendant, never a stranger.
    assert_eq!(
        deliveries(&t, "root", &["r.k.l", "r.k", "s", ""], "r").await,
        ["event:agent/x:\"r.k.l\"", "event:agent/x:\"r.k\""]
    );
    // The leaf hears only itself: not its ancestors, not unscoped ones.
    assert_eq!(
        deliveries(&t, "leaf", &["r", "r.k", ""], "r.k.l").await,
        Vec::<String>::new()
    );
    // Untagged listeners are global: they hear every scope and none.
    eventually("the untagged listener hears every scope", || async {
        heard(&t, "all").await.len() == 9
    })
    .await;
    let all = heard(&t, "all").await;
    for s in ["r.k.l", "r.k", "s", "", "r", "marker-0", "marker-1"] {
        assert!(
            all.contains(&format!("event:agent/x:\"{s}\"")),
            "{s} missing from {all:?}"
        );
    }
    t.shutdown().await;
}

#[tokio::test]
async fn a_scope_link_ends_with_the_fiber_that_made_it() {
    let t = TestHost::start().await;
    stage_probe(&t);
    let listener = probe_row(
        "l",
        "listeners = [{ event = \"agent/x\", action = \"record\", scope = \"p\" }]",
    );
    t.apply(&format!("{listener}{}", probe_row("linker", "")))
        .await;
    link(&t, "linker", "c", "p").await.unwrap();
    assert_eq!(
        deliveries(&t, "l", &["c"], "p").await,
        ["event:agent/x:\"c\""]
    );
    // The linker is disposed: its link goes, and `c` may be linked anew.
    t.apply(&listener).await;
    assert_eq!(deliveries(&t, "l", &["c"], "p").await, Vec::<String>::new());
    link(&t, "l", "c", "q").await.unwrap();
    t.shutdown().await;
}
