//! `session-jsonl`: one JSONL log per session under
//! `<root>/--<project-key(cwd)>--/<encoded-id>.jsonl` (root defaults to
//! `$DSH_HOME/sessions`), header line first. Events are buffered from
//! `session/event` and written at `session/flush` (fsync) or after a batch
//! window; `load` repairs a torn tail and closes an interrupted turn
//! (reference dsh-core §8).

mod format;

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use dsh_sdk::prelude::*;
use dsh_sdk::vocab::{interrupted_turn_closers, SessionEvent, SessionHeader};
use format::{encode_segment, project_key, scan, Scan};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    root: Option<String>,
    write_batch_max_delay_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            root: None,
            write_batch_max_delay_ms: 200,
        }
    }
}

struct Live {
    path: PathBuf,
    header: SessionHeader,
    on_disk: u64,
    pending: Vec<SessionEvent>,
    armed: bool,
}

struct Store {
    root: PathBuf,
    delay: Duration,
    live: RefCell<HashMap<String, Live>>,
}

type Shared = Rc<Store>;

fn err(code: &str, e: impl std::fmt::Display) -> Error {
    Error::new(code, e.to_string())
}

impl Store {
    fn dir_for(&self, cwd: Option<&str>) -> PathBuf {
        match cwd {
            Some(c) => self.root.join(format!("--{}--", project_key(c))),
            None => self.root.join("_no-cwd"),
        }
    }

    fn path_for(&self, header: &SessionHeader) -> Result<PathBuf> {
        let name = encode_segment(&header.id).map_err(|e| err("INVALID_ID", e))?;
        Ok(self
            .dir_for(header.cwd.as_deref())
            .join(format!("{name}.jsonl")))
    }

    /// Finds a stored session by id in any project directory: our layout
    /// (`<id>.jsonl`) or the original's (`<id>/session.jsonl[.zstd]`).
    fn find(&self, id: &str) -> Result<PathBuf> {
        let name = encode_segment(id).map_err(|e| err("INVALID_ID", e))?;
        let candidates = [
            format!("{name}.jsonl"),
            format!("{name}.jsonl.zstd"),
            format!("{name}/session.jsonl"),
            format!("{name}/session.jsonl.zstd"),
        ];
        if let Ok(dirs) = std::fs::read_dir(&self.root) {
            for d in dirs.flatten() {
                for c in &candidates {
                    let p = d.path().join(c);
                    if p.is_file() {
                        return Ok(p);
                    }
                }
            }
        }
        Err(Error::new(
            "SESSION_NOT_FOUND",
            format!("stored session \"{id}\" not found"),
        ))
    }

    /// Writes everything pending for `id`, then fsyncs.
    fn write(&self, id: &str) -> Result<()> {
        let mut live = self.live.borrow_mut();
        let Some(s) = live.get_mut(id) else {
            return Ok(());
        };
        s.armed = false;
        if s.pending.is_empty() {
            return Ok(());
        }
        let mut text = String::new();
        for e in &s.pending {
            text.push_str(&serde_json::to_string(e)?);
            text.push('\n');
        }
        if s.on_disk == 0 && !s.path.exists() {
            format::publish_new(&s.path, &s.header, &text).map_err(|e| err("PERSISTENCE", e))?;
        } else {
            format::append(&s.path, &text).map_err(|e| err("PERSISTENCE", e))?;
        }
        s.on_disk += s.pending.len() as u64;
        s.pending.clear();
        Ok(())
    }

    fn load(&self, id: &str, repair: bool) -> Result<(SessionHeader, Vec<SessionEvent>)> {
        let path = self.find(id)?;
        let log = format::read(&path).map_err(|e| err("PERSISTENCE", e))?;
        let Scan {
            header,
            mut events,
            torn_at,
        } = scan(&log.text).map_err(|e| {
            err(
                "SESSION_CORRUPT",
                format!(
                    "stored session \"{id}\" failed validation: {e} ({})",
                    path.display()
                ),
            )
        })?;
        let closers = interrupted_turn_closers(&events);
        if repair && (torn_at.is_some() || log.is_torn() || !closers.is_empty()) {
            format::repair(&path, &log, torn_at, &closers).map_err(|e| err("PERSISTENCE", e))?;
        }
        events.extend(closers);
        Ok((header, events))
    }
}

async fn handle(store: Shared, req: Request) -> Result<Reply> {
    let id = req.params["id"].as_str().unwrap_or_default().to_owned();
    match req.method.as_str() {
        "load" => {
            let (header, events) = store.load(&id, true)?;
            Reply::json(json!({"header": header, "events": events}))
        }
        "inspect" => {
            let (header, events) = store.load(&id, false)?;
            Reply::json(json!({"header": header, "events": events}))
        }
        "readFrom" => {
            let from = req.params["fromSeq"].as_u64().ok_or_else(|| {
                Error::new(
                    codes::INVALID_PAYLOAD,
                    "fromSeq must be a non-negative safe integer",
                )
            })?;
            let path = store.find(&id)?;
            let log = format::read(&path).map_err(|e| err("PERSISTENCE", e))?;
            let s = scan(&log.text).map_err(|e| err("SESSION_CORRUPT", e))?;
            let events: Vec<&SessionEvent> = s.events.iter().filter(|e| e.seq >= from).collect();
            Reply::json(json!({"header": s.header, "events": events}))
        }
        "locate" => {
            let path = store.find(&id)?;
            Reply::json(json!({"kind": "jsonl", "path": path}))
        }
        "list" => {
            let dir = store.dir_for(req.params["cwd"].as_str());
            let mut out = Vec::new();
            if let Ok(entries) = std::fs::read_dir(&dir) {
                for e in entries.flatten() {
                    let path = if e.path().is_dir() {
                        let plain = e.path().join("session.jsonl");
                        if plain.is_file() {
                            plain
                        } else {
                            e.path().join("session.jsonl.zstd")
                        }
                    } else {
                        e.path()
                    };
                    let Ok(log) = format::read(&path) else {
                        continue;
                    };
                    let Ok(s) = scan(&log.text) else { continue };
                    let turns = s.events.iter().filter(|e| e.kind == "turn/start").count();
                    let last_prompt = s
                        .events
                        .iter()
                        .rev()
                        .find(|e| e.kind == "user/message" && e.data["source"]["kind"] == "user")
                        .map(|e| dsh_sdk::vocab::msg::joined_text(&e.data))
                        .unwrap_or_default();
                    out.push(json!({"id": s.header.id, "createdAt": s.header.created_at, "turns": turns, "lastPrompt": last_prompt}));
                }
            }
            out.sort_by_key(|v| v["createdAt"].as_u64());
            Reply::json(out)
        }
        _ => Err(req.unknown_method()),
    }
}

struct Jsonl;

impl Plugin for Jsonl {
    const NAME: &'static str = "session-jsonl";
    const DESCRIPTION: &'static str = "JSONL session persistence (service `sessionPersistence`)";
    const PROVIDES: &'static [&'static str] = &["sessionPersistence"];
    type Config = Config;

    async fn apply(ctx: Context, config: Config) -> Result<()> {
        let root = match config.root {
            Some(r) => PathBuf::from(r),
            None => {
                let info = ctx.service("host").call("info", json!({})).await?;
                PathBuf::from(info["home"].as_str().unwrap_or(".")).join("sessions")
            }
        };
        let store: Shared = Rc::new(Store {
            root,
            delay: Duration::from_millis(config.write_batch_max_delay_ms),
            live: RefCell::default(),
        });
        let s = store.clone();
        ctx.provide("sessionPersistence", move |req| handle(s.clone(), req));

        let s = store.clone();
        ctx.on("session/created", move |ev| {
            let s = s.clone();
            async move {
                let header: SessionHeader = serde_json::from_value(ev.payload["header"].clone())?;
                let events: Vec<SessionEvent> =
                    serde_json::from_value(ev.payload["events"].clone())?;
                // A session resumed from its stored log keeps its file (ours
                // or the original's layout); the seed is already on disk.
                let stored = ev.payload["stored"].as_u64().unwrap_or(0);
                let path = if stored > 0 {
                    s.find(&header.id)?
                } else {
                    s.find(&header.id).or_else(|_| s.path_for(&header))?
                };
                let on_disk = if stored > 0 {
                    stored
                } else {
                    match format::read(&path) {
                        Ok(log) => scan(&log.text)
                            .map(|sc| sc.events.len() as u64)
                            .unwrap_or(0),
                        Err(_) => 0,
                    }
                };
                let pending = events.into_iter().filter(|e| e.seq >= on_disk).collect();
                s.live.borrow_mut().insert(
                    header.id.clone(),
                    Live {
                        path,
                        header,
                        on_disk,
                        pending,
                        armed: false,
                    },
                );
                Ok(Value::Null)
            }
        });
        let (s, c) = (store.clone(), ctx.clone());
        ctx.on("session/event", move |ev| {
            let (s, c) = (s.clone(), c.clone());
            async move {
                let id = ev.payload["sessionId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let event: SessionEvent = serde_json::from_value(ev.payload["event"].clone())?;
                let arm = {
                    let mut live = s.live.borrow_mut();
                    let Some(l) = live.get_mut(&id) else {
                        return Ok(Value::Null);
                    };
                    l.pending.push(event);
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
        ctx.on("session/flush", move |ev| {
            let s = s.clone();
            async move {
                let id = ev.payload["sessionId"].as_str().unwrap_or_default();
                s.write(id)?;
                Ok(Value::Null)
            }
        });
        let s = store.clone();
        ctx.on("session/disposed", move |ev| {
            let s = s.clone();
            async move {
                let id = ev.payload["sessionId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                s.write(&id)?;
                s.live.borrow_mut().remove(&id);
                Ok(Value::Null)
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
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Jsonl);
