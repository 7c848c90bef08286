//! The JSONL format of the original (reference dsh-core §8.3): path
//! encoding, the header record, packed chunk rows (`packChunks`: written
//! and read), the crash-tail scan, and durable writes.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{BufRead, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use dsh_sdk::vocab::event;
use dsh_sdk::vocab::{SessionEvent, SessionHeader};
use serde_json::{json, Map, Value};

use crate::expand::{largest_array, Expansion};
use crate::frames::{self, Framer};
use crate::limits::{size, Cap, FillError, Limits, Text, HEADER_MAX};
use crate::lock::{self, LogLock};

/// Session logs hold whole conversations: only their owner may read them.
pub const LOG_MODE: u32 = 0o600;
/// Directories of session logs (created at the first write), owner only.
pub const DIR_MODE: u32 = 0o700;

/// `encodeSegment`: `[A-Za-z0-9._-]` literal, everything else `~XXXX` per
/// UTF-16 unit; `.` and `..` are encoded whole.
pub fn encode_segment(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("an empty id cannot name a file".into());
    }
    if s == "." || s == ".." {
        return Ok("~002E".repeat(s.len()));
    }
    let mut out = String::new();
    for unit in s.encode_utf16() {
        let c = char::from_u32(u32::from(unit))
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        match c {
            Some(c) => out.push(c),
            None => out.push_str(&format!("~{unit:04X}")),
        }
    }
    Ok(out)
}

/// `projectKey(cwd)`: runs of `/ \ :` become one `-`, a leading `-` is
/// dropped (empty → `root`), unsafe units are `~XXXX`, 251 chars at most.
pub fn project_key(cwd: &str) -> String {
    let mut out = String::new();
    let mut last_sep = false;
    for unit in cwd.encode_utf16() {
        let c = char::from_u32(u32::from(unit));
        if matches!(c, Some('/' | '\\' | ':')) {
            if !last_sep {
                out.push('-');
            }
            last_sep = true;
            continue;
        }
        last_sep = false;
        match c.filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
            Some(c) => out.push(c),
            None => out.push_str(&format!("~{unit:04X}")),
        }
    }
    let out = out.strip_prefix('-').unwrap_or(&out).to_owned();
    let out = if out.is_empty() {
        "root".to_owned()
    } else {
        out
    };
    out.chars().take(251).collect()
}

/// The header record as stored (`delegationDepth` is required on disk).
pub fn header_line(h: &SessionHeader) -> String {
    let mut v = json!({"type": "session"});
    if let (Some(obj), Ok(Value::Object(hv))) = (v.as_object_mut(), serde_json::to_value(h)) {
        for (k, val) in hv {
            obj.insert(k, val);
        }
        obj.entry("delegationDepth").or_insert(json!(0));
    }
    format!("{v}\n")
}

/// What a scan found.
pub struct Scan {
    pub header: SessionHeader,
    pub events: Vec<SessionEvent>,
    /// Byte offset where a torn tail starts, if any.
    pub torn_at: Option<usize>,
}

/// Why a storage line was not decoded.
#[derive(Debug)]
pub enum LineError {
    /// The line is not a record (a torn or damaged line).
    Bad,
    /// The line would expand past a cap (see `expand`): the log is corrupt
    /// whatever follows.
    Over(String),
}

/// Decodes one storage line into events, at most `room` of them. An event
/// row is read straight into its event, its data kept as text; a packed
/// row (or a row whose fields come in another order) is parsed into a tree
/// and goes through [`decode`], once its arrays are counted
/// ([`largest_array`]) under `caps`.
fn decode_line(line: &str, caps: Expansion, room: usize) -> Result<Vec<SessionEvent>, LineError> {
    // As written, a row's type comes first.
    let row_type = line
        .strip_prefix(r#"{"type":""#)
        .and_then(|rest| rest.split('"').next());
    if row_type.and_then(packed_row).is_none() {
        if let Ok(e) = serde_json::from_str::<SessionEvent>(line) {
            if room == 0 {
                return Err(LineError::Over(caps.over_events()));
            }
            return Ok(vec![e]);
        }
    }
    let entries = largest_array(line.as_bytes());
    if entries > caps.row_members {
        return Err(LineError::Over(caps.over_row(entries)));
    }
    let record = serde_json::from_str::<Value>(line).map_err(|_| LineError::Bad)?;
    decode(record, caps, room)
}

/// A packed row type's chunk type and members field; `None` for an event
/// row.
fn packed_row(row_type: &str) -> Option<(&'static str, &'static str)> {
    match row_type {
        "text-chunks" => Some(("text-delta", "texts")),
        "reasoning-chunks" => Some(("reasoning-delta", "texts")),
        "tool-call-chunks" => Some(("tool-call-delta", "args")),
        _ => None,
    }
}

/// Decodes one storage record into at most `room` events (packed rows
/// expand, once their members are counted against `caps`).
fn decode(record: Value, caps: Expansion, room: usize) -> Result<Vec<SessionEvent>, LineError> {
    let kind = record["type"].as_str().unwrap_or_default();
    let Some((chunk_type, field)) = packed_row(kind) else {
        let e: SessionEvent = serde_json::from_value(record).map_err(|_| LineError::Bad)?;
        if room == 0 {
            return Err(LineError::Over(caps.over_events()));
        }
        return Ok(vec![e]);
    };
    let d = &record["data"];
    let seq0 = record["seq0"].as_u64().ok_or(LineError::Bad)?;
    let time0 = record["time0"].as_u64().ok_or(LineError::Bad)?;
    let items = d[field].as_array().ok_or(LineError::Bad)?;
    if items.len() > caps.row_members {
        return Err(LineError::Over(caps.over_row(items.len())));
    }
    if items.len() > room {
        return Err(LineError::Over(caps.over_events()));
    }
    let no_gaps = Vec::new();
    let dt = d["dt"].as_array().unwrap_or(&no_gaps);
    let mut time = time0 as i64;
    let mut out = Vec::with_capacity(items.len());
    for (k, item) in items.iter().enumerate() {
        if k > 0 {
            time += dt.get(k - 1).and_then(Value::as_i64).unwrap_or(0);
        }
        let chunk = if chunk_type == "tool-call-delta" {
            let mut c = json!({"type": chunk_type, "index": d["index"], "id": d["id"]});
            if let Some(name) = d.get("name") {
                c["name"] = name.clone();
            }
            c["argumentsDelta"] = item.clone();
            c
        } else {
            json!({"type": chunk_type, "index": d["index"], "text": item})
        };
        out.push(SessionEvent {
            kind: event::ASSISTANT_CHUNK.into(),
            seq: seq0 + k as u64,
            time: time.max(0) as u64,
            data: json!({"turn": d["turn"], "step": d["step"], "chunk": chunk}).into(),
            source_event_seqs: None,
            surface_op: None,
            ignorable: None,
        });
    }
    Ok(out)
}

/// Fewest members a packed run holds (the original's `MIN_RUN`): below it a
/// row's envelope rivals the lines it replaces. A format constant: both
/// layouts decode the same, so it never invalidates a stored log.
const MIN_RUN: usize = 3;
/// Largest integer the original's reader (JavaScript numbers) holds exactly.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// The chunk kinds that pack; block boundaries, usage and finish chunks
/// always stay one event per line.
#[derive(Clone, Copy, PartialEq)]
enum DeltaKind {
    Text,
    Reasoning,
    ToolCall,
}

impl DeltaKind {
    fn row_type(self) -> &'static str {
        match self {
            DeltaKind::Text => "text-chunks",
            DeltaKind::Reasoning => "reasoning-chunks",
            DeltaKind::ToolCall => "tool-call-chunks",
        }
    }
}

/// A run member: an `assistant/chunk` event whose whole shape the
/// whitelist accepted, with its chunk object.
struct Delta<'a> {
    event: &'a SessionEvent,
    kind: DeltaKind,
    data: &'a Map<String, Value>,
    chunk: &'a Map<String, Value>,
}

/// `value` has exactly `keys` (in any order) and nothing else.
fn has_exact_keys(value: &Map<String, Value>, keys: &[&str]) -> bool {
    value.len() == keys.len() && keys.iter().all(|k| value.contains_key(*k))
}

/// The packable kind of a whitelisted chunk object, else `None`.
fn delta_kind(chunk: &Map<String, Value>) -> Option<DeltaKind> {
    if !chunk.get("index").is_some_and(Value::is_number) {
        return None;
    }
    let kind = match chunk.get("type").and_then(Value::as_str)? {
        "text-delta" => DeltaKind::Text,
        "reasoning-delta" => DeltaKind::Reasoning,
        "tool-call-delta" => DeltaKind::ToolCall,
        _ => return None,
    };
    let shape_ok = match kind {
        DeltaKind::Text | DeltaKind::Reasoning => {
            has_exact_keys(chunk, &["type", "index", "text"]) && chunk["text"].is_string()
        }
        DeltaKind::ToolCall => {
            let named = has_exact_keys(chunk, &["type", "index", "id", "name", "argumentsDelta"])
                && chunk["name"].is_string();
            (named || has_exact_keys(chunk, &["type", "index", "id", "argumentsDelta"]))
                && chunk["id"].is_string()
                && chunk["argumentsDelta"].is_string()
        }
    };
    shape_ok.then_some(kind)
}

/// Classifies an event for packing (the original's whitelist): a delta when
/// its entire shape is recognised (bare envelope, `{turn, step, chunk}` data,
/// an exact delta chunk) and its seq and time are safe integers, so the
/// original's reader reconstructs them exactly; anything else is stored
/// verbatim and loses only compression.
fn classify(event: &SessionEvent) -> Option<Delta<'_>> {
    let bare_envelope = event.source_event_seqs.is_none()
        && event.surface_op.is_none()
        && event.ignorable.is_none();
    if event.kind != "assistant/chunk"
        || !bare_envelope
        || event.seq > MAX_SAFE_INTEGER
        || event.time > MAX_SAFE_INTEGER
    {
        return None;
    }
    let data = event.data.as_object()?;
    if !has_exact_keys(data, &["turn", "step", "chunk"])
        || !data["turn"].is_number()
        || !data["step"].is_number()
    {
        return None;
    }
    let chunk = data["chunk"].as_object()?;
    let kind = delta_kind(chunk)?;
    Some(Delta {
        event,
        kind,
        data,
        chunk,
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
/// Placement values compare exactly (`1` and `1.0` differ), so a packed run
/// decodes to the very values it was built from.
fn continues(prev: &Delta<'_>, next: &Delta<'_>) -> bool {
    let same_data = |key: &str| prev.data.get(key) == next.data.get(key);
    let same_chunk = |key: &str| prev.chunk.get(key) == next.chunk.get(key);
    next.kind == prev.kind
        && Some(next.event.seq) == prev.event.seq.checked_add(1)
        && time_gap(prev.event, next.event).is_some()
        && same_data("turn")
        && same_data("step")
        && same_chunk("index")
        && (next.kind != DeltaKind::ToolCall || (same_chunk("id") && same_chunk("name")))
}

/// The row for a completed run (at least [`MIN_RUN`] members that
/// [`continues`] chained), fields in the original's order.
fn build_row(run: &[Delta<'_>]) -> Value {
    let first = &run[0];
    let dt: Vec<i64> = run
        .windows(2)
        .filter_map(|w| time_gap(w[0].event, w[1].event))
        .collect();
    let mut data = Map::new();
    data.insert("turn".into(), first.data["turn"].clone());
    data.insert("step".into(), first.data["step"].clone());
    data.insert("index".into(), first.chunk["index"].clone());
    data.insert("dt".into(), json!(dt));
    let member = |key: &str| -> Value { run.iter().map(|d| d.chunk[key].clone()).collect() };
    if first.kind == DeltaKind::ToolCall {
        data.insert("id".into(), first.chunk["id"].clone());
        if let Some(name) = first.chunk.get("name") {
            data.insert("name".into(), name.clone());
        }
        data.insert("args".into(), member("argumentsDelta"));
    } else {
        data.insert("texts".into(), member("text"));
    }
    json!({
        "type": first.kind.row_type(),
        "seq0": first.event.seq,
        "time0": first.event.time,
        "data": data,
    })
}

/// Appends a finished run: one row when it is long enough, else its events
/// verbatim.
fn flush_run(run: &mut Vec<Delta<'_>>, out: &mut Vec<Value>) -> Result<(), serde_json::Error> {
    if run.len() >= MIN_RUN {
        out.push(build_row(run));
    } else {
        for d in run.iter() {
            out.push(serde_json::to_value(d.event)?);
        }
    }
    run.clear();
    Ok(())
}

/// `packChunkRuns`: each run of at least [`MIN_RUN`] consecutive whitelisted
/// same-kind, same-block delta chunks becomes one storage row; every other
/// event passes through verbatim, in order. Stateless, so runs split by a
/// flush boundary simply pack per batch.
pub fn pack_chunk_runs(events: &[SessionEvent]) -> Result<Vec<Value>, serde_json::Error> {
    let mut out = Vec::with_capacity(events.len());
    let mut run: Vec<Delta<'_>> = Vec::new();
    for event in events {
        let Some(delta) = classify(event) else {
            flush_run(&mut run, &mut out)?;
            out.push(serde_json::to_value(event)?);
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
        for record in pack_chunk_runs(events)? {
            text.push_str(&serde_json::to_string(&record)?);
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

/// Reads the header record (a log's first line): a v0 `session` record
/// without retired fields.
pub fn parse_header(line: &str) -> Result<SessionHeader, String> {
    let mut head: Value =
        serde_json::from_str(line.trim_end()).map_err(|e| format!("corrupt header: {e}"))?;
    if head["type"] != "session" {
        return Err("the first line is not a session header".into());
    }
    match head["version"].as_i64() {
        Some(0) => {}
        Some(v) if v < 0 => {
            return Err(format!(
                "the log uses format v{v}, older than the supported v0, and this build ships no upgrade path for it"
            ))
        }
        Some(v) => {
            return Err(format!(
                "the log uses format v{v}, but this harness reads only v0: the log was written by a newer harness — upgrade the harness to open it"
            ))
        }
        None => {
            return Err(format!(
                "corrupt header: version {} is not an integer",
                head["version"]
            ))
        }
    }
    for retired in ["sandboxMode", "approvalPolicy"] {
        if head.get(retired).is_some() {
            return Err(format!("retired header field `{retired}`"));
        }
    }
    if let Some(o) = head.as_object_mut() {
        o.remove("type");
    }
    serde_json::from_value(head).map_err(|e| format!("corrupt header: {e}"))
}

/// The type of a record, read without building its tree (the rest of the
/// line is skipped, not kept).
#[derive(serde::Deserialize)]
struct RowType<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
}

/// The type of the record on `line`; `None` when it is not an object with
/// a string `type`.
pub fn row_type(line: &str) -> Option<std::borrow::Cow<'_, str>> {
    if !line.trim_start().starts_with('{') {
        return None;
    }
    serde_json::from_str::<RowType<'_>>(line).ok()?.kind
}

/// Scans a stored log (crash-tail rules of the original): the first defect
/// (an unparsable line or a seq gap) starts a torn tail, unless a later
/// record holds a `turn/end`, which makes the log corrupt. A record that
/// would expand past `caps` makes the log corrupt too (see `expand`).
pub fn scan(bytes: &[u8], caps: Expansion) -> Result<Scan, String> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().ok_or("the file is empty")?;
    let header = parse_header(first)?;
    let mut events: Vec<SessionEvent> = Vec::new();
    let mut offset = first.len();
    let mut torn_at = None;
    for line in lines {
        let start = offset;
        offset += line.len();
        if torn_at.is_some() {
            // After a defect: a later complete turn/end means corruption.
            if line.ends_with('\n') && row_type(line.trim_end()).as_deref() == Some(event::TURN_END)
            {
                return Err(format!(
                    "a defect at byte {} precedes a completed turn",
                    torn_at.unwrap_or(0)
                ));
            }
            continue;
        }
        if !line.ends_with('\n') {
            torn_at = Some(start);
            continue;
        }
        let room = caps.events.saturating_sub(events.len());
        match decode_line(line.trim_end(), caps, room) {
            Err(LineError::Over(why)) => {
                return Err(format!("the record at text byte {start} {why}"));
            }
            Ok(evs)
                if evs
                    .iter()
                    .enumerate()
                    .all(|(k, e)| e.seq == (events.len() + k) as u64) =>
            {
                events.extend(evs)
            }
            _ => torn_at = Some(start),
        }
    }
    Ok(Scan {
        header,
        events,
        torn_at,
    })
}

fn fsync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

/// Creates `dir` and any missing parents with [`DIR_MODE`] (an existing
/// directory keeps its mode).
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Opens a fresh file with [`LOG_MODE`], whatever the umask allows more.
fn create_private_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(LOG_MODE)
        .open(path)
}

/// How a new log's bytes are encoded (config `compression`, as the
/// original's: `zstd` by default, `none` for plain JSONL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// `session.jsonl.zstd`: a checksummed frame holding only the header
    /// line, then one frame per durable append batch.
    Zstd,
    /// `session.jsonl`: newline-delimited UTF-8 text.
    None,
}

impl Compression {
    /// The transcript's file name in its session directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Compression::Zstd => "session.jsonl.zstd",
            Compression::None => "session.jsonl",
        }
    }
}

/// The bytes of a new log: header and first batch, as separate frames in a
/// zstd log (the original lists a session from its header frame alone).
fn first_bytes(
    path: &Path,
    header: &SessionHeader,
    events: &str,
    framer: &mut Framer,
) -> std::io::Result<Vec<u8>> {
    let head = header_line(header);
    if !is_zstd(path) {
        return Ok([head.as_bytes(), events.as_bytes()].concat());
    }
    let mut bytes = framer.frame(head.as_bytes())?;
    bytes.extend(framer.frame(events.as_bytes())?);
    Ok(bytes)
}

/// First write: header + batch into a temp file (locked, so the log is
/// locked from the moment it appears), fsync, then published without
/// overwriting (hard link) and the directory fsynced. A log that already
/// exists fails with `AlreadyExists` and is left as it was. A `.zstd` path
/// gets the original's frames.
pub fn publish_new(
    path: &Path,
    header: &SessionHeader,
    events: &str,
    framer: &mut Framer,
) -> std::io::Result<LogLock> {
    if let Some(dir) = path.parent() {
        create_private_dir(dir)?;
    }
    let bytes = first_bytes(path, header, events, framer)?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!("{name}.tmp-{}", std::process::id()));
    let written = create_private_file(&tmp).and_then(|f| {
        let lock = lock::lock_file(f)
            .map_err(|r| std::io::Error::other(format!("cannot lock {}: {r:?}", tmp.display())))?;
        let mut f = lock.file();
        f.write_all(&bytes)?;
        f.sync_all()?;
        Ok(lock)
    });
    let linked = written.and_then(|lock| std::fs::hard_link(&tmp, path).map(|()| lock));
    let _ = std::fs::remove_file(&tmp);
    let lock = linked?;
    fsync_dir(path);
    Ok(lock)
}

/// True for a zstd-framed log (`*.jsonl.zstd`).
pub fn is_zstd(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "zstd")
}

/// A log's text, and for a zstd log where its frames start, so a repair can
/// cut the file at a frame boundary.
pub struct Log {
    /// The decoded JSONL text: every complete frame, then what decodes of a
    /// torn final frame.
    pub text: Vec<u8>,
    /// zstd only: how much of `text` the complete frames hold.
    complete: usize,
    /// zstd only: file offset of a final frame the end of the file cuts off.
    torn_frame: Option<u64>,
    zstd: bool,
}

impl Log {
    /// True when the file's bytes end in a torn frame.
    pub fn is_torn(&self) -> bool {
        self.torn_frame.is_some()
    }

    /// The original's rule for a zstd log: a defect (an unparsable line, a
    /// seq gap, a line cut short) inside a complete frame is corruption;
    /// only the frame the file ends inside may be torn.
    pub fn check_defect(&self, torn_at: Option<usize>) -> Result<(), String> {
        match torn_at {
            Some(at) if self.zstd && at < self.complete => Err(format!(
                "corrupt Zstandard session log: a complete frame holds a damaged JSONL record (text byte {at})"
            )),
            _ => Ok(()),
        }
    }
}

fn corrupt(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why)
}

/// Opens the log at `path` with `options`, only as a regular file: with
/// `O_NOFOLLOW` (a symbolic link in its place is refused, never followed,
/// so a link to `/dev/zero` is not read), `O_NONBLOCK` (a FIFO named like a
/// log never blocks the open) and `O_CLOEXEC`, then checked on the open
/// descriptor. Anything else fails `InvalidData`, naming what it is.
pub fn open_log(path: &Path, options: &mut OpenOptions) -> std::io::Result<File> {
    let opened = options
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let file = match opened {
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(corrupt(format!(
                "{} is a symbolic link; a session log is read only from a regular file, never through a link",
                path.display()
            )))
        }
        other => other?,
    };
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        let what = dsh_sdk::file::irregular_kind(&kind).unwrap_or("not a regular file");
        return Err(corrupt(format!(
            "{} is {what}; a session log is read only from a regular file",
            path.display()
        )));
    }
    Ok(file)
}

/// [`open_log`] for reading.
pub fn open_log_read(path: &Path) -> std::io::Result<File> {
    open_log(path, OpenOptions::new().read(true))
}

/// Reads at most `cap` bytes of `file` (which grows no further here); a
/// file longer than that is refused, unread.
fn read_capped(file: File, cap: usize) -> std::io::Result<Vec<u8>> {
    let len = file.metadata()?.len();
    let over = || {
        corrupt(format!(
            "the file holds more than {}, the cap of a whole log (`maxLogBytes` in session-jsonl's config); it is refused unread and left as it is",
            size(cap)
        ))
    };
    if len > cap as u64 {
        return Err(over());
    }
    let mut raw = Vec::with_capacity(len as usize);
    file.take(cap as u64 + 1).read_to_end(&mut raw)?;
    if raw.len() > cap {
        return Err(over());
    }
    Ok(raw)
}

/// Reads a log under `limits` (see `limits`): zstd-framed logs (the
/// original's default) are decoded frame by frame, so a crash mid-append
/// loses only the frame being written. A zstd log that cannot be read as
/// the original reads it, or that inflates past a cap, fails `InvalidData`
/// (corruption); the file is not changed.
pub fn read(path: &Path, limits: Limits) -> std::io::Result<Log> {
    let raw = read_capped(open_log_read(path)?, limits.log)?;
    if !is_zstd(path) {
        return Ok(plain(raw));
    }
    decode_frames(&raw, limits)
}

/// A plain log's text.
fn plain(raw: Vec<u8>) -> Log {
    Log {
        complete: raw.len(),
        text: raw,
        torn_frame: None,
        zstd: false,
    }
}

/// The whole log at `path` when it decodes to at most `budget` bytes;
/// `None` when it is longer (the file, or what its frames inflate to), in
/// which case at most `budget` bytes were read and decoded. A log that
/// cannot be read fails as [`read`] does.
pub fn read_within(path: &Path, budget: usize) -> std::io::Result<Option<Log>> {
    let file = open_log_read(path)?;
    if file.metadata()?.len() > budget as u64 {
        return Ok(None);
    }
    let raw = read_capped(file, budget)?;
    if !is_zstd(path) {
        return Ok(Some(plain(raw)));
    }
    let limits = Limits {
        line: budget,
        log: budget,
    };
    match decode_capped(&raw, limits) {
        Ok(log) => Ok(Some(log)),
        Err(Refusal { over: true, .. }) => Ok(None),
        Err(r) => Err(r.error),
    }
}

/// Why [`decode_frames`] refused a log.
struct Refusal {
    /// A frame after the header inflated past a cap of the log (the line
    /// or the whole log), as opposed to bytes that break the format.
    over: bool,
    error: std::io::Error,
}

impl Refusal {
    fn corrupt(why: String) -> Refusal {
        Refusal {
            over: false,
            error: corrupt(why),
        }
    }

    /// Frame `n` (from 1) at byte `at` of the file ran into `cap`.
    fn over(n: usize, at: usize, cap: Cap) -> Refusal {
        Refusal {
            over: cap != Cap::Header,
            error: over_cap(n, at, cap),
        }
    }
}

/// The refusal of frame `n` (from 1) at byte `at` of the file, which ran
/// into `cap`.
fn over_cap(n: usize, at: usize, cap: Cap) -> std::io::Error {
    corrupt(format!(
        "corrupt Zstandard session log: frame {n} (at byte {at} of the file) {cap}; the log is refused unread and the file is left as it is"
    ))
}

/// The text of the zstd log `raw` under `limits` (see [`read`]).
fn decode_frames(raw: &[u8], limits: Limits) -> std::io::Result<Log> {
    decode_capped(raw, limits).map_err(|r| r.error)
}

/// [`decode_frames`], saying whether a refusal was a cap of the log.
fn decode_capped(raw: &[u8], limits: Limits) -> Result<Log, Refusal> {
    let scan = frames::scan(raw).map_err(Refusal::corrupt)?;
    let Some(&(h0, h1)) = scan.frames.first() else {
        return Err(Refusal::corrupt(
            "empty or header-less Zstandard session log".into(),
        ));
    };
    let mut text = Text::header();
    frames::decode(&raw[h0..h1], &mut text).map_err(|e| match e {
        FillError::Over(cap) => Refusal::over(1, h0, cap),
        FillError::Read(e) => Refusal::corrupt(format!(
            "corrupt Zstandard session log: the header frame does not decode ({e})"
        )),
    })?;
    check_header_frame(text.bytes()).map_err(|error| Refusal { over: false, error })?;
    let mut text = text.widen(limits);
    for (k, &(start, end)) in scan.frames.iter().enumerate().skip(1) {
        frames::decode(&raw[start..end], &mut text).map_err(|e| match e {
            FillError::Over(cap) => Refusal::over(k + 1, start, cap),
            FillError::Read(e) => Refusal::corrupt(format!(
                "corrupt Zstandard session log: the frame at byte {start} fails its checksum or does not decode ({e})"
            )),
        })?;
    }
    let complete = text.len();
    if let Some(at) = scan.torn_start {
        frames::decode_prefix(&raw[at..], &mut text)
            .map_err(|cap| Refusal::over(scan.frames.len() + 1, at, cap))?;
    }
    Ok(Log {
        text: text.into_bytes(),
        complete,
        torn_frame: scan.torn_start.map(|at| at as u64),
        zstd: true,
    })
}

/// The original's rule for the first frame: exactly one line, the header.
fn check_header_frame(text: &[u8]) -> std::io::Result<()> {
    if text.is_empty() || text.iter().position(|b| *b == b'\n') != Some(text.len() - 1) {
        return Err(corrupt(
            "corrupt Zstandard session log: first frame is not exactly one header line".into(),
        ));
    }
    Ok(())
}

/// A log's header alone, as the original lists sessions: the first frame
/// of a zstd log, or the first line of a plain one, decoded under
/// [`HEADER_MAX`] (nothing after it is read). A header that cannot be read
/// fails `InvalidData`.
pub fn read_header(path: &Path) -> std::io::Result<SessionHeader> {
    let file = open_log_read(path)?;
    let line = if is_zstd(path) {
        let text = frames::decode_first(file).map_err(|e| match e {
            FillError::Over(cap) => over_cap(1, 0, cap),
            FillError::Read(e) => corrupt(format!(
                "corrupt Zstandard session log: the header frame does not decode ({e})"
            )),
        })?;
        check_header_frame(text.bytes())?;
        text.into_bytes()
    } else {
        let mut line = Vec::new();
        std::io::BufReader::new(file.take(HEADER_MAX as u64 + 1)).read_until(b'\n', &mut line)?;
        if line.len() > HEADER_MAX {
            return Err(corrupt(format!(
                "the first line is longer than {}, the cap of the header line",
                size(HEADER_MAX)
            )));
        }
        line
    };
    parse_header(&String::from_utf8_lossy(&line)).map_err(corrupt)
}

/// Appends a batch and fsyncs (as one new frame in a zstd log); a failed
/// write is truncated back.
pub fn append(path: &Path, events: &str, framer: &mut Framer) -> std::io::Result<()> {
    let bytes = if is_zstd(path) {
        framer.frame(events.as_bytes())?
    } else {
        events.as_bytes().to_vec()
    };
    let mut f = open_log(path, OpenOptions::new().append(true))?;
    write_or_roll_back(&mut f, &bytes)
}

/// A log file as [`append`] writes it, so that the rollback can be checked
/// against a file that fails part way through a write.
trait LogFile: Write {
    fn size(&self) -> std::io::Result<u64>;
    fn sync(&mut self) -> std::io::Result<()>;
    fn truncate(&mut self, len: u64) -> std::io::Result<()>;
}

impl LogFile for File {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.sync_all()
    }
    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        self.set_len(len)
    }
}

/// Writes `bytes` durably, or cuts the file back to its length before the
/// write: a failed append never leaves half a line for the next one to
/// follow (the original's append rollback).
fn write_or_roll_back(f: &mut impl LogFile, bytes: &[u8]) -> std::io::Result<()> {
    let before = f.size()?;
    if let Err(e) = f.write_all(bytes).and_then(|_| f.sync()) {
        let _ = f.truncate(before);
        return Err(e);
    }
    Ok(())
}

/// Truncates a torn tail (`torn_at` is a text offset from [`scan`]) and
/// appends the closers, durably. In a zstd log the cut falls on the start of
/// the torn final frame, and the complete lines that decoded from it are
/// written again (with the closers, as one frame).
pub fn repair(
    path: &Path,
    log: &Log,
    torn_at: Option<usize>,
    closers: &[SessionEvent],
    framer: &mut Framer,
) -> std::io::Result<()> {
    let (cut, mut text) = if log.zstd {
        match log.torn_frame {
            Some(at) => {
                let end = torn_at.unwrap_or(log.text.len()).max(log.complete);
                let kept = String::from_utf8_lossy(&log.text[log.complete..end]).into_owned();
                (Some(at), kept)
            }
            None => (None, String::new()),
        }
    } else {
        (torn_at.map(|at| at as u64), String::new())
    };
    if let Some(at) = cut {
        let f = open_log(path, OpenOptions::new().write(true))?;
        f.set_len(at)?;
        f.sync_all()?;
    }
    for c in closers {
        text.push_str(&serde_json::to_string(c).map_err(std::io::Error::other)?);
        text.push('\n');
    }
    if !text.is_empty() {
        append(path, &text, framer)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log that takes `room` more bytes, then fails every write; its
    /// sync can be made to fail too.
    struct FailingLog {
        data: Vec<u8>,
        room: usize,
        sync_fails: bool,
    }

    impl Write for FailingLog {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::Error::other("no space left"));
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            self.data.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl LogFile for FailingLog {
        fn size(&self) -> std::io::Result<u64> {
            Ok(self.data.len() as u64)
        }
        fn sync(&mut self) -> std::io::Result<()> {
            if self.sync_fails {
                return Err(std::io::Error::other("sync failed"));
            }
            Ok(())
        }
        fn truncate(&mut self, len: u64) -> std::io::Result<()> {
            self.data.truncate(len as usize);
            Ok(())
        }
    }

    #[test]
    fn a_failed_append_is_truncated_back_to_the_prior_length() {
        let prior = b"{\"type\":\"turn/start\"}\n".to_vec();
        let line = b"{\"type\":\"turn/end\"}\n";
        // The write fails part way through the line.
        let mut log = FailingLog {
            data: prior.clone(),
            room: 5,
            sync_fails: false,
        };
        let failed = write_or_roll_back(&mut log, line);
        assert_eq!(
            failed.map_err(|e| e.to_string()),
            Err("no space left".into())
        );
        assert_eq!(log.data, prior);
        // The whole line was written but could not be made durable.
        let mut log = FailingLog {
            data: prior.clone(),
            room: usize::MAX,
            sync_fails: true,
        };
        assert!(write_or_roll_back(&mut log, line).is_err());
        assert_eq!(log.data, prior);
        // A good write keeps both.
        let mut log = FailingLog {
            data: prior.clone(),
            room: usize::MAX,
            sync_fails: false,
        };
        write_or_roll_back(&mut log, line).unwrap();
        assert_eq!(log.data, [prior.as_slice(), line].concat());
    }

    #[test]
    fn encodings_match_the_original() {
        assert_eq!(encode_segment("session-1").unwrap(), "session-1");
        assert_eq!(encode_segment("a/b~c").unwrap(), "a~002Fb~007Ec");
        assert_eq!(encode_segment("..").unwrap(), "~002E~002E");
        assert_eq!(project_key("/home/u/my project"), "home-u-my~0020project");
        assert_eq!(project_key("/"), "root");
    }

    #[test]
    fn torn_tail_and_corruption() {
        let head = "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0}\n";
        let e0 = "{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1}}\n";
        let torn = format!("{head}{e0}{{\"type\":\"step/st");
        let s = scan(torn.as_bytes(), Expansion::default()).unwrap();
        assert_eq!(s.events.len(), 1);
        assert_eq!(s.torn_at, Some(head.len() + e0.len()));
        let corrupt = format!("{head}garbage\n{{\"type\":\"turn/end\",\"seq\":1,\"time\":1,\"data\":{{\"turn\":1,\"reason\":{{\"kind\":\"completed\"}}}}}}\n");
        assert!(scan(corrupt.as_bytes(), Expansion::default()).is_err());
    }

    const HEAD: &str =
        "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0}\n";

    fn line(kind: &str, seq: u64) -> String {
        let data = if kind == event::TURN_END {
            json!({"turn": 1, "reason": {"kind": "completed"}})
        } else {
            json!({"turn": 1})
        };
        format!(
            "{}\n",
            json!({"type": kind, "seq": seq, "time": 1, "data": data})
        )
    }

    fn frame(text: &str) -> Vec<u8> {
        Framer::new().unwrap().frame(text.as_bytes()).unwrap()
    }

    /// A zstd log in a fresh temp file, from raw frame bytes.
    fn zstd_file(name: &str, raw: &[u8]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("dsh-zstd-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("session.jsonl.zstd");
        std::fs::write(&path, raw).unwrap();
        path
    }

    fn corruption(raw: &[u8]) -> String {
        let err = decode_frames(raw, Limits::default()).err().unwrap();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        err.to_string()
    }

    #[test]
    fn a_torn_zstd_frame_is_cut_off_and_its_complete_lines_written_again() {
        let mut framer = Framer::new().unwrap();
        let second = line(event::STEP_START, 1);
        let mut raw = [
            frame(HEAD),
            frame(&line(event::TURN_START, 0)),
            frame(&second),
        ]
        .concat();
        let whole = raw.len();
        // A frame that decodes to one whole line and part of the next.
        // Noise over several 128 KiB blocks, so the blocks before the cut
        // decode.
        let mut x: u64 = 1;
        let noise: String = (0..400_000)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                char::from(b'a' + (x >> 59) as u8)
            })
            .collect();
        let big = format!("{}{noise}", line(event::STEP_END, 2));
        let third = framer.frame(big.as_bytes()).unwrap();
        raw.extend_from_slice(&third[..third.len() - 10]);
        let path = zstd_file("torn", &raw);
        let log = read(&path, Limits::default()).unwrap();
        assert!(log.is_torn());
        let s = scan(&log.text, Expansion::default()).unwrap();
        assert_eq!(s.events.len(), 3, "the torn frame's whole line is kept");
        log.check_defect(s.torn_at).unwrap();
        repair(&path, &log, s.torn_at, &[], &mut framer).unwrap();
        let again = read(&path, Limits::default()).unwrap();
        assert!(!again.is_torn());
        assert!(std::fs::metadata(&path).unwrap().len() > whole as u64);
        let expected = format!(
            "{HEAD}{}{second}{}",
            line(event::TURN_START, 0),
            line(event::STEP_END, 2)
        );
        assert_eq!(String::from_utf8(again.text).unwrap(), expected);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_defect_inside_a_complete_zstd_frame_is_corruption() {
        let good = line(event::STEP_START, 1);
        let raw = [
            frame(HEAD),
            frame(&line(event::TURN_START, 0)),
            frame(&format!("{good}garbage\n")),
        ]
        .concat();
        let log = decode_frames(&raw, Limits::default()).unwrap();
        let s = scan(&log.text, Expansion::default()).unwrap();
        assert!(log.check_defect(s.torn_at).is_err());
        // A frame whose text stops mid-line is damaged the same way.
        let raw = [frame(HEAD), frame("{\"type\":\"turn/st")].concat();
        let log = decode_frames(&raw, Limits::default()).unwrap();
        assert!(log
            .check_defect(scan(&log.text, Expansion::default()).unwrap().torn_at)
            .is_err());
    }

    #[test]
    fn a_bad_checksum_a_bad_magic_or_a_header_frame_with_more_is_corruption() {
        let mut bad = frame(&line(event::STEP_START, 1));
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        let raw = [frame(HEAD), bad].concat();
        assert!(
            corruption(&raw).contains("checksum"),
            "{}",
            corruption(&raw)
        );
        let mut magic = frame(&line(event::STEP_START, 1));
        magic[0] ^= 0xff;
        let raw = [frame(HEAD), magic].concat();
        assert!(corruption(&raw).contains("invalid frame magic"));
        let together = frame(&format!("{HEAD}{}", line(event::TURN_START, 0)));
        assert!(corruption(&together).contains("exactly one header line"));
        assert!(corruption(&frame(HEAD)[..5]).contains("header-less"));
    }

    #[test]
    fn the_header_alone_is_read_from_the_first_frame_or_line() {
        let rest = line(event::TURN_START, 0);
        let zstd = zstd_file("header", &[frame(HEAD), frame(&rest)].concat());
        assert_eq!(read_header(&zstd).unwrap().id, "s");
        // Only the first frame is read: what follows it may be anything.
        std::fs::write(&zstd, [frame(HEAD), b"not zstd".to_vec()].concat()).unwrap();
        assert_eq!(read_header(&zstd).unwrap().id, "s");
        let plain = zstd.with_file_name("session.jsonl");
        std::fs::write(&plain, format!("{HEAD}{rest}")).unwrap();
        assert_eq!(read_header(&plain).unwrap().id, "s");
        std::fs::write(&plain, "x".repeat(HEADER_MAX + 10)).unwrap();
        let long = read_header(&plain).unwrap_err().to_string();
        assert!(long.contains("cap of the header line"), "{long}");
        let two = frame(&format!("{HEAD}{rest}"));
        std::fs::write(&zstd, two).unwrap();
        let e = read_header(&zstd).unwrap_err().to_string();
        assert!(e.contains("exactly one header line"), "{e}");
        let _ = std::fs::remove_dir_all(zstd.parent().unwrap());
    }

    #[test]
    fn a_log_over_a_cap_is_corruption_naming_the_frame_and_the_cap() {
        let caps = Limits {
            line: 64,
            log: 1024,
        };
        let long = format!("{{\"type\":\"x\",\"data\":\"{}\"}}\n", "a".repeat(100));
        let raw = [
            frame(HEAD),
            frame(&line(event::TURN_START, 0)),
            frame(&long),
        ]
        .concat();
        let e = decode_frames(&raw, caps).err().unwrap();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        let e = e.to_string();
        assert!(e.contains("frame 3 (at byte"), "{e}");
        assert!(e.contains("64 bytes, the cap of one line"), "{e}");
        let many = line(event::TURN_START, 0).repeat(40);
        let raw = [frame(HEAD), frame(&many)].concat();
        let e = decode_frames(&raw, caps).err().unwrap().to_string();
        assert!(e.contains("frame 2") && e.contains("1 KiB"), "{e}");
        // A plain log is capped by its size, before it is read.
        let path = zstd_file("plain-cap", b"").with_file_name("session.jsonl");
        std::fs::write(&path, format!("{HEAD}{many}")).unwrap();
        let e = read(&path, caps).err().unwrap();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("1 KiB"), "{e}");
        assert!(read(&path, Limits::default()).is_ok());
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_new_zstd_log_is_a_header_frame_then_one_frame_per_batch() {
        let root = std::env::temp_dir().join(format!("dsh-frames-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let path = root.join("s").join(Compression::Zstd.file_name());
        let header = SessionHeader {
            id: "s".into(),
            created_at: 1,
            ..SessionHeader::default()
        };
        let mut framer = Framer::new().unwrap();
        let lock = publish_new(&path, &header, &line(event::TURN_START, 0), &mut framer).unwrap();
        append(&path, &line(event::TURN_END, 1), &mut framer).unwrap();
        let raw = std::fs::read(&path).unwrap();
        let found = frames::scan(&raw).unwrap();
        assert_eq!(found.frames.len(), 3);
        let texts: Vec<Vec<u8>> = found
            .frames
            .iter()
            .map(|(a, b)| {
                let mut text = Text::new(Limits::default());
                frames::decode(&raw[*a..*b], &mut text).unwrap();
                text.into_bytes()
            })
            .collect();
        assert_eq!(texts[0], header_line(&header).into_bytes());
        assert_eq!(texts[2], line(event::TURN_END, 1).into_bytes());
        drop(lock);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_new_log_is_private_locked_from_the_start_and_never_overwritten() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("dsh-publish-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let path = root.join("project").join("s").join("session.jsonl");
        let header = SessionHeader {
            id: "s".into(),
            created_at: 1,
            ..SessionHeader::default()
        };
        let mut framer = Framer::new().unwrap();
        let held = publish_new(&path, &header, &line(event::TURN_START, 0), &mut framer).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), LOG_MODE);
        assert_eq!(mode(&root.join("project").join("s")), DIR_MODE);
        assert_eq!(mode(&root.join("project")), DIR_MODE);
        assert_eq!(mode(&root), DIR_MODE, "missing parents too");
        assert!(matches!(
            lock::lock_path(&path),
            Err(lock::Refused::Busy { .. })
        ));
        let before = std::fs::read(&path).unwrap();
        let again = publish_new(&path, &header, "other\n", &mut framer)
            .err()
            .map(|e| e.kind());
        assert_eq!(again, Some(std::io::ErrorKind::AlreadyExists));
        assert_eq!(std::fs::read(&path).unwrap(), before);
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temp file is left behind");
        drop(held);
        assert!(lock::lock_path(&path).is_ok());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn retired_header_fields_are_refused() {
        for field in ["sandboxMode", "approvalPolicy"] {
            let head = format!("{{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0,\"{field}\":\"x\"}}\n");
            assert_eq!(
                scan(head.as_bytes(), Expansion::default()).err(),
                Some(format!("retired header field `{field}`"))
            );
        }
    }

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

    /// Packs, writes as text, decodes each line back; asserts the result is
    /// the batch exactly (byte for byte, key order included).
    fn assert_round_trips(events: &[SessionEvent]) {
        let decoded: Vec<SessionEvent> = packed_lines(events)
            .iter()
            .flat_map(|v| decode(v.clone(), Expansion::default(), usize::MAX).unwrap())
            .collect();
        let text = |es: &[SessionEvent]| -> Vec<String> {
            es.iter()
                .map(|e| serde_json::to_string(e).unwrap())
                .collect()
        };
        assert_eq!(text(&decoded), text(events));
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

    /// A packed row of `n` empty members (3 bytes each in the text).
    fn packed_row_of(seq0: usize, n: usize) -> String {
        format!(
            "{{\"type\":\"text-chunks\",\"seq0\":{seq0},\"time0\":1,\"data\":{{\"turn\":1,\"step\":1,\"index\":0,\"texts\":[{}\"\"],\"dt\":[]}}}}\n",
            "\"\",".repeat(n - 1)
        )
    }

    #[test]
    fn a_packed_row_over_its_member_cap_is_corrupt_before_it_is_parsed() {
        let caps = Expansion {
            events: 1000,
            row_members: 10,
        };
        let fits = scan(format!("{HEAD}{}", packed_row_of(0, 10)).as_bytes(), caps).unwrap();
        assert_eq!(fits.events.len(), 10);
        let e = scan(format!("{HEAD}{}", packed_row_of(0, 11)).as_bytes(), caps)
            .err()
            .unwrap();
        assert!(
            e.contains("more than 10") && e.contains("maxRowMembers"),
            "{e}"
        );
        // A huge `dt` (or any array of a record parsed into a tree) too.
        let dt = format!(
            "{{\"type\":\"text-chunks\",\"seq0\":0,\"time0\":1,\"data\":{{\"turn\":1,\"step\":1,\"index\":0,\"texts\":[\"a\",\"b\",\"c\"],\"dt\":[{}0]}}}}\n",
            "0,".repeat(20)
        );
        let e = scan(format!("{HEAD}{dt}").as_bytes(), caps).err().unwrap();
        assert!(e.contains("maxRowMembers"), "{e}");
        let array = format!("[{}0]\n", "0,".repeat(20));
        let e = scan(format!("{HEAD}{array}").as_bytes(), caps)
            .err()
            .unwrap();
        assert!(e.contains("maxRowMembers"), "{e}");
    }

    #[test]
    fn a_log_over_its_event_cap_is_corrupt_before_a_row_expands() {
        let caps = Expansion {
            events: 25,
            row_members: 10,
        };
        let rows = |n: usize| -> String { (0..n).map(|k| packed_row_of(k * 10, 10)).collect() };
        assert_eq!(
            scan(format!("{HEAD}{}", rows(2)).as_bytes(), caps)
                .unwrap()
                .events
                .len(),
            20
        );
        let e = scan(format!("{HEAD}{}", rows(3)).as_bytes(), caps)
            .err()
            .unwrap();
        assert!(
            e.contains("past 25 events") && e.contains("maxEvents"),
            "{e}"
        );
        // One event at a time counts too.
        let one = Expansion {
            events: 1,
            row_members: 10,
        };
        let e0 = "{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1}}\n";
        let e1 = "{\"type\":\"turn/start\",\"seq\":1,\"time\":1,\"data\":{\"turn\":2}}\n";
        assert!(scan(format!("{HEAD}{e0}").as_bytes(), one).is_ok());
        let e = scan(format!("{HEAD}{e0}{e1}").as_bytes(), one)
            .err()
            .unwrap();
        assert!(e.contains("maxEvents"), "{e}");
    }

    #[test]
    fn a_log_is_opened_only_as_a_regular_file_never_through_a_link() {
        let dir = std::env::temp_dir().join(format!("dsh-open-log-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo.jsonl");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = open_log_read(&fifo).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("FIFO"), "{e}");
        let link = dir.join("zero.jsonl");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let e = read_header(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        std::fs::write(dir.join("plain.jsonl"), HEAD).unwrap();
        assert_eq!(read_header(&dir.join("plain.jsonl")).unwrap().id, "s");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
