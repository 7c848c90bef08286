//! Where one top-level section of a YAML document is, as text, so a write
//! replaces that text alone and every other byte (other sections, comments,
//! blank lines, their order) stays as it was.
//!
//! A block mapping at the top level puts each key at column 0; what
//! belongs to a key is the lines after it that are indented, or that are
//! items of a sequence written at column 0 (`- x`), up to the next key.
//! Comment and blank lines at column 0 after a section's last line belong
//! to what follows. A layout this reading does not cover (a flow mapping
//! at the top, several documents, a complex key, a key it cannot read) is
//! [`Located::Unsure`]: the caller refuses to write rather than guess. The
//! caller also parses the result again and compares every other section
//! (see `document.rs`), so a layout that fools this reading is caught there.

use std::ops::Range;

/// Where the section is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Located {
    /// The section's bytes: its key line to the end of its last line.
    Found(Range<usize>),
    /// No top-level key has that name; the document's content ends at this
    /// byte (before a `...` end marker, if one is there).
    Absent(usize),
    /// The layout is not a plain block mapping; why.
    Unsure(String),
}

/// What a line at the top level is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// Empty or blank.
    Blank,
    /// A comment starting at column 0.
    Comment,
    /// Indented: part of the key above.
    Indented,
    /// `- item` at column 0: part of the key above.
    Item,
    /// `---`.
    DocStart,
    /// `...`.
    DocEnd,
    /// A top-level key, unquoted.
    Key(String),
    /// Something else at column 0 (a flow collection, a directive, a
    /// complex key, a scalar document).
    Other,
}

fn classify(line: &str) -> Kind {
    let line = line.trim_end_matches(['\n', '\r']);
    let marker = |m: &str| {
        line.strip_prefix(m)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
    };
    if line.trim().is_empty() {
        Kind::Blank
    } else if line.starts_with('#') {
        Kind::Comment
    } else if line.starts_with([' ', '\t']) {
        Kind::Indented
    } else if marker("---") {
        Kind::DocStart
    } else if marker("...") {
        Kind::DocEnd
    } else if marker("-") {
        Kind::Item
    } else {
        key_of(line).map_or(Kind::Other, Kind::Key)
    }
}

/// The key a column-0 line starts with: a plain key up to `: ` (or `:` at
/// the end), or a quoted one.
fn key_of(line: &str) -> Option<String> {
    let ends_key = |rest: &str| rest.is_empty() || rest.starts_with([' ', '\t']);
    if let Some(rest) = line.strip_prefix('"') {
        let end = rest.find('"')?;
        let (key, after) = (&rest[..end], &rest[end + 1..]);
        // Escapes would need decoding: not a key this reading takes.
        if key.contains('\\') {
            return None;
        }
        let after = after.trim_start_matches([' ', '\t']).strip_prefix(':')?;
        return ends_key(after).then(|| key.to_owned());
    }
    if let Some(rest) = line.strip_prefix('\'') {
        let end = rest.find('\'')?;
        let (key, after) = (&rest[..end], &rest[end + 1..]);
        let after = after.trim_start_matches([' ', '\t']).strip_prefix(':')?;
        return ends_key(after).then(|| key.to_owned());
    }
    if line.starts_with(['{', '[', '?', '%', '&', '*', '!', '|', '>', '@', '`']) {
        return None;
    }
    let mut from = 0;
    while let Some(i) = line[from..].find(':') {
        let at = from + i;
        if ends_key(&line[at + 1..]) {
            let key = line[..at].trim_end();
            return (!key.is_empty() && !key.contains(" #")).then(|| key.to_owned());
        }
        from = at + 1;
    }
    None
}

/// The byte order mark some editors put at the start of a UTF-8 file.
const BOM: char = '\u{feff}';

/// Finds the top-level section `name` in `text`. A byte order mark at the
/// start is skipped (and so kept by [`replace`]): the first key follows it.
pub fn locate(text: &str, name: &str) -> Located {
    let bom = if text.starts_with(BOM) {
        BOM.len_utf8()
    } else {
        0
    };
    let mut offset = bom;
    let mut seen_content = false;
    let mut found: Option<Range<usize>> = None;
    let mut in_found = false;
    let mut end_of_content = text.len();
    for line in text[bom..].split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        match classify(line) {
            Kind::Blank | Kind::Comment => {}
            Kind::Indented | Kind::Item => {
                if !seen_content {
                    return Located::Unsure(
                        "the document does not start with a top-level key".to_owned(),
                    );
                }
                if in_found {
                    if let Some(r) = found.as_mut() {
                        r.end = offset;
                    }
                }
            }
            Kind::DocStart if !seen_content => {}
            Kind::DocStart => {
                return Located::Unsure("the file holds more than one YAML document".to_owned())
            }
            Kind::DocEnd => {
                end_of_content = start;
                if text[offset..].trim().is_empty() || text[offset..].lines().all(is_comment) {
                    break;
                }
                return Located::Unsure("the file holds more than one YAML document".to_owned());
            }
            Kind::Key(key) => {
                seen_content = true;
                in_found = key == name;
                if in_found {
                    if found.is_some() {
                        return Located::Unsure(format!("the key `{name}` appears twice"));
                    }
                    found = Some(start..offset);
                }
            }
            Kind::Other => {
                return Located::Unsure(format!(
                    "line {} is not a `key: value` line of a block mapping (a flow mapping, a \
                     complex key or a directive)",
                    text[..start].matches('\n').count() + 1
                ))
            }
        }
    }
    match found {
        Some(r) => Located::Found(r),
        None => Located::Absent(end_of_content),
    }
}

fn is_comment(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

/// `text` with `section` (a whole `name:` block, ending in a newline) in
/// place of the section `name`, or added after the last content; why not
/// when the layout is [`Located::Unsure`].
pub fn replace(text: &str, name: &str, section: &str) -> Result<String, String> {
    // Keep the file's line endings.
    let crlf = text
        .split_inclusive('\n')
        .next()
        .is_some_and(|l| l.ends_with("\r\n"));
    let section = if crlf {
        section.replace('\n', "\r\n")
    } else {
        section.to_owned()
    };
    let newline = if crlf { "\r\n" } else { "\n" };
    match locate(text, name) {
        Located::Found(r) => {
            let mut out = String::with_capacity(text.len() + section.len());
            out.push_str(&text[..r.start]);
            out.push_str(&section);
            out.push_str(&text[r.end..]);
            Ok(out)
        }
        Located::Absent(at) => {
            let mut out = String::with_capacity(text.len() + section.len() + 1);
            out.push_str(&text[..at]);
            if !out.trim_start_matches(BOM).is_empty() && !out.ends_with('\n') {
                out.push_str(newline);
            }
            out.push_str(&section);
            out.push_str(&text[at..]);
            Ok(out)
        }
        Located::Unsure(why) => Err(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME: &str = "agent-default-model";
    const NEW: &str = "agent-default-model:\n  provider: local\n  model: qwen3\n";

    #[test]
    fn a_section_is_its_key_line_and_what_is_indented_under_it() {
        let text = "# settings\nother:\n  a: 1 # keep\n\nagent-default-model:\n  provider: x\n# between\n  model: y\n\n# about the next\nlast:\n- 1\n- 2\n";
        let Located::Found(r) = locate(text, NAME) else {
            panic!("not found");
        };
        assert_eq!(
            &text[r.clone()],
            "agent-default-model:\n  provider: x\n# between\n  model: y\n"
        );
        let out = replace(text, NAME, NEW).unwrap();
        assert_eq!(
            out,
            format!(
                "# settings\nother:\n  a: 1 # keep\n\n{NEW}\n# about the next\nlast:\n- 1\n- 2\n"
            )
        );
    }

    #[test]
    fn an_absent_section_is_added_after_the_content() {
        assert_eq!(replace("", NAME, NEW).unwrap(), NEW);
        assert_eq!(
            replace("other: 1", NAME, NEW).unwrap(),
            format!("other: 1\n{NEW}")
        );
        assert_eq!(
            replace("# only a comment\n", NAME, NEW).unwrap(),
            format!("# only a comment\n{NEW}")
        );
        assert_eq!(
            replace("---\na: 1\n...\n", NAME, NEW).unwrap(),
            format!("---\na: 1\n{NEW}...\n")
        );
    }

    #[test]
    fn quoted_and_inline_sections_are_found() {
        let text = "\"agent-default-model\": {provider: a, model: b}\nz: 1\n";
        assert_eq!(replace(text, NAME, NEW).unwrap(), format!("{NEW}z: 1\n"));
        let text = "'agent-default-model':\n  model: b\n";
        assert_eq!(replace(text, NAME, NEW).unwrap(), NEW);
        // A key that only starts like it is another key.
        let text = "agent-default-model-x:\n  model: b\n";
        assert_eq!(replace(text, NAME, NEW).unwrap(), format!("{text}{NEW}"));
    }

    #[test]
    fn a_byte_order_mark_is_skipped_and_kept() {
        let text = "\u{feff}agent-default-model:\n  model: b\nz: 1\n";
        assert_eq!(locate(text, NAME), Located::Found(3..text.len() - 5));
        assert_eq!(
            replace(text, NAME, NEW).unwrap(),
            format!("\u{feff}{NEW}z: 1\n")
        );
        assert_eq!(
            replace("\u{feff}", NAME, NEW).unwrap(),
            format!("\u{feff}{NEW}")
        );
        assert_eq!(
            replace("\u{feff}a: 1", NAME, NEW).unwrap(),
            format!("\u{feff}a: 1\n{NEW}")
        );
    }

    #[test]
    fn crlf_files_keep_their_line_endings() {
        let text = "a: 1\r\nagent-default-model:\r\n  model: b\r\n";
        assert_eq!(
            replace(text, NAME, NEW).unwrap(),
            "a: 1\r\nagent-default-model:\r\n  provider: local\r\n  model: qwen3\r\n"
        );
    }

    #[test]
    fn layouts_it_does_not_read_are_refused() {
        for text in [
            "{agent-default-model: {model: b}}\n",
            "a: 1\n---\nb: 2\n",
            "? complex\n: value\n",
            "  indented: first\n",
            "%YAML 1.2\n---\na: 1\n",
        ] {
            assert!(matches!(locate(text, NAME), Located::Unsure(_)), "{text:?}");
            assert!(replace(text, NAME, NEW).is_err(), "{text:?}");
        }
    }
}
