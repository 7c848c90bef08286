//! `session-jsonl`: one JSONL log per session under
//! `<root>/--<project-key(cwd)>--/<encoded-id>/session.jsonl.zstd` (the
//! original's layout and default encoding; `session.jsonl` with
//! `compression = "none"`; root defaults to `$DSH_HOME/sessions`), header
//! line first. Our old flat `<encoded-id>.jsonl` logs are still read, never
//! written: resuming one continues in the new layout. Events are buffered from
//! `session/event` and written at `session/flush` (fsync) or after a batch
//! window; `load` repairs a torn tail and closes an interrupted turn
//! (reference dsh-core §8). One host writes a log at a time (an exclusive
//! `flock` on the log, see `lock`); logs are created 0600 in 0700
//! directories.

mod durable;
mod expand;
mod fields;
mod frames;
mod header;
mod legacy;
mod limits;
mod lock;
mod packing;
mod paths;
mod reader;
mod summary;
mod tail;
#[cfg(test)]
mod test_logs;

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use dsh_sdk::api::host::Host;
use dsh_sdk::api::session_persistence::{
    is_lossy, same_directory, ListParams, Listed, Location, ReadFromParams, Snapshot, StoredSession,
};
use dsh_sdk::api::sessions::{IdParams, SessionAppended, SessionCreated, SessionRef, Sessions};
use dsh_sdk::names::{bus, service, session_persistence};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::{event, interrupted_turn_closers, SessionEvent, SessionHeader};
use dsh_sdk::Value;
use expand::Expansion;
use frames::Framer;
use limits::Limits;
use lock::{LogLock, Refused};
use paths::{encode_segment, Compression};
use serde::Deserialize;
use tail::{scan, Scan};

/// The error codes of this backend.
mod code {
    pub use dsh_sdk::names::code::{
        INVALID_META, NOT_LOSSLESS, OPEN_TURN, SEQ_GAP, SEQ_RESTATED, SESSION_ALREADY_EXISTS,
        SESSION_CORRUPT, SESSION_NOT_FOUND,
    };

    /// Another writer (another host, as a rule) holds the session's log.
    pub const SESSION_LOCKED: &str = "SESSION_LOCKED";
    /// Reading or writing a log failed.
    pub const PERSISTENCE: &str = "PERSISTENCE";
    /// The id cannot name a file.
    pub const INVALID_ID: &str = "INVALID_ID";
    /// A stored log holds what this harness cannot read (an unknown event
    /// type not marked ignorable).
    pub const SESSION_FORMAT_UNSUPPORTED: &str = "SESSION_FORMAT_UNSUPPORTED";
    /// `list`: a log too long to read for its turns and last prompt (it is
    /// listed without them).
    pub const TOO_LONG_TO_SUMMARIZE: &str = "TOO_LONG_TO_SUMMARIZE";
    pub use dsh_sdk::names::code::SESSION_OTHER_DIRECTORY;
}

use dsh_sdk::vocab::MAX_SAFE_INTEGER;

/// The header's `createdAt` of a `session/created` payload, as sent (any
/// JSON value), read before the payload is: a value that is not a safe
/// integer is refused as the original's `create` refuses it, not as a
/// payload of the wrong shape.
#[derive(Deserialize)]
struct CreatedAt {
    #[serde(deserialize_with = "fields::object")]
    header: CreatedAtOf,
}

/// See [`CreatedAt`].
#[derive(Deserialize)]
struct CreatedAtOf {
    #[serde(rename = "createdAt", default)]
    created_at: Value,
}

/// Checks a new session's metadata as the original's `create` does: the
/// `createdAt` must be a non-negative safe integer. A payload whose header
/// is not an object has none (`null`).
fn check_meta(payload: &dsh_sdk::Payload) -> Result<()> {
    let created_at = payload
        .parse::<CreatedAt>()
        .map_or(Value::Null, |p| p.header.created_at);
    if created_at.as_u64().is_some_and(|t| t <= MAX_SAFE_INTEGER) {
        return Ok(());
    }
    Err(Error::new(
        code::INVALID_META,
        format!(
            "session metadata createdAt must be a non-negative safe integer (got {created_at})"
        ),
    ))
}

#[derive(Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    root: Option<String>,
    write_batch_max_delay_ms: u64,
    /// The original's `packChunks`: delta chunk runs are stored as packed
    /// rows (both layouts load the same).
    pack_chunks: bool,
    /// The encoding of new logs (the original's `compression`): `zstd`
    /// (default) or `none`. Existing logs keep theirs.
    compression: Compression,
    /// The longest line a log may decode to, in bytes (see `limits`).
    max_line_bytes: u64,
    /// The most a whole log may decode to, in bytes (see `limits`).
    max_log_bytes: u64,
    /// The most events one log may expand to (see `expand`).
    max_events: u64,
    /// The most members one packed chunk row may hold (see `expand`).
    max_row_members: u64,
}

/// A configured count as a `usize`, when it is at least one and fits.
fn positive(v: u64) -> Option<usize> {
    usize::try_from(v).ok().filter(|n| *n > 0)
}

impl Config {
    /// The decoding caps, checked: each at least a byte, and a line no
    /// longer than a log.
    fn limits(&self) -> Result<Limits> {
        match (positive(self.max_line_bytes), positive(self.max_log_bytes)) {
            (Some(line), Some(log)) if line <= log => Ok(Limits { line, log }),
            _ => Err(Error::new(
                codes::INVALID_CONFIG,
                format!(
                    "maxLineBytes ({}) and maxLogBytes ({}) must be positive, with maxLineBytes at most maxLogBytes",
                    self.max_line_bytes, self.max_log_bytes
                ),
            )),
        }
    }

    /// The expansion caps, checked: each at least one.
    fn expansion(&self) -> Result<Expansion> {
        match (positive(self.max_events), positive(self.max_row_members)) {
            (Some(events), Some(row_members)) => Ok(Expansion {
                events,
                row_members,
            }),
            _ => Err(Error::new(
                codes::INVALID_CONFIG,
                format!(
                    "maxEvents ({}) and maxRowMembers ({}) must be positive",
                    self.max_events, self.max_row_members
                ),
            )),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            root: None,
            write_batch_max_delay_ms: 200,
            pack_chunks: true,
            compression: Compression::Zstd,
            max_line_bytes: limits::DEFAULT_MAX_LINE as u64,
            max_log_bytes: limits::DEFAULT_MAX_LOG as u64,
            max_events: expand::DEFAULT_MAX_EVENTS as u64,
            max_row_members: expand::DEFAULT_MAX_ROW_MEMBERS as u64,
        }
    }
}

struct Live {
    path: PathBuf,
    header: SessionHeader,
    on_disk: u64,
    pending: Vec<SessionEvent>,
    armed: bool,
    /// This host's writer lock; `None` until the first write creates the
    /// log (locked from the start).
    lock: Option<LogLock>,
    /// The old flat log a resumed session was read from (never written):
    /// kept locked so no other host continues it at the same time.
    legacy: Option<LogLock>,
}

struct Store {
    root: PathBuf,
    delay: Duration,
    /// Whether batches are written with packed chunk rows.
    pack_chunks: bool,
    /// The encoding of new logs.
    compression: Compression,
    /// How much of a log is ever decoded.
    limits: Limits,
    /// How many events a log may expand to.
    expansion: Expansion,
    /// The one compressor context every zstd frame is written with.
    framer: RefCell<Framer>,
    live: RefCell<HashMap<String, Live>>,
    /// Logs `load` locked for a resume whose `session/created` is to come.
    claimed: RefCell<HashMap<String, LogLock>>,
    /// Sessions whose log another writer holds: their events are dropped
    /// (nothing reaches that log) and every flush answers this error.
    refused: RefCell<HashMap<String, Error>>,
    /// While this generation adopts the sessions that were live before it
    /// loaded (a hot reload): events of sessions it does not know yet,
    /// kept until their session is adopted.
    adopting: RefCell<Option<HashMap<String, Vec<SessionEvent>>>>,
}

type Shared = Rc<Store>;

/// How a stored log is read.
#[derive(Clone, Copy, PartialEq)]
enum View {
    /// Crash repair in memory only (`inspect`).
    Inspect,
    /// Crash repair committed to the log (`load` of a stored session).
    Repair,
    /// `load` of a session live in this host: its writer is still going,
    /// so an open turn is refused, never repaired.
    Live,
}

fn err(code: &str, e: impl std::fmt::Display) -> Error {
    Error::new(code, e.to_string())
}

/// `SESSION_LOCKED`, naming the session, the holder (when known) and the log.
fn locked(id: &str, path: &Path, pid: Option<u32>) -> Error {
    let holder = match pid {
        Some(p) if p == std::process::id() => format!("another writer in this process (pid {p})"),
        Some(p) => format!("another process (pid {p})"),
        None => "another process".to_owned(),
    };
    Error::new(
        code::SESSION_LOCKED,
        format!(
            "session \"{id}\" is being written by {holder}; only one host may append to a session at a time, so wait for it to finish, then resume ({})",
            path.display()
        ),
    )
}

/// The error for a lock that was not taken.
fn refusal(id: &str, path: &Path, r: Refused) -> Error {
    match r {
        Refused::Busy { pid } => locked(id, path, pid),
        Refused::Io(e) => err(
            code::PERSISTENCE,
            format!("cannot lock session \"{id}\" ({}): {e}", path.display()),
        ),
    }
}

/// Why a new session's first write found its log already there.
fn collision(id: &str, path: &Path) -> Error {
    match lock::lock_path(path) {
        Err(r @ Refused::Busy { .. }) => refusal(id, path, r),
        _ => Error::new(
            code::SESSION_ALREADY_EXISTS,
            format!(
                "session \"{id}\" already has a persisted log on disk (id collision); load/resume it instead of creating ({})",
                path.display()
            ),
        ),
    }
}

/// `SESSION_NOT_FOUND` for `id`.
fn not_found(id: &str) -> Error {
    Error::new(
        code::SESSION_NOT_FOUND,
        format!("stored session \"{id}\" not found"),
    )
}

/// A log that could not be read: `SESSION_CORRUPT` when its bytes break
/// the format (a zstd log the original would refuse), else `PERSISTENCE`.
fn read_failed(id: &str, path: &Path, e: std::io::Error) -> Error {
    let code = if e.kind() == std::io::ErrorKind::InvalidData {
        code::SESSION_CORRUPT
    } else {
        code::PERSISTENCE
    };
    Error::new(
        code,
        format!(
            "cannot read stored session \"{id}\": {e} ({})",
            path.display()
        ),
    )
}

/// `SESSION_CORRUPT` for a log whose text breaks the format (`why`).
fn invalid(id: &str, path: &Path, why: String) -> Error {
    Error::new(
        code::SESSION_CORRUPT,
        format!(
            "stored session \"{id}\" failed validation: {why} ({})",
            path.display()
        ),
    )
}

/// `SESSION_CORRUPT` unless the header read from `path` (found as session
/// `id`'s log) is session `id`'s.
fn check_id(id: &str, path: &Path, header: &SessionHeader) -> Result<()> {
    if header.id == id {
        return Ok(());
    }
    Err(invalid(
        id,
        path,
        format!(
            "its header names session \"{}\"; a log is only ever read as the session its file name encodes",
            header.id
        ),
    ))
}

/// `list` of a directory known only by a lossy spelling is refused: its
/// sessions cannot be told from another directory's.
fn check_cwd(cwd: &str) -> Result<()> {
    if !is_lossy(cwd) {
        return Ok(());
    }
    Err(Error::new(
        code::SESSION_OTHER_DIRECTORY,
        format!(
            "the directory {cwd} has a name that is not valid UTF-8 (shown with U+FFFD), so its stored sessions cannot be told from another directory's; continue or resume from a directory with a UTF-8 name"
        ),
    ))
}

/// The log's modification time, epoch ms (0 when unknown).
fn modified_ms(path: &Path) -> u64 {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64)
}

/// True for the errors that mean "this log is not ours to write".
fn is_refusal(e: &Error) -> bool {
    matches!(
        e.code.as_str(),
        code::SESSION_LOCKED | code::SESSION_ALREADY_EXISTS
    )
}

impl Live {
    /// The seq the next event must carry.
    fn next_seq(&self) -> u64 {
        self.on_disk + self.pending.len() as u64
    }

    /// Buffers `event` if it is the next one and lossless JSON; otherwise
    /// refuses it (nothing is buffered), so the log never holds a restated
    /// seq, a gap, or data the original could not read back.
    fn accept(&mut self, id: &str, event: SessionEvent) -> Result<()> {
        let next = self.next_seq();
        if event.seq < next {
            return Err(Error::new(
                code::SEQ_RESTATED,
                format!(
                    "session \"{id}\": event seq {} restates a stored seq (the next is {next})",
                    event.seq
                ),
            ));
        }
        if event.seq > next {
            return Err(Error::new(
                code::SEQ_GAP,
                format!(
                    "session \"{id}\": event seq {} would leave a gap (the next is {next})",
                    event.seq
                ),
            ));
        }
        if !dsh_sdk::vocab::lossless(&event.data) {
            return Err(Error::new(
                code::NOT_LOSSLESS,
                format!(
                    "session \"{id}\": event data of \"{}\" must be losslessly JSON-serializable",
                    event.kind
                ),
            ));
        }
        self.pending.push(event);
        Ok(())
    }
}

impl Store {
    /// Where a new log of `header`'s session is written.
    fn path_for(&self, header: &SessionHeader) -> Result<PathBuf> {
        paths::new_log(
            &self.root,
            &header.id,
            header.cwd.as_deref(),
            self.compression,
        )
        .map_err(|e| err(code::INVALID_ID, e))
    }

    /// Every stored log of `id` in any project directory, the session
    /// directory layout (`<id>/session.jsonl[.zstd]`) before our old flat
    /// one (`<id>.jsonl[.zstd]`).
    fn artifacts(&self, id: &str) -> Result<Vec<PathBuf>> {
        let name = encode_segment(id).map_err(|e| err(code::INVALID_ID, e))?;
        let candidates = paths::stored_names(&name);
        let dirs: Vec<PathBuf> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .map(|d| d.path())
            .collect();
        let mut out = Vec::new();
        for c in &candidates {
            out.extend(dirs.iter().map(|d| d.join(c)).filter(|p| p.is_file()));
        }
        Ok(out)
    }

    /// Finds a stored session by id (see [`Store::artifacts`] for which
    /// log wins).
    fn find(&self, id: &str) -> Result<PathBuf> {
        self.artifacts(id)?
            .into_iter()
            .next()
            .ok_or_else(|| not_found(id))
    }

    /// True for a log of our old flat layout (see [`paths::is_flat`]).
    fn is_flat(&self, path: &Path) -> bool {
        paths::is_flat(&self.root, path)
    }

    /// The stored logs (path and header) of directory `cwd`, or of every
    /// project, read from their header alone (see `reader::read_header`).
    /// With `cwd`, only the logs whose header's `cwd` is that directory:
    /// the project folder's key is lossy (`/a/x/y` and `/a/x-y` share
    /// one), so the folder may hold other directories' sessions. A log
    /// whose header cannot be read is skipped with a warning: nothing says
    /// which directory it belongs to.
    fn logs(&self, cwd: Option<&str>) -> Vec<(PathBuf, SessionHeader)> {
        let dirs: Vec<PathBuf> = match cwd {
            Some(c) => vec![paths::project_dir(&self.root, Some(c))],
            None => std::fs::read_dir(&self.root)
                .into_iter()
                .flatten()
                .flatten()
                .map(|d| d.path())
                .collect(),
        };
        let mut found: HashMap<String, (PathBuf, SessionHeader)> = HashMap::new();
        for dir in dirs {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let Some(path) = paths::log_of_entry(&e.path()) else {
                    continue;
                };
                let header = match self.read_named_header(&path) {
                    Ok(h) => h,
                    Err(e) => {
                        dsh_sdk::tracing::warn!(
                            "skipped the stored session log {}: {e}",
                            path.display()
                        );
                        continue;
                    }
                };
                // A directory whose name was not UTF-8 is known only by a
                // lossy spelling, which another such directory may share.
                let of_cwd = cwd.is_none_or(|c| {
                    header
                        .cwd
                        .as_deref()
                        .is_some_and(|own| same_directory(own, c) && !is_lossy(own))
                });
                if !of_cwd {
                    continue;
                }
                // A flat log a resume has since continued in the session
                // directory layout is that session's older copy.
                let flat = self.is_flat(&path);
                let keep = found
                    .get(&header.id)
                    .is_none_or(|(p, _)| self.is_flat(p) && !flat);
                if keep {
                    found.insert(header.id.clone(), (path, header));
                }
            }
        }
        found.into_values().collect()
    }

    /// What `list` shows of the log at `path` beyond its header: how many
    /// turns it started and its last user prompt, from at most
    /// [`summary::SUMMARY_MAX`] decoded bytes and without expanding packed
    /// rows (see `summary`). A longer log answers `TOO_LONG_TO_SUMMARIZE`.
    fn summary(&self, id: &str, path: &Path) -> Result<(u64, String)> {
        match reader::read_within(path, summary::SUMMARY_MAX) {
            Ok(Some(log)) => Ok(summary::summarize(&log.text)),
            Ok(None) => Err(Error::new(
                code::TOO_LONG_TO_SUMMARIZE,
                format!(
                    "stored session \"{id}\" decodes to more than {}, the most a listing reads of a log for its turns and last prompt; `dsh-host sessions show {id}` reads it whole ({})",
                    limits::size(summary::SUMMARY_MAX),
                    path.display()
                ),
            )),
            Err(e) => Err(read_failed(id, path, e)),
        }
    }

    /// The header of the log at `path`, once it says it is the session the
    /// log's name (its session directory, or an old flat file) encodes: a
    /// log planted under another name with a session's id never stands in
    /// for that session.
    fn read_named_header(&self, path: &Path) -> std::result::Result<SessionHeader, String> {
        let header =
            reader::read_header(path).map_err(|e| format!("its header cannot be read: {e}"))?;
        if !paths::named_for(&self.root, path, &header.id) {
            return Err(format!(
                "its header names session \"{}\", which is not the session its file name encodes",
                header.id
            ));
        }
        Ok(header)
    }

    /// `header`: a stored session's header alone (a live session's, when
    /// this host has it open). A log whose header names another session is
    /// `SESSION_CORRUPT`.
    fn header(&self, id: &str) -> Result<SessionHeader> {
        if let Some(live) = self.live.borrow().get(id) {
            return Ok(live.header.clone());
        }
        let path = self.find(id)?;
        let header = reader::read_header(&path).map_err(|e| read_failed(id, &path, e))?;
        check_id(id, &path, &header)?;
        Ok(header)
    }

    /// Takes the lock this store already holds on `id`'s log, if any.
    fn take_held(&self, id: &str) -> Option<LogLock> {
        let claimed = self.claimed.borrow_mut().remove(id);
        claimed.or_else(|| self.live.borrow_mut().get_mut(id)?.lock.take())
    }

    fn holds(&self, id: &str) -> bool {
        self.claimed.borrow().contains_key(id)
            || self.live.borrow().get(id).is_some_and(|l| l.lock.is_some())
    }

    /// Locks `id`'s log at `path` for this store unless it already holds
    /// it; true when the lock is new.
    fn claim(&self, id: &str, path: &Path) -> Result<bool> {
        if self.holds(id) {
            return Ok(false);
        }
        let lock = lock::lock_path(path).map_err(|r| refusal(id, path, r))?;
        self.claimed.borrow_mut().insert(id.to_owned(), lock);
        Ok(true)
    }

    /// The lock a session created at `path` writes under: the one held
    /// already, else a new one if the log exists, else none yet (the first
    /// write creates the log locked).
    fn lock_for(&self, id: &str, path: &Path) -> Result<Option<LogLock>> {
        if let Some(held) = self.take_held(id) {
            return Ok(Some(held));
        }
        if !path.exists() {
            return Ok(None);
        }
        lock::lock_path(path)
            .map(Some)
            .map_err(|r| refusal(id, path, r))
    }

    /// Starts persisting a session that became live (`session/created`).
    /// A log another writer holds refuses it: nothing is written and every
    /// flush of it answers `SESSION_LOCKED`.
    fn attach(
        &self,
        header: SessionHeader,
        events: Vec<SessionEvent>,
        stored: u64,
        resumed: bool,
    ) -> Result<()> {
        let id = header.id.clone();
        self.refused.borrow_mut().remove(&id);
        // A session resumed from its stored log keeps its file (ours or the
        // original's layout); the seed is already on disk. A new session
        // whose id already has a log is an id collision: refused, so
        // nothing of it reaches that log.
        let path = if resumed || stored > 0 {
            let found = self.find(&id)?;
            if self.is_flat(&found) {
                return self.migrate(header, events, stored, &found);
            }
            found
        } else if let Ok(existing) = self.find(&id) {
            let e = collision(&id, &existing);
            self.live.borrow_mut().remove(&id);
            self.refused.borrow_mut().insert(id, e.clone());
            return Err(e);
        } else {
            self.path_for(&header)?
        };
        self.open_live(header, events, stored, path)
    }

    /// Continues a session resumed from our old flat log in the session
    /// directory layout: its first write publishes the whole history (what
    /// `load` answered, then `events`) as a new log. The flat log is left
    /// as it was, and stays locked while the session is live.
    fn migrate(
        &self,
        header: SessionHeader,
        events: Vec<SessionEvent>,
        stored: u64,
        flat: &Path,
    ) -> Result<()> {
        let id = header.id.clone();
        let (_, mut history) = self.read_view(&id, flat, View::Inspect)?;
        if history.len() as u64 != stored {
            return Err(Error::new(
                code::SESSION_CORRUPT,
                format!(
                    "stored session \"{id}\" changed while it was resumed ({})",
                    flat.display()
                ),
            ));
        }
        history.extend(events.into_iter().filter(|e| e.seq >= stored));
        let legacy = self.take_held(&id);
        let path = self.path_for(&header)?;
        self.open_live(header, history, 0, path)?;
        if let Some(l) = self.live.borrow_mut().get_mut(&id) {
            l.legacy = legacy;
        }
        Ok(())
    }

    /// Takes over a session that was live before this generation loaded
    /// (see `adopt_live_sessions`): its log, when it has one, must be a
    /// prefix of `events`.
    fn adopt(&self, header: SessionHeader, events: Vec<SessionEvent>) -> Result<()> {
        // An old flat log is never appended to: the session's whole
        // history goes to the new layout instead.
        let path = match self.find(&header.id) {
            Ok(path) if !self.is_flat(&path) => path,
            _ => self.path_for(&header)?,
        };
        self.open_live(header, events, 0, path)
    }

    /// The events the log at `path` holds; none when there is no log yet.
    /// A log that exists but cannot be read back (corrupt, or over a cap)
    /// is an error: appending to it would bury the session under lines no
    /// reader reaches.
    fn stored_events(&self, id: &str, path: &Path) -> Result<Vec<SessionEvent>> {
        match reader::read(path, self.limits) {
            Ok(log) => Ok(self.scan_log(id, path, &log)?.events),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(read_failed(id, path, e)),
        }
    }

    /// Locks `path` for a live session whose first `stored` events are on
    /// disk (0: read the log and require `events` to restate it).
    fn open_live(
        &self,
        header: SessionHeader,
        events: Vec<SessionEvent>,
        stored: u64,
        path: PathBuf,
    ) -> Result<()> {
        let id = header.id.clone();
        let lock = match self.lock_for(&id, &path) {
            Ok(lock) => lock,
            Err(e) => {
                self.live.borrow_mut().remove(&id);
                self.refused.borrow_mut().insert(id, e.clone());
                return Err(e);
            }
        };
        let on_disk = if stored > 0 {
            stored
        } else {
            let disk = match self.stored_events(&id, &path) {
                Ok(disk) => disk,
                Err(e) => {
                    drop(lock);
                    self.live.borrow_mut().remove(&id);
                    self.refused.borrow_mut().insert(id, e.clone());
                    return Err(e);
                }
            };
            // A new session whose id already has a log: only a seed that
            // restates that log continues it; anything else is another
            // session under the same id and must not be appended to it.
            if !events.starts_with(&disk) {
                drop(lock);
                let e = collision(&id, &path);
                self.live.borrow_mut().remove(&id);
                self.refused.borrow_mut().insert(id, e.clone());
                return Err(e);
            }
            disk.len() as u64
        };
        let pending = events.into_iter().filter(|e| e.seq >= on_disk).collect();
        let live = Live {
            path,
            header,
            on_disk,
            pending,
            armed: false,
            lock,
            legacy: None,
        };
        self.live.borrow_mut().insert(id, live);
        Ok(())
    }

    /// Writes everything pending for `id`, then fsyncs. A refused session
    /// answers its error.
    fn write(&self, id: &str) -> Result<()> {
        if let Some(e) = self.refused.borrow().get(id) {
            return Err(e.clone());
        }
        let outcome = {
            let mut live = self.live.borrow_mut();
            let Some(s) = live.get_mut(id) else {
                return Ok(());
            };
            s.armed = false;
            if s.pending.is_empty() {
                return Ok(());
            }
            Self::write_pending(id, s, self.pack_chunks, &mut self.framer.borrow_mut())
        };
        if let Err(e) = &outcome {
            if is_refusal(e) {
                self.live.borrow_mut().remove(id);
                self.refused.borrow_mut().insert(id.to_owned(), e.clone());
            }
        }
        outcome
    }

    /// Appends `s.pending` to its log, creating the log (locked) on the
    /// first write. Fails `PERSISTENCE` (events kept for the next try) or,
    /// when another writer's log is already there, with that reason.
    fn write_pending(id: &str, s: &mut Live, pack_chunks: bool, framer: &mut Framer) -> Result<()> {
        let text = packing::storage_lines(&s.pending, pack_chunks).map_err(|e| {
            err(
                code::PERSISTENCE,
                format!("cannot encode the batch of {id}: {e}"),
            )
        })?;
        if s.lock.is_some() {
            durable::append(&s.path, &text, framer).map_err(|e| err(code::PERSISTENCE, e))?;
        } else {
            match durable::publish_new(&s.path, &s.header, &text, framer) {
                Ok(lock) => s.lock = Some(lock),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    return Err(collision(id, &s.path))
                }
                Err(e) => return Err(err(code::PERSISTENCE, e)),
            }
        }
        s.on_disk += s.pending.len() as u64;
        s.pending.clear();
        Ok(())
    }

    /// Forgets `id` (disposed): its lock, if this store held one, is released.
    fn release(&self, id: &str) {
        self.live.borrow_mut().remove(id);
        self.claimed.borrow_mut().remove(id);
        self.refused.borrow_mut().remove(id);
    }

    /// `remove`: deletes every stored log of `id` (its session directory,
    /// or an old flat file), each locked first so a log another host is
    /// writing is refused with `SESSION_LOCKED` and nothing is deleted.
    fn remove(&self, id: &str) -> Result<()> {
        let paths = self.artifacts(id)?;
        let Some(first) = paths.first() else {
            return Err(not_found(id));
        };
        if self.live.borrow().contains_key(id) {
            return Err(Error::new(
                code::SESSION_LOCKED,
                format!(
                    "session \"{id}\" is open in this host; close it before removing it ({})",
                    first.display()
                ),
            ));
        }
        // A `load` of this host that no resume followed holds no session.
        self.claimed.borrow_mut().remove(id);
        let mut held = Vec::new();
        for path in &paths {
            held.push(lock::lock_path(path).map_err(|r| refusal(id, path, r))?);
        }
        for path in &paths {
            // A session directory holding both encodings went with the first.
            if !path.exists() {
                continue;
            }
            let gone = if self.is_flat(path) {
                std::fs::remove_file(path)
            } else {
                path.parent().map_or(Ok(()), std::fs::remove_dir_all)
            };
            gone.map_err(|e| {
                err(
                    code::PERSISTENCE,
                    format!("cannot remove session \"{id}\" ({}): {e}", path.display()),
                )
            })?;
        }
        drop(held);
        Ok(())
    }

    /// `load` (`repair`: the resume path, which commits crash repair) or
    /// `inspect`. `load` locks the log first and keeps the lock for the
    /// session it is about to become, so a log another host is writing is
    /// neither repaired under it nor resumed twice.
    fn load(&self, id: &str, repair: bool) -> Result<(SessionHeader, Vec<SessionEvent>)> {
        if repair && self.live.borrow().contains_key(id) {
            return self.load_live(id);
        }
        let path = self.find(id)?;
        if !repair {
            return self.read_view(id, &path, View::Inspect);
        }
        let fresh = self.claim(id, &path)?;
        // An old flat log is never written: its repair stays in memory and
        // reaches disk with the new log its resume publishes.
        let view = if self.is_flat(&path) {
            View::Inspect
        } else {
            View::Repair
        };
        let view = self.read_view(id, &path, view);
        if view.is_err() && fresh {
            self.claimed.borrow_mut().remove(id);
        }
        view
    }

    /// `load` of a session live in this host: what it has written so far,
    /// once everything pending is durable, and only while no turn is open
    /// (repairing it would close a turn its writer is still running).
    fn load_live(&self, id: &str) -> Result<(SessionHeader, Vec<SessionEvent>)> {
        self.write(id)?;
        let path = self.find(id)?;
        self.read_view(id, &path, View::Live)
    }

    /// Scans a log and imports its events (legacy records upgraded,
    /// message shapes validated); a log that fails either is corrupt.
    fn scan_log(&self, id: &str, path: &Path, log: &reader::Log) -> Result<Scan> {
        let corrupt = |e: String| invalid(id, path, e);
        let mut s = scan(&log.text, self.expansion).map_err(corrupt)?;
        check_id(id, path, &s.header)?;
        log.check_defect(s.torn_at).map_err(corrupt)?;
        s.events = legacy::import(id, std::mem::take(&mut s.events)).map_err(corrupt)?;
        Ok(s)
    }

    fn read_view(
        &self,
        id: &str,
        path: &Path,
        view: View,
    ) -> Result<(SessionHeader, Vec<SessionEvent>)> {
        let log = reader::read(path, self.limits).map_err(|e| read_failed(id, path, e))?;
        let Scan {
            header,
            mut events,
            torn_at,
        } = self.scan_log(id, path, &log)?;
        if let Some((e, why)) = events
            .iter()
            .find_map(|e| Some((e, event::refuse_unknown(&e.kind, e.ignorable)?)))
        {
            return Err(err(
                code::SESSION_FORMAT_UNSUPPORTED,
                format!(
                    "stored session \"{id}\" cannot be read: {why} (seq {}) ({})",
                    e.seq,
                    path.display()
                ),
            ));
        }
        let closers = interrupted_turn_closers(&events);
        if view == View::Live && !closers.is_empty() {
            return Err(Error::new(
                code::OPEN_TURN,
                format!("cannot load session \"{id}\" while its live turn is open; use the live Session or wait for the turn to close"),
            ));
        }
        if view == View::Repair && (torn_at.is_some() || log.is_torn() || !closers.is_empty()) {
            durable::repair(path, &log, torn_at, &closers, &mut self.framer.borrow_mut())
                .map_err(|e| err(code::PERSISTENCE, e))?;
        }
        events.extend(closers);
        Ok((header, events))
    }
}

/// A log's revision: device, inode, size and the ns timestamps of its
/// file, so any write (an append, a repair) changes it and a read does not.
fn revision(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!(
        "jsonl:{}:{}:{}:{}.{:09}:{}.{:09}",
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec()
    )
}

/// Dispatches a `sessionPersistence` request to its method, with its params
/// parsed into the method's type.
async fn handle(store: Shared, req: Request) -> Result<Reply> {
    match req.method.as_str() {
        session_persistence::LOAD => stored(store.load(&req.params_as::<IdParams>()?.id, true)?),
        session_persistence::INSPECT => {
            stored(store.load(&req.params_as::<IdParams>()?.id, false)?)
        }
        session_persistence::READ_FROM => read_from(&store, &req),
        session_persistence::LOCATE => {
            let path = store.find(&req.params_as::<IdParams>()?.id)?;
            Reply::json(Location {
                kind: "jsonl".into(),
                path,
            })
        }
        session_persistence::LIST => list(&store, req.params_as()?),
        session_persistence::HEADER => Reply::json(store.header(&req.params_as::<IdParams>()?.id)?),
        session_persistence::REMOVE => {
            store.remove(&req.params_as::<IdParams>()?.id)?;
            Reply::json(Value::Null)
        }
        session_persistence::LIST_SNAPSHOTS => list_snapshots(&store, req.params_as()?),
        _ => Err(req.unknown_method()),
    }
}

/// A stored session, serialized straight from its events (no intermediate
/// tree).
fn stored((header, events): (SessionHeader, Vec<SessionEvent>)) -> Result<Reply> {
    Reply::json(StoredSession { header, events })
}

fn read_from(store: &Store, req: &Request) -> Result<Reply> {
    req.params_as::<IdParams>()?;
    let p: ReadFromParams = req.params.parse().map_err(|_| {
        Error::new(
            codes::INVALID_PAYLOAD,
            "fromSeq must be a non-negative safe integer",
        )
    })?;
    let path = store.find(&p.id)?;
    let log = reader::read(&path, store.limits).map_err(|e| read_failed(&p.id, &path, e))?;
    let s = store.scan_log(&p.id, &path, &log)?;
    let events: Vec<&SessionEvent> = s.events.iter().filter(|e| e.seq >= p.from_seq).collect();
    Reply::json(StoredSession {
        header: s.header,
        events,
    })
}

/// The stored sessions of `p.cwd` (see `Store::logs`), oldest first. Each
/// is found from its header; its turns and last prompt come from reading
/// the rest of its log under the caps, and a log that cannot be read is
/// listed with why instead of them.
fn list(store: &Store, p: ListParams) -> Result<Reply> {
    if let Some(cwd) = &p.cwd {
        check_cwd(cwd)?;
    }
    let mut out: Vec<Listed> = store
        .logs(p.cwd.as_deref())
        .into_iter()
        .map(|(path, header)| {
            let (turns, last_prompt, unreadable) = match store.summary(&header.id, &path) {
                Ok((turns, last_prompt)) => (turns, last_prompt, None),
                Err(e) => (0, String::new(), Some(e)),
            };
            Listed {
                id: header.id,
                created_at: header.created_at,
                turns,
                last_prompt,
                updated_at: modified_ms(&path),
                unreadable,
                parent_session: header.parent_session,
                origin: header.origin,
            }
        })
        .collect();
    out.sort_by_key(|l| l.created_at);
    Reply::json(out)
}

/// Every stored session (of `cwd`, when given) with the revision of its
/// log: equal revisions mean an unchanged log. Read from headers alone.
fn list_snapshots(store: &Store, p: ListParams) -> Result<Reply> {
    let mut out = Vec::new();
    for (path, header) in store.logs(p.cwd.as_deref()) {
        let meta = std::fs::metadata(&path).map_err(|e| err(code::PERSISTENCE, e))?;
        out.push(Snapshot {
            header,
            revision: revision(&meta),
        });
    }
    out.sort_by_key(|s| s.header.created_at);
    Reply::json(out)
}

struct Jsonl;

/// Adopts the sessions that are live in the `sessions` service but unknown
/// here: this backend was (re)loaded under them, so their `session/created`
/// went to its predecessor. Each is attached like a new session whose seed
/// must restate what its log holds (its predecessor wrote and released it
/// on unload), so its later events continue that log; a log that does not
/// match is refused, never repaired or overwritten. Events that arrive
/// while adopting are kept and appended after the snapshot.
async fn adopt_live_sessions(ctx: &Context, store: &Shared) {
    let live = Sessions::new(ctx);
    let ids = live_ids(live.list().await).unwrap_or_else(|e| {
        dsh_sdk::tracing::warn!(
            "the sessions live across this reload of session-jsonl cannot be listed, so none of \
             them is adopted and their later events are not persisted (resume them to persist \
             again): {e}"
        );
        Vec::new()
    });
    for id in ids {
        if store.live.borrow().contains_key(&id) {
            continue;
        }
        if let Err(e) = adopt(&live, store, &id).await {
            dsh_sdk::tracing::warn!("session \"{id}\" live across a reload is not persisted: {e}");
        }
    }
    let late = store.adopting.borrow_mut().take().unwrap_or_default();
    for (id, events) in late {
        if let Some(l) = store.live.borrow_mut().get_mut(&id) {
            for event in events {
                if let Err(e) = l.accept(&id, event) {
                    dsh_sdk::tracing::warn!("session \"{id}\": {e}");
                }
            }
        }
    }
}

/// The sessions live in the `sessions` service, from its `list` answer:
/// none when there is no such service yet (the first boot, where nothing
/// was live); any other failure is the caller's to report.
fn live_ids(listed: Result<Vec<String>>) -> Result<Vec<String>> {
    match listed {
        Err(e) if e.code == codes::SERVICE_UNAVAILABLE => Ok(Vec::new()),
        listed => listed,
    }
}

async fn adopt(live: &Sessions, store: &Shared, id: &str) -> Result<()> {
    let header = live.header(id).await?.header;
    let mut events = live.events(id, 0).await?;
    let waiting = store
        .adopting
        .borrow_mut()
        .as_mut()
        .and_then(|w| w.remove(id))
        .unwrap_or_default();
    let next = events.len() as u64;
    events.extend(waiting.into_iter().filter(|e| e.seq >= next));
    store.adopt(header, events)
}

impl Plugin for Jsonl {
    const NAME: &'static str = "session-jsonl";
    const DESCRIPTION: &'static str = "JSONL session persistence (service `sessionPersistence`)";
    const PROVIDES: &'static [&'static str] = &[service::SESSION_PERSISTENCE];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let limits = config.limits()?;
        let expansion = config.expansion()?;
        let root = match config.root {
            Some(r) => PathBuf::from(r),
            None => PathBuf::from(Host::new(&ctx).info().await?.home).join("sessions"),
        };
        let store: Shared = Rc::new(Store {
            root,
            delay: Duration::from_millis(config.write_batch_max_delay_ms),
            pack_chunks: config.pack_chunks,
            compression: config.compression,
            limits,
            expansion,
            framer: RefCell::new(
                Framer::new()
                    .map_err(|e| err(code::PERSISTENCE, format!("cannot set up zstd: {e}")))?,
            ),
            live: RefCell::default(),
            claimed: RefCell::default(),
            refused: RefCell::default(),
            adopting: RefCell::new(Some(HashMap::new())),
        });
        let s = store.clone();
        ctx.provide(service::SESSION_PERSISTENCE, move |req| {
            handle(s.clone(), req)
        });

        let s = store.clone();
        ctx.on(bus::SESSION_CREATED, move |ev| {
            let s = s.clone();
            async move {
                check_meta(&ev.payload)?;
                let created: SessionCreated = ev.payload_as()?;
                s.attach(
                    created.header,
                    created.events,
                    created.stored.unwrap_or(0),
                    created.resumed == Some(true),
                )?;
                Ok(Value::Null)
            }
        });
        let (s, c) = (store.clone(), ctx.clone());
        ctx.on(bus::SESSION_EVENT, move |ev| {
            let (s, c) = (s.clone(), c.clone());
            async move {
                let SessionAppended {
                    session_id: id,
                    event,
                } = ev.payload_as()?;
                let arm = {
                    let mut live = s.live.borrow_mut();
                    let Some(l) = live.get_mut(&id) else {
                        if let Some(waiting) = s.adopting.borrow_mut().as_mut() {
                            waiting.entry(id).or_default().push(event);
                        }
                        return Ok(Value::Null);
                    };
                    l.accept(&id, event)?;
                    !std::mem::replace(&mut l.armed, true)
                };
                if arm {
                    let s2 = s.clone();
                    c.spawn(async move {
                        tokio::time::sleep(s2.delay).await;
                        if let Err(e) = s2.write(&id) {
                            dsh_sdk::tracing::warn!(
                                "batched write of {id} failed (kept for the next flush): {e}"
                            );
                        }
                    });
                }
                Ok(Value::Null)
            }
        });
        let s = store.clone();
        ctx.on(bus::SESSION_FLUSH, move |ev| {
            let s = s.clone();
            async move {
                let SessionRef { session_id } = ev.payload_as()?;
                s.write(&session_id)?;
                Ok(Value::Null)
            }
        });
        // A session loaded for a resume that was rolled back: never
        // announced, its log is let go of.
        let s = store.clone();
        ctx.on(bus::SESSION_DISCARDED, move |ev| {
            let s = s.clone();
            async move {
                let SessionRef { session_id: id } = ev.payload_as()?;
                if !s.live.borrow().contains_key(&id) {
                    s.release(&id);
                }
                Ok(Value::Null)
            }
        });
        let s = store.clone();
        ctx.on(bus::SESSION_DISPOSED, move |ev| {
            let s = s.clone();
            async move {
                let SessionRef { session_id: id } = ev.payload_as()?;
                // A refused session already answered its flushes.
                let written = s
                    .write(&id)
                    .or_else(|e| if is_refusal(&e) { Ok(()) } else { Err(e) });
                s.release(&id);
                written.map(|()| Value::Null)
            }
        });
        let s = store.clone();
        ctx.effect(move || async move {
            let ids: Vec<String> = s.live.borrow().keys().cloned().collect();
            for id in ids {
                if let Err(e) = s.write(&id) {
                    dsh_sdk::tracing::warn!("final write of {id} failed: {e}");
                }
            }
            // Unloading releases every writer lock this store holds.
            s.live.borrow_mut().clear();
            s.claimed.borrow_mut().clear();
            s.refused.borrow_mut().clear();
        });
        adopt_live_sessions(&ctx, &store).await;
        Ok(())
    }
}

dsh_sdk::export_plugin!(Jsonl);

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sdk::json;

    #[test]
    fn created_at_must_be_a_safe_integer_whatever_the_payload_s_shape() {
        let check = |text: &str| check_meta(&dsh_sdk::Payload::from_text(text));
        for ok in [
            r#"{"header":{"id":"s","createdAt":0},"events":[]}"#,
            r#"{"header":{"createdAt":9007199254740991}}"#,
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for (bad, got) in [
            (r#"{"header":{"createdAt":1.5}}"#, "1.5"),
            (r#"{"header":{"createdAt":-1}}"#, "-1"),
            (
                r#"{"header":{"createdAt":9007199254740992}}"#,
                "9007199254740992",
            ),
            (r#"{"header":{"createdAt":"1"}}"#, "\"1\""),
            (r#"{"header":{"id":"s"}}"#, "null"),
            // A header that is not an object has no createdAt, an array
            // included (serde alone would read its first entry).
            (r#"{"header":[5]}"#, "null"),
            (r#"{"header":"s"}"#, "null"),
            (r#"{"events":[]}"#, "null"),
            ("[]", "null"),
        ] {
            let e = check(bad).unwrap_err();
            assert_eq!(e.code, code::INVALID_META, "{bad}");
            assert!(e.message.ends_with(&format!("(got {got})")), "{bad}: {e}");
        }
    }

    #[test]
    fn the_caps_default_to_the_limits_and_bad_ones_are_refused() {
        let defaults: Config = serde_json::from_value(json!({})).unwrap();
        assert_eq!(defaults.limits(), Ok(Limits::default()));
        let set: Config =
            serde_json::from_value(json!({"maxLineBytes": 10, "maxLogBytes": 20})).unwrap();
        assert_eq!(set.limits(), Ok(Limits { line: 10, log: 20 }));
        assert_eq!(defaults.expansion(), Ok(Expansion::default()));
        let set: Config =
            serde_json::from_value(json!({"maxEvents": 7, "maxRowMembers": 3})).unwrap();
        assert_eq!(
            set.expansion(),
            Ok(Expansion {
                events: 7,
                row_members: 3
            })
        );
        let bad: Config = serde_json::from_value(json!({"maxRowMembers": 0})).unwrap();
        let e = bad.expansion().unwrap_err();
        assert!(e.message.contains("maxRowMembers"), "{e}");
        for (line, log) in [(0, 20), (10, 0), (30, 20)] {
            let bad: Config =
                serde_json::from_value(json!({"maxLineBytes": line, "maxLogBytes": log})).unwrap();
            let e = bad.limits().unwrap_err();
            assert_eq!(e.code, codes::INVALID_CONFIG, "{e}");
            assert!(e.message.contains("maxLineBytes"), "{e}");
        }
    }

    #[test]
    fn only_a_missing_sessions_service_reads_as_no_live_session() {
        assert_eq!(
            live_ids(Err(Error::new(codes::SERVICE_UNAVAILABLE, "no sessions"))).unwrap(),
            Vec::<String>::new()
        );
        let e = live_ids(Err(Error::new(codes::TIMEOUT, "slow"))).unwrap_err();
        assert_eq!(e.code, codes::TIMEOUT, "any other failure is reported");
        assert_eq!(live_ids(Ok(vec!["a".into()])).unwrap(), ["a"]);
    }
}
