//! A fake OpenAI-compatible chat-completions server on 127.0.0.1, with
//! scripted SSE streams and faults. It records every request body.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Answer {
    /// 200 with these SSE `data:` payloads (and `: keep-alive` comments
    /// where an item is `None`), then the connection closes.
    Sse(Vec<Option<String>>),
    /// 200 with these SSE events, each an `event:` name and its `data:`
    /// payload (as the Anthropic Messages and OpenAI Responses APIs send
    /// them), then the connection closes.
    Named(Vec<(String, String)>),
    /// 200, some data payloads, then the server stops writing forever.
    Stall(Vec<String>),
    /// 200, some data payloads, then the connection drops mid-event.
    Disconnect(Vec<String>),
    /// Like `Sse`, waiting this many milliseconds before each event.
    Slow(Vec<String>, u64),
    /// A non-200 status with extra headers and a body.
    Status(u16, Vec<(String, String)>, String),
    /// 200, then one text delta whose `data:` line is this many bytes long
    /// (then `[DONE]`). The line is generated as it is written, so neither
    /// side of the test holds it; how much of it went out before the client
    /// hung up is recorded ([`FakeLlm::long_lines_written`]).
    LongLine(usize),
    /// 200, some data payloads, then the connection is reset (a TCP RST,
    /// not a clean close): the client sees a transport error.
    Reset(Vec<String>),
    /// 200, the first payloads, then nothing until the test opens the
    /// [`Gate`], then the rest: a stream held open for as long as a test
    /// needs, whatever the machine's speed.
    Gated(Vec<String>, Gate, Vec<String>),
    /// 200, then this `data:` payload this many times, then `[DONE]`: a
    /// flood of deltas (say 256 KiB of `reasoning_content` each) written
    /// from the one string as it goes, so the test never holds it whole.
    /// How many went out before the client hung up is recorded
    /// ([`FakeLlm::floods_written`]).
    Flood(String, usize),
    /// This status (an error, say 500) with a chunked body of this many
    /// MiB of `x`, written from one reusable MiB as it goes; how many MiB
    /// went out before the client hung up is recorded as a flood
    /// ([`FakeLlm::floods_written`], one payload per MiB).
    StatusFlood(u16, usize),
    /// This status with `content-length` set to the `usize`, then only the
    /// given start of the body, then nothing for an hour: an error body
    /// that stalls.
    StatusStall(u16, String, usize),
    /// No answer at all: the request is read, then nothing is written, not
    /// even a status line, until the client hangs up (a server that takes
    /// long over its prompt). The hang-up is recorded
    /// ([`FakeLlm::disconnects`]).
    Hold,
    /// 200, these named SSE events (`event:` and `data:`), then every this
    /// many milliseconds a keep-alive: this named event (Anthropic's
    /// `ping`), or a `: keep-alive` comment when `None`; never an end. When
    /// the client hangs up is recorded ([`FakeLlm::disconnects`]).
    Pings(Vec<(String, String)>, Option<(String, String)>, u64),
}

/// Holds an [`Answer::Gated`] stream until [`Gate::open`] is called.
#[derive(Debug, Clone, Default)]
pub struct Gate(Arc<GateState>);

#[derive(Debug, Default)]
struct GateState {
    open: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Gate {
        Gate::default()
    }

    /// Lets every stream held by this gate go on.
    pub fn open(&self) {
        self.0.open.store(true, std::sync::atomic::Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }

    async fn wait(&self) {
        loop {
            let notified = self.0.notify.notified();
            if self.0.open.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }
}

/// The head of an [`Answer::LongLine`] line; its filler follows.
const LONG_LINE_HEAD: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"";
/// The tail that closes the JSON of an [`Answer::LongLine`] line.
const LONG_LINE_TAIL: &str = "\"}}]}";

/// A streamed text answer (usage, then `[DONE]`).
pub fn text(answer: &str) -> Answer {
    let mut events: Vec<Option<String>> = answer
        .split_inclusive(' ')
        .map(|w| Some(json!({"choices": [{"delta": {"content": w}}]}).to_string()))
        .collect();
    events.push(Some(
        json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}).to_string(),
    ));
    events.push(Some(json!({"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 5, "prompt_cache_hit_tokens": 8}}).to_string()));
    events.push(Some("[DONE]".into()));
    Answer::Sse(events)
}

/// The `data:` payloads of [`text`] (for [`Answer::Gated`] and friends).
pub fn text_payloads(answer: &str) -> Vec<String> {
    match text(answer) {
        Answer::Sse(events) => events.into_iter().flatten().collect(),
        _ => Vec::new(),
    }
}

/// A text answer held after its first delta until `gate` opens (a stream
/// a test can cancel or race against, whatever the machine's speed).
pub fn held_text(answer: &str, gate: &Gate) -> Answer {
    let mut payloads = text_payloads(answer);
    let rest = payloads.split_off(1.min(payloads.len()));
    Answer::Gated(payloads, gate.clone(), rest)
}

/// A text answer that sends nothing until `gate` opens (a request that
/// stays in flight).
pub fn gated_text(answer: &str, gate: &Gate) -> Answer {
    Answer::Gated(Vec::new(), gate.clone(), text_payloads(answer))
}

/// `text` streamed slowly (`ms` before each event).
pub fn slow_text(answer: &str, ms: u64) -> Answer {
    match text(answer) {
        Answer::Sse(events) => Answer::Slow(events.into_iter().flatten().collect(), ms),
        other => other,
    }
}

/// An answer that calls tools `(name, arguments JSON)` in one response.
pub fn tool_calls(calls: &[(&str, Value)]) -> Answer {
    let mut events = vec![Some(
        json!({"choices": [{"delta": {"reasoning_content": "I need a tool."}}]}).to_string(),
    )];
    for (i, (name, args)) in calls.iter().enumerate() {
        let a = args.to_string();
        let (head, tail) = a.split_at(a.len() / 2);
        events.push(Some(json!({"choices": [{"delta": {"tool_calls": [{"index": i, "id": format!("call_{i}_{name}"), "type": "function", "function": {"name": name, "arguments": head}}]}}]}).to_string()));
        events.push(Some(json!({"choices": [{"delta": {"tool_calls": [{"index": i, "function": {"arguments": tail}}]}}]}).to_string()));
    }
    events.push(Some(
        json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}).to_string(),
    ));
    events.push(Some(
        json!({"choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 7}}).to_string(),
    ));
    events.push(Some("[DONE]".into()));
    Answer::Sse(events)
}

/// One bare response calling `(id, name, raw arguments)` in order: each
/// call in one chunk, then `finish_reason: tool_calls` and `[DONE]` (no
/// reasoning, no usage; the arguments are sent as given, JSON or not).
pub fn raw_calls(calls: &[(&str, &str, &str)]) -> Answer {
    let mut events = Vec::new();
    for (i, (id, name, args)) in calls.iter().enumerate() {
        events.push(Some(json!({"choices": [{"delta": {"tool_calls": [{"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": args}}]}}]}).to_string()));
    }
    events.push(Some(
        json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}).to_string(),
    ));
    events.push(Some("[DONE]".into()));
    Answer::Sse(events)
}

/// [`raw_calls`] with the arguments given as JSON `(id, name, arguments)`.
pub fn calls(list: &[(&str, &str, Value)]) -> Answer {
    let args: Vec<String> = list.iter().map(|(_, _, a)| a.to_string()).collect();
    let raw: Vec<(&str, &str, &str)> = list
        .iter()
        .zip(&args)
        .map(|((id, name, _), a)| (*id, *name, a.as_str()))
        .collect();
    raw_calls(&raw)
}

/// An answer that streams the text `prefix` and then never finishes.
pub fn stall_after(prefix: &str) -> Answer {
    Answer::Stall(vec![
        json!({"choices": [{"delta": {"content": prefix}}]}).to_string()
    ])
}

/// Locks the server's state. A test that panicked while holding it left it
/// consistent enough to read (every change is a push or a pop), so the
/// poison is ignored: the next test's report is its own failure, not a
/// `PoisonError`.
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Default)]
struct State {
    answers: VecDeque<Answer>,
    /// Answers kept for the requests of one conversation
    /// ([`FakeLlm::push_for`]): a marker, and its queue.
    routes: Vec<(String, VecDeque<Answer>)>,
    /// Request bodies as received; parsed only when a test asks for them,
    /// so the fake costs the same whatever the size of the history.
    requests: Vec<Vec<u8>>,
    headers: Vec<String>,
    times: Vec<std::time::Instant>,
    fallback: Option<Answer>,
    long_lines: Vec<LongLineWritten>,
    /// Woken whenever a long line is recorded.
    long_line_done: Arc<tokio::sync::Notify>,
    floods: Vec<FloodWritten>,
    /// Woken whenever a flood is recorded.
    flood_done: Arc<tokio::sync::Notify>,
    /// The context window this fake enforces, if any
    /// ([`FakeLlm::set_context_window`]).
    window: Option<Window>,
    /// The requests (indexes into `requests`) the window turned away.
    overflowed: Vec<usize>,
    /// The side routes ([`FakeLlm::set_get`]) and what was asked of them.
    side: SideRoutes,
    /// The answer each request was served (by its index in `requests`).
    served: Vec<Answer>,
    /// The requests (indexes into `requests`) whose client hung up while
    /// the fake held its answer open ([`FakeLlm::disconnects`]).
    disconnects: Vec<usize>,
    /// Woken whenever a disconnect is recorded.
    disconnect_done: Arc<tokio::sync::Notify>,
}

/// How much of one [`Answer::Flood`] was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloodWritten {
    /// Payloads written whole to the socket (the kernel may not have
    /// delivered all of them).
    pub payloads: usize,
    /// Every payload and the `[DONE]` were written (the client never hung
    /// up on the flood).
    pub complete: bool,
}

/// How much of one [`Answer::LongLine`] was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongLineWritten {
    /// Bytes of the line written to the socket (the kernel may not have
    /// delivered all of them).
    pub bytes: usize,
    /// The line was written to its end (the client never hung up on it).
    pub complete: bool,
}

/// The running server.
#[derive(Clone)]
pub struct FakeLlm {
    /// `http://127.0.0.1:PORT` (use as the adapter's `baseUrl`).
    pub base_url: String,
    state: Arc<Mutex<State>>,
}

impl FakeLlm {
    /// Starts a server on an ephemeral port (inside a tokio runtime).
    pub async fn start() -> FakeLlm {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("the fake model cannot listen on 127.0.0.1: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        let state: Arc<Mutex<State>> = Arc::default();
        let s = state.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(serve(sock, s.clone()));
            }
        });
        FakeLlm {
            base_url: format!("http://127.0.0.1:{port}"),
            state,
        }
    }

    /// Queues answers, served in order (one per request).
    pub fn push(&self, answers: impl IntoIterator<Item = Answer>) {
        lock(&self.state).answers.extend(answers);
    }

    /// Queues answers for the requests of one conversation: those with a
    /// user message whose text contains `marker` (a subagent's prompt, say,
    /// which its parent's requests hold only as tool call arguments). Such
    /// a request takes the next of these before the [`FakeLlm::push`]
    /// queue; markers are tried in the order first pushed.
    pub fn push_for(&self, marker: &str, answers: impl IntoIterator<Item = Answer>) {
        let mut s = lock(&self.state);
        match s.routes.iter_mut().find(|(m, _)| m == marker) {
            Some((_, queue)) => queue.extend(answers),
            None => s
                .routes
                .push((marker.to_owned(), answers.into_iter().collect())),
        }
    }

    /// The names of the tools offered in request `n` (0 is the first);
    /// none when it offered no tools. Panics when there is no request `n`.
    pub fn offered_tools(&self, n: usize) -> Vec<String> {
        let requests = self.requests();
        let Some(request) = requests.get(n) else {
            panic!("the fake model got no request {n}");
        };
        let tools = request["tools"].as_array().cloned().unwrap_or_default();
        tools
            .iter()
            .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
            .collect()
    }

    /// Every request body received so far.
    pub fn requests(&self) -> Vec<Value> {
        let bodies = lock(&self.state).requests.clone();
        bodies
            .iter()
            .map(|b| serde_json::from_slice(b).unwrap_or(Value::Null))
            .collect()
    }

    /// The tool results (`role: "tool"` messages, in order) of request `n`
    /// (0 is the first): each with its `tool_call_id` and `content`. Panics
    /// when there is no request `n` or it has no `messages` array.
    pub fn tool_messages(&self, n: usize) -> Vec<Value> {
        let requests = self.requests();
        let request = requests.get(n).unwrap_or_else(|| {
            panic!(
                "the fake model got {} requests, not a request {n}",
                requests.len()
            )
        });
        tool_messages_of(request)
    }

    /// The texts of the tool results of request `n` (see
    /// [`FakeLlm::tool_messages`]): what the model was shown of its tool
    /// calls. A result whose content is not a string counts as `""`.
    pub fn tool_results(&self, n: usize) -> Vec<String> {
        texts_of(&self.tool_messages(n))
    }

    /// The texts of the tool results in the last request, as
    /// [`FakeLlm::tool_results`]; panics when no request came.
    pub fn tool_results_of_last_request(&self) -> Vec<String> {
        let requests = self.requests();
        let Some(last) = requests.last() else {
            panic!("the fake model got no request");
        };
        texts_of(&tool_messages_of(last))
    }

    /// When each request arrived.
    pub fn request_times(&self) -> Vec<std::time::Instant> {
        lock(&self.state).times.clone()
    }

    /// The answer served when the queue is empty (default: a 500).
    pub fn set_fallback(&self, answer: Answer) {
        lock(&self.state).fallback = Some(answer);
    }

    /// Forgets recorded requests (to keep long runs small).
    pub fn clear_requests(&self) {
        let mut s = lock(&self.state);
        s.requests.clear();
        s.headers.clear();
    }

    /// For each [`Answer::LongLine`] served so far, how much of it went out;
    /// waits until `n` of them are done (the server records one when its
    /// last write fails or the line is complete). Bound it with a timeout.
    pub async fn long_lines_written(&self, n: usize) -> Vec<LongLineWritten> {
        self.wait_recorded(n, |s| &s.long_line_done, |s| &s.long_lines)
            .await
    }

    /// For each [`Answer::Flood`] served so far, how much of it went out;
    /// waits until `n` of them are done (the server records one when a
    /// write fails or the flood is complete). Bound it with a timeout.
    pub async fn floods_written(&self, n: usize) -> Vec<FloodWritten> {
        self.wait_recorded(n, |s| &s.flood_done, |s| &s.floods)
            .await
    }

    /// Waits until the list `list` picks out of the state holds `n`
    /// records, woken by `done` whenever one is recorded; a copy of it.
    async fn wait_recorded<T: Clone>(
        &self,
        n: usize,
        done: impl Fn(&State) -> &Arc<tokio::sync::Notify>,
        list: impl Fn(&State) -> &Vec<T>,
    ) -> Vec<T> {
        loop {
            let done = done(&lock(&self.state)).clone();
            // Registered before the check, so a record made between the
            // check and the wait still wakes it.
            let notified = done.notified();
            {
                let s = lock(&self.state);
                if list(&s).len() >= n {
                    return list(&s).clone();
                }
            }
            notified.await;
        }
    }

    /// The requests (indexes into [`FakeLlm::requests`]) whose client
    /// hung up while the fake held its answer open ([`Answer::Stall`],
    /// [`Answer::Gated`] before its gate opened, [`Answer::StatusStall`],
    /// [`Answer::Hold`], [`Answer::Pings`]), in the order they hung up;
    /// waits until `n` are recorded. Bound it with a timeout: a client that
    /// never hangs up is the failure it shows.
    pub async fn disconnects(&self, n: usize) -> Vec<usize> {
        self.wait_recorded(n, |s| &s.disconnect_done, |s| &s.disconnects)
            .await
    }

    /// The answer each request was served, in the order of
    /// [`FakeLlm::requests`] (a scripted one, the window's overflow, the
    /// fallback, or the 500 of an empty queue).
    pub fn served(&self) -> Vec<Answer> {
        lock(&self.state).served.clone()
    }

    /// Every request's raw header block.
    pub fn headers(&self) -> Vec<String> {
        lock(&self.state).headers.clone()
    }

    /// Emulates a server whose context window is `tokens`: a request whose
    /// prompt, estimated from its body ([`prompt_tokens`]), is over it is
    /// answered HTTP 400 with [`OPENAI_OVERFLOW_BODY`] instead of the next
    /// scripted answer (which stays queued), and recorded
    /// ([`FakeLlm::overflowed`]).
    pub fn set_context_window(&self, tokens: usize) {
        self.set_context_window_with(tokens, OPENAI_OVERFLOW_BODY);
    }

    /// [`FakeLlm::set_context_window`] answering `body` instead (a server's
    /// own overflow body): `{n_ctx}` in it becomes the window and
    /// `{n_prompt_tokens}` the request's estimate.
    pub fn set_context_window_with(&self, tokens: usize, body: &str) {
        lock(&self.state).window = Some(Window {
            tokens,
            body: body.to_owned(),
        });
    }

    /// The requests the window turned away, as indexes into
    /// [`FakeLlm::requests`].
    pub fn overflowed(&self) -> Vec<usize> {
        lock(&self.state).overflowed.clone()
    }
}

/// A context window the fake enforces.
#[derive(Debug, Clone)]
struct Window {
    /// Its size in tokens.
    tokens: usize,
    /// The body of its HTTP 400 (with `{n_ctx}` and `{n_prompt_tokens}`).
    body: String,
}

/// Bytes of request body per token, as the window reckons a prompt: a
/// deliberately simple tokenizer, denser than English prose (about 4 bytes
/// a token) and a little less dense than numbered lines (about 2.6 with
/// common tokenizers).
pub const WINDOW_BYTES_PER_TOKEN: usize = 3;

/// OpenAI's overflow error body (its `context_length_exceeded` code),
/// with the window and the estimate filled in.
pub const OPENAI_OVERFLOW_BODY: &str = r#"{"error":{"message":"This model's maximum context length is {n_ctx} tokens. However, your messages resulted in {n_prompt_tokens} tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;

/// llama.cpp's overflow error body (`exceed_context_size_error`), with the
/// window and the estimate filled in.
pub const LLAMA_CPP_OVERFLOW_BODY: &str = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":{n_prompt_tokens},"n_ctx":{n_ctx}}}"#;

/// The prompt tokens the window reckons a request body at.
pub fn prompt_tokens(body: &[u8]) -> usize {
    body.len().div_ceil(WINDOW_BYTES_PER_TOKEN)
}

/// The window's answer to the request just recorded: a 400 with its
/// overflow body when the request is a POST whose prompt is over the
/// window (recorded), else `None` (the scripted answer goes).
fn window_answer(s: &mut State) -> Option<Answer> {
    let window = s.window.as_ref()?;
    let post = s.headers.last().is_some_and(|h| h.starts_with("POST"));
    let prompt = prompt_tokens(s.requests.last()?);
    if !post || prompt <= window.tokens {
        return None;
    }
    let body = window
        .body
        .replace("{n_ctx}", &window.tokens.to_string())
        .replace("{n_prompt_tokens}", &prompt.to_string());
    let n = s.requests.len() - 1;
    s.overflowed.push(n);
    Some(Answer::Status(400, vec![], body))
}

/// The `role: "tool"` messages of one request body; panics when it has no
/// `messages` array.
fn tool_messages_of(request: &Value) -> Vec<Value> {
    request["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("a request without messages: {request}"))
        .iter()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect()
}

/// The `content` text of each tool message (`""` when not a string).
fn texts_of(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn read_request(sock: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    Some((head, body))
}

/// Writes a `data:` line of `len` bytes from a small reusable buffer, then
/// `[DONE]`; stops at the first failed write (the client hung up).
async fn write_long_line(sock: &mut TcpStream, len: usize) -> LongLineWritten {
    const PIECE: usize = 64 * 1024;
    let filler = vec![b'a'; PIECE];
    let body = len.saturating_sub(LONG_LINE_HEAD.len() + LONG_LINE_TAIL.len());
    let mut written = LongLineWritten {
        bytes: 0,
        complete: false,
    };
    if sock.write_all(LONG_LINE_HEAD.as_bytes()).await.is_err() {
        return written;
    }
    written.bytes = LONG_LINE_HEAD.len();
    let mut left = body;
    while left > 0 {
        let n = left.min(PIECE);
        if sock.write_all(&filler[..n]).await.is_err() {
            return written;
        }
        written.bytes += n;
        left -= n;
    }
    let end = format!("{LONG_LINE_TAIL}\n\ndata: [DONE]\n\n");
    if sock.write_all(end.as_bytes()).await.is_ok() {
        written.bytes += LONG_LINE_TAIL.len();
        written.complete = true;
    }
    written
}

/// Writes the `data:` frame of `payload` `times` times, then `[DONE]`;
/// stops at the first failed write (the client hung up).
async fn write_flood(sock: &mut TcpStream, payload: &str, times: usize) -> FloodWritten {
    let frame = format!("data: {payload}\n\n");
    let mut written = FloodWritten {
        payloads: 0,
        complete: false,
    };
    for _ in 0..times {
        if sock.write_all(frame.as_bytes()).await.is_err() {
            return written;
        }
        written.payloads += 1;
    }
    written.complete = sock.write_all(b"data: [DONE]\n\n").await.is_ok();
    written
}

/// The texts of the user messages of a chat completions request body.
fn user_texts(body: &[u8]) -> Vec<String> {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let Some(messages) = v["messages"].as_array() else {
        return Vec::new();
    };
    messages
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| match &m["content"] {
            Value::String(t) => t.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
            _ => String::new(),
        })
        .collect()
}

/// The next routed answer for the last request received, if a route
/// matches it ([`FakeLlm::push_for`]).
fn routed_answer(s: &mut State) -> Option<Answer> {
    if s.routes.iter().all(|(_, q)| q.is_empty()) {
        return None;
    }
    let texts = user_texts(s.requests.last()?);
    let (_, queue) = s
        .routes
        .iter_mut()
        .find(|(m, q)| !q.is_empty() && texts.iter().any(|t| t.contains(m.as_str())))?;
    queue.pop_front()
}

async fn serve(mut sock: TcpStream, state: Arc<Mutex<State>>) {
    let Some((head, body)) = read_request(&mut sock).await else {
        return;
    };
    if let Some(route) = side_route(&state, &head) {
        serve_side(&mut sock, route).await;
        return;
    }
    let (answer, n) = {
        let mut s = lock(&state);
        s.times.push(std::time::Instant::now());
        s.requests.push(body);
        s.headers.push(head);
        let answer = window_answer(&mut s)
            .or_else(|| routed_answer(&mut s))
            .or_else(|| s.answers.pop_front())
            .or_else(|| s.fallback.clone())
            .unwrap_or_else(|| {
                Answer::Status(
                    500,
                    vec![],
                    "{\"error\":{\"message\":\"no scripted answer\"}}".into(),
                )
            });
        s.served.push(answer.clone());
        (answer, s.requests.len() - 1)
    };
    // Records that the client of request `n` hung up.
    let hung_up = || {
        let done = {
            let mut s = lock(&state);
            s.disconnects.push(n);
            s.disconnect_done.clone()
        };
        done.notify_waiters();
    };
    let sse_head =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
    match answer {
        Answer::Sse(events) => {
            let _ = sock.write_all(sse_head.as_bytes()).await;
            for e in events {
                let frame = match e {
                    Some(d) => format!("data: {d}\n\n"),
                    None => ": keep-alive\n\n".to_owned(),
                };
                if sock.write_all(frame.as_bytes()).await.is_err() {
                    return;
                }
                let _ = sock.flush().await;
            }
        }
        Answer::Named(events) => {
            let _ = sock.write_all(sse_head.as_bytes()).await;
            for (name, data) in events {
                let frame = format!("event: {name}\ndata: {data}\n\n");
                if sock.write_all(frame.as_bytes()).await.is_err() {
                    return;
                }
                let _ = sock.flush().await;
            }
        }
        Answer::Slow(events, ms) => {
            let _ = sock.write_all(sse_head.as_bytes()).await;
            for d in events {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                if sock
                    .write_all(format!("data: {d}\n\n").as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
                let _ = sock.flush().await;
            }
        }
        Answer::Stall(events) => {
            let _ = sock.write_all(sse_head.as_bytes()).await;
            for d in events {
                let _ = sock.write_all(format!("data: {d}\n\n").as_bytes()).await;
            }
            let _ = sock.flush().await;
            if held(&mut sock, tokio::time::sleep(Duration::from_secs(3600))).await {
                hung_up();
            }
        }
        Answer::Hold => {
            if held(&mut sock, std::future::pending::<()>()).await {
                hung_up();
            }
        }
        Answer::Pings(events, ping, ms) => {
            let _ = sock.write_all(sse_head.as_bytes()).await;
            for (name, data) in events {
                let frame = format!("event: {name}\ndata: {data}\n\n");
                let _ = sock.write_all(frame.as_bytes()).await;
            }
            let frame = match ping {
                Some((name, data)) => format!("event: {name}\ndata: {data}\n\n"),
                None => ": keep-alive\n\n".to_owned(),
            };
            if write_pings(&mut sock, &frame, Duration::from_millis(ms)).await {
                hung_up();
            }
        }
        Answer::Disconnect(events) => {
            let _ = sock.write_all(sse_head.as_bytes()).await;
            for d in events {
                let _ = sock.write_all(format!("data: {d}\n\n").as_bytes()).await;
            }
            let _ = sock.write_all(b"data: {\"choi").await;
            let _ = sock.flush().await;
        }
        Answer::Status(code, headers, body) => {
            let mut resp = format!("HTTP/1.1 {code} Status\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
            for (k, v) in headers {
                resp.push_str(&format!("{k}: {v}\r\n"));
            }
            resp.push_str("\r\n");
            resp.push_str(&body);
            let _ = sock.write_all(resp.as_bytes()).await;
        }
        Answer::Reset(events) => {
            let _ = sock.write_all(sse_head.as_bytes()).await;
            for d in events {
                let _ = sock.write_all(format!("data: {d}\n\n").as_bytes()).await;
            }
            let _ = sock.flush().await;
            // Closing with a zero linger sends RST instead of FIN.
            let _ = sock.set_zero_linger();
            return;
        }
        Answer::Gated(before, gate, after) => {
            let _ = sock.write_all(sse_head.as_bytes()).await;
            for d in before {
                let _ = sock.write_all(format!("data: {d}\n\n").as_bytes()).await;
            }
            let _ = sock.flush().await;
            if held(&mut sock, gate.wait()).await {
                hung_up();
                return;
            }
            for d in after {
                if sock
                    .write_all(format!("data: {d}\n\n").as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
            }
            let _ = sock.flush().await;
        }
        Answer::LongLine(len) => {
            let _ = sock.write_all(sse_head.as_bytes()).await;
            let written = write_long_line(&mut sock, len).await;
            let done = {
                let mut s = lock(&state);
                s.long_lines.push(written);
                s.long_line_done.clone()
            };
            done.notify_waiters();
        }
        Answer::Flood(payload, times) => {
            let _ = sock.write_all(sse_head.as_bytes()).await;
            let written = write_flood(&mut sock, &payload, times).await;
            let done = {
                let mut s = lock(&state);
                s.floods.push(written);
                s.flood_done.clone()
            };
            done.notify_waiters();
        }
        Answer::StatusFlood(code, mib) => {
            let written = write_status_flood(&mut sock, code, mib).await;
            let done = {
                let mut s = lock(&state);
                s.floods.push(written);
                s.flood_done.clone()
            };
            done.notify_waiters();
        }
        Answer::StatusStall(code, start, declared) => {
            let head = format!(
                "HTTP/1.1 {code} Status\r\ncontent-type: application/json\r\ncontent-length: {declared}\r\nconnection: close\r\n\r\n{start}"
            );
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock.flush().await;
            if held(&mut sock, tokio::time::sleep(Duration::from_secs(3600))).await {
                hung_up();
            }
        }
    }
    let _ = sock.shutdown().await;
}

/// Waits for `until` while watching the connection: true when the client
/// hung up first (it closed or reset the connection), false when `until`
/// came. Whatever the client sends meanwhile is read and dropped.
async fn held(sock: &mut TcpStream, until: impl std::future::Future<Output = ()>) -> bool {
    let hangup = async {
        let mut buf = [0u8; 1024];
        while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
    };
    tokio::select! {
        () = hangup => true,
        () = until => false,
    }
}

/// Writes `frame` every `every` until the client hangs up (true then); a
/// write that fails is a hang-up too.
async fn write_pings(sock: &mut TcpStream, frame: &str, every: Duration) -> bool {
    let (mut rd, mut wr) = sock.split();
    let pings = async {
        loop {
            if wr.write_all(frame.as_bytes()).await.is_err() || wr.flush().await.is_err() {
                return;
            }
            tokio::time::sleep(every).await;
        }
    };
    let hangup = async {
        let mut buf = [0u8; 1024];
        while matches!(rd.read(&mut buf).await, Ok(n) if n > 0) {}
    };
    tokio::select! {
        () = pings => {}
        () = hangup => {}
    }
    true
}

/// Writes status `code` with a chunked body of `mib` MiB of `x`, one MiB a
/// chunk from one buffer; stops at the first failed write (the client hung
/// up). Each MiB written counts as one payload.
async fn write_status_flood(sock: &mut TcpStream, code: u16, mib: usize) -> FloodWritten {
    const MIB: usize = 1024 * 1024;
    let mut chunk = format!("{MIB:x}\r\n").into_bytes();
    chunk.extend(std::iter::repeat_n(b'x', MIB));
    chunk.extend_from_slice(b"\r\n");
    let mut written = FloodWritten {
        payloads: 0,
        complete: false,
    };
    let head = format!(
        "HTTP/1.1 {code} Status\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    );
    if sock.write_all(head.as_bytes()).await.is_err() {
        return written;
    }
    for _ in 0..mib {
        if sock.write_all(&chunk).await.is_err() {
            return written;
        }
        written.payloads += 1;
    }
    written.complete = sock.write_all(b"0\r\n\r\n").await.is_ok();
    written
}

// ---- side routes: what a server says besides answering -----------------

/// A model server's recorded answer at one of its window endpoints
/// (`sdk/llm-http/testdata/windows/<name>.json`: `llama-cpp-props`,
/// `vllm-models`, `ollama-ps`...), for [`FakeLlm::set_get`].
pub fn recorded_window(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../llm-http/testdata/windows")
        .join(format!("{name}.json"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no recorded window endpoint {}: {e}", path.display()))
}

/// The paths a model server states its window at that are asked with a
/// POST (Ollama's `/api/show`): side routes like every GET.
const SIDE_POSTS: [&str; 1] = ["/api/show"];

/// The side routes set and the side requests received.
#[derive(Default)]
struct SideRoutes {
    /// By path: the answer.
    routes: std::collections::HashMap<String, SideAnswer>,
    /// `METHOD path` of every side request, in order.
    asked: Vec<String>,
}

/// The answer of one side route.
#[derive(Debug, Clone)]
struct SideAnswer {
    status: u16,
    body: String,
    /// How long to wait before answering.
    delay: Duration,
}

impl FakeLlm {
    /// Serves `GET path` (and a POST to it: Ollama's `/api/show`) with
    /// `status` and the JSON `body`, apart from the scripted answers: a
    /// side route (`/props`, `/v1/models`, `/api/show`...) neither takes
    /// an answer from the queue nor counts among [`FakeLlm::requests`].
    /// Every GET, and a POST to `/api/show`, is a side route: one not set
    /// answers 404. [`FakeLlm::asked`] lists them.
    pub fn set_get(&self, path: &str, status: u16, body: &str) {
        self.set_slow_get(path, 0, status, body);
    }

    /// [`FakeLlm::set_get`], answering only after `delay_ms`.
    pub fn set_slow_get(&self, path: &str, delay_ms: u64, status: u16, body: &str) {
        lock(&self.state).side.routes.insert(
            path.to_owned(),
            SideAnswer {
                status,
                body: body.to_owned(),
                delay: Duration::from_millis(delay_ms),
            },
        );
    }

    /// `METHOD path` of every side request so far (set or not), in order.
    pub fn asked(&self) -> Vec<String> {
        lock(&self.state).side.asked.clone()
    }
}

/// The method and path of a request head (`GET /props HTTP/1.1`).
fn method_and_path(head: &str) -> Option<(&str, &str)> {
    let mut words = head.lines().next()?.split_whitespace();
    let method = words.next()?;
    let path = words.next()?;
    Some((method, path.split('?').next().unwrap_or(path)))
}

/// The answer of a side request (recorded in [`FakeLlm::asked`]): a set
/// route's, else 404; `None` when `head` is a model request.
fn side_route(state: &Mutex<State>, head: &str) -> Option<SideAnswer> {
    let (method, path) = method_and_path(head)?;
    let mut s = lock(state);
    let set = s.side.routes.get(path).cloned();
    if set.is_none() && method != "GET" && !SIDE_POSTS.contains(&path) {
        return None;
    }
    s.side.asked.push(format!("{method} {path}"));
    Some(set.unwrap_or(SideAnswer {
        status: 404,
        body: "{\"error\":\"not found\"}".into(),
        delay: Duration::ZERO,
    }))
}

/// Writes `answer` (after its delay), closing the connection.
async fn serve_side(sock: &mut TcpStream, answer: SideAnswer) {
    tokio::time::sleep(answer.delay).await;
    let head = format!(
        "HTTP/1.1 {} Status\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        answer.status,
        answer.body.len()
    );
    if sock.write_all(head.as_bytes()).await.is_ok() {
        let _ = sock.write_all(answer.body.as_bytes()).await;
    }
    let _ = sock.shutdown().await;
}
