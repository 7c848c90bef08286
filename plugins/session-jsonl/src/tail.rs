//! A log's text read into its events under the original's crash-tail rules
//! (reference dsh-core §8.3): the header line, then one storage record a
//! line (an event, or a packed row that expands to several). The first
//! defect (an unparsable line, a seq gap, a line without its newline)
//! starts a torn tail, which is cut when the log is repaired, unless a
//! later record is a `turn/end`: then the log is corrupt. A record that
//! would expand past the caps (see `expand`) makes the log corrupt too.

use std::borrow::Cow;

use dsh_sdk::vocab::event;
use dsh_sdk::vocab::{SessionEvent, SessionHeader};
use serde_json::Value;

use crate::expand::{largest_array, Expansion};
use crate::header::parse_header;
use crate::packing::{RowKind, Unpacked};

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
/// row written as the writer writes it (`type` first) is read straight
/// into its type; anything else is parsed into a tree first (a record
/// whose fields come in another order, or that repeats a key), once its
/// arrays are counted ([`largest_array`]) under `caps`.
pub fn decode_line(
    line: &str,
    caps: Expansion,
    room: usize,
) -> Result<Vec<SessionEvent>, LineError> {
    // As written, a row's type comes first.
    let packed = line
        .strip_prefix(r#"{"type":""#)
        .and_then(|rest| rest.split('"').next())
        .and_then(RowKind::of_row);
    if packed.is_none() {
        if let Ok(e) = serde_json::from_str::<SessionEvent>(line) {
            return one(e, caps, room);
        }
    }
    let entries = largest_array(line.as_bytes());
    if entries > caps.row_members {
        return Err(LineError::Over(caps.over_row(entries)));
    }
    if let Some(row) = packed.and_then(|kind| Unpacked::parse(line, kind)) {
        return expand_row(&row, caps, room);
    }
    let record = serde_json::from_str::<Value>(line).map_err(|_| LineError::Bad)?;
    decode_record(record, caps, room)
}

/// Decodes one storage record parsed into a tree into at most `room`
/// events (a packed row expands, once its members are counted against
/// `caps`).
fn decode_record(
    record: Value,
    caps: Expansion,
    room: usize,
) -> Result<Vec<SessionEvent>, LineError> {
    let kind = record
        .get("type")
        .and_then(Value::as_str)
        .and_then(RowKind::of_row);
    let Some(kind) = kind else {
        let e: SessionEvent = serde_json::from_value(record).map_err(|_| LineError::Bad)?;
        return one(e, caps, room);
    };
    let row = Unpacked::from_record(record, kind).ok_or(LineError::Bad)?;
    expand_row(&row, caps, room)
}

/// One event, when the log has room for it.
fn one(e: SessionEvent, caps: Expansion, room: usize) -> Result<Vec<SessionEvent>, LineError> {
    if room == 0 {
        return Err(LineError::Over(caps.over_events()));
    }
    Ok(vec![e])
}

/// The events of a packed row, once its members are counted against
/// `caps` and the `room` left in the log.
fn expand_row(
    row: &Unpacked,
    caps: Expansion,
    room: usize,
) -> Result<Vec<SessionEvent>, LineError> {
    let members = row.members();
    if members > caps.row_members {
        return Err(LineError::Over(caps.over_row(members)));
    }
    if members > room {
        return Err(LineError::Over(caps.over_events()));
    }
    row.expand().ok_or(LineError::Bad)
}

/// The type of a record, read without building its tree (the rest of the
/// line is skipped, not kept).
#[derive(serde::Deserialize)]
struct RowType<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
}

/// The type of the record on `line`; `None` when it is not an object with
/// a string `type`.
pub fn row_type(line: &str) -> Option<Cow<'_, str>> {
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
        if let Some(defect) = torn_at {
            // After a defect: a later complete turn/end means corruption.
            if line.ends_with('\n') && row_type(line.trim_end()).as_deref() == Some(event::TURN_END)
            {
                return Err(format!(
                    "a defect at byte {defect} precedes a completed turn"
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

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str =
        "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0}\n";

    #[test]
    fn torn_tail_and_corruption() {
        let e0 = "{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1}}\n";
        let torn = format!("{HEAD}{e0}{{\"type\":\"step/st");
        let s = scan(torn.as_bytes(), Expansion::default()).unwrap();
        assert_eq!(s.events.len(), 1);
        assert_eq!(s.torn_at, Some(HEAD.len() + e0.len()));
        let corrupt = format!("{HEAD}garbage\n{{\"type\":\"turn/end\",\"seq\":1,\"time\":1,\"data\":{{\"turn\":1,\"reason\":{{\"kind\":\"completed\"}}}}}}\n");
        assert!(scan(corrupt.as_bytes(), Expansion::default()).is_err());
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
    fn a_row_in_another_key_order_or_repeating_a_key_reads_as_its_tree() {
        let row = "{\"seq0\":0,\"type\":\"reasoning-chunks\",\"time0\":10,\"data\":{\"step\":1,\"turn\":1,\"texts\":[\"a\",\"b\"],\"index\":0}}";
        let events = decode_line(row, Expansion::default(), 10).unwrap();
        assert_eq!(
            serde_json::to_string(&events[1]).unwrap(),
            "{\"type\":\"assistant/chunk\",\"seq\":1,\"time\":10,\"data\":{\"turn\":1,\"step\":1,\"chunk\":{\"type\":\"reasoning-delta\",\"index\":0,\"text\":\"b\"}}}"
        );
        // The last of a repeated key wins, as in the tree.
        let repeated = "{\"type\":\"text-chunks\",\"seq0\":0,\"time0\":10,\"data\":{\"turn\":1,\"turn\":2,\"step\":1,\"index\":0,\"texts\":[\"x\"],\"texts\":[\"a\",\"b\"]}}";
        let events = decode_line(repeated, Expansion::default(), 10).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].data["turn"], 2);
    }

    #[test]
    fn a_row_that_is_not_a_run_is_a_damaged_line() {
        for row in [
            // `data` an array, members not an array, no `data`, no `time0`.
            "{\"type\":\"text-chunks\",\"seq0\":0,\"time0\":10,\"data\":[1,2,3,0,[\"a\"]]}",
            "{\"type\":\"text-chunks\",\"seq0\":0,\"time0\":10,\"data\":{\"texts\":\"abc\"}}",
            "{\"type\":\"text-chunks\",\"seq0\":0,\"time0\":10}",
            "{\"type\":\"text-chunks\",\"seq0\":0,\"data\":{\"texts\":[\"a\"]}}",
            "{\"type\":\"tool-call-chunks\",\"seq0\":0,\"time0\":10,\"data\":{\"id\":\"c\",\"texts\":[\"a\"]}}",
            // Member times or seqs past the integers (no writer stores them).
            "{\"type\":\"text-chunks\",\"seq0\":0,\"time0\":18446744073709551615,\"data\":{\"texts\":[\"a\"]}}",
            "{\"type\":\"text-chunks\",\"seq0\":0,\"time0\":1,\"data\":{\"dt\":[9223372036854775807],\"texts\":[\"a\",\"b\"]}}",
            "{\"type\":\"text-chunks\",\"seq0\":18446744073709551615,\"time0\":1,\"data\":{\"texts\":[\"a\",\"b\"]}}",
        ] {
            let e = decode_line(row, Expansion::default(), 10).unwrap_err();
            assert!(matches!(e, LineError::Bad), "{row}: {e:?}");
        }
    }
}
