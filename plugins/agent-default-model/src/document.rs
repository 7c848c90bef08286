//! The settings document (`$DSH_HOME/settings.yaml`): one YAML mapping
//! with a section per namespace, of which this plugin reads and writes the
//! section `agent-default-model` alone.
//!
//! Reading: the text must be a YAML mapping (or empty); the section, when
//! present, must have the section's shape. Either failure is
//! `INVALID_SETTINGS` naming the file and the line (the parser's own words,
//! which never quote a line: another section may hold a secret). Keys of
//! the section this version does not know (a newer original's) are
//! ignored and named in [`Document::unknown_keys`], for a warning. A
//! document is never printed whole, not even by `{:?}`.
//!
//! Writing ([`Document::with_selection`]): the section's text is replaced
//! (or added), and nothing else: the new text is parsed again and every
//! other section must be what it was, else the write is refused and the
//! file left alone.

use std::path::Path;

use dsh_sdk::api::agent_default_model::{ModelSelection, SETTINGS_SECTION};
use dsh_sdk::names::code;
use dsh_sdk::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_yaml_ng::{Mapping, Value};

use crate::choice::{Section, SECTION_KEYS};
use crate::section;

/// A settings document as read.
#[derive(Clone, PartialEq)]
pub struct Document {
    /// Its text (empty when the file does not exist).
    pub text: String,
    /// Its sections.
    sections: Mapping,
    /// The `agent-default-model` section, when the document has one.
    pub section: Option<Section>,
    /// Keys of that section this version does not know, ignored.
    pub unknown_keys: Vec<String>,
}

/// The text and the other sections' values stay out: another section may
/// hold a secret.
impl std::fmt::Debug for Document {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.sections.keys().map(key_name).collect();
        f.debug_struct("Document")
            .field("text", &format_args!("<{} bytes>", self.text.len()))
            .field("sections", &names)
            .field("section", &self.section)
            .field("unknown_keys", &self.unknown_keys)
            .finish()
    }
}

/// A mapping key, in words (a string as it is, another scalar as YAML).
fn key_name(key: &Value) -> String {
    match key {
        Value::String(s) => s.clone(),
        other => serde_yaml_ng::to_string(other)
            .map(|t| t.trim_end().to_owned())
            .unwrap_or_else(|_| "?".to_owned()),
    }
}

/// The document's shape as far as this plugin reads it: its own section,
/// typed (so an error names the field and the line), the others ignored.
#[derive(Deserialize)]
struct Typed {
    #[serde(rename = "agent-default-model", default)]
    section: Option<Section>,
}

/// `INVALID_SETTINGS` about `path`.
fn invalid(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::new(
        code::INVALID_SETTINGS,
        format!(
            "the settings file {} cannot be used: {why}. Fix or remove it; it was not changed",
            path.display()
        ),
    )
}

impl Document {
    /// Reads `text`, the content of `path`.
    pub fn parse(path: &Path, text: String) -> Result<Document> {
        let root: Value = serde_yaml_ng::from_str(&text).map_err(|e| invalid(path, e))?;
        let sections =
            match root {
                Value::Null => Mapping::new(),
                Value::Mapping(m) => m,
                _ => return Err(invalid(
                    path,
                    "it must be a map of sections (`agent-default-model:` at the start of a line)",
                )),
            };
        let section = if sections.is_empty() {
            None
        } else {
            let typed: Typed = serde_yaml_ng::from_str(&text).map_err(|e| invalid(path, e))?;
            typed.section
        };
        if let Some(field) = section.as_ref().and_then(Section::empty_field) {
            return Err(invalid(
                path,
                format!("`{SETTINGS_SECTION}.{field}` is empty (leave it out to use the default)"),
            ));
        }
        let unknown_keys = match sections.get(SETTINGS_SECTION) {
            Some(Value::Mapping(m)) => m
                .keys()
                .map(key_name)
                .filter(|k| !SECTION_KEYS.contains(&k.as_str()))
                .collect(),
            _ => Vec::new(),
        };
        Ok(Document {
            text,
            sections,
            section,
            unknown_keys,
        })
    }

    /// The document's text with the section replaced by `selection` (the
    /// whole section: `reasoningEffort` only when set), every other byte
    /// kept. Refused (`INVALID_SETTINGS`, nothing to write) when the
    /// layout is one this cannot edit without touching another section.
    pub fn with_selection(&self, path: &Path, selection: &ModelSelection) -> Result<String> {
        let mut one = Mapping::new();
        one.insert(
            Value::String(SETTINGS_SECTION.to_owned()),
            serde_yaml_ng::to_value(Stored::from(selection)).map_err(|e| invalid(path, e))?,
        );
        let block = serde_yaml_ng::to_string(&one).map_err(|e| invalid(path, e))?;
        let text = section::replace(&self.text, SETTINGS_SECTION, &block).map_err(|why| {
            invalid(
                path,
                format!("its layout cannot be edited safely ({why}); change `{SETTINGS_SECTION}` by hand"),
            )
        })?;
        let refused = || {
            invalid(
                path,
                format!(
                    "rewriting `{SETTINGS_SECTION}` would change the rest of the file (anchors or \
                     an unusual layout); change it by hand"
                ),
            )
        };
        let written = Document::parse(path, text.clone()).map_err(|_| refused())?;
        let same_others = written.sections.len()
            == self.sections.len() + usize::from(self.section_value().is_none())
            && self
                .sections
                .iter()
                .filter(|(k, _)| k.as_str() != Some(SETTINGS_SECTION))
                .all(|(k, v)| written.sections.get(k) == Some(v));
        let expected = Section {
            provider: Some(selection.provider.clone()),
            model: Some(selection.model.clone()),
            reasoning_effort: selection.reasoning_effort.clone(),
        };
        if !same_others || written.section.as_ref() != Some(&expected) {
            return Err(refused());
        }
        Ok(text)
    }

    fn section_value(&self) -> Option<&Value> {
        self.sections.get(SETTINGS_SECTION)
    }
}

/// The section as written: the original's field names and order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Stored<'a> {
    provider: &'a str,
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
}

impl<'a> From<&'a ModelSelection> for Stored<'a> {
    fn from(s: &'a ModelSelection) -> Stored<'a> {
        Stored {
            provider: &s.provider,
            model: &s.model,
            reasoning_effort: s.reasoning_effort.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path() -> &'static Path {
        Path::new("/h/settings.yaml")
    }

    fn doc(text: &str) -> Result<Document> {
        Document::parse(path(), text.to_owned())
    }

    #[test]
    fn the_section_is_read_and_others_are_ignored() {
        let d = doc("# mine\nother:\n  token: x\nagent-default-model:\n  provider: local\n  model: qwen3\n  reasoningEffort: high\n").unwrap();
        let s = d.section.unwrap();
        assert_eq!(s.provider.as_deref(), Some("local"));
        assert_eq!(s.model.as_deref(), Some("qwen3"));
        assert_eq!(s.reasoning_effort.as_deref(), Some("high"));
        assert_eq!(doc("").unwrap().section, None);
        assert_eq!(doc("# nothing yet\n").unwrap().section, None);
        assert_eq!(doc("agent-default-model:\n").unwrap().section, None);
    }

    #[test]
    fn a_malformed_document_names_the_file_and_the_line() {
        for (text, line) in [
            ("a: 1\nagent-default-model:\n  provider: [x\n", "line"),
            (
                "agent-default-model:\n  provider: [a]\n  model: m\n",
                "line 2",
            ),
            ("a: 1\na: 2\n", "duplicate"),
        ] {
            let e = doc(text).unwrap_err();
            assert_eq!(e.code, code::INVALID_SETTINGS);
            assert!(e.message.contains("/h/settings.yaml"), "{e}");
            assert!(e.message.contains(line), "{text:?}: {e}");
        }
        let e = doc("- a\n- b\n").unwrap_err();
        assert!(e.message.contains("map of sections"), "{e}");
        let e = doc("agent-default-model:\n  model: \"\"\n").unwrap_err();
        assert!(e.message.contains("agent-default-model.model"), "{e}");
    }

    #[test]
    fn unknown_keys_of_the_section_are_ignored_and_named() {
        let d = doc("agent-default-model:\n  model: m\n  modle: x\n  thinking: {a: 1}\n").unwrap();
        assert_eq!(d.section.unwrap().model.as_deref(), Some("m"));
        assert_eq!(d.unknown_keys, ["modle", "thinking"]);
        assert!(doc("other:\n  modle: x\n").unwrap().unknown_keys.is_empty());
    }

    #[test]
    fn debug_never_shows_the_text_or_other_sections() {
        let d = doc("tokens:\n  github: ghp_secret\nagent-default-model:\n  model: m\n").unwrap();
        let shown = format!("{d:?}");
        assert!(!shown.contains("ghp_secret"), "{shown}");
        assert!(
            shown.contains("tokens") && shown.contains("bytes"),
            "{shown}"
        );
    }

    #[test]
    fn a_byte_order_mark_is_read_and_kept_on_a_write() {
        let text = "\u{feff}# mine\nagent-default-model:\n  model: old\nui: 1\n";
        let d = doc(text).unwrap();
        assert_eq!(d.section.as_ref().unwrap().model.as_deref(), Some("old"));
        let out = d
            .with_selection(path(), &ModelSelection::new("local", "qwen3"))
            .unwrap();
        assert_eq!(
            out,
            "\u{feff}# mine\nagent-default-model:\n  provider: local\n  model: qwen3\nui: 1\n"
        );
    }

    #[test]
    fn a_write_replaces_the_section_alone() {
        let text = "# top comment\nui:\n  theme: dark # mine\n\nagent-default-model:\n  provider: old\n  model: m\n  reasoningEffort: max\n\n# tail\nkeys:\n- a\n";
        let d = doc(text).unwrap();
        let out = d
            .with_selection(path(), &ModelSelection::new("local", "qwen3"))
            .unwrap();
        assert_eq!(
            out,
            "# top comment\nui:\n  theme: dark # mine\n\nagent-default-model:\n  provider: local\n  model: qwen3\n\n# tail\nkeys:\n- a\n"
        );
        let mut with_effort = ModelSelection::new("p", "a: b");
        with_effort.reasoning_effort = Some("high".into());
        let out = doc("")
            .unwrap()
            .with_selection(path(), &with_effort)
            .unwrap();
        assert_eq!(
            out,
            "agent-default-model:\n  provider: p\n  model: 'a: b'\n  reasoningEffort: high\n"
        );
    }

    #[test]
    fn a_write_that_would_touch_another_section_is_refused() {
        // Another section aliases this one's anchor.
        let text = "agent-default-model: &d\n  provider: a\n  model: b\ncopy: *d\n";
        let e = doc(text)
            .unwrap()
            .with_selection(path(), &ModelSelection::new("p", "m"))
            .unwrap_err();
        assert_eq!(e.code, code::INVALID_SETTINGS);
        let e = doc("{a: 1}\n")
            .unwrap()
            .with_selection(path(), &ModelSelection::new("p", "m"))
            .unwrap_err();
        assert!(e.message.contains("by hand"), "{e}");
    }
}
