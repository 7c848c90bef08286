//! What the one-shot run prints on stdout, as the terminal gets it.
//!
//! Model and tool text can carry escape sequences (OSC 52 writes the
//! clipboard, OSC 0 the window title), controls and bidi controls. When
//! stdout is a terminal, the text answer (and, with `stream`, every line)
//! goes through the SDK's one sanitizer (`dsh_sdk::terminal_text`) and a
//! JSONL line gets its raw C1 and bidi controls written as `\u` escapes
//! (the same JSON value). When stdout is not a terminal, every byte is
//! printed as the model and the tools gave it: scripts that pipe the answer
//! rely on that, and a pipe acts on no escape sequence. The host answers
//! whether stdout is a terminal (`host.terminal`, the `isatty` of the fd it
//! prints to); when it cannot say, the text is sanitized.

use std::borrow::Cow;
use std::cell::RefCell;

use dsh_sdk::api::host::Host;
use dsh_sdk::terminal_text::{self, Sanitizer};

/// Stdout, and what its text needs.
pub struct Stdout {
    /// Stdout is a terminal: text is sanitized.
    terminal: bool,
    /// The streamed answer's sanitizer (an escape split between two deltas
    /// is dropped whole).
    stream: RefCell<Sanitizer>,
}

impl Stdout {
    /// Asks the host whether stdout is a terminal; a terminal when the
    /// host cannot say (sanitizing then costs a script exact bytes, not the
    /// user a clipboard).
    pub async fn detect(host: &Host) -> Stdout {
        let terminal = match host.terminal().await {
            Ok(info) => info.stdout,
            Err(e) => {
                dsh_sdk::tracing::warn!(
                    "cannot tell whether stdout is a terminal ({}: {}); model text is printed sanitized",
                    e.code,
                    e.message
                );
                true
            }
        };
        Stdout::new(terminal)
    }

    /// Stdout that is (or is not) a terminal.
    pub fn new(terminal: bool) -> Stdout {
        Stdout {
            terminal,
            stream: RefCell::new(Sanitizer::new()),
        }
    }

    /// `text` (model or tool text, whole) as printed.
    pub fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.terminal {
            terminal_text::sanitize(text)
        } else {
            Cow::Borrowed(text)
        }
    }

    /// One streamed delta of the answer as printed; a sequence it leaves
    /// open is dropped from the next delta too, until [`Stdout::end_stream`].
    pub fn delta<'a>(&self, delta: &'a str) -> Cow<'a, str> {
        if self.terminal {
            self.stream.borrow_mut().push(delta)
        } else {
            Cow::Borrowed(delta)
        }
    }

    /// The streamed answer ended: a sequence still open is forgotten.
    pub fn end_stream(&self) {
        self.stream.borrow_mut().end();
    }

    /// One JSON line as printed.
    pub fn json<'a>(&self, line: &'a str) -> Cow<'a, str> {
        if self.terminal {
            terminal_text::escape_json(line)
        } else {
            Cow::Borrowed(line)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OSC52: &str = "\u{1b}]52;c;aGVsbG8=\u{07}";

    #[test]
    fn a_terminal_gets_sanitized_text_and_a_pipe_every_byte() {
        let text = format!("copied{OSC52} \u{202e}done\r\n");
        let tty = Stdout::new(true);
        assert_eq!(tty.text(&text), "copied done\n");
        let pipe = Stdout::new(false);
        assert_eq!(pipe.text(&text), text);
        assert_eq!(pipe.delta(&text), text);
        let line = serde_json::json!({"t": "\u{9b}2J\u{202e}"}).to_string();
        assert_eq!(pipe.json(&line), line);
        assert_eq!(tty.json(&line), "{\"t\":\"\\u009b2J\\u202e\"}");
    }

    #[test]
    fn a_streamed_escape_split_between_deltas_is_dropped_whole() {
        let tty = Stdout::new(true);
        assert_eq!(tty.delta("a\u{1b}]52;c;"), "a");
        assert_eq!(tty.delta("aGVsbG8="), "");
        assert_eq!(tty.delta("\u{7}b"), "b");
        assert_eq!(tty.delta("\u{1b}]0;"), "");
        tty.end_stream();
        assert_eq!(tty.delta("next"), "next");
    }
}
