//! Every event of the original's own logs (`fixtures/original/`) reads
//! into the typed vocabulary and writes back byte for byte: key orders,
//! unknown fields, unknown message sources and unknown block types
//! included. A malformed core event is a `SESSION_CORRUPT` naming its seq,
//! type and field.

use std::path::Path;

use dsh_sdk::api::commands::{CommandDone, CommandRun};
use dsh_sdk::vocab::compaction::{
    CompactionEnd, CompactionPrune, CompactionStart, CompactionSummary,
};
use dsh_sdk::vocab::records::*;
use dsh_sdk::vocab::{event, Message, SessionEvent, SessionHeader};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// One line of a snapshot: the original leaves out `seq` and `time`.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(borrow)]
    data: Option<&'a RawValue>,
}

/// `text` read as `T` and written back.
fn again<T: DeserializeOwned + Serialize>(text: &str) -> Result<String, String> {
    let typed: T = serde_json::from_str(text).map_err(|e| e.to_string())?;
    serde_json::to_string(&typed).map_err(|e| e.to_string())
}

/// The data of a `kind` event through its record type; `None` for a type
/// the core vocabulary does not type (a plugin's own).
fn through_its_type(kind: &str, text: &str) -> Option<Result<String, String>> {
    Some(match kind {
        event::TURN_START => again::<TurnStart>(text),
        event::TURN_END => again::<TurnEnd>(text),
        event::STEP_START | event::STEP_END => again::<StepBoundary>(text),
        event::USER_MESSAGE => again::<Message>(text),
        event::ASSISTANT_CHUNK => again::<AssistantChunk>(text),
        event::ASSISTANT_MESSAGE => again::<AssistantMessage>(text),
        event::TOOL_CALL => again::<ToolCall>(text),
        event::TOOL_RESULT => again::<ToolResult>(text),
        event::TODO_WRITE => again::<TodoWrite>(text),
        event::REQUEST_HEADER => again::<RequestHeaderRecord>(text),
        event::REQUEST_CONTEXT => again::<RequestContext>(text),
        event::SESSION_END_SEED => again::<EndSeed>(text),
        event::INBOX_SPLICED => again::<InboxSpliced>(text),
        event::LLM_RETRY => again::<LlmRetry>(text),
        "llm/retry-started" => again::<LlmRetryStarted>(text),
        "command/run" => again::<CommandRun>(text),
        "command/done" => again::<CommandDone>(text),
        "compaction/start" => again::<CompactionStart>(text),
        "compaction/summary" => again::<CompactionSummary>(text),
        "compaction/end" => again::<CompactionEnd>(text),
        "compaction/prune" => again::<CompactionPrune>(text),
        "permission/preset" => again::<PermissionPreset>(text),
        "sandbox/mode" => again::<SandboxMode>(text),
        "plan/mode" => again::<PlanMode>(text),
        "approval/policy" => again::<ApprovalPolicy>(text),
        "approval/asked" => again::<ApprovalAsked>(text),
        "approval/decided" => again::<ApprovalDecided>(text),
        "session/title" => again::<SessionTitle>(text),
        "hook/invoked" => again::<HookInvoked>(text),
        "hook/result" => again::<HookResult>(text),
        _ => return None,
    })
}

#[test]
fn every_event_of_the_originals_logs_round_trips_through_its_type_byte_for_byte() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/original");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    let (mut typed, mut kinds) = (0, std::collections::BTreeSet::new());
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let mut lines = text.lines();
        let header: SessionHeader =
            serde_json::from_str(lines.next().unwrap()).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        assert_eq!(header.version, 0);
        for (n, line) in lines.enumerate() {
            let l: Line<'_> = serde_json::from_str(line).unwrap();
            let data = l.data.unwrap().get();
            let Some(back) = through_its_type(&l.kind, data) else {
                continue;
            };
            let back =
                back.unwrap_or_else(|e| panic!("{file:?} line {}: {}: {e}\n{data}", n + 2, l.kind));
            assert_eq!(back, data, "{file:?} line {}: {}", n + 2, l.kind);
            typed += 1;
            kinds.insert(l.kind);
        }
    }
    // The logs exercise the core vocabulary broadly.
    assert!(typed > 300, "{typed}");
    for kind in [
        event::TURN_START,
        event::TURN_END,
        event::USER_MESSAGE,
        event::ASSISTANT_CHUNK,
        event::ASSISTANT_MESSAGE,
        event::TOOL_CALL,
        event::TOOL_RESULT,
        event::REQUEST_HEADER,
        event::INBOX_SPLICED,
        event::LLM_RETRY,
        "compaction/summary",
    ] {
        assert!(
            kinds.contains(kind),
            "{kind} not in the fixtures: {kinds:?}"
        );
    }
}

#[test]
fn a_malformed_core_event_is_session_corrupt_naming_seq_type_and_field() {
    let event: SessionEvent = serde_json::from_str(
        r#"{"type":"tool/result","seq":7,"time":1,"surfaceOp":"append","data":{"turn":1,"step":1,"message":{"id":"r","role":"user","content":[{"type":"tool-result","toolCallId":"c","content":[{"type":"text","text":5}]}],"source":{"kind":"tool","callId":"c"}}}}"#,
    )
    .unwrap();
    let err = event.data_as::<ToolResult>().unwrap_err();
    assert_eq!(err.code, "SESSION_CORRUPT");
    assert!(
        err.message
            .starts_with("session event 7 (tool/result) has malformed data at `message`"),
        "{}",
        err.message
    );
    assert!(err.message.contains("content"), "{}", err.message);
    let end: SessionEvent =
        serde_json::from_str(r#"{"type":"turn/end","seq":3,"time":1,"data":{"turn":"one","reason":{"kind":"completed"}}}"#)
            .unwrap();
    let err = end.data_as::<TurnEnd>().unwrap_err();
    assert!(
        err.message.starts_with(
            "session event 3 (turn/end) has malformed data at `turn`: invalid type: string \"one\""
        ),
        "{}",
        err.message
    );
}
