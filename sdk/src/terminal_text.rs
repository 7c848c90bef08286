//! Text from a model, a tool or a stored session, made safe to print on a
//! terminal.
//!
//! Such text can carry what a terminal acts on instead of showing: OSC 52
//! writes the clipboard (`ESC ] 52 ; c ; <base64> BEL`), OSC 0 sets the
//! window title, CSI sequences move the cursor and erase what was printed,
//! a carriage return lets the rest of a line overwrite its start, and bidi
//! controls make a line read differently from its characters. One
//! implementation serves every place that prints such text:
//!
//! - [`sanitize`]: a whole text;
//! - [`Sanitizer`]: text that arrives in chunks (a streamed answer); a
//!   sequence split between two chunks is dropped whole, its second half
//!   included;
//! - [`escape_json`]: a JSON line shown to a person, with the characters a
//!   terminal would act on written as `\u` escapes (the same JSON value).
//!
//! What is dropped:
//! - escape sequences, whole: CSI (`ESC [` or U+009B, through its final
//!   byte); OSC (`ESC ]`, U+009D), DCS (`ESC P`, U+0090), SOS (`ESC X`,
//!   U+0098), PM (`ESC ^`, U+009E) and APC (`ESC _`, U+009F) strings,
//!   through BEL or ST (`ESC \` or U+009C); every other `ESC` sequence
//!   (intermediates, then a final byte);
//! - C0 controls except `\n` and `\t` (`\r` included, see above), DEL, and
//!   the C1 controls U+0080 to U+009F;
//! - bidi controls: the embeddings and overrides U+202A to U+202E, the
//!   isolates U+2066 to U+2069, and the marks U+200E, U+200F and U+061C
//!   (invisible too, and able to move neutral characters: a terminal line
//!   must read as its characters do).
//!
//! Besides its terminator, a sequence ends at CAN or SUB (as on a
//! terminal) and at a newline (which is kept): the text is shown line by
//! line, so a stray or cut introducer hides at most the rest of its line,
//! never the rest of an answer. What the dropped introducer started is
//! harmless: without the `ESC` (or the C1 control) nothing after it is
//! read as a command.
//!
//! Clean text, the usual case, is returned borrowed: one pass over its
//! bytes (a table lookup each), no allocation.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

const ESC: char = '\u{1b}';
const BEL: char = '\u{07}';
const CAN: char = '\u{18}';
const SUB: char = '\u{1a}';
/// 8-bit CSI.
const CSI: char = '\u{9b}';

/// Where a [`Sanitizer`] is between two chunks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
enum State {
    /// Text: shown, except the controls that are dropped.
    #[default]
    Text,
    /// After `ESC`.
    Escape,
    /// After `ESC` and an intermediate byte (`ESC ( B`).
    EscapeIntermediate,
    /// Inside a CSI sequence: parameters and intermediates, until the final
    /// byte.
    ControlSequence,
    /// Inside an OSC, DCS, SOS, PM or APC string, until BEL or ST.
    ControlString,
}

/// Sanitizes text that arrives in chunks: the state between two chunks is
/// kept, so an escape sequence split by a chunk boundary is dropped whole.
/// Serializable, so a front end can hand it over across a reload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sanitizer {
    state: State,
}

impl Sanitizer {
    /// A sanitizer at the start of a text.
    pub fn new() -> Sanitizer {
        Sanitizer::default()
    }

    /// The printable part of `chunk`, given what came before it; borrowed
    /// when `chunk` is clean and no sequence is open.
    pub fn push<'a>(&mut self, chunk: &'a str) -> Cow<'a, str> {
        let start = if self.state == State::Text {
            match first_to_drop(chunk) {
                None => return Cow::Borrowed(chunk),
                Some(i) => i,
            }
        } else {
            0
        };
        let (clean, rest) = chunk.split_at(start);
        let mut out = String::with_capacity(chunk.len());
        out.push_str(clean);
        for c in rest.chars() {
            self.step(c, &mut out);
        }
        Cow::Owned(out)
    }

    /// Ends the text: a sequence still open is forgotten (what it held was
    /// dropped), so the next text starts clean.
    pub fn end(&mut self) {
        self.state = State::Text;
    }

    /// Whether a sequence is open (its rest, in the next chunk, will be
    /// dropped too).
    pub fn in_sequence(&self) -> bool {
        self.state != State::Text
    }

    /// One character: appended to `out` or dropped, the state advanced.
    fn step(&mut self, c: char, out: &mut String) {
        // What ends or starts a sequence wherever it comes.
        let anywhere = match c {
            '\n' => {
                out.push('\n');
                Some(State::Text)
            }
            ESC => Some(State::Escape),
            CAN | SUB => Some(State::Text),
            CSI => Some(State::ControlSequence),
            // OSC, DCS, SOS, PM, APC.
            '\u{9d}' | '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => Some(State::ControlString),
            // ST and every other C1 control.
            '\u{80}'..='\u{9f}' => Some(State::Text),
            _ => None,
        };
        if let Some(next) = anywhere {
            self.state = next;
            return;
        }
        self.state = match (self.state, c) {
            (State::Text, c) => {
                if !is_dropped(c) {
                    out.push(c);
                }
                State::Text
            }
            (State::Escape, '[') => State::ControlSequence,
            (State::Escape, ']' | 'P' | 'X' | '^' | '_') => State::ControlString,
            (State::Escape | State::EscapeIntermediate, ' '..='/') => State::EscapeIntermediate,
            (State::Escape | State::EscapeIntermediate, '0'..='~') => State::Text,
            (State::ControlSequence, ' '..='?') => State::ControlSequence,
            (State::ControlSequence, '@'..='~') => State::Text,
            (State::ControlString, BEL) => State::Text,
            (State::ControlString, _) => State::ControlString,
            // Other ASCII controls and DEL inside a sequence: dropped, the
            // sequence goes on (a terminal executes them; we do not).
            (state, c) if c.is_ascii() => state,
            // Anything else breaks the sequence: it is text again.
            (_, c) => {
                if !is_dropped(c) {
                    out.push(c);
                }
                State::Text
            }
        };
    }
}

/// `text` without escape sequences, controls (but `\n` and `\t`) and bidi
/// controls; borrowed when there is nothing to drop. An unterminated
/// sequence is dropped to the end of its line.
pub fn sanitize(text: &str) -> Cow<'_, str> {
    Sanitizer::new().push(text)
}

/// A bidi control: an embedding or override (U+202A to U+202E), an
/// isolate (U+2066 to U+2069) or a directional mark (U+200E, U+200F,
/// U+061C).
pub fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
    )
}

/// Whether text outside a sequence drops `c`: controls other than `\n`
/// and `\t` (C0, DEL, C1) and bidi controls.
fn is_dropped(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || is_bidi_control(c)
}

/// Bytes that may begin a character to drop: the C0 controls but `\t` and
/// `\n`, DEL, and the UTF-8 lead bytes of U+0080..U+00BF (0xC2: the C1
/// controls), U+0600..U+063F (0xD8: U+061C) and U+2000..U+2FFF (0xE2: the
/// other bidi controls). Lead bytes are never continuation bytes, so a hit
/// is always at a character boundary.
const MAY_DROP: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b != b'\t' as usize && b != b'\n' as usize;
        b += 1;
    }
    table[0x7f] = true;
    table[0xc2] = true;
    table[0xd8] = true;
    table[0xe2] = true;
    table
};

/// The byte offset of the first character of `text` to drop, if any.
fn first_to_drop(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(off) = bytes
        .get(i..)?
        .iter()
        .position(|&b| MAY_DROP[usize::from(b)])
    {
        i += off;
        let c = text.get(i..).and_then(|t| t.chars().next())?;
        if is_dropped(c) {
            return Some(i);
        }
        i += c.len_utf8();
    }
    None
}

/// `json` (JSON text, one line of JSONL) with every control character
/// other than JSON whitespace (`\t`, `\n`, `\r`) and every bidi control
/// written as a `\u` escape. Valid JSON holds such characters only inside
/// strings, where the escape is the same value; serde_json already escapes
/// C0 controls, but not DEL, the C1 controls (U+009B is CSI to a terminal
/// that reads C1, U+009D OSC and U+009C its terminator) or bidi controls.
/// Borrowed when there is nothing to escape.
pub fn escape_json(json: &str) -> Cow<'_, str> {
    let to_escape =
        |c: char| (c.is_control() && !matches!(c, '\t' | '\n' | '\r')) || is_bidi_control(c);
    let Some(first) = json.char_indices().find(|&(_, c)| to_escape(c)) else {
        return Cow::Borrowed(json);
    };
    let (clean, rest) = json.split_at(first.0);
    let mut out = String::with_capacity(json.len() + 16);
    out.push_str(clean);
    for c in rest.chars() {
        if to_escape(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OSC 52: writes `hello` to the clipboard.
    const OSC52_BEL: &str = "\u{1b}]52;c;aGVsbG8=\u{07}";
    /// OSC 0: sets the window title, ended by ST.
    const OSC0_ST: &str = "\u{1b}]0;pwned\u{1b}\\";

    fn clean(text: &str) -> String {
        sanitize(text).into_owned()
    }

    #[test]
    fn clean_text_is_borrowed() {
        for text in [
            "",
            "plain ascii\n\twith a tab",
            "curly “quotes” — dashes… and ünïcödé, 中文, עברית, عربي, emoji 🦀",
            "\u{a0}nbsp and \u{2014} and \u{2026} and \u{2070}",
        ] {
            assert!(
                matches!(sanitize(text), Cow::Borrowed(t) if t == text),
                "{text:?}"
            );
        }
    }

    #[test]
    fn osc_strings_go_whole_with_bel_or_st() {
        assert_eq!(clean(&format!("a{OSC52_BEL}b")), "ab");
        assert_eq!(clean(&format!("a{OSC0_ST}b")), "ab");
        // 8-bit OSC and 8-bit ST.
        assert_eq!(clean("a\u{9d}52;c;aGVsbG8=\u{9c}b"), "ab");
        assert_eq!(clean("a\u{9d}0;t\u{07}b"), "ab");
        // CAN and SUB abort a string, as on a terminal.
        assert_eq!(clean("a\u{1b}]0;t\u{18}b\u{1b}]0;t\u{1a}c"), "abc");
    }

    #[test]
    fn dcs_sos_pm_and_apc_strings_go_whole() {
        for intro in ["\u{1b}P", "\u{1b}X", "\u{1b}^", "\u{1b}_"] {
            assert_eq!(clean(&format!("a{intro}1$r q\u{1b}\\b")), "ab", "{intro:?}");
        }
        for intro in ['\u{90}', '\u{98}', '\u{9e}', '\u{9f}'] {
            assert_eq!(clean(&format!("a{intro}payload\u{9c}b")), "ab", "{intro:?}");
        }
    }

    #[test]
    fn csi_sequences_go_through_their_final_byte() {
        assert_eq!(clean("a\u{1b}[31mred\u{1b}[0m b"), "ared b");
        assert_eq!(clean("\u{1b}[2J\u{1b}[?1049h\u{1b}[1;1Hx"), "x");
        assert_eq!(clean("a\u{1b}[38;2;1;2;3mb"), "ab");
        // 8-bit CSI.
        assert_eq!(clean("a\u{9b}2Jb"), "ab");
        assert_eq!(clean("a\u{9b}?25lb"), "ab");
    }

    #[test]
    fn other_escape_sequences_and_a_lone_esc_go() {
        // Charset designation (an intermediate), keypad mode, index, RIS.
        assert_eq!(clean("a\u{1b}(Bb\u{1b}=c\u{1b}Dd\u{1b}ce"), "abcde");
        assert_eq!(clean("a\u{1b}"), "a");
        assert_eq!(clean("a\u{1b}\u{1b}[31mb"), "ab");
        // A non-ASCII character breaks the sequence and is shown.
        assert_eq!(clean("a\u{1b}é"), "aé");
    }

    #[test]
    fn controls_go_but_newline_and_tab() {
        assert_eq!(
            clean("a\u{07}b\u{08}c\u{0}d\u{7f}e\r\nf\tg\u{0c}h"),
            "abcde\nf\tgh"
        );
        assert_eq!(clean("safe\rrm -rf ~"), "saferm -rf ~");
        // Every C1 control: dropped, and those that open a sequence
        // (CSI, and the strings) swallow what follows up to its end.
        for c in '\u{80}'..='\u{9f}' {
            let opens = matches!(
                c,
                '\u{9b}' | '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}'
            );
            let want = if opens { "a\nc" } else { "ab\nc" };
            assert_eq!(clean(&format!("a{c}b\nc")), want, "{c:?}");
        }
    }

    #[test]
    fn bidi_controls_go() {
        let all = "\u{202a}\u{202b}\u{202c}\u{202d}\u{202e}\u{2066}\u{2067}\u{2068}\u{2069}\u{200e}\u{200f}\u{61c}";
        assert_eq!(clean(&format!("a{all}b")), "ab");
        assert_eq!(
            clean("access_level != \"user\u{202e} \u{2066}// admin\u{2069} \u{2066}\""),
            "access_level != \"user // admin \""
        );
        // Letters of the same blocks stay.
        assert_eq!(
            clean("\u{2014}\u{2070}\u{600}ب"),
            "\u{2014}\u{2070}\u{600}ب"
        );
    }

    #[test]
    fn a_sequence_ends_at_a_newline_at_the_latest() {
        assert_eq!(clean("a\u{1b}]0;never ended\nnext line"), "a\nnext line");
        assert_eq!(clean("a\u{1b}[12\nb"), "a\nb");
        // Unterminated to the end: dropped to the end.
        assert_eq!(clean("visible\u{1b}]52;c;aGVs"), "visible");
    }

    #[test]
    fn a_sequence_split_across_chunks_is_dropped_whole() {
        let text = format!("one {OSC52_BEL} two {OSC0_ST} three \u{1b}[31mred\u{9b}0m \u{202e}x");
        let want = "one  two  three red x";
        assert_eq!(clean(&text), want);
        // Every split into two chunks, and one character a chunk.
        let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        for &cut in &bounds {
            let mut s = Sanitizer::new();
            let (a, b) = text.split_at(cut);
            let got = format!("{}{}", s.push(a), s.push(b));
            assert_eq!(got, want, "cut at {cut}");
        }
        let mut s = Sanitizer::new();
        let mut got = String::new();
        for c in text.chars() {
            got.push_str(&s.push(c.encode_utf8(&mut [0; 4])));
        }
        assert_eq!(got, want);
    }

    #[test]
    fn the_second_half_of_a_split_osc_is_not_shown() {
        let mut s = Sanitizer::new();
        assert_eq!(s.push("before \u{1b}]52;c;"), "before ");
        assert!(s.in_sequence());
        assert_eq!(s.push("aGVsbG8="), "");
        assert_eq!(s.push("\u{07}after"), "after");
        assert!(!s.in_sequence());
        // Ended mid-sequence: the next text starts clean.
        assert_eq!(s.push("\u{1b}]0;"), "");
        s.end();
        assert!(matches!(s.push("title"), Cow::Borrowed("title")));
    }

    #[test]
    fn the_state_survives_a_handover() {
        let mut s = Sanitizer::new();
        assert_eq!(s.push("x\u{1b}[3"), "x");
        let json = serde_json::to_string(&s).unwrap();
        let mut next: Sanitizer = serde_json::from_str(&json).unwrap();
        assert_eq!(next.push("1my"), "y");
    }

    #[test]
    fn json_keeps_its_value_and_loses_raw_c1_and_bidi() {
        let value = serde_json::json!({"text": "a\u{1b}]0;t\u{07}b\u{9b}2J\u{9d}52;c;x\u{9c}\u{202e}\u{7f}é"});
        let line = value.to_string();
        // serde_json escapes the C0 controls itself, not the rest.
        assert!(!line.contains('\u{1b}') && line.contains('\u{9b}') && line.contains('\u{202e}'));
        let shown = escape_json(&line);
        assert!(
            shown
                .chars()
                .all(|c| !c.is_control() && !is_bidi_control(c)),
            "{shown}"
        );
        assert!(
            shown.contains("\\u009b") && shown.contains("\\u202e"),
            "{shown}"
        );
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back, value);
        let plain = "{\"a\":\"b — ü\"}";
        assert!(matches!(escape_json(plain), Cow::Borrowed(t) if t == plain));
    }
}
