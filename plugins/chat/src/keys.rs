//! Terminal input (the text `readInput` answers) parsed into keys: printable
//! characters, control keys, the CSI/SS3 sequences of common terminals and
//! bracketed pastes. An escape sequence split across reads is completed by
//! the next read.

/// One key press (or one paste).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Key {
    /// A printable character.
    Char(char),
    /// Return: submit.
    Enter,
    /// Alt-Enter or Ctrl-J: a new line inside the input.
    Newline,
    Backspace,
    Delete,
    Left,
    Right,
    Up,
    Down,
    Home,
    End,
    WordLeft,
    WordRight,
    /// Ctrl-W / Alt-Backspace.
    KillWordBack,
    /// Ctrl-U.
    KillToStart,
    /// Ctrl-K.
    KillToEnd,
    /// Ctrl-C.
    Interrupt,
    /// Ctrl-D.
    Eof,
    /// Ctrl-L.
    ClearScreen,
    /// Ctrl-T: show or hide reasoning.
    ToggleReasoning,
    Tab,
    Esc,
    /// A bracketed paste (line ends normalized to `\n`).
    Paste(String),
}

const PASTE_START: &str = "\x1b[200~";
const PASTE_END: &str = "\x1b[201~";

/// A paste is cut into pieces of at most this many bytes when its end
/// marker does not come (a terminal that lost it must not swallow every
/// key after it).
const MAX_PASTE: usize = 16 << 20;

/// Parses input text into keys, keeping an incomplete sequence (or an
/// unfinished paste) for the next read.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct KeyParser {
    pending: String,
}

impl KeyParser {
    /// The keys in `text` (after what was pending).
    pub fn feed(&mut self, text: &str) -> Vec<Key> {
        self.pending.push_str(text);
        let input = std::mem::take(&mut self.pending);
        let mut keys = Vec::new();
        let mut rest = input.as_str();
        while !rest.is_empty() {
            match parse_one(rest) {
                Parsed::Key(key, used) => {
                    keys.extend(key);
                    rest = &rest[used..];
                }
                Parsed::Incomplete => {
                    self.pending = rest.to_owned();
                    break;
                }
            }
        }
        keys
    }
}

enum Parsed {
    /// A key (or nothing, for an ignored byte) and the bytes it used.
    Key(Option<Key>, usize),
    /// More input is needed.
    Incomplete,
}

fn parse_one(s: &str) -> Parsed {
    if let Some(body) = s.strip_prefix(PASTE_START) {
        return match body.find(PASTE_END) {
            Some(end) => {
                let text = body[..end].replace("\r\n", "\n").replace('\r', "\n");
                Parsed::Key(
                    Some(Key::Paste(text)),
                    PASTE_START.len() + end + PASTE_END.len(),
                )
            }
            None if body.len() > MAX_PASTE => {
                let cut = (0..=MAX_PASTE)
                    .rev()
                    .find(|i| body.is_char_boundary(*i))
                    .unwrap_or(0);
                let text = body[..cut].replace("\r\n", "\n").replace('\r', "\n");
                Parsed::Key(Some(Key::Paste(text)), PASTE_START.len() + cut)
            }
            None => Parsed::Incomplete,
        };
    }
    let Some(c) = s.chars().next() else {
        return Parsed::Incomplete;
    };
    let one = |k: Key| Parsed::Key(Some(k), c.len_utf8());
    match c {
        '\x1b' => escape(s),
        '\r' => one(Key::Enter),
        '\n' => one(Key::Newline),
        '\x7f' | '\x08' => one(Key::Backspace),
        '\t' => one(Key::Tab),
        '\x01' => one(Key::Home),
        '\x02' => one(Key::Left),
        '\x03' => one(Key::Interrupt),
        '\x04' => one(Key::Eof),
        '\x05' => one(Key::End),
        '\x06' => one(Key::Right),
        '\x0b' => one(Key::KillToEnd),
        '\x0c' => one(Key::ClearScreen),
        '\x0e' => one(Key::Down),
        '\x10' => one(Key::Up),
        '\x14' => one(Key::ToggleReasoning),
        '\x15' => one(Key::KillToStart),
        '\x17' => one(Key::KillWordBack),
        c if c.is_control() => Parsed::Key(None, c.len_utf8()),
        c => one(Key::Char(c)),
    }
}

/// A sequence starting with ESC: CSI (`ESC [`), SS3 (`ESC O`), Alt-key, or
/// a lone Escape at the end of the input.
fn escape(s: &str) -> Parsed {
    let b = s.as_bytes();
    match b.get(1) {
        None => Parsed::Key(Some(Key::Esc), 1),
        Some(b'[') => csi(s),
        Some(b'O') => match s[2..].chars().next() {
            None => Parsed::Incomplete,
            Some(c) if c.is_ascii() => Parsed::Key(final_key(c as u8, ""), 3),
            Some(c) => Parsed::Key(None, 2 + c.len_utf8()),
        },
        Some(b'\r') => Parsed::Key(Some(Key::Newline), 2),
        Some(b'\x7f') => Parsed::Key(Some(Key::KillWordBack), 2),
        Some(b'b') => Parsed::Key(Some(Key::WordLeft), 2),
        Some(b'f') => Parsed::Key(Some(Key::WordRight), 2),
        Some(b'\x1b') => Parsed::Key(Some(Key::Esc), 1),
        // Another Alt-key: dropped whole.
        Some(_) => {
            let len = s[1..].chars().next().map_or(0, char::len_utf8);
            Parsed::Key(None, 1 + len)
        }
    }
}

/// `ESC [ params final`: parameters are digits and `;`, the final byte
/// is in `@`..`~`.
fn csi(s: &str) -> Parsed {
    let b = s.as_bytes();
    let mut i = 2;
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b';') {
        i += 1;
    }
    let Some(&f) = b.get(i) else {
        return Parsed::Incomplete;
    };
    if !(0x40..=0x7e).contains(&f) {
        // Not a sequence we know: drop the ESC [ and go on.
        return Parsed::Key(None, 2);
    }
    Parsed::Key(final_key(f, &s[2..i]), i + 1)
}

fn final_key(f: u8, params: &str) -> Option<Key> {
    let ctrl = params.ends_with(";5") || params.ends_with(";3");
    Some(match (f, params) {
        (b'A', _) => Key::Up,
        (b'B', _) => Key::Down,
        (b'C', _) if ctrl => Key::WordRight,
        (b'D', _) if ctrl => Key::WordLeft,
        (b'C', _) => Key::Right,
        (b'D', _) => Key::Left,
        (b'H', _) | (b'~', "1" | "7") => Key::Home,
        (b'F', _) | (b'~', "4" | "8") => Key::End,
        (b'~', "3") => Key::Delete,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(parts: &[&str]) -> Vec<Key> {
        let mut p = KeyParser::default();
        parts.iter().flat_map(|t| p.feed(t)).collect()
    }

    #[test]
    fn text_and_control_keys() {
        assert_eq!(
            keys(&["hé\r\x03\x04\x7f"]),
            vec![
                Key::Char('h'),
                Key::Char('é'),
                Key::Enter,
                Key::Interrupt,
                Key::Eof,
                Key::Backspace
            ]
        );
    }

    #[test]
    fn sequences_split_across_reads_are_completed() {
        assert_eq!(keys(&["\x1b[", "A\x1b[3", "~"]), vec![Key::Up, Key::Delete]);
        assert_eq!(keys(&["\x1bO", "H"]), vec![Key::Home]);
        assert_eq!(keys(&["\x1b[1;5C"]), vec![Key::WordRight]);
    }

    #[test]
    fn a_bracketed_paste_is_one_key_with_its_newlines() {
        assert_eq!(
            keys(&["\x1b[200~line 1\r\nline", " 2\x1b[201~x"]),
            vec![Key::Paste("line 1\nline 2".into()), Key::Char('x')]
        );
    }

    #[test]
    fn alt_enter_is_a_newline_and_a_lone_escape_is_esc() {
        assert_eq!(keys(&["\x1b\r"]), vec![Key::Newline]);
        assert_eq!(keys(&["\x1b"]), vec![Key::Esc]);
        assert_eq!(keys(&["\x1bz"]), Vec::<Key>::new());
    }

    #[test]
    fn a_non_ascii_character_after_ss3_is_dropped_whole() {
        assert_eq!(keys(&["\x1bOé!"]), vec![Key::Char('!')]);
    }

    #[test]
    fn a_paste_that_never_ends_is_cut_not_kept_forever() {
        let mut p = KeyParser::default();
        let big = "x".repeat(MAX_PASTE + 10);
        let keys = p.feed(&format!("{PASTE_START}{big}"));
        assert!(matches!(&keys[0], Key::Paste(t) if t.len() == MAX_PASTE));
        assert_eq!(keys[1..], vec![Key::Char('x'); 10]);
        assert_eq!(p.feed("\x03"), vec![Key::Interrupt]);
    }
}
