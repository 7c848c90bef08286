//! A body's bytes as text. UTF-8 is taken as it is; a UTF-16 byte order mark
//! is honoured; a page labelled (in its `content-type` or an early
//! `<meta charset>`) as one of the WHATWG labels of windows-1252 (which
//! include ISO-8859-1 and US-ASCII) is decoded as that; other invalid UTF-8
//! in a textual body is replaced with U+FFFD and said so. Bodies that are not
//! text are refused.

use dsh_sdk::prelude::*;

use crate::codes;

/// The text of a body, and a note when bytes had to be replaced.
pub struct Decoded {
    /// The text.
    pub text: String,
    /// What was done to bytes that were not text in the page's encoding.
    pub note: Option<String>,
}

/// windows-1252's characters for 0x80..=0x9F (the rest is Latin-1).
const CP1252_HIGH: [char; 32] = [
    '\u{20AC}', '\u{81}', '\u{201A}', '\u{192}', '\u{201E}', '\u{2026}', '\u{2020}', '\u{2021}',
    '\u{2C6}', '\u{2030}', '\u{160}', '\u{2039}', '\u{152}', '\u{8D}', '\u{17D}', '\u{8F}',
    '\u{90}', '\u{2018}', '\u{2019}', '\u{201C}', '\u{201D}', '\u{2022}', '\u{2013}', '\u{2014}',
    '\u{2DC}', '\u{2122}', '\u{161}', '\u{203A}', '\u{153}', '\u{9D}', '\u{17E}', '\u{178}',
];

/// The WHATWG Encoding Standard's labels of windows-1252.
fn is_windows_1252(label: &str) -> bool {
    matches!(
        label,
        "ansi_x3.4-1968"
            | "ascii"
            | "cp1252"
            | "cp819"
            | "csisolatin1"
            | "ibm819"
            | "iso-8859-1"
            | "iso-ir-100"
            | "iso8859-1"
            | "iso88591"
            | "iso_8859-1"
            | "iso_8859-1:1987"
            | "l1"
            | "latin1"
            | "us-ascii"
            | "windows-1252"
            | "x-cp1252"
    )
}

fn windows_1252(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| match b {
            0x80..=0x9f => CP1252_HIGH[usize::from(b - 0x80)],
            _ => char::from(b),
        })
        .collect()
}

/// The most characters of a `charset=` label kept (for the note that quotes
/// it): WHATWG labels are at most 19 long; a server can send 400 KB.
const MAX_LABEL: usize = 40;

/// The value of the first `charset=` in `text` (a header, or the start of a
/// page), lowercased; past [`MAX_LABEL`] characters cut, with `...`.
fn charset_in(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let at = lower.find("charset=")? + "charset=".len();
    let mut value: String = lower[at..]
        .trim_start_matches(['"', '\''])
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || "-_.:".contains(*c))
        .take(MAX_LABEL + 1)
        .collect();
    if value.len() > MAX_LABEL {
        value.truncate(MAX_LABEL);
        value.push_str("...");
    }
    (!value.is_empty()).then_some(value)
}

/// Whether media type `media` can be text.
fn is_textual(media: &str) -> bool {
    media.starts_with("text/")
        || media.contains("html")
        || media.contains("xml")
        || media.contains("json")
        || media.contains("javascript")
        || media.contains("ecmascript")
}

/// UTF-16 after its byte order mark; an odd last byte (a truncated unit)
/// becomes U+FFFD like any other invalid unit.
fn utf16(bytes: &[u8], little_endian: bool) -> String {
    let pairs = bytes.chunks_exact(2);
    let odd = !pairs.remainder().is_empty();
    let units: Vec<u16> = pairs
        .map(|p| {
            let pair = [p[0], p[1]];
            if little_endian {
                u16::from_le_bytes(pair)
            } else {
                u16::from_be_bytes(pair)
            }
        })
        .collect();
    let mut text = String::from_utf16_lossy(&units);
    if odd {
        text.push(char::REPLACEMENT_CHARACTER);
    }
    text
}

/// Decodes the body of `url`, served as `content_type`.
pub fn decode(url: &str, content_type: Option<&str>, body: Vec<u8>) -> Result<Decoded> {
    let plain = |text| Decoded { text, note: None };
    let body = match String::from_utf8(body) {
        Ok(text) => {
            let text = match text.strip_prefix('\u{feff}') {
                Some(rest) => rest.to_owned(),
                None => text,
            };
            return Ok(plain(text));
        }
        Err(e) => e.into_bytes(),
    };
    if let Some(rest) = body.strip_prefix(&[0xff, 0xfe]) {
        return Ok(plain(utf16(rest, true)));
    }
    if let Some(rest) = body.strip_prefix(&[0xfe, 0xff]) {
        return Ok(plain(utf16(rest, false)));
    }
    let media = content_type
        .and_then(|t| t.split(';').next())
        .map(str::trim)
        .filter(|m| !m.is_empty());
    // A body without a media type may be text.
    if let Some(media) = media.filter(|m| !is_textual(m)) {
        return Err(Error::new(
            codes::BINARY,
            format!("{url} is {media}, not text"),
        ));
    }
    if body.iter().take(8192).any(|&b| b == 0) {
        return Err(Error::new(
            codes::BINARY,
            format!("{url} is binary (it has NUL bytes), not text"),
        ));
    }
    let head = String::from_utf8_lossy(&body[..body.len().min(1024)]).into_owned();
    let label = content_type
        .and_then(charset_in)
        .or_else(|| charset_in(&head));
    if label.as_deref().is_some_and(is_windows_1252) {
        return Ok(plain(windows_1252(&body)));
    }
    let said = label.map_or_else(String::new, |l| format!(" (it says charset={l})"));
    Ok(Decoded {
        text: String::from_utf8_lossy(&body).into_owned(),
        note: Some(format!(
            "[the page is not valid UTF-8{said}; bytes that are not were replaced with U+FFFD]"
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(ctype: Option<&str>, body: &[u8]) -> (String, Option<String>) {
        let d = decode("u", ctype, body.to_vec()).unwrap_or_else(|e| panic!("{e}"));
        (d.text, d.note)
    }

    #[test]
    fn labels_and_byte_order_marks() {
        assert_eq!(text(None, "\u{feff}é".as_bytes()), ("é".into(), None));
        assert_eq!(
            text(Some("text/html; charset=\"ISO-8859-1\""), b"caf\xe9 \x80"),
            ("café €".into(), None)
        );
        assert_eq!(
            text(None, b"<meta charset=windows-1252><p>\x93q\x94"),
            (
                "<meta charset=windows-1252><p>\u{201C}q\u{201D}".into(),
                None
            )
        );
        assert_eq!(text(None, b"\xff\xfeh\0i\0"), ("hi".into(), None));
    }

    #[test]
    fn other_invalid_utf8_is_replaced_and_said() {
        let (t, note) = text(Some("text/plain; charset=koi8-r"), b"a\xffb");
        assert_eq!(t, "a\u{fffd}b");
        assert_eq!(
            note.as_deref(),
            Some("[the page is not valid UTF-8 (it says charset=koi8-r); bytes that are not were replaced with U+FFFD]")
        );
    }

    #[test]
    fn a_long_label_is_cut_in_the_note() {
        let ctype = format!("text/html; charset={}", "x".repeat(40_000));
        let (_, note) = text(Some(&ctype), b"a\xffb");
        assert_eq!(
            note,
            Some(format!("[the page is not valid UTF-8 (it says charset={}...); bytes that are not were replaced with U+FFFD]", "x".repeat(MAX_LABEL)))
        );
    }

    #[test]
    fn binary_is_refused() {
        let e = decode("u", Some("image/png"), vec![0x89, b'P', 0xff]).err();
        assert_eq!(e.map(|e| e.code), Some(codes::BINARY.to_owned()));
        let e = decode("u", None, vec![0xff, 0, 1]).err();
        assert_eq!(e.map(|e| e.code), Some(codes::BINARY.to_owned()));
    }
}
