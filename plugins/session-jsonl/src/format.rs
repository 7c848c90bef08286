//! The JSONL format of the original (reference dsh-core §8.3): path
//! encoding, the header record, packed chunk rows (read only), the
//! crash-tail scan, and durable writes.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use dsh_sdk::vocab::{SessionEvent, SessionHeader};
use serde_json::{json, Value};

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

/// Decodes one storage record into events (packed rows expand).
fn decode(record: &Value) -> Result<Vec<SessionEvent>, String> {
    let kind = record["type"].as_str().unwrap_or_default();
    let packed = match kind {
        "text-chunks" => Some(("text-delta", "texts")),
        "reasoning-chunks" => Some(("reasoning-delta", "texts")),
        "tool-call-chunks" => Some(("tool-call-delta", "args")),
        _ => None,
    };
    let Some((chunk_type, field)) = packed else {
        let e: SessionEvent = serde_json::from_value(record.clone()).map_err(|e| e.to_string())?;
        return Ok(vec![e]);
    };
    let d = &record["data"];
    let seq0 = record["seq0"].as_u64().ok_or("packed row without seq0")?;
    let time0 = record["time0"].as_u64().ok_or("packed row without time0")?;
    let items = d[field].as_array().ok_or("packed row without members")?;
    let dt = d["dt"].as_array().cloned().unwrap_or_default();
    let mut time = time0 as i64;
    let mut out = Vec::new();
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
            kind: "assistant/chunk".into(),
            seq: seq0 + k as u64,
            time: time.max(0) as u64,
            data: json!({"turn": d["turn"], "step": d["step"], "chunk": chunk}),
            source_event_seqs: None,
            surface_op: None,
            ignorable: None,
        });
    }
    Ok(out)
}

/// Scans a stored log (crash-tail rules of the original): the first defect
/// (an unparsable line or a seq gap) starts a torn tail, unless a later
/// record holds a `turn/end`, which makes the log corrupt.
pub fn scan(bytes: &[u8]) -> Result<Scan, String> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().ok_or("the file is empty")?;
    let head: Value =
        serde_json::from_str(first.trim_end()).map_err(|e| format!("corrupt header: {e}"))?;
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
    let mut h = head.clone();
    if let Some(o) = h.as_object_mut() {
        o.remove("type");
    }
    let header: SessionHeader =
        serde_json::from_value(h).map_err(|e| format!("corrupt header: {e}"))?;
    let mut events: Vec<SessionEvent> = Vec::new();
    let mut offset = first.len();
    let mut torn_at = None;
    for line in lines {
        let start = offset;
        offset += line.len();
        if torn_at.is_some() {
            // After a defect: a later complete turn/end means corruption.
            if line.ends_with('\n') {
                if let Ok(v) = serde_json::from_str::<Value>(line.trim_end()) {
                    if v["type"] == "turn/end" {
                        return Err(format!(
                            "a defect at byte {} precedes a completed turn",
                            torn_at.unwrap_or(0)
                        ));
                    }
                }
            }
            continue;
        }
        if !line.ends_with('\n') {
            torn_at = Some(start);
            continue;
        }
        let decoded = serde_json::from_str::<Value>(line.trim_end())
            .map_err(|e| e.to_string())
            .and_then(|v| decode(&v));
        match decoded {
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

/// First write: header + batch into a temp file (locked, so the log is
/// locked from the moment it appears), fsync, then published without
/// overwriting (hard link) and the directory fsynced. A log that already
/// exists fails with `AlreadyExists` and is left as it was.
pub fn publish_new(path: &Path, header: &SessionHeader, events: &str) -> std::io::Result<LogLock> {
    if let Some(dir) = path.parent() {
        create_private_dir(dir)?;
    }
    let tmp = path.with_extension(format!("jsonl.tmp-{}", std::process::id()));
    let written = create_private_file(&tmp).and_then(|f| {
        let lock = lock::lock_file(f)
            .map_err(|r| std::io::Error::other(format!("cannot lock {}: {r:?}", tmp.display())))?;
        let mut f = lock.file();
        f.write_all(header_line(header).as_bytes())?;
        f.write_all(events.as_bytes())?;
        f.sync_all()?;
        Ok(lock)
    });
    let linked = written.and_then(|lock| std::fs::hard_link(&tmp, path).map(|()| lock));
    let _ = std::fs::remove_file(&tmp);
    let lock = linked?;
    fsync_dir(path);
    Ok(lock)
}

fn is_zstd(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "zstd")
}

/// A log's text, and for a zstd log where its frames start, so a repair can
/// cut the file at a frame boundary.
pub struct Log {
    /// The decoded JSONL text (complete frames only).
    pub text: Vec<u8>,
    /// zstd only: (text offset, file offset) of each decoded frame.
    frames: Vec<(usize, u64)>,
    /// zstd only: file offset of a torn (incomplete or undecodable) tail.
    torn_frame: Option<u64>,
    zstd: bool,
}

impl Log {
    /// True when the file's bytes end in a torn frame.
    pub fn is_torn(&self) -> bool {
        self.torn_frame.is_some()
    }
}

/// Reads a log: zstd-framed logs (the original's default) are decoded frame
/// by frame, so a crash mid-append loses only the frame being written.
pub fn read(path: &Path) -> std::io::Result<Log> {
    let raw = std::fs::read(path)?;
    if !is_zstd(path) {
        return Ok(Log {
            text: raw,
            frames: Vec::new(),
            torn_frame: None,
            zstd: false,
        });
    }
    decode_frames(&raw)
}

fn decode_frames(raw: &[u8]) -> std::io::Result<Log> {
    let mut log = Log {
        text: Vec::new(),
        frames: Vec::new(),
        torn_frame: None,
        zstd: true,
    };
    let mut pos = 0;
    while pos < raw.len() {
        let size = zstd::zstd_safe::find_frame_compressed_size(&raw[pos..]).unwrap_or(0);
        let decoded = (size > 0 && pos + size <= raw.len())
            .then(|| zstd::stream::decode_all(&raw[pos..pos + size]).ok())
            .flatten();
        let Some(decoded) = decoded else {
            log.torn_frame = Some(pos as u64);
            check_nothing_completes_after(&raw[pos..], pos)?;
            break;
        };
        log.frames.push((log.text.len(), pos as u64));
        log.text.extend_from_slice(&decoded);
        pos += size;
    }
    Ok(log)
}

/// A damaged frame is a torn tail only if no later frame completes a turn;
/// otherwise the log is corrupt, as with a damaged line. The damaged frame's
/// length is unknown, so later frames are found by their magic number.
fn check_nothing_completes_after(rest: &[u8], at: usize) -> std::io::Result<()> {
    const MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
    let starts = rest
        .windows(MAGIC.len())
        .enumerate()
        .skip(1)
        .filter(|(_, w)| *w == MAGIC)
        .map(|(i, _)| i);
    for i in starts {
        let Ok(size) = zstd::zstd_safe::find_frame_compressed_size(&rest[i..]) else {
            continue;
        };
        if i + size > rest.len() {
            continue;
        }
        let Ok(text) = zstd::stream::decode_all(&rest[i..i + size]) else {
            continue;
        };
        let completes = text.split(|b| *b == b'\n').any(|line| {
            serde_json::from_slice::<Value>(line).is_ok_and(|v| v["type"] == "turn/end")
        });
        if completes {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a damaged zstd frame at byte {at} precedes a completed turn"),
            ));
        }
    }
    Ok(())
}

/// Appends a batch and fsyncs (as one new frame in a zstd log); a failed
/// write is truncated back.
pub fn append(path: &Path, events: &str) -> std::io::Result<()> {
    let bytes = if is_zstd(path) {
        zstd::stream::encode_all(events.as_bytes(), 3)?
    } else {
        events.as_bytes().to_vec()
    };
    let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
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
/// the frame holding the defect, and that frame's lines before the defect are
/// written again.
pub fn repair(
    path: &Path,
    log: &Log,
    torn_at: Option<usize>,
    closers: &[SessionEvent],
) -> std::io::Result<()> {
    let (cut, mut text) = match (torn_at, log.zstd) {
        (Some(at), false) => (Some(at as u64), String::new()),
        (None, false) => (None, String::new()),
        (Some(at), true) => {
            let (start, file_at) = log
                .frames
                .iter()
                .rev()
                .find(|(start, _)| *start <= at)
                .copied()
                .unwrap_or((0, 0));
            let kept = String::from_utf8_lossy(&log.text[start..at]).into_owned();
            (Some(file_at), kept)
        }
        (None, true) => (log.torn_frame, String::new()),
    };
    if let Some(at) = cut {
        let f = std::fs::OpenOptions::new().write(true).open(path)?;
        f.set_len(at)?;
        f.sync_all()?;
    }
    for c in closers {
        text.push_str(&serde_json::to_string(c).map_err(std::io::Error::other)?);
        text.push('\n');
    }
    if !text.is_empty() {
        append(path, &text)?;
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
        let s = scan(torn.as_bytes()).unwrap();
        assert_eq!(s.events.len(), 1);
        assert_eq!(s.torn_at, Some(head.len() + e0.len()));
        let corrupt = format!("{head}garbage\n{{\"type\":\"turn/end\",\"seq\":1,\"time\":1,\"data\":{{\"turn\":1,\"reason\":{{\"kind\":\"completed\"}}}}}}\n");
        assert!(scan(corrupt.as_bytes()).is_err());
    }

    const HEAD: &str =
        "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0}\n";

    fn line(kind: &str, seq: u64) -> String {
        let data = if kind == "turn/end" {
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
        zstd::stream::encode_all(text.as_bytes(), 3).unwrap()
    }

    /// A zstd log in a fresh temp file, from raw frame bytes.
    fn zstd_file(name: &str, raw: &[u8]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("dsh-zstd-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("session.jsonl.zstd");
        std::fs::write(&path, raw).unwrap();
        path
    }

    #[test]
    fn a_torn_zstd_frame_loses_only_itself_and_is_cut_off() {
        let first = format!("{HEAD}{}", line("turn/start", 0));
        let second = line("step/start", 1);
        let mut raw = [frame(&first), frame(&second)].concat();
        let whole = raw.len();
        let third = frame(&line("step/end", 2));
        raw.extend_from_slice(&third[..third.len() / 2]);
        let path = zstd_file("torn", &raw);
        let log = read(&path).unwrap();
        assert!(log.is_torn());
        assert_eq!(log.text, format!("{first}{second}").into_bytes());
        let s = scan(&log.text).unwrap();
        assert_eq!((s.events.len(), s.torn_at), (2, None));
        repair(&path, &log, s.torn_at, &[]).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole as u64);
        let again = read(&path).unwrap();
        assert!(!again.is_torn());
        assert_eq!(again.text, log.text);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_defect_inside_a_zstd_frame_keeps_the_lines_before_it() {
        let first = format!("{HEAD}{}", line("turn/start", 0));
        let good = line("step/start", 1);
        let raw = [frame(&first), frame(&format!("{good}garbage\n"))].concat();
        let path = zstd_file("defect", &raw);
        let log = read(&path).unwrap();
        let s = scan(&log.text).unwrap();
        assert_eq!(s.torn_at, Some(first.len() + good.len()));
        let closer = SessionEvent {
            seq: 2,
            ..serde_json::from_str(line("step/end", 2).trim_end()).unwrap()
        };
        repair(&path, &log, s.torn_at, &[closer]).unwrap();
        let again = read(&path).unwrap();
        assert!(!again.is_torn());
        let expected = format!("{first}{good}{}", line("step/end", 2));
        assert_eq!(String::from_utf8(again.text).unwrap(), expected);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_damaged_zstd_frame_before_a_completed_turn_is_corruption() {
        // A damaged magic number: the frame cannot even be sized.
        let mut bad = frame(&line("step/start", 1));
        bad[0] ^= 0xff;
        let raw = [
            frame(&format!("{HEAD}{}", line("turn/start", 0))),
            bad,
            frame(&line("turn/end", 2)),
        ]
        .concat();
        let err = decode_frames(&raw).err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("precedes a completed turn")),
            "{err:?}"
        );
    }

    #[test]
    fn a_new_log_is_private_locked_from_the_start_and_never_overwritten() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("dsh-publish-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let path = root.join("project").join("s.jsonl");
        let header = SessionHeader {
            id: "s".into(),
            created_at: 1,
            ..SessionHeader::default()
        };
        let held = publish_new(&path, &header, &line("turn/start", 0)).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), LOG_MODE);
        assert_eq!(mode(&root.join("project")), DIR_MODE);
        assert_eq!(mode(&root), DIR_MODE, "missing parents too");
        assert!(matches!(
            lock::lock_path(&path),
            Err(lock::Refused::Busy { .. })
        ));
        let before = std::fs::read(&path).unwrap();
        let again = publish_new(&path, &header, "other\n")
            .err()
            .map(|e| e.kind());
        assert_eq!(again, Some(std::io::ErrorKind::AlreadyExists));
        assert_eq!(std::fs::read(&path).unwrap(), before);
        let left: Vec<_> = std::fs::read_dir(root.join("project")).unwrap().collect();
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
                scan(head.as_bytes()).err(),
                Some(format!("retired header field `{field}`"))
            );
        }
    }

    #[test]
    fn packed_rows_expand() {
        let head = "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0}\n";
        let row = "{\"type\":\"text-chunks\",\"seq0\":0,\"time0\":10,\"data\":{\"turn\":1,\"step\":1,\"index\":0,\"dt\":[1,2],\"texts\":[\"a\",\"b\",\"c\"]}}\n";
        let s = scan(format!("{head}{row}").as_bytes()).unwrap();
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
        let s = scan(format!("{HEAD}{row}").as_bytes()).unwrap();
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
        let s = scan(format!("{HEAD}{row}").as_bytes()).unwrap();
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
        let s = scan(text.as_bytes()).unwrap();
        let times: Vec<(u64, u64)> = s.events[4..].iter().map(|e| (e.seq, e.time)).collect();
        assert_eq!(times, [(4, 100), (5, 95), (6, 98)]);
        assert_eq!(
            s.events[5].data,
            json!({"turn": 2, "step": 3, "chunk": {"type": "reasoning-delta", "index": 1, "text": "b"}})
        );
    }
}
