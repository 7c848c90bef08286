//! Conformance rows of the fourth wave (reference dsh-core §10): the JSONL
//! writer packs streamed delta runs the way the original's `packChunks`
//! does and reads them back losslessly (§10.8). Real host, real cdylib
//! plugins, the fake model server. Rows: `tests/CONFORMANCE.md`.

use dsh_testkit::agent::{core_host, events, new_agent, turn};
use dsh_testkit::fake_llm::text;
use dsh_testkit::headless::lines;
use serde_json::{json, Value};

const CWD: &str = "/conformance/w4";

/// A streamed answer's text deltas land on disk as one `text-chunks` row
/// (no verbatim delta line), and the log reads back exactly the events the
/// live session holds.
#[tokio::test]
async fn a_streamed_answer_is_stored_packed_and_reloads_losslessly() {
    let (t, fake) = core_host(|rows| rows).await;
    fake.push([text("one two three four five")]);
    let agent = new_agent(&t, CWD).await;
    assert_eq!(
        turn(&t, &agent, "count").await,
        json!({"kind": "completed"})
    );
    t.call("sessions", "flush", json!({"id": agent})).await;

    let located = t
        .call("sessionPersistence", "locate", json!({"id": agent}))
        .await;
    let path = located["path"]
        .as_str()
        .unwrap_or_else(|| panic!("locate gave no path: {located}"));
    let stored = lines(std::path::Path::new(path));
    let rows: Vec<&Value> = stored
        .iter()
        .filter(|l| l["type"] == "text-chunks")
        .collect();
    assert_eq!(rows.len(), 1, "one packed row: {stored:?}");
    assert_eq!(
        rows[0]["data"]["texts"],
        json!(["one ", "two ", "three ", "four ", "five"])
    );
    let verbatim_deltas = stored
        .iter()
        .filter(|l| l["type"] == "assistant/chunk" && l["data"]["chunk"]["type"] == "text-delta")
        .count();
    assert_eq!(
        verbatim_deltas, 0,
        "no delta is stored verbatim: {stored:?}"
    );

    let live = events(&t, &agent).await;
    let reloaded = t
        .call("sessionPersistence", "inspect", json!({"id": agent}))
        .await;
    let as_text =
        |events: &[Value]| -> Vec<String> { events.iter().map(Value::to_string).collect() };
    let reloaded: Vec<Value> = serde_json::from_value(reloaded["events"].clone())
        .unwrap_or_else(|e| panic!("inspect gave no events: {e}"));
    assert_eq!(as_text(&reloaded), as_text(&live), "byte for byte");
    t.shutdown().await;
}
