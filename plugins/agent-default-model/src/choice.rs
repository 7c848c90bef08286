//! The layers of the selection and how they stack: the row's config, the
//! settings section over it field by field, and this run's `--model` on
//! top ([`layer`]), each field's source kept apart, and whether the
//! settings section overrides a choice a patch or profile made
//! ([`Layered::overridden`]). `--model`'s text is read by
//! [`ModelChoice::parse`], the parser the command line uses too.

use dsh_sdk::api::agent_default_model::{ModelChoice, ModelSelection, SelectionSource};
use serde::Deserialize;

/// The route of the row's config as `profiles/bundles/base.toml` ships it:
/// a row config that differs was changed by a patch or a profile.
pub const SHIPPED_PROVIDER: &str = "deepseek-official";

/// The model of the row's config as `profiles/bundles/base.toml` ships it.
pub const SHIPPED_MODEL: &str = "deepseek-v4-flash";

/// The row's config: the composition entry, which the settings section
/// layers over (`provider` and `model` required, as the original's).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Entry {
    /// The provider route.
    pub provider: String,
    /// The model.
    pub model: String,
    /// Pins the row's choice: the settings section is not read at all (a
    /// profile whose route must not follow a user's saved `/model`, such
    /// as the offline demo). `--model` still applies; `/model` still
    /// saves.
    #[serde(default)]
    pub ignore_settings: bool,
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

    /// Its choice.
    fn selection(&self) -> ModelSelection {
        ModelSelection::new(&self.provider, &self.model)
    }

    /// A patch or a profile changed the route or model from the shipped
    /// one.
    fn changed_from_shipped(&self) -> bool {
        self.provider != SHIPPED_PROVIDER || self.model != SHIPPED_MODEL
    }
}

/// The section `agent-default-model` of the settings document: each field
/// present overrides the entry's. Keys it does not know (a newer
/// original's) are ignored (the document names them, for a warning).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Section {
    /// The provider route.
    pub provider: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The adapter's reasoning effort.
    pub reasoning_effort: Option<String>,
}

/// The keys of [`Section`], as written.
pub const SECTION_KEYS: [&str; 3] = ["provider", "model", "reasoningEffort"];

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

/// The selection and where each part of it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layered {
    /// The selection.
    pub selection: ModelSelection,
    /// The topmost layer that set something.
    pub source: SelectionSource,
    /// The layer that set `provider`.
    pub provider_source: SelectionSource,
    /// The layer that set `model`.
    pub model_source: SelectionSource,
    /// The entry's choice, when the section overrides it and a patch or
    /// profile had changed it from the shipped one (no `--model` on top).
    pub overridden: Option<ModelSelection>,
}

/// The selection: `entry`, then `section` field by field, then `flag`.
/// `--model model` keeps the route below it and drops the section's
/// reasoning effort (it was chosen for another model); `--model
/// provider/model` replaces all (the caller does not even read the
/// section then).
pub fn layer(entry: &Entry, section: Option<&Section>, flag: Option<&ModelChoice>) -> Layered {
    let mut l = Layered {
        selection: entry.selection(),
        source: SelectionSource::Config,
        provider_source: SelectionSource::Config,
        model_source: SelectionSource::Config,
        overridden: None,
    };
    if let Some(s) = section.filter(|s| s.sets_anything()) {
        if let Some(p) = &s.provider {
            l.selection.provider = p.clone();
            l.provider_source = SelectionSource::Settings;
        }
        if let Some(m) = &s.model {
            l.selection.model = m.clone();
            l.model_source = SelectionSource::Settings;
        }
        l.selection.reasoning_effort = s.reasoning_effort.clone();
        l.source = SelectionSource::Settings;
        if entry.changed_from_shipped() && !l.selection.same_route(&entry.selection()) {
            l.overridden = Some(entry.selection());
        }
    }
    match flag {
        Some(ModelChoice::Route { provider, model }) => {
            l.selection = ModelSelection::new(provider, model);
            l.provider_source = SelectionSource::Flag;
            l.model_source = SelectionSource::Flag;
        }
        Some(ModelChoice::Model(model)) => {
            l.selection.model = model.clone();
            l.selection.reasoning_effort = None;
            l.model_source = SelectionSource::Flag;
        }
        None => {}
    }
    if flag.is_some() {
        l.source = SelectionSource::Flag;
        l.overridden = None;
    }
    l
}

/// The effort a `/model` of `selection` (which names none) keeps: the
/// section's, when the section's route (its fields over the entry's) is
/// `selection`'s. Another route drops it: it was chosen for that model.
pub fn kept_effort(
    entry: &Entry,
    section: Option<&Section>,
    selection: &ModelSelection,
) -> Option<String> {
    let section = section?;
    let provider = section.provider.as_deref().unwrap_or(&entry.provider);
    let model = section.model.as_deref().unwrap_or(&entry.model);
    (provider == selection.provider && model == selection.model)
        .then(|| section.reasoning_effort.clone())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            provider: SHIPPED_PROVIDER.into(),
            model: SHIPPED_MODEL.into(),
            ignore_settings: false,
        }
    }

    fn patched() -> Entry {
        Entry {
            provider: "local".into(),
            model: "qwen3".into(),
            ignore_settings: false,
        }
    }

    #[test]
    fn the_shipped_default_is_the_base_bundles() {
        let base = include_str!("../../../profiles/bundles/base.toml");
        let row = base
            .split("[[row]]")
            .find(|r| r.contains("id = \"agent-default-model\""))
            .expect("the base bundle has the row");
        let config = format!(
            "config = {{ provider = \"{SHIPPED_PROVIDER}\", model = \"{SHIPPED_MODEL}\" }}"
        );
        assert!(row.contains(&config), "{row}");
    }

    #[test]
    fn the_section_layers_over_the_entry_field_by_field_and_the_flag_over_both() {
        let l = layer(&entry(), None, None);
        assert_eq!(
            (l.selection, l.source),
            (
                ModelSelection::new(SHIPPED_PROVIDER, SHIPPED_MODEL),
                SelectionSource::Config
            )
        );
        let only_model = Section {
            model: Some("deepseek-v4-pro".into()),
            reasoning_effort: Some("max".into()),
            ..Section::default()
        };
        let l = layer(&entry(), Some(&only_model), None);
        assert_eq!(l.source, SelectionSource::Settings);
        assert_eq!(
            (l.provider_source, l.model_source),
            (SelectionSource::Config, SelectionSource::Settings)
        );
        assert_eq!(
            (l.selection.provider.as_str(), l.selection.model.as_str()),
            (SHIPPED_PROVIDER, "deepseek-v4-pro")
        );
        assert_eq!(l.selection.reasoning_effort.as_deref(), Some("max"));
        // An empty section is no layer.
        let l = layer(&entry(), Some(&Section::default()), None);
        assert_eq!(l.source, SelectionSource::Config);
        // `--model model` keeps the route below it, and says so.
        let flag = ModelChoice::Model("m2".into());
        let l = layer(&entry(), Some(&only_model), Some(&flag));
        assert_eq!(l.source, SelectionSource::Flag);
        assert_eq!(
            (l.provider_source, l.model_source),
            (SelectionSource::Config, SelectionSource::Flag)
        );
        assert_eq!(l.selection, ModelSelection::new(SHIPPED_PROVIDER, "m2"));
        let flag = ModelChoice::Route {
            provider: "local".into(),
            model: "qwen3".into(),
        };
        let l = layer(&entry(), Some(&only_model), Some(&flag));
        assert_eq!(l.selection, ModelSelection::new("local", "qwen3"));
        assert_eq!(l.provider_source, SelectionSource::Flag);
    }

    #[test]
    fn a_section_over_a_patched_row_is_an_override_to_say() {
        let saved = Section {
            provider: Some(SHIPPED_PROVIDER.into()),
            model: Some(SHIPPED_MODEL.into()),
            ..Section::default()
        };
        let l = layer(&patched(), Some(&saved), None);
        assert_eq!(l.overridden, Some(ModelSelection::new("local", "qwen3")));
        // Over the shipped row it is the user's choice, nothing to say;
        // nor when it names the row's own route, nor under a --model.
        assert_eq!(layer(&entry(), Some(&saved), None).overridden, None);
        let same = Section {
            model: Some("qwen3".into()),
            reasoning_effort: Some("high".into()),
            ..Section::default()
        };
        assert_eq!(layer(&patched(), Some(&same), None).overridden, None);
        let flag = ModelChoice::Model("m".into());
        assert_eq!(
            layer(&patched(), Some(&saved), Some(&flag)).overridden,
            None
        );
    }

    #[test]
    fn the_saved_effort_stays_with_its_route_only() {
        let saved = Section {
            model: Some("deepseek-v4-pro".into()),
            reasoning_effort: Some("max".into()),
            ..Section::default()
        };
        let same = ModelSelection::new(SHIPPED_PROVIDER, "deepseek-v4-pro");
        assert_eq!(
            kept_effort(&entry(), Some(&saved), &same).as_deref(),
            Some("max")
        );
        let other = ModelSelection::new(SHIPPED_PROVIDER, SHIPPED_MODEL);
        assert_eq!(kept_effort(&entry(), Some(&saved), &other), None);
        assert_eq!(kept_effort(&entry(), None, &same), None);
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
            ..entry()
        };
        assert!(e.problem().is_some());
    }
}
