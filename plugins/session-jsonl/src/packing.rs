//! Packed chunk rows (the original's `packChunks`, reference dsh-core
//! §8.3): a run of at least [`MIN_RUN`] consecutive delta chunks of one
//! block is stored as one row instead of one line each,
//!
//! ```text
//! {"type":"text-chunks"|"reasoning-chunks","seq0","time0","data":{"turn","step","index","dt","texts"}}
//! {"type":"tool-call-chunks","seq0","time0","data":{"turn","step","index","dt","id","name"?,"args"}}
//! ```
//!
//! and read back into the very events it was built from. Both directions
//! go through one serde type, [`PackedRow`] with a [`TextRun`] or a
//! [`CallRun`], whose fields are the original's in its order: writing
//! ([`storage_lines`]) and reading ([`Unpacked`]) cannot disagree on a
//! name. The writer fills them with typed values, the reader with whatever
//! JSON a stored row holds.
//!
//! The whitelist is the typed vocabulary's delta chunk, exactly: an
//! `assistant/chunk` packs when its data reads as `{turn, step, chunk}`
//! with integer placement (`u64`, as `AssistantChunk` and `Chunk` have
//! them) and a `text-delta`, `reasoning-delta` or `tool-call-delta` chunk
//! of exactly its fields with string payloads. Anything else (a placement
//! of `1.0` or `-1`, an extra field, a `null` name) is stored verbatim and
//! loses only compression, so every stored line reads back as the event
//! it was written from, byte for byte.

use std::borrow::Cow;

use dsh_sdk::vocab::event::ASSISTANT_CHUNK;
use dsh_sdk::vocab::SessionEvent;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::fields::{self, Object};

pub use dsh_sdk::vocab::MAX_SAFE_INTEGER;

/// Fewest members a packed run holds (the original's `MIN_RUN`): below it a
/// row's envelope rivals the lines it replaces. A format constant: both
/// layouts decode the same, so it never invalidates a stored log.
pub const MIN_RUN: usize = 3;

/// A packed row's `type`: which deltas its members are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RowKind {
    /// `text-chunks`: `text-delta` chunks.
    #[serde(rename = "text-chunks")]
    Text,
    /// `reasoning-chunks`: `reasoning-delta` chunks.
    #[serde(rename = "reasoning-chunks")]
    Reasoning,
    /// `tool-call-chunks`: `tool-call-delta` chunks.
    #[serde(rename = "tool-call-chunks")]
    ToolCall,
}

impl RowKind {
    /// The packed row a storage row's `type` names; `None` for an event.
    pub fn of_row(row_type: &str) -> Option<RowKind> {
        match row_type {
            "text-chunks" => Some(RowKind::Text),
            "reasoning-chunks" => Some(RowKind::Reasoning),
            "tool-call-chunks" => Some(RowKind::ToolCall),
            _ => None,
        }
    }
}

/// A packed row as stored: `type`, `seq0`, `time0`, `data`, in that order.
/// Member `k` is the event of seq `seq0 + k` and time `time0 + dt[..k]`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(deserialize = "D: DeserializeOwned"))]
pub struct PackedRow<D> {
    /// Which deltas the members are.
    #[serde(rename = "type")]
    pub kind: RowKind,
    /// The first member's seq.
    pub seq0: u64,
    /// The first member's time (epoch ms).
    pub time0: u64,
    /// The run's placement and members; only ever an object.
    #[serde(deserialize_with = "fields::object")]
    pub data: D,
}

/// `data` of a `text-chunks` or `reasoning-chunks` row: the placement
/// (`turn`, `step`, `index`) as `N`, the members as `S`.
///
/// The writer stores integers and strings ([`WrittenText`]). The reader
/// takes what a stored row holds ([`StoredText`]: JSON values, copied onto
/// every member as they are written, an absent one reading as `null`), as
/// it always has.
#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(deserialize = "N: Deserialize<'de> + Default, S: Deserialize<'de>"))]
pub struct TextRun<N, S> {
    /// The members' turn.
    #[serde(default)]
    pub turn: N,
    /// The members' step.
    #[serde(default)]
    pub step: N,
    /// The members' block index.
    #[serde(default)]
    pub index: N,
    /// The gaps between consecutive members' times, in ms (see [`gaps`]).
    #[serde(default, deserialize_with = "gaps")]
    pub dt: Vec<i64>,
    /// Each member's `text`.
    pub texts: Vec<S>,
}

/// `data` of a `tool-call-chunks` row (placement and members as in
/// [`TextRun`]).
#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(deserialize = "N: Deserialize<'de> + Default, S: Deserialize<'de> + Default"))]
pub struct CallRun<N, S> {
    /// The members' turn.
    #[serde(default)]
    pub turn: N,
    /// The members' step.
    #[serde(default)]
    pub step: N,
    /// The members' block index.
    #[serde(default)]
    pub index: N,
    /// The gaps between consecutive members' times, in ms (see [`gaps`]).
    #[serde(default, deserialize_with = "gaps")]
    pub dt: Vec<i64>,
    /// The members' call id.
    #[serde(default)]
    pub id: S,
    /// The members' tool name: on every member or on none (`None` when the
    /// row has no `name`; a stored `null` one is kept).
    #[serde(
        default,
        deserialize_with = "fields::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub name: Option<S>,
    /// Each member's `argumentsDelta`.
    pub args: Vec<S>,
}

/// A text or reasoning run as a stored row holds it (any JSON).
pub type StoredText = TextRun<Value, Value>;
/// A tool-call run as a stored row holds it (any JSON).
pub type StoredCall = CallRun<Value, Value>;
/// A text or reasoning run as the writer builds it.
pub type WrittenText<'a> = TextRun<u64, Cow<'a, str>>;
/// A tool-call run as the writer builds it.
pub type WrittenCall<'a> = CallRun<u64, Cow<'a, str>>;

/// `dt` as the reader has always taken it: the writer stores integers; a
/// `dt` that is not an array reads as no gaps, and an entry that is not an
/// integer as a gap of 0. (Read as a tree: a stored row's `dt` may be any
/// JSON.)
fn gaps<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<i64>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(gaps) => gaps.iter().map(|g| g.as_i64().unwrap_or(0)).collect(),
        _ => Vec::new(),
    })
}

/// One storage line of a packed batch.
#[derive(Serialize)]
#[serde(untagged)]
pub enum Row<'a> {
    /// An event stored verbatim: its tree, as the packing writer has always
    /// written it (so numbers in serde_json's canonical form).
    Event(Value),
    /// A run of text or reasoning deltas.
    Text(PackedRow<WrittenText<'a>>),
    /// A run of tool-call deltas.
    Call(PackedRow<WrittenCall<'a>>),
}

/// The data of a member read back into its `assistant/chunk` event, keys
/// in the live event's order.
#[derive(Serialize)]
struct MemberData<'r> {
    turn: &'r Value,
    step: &'r Value,
    chunk: MemberChunk<'r>,
}

/// The chunk of a member read back, keys in the live chunk's order.
#[derive(Serialize)]
#[serde(tag = "type")]
enum MemberChunk<'r> {
    #[serde(rename = "text-delta")]
    Text { index: &'r Value, text: &'r Value },
    #[serde(rename = "reasoning-delta")]
    Reasoning { index: &'r Value, text: &'r Value },
    #[serde(rename = "tool-call-delta")]
    ToolCall {
        index: &'r Value,
        id: &'r Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<&'r Value>,
        #[serde(rename = "argumentsDelta")]
        arguments_delta: &'r Value,
    },
}

/// A packed row read from a storage line, not yet expanded (so its
/// members can be counted against the caps first).
#[derive(Debug)]
pub enum Unpacked {
    /// A `text-chunks` or `reasoning-chunks` row.
    Text(PackedRow<StoredText>),
    /// A `tool-call-chunks` row.
    Call(PackedRow<StoredCall>),
}

impl Unpacked {
    /// The row of `kind` on `line`, read straight from its text; `None`
    /// when it is not one, or repeats a key (which [`Unpacked::from_record`]
    /// reads as the tree does).
    pub fn parse(line: &str, kind: RowKind) -> Option<Unpacked> {
        let row = match kind {
            RowKind::ToolCall => Unpacked::Call(serde_json::from_str(line).ok()?),
            RowKind::Text | RowKind::Reasoning => Unpacked::Text(serde_json::from_str(line).ok()?),
        };
        (row.kind() == kind).then_some(row)
    }

    /// The row of `kind` a parsed record holds; `None` when it is not one.
    pub fn from_record(record: Value, kind: RowKind) -> Option<Unpacked> {
        let row = match kind {
            RowKind::ToolCall => Unpacked::Call(PackedRow::deserialize(record).ok()?),
            RowKind::Text | RowKind::Reasoning => {
                Unpacked::Text(PackedRow::deserialize(record).ok()?)
            }
        };
        (row.kind() == kind).then_some(row)
    }

    fn kind(&self) -> RowKind {
        match self {
            Unpacked::Text(row) => row.kind,
            Unpacked::Call(row) => row.kind,
        }
    }

    /// How many events the row expands to.
    pub fn members(&self) -> usize {
        match self {
            Unpacked::Text(row) => row.data.texts.len(),
            Unpacked::Call(row) => row.data.args.len(),
        }
    }

    /// The events the row was built from; `None` when a member's seq or
    /// time leaves the integers (no writer stores such a row).
    pub fn expand(&self) -> Option<Vec<SessionEvent>> {
        match self {
            Unpacked::Text(row) => {
                let d = &row.data;
                let text = row.kind == RowKind::Text;
                expand(row.seq0, row.time0, &d.dt, &d.texts, |member| MemberData {
                    turn: &d.turn,
                    step: &d.step,
                    chunk: if text {
                        MemberChunk::Text {
                            index: &d.index,
                            text: member,
                        }
                    } else {
                        MemberChunk::Reasoning {
                            index: &d.index,
                            text: member,
                        }
                    },
                })
            }
            Unpacked::Call(row) => {
                let d = &row.data;
                expand(row.seq0, row.time0, &d.dt, &d.args, |member| MemberData {
                    turn: &d.turn,
                    step: &d.step,
                    chunk: MemberChunk::ToolCall {
                        index: &d.index,
                        id: &d.id,
                        name: d.name.as_ref(),
                        arguments_delta: member,
                    },
                })
            }
        }
    }
}

/// The events of a run: member `k` at seq `seq0 + k` and time `time0` plus
/// the first `k` gaps (a missing gap is 0; a time before the epoch reads
/// as 0, as the original's reader clamps it).
fn expand<'r>(
    seq0: u64,
    time0: u64,
    dt: &[i64],
    members: &'r [Value],
    data: impl Fn(&'r Value) -> MemberData<'r>,
) -> Option<Vec<SessionEvent>> {
    let mut time = i64::try_from(time0).ok()?;
    let mut out = Vec::with_capacity(members.len());
    for (k, member) in members.iter().enumerate() {
        if k > 0 {
            time = time.checked_add(dt.get(k - 1).copied().unwrap_or(0))?;
        }
        // Serializing borrowed JSON values cannot fail.
        let data = serde_json::to_value(data(member)).ok()?;
        out.push(SessionEvent {
            kind: ASSISTANT_CHUNK.into(),
            seq: seq0.checked_add(k as u64)?,
            time: time.max(0) as u64,
            data: data.into(),
            source_event_seqs: None,
            surface_op: None,
            ignorable: None,
        });
    }
    Some(out)
}

/// `assistant/chunk` data in the one form that packs: exactly `{turn,
/// step, chunk}`, read with the field types of
/// `dsh_sdk::vocab::records::AssistantChunk` (the placement `u64`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PackableData<'a> {
    turn: u64,
    step: u64,
    #[serde(borrow, deserialize_with = "fields::object")]
    chunk: PackableDelta<'a>,
}

/// A delta chunk that packs: one of `dsh_sdk::vocab::Chunk`'s deltas with
/// exactly its fields (`index` a `u64`, the payloads strings; a tool
/// call's `name` absent or a string, never `null`).
#[derive(Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
enum PackableDelta<'a> {
    #[serde(rename = "text-delta")]
    Text {
        index: u64,
        #[serde(borrow)]
        text: Text<'a>,
    },
    #[serde(rename = "reasoning-delta")]
    Reasoning {
        index: u64,
        #[serde(borrow)]
        text: Text<'a>,
    },
    #[serde(rename = "tool-call-delta", rename_all = "camelCase")]
    ToolCall {
        index: u64,
        #[serde(borrow)]
        id: Text<'a>,
        #[serde(borrow, default, deserialize_with = "fields::present")]
        name: Option<Text<'a>>,
        #[serde(borrow)]
        arguments_delta: Text<'a>,
    },
}

/// A string of a chunk, borrowed from the event's text when it holds no
/// escape.
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// A run member: an `assistant/chunk` event whose whole shape the
/// whitelist accepted, read into what a row stores of it.
struct Delta<'a> {
    event: &'a SessionEvent,
    kind: RowKind,
    turn: u64,
    step: u64,
    index: u64,
    /// The `text` (text and reasoning) or the `argumentsDelta` (tool call).
    member: Cow<'a, str>,
    /// A tool call's call (`None` for text and reasoning).
    call: Option<CallOf<'a>>,
}

/// The call a tool-call delta belongs to.
#[derive(Clone, PartialEq)]
struct CallOf<'a> {
    /// The call id.
    id: Cow<'a, str>,
    /// The tool's name; `None` when the chunk has none.
    name: Option<Cow<'a, str>>,
}

/// Classifies an event for packing (the original's whitelist, read as the
/// typed delta chunk): a delta when its entire shape is recognised (bare
/// envelope, [`PackableData`]) and its seq and time are safe integers, so
/// the original's reader reconstructs them exactly; anything else is
/// stored verbatim and loses only compression.
fn classify(event: &SessionEvent) -> Option<Delta<'_>> {
    let bare_envelope = event.source_event_seqs.is_none()
        && event.surface_op.is_none()
        && event.ignorable.is_none();
    if event.kind != ASSISTANT_CHUNK
        || !bare_envelope
        || event.seq > MAX_SAFE_INTEGER
        || event.time > MAX_SAFE_INTEGER
    {
        return None;
    }
    // Straight from the event's text (borrowing its strings), or from its
    // tree when it was read already; only ever an object.
    let Object(data) = match event.data.unread_text() {
        Some(text) => serde_json::from_str::<Object<PackableData<'_>>>(text).ok()?,
        None => Object::<PackableData<'_>>::deserialize(event.data.value()).ok()?,
    };
    let (kind, index, member, call) = match data.chunk {
        PackableDelta::Text { index, text } => (RowKind::Text, index, text.0, None),
        PackableDelta::Reasoning { index, text } => (RowKind::Reasoning, index, text.0, None),
        PackableDelta::ToolCall {
            index,
            id,
            name,
            arguments_delta,
        } => {
            let call = CallOf {
                id: id.0,
                name: name.map(|n| n.0),
            };
            (RowKind::ToolCall, index, arguments_delta.0, Some(call))
        }
    };
    Some(Delta {
        event,
        kind,
        turn: data.turn,
        step: data.step,
        index,
        member,
        call,
    })
}

/// The gap from `prev` to `next` when the original's reader adds it back
/// exactly (both times are safe integers, so every gap is).
fn time_gap(prev: &SessionEvent, next: &SessionEvent) -> Option<i64> {
    let gap = i64::try_from(next.time).ok()? - i64::try_from(prev.time).ok()?;
    (gap.unsigned_abs() <= MAX_SAFE_INTEGER).then_some(gap)
}

/// Whether `next` extends a run ending in `prev`: same kind, the next seq, a
/// representable gap, the same turn, step and block, and for tool calls the
/// same id and the same name (present on both with one value, or on neither).
fn continues(prev: &Delta<'_>, next: &Delta<'_>) -> bool {
    next.kind == prev.kind
        && Some(next.event.seq) == prev.event.seq.checked_add(1)
        && time_gap(prev.event, next.event).is_some()
        && next.turn == prev.turn
        && next.step == prev.step
        && next.index == prev.index
        && next.call == prev.call
}

/// The row of a completed run (members [`continues`] chained), fields in
/// the original's order; `None` for an empty run.
fn build_row(run: Vec<Delta<'_>>) -> Option<Row<'_>> {
    let first = run.first()?;
    let (kind, seq0, time0) = (first.kind, first.event.seq, first.event.time);
    let (turn, step, index) = (first.turn, first.step, first.index);
    let call = first.call.clone();
    let dt: Vec<i64> = run
        .windows(2)
        .filter_map(|w| time_gap(w[0].event, w[1].event))
        .collect();
    let members: Vec<Cow<'_, str>> = run.into_iter().map(|d| d.member).collect();
    Some(match call {
        None => Row::Text(PackedRow {
            kind,
            seq0,
            time0,
            data: TextRun {
                turn,
                step,
                index,
                dt,
                texts: members,
            },
        }),
        Some(call) => Row::Call(PackedRow {
            kind,
            seq0,
            time0,
            data: CallRun {
                turn,
                step,
                index,
                dt,
                id: call.id,
                name: call.name,
                args: members,
            },
        }),
    })
}

/// Appends a finished run: one row when it is long enough, else its events
/// verbatim.
fn flush_run<'a>(
    run: &mut Vec<Delta<'a>>,
    out: &mut Vec<Row<'a>>,
) -> Result<(), serde_json::Error> {
    if run.len() >= MIN_RUN {
        out.extend(build_row(std::mem::take(run)));
        return Ok(());
    }
    for d in run.drain(..) {
        out.push(Row::Event(serde_json::to_value(d.event)?));
    }
    Ok(())
}

/// `packChunkRuns`: each run of at least [`MIN_RUN`] consecutive whitelisted
/// same-kind, same-block delta chunks becomes one storage row; every other
/// event passes through verbatim, in order. Stateless, so runs split by a
/// flush boundary simply pack per batch.
pub fn pack_chunk_runs(events: &[SessionEvent]) -> Result<Vec<Row<'_>>, serde_json::Error> {
    let mut out = Vec::with_capacity(events.len());
    let mut run: Vec<Delta<'_>> = Vec::new();
    for event in events {
        let Some(delta) = classify(event) else {
            flush_run(&mut run, &mut out)?;
            out.push(Row::Event(serde_json::to_value(event)?));
            continue;
        };
        if run.last().is_some_and(|last| !continues(last, &delta)) {
            flush_run(&mut run, &mut out)?;
        }
        run.push(delta);
    }
    flush_run(&mut run, &mut out)?;
    Ok(out)
}

/// A batch as JSONL storage lines: packed (`packChunks`) or every event
/// verbatim.
pub fn storage_lines(events: &[SessionEvent], pack: bool) -> Result<String, serde_json::Error> {
    let mut text = String::new();
    if pack {
        for row in pack_chunk_runs(events)? {
            text.push_str(&serde_json::to_string(&row)?);
            text.push('\n');
        }
        return Ok(text);
    }
    for event in events {
        text.push_str(&serde_json::to_string(event)?);
        text.push('\n');
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expand::Expansion;
    use crate::tail::{decode_line, scan};
    use crate::test_logs::HEAD;
    use serde_json::json;

    /// An `assistant/chunk` event with the exact live-append shape.
    fn chunk_event(seq: u64, time: u64, chunk: Value, turn: u64, step: u64) -> SessionEvent {
        SessionEvent {
            kind: "assistant/chunk".into(),
            seq,
            time,
            data: json!({"turn": turn, "step": step, "chunk": chunk}).into(),
            source_event_seqs: None,
            surface_op: None,
            ignorable: None,
        }
    }

    fn text(kind: &str, index: u64, t: &str) -> Value {
        json!({"type": kind, "index": index, "text": t})
    }

    fn call(index: u64, id: &str, name: Option<&str>, args: &str) -> Value {
        let mut c = json!({"type": "tool-call-delta", "index": index, "id": id});
        if let Some(name) = name {
            c["name"] = json!(name);
        }
        c["argumentsDelta"] = json!(args);
        c
    }

    /// Contiguous seqs from `seq0`, 10 ms apart, one kind and block.
    fn delta_run(kind: &str, count: u64, seq0: u64, index: u64) -> Vec<SessionEvent> {
        (0..count)
            .map(|k| {
                let t = format!("t{k}");
                chunk_event(seq0 + k, 1000 + 10 * k, text(kind, index, &t), 1, 1)
            })
            .collect()
    }

    /// The stored lines of a packed batch.
    fn packed_lines(events: &[SessionEvent]) -> Vec<Value> {
        storage_lines(events, true)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn texts(events: &[SessionEvent]) -> Vec<String> {
        events
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect()
    }

    /// Packs, writes as text, decodes each line back; asserts the result is
    /// the batch exactly (byte for byte, key order included), and that a
    /// packed row read from its tree expands as one read from its text.
    fn assert_round_trips(events: &[SessionEvent]) {
        let lines = storage_lines(events, true).unwrap();
        let mut decoded = Vec::new();
        for line in lines.lines() {
            decoded.extend(decode_line(line, Expansion::default(), usize::MAX).unwrap());
            let tree: Value = serde_json::from_str(line).unwrap();
            let Some(kind) = tree["type"].as_str().and_then(RowKind::of_row) else {
                continue;
            };
            let from_text = Unpacked::parse(line, kind).unwrap().expand().unwrap();
            let from_tree = Unpacked::from_record(tree, kind).unwrap().expand().unwrap();
            assert_eq!(texts(&from_tree), texts(&from_text), "{line}");
        }
        assert_eq!(texts(&decoded), texts(events));
    }

    /// Asserts the batch is stored one event per line, unchanged.
    fn assert_verbatim(events: &[SessionEvent]) {
        let lines = packed_lines(events);
        let expected: Vec<Value> = events
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect();
        assert_eq!(lines, expected);
    }

    #[test]
    fn a_text_delta_run_packs_into_one_text_chunks_row_and_round_trips() {
        let events = delta_run("text-delta", 5, 0, 0);
        let lines = storage_lines(&events, true).unwrap();
        assert_eq!(
            lines,
            "{\"type\":\"text-chunks\",\"seq0\":0,\"time0\":1000,\"data\":{\"turn\":1,\"step\":1,\"index\":0,\"dt\":[10,10,10,10],\"texts\":[\"t0\",\"t1\",\"t2\",\"t3\",\"t4\"]}}\n",
            "the original's row format, field order included"
        );
        assert_round_trips(&events);
    }

    #[test]
    fn reasoning_and_tool_call_runs_pack_under_their_own_tags() {
        let mut events = delta_run("reasoning-delta", 3, 0, 0);
        for seq in 3..6 {
            events.push(chunk_event(
                seq,
                1000 + seq,
                call(1, "c1", Some("write"), &format!("a{seq}")),
                1,
                1,
            ));
        }
        let lines = packed_lines(&events);
        let tags: Vec<&str> = lines.iter().filter_map(|l| l["type"].as_str()).collect();
        assert_eq!(tags, ["reasoning-chunks", "tool-call-chunks"]);
        assert_eq!(
            serde_json::to_string(&lines[1]["data"]).unwrap(),
            "{\"turn\":1,\"step\":1,\"index\":1,\"dt\":[1,1],\"id\":\"c1\",\"name\":\"write\",\"args\":[\"a3\",\"a4\",\"a5\"]}"
        );
        assert_round_trips(&events);
    }

    #[test]
    fn a_name_less_tool_call_run_packs_without_a_name_and_round_trips() {
        let events: Vec<SessionEvent> = (0..3)
            .map(|seq| chunk_event(seq, 1000, call(0, "c1", None, &format!("a{seq}")), 1, 1))
            .collect();
        let lines = packed_lines(&events);
        assert_eq!(lines.len(), 1);
        assert!(lines[0]["data"].get("name").is_none(), "{}", lines[0]);
        assert_round_trips(&events);
    }

    #[test]
    fn runs_shorter_than_three_stay_verbatim() {
        assert_verbatim(&delta_run("text-delta", 2, 0, 0));
        assert_verbatim(&delta_run("text-delta", 1, 0, 0));
    }

    #[test]
    fn non_delta_chunks_and_other_events_stay_verbatim_between_runs() {
        let mut events = vec![chunk_event(
            0,
            1000,
            json!({"type": "block-start", "index": 0, "blockType": "text"}),
            1,
            1,
        )];
        events.extend(delta_run("text-delta", 3, 1, 0));
        events.push(chunk_event(
            4,
            1040,
            json!({"type": "block-end", "index": 0, "block": {"type": "text", "text": "t0t1t2"}}),
            1,
            1,
        ));
        events.push(SessionEvent {
            kind: "step/end".into(),
            ..chunk_event(5, 1050, json!(null), 1, 1)
        });
        events.push(chunk_event(
            6,
            1060,
            json!({"type": "finish", "reason": {"kind": "stop"}}),
            1,
            1,
        ));
        let lines = packed_lines(&events);
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[1]["type"], "text-chunks");
        for (line, event) in [(0, 0), (2, 4), (3, 5), (4, 6)] {
            assert_eq!(lines[line], serde_json::to_value(&events[event]).unwrap());
        }
        assert_round_trips(&events);
    }

    #[test]
    fn a_run_breaks_on_a_seq_gap_kind_block_step_or_turn_switch() {
        let mut seq_gap = delta_run("text-delta", 3, 0, 0);
        seq_gap[2].seq = 9;
        let mut kind_switch = delta_run("text-delta", 2, 0, 0);
        kind_switch.extend(delta_run("reasoning-delta", 1, 2, 0));
        let mut block_switch = delta_run("text-delta", 2, 0, 0);
        block_switch.extend(delta_run("text-delta", 1, 2, 7));
        let mut step_switch = delta_run("text-delta", 3, 0, 0);
        step_switch[2].data["step"] = json!(2);
        let mut turn_switch = delta_run("text-delta", 3, 0, 0);
        turn_switch[2].data["turn"] = json!(2);
        let mut same_value_other_number = delta_run("text-delta", 3, 0, 0);
        same_value_other_number[2].data["turn"] = json!(1.0);
        for batch in [
            seq_gap,
            kind_switch,
            block_switch,
            step_switch,
            turn_switch,
            same_value_other_number,
        ] {
            assert_verbatim(&batch);
            assert_round_trips(&batch);
        }
    }

    #[test]
    fn a_tool_call_run_breaks_on_a_call_id_or_name_change() {
        let run = |calls: [(&str, Option<&str>); 3]| -> Vec<SessionEvent> {
            calls
                .iter()
                .zip(0..)
                .map(|((id, name), seq)| chunk_event(seq, 1000, call(0, id, *name, "a"), 1, 1))
                .collect()
        };
        let id_switch = run([("c1", Some("w")), ("c1", Some("w")), ("c2", Some("w"))]);
        let name_presence = run([("c1", Some("w")), ("c1", Some("w")), ("c1", None)]);
        let name_value = run([("c1", Some("w")), ("c1", Some("w")), ("c1", Some("r"))]);
        for batch in [id_switch, name_presence, name_value] {
            assert_verbatim(&batch);
        }
    }

    #[test]
    fn off_whitelist_shapes_stay_verbatim() {
        let delta = |seq: u64| chunk_event(seq, 1000, text("text-delta", 0, "x"), 1, 1);
        let with_data = |seq: u64, data: Value| SessionEvent {
            data: data.into(),
            ..delta(seq)
        };
        let events = vec![
            SessionEvent {
                surface_op: Some(json!("append")),
                ..delta(0)
            },
            SessionEvent {
                source_event_seqs: Some(vec![0]),
                ..delta(1)
            },
            SessionEvent {
                ignorable: Some(true),
                ..delta(2)
            },
            with_data(3, json!("not-an-object")),
            with_data(
                4,
                json!({"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "a"}, "extra": 1}),
            ),
            with_data(
                5,
                json!({"turn": "x", "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "a"}}),
            ),
            with_data(6, json!({"turn": 1, "step": 1, "chunk": "not-an-object"})),
            with_data(
                7,
                json!({"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": "x", "text": "a"}}),
            ),
            with_data(
                8,
                json!({"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": 7}}),
            ),
            with_data(
                9,
                json!({"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "a", "extra": 1}}),
            ),
            with_data(
                10,
                json!({"turn": 1, "step": 1, "chunk": {"type": "tool-call-delta", "index": 0, "id": 7, "argumentsDelta": "a"}}),
            ),
            with_data(
                11,
                json!({"turn": 1, "step": 1, "chunk": {"type": "tool-call-delta", "index": 0, "id": "c", "name": 7, "argumentsDelta": "a"}}),
            ),
            with_data(
                12,
                json!({"turn": 1, "step": 1, "chunk": {"type": "tool-call-delta", "index": 0, "id": "c", "argumentsDelta": 1}}),
            ),
        ];
        assert_verbatim(&events);
    }

    #[test]
    fn only_what_the_typed_delta_chunk_reads_packs() {
        let run = |chunk: Value, turn: Value| -> Vec<SessionEvent> {
            (0..3)
                .map(|seq| SessionEvent {
                    data: json!({"turn": turn, "step": 1, "chunk": chunk}).into(),
                    ..chunk_event(seq, 1000, json!(null), 1, 1)
                })
                .collect()
        };
        let delta = json!({"type": "text-delta", "index": 0, "text": "x"});
        for batch in [
            // Placements the typed chunk has as `u64` only.
            run(
                json!({"type": "text-delta", "index": 1.0, "text": "x"}),
                json!(1),
            ),
            run(
                json!({"type": "text-delta", "index": -1, "text": "x"}),
                json!(1),
            ),
            run(delta.clone(), json!(2.0)),
            run(delta.clone(), json!(-1)),
            // A `null` name is not an absent one.
            run(
                json!({"type": "tool-call-delta", "index": 0, "id": "c", "name": null, "argumentsDelta": "a"}),
                json!(1),
            ),
            // A chunk or data that is not an object, field by field.
            run(json!(["text-delta", 0, "x"]), json!(1)),
        ] {
            assert_verbatim(&batch);
            assert_round_trips(&batch);
        }
        let arrays: Vec<SessionEvent> = (0..3)
            .map(|seq| SessionEvent {
                data: json!([1, 1, delta]).into(),
                ..chunk_event(seq, 1000, json!(null), 1, 1)
            })
            .collect();
        assert_verbatim(&arrays);
        // Escaped strings pack (read owned, not borrowed) and come back.
        let escaped = run(
            json!({"type": "text-delta", "index": 0, "text": "a\"b\n\u{1F600}"}),
            json!(1),
        );
        assert_eq!(packed_lines(&escaped).len(), 1);
        assert_round_trips(&escaped);
    }

    #[test]
    fn events_still_in_their_text_pack_as_events_read_into_trees() {
        let mut rng = Rng(0x5EED_0000_1234_5678);
        for _ in 0..300 {
            let trees = run_heavy_batch(&mut rng);
            let unread: Vec<SessionEvent> = trees
                .iter()
                .map(|e| serde_json::from_str(&serde_json::to_string(e).unwrap()).unwrap())
                .collect();
            assert!(unread.iter().all(|e| e.data.unread_text().is_some()));
            assert_eq!(
                storage_lines(&unread, true).unwrap(),
                storage_lines(&trees, true).unwrap()
            );
        }
    }

    #[test]
    fn times_and_seqs_the_original_cannot_hold_exactly_stay_verbatim() {
        // A fractional time cannot reach the writer: `SessionEvent::time` is
        // an integer. What can is a time (or seq) past 2^53 - 1, which the
        // original's reader would round, and with it the gap to it.
        let huge = MAX_SAFE_INTEGER + 1;
        let huge_gap: Vec<SessionEvent> = [0, huge, huge + 1]
            .iter()
            .zip(0..)
            .map(|(time, seq)| chunk_event(seq, *time, text("text-delta", 0, "x"), 1, 1))
            .collect();
        assert_verbatim(&huge_gap);
        assert_round_trips(&huge_gap);
        let huge_seq: Vec<SessionEvent> = (0..3)
            .map(|k| {
                chunk_event(
                    MAX_SAFE_INTEGER - 1 + k,
                    1,
                    text("text-delta", 0, "x"),
                    1,
                    1,
                )
            })
            .collect();
        let lines = packed_lines(&huge_seq);
        assert_eq!(lines.len(), 3, "the seq past the bound breaks the run");
        // The widest gap within the bound is exact, so it packs.
        let widest: Vec<SessionEvent> = [0, MAX_SAFE_INTEGER, 5]
            .iter()
            .zip(0..)
            .map(|(time, seq)| chunk_event(seq, *time, text("text-delta", 0, "x"), 1, 1))
            .collect();
        assert_eq!(
            packed_lines(&widest)[0]["data"]["dt"],
            json!([MAX_SAFE_INTEGER, 5 - MAX_SAFE_INTEGER as i64])
        );
        assert_round_trips(&widest);
    }

    #[test]
    fn a_clock_stepping_back_packs_a_negative_gap_and_round_trips() {
        let events: Vec<SessionEvent> = [1000, 990, 995]
            .iter()
            .zip(0..)
            .map(|(time, seq)| chunk_event(seq, *time, text("text-delta", 0, "x"), 1, 1))
            .collect();
        assert_eq!(packed_lines(&events)[0]["data"]["dt"], json!([-10, 5]));
        assert_round_trips(&events);
    }

    #[test]
    fn without_pack_chunks_every_event_is_one_verbatim_line() {
        let events = delta_run("text-delta", 4, 0, 0);
        let expected: String = events
            .iter()
            .map(|e| format!("{}\n", serde_json::to_string(e).unwrap()))
            .collect();
        assert_eq!(storage_lines(&events, false).unwrap(), expected);
    }

    /// A small deterministic generator (xorshift64*), so the property runs
    /// the same batches every time.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
        }
    }

    fn arbitrary_chunk(rng: &mut Rng) -> Value {
        let index = rng.below(3);
        let t = ["", "a", "b", "\u{1F600}"][rng.below(4) as usize];
        let id = ["c1", "c2"][rng.below(2) as usize];
        let name = [None, Some("write"), Some("read")][rng.below(3) as usize];
        match rng.below(6) {
            0 | 1 => text("text-delta", index, t),
            2 => text("reasoning-delta", index, t),
            3 | 4 => call(index, id, name, t),
            _ => [
                json!({"type": "block-start", "index": index, "blockType": "text"}),
                json!({"type": "finish", "reason": {"kind": "stop"}}),
            ][rng.below(2) as usize]
                .clone(),
        }
    }

    #[test]
    fn pack_then_decode_reproduces_every_generated_batch_exactly() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut packed_rows = 0;
        for _ in 0..2000 {
            let len = rng.below(40);
            let events: Vec<SessionEvent> = (0..len)
                .map(|seq| {
                    let time = match rng.below(5) {
                        0 => rng.below(MAX_SAFE_INTEGER + 1),
                        _ => 995 + rng.below(8000),
                    };
                    let chunk = arbitrary_chunk(&mut rng);
                    chunk_event(seq, time, chunk, rng.below(2), rng.below(2))
                })
                .collect();
            packed_rows += packed_lines(&events)
                .iter()
                .filter(|l| l.get("seq0").is_some())
                .count();
            assert_round_trips(&events);
        }
        assert!(packed_rows > 0, "the generator produces packable runs");
    }

    /// Batches of long runs broken now and then: a kind, block, name or
    /// turn switch, a clock stepping back, a time past 2^53 - 1.
    fn run_heavy_batch(rng: &mut Rng) -> Vec<SessionEvent> {
        let len = rng.below(60);
        let mut time = 1000u64;
        let mut turn = 1u64;
        (0..len)
            .map(|seq| {
                time = match rng.below(10) {
                    0 => time.saturating_sub(rng.below(50)),
                    1 => rng.below(MAX_SAFE_INTEGER + 3),
                    _ => time + rng.below(30),
                };
                if rng.below(25) == 0 {
                    turn += 1;
                }
                let t = ["", "a", "\u{1F600}", "x\"y"][rng.below(4) as usize];
                let chunk = match rng.below(12) {
                    0 => arbitrary_chunk(rng),
                    1..=5 => text("text-delta", 0, t),
                    6 | 7 => text("reasoning-delta", 1, t),
                    8 => call(2, "c1", None, t),
                    _ => call(2, "c1", Some("write"), t),
                };
                chunk_event(seq, time, chunk, turn, 1)
            })
            .collect()
    }

    /// FNV-1a: a digest whose algorithm is fixed (std's hasher is not).
    fn fnv1a(bytes: &[u8]) -> u64 {
        bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    const DIGEST: u64 = 1_045_406_432_400_375_239;

    #[test]
    fn the_typed_rows_write_and_read_the_bytes_the_tree_rows_did() {
        // The digest of 1500 run-heavy batches as stored and as read back,
        // taken from the writer and reader that built the rows as JSON
        // trees (before `PackedRow`): the typed ones must match them byte
        // for byte (2,453 packed rows of all three kinds).
        let mut rng = Rng(0x0F0F_1234_5678_9ABC);
        let mut all = String::new();
        let mut rows = 0;
        for _ in 0..1500 {
            let events = run_heavy_batch(&mut rng);
            let stored = storage_lines(&events, true).unwrap();
            rows += stored.matches("\"seq0\":").count();
            let s = scan(format!("{HEAD}{stored}").as_bytes(), Expansion::default()).unwrap();
            assert_eq!(s.torn_at, None);
            all.push_str(&stored);
            for e in &s.events {
                all.push_str(&serde_json::to_string(e).unwrap());
                all.push('\n');
            }
        }
        assert!(rows > 2000, "{rows} packed rows");
        assert_eq!(fnv1a(all.as_bytes()), DIGEST, "{rows} packed rows");
    }

    #[test]
    fn packed_rows_expand() {
        let head = "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0}\n";
        let row = "{\"type\":\"text-chunks\",\"seq0\":0,\"time0\":10,\"data\":{\"turn\":1,\"step\":1,\"index\":0,\"dt\":[1,2],\"texts\":[\"a\",\"b\",\"c\"]}}\n";
        let s = scan(format!("{head}{row}").as_bytes(), Expansion::default()).unwrap();
        assert_eq!(s.events.len(), 3);
        assert_eq!(s.events[2].time, 13);
        assert_eq!(
            s.events[1].data["chunk"],
            json!({"type": "text-delta", "index": 0, "text": "b"})
        );
    }

    #[test]
    fn a_name_less_tool_call_run_decodes_without_a_name() {
        let row = "{\"type\":\"tool-call-chunks\",\"seq0\":0,\"time0\":10,\"data\":{\"turn\":1,\"step\":1,\"index\":0,\"id\":\"c1\",\"dt\":[0,0],\"args\":[\"{\",\"}\",\"\"]}}\n";
        let s = scan(format!("{HEAD}{row}").as_bytes(), Expansion::default()).unwrap();
        assert_eq!(s.events.len(), 3);
        for (k, e) in s.events.iter().enumerate() {
            assert!(
                e.data["chunk"].get("name").is_none(),
                "member {k} keeps the name absent: {}",
                e.data["chunk"]
            );
        }
        assert_eq!(
            serde_json::to_string(&s.events[1]).unwrap(),
            "{\"type\":\"assistant/chunk\",\"seq\":1,\"time\":10,\"data\":{\"turn\":1,\"step\":1,\"chunk\":{\"type\":\"tool-call-delta\",\"index\":0,\"id\":\"c1\",\"argumentsDelta\":\"}\"}}}",
            "the exact event, key order included"
        );
    }

    #[test]
    fn a_named_tool_call_run_keeps_its_name_on_every_member() {
        let row = "{\"type\":\"tool-call-chunks\",\"seq0\":0,\"time0\":10,\"data\":{\"turn\":1,\"step\":1,\"index\":0,\"id\":\"c1\",\"name\":\"read\",\"dt\":[0,0],\"args\":[\"{\",\"}\",\"\"]}}\n";
        let s = scan(format!("{HEAD}{row}").as_bytes(), Expansion::default()).unwrap();
        assert_eq!(
            serde_json::to_string(&s.events[2].data["chunk"]).unwrap(),
            "{\"type\":\"tool-call-delta\",\"index\":0,\"id\":\"c1\",\"name\":\"read\",\"argumentsDelta\":\"\"}"
        );
    }

    #[test]
    fn a_negative_dt_decodes_to_an_earlier_time() {
        let row = "{\"type\":\"reasoning-chunks\",\"seq0\":4,\"time0\":100,\"data\":{\"turn\":2,\"step\":3,\"index\":1,\"dt\":[-5,3],\"texts\":[\"a\",\"b\",\"c\"]}}\n";
        let mut text = String::from(HEAD);
        for seq in 0..4 {
            text.push_str(&format!(
                "{{\"type\":\"todo/write\",\"seq\":{seq},\"time\":1,\"data\":{{\"todos\":[]}}}}\n"
            ));
        }
        text.push_str(row);
        let s = scan(text.as_bytes(), Expansion::default()).unwrap();
        let times: Vec<(u64, u64)> = s.events[4..].iter().map(|e| (e.seq, e.time)).collect();
        assert_eq!(times, [(4, 100), (5, 95), (6, 98)]);
        assert_eq!(
            s.events[5].data,
            json!({"turn": 2, "step": 3, "chunk": {"type": "reasoning-delta", "index": 1, "text": "b"}})
        );
    }
}
