//! The layers of the selection and how they stack: the row's config, the
//! settings section over it field by field, and this run's `--model` on
//! top ([`layer`]); and what `--model` says ([`Flag::parse`]).

use dsh_sdk::api::agent_default_model::{ModelSelection, SelectionSource};
use serde::Deserialize;

/// The row's config: the composition entry, which the settings section
/// layers over (both fields required, as the original's).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Entry {
    /// The provider route.
    pub provider: String,
    /// The model.
    pub model: String,
}

impl Entry {
    /// Why the entry cannot be used, if it cannot.
    pub fn problem(&self) -> Option<String> {
        if self.provider.trim().is_empty() || self.model.trim().is_empty() {
            return Some(
                "`provider` and `model` must name a route and a model (neither may be empty)"
                    .to_owned(),
            );
        }
        None
    }
}

/// The section `agent-default-model` of the settings document: each field
/// present overrides the entry's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Section {
    /// The provider route.
    pub provider: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The adapter's reasoning effort.
    pub reasoning_effort: Option<String>,
}

impl Section {
    /// Whether the section sets anything.
    fn sets_anything(&self) -> bool {
        self.provider.is_some() || self.model.is_some() || self.reasoning_effort.is_some()
    }

    /// The first field that is set but empty, if one is.
    pub fn empty_field(&self) -> Option<&'static str> {
        let empty = |v: &Option<String>| v.as_deref().is_some_and(|s| s.trim().is_empty());
        if empty(&self.provider) {
            Some("provider")
        } else if empty(&self.model) {
            Some("model")
        } else if empty(&self.reasoning_effort) {
            Some("reasoningEffort")
        } else {
            None
        }
    }
}

/// What `dsh-host --model` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flag {
    /// `--model provider/model`: that route and model.
    Route(String, String),
    /// `--model model`: that model, on the route of the layers below.
    Model(String),
}

impl Flag {
    /// Reads `--model`'s text: `provider/model` splits at the first `/`
    /// (a model id may hold more: `local/Qwen/Qwen3-8B` is the model
    /// `Qwen/Qwen3-8B` of the route `local`); text without a `/` is a
    /// model of the default route.
    pub fn parse(text: &str) -> Result<Flag, String> {
        let text = text.trim();
        let bad = || {
            format!(
                "--model takes `provider/model` (a route and one of its models) or `model` (on \
                 the default route), got {text:?}"
            )
        };
        if text.is_empty() {
            return Err(bad());
        }
        match text.split_once('/') {
            None => Ok(Flag::Model(text.to_owned())),
            Some((provider, model)) if !provider.is_empty() && !model.is_empty() => {
                Ok(Flag::Route(provider.to_owned(), model.to_owned()))
            }
            Some(_) => Err(bad()),
        }
    }
}

/// The selection: `entry`, then `section` field by field, then `flag`;
/// and its topmost layer. A flag naming a route drops the section's
/// reasoning effort (it belongs to the saved route, not to this one).
pub fn layer(
    entry: &Entry,
    section: Option<&Section>,
    flag: Option<&Flag>,
) -> (ModelSelection, SelectionSource) {
    let mut selection = ModelSelection::new(&entry.provider, &entry.model);
    let mut source = SelectionSource::Config;
    if let Some(s) = section.filter(|s| s.sets_anything()) {
        if let Some(p) = &s.provider {
            selection.provider = p.clone();
        }
        if let Some(m) = &s.model {
            selection.model = m.clone();
        }
        selection.reasoning_effort = s.reasoning_effort.clone();
        source = SelectionSource::Settings;
    }
    match flag {
        Some(Flag::Route(provider, model)) => {
            selection = ModelSelection::new(provider, model);
            source = SelectionSource::Flag;
        }
        Some(Flag::Model(model)) => {
            selection.model = model.clone();
            selection.reasoning_effort = None;
            source = SelectionSource::Flag;
        }
        None => {}
    }
    (selection, source)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            provider: "deepseek-official".into(),
            model: "deepseek-v4-flash".into(),
        }
    }

    #[test]
    fn the_flag_splits_at_the_first_slash_and_refuses_empty_parts() {
        assert_eq!(
            Flag::parse("local/qwen3"),
            Ok(Flag::Route("local".into(), "qwen3".into()))
        );
        assert_eq!(
            Flag::parse("local/Qwen/Qwen3-8B"),
            Ok(Flag::Route("local".into(), "Qwen/Qwen3-8B".into()))
        );
        assert_eq!(Flag::parse("qwen3"), Ok(Flag::Model("qwen3".into())));
        for bad in ["", " ", "/qwen3", "local/", "/"] {
            let e = Flag::parse(bad).unwrap_err();
            assert!(e.contains("provider/model"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_section_layers_over_the_entry_field_by_field_and_the_flag_over_both() {
        let (s, src) = layer(&entry(), None, None);
        assert_eq!(
            (s, src),
            (
                ModelSelection::new("deepseek-official", "deepseek-v4-flash"),
                SelectionSource::Config
            )
        );
        let only_model = Section {
            model: Some("deepseek-v4-pro".into()),
            reasoning_effort: Some("max".into()),
            ..Section::default()
        };
        let (s, src) = layer(&entry(), Some(&only_model), None);
        assert_eq!(src, SelectionSource::Settings);
        assert_eq!(
            (s.provider.as_str(), s.model.as_str()),
            ("deepseek-official", "deepseek-v4-pro")
        );
        assert_eq!(s.reasoning_effort.as_deref(), Some("max"));
        // An empty section is no layer.
        let (_, src) = layer(&entry(), Some(&Section::default()), None);
        assert_eq!(src, SelectionSource::Config);
        // `--model model` keeps the route below it.
        let (s, src) = layer(&entry(), Some(&only_model), Some(&Flag::Model("m2".into())));
        assert_eq!(src, SelectionSource::Flag);
        assert_eq!(s, ModelSelection::new("deepseek-official", "m2"));
        let flag = Flag::Route("local".into(), "qwen3".into());
        let (s, _) = layer(&entry(), Some(&only_model), Some(&flag));
        assert_eq!(s, ModelSelection::new("local", "qwen3"));
    }

    #[test]
    fn empty_fields_are_named() {
        let s = Section {
            model: Some(" ".into()),
            ..Section::default()
        };
        assert_eq!(s.empty_field(), Some("model"));
        assert!(entry().problem().is_none());
        let e = Entry {
            provider: String::new(),
            model: "m".into(),
        };
        assert!(e.problem().is_some());
    }
}
