//! Every recorded server error of `testdata/errors/` classified as its
//! file says: each server's overflow is `CONTEXT_WINDOW_EXCEEDED` (so
//! overflow recovery runs), the near misses beside them stay what they
//! were, and every failure keeps the server's words (and llama.cpp's
//! counts).
#![cfg(test)] // test code to clippy as well: helpers may unwrap

use std::path::{Path, PathBuf};

use dsh_llm_http::failure::{event_error, http_failure, stream_failure};
use serde::Deserialize;
use serde_json::Value;

/// One recorded error (see `testdata/errors/README.md`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Recorded {
    server: String,
    what: String,
    source: String,
    /// The HTTP status of an error response; absent for an error sent
    /// inside a 200 stream (`stream`).
    status: Option<u16>,
    #[serde(default)]
    stream: bool,
    /// The body (or the stream event's data), as the server sends it.
    body: Value,
    /// The failure code it must get.
    expect: String,
    /// Texts the failure's message must hold.
    mentions: Vec<String>,
}

fn recorded() -> Vec<(PathBuf, Recorded)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/errors");
    let mut all: Vec<(PathBuf, Recorded)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let r = serde_json::from_str(&std::fs::read_to_string(&p).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, r)
        })
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

#[test]
fn each_recorded_error_gets_its_code_and_keeps_the_servers_words() {
    let all = recorded();
    let servers: std::collections::BTreeSet<&str> =
        all.iter().map(|(_, r)| r.server.as_str()).collect();
    // Every server the issue names has at least one recorded overflow.
    for s in [
        "llama.cpp",
        "vLLM",
        "Ollama",
        "LM Studio",
        "OpenAI",
        "DeepSeek",
        "Anthropic",
    ] {
        assert!(
            all.iter()
                .any(|(_, r)| r.server == s && r.expect == "CONTEXT_WINDOW_EXCEEDED"),
            "no recorded overflow of {s} (servers: {servers:?})"
        );
    }
    for (path, r) in &all {
        assert!(
            !r.what.is_empty() && !r.source.is_empty(),
            "{}",
            path.display()
        );
        let body = r.body.to_string();
        let failure = match (r.status, r.stream) {
            (Some(status), false) => http_failure(status, &body, None),
            (None, true) => stream_failure(
                event_error(&body)
                    .unwrap_or_else(|| panic!("{}: no `error` in the event", path.display())),
            ),
            _ => panic!("{}: a status or `stream`, not both", path.display()),
        };
        assert_eq!(
            failure.code,
            r.expect,
            "{} ({}): {}",
            path.display(),
            r.server,
            failure.message
        );
        for m in &r.mentions {
            assert!(
                failure.message.contains(m.as_str()),
                "{}: the message lost {m:?}: {}",
                path.display(),
                failure.message
            );
        }
        assert_eq!(failure.status, r.status, "{}", path.display());
    }
}
