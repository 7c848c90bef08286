//! The `sessionPersistence` service (plugin `session-jsonl`, reference
//! dsh-core §2.9): the params and reply of each method of
//! [`crate::names::session_persistence`], and [`SessionPersistence`], a
//! client with one method per service method.
//!
//! A stored session travels as its header and its events; replies that
//! carry events are generic over the event type, so the provider
//! serializes borrowed events and a caller reads owned ones from one
//! definition.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::api::sessions::IdParams;
use crate::names::{code, service, session_persistence as method};
use crate::vocab::{SessionEvent, SessionHeader};
use crate::{Context, Error, Result, Service};

/// Params of `readFrom`: a stored session and the first seq wanted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadFromParams {
    /// The stored session.
    pub id: String,
    /// The first seq wanted (a non-negative integer).
    pub from_seq: u64,
}

/// Params of `list` and `listSnapshots`: the sessions of one working
/// directory (those whose header's `cwd` is that directory, see
/// [`same_directory`]; not every session of its project folder, whose key
/// other directories may share), or every stored session when absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListParams {
    /// The working directory whose sessions are wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// Reply of `load`, `inspect` and `readFrom`: a stored session's header and
/// events (`load` closes an interrupted turn, on disk; `inspect` only in
/// what it answers; `readFrom` answers the events from `fromSeq`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredSession<E = SessionEvent> {
    /// The stored header.
    pub header: SessionHeader,
    /// The events, in log order.
    #[serde(default = "Vec::new")]
    pub events: Vec<E>,
}

/// Reply of `locate`: where a session is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// The backend's kind (`"jsonl"`).
    pub kind: String,
    /// The log file.
    pub path: PathBuf,
}

/// One session of the `list` reply (oldest first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Listed {
    /// The session id.
    pub id: String,
    /// Epoch milliseconds.
    pub created_at: u64,
    /// How many turns it started.
    pub turns: u64,
    /// The text of its last user prompt (`""` when none).
    pub last_prompt: String,
    /// When its log was last written, epoch milliseconds (0 when the
    /// backend does not say).
    #[serde(default)]
    pub updated_at: u64,
    /// Why the log could not be read past its header (a corrupt log, one
    /// over a size cap): `turns` and `lastPrompt` are then unknown (0 and
    /// `""`). `None` when it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<Error>,
    /// The session it was forked or delegated from (its header's
    /// `parentSession`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<String>,
    /// `"subagent"` for a delegated child's session (its header's
    /// `origin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

impl Listed {
    /// Whether it is a subagent's session (one an agent delegated work
    /// to), not a person's.
    pub fn is_delegated(&self) -> bool {
        self.origin.is_some()
    }
}

/// Whether `a` and `b` spell the same directory: the same path components
/// (`/a//x/y/` is `/a/x/y`), compared as text, with no filesystem access.
pub fn same_directory(a: &str, b: &str) -> bool {
    Path::new(a) == Path::new(b)
}

/// Whether `path` is a lossy spelling: a path that was not valid UTF-8,
/// spelled as text with U+FFFD (the replacement character). Two such
/// directories may share one spelling (`a\xff` and `a\xfe` are both
/// `a\u{FFFD}`), so neither can be told from the other.
pub fn is_lossy(path: &str) -> bool {
    path.contains(char::REPLACEMENT_CHARACTER)
}

/// Refuses to resume the stored session `header` from directory `cwd` when
/// its header names another directory (`SESSION_OTHER_DIRECTORY`, naming
/// both): its history, prompt and tools are that directory's. A session
/// stored without a `cwd` belongs to no directory and may be resumed
/// anywhere.
///
/// A path that was not valid UTF-8 is known only by a lossy spelling (with
/// U+FFFD), which another directory may share (`a\xff` and `a\xfe` are both
/// `a\u{FFFD}`): when either side holds U+FFFD the check cannot tell, so
/// it refuses too.
pub fn check_directory(header: &SessionHeader, cwd: &str) -> Result<()> {
    if is_lossy(cwd) || header.cwd.as_deref().is_some_and(is_lossy) {
        return Err(Error::new(
            code::SESSION_OTHER_DIRECTORY,
            format!(
                "session \"{}\" cannot be resumed from {cwd}: a directory name that is not valid UTF-8 (shown with U+FFFD) cannot be told from another one, here or in the session's header ({}); resume it from a directory with a UTF-8 name",
                header.id,
                header.cwd.as_deref().unwrap_or("no directory")
            ),
        ));
    }
    match header.cwd.as_deref() {
        Some(own) if !same_directory(own, cwd) => Err(Error::new(
            code::SESSION_OTHER_DIRECTORY,
            format!(
                "session \"{}\" belongs to {own}, not to the current directory {cwd}; resume it from {own}, or start a new session here",
                header.id
            ),
        )),
        _ => Ok(()),
    }
}

/// The session `--continue` picks from `list`: of those that are not a
/// subagent's, the one written most recently (its creation time breaks a
/// tie, then its id), `None` when there is none. One rule for every front end that continues "the latest
/// session of this directory".
pub fn latest(sessions: Vec<Listed>) -> Option<Listed> {
    // A subagent's session is its parent's to continue, not a person's.
    sessions
        .into_iter()
        .filter(|s| !s.is_delegated())
        .max_by(|a, b| {
            (a.updated_at, a.created_at, &a.id).cmp(&(b.updated_at, b.created_at, &b.id))
        })
}

/// One session of the `listSnapshots` reply (oldest first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The stored header.
    pub header: SessionHeader,
    /// The log's revision: equal revisions mean an unchanged log.
    pub revision: String,
}

/// A client of the `sessionPersistence` service.
#[derive(Clone)]
pub struct SessionPersistence(Service);

impl SessionPersistence {
    /// The `sessionPersistence` service of `ctx`.
    pub fn new(ctx: &Context) -> SessionPersistence {
        SessionPersistence(ctx.service(service::SESSION_PERSISTENCE))
    }

    /// `load`: reads a stored session for resuming (repairing a torn tail).
    pub async fn load(&self, id: &str) -> Result<StoredSession> {
        let params = IdParams { id: id.to_owned() };
        self.0.call_as(method::LOAD, &params).await
    }

    /// `inspect`: reads a stored session without changing it.
    pub async fn inspect(&self, id: &str) -> Result<StoredSession> {
        let params = IdParams { id: id.to_owned() };
        self.0.call_as(method::INSPECT, &params).await
    }

    /// `readFrom`: a stored session's events from `from_seq`.
    pub async fn read_from(&self, id: &str, from_seq: u64) -> Result<StoredSession> {
        let params = ReadFromParams {
            id: id.to_owned(),
            from_seq,
        };
        self.0.call_as(method::READ_FROM, &params).await
    }

    /// `header`: stored session `id`'s header alone, read without a lock
    /// or a repair (the first zstd frame or line of its log).
    pub async fn header(&self, id: &str) -> Result<SessionHeader> {
        let params = IdParams { id: id.to_owned() };
        self.0.call_as(method::HEADER, &params).await
    }

    /// Stored session `id`'s header ([`SessionPersistence::header`]) when
    /// it may be resumed from directory `cwd` ([`check_directory`]): what
    /// every front end asks before it resumes a session by id.
    pub async fn resumable_from(&self, id: &str, cwd: &str) -> Result<SessionHeader> {
        let header = self.header(id).await?;
        check_directory(&header, cwd)?;
        Ok(header)
    }

    /// `locate`: where session `id` is stored.
    pub async fn locate(&self, id: &str) -> Result<Location> {
        let params = IdParams { id: id.to_owned() };
        self.0.call_as(method::LOCATE, &params).await
    }

    /// `remove`: deletes stored session `id` (refused while another host
    /// writes it); `SESSION_NOT_FOUND` when nothing is stored under it.
    pub async fn remove(&self, id: &str) -> Result<()> {
        let params = IdParams { id: id.to_owned() };
        self.0.call_as(method::REMOVE, &params).await
    }

    /// `list`: the stored sessions (of `cwd`, when given: those whose
    /// header's `cwd` is `cwd`).
    pub async fn list(&self, cwd: Option<&str>) -> Result<Vec<Listed>> {
        let params = ListParams {
            cwd: cwd.map(str::to_owned),
        };
        self.0.call_as(method::LIST, &params).await
    }

    /// The latest stored session of `cwd` (see [`latest`]), `None` when
    /// `cwd` has none.
    pub async fn latest(&self, cwd: &str) -> Result<Option<Listed>> {
        Ok(latest(self.list(Some(cwd)).await?))
    }

    /// `listSnapshots`: the stored sessions with their log revisions.
    pub async fn list_snapshots(&self, cwd: Option<&str>) -> Result<Vec<Snapshot>> {
        let params = ListParams {
            cwd: cwd.map(str::to_owned),
        };
        self.0.call_as(method::LIST_SNAPSHOTS, &params).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn params_and_replies_have_the_wire_shape() {
        let p = ReadFromParams {
            id: "s".into(),
            from_seq: 3,
        };
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!({"id": "s", "fromSeq": 3})
        );
        assert_eq!(
            serde_json::to_value(ListParams::default()).unwrap(),
            json!({})
        );
        let listed: Listed = serde_json::from_value(
            json!({"id": "a", "createdAt": 5, "turns": 2, "lastPrompt": "hi"}),
        )
        .unwrap();
        assert_eq!(listed.last_prompt, "hi");
        assert_eq!(listed.updated_at, 0, "absent when a backend does not say");
        let stored: StoredSession = serde_json::from_value(json!({
            "header": {"version": 0, "id": "s", "createdAt": 1},
            "events": [{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}]
        }))
        .unwrap();
        assert_eq!(stored.events[0].kind, "turn/start");
        let at = |id: &str, created_at, updated_at| Listed {
            id: id.into(),
            created_at,
            turns: 0,
            last_prompt: String::new(),
            updated_at,
            unreadable: None,
            parent_session: None,
            origin: None,
        };
        assert_eq!(latest(Vec::new()), None);
        let picked = latest(vec![at("old-but-used", 1, 9), at("new", 5, 3)]);
        assert_eq!(picked.map(|l| l.id), Some("old-but-used".into()));
        // A subagent's session, however recent, is not what `--continue`
        // picks.
        let child = Listed {
            origin: Some("subagent".into()),
            parent_session: Some("old-but-used".into()),
            ..at("child", 9, 99)
        };
        let picked = latest(vec![at("old-but-used", 1, 9), child]);
        assert_eq!(picked.map(|l| l.id), Some("old-but-used".into()));
        let tie = latest(vec![at("b", 2, 0), at("a", 1, 0)]);
        assert_eq!(tie.map(|l| l.id), Some("b".into()));
        assert!(same_directory("/a//x/y/", "/a/x/y"));
        assert!(!same_directory("/a/x-y", "/a/x/y"));
        let of = |cwd: Option<&str>| SessionHeader {
            id: "s".into(),
            cwd: cwd.map(str::to_owned),
            ..SessionHeader::default()
        };
        assert_eq!(check_directory(&of(Some("/a/x/y/")), "/a/x/y"), Ok(()));
        assert_eq!(check_directory(&of(None), "/a/x/y"), Ok(()));
        let refused = check_directory(&of(Some("/a/x/y")), "/a/x-y").unwrap_err();
        assert_eq!(refused.code, code::SESSION_OTHER_DIRECTORY);
        assert!(
            refused.message.contains("/a/x/y") && refused.message.contains("/a/x-y"),
            "{refused}"
        );
        // `a\xff` and `a\xfe` both read `a\u{FFFD}`: never taken as one.
        for (own, cwd) in [
            (Some("/a\u{FFFD}"), "/a\u{FFFD}"),
            (None, "/a\u{FFFD}"),
            (Some("/a\u{FFFD}"), "/b"),
        ] {
            let refused = check_directory(&of(own), cwd).unwrap_err();
            assert_eq!(refused.code, code::SESSION_OTHER_DIRECTORY);
            assert!(refused.message.contains("not valid UTF-8"), "{refused}");
        }
        let loc: Location =
            serde_json::from_value(json!({"kind": "jsonl", "path": "/x/s.jsonl"})).unwrap();
        assert_eq!(loc.path, PathBuf::from("/x/s.jsonl"));
    }
}
