//! The terminal, as the host service offers it: stdin read on a thread of
//! the host's own, raw mode, and the size.
//!
//! A plugin (the chat front end) never reads the terminal itself: a
//! blocking read on a thread of its own would outlive its generation and
//! pin the library, and a line editor that installs signal handlers from a
//! library would leave them pointing into unmapped code after a reload.
//! Instead the host reads stdin on one thread for the whole process and
//! keeps what it read, numbered, until the reader acknowledges it: a
//! `readInput` that was dropped, or a generation replaced mid-read, loses
//! nothing — the next read (of the next generation too) gets it again.

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use dsh_wire::host_service::{Input, TerminalInfo};
use dsh_wire::{codes, Error};
use serde_json::Value;

use crate::router::Responder;

/// Unacknowledged input kept at most (bytes); older input is dropped with a
/// warning beyond it (nobody is reading).
const MAX_UNACKED: usize = 1 << 20;

/// The mode the terminal had before raw mode (set while raw): one per
/// process, so a panic hook can put it back.
static SAVED: Mutex<Option<libc::termios>> = Mutex::new(None);

fn saved() -> MutexGuard<'static, Option<libc::termios>> {
    SAVED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Puts the terminal back the way the host found it, if raw mode is on
/// (at exit, and from the host's panic hook), then writes to stderr the
/// notices the front end never acknowledged.
pub fn restore_terminal() {
    let mode = saved().take();
    if let Some(mode) = mode {
        paste_brackets(false);
        let _ = set_mode(&mode);
        Terminal::process().flush_notices();
    }
}

/// Says `line` to the user: on stderr, or, while a front end holds the
/// terminal in raw mode, as a notice the front end shows above its input
/// (a line written under it would break its drawing).
pub fn say(line: &str) {
    Terminal::process().say(line);
}

/// Bracketed paste on or off (the terminal marks where a paste starts and
/// ends, so its newlines are not Enter).
fn paste_brackets(on: bool) {
    use std::io::Write;
    let seq: &[u8] = if on { b"\x1b[?2004h" } else { b"\x1b[?2004l" };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(seq).and_then(|()| out.flush());
}

/// The terminal of the process: one stdin, so one for every host in it.
#[derive(Clone, Default)]
pub struct Terminal(Arc<Mutex<State>>);

/// One numbered piece of what `readInput` answers.
enum Entry {
    /// Typed or pasted.
    Typed(String),
    /// A line of the host's for the user ([`say`]).
    Notice(String),
}

impl Entry {
    fn len(&self) -> usize {
        match self {
            Entry::Typed(t) | Entry::Notice(t) => t.len(),
        }
    }
}

#[derive(Default)]
struct State {
    /// Input not yet acknowledged, in order.
    queue: VecDeque<(u64, Entry)>,
    /// Bytes held in `queue`.
    queued: usize,
    /// The seq of the last input read.
    last: u64,
    /// Stdin ended.
    eof: bool,
    /// The read waiting for input.
    waiter: Option<Responder>,
    /// The reader thread runs.
    reading: bool,
    /// Ctrl-C typed in raw mode while nobody was reading.
    unread_interrupts: u32,
}

impl Terminal {
    /// The process's terminal.
    pub fn process() -> Terminal {
        static PROCESS: OnceLock<Terminal> = OnceLock::new();
        PROCESS.get_or_init(Terminal::default).clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// See [`say`]. Raw mode is judged under the queue's lock (the order
    /// every path takes: queue, then mode), so a notice queued as raw mode
    /// ends is still flushed by [`restore_terminal`].
    fn say(&self, line: &str) {
        let mut s = self.lock();
        if saved().is_none() {
            drop(s);
            eprintln!("{line}");
            return;
        }
        let dropped = s.queue_entry(Entry::Notice(line.to_owned()));
        s.answer_waiter();
        drop(s);
        warn_dropped(dropped);
    }

    /// Writes the unacknowledged notices to stderr and forgets them (raw
    /// mode ended: nobody will show them). From a panic hook too, so it
    /// never waits for the lock.
    fn flush_notices(&self) {
        let mut s = match self.0.try_lock() {
            Ok(s) => s,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        let mut kept = VecDeque::new();
        for (seq, entry) in std::mem::take(&mut s.queue) {
            match entry {
                Entry::Notice(line) => {
                    s.queued -= line.len();
                    eprintln!("{line}");
                }
                typed => kept.push_back((seq, typed)),
            }
        }
        s.queue = kept;
    }

    /// Whether stdin and stdout are terminals, and the size.
    pub fn info() -> TerminalInfo {
        let (cols, rows) = size();
        TerminalInfo {
            stdin: std::io::stdin().is_terminal(),
            stdout: std::io::stdout().is_terminal(),
            cols,
            rows,
        }
    }

    /// `readInput`: forgets input up to `ack`, then answers with what
    /// follows, now or (keeping `responder`) when it arrives. A newer read
    /// replaces a waiting one.
    pub fn read(&self, ack: Option<u64>, responder: Responder) -> Option<Result<Value, Error>> {
        let mut s = self.lock();
        if let Some(ack) = ack {
            s.acknowledge(ack);
        }
        s.unread_interrupts = 0;
        if !s.reading {
            s.reading = true;
            let this = self.clone();
            let spawned = std::thread::Builder::new()
                .name("dsh-stdin".into())
                .spawn(move || this.read_stdin());
            if let Err(e) = spawned {
                s.reading = false;
                return Some(Err(Error::msg(format!("cannot read stdin: {e}"))));
            }
        }
        if let Some(input) = s.pending() {
            return Some(to_value(&input));
        }
        if let Some(old) = s.waiter.replace(responder) {
            old.reply(Err(Error::new(
                codes::HOST_REFUSED,
                "a newer readInput replaced this one",
            )));
        }
        None
    }

    /// `setRawMode`: raw (keys arrive one by one, unechoed, Ctrl-C as a
    /// byte; output still turns `\n` into `\r\n`) or the mode the host
    /// started with.
    pub fn set_raw(&self, raw: bool) -> Result<(), Error> {
        let mut saved = saved();
        if raw {
            if saved.is_some() {
                return Ok(());
            }
            let original = get_mode()?;
            let mut mode = original;
            // SAFETY: `mode` is a valid termios read from the terminal.
            unsafe { libc::cfmakeraw(&mut mode) };
            mode.c_oflag |= libc::OPOST | libc::ONLCR;
            set_mode(&mode)?;
            *saved = Some(original);
            paste_brackets(true);
        } else if let Some(original) = saved.take() {
            drop(saved);
            paste_brackets(false);
            set_mode(&original)?;
            self.flush_notices();
        }
        Ok(())
    }

    /// Puts the terminal back the way the host found it (at exit).
    pub fn restore(&self) {
        restore_terminal();
    }

    /// The reader thread: stdin to the queue until it ends.
    fn read_stdin(&self) {
        let mut buf = vec![0u8; 64 * 1024];
        let mut partial: Vec<u8> = Vec::new();
        loop {
            // SAFETY: reading into a buffer we own, at most its length.
            let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                self.push(String::new(), true);
                return;
            }
            if n == 0 {
                let rest = String::from_utf8_lossy(&partial).into_owned();
                self.push(rest, true);
                return;
            }
            partial.extend_from_slice(&buf[..n as usize]);
            let text = take_utf8(&mut partial);
            if !text.is_empty() {
                self.push(text, false);
            }
        }
    }

    /// Queues `text` (and the end of stdin) and answers a waiting read.
    fn push(&self, text: String, eof: bool) {
        let mut s = self.lock();
        let mut escape = false;
        let mut dropped = 0;
        if !text.is_empty() {
            if s.waiter.is_none() && text.contains('\u{3}') && saved().is_some() {
                s.unread_interrupts += 1;
                // Two Ctrl-C and nobody reading: the front end is gone, so
                // the keys are the user's way out. Give them back.
                escape = s.unread_interrupts >= 2;
            }
            dropped = s.queue_entry(Entry::Typed(text));
        }
        s.eof |= eof;
        s.answer_waiter();
        // Outside the queue's lock: a warning may come back through `say`,
        // and putting the terminal back writes out the unshown notices.
        drop(s);
        warn_dropped(dropped);
        if escape {
            restore_terminal();
            // SAFETY: raising a signal in our own process.
            unsafe { libc::raise(libc::SIGINT) };
        }
    }
}

/// Says that `n` pieces of input were dropped unread (called outside the
/// queue's lock: the warning may come back through [`say`]).
fn warn_dropped(n: usize) {
    if n > 0 {
        tracing::warn!("terminal input dropped: nobody read it ({n} pieces)");
    }
}

impl State {
    /// Forgets input up to `ack`.
    fn acknowledge(&mut self, ack: u64) {
        while self.queue.front().is_some_and(|(seq, _)| *seq <= ack) {
            if let Some((_, text)) = self.queue.pop_front() {
                self.queued -= text.len();
            }
        }
    }

    /// Numbers and keeps `entry`, dropping the oldest input beyond
    /// [`MAX_UNACKED`]; how many pieces were dropped.
    fn queue_entry(&mut self, entry: Entry) -> usize {
        self.last += 1;
        self.queued += entry.len();
        self.queue.push_back((self.last, entry));
        let mut dropped = 0;
        while self.queued > MAX_UNACKED && self.queue.len() > 1 {
            let Some((_, old)) = self.queue.pop_front() else {
                break;
            };
            self.queued -= old.len();
            dropped += 1;
        }
        dropped
    }

    /// Answers the waiting read, if any, with everything unacknowledged.
    fn answer_waiter(&mut self) {
        let Some(input) = self.pending() else {
            return;
        };
        if let Some(waiter) = self.waiter.take() {
            // A caller that is gone gets nothing; the input stays queued
            // until a read acknowledges it, and nobody is reading.
            if !waiter.reply(to_value(&input)) && input.text.contains('\u{3}') {
                self.unread_interrupts += 1;
            }
        }
    }

    /// Everything unacknowledged, or `None` when there is nothing to say.
    fn pending(&self) -> Option<Input> {
        if self.queue.is_empty() && !self.eof {
            return None;
        }
        let mut input = Input {
            seq: self.last,
            eof: self.eof,
            ..Input::default()
        };
        for (_, entry) in &self.queue {
            match entry {
                Entry::Typed(t) => input.text.push_str(t),
                Entry::Notice(line) => input.notices.push(line.clone()),
            }
        }
        Some(input)
    }
}

fn to_value(input: &Input) -> Result<Value, Error> {
    serde_json::to_value(input).map_err(Error::from)
}

/// The longest complete UTF-8 prefix of `bytes` as text (invalid bytes
/// replaced), leaving an incomplete final character in `bytes`.
fn take_utf8(bytes: &mut Vec<u8>) -> String {
    let keep = match std::str::from_utf8(bytes) {
        Ok(_) => 0,
        Err(e) if e.error_len().is_none() => bytes.len() - e.valid_up_to(),
        Err(_) => 0,
    };
    let tail = bytes.split_off(bytes.len() - keep);
    let text = String::from_utf8_lossy(bytes).into_owned();
    *bytes = tail;
    text
}

/// (cols, rows) of stdout's terminal, or (0, 0).
fn size() -> (u16, u16) {
    // SAFETY: `winsize` is plain data; TIOCGWINSZ fills it or fails.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: fd 1 and a valid pointer to `ws`.
    let rc = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) };
    if rc == 0 {
        (ws.ws_col, ws.ws_row)
    } else {
        (0, 0)
    }
}

fn get_mode() -> Result<libc::termios, Error> {
    // SAFETY: `termios` is plain data; tcgetattr fills it or fails.
    let mut mode: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: fd 0 and a valid pointer.
    if unsafe { libc::tcgetattr(0, &mut mode) } != 0 {
        return Err(Error::new(
            codes::HOST_REFUSED,
            format!(
                "stdin is not a terminal: {}",
                std::io::Error::last_os_error()
            ),
        ));
    }
    Ok(mode)
}

fn set_mode(mode: &libc::termios) -> Result<(), Error> {
    // SAFETY: fd 0 and a valid termios.
    if unsafe { libc::tcsetattr(0, libc::TCSANOW, mode) } != 0 {
        return Err(Error::msg(format!(
            "cannot set the terminal mode: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{take_utf8, Entry, State, MAX_UNACKED};

    #[test]
    fn input_is_answered_again_until_acknowledged() {
        let mut s = State::default();
        assert!(s.pending().is_none());
        s.queue_entry(Entry::Typed("ab".into()));
        s.queue_entry(Entry::Typed("c".into()));
        let first = s.pending().unwrap();
        assert_eq!((first.seq, first.text.as_str()), (2, "abc"));
        // A read that was dropped acknowledged nothing: all of it again.
        assert_eq!(s.pending().unwrap().text, "abc");
        s.acknowledge(1);
        assert_eq!(s.pending().unwrap().text, "c");
        s.acknowledge(2);
        assert!(s.pending().is_none());
        // A stale acknowledgement changes nothing.
        s.queue_entry(Entry::Typed("d".into()));
        s.acknowledge(1);
        assert_eq!(s.pending().unwrap().text, "d");
    }

    #[test]
    fn unread_input_is_bounded_but_keeps_the_newest() {
        let mut s = State::default();
        for _ in 0..3 {
            s.queue_entry(Entry::Typed("x".repeat(MAX_UNACKED / 2)));
        }
        assert!(s.queued <= MAX_UNACKED);
        assert_eq!(s.pending().unwrap().seq, 3);
        s.queue_entry(Entry::Typed("y".repeat(MAX_UNACKED * 2)));
        assert_eq!(
            s.queue.len(),
            1,
            "a paste larger than the bound stays whole"
        );
    }

    #[test]
    fn notices_come_apart_from_the_keys_and_are_acknowledged_with_them() {
        let mut s = State::default();
        s.queue_entry(Entry::Typed("se".into()));
        s.queue_entry(Entry::Notice("reloaded chat".into()));
        s.queue_entry(Entry::Typed("c".into()));
        let all = s.pending().unwrap();
        assert_eq!(all.text, "sec", "a notice never lands inside typed text");
        assert_eq!(all.notices, ["reloaded chat"]);
        s.acknowledge(2);
        let rest = s.pending().unwrap();
        assert_eq!((rest.text.as_str(), rest.notices.len()), ("c", 0));
    }

    #[test]
    fn the_end_of_stdin_is_said_even_with_nothing_queued() {
        let s = State {
            eof: true,
            ..State::default()
        };
        let end = s.pending().unwrap();
        assert!(end.eof && end.text.is_empty());
    }

    #[test]
    fn a_character_split_across_reads_is_kept_whole() {
        let mut bytes = "aé".as_bytes().to_vec();
        let last = bytes.pop().unwrap();
        assert_eq!(take_utf8(&mut bytes), "a");
        assert_eq!(bytes.len(), 1);
        bytes.push(last);
        assert_eq!(take_utf8(&mut bytes), "é");
        assert!(bytes.is_empty());
    }

    #[test]
    fn invalid_bytes_are_replaced_not_kept() {
        let mut bytes = vec![b'a', 0xff, b'b'];
        assert_eq!(take_utf8(&mut bytes), "a\u{fffd}b");
        assert!(bytes.is_empty());
    }
}
