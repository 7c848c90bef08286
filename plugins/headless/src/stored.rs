//! The stored sessions, as `dsh-host sessions list | show | fork | rm`
//! prints them: through `sessionPersistence` (reading, removing) and
//! `sessions` (a fork is a new session seeded with the source's history). An unknown id is the backend's `SESSION_NOT_FOUND`, which
//! the caller prints as `dsh: <CODE>: <message>` with exit 1.
//!
//! What these commands print is always sanitized (`dsh_sdk::terminal_text`),
//! on a terminal or not: it is a summary for reading (one line per message,
//! cut at 200 characters), never the stored bytes (the log itself and
//! `--output jsonl` are), and a listing saved to a file and `cat` later
//! would replay a stored OSC 52 on the terminal that shows it.

use dsh_sdk::api::session_persistence::{Listed, SessionPersistence};
use dsh_sdk::api::sessions::{CreateParams, Sessions};
use dsh_sdk::prelude::*;
use dsh_sdk::terminal_text::sanitize;
use dsh_sdk::vocab::records::{AssistantMessage, ToolCall, ToolResult};
use dsh_sdk::vocab::{event, Message, MessageSource, SessionEvent, SessionHeader};

use crate::stream::result_text;
use crate::{print, Stored};

/// Runs one stored-session command; the exit code.
pub async fn run(ctx: &Context, what: &Stored, cwd: &str) -> Result<i32> {
    let out = match what {
        Stored::List => list(ctx, cwd).await?,
        Stored::Show(id) => show(ctx, id).await?,
        Stored::Fork(id) => format!("{}\n", fork(ctx, id).await?),
        Stored::Remove(id) => {
            SessionPersistence::new(ctx).remove(id).await?;
            format!("removed {id}\n")
        }
    };
    // Ids and paths too (a header's `cwd` is whatever directory it names).
    print(ctx, &sanitize(&out)).await;
    Ok(0)
}

/// The stored sessions of `cwd`, one line each (oldest first), each
/// subagent's under the session that delegated to it (indented one step
/// per level of delegation).
async fn list(ctx: &Context, cwd: &str) -> Result<String> {
    let sessions = SessionPersistence::new(ctx).list(Some(cwd)).await?;
    let mut out = format!(
        "{:<48} {:<25} {:>5}  LAST PROMPT\n",
        "ID", "CREATED", "TURNS"
    );
    for (depth, s) in tree(&sessions) {
        // A log that cannot be read past its header is still listed (it is
        // what `--continue` would pick); `show` says why in full.
        let (turns, last) = match &s.unreadable {
            Some(e) => ("?".to_owned(), format!("[cannot be read: {}]", e.code)),
            None => (s.turns.to_string(), one_line(&s.last_prompt, 60)),
        };
        let id = format!("{}{}", "  ".repeat(depth), s.id);
        out.push_str(&format!(
            "{:<48} {:<25} {:>5}  {}\n",
            id,
            format_time(s.created_at),
            turns,
            last
        ));
    }
    Ok(out)
}

/// `sessions` in list order, each delegated one moved under its parent
/// (when the parent is listed), with its depth below a top-level one.
fn tree(sessions: &[Listed]) -> Vec<(usize, &Listed)> {
    fn parent_of<'a>(s: &'a Listed, sessions: &[Listed]) -> Option<&'a str> {
        s.parent_session
            .as_deref()
            .filter(|p| s.is_delegated() && sessions.iter().any(|o| o.id == *p))
    }
    let mut out = Vec::with_capacity(sessions.len());
    let mut stack: Vec<(usize, &Listed)> = sessions
        .iter()
        .rev()
        .filter(|s| parent_of(s, sessions).is_none())
        .map(|s| (0, s))
        .collect();
    while let Some((depth, s)) = stack.pop() {
        out.push((depth, s));
        stack.extend(
            sessions
                .iter()
                .rev()
                .filter(|c| parent_of(c, sessions) == Some(s.id.as_str()))
                .map(|c| (depth + 1, c)),
        );
    }
    // Logs whose parents name each other in a circle hang under nothing:
    // listed at the top, not lost.
    for s in sessions {
        if !out.iter().any(|(_, o)| std::ptr::eq(*o, s)) {
            out.push((0, s));
        }
    }
    out
}

/// A stored session's header, then its conversation one line per user
/// prompt, assistant text, tool call and tool result. Read with `inspect`,
/// so the log is not changed.
async fn show(ctx: &Context, id: &str) -> Result<String> {
    let stored = SessionPersistence::new(ctx).inspect(id).await?;
    let mut out = header_lines(&stored.header, stored.events.len());
    out.push('\n');
    for e in &stored.events {
        if let Some(line) = conversation_line(e) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    Ok(out)
}

fn header_lines(h: &SessionHeader, events: usize) -> String {
    let mut out = format!("session {}\ncreated {}\n", h.id, format_time(h.created_at));
    if let Some(cwd) = &h.cwd {
        out.push_str(&format!("cwd     {cwd}\n"));
    }
    if let Some(parent) = &h.parent_session {
        out.push_str(&format!("forked  from {parent}\n"));
    }
    out.push_str(&format!("events  {events}\n"));
    out
}

/// One readable line for a conversation event, `None` for the rest
/// (chunks, framing, bookkeeping). A conversation event whose data does
/// not have its record's shape is a line saying so (which event, which
/// field), and the rest of the session is still shown.
fn conversation_line(e: &SessionEvent) -> Option<String> {
    match read_line(e) {
        Ok(line) => line,
        Err(err) => Some(format!("[{}: {}]", err.code, one_line(&err.message, 200))),
    }
}

/// [`conversation_line`] of an event read as its record.
fn read_line(e: &SessionEvent) -> Result<Option<String>> {
    let line = match e.kind.as_str() {
        event::USER_MESSAGE => {
            let message: Message = e.data_as()?;
            let MessageSource::User(_) = message.source else {
                return Ok(None);
            };
            format!("user: {}", one_line(&message.text(), 200))
        }
        event::ASSISTANT_MESSAGE => {
            let text = e.data_as::<AssistantMessage>()?.message.text();
            if text.trim().is_empty() {
                return Ok(None);
            }
            format!("assistant: {}", one_line(&text, 200))
        }
        event::TOOL_CALL => {
            let call: ToolCall = e.data_as()?;
            format!(
                "tool call: {} {}",
                call.name,
                one_line(&call.arguments, 120)
            )
        }
        event::TOOL_RESULT => {
            let result: ToolResult = e.data_as()?;
            format!(
                "tool result: {}",
                one_line(result_text(&result.message), 120)
            )
        }
        _ => return Ok(None),
    };
    Ok(Some(line))
}

/// A new stored session holding a copy of `id`'s history, its lineage in
/// its header (the source as `parentSession`, the seed's length), written
/// to disk and closed. The source is read with `inspect`, so it is left as
/// it was (an interrupted turn is closed in the copy only). The child's id.
async fn fork(ctx: &Context, id: &str) -> Result<String> {
    let source = SessionPersistence::new(ctx).inspect(id).await?;
    let child = format!("session-{}", dsh_sdk::new_id());
    let header = SessionHeader {
        id: child.clone(),
        created_at: dsh_sdk::now_ms(),
        cwd: source.header.cwd.clone(),
        parent_session: Some(id.to_owned()),
        seed_length: Some(source.events.len() as u64),
        ..SessionHeader::default()
    };
    let sessions = Sessions::new(ctx);
    sessions
        .create(&CreateParams {
            id: Some(child.clone()),
            header: Some(header),
            seed: Some(source.events),
            ..CreateParams::default()
        })
        .await?;
    let written = sessions.flush(&child).await;
    sessions.close(&child).await?;
    written?;
    Ok(child)
}

/// `text` on one line (newlines as spaces), at most `max` characters,
/// sanitized first (`dsh_sdk::terminal_text`: no escape sequences,
/// controls or bidi controls), so `max` counts what is shown.
fn one_line(text: &str, max: usize) -> String {
    let flat: String = sanitize(text).trim().replace(['\n', '\r'], " ");
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max).collect();
    format!("{cut}…")
}

/// Epoch ms as `YYYY-MM-DD HH:MM:SS UTC`.
fn format_time(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn ev(kind: &str, data: Value) -> SessionEvent {
        SessionEvent::new(kind, 0, data)
    }

    /// An `assistant/message` saying `text`.
    fn answer(text: &str) -> Value {
        json!({"turn": 1, "step": 1, "message": {"id": "a", "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "source": {"kind": "model", "provider": "p", "model": "m"}}})
    }

    #[test]
    fn a_subagents_session_is_listed_under_its_parent() {
        let at = |id: &str, parent: Option<&str>, delegated: bool| Listed {
            id: id.into(),
            created_at: 0,
            turns: 0,
            last_prompt: String::new(),
            updated_at: 0,
            unreadable: None,
            parent_session: parent.map(str::to_owned),
            origin: delegated.then(|| "subagent".to_owned()),
        };
        let sessions = vec![
            at("p", None, false),
            at("other", None, false),
            at("kid", Some("p"), true),
            at("grandkid", Some("kid"), true),
            at("user-fork", Some("p"), false),
            at("orphan", Some("gone"), true),
            at("loop-a", Some("loop-b"), true),
            at("loop-b", Some("loop-a"), true),
        ];
        let placed: Vec<(usize, &str)> = tree(&sessions)
            .into_iter()
            .map(|(d, s)| (d, s.id.as_str()))
            .collect();
        assert_eq!(
            placed,
            [
                (0, "p"),
                (1, "kid"),
                (2, "grandkid"),
                (0, "other"),
                (0, "user-fork"),
                (0, "orphan"),
                (0, "loop-a"),
                (0, "loop-b")
            ]
        );
    }

    #[test]
    fn a_tool_result_and_a_malformed_event_each_get_a_line() {
        let result = ev(
            event::TOOL_RESULT,
            json!({"turn": 1, "step": 1, "message": {"id": "r", "role": "user", "content": [
                {"type": "tool-result", "toolCallId": "c", "isError": false,
                 "content": [{"type": "text", "text": "a\nb"}]}],
                "source": {"kind": "tool", "callId": "c"}}}),
        );
        assert_eq!(
            conversation_line(&result).as_deref(),
            Some("tool result: a b")
        );
        // A plugin's context is not the user's prompt.
        let context = ev(
            event::USER_MESSAGE,
            json!({"id": "p", "role": "user", "content": [{"type": "text", "text": "ctx"}],
                "source": {"kind": "plugin", "plugin": "x"}}),
        );
        assert_eq!(conversation_line(&context), None);
        // A call without its name was `tool call: ?` before.
        let bad = SessionEvent::new(
            event::TOOL_CALL,
            9,
            json!({"turn": 1, "step": 1, "callId": "c", "arguments": "{}"}),
        );
        let line = conversation_line(&bad).unwrap();
        assert!(
            line.starts_with("[SESSION_CORRUPT: session event 9 (tool/call)"),
            "{line}"
        );
        assert!(line.contains("name"), "{line}");
    }

    #[test]
    fn the_conversation_reads_one_line_per_message_and_call() {
        let user = ev(
            event::USER_MESSAGE,
            json!({"id": "u", "role": "user", "content": [{"type": "text", "text": "fix\nit"}], "source": {"kind": "user"}}),
        );
        assert_eq!(conversation_line(&user).as_deref(), Some("user: fix it"));
        let said = ev(event::ASSISTANT_MESSAGE, answer("Done."));
        assert_eq!(
            conversation_line(&said).as_deref(),
            Some("assistant: Done.")
        );
        let call = ev(
            event::TOOL_CALL,
            json!({"turn": 1, "step": 1, "callId": "c", "name": "read", "arguments": "{\"path\":\"a\"}"}),
        );
        assert_eq!(
            conversation_line(&call).as_deref(),
            Some("tool call: read {\"path\":\"a\"}")
        );
        assert_eq!(conversation_line(&ev(event::TURN_START, json!({}))), None);
        assert_eq!(one_line("abcdef", 3), "abc…");
        // Model text loses its escapes, controls and bidi controls; the
        // cut counts what is shown.
        let said = ev(
            event::ASSISTANT_MESSAGE,
            answer("ok\u{1b}]52;c;aGVsbG8=\u{7}\u{1b}]0;t\u{1b}\\ \u{202e}done\r\n"),
        );
        assert_eq!(
            conversation_line(&said).as_deref(),
            Some("assistant: ok done")
        );
        assert_eq!(one_line("\u{1b}[31mabcdef", 3), "abc…");
        assert_eq!(format_time(0), "1970-01-01 00:00:00 UTC");
    }
}
